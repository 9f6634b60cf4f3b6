// What gpusel keeps between calls, and how to give it back: the copy engine's
// pinned staging memory, its worker threads with their streams and events,
// the device memory its memory pools cache, the table of GPU pairs with peer
// access enabled, and the large host blocks freed Buffers left for reuse.
//
//   gpusel::release_cached_resources();   // torch.cuda.empty_cache(); before cudaDeviceReset
//
// <gpusel/buffer.hpp> includes this header.
// Layer: data (docs/layers.md).
#pragma once

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel {

// Frees the pinned staging memory the copy engine keeps between copies, ends
// its worker threads and destroys their streams and events, gives the device
// memory the memory pools cache back to each GPU (after waiting for the GPU:
// the frees still queued run first) and destroys the pools, forgets which GPU
// pairs have peer access enabled and which GPUs have their primary context
// (Note [What a restore remembers about a device]), and frees the large host blocks kept for
// reuse (at most GPUSEL_HOST_CACHE bytes: Note [The host block cache]). Live
// Buffers are untouched. Call it before cudaDeviceReset (which destroys them
// behind gpusel's back), or to give the pinned memory (workers times slots
// times chunk_bytes: 32 MiB by default) back to the system and the cached
// device memory (up to 1 GiB per GPU: Note [The release threshold]) back to
// other jobs. Like torch.cuda.empty_cache(). In a process forked after CUDA
// started it frees only host blocks the child cached itself: the other caches
// were forgotten at the fork (Note [Caches across fork()]).
GPUSEL_API void release_cached_resources() noexcept;

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/cached_resources-inl.hpp"
#endif
