// The definitions of gpusel/wait_for_gpus.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: machine (docs/layers.md).
#pragma once

#include "gpusel/wait_for_gpus.hpp"

#include <unistd.h>

#include <thread>
#include <utility>
#include <vector>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/machine/criteria_checks.hpp"
#include "gpusel/detail/machine/wait_line.hpp"

namespace gpusel {

namespace detail {

// One look of lease_free_gpus(criteria, wait) at `map`: the GPUs leased, or why not
// (`why`, which a wait may end). Throws Error for what no wait can fix.
struct LookInLine {
  std::optional<LeasedGpus> leased;
  std::string why;
};
inline LookInLine look_in_line(const PickCriteria& criteria, const DeviceMap& map, const WaitLine& line) {
  if (!map.known()) throw Error("gpusel::pick: cannot see the GPUs without NVML: " + map.inventory.reason);
  LookInLine look;
  const std::string ahead = line.ahead();
  if (!ahead.empty()) {
    look.why = "another job waits for GPUs first (" + ahead + "): waiting jobs are served in arrival order";
    return look;
  }
  const auto caller = static_cast<unsigned int>(getpid());
  std::vector<Candidate> assessed = assess(criteria, map, current_user(), caller);
  reject_leased_gpus(assessed);
  std::vector<Candidate> chosen;
  try {
    chosen = choose(criteria, std::move(assessed));
  } catch (const Error& error) {  // too few fit
    look.why = error.what();
    return look;
  }
  for (const Candidate& candidate : chosen)
    if (candidate.uuid().empty())  // a lock file is named by the UUID
      throw Error("gpusel: cannot lease " + describe(candidate) + ": NVML reports no UUID for it");
  try {  // leases as it chooses again, passing over a GPU another job leases first
    look.leased = lease_free_gpus(criteria, map, current_user(), caller);
  } catch (const Error& error) {
    look.why = error.what();
  }
  return look;
}

}  // namespace detail

GPUSEL_API LeasedGpus lease_free_gpus(const PickCriteria& criteria, const WaitForGpus& wait) {
  const auto started = std::chrono::steady_clock::now();
  detail::WaitLine line;  // notes the arrival; throws Error when the lease directory cannot be used
  bool said = false;
  while (true) {
    const DeviceMap map = wait.read_devices ? wait.read_devices() : visible_devices(detail::usage_for(criteria));
    detail::LookInLine look = detail::look_in_line(criteria, map, line);
    if (look.leased) return std::move(*look.leased);  // the line's ticket goes: the next in line may go
    if (wait.at_most && std::chrono::steady_clock::now() - started >= *wait.at_most) throw WaitTimedOut(look.why);
    line.join();
    if (!said && wait.on_wait) wait.on_wait(look.why);
    said = true;
    std::this_thread::sleep_for(wait.interval);
  }
}

GPUSEL_API LeasedGpus use_free_gpus(const PickCriteria& criteria, const WaitForGpus& wait) {
  detail::require_cuda_not_started("gpusel::use_free_gpus");
  LeasedGpus picked = lease_free_gpus(criteria, wait);
  detail::make_visible(picked, criteria);
  return picked;
}

}  // namespace gpusel
