// A memcpy whose stores bypass the CPU caches (non-temporal stores), for
// draining a GPU's data into host memory whose pages are already there:
// Note [Streaming stores].
// This header includes no CUDA header.
#pragma once

#include <cstddef>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel::detail {

// Note [Streaming stores]
// ~~~~~~~~~~~~~~~~~~~~~~~
// An ordinary store to a line not in the cache first reads the line from
// memory (read for ownership), so memcpy into memory that is not cached moves
// three bytes per byte copied; a non-temporal store writes the line without
// reading it, two bytes per byte. The copy engine drains 4 MiB chunks, below
// the size from which glibc's memcpy streams by itself. Streaming wins into
// pages that exist and loses into fresh ones (the kernel has just zeroed the
// page through the cache; docs/benchmarks.md, "Streaming stores", has the
// figures). So the engine streams only into blocks whose pages are there:
// reused ones, and ones it drained into before (Note [The host block cache]);
// never into fresh ones, or memory it did not allocate.
//
// The fast path is x86's SSE2 (_mm_stream_si128, every x86-64 CPU), chosen at
// compile time; other CPUs (arm64, which the vcpkg port supports) use memcpy,
// and kStreamingStores says which one this build has.
#if defined(__SSE2__)
inline constexpr bool kStreamingStores = true;
#else
inline constexpr bool kStreamingStores = false;
#endif

// Copies `bytes` from `source` to `destination` (not overlapping), with
// streaming stores where the CPU has them; the stores are fenced, so other
// threads see them once the function returns and is synchronized with.
GPUSEL_API void streaming_copy(void* destination, const void* source, std::size_t bytes) noexcept;

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/memory/streaming_copy-inl.hpp"
#endif
