// The machine's physical GPUs as NVML sees them, without initializing CUDA.
//
//   gpusel::Inventory inventory = gpusel::query_inventory();
//   if (!inventory.ok()) std::cerr << inventory.reason << "\n";   // no driver: a state, not an error
//   for (const gpusel::Gpu& gpu : inventory.gpus) ...              // nvidia-smi's order
//
// NVML (libnvidia-ml.so.1, part of the driver) is loaded with dlopen, so
// programs do not link against the driver. Which library: the `nvml_library`
// option, else the environment variable GPUSEL_NVML_LIBRARY (a path, or "none"
// to act as if there were no NVML; ignored by a setuid program, read with
// secure_getenv), else libnvidia-ml.so.1.
// How the GPUs reach each other and the CPUs (GpuLink, describe, format_cpu_list)
// is gpusel/machine/topology.hpp, which this header includes. What CUDA's indices mean
// (CudaPhysicalOrder, cuda_physical_order) is gpusel/machine/physical_order.hpp, above
// this header.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/error.hpp"
#include "gpusel/machine/topology.hpp"
#include "gpusel/memory_size.hpp"
#include "gpusel/visible_devices.hpp"

namespace gpusel {

// A process running CUDA work on a GPU.
struct GpuProcess {
  unsigned int pid = 0;
  std::optional<std::uint64_t> used_memory_bytes;  // nullopt where NVML cannot tell (some containers)
  std::string user;     // from /proc: "" when the process is not visible here (another PID namespace)
  std::string command;  // /proc/<pid>/comm, "" when not visible
};

// One MIG instance of a GPU in MIG mode: a compute instance of a GPU instance,
// what CUDA shows in place of the GPU, named in CUDA_VISIBLE_DEVICES by its UUID.
// NVML reads it through its MIG device handle (Note [MIG instances]).
struct MigInstance {
  std::string uuid;                      // "MIG-d9a47cfb-d1f2-d08c-b40e-0812b597ae69"
  unsigned int gpu_instance_id = 0;      // nvidia-smi's GI ID
  unsigned int compute_instance_id = 0;  // nvidia-smi's CI ID
  // Usage, read when InventoryOptions::usage is set and NVML could tell. The memory is
  // the GPU instance's (its compute instances share it).
  std::optional<std::uint64_t> memory_total_bytes;
  std::optional<std::uint64_t> memory_used_bytes;
  std::optional<std::uint64_t> memory_free_bytes;
  std::optional<std::vector<GpuProcess>> processes;  // on this instance; nullopt when NVML could not list them
};

// Who may create a CUDA context on a GPU, as its administrator set it
// (`nvidia-smi -c`): NVML's nvmlComputeMode_t, with its values. The driver
// enforces it, machine-wide and for every user: the alternative to leases where
// an administrator wants it (Note [Compute modes in picking] in pick.hpp).
enum class ComputeMode {
  default_mode = 0,       // any number of processes ("Default")
  exclusive_thread = 1,   // one thread of one process (NVIDIA deprecated it for exclusive_process)
  prohibited = 2,         // no process at all
  exclusive_process = 3,  // one process, any number of its threads
};

// nvidia-smi's word for `mode`: "Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process".
GPUSEL_API const char* describe(ComputeMode mode) noexcept;

// One physical GPU: the one record gpusel keeps of it (CUDA's physical order
// and the visible map refer to it by position, never copy it).
struct Gpu {
  int nvml_index = 0;                // nvidia-smi's number: PCI bus order
  std::string uuid;                  // "GPU-f9ee9551-5061-9acc-ea2a-e3926e258ba9"
  std::string name;                  // "NVIDIA H200"
  std::string pci_bus_id;            // "00000000:17:00.0"
  int compute_capability_major = 0;  // 0 when NVML cannot tell
  int compute_capability_minor = 0;
  int minor_number = -1;     // the N of its /dev/nvidiaN (nvmlDeviceGetMinorNumber); -1 when NVML cannot tell
  bool mig_enabled = false;  // CUDA then shows MIG instances, not this GPU
  // With mig_enabled, the MIG instances configured on it, in NVML's order (nvidia-smi -L's).
  std::vector<MigInstance> mig_instances;
  // Usage, read when InventoryOptions::usage is set and NVML could tell:
  std::optional<std::uint64_t> memory_total_bytes;
  std::optional<std::uint64_t> memory_used_bytes;
  std::optional<std::uint64_t> memory_free_bytes;
  // Memory the driver reserves, apart from `used` (NVML's v2 memory call); nullopt with
  // drivers that lack it, whose `used` then includes it.
  std::optional<std::uint64_t> memory_reserved_bytes;
  std::optional<int> utilization_percent;            // of time a kernel ran, over NVML's last sample period
  std::optional<int> memory_utilization_percent;     // of time memory was read or written
  std::optional<std::vector<GpuProcess>> processes;  // compute processes; nullopt when NVML could not list them
  std::optional<ComputeMode> compute_mode;           // nullopt when NVML could not tell
  // Where it sits, read with usage (Note [GPU topology] in gpusel/machine/topology.hpp):
  std::optional<int> numa_node;   // its NUMA node (nvmlDeviceGetNumaNodeId); nullopt when NVML cannot tell
  std::vector<int> cpu_affinity;  // the CPUs near it, ascending (nvmlDeviceGetCpuAffinity); empty: unknown
  std::vector<GpuLink> links;     // links[i]: how it reaches the GPU nvidia-smi numbers i; empty: not read
  // Why NVML's usage readings of this GPU cannot be true, "" when they can: more
  // than 100% utilization, more memory free or used than in total, more than
  // 4096 compute processes (gpusel reads no more). Such readings are left unset,
  // and pick rejects the GPU.
  std::string impossible_readings;
};

enum class InventoryStatus {
  ok,                 // NVML answered
  disabled,           // GPUSEL_NVML_LIBRARY=none
  library_not_found,  // no NVML: no NVIDIA driver, or none exposed to this container
  library_unusable,   // an NVML too old for the functions gpusel needs
  init_failed,        // nvmlInit failed (e.g. the kernel module is not loaded)
  query_failed,       // a GPU could not be read; `gpus` holds those read before it
};

// What query_inventory reads. The default is each GPU's identity only (index,
// UUID, name, PCI bus id, compute capability, MIG mode and MIG instances), which
// is all that visible_devices() needs; usage (memory, utilization, processes, and
// where each GPU sits: NUMA node, CPUs, links between GPUs) costs more calls and
// /proc reads per GPU:
//   gpusel::query_inventory(gpusel::InventoryOptions::with_usage())
struct InventoryOptions {
  std::string nvml_library;  // "" = GPUSEL_NVML_LIBRARY, else "libnvidia-ml.so.1"; "none" = no NVML
  bool usage = false;        // also read memory, utilization, compute processes and topology
  // With usage: also how each pair of GPUs is linked (Gpu::links), N(N-1)/2 pairs of two
  // NVML calls each, the one part of the inventory that grows faster than the GPUs.
  // false leaves every Gpu::links empty; pick() and the gpusel command read links
  // only when PickPlacement::connected (or `list --links`) asks for them.
  bool links = true;

  // Identity and usage.
  static InventoryOptions with_usage() {
    InventoryOptions options;
    options.usage = true;
    return options;
  }
};

struct Inventory {
  InventoryStatus status = InventoryStatus::library_not_found;
  std::string reason;           // why not ok(), in words
  std::string nvml_library;     // the library asked for
  std::string driver_version;   // "580.159.04", "" when unknown
  int cuda_driver_version = 0;  // the CUDA version the driver supports, 13000 for 13.0; 0 when unknown
  std::vector<Gpu> gpus;        // in nvidia-smi's order

  bool ok() const noexcept { return status == InventoryStatus::ok; }
  // The first GPU with exactly this UUID (a broken NVML may report one twice), or nullptr.
  GPUSEL_API const Gpu* find_uuid(std::string_view uuid) const noexcept;
  // Compares the numbers, so "0000:17:00.0" (CUDA's form) finds "00000000:17:00.0" (NVML's).
  GPUSEL_API const Gpu* find_pci_bus_id(std::string_view pci_bus_id) const noexcept;
};

// Reads the inventory: identity only unless options.usage. A missing or failing
// NVML is reported in the result's status and reason, and so is an NVML that
// reports more than detail::kMaxGpus (1024) GPUs (query_failed, gpus empty: no
// machine has as many, and reading them would cost what they say); this throws
// nothing but std::bad_alloc.
[[nodiscard]] GPUSEL_API Inventory query_inventory(const InventoryOptions& options = {});

// How `a` reaches `b` (two GPUs of one inventory read with usage): GpuLink::unknown
// when NVML could not tell, or for a GPU and itself. Part of the topology
// (gpusel/machine/topology.hpp), but declared here, with the Gpu whose links it reads:
// topology.hpp sits beneath this header.
GPUSEL_API GpuLink link_between(const Gpu& a, const Gpu& b) noexcept;

// Note [MIG instances]
// ~~~~~~~~~~~~~~~~~~~~
// A GPU in MIG mode is split into GPU instances (memory and compute slices), each
// holding one or more compute instances; NVML names each compute instance a "MIG
// device" and gives it a handle (nvmlDeviceGetMigDeviceHandleByIndex, over
// nvmlDeviceGetMaxMigDeviceCount slots, of which the empty ones answer
// NVML_ERROR_NOT_FOUND), a "MIG-" UUID, and the memory and processes of its GPU
// instance. What is known of CUDA (NVIDIA's MIG user guide): the runtime shows a
// GPU in MIG mode only as its MIG instances, never whole; CUDA_VISIBLE_DEVICES names
// them by their MIG- UUIDs; and CUDA 11 and 12 enumerate a single MIG instance per
// process, whatever the variable lists. gpusel does not see CUDA's enumeration:
// which instance a process whose variable names several, or names the GPU by index,
// ends up on is CUDA's to decide. gpusel reads no utilization per instance: NVML
// does not measure it. No peer-to-peer path joins MIG instances (the guide: no
// P2P, NVLink or PCIe, in MIG mode), so topology leaves them out.

namespace detail {

// The NVML library query_inventory opens: InventoryOptions::nvml_library, else
// GPUSEL_NVML_LIBRARY (read with secure_getenv), else libnvidia-ml.so.1.
GPUSEL_API std::string nvml_library_path(const InventoryOptions& options);

// The user running `pid`, from /proc/<pid>/status: "" when the process is not
// visible from here, the uid's number when it has no name.
GPUSEL_API std::string process_user(unsigned int pid);

}  // namespace detail

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/inventory-inl.hpp"
#endif
