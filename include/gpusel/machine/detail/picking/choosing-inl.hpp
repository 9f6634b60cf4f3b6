// The definitions of gpusel/machine/detail/picking/choosing.hpp's out-of-line functions
// (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp).
#pragma once

#include "gpusel/machine/detail/picking/choosing.hpp"

#include <algorithm>

#include "gpusel/machine/detail/picking/connected_sets.hpp"
#include "gpusel/machine/pick.hpp"
#include "gpusel/machine/pick_criteria.hpp"
#include "gpusel/machine/topology.hpp"
#include "gpusel/memory_size.hpp"

namespace gpusel::detail {

GPUSEL_API GpuLink candidate_link(const Candidate& a, const Candidate& b) {
  if (a.mig_instance || b.mig_instance) return GpuLink::unknown;  // no peer path (Note [MIG instances])
  return link_between(a.gpu, b.gpu);
}

GPUSEL_API void sort_best_first(const PickCriteria& criteria, const std::vector<Candidate>& all,
                                std::vector<std::size_t>& fitting) {
  const auto free_bytes = [&all](std::size_t c) { return all[c].memory_free_bytes().value_or(0); };
  const auto utilization = [&all](std::size_t c) {
    return all[c].mig_instance ? 101 : all[c].gpu.utilization_percent.value_or(101);  // MIG: not measured
  };
  std::stable_sort(fitting.begin(), fitting.end(), [&](std::size_t a, std::size_t b) {
    switch (criteria.order) {
      case PickOrder::most_free_memory:
        if (free_bytes(a) != free_bytes(b)) return free_bytes(a) > free_bytes(b);
        if (utilization(a) != utilization(b)) return utilization(a) < utilization(b);
        break;
      case PickOrder::least_utilized:
        if (utilization(a) != utilization(b)) return utilization(a) < utilization(b);
        if (free_bytes(a) != free_bytes(b)) return free_bytes(a) > free_bytes(b);
        break;
      case PickOrder::index:
        break;
    }
    return all[a].physical_index < all[b].physical_index;
  });
}

// The reasons every one of `all` (two or more) is rejected for, such as an invalid CUDA_DEVICE_ORDER.
inline std::vector<Rejection> shared_reasons(const std::vector<Candidate>& all) {
  std::vector<Rejection> shared;
  if (all.size() > 1)
    for (const Rejection& reason : all.front().rejections)
      if (std::all_of(all.begin(), all.end(), [&reason](const Candidate& c) {
            return std::find(c.rejections.begin(), c.rejections.end(), reason) != c.rejections.end();
          }))
        shared.push_back(reason);
  return shared;
}

GPUSEL_API std::string too_few_fit(const PickCriteria& criteria, const std::vector<Candidate>& all,
                                   std::size_t fitting) {
  // MIG instances are candidates beside whole GPUs: the count says so.
  const bool instances = std::any_of(all.begin(), all.end(), [](const Candidate& c) { return c.mig_instance; });
  const std::string candidates = instances ? "GPUs and MIG instances" : "GPUs";
  const std::vector<Rejection> shared = shared_reasons(all);
  std::string message = std::to_string(fitting) + " of " + std::to_string(all.size()) +
                        (all.size() == 1 ? " GPU fits" : " " + candidates + " fit") + ", " +
                        std::to_string(criteria.at_least) + (criteria.at_least == 1 ? " is" : " are") + " needed (" +
                        describe(criteria) + "):";
  for (const Rejection& reason : shared)
    message += "\n  every " + std::string(instances ? "GPU and MIG instance" : "GPU") + ": " + reason.text;
  for (const Candidate& candidate : all) {
    message += "\n  " + describe(candidate);
    if (candidate.fits()) {
      message += ": fits";
      continue;
    }
    std::string separator = ": ";
    for (const Rejection& reason : candidate.rejections) {
      if (std::find(shared.begin(), shared.end(), reason) != shared.end()) continue;
      message += separator + reason.text;
      separator = "; ";
    }
  }
  if (all.empty()) message += "\n  (NVML sees no GPU)";
  return message;
}

GPUSEL_API std::vector<std::size_t> connected_subset(const std::vector<Candidate>& all,
                                                     const std::vector<std::size_t>& fitting, std::size_t keep) {
  std::vector<std::vector<GpuLink>> links(fitting.size(), std::vector<GpuLink>(fitting.size(), GpuLink::unknown));
  for (std::size_t a = 0; a < fitting.size(); ++a)
    for (std::size_t b = 0; b < fitting.size(); ++b)
      if (a != b) links[a][b] = candidate_link(all[fitting[a]], all[fitting[b]]);
  std::vector<std::size_t> ranks = connected_set(links, keep);
  for (std::size_t& rank : ranks) rank = fitting[rank];  // ranks in `fitting` to positions in `all`
  return ranks;
}

}  // namespace gpusel::detail
