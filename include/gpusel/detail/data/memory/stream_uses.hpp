// The streams, other than those its free is ordered after anyway, that use a
// Buffer's device memory: Buffer::record_stream marks them, and the free waits
// for what they had queued (Note [When freed device memory is reused]).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/core/error_context.hpp"

namespace gpusel::detail {

// Note [When freed device memory is reused]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cudaFreeAsync is ordered on one stream: the pool may hand the memory to the
// next allocation once that stream reaches the free. So, as in PyTorch, a
// Buffer's memory is freed on its device's legacy default stream, which waits
// for the work queued before it on every blocking stream of the device (the
// legacy stream, the per-thread default stream, StreamOrder::with_default_stream,
// cudaStreamCreate's; CUDA's "Stream synchronization behavior"): work there
// needs nothing. Work on any other stream (non-blocking, another device's) must
// be recorded with record_stream after it is queued; the free then makes the
// legacy stream wait for it. A StreamView does not say how its stream was
// made: record_stream asks the runtime (cudaStreamGetFlags). New memory is
// ordered on the legacy stream too: a non-blocking stream must wait for that
// stream before it uses a Buffer not made from data. Host memory needs no record.

// One recorded use: an event on the using stream, made on that stream's device.
struct StreamUse {
  cudaEvent_t event = nullptr;
  int device = -1;
};

// The recorded uses of one Buffer's device memory. Host memory needs none:
// cudaFreeHost waits for the device, and copies from pageable memory are done
// when they return.
class StreamUses {
 public:
  StreamUses() = default;
  // Destroys the events of uses not yet waited for; never throws.
  GPUSEL_API ~StreamUses();

  // Copying is deleted: two owners would destroy the events twice.
  StreamUses(const StreamUses&) = delete;
  StreamUses& operator=(const StreamUses&) = delete;

  // Records that the work queued on `stream` (of `device`) so far uses the
  // memory; work queued later needs another call. The event outlives the
  // Stream, which may be destroyed before the Buffer. Uses whose events have
  // completed are dropped first. Throws Error naming `what` when the event
  // cannot be made or recorded.
  GPUSEL_API void record(cudaStream_t stream, int device, ErrorContext what);

  // Makes the current device's legacy stream wait for every recorded use
  // (Note [When freed device memory is reused]), then forgets them. A wait
  // that cannot be queued is made on the host instead. Never throws.
  GPUSEL_API void order_before_legacy_stream() noexcept;

  // Makes `stream` wait for every recorded use (cudaStreamWaitEvent), keeping
  // them. Throws Error naming `what` when a wait cannot be queued.
  GPUSEL_API void order_before(cudaStream_t stream, ErrorContext what) const;

  std::size_t size() const noexcept { return uses_.size(); }

 private:
  GPUSEL_API void destroy_all() noexcept;

  std::vector<StreamUse> uses_;
};

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/memory/stream_uses-inl.hpp"
#endif
