// Whether a device's primary context exists, asked of the driver through the
// CUDA runtime, so that gpusel links only cudart.
//
// Used by the guards and synchronize(device) to restore a device without
// creating its context (Note [Restoring a device without creating its context]
// in detail/cuda/device_switch.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <climits>
#include <cstddef>
#include <new>

#include "gpusel/detail/core/process_state.hpp"
#include "gpusel/detail/cuda/runtime_state.hpp"

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

// Note [What a restore remembers about a device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A cross-device guard asks at its end whether the device it goes back to has
// its primary context. Asking the driver every time would add cuDeviceGet and
// cuDevicePrimaryCtxGetState to a raw switch's three runtime calls, so
// DeviceFacts keeps, per runtime and runtime ordinal, the ordinal's CUdevice,
// asked once (it cannot change within a process), and "the primary context
// exists", once the driver said so. "No context" is asked every time: any
// thread can create one at any moment. Only cudaDeviceReset (or the driver's
// cuDevicePrimaryCtxReset) destroys a primary context, and gpusel cannot see
// it: call release_cached_resources() before it, else the next restore of that
// device makes its context again, as a raw cudaSetDevice would. Plain atomics
// only, no lock, no CUDA call: the facts stay true in a forked child.
struct DeviceFacts {
  static constexpr int kDevices = 64;      // ordinals from kDevices on are asked every time
  std::atomic<int> cu_device[kDevices]{};  // the CUdevice plus one; 0 until asked
  std::atomic<bool> active[kDevices]{};    // the primary context is known to exist

  static DeviceFacts& instance() noexcept {
    return runtime_object<DeviceFacts>(RuntimeObject::device_facts,
                                       [](void* storage) noexcept { return new (storage) DeviceFacts(); });
  }

  void forget_contexts() noexcept {
    for (auto& known : active) known.store(false, std::memory_order_relaxed);
  }

  // What a new process knows: nothing (the emulated runtime's reset, in tests).
  void forget() noexcept {
    forget_contexts();
    for (auto& known : cu_device) known.store(0, std::memory_order_relaxed);
  }
};

// Whether runtime device `ordinal` has its primary context now, as far as
// gpusel can tell without creating one (Note [What a restore remembers about
// a device]). Unknown when the driver cannot say (no entry point, a bad
// ordinal, no driver).
inline PrimaryContextState primary_context_state(int ordinal) noexcept {
  const bool remembered = ordinal >= 0 && ordinal < DeviceFacts::kDevices;
  DeviceFacts* facts = remembered ? &DeviceFacts::instance() : nullptr;
  const auto slot = static_cast<std::size_t>(ordinal);
  if (facts != nullptr && facts->active[slot].load(std::memory_order_relaxed)) return PrimaryContextState::Active;
  if (!load_driver_entry_points()) return PrimaryContextState::Unknown;
  const DriverEntryPoints& points = driver_entry_points();
  int device = facts != nullptr ? facts->cu_device[slot].load(std::memory_order_relaxed) - 1 : -1;
  if (device < 0) {
    if (points.device_get.load(std::memory_order_relaxed)(&device, ordinal) != 0 || device < 0)
      return PrimaryContextState::Unknown;
    if (facts != nullptr && device < INT_MAX) facts->cu_device[slot].store(device + 1, std::memory_order_relaxed);
  }
  unsigned int flags = 0;
  int active = 0;
  if (points.primary_context_get_state.load(std::memory_order_relaxed)(device, &flags, &active) != 0)
    return PrimaryContextState::Unknown;
  if (active == 0) return PrimaryContextState::Inactive;
  if (facts != nullptr) facts->active[slot].store(true, std::memory_order_relaxed);
  return PrimaryContextState::Active;
}

}  // namespace gpusel::detail
