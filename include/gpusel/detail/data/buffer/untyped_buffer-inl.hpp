// The definitions of gpusel/detail/data/buffer/untyped_buffer.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/data/buffer/untyped_buffer.hpp"

#include <limits>

#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/resolve_device.hpp"
#include "gpusel/detail/data/memory/stream_uses.hpp"
#include "gpusel/error.hpp"
#include "gpusel/guard.hpp"

namespace gpusel::detail {

GPUSEL_API void UntypedBuffer::release() noexcept {
  if (foreign_ != nullptr) {
    release_foreign();
  } else {
    free_memory(pointer_, place_, uses_);
  }
  delete uses_;
  uses_ = nullptr;
}

// Note [Memory another library owns]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A Buffer taken from a DLPack tensor holds memory its producer owns and frees
// at once when its deleter runs (CuPy's pool, numpy's array, a cudaFree), not
// ordered on any stream. So before the deleter runs, the host waits for what
// the memory's free would have been ordered after: the device's legacy stream
// (every blocking stream's work queued before it) made to wait for the
// recorded uses, then an event recorded there. That is one stream's event, not
// a device-wide synchronize. In a child forked after CUDA started, device
// memory is left to leak: its producer's deleter would call a CUDA it cannot
// use there. Host memory needs no wait (as free_memory's does not).
GPUSEL_API void UntypedBuffer::release_foreign() noexcept {
  ForeignOwner* const owner = std::exchange(foreign_, nullptr);
  if (place_.kind == MemoryKind::device) {
    if (forked_after_cuda()) {
      uses_ = nullptr;  // its events are CUDA's too: left with the memory
      delete owner;
      return;
    }
    release_on_device(place_.device, "gpusel::Buffer giving memory back to its DLPack producer", [&]() noexcept {
      if (uses_ != nullptr) uses_->order_before_legacy_stream();
      cudaEvent_t done = nullptr;
      if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        if (cudaStreamSynchronize(cudaStreamLegacy) != cudaSuccess) (void)cudaGetLastError();
        return;
      }
      if (cudaEventRecord(done, cudaStreamLegacy) != cudaSuccess || cudaEventSynchronize(done) != cudaSuccess)
        (void)cudaGetLastError();
      if (cudaEventDestroy(done) != cudaSuccess) (void)cudaGetLastError();
    });
  }
  owner->release(owner->owner);
  delete owner;
}

// Whether the legacy default stream of `stream`'s device waits for the work
// queued on `stream` before its own (Note [When freed device memory is
// reused]): the default streams, and every stream made without
// cudaStreamNonBlocking. Throws Error naming `what` when the runtime cannot
// say, as for a handle that is no stream.
inline bool legacy_stream_waits_for(StreamView stream, ErrorContext what) {
  if (is_default_stream_handle(stream.handle())) return true;
  unsigned flags = 0;
  const cudaError_t status = cudaStreamGetFlags(stream.handle(), &flags);
  if (status != cudaSuccess) throw cuda_error(status, what() + ": cudaStreamGetFlags", stream.device());
  return (flags & cudaStreamNonBlocking) == 0;
}

GPUSEL_API void UntypedBuffer::record_stream(StreamView stream, ErrorContext what) {
  if (place_.kind != MemoryKind::device || pointer_ == nullptr) return;
  if (stream.device_index() == place_.device && legacy_stream_waits_for(stream, what)) return;
  if (uses_ == nullptr) uses_ = new StreamUses;
  uses_->record(stream.handle(), stream.device_index(), what);
}

GPUSEL_API void UntypedBuffer::order_before(cudaStream_t consumer, ErrorContext what) const {
  if (place_.kind != MemoryKind::device || pointer_ == nullptr) return;
  DeviceGuard guard(place_.device);
  cudaEvent_t pending = nullptr;
  cudaError_t status = cudaEventCreateWithFlags(&pending, cudaEventDisableTiming);
  if (status != cudaSuccess) throw cuda_error(status, what() + ": cudaEventCreateWithFlags", cuda(place_.device));
  status = cudaEventRecord(pending, cudaStreamLegacy);
  if (status == cudaSuccess) status = cudaStreamWaitEvent(consumer, pending, 0);
  if (cudaEventDestroy(pending) != cudaSuccess) (void)cudaGetLastError();  // the wait is queued: it may go
  if (status != cudaSuccess)
    throw cuda_error(status, what() + ": making the consumer's stream wait", cuda(place_.device));
  if (uses_ != nullptr) uses_->order_before(consumer, what);
}

GPUSEL_API UntypedBuffer UntypedBuffer::copy_to(const MemoryPlace& target, ErrorContext what) const {
  UntypedBuffer result = allocate(bytes_, target, what, gpu());
  result.copy_from(pointer_, place_, what);
  return result;
}

GPUSEL_API UntypedBuffer UntypedBuffer::move_to(const MemoryPlace& target, ErrorContext what) {
  if (target == place_) return std::move(*this);
  UntypedBuffer result = copy_to(target, what);
  *this = UntypedBuffer();
  return result;
}

GPUSEL_API UntypedBuffer UntypedBuffer::copy_to(const MemoryPlace& target, StreamView stream, ErrorContext what) const {
  UntypedBuffer result = allocate(bytes_, target, what, gpu(), stream.handle());
  // On failure the result is freed on the legacy stream, which may not be
  // ordered after `stream`'s allocation and copies: they finish first.
  const auto finish_stream = [&]() noexcept {
    if (target.kind != MemoryKind::device) return;
    try {
      stream.synchronize();
    } catch (...) {
      (void)cudaGetLastError();
    }
  };
  try {
    copy_async(result.pointer_, target, pointer_, place_, bytes_, stream);
  } catch (const Error& error) {
    finish_stream();
    rethrow_with_prefix(error, what());
  }
  try {
    result.record_stream(stream, what);
  } catch (...) {
    finish_stream();
    throw;
  }
  return result;
}

GPUSEL_API void UntypedBuffer::copy_from(const void* source, const MemoryPlace& from, ErrorContext what) {
  try {
    copy(pointer_, place_, source, from, bytes_);
  } catch (const Error& error) {
    rethrow_with_prefix(error, what());
  }
}

GPUSEL_API void UntypedBuffer::copy_into(void* destination, const MemoryPlace& to, ErrorContext what) const {
  try {
    copy(destination, to, pointer_, place_, bytes_);
  } catch (const Error& error) {
    rethrow_with_prefix(error, what());
  }
}

GPUSEL_API void UntypedBuffer::fill(const void* pattern, std::size_t pattern_bytes, ErrorContext what) {
  try {
    detail::fill(pointer_, place_, bytes_, pattern, pattern_bytes);
  } catch (const Error& error) {
    rethrow_with_prefix(error, what());
  }
}

GPUSEL_API std::string ElementsCall::operator()() const {
  return std::string(function) + "(" + std::to_string(size) + " elements, " +
         (size <= std::numeric_limits<std::size_t>::max() / element_bytes ? std::to_string(size * element_bytes)
                                                                          : "too many") +
         " bytes, " + device.str() + ")";
}

GPUSEL_API std::string MoveCall::operator()() const {
  std::string text = "gpusel::Buffer::to(" + target.str() + ") of " + std::to_string(size) + " elements (" +
                     std::to_string(size * element_bytes) + " bytes) on " +
                     (from.kind == MemoryKind::pinned_host ? std::string("cpu (pinned)") : from.as_device().str()) +
                     suffix;
  if (stream != nullptr) text += " on a stream of " + stream->device().str();
  return text;
}

GPUSEL_API MemoryPlace place_of(const Device& device, ErrorContext what) {
  if (device.is_cpu()) return MemoryPlace{};
  return MemoryPlace{MemoryKind::device, resolve_cuda_index(device, what)};
}

GPUSEL_API MemoryPlace target_place(const Device& device, const MemoryPlace& from, ErrorContext what) {
  if (device.is_cpu()) return from.is_host() ? from : MemoryPlace{};
  return place_of(device, what);
}

GPUSEL_API UntypedBuffer allocate_elements(const ElementsCall& call, const MemoryPlace& place) {
  if (call.size > std::numeric_limits<std::size_t>::max() / call.element_bytes)
    throw OutOfMemory(call() + ": " + std::to_string(call.size) + " elements do not fit in memory");
  return UntypedBuffer::allocate(call.size * call.element_bytes, place, call);
}

GPUSEL_API UntypedBuffer allocate_elements(const ElementsCall& call) {
  return allocate_elements(call, place_of(call.device, call));
}

GPUSEL_API UntypedBuffer copy_host_elements(const ElementsCall& call, const void* values) {
  UntypedBuffer buffer = allocate_elements(call);
  if (call.size != 0 && values == nullptr) throw Error(call() + ": the data pointer is null");
  buffer.copy_from(values, MemoryPlace{}, call);
  return buffer;
}

GPUSEL_API void copy_elements(UntypedBuffer& destination, const UntypedBuffer& source, const ElementsCall& call) {
  const std::size_t source_size = source.bytes() / call.element_bytes;
  if (source_size != call.size)
    throw Error(call() + ": the source has " + std::to_string(source_size) + " elements, this Buffer " +
                std::to_string(call.size));
  if (&source != &destination) destination.copy_from(source.data(), source.place(), call);
}

}  // namespace gpusel::detail
