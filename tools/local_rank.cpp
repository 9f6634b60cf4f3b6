// run --local-rank: the GPU of this process's rank in a launcher's job, leased.

#include <gpusel/machine/lease.hpp>
#include <gpusel/machine/local_rank.hpp>
#include <gpusel/machine/pick.hpp>
#include <gpusel/text.hpp>

#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "devices.hpp"
#include "run.hpp"

namespace gpusel_tool {

Attempt attempt_local_rank(const Arguments& arguments, const gpusel::DeviceMap& map, bool& said_rank) {
  Attempt attempt;
  const auto rank = gpusel::local_rank();  // throws Error for a malformed variable
  if (!rank && !said_rank) {               // the documented rule, said, so that a mistyped launcher setup shows
    std::string variables;
    for (const gpusel::LauncherVariables& launcher : gpusel::launcher_variables)
      variables += (variables.empty() ? "" : ", ") + std::string(launcher.rank_variable);
    std::cerr << "gpusel: no launcher variable is set (" << variables
              << "), so this process runs as local rank 0 of 1\n";
    said_rank = true;
  }
  if (!map.visible.ok()) {
    attempt.failure = "no CUDA device is visible to this rank: " + map.visible.reason();
    return attempt;
  }
  require_allotment(map, "run --local-rank");  // throws: no wait can fix it
  const gpusel::Device device = gpusel::device_for_local_rank(rank, map.visible.count());
  if (device.is_cpu()) {
    attempt.failure = "no GPU is visible, so " + (rank ? rank->describe() : std::string("this process")) + " has none";
    return attempt;
  }
  const int physical = map.visible.physical(device.index());
  const gpusel::Gpu& gpu = *map.physical_device(physical);
  const std::string who = rank ? rank->describe() : std::string("local rank 0 (no launcher variable is set)");
  const std::string its_gpu = "its GPU, cuda:" + std::to_string(device.index()) + " of the job (physical " +
                              std::to_string(physical) + ", " + gpusel::escape_for_terminal(gpu.uuid) + "), is ";
  if (gpu.mig_enabled) {  // CUDA would show its instances, not the GPU: never given whole (docs/mig.md)
    attempt.failure = who + ": " + its_gpu +
                      "in MIG mode, and gpusel never gives a GPU in MIG mode whole; name the rank's MIG "
                      "instance in CUDA_VISIBLE_DEVICES, or leave out --local-rank to pick an instance";
    return attempt;
  }
  // Busy as pick judges it (Note [Whose process is it]): a compute process on it is the rank's error.
  gpusel::PickCriteria rule;
  rule.allow_other_users = arguments.criteria.allow_other_users;
  rule.share_own = arguments.criteria.share_own;
  rule.only_visible = false;  // the rank's GPU is visible: no other GPU's verdict matters
  for (const gpusel::Candidate& verdict : gpusel::assess(rule, map)) {
    if (verdict.physical_index != physical || verdict.mig_instance || verdict.fits()) continue;
    std::string reasons;
    for (const gpusel::Rejection& reason : verdict.rejections) reasons += (reasons.empty() ? "" : "; ") + reason.text;
    attempt.failure = who + ": " + its_gpu + "busy: " + reasons +
                      "; a rank keeps its GPU rather than take another (--share-own or --allow-other-users to "
                      "share it)";
    return attempt;
  }
  if (arguments.lease) {
    std::optional<gpusel::GpuLease> lease = gpusel::try_lease_gpu(gpu.uuid);
    if (!lease) {
      attempt.failure = who + ": " + its_gpu + gpusel::lease_holder(gpu.uuid).value_or("leased by another job") +
                        "; a rank keeps its GPU rather than take another";
      return attempt;
    }
    attempt.lease = std::move(*lease);
  }
  attempt.chosen.push_back(gpusel::Candidate{gpu, physical, {}, std::nullopt, {}});
  return attempt;
}

}  // namespace gpusel_tool
