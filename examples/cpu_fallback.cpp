// The CPU fallback: the same code runs with or without a GPU.
//   device = "cuda" if torch.cuda.is_available() else "cpu"
//   torch.set_default_device(device); x = torch.ones(4) * 2
// Asking for a GPU that is not there is a clear error, never a crash.
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() {
  const gpusel::Device device = gpusel::is_available() ? gpusel::cuda() : gpusel::cpu();
  gpusel::set_default_device(device);  // torch.set_default_device(device)

  gpusel::Buffer<float> x(4);  // lands on the default device
  x.fill(2.0f);
  std::cout << "x lives on " << x.device() << ":";
  for (float v : x.to_vector()) std::cout << " " << v;
  std::cout << "\n";

  if (!gpusel::is_available()) {
    try {
      auto on_gpu = x.to(gpusel::cuda(0));
    } catch (const gpusel::Error& error) {
      std::cout << "no GPU here, as expected:\n  " << error.what() << "\n";
    }
  }
  gpusel::set_default_device(gpusel::cpu());
  return 0;
}
