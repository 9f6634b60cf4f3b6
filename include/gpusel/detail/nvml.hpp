// NVML, loaded at run time with dlopen: gpusel has no link dependency on the
// driver. Only the few functions and structs the inventory reads are declared
// here, with the layouts of nvml.h (which the CUDA toolkit does not always ship).
#pragma once

#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <string>

namespace gpusel::detail::nvml {

using Return = int;  // nvmlReturn_t
struct DeviceOpaque;
using Device = DeviceOpaque*;  // nvmlDevice_t

constexpr Return kSuccess = 0;
constexpr Return kErrorNotSupported = 3;
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
  Return (*driver_version)(char*, unsigned int) = nullptr;                     // optional
  Return (*cuda_driver_version)(int*) = nullptr;                               // optional (_v2)
  const Library* next = nullptr;  // the library loaded before this one (see load())

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

// Loads and initializes the NVML at `path` (a file name searched the usual way,
// or a path). A library that loaded and initialized stays so for the life of
// the process, shared by every caller (nvmlInit is slow, and NVML is
// thread-safe); a failure is not remembered, so a later call tries again.
inline LoadResult load(const std::string& path) {
  // Never destroyed: a query from another static object's destructor must still work.
  // The loaded libraries form a list, newest first: a process loads one NVML, or a
  // few in tests, so a search by path needs no map.
  static std::mutex& mutex = *new std::mutex;
  static const Library* loaded = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  for (const Library* known = loaded; known != nullptr; known = known->next)
    if (known->path == path) return {known, LoadStatus::loaded, {}};

  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return {nullptr, LoadStatus::not_found,
            "NVML (" + path + ") could not be loaded: " + (error != nullptr ? error : "")};
  }
  auto library = std::make_unique<Library>();  // before nvmlInit: no allocation can fail after it
  library->handle = handle;
  library->path = path;
  const char* missing = nullptr;
  if (!bind(handle, "nvmlInit_v2", library->init))
    missing = "nvmlInit_v2";
  else if (!bind(handle, "nvmlErrorString", library->error_string))
    missing = "nvmlErrorString";
  else if (!bind(handle, "nvmlDeviceGetCount_v2", library->device_count))
    missing = "nvmlDeviceGetCount_v2";
  else if (!bind(handle, "nvmlDeviceGetHandleByIndex_v2", library->handle_by_index))
    missing = "nvmlDeviceGetHandleByIndex_v2";
  else if (!bind(handle, "nvmlDeviceGetUUID", library->uuid))
    missing = "nvmlDeviceGetUUID";
  else if (!bind(handle, "nvmlDeviceGetName", library->name))
    missing = "nvmlDeviceGetName";
  else if (!bind(handle, "nvmlDeviceGetPciInfo_v3", library->pci_info))
    missing = "nvmlDeviceGetPciInfo_v3";
  else if (!bind(handle, "nvmlDeviceGetMemoryInfo", library->memory_info))
    missing = "nvmlDeviceGetMemoryInfo";
  if (missing != nullptr) {
    // A library with neither of NVML's first two entry points is some other library, not an old NVML.
    const bool not_nvml =
        library->init == nullptr && library->error_string == nullptr && dlsym(handle, "nvmlErrorString") == nullptr;
    dlclose(handle);
    if (not_nvml)
      return {nullptr, LoadStatus::unusable,
              "NVML (" + path + ") lacks nvmlInit_v2 and nvmlErrorString: " + path + " is not an NVML library"};
    return {nullptr, LoadStatus::unusable, "NVML (" + path + ") lacks " + missing + ": the driver is too old"};
  }
  bind(handle, "nvmlDeviceGetUtilizationRates", library->utilization);
  bind(handle, "nvmlDeviceGetComputeRunningProcesses_v3", library->compute_processes);
  bind(handle, "nvmlDeviceGetMigMode", library->mig_mode);
  bind(handle, "nvmlDeviceGetCudaComputeCapability", library->compute_capability);
  bind(handle, "nvmlSystemGetDriverVersion", library->driver_version);
  bind(handle, "nvmlSystemGetCudaDriverVersion_v2", library->cuda_driver_version);

  const Return status = library->init();
  if (status != kSuccess) {
    LoadResult failed{nullptr, LoadStatus::init_failed, "nvmlInit failed: " + library->describe(status)};
    dlclose(handle);
    return failed;
  }
  library->next = loaded;
  loaded = library.release();  // never freed, as said above
  return {loaded, LoadStatus::loaded, {}};
}

}  // namespace gpusel::detail::nvml
