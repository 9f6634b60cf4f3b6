// Where new Buffers land when no device is named, like torch.set_default_device.
//
//   gpusel::set_default_device(gpusel::cuda());   // torch.set_default_device("cuda")
//   gpusel::Buffer<float> x(6);                   // on the current GPU
//   gpusel::default_device()                      // cpu until set
//
// This header includes no CUDA header: the default is only a name until a
// Buffer uses it.
// Layer: data (docs/layers.md).
#pragma once

#include <atomic>

#include "gpusel/detail/core/process_state.hpp"
#include "gpusel/device.hpp"

namespace gpusel {

// Note [The default device is per process]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// set_default_device changes the default for every thread of the process: a
// program sets it once at start-up ("new data goes to the GPU"), and the
// worker threads it starts later make their Buffers where it said, without
// each having to repeat it. PyTorch chose otherwise: since PyTorch #116014,
// torch.set_default_device keeps the default per thread (a thread-local
// device mode), so a thread that did not set it gets cpu. gpusel keeps it per
// process because which GPU a thread uses is already per thread: that is the
// current device (set_device, DeviceGuard), and `cuda` without an index is
// resolved to the calling thread's current device each time a Buffer is made.
// So the natural pairing is
//   set_default_device(gpusel::cuda());   // once: "new data goes to the GPU"
//   DeviceGuard guard(rank);              // per thread: "which GPU"
// and a per-thread default would only add a second per-thread setting that
// worker threads forget to make.
//
// Per process means also across shared objects: every copy of gpusel in the
// process (two Python extensions, each built with hidden visibility) reads and
// sets the one default in the process state (Note [One state per process],
// detail/core/process_state.hpp; clang with RTLD_LOCAL is the exception it names).
//
// The device is stored in one atomic int, so reading and setting it from
// several threads is safe and costs a relaxed load. It is not checked against
// the machine when set (no CUDA call happens here): a Buffer made on it says
// clearly when the device does not exist or no GPU is usable.

namespace detail {

// kDefaultIsCpu, kDefaultIsCurrentCuda (detail/core/process_state.hpp), or a cuda index >= 0.
inline std::atomic<int>& default_device_code() noexcept { return process_state().default_device; }

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
