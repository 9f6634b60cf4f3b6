// The definitions of gpusel/machine/inventory.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/inventory.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unordered_map>
#include <utility>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/core/pci_address.hpp"
#include "gpusel/machine/detail/system/nvml.hpp"
#include "gpusel/machine/detail/system/nvml_topology.hpp"

namespace gpusel {

namespace detail {

// Who chose the NVML library: "InventoryOptions::nvml_library", "GPUSEL_NVML_LIBRARY", or nullptr for the default.
inline const char* nvml_library_chooser(const InventoryOptions& options) {
  if (!options.nvml_library.empty()) return "InventoryOptions::nvml_library";
  if (auto variable = environment_variable("GPUSEL_NVML_LIBRARY", Trust::secure); variable && !variable->empty())
    return "GPUSEL_NVML_LIBRARY";
  return nullptr;
}

GPUSEL_API std::string nvml_library_path(const InventoryOptions& options) {
  if (!options.nvml_library.empty()) return options.nvml_library;
  if (auto variable = environment_variable("GPUSEL_NVML_LIBRARY", Trust::secure); variable && !variable->empty())
    return *variable;
  return "libnvidia-ml.so.1";
}

// The text NVML wrote into `buffer`: up to its first NUL, and never past its
// `size` bytes, for an NVML that fills the buffer without terminating it.
inline std::string nvml_text(const char* buffer, std::size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

// The first line of a small /proc file, "" when it cannot be read.
inline std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// The real uid running `pid`, from /proc/<pid>/status; nullopt when the process
// is not visible from here.
inline std::optional<unsigned long> process_uid(unsigned int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (in && std::getline(in, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    unsigned long uid = 0;
    if (std::sscanf(line.c_str() + 4, "%lu", &uid) != 1) return std::nullopt;
    return uid;
  }
  return std::nullopt;
}

// A user's name, or the uid's number when it has none.
inline std::string user_name(unsigned long uid) {
  passwd entry{};
  passwd* found = nullptr;
  char buffer[1024];
  if (getpwuid_r(static_cast<uid_t>(uid), &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr)
    return found->pw_name;
  return std::to_string(uid);
}

// The user running `pid`, from /proc/<pid>/status: "" when the process is not
// visible from here, the uid's number when it has no name.
GPUSEL_API std::string process_user(unsigned int pid) {
  const std::optional<unsigned long> uid = process_uid(pid);
  return uid ? user_name(*uid) : std::string();
}

// The owners and commands of the processes one query_inventory has looked up, so that
// each process (listed on several GPUs or MIG instances) and each user (the
// password database may be a network service) is looked up once per query.
struct ProcessOwners {
  std::unordered_map<unsigned int, std::pair<std::string, std::string>> by_pid;  // user, command
  std::unordered_map<unsigned long, std::string> names;                          // by uid

  const std::pair<std::string, std::string>& of(unsigned int pid) {
    const auto [known, inserted] = by_pid.try_emplace(pid);
    if (!inserted) return known->second;
    if (const std::optional<unsigned long> uid = process_uid(pid)) {
      const auto [name, new_name] = names.try_emplace(*uid);
      if (new_name) name->second = user_name(*uid);
      known->second.first = name->second;
      known->second.second = read_first_line("/proc/" + std::to_string(pid) + "/comm");
    }
    return known->second;
  }
};

// The most GPUs read: what an NVML reports decides how much is read and kept (and
// the links, with InventoryOptions::links, grow as its square), and no machine has
// this many (an NVLink domain of 576 GPUs spans many machines, each seeing its own).
inline constexpr unsigned int kMaxGpus = 1024;

// The most compute processes read per GPU: what an NVML reports decides how much
// is allocated, and no GPU runs thousands (each needs a context of its own).
inline constexpr unsigned int kMaxComputeProcesses = 4096;

// Adds `why` to the GPU's impossible readings.
inline void impossible_reading(Gpu& gpu, const std::string& why) {
  gpu.impossible_readings += (gpu.impossible_readings.empty() ? "NVML reports " : "; ") + why;
}

// The compute processes on `device`; nullopt when NVML cannot list them, or
// reports more than kMaxComputeProcesses (said in gpu.impossible_readings).
inline std::optional<std::vector<GpuProcess>> read_processes(const nvml::Library& library, nvml::Device device,
                                                             Gpu& gpu, ProcessOwners& owners) {
  std::vector<nvml::ProcessInfo> infos;
  unsigned int count = 0;
  nvml::Return status = library.compute_processes(device, &count, nullptr);
  for (int attempt = 0; attempt < 4 && status == nvml::kErrorInsufficientSize; ++attempt) {
    if (count > kMaxComputeProcesses) {
      impossible_reading(gpu, std::to_string(count) + " compute processes, more than the " +
                                  std::to_string(kMaxComputeProcesses) + " gpusel reads");
      return std::nullopt;
    }
    // Room for a few more: processes may start between the two calls.
    infos = std::vector<nvml::ProcessInfo>(std::min(count + 8u, kMaxComputeProcesses));
    count = static_cast<unsigned int>(infos.size());
    status = library.compute_processes(device, &count, infos.data());
  }
  if (status != nvml::kSuccess) return std::nullopt;
  std::vector<GpuProcess> processes(std::min<std::size_t>(count, infos.size()));
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const nvml::ProcessInfo& info = infos[i];
    GpuProcess& process = processes[i];
    process.pid = info.pid;
    if (info.used_gpu_memory != nvml::kValueNotAvailable) process.used_memory_bytes = info.used_gpu_memory;
    const auto& [user, command] = owners.of(info.pid);
    process.user = user;
    process.command = command;
  }
  return processes;
}

inline void read_usage(const nvml::Library& library, nvml::Device device, Gpu& gpu, ProcessOwners& owners) {
  nvml::MemoryV2 memory_v2{};
  memory_v2.version = nvml::kMemoryV2Version;
  nvml::Memory memory{};
  const auto impossible_memory = [&gpu](std::uint64_t total, std::uint64_t used, std::uint64_t free) {
    if (free <= total && used <= total) return false;
    impossible_reading(gpu, format_memory_size(free) + " free and " + format_memory_size(used) + " used of " +
                                format_memory_size(total) + " total memory");
    return true;
  };
  if (library.memory_info_v2 != nullptr && library.memory_info_v2(device, &memory_v2) == nvml::kSuccess) {
    if (!impossible_memory(memory_v2.total, memory_v2.used, memory_v2.free)) {
      gpu.memory_total_bytes = memory_v2.total;  // `used` as nvidia-smi shows it, the reservation apart
      gpu.memory_used_bytes = memory_v2.used;
      gpu.memory_free_bytes = memory_v2.free;
      gpu.memory_reserved_bytes = memory_v2.reserved;
    }
  } else if (library.memory_info(device, &memory) == nvml::kSuccess) {
    if (!impossible_memory(memory.total, memory.used, memory.free)) {
      gpu.memory_total_bytes = memory.total;
      gpu.memory_used_bytes = memory.used;
      gpu.memory_free_bytes = memory.free;
    }
  }
  nvml::Utilization utilization{};
  if (library.utilization != nullptr && library.utilization(device, &utilization) == nvml::kSuccess) {
    if (utilization.gpu > 100 || utilization.memory > 100) {
      impossible_reading(gpu, std::to_string(utilization.gpu) + "% utilization and " +
                                  std::to_string(utilization.memory) + "% memory utilization");
    } else {
      gpu.utilization_percent = static_cast<int>(utilization.gpu);
      gpu.memory_utilization_percent = static_cast<int>(utilization.memory);
    }
  }
  if (library.compute_processes != nullptr) gpu.processes = read_processes(library, device, gpu, owners);
  int mode = 0;  // a value NVML adds later stays unknown
  if (library.compute_mode != nullptr && library.compute_mode(device, &mode) == nvml::kSuccess && mode >= 0 &&
      mode <= static_cast<int>(ComputeMode::exclusive_process))
    gpu.compute_mode = static_cast<ComputeMode>(mode);
}

// The MIG instances of `device` (a GPU in MIG mode), their identity, and their memory
// and processes when `usage` (Note [MIG instances]). A slot NVML cannot read is left out.
inline std::vector<MigInstance> read_mig_instances(const nvml::Library& library, nvml::Device device, Gpu& gpu,
                                                   bool usage, ProcessOwners& owners) {
  std::vector<MigInstance> instances;
  unsigned int slots = 0;
  if (library.max_mig_device_count == nullptr || library.mig_device_handle_by_index == nullptr ||
      library.max_mig_device_count(device, &slots) != nvml::kSuccess)
    return instances;
  for (unsigned int slot = 0; slot < std::min(slots, 64u); ++slot) {
    nvml::Device handle = nullptr;
    if (library.mig_device_handle_by_index(device, slot, &handle) != nvml::kSuccess) continue;  // an empty slot
    char text[96] = {};
    if (library.uuid(handle, text, sizeof text) != nvml::kSuccess) continue;
    MigInstance instance;
    instance.uuid = nvml_text(text, sizeof text);
    if (library.gpu_instance_id != nullptr) (void)library.gpu_instance_id(handle, &instance.gpu_instance_id);
    if (library.compute_instance_id != nullptr)
      (void)library.compute_instance_id(handle, &instance.compute_instance_id);
    if (usage) {
      Gpu reading;  // the GPU's readers, on the instance's handle: they answer for the instance
      read_usage(library, handle, reading, owners);
      instance.memory_total_bytes = reading.memory_total_bytes;
      instance.memory_used_bytes = reading.memory_used_bytes;
      instance.memory_free_bytes = reading.memory_free_bytes;
      instance.processes = std::move(reading.processes);
      if (!reading.impossible_readings.empty())
        impossible_reading(gpu, "for MIG instance " + instance.uuid + ": " +
                                    reading.impossible_readings.substr(std::string("NVML reports ").size()));
    }
    instances.push_back(std::move(instance));
  }
  return instances;
}

}  // namespace detail

GPUSEL_API const char* describe(ComputeMode mode) noexcept {
  switch (mode) {
    case ComputeMode::default_mode:
      return "Default";
    case ComputeMode::exclusive_thread:
      return "Exclusive_Thread";
    case ComputeMode::prohibited:
      return "Prohibited";
    case ComputeMode::exclusive_process:
      return "Exclusive_Process";
  }
  return "unknown";
}

GPUSEL_API const Gpu* Inventory::find_uuid(std::string_view uuid) const noexcept {
  for (const Gpu& gpu : gpus)
    if (gpu.uuid == uuid) return &gpu;
  return nullptr;
}

GPUSEL_API const Gpu* Inventory::find_pci_bus_id(std::string_view pci_bus_id) const noexcept {
  const auto wanted = detail::pci_address(pci_bus_id);
  if (wanted.domain == ~0u) return nullptr;
  for (const Gpu& gpu : gpus)
    if (detail::pci_address(gpu.pci_bus_id) == wanted) return &gpu;
  return nullptr;
}

GPUSEL_API GpuLink link_between(const Gpu& a, const Gpu& b) noexcept {
  if (b.nvml_index < 0 || static_cast<std::size_t>(b.nvml_index) >= a.links.size() || a.nvml_index == b.nvml_index)
    return GpuLink::unknown;
  return a.links[static_cast<std::size_t>(b.nvml_index)];
}

namespace detail {

// Fills `inventory`'s status and reason for NVML that did not load (`load`), as chosen by `options`.
inline void report_load_failure(Inventory& inventory, const nvml::LoadResult& load, const InventoryOptions& options) {
  inventory.status = load.status == nvml::LoadStatus::not_found  ? InventoryStatus::library_not_found
                     : load.status == nvml::LoadStatus::unusable ? InventoryStatus::library_unusable
                                                                 : InventoryStatus::init_failed;
  inventory.reason = load.reason;
  // The default library missing means no driver; a library named on purpose failing says only that.
  if (const char* chooser = nvml_library_chooser(options))
    inventory.reason += std::string(" (the library ") + chooser + " names)";
  else if (load.status == nvml::LoadStatus::not_found)
    inventory.reason += " (no NVIDIA driver is installed, or it is not exposed to this container)";
}

// The GPUs NVML counts; nullopt, with `inventory`'s status and reason filled, when it cannot
// count them or counts more than gpusel reads.
inline std::optional<unsigned int> count_gpus(const nvml::Library& nvml, Inventory& inventory) {
  unsigned int count = 0;
  if (const auto status = nvml.device_count(&count); status != nvml::kSuccess) {
    inventory.status = InventoryStatus::query_failed;
    inventory.reason = "nvmlDeviceGetCount failed: " + nvml.describe(status);
    return std::nullopt;
  }
  if (count > kMaxGpus) {
    inventory.status = InventoryStatus::query_failed;
    inventory.reason = "nvmlDeviceGetCount reports " + std::to_string(count) + " GPUs, more than the " +
                       std::to_string(kMaxGpus) + " gpusel reads";
    return std::nullopt;
  }
  return count;
}

// Reads the GPU nvidia-smi numbers `index` into `gpu`, its handle into `device`: its
// identity, and its usage when `options` ask. Returns why it could not, "" when it could.
inline std::string read_gpu(const nvml::Library& nvml, unsigned int index, const InventoryOptions& options,
                            ProcessOwners& owners, nvml::Device& device, Gpu& gpu) {
  const auto failed = [&](const char* call, nvml::Return status) {
    return std::string(call) + " failed for the GPU nvidia-smi numbers " + std::to_string(index) + ": " +
           nvml.describe(status);
  };
  gpu.nvml_index = static_cast<int>(index);
  char text[96] = {};
  nvml::PciInfo pci{};
  if (auto status = nvml.handle_by_index(index, &device); status != nvml::kSuccess)
    return failed("nvmlDeviceGetHandleByIndex", status);
  if (auto status = nvml.uuid(device, text, sizeof text); status != nvml::kSuccess)
    return failed("nvmlDeviceGetUUID", status);
  gpu.uuid = nvml_text(text, sizeof text);
  if (auto status = nvml.name(device, text, sizeof text); status == nvml::kSuccess)
    gpu.name = nvml_text(text, sizeof text);
  if (auto status = nvml.pci_info(device, &pci); status != nvml::kSuccess)
    return failed("nvmlDeviceGetPciInfo", status);
  gpu.pci_bus_id = nvml_text(pci.bus_id, sizeof pci.bus_id);
  if (nvml.compute_capability != nullptr)
    (void)nvml.compute_capability(device, &gpu.compute_capability_major, &gpu.compute_capability_minor);
  if (unsigned int minor = 0; nvml.minor_number != nullptr && nvml.minor_number(device, &minor) == nvml::kSuccess)
    gpu.minor_number = static_cast<int>(minor);
  unsigned int current = 0, pending = 0;
  if (nvml.mig_mode != nullptr && nvml.mig_mode(device, &current, &pending) == nvml::kSuccess)
    gpu.mig_enabled = current == 1;
  if (options.usage) {
    read_usage(nvml, device, gpu, owners);
    gpu.numa_node = read_numa_node(nvml, device);  // where it sits (topology.hpp)
    gpu.cpu_affinity = read_cpu_affinity(nvml, device);
  }
  if (gpu.mig_enabled) gpu.mig_instances = read_mig_instances(nvml, device, gpu, options.usage, owners);
  return {};
}

// The links between every two of `gpus`, whose handles are `devices`.
inline void read_links(const nvml::Library& nvml, const std::vector<nvml::Device>& devices, std::vector<Gpu>& gpus) {
  for (std::size_t a = 0; a < devices.size(); ++a) gpus[a].links.assign(devices.size(), GpuLink::unknown);
  for (std::size_t a = 0; a < devices.size(); ++a)
    for (std::size_t b = a + 1; b < devices.size(); ++b)
      gpus[a].links[b] = gpus[b].links[a] = read_link(nvml, devices[a], devices[b]);
}

}  // namespace detail

GPUSEL_API Inventory query_inventory(const InventoryOptions& options) {
  Inventory inventory;
  inventory.nvml_library = detail::nvml_library_path(options);
  if (inventory.nvml_library == "none") {
    inventory.status = InventoryStatus::disabled;
    inventory.reason = "NVML is disabled (GPUSEL_NVML_LIBRARY=none)";
    return inventory;
  }
  const detail::nvml::LoadResult load = detail::nvml::load(inventory.nvml_library);
  if (load.library == nullptr) {
    detail::report_load_failure(inventory, load, options);
    return inventory;
  }
  const detail::nvml::Library& nvml = *load.library;
  char text[96] = {};
  if (nvml.driver_version != nullptr && nvml.driver_version(text, sizeof text) == detail::nvml::kSuccess)
    inventory.driver_version = detail::nvml_text(text, sizeof text);
  if (nvml.cuda_driver_version != nullptr) (void)nvml.cuda_driver_version(&inventory.cuda_driver_version);

  const std::optional<unsigned int> count = detail::count_gpus(nvml, inventory);
  if (!count) return inventory;
  detail::ProcessOwners owners;
  inventory.gpus.reserve(*count);
  std::vector<detail::nvml::Device> devices;  // the GPUs' handles, for the links between them
  for (unsigned int index = 0; index < *count; ++index) {
    detail::nvml::Device device = nullptr;
    Gpu gpu;
    if (std::string failure = detail::read_gpu(nvml, index, options, owners, device, gpu); !failure.empty()) {
      inventory.status = InventoryStatus::query_failed;
      inventory.reason = std::move(failure);
      return inventory;
    }
    inventory.gpus.push_back(std::move(gpu));
    devices.push_back(device);
  }
  if (options.usage && options.links) detail::read_links(nvml, devices, inventory.gpus);
  inventory.status = InventoryStatus::ok;
  return inventory;
}

}  // namespace gpusel
