// Turning a Device into the CUDA device index it names now, or an Error that
// says why it names none.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "gpusel/detail/core/error_context.hpp"
#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/device_count.hpp"
#include "gpusel/detail/cuda/device_switch.hpp"
#include "gpusel/detail/cuda/forked_child.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

// The index of the cuda device `device` names: its index, checked against the
// visible devices, or the calling thread's current device for `cuda`.
// `what` says who asks and names the device ("gpusel::Buffer(1024 elements,
// 4096 bytes, cuda:3)"), so that the Error reads "<what>: no such device
// (cudaErrorInvalidDevice); 2 CUDA devices are visible ...; CUDA_VISIBLE_DEVICES=...".
// Makes no context.
inline int resolve_cuda_index(const Device& device, ErrorContext what) {
  if (!device.is_cuda()) throw Error(what() + ": expected a cuda device, got " + device.str());
  // Before any CUDA call: in a child forked after CUDA started, even cudaGetDeviceCount may wait
  // for a lock another thread of the parent held at the fork (Note [Caches across fork()]).
  if (forked_after_cuda()) throw_forked_after_cuda(what().c_str());
  const DeviceCountResult visible = query_device_count();
  if (visible.status != cudaSuccess) {
    const char* name = cudaGetErrorName(visible.status);
    throw Error(static_cast<int>(visible.status), name != nullptr ? name : "",
                what() + ": " + no_device_reason(visible.status));
  }
  if (!device.has_index()) {
    int index = 0;
    const cudaError_t status = get_current_device(&index);  // as gpusel reports it (after a deferred restore too)
    if (status != cudaSuccess) throw cuda_error(status, what() + ": cudaGetDevice", "current device");
    return index;
  }
  if (device.index() >= visible.count) {
    throw Error(static_cast<int>(cudaErrorInvalidDevice), "cudaErrorInvalidDevice",
                what() + ": no such device (cudaErrorInvalidDevice); " + describe_visible_devices());
  }
  return device.index();
}

}  // namespace gpusel::detail
