// One GPU per process under torchrun, mpirun or srun.
//
//   Python                                              C++ with gpusel
//   local_rank = int(os.environ["LOCAL_RANK"])          auto device = gpusel::local_rank_device();
//   torch.cuda.set_device(local_rank)                   if (device.is_cuda()) gpusel::set_device(device);
//
// local_rank_device() reads the launcher's variable (LOCAL_RANK, then
// OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
// SLURM_LOCALID: the innermost launcher wins) and gives rank r the visible
// device cuda:r; a rank beyond the visible devices is an Error (sharing is
// asked for with Placement::round_robin), and so is a GPU in MIG mode or busy
// with another compute process (RankSharing shares it). With no GPU it is the CPU. Try:
//   ./local_rank      LOCAL_RANK=1 ./local_rank      mpirun -np 2 ./local_rank      srun -n 2 ./local_rank
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() {
  try {
    const auto rank = gpusel::local_rank();  // nullopt when started alone; an Error for LOCAL_RANK=1a
    std::cout << (rank ? rank->describe() : "started alone, not by a launcher") << "\n";

    // An Error for a rank with no GPU of its number, or whose GPU is in MIG mode or busy (Note [A rank's own GPU]);
    // local_rank_device(gpusel::Placement::rank_or_cpu, gpusel::RankSharing{true, false}) shares this user's GPUs.
    const gpusel::Device device = gpusel::local_rank_device();
    if (device.is_cuda()) gpusel::set_device(device);
    std::cout << "this process runs on " << device << " (" << gpusel::device_count() << " CUDA device(s) visible)\n";
  } catch (const gpusel::Error& error) {
    std::cout << "no device for this process: " << error.what() << "\n";
    return 1;
  }

  try {  // asking for a GPU of its own per rank fails loudly instead of sharing
    const gpusel::Device own = gpusel::local_rank_device(gpusel::Placement::one_gpu_per_rank);
    std::cout << "with one GPU per rank: " << own << "\n";
  } catch (const gpusel::Error& error) {
    std::cout << "with one GPU per rank: " << error.what() << "\n";
  }
  return 0;
}
