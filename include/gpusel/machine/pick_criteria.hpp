// What a GPU must be to be picked (pick.hpp's pick, assess, choose): PickCriteria,
// its order and placement, the criteria in words, and what the names in its
// `exclude` list mean against a DeviceMap.
//
//   gpusel::PickCriteria criteria;
//   criteria.at_least = 2;                     // Error when fewer fit
//   criteria.min_free_memory = "8GiB";
//   criteria.exclude = {"3", "smi:0", "GPU-8d2a"};  // CUDA's index, nvidia-smi's, a UUID prefix
//   gpusel::describe(criteria);  // "at least 2 GPUs (at most 2); at least 8.0 GiB free; ..."
//
// pick.hpp, which judges GPUs by these criteria, includes this header.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/memory_size.hpp"

namespace gpusel {

// Which fitting GPUs come first.
enum class PickOrder {
  most_free_memory,  // then least utilized, then CUDA's physical index
  least_utilized,    // then most free memory, then CUDA's physical index
  index,             // CUDA's physical index
};

// Whether the GPUs picked should be near each other (Note [Connected GPUs] in
// gpusel/machine/detail/picking/connected_sets.hpp).
enum class PickPlacement {
  any,        // wherever they are
  connected,  // prefer GPUs joined by NVLink, else under one PCIe switch, else one host bridge, else one
              // NUMA node; when no such set fits, the best-connected set that does, saying so
};

// What a GPU must be to be picked. The defaults pick one GPU that runs no
// compute process (this user's own included, the calling process's excepted:
// Note [Whose process is it] in pick.hpp), among those this process may see.
struct PickCriteria {
  // Fewer fitting GPUs than this is an Error.
  int at_least = 1;
  // At most this many are picked; nullopt: as many as at_least. PickCriteria::all: every one that fits.
  std::optional<int> at_most;
  static constexpr int all = INT_MAX;
  // Free memory the GPU must have: bytes, or text such as "8GiB" (Note [Memory size grammar]).
  MemorySize min_free_memory;
  // Highest utilization (percent of time a kernel ran, NVML's last sample) allowed; nullopt: any.
  std::optional<int> max_utilization;
  // Whether a GPU where another user runs a compute process may be picked.
  // See Note [Whose process is it] in pick.hpp.
  bool allow_other_users = false;
  // Whether a GPU where only this user's own compute processes run may be picked (a
  // job sharing its own GPUs on purpose); allow_other_users allows them too.
  bool share_own = false;
  // GPUs never to pick, named as pick names them: CUDA's physical index ("3",
  // what Candidate::physical_index and `gpusel pick` give), nvidia-smi's number
  // written "smi:3", or a UUID, a unique prefix being enough ("GPU-8d2a"); a
  // MIG instance by its MIG- UUID or prefix (a GPU's name excludes its instances
  // too). One that names nothing is an Error (a typo would otherwise exclude nothing).
  std::vector<std::string> exclude;
  PickOrder order = PickOrder::most_free_memory;
  PickPlacement placement = PickPlacement::any;
  // Choose only among the GPUs this process may see already: when
  // CUDA_VISIBLE_DEVICES is set (Slurm sets it to the job's GPUs), GPUs it
  // hides are not candidates. false: every GPU of the machine is.
  bool only_visible = true;
};

// "at least 2 GPUs (at most 2); at least 8.0 GiB free; at most 10% utilized;
// no compute process (this user's own included); most free memory first"
GPUSEL_API std::string describe(const PickCriteria& criteria);

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/pick_criteria-inl.hpp"
#endif
