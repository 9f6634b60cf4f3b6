// The calling thread's CUDA device, PyTorch-style: which one is current,
// switch to another, wait for one. The CUDA runtime layer: it includes no NVML
// code (gpusel/runtime.hpp adds device_count() and the CPU fallback on top).
//
//   gpusel::current_device()    torch.cuda.current_device()
//   gpusel::set_device(1)       torch.cuda.set_device(1)
//   gpusel::synchronize()       torch.cuda.synchronize()
// Layer: cuda (docs/layers.md).
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/device_count.hpp"
#include "gpusel/detail/cuda/device_switch.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel {

// What the CUDA runtime shows this process, in words, for messages and logs:
//   "2 CUDA devices are visible (cuda:0..cuda:1); CUDA_VISIBLE_DEVICES=1,3: cuda:0 is physical GPU 1, ..."
// or, when no device is usable, why:
//   "no CUDA device is usable: no NVIDIA driver was found, or it is older than this CUDA runtime ..."
// Asks the runtime (cudaGetDeviceCount), which starts CUDA; creates no context.
inline std::string describe_cuda_devices() { return detail::describe_visible_devices(); }

// Why no CUDA device is usable, in the words of describe_cuda_devices(); nullopt
// when one is. Asks the runtime, which starts CUDA; creates no context.
inline std::optional<std::string> no_cuda_device_reason() {
  const detail::DeviceCountResult result = detail::query_device_count();
  if (result.status == cudaSuccess && result.count > 0) return std::nullopt;
  return detail::no_device_reason(result.status == cudaSuccess ? cudaErrorNoDevice : result.status);
}

// The calling thread's current device index, like torch.cuda.current_device().
// After a guard's deferred restore this is the restored device, which raw
// cudaGetDevice does not show yet (Note [Restoring a device without creating
// its context] in detail/cuda/device_switch.hpp). Throws Error when no device is usable, saying why.
inline int current_device() {
  int index = 0;
  const cudaError_t status = detail::get_current_device(&index);
  if (status != cudaSuccess) {
    throw detail::cuda_error(status, "cudaGetDevice", "current device", detail::describe_visible_devices());
  }
  return index;
}

// Makes device `index` current for the calling thread. Like cudaSetDevice
// since CUDA 12, this creates the device's primary context when it has none.
inline void set_device(int index) {
  if (index < 0) throw Error("gpusel::set_device(" + std::to_string(index) + "): a device index cannot be negative");
  const cudaError_t status = cudaSetDevice(index);
  if (status != cudaSuccess) {
    throw detail::cuda_error(status, "cudaSetDevice", cuda(index), detail::describe_visible_devices());
  }
  detail::note_device_made_current();  // ends a guard's deferred restore
}

// set_device(cuda(1)) is set_device(1); set_device(cuda()) names the current
// device, so it changes nothing; a cpu device is an error.
inline void set_device(const Device& device) {
  if (!device.is_cuda()) detail::throw_not_cuda("gpusel::set_device", device);
  if (device.has_index()) set_device(device.index());
}

// Waits until all work on the current device has finished.
inline void synchronize() {
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess) {
    throw detail::cuda_error(status, "cudaDeviceSynchronize", "current device", detail::describe_visible_devices());
  }
}

// Waits until all work on `device` has finished; the current device stays as
// it was. Creates no context, on `device` either, current or not: a device
// without one has no work to wait for, and switching back is lazy (Note [Restoring a device without creating its
// context] in detail/cuda/device_switch.hpp). A cpu device has nothing to wait for.
GPUSEL_API void synchronize(const Device& device);

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/current_device-inl.hpp"
#endif
