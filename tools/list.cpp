// gpusel list: the machine's GPUs as a table, or as JSON.
#include <gpusel/machine/lease.hpp>
#include <gpusel/machine/topology.hpp>
#include <gpusel/machine/wait_for_gpus.hpp>
#include <gpusel/memory_size.hpp>
#include <gpusel/text.hpp>

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "devices.hpp"
#include "output.hpp"

namespace gpusel_tool {
namespace {

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

// Each GPU's and MIG instance's lease, and why they cannot be read where the lease directory
// cannot be used (list still lists: Note [Leases] in gpusel/machine/lease.hpp).
struct Leases {
  LeaseStates states;
  std::string problem;
};

Leases read_leases(const gpusel::DeviceMap& map) {
  std::vector<std::string> uuids;
  for (const gpusel::Gpu& gpu : map.inventory.gpus) {
    if (!gpu.uuid.empty()) uuids.push_back(gpu.uuid);
    for (const gpusel::MigInstance& instance : gpu.mig_instances)
      if (!instance.uuid.empty()) uuids.push_back(instance.uuid);
  }
  Leases leases;
  try {
    std::vector<gpusel::LeaseState> states = gpusel::lease_states(uuids);
    for (std::size_t i = 0; i < uuids.size(); ++i) leases.states[uuids[i]] = std::move(states[i]);
  } catch (const gpusel::Error& error) {
    leases.problem = error_text(error);
  }
  return leases;
}

// The LEASE column: "free", who holds it ("alice (uid 1001): pid 4242 python3 since 2026-12-04 00:01:02"),
// "cannot be leased: ...", or "?" where the leases cannot be read.
std::string lease_text(const Leases& leases, const std::string& uuid) {
  const auto found = leases.states.find(uuid);
  if (found == leases.states.end()) return "?";
  const gpusel::LeaseState& lease = found->second;
  if (!lease.held) return lease.describe();
  std::string job = lease.this_job ? "this job, " : "";
  if (lease.member_took)  // Note [A job's members]
    job += (lease.member_pid ? "taken by pid " + std::to_string(*lease.member_pid) : std::string("taken")) + ", ";
  if (!lease.user) return job + lease.holder_text();
  return job + lease.user_text() + ": " + lease.holder_text();
}

// The jobs that wait in line for GPUs, and why they cannot be read (list still lists).
struct Waiters {
  std::vector<gpusel::WaitingJob> jobs;
  std::string problem;
};

Waiters read_waiters() {
  Waiters waiters;
  try {
    waiters.jobs = gpusel::waiting_jobs();
  } catch (const gpusel::Error& error) {
    waiters.problem = error_text(error);
  }
  return waiters;
}

// "waiting": each job in line, first arrived first; "waiting_problem": why the line cannot be read, or null.
void waiting_members(JsonWriter& json, const Waiters& waiters) {
  json.key("waiting").begin_array();
  for (const gpusel::WaitingJob& job : waiters.jobs) {
    json.begin_object();
    json.key("ticket").value(job.ticket);
    json.key("uid").value(static_cast<std::int64_t>(job.user));
    optional_value(json, "pid", job.pid ? std::optional<std::int64_t>(*job.pid) : std::nullopt);
    optional_value(json, "gpus", job.gpus ? std::optional<std::int64_t>(*job.gpus) : std::nullopt);
    json.key("since_unix").value(job.since);
    json.key("stopped").value(job.stopped);
    json.key("text").value(job.describe());
    json.end_object();
  }
  json.end_array();
  text_or_null(json, "waiting_problem", waiters.problem);
}

std::string percent(const std::optional<int>& value) { return value ? std::to_string(*value) + "%" : "?"; }

std::string memory(const gpusel::Gpu& gpu) {
  const auto size = [](const std::optional<std::uint64_t>& bytes) {
    return bytes ? gpusel::format_memory_size(*bytes) : std::string("?");
  };
  return size(gpu.memory_used_bytes) + " / " + size(gpu.memory_total_bytes);
}

void print_list_json(const gpusel::DeviceMap& map, bool links, const Leases& leases, const Waiters& waiters) {
  JsonWriter json;
  json.begin_object();
  json.key("driver_version").value(map.inventory.driver_version);
  json.key("cuda_driver_version").value(map.inventory.cuda_driver_version);
  json.key("order_exact").value(map.order.exact);
  json.key("caveat").value(map.order.caveat);
  json.key("gpus").begin_array();
  for (int physical = 0; physical < map.order.count(); ++physical) {
    json.begin_object();
    gpu_members(json, map, physical, *map.physical_device(physical), links, &leases.states);
    json.end_object();
  }
  json.end_array();
  text_or_null(json, "leases_problem", leases.problem);  // why no GPU's lease could be read (each "lease" is then null)
  waiting_members(json, waiters);
  allotment_member(json, map);
  json.end_object();
  std::cout << json.str();
}

// NVML's strings, escaped for the terminal (Note [Hostile text]) before their widths are measured.
std::string shown(const std::string& text) { return gpusel::escape_for_terminal(text); }

// A MIG instance's row names it in the NAME column: "MIG GI 1 CI 0".
std::string instance_label(const gpusel::MigInstance& instance) {
  return "  MIG GI " + std::to_string(instance.gpu_instance_id) + " CI " + std::to_string(instance.compute_instance_id);
}

std::string cpus(const gpusel::Gpu& gpu) {
  return gpu.cpu_affinity.empty() ? std::string("?") : gpusel::format_cpu_list(gpu.cpu_affinity);
}

// "Exclusive_Process mode; " where the driver limits who may use the GPU (nvidia-smi -c), "" in Default mode.
std::string compute_mode_note(const gpusel::Gpu& gpu) {
  if (!gpu.compute_mode || *gpu.compute_mode == gpusel::ComputeMode::default_mode) return {};
  return std::string(gpusel::describe(*gpu.compute_mode)) + " mode; ";
}

// The table of `gpusel list`: each GPU's label in this process and the columns' widths.
struct Table {
  std::vector<std::string> labels;            // this process's cuda:N, or "hidden"
  std::map<std::string, std::string> leases;  // the LEASE column's text, by UUID
  std::size_t label_width = 6, name_width = 4, uuid_width = 4, cpus_width = 4, index_width = 0, lease_width = 5;
  bool placement_known = false;  // NUMA and CPUS columns only where NVML tells either
};

Table table_of(const gpusel::DeviceMap& map, const Leases& leases) {
  Table table;
  const auto note_lease = [&](const std::string& uuid) {
    const std::string text = lease_text(leases, uuid);
    table.lease_width = std::max(table.lease_width, text.size());
    table.leases[uuid] = text;
  };
  for (int physical = 0; physical < map.order.count(); ++physical) {
    const auto logical = map.visible.logical(physical);
    table.labels.push_back(logical ? "cuda:" + std::to_string(*logical) : "hidden");
    table.label_width = std::max(table.label_width, table.labels.back().size());
  }
  for (const gpusel::Gpu& gpu : map.inventory.gpus) {
    table.placement_known = table.placement_known || gpu.numa_node || !gpu.cpu_affinity.empty();
    table.name_width = std::max(table.name_width, shown(gpu.name).size());
    table.uuid_width = std::max(table.uuid_width, shown(gpu.uuid).size());
    table.cpus_width = std::max(table.cpus_width, cpus(gpu).size());
    note_lease(gpu.uuid);
    for (const gpusel::MigInstance& instance : gpu.mig_instances) {
      note_lease(instance.uuid);
      table.name_width = std::max(table.name_width, instance_label(instance).size());
      table.uuid_width = std::max(table.uuid_width, shown(instance.uuid).size());
    }
  }
  table.index_width = std::max<std::size_t>(4, std::to_string(map.order.count()).size()) + 2;
  return table;
}

void print_header(const Table& table) {
  std::cout << Column{"CUDA", table.label_width + 2} << Column{"PHYS", table.index_width}
            << Column{"SMI", table.index_width - 1} << Column{"NAME", table.name_width + 2}
            << Column{"UUID", table.uuid_width + 2} << Column{"PCI BUS ID", 18} << Column{"MEMORY USED / TOTAL", 24}
            << Column{"UTIL", 6};
  if (table.placement_known) std::cout << Column{"NUMA", 6} << Column{"CPUS", table.cpus_width + 2};
  std::cout << Column{"LEASE", table.lease_width + 2} << "PROCESSES\n";
}

// The row of GPU `physical`, and a row for each of its MIG instances.
void print_rows(const Table& table, const gpusel::DeviceMap& map, int physical) {
  const gpusel::Gpu& gpu = *map.physical_device(physical);
  std::cout << Column{table.labels[static_cast<std::size_t>(physical)], table.label_width + 2}
            << Column{std::to_string(physical), table.index_width}
            << Column{std::to_string(gpu.nvml_index), table.index_width - 1}
            << Column{shown(gpu.name), table.name_width + 2} << Column{shown(gpu.uuid), table.uuid_width + 2}
            << Column{shown(gpu.pci_bus_id), 18} << Column{memory(gpu), 24}
            << Column{percent(gpu.utilization_percent), 6};
  if (table.placement_known)
    std::cout << Column{gpu.numa_node ? std::to_string(*gpu.numa_node) : std::string("?"), 6}
              << Column{cpus(gpu), table.cpus_width + 2};
  std::cout << Column{table.leases.at(gpu.uuid), table.lease_width + 2};
  std::cout << (gpu.mig_enabled ? "MIG mode; " : "") << compute_mode_note(gpu)
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
    std::cout << Column{"", table.label_width + 2} << Column{"", table.index_width} << Column{"", table.index_width - 1}
              << Column{instance_label(instance), table.name_width + 2}
              << Column{shown(instance.uuid), table.uuid_width + 2} << Column{"", 18} << Column{memory(reading), 24}
              << Column{"", 6};
    if (table.placement_known) std::cout << Column{"", 6} << Column{"", table.cpus_width + 2};
    std::cout << Column{table.leases.at(instance.uuid), table.lease_width + 2} << describe_processes(reading) << "\n";
  }
}

// One UUID on several GPUs (or MIG instances), in CUDA's physical order: Note [One UUID, one GPU].
void print_shared_uuids(const gpusel::DeviceMap& map) {
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
}

}  // namespace

int run_list(const Arguments& arguments) {
  const std::optional<gpusel::DeviceMap> read = read_devices(usage(arguments.links), arguments.nvml_timeout);
  if (!read) return report_nvml_hung(arguments, kExitNvmlFailed);
  const gpusel::DeviceMap& map = *read;
  if (!map.known()) return report_no_gpus(map, arguments.json);
  const Leases leases = read_leases(map);
  const Waiters waiters = read_waiters();
  if (arguments.json) {
    print_list_json(map, arguments.links, leases, waiters);
    return kExitOk;
  }
  const Table table = table_of(map, leases);
  print_header(table);
  for (int physical = 0; physical < map.order.count(); ++physical) print_rows(table, map, physical);
  if (map.inventory.gpus.empty()) std::cout << "(NVML sees no GPU)\n";
  print_shared_uuids(map);
  if (!leases.problem.empty()) std::cout << "Leases cannot be read (LEASE ?): " << escape_lines(leases.problem) << "\n";
  for (const gpusel::WaitingJob& job : waiters.jobs) std::cout << "waiting: " << job.describe() << "\n";
  if (!waiters.problem.empty() && waiters.problem != leases.problem)
    std::cout << "The wait line cannot be read: " << escape_lines(waiters.problem) << "\n";
  if (!map.visible.ok() && !map.inventory.gpus.empty())
    std::cout << "No CUDA device is visible to this process: " << gpusel::escape_for_terminal(map.visible.reason())
              << "\n";
  print_allotment(map);                            // what Slurm and the container runtime gave, in their own names
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

}  // namespace gpusel_tool
