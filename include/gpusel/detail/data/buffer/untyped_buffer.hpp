// UntypedBuffer: bytes in one place (pageable host memory, pinned host memory,
// or one GPU's memory) with one owner, and all a Buffer<T> does with them:
// allocate, copy to another place through the copy engine, copy in and out,
// fill with a pattern. Buffer<T> (buffer.hpp) is a typed view of one, as
// rmm's device_uvector<T> is of a device_buffer: it adds the element type and
// forwards, so this code, and the text of its errors, is compiled once for
// every T rather than once per T.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/core/error_context.hpp"
#include "gpusel/detail/data/engine/copy_engine.hpp"
#include "gpusel/detail/data/memory/memory.hpp"
#include "gpusel/device.hpp"
#include "gpusel/stream.hpp"

namespace gpusel::detail {

class StreamUses;  // detail/data/memory/stream_uses.hpp

// Memory another library owns (a DLPack tensor's, gpusel/dlpack.hpp): given
// back by calling release(owner) once, when the buffer that holds it dies.
struct ForeignOwner {
  void* owner = nullptr;
  void (*release)(void* owner) noexcept = nullptr;
};

class UntypedBuffer {
 public:
  // Empty, in pageable host memory: the state a moved-from buffer is left in.
  UntypedBuffer() noexcept = default;

  // `bytes` in `place`, contents unspecified; zero bytes allocate nothing.
  // `what` names the owner for errors; `involved` is the GPU they will be
  // copied from, if any (detail/data/memory/memory.hpp's allocate_memory). Throws
  // OutOfMemory when the memory ran out.
  // `stream`: the stream device memory is ordered on (Note [When freed device
  // memory is reused], detail/data/memory/stream_uses.hpp).
  [[nodiscard]] static UntypedBuffer allocate(std::size_t bytes, const MemoryPlace& place, ErrorContext what,
                                              int involved = -1, cudaStream_t stream = cudaStreamLegacy) {
    return UntypedBuffer(allocate_memory(bytes, place, what, involved, stream), bytes, place);
  }

  // Holds `bytes` at `pointer` in `place` that `owner` (made with new) owns:
  // released through it, not freed (Note [Memory another library owns]).
  [[nodiscard]] static UntypedBuffer adopt(void* pointer, std::size_t bytes, const MemoryPlace& place,
                                           ForeignOwner* owner) noexcept {
    UntypedBuffer buffer(bytes == 0 ? nullptr : pointer, bytes, place);
    buffer.foreign_ = owner;
    return buffer;
  }

  // Frees the memory in its own place after its recorded stream uses
  // (detail/data/memory/memory.hpp's free_memory); never throws.
  ~UntypedBuffer() { release(); }

  // Copying is deleted: two owners would free the memory twice.
  UntypedBuffer(const UntypedBuffer&) = delete;
  UntypedBuffer& operator=(const UntypedBuffer&) = delete;
  UntypedBuffer(UntypedBuffer&& other) noexcept
      : pointer_(std::exchange(other.pointer_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        place_(std::exchange(other.place_, MemoryPlace{})),
        uses_(std::exchange(other.uses_, nullptr)),
        foreign_(std::exchange(other.foreign_, nullptr)) {}
  UntypedBuffer& operator=(UntypedBuffer&& other) noexcept {
    if (this != &other) {
      release();
      pointer_ = std::exchange(other.pointer_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      place_ = std::exchange(other.place_, MemoryPlace{});
      uses_ = std::exchange(other.uses_, nullptr);
      foreign_ = std::exchange(other.foreign_, nullptr);
    }
    return *this;
  }

  // Marks the work queued on `stream` so far as using this buffer's device
  // memory, so that its free waits for it (Note [When freed device memory is
  // reused]). Nothing to do for host memory, an empty buffer, or a blocking
  // stream of the memory's own device. Throws Error naming `what`.
  GPUSEL_API void record_stream(StreamView stream, ErrorContext what);

  // Makes `consumer`, a stream of this device memory's GPU, wait for the work
  // pending on the memory: what its GPU's legacy stream has queued (the
  // allocation, and every blocking stream's work before it) and the recorded
  // uses, with events, never a device-wide synchronize. Nothing for host
  // memory or an empty buffer. Throws Error naming `what`; the buffer is unchanged.
  GPUSEL_API void order_before(cudaStream_t consumer, ErrorContext what) const;

  // Forgets the memory without freeing it: what a child forked after CUDA
  // started does with memory CUDA gave, which it cannot free. Never throws.
  void abandon() noexcept {
    pointer_ = nullptr;
    bytes_ = 0;
    uses_ = nullptr;
    foreign_ = nullptr;
  }

  void* data() const noexcept { return pointer_; }
  std::size_t bytes() const noexcept { return bytes_; }
  const MemoryPlace& place() const noexcept { return place_; }

  // A new buffer in `target` holding a copy of these bytes; done when it returns.
  [[nodiscard]] GPUSEL_API UntypedBuffer copy_to(const MemoryPlace& target, ErrorContext what) const;

  // This buffer itself when it is in `target` already; otherwise a copy
  // there, and this buffer's memory is freed. Either way *this is left empty.
  [[nodiscard]] GPUSEL_API UntypedBuffer move_to(const MemoryPlace& target, ErrorContext what);

  // A new buffer in `target`, its copy queued on `stream` where no pageable
  // memory is involved (detail/data/engine/copy_engine.hpp's copy_async): then the caller
  // keeps both alive and synchronizes the stream before using either. Device
  // memory in the result is allocated on `stream`, which is recorded for it.
  [[nodiscard]] GPUSEL_API UntypedBuffer copy_to(const MemoryPlace& target, StreamView stream, ErrorContext what) const;

  // Copies bytes() from `source`, in `from`, into this buffer; done when it returns.
  GPUSEL_API void copy_from(const void* source, const MemoryPlace& from, ErrorContext what);

  // Copies this buffer's bytes to `destination`, in `to`; done when it returns.
  GPUSEL_API void copy_into(void* destination, const MemoryPlace& to, ErrorContext what) const;

  // Sets the buffer to copies of the `pattern_bytes` at `pattern`, one after
  // another (bytes() is a multiple of `pattern_bytes`); done when it returns.
  GPUSEL_API void fill(const void* pattern, std::size_t pattern_bytes, ErrorContext what);

 private:
  // The GPU this buffer is on, or -1 in host memory.
  int gpu() const noexcept { return place_.kind == MemoryKind::device ? place_.device : -1; }

  UntypedBuffer(void* pointer, std::size_t bytes, const MemoryPlace& place) noexcept
      : pointer_(pointer), bytes_(bytes), place_(place) {}

  // Frees the memory (or gives it back to its foreign owner) and forgets the
  // recorded uses; never throws.
  GPUSEL_API void release() noexcept;

  // Gives foreign memory back once the work recorded on it is done; never throws.
  GPUSEL_API void release_foreign() noexcept;

  void* pointer_ = nullptr;
  std::size_t bytes_ = 0;
  MemoryPlace place_;
  StreamUses* uses_ = nullptr;       // the streams its free waits for; null until one is recorded
  ForeignOwner* foreign_ = nullptr;  // who owns the memory when gpusel did not allocate it
};

// --- what Buffer<T> does and says, for every T -------------------------------
// Each ErrorContext below is one type whatever T is (see Note [Error context
// costs nothing until an error]); Buffer<T> fills in sizeof(T).

// "gpusel::Buffer::clone(1024 elements, 4096 bytes, cuda:1)": a call of
// `function` on `size` elements of `element_bytes` each, on `device`.
struct ElementsCall {
  const char* function;
  std::size_t size;
  std::size_t element_bytes;
  Device device;

  GPUSEL_API std::string operator()() const;
};

// "gpusel::Buffer::to(cuda:1) of 1024 elements (4096 bytes) on cpu", then
// `suffix`, then " on a stream of cuda:N" when there is a stream.
struct MoveCall {
  Device target = gpusel::cpu();
  std::size_t size = 0;
  std::size_t element_bytes = 0;
  MemoryPlace from;
  const char* suffix = "";
  const StreamView* stream = nullptr;

  GPUSEL_API std::string operator()() const;
};

// Where new memory on `device` lives: pageable host memory for cpu, the GPU's
// memory for cuda:N, and for `cuda` the calling thread's current GPU.
GPUSEL_API MemoryPlace place_of(const Device& device, ErrorContext what);

// Where a Buffer in `from` puts its copy on `device`: on the cpu, pinned stays pinned.
GPUSEL_API MemoryPlace target_place(const Device& device, const MemoryPlace& from, ErrorContext what);

// `call.size` elements of `call.element_bytes` in `place`, contents
// unspecified. A size whose bytes cannot be counted is an OutOfMemory.
[[nodiscard]] GPUSEL_API UntypedBuffer allocate_elements(const ElementsCall& call, const MemoryPlace& place);

// The same on `call.device`.
[[nodiscard]] GPUSEL_API UntypedBuffer allocate_elements(const ElementsCall& call);

// The same, holding a copy of the elements at `values` in host memory.
[[nodiscard]] GPUSEL_API UntypedBuffer copy_host_elements(const ElementsCall& call, const void* values);

// Copies `source`'s elements into `destination`'s, which must be as many.
GPUSEL_API void copy_elements(UntypedBuffer& destination, const UntypedBuffer& source, const ElementsCall& call);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/buffer/untyped_buffer-inl.hpp"
#endif
