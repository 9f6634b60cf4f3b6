// `torch.cuda.set_device(1)`: make GPU 1 the current device.
//
//   Python                                   C++ with gpusel
//   torch.cuda.set_device(1)                 gpusel::set_device(1);
//   print(torch.cuda.current_device())       std::cout << gpusel::current_device();
//   torch.device("cuda:1")                   gpusel::Device::parse("cuda:1") or gpusel::cuda(1)
//
// Every CUDA call after set_device (allocations, copies, kernels) goes to that
// GPU on this thread. On a machine with fewer GPUs, or none, set_device throws
// a gpusel::Error that says how many devices are visible and why; this example
// then falls back to the first GPU, or to the CPU.
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() {
  std::cout << "CUDA devices visible: " << gpusel::device_count() << "\n";
  try {
    gpusel::set_device(gpusel::Device::parse("cuda:1"));
    std::cout << "current device: cuda:" << gpusel::current_device() << "\n";
  } catch (const gpusel::Error& error) {
    std::cout << "set_device(cuda:1) failed: " << error.what() << "\n";
    const gpusel::Device fallback = gpusel::preferred_device();  // cuda:0 when there is a GPU, else cpu
    if (fallback.is_cuda()) gpusel::set_device(fallback);
    std::cout << "running on " << fallback << " instead\n";
  }
  return 0;
}
