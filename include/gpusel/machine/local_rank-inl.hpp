// The definitions of gpusel/machine/local_rank.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/local_rank.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/detail/leases/job_lease.hpp"
#include "gpusel/machine/detail/system/launcher_variables.hpp"
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

GPUSEL_API std::optional<LocalRank> find_local_rank(const ReadVariable& read) {
  std::optional<LocalRank> found;
  for (const LauncherVariables& variables : launcher_variables) {
    const std::optional<std::string> rank_text = read(variables.rank_variable);
    if (!rank_text) continue;
    if (found) {
      const std::string variable = std::string(variables.rank_variable) + "=" + *rank_text;
      // A launcher variable set to Slurm's own rank, by a hand that starts no process of its own
      // (no size), keeps Slurm's per-task rule (Note [Slurm tasks with GPUs of their own]).
      const detail::DecimalRead slurm = detail::read_decimal(*rank_text, detail::DecimalGrammar::whole_text);
      if (std::string_view(variables.rank_variable) == "SLURM_LOCALID" && !found->size && slurm.ok && !slurm.overflow &&
          slurm.value == static_cast<std::uint64_t>(found->rank)) {
        found->task_gpus = detail::slurm_task_gpus(read);
        if (!found->task_gpus.empty()) {
          found->task_gpus = found->source + " repeats " + variable + ", and " + found->task_gpus;
          continue;
        }
      }
      found->overridden.push_back(variable);
      continue;
    }
    LocalRank rank;
    const bool torch_variable = std::string_view(variables.rank_variable) == "LOCAL_RANK";
    rank.launcher = torch_variable ? detail::local_rank_launcher(read) : variables.launcher;
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

GPUSEL_API std::string Engine::describe() const {
  if (!known()) return {};
  std::string text = name + " started this process as " + role + " (" + escape_for_terminal(said) +
                     (worker.empty() ? "" : "; its Ray worker is " + escape_for_terminal(worker)) + ")";
  text += gives_gpus ? " and gives it its GPUs by CUDA_VISIBLE_DEVICES"
                     : "; " + name + " gives no GPU: each rank takes the visible GPU of its number";
  return text + "; named from its variables, which decide nothing.\n";
}

namespace detail {

// "NAME=value, SIZE=value" of a launcher's variables that are set.
inline std::string launcher_said(const ReadVariable& read, const LauncherVariables& variables) {
  std::string said;
  for (const char* name : {variables.rank_variable, variables.size_variable})
    if (name != nullptr)
      if (const std::optional<std::string> value = read(name))
        said += (said.empty() ? "" : ", ") + std::string(name) + "=" + *value;
  return said;
}

// The engine a launcher's rank variable names: torchrun or Ray Train for LOCAL_RANK.
inline Engine launcher_engine(const ReadVariable& read, const LauncherVariables& variables) {
  Engine found{variables.launcher, "a rank", launcher_said(read, variables), false, {}};
  const std::string_view rank_variable = variables.rank_variable;
  if (rank_variable == "SLURM_LOCALID") {
    found.role = "a task";
    found.gives_gpus = true;
  } else if (rank_variable == "LOCAL_RANK") {
    found.name = local_rank_launcher(read);
    if (const std::optional<std::string> run = read("TORCHELASTIC_RUN_ID"))
      found.said += ", TORCHELASTIC_RUN_ID=" + *run;
    if (found.name == "Ray Train") {
      found.role = "a worker";
      found.said += ", " + ray_said(read);
      found.gives_gpus = true;
    }
  }
  return found;
}

}  // namespace detail

GPUSEL_API Engine find_engine(const ReadVariable& read) {
  const std::string ray = detail::ray_said(read);
  for (const LauncherVariables& variables : launcher_variables) {
    if (!read(variables.rank_variable)) continue;
    // Slurm's task variables stay in what a Ray node started inside a step runs: Ray is inner.
    if (std::string_view(variables.rank_variable) == "SLURM_LOCALID" && !ray.empty()) break;
    return detail::launcher_engine(read, variables);
  }
  if (!ray.empty()) return Engine{"Ray", "a task or actor", ray, true, {}};
  if (const std::optional<std::string> job = read("SLURM_JOB_ID"))
    return Engine{"Slurm", "a job's process", "SLURM_JOB_ID=" + *job, true, {}};
  return {};
}

namespace detail {

// The title of the Ray worker this process is or descends from: the ancestor (or this process)
// whose parent is the raylet `raylet`, its /proc/<pid>/cmdline as Ray's setproctitle wrote it
// ("ray::Trainer.fit", blanks after it dropped); "" where none is or /proc cannot tell.
inline std::string ray_worker_title(long raylet) {
  long pid = static_cast<long>(getpid());
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const std::size_t end = text.rfind(')');  // the command may hold blanks and parentheses
    long parent = 0;
    if (end == std::string::npos || std::sscanf(text.c_str() + end + 1, " %*c %ld", &parent) != 1) return {};
    if (parent == raylet) {
      std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline");
      std::string title((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
      std::replace(title.begin(), title.end(), '\0', ' ');
      title.erase(title.find_last_not_of(' ') + 1);
      return title.rfind("ray::", 0) == 0 ? title : std::string();
    }
    pid = parent;
  }
  return {};
}

// `found` with its Ray worker's title, where Ray started this process (RAY_RAYLET_PID names the raylet).
inline Engine with_ray_worker(Engine found) {
  const std::optional<std::string> raylet = environment_variable("RAY_RAYLET_PID");
  const DecimalRead pid = raylet ? read_decimal(*raylet, DecimalGrammar::whole_text) : DecimalRead{};
  if (found.name.rfind("Ray", 0) == 0 && pid.ok && !pid.overflow && pid.value > 1 && pid.value < 1u << 30)
    found.worker = ray_worker_title(static_cast<long>(pid.value));
  return found;
}

}  // namespace detail

GPUSEL_API Engine engine() {
  return detail::with_ray_worker(find_engine([](const char* name) { return detail::environment_variable(name); }));
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
      text = escape_for_terminal(refusal);  // it quotes Slurm's variables
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
  // Slurm's own line is above; another engine's is said here (Note [Naming the engine]).
  if (engine.known() && engine.name != "Slurm") text += engine.describe();
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

namespace detail {

// Why a task that Slurm gave `count` GPUs on this node may choose none of the `visible_gpus`:
// Slurm named none of them (Note [The GPUs this process may choose among]). srun's options are
// not in the task's environment, so what was seen is said, not a guessed option.
inline std::string unnamed_gpus_refusal(int count, int visible_gpus) {
  return "Slurm gave this step " + std::to_string(count) + (count == 1 ? " GPU" : " GPUs") +
         " on this node (SLURM_GPUS_ON_NODE=" + std::to_string(count) +
         ") without saying which: CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS are unset in this task, and " +
         std::to_string(visible_gpus) +
         " GPUs are visible, any of which may be another job's; ask Slurm for the GPUs in a form that names "
         "each task's (docs/launchers.md lists the forms tried)";
}

// What says that the job `job` has GPUs though this process is in none of its steps, in
// Slurm's names ("SLURM_GPUS=2"); "" when nothing does (Note [The GPUs this process may
// choose among]).
inline std::string job_gpus_without_step(const ReadVariable& read) {
  if (read("SLURM_STEP_ID") || read("CUDA_VISIBLE_DEVICES") || read("SLURM_JOB_GPUS")) return {};
  std::string said;
  for (const char* name :
       {"SLURM_GPUS", "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_NODE", "SLURM_TRES_PER_TASK"}) {
    const std::optional<std::string> value = read(name);
    if (!value || value->empty() || *value == "0") continue;
    if (std::string_view(name).rfind("SLURM_TRES", 0) == 0 && value->find("gpu") == std::string::npos) continue;
    said += (said.empty() ? "" : ", ") + std::string(name) + "=" + *value;
  }
  return said;
}

}  // namespace detail

GPUSEL_API Allotment find_allotment(const ReadVariable& read, int visible_gpus) {
  Allotment allotment;
  allotment.nvidia_visible_devices = read("NVIDIA_VISIBLE_DEVICES");
  allotment.job_lease = read(detail::kJobLeaseVariable);
  allotment.engine = find_engine(read);
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
  if (const std::string job_gpus = detail::job_gpus_without_step(read); !job_gpus.empty() && visible_gpus > 0) {
    allotment.refusal_kind = AllotmentRefusal::no_step;
    allotment.refusal = "Slurm gave job " + *job + " GPUs (" + job_gpus +
                        "), but this process is in no step of it (SLURM_STEP_ID and CUDA_VISIBLE_DEVICES are unset, "
                        "as in salloc's own shell), so Slurm names none of them here, and any of the " +
                        std::to_string(visible_gpus) +
                        " visible GPUs may be another job's; run it under srun, which names the step's GPUs";
  } else if (allotment.gpus_on_node && !read("CUDA_VISIBLE_DEVICES") && visible_gpus > *allotment.gpus_on_node) {
    allotment.refusal_kind = AllotmentRefusal::unnamed_gpus;
    allotment.refusal = detail::unnamed_gpus_refusal(*allotment.gpus_on_node, visible_gpus);
  }
  return allotment;
}

GPUSEL_API Allotment allotment(int visible_gpus) {
  Allotment found = find_allotment([](const char* name) { return detail::environment_variable(name); }, visible_gpus);
  found.engine = detail::with_ray_worker(std::move(found.engine));
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
