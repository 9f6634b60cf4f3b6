// Moving many buffers at once, as Module::to does: every copy allocated first,
// then the small ones packed through pinned staging and sent on one stream in
// batches, with one wait. See Note [Moving many buffers at once].
#pragma once

#include <cstddef>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/data/memory.hpp"
#include "gpusel/detail/data/untyped_buffer.hpp"

namespace gpusel::detail {

// Note [Moving many buffers at once]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A model is hundreds of small tensors (ResNet-50's 161 parameters are mostly
// under 1 MiB: tests/bench/model_shapes.txt). Moved one by one, each pays an
// allocation, a synchronous cudaMemcpy (from pageable memory staged by the
// driver, one piece at a time) and a wait: overhead per buffer, not bandwidth,
// decides the time. move_buffers therefore
//  1. allocates every copy first (Module::to must, to be a transaction);
//  2. groups the copies by the place they come from and the place they go to;
//  3. copies each group on one stream of the GPU involved, each batch of
//     copies in one cudaMemcpyBatchAsync (Note [Batched copies where the
//     runtime has them]), and waits for the stream once per round:
//     - pageable host -> GPU: the buffers are packed one after another into
//       the staging pool's pinned chunks (Note [The staging pool]); each
//       chunk's copies go out as one batch, and while they run the next chunk
//       is filled; a round is `slots` chunks (CopyEngineOptions), so one wait
//       per `slots` x `chunk_bytes` (8 MiB by default);
//     - GPU -> pageable host: the same the other way: a round's copies into
//       the chunks, one wait, then each buffer unpacked by memcpy;
//     - pinned host <-> GPU, and GPU -> GPU: no staging: every copy of the
//       group in one batch, and one wait;
//  4. copies the large pageable buffers through the copy engine, one after
//     another, which spreads each over its worker threads (Note [The copy engine]).
// The threshold, kLargestBatchedPageableBytes, is the copy engine's own
// kDirectCopyBytes (1 MiB): at or below it the engine moves a buffer with one
// cudaMemcpy on one thread anyway, so packing it with the others loses no
// parallelism and saves its call, its staging and its wait; above it the
// engine cuts the buffer into parts for several threads, each filling staging
// at about 10 GB/s, which one thread packing the batch could not match.
// Pinned and device buffers need no host copy, so they are batched whatever
// their size. The stream is the engine cache's stream of worker 0 on that GPU
// when the cache is free (Note [The engine cache]), else one made for the
// call; it is a blocking stream, so the copies come after work on the legacy
// default stream, as the engine's cudaMemcpy does. After a failure nothing is
// freed or given back while a copy may still run (a staging chunk reused under
// a running DMA corrupts another copy): the stream is waited for first, and if
// that fails too the chunks are freed (cudaFreeHost waits) and the stream is
// destroyed, not kept. Every copy has arrived when move_buffers returns.

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
#include "gpusel/detail/data/batched_copy-inl.hpp"
#endif
