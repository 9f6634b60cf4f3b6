// The definitions of gpusel/machine/detail/picking/candidate_checks.hpp's out-of-line functions
// (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp).
#pragma once

#include "gpusel/machine/detail/picking/candidate_checks.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/inventory.hpp"
#include "gpusel/machine/pick.hpp"
#include "gpusel/machine/pick_criteria.hpp"
#include "gpusel/machine/visibility.hpp"
#include "gpusel/memory_size.hpp"
#include "gpusel/text.hpp"

namespace gpusel::detail {

// Adds `why`, for `reason`, to the reasons `candidate` is rejected for.
inline void reject(Candidate& candidate, RejectReason reason, std::string why) {
  candidate.rejections.push_back({reason, std::move(why)});
}

GPUSEL_API void check_processes(const std::optional<std::vector<GpuProcess>>& processes, const PickCriteria& criteria,
                                const Caller& caller, Candidate& candidate) {
  if (criteria.allow_other_users) return;
  if (!processes) {
    reject(candidate, RejectReason::compute_process, "its compute processes are unknown (NVML could not list them)");
    return;
  }
  for (const GpuProcess& process : *processes) {
    if (caller.pid != 0 && process.pid == caller.pid) continue;
    const bool own = !process.user.empty() && process.user == caller.user;
    if (own && criteria.share_own) continue;
    reject(candidate, RejectReason::compute_process,
           (own ? "this user's own compute process runs on it (" : "another user's compute process runs on it (") +
               describe(process) + ")");
    candidate.busy_processes.push_back(process);
  }
}

GPUSEL_API void check_free_memory(const PickCriteria& criteria, Candidate& candidate) {
  if (criteria.min_free_memory.bytes == 0) return;
  const std::optional<std::uint64_t> free_bytes = candidate.memory_free_bytes();
  if (!free_bytes) {
    reject(candidate, RejectReason::free_memory, "its free memory is unknown (NVML could not tell)");
  } else if (*free_bytes < criteria.min_free_memory.bytes) {
    reject(candidate, RejectReason::free_memory,
           "only " + format_memory_size(*free_bytes) + " free, " + format_memory_size(criteria.min_free_memory.bytes) +
               " needed");
  }
}

GPUSEL_API void check_utilization(const PickCriteria& criteria, Candidate& candidate) {
  if (!criteria.max_utilization) return;
  const std::optional<int>& utilization = candidate.gpu.utilization_percent;
  if (candidate.mig_instance) {
    reject(candidate, RejectReason::utilization, "its utilization is unknown (NVML does not measure MIG instances)");
  } else if (!utilization) {
    reject(candidate, RejectReason::utilization, "its utilization is unknown (NVML could not tell)");
  } else if (*utilization > *criteria.max_utilization) {
    reject(candidate, RejectReason::utilization,
           std::to_string(*utilization) + "% utilized, at most " + std::to_string(*criteria.max_utilization) +
               "% allowed");
  }
}

GPUSEL_API void check_compute_mode(const std::optional<std::vector<GpuProcess>>& processes, unsigned int caller_pid,
                                   Candidate& candidate) {
  const std::optional<ComputeMode>& mode = candidate.gpu.compute_mode;
  if (!mode || *mode == ComputeMode::default_mode) return;
  const std::string said = std::string("its compute mode is ") + describe(*mode);
  if (*mode == ComputeMode::prohibited) {
    reject(candidate, RejectReason::compute_mode, said + ": CUDA creates no context on it");
  } else if (!processes) {
    reject(candidate, RejectReason::compute_mode,
           said + " and its compute processes are unknown (NVML could not list them)");
  } else {
    const auto other = std::find_if(processes->begin(), processes->end(), [caller_pid](const GpuProcess& process) {
      return caller_pid == 0 || process.pid != caller_pid;
    });
    if (other != processes->end())
      reject(candidate, RejectReason::compute_mode,
             said + " and a compute process runs on it (" + describe(*other) +
                 "): CUDA would refuse this process a context, shared or not");
  }
}

GPUSEL_API void DuplicateUuids::reject(Candidate& candidate) {
  if (candidate.uuid().empty()) return;
  const auto [first, inserted] = first_of_uuid_.try_emplace(candidate.uuid());
  if (inserted) {
    first->second = candidate.mig_instance ? "MIG instance " + escape_for_terminal(candidate.uuid()) + " (GI " +
                                                 std::to_string(candidate.mig_instance->gpu_instance_id) + ", CI " +
                                                 std::to_string(candidate.mig_instance->compute_instance_id) + ")"
                                           : "GPU " + std::to_string(candidate.physical_index);
    return;
  }
  candidate.rejections.push_back(
      {RejectReason::duplicate_uuid, "NVML reports the UUID of " + first->second + " for it too (" +
                                         escape_for_terminal(candidate.uuid()) +
                                         "), so gpusel counts the two as one GPU, " + first->second});
}

GPUSEL_API std::string Assessment::hidden_reason() const {
  return "hidden by " + escape_for_terminal(describe_value("CUDA_VISIBLE_DEVICES", map.visible.variable()));
}

GPUSEL_API std::string Assessment::excluded_reason(const std::string& name) {
  return "excluded (\"" + escape_for_terminal(name) + "\" names it)";
}

GPUSEL_API void check_gpu(const Assessment& assessment, Candidate& candidate) {
  const DeviceMap& map = assessment.map;
  const Gpu& gpu = candidate.gpu;
  const int physical = candidate.physical_index;
  // The runtime refuses to start under an invalid CUDA_DEVICE_ORDER, whatever the GPUs.
  const std::optional<std::string>& device_order = map.visible.device_order();
  if (device_order && *device_order != "FASTEST_FIRST" && *device_order != "PCI_BUS_ID")
    reject(candidate, RejectReason::invalid_device_order,
           describe_value("CUDA_DEVICE_ORDER", device_order) +
               " is neither FASTEST_FIRST nor PCI_BUS_ID, so the CUDA runtime fails with cudaErrorInvalidDevice");
  const std::string& name = assessment.excluded.gpus[map.order.positions[static_cast<std::size_t>(physical)]];
  if (!name.empty()) reject(candidate, RejectReason::excluded, Assessment::excluded_reason(name));
  if (!gpu.impossible_readings.empty())
    reject(candidate, RejectReason::impossible_readings,
           "its readings cannot be true (" + gpu.impossible_readings + "), so its use is unknown");
  if (assessment.hiding && !map.visible.logical(physical) && gpu.mig_instances.empty())
    reject(candidate, RejectReason::hidden, assessment.hidden_reason());
  if (gpu.mig_enabled && gpu.mig_instances.empty())
    reject(candidate, RejectReason::mig_mode,
           "MIG mode is enabled and NVML lists no MIG instance on it: CUDA shows its MIG instances, never the "
           "whole GPU");
}

GPUSEL_API Candidate assess_mig_instance(const Assessment& assessment, const Candidate& whole,
                                         const MigInstance& instance) {
  Candidate part{whole.gpu, whole.physical_index, whole.rejections, instance, {}};
  if (assessment.hiding && !mig_instance_visible(assessment.map, whole.physical_index, instance))
    reject(part, RejectReason::hidden, assessment.hidden_reason());
  for (const auto& [uuid, name] : assessment.excluded.mig_instances)
    if (uuid == instance.uuid) {
      reject(part, RejectReason::excluded, Assessment::excluded_reason(name));
      break;
    }
  check_free_memory(assessment.criteria, part);
  check_utilization(assessment.criteria, part);
  check_processes(instance.processes, assessment.criteria, assessment.caller, part);
  check_compute_mode(instance.processes, assessment.caller.pid, part);
  return part;
}

}  // namespace gpusel::detail
