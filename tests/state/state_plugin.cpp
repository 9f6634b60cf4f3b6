// One of the two shared objects of the state test (tests/state/CMakeLists.txt):
// built twice, as state_a and state_b, with -fvisibility=hidden and
// -fvisibility-inlines-hidden as pybind11 and PyTorch extensions are. Each
// copy gets its own gpusel code; what it exports are the few extern "C"
// functions below, named after the copy (GPUSEL_STATE_PLUGIN), so that a host
// can also link both at once.
#include <cuda_runtime_api.h>

#include "emulated_runtime.hpp"
#include "gpusel/default_device.hpp"
#include "gpusel/detail/cuda/primary_context.hpp"
#include "gpusel/detail/data/engine/peer_access.hpp"
#include "gpusel/detail/data/engine/staging_pool.hpp"
#include "gpusel/guard.hpp"
#include "gpusel/machine/detail/system/nvml.hpp"

#define GPUSEL_STATE_CAT2(a, b) a##_##b
#define GPUSEL_STATE_CAT(a, b) GPUSEL_STATE_CAT2(a, b)
#define GPUSEL_STATE_EXPORT extern "C" __attribute__((visibility("default")))
#define NAMED(name) GPUSEL_STATE_CAT(GPUSEL_STATE_PLUGIN, name)

namespace {

// The device encoding of the test: -2 cpu, -1 cuda without an index, else cuda(index).
int encode(const gpusel::Device& device) {
  if (device.is_cpu()) return -2;
  return device.has_index() ? device.index() : -1;
}

void this_plugins_handler(const gpusel::Error& /*error*/) {}

}  // namespace

// Starts this copy's emulated runtime with two GPUs (the shared runtime is one
// emulation: resetting it from either copy resets it for both).
GPUSEL_STATE_EXPORT void NAMED(reset_emulation)() { gpusel_emulated::reset(gpusel_emulated::devices(2)); }

// --- process state ----------------------------------------------------------------
GPUSEL_STATE_EXPORT void NAMED(set_default_device)(int code) {
  gpusel::set_default_device(code == -2 ? gpusel::cpu() : code == -1 ? gpusel::cuda() : gpusel::cuda(code));
}
GPUSEL_STATE_EXPORT int NAMED(default_device)() { return encode(gpusel::default_device()); }

// Installs this copy's restore-error handler; returns the address of the handler it replaced.
GPUSEL_STATE_EXPORT const void* NAMED(install_restore_error_handler)() {
  return reinterpret_cast<const void*>(gpusel::set_restore_error_handler(&this_plugins_handler));
}
// The handler installed now, without changing it.
GPUSEL_STATE_EXPORT const void* NAMED(restore_error_handler)() {
  const gpusel::RestoreErrorHandler handler = gpusel::set_restore_error_handler(nullptr);
  (void)gpusel::set_restore_error_handler(handler);
  return reinterpret_cast<const void*>(handler);
}

GPUSEL_STATE_EXPORT const void* NAMED(driver_entry_points)() { return &gpusel::detail::driver_entry_points(); }

// The loaded NVML at `path` (the fake NVML): the same object when the process shares one.
GPUSEL_STATE_EXPORT const void* NAMED(nvml_library)(const char* path) {
  return gpusel::detail::nvml::load(path).library;
}
// How many GPUs the loaded NVML at `path` reports, read through this copy's
// nvml::Library; -1 when it cannot.
GPUSEL_STATE_EXPORT int NAMED(nvml_device_count)(const char* path) {
  const gpusel::detail::nvml::Library* library = gpusel::detail::nvml::load(path).library;
  unsigned int count = 0;
  if (library == nullptr || library->device_count(&count) != gpusel::detail::nvml::kSuccess) return -1;
  return static_cast<int>(count);
}

// --- runtime state --------------------------------------------------------------------
// The CUDA runtime this copy calls, as its code sees it.
GPUSEL_STATE_EXPORT const void* NAMED(runtime_identity)() { return reinterpret_cast<const void*>(&cudaGetDevice); }
GPUSEL_STATE_EXPORT const void* NAMED(thread_device)() { return &gpusel::detail::thread_device(); }
GPUSEL_STATE_EXPORT const void* NAMED(staging_pool)() { return &gpusel::detail::StagingPool::instance(); }
GPUSEL_STATE_EXPORT const void* NAMED(peer_access)() { return &gpusel::detail::PeerAccess::instance(); }

// A guard on `device` on the calling thread, ended: the restore of the device
// before it (which has no context) is deferred. Returns the device gpusel
// reports afterwards, or -100 when the guard failed.
GPUSEL_STATE_EXPORT int NAMED(leave_deferred_restore)(int device) {
  try {
    { const gpusel::DeviceGuard guard(device); }
    return gpusel::current_device();
  } catch (const gpusel::Error&) {
    return -100;
  }
}
// The device gpusel reports as the calling thread's, and the one the runtime has current.
GPUSEL_STATE_EXPORT int NAMED(current_device)() {
  try {
    return gpusel::current_device();
  } catch (const gpusel::Error&) {
    return -100;
  }
}
GPUSEL_STATE_EXPORT int NAMED(runtime_device)() {
  int device = -100;
  return cudaGetDevice(&device) == cudaSuccess ? device : -100;
}
