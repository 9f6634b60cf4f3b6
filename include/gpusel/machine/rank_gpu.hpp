// The GPU of a launcher's rank, under the rank's rules: what local_rank_device() (launcher.hpp)
// and `gpusel run --local-rank` both decide, on the machine as NVML shows it.
//
//   const gpusel::DeviceMap map = gpusel::visible_devices(gpusel::InventoryOptions::with_usage());
//   const gpusel::RankGpu own = gpusel::rank_gpu(gpusel::local_rank(), map);
//   if (own.refusal != gpusel::RankRefusal::none) ...  // own.reason says why, in words
//
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/device.hpp"
#include "gpusel/machine/local_rank.hpp"
#include "gpusel/machine/pick.hpp"
#include "gpusel/machine/visibility.hpp"

namespace gpusel {

// Note [A rank's own GPU]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A launcher's rank takes the visible GPU of its number (device_for_local_rank) and no
// other: another GPU would be another rank's. So where its GPU cannot serve it, that is the
// rank's error, never a reason to look further. Two things make a GPU unable to: MIG mode
// (CUDA shows its MIG instances, never the GPU whole: Note [MIG instances as picks]), and a
// compute process on it that is not the rank's own, judged as a pick judges (Note [Whose
// process is it]): by default this user's processes count too, a sibling rank's included,
// so each rank asks before it touches a GPU, or shares (RankSharing). Ranks placed
// round-robin share GPUs by design, and so share their own. local_rank_device() and `gpusel
// run --local-rank` decide by rank_gpu alike; each says what to do in its own words.

// Why a rank gets no GPU (RankGpu::refusal).
enum class RankRefusal {
  none,      // it has its GPU
  mig_mode,  // its GPU is in MIG mode: CUDA would show the GPU's MIG instances, not the GPU
  busy,      // a compute process not the rank's own runs on its GPU (RankGpu::busy_processes)
};

// Whose compute processes a rank's GPU may run beside the rank (Note [Whose process is it]):
// none, by default.
struct RankSharing {
  bool share_own = false;          // this user's own processes (a sibling rank's among them)
  bool allow_other_users = false;  // everyone's
};

// A rank's GPU, and whether it may have it.
struct RankGpu {
  Device device = cpu();                    // the rank's: cuda:i of the visible GPUs
  int physical_index = -1;                  // its GPU's CUDA physical index
  RankRefusal refusal = RankRefusal::none;  // why it may not have it; none: it may
  // The rank and its GPU in words, escaped for a terminal: "local rank 1 (torchrun: LOCAL_RANK=1): its
  // GPU, cuda:1 of the job (physical 1, GPU-...)".
  std::string described;
  std::string reason;                      // the refusal in words (described, ", is in MIG mode, ..."); "" when none
  std::vector<GpuProcess> busy_processes;  // busy: the processes that make it so
};

// The GPU of `rank` (nullopt: a process started alone, rank 0 of 1) among the visible GPUs of
// `map` (read with usage, so its processes are known), under the rank's rules (Note [A
// rank's own GPU]) for `caller`: device_for_local_rank(rank, map.visible.count(), placement),
// then refused where that GPU is in MIG mode or busy. reason names the rank and its GPU ("local
// rank 1 (torchrun: LOCAL_RANK=1): its GPU, cuda:1 of the job (physical 1, GPU-...), is in MIG
// mode, and gpusel never gives a GPU in MIG mode whole"); the caller says what to do. Pure: reads
// nothing but its arguments. Throws Error as device_for_local_rank does, and when `map` does not
// know a visible GPU (no NVML, no GPU, or a CUDA_VISIBLE_DEVICES that selects none).
[[nodiscard]] GPUSEL_API RankGpu rank_gpu(const std::optional<LocalRank>& rank, const DeviceMap& map,
                                          Placement placement = Placement::rank_or_cpu, const RankSharing& sharing = {},
                                          const Caller& caller = Caller::this_process());

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/rank_gpu-inl.hpp"
#endif
