// The definitions of gpusel/machine/pick.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/pick.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/detail/leases/job_lease.hpp"
#include "gpusel/machine/detail/picking/connected_sets.hpp"
#include "gpusel/machine/detail/picking/criteria_checks.hpp"

namespace gpusel {

GPUSEL_API std::string current_user() { return detail::process_user(static_cast<unsigned int>(getpid())); }

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

namespace detail {

// Rejects `candidate` for what `processes` (nullopt: unknown) hold that is not `caller_pid`'s
// (nor, with share_own, `user`'s): Note [Whose process is it].
inline void check_processes(const std::optional<std::vector<GpuProcess>>& processes, const PickCriteria& criteria,
                            const std::string& user, unsigned int caller_pid, Candidate& candidate) {
  if (criteria.allow_other_users) return;
  if (!processes) {
    candidate.rejected_because.emplace_back("its compute processes are unknown (NVML could not list them)");
    return;
  }
  for (const GpuProcess& process : *processes) {
    if (caller_pid != 0 && process.pid == caller_pid) continue;
    const bool own = !process.user.empty() && process.user == user;
    if (own && criteria.share_own) continue;
    candidate.rejected_because.push_back(
        (own ? "this user's own compute process runs on it (" : "another user's compute process runs on it (") +
        describe(process) + ")");
    candidate.busy_processes.push_back(process);
  }
}

inline GpuLink candidate_link(const Candidate& a, const Candidate& b) {
  if (a.mig_instance || b.mig_instance) return GpuLink::unknown;  // no peer path (Note [MIG instances])
  return link_between(a.gpu, b.gpu);
}

}  // namespace detail

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

namespace detail {

// Adds `why` to the reasons `candidate` is rejected for.
inline void reject(Candidate& candidate, std::string why) { candidate.rejected_because.push_back(std::move(why)); }

// Rejects `candidate` when its free memory (its MIG instance's, else its GPU's) is below
// what `criteria` asks, or unknown.
inline void check_free_memory(const PickCriteria& criteria, Candidate& candidate) {
  if (criteria.min_free_memory.bytes == 0) return;
  const std::optional<std::uint64_t> free_bytes = candidate.memory_free_bytes();
  if (!free_bytes) {
    reject(candidate, "its free memory is unknown (NVML could not tell)");
  } else if (*free_bytes < criteria.min_free_memory.bytes) {
    reject(candidate, "only " + format_memory_size(*free_bytes) + " free, " +
                          format_memory_size(criteria.min_free_memory.bytes) + " needed");
  }
}

// Rejects `candidate` when its utilization is above what `criteria` allows, or unknown
// (always, for a MIG instance: NVML does not measure them).
inline void check_utilization(const PickCriteria& criteria, Candidate& candidate) {
  if (!criteria.max_utilization) return;
  const std::optional<int>& utilization = candidate.gpu.utilization_percent;
  if (candidate.mig_instance) {
    reject(candidate, "its utilization is unknown (NVML does not measure MIG instances)");
  } else if (!utilization) {
    reject(candidate, "its utilization is unknown (NVML could not tell)");
  } else if (*utilization > *criteria.max_utilization) {
    reject(candidate, std::to_string(*utilization) + "% utilized, at most " +
                          std::to_string(*criteria.max_utilization) + "% allowed");
  }
}

// Rejects `candidate` where its GPU's compute mode lets this process create no context:
// Prohibited always, an exclusive mode while any other compute process runs on it (or
// on `processes`, the MIG instance's), whatever share_own and allow_other_users say
// (Note [Compute modes in picking]).
inline void check_compute_mode(const std::optional<std::vector<GpuProcess>>& processes, unsigned int caller_pid,
                               Candidate& candidate) {
  const std::optional<ComputeMode>& mode = candidate.gpu.compute_mode;
  if (!mode || *mode == ComputeMode::default_mode) return;
  const std::string said = std::string("its compute mode is ") + describe(*mode);
  if (*mode == ComputeMode::prohibited) {
    reject(candidate, said + ": CUDA creates no context on it");
  } else if (!processes) {
    reject(candidate, said + " and its compute processes are unknown (NVML could not list them)");
  } else {
    const auto other = std::find_if(processes->begin(), processes->end(), [caller_pid](const GpuProcess& process) {
      return caller_pid == 0 || process.pid != caller_pid;
    });
    if (other != processes->end())
      reject(candidate, said + " and a compute process runs on it (" + describe(*other) +
                            "): CUDA would refuse this process a context, shared or not");
  }
}

// Rejects the second and later candidates of one UUID, naming the first (Note [One UUID, one GPU]).
class DuplicateUuids {
 public:
  void reject(Candidate& candidate) {
    if (candidate.uuid().empty()) return;
    const auto [first, inserted] = first_of_uuid_.try_emplace(candidate.uuid());
    if (inserted) {
      first->second = candidate.mig_instance ? "MIG instance " + escape_for_terminal(candidate.uuid()) + " (GI " +
                                                   std::to_string(candidate.mig_instance->gpu_instance_id) + ", CI " +
                                                   std::to_string(candidate.mig_instance->compute_instance_id) + ")"
                                             : "GPU " + std::to_string(candidate.physical_index);
      return;
    }
    candidate.rejected_because.push_back("NVML reports the UUID of " + first->second + " for it too (" +
                                         escape_for_terminal(candidate.uuid()) +
                                         "), so gpusel counts the two as one GPU, " + first->second);
  }

 private:
  std::unordered_map<std::string, std::string> first_of_uuid_;  // each UUID's first candidate, described
};

// What assess() reads once and asks of every candidate.
struct Assessment {
  const PickCriteria& criteria;
  const DeviceMap& map;
  const std::string& user;
  unsigned int caller_pid = 0;
  Excluded excluded;
  bool hiding = false;  // only_visible, with CUDA_VISIBLE_DEVICES set

  std::string hidden_reason() const {
    return "hidden by " + escape_for_terminal(describe_value("CUDA_VISIBLE_DEVICES", map.visible.variable()));
  }
  static std::string excluded_reason(const std::string& name) {
    return "excluded (\"" + escape_for_terminal(name) + "\" names it)";
  }
};

// Rejects `candidate`, a whole GPU, for what holds of the GPU and so of its MIG
// instances too.
inline void check_gpu(const Assessment& assessment, Candidate& candidate) {
  const DeviceMap& map = assessment.map;
  const Gpu& gpu = candidate.gpu;
  const int physical = candidate.physical_index;
  // The runtime refuses to start under an invalid CUDA_DEVICE_ORDER, whatever the GPUs.
  const std::optional<std::string>& device_order = map.visible.device_order();
  if (device_order && *device_order != "FASTEST_FIRST" && *device_order != "PCI_BUS_ID")
    reject(candidate,
           describe_value("CUDA_DEVICE_ORDER", device_order) +
               " is neither FASTEST_FIRST nor PCI_BUS_ID, so the CUDA runtime fails with cudaErrorInvalidDevice");
  const std::string& name = assessment.excluded.gpus[map.order.positions[static_cast<std::size_t>(physical)]];
  if (!name.empty()) reject(candidate, Assessment::excluded_reason(name));
  if (!gpu.impossible_readings.empty())
    reject(candidate, "its readings cannot be true (" + gpu.impossible_readings + "), so its use is unknown");
  if (assessment.hiding && !map.visible.logical(physical) && gpu.mig_instances.empty())
    reject(candidate, assessment.hidden_reason());
  if (gpu.mig_enabled && gpu.mig_instances.empty())
    reject(candidate,
           "MIG mode is enabled and NVML lists no MIG instance on it: CUDA shows its MIG instances, never the "
           "whole GPU");
}

// `instance` of `whole`'s GPU as a candidate of its own, with `whole`'s reasons and its own.
inline Candidate assess_mig_instance(const Assessment& assessment, const Candidate& whole,
                                     const MigInstance& instance) {
  Candidate part{whole.gpu, whole.physical_index, whole.rejected_because, instance, {}};
  if (assessment.hiding && !mig_instance_visible(assessment.map, whole.physical_index, instance))
    reject(part, assessment.hidden_reason());
  for (const auto& [uuid, name] : assessment.excluded.mig_instances)
    if (uuid == instance.uuid) {
      reject(part, Assessment::excluded_reason(name));
      break;
    }
  check_free_memory(assessment.criteria, part);
  check_utilization(assessment.criteria, part);
  check_processes(instance.processes, assessment.criteria, assessment.user, assessment.caller_pid, part);
  check_compute_mode(instance.processes, assessment.caller_pid, part);
  return part;
}

}  // namespace detail

GPUSEL_API std::vector<Candidate> assess(const PickCriteria& criteria, const DeviceMap& map, const std::string& user,
                                         unsigned int caller_pid) {
  detail::check_criteria(criteria);
  const bool hiding = criteria.only_visible && map.visible.variable().has_value();
  detail::Excluded excluded = detail::excluded_gpus(criteria.exclude, map, criteria.only_visible);
  const detail::Assessment assessment{criteria, map, user, caller_pid, std::move(excluded), hiding};
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
    detail::check_processes(gpu.processes, criteria, user, caller_pid, candidate);
    detail::check_compute_mode(gpu.processes, caller_pid, candidate);
    duplicates.reject(candidate);
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

namespace detail {

// Sorts `fitting` (positions in `all`) best first, as `criteria.order` asks; ties keep
// CUDA's physical order.
inline void sort_best_first(const PickCriteria& criteria, const std::vector<Candidate>& all,
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
inline std::vector<std::string> shared_reasons(const std::vector<Candidate>& all) {
  std::vector<std::string> shared;
  if (all.size() > 1)
    for (const std::string& reason : all.front().rejected_because)
      if (std::all_of(all.begin(), all.end(), [&reason](const Candidate& c) {
            return std::find(c.rejected_because.begin(), c.rejected_because.end(), reason) != c.rejected_because.end();
          }))
        shared.push_back(reason);
  return shared;
}

// Why too few of `all` fit: every candidate and its reasons, those all share said once, first.
inline std::string too_few_fit(const PickCriteria& criteria, const std::vector<Candidate>& all, std::size_t fitting) {
  // MIG instances are candidates beside whole GPUs: the count says so.
  const bool instances = std::any_of(all.begin(), all.end(), [](const Candidate& c) { return c.mig_instance; });
  const std::string candidates = instances ? "GPUs and MIG instances" : "GPUs";
  const std::vector<std::string> shared = shared_reasons(all);
  std::string message = "gpusel::pick: " + std::to_string(fitting) + " of " + std::to_string(all.size()) +
                        (all.size() == 1 ? " GPU fits" : " " + candidates + " fit") + ", " +
                        std::to_string(criteria.at_least) + (criteria.at_least == 1 ? " is" : " are") + " needed (" +
                        describe(criteria) + "):";
  for (const std::string& reason : shared)
    message += "\n  every " + std::string(instances ? "GPU and MIG instance" : "GPU") + ": " + reason;
  for (const Candidate& candidate : all) {
    message += "\n  " + describe(candidate);
    if (candidate.fits()) {
      message += ": fits";
      continue;
    }
    std::string separator = ": ";
    for (const std::string& reason : candidate.rejected_because) {
      if (std::find(shared.begin(), shared.end(), reason) != shared.end()) continue;
      message += separator + reason;
      separator = "; ";
    }
  }
  if (all.empty()) message += "\n  (NVML sees no GPU)";
  return message;
}

// The `keep` of `fitting` (positions in `all`) whose farthest pair is nearest, in
// `fitting`'s order (Note [Connected GPUs]).
inline std::vector<std::size_t> connected_subset(const std::vector<Candidate>& all,
                                                 const std::vector<std::size_t>& fitting, std::size_t keep) {
  std::vector<std::vector<GpuLink>> links(fitting.size(), std::vector<GpuLink>(fitting.size(), GpuLink::unknown));
  for (std::size_t a = 0; a < fitting.size(); ++a)
    for (std::size_t b = 0; b < fitting.size(); ++b)
      if (a != b) links[a][b] = candidate_link(all[fitting[a]], all[fitting[b]]);
  std::vector<std::size_t> ranks = connected_set(links, keep);
  for (std::size_t& rank : ranks) rank = fitting[rank];  // ranks in `fitting` to positions in `all`
  return ranks;
}

}  // namespace detail

GPUSEL_API std::vector<Candidate> choose(const PickCriteria& criteria, std::vector<Candidate> assessed) {
  detail::check_criteria(criteria);
  std::vector<Candidate>& all = assessed;
  std::vector<std::size_t> fitting;  // positions in `all`, best first once sorted
  for (std::size_t position = 0; position < all.size(); ++position)
    if (all[position].fits()) fitting.push_back(position);
  detail::sort_best_first(criteria, all, fitting);
  if (static_cast<long long>(fitting.size()) < criteria.at_least)
    throw Error(detail::too_few_fit(criteria, all, fitting.size()));
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

GPUSEL_API std::vector<Candidate> pick(const PickCriteria& criteria, const DeviceMap& map, const std::string& user,
                                       unsigned int caller_pid) {
  if (!map.known()) throw Error("gpusel::pick: cannot see the GPUs without NVML: " + map.inventory.reason);
  return choose(criteria, assess(criteria, map, user, caller_pid));
}

GPUSEL_API void reject_leased_gpus(std::vector<Candidate>& assessed) {
  std::vector<std::pair<std::string, std::string>> wanted;  // the lease directory is read once for all
  wanted.reserve(assessed.size());
  for (const Candidate& candidate : assessed)
    wanted.emplace_back(candidate.uuid(), candidate.mig_instance ? candidate.gpu.uuid : std::string());
  std::vector<std::optional<std::string>> holders = detail::lease_holders(wanted);
  const detail::JobLease job = detail::job_lease();  // inside gpusel run: its GPUs (Note [The job's lease])
  for (std::size_t i = 0; i < assessed.size(); ++i) {
    if (job.held(assessed[i].uuid()) != nullptr) continue;  // the job's own lease, not another job's
    if (std::optional<std::string> outside = detail::outside_job(job, assessed[i].uuid()))
      assessed[i].rejected_because.push_back(std::move(*outside));
    else if (holders[i])
      assessed[i].rejected_because.push_back(*holders[i] + detail::job_lease_not_counted(job, assessed[i].uuid()));
  }
}

GPUSEL_API std::vector<Candidate> pick(const PickCriteria& criteria) {
  const DeviceMap map = visible_devices(detail::usage_for(criteria));
  if (!map.known()) throw Error("gpusel::pick: cannot see the GPUs without NVML: " + map.inventory.reason);
  std::vector<Candidate> assessed = assess(criteria, map, current_user(), static_cast<unsigned int>(getpid()));
  reject_leased_gpus(assessed);
  return choose(criteria, std::move(assessed));
}

GPUSEL_API LeasedGpus lease_free_gpus(const PickCriteria& criteria, const DeviceMap& map, const std::string& user,
                                      unsigned int caller_pid) {
  if (!map.known()) throw Error("gpusel::pick: cannot see the GPUs without NVML: " + map.inventory.reason);
  std::vector<Candidate> assessed = assess(criteria, map, user, caller_pid);
  reject_leased_gpus(assessed);
  // Choose, lease what was chosen, and choose again without any GPU another job leased
  // between the look and the lease: each round rejects one more, so this ends, and
  // choose throws, saying why each GPU was rejected, once too few are left.
  while (true) {
    LeasedGpus result;
    result.gpus = choose(criteria, assessed);
    const Candidate* taken = nullptr;  // leased by another job since we looked, or its files became unusable
    std::string unusable;
    for (const Candidate& candidate : result.gpus) {
      const std::string parent = candidate.mig_instance ? candidate.gpu.uuid : std::string();
      detail::LeaseTry one = detail::lease_one(candidate.uuid(), parent);
      if (!one.lease) {
        taken = &candidate;
        unusable = "cannot be leased: " + one.unusable;
        break;
      }
      result.lease.merge(std::move(*one.lease));
    }
    if (taken == nullptr) return result;
    result.lease.release();
    const std::string parent = taken->mig_instance ? taken->gpu.uuid : std::string();
    const std::string why = unusable != "cannot be leased: "
                                ? unusable
                                : lease_holder(taken->uuid(), parent).value_or("leased by another job");
    for (Candidate& verdict : assessed)
      if (verdict.physical_index == taken->physical_index && verdict.uuid() == taken->uuid())
        verdict.rejected_because.push_back(why);
  }
}

GPUSEL_API LeasedGpus lease_free_gpus(const PickCriteria& criteria) {
  return lease_free_gpus(criteria, visible_devices(detail::usage_for(criteria)), current_user(),
                         static_cast<unsigned int>(getpid()));
}

GPUSEL_API void detail::require_cuda_not_started(const char* function) {
  if (cuda_started())
    throw Error(std::string(function) +
                ": CUDA has already started in this process, so choosing its GPUs now would have no effect (" +
                detail::variable_in_force("CUDA_VISIBLE_DEVICES") + "); call it before the first CUDA call");
}

GPUSEL_API void detail::make_visible(const LeasedGpus& picked, const PickCriteria& criteria) {
  std::vector<std::string> uuids;
  uuids.reserve(picked.gpus.size());
  for (const Candidate& candidate : picked.gpus) uuids.push_back(candidate.uuid());
  set_visible_devices(uuids, criteria.only_visible ? VisibleScope::within_visible : VisibleScope::whole_machine);
}

GPUSEL_API LeasedGpus use_free_gpus(const PickCriteria& criteria) {
  detail::require_cuda_not_started("gpusel::use_free_gpus");
  LeasedGpus picked = lease_free_gpus(criteria);
  detail::make_visible(picked, criteria);
  return picked;
}

}  // namespace gpusel
