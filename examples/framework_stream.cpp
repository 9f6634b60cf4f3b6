// A stream a framework owns, adopted as a gpusel::StreamView, and gpusel's
// work ordered on it: the pattern of a PyTorch extension
// (docs/pytorch-extension.md). It builds without torch: FrameworkStream
// stands in for c10's CUDAStream, which an extension gets from
//   at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
// Without a GPU it says so and runs on the CPU.
#include <gpusel/buffer.hpp>
#include <gpusel/error.hpp>
#include <gpusel/guard.hpp>
#include <gpusel/runtime.hpp>
#include <gpusel/stream.hpp>

#include <cuda_runtime_api.h>

#include <iostream>
#include <vector>

namespace {

// What c10's CUDAStream gives an extension: a stream the framework made and
// keeps (non-blocking, as c10's pool streams are), and its device index.
class FrameworkStream {
 public:
  explicit FrameworkStream(int device) : device_(device) {
    gpusel::DeviceGuard guard(device);
    if (cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking) != cudaSuccess)
      throw gpusel::Error("the framework could not make its stream");
  }
  ~FrameworkStream() { (void)cudaStreamDestroy(handle_); }
  FrameworkStream(const FrameworkStream&) = delete;
  FrameworkStream& operator=(const FrameworkStream&) = delete;

  cudaStream_t stream() const { return handle_; }  // CUDAStream::stream()
  int device_index() const { return device_; }     // CUDAStream::device_index()

 private:
  int device_;
  cudaStream_t handle_ = nullptr;
};

void print(const char* what, const std::vector<float>& values) {
  std::cout << what;
  for (float value : values) std::cout << " " << value;
  std::cout << "\n";
}

}  // namespace

int main() {
  try {
    if (gpusel::device_count() == 0) {
      gpusel::Buffer<float> x({1, 2, 3, 4}, gpusel::cpu());
      print("no GPU: the work runs on the cpu:", x.to_vector());
      return 0;
    }
    const FrameworkStream framework(0);

    // The framework's stream, adopted: the handle and the device it belongs to.
    const gpusel::StreamView view(framework.stream(), gpusel::cuda(framework.device_index()));
    std::cout << "adopted the framework's stream on " << view.device() << "\n";

    // Work ordered on it: a pinned upload queued there (to() records the stream for its result).
    gpusel::Buffer<float> pinned = gpusel::Buffer<float>::pinned(4);
    for (std::size_t i = 0; i < pinned.size(); ++i) pinned.data()[i] = static_cast<float>(i + 1);
    gpusel::Buffer<float> y({0, 0, 0, 0}, view.device());
    {
      gpusel::Buffer<float> x = pinned.to(view.device(), view);
      // The framework's own work on its stream, reading x (a kernel in an extension).
      if (cudaMemcpyAsync(y.data(), x.data(), x.bytes(), cudaMemcpyDeviceToDevice, framework.stream()) != cudaSuccess)
        throw gpusel::Error("the framework's copy failed");
      // As tensor.record_stream(s): x's free waits for that work (the stream is non-blocking).
      x.record_stream(view);
    }  // x is dropped while the framework's stream may still read it: its memory waits
    view.synchronize();
    print("y, computed on the framework's stream:", y.to_vector());
    return 0;
  } catch (const gpusel::Error& error) {
    std::cout << "error: " << error.what() << "\n";
    return 1;
  }
}
