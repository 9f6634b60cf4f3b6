// The gpusel command: the machine's GPUs, this process's view of them, and
// free GPUs picked for CUDA_VISIBLE_DEVICES. It reads NVML only and never
// starts CUDA, so it is safe to run beside jobs and before them:
//   gpusel run -n 2 --min-free 8GiB -- ./train      (picks, leases, runs, returns ./train's status)
// `gpusel help` says everything. The program is a parser (kOptions, kCommands),
// one function per command, and exit statuses that mean what kUsage says.
#include <gpusel/detail/machine/wait_line.hpp>
#include <gpusel/lease.hpp>
#include <gpusel/local_rank.hpp>
#include <gpusel/memory_size.hpp>
#include <gpusel/physical_order.hpp>
#include <gpusel/select.hpp>
#include <gpusel/version.hpp>
#include <gpusel/visibility.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gpusel/text.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "json_writer.hpp"

namespace {

using gpusel_tool::JsonWriter;

// Exit statuses, documented in kUsage and the README.
constexpr int kExitOk = 0;
constexpr int kExitNothingFits = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDriver = 3;
constexpr int kExitNvmlFailed = 4;
constexpr int kExitInternalError = 5;
constexpr int kExitWriteFailed = 6;
// run's own failures, as env(1) and timeout(1) give them, so they cannot be taken for the command's.
constexpr int kExitRunFailed = 125;
constexpr int kExitCannotRun = 126;
constexpr int kExitNotFound = 127;

// What an Error says, for a line the command begins with "gpusel: " itself: without the
// library's own "gpusel: " where a message begins with it (the leases' do), so that no
// line reads "gpusel: gpusel: ...".
// A message of several lines (pick's verdicts, one GPU a line) escaped line by line
// (Note [Hostile text]): control bytes within a line are shown, the line breaks stay.
std::string escape_lines(std::string_view text) {
  std::string escaped;
  while (true) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    escaped += gpusel::escape_for_terminal(text.substr(0, end));
    if (end == text.size()) return escaped;
    escaped += '\n';
    text.remove_prefix(end + 1);
  }
}

std::string error_text(const gpusel::Error& error) {
  std::string_view text = error.what();
  constexpr std::string_view kPrefix = "gpusel: ";
  if (text.substr(0, kPrefix.size()) == kPrefix) text.remove_prefix(kPrefix.size());
  return std::string(text);
}

constexpr const char* kUsage = R"(usage: gpusel <command> [options]

Commands (none of them starts CUDA or creates a context on any GPU):
  list      the machine's GPUs: this process's cuda:N, CUDA's physical index,
            nvidia-smi's number, name, UUID, PCI bus id, memory used/total,
            utilization, NUMA node and CPUs (where NVML tells them) and compute
            processes; a GPU in MIG mode, its MIG instances under it
  explain   how CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER map cuda:N to the
            physical GPUs here, and what was ignored and why
  run       choose free GPUs, lease them and run a command on exactly those:
              gpusel run -n 2 --min-free 8GiB -- ./train --epochs 10
            the command's CUDA_VISIBLE_DEVICES names the GPUs chosen, in order;
            the lease lasts until the last process of the command ends; gpusel
            waits for it, passes on the signals sent to it, and exits with its
            status, or dies of the signal that killed it
  pick      choose free GPUs and print them, for scripts (fails, printing
            nothing, when too few fit; takes no lease)
  help      this text (also -h, --help after any command)
  version   gpusel's version (also --version)

Options:
  --json                 machine-readable output (list, explain, pick): always
                         one JSON document, valid UTF-8, errors included
  --links                list: also how each pair of GPUs is joined (NVLink, PCIe
                         switch, ...): N(N-1)/2 pairs, so read only when asked

Options of pick and run (by default: 1 GPU, no compute process on it, this
user's own included, no other job's lease, most free memory first, among the GPUs
CUDA_VISIBLE_DEVICES already shows). A GPU in MIG mode counts as its MIG
instances, each one GPU for -n, leased apart; it is never picked whole:
  -n, --count N          exactly N GPUs
  --at-least N           at least N GPUs, N >= 1 (fewer is a failure) ...
  --at-most M            ... and at most M of them
  --all                  every GPU that fits (at least 1, or --at-least N)
  --min-free SIZE        free memory each needs: 8GiB, 512MiB, 10GB, 1.5GiB
  --max-util PERCENT     highest utilization allowed, 0-100
  --share-own            GPUs where only this user's own compute processes run may
                         be picked (by default any compute process makes a GPU busy)
  --allow-other-users    GPUs where another user's compute process runs may be picked
  --exclude LIST         never these, comma-separated, named as pick prints them:
                         CUDA's physical index (2), a UUID or prefix (GPU-8d2a,
                         MIG-4a5b); nvidia-smi's numbers are written smi:2. A name
                         for no GPU, or one CUDA_VISIBLE_DEVICES hides, is an error
  --order free|util|index  most free memory, least utilized, or CUDA's order first
  --connected            prefer GPUs joined by NVLink, else under one PCIe switch,
                         else one host bridge, else one NUMA node; when no such set
                         fits, the best-connected set that does, said on stderr
  --format index|uuid    pick: print CUDA's physical indices (default) or UUIDs;
                         UUIDs are exact even where CUDA's order is a guess.
                         A MIG instance is always its MIG- UUID (no index names it).
                         run: give the command UUIDs (default) or indices, with
                         CUDA_DEVICE_ORDER=PCI_BUS_ID set so that they are exact
  --whole-machine        choose among all GPUs, whatever CUDA_VISIBLE_DEVICES says

Options of run only:
  --wait[=DURATION]      until enough GPUs fit: forever, or at most DURATION
                         (30s, 5m, 1h; a bare number is seconds); waiting
                         jobs are served in arrival order; what no wait can
                         fix (an unusable lease directory) fails at once
  --no-lease             take no lease (other jobs may then get the same GPUs)
  --local-rank           this process's GPU as a rank of a job (torchrun, mpirun,
                         srun): local rank i gets the i-th GPU CUDA_VISIBLE_DEVICES
                         shows, leased; a GPU another job leases or a compute
                         process keeps busy is an error, not a reason to take
                         another. Without a launcher variable: local rank 0 of 1,
                         said on stderr. Takes no pick option but --format,
                         --share-own and --allow-other-users.
  -- COMMAND [ARGS...]   the command (the first word that is no option starts it too)

An option's value follows it (--count 2) or is attached (--count=2); an option
that takes no value takes none (--json=false is a usage error).

Environment: CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, GPUSEL_NVML_LIBRARY (the
NVML library to load; default libnvidia-ml.so.1), GPUSEL_NVML_TIMEOUT (how long
NVML may take to answer: 30s by default, as --wait takes it; 0: no limit) and
GPUSEL_LEASE_DIR (where leases are kept; default /tmp/gpusel-leases, shared by
every user once root makes it: install -d -m 1777 -o root /tmp/gpusel-leases).

Exit status:
  0  success
  1  pick: fewer GPUs fit than asked for (each GPU and why, on stderr);
     explain: CUDA would fail with these variables (a GPU named twice, an
     invalid CUDA_DEVICE_ORDER, every GPU hidden)
  2  usage error: unknown command or option, malformed value, extra argument
  3  no NVIDIA driver: NVML could not be loaded (explain still prints what it can)
  4  NVML failed: it was loaded, but could not start or read the GPUs, or did not answer in time
  5  internal error: a bug in gpusel (the message says what failed; please report it)
  6  the output could not be written (stdout closed, full or broken)
run exits with the command's status, or with its own:
  125  nothing fits (each GPU and why, on stderr), or gpusel failed (NVML too): the command was not started
  126  the command cannot be run
  127  the command is not found
)";

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
  std::vector<std::string> pick_options;  // pick options given, as spelled: --local-rank takes none
};

// --- the commands -----------------------------------------------------------------------

int run_list(const Arguments& arguments);
int run_explain(const Arguments& arguments);
int run_pick(const Arguments& arguments);
int run_run(const Arguments& arguments);
int run_help(const Arguments& arguments);
int run_version(const Arguments& arguments);

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

constexpr Command kCommands[] = {
    {"list", kList, run_list}, {"explain", kExplain, run_explain}, {"pick", kPick, run_pick},
    {"run", kRun, run_run},    {"help", kHelp, run_help},          {"version", kVersion, run_version},
};

const Command& command_named(std::string_view name) {
  for (const Command& command : kCommands)
    if (command.name == name) return command;
  throw UsageError("unknown command \"" + std::string(name) + "\" (commands: list, explain, pick, run, help, version)");
}

// "pick", "list, explain and pick".
std::string command_names(CommandSet commands) {
  std::vector<std::string_view> names;
  for (const Command& command : kCommands)
    if ((commands & command.bit) != 0) names.push_back(command.name);
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i)
    text += std::string(i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(names[i]);
  return text;
}

// --- the options ------------------------------------------------------------------------

// A whole number of at least `smallest` (and at most INT_MAX), as `option` expects it:
// decimal digits only (std::from_chars into an unsigned type takes no sign or blank).
int parse_count(std::string_view option, const std::string& text, int smallest) {
  unsigned long long number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  const bool digits_only = !text.empty() && end == text.data() + text.size();
  if (!digits_only || (error == std::errc() && number < static_cast<unsigned long long>(smallest)))
    throw UsageError(std::string(option) + " expects a whole number of at least " + std::to_string(smallest) +
                     ", got \"" + text + "\"");
  if (error != std::errc() || number > static_cast<unsigned long long>(INT_MAX))
    throw UsageError(std::string(option) + " expects a whole number of at most " + std::to_string(INT_MAX) +
                     ", got \"" + text + "\"");
  return static_cast<int>(number);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

// A duration as --wait takes it: 30s, 5m, 1h, or a bare number of seconds.
std::chrono::milliseconds parse_duration(std::string_view option, const std::string& text) {
  std::string digits = text;
  long long unit = 1000;
  if (!digits.empty() && (digits.back() == 's' || digits.back() == 'm' || digits.back() == 'h')) {
    unit = digits.back() == 's' ? 1000 : digits.back() == 'm' ? 60000 : 3600000;
    digits.pop_back();
  }
  unsigned long long number = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  if (digits.empty() || end != digits.data() + digits.size() || error != std::errc() || number > 1000000000ULL)
    throw UsageError(std::string(option) + " expects a duration such as 30s, 5m or 1h, got \"" + text + "\"");
  return std::chrono::milliseconds(static_cast<long long>(number) * unit);
}

enum class Takes { nothing, value, optional_value };  // optional_value: only attached, --wait=30s

struct Option {
  std::string_view name;   // "--count"
  std::string_view alias;  // "-n"; "" when none
  Takes takes;
  CommandSet commands;
  // Applies the option; `spelled` is how it was written ("-n" or "--count"), for messages.
  void (*apply)(Arguments& arguments, std::string_view spelled, const std::string& value);
};

const Option kOptions[] = {
    {"--help", "-h", Takes::nothing, kEveryCommand,
     [](Arguments& a, std::string_view, const std::string&) {
       a.command = &command_named("help");
       a.done = true;
     }},
    {"--version", "", Takes::nothing, kEveryCommand,
     [](Arguments& a, std::string_view, const std::string&) {
       a.command = &command_named("version");
       a.done = true;
     }},
    {"--json", "", Takes::nothing, kList | kExplain | kPick,
     [](Arguments& a, std::string_view, const std::string&) { a.json = true; }},
    {"--count", "-n", Takes::value, kChoosing,
     [](Arguments& a, std::string_view spelled, const std::string& value) {
       a.count = parse_count(spelled, value, 1);
     }},
    {"--at-least", "", Takes::value, kChoosing,
     [](Arguments& a, std::string_view spelled, const std::string& value) {
       a.at_least = parse_count(spelled, value, 1);  // 0 would let pick print an empty list
     }},
    {"--at-most", "", Takes::value, kChoosing,
     [](Arguments& a, std::string_view spelled, const std::string& value) {
       a.at_most = parse_count(spelled, value, 1);
     }},
    {"--all", "", Takes::nothing, kChoosing, [](Arguments& a, std::string_view, const std::string&) { a.all = true; }},
    {"--min-free", "", Takes::value, kChoosing,
     [](Arguments& a, std::string_view spelled, const std::string& value) {
       try {
         a.criteria.min_free_memory = value;
       } catch (const gpusel::Error& error) {
         throw UsageError(std::string(spelled) + ": " + error.what());
       }
     }},
    {"--max-util", "", Takes::value, kChoosing,
     [](Arguments& a, std::string_view spelled, const std::string& value) {
       const int percent = parse_count(spelled, value, 0);
       if (percent > 100)
         throw UsageError(std::string(spelled) + " expects a percentage from 0 to 100, got \"" + value + "\"");
       a.criteria.max_utilization = percent;
     }},
    {"--allow-other-users", "", Takes::nothing, kChoosing,
     [](Arguments& a, std::string_view, const std::string&) { a.criteria.allow_other_users = true; }},
    {"--share-own", "", Takes::nothing, kChoosing,
     [](Arguments& a, std::string_view, const std::string&) { a.criteria.share_own = true; }},
    {"--exclude", "", Takes::value, kChoosing,
     [](Arguments& a, std::string_view, const std::string& value) {
       for (std::string& name : split_list(value)) a.criteria.exclude.push_back(std::move(name));
     }},
    {"--order", "", Takes::value, kChoosing,
     [](Arguments& a, std::string_view spelled, const std::string& value) {
       if (value == "free")
         a.criteria.order = gpusel::PickOrder::most_free_memory;
       else if (value == "util")
         a.criteria.order = gpusel::PickOrder::least_utilized;
       else if (value == "index")
         a.criteria.order = gpusel::PickOrder::index;
       else
         throw UsageError(std::string(spelled) + " expects free, util or index, got \"" + value + "\"");
     }},
    {"--format", "", Takes::value, kChoosing,
     [](Arguments& a, std::string_view spelled, const std::string& value) {
       if (value != "index" && value != "uuid")
         throw UsageError(std::string(spelled) + " expects index or uuid, got \"" + value + "\"");
       a.print_uuids = value == "uuid";
       a.format_given = true;
     }},
    {"--links", "", Takes::nothing, kList, [](Arguments& a, std::string_view, const std::string&) { a.links = true; }},
    {"--connected", "", Takes::nothing, kChoosing,
     [](Arguments& a, std::string_view, const std::string&) {
       a.criteria.placement = gpusel::PickPlacement::connected;
     }},
    {"--whole-machine", "", Takes::nothing, kChoosing,
     [](Arguments& a, std::string_view, const std::string&) { a.criteria.only_visible = false; }},
    {"--wait", "", Takes::optional_value, kRun,
     [](Arguments& a, std::string_view spelled, const std::string& value) {
       a.wait = true;
       if (!value.empty()) a.wait_at_most = parse_duration(spelled, value);
     }},
    {"--no-lease", "", Takes::nothing, kRun,
     [](Arguments& a, std::string_view, const std::string&) { a.lease = false; }},
    {"--local-rank", "", Takes::nothing, kRun,
     [](Arguments& a, std::string_view, const std::string&) { a.local_rank = true; }},
};

const Option* option_named(std::string_view name) {
  for (const Option& option : kOptions)
    if (option.name == name || (!option.alias.empty() && option.alias == name)) return &option;
  return nullptr;
}

// pick's counts as criteria: -n N is exactly N; --at-least N alone is exactly N too.
void settle_counts(Arguments& arguments) {
  gpusel::PickCriteria& criteria = arguments.criteria;
  if (arguments.count && (arguments.all || arguments.at_least || arguments.at_most))
    throw UsageError("-n cannot be combined with --at-least, --at-most or --all");
  if (arguments.all && arguments.at_most) throw UsageError("--all cannot be combined with --at-most");
  if (arguments.count) {
    criteria.at_least = *arguments.count;
    criteria.at_most = *arguments.count;
  }
  if (arguments.at_least) criteria.at_least = *arguments.at_least;
  if (arguments.at_most)
    criteria.at_most = *arguments.at_most;
  else if (arguments.at_least && !arguments.all)
    criteria.at_most = *arguments.at_least;
  if (arguments.all) criteria.at_most = gpusel::PickCriteria::all;
  if (criteria.at_most && *criteria.at_most < criteria.at_least)
    throw UsageError("--at-most " + std::to_string(*criteria.at_most) + " is below --at-least " +
                     std::to_string(criteria.at_least));
}

// `gpusel <command> [options]`, the options before or after the command.
Arguments parse_arguments(const std::vector<std::string>& words) {
  Arguments arguments;
  std::vector<std::pair<const Option*, std::string>> given;  // each option as spelled, checked against the command
  for (std::size_t i = 0; i < words.size() && !arguments.done; ++i) {
    const std::string& word = words[i];
    if (arguments.command != nullptr && arguments.command->bit == kRun &&
        (word == "--" || word.size() < 2 || word[0] != '-')) {
      arguments.command_line.assign(words.begin() + static_cast<std::ptrdiff_t>(i + (word == "--" ? 1 : 0)),
                                    words.end());
      break;
    }
    if (word.size() < 2 || word[0] != '-') {
      if (arguments.command != nullptr)
        throw UsageError("unexpected argument \"" + word + "\": " + std::string(arguments.command->name) +
                         " takes no arguments, and gpusel runs one command at a time");
      arguments.command = &command_named(word);
      continue;
    }
    const std::size_t equals = word.rfind("--", 0) == 0 ? word.find('=') : std::string::npos;
    const std::string name = word.substr(0, equals);
    const Option* option = option_named(name);
    if (option == nullptr)
      throw UsageError("unknown option \"" + name + "\"" +
                       (arguments.command == nullptr ? " (give a command first: list, explain, pick)" : ""));
    std::string value;
    if (option->takes == Takes::nothing) {
      if (equals != std::string::npos)
        throw UsageError(name + " takes no value, got \"" + word + "\" (give " + name + " alone to turn it on)");
    } else if (option->takes == Takes::optional_value) {
      if (equals != std::string::npos) {
        value = word.substr(equals + 1);
        if (value.empty()) throw UsageError(name + "= expects a value (or give " + name + " alone)");
      }
    } else if (equals != std::string::npos) {
      value = word.substr(equals + 1);
    } else if (i + 1 < words.size()) {
      value = words[++i];
    } else {
      throw UsageError(name + " expects a value");
    }
    option->apply(arguments, name, value);
    given.emplace_back(option, name);
    // What a rank may still say of its one GPU: how to name it, and whose processes may share it.
    if ((option->commands & kPick) != 0 && option->name != "--format" && option->name != "--help" &&
        option->name != "--share-own" && option->name != "--allow-other-users")
      arguments.pick_options.push_back(name);
  }
  if (arguments.command == nullptr)
    throw UsageError("no command given (commands: list, explain, pick, run, help, version)");
  if (arguments.done) return arguments;
  for (const auto& [option, spelled] : given)
    if ((option->commands & arguments.command->bit) == 0)
      throw UsageError(spelled + " is an option of " + command_names(option->commands) + " only, not of " +
                       std::string(arguments.command->name));
  settle_counts(arguments);
  if (arguments.command->bit == kRun) {
    if (arguments.command_line.empty())
      throw UsageError("run expects a command to run: gpusel run [options] -- COMMAND [ARGS...]");
    if (arguments.local_rank && !arguments.pick_options.empty())
      throw UsageError("--local-rank takes the rank's own GPU, so " + arguments.pick_options.front() +
                       " cannot apply (only --format, --share-own, --allow-other-users, --wait and --no-lease go "
                       "with it)");
    if (!arguments.format_given) arguments.print_uuids = true;  // run gives UUIDs unless asked
  }
  return arguments;
}

// --- output -----------------------------------------------------------------------------

// `text` left-aligned in a column `width` wide (std::setw, so no padder of the tool's own).
struct Column {
  std::string_view text;
  std::size_t width;
  friend std::ostream& operator<<(std::ostream& out, const Column& column) {
    return out << std::left << std::setw(static_cast<int>(column.width)) << column.text;
  }
};

std::string describe_processes(const gpusel::Gpu& gpu) {
  if (!gpu.processes) return "unknown";
  if (gpu.processes->empty()) return "none";
  std::string text;
  for (const gpusel::GpuProcess& process : *gpu.processes)
    text += (text.empty() ? "" : "; ") + gpusel::describe(process);
  return text;
}

std::string percent(const std::optional<int>& value) { return value ? std::to_string(*value) + "%" : "?"; }

std::string memory(const gpusel::Gpu& gpu) {
  const auto size = [](const std::optional<std::uint64_t>& bytes) {
    return bytes ? gpusel::format_memory_size(*bytes) : std::string("?");
  };
  return size(gpu.memory_used_bytes) + " / " + size(gpu.memory_total_bytes);
}

template <class Value>
void optional_value(JsonWriter& json, const char* key, const std::optional<Value>& value) {
  json.key(key);
  if (value)
    json.value(*value);
  else
    json.null();
}

// A GpuLink in JSON: the enumerator's name.
const char* link_name(gpusel::GpuLink link) {
  switch (link) {
    case gpusel::GpuLink::nvlink:
      return "nvlink";
    case gpusel::GpuLink::pcie_switch:
      return "pcie_switch";
    case gpusel::GpuLink::host_bridge:
      return "host_bridge";
    case gpusel::GpuLink::numa_node:
      return "numa_node";
    case gpusel::GpuLink::system:
      return "system";
    case gpusel::GpuLink::unknown:
      break;
  }
  return "unknown";
}

void process_array(JsonWriter& json, const std::optional<std::vector<gpusel::GpuProcess>>& processes);

// The members of one MIG instance's object.
void mig_members(JsonWriter& json, const gpusel::MigInstance& instance) {
  json.key("uuid").value(instance.uuid);
  json.key("gpu_instance_id").value(instance.gpu_instance_id);
  json.key("compute_instance_id").value(instance.compute_instance_id);
  optional_value(json, "memory_total_bytes", instance.memory_total_bytes);
  optional_value(json, "memory_used_bytes", instance.memory_used_bytes);
  optional_value(json, "memory_free_bytes", instance.memory_free_bytes);
  json.key("processes");
  process_array(json, instance.processes);
}

// The members of one GPU's object; its links to the other GPUs only with `links` (null
// without: N of them for each of N GPUs, so only `list --links` gives them).
void gpu_members(JsonWriter& json, const gpusel::DeviceMap& map, int physical_index, const gpusel::Gpu& gpu,
                 bool links = false) {
  optional_value(json, "logical", map.visible.logical(physical_index));
  json.key("physical_index").value(physical_index);
  json.key("nvml_index").value(gpu.nvml_index);
  json.key("name").value(gpu.name);
  json.key("uuid").value(gpu.uuid);
  json.key("pci_bus_id").value(gpu.pci_bus_id);
  json.key("compute_capability")
      .value(std::to_string(gpu.compute_capability_major) + "." + std::to_string(gpu.compute_capability_minor));
  json.key("mig_enabled").value(gpu.mig_enabled);
  json.key("mig_instances").begin_array();
  for (const gpusel::MigInstance& instance : gpu.mig_instances) {
    json.begin_object();
    mig_members(json, instance);
    json.end_object();
  }
  json.end_array();
  optional_value(json, "numa_node", gpu.numa_node);
  json.key("cpu_affinity");
  if (gpu.cpu_affinity.empty())
    json.null();
  else
    json.value(gpusel::format_cpu_list(gpu.cpu_affinity));
  json.key("links");  // to the other GPUs, by nvidia-smi's number
  if (links) {
    json.begin_array();
    for (std::size_t other = 0; other < gpu.links.size(); ++other) {
      if (static_cast<int>(other) == gpu.nvml_index) continue;
      json.begin_object();
      json.key("nvml_index").value(static_cast<int>(other));
      json.key("link").value(link_name(gpu.links[other]));
      json.end_object();
    }
    json.end_array();
  } else {
    json.null();
  }
  optional_value(json, "memory_total_bytes", gpu.memory_total_bytes);
  optional_value(json, "memory_used_bytes", gpu.memory_used_bytes);
  optional_value(json, "memory_free_bytes", gpu.memory_free_bytes);
  optional_value(json, "memory_reserved_bytes", gpu.memory_reserved_bytes);
  optional_value(json, "utilization_percent", gpu.utilization_percent);
  json.key("impossible_readings");
  if (gpu.impossible_readings.empty())
    json.null();
  else
    json.value(gpu.impossible_readings);
  json.key("processes");
  process_array(json, gpu.processes);
}

// Processes as a JSON array, or null when unknown.
void process_array(JsonWriter& json, const std::optional<std::vector<gpusel::GpuProcess>>& processes) {
  if (!processes) {
    json.null();
    return;
  }
  json.begin_array();
  for (const gpusel::GpuProcess& process : *processes) {
    json.begin_object();
    json.key("pid").value(process.pid);
    json.key("user").value(process.user);
    json.key("command").value(process.command);
    json.key("command_hex").value(gpusel::hex_bytes(process.command));  // exact: the kernel may cut UTF-8
    optional_value(json, "used_memory_bytes", process.used_memory_bytes);
    json.end_object();
  }
  json.end_array();
}

// The exit status for GPUs that cannot be seen: 4 when NVML was loaded but
// failed (nvmlInit, or while reading the GPUs), else 3 (no usable NVML: no driver).
int no_gpus_status(const gpusel::Inventory& inventory) {
  return inventory.status == gpusel::InventoryStatus::query_failed ||
                 inventory.status == gpusel::InventoryStatus::init_failed
             ? kExitNvmlFailed
             : kExitNoDriver;
}

// A failure as the JSON document of a --json run: every --json run prints one,
// errors included. `error` is a code ("usage", "no_driver", "nvml_failed",
// "internal", "leases"), `reason` the message (docs/reference.md).
void print_error_json(std::string_view error, const std::string& reason, int status) {
  JsonWriter json;
  json.begin_object();
  json.key("ok").value(false);
  json.key("error").value(error);
  json.key("reason").value(reason);
  json.key("exit_status").value(status);
  json.end_object();
  std::cout << json.str();
}

// Says why no GPU can be seen (on stderr, and as JSON on stdout for --json); returns the exit status.
int report_no_gpus(const gpusel::DeviceMap& map, bool json) {
  if (json)
    print_error_json(no_gpus_status(map.inventory) == kExitNvmlFailed ? "nvml_failed" : "no_driver",
                     map.inventory.reason, no_gpus_status(map.inventory));
  if (map.inventory.status == gpusel::InventoryStatus::query_failed)
    std::cerr << "gpusel: NVML failed while reading the GPUs: " << gpusel::escape_for_terminal(map.inventory.reason)
              << "\n";
  else if (map.inventory.status == gpusel::InventoryStatus::init_failed)
    std::cerr << "gpusel: NVML failed to start: " << gpusel::escape_for_terminal(map.inventory.reason) << "\n";
  else
    std::cerr << "gpusel: no NVIDIA driver to ask, so no GPU can be seen: "
              << gpusel::escape_for_terminal(map.inventory.reason) << "\n";
  return no_gpus_status(map.inventory);
}

// Note [A hanging NVML]
// ~~~~~~~~~~~~~~~~~~~~~
// A wedged driver can leave an NVML call (nvmlInit, the device count, a process
// query) unanswered for good, and list, pick and run with it. The command reads
// the GPUs on a thread of its own and waits at most GPUSEL_NVML_TIMEOUT (30 s by
// default: nvmlInit on a machine of many GPUs without the persistence daemon
// takes seconds, never half a minute), then says so and exits 4 (run: 125, its
// own failures' status). The call cannot be cancelled, so the thread is left
// behind and the command ends with _Exit (g_nvml_hung): no destructor of a static
// object runs beside a thread still inside the driver's library. The library's
// own query_inventory has no timeout: a thread it could not end is the caller's
// decision.
constexpr std::chrono::milliseconds kDefaultNvmlTimeout{30000};
bool g_nvml_hung = false;  // a thread is left inside NVML: main ends with _Exit

// visible_devices(options), or nullopt when NVML did not answer within `timeout` (Note [A hanging NVML]).
std::optional<gpusel::DeviceMap> read_devices(const gpusel::InventoryOptions& options,
                                              std::chrono::milliseconds timeout) {
  if (timeout.count() == 0) return gpusel::visible_devices(options);
  auto answer = std::make_shared<std::promise<gpusel::DeviceMap>>();
  std::future<gpusel::DeviceMap> map = answer->get_future();
  std::thread reader([answer, options] {
    try {
      answer->set_value(gpusel::visible_devices(options));
    } catch (...) {
      answer->set_exception(std::current_exception());
    }
  });
  if (map.wait_for(timeout) != std::future_status::ready) {
    reader.detach();
    g_nvml_hung = true;
    return std::nullopt;
  }
  reader.join();
  return map.get();
}

// Says that NVML did not answer (on stderr, and as JSON for --json); returns `status`.
int report_nvml_hung(const Arguments& arguments, int status) {
  const std::string reason = "NVML did not answer in " + std::to_string(arguments.nvml_timeout.count() / 1000) +
                             " s (GPUSEL_NVML_TIMEOUT sets how long to wait; nvidia-smi and dmesg may say why "
                             "the driver hangs)";
  std::cerr << "gpusel: " << reason << "\n";
  if (arguments.json) print_error_json("nvml_failed", reason, status);
  return status;
}

void print_list_json(const gpusel::DeviceMap& map, bool links) {
  JsonWriter json;
  json.begin_object();
  json.key("driver_version").value(map.inventory.driver_version);
  json.key("cuda_driver_version").value(map.inventory.cuda_driver_version);
  json.key("order_exact").value(map.order.exact);
  json.key("caveat").value(map.order.caveat);
  json.key("gpus").begin_array();
  for (int physical = 0; physical < map.order.count(); ++physical) {
    json.begin_object();
    gpu_members(json, map, physical, *map.physical_device(physical), links);
    json.end_object();
  }
  json.end_array().end_object();
  std::cout << json.str();
}

// What list, pick and run read: usage, and the N(N-1)/2 links between GPUs only when asked for.
gpusel::InventoryOptions usage(bool links) {
  gpusel::InventoryOptions options = gpusel::InventoryOptions::with_usage();
  options.links = links;
  return options;
}

int run_list(const Arguments& arguments) {
  const std::optional<gpusel::DeviceMap> read = read_devices(usage(arguments.links), arguments.nvml_timeout);
  if (!read) return report_nvml_hung(arguments, kExitNvmlFailed);
  const gpusel::DeviceMap& map = *read;
  if (!map.known()) return report_no_gpus(map, arguments.json);
  if (arguments.json) {
    print_list_json(map, arguments.links);
    return kExitOk;
  }
  std::vector<std::string> labels;  // this process's cuda:N, or "hidden"
  std::size_t label_width = 6, name_width = 4, uuid_width = 4;
  for (int physical = 0; physical < map.order.count(); ++physical) {
    const auto logical = map.visible.logical(physical);
    labels.push_back(logical ? "cuda:" + std::to_string(*logical) : "hidden");
    label_width = std::max(label_width, labels.back().size());
  }
  // NVML's strings, escaped for the terminal (Note [Hostile text]) before their widths are measured.
  const auto shown = [](const std::string& text) { return gpusel::escape_for_terminal(text); };
  // A MIG instance's row names it in the NAME column: "MIG GI 1 CI 0".
  const auto instance_label = [](const gpusel::MigInstance& instance) {
    return "  MIG GI " + std::to_string(instance.gpu_instance_id) + " CI " +
           std::to_string(instance.compute_instance_id);
  };
  const auto cpus = [](const gpusel::Gpu& gpu) {
    return gpu.cpu_affinity.empty() ? std::string("?") : gpusel::format_cpu_list(gpu.cpu_affinity);
  };
  std::size_t cpus_width = 4;
  bool placement_known = false;  // NUMA and CPUS columns only where NVML tells either
  for (const gpusel::Gpu& gpu : map.inventory.gpus) {
    placement_known = placement_known || gpu.numa_node || !gpu.cpu_affinity.empty();
    name_width = std::max(name_width, shown(gpu.name).size());
    uuid_width = std::max(uuid_width, shown(gpu.uuid).size());
    cpus_width = std::max(cpus_width, cpus(gpu).size());
    for (const gpusel::MigInstance& instance : gpu.mig_instances) {
      name_width = std::max(name_width, instance_label(instance).size());
      uuid_width = std::max(uuid_width, shown(instance.uuid).size());
    }
  }
  const std::size_t index_width = std::max<std::size_t>(4, std::to_string(map.order.count()).size()) + 2;
  std::cout << Column{"CUDA", label_width + 2} << Column{"PHYS", index_width} << Column{"SMI", index_width - 1}
            << Column{"NAME", name_width + 2} << Column{"UUID", uuid_width + 2} << Column{"PCI BUS ID", 18}
            << Column{"MEMORY USED / TOTAL", 24} << Column{"UTIL", 6};
  if (placement_known) std::cout << Column{"NUMA", 6} << Column{"CPUS", cpus_width + 2};
  std::cout << "PROCESSES\n";
  for (int physical = 0; physical < map.order.count(); ++physical) {
    const gpusel::Gpu& gpu = *map.physical_device(physical);
    std::cout << Column{labels[static_cast<std::size_t>(physical)], label_width + 2}
              << Column{std::to_string(physical), index_width}
              << Column{std::to_string(gpu.nvml_index), index_width - 1} << Column{shown(gpu.name), name_width + 2}
              << Column{shown(gpu.uuid), uuid_width + 2} << Column{shown(gpu.pci_bus_id), 18} << Column{memory(gpu), 24}
              << Column{percent(gpu.utilization_percent), 6};
    if (placement_known)
      std::cout << Column{gpu.numa_node ? std::to_string(*gpu.numa_node) : std::string("?"), 6}
                << Column{cpus(gpu), cpus_width + 2};
    std::cout << (gpu.mig_enabled ? "MIG mode; " : "")
              << (gpu.memory_reserved_bytes && *gpu.memory_reserved_bytes > 0
                      ? gpusel::format_memory_size(*gpu.memory_reserved_bytes) + " reserved by the driver; "
                      : std::string())
              << (gpu.impossible_readings.empty() ? ""
                                                  : "readings cannot be true: " + shown(gpu.impossible_readings) + "; ")
              << describe_processes(gpu) << "\n";
    for (const gpusel::MigInstance& instance : gpu.mig_instances) {
      gpusel::Gpu reading;  // the instance's readings, shown as a GPU's are
      reading.memory_used_bytes = instance.memory_used_bytes;
      reading.memory_total_bytes = instance.memory_total_bytes;
      reading.processes = instance.processes;
      std::cout << Column{"", label_width + 2} << Column{"", index_width} << Column{"", index_width - 1}
                << Column{instance_label(instance), name_width + 2} << Column{shown(instance.uuid), uuid_width + 2}
                << Column{"", 18} << Column{memory(reading), 24} << Column{"", 6};
      if (placement_known) std::cout << Column{"", 6} << Column{"", cpus_width + 2};
      std::cout << describe_processes(reading) << "\n";
    }
  }
  if (map.inventory.gpus.empty()) std::cout << "(NVML sees no GPU)\n";
  // One UUID on several GPUs (or MIG instances), in CUDA's physical order: Note [One UUID, one GPU].
  std::vector<std::pair<std::string, std::vector<int>>> uuids;  // in order of first appearance
  std::unordered_map<std::string, std::size_t> uuid_at;
  const auto note_uuid = [&](const std::string& uuid, int physical) {
    if (uuid.empty()) return;
    const auto [at, inserted] = uuid_at.try_emplace(uuid, uuids.size());
    if (inserted) uuids.emplace_back(uuid, std::vector<int>{});
    uuids[at->second].second.push_back(physical);
  };
  for (int physical = 0; physical < map.order.count(); ++physical) {
    const gpusel::Gpu& gpu = *map.physical_device(physical);
    note_uuid(gpu.uuid, physical);
    for (const gpusel::MigInstance& instance : gpu.mig_instances) note_uuid(instance.uuid, physical);
  }
  for (const auto& [uuid, physicals] : uuids) {
    if (physicals.size() < 2) continue;
    std::string names;
    for (std::size_t i = 0; i < physicals.size(); ++i)
      names += (i == 0 ? "" : i + 1 == physicals.size() ? " and " : ", ") + std::to_string(physicals[i]);
    std::cout << "Caution: NVML reports " << shown(uuid) << " for GPUs " << names << ": pick counts them as one GPU.\n";
  }
  if (!map.visible.ok() && !map.inventory.gpus.empty())
    std::cout << "No CUDA device is visible to this process: " << gpusel::escape_for_terminal(map.visible.reason())
              << "\n";
  if (arguments.links && map.order.count() > 1) {  // each pair once, by CUDA's physical index
    std::cout << "Links:\n";
    for (int a = 0; a < map.order.count(); ++a)
      for (int b = a + 1; b < map.order.count(); ++b)
        std::cout << "  GPUs " << a << " and " << b << " are "
                  << gpusel::describe(gpusel::link_between(*map.physical_device(a), *map.physical_device(b))) << "\n";
  }
  if (!map.order.exact) std::cout << "Caution: " << map.order.caveat << ".\n";
  return kExitOk;
}

void print_explain_json(const gpusel::DeviceMap& map) {
  JsonWriter json;
  json.begin_object();
  optional_value(json, "cuda_visible_devices", map.visible.variable());
  json.key("cuda_visible_devices_hex");  // the exact bytes, where the text above had to replace some
  if (map.visible.variable())
    json.value(gpusel::hex_bytes(*map.visible.variable()));
  else
    json.null();
  optional_value(json, "cuda_device_order", map.visible.device_order());
  json.key("gpus_known").value(map.known());
  json.key("reason").value(map.inventory.reason);
  json.key("ok").value(map.known() && map.visible.ok());
  json.key("error").value(map.visible.error_name());
  json.key("error_reason").value(map.visible.reason());
  json.key("visible").begin_array();
  for (int logical = 0; map.known() && logical < map.visible.count(); ++logical) {
    json.begin_object();
    gpu_members(json, map, map.visible.physical(logical), *map.device(logical));
    json.end_object();
  }
  json.end_array();
  json.key("tokens").begin_array();
  for (const gpusel::VisibleToken& token : map.visible.tokens()) {
    json.begin_object();
    json.key("text").value(token.text);
    json.key("text_hex").value(gpusel::hex_bytes(token.text));
    json.key("kept").value(token.kept());
    json.key("why").value(map.known() ? token.why(map.visible.physical_count()) : std::string("not checked"));
    json.end_object();
  }
  json.end_array();
  json.key("order_exact").value(map.order.exact);
  json.key("caveat").value(map.order.caveat);
  json.key("text").value(gpusel::explain(map));
  json.end_object();
  std::cout << json.str();
}

int run_explain(const Arguments& arguments) {
  const std::optional<gpusel::DeviceMap> read = read_devices({}, arguments.nvml_timeout);  // identity is all it shows
  if (!read) return report_nvml_hung(arguments, kExitNvmlFailed);
  const gpusel::DeviceMap& map = *read;
  if (arguments.json)
    print_explain_json(map);
  else
    std::cout << gpusel::explain(map);
  if (!map.known()) return no_gpus_status(map.inventory);
  return map.cuda_would_fail() ? kExitNothingFits : kExitOk;  // so a job script can test its environment
}

// A candidate's members: its GPU's, and the MIG instance it is (null: the whole GPU).
void candidate_members(JsonWriter& json, const gpusel::DeviceMap& map, const gpusel::Candidate& candidate) {
  json.key("cuda_visible_devices_token").value(candidate.uuid());
  json.key("mig_instance");
  if (candidate.mig_instance) {
    json.begin_object();
    mig_members(json, *candidate.mig_instance);
    json.end_object();
  } else {
    json.null();
  }
  gpu_members(json, map, candidate.physical_index, candidate.gpu);
}

void print_pick_json(const Arguments& arguments, const gpusel::DeviceMap& map,
                     const std::vector<gpusel::Candidate>& assessed, const std::vector<gpusel::Candidate>& picked,
                     const std::string& value, const std::string& failure) {
  JsonWriter json;
  json.begin_object();
  json.key("criteria").value(gpusel::describe(arguments.criteria));
  json.key("ok").value(failure.empty());
  json.key("error").value(failure.empty() ? "" : "nothing_fits");  // a code, as in every error document
  json.key("reason").value(failure);
  json.key("cuda_visible_devices");
  if (failure.empty())
    json.value(value);
  else
    json.null();  // nothing fitted: no value to set, rather than an empty one that hides every GPU
  json.key("connection");
  if (const auto weakest = gpusel::weakest_link(picked)) {
    json.begin_object();
    json.key("weakest_link").value(link_name(*weakest));
    json.key("text").value(gpusel::describe_connection(picked, arguments.criteria));
    json.end_object();
  } else {
    json.null();
  }
  json.key("picked").begin_array();
  for (const gpusel::Candidate& candidate : picked) {
    json.begin_object();
    candidate_members(json, map, candidate);
    json.end_object();
  }
  json.end_array();
  json.key("assessed").begin_array();
  for (const gpusel::Candidate& candidate : assessed) {
    json.begin_object();
    candidate_members(json, map, candidate);
    json.key("fits").value(candidate.fits());
    json.key("rejected_because").begin_array();
    for (const std::string& reason : candidate.rejected_because) json.value(reason);
    json.end_array();
    json.key("busy_processes");  // the compute processes that made it busy
    process_array(json, candidate.busy_processes);
    json.end_object();
  }
  json.end_array().end_object();
  std::cout << json.str();
}

// On stderr, what the picks' value cannot say: how --connected's GPUs are joined, and
// that CUDA shows one process one MIG instance only (Note [MIG instances as picks]).
void say_what_was_chosen(const Arguments& arguments, const std::vector<gpusel::Candidate>& picked) {
  if (arguments.criteria.placement == gpusel::PickPlacement::connected && picked.size() >= 2)
    std::cerr << "gpusel: connected: " << gpusel::describe_connection(picked, arguments.criteria) << "\n";
  const auto instances = std::count_if(picked.begin(), picked.end(),
                                       [](const gpusel::Candidate& candidate) { return candidate.mig_instance; });
  if (instances > 0 && picked.size() > 1)
    std::cerr << "gpusel: caution: " << instances << " of the " << picked.size()
              << " picked are MIG instances: CUDA 11 and 12 show one process a single MIG instance, whatever "
                 "CUDA_VISIBLE_DEVICES lists; give each process one\n";
}

// What the order's caveat says of GPUs printed by their index: not its parts on GPUs in
// MIG mode, whose instances pick prints by their MIG- UUIDs, exact whatever the order.
std::string index_caveat(const gpusel::CudaPhysicalOrder& order) {
  std::string kept;
  std::string_view rest = order.caveat;
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find("; "), rest.size());
    const std::string_view part = rest.substr(0, end);
    if (part.find(" is in MIG mode: ") == std::string_view::npos)
      kept += (kept.empty() ? "" : "; ") + std::string(part);
    rest.remove_prefix(std::min(end + 2, rest.size()));
  }
  return kept;
}

// Throws Error when this process may choose no GPU (Note [The GPUs this process may choose among]).
void require_allotment(const gpusel::DeviceMap& map, std::string_view who) {
  gpusel::allotment(map.visible.ok() ? map.visible.count() : 0).require(who);
}

int run_pick(const Arguments& arguments) {
  const std::optional<gpusel::DeviceMap> read =
      read_devices(usage(arguments.criteria.placement == gpusel::PickPlacement::connected), arguments.nvml_timeout);
  if (!read) return report_nvml_hung(arguments, kExitNvmlFailed);
  const gpusel::DeviceMap& map = *read;
  if (!map.known()) return report_no_gpus(map, arguments.json);
  try {
    require_allotment(map, "pick");
  } catch (const gpusel::Error& error) {  // the scheduler gave GPUs without saying which
    std::cerr << "gpusel: " << escape_lines(error.what()) << "\n";
    if (arguments.json) print_error_json("allotment", error.what(), kExitNothingFits);
    return kExitNothingFits;
  }
  std::vector<gpusel::Candidate> assessed;
  try {
    assessed = gpusel::assess(arguments.criteria, map, gpusel::current_user(), static_cast<unsigned>(getpid()));
  } catch (const gpusel::Error& error) {  // criteria that make no sense here, e.g. an --exclude naming no GPU
    std::cerr << "gpusel: " << gpusel::escape_for_terminal(error.what()) << "\nTry 'gpusel help'.\n";
    if (arguments.json) print_error_json("usage", error.what(), kExitUsage);
    return kExitUsage;
  }
  try {
    gpusel::reject_leased_gpus(assessed);  // another job's lease makes a GPU busy
  } catch (const gpusel::Error& error) {   // the lease directory or a lease file cannot be used
    std::cerr << escape_lines(error.what()) << "\n";
    if (arguments.json) print_error_json("leases", error.what(), kExitNothingFits);
    return kExitNothingFits;
  }
  std::vector<gpusel::Candidate> picked;
  std::string failure;
  try {
    picked =
        gpusel::choose(arguments.criteria, assessed);  // assess checked the criteria: this fails only when too few fit
  } catch (const gpusel::Error& error) {
    failure = error_text(error);
  }
  std::string value;
  for (const gpusel::Candidate& candidate : picked)
    value +=
        (value.empty() ? "" : ",") +
        (arguments.print_uuids || candidate.mig_instance ? candidate.uuid() : std::to_string(candidate.physical_index));

  if (arguments.json)
    print_pick_json(arguments, map, assessed, picked, value, failure);
  else if (failure.empty())
    std::cout << gpusel::escape_for_terminal(value) << "\n";
  if (!failure.empty()) {
    std::cerr << "gpusel: " << escape_lines(failure) << "\n";
    return kExitNothingFits;
  }
  say_what_was_chosen(arguments, picked);
  const bool printed_an_index =
      !arguments.print_uuids && std::any_of(picked.begin(), picked.end(), [](const gpusel::Candidate& candidate) {
        return !candidate.mig_instance;  // a MIG instance is printed as its UUID, exact whatever the order
      });
  const std::string caveat = index_caveat(map.order);
  if (printed_an_index && !map.order.exact && !caveat.empty())
    std::cerr << "gpusel: caution: " << gpusel::escape_for_terminal(caveat)
              << "; --format uuid names the GPUs exactly\n";
  return kExitOk;
}

// --- run ---------------------------------------------------------------------------------

// Note [The job holds the lease]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A lease lasts as long as the job, whatever happens to `gpusel run`. The command
// starts with a copy of each lock file's descriptor, and a flock lock ends only when
// the last descriptor on its open file description closes (Note [Lease files]). So
// `kill -9` of run (the OOM killer, a scheduler's cleanup) leaves the GPU leased while
// the command lives, and a command that puts its work in the background
// (`sh -c 'train &'`) keeps it while that work runs. The costs: whatever the job
// leaves running keeps the GPU until it ends, and a command that closes descriptors
// it did not open leaves the lease to run alone. Otherwise run stands in for the
// command, as env does: it passes on the signals sent to it whose default would end
// it (forwarded_signals), and ends as the command ended.

volatile sig_atomic_t g_child = 0;  // the command while it runs: where the signals go
static_assert(sizeof(pid_t) <= sizeof(sig_atomic_t), "a pid must fit where a signal handler reads it");

// Passes a signal sent to gpusel (kill, a scheduler) on to the command. Not one the
// kernel sends (si_code > 0: the terminal's Ctrl-C, which the command has too), nor
// one run's own writes raise (SIGPIPE, sent by the kernel as from run itself).
void forward_signal(int signal_number, siginfo_t* info, void*) {
  const int saved = errno;
  const bool sent = info == nullptr || (info->si_code <= 0 && info->si_pid != getpid());
  const pid_t child = g_child;
  if (child > 0 && sent) {
    if (info != nullptr && info->si_code == SI_QUEUE)
      (void)sigqueue(child, signal_number, info->si_value);  // with its value
    else
      (void)kill(child, signal_number);
  }
  errno = saved;
}

// The signals run passes on (Note [The job holds the lease]): every one whose default
// would end it, but the faults of its own code (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGTRAP, SIGSYS, SIGABRT).
std::vector<int> forwarded_signals() {
  std::vector<int> signals = {SIGHUP,  SIGINT,    SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM,
                              SIGPIPE, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGIO};
#ifdef SIGPWR
  signals.push_back(SIGPWR);
#endif
#ifdef SIGSTKFLT
  signals.push_back(SIGSTKFLT);
#endif
  for (int number = SIGRTMIN; number <= SIGRTMAX; ++number) signals.push_back(number);
  return signals;
}

// Ends run as signal `signal_number` ended the command. A core dump of run would
// replace the command's, so run makes none. Returns 128+N should the signal not end it.
int die_of(int signal_number) {
  std::cout.flush();
  struct rlimit core {};
  if (getrlimit(RLIMIT_CORE, &core) == 0) {
    core.rlim_cur = 0;
    (void)setrlimit(RLIMIT_CORE, &core);
  }
  (void)signal(signal_number, SIG_DFL);
  sigset_t just_this;
  sigemptyset(&just_this);
  sigaddset(&just_this, signal_number);
  (void)sigprocmask(SIG_UNBLOCK, &just_this, nullptr);
  (void)raise(signal_number);
  return 128 + signal_number;
}

// Starts `command_line`, holding `lease` with it (Note [The job holds the lease]),
// waits for it, and ends as it ended: its exit status, or death by its signal (as
// env: so a shell loop stops at Ctrl-C).
int start_and_wait(const std::vector<std::string>& command_line, const gpusel::GpuLease& lease) {
  const std::vector<int> signals = forwarded_signals();
  sigset_t forwarded, previous;
  sigemptyset(&forwarded);
  for (const int signal_number : signals) sigaddset(&forwarded, signal_number);
  // Blocked until the child's pid is known, so none is lost.
  sigprocmask(SIG_BLOCK, &forwarded, &previous);
  struct sigaction action {};
  action.sa_sigaction = forward_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  struct sigaction by_default {};
  by_default.sa_handler = SIG_DFL;
  sigemptyset(&by_default.sa_mask);
  // A signal ignored when run starts stays ignored in the command (`nohup gpusel run`,
  // as `nohup env`), and in run too, but for SIGCHLD (below), which run must see.
  std::vector<int> caught;
  for (const int signal_number : signals) {
    struct sigaction current {};
    if (sigaction(signal_number, nullptr, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_IGN) continue;  // stays ignored
    if (sigaction(signal_number, &action, nullptr) == 0) caught.push_back(signal_number);
  }
  // SIGCHLD ignored would have the kernel reap the command before run could wait for it:
  // run takes the default, and the command gets the ignored SIGCHLD it would have inherited.
  struct sigaction child_ended {};
  const bool child_ended_ignored = sigaction(SIGCHLD, nullptr, &child_ended) == 0 &&
                                   (child_ended.sa_flags & SA_SIGINFO) == 0 && child_ended.sa_handler == SIG_IGN;
  if (child_ended_ignored) (void)sigaction(SIGCHLD, &by_default, nullptr);
  std::vector<char*> argv;
  for (const std::string& word : command_line) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  const std::vector<int> lease_descriptors = lease.file_descriptors();
  int report[2];  // the child writes execvp's errno here; exec closes it
  if (pipe2(report, O_CLOEXEC) != 0) {
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    std::cerr << "gpusel: cannot start the command: pipe2: " << std::strerror(errno) << "\n";
    return kExitRunFailed;
  }
  // fork and execvp, not posix_spawnp: a file without #! then runs through /bin/sh,
  // as execvp runs it (posix_spawnp fails with ENOEXEC).
  const pid_t child = fork();
  if (child == 0) {  // the command-to-be: async-signal-safe calls only, until execvp
    for (const int signal_number : caught) (void)sigaction(signal_number, &by_default, nullptr);
    if (child_ended_ignored) (void)sigaction(SIGCHLD, &child_ended, nullptr);
    // The command's copies of the lease: numbered 10 or above, clear of a shell's
    // redirections 3-9.
    for (const int descriptor : lease_descriptors)
      if (fcntl(descriptor, F_DUPFD, 10) < 0) (void)fcntl(descriptor, F_SETFD, 0);  // the copy is not O_CLOEXEC
    (void)sigprocmask(SIG_SETMASK, &previous, nullptr);
    execvp(argv[0], argv.data());
    const int error = errno;
    (void)!write(report[1], &error, sizeof error);
    _exit(kExitCannotRun);
  }
  const int fork_error = errno;
  close(report[1]);
  if (child < 0) {
    close(report[0]);
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    std::cerr << "gpusel: cannot start the command: fork: " << std::strerror(fork_error) << "\n";
    return kExitRunFailed;
  }
  g_child = child;
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  int exec_error = 0;
  ssize_t got = 0;
  while ((got = read(report[0], &exec_error, sizeof exec_error)) < 0 && errno == EINTR) {
  }
  close(report[0]);
  // Waits without reaping, then stops forwarding before the pid is freed: no signal reaches a stranger.
  siginfo_t ended{};
  while (waitid(P_PID, static_cast<id_t>(child), &ended, WEXITED | WNOWAIT) != 0) {
    if (errno != EINTR) {
      std::cerr << "gpusel: waiting for the command failed: " << std::strerror(errno) << "\n";
      return kExitRunFailed;
    }
  }
  sigprocmask(SIG_BLOCK, &forwarded, nullptr);
  g_child = 0;
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    std::cerr << "gpusel: cannot run \"" << gpusel::escape_for_terminal(command_line[0])
              << "\": " << std::strerror(exec_error) << "\n";
    return exec_error == ENOENT ? kExitNotFound : kExitCannotRun;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return die_of(WTERMSIG(status));
  return kExitRunFailed;
}

// Physical GPU `physical` of `map` as PCI_BUS_ID numbers it: what an index means to
// the command, which runs with CUDA_DEVICE_ORDER=PCI_BUS_ID.
int pci_bus_index(const gpusel::DeviceMap& map, int physical) {
  const gpusel::CudaPhysicalOrder pci = gpusel::cuda_physical_order(map.inventory, std::string_view("PCI_BUS_ID"));
  const std::size_t position = map.order.positions[static_cast<std::size_t>(physical)];
  for (int index = 0; index < pci.count(); ++index)
    if (pci.positions[static_cast<std::size_t>(index)] == position) return index;
  return physical;
}

// One attempt at the GPUs: the chosen ones (and their lease), or why there are none.
struct Attempt {
  std::vector<gpusel::Candidate> chosen;
  gpusel::GpuLease lease;
  std::string failure;  // "" when chosen
};

// `said_rank`: whether the rank without a launcher variable was said already (once per run, --wait or not).
Attempt attempt_local_rank(const Arguments& arguments, const gpusel::DeviceMap& map, bool& said_rank) {
  Attempt attempt;
  const auto rank = gpusel::local_rank();  // throws Error for a malformed variable
  if (!rank && !said_rank) {               // the documented rule, said, so that a mistyped launcher setup shows
    std::string variables;
    for (const gpusel::LauncherVariables& launcher : gpusel::launcher_variables)
      variables += (variables.empty() ? "" : ", ") + std::string(launcher.rank_variable);
    std::cerr << "gpusel: no launcher variable is set (" << variables
              << "), so this process runs as local rank 0 of 1\n";
    said_rank = true;
  }
  if (!map.visible.ok()) {
    attempt.failure = "no CUDA device is visible to this rank: " + map.visible.reason();
    return attempt;
  }
  require_allotment(map, "run --local-rank");  // throws: no wait can fix it
  const gpusel::Device device = gpusel::device_for_local_rank(rank, map.visible.count());
  if (device.is_cpu()) {
    attempt.failure = "no GPU is visible, so " + (rank ? rank->describe() : std::string("this process")) + " has none";
    return attempt;
  }
  const int physical = map.visible.physical(device.index());
  const gpusel::Gpu& gpu = *map.physical_device(physical);
  const std::string who = rank ? rank->describe() : std::string("local rank 0 (no launcher variable is set)");
  const std::string its_gpu = "its GPU, cuda:" + std::to_string(device.index()) + " of the job (physical " +
                              std::to_string(physical) + ", " + gpusel::escape_for_terminal(gpu.uuid) + "), is ";
  if (gpu.mig_enabled) {  // CUDA would show its instances, not the GPU: never given whole (docs/mig.md)
    attempt.failure = who + ": " + its_gpu +
                      "in MIG mode, and gpusel never gives a GPU in MIG mode whole; name the rank's MIG "
                      "instance in CUDA_VISIBLE_DEVICES, or leave out --local-rank to pick an instance";
    return attempt;
  }
  // Busy as pick judges it (Note [Whose process is it]): a compute process on it is the rank's error.
  gpusel::PickCriteria rule;
  rule.allow_other_users = arguments.criteria.allow_other_users;
  rule.share_own = arguments.criteria.share_own;
  rule.only_visible = false;  // the rank's GPU is visible: no other GPU's verdict matters
  for (const gpusel::Candidate& verdict :
       gpusel::assess(rule, map, gpusel::current_user(), static_cast<unsigned>(getpid()))) {
    if (verdict.physical_index != physical || verdict.mig_instance || verdict.fits()) continue;
    std::string reasons;
    for (const std::string& reason : verdict.rejected_because) reasons += (reasons.empty() ? "" : "; ") + reason;
    attempt.failure = who + ": " + its_gpu + "busy: " + reasons +
                      "; a rank keeps its GPU rather than take another (--share-own or --allow-other-users to "
                      "share it)";
    return attempt;
  }
  if (arguments.lease) {
    std::optional<gpusel::GpuLease> lease = gpusel::try_lease_gpu(gpu.uuid);
    if (!lease) {
      attempt.failure = who + ": " + its_gpu + gpusel::lease_holder(gpu.uuid).value_or("leased by another job") +
                        "; a rank keeps its GPU rather than take another";
      return attempt;
    }
    attempt.lease = std::move(*lease);
  }
  attempt.chosen.push_back(gpusel::Candidate{gpu, physical, {}, std::nullopt, {}});
  return attempt;
}

// Criteria that name nothing here, and leases that cannot be read (the lease directory,
// a lock file, a GPU without a UUID), throw Error: no wait can fix them, so run fails
// at once. Too few GPUs that fit is the attempt's failure, which a wait may end.
Attempt attempt_pick(const Arguments& arguments, const gpusel::DeviceMap& map) {
  Attempt attempt;
  require_allotment(map, "run");  // throws: no wait can fix it
  std::vector<gpusel::Candidate> assessed =
      gpusel::assess(arguments.criteria, map, gpusel::current_user(), static_cast<unsigned>(getpid()));
  gpusel::reject_leased_gpus(assessed);
  try {
    attempt.chosen = gpusel::choose(arguments.criteria, std::move(assessed));
  } catch (const gpusel::Error& error) {
    attempt.failure = error_text(error);
    return attempt;
  }
  if (!arguments.lease) return attempt;
  for (const gpusel::Candidate& candidate : attempt.chosen)
    if (candidate.uuid().empty())  // a lock file is named by the UUID
      throw gpusel::Error("cannot lease " + gpusel::describe(candidate) + ": NVML reports no UUID for it");
  try {  // leases as it chooses again, passing over a GPU another job leases first
    gpusel::LeasedGpus leased =
        gpusel::lease_free_gpus(arguments.criteria, map, gpusel::current_user(), static_cast<unsigned>(getpid()));
    attempt.chosen = std::move(leased.gpus);
    attempt.lease = std::move(leased.lease);
  } catch (const gpusel::Error& error) {
    attempt.chosen.clear();
    attempt.failure = error_text(error);
  }
  return attempt;
}

int run_run(const Arguments& arguments) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  bool said_waiting = false, said_rank = false;
  Attempt attempt;
  gpusel::DeviceMap map;
  std::optional<gpusel::detail::WaitLine> line;    // waiting jobs are served in arrival order (Note [Waiting in line])
  if (arguments.lease || !arguments.local_rank) {  // a lease directory no wait can fix: say so now
    try {
      gpusel::check_lease_directory();
      if (arguments.wait && arguments.lease && !arguments.local_rank) line.emplace();
    } catch (const gpusel::Error& error) {
      std::cerr << escape_lines(error.what()) << "\n";
      if (arguments.wait) std::cerr << "gpusel: not waiting: no wait can fix this\n";
      return kExitRunFailed;
    }
  }
  while (true) {
    std::optional<gpusel::DeviceMap> read =
        read_devices(usage(arguments.criteria.placement == gpusel::PickPlacement::connected), arguments.nvml_timeout);
    if (!read) return report_nvml_hung(arguments, kExitRunFailed);
    map = std::move(*read);
    if (!map.known()) {
      (void)report_no_gpus(map, false);
      return kExitRunFailed;
    }
    try {
      const std::string ahead = line ? line->ahead() : std::string();
      if (!ahead.empty()) {
        attempt = Attempt{};
        attempt.failure = "another job waits for GPUs first (" + ahead + "): waiting jobs are served in arrival order";
      } else {
        attempt = arguments.local_rank ? attempt_local_rank(arguments, map, said_rank) : attempt_pick(arguments, map);
      }
    } catch (const gpusel::Error& error) {  // no wait can fix it
      std::cerr << "gpusel: " << escape_lines(error_text(error)) << "\n";
      if (arguments.wait) std::cerr << "gpusel: not waiting: no wait can fix this\n";
      return kExitRunFailed;
    }
    if (attempt.failure.empty()) break;
    const bool time_left =
        arguments.wait && (!arguments.wait_at_most || Clock::now() - started < *arguments.wait_at_most);
    if (!time_left) {
      std::cerr << "gpusel: " << escape_lines(attempt.failure) << "\n";
      if (arguments.wait) std::cerr << "gpusel: gave up waiting\n";
      return kExitRunFailed;
    }
    try {
      if (line) line->join();
    } catch (const gpusel::Error& error) {
      std::cerr << escape_lines(error.what()) << "\n";
      return kExitRunFailed;
    }
    if (!said_waiting) {
      const std::string what = arguments.local_rank ? std::string("this rank's GPU to be free of other leases")
                                                    : gpusel::describe(arguments.criteria);
      // The failure's first line, less what `what` says already and the colon that led to its list.
      std::string first_line = attempt.failure.substr(0, attempt.failure.find('\n'));
      for (const std::string& said : {std::string("gpusel::pick: "), " (" + what + ")"})
        if (const auto at = first_line.find(said); at != std::string::npos) first_line.erase(at, said.size());
      if (!first_line.empty() && first_line.back() == ':') first_line.pop_back();
      std::cerr << "gpusel: waiting for " << what
                << (arguments.wait_at_most
                        ? " (at most " + std::to_string(arguments.wait_at_most->count() / 1000) + "s)"
                        : std::string(" (no time limit)"))
                << ": " << gpusel::escape_for_terminal(first_line) << "\n";
      said_waiting = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  line.reset();  // leased: the next in line may go
  std::string value;
  for (const gpusel::Candidate& candidate : attempt.chosen)
    value += (value.empty() ? "" : ",") + (arguments.print_uuids || candidate.mig_instance
                                               ? candidate.uuid()
                                               : std::to_string(pci_bus_index(map, candidate.physical_index)));
  for (const gpusel::Candidate& candidate : attempt.chosen)
    std::cerr << "gpusel: " << (attempt.lease.empty() ? "using " : "leased ")
              << gpusel::escape_for_terminal(gpusel::describe(candidate)) << "\n";
  say_what_was_chosen(arguments, attempt.chosen);
  std::cerr << "gpusel: running " << gpusel::escape_for_terminal(arguments.command_line[0])
            << " with CUDA_VISIBLE_DEVICES=" << gpusel::escape_for_terminal(value)
            << (arguments.print_uuids ? "" : " CUDA_DEVICE_ORDER=PCI_BUS_ID") << "\n";
  if (setenv("CUDA_VISIBLE_DEVICES", value.c_str(), 1) != 0 ||
      (!arguments.print_uuids && setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1) != 0)) {
    std::cerr << "gpusel: setenv failed\n";
    return kExitRunFailed;
  }
  return start_and_wait(arguments.command_line, attempt.lease);  // held until the whole job has ended
}

int run_help(const Arguments&) {
  std::cout << kUsage;
  return kExitOk;
}

int run_version(const Arguments&) {
  std::cout << "gpusel " << gpusel::version() << "\n";
  return kExitOk;
}

#ifndef GPUSEL_COMMAND_NO_MAIN  // tests/fuzz/arguments_fuzz.cpp includes this file for parse_arguments
// GPUSEL_NVML_TIMEOUT: a duration as --wait takes it; unset or empty, the default; 0, no limit.
std::chrono::milliseconds nvml_timeout() {
  const char* text = std::getenv("GPUSEL_NVML_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefaultNvmlTimeout;
  return parse_duration("GPUSEL_NVML_TIMEOUT", text);
}

// `status`, once what was written to stdout is out: a write that failed (stdout
// closed, a full disk) is an error of its own, kExitWriteFailed, whatever the command did.
int flush_output(int status) {
  std::cout.flush();
  const bool failed = !std::cout.good() || std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  if (!failed) return status;
  const int error = errno;  // set by the write that failed
  std::cerr << "gpusel: cannot write the output" << (error != 0 ? std::string(": ") + std::strerror(error) : "")
            << "\n";
  return kExitWriteFailed;
}

// The command, run: its exit status, errors included (they are said on stderr, and as JSON under --json).
int run_command_line(const std::vector<std::string>& words) {
  Arguments arguments;
  try {
    arguments = parse_arguments(words);
    arguments.nvml_timeout = nvml_timeout();
  } catch (const UsageError& error) {  // one line, quoting the arguments: escaped (Note [Hostile text])
    std::cerr << "gpusel: " << gpusel::escape_for_terminal(error.what()) << "\nTry 'gpusel help'.\n";
    // --json was asked for even if the line is wrong elsewhere: the caller reads stdout as JSON.
    if (std::find(words.begin(), words.end(), "--json") != words.end())
      print_error_json("usage", error.what(), kExitUsage);
    return kExitUsage;
  }
  // NVML failing is a state the commands report (3, 4); an exception here is a bug.
  std::string internal;
  try {
    return arguments.command->run(arguments);
  } catch (const std::exception& error) {
    internal = error.what();
  } catch (...) {
    internal = "an unknown exception";
  }
  std::cerr << "gpusel: internal error: " << gpusel::escape_for_terminal(internal) << " (please report it)\n";
  if (arguments.json) print_error_json("internal", internal, kExitInternalError);
  return kExitInternalError;
}
#endif

}  // namespace

#ifndef GPUSEL_COMMAND_NO_MAIN
int main(int argc, char** argv) {
  const int status = flush_output(run_command_line(std::vector<std::string>(argv + 1, argv + argc)));
  if (g_nvml_hung) {  // a thread is still inside NVML (Note [A hanging NVML])
    std::cerr.flush();
    std::_Exit(status);
  }
  return status;
}
#endif
