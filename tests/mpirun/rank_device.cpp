// One rank of the mpirun test (tests/mpirun/check_mpirun.sh): on an emulated
// machine with 4 GPUs, takes this rank's device with gpusel::local_rank_device
// (which reads OMPI_COMM_WORLD_LOCAL_RANK itself: no MPI header is needed),
// makes it current, and prints one line the checker reads:
//   rank 2: cuda:2 (Open MPI: OMPI_COMM_WORLD_LOCAL_RANK=2, OMPI_COMM_WORLD_LOCAL_SIZE=4), contexts on 2
// With "one-gpu-per-rank" as its argument it asks for a GPU per rank; when
// there are too few it prints "rank N: error: ..." and exits 0, since the
// checker expects that error, and mpirun would kill the other ranks, before
// they report, as soon as one exits with a failure.
#include <gpusel/launcher.hpp>

#include <iostream>
#include <string>

#include "emulated_runtime.hpp"

int main(int argc, char** argv) {
  gpusel_emulated::reset(gpusel_emulated::devices(4));
  const bool one_gpu_per_rank = argc > 1 && std::string(argv[1]) == "one-gpu-per-rank";
  const auto placement = one_gpu_per_rank ? gpusel::Placement::one_gpu_per_rank : gpusel::Placement::round_robin;
  const auto rank = gpusel::local_rank();
  const std::string name = "rank " + (rank ? std::to_string(rank->rank) : std::string("?"));
  try {
    const gpusel::Device device = gpusel::local_rank_device(placement);
    gpusel::set_device(device);
    std::string contexts;
    for (int index = 0; index < gpusel::device_count(); ++index) {
      if (gpusel_emulated::has_primary_context(index))
        contexts += (contexts.empty() ? "" : ",") + std::to_string(index);
    }
    std::cout << name << ": " << device << " (" << (rank ? rank->source : "no launcher") << "), contexts on "
              << contexts << std::endl;
    return 0;
  } catch (const gpusel::Error& error) {
    std::cout << name << ": error: " << error.what() << std::endl;
    return one_gpu_per_rank ? 0 : 1;
  }
}
