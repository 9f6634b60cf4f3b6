// gpusel::Stream: one CUDA stream, owned, on the device it was made for.
//
//   gpusel::Stream stream(gpusel::cuda(1));        // torch.cuda.Stream(device=1)
//   auto y = x.to(gpusel::cuda(1), stream);        // queued on the stream
//   stream.synchronize();                          // stream.synchronize()
//
// A Stream remembers its device, so that work queued on it and its
// destruction happen there whatever device is current.
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
    const cudaError_t status = cudaStreamSynchronize(checked_handle("synchronize"));
    if (status != cudaSuccess)
      throw detail::cuda_error(status, "gpusel::Stream::synchronize: cudaStreamSynchronize", device());
  }

  // Whether everything queued on the stream has finished, without waiting.
  bool ready() const {
    const cudaError_t status = cudaStreamQuery(checked_handle("ready"));
    if (status == cudaSuccess) return true;
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is an answer, not an error to leave behind
      return false;
    }
    throw detail::cuda_error(status, "gpusel::Stream::ready: cudaStreamQuery", device());
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
