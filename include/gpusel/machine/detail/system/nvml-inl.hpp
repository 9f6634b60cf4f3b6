// The definitions of gpusel/machine/detail/system/nvml.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/detail/system/nvml.hpp"

#include <cstdint>
#include <memory>

#include "gpusel/detail/core/process_state.hpp"

namespace gpusel::detail::nvml {

// The list of loaded libraries this copy uses, newest first: the process's,
// unless it holds Libraries of another layout (Note [Layout signatures]).
GPUSEL_DETAIL_PER_OBJECT inline std::atomic<void*>& nvml_libraries() noexcept {
  Slot& slot = process_state().nvml_libraries;
  std::uint64_t claimed = 0;
  if (slot.layout.compare_exchange_strong(claimed, record_layout<Library>(), std::memory_order_acq_rel) ||
      claimed == record_layout<Library>())
    return slot.object;
  // Constant-initialized, so no guard: a dynamic initializer takes a lock
  // (__cxa_guard_acquire), and a child forked while another thread is inside it,
  // or inside a std::call_once, sees it in progress forever (Note [Loading NVML
  // without a lock]).
  static std::atomic<void*> own{nullptr};
  return own;
}

// The library in the list from `newest` loaded from `path`; nullptr when none is.
inline const Library* find_loaded(const void* newest, const std::string& path) {
  for (auto* known = static_cast<const Library*>(newest); known != nullptr; known = known->next)
    if (known->path == path) return known;
  return nullptr;
}

// Binds NVML's required entry points, in this order, into `library`: the name of
// the first one `handle` lacks, nullptr when it has them all.
inline const char* bind_required(void* handle, Library& library) {
  const char* missing = nullptr;
  const auto require = [handle, &missing](const char* symbol, auto& function) {
    if (bind(handle, symbol, function)) return true;
    missing = symbol;
    return false;
  };
  (void)(require("nvmlInit_v2", library.init) && require("nvmlErrorString", library.error_string) &&
         require("nvmlDeviceGetCount_v2", library.device_count) &&
         require("nvmlDeviceGetHandleByIndex_v2", library.handle_by_index) &&
         require("nvmlDeviceGetUUID", library.uuid) && require("nvmlDeviceGetName", library.name) &&
         require("nvmlDeviceGetPciInfo_v3", library.pci_info) &&
         require("nvmlDeviceGetMemoryInfo", library.memory_info));
  return missing;
}

// Binds NVML's optional entry points into `library`: those `handle` lacks stay null.
inline void bind_optional(void* handle, Library& library) {
  bind(handle, "nvmlDeviceGetUtilizationRates", library.utilization);
  bind(handle, "nvmlDeviceGetComputeRunningProcesses_v3", library.compute_processes);
  bind(handle, "nvmlDeviceGetMigMode", library.mig_mode);
  bind(handle, "nvmlDeviceGetCudaComputeCapability", library.compute_capability);
  bind(handle, "nvmlDeviceGetMinorNumber", library.minor_number);
  bind(handle, "nvmlSystemGetDriverVersion", library.driver_version);
  bind(handle, "nvmlSystemGetCudaDriverVersion_v2", library.cuda_driver_version);
  bind(handle, "nvmlDeviceGetMemoryInfo_v2", library.memory_info_v2);
  bind(handle, "nvmlDeviceGetMaxMigDeviceCount", library.max_mig_device_count);
  bind(handle, "nvmlDeviceGetMigDeviceHandleByIndex", library.mig_device_handle_by_index);
  bind(handle, "nvmlDeviceGetGpuInstanceId", library.gpu_instance_id);
  bind(handle, "nvmlDeviceGetComputeInstanceId", library.compute_instance_id);
  bind(handle, "nvmlDeviceGetTopologyCommonAncestor", library.topology_common_ancestor);
  bind(handle, "nvmlDeviceGetP2PStatus", library.p2p_status);
  bind(handle, "nvmlDeviceGetNumaNodeId", library.numa_node_id);
  bind(handle, "nvmlDeviceGetCpuAffinity", library.cpu_affinity);
  bind(handle, "nvmlDeviceGetComputeMode", library.compute_mode);
}

// Closes `library`, which lacks the required entry point `missing`, and says why it cannot serve.
inline LoadResult refuse_incomplete(const Library& library, const char* missing) {
  const std::string& path = library.path;
  // A library with neither of NVML's first two entry points is some other library, not an old NVML.
  const bool not_nvml =
      library.init == nullptr && library.error_string == nullptr && dlsym(library.handle, "nvmlErrorString") == nullptr;
  dlclose(library.handle);
  if (not_nvml)
    return {nullptr, LoadStatus::unusable,
            "NVML (" + path + ") lacks nvmlInit_v2 and nvmlErrorString: " + path + " is not an NVML library"};
  return {nullptr, LoadStatus::unusable,
          "NVML (" + path + ") lacks " + std::string(missing) + ": the driver is too old"};
}

// Publishes `library` (loaded and initialized) on `loaded`, unless another thread published
// its path meanwhile: then it uses that one and closes `library` (nvmlShutdown and dlclose
// are reference-counted, so the winner's stays loaded and initialized).
inline LoadResult publish(std::atomic<void*>& loaded, std::unique_ptr<Library> library) {
  void* newest = loaded.load(std::memory_order_acquire);
  do {
    if (const Library* known = find_loaded(newest, library->path)) {
      Return (*shutdown)() = nullptr;
      if (bind(library->handle, "nvmlShutdown", shutdown)) (void)shutdown();  // undoes our nvmlInit only
      dlclose(library->handle);
      return {known, LoadStatus::loaded, {}};
    }
    library->next = static_cast<const Library*>(newest);
  } while (!loaded.compare_exchange_weak(newest, library.get(), std::memory_order_acq_rel, std::memory_order_acquire));
  return {library.release(), LoadStatus::loaded, {}};  // never freed (see load())
}

GPUSEL_API LoadResult load(const std::string& path) {
  // The loaded libraries form a list, newest first: a process loads one NVML, or a
  // few in tests, so a search by path needs no map. The list is one per process,
  // shared by every copy of gpusel in it (Note [One state per process]), and never
  // destroyed: a query from another static object's destructor must still work.
  // A copy whose Library has another layout than the list's keeps a list of
  // its own (Note [Layout signatures]).
  std::atomic<void*>& loaded = nvml_libraries();
  if (const Library* known = find_loaded(loaded.load(std::memory_order_acquire), path))
    return {known, LoadStatus::loaded, {}};

  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return {nullptr, LoadStatus::not_found,
            "NVML (" + path + ") could not be loaded: " + (error != nullptr ? error : "")};
  }
  auto library = std::make_unique<Library>();  // before nvmlInit: no allocation can fail after it
  library->handle = handle;
  library->path = path;
  if (const char* missing = bind_required(handle, *library)) return refuse_incomplete(*library, missing);
  bind_optional(handle, *library);

  const Return status = library->init();
  if (status != kSuccess) {
    LoadResult failed{nullptr, LoadStatus::init_failed, "nvmlInit failed: " + library->describe(status)};
    dlclose(handle);
    return failed;
  }
  return publish(loaded, std::move(library));
}

}  // namespace gpusel::detail::nvml
