// The copy engine: moves bytes between any two places (pageable host, pinned
// host, a GPU) by the fastest path that is correct. See Note [The copy engine].
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/data/memory/memory.hpp"
#include "gpusel/stream.hpp"

namespace gpusel::detail {

// Copies `bytes` from `source` (in `from`) to `destination` (in `to`); they
// have all arrived, visible to any later work on any stream, when it returns.
GPUSEL_API void copy(void* destination, const MemoryPlace& to, const void* source, const MemoryPlace& from,
                     std::size_t bytes);

// Queues the copy on `stream` and returns at once when no pageable memory is
// involved (pinned host <-> device, device <-> device); the caller keeps both
// sides alive and synchronizes the stream before reading the destination.
// With pageable memory on either side it is copy(): done when it returns.
// The stream must belong to the device the copy involves (either one for a
// copy between two GPUs).
GPUSEL_API void copy_async(void* destination, const MemoryPlace& to, const void* source, const MemoryPlace& from,
                           std::size_t bytes, StreamView stream);

// Sets the `bytes` at `destination` (in `to`) to copies of the `pattern_bytes`
// at `pattern`, one after another (`bytes` is a multiple of `pattern_bytes`);
// done when it returns.
GPUSEL_API void fill(void* destination, const MemoryPlace& to, std::size_t bytes, const void* pattern,
                     std::size_t pattern_bytes);

// A copy in words, for errors: "4096 bytes from cpu to cuda:1".
GPUSEL_API std::string describe_copy(std::size_t bytes, const MemoryPlace& to, const MemoryPlace& from);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/engine/copy_engine-inl.hpp"
#endif
