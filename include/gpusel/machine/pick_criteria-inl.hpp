// The definitions of gpusel/machine/pick_criteria.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/pick_criteria.hpp"

#include <string>

#include "gpusel/machine/detail/picking/criteria_checks.hpp"
#include "gpusel/text.hpp"

namespace gpusel {

GPUSEL_API std::string describe(const PickCriteria& criteria) {
  const int at_most = detail::wanted_at_most(criteria);
  std::string text = "at least " + std::to_string(criteria.at_least) + (criteria.at_least == 1 ? " GPU" : " GPUs");
  text += at_most == PickCriteria::all ? " (all that fit)" : " (at most " + std::to_string(at_most) + ")";
  if (criteria.min_free_memory.bytes > 0)
    text += "; at least " + format_memory_size(criteria.min_free_memory.bytes) + " free";
  if (criteria.max_utilization) text += "; at most " + std::to_string(*criteria.max_utilization) + "% utilized";
  if (!criteria.allow_other_users)
    text +=
        criteria.share_own ? "; no other user's compute process" : "; no compute process (this user's own included)";
  if (!criteria.exclude.empty()) {
    text += "; excluding";
    for (const std::string& name : criteria.exclude) text += " " + escape_for_terminal(name);
  }
  if (!criteria.only_visible) text += "; any GPU of the machine, CUDA_VISIBLE_DEVICES aside";
  if (criteria.placement == PickPlacement::connected)
    text += "; connected GPUs preferred (NVLink, else one PCIe switch, else one host bridge, else one NUMA node)";
  text += criteria.order == PickOrder::most_free_memory ? "; most free memory first"
          : criteria.order == PickOrder::least_utilized ? "; least utilized first"
                                                        : "; in CUDA's order";
  return text;
}

}  // namespace gpusel
