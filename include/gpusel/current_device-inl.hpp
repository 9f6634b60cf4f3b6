// The definitions of gpusel/current_device.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: cuda (docs/layers.md).
#pragma once

#include "gpusel/current_device.hpp"

namespace gpusel {

GPUSEL_API void synchronize(const Device& device) {
  if (device.is_cpu()) return;
  if (!device.has_index()) return synchronize();
  const int index = device.index();
  detail::CurrentDevice current;
  cudaError_t status = detail::read_current_device(current);
  if (status != cudaSuccess) {
    throw detail::cuda_error(status, "cudaGetDevice", device, detail::describe_visible_devices());
  }
  // Also when `index` is current: cudaDeviceSynchronize would create its context to wait for nothing.
  if (detail::primary_context_state(index) == detail::PrimaryContextState::Inactive) return;
  const bool switches = current.runtime != index;
  if (switches) {
    status = cudaSetDevice(index);
    if (status != cudaSuccess) {
      throw detail::cuda_error(status, "cudaSetDevice", device, detail::describe_visible_devices());
    }
  }
  status = cudaDeviceSynchronize();
  const detail::RestoreResult restored =
      switches ? detail::restore_device(current.reported, /*check_first=*/false) : detail::RestoreResult{};
  if (status != cudaSuccess) {
    if (restored.status != cudaSuccess)
      detail::report_restore_failure(restored, "gpusel::synchronize", current.reported);
    throw detail::cuda_error(status, "cudaDeviceSynchronize", device, detail::describe_visible_devices());
  }
  if (restored.status != cudaSuccess) throw detail::restore_error(restored, "gpusel::synchronize", current.reported);
}

}  // namespace gpusel
