// The gpusel command's command line: the commands, their options, and the
// Arguments they parse into (arguments.cpp).
#pragma once

#include <gpusel/machine/local_rank.hpp>
#include <gpusel/machine/pick_criteria.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gpusel_tool {

// A mistake in the command line: exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Command;

// The command line, parsed.
struct Arguments {
  const Command* command = nullptr;
  bool json = false;
  bool done = false;  // --help or --version: the rest of the line is not read
  // pick's options as given; settle_counts turns the counts into criteria.
  gpusel::PickCriteria criteria;
  std::optional<int> count;
  std::optional<int> at_least;
  std::optional<int> at_most;
  bool all = false;
  bool print_uuids = false;
  bool format_given = false;
  bool links = false;  // list --links
  // How long NVML may take to answer (GPUSEL_NVML_TIMEOUT; Note [A hanging NVML]); 0: no limit.
  std::chrono::milliseconds nvml_timeout{0};
  // run's
  std::vector<std::string> command_line;  // the command and its arguments
  bool wait = false;
  std::optional<std::chrono::milliseconds> wait_at_most;  // nullopt with `wait`: forever
  bool lease = true;
  bool local_rank = false;
  // --round-robin: with more ranks than GPUs, rank r takes GPU r % count, shared (Placement::round_robin).
  gpusel::Placement placement = gpusel::Placement::rank_or_cpu;
  std::vector<std::string> pick_options;  // pick options given, as spelled: --local-rank takes none
};

// Which commands an option belongs to.
using CommandSet = unsigned;
constexpr CommandSet kList = 1u << 0, kExplain = 1u << 1, kPick = 1u << 2, kHelp = 1u << 3, kVersion = 1u << 4,
                     kRun = 1u << 5;
constexpr CommandSet kEveryCommand = kList | kExplain | kPick | kHelp | kVersion | kRun;
constexpr CommandSet kChoosing = kPick | kRun;  // the pick options

struct Command {
  std::string_view name;
  CommandSet bit;
  int (*run)(const Arguments&);
};

// `gpusel <command> [options]`, the options before or after the command.
Arguments parse_arguments(const std::vector<std::string>& words);

// A duration as --wait takes it: 30s, 5m, 1h, or a bare number of seconds.
std::chrono::milliseconds parse_duration(std::string_view option, const std::string& text);

}  // namespace gpusel_tool
