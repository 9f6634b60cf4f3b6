// The GPU for each process of a job on one node: torchrun, mpirun and srun.
//
//   const gpusel::Device device = gpusel::local_rank_device();  // cpu on a machine without a GPU
//   if (device.is_cuda()) gpusel::set_device(device);           // torch.cuda.set_device(local_rank)
//
// local_rank() and device_for_local_rank() (gpusel/machine/local_rank.hpp) decide, and
// rank_gpu() (gpusel/machine/rank_gpu.hpp) applies the rank's rules; local_rank_device()
// applies them to the devices this process sees, as `gpusel run --local-rank` does.
// Layer: top (docs/layers.md).
#pragma once

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/device.hpp"
#include "gpusel/machine/local_rank.hpp"
#include "gpusel/machine/rank_gpu.hpp"
#include "gpusel/runtime.hpp"

namespace gpusel {

// The device this process should use: its local rank (local_rank()) over the
// devices this process sees (device_count()). By default rank r gets cuda:r, and a
// rank beyond the visible devices is an Error (Placement). Where NVML shows which GPU
// cuda:r is (it sees as many as CUDA does), the rank's rules hold (Note [A rank's own
// GPU] in rank_gpu.hpp): a GPU in MIG mode, or one that a compute process other than
// this one runs on (this user's too, unless `sharing` allows it; round-robin ranks
// share their own), is an Error naming the process, never a reason to take another
// GPU; this reads NVML's process lists. Call it before any other device is made
// current; it creates no CUDA context (set_device does). Inside a Slurm job it
// chooses only among the GPUs Slurm named (Note [The GPUs this process may choose
// among]), and refuses where CUDA would read Slurm's numbers as other GPUs (Note
// [Slurm's GPU numbers] in gpusel/machine/slurm_numbering.hpp), naming what to set.
GPUSEL_API Device local_rank_device(Placement placement = Placement::rank_or_cpu, const RankSharing& sharing = {});

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/launcher-inl.hpp"
#endif
