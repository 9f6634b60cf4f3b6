// Memory of the three kinds a Buffer can hold: ordinary (pageable) host
// memory, pinned host memory, and device memory, each allocated and freed
// where it belongs. Who owns it and how it is copied: detail/data/buffer/untyped_buffer.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/core/error_context.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

class StreamUses;  // detail/data/memory/stream_uses.hpp

enum class MemoryKind : std::uint8_t { pageable_host, pinned_host, device };

// Where a range of bytes lives: the kind, and for device memory its device.
struct MemoryPlace {
  MemoryKind kind = MemoryKind::pageable_host;
  int device = -1;

  bool is_host() const noexcept { return kind != MemoryKind::device; }
  Device as_device() const { return kind == MemoryKind::device ? cuda(device) : cpu(); }

  friend bool operator==(const MemoryPlace& a, const MemoryPlace& b) noexcept {
    return a.kind == b.kind && a.device == b.device;
  }
  friend bool operator!=(const MemoryPlace& a, const MemoryPlace& b) noexcept { return !(a == b); }
};

inline constexpr MemoryPlace kPinnedHost{MemoryKind::pinned_host, -1};

// Note [Fresh host memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A new host array is untouched pages: the first write to each one faults into
// the kernel, which zeroes it, and that, not the PCIe bus, limits a copy of a
// GPU's data into a new array (docs/benchmarks.md). gpusel's large host
// buffers are therefore aligned to 2 MiB and advised MADV_HUGEPAGE, so the
// kernel can back them with huge pages (512 times fewer faults, each zeroing
// 2 MiB at memory speed), and are first written by the copy engine's worker
// threads, each its own part, so the faults that remain are taken in parallel.
// Nothing is touched at allocation: a pre-fault there would be done by one
// thread and then written again by the copy. Where huge pages are not granted
// the workers prefault what each drains (Note [Prefaulting fresh host
// memory]); freed large blocks are kept for reuse (Note [The host block cache]).

// Host buffers of kHugePageWorthwhileBytes or more are large: 2 MiB-aligned and
// advised MADV_HUGEPAGE (Note [Fresh host memory]).
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
inline constexpr std::size_t kHugePageWorthwhileBytes = std::size_t{4} << 20;
inline constexpr std::size_t kHostAlignment = 256;  // what cudaMalloc guarantees, so T may need as much

// `value` rounded up to a multiple of `multiple` (> 0) in `rounded`; false,
// leaving `rounded` alone, when the result cannot be represented (a size near
// SIZE_MAX would otherwise wrap to almost nothing, and the allocation "succeed").
inline bool round_up(std::size_t value, std::size_t multiple, std::size_t& rounded) noexcept {
  const std::size_t remainder = value % multiple;
  if (remainder == 0) {
    rounded = value;
    return true;
  }
  if (value > std::numeric_limits<std::size_t>::max() - (multiple - remainder)) return false;
  rounded = value + (multiple - remainder);
  return true;
}

// Throws `error` (a failed allocation's), as an OutOfMemory when `status` says
// the memory ran out, so that a caller can catch that case apart.
[[noreturn]] inline void throw_allocation_error(cudaError_t status, const Error& error) {
  if (status == cudaErrorMemoryAllocation) throw OutOfMemory(error.code(), error.code_name(), error.what());
  throw error;
}

// `bytes` in `place`, or nullptr for zero bytes; `what` names the owner for
// errors ("gpusel::Buffer(1024 elements, 4096 bytes, cuda:1)"); `involved` is
// the GPU the bytes are copied from or to, or -1, for pinned memory (Note
// [Which device pins host memory]); `stream` is the stream device memory is
// ordered on (Note [When freed device memory is reused], detail/data/memory/stream_uses.hpp).
// Throws OutOfMemory when the memory ran out, Error for any other failure.
[[nodiscard]] GPUSEL_API void* allocate_memory(std::size_t bytes, const MemoryPlace& place, ErrorContext what,
                                               int involved = -1, cudaStream_t stream = cudaStreamLegacy);

// Frees what allocate_memory returned for `place`, on the memory's own device
// whatever device is current (as rmm's device_buffer does): a free acts in
// the current context and would make one on a device the program never used.
// Device memory is freed after the streams in `uses` (may be null; Note [When
// freed device memory is reused]). When that device cannot be made current,
// frees from the current device rather than leak, and tells the restore-error
// handler (release_on_device, guard.hpp). Does nothing for nullptr. Never throws.
GPUSEL_API void free_memory(void* pointer, const MemoryPlace& place, StreamUses* uses = nullptr) noexcept;

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/memory/memory-inl.hpp"
#endif
