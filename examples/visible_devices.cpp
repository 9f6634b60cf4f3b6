// CUDA_VISIBLE_DEVICES, explained: which GPUs this process sees and why, a
// choice made in code before CUDA starts, and the error that names the map.
// Runs anywhere: with no GPU or no NVML it says so and carries on.
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() {
  // 1. What this process sees, from the environment and NVML, without starting CUDA.
  std::cout << gpusel::explain() << "\n";

  // 2. Choosing GPUs in code, like os.environ["CUDA_VISIBLE_DEVICES"] = "..." in Python:
  //    only before CUDA starts. Here: the last GPU of the machine, alone.
  const gpusel::DeviceMap map = gpusel::visible_devices();
  if (map.known() && map.order.count() > 0) {
    const int last = map.order.count() - 1;
    gpusel::set_visible_devices({last});
    std::cout << "set_visible_devices({" << last << "}): cuda:0 is now physical GPU " << last << "\n";
  } else {
    std::cout << "No GPU list (" << (map.known() ? "NVML sees no GPU" : map.inventory.reason)
              << "): leaving CUDA_VISIBLE_DEVICES alone.\n";
  }
  std::cout << "device_count() = " << gpusel::device_count() << " (CUDA started: " << std::boolalpha
            << gpusel::cuda_started() << ")\n";

  // 3. The classic pitfall: one device is visible, and the program asks for cuda:1.
  try {
    gpusel::set_device(1);
  } catch (const gpusel::Error& error) {
    std::cout << "set_device(1) failed, as it should: " << error.what() << "\n";
  }

  // 4. Once CUDA has started, changing the variable would do nothing: gpusel says so.
  if (gpusel::cuda_started()) {
    try {
      gpusel::set_visible_devices({0});
    } catch (const gpusel::Error& error) {
      std::cout << "set_visible_devices after CUDA started: " << error.what() << "\n";
    }
  }
  return 0;
}
