// NVML, loaded at run time with dlopen: gpusel has no link dependency on the
// driver. Only the few functions and structs the inventory reads are declared
// here, with the layouts of nvml.h (which the CUDA toolkit does not always ship).
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <string>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel::detail::nvml {

using Return = int;  // nvmlReturn_t
struct DeviceOpaque;
using Device = DeviceOpaque*;  // nvmlDevice_t

constexpr Return kSuccess = 0;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorNotFound = 6;
constexpr Return kErrorInsufficientSize = 7;
constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE

struct PciInfo {  // nvmlPciInfo_t (v3)
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};

struct Memory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct MemoryV2 {  // nvmlMemory_v2_t: `used` leaves out the driver's reservation, as nvidia-smi shows it
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// nvmlMemory_v2 (NVML_STRUCT_VERSION(Memory, 2)): the struct's size and the version in the top byte.
constexpr unsigned int kMemoryV2Version = static_cast<unsigned int>(sizeof(MemoryV2)) | (2u << 24);

// nvmlGpuTopologyLevel_t: how far apart two GPUs are on the PCIe tree, nearest first.
constexpr int kTopologyInternal = 0;     // NVML_TOPOLOGY_INTERNAL: one board
constexpr int kTopologySingle = 10;      // NVML_TOPOLOGY_SINGLE: one PCIe switch
constexpr int kTopologyMultiple = 20;    // NVML_TOPOLOGY_MULTIPLE: several switches, no host bridge
constexpr int kTopologyHostBridge = 30;  // NVML_TOPOLOGY_HOSTBRIDGE: one host bridge
constexpr int kTopologyNode = 40;        // NVML_TOPOLOGY_NODE: one NUMA node, across host bridges
constexpr int kTopologySystem = 50;      // NVML_TOPOLOGY_SYSTEM: across NUMA nodes (CPU sockets)
constexpr int kP2pCapsIndexNvlink = 2;   // NVML_P2P_CAPS_INDEX_NVLINK (nvmlGpuP2PCapsIndex_t)
constexpr int kP2pStatusOk = 0;          // NVML_P2P_STATUS_OK (nvmlGpuP2PStatus_t)

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

struct ProcessInfo {  // nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 fills it
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

// The loaded library: required entry points are never null, optional ones may be.
struct Library {
  void* handle = nullptr;
  std::string path;
  Return (*init)() = nullptr;                                                  // nvmlInit_v2
  const char* (*error_string)(Return) = nullptr;                               // nvmlErrorString
  Return (*device_count)(unsigned int*) = nullptr;                             // nvmlDeviceGetCount_v2
  Return (*handle_by_index)(unsigned int, Device*) = nullptr;                  // nvmlDeviceGetHandleByIndex_v2
  Return (*uuid)(Device, char*, unsigned int) = nullptr;                       // nvmlDeviceGetUUID
  Return (*name)(Device, char*, unsigned int) = nullptr;                       // nvmlDeviceGetName
  Return (*pci_info)(Device, PciInfo*) = nullptr;                              // nvmlDeviceGetPciInfo_v3
  Return (*memory_info)(Device, Memory*) = nullptr;                            // nvmlDeviceGetMemoryInfo
  Return (*utilization)(Device, Utilization*) = nullptr;                       // optional
  Return (*compute_processes)(Device, unsigned int*, ProcessInfo*) = nullptr;  // optional (_v3)
  Return (*mig_mode)(Device, unsigned int*, unsigned int*) = nullptr;          // optional
  Return (*compute_capability)(Device, int*, int*) = nullptr;                  // optional
  Return (*minor_number)(Device, unsigned int*) = nullptr;                     // optional (N of /dev/nvidiaN)
  Return (*driver_version)(char*, unsigned int) = nullptr;                     // optional
  Return (*cuda_driver_version)(int*) = nullptr;                               // optional (_v2)
  Return (*memory_info_v2)(Device, MemoryV2*) = nullptr;                       // optional (drivers >= 510)
  // MIG (optional): a MIG device handle stands for one compute instance and answers
  // nvmlDeviceGetUUID ("MIG-..."), the memory calls and the process list for that instance.
  Return (*max_mig_device_count)(Device, unsigned int*) = nullptr;                // nvmlDeviceGetMaxMigDeviceCount
  Return (*mig_device_handle_by_index)(Device, unsigned int, Device*) = nullptr;  // ...MigDeviceHandleByIndex
  Return (*gpu_instance_id)(Device, unsigned int*) = nullptr;                     // nvmlDeviceGetGpuInstanceId
  Return (*compute_instance_id)(Device, unsigned int*) = nullptr;                 // nvmlDeviceGetComputeInstanceId
  // Topology (optional): the level is an nvmlGpuTopologyLevel_t, the P2P index and status enums, as int.
  Return (*topology_common_ancestor)(Device, Device, int*) = nullptr;      // nvmlDeviceGetTopologyCommonAncestor
  Return (*p2p_status)(Device, Device, int, int*) = nullptr;               // nvmlDeviceGetP2PStatus
  Return (*numa_node_id)(Device, unsigned int*) = nullptr;                 // nvmlDeviceGetNumaNodeId (drivers >= 545)
  Return (*cpu_affinity)(Device, unsigned int, unsigned long*) = nullptr;  // nvmlDeviceGetCpuAffinity
  Return (*compute_mode)(Device, int*) = nullptr;  // nvmlDeviceGetComputeMode: an nvmlComputeMode_t, as int
  const Library* next = nullptr;                   // the library loaded before this one (see load())
#ifdef GPUSEL_DETAIL_TEST_LAYOUT_CHANGE
  int layout_change = 0;  // only in the state test's copy of another layout (tests/state/layout_host.cpp)
#endif

  std::string describe(Return status) const {
    const char* text = error_string != nullptr ? error_string(status) : nullptr;
    return std::string(text != nullptr ? text : "unknown NVML error") + " (NVML status " + std::to_string(status) + ")";
  }
};

enum class LoadStatus { loaded, not_found, unusable, init_failed };

struct LoadResult {
  const Library* library = nullptr;  // set when loaded
  LoadStatus status = LoadStatus::not_found;
  std::string reason;
};

template <typename Function>
bool bind(void* handle, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(handle, symbol));
  return function != nullptr;
}

// Note [Loading NVML without a lock]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// device_count() and the picking functions must work in a child forked before
// CUDA starts, and fork() copies only the calling thread: a lock another thread
// holds then stays held in the child forever. So the loader holds no lock
// across anything that can block or load code (dlopen, nvmlInit): no mutex, no
// function-local static's guard, no call_once. The loaded libraries are a list
// behind one constant-initialized atomic pointer; a caller that finds no
// library for its path loads one itself and publishes it with a
// compare-exchange. A child keeps what was published at the fork and loads
// again what was not, so there is no pthread_atfork handler (one that made
// fork() wait for loads would deadlock: the driver may fork a helper inside
// nvmlInit). A child forked during another thread's nvmlInit relies on NVML.

// Loads and initializes the NVML at `path` (a file name searched the usual way,
// or a path). A library that loaded and initialized stays so for the life of
// the process, shared by every caller (nvmlInit is slow, and NVML is
// thread-safe); a failure is not remembered, so a later call tries again.
// Takes no lock (Note [Loading NVML without a lock]).
GPUSEL_API LoadResult load(const std::string& path);

}  // namespace gpusel::detail::nvml

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/system/nvml-inl.hpp"
#endif
