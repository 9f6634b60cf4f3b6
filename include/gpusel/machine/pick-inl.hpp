// The definitions of gpusel/machine/pick.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// The checks assess() makes of each candidate are machine/detail/picking/
// candidate_checks.hpp's; choose()'s steps are choosing.hpp's.
#pragma once

#include "gpusel/machine/pick.hpp"

#include <unistd.h>

#include <algorithm>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/detail/leases/job_lease.hpp"
#include "gpusel/machine/detail/picking/candidate_checks.hpp"
#include "gpusel/machine/detail/picking/choosing.hpp"
#include "gpusel/machine/detail/picking/criteria_checks.hpp"
#include "gpusel/machine/local_rank.hpp"
#include "gpusel/machine/slurm_numbering.hpp"

namespace gpusel {

GPUSEL_API std::string current_user() { return detail::process_user(static_cast<unsigned int>(getpid())); }

GPUSEL_API Caller Caller::this_process() { return Caller{current_user(), static_cast<unsigned int>(getpid())}; }

GPUSEL_API const char* describe(RejectReason reason) noexcept {
  switch (reason) {
    case RejectReason::invalid_device_order:
      return "invalid_device_order";
    case RejectReason::excluded:
      return "excluded";
    case RejectReason::hidden:
      return "hidden";
    case RejectReason::impossible_readings:
      return "impossible_readings";
    case RejectReason::mig_mode:
      return "mig_mode";
    case RejectReason::free_memory:
      return "free_memory";
    case RejectReason::utilization:
      return "utilization";
    case RejectReason::compute_process:
      return "compute_process";
    case RejectReason::compute_mode:
      return "compute_mode";
    case RejectReason::duplicate_uuid:
      return "duplicate_uuid";
    case RejectReason::leased:
      return "leased";
    case RejectReason::cannot_be_leased:
      return "cannot_be_leased";
    case RejectReason::outside_job:
      return "outside_job";
  }
  return "?";
}

GPUSEL_API std::string describe(const GpuProcess& process) {
  std::string text = "pid " + std::to_string(process.pid);
  if (process.user.empty()) {
    text += ", owner unknown: not visible from this PID namespace";
  } else {
    text += " of " + escape_for_terminal(process.user);
    if (!process.command.empty()) text += " (" + escape_for_terminal(process.command) + ")";
  }
  if (process.used_memory_bytes) text += ", " + format_memory_size(*process.used_memory_bytes);
  return text;
}

GPUSEL_API std::string describe(const Candidate& candidate) {
  const Gpu& gpu = candidate.gpu;
  std::string text;
  if (const auto& instance = candidate.mig_instance) {
    text = "MIG instance " + escape_for_terminal(instance->uuid) + " (GI " + std::to_string(instance->gpu_instance_id) +
           ", CI " + std::to_string(instance->compute_instance_id) + ") of ";
    text += "GPU " + std::to_string(candidate.physical_index) + " (nvidia-smi " + std::to_string(gpu.nvml_index) +
            ", " + (gpu.name.empty() ? "unnamed" : escape_for_terminal(gpu.name)) + ", " +
            escape_for_terminal(gpu.uuid) + ")";
    if (instance->memory_free_bytes) text += ", " + format_memory_size(*instance->memory_free_bytes) + " free";
    return text;
  }
  text += "GPU " + std::to_string(candidate.physical_index) + " (nvidia-smi " + std::to_string(gpu.nvml_index) + ", " +
          (gpu.name.empty() ? "unnamed" : escape_for_terminal(gpu.name)) + ", " + escape_for_terminal(gpu.uuid) + ")";
  if (gpu.memory_free_bytes) text += ", " + format_memory_size(*gpu.memory_free_bytes) + " free";
  if (gpu.utilization_percent) text += ", " + std::to_string(*gpu.utilization_percent) + "% utilized";
  return text;
}

GPUSEL_API std::vector<Candidate> assess(const PickCriteria& criteria, const DeviceMap& map, const Caller& caller) {
  detail::check_criteria(criteria);
  const bool hiding = criteria.only_visible && map.visible.variable().has_value();
  detail::Excluded excluded = detail::excluded_gpus(criteria.exclude, map, criteria.only_visible);
  const detail::Assessment assessment{criteria, map, caller, std::move(excluded), hiding};
  detail::DuplicateUuids duplicates;
  std::vector<Candidate> candidates;
  candidates.reserve(map.order.positions.size());
  for (int physical = 0; physical < map.order.count(); ++physical) {
    const Gpu& gpu = map.order.gpu(map.inventory, physical);
    Candidate candidate{gpu, physical, {}, std::nullopt, {}};
    detail::check_gpu(assessment, candidate);
    // A GPU in MIG mode: its instances are the candidates (Note [MIG instances as picks]).
    if (gpu.mig_enabled && !gpu.mig_instances.empty()) {
      for (const MigInstance& instance : gpu.mig_instances) {
        Candidate part = detail::assess_mig_instance(assessment, candidate, instance);
        duplicates.reject(part);
        candidates.push_back(std::move(part));
      }
      continue;
    }
    detail::check_free_memory(criteria, candidate);
    detail::check_utilization(criteria, candidate);
    detail::check_processes(gpu.processes, criteria, caller, candidate);
    detail::check_compute_mode(gpu.processes, caller.pid, candidate);
    duplicates.reject(candidate);
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

GPUSEL_API std::vector<Candidate> choose(const PickCriteria& criteria, std::vector<Candidate> assessed) {
  detail::check_criteria(criteria);
  std::vector<Candidate>& all = assessed;
  std::vector<std::size_t> fitting;  // positions in `all`, best first once sorted
  for (std::size_t position = 0; position < all.size(); ++position)
    if (all[position].fits()) fitting.push_back(position);
  detail::sort_best_first(criteria, all, fitting);
  if (static_cast<long long>(fitting.size()) < criteria.at_least)
    throw Error("gpusel::pick: " + detail::too_few_fit(criteria, all, fitting.size()));
  const auto keep = static_cast<std::size_t>(
      std::min<long long>(detail::wanted_at_most(criteria), static_cast<long long>(fitting.size())));
  if (criteria.placement == PickPlacement::connected && keep >= 2 && keep < fitting.size())
    fitting = detail::connected_subset(all, fitting, keep);
  std::vector<Candidate> picked;
  picked.reserve(keep);
  for (std::size_t i = 0; i < keep; ++i) picked.push_back(std::move(all[fitting[i]]));
  return picked;
}

GPUSEL_API std::optional<GpuLink> weakest_link(const std::vector<Candidate>& picked) {
  if (picked.size() < 2) return std::nullopt;
  GpuLink weakest = GpuLink::nvlink;
  for (std::size_t a = 0; a < picked.size(); ++a)
    for (std::size_t b = a + 1; b < picked.size(); ++b)
      weakest = std::max(weakest, detail::candidate_link(picked[a], picked[b]));
  return weakest;
}

GPUSEL_API std::string describe_connection(const std::vector<Candidate>& picked, const PickCriteria& criteria) {
  const std::optional<GpuLink> weakest = weakest_link(picked);
  if (!weakest) return {};
  std::string names;
  for (std::size_t i = 0; i < picked.size(); ++i) {
    names += i == 0 ? "" : i + 1 == picked.size() ? " and " : ", ";
    names += picked[i].mig_instance ? escape_for_terminal(picked[i].uuid()) : std::to_string(picked[i].physical_index);
  }
  bool any_mig = false;
  for (const Candidate& candidate : picked) any_mig = any_mig || candidate.mig_instance.has_value();
  std::string text =
      (any_mig ? "" : "GPUs ") + names + " are " +
      (any_mig ? std::string("not joined: MIG instances have no peer-to-peer path") : describe(*weakest));
  if (criteria.placement == PickPlacement::connected && *weakest != GpuLink::nvlink && !any_mig)
    text += " (no " + std::to_string(picked.size()) + " of the GPUs that fit are connected more closely)";
  return text;
}

namespace detail {

// Why a lease cannot be had, as a rejection, from `state` (its look); nullopt when it is free.
inline std::optional<Rejection> lease_rejection(const LeaseState& state) {
  if (!state.problem.empty()) return Rejection{RejectReason::cannot_be_leased, state.describe()};
  if (state.held) return Rejection{RejectReason::leased, state.describe()};
  return std::nullopt;
}

// Why `one`, a try at `uuid` (of GPU `parent`), leased nothing: its files or name cannot be
// used, or another job holds it (who, looked up now).
inline Rejection refusal_of(const LeaseTry& one, const std::string& uuid, const std::string& parent) {
  if (!one.unusable.empty())
    return Rejection{RejectReason::cannot_be_leased, "cannot be leased: " + escape_for_terminal(one.unusable)};
  if (!one.held_by.empty()) return Rejection{RejectReason::leased, escape_for_terminal(one.held_by)};
  const LeaseState now = lease_holders({{uuid, parent}}).front();
  return lease_rejection(now).value_or(Rejection{RejectReason::leased, "leased by another job"});
}

}  // namespace detail

GPUSEL_API std::vector<Candidate> pick(const PickCriteria& criteria, const DeviceMap& map, const Caller& caller) {
  if (!map.known()) throw Error("gpusel::pick: cannot see the GPUs without NVML: " + map.inventory.reason);
  return choose(criteria, assess(criteria, map, caller));
}

GPUSEL_API void reject_leased_gpus(std::vector<Candidate>& assessed) {
  std::vector<std::pair<std::string, std::string>> wanted;  // the lease directory is read once for all
  wanted.reserve(assessed.size());
  for (const Candidate& candidate : assessed)
    wanted.emplace_back(candidate.uuid(), candidate.mig_instance ? candidate.gpu.uuid : std::string());
  const std::vector<LeaseState> states = detail::lease_holders(wanted);
  const detail::JobLease job = detail::job_lease();  // inside gpusel run: its GPUs (Note [The job's lease])
  for (std::size_t i = 0; i < assessed.size(); ++i) {
    if (states[i].member_took)  // Note [A job's members]
      assessed[i].rejections.push_back({RejectReason::leased, "taken by another process of this job"});
    if (job.held(assessed[i].uuid()) != nullptr) continue;  // the job's own lease, not another job's
    if (std::optional<std::string> outside = detail::outside_job(job, assessed[i].uuid()))
      assessed[i].rejections.push_back({RejectReason::outside_job, std::move(*outside)});
    else if (std::optional<Rejection> held = detail::lease_rejection(states[i]))
      assessed[i].rejections.push_back(
          {held->reason, held->text + detail::job_lease_not_counted(job, assessed[i].uuid())});
  }
}

namespace detail {

// Refuses, naming `function`, where this process may choose none of `map`'s visible GPUs: Slurm
// gave it GPUs without naming them here (Note [The GPUs this process may choose among]), or
// named them in numbers CUDA reads otherwise (Note [Slurm's GPU numbers]). Choosing among the
// whole machine is asked for by name, and is not judged.
inline void require_slurm_allows(const char* function, const PickCriteria& criteria, const DeviceMap& map) {
  if (!map.known() || !criteria.only_visible) return;
  allotment(map.visible.ok() ? map.visible.count() : 0).require(function);
  slurm_list(map).require(function);
}

}  // namespace detail

GPUSEL_API std::vector<Candidate> pick(const PickCriteria& criteria) {
  const DeviceMap map = visible_devices(detail::usage_for(criteria));
  if (!map.known()) throw Error("gpusel::pick: cannot see the GPUs without NVML: " + map.inventory.reason);
  detail::require_slurm_allows("gpusel::pick", criteria, map);
  std::vector<Candidate> assessed = assess(criteria, map);
  reject_leased_gpus(assessed);
  return choose(criteria, std::move(assessed));
}

GPUSEL_API LeasedGpus choose_and_lease(const PickCriteria& criteria, std::vector<Candidate> assessed) {
  // Choose, lease what was chosen, and choose again without any GPU another job leased
  // between the look and the lease: each round rejects one more, so this ends, and
  // choose throws, saying why each GPU was rejected, once too few are left.
  while (true) {
    LeasedGpus result;
    result.gpus = choose(criteria, assessed);
    std::optional<Rejection> refused;  // leased by another job since we looked, or its files became unusable
    const Candidate* taken = nullptr;
    for (const Candidate& candidate : result.gpus) {
      const std::string parent = candidate.mig_instance ? candidate.gpu.uuid : std::string();
      detail::LeaseTry one = detail::lease_one(candidate.uuid(), parent);
      if (!one.lease) {
        taken = &candidate;
        refused = detail::refusal_of(one, candidate.uuid(), parent);
        break;
      }
      result.lease.merge(std::move(*one.lease));
    }
    if (taken == nullptr) return result;
    result.lease.release();
    for (Candidate& verdict : assessed)
      if (verdict.physical_index == taken->physical_index && verdict.uuid() == taken->uuid())
        verdict.rejections.push_back(*refused);
  }
}

GPUSEL_API LeasedGpus lease_free_gpus(const PickCriteria& criteria, const DeviceMap& map, const Caller& caller) {
  if (!map.known()) throw Error("gpusel::pick: cannot see the GPUs without NVML: " + map.inventory.reason);
  std::vector<Candidate> assessed = assess(criteria, map, caller);
  reject_leased_gpus(assessed);
  return choose_and_lease(criteria, std::move(assessed));
}

GPUSEL_API LeasedGpus lease_free_gpus(const PickCriteria& criteria) {
  const DeviceMap map = visible_devices(detail::usage_for(criteria));
  detail::require_slurm_allows("gpusel::lease_free_gpus", criteria, map);
  return lease_free_gpus(criteria, map);
}

GPUSEL_API void detail::require_cuda_not_started(const char* function) {
  if (cuda_started())
    throw Error(std::string(function) +
                ": CUDA has already started in this process, so choosing its GPUs now would have no effect (" +
                detail::variable_in_force("CUDA_VISIBLE_DEVICES") + "); call it before the first CUDA call");
}

GPUSEL_API void detail::make_visible(const LeasedGpus& picked, const PickCriteria& criteria, const DeviceMap& map) {
  std::vector<std::string> uuids;
  uuids.reserve(picked.gpus.size());
  for (const Candidate& candidate : picked.gpus) uuids.push_back(candidate.uuid());
  set_visible_uuids(uuids, criteria.only_visible ? VisibleScope::within_visible : VisibleScope::whole_machine, &map);
}

GPUSEL_API LeasedGpus use_free_gpus(const PickCriteria& criteria) {
  detail::require_cuda_not_started("gpusel::use_free_gpus");
  const DeviceMap map = visible_devices(detail::usage_for(criteria));  // read once: Note [One look per attempt]
  detail::require_slurm_allows("gpusel::use_free_gpus", criteria, map);
  LeasedGpus picked = lease_free_gpus(criteria, map);
  detail::make_visible(picked, criteria, map);
  return picked;
}

}  // namespace gpusel
