// The type-erased view Module keeps of each registered Buffer<T>, with room for
// the copy a move prepares before it is committed. See Note [Module::to is a transaction].
#pragma once

#include <cstddef>
#include <typeinfo>
#include <utility>

#include "gpusel/buffer.hpp"
#include "gpusel/device.hpp"

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
  // Makes a copy of the buffer on `device` (a resolved cuda:N or cpu) and
  // keeps it for commit() or cancel(); the buffer itself is untouched.
  virtual void prepare(const Device& device) = 0;
  // Swaps the prepared copy into the buffer and frees the old memory. Cannot
  // fail; does nothing when no copy is prepared.
  virtual void commit() noexcept = 0;
  // Frees the prepared copy, if any. Cannot fail.
  virtual void cancel() noexcept = 0;
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

  void prepare(const Device& device) override {
    prepared_ = buffer_->to(device);
    has_prepared_ = true;
  }
  void commit() noexcept override {
    if (!has_prepared_) return;
    std::swap(*buffer_, prepared_);
    cancel();  // prepared_ now holds the old memory
  }
  void cancel() noexcept override {
    prepared_ = Buffer<T>();
    has_prepared_ = false;
  }

 private:
  Buffer<T>* buffer_;
  Buffer<T> prepared_;  // the copy prepare() made, until commit() or cancel()
  bool has_prepared_ = false;
};

}  // namespace gpusel::detail
