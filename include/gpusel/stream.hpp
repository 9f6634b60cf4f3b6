// gpusel::Stream: one CUDA stream, owned, on the device it was made for.
// gpusel::StreamView: a stream someone else owns, with its device.
//
//   gpusel::Stream stream(gpusel::cuda(1));        // torch.cuda.Stream(device=1)
//   auto y = x.to(gpusel::cuda(1), stream);        // queued on the stream
//   stream.synchronize();                          // stream.synchronize()
//
//   at::cuda::CUDAStream s = at::cuda::getCurrentCUDAStream();
//   gpusel::StreamView view(s.stream(), gpusel::cuda(s.device_index()));
//   x.record_stream(view);                         // x.record_stream(s)
//
// A Stream remembers its device, so that work queued on it and its
// destruction happen there whatever device is current. Every function that
// only queues work on a stream takes a StreamView, which a Stream converts to.
// Layer: cuda (docs/layers.md).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/resolve_device.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"
#include "gpusel/guard.hpp"

namespace gpusel {

// How a Stream orders itself against the device's legacy default stream
// (stream 0, where plain cudaMemcpy and kernels launched without a stream run).
enum class StreamOrder {
  // Waits for work on the default stream and makes it wait (cudaStreamDefault):
  // code that mixes the Stream with plain cudaMemcpy stays ordered. The default.
  with_default_stream,
  // Runs independently of the default stream (cudaStreamNonBlocking), as
  // PyTorch's and rmm's side streams do; you order it with events yourself.
  independent,
};

namespace detail {

// Whether `handle` is a default stream's, which names a stream of whichever
// device is current (Note [A stream and its device]).
inline bool is_default_stream_handle(cudaStream_t handle) noexcept {
  return handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread;
}

// cudaStreamSynchronize on `handle` of `device`; `who` names the caller in the Error.
inline void synchronize_stream(cudaStream_t handle, int device, const char* who) {
  OptionalDeviceGuard guard;
  if (is_default_stream_handle(handle)) guard.set_device(device);
  const cudaError_t status = cudaStreamSynchronize(handle);
  if (status != cudaSuccess) throw cuda_error(status, std::string(who) + ": cudaStreamSynchronize", cuda(device));
}

// cudaStreamQuery on `handle` of `device`: whether its work is done.
inline bool stream_ready(cudaStream_t handle, int device, const char* who) {
  OptionalDeviceGuard guard;
  if (is_default_stream_handle(handle)) guard.set_device(device);
  const cudaError_t status = cudaStreamQuery(handle);
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to leave behind
    return false;
  }
  throw cuda_error(status, std::string(who) + ": cudaStreamQuery", cuda(device));
}

}  // namespace detail

// Note [A stream and its device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A StreamView is a handle and the device the stream was made on, as rmm's
// cuda_stream_view is a handle and c10's CUDAStream a device and an id: the
// device is part of the value, since gpusel must queue work and record events
// there, and only recent runtimes can say which device a handle belongs to
// (cudaStreamGetDevice). The default streams' handles (cudaStreamLegacy,
// cudaStreamPerThread, and 0) name a stream of whichever device is current, so
// a view of one carries the device it means and gpusel makes that device
// current before using it. Two views are equal when handle
// and device are: a view of 0 and StreamView::legacy_default() name the same
// stream in a program built without --default-stream per-thread, yet compare
// unequal, as rmm's cuda_stream_default and cuda_stream_legacy do.

// A CUDA stream that someone else owns (a framework, a library, the runtime's
// default streams), with its device: copied freely, never destroyed by gpusel.
// The owner keeps the stream alive while gpusel queues work on it.
class StreamView {
 public:
  // The stream `handle` of `device` (`cuda` means the current device,
  // resolved now): the device the stream was created on, which its owner
  // knows (c10's CUDAStream::device_index(), or the device that was current
  // at your cudaStreamCreate). gpusel cannot check a handle against its
  // device; a wrong one makes gpusel's calls on it fail or order nothing. 0
  // is the default stream as gpusel's code is compiled (the legacy one,
  // unless with --default-stream per-thread). Throws Error naming the device
  // when it is not a CUDA device, does not exist, or no GPU is usable.
  StreamView(cudaStream_t handle, const Device& device)
      : handle_(handle),
        device_index_(detail::resolve_cuda_index(device, [&] { return "gpusel::StreamView(" + device.str() + ")"; })) {}

  // The legacy default stream of `device` (cudaStreamLegacy): where plain
  // cudaMemcpy and kernels launched without a stream run; it waits for and is
  // waited for by every blocking stream of the device.
  [[nodiscard]] static StreamView legacy_default(const Device& device = cuda()) {
    return StreamView(cudaStreamLegacy, checked_index(device, "legacy_default"), Resolved{});
  }

  // The per-thread default stream on `device` (cudaStreamPerThread): each
  // thread that uses the view means its own; it synchronizes with the legacy
  // default stream, not with other streams.
  [[nodiscard]] static StreamView per_thread_default(const Device& device = cuda()) {
    return StreamView(cudaStreamPerThread, checked_index(device, "per_thread_default"), Resolved{});
  }

  // The device the stream belongs to, always with its index: cuda:N.
  Device device() const { return cuda(device_index_); }
  int device_index() const noexcept { return device_index_; }

  // The CUDA stream, for your own cudaMemcpyAsync or kernel launches.
  cudaStream_t handle() const noexcept { return handle_; }

  // Waits until everything queued on the stream has finished.
  void synchronize() const { detail::synchronize_stream(handle_, device_index_, "gpusel::StreamView::synchronize"); }

  // Whether everything queued on the stream has finished, without waiting.
  [[nodiscard]] bool ready() const { return detail::stream_ready(handle_, device_index_, "gpusel::StreamView::ready"); }

  friend bool operator==(const StreamView& a, const StreamView& b) noexcept {
    return a.handle_ == b.handle_ && a.device_index_ == b.device_index_;
  }
  friend bool operator!=(const StreamView& a, const StreamView& b) noexcept { return !(a == b); }

 private:
  friend class Stream;
  struct Resolved {};  // the device index is known to exist
  StreamView(cudaStream_t handle, int device_index, Resolved) noexcept : handle_(handle), device_index_(device_index) {}

  static int checked_index(const Device& device, const char* function) {
    return detail::resolve_cuda_index(
        device, [&] { return std::string("gpusel::StreamView::") + function + "(" + device.str() + ")"; });
  }

  cudaStream_t handle_;
  int device_index_;
};

class Stream {
 public:
  // A new stream on `device` (`cuda` means the current device, resolved now).
  // Makes the device's primary context if it has none, as any CUDA work does.
  // Throws Error when the device does not exist or no GPU is usable.
  explicit Stream(const Device& device = cuda(), StreamOrder order = StreamOrder::with_default_stream)
      : device_index_(detail::resolve_cuda_index(device, [&] { return "gpusel::Stream(" + device.str() + ")"; })),
        order_(order) {
    DeviceGuard guard(device_index_);
    const unsigned flags = order == StreamOrder::independent ? cudaStreamNonBlocking : cudaStreamDefault;
    const cudaError_t status = cudaStreamCreateWithFlags(&handle_, flags);
    if (status != cudaSuccess) {
      handle_ = nullptr;
      throw detail::cuda_error(status, "gpusel::Stream: cudaStreamCreateWithFlags", cuda(device_index_),
                               detail::describe_visible_devices());
    }
  }

  // Queued work still completes; the stream's resources go back to CUDA.
  ~Stream() { destroy(); }

  // Copying is deleted: two owners would destroy one CUDA stream twice.
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // A moved-from Stream owns nothing; only destruction and assignment are valid on it.
  Stream(Stream&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_index_(other.device_index_), order_(other.order_) {}
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      destroy();
      handle_ = std::exchange(other.handle_, nullptr);
      device_index_ = other.device_index_;
      order_ = other.order_;
    }
    return *this;
  }

  // The device the stream belongs to, always with its index: cuda:N.
  Device device() const { return cuda(device_index_); }
  int device_index() const noexcept { return device_index_; }
  StreamOrder order() const noexcept { return order_; }

  // The CUDA stream, for your own cudaMemcpyAsync or kernel launches. Valid
  // while this Stream lives; do not destroy it yourself.
  cudaStream_t handle() const noexcept { return handle_; }

  // Waits until everything queued on the stream has finished.
  void synchronize() const {
    detail::synchronize_stream(checked_handle("synchronize"), device_index_, "gpusel::Stream::synchronize");
  }

  // Whether everything queued on the stream has finished, without waiting.
  [[nodiscard]] bool ready() const {
    return detail::stream_ready(checked_handle("ready"), device_index_, "gpusel::Stream::ready");
  }

  // The stream as a view, for every function that takes one. Valid while this
  // Stream lives. Throws Error when the Stream was moved from.
  operator StreamView() const {  // NOLINT(google-explicit-constructor): a Stream is usable where a view is
    return StreamView(checked_handle("operator StreamView"), device_index_, StreamView::Resolved{});
  }

 private:
  cudaStream_t checked_handle(const char* function) const {
    if (handle_ == nullptr) throw Error(std::string("gpusel::Stream::") + function + ": the Stream was moved from");
    return handle_;
  }

  void destroy() noexcept {
    if (handle_ == nullptr) return;
    // Destroyed from its own device: the runtime resolves a stream handle in
    // the current context, so destroying it from another device's context is
    // not something to rely on. If switching fails, it is destroyed from the
    // current device all the same rather than leaked, and the failure goes to
    // the restore-error handler (detail::release_on_device, guard.hpp).
    cudaStream_t handle = std::exchange(handle_, nullptr);
    detail::release_on_device(device_index_, "gpusel::Stream's destructor", [handle]() noexcept {
      if (cudaStreamDestroy(handle) != cudaSuccess) (void)cudaGetLastError();
    });
  }

  cudaStream_t handle_ = nullptr;
  int device_index_ = 0;
  StreamOrder order_ = StreamOrder::with_default_stream;
};

}  // namespace gpusel
