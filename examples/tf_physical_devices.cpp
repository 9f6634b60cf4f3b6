// TensorFlow's way: list the physical GPUs, then restrict the
// process to one of them.
//
//   gpus = tf.config.list_physical_devices('GPU')       auto gpus = gpusel::query_inventory().gpus;
//   tf.config.set_visible_devices(gpus[1], 'GPU')       gpusel::set_visible_devices({gpus[1].uuid});
//
// Like TensorFlow's, the list comes without starting CUDA (gpusel reads NVML),
// and the restriction must come before CUDA starts. Naming the GPU by UUID
// makes it exact whatever CUDA_DEVICE_ORDER says. With no GPU or no NVML the
// list is empty and the example says why.
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() {
  const gpusel::Inventory inventory = gpusel::query_inventory();
  if (!inventory.ok()) std::cout << "no physical GPU list: " << inventory.reason << "\n";
  const std::vector<gpusel::Gpu>& gpus = inventory.gpus;
  std::cout << "physical GPUs: " << gpus.size() << "\n";
  for (const gpusel::Gpu& gpu : gpus)
    std::cout << "  /physical_device:GPU:" << gpu.nvml_index << "  " << gpu.name << "  " << gpu.uuid << "\n";

  if (gpus.size() > 1) {
    gpusel::set_visible_devices({gpus[1].uuid});  // before CUDA starts, or it throws
    std::cout << "visible now: " << gpusel::detail::describe_variable("CUDA_VISIBLE_DEVICES") << " ("
              << gpusel::device_count() << " logical device: cuda:0 is " << gpus[1].name << ")\n";
  } else {
    std::cout << "fewer than 2 GPUs: nothing to restrict; running on " << gpusel::preferred_device() << "\n";
  }
  return 0;
}
