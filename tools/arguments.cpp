// The gpusel command's parser: the command table (kCommands) and the options (kOptions).
#include "arguments.hpp"

#include <gpusel/error.hpp>

#include <charconv>
#include <climits>
#include <cstddef>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "commands.hpp"

namespace gpusel_tool {
namespace {

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

}  // namespace

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

namespace {

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
       } catch (const gpusel::Error& error) {  // said as the option, not as the library's function
         const std::string function = "gpusel::parse_memory_size(\"" + value + "\"): ";
         std::string_view why = error.what();
         if (why.substr(0, function.size()) == function) why.remove_prefix(function.size());
         throw UsageError(std::string(spelled) + " \"" + value + "\": " + std::string(why));
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
    {"--round-robin", "", Takes::nothing, kRun,
     [](Arguments& a, std::string_view, const std::string&) { a.placement = gpusel::Placement::round_robin; }},
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

// An option as written in one word: its name, and the value attached to it, if any:
// --count=2 (after '='), or -n2 (a short option that takes a value, as getopt reads it).
struct Spelled {
  std::string name;
  std::optional<std::string> attached;
};

Spelled spelled_option(const std::string& word) {
  if (word.rfind("--", 0) == 0) {
    const std::size_t equals = word.find('=');
    if (equals == std::string::npos) return {word, std::nullopt};
    return {word.substr(0, equals), word.substr(equals + 1)};
  }
  const Option* short_option = option_named(word.substr(0, 2));
  if (word.size() > 2 && short_option != nullptr && short_option->takes == Takes::value)
    return {word.substr(0, 2), word.substr(2)};
  return {word, std::nullopt};
}

// The value of `option`, spelled `name`, in words[at]: `attached` to it, or the next word
// (`at` then moves on to it).
std::string option_value(const Option& option, const std::string& name, const std::optional<std::string>& attached,
                         const std::vector<std::string>& words, std::size_t& at) {
  const std::string& word = words[at];
  std::string value;
  if (option.takes == Takes::nothing) {
    if (attached)
      throw UsageError(name + " takes no value, got \"" + word + "\" (give " + name + " alone to turn it on)");
  } else if (option.takes == Takes::optional_value) {
    if (attached) {
      value = *attached;
      if (value.empty()) throw UsageError(name + "= expects a value (or give " + name + " alone)");
    }
  } else if (attached) {
    value = *attached;
  } else if (at + 1 < words.size()) {
    value = words[++at];
  } else {
    throw UsageError(name + " expects a value");
  }
  return value;
}

// run's own rules: a command to run, no pick option with --local-rank, UUIDs unless asked.
void settle_run(Arguments& arguments) {
  if (arguments.command_line.empty())
    throw UsageError("run expects a command to run: gpusel run [options] -- COMMAND [ARGS...]");
  if (arguments.local_rank && !arguments.pick_options.empty())
    throw UsageError("--local-rank takes the rank's own GPU, so " + arguments.pick_options.front() +
                     " cannot apply (only --format, --share-own, --allow-other-users, --round-robin, --wait and "
                     "--no-lease go with it)");
  if (arguments.placement == gpusel::Placement::round_robin && !arguments.local_rank)
    throw UsageError("--round-robin shares GPUs between a job's ranks, so it goes with --local-rank");
  if (!arguments.format_given) arguments.print_uuids = true;  // run gives UUIDs unless asked
}

}  // namespace

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
    const auto [name, attached] = spelled_option(word);
    const Option* option = option_named(name);
    if (option == nullptr)
      throw UsageError("unknown option \"" + name + "\"" +
                       (arguments.command == nullptr ? " (give a command first: list, explain, pick)" : ""));
    option->apply(arguments, name, option_value(*option, name, attached, words, i));
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
  if (arguments.command->bit == kRun) settle_run(arguments);
  return arguments;
}

}  // namespace gpusel_tool
