// TensorFlow's way: list the GPUs this process can see, then keep one of them.
//
//   gpus = tf.config.list_physical_devices('GPU')     const auto map = gpusel::visible_devices();
//                                                     map.device(i) for i < map.visible.count()
//   tf.config.set_visible_devices(gpus[1], 'GPU')     gpusel::keep_visible_devices({1});
//
// As in TensorFlow, the list is of the *visible* GPUs, in CUDA's order (under
// CUDA_VISIBLE_DEVICES=2,3 it has two entries, and gpus[1] is physical GPU 3),
// it comes without starting CUDA (gpusel reads NVML), and the restriction
// narrows within what is visible, so it never leaves the job's allocation. It
// must come before CUDA starts. With no GPU or no NVML the list is empty and
// the example says why.
#include <gpusel/gpusel.hpp>

#include <cstdlib>
#include <iostream>

int main() try {
  const gpusel::DeviceMap map = gpusel::visible_devices();
  if (!map.known()) std::cout << "no GPU list: " << map.inventory.reason << "\n";
  const int count = map.known() ? map.visible.count() : 0;
  std::cout << "visible GPUs: " << count << "\n";
  for (int logical = 0; logical < count; ++logical) {
    const gpusel::Gpu& gpu = *map.device(logical);
    std::cout << "  /physical_device:GPU:" << logical << "  " << gpu.name << "  " << gpu.uuid << "  (physical "
              << map.visible.physical(logical) << ", nvidia-smi " << gpu.nvml_index << ")\n";
  }

  if (count > 1) {
    gpusel::keep_visible_devices({1});  // before CUDA starts, or it throws
    std::cout << "visible now: CUDA_VISIBLE_DEVICES=" << std::getenv("CUDA_VISIBLE_DEVICES") << " ("
              << gpusel::device_count() << " logical device: cuda:0 is " << map.device(1)->name << ")\n";
  } else {
    std::cout << "fewer than 2 GPUs visible: nothing to restrict; running on " << gpusel::preferred_device() << "\n";
  }
  return 0;
} catch (const gpusel::Error& error) {
  std::cout << "error: " << error.what() << "\n";
  return 1;
}
