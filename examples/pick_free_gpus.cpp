// Picking free GPUs before CUDA starts, as GPUtil / setGPU / nvisel do in Python:
//
//   gpusel::PickCriteria criteria;
//   criteria.min_free_memory = "8GiB";   criteria.max_utilization = 10;
//   auto leased = gpusel::use_free_gpus(criteria);   // CUDA_VISIBLE_DEVICES = the best GPU, leased
//
// Picking reads NVML only and creates no CUDA context. The GPUs stay leased while
// `leased` lives, so another job picking at the same moment gets another GPU.
// From a shell the gpusel command does the same: gpusel run --min-free 8GiB -- ./train
// When nothing fits (or there is no GPU) the Error lists every GPU and why,
// and this example runs on the CPU instead.
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() {
  gpusel::PickCriteria criteria;
  criteria.min_free_memory = "8GiB";  // or a number of bytes
  criteria.max_utilization = 10;      // percent
  std::cout << "looking for: " << gpusel::describe(criteria) << "\n";
  gpusel::LeasedGpus leased;  // held until the end of main: the GPUs are ours while we use them
  try {
    leased = gpusel::use_free_gpus(criteria);
    for (const gpusel::Candidate& gpu : leased.gpus)
      std::cout << "picked physical GPU " << gpu.physical_index << " (" << gpu.gpu.name << ", " << gpu.gpu.uuid
                << "), leased\n";
  } catch (const gpusel::Error& error) {
    std::cout << "no GPU picked: " << error.what() << "\n";
  }
  const gpusel::Device device = gpusel::preferred_device();
  if (device.is_cuda()) gpusel::set_device(device);
  std::cout << "running on " << device << "\n";
  return 0;
}
