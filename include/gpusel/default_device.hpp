// Where new Buffers land when no device is named, like torch.set_default_device.
//
//   gpusel::set_default_device(gpusel::cuda());   // torch.set_default_device("cuda")
//   gpusel::Buffer<float> x(6);                   // on the current GPU
//   gpusel::default_device()                      // cpu until set
//
// This header includes no CUDA header: the default is only a name until a
// Buffer uses it.
#pragma once

#include <atomic>

#include "gpusel/device.hpp"

namespace gpusel {

// Note [The default device is per process]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// set_default_device changes the default for every thread of the process, as
// torch.set_default_tensor_type did (the first seed's
// `torch.set_default_tensor_type('torch.cuda.FloatTensor')`), and as a program
// that sets it once at start-up expects: a worker thread started later makes
// its Buffers where the main thread said. (PyTorch's newer
// torch.set_default_device is also process-wide unless used as a context
// manager.) Which GPU a thread uses is already per thread: that is the current
// device (set_device, DeviceGuard). So the natural pairing is
//   set_default_device(gpusel::cuda());   // once: "new data goes to the GPU"
//   DeviceGuard guard(rank);              // per thread: "which GPU"
// since `cuda` without an index is resolved to the calling thread's current
// device each time a Buffer is made.
//
// The device is stored in one atomic int, so reading and setting it from
// several threads is safe and costs a relaxed load. It is not checked against
// the machine when set (no CUDA call happens here): a Buffer made on it says
// clearly when the device does not exist or no GPU is usable.

namespace detail {

// kDefaultIsCpu, kDefaultIsCurrentCuda, or a cuda index >= 0.
inline constexpr int kDefaultIsCpu = -2;
inline constexpr int kDefaultIsCurrentCuda = -1;

inline std::atomic<int>& default_device_code() noexcept {
  static std::atomic<int> code{kDefaultIsCpu};
  return code;
}

}  // namespace detail

// Makes `device` the device of Buffers created without one, for every thread
// (Note [The default device is per process]). `gpusel::cuda()` means "the
// current device of whichever thread makes the Buffer".
inline void set_default_device(const Device& device) noexcept {
  const int code =
      device.is_cpu() ? detail::kDefaultIsCpu : (device.has_index() ? device.index() : detail::kDefaultIsCurrentCuda);
  detail::default_device_code().store(code, std::memory_order_relaxed);
}

// The device of Buffers created without one: cpu until set_default_device.
inline Device default_device() noexcept {
  const int code = detail::default_device_code().load(std::memory_order_relaxed);
  if (code == detail::kDefaultIsCpu) return cpu();
  if (code == detail::kDefaultIsCurrentCuda) return cuda();
  return detail::checked_device(DeviceType::CUDA, code);  // an index >= 0, stored by set_default_device
}

}  // namespace gpusel
