// One task of the Slurm test (tests/slurm/check_slurm.sh): takes this task's
// device with gpusel::local_rank_device() and prints one line the checker reads,
//   task 1 local 1 step 1 gpu 1
// naming the GPU by what CUDA_VISIBLE_DEVICES says it is (Slurm's index, with no
// cgroups), beside SLURM_STEP_GPUS, which Slurm set for the task. The emulated
// runtime shows as many GPUs as CUDA_VISIBLE_DEVICES lists, as the driver would
// (all 4 of the machine when it is unset). An Error prints "task N error: ...".
#include <gpusel/launcher.hpp>

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "emulated_runtime.hpp"

namespace {
std::string variable(const char* name, const char* otherwise) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : otherwise;
}
}  // namespace

int main() {
  std::vector<std::string> listed;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr) {
    std::stringstream tokens(visible);
    for (std::string token; std::getline(tokens, token, ',');) listed.push_back(token);
  } else {
    listed = {"0", "1", "2", "3"};
  }
  gpusel_emulated::reset(gpusel_emulated::devices(static_cast<int>(listed.size())));
  const std::string task = "task " + variable("SLURM_PROCID", "?");
  try {
    const gpusel::Device device = gpusel::local_rank_device();
    const auto rank = gpusel::local_rank();
    std::cout << task << " local " << (rank ? rank->rank : 0) << " step " << variable("SLURM_STEP_GPUS", "none")
              << " gpu " << (device.is_cuda() ? listed.at(static_cast<std::size_t>(device.index())) : "cpu")
              << std::endl;
    return 0;
  } catch (const gpusel::Error& error) {
    std::cout << task << " error: " << error.what() << std::endl;
    return 1;
  }
}
