// gpusel::Buffer<T>: an array that knows its device, moved between the host
// and GPUs the way PyTorch moves tensors.
//
//   gpusel::Buffer<float> x{1, 2, 3};                  // torch.tensor([1, 2, 3])
//   auto y = x.to(gpusel::cuda(0));                   // x.to("cuda:0"): a new Buffer, x untouched
//   x = std::move(x).to(gpusel::cuda(0));             // move it, no copy if already there
//   std::vector<float> back = y.to_vector();          // y.tolist()
//   auto pinned = gpusel::Buffer<float>::pinned(n);   // torch.empty(n, pin_memory=True)
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpusel/default_device.hpp"
#include "gpusel/detail/copy_engine.hpp"
#include "gpusel/detail/error_context.hpp"
#include "gpusel/detail/memory.hpp"
#include "gpusel/detail/peer_access.hpp"
#include "gpusel/detail/resolve_device.hpp"
#include "gpusel/detail/staging_pool.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"
#include "gpusel/guard.hpp"
#include "gpusel/stream.hpp"

namespace gpusel {

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
// Host memory is pageable by default; pinned(n) and pin_memory() make pinned
// (page-locked) host memory, which the GPU's DMA engines reach directly: it
// copies at the bus's full speed and allows asynchronous copies.

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
  explicit Buffer(std::size_t size, const Device& device = default_device())
      : Buffer(allocate(size, device, [&] { return describe("gpusel::Buffer", size, device); })) {}

  // A copy of host data, on `device`.
  Buffer(const T* values, std::size_t size, const Device& device = default_device()) : Buffer(size, device) {
    if (size != 0 && values == nullptr)
      throw Error(describe("gpusel::Buffer", size, device) + ": the data pointer is null");
    copy_in(values, detail::MemoryPlace{}, [&] { return describe("gpusel::Buffer", size, device); });
  }
  explicit Buffer(const std::vector<T>& values, const Device& device = default_device())
      : Buffer(values.data(), values.size(), device) {}
  // Buffer<int>{3} holds one element, 3, as std::vector<int>{3} does.
  Buffer(std::initializer_list<T> values, const Device& device = default_device())
      : Buffer(values.begin(), values.size(), device) {}

  // `size` elements of pinned host memory, contents unspecified.
  // Throws Error when no CUDA driver is usable (pinning needs one).
  static Buffer pinned(std::size_t size) {
    const auto what = [&] { return describe("gpusel::Buffer::pinned", size, cpu()); };
    return Buffer(allocate(size, detail::MemoryPlace{detail::MemoryKind::pinned_host, -1}, what));
  }

  // Frees the memory on its own device (Note [Buffer devices]); never throws.
  ~Buffer() = default;

  // Copying is deleted: see Note [A Buffer never aliases another]; use clone().
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept : memory_(std::move(other.memory_)), size_(std::exchange(other.size_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    memory_ = std::move(other.memory_);
    size_ = std::exchange(other.size_, 0);
    return *this;
  }

  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  // cpu, or cuda:N with its index.
  Device device() const { return memory_.place().as_device(); }
  bool is_cuda() const noexcept { return memory_.place().kind == detail::MemoryKind::device; }
  bool is_cpu() const noexcept { return !is_cuda(); }
  bool is_pinned() const noexcept { return memory_.place().kind == detail::MemoryKind::pinned_host; }

  // The elements: host memory for a cpu Buffer, device memory for a cuda one
  // (for your kernels and cudaMemcpy). nullptr when empty.
  T* data() noexcept { return static_cast<T*>(memory_.get()); }
  const T* data() const noexcept { return static_cast<const T*>(memory_.get()); }

  // A new Buffer on `device` with a copy of the elements; *this is untouched
  // (Note [A Buffer never aliases another]). Done when it returns.
  Buffer to(const Device& device) const& {
    const auto what = [&] { return describe_move(device); };  // Note [Error context costs nothing until an error]
    return copy_to(target_place(device, what), what);
  }

  // Hands this Buffer's memory over, without a copy, when it is already on
  // `device`; otherwise copies it there and frees it here. *this is left empty.
  Buffer to(const Device& device) && {
    const auto what = [&] { return describe_move(device); };
    const detail::MemoryPlace target = target_place(device, what);
    if (target.kind == memory_.place().kind && target.device == memory_.place().device) return std::move(*this);
    Buffer result = copy_to(target, what);
    *this = Buffer();
    return result;
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
  Buffer to(const Device& device, const Stream& stream) const& {
    const auto what = [&] { return describe_move(device) + " on a stream of " + stream.device().str(); };
    detail::MemoryPlace target = target_place(device, what);
    if (target.is_host() && is_cuda()) target.kind = detail::MemoryKind::pinned_host;
    Buffer result(allocate(size_, target, what));
    try {
      detail::copy_async(result.data(), target, data(), memory_.place(), bytes(), stream);
    } catch (const Error& error) {
      throw with_context(error, what());
    }
    return result;
  }

  // A pinned host copy, like torch's pin_memory(); from a cuda Buffer too.
  Buffer pin_memory() const {
    return copy_to(detail::MemoryPlace{detail::MemoryKind::pinned_host, -1},
                   [&] { return describe_move(cpu()) + " (pin_memory)"; });
  }

  // A copy on the same device (pinned stays pinned).
  Buffer clone() const {
    return copy_to(memory_.place(), [&] { return describe("gpusel::Buffer::clone", size_, device()); });
  }

  // Copies `source`'s elements into this Buffer, wherever each of them lives
  // (like tensor.copy_(source)); the sizes must match. Done when it returns.
  void copy_from(const Buffer& source) {
    const auto what = [&] { return describe("gpusel::Buffer::copy_from", size_, device()); };
    if (source.size_ != size_)
      throw Error(what() + ": the source has " + std::to_string(source.size_) + " elements, this Buffer " +
                  std::to_string(size_));
    if (&source != this) copy_in(source.data(), source.memory_.place(), what);
  }

  // The elements, copied into a new std::vector (like tensor.tolist()).
  // Buffer::to(cpu()) is faster for large Buffers: a std::vector zero-fills
  // its memory on one thread before the copy (Note [Fresh host memory]).
  std::vector<T> to_vector() const {
    std::vector<T> values(size_);
    try {
      detail::copy(values.data(), detail::MemoryPlace{}, data(), memory_.place(), bytes());
    } catch (const Error& error) {
      throw with_context(error, describe("gpusel::Buffer::to_vector", size_, device()));
    }
    return values;
  }

  // Sets every element to `value`. On a GPU: one host chunk of copies of it is
  // sent over, then copied onto the rest of the Buffer, doubling each time (no
  // kernel needed; about log2(size / 16384) device-to-device copies).
  void fill(const T& value) {
    if (size_ == 0) return;
    if (!is_cuda()) {
      std::fill_n(data(), size_, value);
      return;
    }
    const auto what = [&] { return describe("gpusel::Buffer::fill", size_, device()); };
    const std::size_t seed_size = std::min(size_, std::max<std::size_t>(1, (std::size_t{64} << 10) / sizeof(T)));
    const std::vector<T> seed(seed_size, value);
    try {
      detail::copy(data(), memory_.place(), seed.data(), detail::MemoryPlace{}, seed_size * sizeof(T));
      DeviceGuard guard(memory_.place().device);
      for (std::size_t filled = seed_size; filled < size_;) {
        const std::size_t count = std::min(filled, size_ - filled);
        detail::check_copy(
            cudaMemcpyAsync(data() + filled, data(), count * sizeof(T), cudaMemcpyDeviceToDevice, nullptr),
            "cudaMemcpyAsync", count * sizeof(T), memory_.place(), memory_.place());
        filled += count;
      }
      detail::check_copy(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize", bytes(), memory_.place(),
                         memory_.place());
    } catch (const Error& error) {
      throw with_context(error, what());
    }
  }

 private:
  explicit Buffer(detail::OwnedMemory memory) noexcept
      : memory_(std::move(memory)), size_(memory_.bytes() / sizeof(T)) {}

  static std::size_t checked_bytes(std::size_t size, detail::ErrorContext what) {
    if (size > std::numeric_limits<std::size_t>::max() / sizeof(T))
      throw Error(what() + ": " + std::to_string(size) + " elements do not fit in memory");
    return size * sizeof(T);
  }

  static detail::OwnedMemory allocate(std::size_t size, const detail::MemoryPlace& place, detail::ErrorContext what) {
    return detail::OwnedMemory::allocate(checked_bytes(size, what), place, what);
  }
  static detail::OwnedMemory allocate(std::size_t size, const Device& device, detail::ErrorContext what) {
    return allocate(size, place_of(device, what), what);
  }

  static detail::MemoryPlace place_of(const Device& device, detail::ErrorContext what) {
    if (device.is_cpu()) return detail::MemoryPlace{};
    return detail::MemoryPlace{detail::MemoryKind::device, detail::resolve_cuda_index(device, what)};
  }

  // Where to(device) puts the copy: on the cpu, pinned stays pinned.
  detail::MemoryPlace target_place(const Device& device, detail::ErrorContext what) const {
    if (device.is_cpu()) return is_cpu() ? memory_.place() : detail::MemoryPlace{};
    return place_of(device, what);
  }

  // "gpusel::Buffer(1024 elements, 4096 bytes, cuda:1)"
  static std::string describe(const char* function, std::size_t size, const Device& device) {
    return std::string(function) + "(" + std::to_string(size) + " elements, " +
           (size <= std::numeric_limits<std::size_t>::max() / sizeof(T) ? std::to_string(size * sizeof(T))
                                                                        : "too many") +
           " bytes, " + device.str() + ")";
  }

  // "gpusel::Buffer::to(cuda:1) of 1024 elements (4096 bytes) on cpu"
  std::string describe_move(const Device& device) const {
    return "gpusel::Buffer::to(" + device.str() + ") of " + std::to_string(size_) + " elements (" +
           std::to_string(bytes()) + " bytes) on " + (is_pinned() ? std::string("cpu (pinned)") : this->device().str());
  }

  static Error with_context(const Error& error, const std::string& what) {
    return Error(error.code(), error.code_name(), what + ": " + error.what());
  }

  // A new Buffer at `target` holding a copy of the elements, done when it returns.
  Buffer copy_to(const detail::MemoryPlace& target, detail::ErrorContext what) const {
    Buffer result(allocate(size_, target, what));
    result.copy_in(data(), memory_.place(), what);
    return result;
  }

  // Copies bytes() from `source` in `from` into this Buffer, done when it returns.
  void copy_in(const void* source, const detail::MemoryPlace& from, detail::ErrorContext what) {
    try {
      detail::copy(memory_.get(), memory_.place(), source, from, bytes());
    } catch (const Error& error) {
      throw with_context(error, what());
    }
  }

  detail::OwnedMemory memory_;
  std::size_t size_ = 0;
};

// Frees the pinned staging memory the copy engine keeps between copies and
// forgets which GPU pairs have peer access enabled. Call it before
// cudaDeviceReset (which destroys both behind gpusel's back), or to give the
// pinned memory (up to 128 MiB) back to the system. Like torch.cuda.empty_cache().
inline void release_cached_resources() noexcept {
  detail::StagingPool::instance().release_idle();
  detail::PeerAccess::instance().forget();
}

}  // namespace gpusel
