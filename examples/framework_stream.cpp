// A stream a framework owns, adopted as a gpusel::StreamView, gpusel's work
// ordered on it, and the result handed to the framework through DLPack: the
// pattern of a PyTorch extension (docs/pytorch-extension.md). It builds
// without torch: FrameworkStream stands in for c10's CUDAStream and
// take_tensor for ATen's DLPack import, which an extension gets from
//   at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
//   at::Tensor t = at::fromDLPackVersioned(gpusel::to_dlpack<DLManagedTensorVersioned>(std::move(y), view));
// Without a GPU it runs on the CPU, where a Buffer needs no stream.
#include <gpusel/buffer.hpp>
#include <gpusel/dlpack.hpp>
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

// The framework's side of DLPack: reads the tensor (on its stream, for a GPU
// one), then drops it, which calls gpusel's deleter once.
std::vector<float> take_tensor(gpusel::dlpack::ManagedTensorVersioned* tensor, cudaStream_t stream) {
  const gpusel::dlpack::Tensor& t = tensor->dl_tensor;
  std::vector<float> values(static_cast<std::size_t>(t.shape[0]));
  std::cout << "the framework took a tensor of " << values.size() << " floats on "
            << (t.device.device_type == gpusel::dlpack::kDLCUDA ? "kDLCUDA " : "kDLCPU ") << t.device.device_id << "\n";
  if (t.device.device_type == gpusel::dlpack::kDLCUDA) {
    if (cudaMemcpyAsync(values.data(), t.data, values.size() * sizeof(float), cudaMemcpyDeviceToHost, stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess)
      throw gpusel::Error("the framework could not read its tensor");
  } else {
    const auto* data = static_cast<const float*>(t.data);
    values.assign(data, data + values.size());
  }
  tensor->deleter(tensor);  // the tensor's last reference dies: the memory goes back to gpusel
  return values;
}

}  // namespace

int main() {
  try {
    if (gpusel::device_count() == 0) {
      gpusel::Buffer<float> x({1, 2, 3, 4}, gpusel::cpu());
      std::cout << "no GPU: a cpu Buffer, handed over without a stream\n";
      print("the framework read:", take_tensor(gpusel::to_dlpack(std::move(x)), nullptr));
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
    }                    // x is dropped while the framework's stream may still read it: its memory waits
    view.synchronize();  // before reading y on the host: the framework's stream is non-blocking
    print("y, computed on the framework's stream:", y.to_vector());

    // Handed over: y's memory passes to the tensor, zero copy, and the
    // framework's stream waits for gpusel's work on it with an event.
    gpusel::dlpack::ManagedTensorVersioned* tensor = gpusel::to_dlpack(std::move(y), view);
    const bool handed_over = y.empty();  // NOLINT(bugprone-use-after-move): to_dlpack leaves y empty
    std::cout << "handed to the framework through DLPack; y is empty: " << (handed_over ? "yes" : "no") << "\n";
    print("the framework read:", take_tensor(tensor, framework.stream()));
    return 0;
  } catch (const gpusel::Error& error) {
    std::cout << "error: " << error.what() << "\n";
    return 1;
  }
}
