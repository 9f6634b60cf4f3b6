// The definitions of gpusel/select.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: machine (docs/layers.md).
#pragma once

#include "gpusel/select.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <unordered_map>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/machine/connected_sets.hpp"
#include "gpusel/detail/machine/criteria_checks.hpp"
#include "gpusel/detail/machine/wait_line.hpp"

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

// What to read of the machine for `criteria`: usage, and the links between GPUs only
// when the placement needs them (N(N-1)/2 pairs: InventoryOptions::links).
inline InventoryOptions usage_for(const PickCriteria& criteria) {
  InventoryOptions options = InventoryOptions::with_usage();
  options.links = criteria.placement == PickPlacement::connected;
  return options;
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

GPUSEL_API std::vector<Candidate> assess(const PickCriteria& criteria, const DeviceMap& map, const std::string& user,
                                         unsigned int caller_pid) {
  detail::check_criteria(criteria);
  const detail::Excluded excluded = detail::excluded_gpus(criteria.exclude, map, criteria.only_visible);
  const bool variable_set = map.visible.variable().has_value();
  // The runtime refuses to start under an invalid CUDA_DEVICE_ORDER, whatever the GPUs.
  const std::optional<std::string>& device_order = map.visible.device_order();
  const bool order_invalid = device_order && *device_order != "FASTEST_FIRST" && *device_order != "PCI_BUS_ID";
  // The first candidate of each UUID, described (Note [One UUID, one GPU]).
  std::unordered_map<std::string, std::string> first_of_uuid;
  const auto reject_duplicate = [&first_of_uuid](Candidate& candidate) {
    if (candidate.uuid().empty()) return;
    const auto [first, inserted] = first_of_uuid.try_emplace(candidate.uuid());
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
  };
  const auto excluded_because = [](const std::string& name) {
    return "excluded (\"" + escape_for_terminal(name) + "\" names it)";
  };

  std::vector<Candidate> candidates;
  candidates.reserve(map.order.positions.size());
  for (int physical = 0; physical < map.order.count(); ++physical) {
    const Gpu& gpu = map.order.gpu(map.inventory, physical);
    Candidate candidate{gpu, physical, {}, std::nullopt, {}};
    const auto reject = [&candidate](std::string why) { candidate.rejected_because.push_back(std::move(why)); };
    if (order_invalid)
      reject(detail::describe_value("CUDA_DEVICE_ORDER", device_order) +
             " is neither FASTEST_FIRST nor PCI_BUS_ID, so the CUDA runtime fails with cudaErrorInvalidDevice");
    if (const std::string& name = excluded.gpus[map.order.positions[static_cast<std::size_t>(physical)]]; !name.empty())
      reject(excluded_because(name));
    if (!gpu.impossible_readings.empty())
      reject("its readings cannot be true (" + gpu.impossible_readings + "), so its use is unknown");
    if (criteria.only_visible && variable_set && !map.visible.logical(physical) && gpu.mig_instances.empty())
      reject("hidden by " +
             escape_for_terminal(detail::describe_value("CUDA_VISIBLE_DEVICES", map.visible.variable())));
    if (gpu.mig_enabled) {  // its instances are the candidates (Note [MIG instances as picks])
      if (gpu.mig_instances.empty())
        reject(
            "MIG mode is enabled and NVML lists no MIG instance on it: CUDA shows its MIG instances, never the "
            "whole GPU");
      const std::vector<std::string> of_gpu = candidate.rejected_because;
      for (const MigInstance& instance : gpu.mig_instances) {
        Candidate part{gpu, physical, of_gpu, instance, {}};
        const auto refuse = [&part](std::string why) { part.rejected_because.push_back(std::move(why)); };
        if (criteria.only_visible && variable_set && !detail::mig_instance_visible(map, physical, instance))
          refuse("hidden by " +
                 escape_for_terminal(detail::describe_value("CUDA_VISIBLE_DEVICES", map.visible.variable())));
        for (const auto& [uuid, name] : excluded.mig_instances)
          if (uuid == instance.uuid) {
            refuse(excluded_because(name));
            break;
          }
        if (criteria.min_free_memory.bytes > 0) {
          if (!instance.memory_free_bytes)
            refuse("its free memory is unknown (NVML could not tell)");
          else if (*instance.memory_free_bytes < criteria.min_free_memory.bytes)
            refuse("only " + format_memory_size(*instance.memory_free_bytes) + " free, " +
                   format_memory_size(criteria.min_free_memory.bytes) + " needed");
        }
        if (criteria.max_utilization) refuse("its utilization is unknown (NVML does not measure MIG instances)");
        detail::check_processes(instance.processes, criteria, user, caller_pid, part);
        reject_duplicate(part);
        candidates.push_back(std::move(part));
      }
      if (!gpu.mig_instances.empty()) continue;
    }
    if (criteria.min_free_memory.bytes > 0) {
      if (!gpu.memory_free_bytes) {
        reject("its free memory is unknown (NVML could not tell)");
      } else if (*gpu.memory_free_bytes < criteria.min_free_memory.bytes) {
        reject("only " + format_memory_size(*gpu.memory_free_bytes) + " free, " +
               format_memory_size(criteria.min_free_memory.bytes) + " needed");
      }
    }
    if (criteria.max_utilization) {
      if (!gpu.utilization_percent) {
        reject("its utilization is unknown (NVML could not tell)");
      } else if (*gpu.utilization_percent > *criteria.max_utilization) {
        reject(std::to_string(*gpu.utilization_percent) + "% utilized, at most " +
               std::to_string(*criteria.max_utilization) + "% allowed");
      }
    }
    detail::check_processes(gpu.processes, criteria, user, caller_pid, candidate);
    reject_duplicate(candidate);
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

  if (static_cast<long long>(fitting.size()) < criteria.at_least) {
    // MIG instances are candidates beside whole GPUs: the count says so. A reason every candidate
    // shares (an invalid CUDA_DEVICE_ORDER) is said once, before the list.
    const bool instances = std::any_of(all.begin(), all.end(), [](const Candidate& c) { return c.mig_instance; });
    const std::string candidates = instances ? "GPUs and MIG instances" : "GPUs";
    std::vector<std::string> shared;
    if (all.size() > 1)
      for (const std::string& reason : all.front().rejected_because)
        if (std::all_of(all.begin(), all.end(), [&reason](const Candidate& c) {
              return std::find(c.rejected_because.begin(), c.rejected_because.end(), reason) !=
                     c.rejected_because.end();
            }))
          shared.push_back(reason);
    std::string message = "gpusel::pick: " + std::to_string(fitting.size()) + " of " + std::to_string(all.size()) +
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
    throw Error(message);
  }
  const auto keep = static_cast<std::size_t>(
      std::min<long long>(detail::wanted_at_most(criteria), static_cast<long long>(fitting.size())));
  if (criteria.placement == PickPlacement::connected && keep >= 2 && keep < fitting.size()) {
    // The `keep` of `fitting` whose farthest pair is nearest, in `fitting`'s order (Note [Connected GPUs]).
    std::vector<std::vector<GpuLink>> links(fitting.size(), std::vector<GpuLink>(fitting.size(), GpuLink::unknown));
    for (std::size_t a = 0; a < fitting.size(); ++a)
      for (std::size_t b = 0; b < fitting.size(); ++b)
        if (a != b) links[a][b] = detail::candidate_link(all[fitting[a]], all[fitting[b]]);
    std::vector<std::size_t> ranks = detail::connected_set(links, keep);
    for (std::size_t& rank : ranks) rank = fitting[rank];  // ranks in `fitting` to positions in `all`
    fitting = std::move(ranks);
  }
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
  for (std::size_t i = 0; i < assessed.size(); ++i)
    if (holders[i]) assessed[i].rejected_because.push_back(std::move(*holders[i]));
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

GPUSEL_API LeasedGpus use_free_gpus(const PickCriteria& criteria) {
  if (cuda_started())
    throw Error(
        "gpusel::use_free_gpus: CUDA has already started in this process, so choosing its GPUs now would have "
        "no effect (" +
        detail::variable_in_force("CUDA_VISIBLE_DEVICES") + "); call it before the first CUDA call");
  LeasedGpus picked = lease_free_gpus(criteria);
  std::vector<std::string> uuids;
  uuids.reserve(picked.gpus.size());
  for (const Candidate& candidate : picked.gpus) uuids.push_back(candidate.uuid());
  set_visible_devices(uuids, criteria.only_visible ? VisibleScope::within_visible : VisibleScope::whole_machine);
  return picked;
}

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
  if (cuda_started())
    throw Error(
        "gpusel::use_free_gpus: CUDA has already started in this process, so choosing its GPUs now would have "
        "no effect (" +
        detail::variable_in_force("CUDA_VISIBLE_DEVICES") + "); call it before the first CUDA call");
  LeasedGpus picked = lease_free_gpus(criteria, wait);
  std::vector<std::string> uuids;
  uuids.reserve(picked.gpus.size());
  for (const Candidate& candidate : picked.gpus) uuids.push_back(candidate.uuid());
  set_visible_devices(uuids, criteria.only_visible ? VisibleScope::within_visible : VisibleScope::whole_machine);
  return picked;
}

}  // namespace gpusel
