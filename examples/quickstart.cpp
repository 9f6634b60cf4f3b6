// The quickstart: which devices this process sees, and where it will run.
// With no GPU (or no driver) it says so and falls back to the CPU.
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() {
  std::cout << "gpusel " << gpusel::version() << "\n";
  const int count = gpusel::device_count();
  std::cout << "CUDA devices visible to this process: " << count << "\n";
  for (int index = 0; index < count; ++index) std::cout << "  " << gpusel::cuda(index) << "\n";

  const gpusel::Device device = gpusel::preferred_device();  // "cuda:0" if available else "cpu"
  if (device.is_cpu()) {
    std::cout << "No usable GPU, running on the CPU instead.\n";
    try {
      gpusel::set_device(0);
    } catch (const gpusel::Error& error) {
      std::cout << "  (why: " << error.what() << ")\n";
    }
  } else {
    gpusel::set_device(device);
    std::cout << "Running on " << device << "\n";
  }
  return 0;
}
