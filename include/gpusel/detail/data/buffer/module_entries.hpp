// The type-erased view Module keeps of each registered Buffer<T>: what it is,
// its bytes, and the swap that commits a move. See Note [Module::to is a transaction].
#pragma once

#include <cstddef>
#include <typeinfo>
#include <utility>

#include "gpusel/detail/data/buffer/untyped_buffer.hpp"
#include "gpusel/device.hpp"

namespace gpusel {
template <class T>
class Buffer;  // gpusel/buffer.hpp, which module.hpp includes before it instantiates an entry
}  // namespace gpusel

namespace gpusel::detail {

// One registered Buffer<T>, whatever T.
class BufferEntry {
 public:
  virtual ~BufferEntry() = default;
  virtual Device device() const = 0;
  virtual std::size_t size() const noexcept = 0;
  virtual std::size_t bytes() const noexcept = 0;
  virtual bool is_pinned() const noexcept = 0;
  virtual const std::type_info& element_type() const noexcept = 0;
  virtual const void* address() const noexcept = 0;  // of the Buffer object
  virtual void* buffer() noexcept = 0;               // the Buffer<T>*, for typed access
  // The buffer's bytes, for Module::to to copy (detail/data/buffer/batched_copy.hpp).
  virtual const UntypedBuffer& memory() const noexcept = 0;
  // Puts `copy` (a copy of the bytes, made elsewhere) in the buffer and frees
  // the old memory. Cannot fail.
  virtual void replace(UntypedBuffer copy) noexcept = 0;
};

template <class T>
class TypedBufferEntry final : public BufferEntry {
 public:
  explicit TypedBufferEntry(Buffer<T>& buffer) noexcept : buffer_(&buffer) {}
  Device device() const override { return buffer_->device(); }
  std::size_t size() const noexcept override { return buffer_->size(); }
  std::size_t bytes() const noexcept override { return buffer_->bytes(); }
  bool is_pinned() const noexcept override { return buffer_->is_pinned(); }
  const std::type_info& element_type() const noexcept override { return typeid(T); }
  const void* address() const noexcept override { return buffer_; }
  void* buffer() noexcept override { return buffer_; }
  const UntypedBuffer& memory() const noexcept override { return buffer_->memory_; }
  void replace(UntypedBuffer copy) noexcept override { buffer_->memory_ = std::move(copy); }

 private:
  Buffer<T>* buffer_;
};

}  // namespace gpusel::detail
