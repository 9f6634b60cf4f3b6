// The checks assess() (gpusel/machine/pick.hpp) makes of each candidate, a GPU or a
// MIG instance: its free memory, utilization, compute processes (Note [Whose process
// is it]) and compute mode (Note [Compute modes in picking]), what holds of its whole
// GPU, and a UUID reported twice (Note [One UUID, one GPU]). Each adds its reasons to
// the candidate's rejections (RejectReason and sentence).
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/machine/detail/picking/criteria_checks.hpp"

namespace gpusel {
struct Caller;        // gpusel/machine/pick.hpp
struct Candidate;     // gpusel/machine/pick.hpp
struct DeviceMap;     // gpusel/machine/visibility.hpp
struct GpuProcess;    // gpusel/machine/inventory.hpp
struct MigInstance;   // gpusel/machine/inventory.hpp
struct PickCriteria;  // gpusel/machine/pick_criteria.hpp
}  // namespace gpusel

namespace gpusel::detail {

// Rejects `candidate` for what `processes` (nullopt: unknown) hold that is not the caller's
// process (nor, with share_own, its user's): Note [Whose process is it].
GPUSEL_API void check_processes(const std::optional<std::vector<GpuProcess>>& processes, const PickCriteria& criteria,
                                const Caller& caller, Candidate& candidate);

// Rejects `candidate` when its free memory (its MIG instance's, else its GPU's) is below
// what `criteria` asks, or unknown.
GPUSEL_API void check_free_memory(const PickCriteria& criteria, Candidate& candidate);

// Rejects `candidate` when its utilization is above what `criteria` allows, or unknown
// (always, for a MIG instance: NVML does not measure them).
GPUSEL_API void check_utilization(const PickCriteria& criteria, Candidate& candidate);

// Rejects `candidate` where its GPU's compute mode lets this process create no context:
// Prohibited always, an exclusive mode while any other compute process runs on it (or
// on `processes`, the MIG instance's), whatever share_own and allow_other_users say
// (Note [Compute modes in picking]).
GPUSEL_API void check_compute_mode(const std::optional<std::vector<GpuProcess>>& processes, unsigned int caller_pid,
                                   Candidate& candidate);

// Rejects the second and later candidates of one UUID, naming the first (Note [One UUID, one GPU]).
class DuplicateUuids {
 public:
  GPUSEL_API void reject(Candidate& candidate);

 private:
  std::unordered_map<std::string, std::string> first_of_uuid_;  // each UUID's first candidate, described
};

// What assess() reads once and asks of every candidate.
struct Assessment {
  const PickCriteria& criteria;
  const DeviceMap& map;
  const Caller& caller;
  Excluded excluded;
  bool hiding = false;  // only_visible, with CUDA_VISIBLE_DEVICES set

  GPUSEL_API std::string hidden_reason() const;
  GPUSEL_API static std::string excluded_reason(const std::string& name);
};

// Rejects `candidate`, a whole GPU, for what holds of the GPU and so of its MIG
// instances too.
GPUSEL_API void check_gpu(const Assessment& assessment, Candidate& candidate);

// `instance` of `whole`'s GPU as a candidate of its own, with `whole`'s reasons and its own.
GPUSEL_API Candidate assess_mig_instance(const Assessment& assessment, const Candidate& whole,
                                         const MigInstance& instance);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/picking/candidate_checks-inl.hpp"
#endif
