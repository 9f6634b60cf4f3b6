// The CUDA runtime basics, PyTorch-style: how many GPUs, which one is current,
// switch to another, wait for one; and the CPU fallback when there is none.
//
//   gpusel::device_count()      torch.cuda.device_count()
//   gpusel::is_available()      torch.cuda.is_available()
//   gpusel::current_device()    torch.cuda.current_device()
//   gpusel::set_device(1)       torch.cuda.set_device(1)
//   gpusel::preferred_device()  the current device if a GPU is usable, else cpu
//   gpusel::synchronize()       torch.cuda.synchronize()
//
// This header joins the two layers beneath it: device_count() asks NVML and
// the environment (gpusel/machine/visibility.hpp) before CUDA starts, and the CUDA
// runtime (gpusel/current_device.hpp) after. Code that only switches devices
// includes gpusel/guard.hpp or gpusel/current_device.hpp and pays for no NVML.
// Layer: top (docs/layers.md).
#pragma once

#include <cuda_runtime_api.h>

#include <optional>

#include "gpusel/current_device.hpp"
#include "gpusel/device.hpp"
#include "gpusel/machine/visibility.hpp"

namespace gpusel {

// The number of CUDA devices this process can use; 0, never an error, when
// there is no driver, no GPU, or CUDA_VISIBLE_DEVICES hides them all.
// Before CUDA has started it answers from NVML and the environment (where the
// driver library loads: Note [NVML without the driver library]), without
// starting CUDA (so a parent can count GPUs and still fork workers that use
// them, like PyTorch's PYTORCH_NVML_BASED_CUDA_CHECK); once CUDA has started,
// or without NVML, or with a GPU in MIG mode, the CUDA runtime answers.
inline int device_count() noexcept {
  if (const std::optional<int> counted = detail::count_devices_without_cuda(CUDART_VERSION)) return *counted;
  return detail::query_device_count().count;
}

inline bool is_available() noexcept { return device_count() > 0; }

// The current CUDA device when one is usable, else cpu: the C++ spelling of
// `torch.device("cuda" if torch.cuda.is_available() else "cpu")` resolved to
// the current device: it follows set_device and guards (cuda:1 inside
// DeviceGuard g(1)), and is cuda:0 only on a thread that chose no device.
inline Device preferred_device() noexcept {
  if (!is_available()) return cpu();
  int index = 0;
  if (detail::get_current_device(&index) != cudaSuccess) {
    (void)cudaGetLastError();
    return cpu();
  }
  return detail::checked_device(DeviceType::CUDA, index);  // the runtime reports an index >= 0
}

}  // namespace gpusel
