// Set CUDA_VISIBLE_DEVICES in the program, before CUDA starts (Python's os.environ[...] = ...).
//
//   import os                                    gpusel::set_visible_devices({1});
//   os.environ["CUDA_VISIBLE_DEVICES"] = "1"     // ... before the first CUDA call
//   import torch
//
// CUDA reads the variable once, when it starts. Python's version works only
// because `import torch` comes after the assignment; set it later and it is
// silently ignored. gpusel::set_visible_devices checks both things Python does
// not: that the GPU exists (when NVML can tell), and that CUDA has not started,
// throwing an Error that says the change would do nothing.
#include <gpusel/gpusel.hpp>

#include <cstdlib>
#include <iostream>

int main() {
  // Before CUDA starts: physical GPU 1 if the machine has two, else the first GPU.
  const gpusel::DeviceMap map = gpusel::visible_devices();
  const int wanted = map.known() && map.order.count() > 1 ? 1 : 0;
  try {
    gpusel::set_visible_devices({wanted});
    std::cout << "set_visible_devices({" << wanted << "}): CUDA_VISIBLE_DEVICES=" << std::getenv("CUDA_VISIBLE_DEVICES")
              << "; cuda:0 is physical GPU " << wanted << "\n";
  } catch (const gpusel::Error& error) {
    std::cout << "set_visible_devices({" << wanted << "}) refused: " << error.what() << "\n";
  }

  // The first CUDA call starts CUDA (with no driver it fails to start: then nothing changes either way).
  std::cout << gpusel::device_count() << " CUDA device(s) visible; running on " << gpusel::preferred_device() << "\n";
  (void)cudaFree(nullptr);

  // Too late now: the variable would change nothing in this process.
  if (gpusel::cuda_started()) {
    try {
      gpusel::set_visible_devices({0});
    } catch (const gpusel::Error& error) {
      std::cout << "after CUDA started: " << error.what() << "\n";
    }
  } else {
    std::cout << "CUDA could not start here (no driver), so the variable could still be changed\n";
  }
  return 0;
}
