// The definitions of gpusel/machine/rank_gpu.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/rank_gpu.hpp"

#include <utility>

#include "gpusel/text.hpp"

namespace gpusel {

namespace detail {

// Refuses `own` for `refusal`: its GPU is `what`.
inline void refuse(RankGpu& own, RankRefusal refusal, const std::string& what) {
  own.refusal = refusal;
  own.reason = own.described + ", is " + what;
}

}  // namespace detail

GPUSEL_API RankGpu rank_gpu(const std::optional<LocalRank>& rank, const DeviceMap& map, Placement placement,
                            const RankSharing& sharing, const Caller& caller) {
  if (!map.known()) throw Error("gpusel::rank_gpu: cannot see the GPUs without NVML: " + map.inventory.reason);
  if (!map.visible.ok()) throw Error("gpusel::rank_gpu: which GPUs are visible is unknown: " + map.visible.reason());
  RankGpu own;
  own.device = device_for_local_rank(rank, map.visible.count(), placement);  // a GPU: at least one is visible
  own.physical_index = map.visible.physical(own.device.index());
  const Gpu& gpu = *map.physical_device(own.physical_index);
  own.described = escape_for_terminal(rank ? rank->describe() : LocalRank{}.describe()) +
                  ": its GPU, cuda:" + std::to_string(own.device.index()) + " of the job (physical " +
                  std::to_string(own.physical_index) + ", " + escape_for_terminal(gpu.uuid) + ")";
  if (gpu.mig_enabled) {
    detail::refuse(own, RankRefusal::mig_mode, "in MIG mode, and gpusel never gives a GPU in MIG mode whole");
    return own;
  }
  // Busy as a pick judges it (Note [Whose process is it]), round-robin ranks sharing their own.
  PickCriteria rule;
  rule.share_own = sharing.share_own || placement == Placement::round_robin;
  rule.allow_other_users = sharing.allow_other_users;
  rule.only_visible = false;  // the rank's GPU is visible: no other GPU's verdict matters
  for (Candidate& verdict : assess(rule, map, caller)) {
    if (verdict.physical_index != own.physical_index || verdict.mig_instance || verdict.fits()) continue;
    std::string reasons;
    for (const Rejection& rejection : verdict.rejections) reasons += (reasons.empty() ? "" : "; ") + rejection.text;
    detail::refuse(own, RankRefusal::busy, "busy: " + reasons);
    own.busy_processes = std::move(verdict.busy_processes);
  }
  return own;
}

}  // namespace gpusel
