// gpusel::Buffer<T>: an array that knows its device, moved between the host
// and GPUs the way PyTorch moves tensors.
//
//   gpusel::Buffer<float> x{1, 2, 3};                  // torch.tensor([1, 2, 3])
//   auto y = x.to(gpusel::cuda(0));                   // x.to("cuda:0"): a new Buffer, x untouched
//   x = std::move(x).to(gpusel::cuda(0));             // move it, no copy if already there
//   std::vector<float> back = y.to_vector();          // y.tolist()
//   auto pinned = gpusel::Buffer<float>::pinned(n);   // torch.empty(n, pin_memory=True)
// Layer: data (docs/layers.md).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpusel/cached_resources.hpp"     // release_cached_resources, for users of this header
#include "gpusel/copy_engine_options.hpp"  // set_copy_engine_options, for users of this header
#include "gpusel/default_device.hpp"
#include "gpusel/detail/data/buffer/untyped_buffer.hpp"
#include "gpusel/detail/data/memory/memory.hpp"
#include "gpusel/device.hpp"
#include "gpusel/stream.hpp"

namespace gpusel {

namespace detail {
template <class T>
class TypedBufferEntry;  // Module's view of a Buffer (detail/data/buffer/module_entries.hpp)
struct DlpackAccess;     // to_dlpack and from_dlpack (detail/data/buffer/dlpack_exchange.hpp)
}  // namespace detail

// Note [A Buffer never aliases another]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's `t.to(d)` returns `t` itself when it is already on `d`, so the
// result sometimes shares memory with the source and sometimes does not; a
// write through one then shows in the other only on some machines. A Buffer
// owns its memory alone, always:
//   - `x.to(d)` (x an lvalue) always returns a new Buffer with its own memory,
//     even when x is already on d, and leaves x untouched;
//   - `std::move(x).to(d)` hands x's memory over without a copy when x is
//     already on d, and otherwise copies and frees x's memory; either way x is
//     left empty, so nothing is shared. `x = std::move(x).to(d)` is the
//     zero-cost "make sure it is there" idiom.
// This is the one difference from PyTorch. Copying a Buffer is deleted
// (a hidden copy could be a gigabyte over PCIe); clone() says it out loud.

// Note [Buffer devices]
// ~~~~~~~~~~~~~~~~~~~~~
// A Buffer is made on a device named by a Device; `cuda` without an index is
// the calling thread's current device when the Buffer is made (so inside
// DeviceGuard g(1) it lands on cuda:1), and device() always reports the index.
// The Buffer frees its memory on that device whatever device is current when
// it dies, as rmm's device_buffer does, and makes no context anywhere else.
// Device memory comes from a memory pool gpusel keeps per GPU and goes back
// to it without waiting for the GPU (Note [Device memory from a pool]); work
// on a non-blocking stream that uses a Buffer must be recorded with
// record_stream (Note [When freed device memory is reused]).
// Host memory is pageable by default; pinned(n) and pin_memory() make pinned
// (page-locked) host memory, which the GPU's DMA engines reach directly: it
// copies at the bus's full speed and allows asynchronous copies.

// Buffer<T> is a typed view of a detail::UntypedBuffer (detail/data/buffer/untyped_buffer.hpp),
// which owns the bytes and holds the code that moves them: each member here
// adds sizeof(T) and forwards.
template <class T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>, "gpusel::Buffer<T> holds raw bytes: T must be trivially copyable");
  static_assert(alignof(T) <= detail::kHostAlignment,
                "gpusel::Buffer<T>: T needs more alignment than cudaMalloc gives");

 public:
  using value_type = T;

  // Empty, on the cpu; the state a moved-from Buffer is left in.
  Buffer() noexcept = default;

  // `size` elements on `device`, contents unspecified (like torch.empty).
  // Throws OutOfMemory when the memory ran out.
  explicit Buffer(std::size_t size, const Device& device = default_device())
      : memory_(detail::allocate_elements({"gpusel::Buffer", size, sizeof(T), device})) {}

  // A copy of host data, on `device`.
  Buffer(const T* values, std::size_t size, const Device& device = default_device())
      : memory_(detail::copy_host_elements({"gpusel::Buffer", size, sizeof(T), device}, values)) {}
  explicit Buffer(const std::vector<T>& values, const Device& device = default_device())
      : Buffer(values.data(), values.size(), device) {}
  // Buffer<int>{3} holds one element, 3, as std::vector<int>{3} does.
  Buffer(std::initializer_list<T> values, const Device& device = default_device())
      : Buffer(values.begin(), values.size(), device) {}

  // `size` elements of pinned host memory, contents unspecified.
  // Throws Error when no CUDA driver is usable (pinning needs one), and
  // OutOfMemory when pinned memory ran out.
  [[nodiscard]] static Buffer pinned(std::size_t size) {
    return Buffer(
        detail::allocate_elements({"gpusel::Buffer::pinned", size, sizeof(T), gpusel::cpu()}, detail::kPinnedHost));
  }

  // Frees the memory on its own device (Note [Buffer devices]); never throws.
  ~Buffer() = default;

  // Copying is deleted: see Note [A Buffer never aliases another]; use clone().
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  std::size_t size() const noexcept { return memory_.bytes() / sizeof(T); }
  std::size_t bytes() const noexcept { return memory_.bytes(); }
  bool empty() const noexcept { return memory_.bytes() == 0; }
  // cpu, or cuda:N with its index.
  Device device() const { return memory_.place().as_device(); }
  bool is_cuda() const noexcept { return memory_.place().kind == detail::MemoryKind::device; }
  bool is_cpu() const noexcept { return !is_cuda(); }
  bool is_pinned() const noexcept { return memory_.place().kind == detail::MemoryKind::pinned_host; }

  // The elements: host memory for a cpu Buffer, device memory for a cuda one
  // (for your kernels and cudaMemcpy). nullptr when empty.
  T* data() noexcept { return static_cast<T*>(memory_.data()); }
  const T* data() const noexcept { return static_cast<const T*>(memory_.data()); }

  // A new Buffer on `device` with a copy of the elements; *this is untouched
  // (Note [A Buffer never aliases another]). Done when it returns.
  [[nodiscard]] Buffer to(const Device& device) const& {
    const detail::MoveCall what{device, size(), sizeof(T), memory_.place()};
    return Buffer(memory_.copy_to(detail::target_place(device, memory_.place(), what), what));
  }

  // Hands this Buffer's memory over, without a copy, when it is already on
  // `device`; otherwise copies it there and frees it here. *this is left
  // empty, so discarding the result loses the elements.
  [[nodiscard]] Buffer to(const Device& device) && {
    const detail::MoveCall what{device, size(), sizeof(T), memory_.place()};
    return Buffer(memory_.move_to(detail::target_place(device, memory_.place(), what), what));
  }

  // Like to(device), queued on `stream` where the host side is pinned:
  //  - pinned cpu -> cuda, cuda -> cuda: the copy is queued and to() returns
  //    at once;
  //  - cuda -> cpu: the result is a new *pinned* Buffer, filled asynchronously
  //    (as PyTorch's `.to("cpu", non_blocking=True)` does);
  //  - pageable cpu -> cuda: no asynchronous copy from pageable memory is
  //    safe, so this copies synchronously, done when it returns.
  // When it returns early, YOU must keep *this and the result alive and call
  // stream.synchronize() before reading the result or writing *this.
  // The stream must belong to the GPU involved (either one between two GPUs).
  // A GPU result is allocated on `stream` and its free waits for the stream's
  // copy (record_stream is done for you).
  [[nodiscard]] Buffer to(const Device& device, StreamView stream) const& {
    const detail::MoveCall what{device, size(), sizeof(T), memory_.place(), "", &stream};
    detail::MemoryPlace target = detail::target_place(device, memory_.place(), what);
    if (target.is_host() && is_cuda()) target = detail::kPinnedHost;
    return Buffer(memory_.copy_to(target, stream, what));
  }

  // PyTorch's spellings of to(): x.cuda() (the current device), x.cuda(1),
  // x.cpu(). The same operation as to(gpusel::cuda()), to(gpusel::cuda(1)) and
  // to(gpusel::cpu()): a new Buffer, or, on an rvalue, the memory handed over.
  [[nodiscard]] Buffer cuda() const& { return to(gpusel::cuda()); }
  [[nodiscard]] Buffer cuda(Device::Index index) const& { return to(gpusel::cuda(index)); }
  [[nodiscard]] Buffer cpu() const& { return to(gpusel::cpu()); }
  [[nodiscard]] Buffer cuda() && { return std::move(*this).to(gpusel::cuda()); }
  [[nodiscard]] Buffer cuda(Device::Index index) && { return std::move(*this).to(gpusel::cuda(index)); }
  [[nodiscard]] Buffer cpu() && { return std::move(*this).to(gpusel::cpu()); }

  // Marks the work queued on `stream` so far as using this Buffer, so that
  // its memory is not freed and handed out again before that work is done,
  // like PyTorch's tensor.record_stream(stream). Needed for a non-blocking
  // stream (StreamOrder::independent, PyTorch's side streams) or a stream of
  // another GPU; a blocking or default stream of the Buffer's own GPU, and a
  // host Buffer, need nothing (Note [When freed device memory is reused],
  // detail/data/memory/stream_uses.hpp). Record after queuing the work: what is
  // queued later needs another call. Throws Error when the runtime cannot say
  // how the stream was made (a handle that is no stream) or the event cannot
  // be made; a moved-from Stream throws as it converts to a StreamView.
  void record_stream(StreamView stream) { memory_.record_stream(stream, call("gpusel::Buffer::record_stream")); }

  // A pinned host copy, like torch's pin_memory(); from a cuda Buffer too.
  [[nodiscard]] Buffer pin_memory() const {
    return Buffer(memory_.copy_to(
        detail::kPinnedHost, detail::MoveCall{gpusel::cpu(), size(), sizeof(T), memory_.place(), " (pin_memory)"}));
  }

  // A copy on the same device (pinned stays pinned).
  [[nodiscard]] Buffer clone() const { return Buffer(memory_.copy_to(memory_.place(), call("gpusel::Buffer::clone"))); }

  // Copies `source`'s elements into this Buffer, wherever each of them lives
  // (like tensor.copy_(source)); the sizes must match. Done when it returns.
  void copy_from(const Buffer& source) {
    detail::copy_elements(memory_, source.memory_, call("gpusel::Buffer::copy_from"));
  }

  // The elements, copied into a new std::vector (like tensor.tolist()).
  // Buffer::to(cpu()) is faster for large Buffers: a std::vector zero-fills
  // its memory on one thread before the copy (Note [Fresh host memory]).
  [[nodiscard]] std::vector<T> to_vector() const {
    std::vector<T> values(size());
    memory_.copy_into(values.data(), detail::MemoryPlace{}, call("gpusel::Buffer::to_vector"));
    return values;
  }

  // Sets every element to `value`. On a GPU: one host chunk of copies of it is
  // sent over, then copied onto the rest of the Buffer, doubling each time (no
  // kernel needed; about log2(size / 16384) device-to-device copies).
  void fill(const T& value) { memory_.fill(&value, sizeof(T), call("gpusel::Buffer::fill")); }

 private:
  friend class detail::TypedBufferEntry<T>;  // Module::to moves the memory in place
  friend struct detail::DlpackAccess;        // DLPack takes the memory, or gives it

  explicit Buffer(detail::UntypedBuffer memory) noexcept : memory_(std::move(memory)) {}

  // What a call of `function` on this Buffer is doing, for its errors.
  detail::ElementsCall call(const char* function) const { return {function, size(), sizeof(T), device()}; }

  detail::UntypedBuffer memory_;
};

// Factories like torch.zeros(n, device=d), torch.ones(n, device=d) and
// torch.full((n,), value, device=d): `count` elements on `device` (the default
// device when none is given). A Buffer has no shape: the count is its size.
// (Buffer<float>{2, 4} is the two values 2 and 4, as torch.tensor([2, 4]).)
template <class T>
[[nodiscard]] Buffer<T> full(std::size_t count, const T& value, const Device& device = default_device()) {
  Buffer<T> buffer(count, device);
  buffer.fill(value);
  return buffer;
}
template <class T>
[[nodiscard]] Buffer<T> zeros(std::size_t count, const Device& device = default_device()) {
  return full<T>(count, T{}, device);
}
template <class T>
[[nodiscard]] Buffer<T> ones(std::size_t count, const Device& device = default_device()) {
  return full<T>(count, T{1}, device);
}

}  // namespace gpusel
