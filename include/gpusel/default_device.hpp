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
// set_default_device changes the default for every thread of the process, not
// per thread as torch.set_default_device does: a program sets it once at
// start-up ("new data goes to the GPU"), and the worker threads it starts later
// make their Buffers where it said. Which GPU a thread uses is already per
// thread: the current device (set_device, DeviceGuard), to which `cuda` without
// an index is resolved each time a Buffer is made; a per-thread default would
// be a second per-thread setting that worker threads forget to make. Per
// process also means across shared objects: every copy of gpusel reads and sets
// the one default in the process state (Note [One state per process]; clang
// with RTLD_LOCAL is the exception docs/state.md names). It is one atomic int:
// safe from any thread, a relaxed load to read.

namespace detail {

// kDefaultIsCpu, kDefaultIsCurrentCuda (detail/core/process_state.hpp), or a cuda index >= 0.
inline std::atomic<int>& default_device_code() noexcept { return process_state().default_device; }

}  // namespace detail

// Makes `device` the device of Buffers created without one, for every thread
// (Note [The default device is per process]). `gpusel::cuda()` means "the
// current device of whichever thread makes the Buffer". Not checked against the
// machine (no CUDA call happens here): a Buffer made on it says clearly when
// the device does not exist or no GPU is usable.
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
