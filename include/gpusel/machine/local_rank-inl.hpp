// The definitions of gpusel/machine/local_rank.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/local_rank.hpp"

#include <algorithm>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/detail/leases/job_lease.hpp"
#include "gpusel/text.hpp"

namespace gpusel {

GPUSEL_API std::string LocalRank::describe() const {
  std::string text = "local rank " + std::to_string(rank);
  if (size) text += " of " + std::to_string(*size);
  text += launcher.empty() ? " (no launcher variable is set" : " (" + launcher + ": " + source;
  if (!task_gpus.empty()) text += "; each task has GPUs of its own: " + task_gpus;
  for (const std::string& other : overridden) text += "; " + other + " ignored";
  return text + ")";
}

namespace detail {

// A rank or a count as launchers write it: decimal digits only, fitting an int.
inline int parse_launcher_number(const char* variable, const std::string& value) {
  const auto reject = [&](const char* why) {
    return Error(std::string("gpusel::local_rank(): ") + variable + "=\"" + value + "\" " + why +
                 "; expected a non-negative decimal integer as launchers set it (e.g. " + variable + "=0)");
  };
  if (value.empty()) throw reject("is set but empty");
  const DecimalRead number = read_decimal(value, DecimalGrammar::whole_text);
  if (!number.ok) throw reject("is not a non-negative decimal integer");
  if (number.overflow || number.value > static_cast<std::uint64_t>(Device::kMaxIndex)) throw reject("is out of range");
  return static_cast<int>(number.value);
}

// How many entries a CUDA_VISIBLE_DEVICES that Slurm wrote lists: indices or
// UUIDs, comma-separated; none in an empty one.
inline int listed_gpus(std::string_view list) {
  if (list.empty()) return 0;
  return static_cast<int>(std::count(list.begin(), list.end(), ',')) + 1;
}

// The step's GPUs on this node as SLURM_GPUS_ON_NODE says; nullopt when it is unset or malformed.
inline std::optional<int> slurm_gpus_on_node(const ReadVariable& read) {
  const std::optional<std::string> text = read("SLURM_GPUS_ON_NODE");
  if (!text) return std::nullopt;
  const DecimalRead number = read_decimal(*text, DecimalGrammar::whole_text);
  if (!number.ok || number.overflow || number.value > static_cast<std::uint64_t>(Device::kMaxIndex))
    return std::nullopt;
  return static_cast<int>(number.value);
}

// What says Slurm gave this task GPUs of its own; empty when nothing does
// (Note [Slurm tasks with GPUs of their own]).
inline std::string slurm_task_gpus(const ReadVariable& read) {
  const std::optional<int> on_node = slurm_gpus_on_node(read);
  const std::optional<std::string> visible = read("CUDA_VISIBLE_DEVICES");
  if (!on_node || !visible) return {};
  const int listed = listed_gpus(*visible);
  if (listed >= *on_node) return {};
  return "CUDA_VISIBLE_DEVICES=" + *visible + " lists " + std::to_string(listed) + (listed == 1 ? " GPU" : " GPUs") +
         " of the step's SLURM_GPUS_ON_NODE=" + std::to_string(*on_node);
}

}  // namespace detail

GPUSEL_API std::optional<LocalRank> find_local_rank(const ReadVariable& read) {
  std::optional<LocalRank> found;
  for (const LauncherVariables& variables : launcher_variables) {
    const std::optional<std::string> rank_text = read(variables.rank_variable);
    if (!rank_text) continue;
    if (found) {
      found->overridden.push_back(std::string(variables.rank_variable) + "=" + *rank_text);
      continue;
    }
    LocalRank rank;
    rank.launcher = variables.launcher;
    rank.rank = detail::parse_launcher_number(variables.rank_variable, *rank_text);
    rank.source = std::string(variables.rank_variable) + "=" + *rank_text;
    if (variables.size_variable != nullptr) {
      if (const std::optional<std::string> size_text = read(variables.size_variable)) {
        rank.size = detail::parse_launcher_number(variables.size_variable, *size_text);
        rank.source += std::string(", ") + variables.size_variable + "=" + *size_text;
        if (rank.rank >= *rank.size) {
          throw Error("gpusel::local_rank(): " + rank.source + ": the rank must be below the number of processes");
        }
      }
    }
    if (std::string_view(variables.rank_variable) == "SLURM_LOCALID") rank.task_gpus = detail::slurm_task_gpus(read);
    found = std::move(rank);
  }
  return found;
}

GPUSEL_API std::optional<LocalRank> local_rank() {
  return find_local_rank([](const char* name) { return detail::environment_variable(name); });
}

GPUSEL_API void Allotment::require(std::string_view who) const {
  if (!known()) throw Error(std::string(who) + ": " + refusal);
}

namespace detail {

// What the container runtime mounted, after "NVIDIA_VISIBLE_DEVICES=...": every GPU, none, or those named.
inline std::string container_gpus(const std::string& value) {
  if (value == "all") return "every GPU of the host";
  if (value.empty() || value == "none" || value == "void") return "no GPU";
  return "the host's GPUs it names (by the host's indices or UUIDs)";
}

}  // namespace detail

GPUSEL_API std::string Allotment::describe() const {
  std::string text;  // Slurm's line, then the container's
  if (!scheduler.empty()) {
    const std::string step_name = " (" + escape_for_terminal(step) + ")";
    if (!refusal.empty())
      text = refusal;
    else if (!gpus_on_node)
      text = "Slurm gave this step" + step_name + " no GPU" +
             (said.empty() ? std::string() : " (" + escape_for_terminal(said) + ")") + "; choosing as outside Slurm";
    else
      text = "Slurm gave this step" + step_name + " " + std::to_string(*gpus_on_node) +
             (*gpus_on_node == 1 ? " GPU" : " GPUs") + " on this node: " + escape_for_terminal(said) +
             ", in Slurm's names (node-wide; under ConstrainDevices not the driver's, so gpusel maps no GPU by them)";
    text += ".\n";
  }
  if (nvidia_visible_devices) {
    text += escape_for_terminal("NVIDIA_VISIBLE_DEVICES=" + *nvidia_visible_devices) +
            ": in a container the NVIDIA container runtime mounted " + detail::container_gpus(*nvidia_visible_devices) +
            ", and NVML and CUDA_VISIBLE_DEVICES number the GPUs mounted from 0.\n";
  }
  return text + describe_job();
}

GPUSEL_API std::string Allotment::describe_job() const {
  if (!job_lease) return {};
  const std::string variable = escape_for_terminal(std::string(detail::kJobLeaseVariable) + "=" + *job_lease);
  std::string text;
  if (!job_gpus.empty())
    text = "gpusel run leased this job " + std::to_string(job_gpus.size()) + (job_gpus.size() == 1 ? " GPU" : " GPUs") +
           " (" + variable + "); choosing among them.\n";
  for (std::size_t start = 0, end = 0; start < job_lease_problems.size(); start = end + 1) {
    end = std::min(job_lease_problems.find('\n', start), job_lease_problems.size());
    text += variable + " does not count for " + escape_for_terminal(job_lease_problems.substr(start, end - start)) +
            (job_gpus.empty() ? "; choosing as outside a job.\n" : ".\n");
  }
  return text;
}

GPUSEL_API Allotment find_allotment(const ReadVariable& read, int visible_gpus) {
  Allotment allotment;
  allotment.nvidia_visible_devices = read("NVIDIA_VISIBLE_DEVICES");
  allotment.job_lease = read(detail::kJobLeaseVariable);
  const std::optional<std::string> job = read("SLURM_JOB_ID");
  if (!job) return allotment;
  allotment.scheduler = "Slurm";
  const std::optional<std::string> step = read("SLURM_STEP_ID");
  allotment.step = step ? *job + "." + *step : "job " + *job;
  allotment.gpus_on_node = detail::slurm_gpus_on_node(read);
  if (allotment.gpus_on_node == 0) allotment.gpus_on_node.reset();
  for (const char* name : {"SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    if (const std::optional<std::string> value = read(name))
      allotment.said += (allotment.said.empty() ? "" : ", ") + std::string(name) + "=" + *value;
  }
  if (allotment.gpus_on_node && !read("CUDA_VISIBLE_DEVICES") && visible_gpus > *allotment.gpus_on_node) {
    const int count = *allotment.gpus_on_node;
    allotment.refusal = "Slurm gave this step " + std::to_string(count) + (count == 1 ? " GPU" : " GPUs") +
                        " on this node (SLURM_GPUS_ON_NODE=" + std::to_string(count) +
                        ") without saying which: CUDA_VISIBLE_DEVICES is unset, as srun --gpu-bind=none leaves it "
                        "in a step of several tasks, and " +
                        std::to_string(visible_gpus) +
                        " GPUs are visible, any of which may be another job's; run the step without "
                        "--gpu-bind=none, so that Slurm names each task's GPUs";
  }
  return allotment;
}

GPUSEL_API Allotment allotment(int visible_gpus) {
  Allotment found = find_allotment([](const char* name) { return detail::environment_variable(name); }, visible_gpus);
  if (!found.job_lease) return found;
  const detail::JobLease job = detail::job_lease();  // Note [The job's lease]
  found.job_gpus = job.held_uuids();
  if (!job.malformed.empty()) found.job_lease_problems = job.malformed;
  for (const detail::JobGpu& gpu : job.gpus)
    if (!gpu.problem.empty())
      found.job_lease_problems += (found.job_lease_problems.empty() ? "" : "\n") + gpu.uuid + ": " + gpu.problem;
  return found;
}

namespace detail {
inline const char* placement_name(Placement placement) noexcept {
  switch (placement) {
    case Placement::rank_or_cpu:
      return "rank_or_cpu";
    case Placement::round_robin:
      return "round_robin";
    case Placement::one_gpu_per_rank:
      return "one_gpu_per_rank";
  }
  return "?";
}
}  // namespace detail

GPUSEL_API Device device_for_local_rank(const std::optional<LocalRank>& rank, int visible_devices, Placement placement,
                                        std::string_view why_this_many) {
  const LocalRank alone{};
  const LocalRank& process = rank ? *rank : alone;
  if (visible_devices < 0) {
    throw Error("gpusel::device_for_local_rank: the visible device count cannot be negative, got " +
                std::to_string(visible_devices));
  }
  const auto too_few = [&](const std::string& need, std::string_view advice) {
    const std::string visible = !why_this_many.empty() ? std::string(why_this_many)
                                                       : std::to_string(visible_devices) + " CUDA device" +
                                                             (visible_devices == 1 ? " is visible" : "s are visible");
    return Error(std::string("gpusel::local_rank_device(") + detail::placement_name(placement) + "): " + need +
                 ", but " + visible + "; this process is " + process.describe() + std::string(advice));
  };
  // The number of the rank's device among the visible ones: its first when the
  // task sees only its own GPUs (Note [Slurm tasks with GPUs of their own]).
  const int number = process.task_gpus.empty() ? process.rank : 0;
  if (placement == Placement::one_gpu_per_rank) {
    if (process.size && *process.size > visible_devices) {
      throw too_few(std::to_string(*process.size) + " processes on this node each need a GPU of their own", "");
    }
    if (number >= visible_devices) {
      throw too_few("local rank " + std::to_string(process.rank) + " needs a GPU of its own", "");
    }
  }
  if (visible_devices == 0) return cpu();
  if (placement == Placement::rank_or_cpu && number >= visible_devices) {
    throw too_few("local rank " + std::to_string(process.rank) + " has no GPU of its number",
                  "; to share GPUs between ranks, ask for it: local_rank_device(gpusel::Placement::round_robin)");
  }
  return cuda(number % visible_devices);
}

}  // namespace gpusel
