// Whether a device's primary context exists, asked of the driver through the
// CUDA runtime, so that gpusel links only cudart.
//
// Used by the guards and synchronize(device) to restore a device without
// creating its context (Note [Restoring a device without creating its context]
// in detail/cuda/device_switch.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>

#include "gpusel/detail/core/process_state.hpp"

namespace gpusel::detail {

enum class PrimaryContextState { Active, Inactive, Unknown };

// Note [Reaching the driver through the runtime]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cuDevicePrimaryCtxGetState is a driver (libcuda) function. Linking libcuda
// would make gpusel programs fail to start on machines without a driver, so the
// runtime hands us the function instead: cudaGetDriverEntryPointByVersion
// (CUDA 12.5+; cudaGetDriverEntryPoint before). cuDeviceGet maps a runtime
// ordinal to a CUdevice (the same number in practice, but not promised).
// Neither lookup nor the two functions create a context (observed on an H200
// with CUDA 13).
//
// The pointers are looked up once per process, the first time a restore needs
// them, by whichever thread gets there first (the atomics make a concurrent
// second lookup harmless: it stores the same values). A definite answer is
// kept: found, or "this driver has no such symbol". A failed lookup (no driver,
// runtime not initialized) is not kept, so a later call asks again. Without
// the functions the state is Unknown and callers restore eagerly, as CUDA
// before 12 did without cost.
//
// The pointers live in the process state (DriverEntryPoints, in
// detail/core/process_state.hpp): a process has one driver, so one lookup serves
// every runtime and every shared object in it (Note [One state per process]).
inline DriverEntryPoints& driver_entry_points() noexcept { return process_state().driver; }

// One symbol from the driver; nullptr when the driver lacks it. `failed` is set
// when the runtime could not answer at all.
inline void* driver_function(const char* symbol, bool& failed) noexcept {
#if CUDART_VERSION >= 12000
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t status = cudaGetDriverEntryPointByVersion(symbol, &function, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t status = cudaGetDriverEntryPoint(symbol, &function, cudaEnableDefault, &found);
#endif
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    failed = true;
    return nullptr;
  }
  return found == cudaDriverEntryPointSuccess ? function : nullptr;
#else
  // Before CUDA 12 cudaSetDevice created no context, so an eager restore costs
  // nothing: "absent" makes callers restore eagerly.
  (void)symbol;
  (void)failed;
  return nullptr;
#endif
}

// Looks the two functions up if no definite answer is known yet; true when both are there.
inline bool load_driver_entry_points() noexcept {
  DriverEntryPoints& points = driver_entry_points();
  const int lookup = points.lookup.load(std::memory_order_acquire);
  if (lookup != DriverEntryPoints::NotYet) return lookup == DriverEntryPoints::Found;
  bool failed = false;
  void* device_get = driver_function("cuDeviceGet", failed);
  void* get_state = driver_function("cuDevicePrimaryCtxGetState", failed);
  if (failed) return false;
  if (device_get == nullptr || get_state == nullptr) {
    points.lookup.store(DriverEntryPoints::Absent, std::memory_order_release);
    return false;
  }
  points.device_get.store(reinterpret_cast<DriverEntryPoints::DeviceGet>(device_get), std::memory_order_relaxed);
  points.primary_context_get_state.store(reinterpret_cast<DriverEntryPoints::PrimaryContextGetState>(get_state),
                                         std::memory_order_relaxed);
  points.lookup.store(DriverEntryPoints::Found, std::memory_order_release);
  return true;
}

// Whether runtime device `ordinal` has its primary context now. Creates none.
// Unknown when the driver cannot say (no entry point, a bad ordinal, no driver).
inline PrimaryContextState primary_context_state(int ordinal) noexcept {
  if (!load_driver_entry_points()) return PrimaryContextState::Unknown;
  const DriverEntryPoints& points = driver_entry_points();
  int device = 0;
  if (points.device_get.load(std::memory_order_relaxed)(&device, ordinal) != 0) return PrimaryContextState::Unknown;
  unsigned int flags = 0;
  int active = 0;
  if (points.primary_context_get_state.load(std::memory_order_relaxed)(device, &flags, &active) != 0)
    return PrimaryContextState::Unknown;
  return active != 0 ? PrimaryContextState::Active : PrimaryContextState::Inactive;
}

}  // namespace gpusel::detail
