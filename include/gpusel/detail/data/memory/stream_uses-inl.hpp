// The definitions of gpusel/detail/data/memory/stream_uses.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/data/memory/stream_uses.hpp"

#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/device.hpp"
#include "gpusel/guard.hpp"

namespace gpusel::detail {

inline void destroy_event(const StreamUse& use) noexcept {
  release_on_device(use.device, "gpusel::Buffer destroying a stream-use event", [&use]() noexcept {
    if (cudaEventDestroy(use.event) != cudaSuccess) (void)cudaGetLastError();
  });
}

GPUSEL_API StreamUses::~StreamUses() { destroy_all(); }

GPUSEL_API void StreamUses::destroy_all() noexcept {
  for (const StreamUse& use : uses_) destroy_event(use);
  uses_.clear();
}

GPUSEL_API void StreamUses::record(cudaStream_t stream, int device, ErrorContext what) {
  std::size_t kept = 0;  // drop the uses that are over: a Buffer recorded in a loop keeps few events
  for (const StreamUse& use : uses_) {
    const cudaError_t status = cudaEventQuery(use.event);
    if (status == cudaSuccess) {
      destroy_event(use);
    } else {
      if (status != cudaErrorNotReady) (void)cudaGetLastError();
      uses_[kept++] = use;
    }
  }
  uses_.resize(kept);
  uses_.reserve(kept + 1);  // may throw; nothing is made yet
  DeviceGuard guard(device);
  StreamUse use;
  use.device = device;
  cudaError_t status = cudaEventCreateWithFlags(&use.event, cudaEventDisableTiming);
  if (status != cudaSuccess) throw cuda_error(status, what() + ": cudaEventCreateWithFlags", cuda(device));
  status = cudaEventRecord(use.event, stream);
  if (status != cudaSuccess) {
    if (cudaEventDestroy(use.event) != cudaSuccess) (void)cudaGetLastError();
    throw cuda_error(status, what() + ": cudaEventRecord", cuda(device));
  }
  uses_.push_back(use);
}

GPUSEL_API void StreamUses::order_before(cudaStream_t stream, ErrorContext what) const {
  for (const StreamUse& use : uses_) {
    const cudaError_t status = cudaStreamWaitEvent(stream, use.event, 0);
    if (status != cudaSuccess) throw cuda_error(status, what() + ": cudaStreamWaitEvent", cuda(use.device));
  }
}

GPUSEL_API void StreamUses::order_before_legacy_stream() noexcept {
  for (const StreamUse& use : uses_) {
    if (cudaStreamWaitEvent(cudaStreamLegacy, use.event, 0) == cudaSuccess) continue;
    (void)cudaGetLastError();
    if (cudaEventSynchronize(use.event) != cudaSuccess) (void)cudaGetLastError();  // waited here instead
  }
  destroy_all();  // an event waited for on a stream may be destroyed at once
}

}  // namespace gpusel::detail
