// The gpusel command: the machine's GPUs, this process's view of them, and
// free GPUs picked for CUDA_VISIBLE_DEVICES. It reads NVML only and never
// starts CUDA, so it is safe to run beside jobs and before them:
//   CUDA_VISIBLE_DEVICES=$(gpusel pick -n 2 --min-free 8GiB) ./train
// `gpusel --help` says everything; the exit statuses are in kUsage below.
#include <gpusel/memory_size.hpp>
#include <gpusel/select.hpp>
#include <gpusel/version.hpp>
#include <gpusel/visibility.hpp>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
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

constexpr const char* kUsage = R"(usage: gpusel <command> [options]

Commands (none of them starts CUDA or creates a context on any GPU):
  list      the machine's GPUs: this process's cuda:N, CUDA's physical index,
            nvidia-smi's number, name, UUID, PCI bus id, memory used/total,
            utilization and compute processes
  explain   how CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER map cuda:N to the
            physical GPUs here, and what was ignored and why
  pick      choose free GPUs and print them for CUDA_VISIBLE_DEVICES:
              CUDA_VISIBLE_DEVICES=$(gpusel pick -n 2 --min-free 8GiB) ./train

Options:
  --json                 machine-readable output (list, explain, pick)
  -h, --help             this text
  --version              gpusel's version

Options of pick (by default: 1 GPU, no other user's compute process on it,
most free memory first, among the GPUs CUDA_VISIBLE_DEVICES already shows):
  -n, --count N          exactly N GPUs
  --at-least N           at least N GPUs (fewer is a failure) ...
  --at-most M            ... and at most M of them
  --all                  every GPU that fits (at least 1, or --at-least N)
  --min-free SIZE        free memory each needs: 8GiB, 512MiB, 10GB, 1.5GiB
  --max-util PERCENT     highest utilization allowed, 0-100
  --allow-other-users    GPUs where another user's compute process runs may be picked
  --exclude LIST         never these: nvidia-smi numbers or UUIDs, comma-separated
  --order free|util|index  most free memory, least utilized, or CUDA's order first
  --format index|uuid    print CUDA's physical indices (default) or UUIDs;
                         UUIDs are exact even where CUDA's order is a guess
  --whole-machine        choose among all GPUs, whatever CUDA_VISIBLE_DEVICES says

Environment: CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, and GPUSEL_NVML_LIBRARY
(the NVML library to load; default libnvidia-ml.so.1).

Exit status:
  0  success
  1  pick: fewer GPUs fit than asked for (each GPU and why, on stderr)
  2  usage error: unknown command or option, malformed value
  3  no NVIDIA driver: NVML could not be loaded (explain still prints what it can)
  4  NVML failed while reading the GPUs
)";

struct Options {
  std::string command;
  bool json = false;
  gpusel::PickCriteria criteria;
  bool count_given = false;
  bool print_uuids = false;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

int parse_count(std::string_view option, const std::string& text, int smallest) {
  const bool digits = !text.empty() && text.size() <= 6 && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(text) < smallest)
    throw UsageError(std::string(option) + " expects a whole number of at least " + std::to_string(smallest) +
                     ", got \"" + text + "\"");
  return std::stoi(text);
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

Options parse_arguments(const std::vector<std::string>& arguments) {
  Options options;
  bool all = false;
  std::optional<int> at_least;
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    std::string argument = arguments[i];
    std::optional<std::string> attached;  // --option=value
    if (argument.rfind("--", 0) == 0 && argument.find('=') != std::string::npos) {
      attached = argument.substr(argument.find('=') + 1);
      argument = argument.substr(0, argument.find('='));
    }
    const auto value = [&]() -> std::string {
      if (attached) return *attached;
      if (i + 1 >= arguments.size()) throw UsageError(argument + " expects a value");
      return arguments[++i];
    };
    const auto pick_only = [&] {
      if (options.command != "pick") throw UsageError(argument + " is an option of pick only");
    };
    if (argument == "-h" || argument == "--help" || argument == "--version") {
      options.command = argument == "--version" ? "version" : "help";
      return options;
    }
    if (argument == "--json") {
      options.json = true;
    } else if (options.command.empty() && argument.rfind('-', 0) != 0) {
      if (argument != "list" && argument != "explain" && argument != "pick")
        throw UsageError("unknown command \"" + argument + "\" (commands: list, explain, pick)");
      options.command = argument;
    } else if (argument == "-n" || argument == "--count") {
      pick_only();
      const int count = parse_count(argument, value(), 1);
      options.criteria.at_least = count;
      options.criteria.at_most = count;
      options.count_given = true;
    } else if (argument == "--at-least") {
      pick_only();
      at_least = parse_count(argument, value(), 0);
    } else if (argument == "--at-most") {
      pick_only();
      options.criteria.at_most = parse_count(argument, value(), 1);
    } else if (argument == "--all") {
      pick_only();
      all = true;
    } else if (argument == "--min-free") {
      pick_only();
      try {
        options.criteria.min_free_memory = value();
      } catch (const gpusel::Error& error) {
        throw UsageError(std::string("--min-free: ") + error.what());
      }
    } else if (argument == "--max-util") {
      pick_only();
      const std::string text = value();
      const int percent = parse_count(argument, text, 0);
      if (percent > 100) throw UsageError("--max-util expects a percentage from 0 to 100, got \"" + text + "\"");
      options.criteria.max_utilization = percent;
    } else if (argument == "--allow-other-users") {
      pick_only();
      options.criteria.allow_other_users = true;
    } else if (argument == "--exclude") {
      pick_only();
      for (const std::string& name : split_list(value())) options.criteria.exclude.push_back(name);
    } else if (argument == "--order") {
      pick_only();
      const std::string order = value();
      if (order == "free")
        options.criteria.order = gpusel::PickOrder::most_free_memory;
      else if (order == "util")
        options.criteria.order = gpusel::PickOrder::least_utilized;
      else if (order == "index")
        options.criteria.order = gpusel::PickOrder::index;
      else
        throw UsageError("--order expects free, util or index, got \"" + order + "\"");
    } else if (argument == "--format") {
      pick_only();
      const std::string format = value();
      if (format != "index" && format != "uuid")
        throw UsageError("--format expects index or uuid, got \"" + format + "\"");
      options.print_uuids = format == "uuid";
    } else if (argument == "--whole-machine") {
      pick_only();
      options.criteria.only_visible = false;
    } else {
      throw UsageError("unknown option \"" + argument + "\"" +
                       (options.command.empty() ? " (give a command first: list, explain, pick)" : ""));
    }
  }
  if (options.command.empty()) throw UsageError("no command given (commands: list, explain, pick)");
  if (options.count_given && (all || at_least)) throw UsageError("-n cannot be combined with --at-least or --all");
  if (at_least) {
    options.criteria.at_least = *at_least;
    if (!options.criteria.at_most && !all) options.criteria.at_most = *at_least;
  }
  if (all) {
    if (options.criteria.at_most) throw UsageError("--all cannot be combined with --at-most");
    options.criteria.at_most = gpusel::PickCriteria::all;
  }
  if (options.criteria.at_most && *options.criteria.at_most < options.criteria.at_least)
    throw UsageError("--at-most " + std::to_string(*options.criteria.at_most) + " is below --at-least " +
                     std::to_string(options.criteria.at_least));
  return options;
}

// --- output ----------------------------------------------------------------------------

std::string column(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

std::string describe_processes(const gpusel::Gpu& gpu) {
  if (!gpu.processes) return "unknown";
  if (gpu.processes->empty()) return "none";
  std::string text;
  for (const gpusel::GpuProcess& process : *gpu.processes)
    text += (text.empty() ? "" : "; ") + gpusel::detail::describe_process(process);
  return text;
}

std::string percent(const std::optional<int>& value) { return value ? std::to_string(*value) + "%" : "?"; }

std::string memory(const gpusel::Gpu& gpu) {
  const auto size = [](const std::optional<std::uint64_t>& bytes) {
    return bytes ? gpusel::format_memory_size(*bytes) : std::string("?");
  };
  return size(gpu.memory_used_bytes) + " / " + size(gpu.memory_total_bytes);
}

template <class Number>
void optional_value(JsonWriter& json, const char* key, const std::optional<Number>& value) {
  json.key(key);
  if (value)
    json.value(*value);
  else
    json.null();
}

void optional_text(JsonWriter& json, const char* key, const std::optional<std::string>& value) {
  json.key(key);
  if (value)
    json.value(*value);
  else
    json.null();
}

// The members of one GPU's object.
void gpu_members(JsonWriter& json, const gpusel::DeviceMap& map, int physical_index, const gpusel::Gpu& gpu) {
  optional_value(json, "logical", map.visible.logical(physical_index));
  json.key("physical_index").value(physical_index);
  json.key("nvml_index").value(gpu.nvml_index);
  json.key("name").value(gpu.name);
  json.key("uuid").value(gpu.uuid);
  json.key("pci_bus_id").value(gpu.pci_bus_id);
  json.key("compute_capability")
      .value(std::to_string(gpu.compute_capability_major) + "." + std::to_string(gpu.compute_capability_minor));
  json.key("mig_enabled").value(gpu.mig_enabled);
  optional_value(json, "memory_total_bytes", gpu.memory_total_bytes);
  optional_value(json, "memory_used_bytes", gpu.memory_used_bytes);
  optional_value(json, "memory_free_bytes", gpu.memory_free_bytes);
  optional_value(json, "utilization_percent", gpu.utilization_percent);
  json.key("processes");
  if (!gpu.processes) {
    json.null();
    return;
  }
  json.begin_array();
  for (const gpusel::GpuProcess& process : *gpu.processes) {
    json.begin_object();
    json.key("pid").value(process.pid);
    json.key("user").value(process.user);
    json.key("command").value(process.command);
    optional_value(json, "used_memory_bytes", process.used_memory_bytes);
    json.end_object();
  }
  json.end_array();
}

// Exit status and message for an inventory that is not ok.
int report_no_gpus(const gpusel::DeviceMap& map) {
  if (map.inventory.status == gpusel::InventoryStatus::query_failed) {
    std::cerr << "gpusel: NVML failed while reading the GPUs: " << map.inventory.reason << "\n";
    return kExitNvmlFailed;
  }
  std::cerr << "gpusel: no NVIDIA driver to ask, so no GPU can be seen: " << map.inventory.reason << "\n";
  return kExitNoDriver;
}

int run_list(const Options& options, const gpusel::DeviceMap& map) {
  if (!map.known()) return report_no_gpus(map);
  if (options.json) {
    JsonWriter json;
    json.begin_object();
    json.key("driver_version").value(map.inventory.driver_version);
    json.key("cuda_driver_version").value(map.inventory.cuda_driver_version);
    json.key("order_exact").value(map.order.exact);
    json.key("caveat").value(map.order.caveat);
    json.key("gpus").begin_array();
    for (int physical = 0; physical < map.order.count(); ++physical) {
      json.begin_object();
      gpu_members(json, map, physical, *map.physical_device(physical));
      json.end_object();
    }
    json.end_array().end_object();
    std::cout << json.str();
    return kExitOk;
  }
  std::size_t name_width = 4, uuid_width = 4;
  for (const gpusel::Gpu& gpu : map.inventory.gpus) {
    name_width = std::max(name_width, gpu.name.size());
    uuid_width = std::max(uuid_width, gpu.uuid.size());
  }
  std::cout << column("CUDA", 8) << column("PHYS", 6) << column("SMI", 5) << column("NAME", name_width + 2)
            << column("UUID", uuid_width + 2) << column("PCI BUS ID", 18) << column("MEMORY USED / TOTAL", 24)
            << column("UTIL", 6) << "PROCESSES\n";
  for (int physical = 0; physical < map.order.count(); ++physical) {
    const gpusel::Gpu& gpu = *map.physical_device(physical);
    const auto logical = map.visible.logical(physical);
    std::cout << column(logical ? "cuda:" + std::to_string(*logical) : "hidden", 8)
              << column(std::to_string(physical), 6) << column(std::to_string(gpu.nvml_index), 5)
              << column(gpu.name, name_width + 2) << column(gpu.uuid, uuid_width + 2) << column(gpu.pci_bus_id, 18)
              << column(memory(gpu), 24) << column(percent(gpu.utilization_percent), 6)
              << (gpu.mig_enabled ? "MIG mode; " : "") << describe_processes(gpu) << "\n";
  }
  if (map.inventory.gpus.empty()) std::cout << "(NVML sees no GPU)\n";
  if (!map.visible.ok() && !map.inventory.gpus.empty())
    std::cout << "No CUDA device is visible to this process: " << map.visible.reason() << "\n";
  if (!map.order.exact) std::cout << "Caution: " << map.order.caveat << ".\n";
  return kExitOk;
}

int run_explain(const Options& options, const gpusel::DeviceMap& map) {
  if (options.json) {
    JsonWriter json;
    json.begin_object();
    optional_text(json, "cuda_visible_devices", map.visible.variable());
    optional_text(json, "cuda_device_order", map.visible.device_order());
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
  } else {
    std::cout << gpusel::explain(map);
  }
  if (!map.known())
    return map.inventory.status == gpusel::InventoryStatus::query_failed ? kExitNvmlFailed : kExitNoDriver;
  return kExitOk;
}

int run_pick(const Options& options, const gpusel::DeviceMap& map) {
  if (!map.known()) return report_no_gpus(map);
  const std::string user = gpusel::detail::current_user();
  std::vector<gpusel::Candidate> assessed;
  try {
    assessed = gpusel::assess(options.criteria, map, user);
  } catch (const gpusel::Error& error) {
    std::cerr << "gpusel: " << error.what() << "\n";
    return kExitUsage;
  }
  std::vector<gpusel::Candidate> picked;
  std::string failure;
  try {
    picked = gpusel::pick(options.criteria, map, user);
  } catch (const gpusel::Error& error) {
    failure = error.what();
  }
  std::string value;
  for (const gpusel::Candidate& candidate : picked)
    value += (value.empty() ? "" : ",") +
             (options.print_uuids ? candidate.gpu.uuid : std::to_string(candidate.physical_index));

  if (options.json) {
    JsonWriter json;
    json.begin_object();
    json.key("criteria").value(gpusel::describe(options.criteria));
    json.key("ok").value(failure.empty());
    json.key("error").value(failure);
    json.key("cuda_visible_devices").value(value);
    json.key("picked").begin_array();
    for (const gpusel::Candidate& candidate : picked) {
      json.begin_object();
      gpu_members(json, map, candidate.physical_index, candidate.gpu);
      json.end_object();
    }
    json.end_array();
    json.key("assessed").begin_array();
    for (const gpusel::Candidate& candidate : assessed) {
      json.begin_object();
      gpu_members(json, map, candidate.physical_index, candidate.gpu);
      json.key("fits").value(candidate.fits());
      json.key("rejected_because").begin_array();
      for (const std::string& reason : candidate.rejected_because) json.value(reason);
      json.end_array();
      json.end_object();
    }
    json.end_array().end_object();
    std::cout << json.str();
  } else if (failure.empty()) {
    std::cout << value << "\n";
  }
  if (!failure.empty()) {
    std::cerr << "gpusel: " << failure << "\n";
    return kExitNothingFits;
  }
  if (!options.print_uuids && !map.order.exact)
    std::cerr << "gpusel: caution: " << map.order.caveat << "; --format uuid names the GPUs exactly\n";
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_arguments(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& error) {
    std::cerr << "gpusel: " << error.what() << "\nTry 'gpusel --help'.\n";
    return kExitUsage;
  }
  if (options.command == "help") {
    std::cout << kUsage;
    return kExitOk;
  }
  if (options.command == "version") {
    std::cout << "gpusel " << gpusel::version() << "\n";
    return kExitOk;
  }
  try {
    const gpusel::DeviceMap map = gpusel::visible_devices(
        options.command == "explain" ? gpusel::InventoryOptions() : gpusel::InventoryOptions::with_usage());
    if (options.command == "list") return run_list(options, map);
    if (options.command == "explain") return run_explain(options, map);
    return run_pick(options, map);
  } catch (const std::exception& error) {
    std::cerr << "gpusel: " << error.what() << "\n";
    return kExitNvmlFailed;
  }
}
