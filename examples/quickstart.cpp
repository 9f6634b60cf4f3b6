// The quickstart: which devices this process sees, and where it will run.
// With no GPU (or no driver) it says so and falls back to the CPU.
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() try {
  std::cout << "gpusel " << gpusel::version() << "\n";
  const int count = gpusel::device_count();
  std::cout << "CUDA devices visible to this process: " << count << "\n";
  for (int index = 0; index < count; ++index) std::cout << "  " << gpusel::cuda(index) << "\n";

  // torch.device("cuda" if torch.cuda.is_available() else "cpu"): the current GPU, or the CPU
  const gpusel::Device device = gpusel::preferred_device();
  if (device.is_cpu()) {
    std::cout << "No usable GPU, running on the CPU instead.\n";
    if (const auto why = gpusel::no_cuda_device_reason()) std::cout << "  (why: " << *why << ")\n";
  } else {
    gpusel::set_device(device);
    std::cout << "Running on " << device << "\n";
  }
  return 0;
} catch (const gpusel::Error& error) {
  std::cout << "error: " << error.what() << "\n";
  return 1;
}
