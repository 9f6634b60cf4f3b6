// run --local-rank: the GPU of this process's rank in a launcher's job, leased.

#include <gpusel/machine/lease.hpp>
#include <gpusel/machine/local_rank.hpp>
#include <gpusel/machine/pick.hpp>
#include <gpusel/machine/rank_gpu.hpp>
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
  require_allotment(map, "run --local-rank", Choosing::rank_gpu);  // throws: no wait can fix it
  // The number of the rank's GPU among the visible ones (Note [Slurm tasks with GPUs of their own]).
  const int number = rank && rank->task_gpus.empty() ? rank->rank : 0;
  if (arguments.placement == gpusel::Placement::rank_or_cpu && number >= map.visible.count())
    throw gpusel::Error("local rank " + std::to_string(number) + " has no GPU of its number, but " +
                        gpusel::escape_for_terminal(map.visible.summary()) + "; this process is " +
                        gpusel::escape_for_terminal(rank.value_or(gpusel::LocalRank{}).describe()) +
                        "; to share GPUs between ranks, ask for it: gpusel run --local-rank --round-robin");
  // The rank's GPU under the rank's rules, as gpusel::local_rank_device() decides (Note [A rank's own GPU]).
  const gpusel::RankGpu own = gpusel::rank_gpu(rank, map, arguments.placement,
                                               {arguments.criteria.share_own, arguments.criteria.allow_other_users});
  switch (own.refusal) {
    case gpusel::RankRefusal::mig_mode:
      attempt.failure = own.reason +
                        "; name the rank's MIG instance in CUDA_VISIBLE_DEVICES, or leave out --local-rank to pick an "
                        "instance";
      return attempt;
    case gpusel::RankRefusal::busy:
      attempt.failure =
          own.reason +
          "; a rank keeps its GPU rather than take another (--share-own or --allow-other-users to share it)";
      return attempt;
    case gpusel::RankRefusal::none:
      break;
  }
  const gpusel::Gpu& gpu = *map.physical_device(own.physical_index);
  if (arguments.lease) {
    std::optional<gpusel::GpuLease> lease = gpusel::try_lease_gpu(gpu.uuid);
    if (!lease) {
      attempt.failure = own.described + ", is " + gpusel::lease_holder(gpu.uuid).value_or("leased by another job") +
                        "; a rank keeps its GPU rather than take another";
      return attempt;
    }
    attempt.lease = std::move(*lease);
  }
  attempt.chosen.push_back(gpusel::Candidate{gpu, own.physical_index, {}, std::nullopt, {}});
  return attempt;
}

}  // namespace gpusel_tool
