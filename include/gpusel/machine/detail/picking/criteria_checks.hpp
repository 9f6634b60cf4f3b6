// The pick criteria's checks and the exclusion list's parser, which pick.hpp's
// definitions (assess, choose) and describe(const PickCriteria&) call.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel {
struct DeviceMap;         // gpusel/machine/visibility.hpp
struct InventoryOptions;  // gpusel/machine/inventory.hpp
struct MigInstance;       // gpusel/machine/inventory.hpp
struct PickCriteria;      // gpusel/machine/pick_criteria.hpp
}  // namespace gpusel

namespace gpusel::detail {

// What `exclude` names: GPUs of `map` (by position in its inventory), each with the name
// that excludes it ("" when none does), and MIG instances (by UUID) with theirs.
struct Excluded {
  std::vector<std::string> gpus;
  std::vector<std::pair<std::string, std::string>> mig_instances;  // UUID, name
};

// Whether CUDA_VISIBLE_DEVICES, set, lets this process see `instance` of physical GPU
// `physical`: when it names the instance's UUID (or a prefix), or the GPU; which of a
// named GPU's instances CUDA then shows is CUDA's to decide (Note [MIG instances as
// picks] in pick.hpp).
GPUSEL_API bool mig_instance_visible(const DeviceMap& map, int physical, const MigInstance& instance);

// Which GPUs of `map` `exclude` names: CUDA physical indices as pick prints them
// ("2"), nvidia-smi numbers written "smi:2", UUIDs or a unique prefix ("GPU-8d2a",
// "MIG-4a5b"). Throws Error for a name that matches none or several, and, with
// `only_visible` under CUDA_VISIBLE_DEVICES, for one that names only what the
// variable hides (no candidate, so excluding it would do nothing: a mistake).
GPUSEL_API Excluded excluded_gpus(const std::vector<std::string>& exclude, const DeviceMap& map, bool only_visible);

// How many GPUs the criteria want at most: at_most, or at_least where at_most is unset.
GPUSEL_API int wanted_at_most(const PickCriteria& criteria);

// What to read of the machine for `criteria`: usage, and the links between GPUs only
// when the placement needs them (N(N-1)/2 pairs: InventoryOptions::links).
GPUSEL_API InventoryOptions usage_for(const PickCriteria& criteria);

// Throws Error for criteria that ask for nothing a pick can give: at_least below
// zero, at_most below at_least, max_utilization outside 0..100.
GPUSEL_API void check_criteria(const PickCriteria& criteria);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/picking/criteria_checks-inl.hpp"
#endif
