// Moving many buffers at once, as Module::to does: every copy allocated first,
// then the small ones packed through pinned staging and sent on one stream in
// batches, with one wait. See Note [Moving many buffers at once].
#pragma once

#include <cstddef>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/data/buffer/untyped_buffer.hpp"
#include "gpusel/detail/data/memory/memory.hpp"

namespace gpusel::detail {

// Note [Moving many buffers at once]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A model is hundreds of small tensors; moved one by one, each pays an
// allocation, a synchronous copy and a wait, and that overhead, not bandwidth,
// decides the time. So move_buffers allocates every copy first (Module::to
// must, to be a transaction), groups the copies by source and target place,
// and sends each group on one stream of the GPU involved, in batches with one
// wait per round: small pageable buffers packed into the staging pool's pinned
// chunks (Note [The staging pool]), pinned and device buffers directly,
// whatever their size. Larger pageable buffers go through the copy engine,
// which spreads each over its threads (Note [The copy engine]). Nothing is
// freed or given back while a copy may still run (a chunk reused under a
// running DMA corrupts another copy); every copy has arrived on return.

// Note [Batched copies where the runtime has them]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cudaMemcpyBatchAsync (CUDA 12.8) queues many copies in one call; they run
// in stream order as a whole, in no promised order among themselves (gpusel's
// copies of one batch never overlap). Its signature changed: 12.8 and 12.9
// take a `size_t* failIdx` before the stream, 13.0 dropped it, so the call is
// chosen by CUDART_VERSION. gpusel passes one attribute for the whole batch,
// srcAccessOrder = Stream: the sources (staging chunks, device or pinned
// buffers) are read in stream order. Where the header has no such call, or
// the runtime answers cudaErrorNotSupported (a driver without it), the copies
// go out as a loop of cudaMemcpyAsync (cudaMemcpyPeerAsync between two GPUs)
// on the same stream: more calls, the same single wait.

// One buffer to move: its bytes, where their copy goes, and the copy, which
// move_buffers allocates.
struct BufferMove {
  const UntypedBuffer* source = nullptr;
  MemoryPlace target;
  std::size_t elements = 0;  // of the Buffer<T>, for errors
  UntypedBuffer copy;
};

// Which moves a failure of move_buffers concerns: moves[first], and `together`
// moves in all when it was a batch of several.
struct MoveFailure {
  std::size_t first = 0;
  std::size_t together = 1;
};

// Allocates each moves[i].copy in moves[i].target and copies moves[i].source
// into it, for all `count` moves, batched (Note [Moving many buffers at
// once]); every copy has arrived when it returns. Throws OutOfMemory when an
// allocation ran out, Error for any other failure, with `failure` saying which
// moves it concerns; the copies made stay in `moves`, for the caller to free.
// Sources must not be in their target already.
GPUSEL_API void move_buffers(BufferMove* moves, std::size_t count, MoveFailure& failure);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/buffer/batched_copy-inl.hpp"
#endif
