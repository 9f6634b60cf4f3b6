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
// cudaFree waited for the whole device, so a Buffer could be dropped while a
// kernel still used it. Device Buffers now come from a memory pool (Note
// [Device memory from a pool], detail/data/device_pool.hpp), and cudaFreeAsync is
// ordered on one stream only: the pool may hand the memory to the next
// allocation as soon as that stream reaches the free. The rule, after
// PyTorch's record_stream:
//  - a Buffer's memory is freed on its device's legacy default stream
//    (cudaStreamLegacy). That stream waits for the work queued before it on
//    every *blocking* stream of the device: the legacy stream itself (plain
//    cudaMemcpy, kernels launched without a stream), gpusel::Stream's default
//    StreamOrder::with_default_stream, and cudaStreamCreate's streams. Work
//    there needs nothing: as with cudaFree, dropping the Buffer is safe.
//  - work on any other stream, a non-blocking one (StreamOrder::independent,
//    cudaStreamNonBlocking, the per-thread default stream) or one of another
//    device, is not ordered before the free. Call buffer.record_stream(stream)
//    after queuing such work: it records an event on the stream there, and the
//    free makes the legacy stream wait for that event (cudaStreamWaitEvent)
//    before cudaFreeAsync. Work queued on the stream after the call is not
//    covered: record again after it. The Stream may be destroyed before the
//    Buffer: the event outlives it.
//  - to(device, stream) allocates its result on `stream` and records the
//    stream for it, unless `stream` is a blocking stream of the result's
//    device (then the free already waits for it).
//  - new memory is ordered on the legacy stream too: a non-blocking stream
//    that uses a Buffer made without a stream must first wait for the legacy
//    stream's work (an event, or a synchronize), as PyTorch requires of side
//    streams. A Buffer made from data (a copy, fill, zeros) is ready for every
//    stream: its synchronous copy waited for the allocation.
// Host memory needs no record: pinned memory is freed by cudaFreeHost, which
// waits for the device, and asynchronous copies from pageable memory are done
// when they return.

// One recorded use: an event on the using stream, made on that stream's device.
struct StreamUse {
  cudaEvent_t event = nullptr;
  int device = -1;
};

// The recorded uses of one Buffer's memory.
class StreamUses {
 public:
  StreamUses() = default;
  // Destroys the events of uses not yet waited for; never throws.
  GPUSEL_API ~StreamUses();

  // Copying is deleted: two owners would destroy the events twice.
  StreamUses(const StreamUses&) = delete;
  StreamUses& operator=(const StreamUses&) = delete;

  // Records that the work queued on `stream` (of `device`) so far uses the
  // memory. Uses whose events have completed are dropped first. Throws Error
  // naming `what` when the event cannot be made or recorded.
  GPUSEL_API void record(cudaStream_t stream, int device, ErrorContext what);

  // Makes the current device's legacy stream wait for every recorded use
  // (Note [When freed device memory is reused]), then forgets them. A wait
  // that cannot be queued is made on the host instead. Never throws.
  GPUSEL_API void order_before_legacy_stream() noexcept;

  std::size_t size() const noexcept { return uses_.size(); }

 private:
  GPUSEL_API void destroy_all() noexcept;

  std::vector<StreamUse> uses_;
};

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/stream_uses-inl.hpp"
#endif
