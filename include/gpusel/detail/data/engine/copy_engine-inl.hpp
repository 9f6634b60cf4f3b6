// The definitions of gpusel/detail/data/engine/copy_engine.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/data/engine/copy_engine.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "gpusel/copy_engine_options.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/forked_child.hpp"
#include "gpusel/detail/data/engine/engine_cache.hpp"
#include "gpusel/detail/data/engine/parallel_parts.hpp"
#include "gpusel/detail/data/engine/peer_access.hpp"
#include "gpusel/detail/data/engine/staged_copy.hpp"
#include "gpusel/guard.hpp"

namespace gpusel::detail {

inline constexpr std::size_t kBytesPerHostCopyWorker = std::size_t{16} << 20;
inline constexpr std::size_t kMaxHostCopyWorkers = 8;

GPUSEL_API std::string describe_copy(std::size_t bytes, const MemoryPlace& to, const MemoryPlace& from) {
  const auto name = [](const MemoryPlace& place) {
    return place.kind == MemoryKind::pinned_host ? std::string("cpu (pinned)") : place.as_device().str();
  };
  return std::to_string(bytes) + " bytes from " + name(from) + " to " + name(to);
}

inline void check_copy(cudaError_t status, const char* call, std::size_t bytes, const MemoryPlace& to,
                       const MemoryPlace& from) {
  if (status != cudaSuccess)
    throw cuda_error(status, std::string("gpusel copy engine: ") + call, describe_copy(bytes, to, from));
}

// memcpy, on several threads when the size pays for it (a fresh destination's
// page faults are then taken in parallel too).
// On the engine cache's threads when no other copy holds them.
inline void host_copy(void* destination, const void* source, std::size_t bytes) {
  const std::size_t workers =
      worker_count(bytes, kBytesPerHostCopyWorker, std::min(kMaxHostCopyWorkers, copy_engine_settings().cores));
  if (workers == 1) {
    std::memcpy(destination, source, bytes);
    return;
  }
  const EngineLease lease;
  run_in_parts(bytes, workers, std::size_t{1} << 20, lease.get() != nullptr ? &lease.get()->workers() : nullptr,
               [&](std::size_t, std::size_t begin, std::size_t end, const std::atomic<bool>&) {
                 std::memcpy(static_cast<char*>(destination) + begin, static_cast<const char*>(source) + begin,
                             end - begin);
               });
}

GPUSEL_API void copy(void* destination, const MemoryPlace& to, const void* source, const MemoryPlace& from,
                     std::size_t bytes) {
  if (bytes == 0) return;
  if (to.is_host() && from.is_host()) return host_copy(destination, source, bytes);
  enter_cuda_work("gpusel copy engine");

  if (from.is_host()) {  // host -> device
    DeviceGuard guard(to.device);
    if (from.kind == MemoryKind::pageable_host && bytes > kDirectCopyBytes) {
      return staged_copy(StagedDirection::host_to_device, static_cast<char*>(const_cast<void*>(source)),
                         static_cast<char*>(destination), bytes, to.device);
    }
    check_copy(cudaMemcpy(destination, source, bytes, cudaMemcpyHostToDevice), "cudaMemcpy", bytes, to, from);
    // From pageable memory cudaMemcpy may return before the DMA has landed.
    if (from.kind == MemoryKind::pageable_host)
      check_copy(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize", bytes, to, from);
    return;
  }

  if (to.is_host()) {  // device -> host
    DeviceGuard guard(from.device);
    if (to.kind == MemoryKind::pageable_host && bytes > kDirectCopyBytes) {
      return staged_copy(StagedDirection::device_to_host, static_cast<char*>(destination),
                         static_cast<char*>(const_cast<void*>(source)), bytes, from.device);
    }
    check_copy(cudaMemcpy(destination, source, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", bytes, to, from);
    return;
  }

  // device -> device: cudaMemcpy between device memory returns before it is done.
  DeviceGuard guard(to.device);
  if (to.device == from.device) {
    check_copy(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync", bytes,
               to, from);
  } else {
    (void)PeerAccess::instance().enable(to.device, from.device);  // staged by the driver if not: Note [Peer copies]
    check_copy(cudaMemcpyPeerAsync(destination, to.device, source, from.device, bytes, nullptr), "cudaMemcpyPeerAsync",
               bytes, to, from);
  }
  check_copy(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize", bytes, to, from);
}

GPUSEL_API void copy_async(void* destination, const MemoryPlace& to, const void* source, const MemoryPlace& from,
                           std::size_t bytes, StreamView stream) {
  if (bytes == 0) return;
  const bool pageable = to.kind == MemoryKind::pageable_host || from.kind == MemoryKind::pageable_host;
  if (pageable || (to.is_host() && from.is_host())) return copy(destination, to, source, from, bytes);
  enter_cuda_work("gpusel copy engine");
  const bool stream_fits = (!to.is_host() && to.device == stream.device_index()) ||
                           (!from.is_host() && from.device == stream.device_index());
  if (!stream_fits) {
    throw Error("gpusel copy engine: copying " + describe_copy(bytes, to, from) + " on a stream of " +
                stream.device().str() + ": the stream must belong to a device the copy involves");
  }
  DeviceGuard guard(stream.device_index());
  cudaError_t status = cudaSuccess;
  if (!to.is_host() && !from.is_host() && to.device != from.device) {
    (void)PeerAccess::instance().enable(to.device, from.device);
    status = cudaMemcpyPeerAsync(destination, to.device, source, from.device, bytes, stream.handle());
  } else {
    const cudaMemcpyKind kind =
        to.is_host() ? cudaMemcpyDeviceToHost : (from.is_host() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice);
    status = cudaMemcpyAsync(destination, source, bytes, kind, stream.handle());
  }
  check_copy(status, "cudaMemcpyAsync", bytes, to, from);
}

// Fills the first `bytes` at `destination` with copies of the `pattern_bytes`
// at `pattern`, one after another, doubling: each memcpy copies what is
// already there onto the next stretch (`bytes` is a multiple of `pattern_bytes`).
inline void repeat_in_place(char* destination, std::size_t bytes, const void* pattern, std::size_t pattern_bytes) {
  std::memcpy(destination, pattern, pattern_bytes);
  for (std::size_t filled = pattern_bytes; filled < bytes;) {
    const std::size_t count = std::min(filled, bytes - filled);
    std::memcpy(destination + filled, destination, count);
    filled += count;
  }
}

inline constexpr std::size_t kFillChunkBytes = std::size_t{64} << 10;

// How fill() works: a chunk of copies of the pattern (kFillChunkBytes, or
// one pattern if that is larger) is made first; in host memory it is made in
// place and copied over the rest, chunk by chunk, from the cache. On a GPU it
// is made on the host and sent over, then copied onto the rest of the
// destination, doubling each time: no kernel is needed, and it takes about
// log2(bytes / kFillChunkBytes) device-to-device copies.
GPUSEL_API void fill(void* destination, const MemoryPlace& to, std::size_t bytes, const void* pattern,
                     std::size_t pattern_bytes) {
  if (bytes == 0) return;
  char* const out = static_cast<char*>(destination);
  const std::size_t chunk = std::min(bytes, std::max(pattern_bytes, kFillChunkBytes / pattern_bytes * pattern_bytes));
  if (to.is_host()) {
    repeat_in_place(out, chunk, pattern, pattern_bytes);
    for (std::size_t filled = chunk; filled < bytes; filled += chunk)
      std::memcpy(out + filled, out, std::min(chunk, bytes - filled));
    return;
  }
  std::vector<char> host_chunk(chunk);
  repeat_in_place(host_chunk.data(), chunk, pattern, pattern_bytes);
  copy(out, to, host_chunk.data(), MemoryPlace{}, chunk);
  DeviceGuard guard(to.device);
  for (std::size_t filled = chunk; filled < bytes;) {
    const std::size_t count = std::min(filled, bytes - filled);
    check_copy(cudaMemcpyAsync(out + filled, out, count, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync", count,
               to, to);
    filled += count;
  }
  check_copy(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize", bytes, to, to);
}

}  // namespace gpusel::detail
