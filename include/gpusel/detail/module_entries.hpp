// The type-erased view Module keeps of each registered Buffer<T>, and the
// moves it prepares before committing them. See Note [Module::to is a transaction].
#pragma once

#include <cstddef>
#include <memory>
#include <typeinfo>
#include <utility>

#include "gpusel/buffer.hpp"
#include "gpusel/device.hpp"

namespace gpusel::detail {

// A prepared move: a copy of one buffer, already on the target device, that
// takes the buffer's place on commit().
class PendingMove {
 public:
  virtual ~PendingMove() = default;
  // Swaps the copy into the registered Buffer; the old memory stays here
  // and is freed when the PendingMove dies. Cannot fail.
  virtual void commit() noexcept = 0;
};

template <class T>
class TypedPendingMove final : public PendingMove {
 public:
  TypedPendingMove(Buffer<T>& target, Buffer<T> copy) noexcept : target_(&target), copy_(std::move(copy)) {}
  void commit() noexcept override { std::swap(*target_, copy_); }

 private:
  Buffer<T>* target_;
  Buffer<T> copy_;
};

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
  virtual void* buffer() noexcept = 0;                // the Buffer<T>*, for typed access
  // A copy of the buffer on `device` (a resolved cuda:N or cpu), to commit later.
  virtual std::unique_ptr<PendingMove> prepare(const Device& device) const = 0;
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
  std::unique_ptr<PendingMove> prepare(const Device& device) const override {
    return std::make_unique<TypedPendingMove<T>>(*buffer_, buffer_->to(device));
  }

 private:
  Buffer<T>* buffer_;
};

}  // namespace gpusel::detail
