// Choose the GPU from the terminal: CUDA_VISIBLE_DEVICES=1 ./program.
//
//   CUDA_VISIBLE_DEVICES=1 python train.py       CUDA_VISIBLE_DEVICES=1 ./terminal_variable
//
// The program itself names no GPU: whatever the variable shows becomes cuda:0,
// cuda:1, ... in the order listed. So under CUDA_VISIBLE_DEVICES=1 the program
// runs on cuda:0, which is physical GPU 1 (and cuda:1 does not exist). This
// prints the map, then runs on cuda:0, or on the CPU when there is no GPU.
#include <gpusel/gpusel.hpp>

#include <cstdlib>
#include <iostream>
#include <string>

int main() {
  const gpusel::DeviceMap map = gpusel::visible_devices();  // NVML and the environment; CUDA not started
  const char* variable = std::getenv("CUDA_VISIBLE_DEVICES");
  std::cout << "CUDA_VISIBLE_DEVICES" << (variable != nullptr ? std::string("=") + variable : " is unset") << "\n";
  if (map.known()) {
    for (int logical = 0; logical < map.visible.count(); ++logical) {
      const gpusel::Gpu& gpu = *map.device(logical);
      std::cout << "  cuda:" << logical << " is physical GPU " << map.visible.physical(logical) << " (nvidia-smi "
                << gpu.nvml_index << ", " << gpu.name << ")\n";
    }
  } else {
    std::cout << "  the physical GPUs are unknown: " << map.inventory.reason << "\n";
  }

  try {
    const gpusel::Device device = gpusel::preferred_device();  // cuda:0 of what the variable shows, or cpu
    if (device.is_cuda()) gpusel::set_device(device);
    std::cout << "running on " << device << "\n";
  } catch (const gpusel::Error& error) {
    std::cout << "error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
