// What the commands share of their output (output.hpp).
#include "output.hpp"

#include <gpusel/text.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>

#include "commands.hpp"
#include "devices.hpp"

namespace gpusel_tool {

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

std::string error_text(const gpusel::Error& error) { return error_text(std::string_view(error.what())); }

std::string error_text(std::string_view message) {
  constexpr std::string_view kPrefix = "gpusel: ";
  constexpr std::string_view kFunction = "gpusel::";  // "gpusel::pick: ": the function that threw
  if (message.substr(0, kPrefix.size()) == kPrefix) {
    message.remove_prefix(kPrefix.size());
  } else if (message.substr(0, kFunction.size()) == kFunction) {
    std::size_t end = kFunction.size();
    while (end < message.size() && (std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '_'))
      ++end;
    if (end > kFunction.size() && message.substr(end, 2) == ": ") message.remove_prefix(end + 2);
  }
  return std::string(message);
}

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

// "lease": `uuid`'s state in `leases` (null when unknown): held, by whose file, and a live
// process of the job (its name as text, and as hex: any bytes), or why none is named.
static void lease_member(JsonWriter& json, const std::string& uuid, const LeaseStates& leases) {
  json.key("lease");
  const auto found = leases.find(uuid);
  if (found == leases.end()) {
    json.null();
    return;
  }
  const gpusel::LeaseState& lease = found->second;
  json.begin_object();
  json.key("held").value(lease.held);
  json.key("this_job").value(lease.this_job);
  json.key("member_took").value(lease.member_took);
  optional_value(json, "member_pid", lease.member_pid ? std::optional<std::int64_t>(*lease.member_pid) : std::nullopt);
  text_or_null(json, "problem", lease.problem);
  json.key("lock_file");
  if (lease.held)
    json.value(lease.lock_file);
  else
    json.null();
  optional_value(json, "uid", lease.user ? std::optional<std::int64_t>(*lease.user) : std::nullopt);
  optional_value(json, "pid", lease.pid ? std::optional<std::int64_t>(*lease.pid) : std::nullopt);
  json.key("command");
  if (lease.pid) {
    json.value(lease.command);
    json.key("command_hex").value(hex_bytes(lease.command));
  } else {
    json.null();
    json.key("command_hex").null();
  }
  optional_value(json, "started_unix", lease.started);
  json.key("holder_unseen");
  if (lease.held && !lease.pid)
    json.value(lease.unseen);
  else
    json.null();
  json.key("text").value(lease.describe());
  json.end_object();
}

void mig_members(JsonWriter& json, const gpusel::MigInstance& instance, const LeaseStates* leases) {
  json.key("uuid").value(instance.uuid);
  json.key("gpu_instance_id").value(instance.gpu_instance_id);
  json.key("compute_instance_id").value(instance.compute_instance_id);
  optional_value(json, "memory_total_bytes", instance.memory_total_bytes);
  optional_value(json, "memory_used_bytes", instance.memory_used_bytes);
  optional_value(json, "memory_free_bytes", instance.memory_free_bytes);
  json.key("processes");
  process_array(json, instance.processes);
  if (leases) lease_member(json, instance.uuid, *leases);
}

void gpu_members(JsonWriter& json, const gpusel::DeviceMap& map, int physical_index, const gpusel::Gpu& gpu, bool links,
                 const LeaseStates* leases) {
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
    mig_members(json, instance, leases);
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
  json.key("compute_mode");  // nvidia-smi's word, null when NVML could not tell
  if (gpu.compute_mode)
    json.value(gpusel::describe(*gpu.compute_mode));
  else
    json.null();
  text_or_null(json, "impossible_readings", gpu.impossible_readings);
  json.key("processes");
  process_array(json, gpu.processes);
  if (leases) lease_member(json, gpu.uuid, *leases);
}

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
    json.key("command_hex").value(hex_bytes(process.command));  // exact: the kernel may cut UTF-8
    optional_value(json, "used_memory_bytes", process.used_memory_bytes);
    json.end_object();
  }
  json.end_array();
}

int no_gpus_status(const gpusel::Inventory& inventory) {
  return inventory.status == gpusel::InventoryStatus::query_failed ||
                 inventory.status == gpusel::InventoryStatus::init_failed
             ? kExitNvmlFailed
             : kExitNoDriver;
}

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

void allotment_member(JsonWriter& json, const gpusel::DeviceMap& map) {
  const gpusel::Allotment allotment = allotment_of(map);
  const auto text_or_null = [&](const char* key, const std::string& text) {
    optional_value(json, key, text.empty() ? std::nullopt : std::optional<std::string>(text));
  };
  const auto variable = [&](const char* key, const char* name) {
    const char* value = std::getenv(name);
    optional_value(json, key, value != nullptr ? std::optional<std::string>(value) : std::nullopt);
  };
  json.key("allotment").begin_object();
  text_or_null("scheduler", allotment.scheduler);
  text_or_null("step", allotment.step);
  optional_value(json, "gpus_on_node", allotment.gpus_on_node);
  variable("slurm_gpus_on_node", "SLURM_GPUS_ON_NODE");
  variable("slurm_step_gpus", "SLURM_STEP_GPUS");
  variable("slurm_job_gpus", "SLURM_JOB_GPUS");
  json.key("known").value(allotment.known());
  json.key("refusal").value(allotment.refusal);
  optional_value(json, "nvidia_visible_devices", allotment.nvidia_visible_devices);
  optional_value(json, "job_lease", allotment.job_lease);
  json.key("job_gpus").begin_array();
  for (const std::string& uuid : allotment.job_gpus) json.value(uuid);
  json.end_array();
  json.key("engine");  // who started this process, named from its variables (Note [Naming the engine])
  if (allotment.engine.known()) {
    json.begin_object();
    json.key("name").value(allotment.engine.name);
    json.key("role").value(allotment.engine.role);
    json.key("said").value(allotment.engine.said);
    text_or_null("worker", allotment.engine.worker);
    json.key("gives_gpus").value(allotment.engine.gives_gpus);
    json.end_object();
  } else {
    json.null();
  }
  json.key("text").value(allotment.describe());
  json.end_object();
}

void print_allotment(const gpusel::DeviceMap& map) { std::cout << allotment_of(map).describe(); }

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

}  // namespace gpusel_tool
