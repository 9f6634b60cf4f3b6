// Switching the calling thread's device and switching it back without creating
// contexts nobody asked for: the machinery under DeviceGuard, set_device,
// current_device and synchronize(device).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <string>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/core/process_state.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/primary_context.hpp"
#include "gpusel/detail/cuda/runtime_state.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

// Note [Restoring a device without creating its context]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Since CUDA 12, cudaSetDevice(d) creates d's primary context (about 500 MiB
// of device memory on an H200) when it has none. A thread that never chose a
// device is on device 0 without a context: cudaGetDevice says 0 and creates
// nothing. A guard that switched such a thread to device 2 and then "restored"
// device 0 with cudaSetDevice(0) would charge every process 500 MiB on GPU 0
// for a device it never used (PyTorch issue #94864).
//
// The rule. When a guard ends (or set_device / synchronize(device) finish) and
// the device to go back to
//  - has its primary context, or its state cannot be read (no driver entry
//    point): gpusel calls cudaSetDevice(it), which creates nothing new;
//  - has no primary context: gpusel makes no CUDA call. The CUDA runtime stays
//    on the device the guard used, and gpusel records, for this thread only,
//    "the current device is <original>, not yet made current in the runtime"
//    (a deferred restore, c10's MaybeSetDevice).
// While a restore is deferred:
//  - gpusel::current_device(), preferred_device(), gpusel::cuda() as resolved by
//    gpusel, and every guard's original_device() report the original device, so
//    gpusel code behaves as if the restore had happened;
//  - raw cudaGetDevice reports the guard's device, and raw runtime calls (a
//    kernel launch, cudaMalloc) act on it: the runtime really is still there.
//    Code that mixes raw CUDA calls in after a guard, on a thread that never
//    used its original device, should first call
//    gpusel::set_device(gpusel::current_device()), which makes the device
//    current for real (and creates its context: the program now uses it);
//  - the first gpusel call that needs the device for real (set_device, a guard
//    on it, an allocation on it) calls cudaSetDevice then, and the deferral ends;
//  - a raw cudaSetDevice to another device ends it as well: gpusel notices the
//    runtime is no longer on the device it left and reports the runtime's device
//    from then on. (A raw cudaSetDevice to the very device the guard left is the
//    one case gpusel cannot tell from no call at all.)
// The deferral belongs to one thread and one CUDA runtime, and never touches
// another thread's device: every copy of gpusel in the process that calls the
// same runtime sees it, one that calls another runtime (a shared object with
// the static runtime in it) does not (Note [One state per runtime]).
//
// The fast path pays nothing for this: a guard on the device already current
// reads cudaGetDevice and the thread's record through one thread-local pointer,
// and makes no call at exit. The
// context state is read only when a guard really switched and must switch back.

// The calling thread's record (ThreadDevice) is kept per runtime, shared by
// every copy of gpusel that calls the runtime: thread_device(),
// detail/cuda/runtime_state.hpp (Note [One state per runtime]).

// The device the runtime has current for this thread and the one gpusel reports.
struct CurrentDevice {
  int runtime = 0;
  int reported = 0;
};

// cudaGetDevice, corrected for a deferred restore (Note [Restoring a device
// without creating its context]). Creates no context. On failure the runtime's
// last error is left set for the caller to report.
inline cudaError_t read_current_device(CurrentDevice& current) noexcept {
  int runtime = 0;
  const cudaError_t status = cudaGetDevice(&runtime);
  if (status != cudaSuccess) return status;
  ThreadDevice& thread = thread_device();
  if (thread.deferred_device >= 0 && thread.runtime_device != runtime) thread.deferred_device = -1;
  current.runtime = runtime;
  current.reported = thread.deferred_device >= 0 ? thread.deferred_device : runtime;
  return cudaSuccess;
}

// The device gpusel reports as current, like cudaGetDevice.
inline cudaError_t get_current_device(int* index) noexcept {
  CurrentDevice current;
  const cudaError_t status = read_current_device(current);
  if (status == cudaSuccess) *index = current.reported;
  return status;
}

// Records that gpusel made `device` current in the runtime: any deferral ends.
inline void note_device_made_current() noexcept {
  ThreadDevice& thread = thread_device();
  thread.deferred_device = -1;
  ++thread.switches;
}

// What entering a device gave: the device gpusel reported before (which the
// scope must restore), or the status and name of the call that failed.
struct EnterResult {
  cudaError_t status = cudaSuccess;
  const char* call = "";
  int original = -1;
};

// Switches the runtime to `device` for a scope if it is not there already.
inline EnterResult enter_device(int device) noexcept {
  CurrentDevice current;
  cudaError_t status = read_current_device(current);
  if (status != cudaSuccess) return {status, "cudaGetDevice", -1};
  if (current.runtime != device) {
    status = cudaSetDevice(device);
    if (status != cudaSuccess) return {status, "cudaSetDevice", -1};
    note_device_made_current();
  } else if (thread_device().deferred_device >= 0) {
    note_device_made_current();  // the runtime is already there: only gpusel's record changes
  }
  return {cudaSuccess, "", current.reported};
}

// The outcome of a restore: cudaSuccess, or the status and name of the call that failed.
struct RestoreResult {
  cudaError_t status = cudaSuccess;
  const char* call = "";
};

// Makes `device` current again, lazily (Note [Restoring a device without
// creating its context]). `check_first`: read the current device first and do
// nothing when gpusel already reports `device` (for a guard that did not
// switch itself, so cannot know without asking).
inline RestoreResult restore_device(int device, bool check_first) noexcept {
  ThreadDevice& thread = thread_device();
  if (check_first) {
    CurrentDevice current;
    const cudaError_t status = read_current_device(current);
    if (status != cudaSuccess) return {status, "cudaGetDevice"};
    if (current.reported == device) return {};
  }
  if (primary_context_state(device) == PrimaryContextState::Inactive) {
    int runtime = 0;
    const cudaError_t status = cudaGetDevice(&runtime);
    if (status != cudaSuccess) return {status, "cudaGetDevice"};
    ++thread.switches;
    if (runtime == device) {
      thread.deferred_device = -1;
    } else {
      thread.deferred_device = device;
      thread.runtime_device = runtime;
    }
    return {};
  }
  const cudaError_t status = cudaSetDevice(device);
  if (status != cudaSuccess) return {status, "cudaSetDevice"};
  note_device_made_current();
  return {};
}

// --- reporting a failed restore -------------------------------------------------
// One handler per process (Note [One state per process]).
inline std::atomic<RestoreErrorHandler>& restore_error_handler() noexcept {
  return process_state().restore_error_handler;
}

// The Error for a failed restore of `device` by `who`.
GPUSEL_API Error restore_error(const RestoreResult& result, const char* who, int device);

// Note [Failed switches at exit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Once the CUDA runtime has begun to unload at process exit, every call
// answers cudaErrorCudartUnloading; a Buffer or Stream with static storage
// that dies after that cannot switch devices or free anything, and needs not:
// the process is ending and takes its GPU memory with it. Such a failure is
// not reported (no handler call, nothing on stderr): it says nothing a
// program could act on, and a handler may itself be gone by then.

// Reports that `who` could not restore `device`: to the restore-error handler,
// or by default to stderr, once per process. Never throws.
GPUSEL_API void report_restore_failure(const RestoreResult& result, const char* who, int device) noexcept;

// Reports that `who` could not make `device` current to release something
// there (entering failed as `entered` says) and released it from the current
// device instead. Never throws.
GPUSEL_API void report_release_failure(const EnterResult& entered, const char* who, int device) noexcept;

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/cuda/device_switch-inl.hpp"
#endif
