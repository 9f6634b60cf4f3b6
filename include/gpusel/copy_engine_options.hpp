// How the copy engine moves pageable host memory: how many threads one copy
// uses, how many pinned staging chunks each keeps in flight, and how large
// they are. Set at run time, for the whole process.
//
//   gpusel::CopyEngineOptions options = gpusel::copy_engine_options();
//   options.host_to_device_workers = 10;
//   gpusel::set_copy_engine_options(options);     // later copies use 10 threads
//
// or, for a sweep, in the environment (read once, at the engine's first use):
//   GPUSEL_COPY_WORKERS=10 GPUSEL_COPY_SLOTS=3 GPUSEL_COPY_CHUNK=2M ./app
//
// <gpusel/buffer.hpp> includes this header.
// This header includes no CUDA header.
// Layer: data (docs/layers.md).
#pragma once

#include <atomic>
#include <cstddef>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel {

// The bounds of each option. The staging pool's fixed array of idle chunks
// holds kMaxCopyWorkers * kMaxCopySlots of them (detail/data/engine/staging_pool.hpp).
inline constexpr std::size_t kMaxCopyWorkers = 16;
inline constexpr std::size_t kMaxCopySlots = 4;
inline constexpr std::size_t kMinCopyChunkBytes = std::size_t{64} << 10;
inline constexpr std::size_t kMaxCopyChunkBytes = std::size_t{16} << 20;

// Note [Tuning the copy engine]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A pageable copy larger than 1 MiB is cut into parts, one per worker thread
// (at most one per 8 MiB); each worker streams its part through `slots` pinned
// staging chunks of `chunk_bytes`, filling one while the DMA of the others
// runs. The best values depend on the host, so they are set at run time, for
// the whole process. A field of 0 means its default: 6 workers host->device and
// 8 device->host (chosen on an H200 host: docs/benchmarks.md), never more than
// the cores this process may run on; 2 slots; 4 MiB chunks.
// tests/bench/sweep_engine.py finds a machine's best. GPUSEL_COPY_WORKERS,
// GPUSEL_COPY_SLOTS and GPUSEL_COPY_CHUNK are read once, the first time the
// options are needed; set_copy_engine_options overrides them. A copy takes the
// options when it starts.
struct CopyEngineOptions {
  std::size_t host_to_device_workers = 0;  // threads for one pageable host->device copy, 1..kMaxCopyWorkers
  std::size_t device_to_host_workers = 0;  // threads for one device->pageable host copy, 1..kMaxCopyWorkers
  std::size_t slots = 0;                   // staging chunks per thread, 2..kMaxCopySlots
  std::size_t chunk_bytes = 0;  // bytes per staging chunk, kMinCopyChunkBytes..kMaxCopyChunkBytes, a multiple of 4096
};

namespace detail {

// The options in effect, for the whole process (Note [One state per process]).
struct CopyEngineSettings {
  std::atomic<std::size_t> host_to_device_workers{0};
  std::atomic<std::size_t> device_to_host_workers{0};
  std::atomic<std::size_t> slots{0};
  std::atomic<std::size_t> chunk_bytes{0};
  // The cores this process could run on when the engine was first used.
  std::size_t cores = 1;
  // The first environment variable that could not be used, with why, or "".
  char environment_problem[160] = {};
};

// The process's settings, read from the environment the first time.
GPUSEL_API CopyEngineSettings& copy_engine_settings() noexcept;

// The options in effect with every default filled in.
GPUSEL_API CopyEngineOptions effective_copy_options() noexcept;

// The cores this process may run on.
GPUSEL_API std::size_t usable_cores() noexcept;

}  // namespace detail

// The options copies use now, every default filled in (Note [Tuning the copy
// engine]). Throws Error when an environment variable was set to a value
// that cannot be used, naming it.
GPUSEL_API CopyEngineOptions copy_engine_options();

// Sets the options later copies use; a field of 0 goes back to its default.
// Throws Error for a value out of its bounds, changing nothing.
GPUSEL_API void set_copy_engine_options(const CopyEngineOptions& options);

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/copy_engine_options-inl.hpp"
#endif
