// Each process's local rank under torchrun, mpirun and srun, and the device
// that rank gets: the pure part of gpusel/launcher.hpp, with no CUDA header,
// for programs (like the gpusel command) that link no CUDA runtime.
//
// A launcher starts several processes per node and tells each its rank on
// the node through an environment variable; each process then takes the
// visible device with that number. gpusel::local_rank() reads the variable
// (see Note [Which launcher variable wins]) and gpusel::local_rank_device()
// turns it into a Device. The decision itself is a pure function,
// device_for_local_rank(), so it can be checked without launching anything.
// Layer: machine (docs/layers.md).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel {

// Note [Which launcher variable wins]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Launchers nest, and the outer one's variables stay in the environment of
// the processes the inner one starts:
//   - `srun torchrun --nproc-per-node 4 train` : srun starts one torchrun per
//     node (SLURM_LOCALID=0 in all of them), torchrun starts 4 workers with
//     LOCAL_RANK=0..3, and every worker inherits SLURM_LOCALID=0;
//   - `mpirun` inside an `sbatch` script: the batch step has SLURM_LOCALID=0,
//     and every MPI process inherits it beside its own OMPI_COMM_WORLD_LOCAL_RANK.
// The launcher that started *this* process is the innermost one, and it is
// the one that knows this process's rank. So the most specific variable wins:
//   1. LOCAL_RANK                  torchrun (and torch.distributed.launch)
//   2. OMPI_COMM_WORLD_LOCAL_RANK  Open MPI
//   3. MV2_COMM_WORLD_LOCAL_RANK   MVAPICH
//   4. MPI_LOCALRANKID             MPICH and Intel MPI (Hydra)
//   5. SLURM_LOCALID               Slurm's srun
// (MVAPICH under Hydra sets both 3 and 4, to the same value.) The variables
// that lost are kept in LocalRank::overridden, so a surprise can be explained.
// A malformed value in the winning variable is an Error, not a reason to try
// the next one: guessing a rank puts two processes on one GPU.
// When no variable is set the process was started alone: local rank 0 of 1.

// Note [Slurm tasks with GPUs of their own]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `srun --gpus-per-task=N` (and `--gpu-bind=...`, or a `--tres-per-task` with
// gres/gpu) gives every task its own CUDA_VISIBLE_DEVICES with its GPUs only,
// and SLURM_LOCALID 0..N-1: task 1 sees one GPU, as cuda:0, and "cuda:1 for
// local rank 1" names nothing. Slurm says so in the task's environment:
// SLURM_GPUS_PER_TASK, SLURM_GPU_BIND (except "none", which binds nothing), or
// SLURM_TRES_PER_TASK naming gres/gpu. When SLURM_LOCALID is the rank that
// wins and one of those is set, every task's device is its first visible GPU,
// cuda:0 (LocalRank::task_gpus says which variable said so). A launcher inside
// such a task (`srun --gpus-per-task=4 torchrun ...`) sets its own rank, which
// wins, and its workers share the task's GPUs by their ranks as usual.

// One launcher's pair of variables: this process's rank on the node, and how
// many processes of the job run on the node (nullptr where the launcher sets none).
struct LauncherVariables {
  const char* launcher;
  const char* rank_variable;
  const char* size_variable;
};

// In precedence order; see Note [Which launcher variable wins].
inline constexpr std::array<LauncherVariables, 5> launcher_variables{{
    {"torchrun", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MVAPICH", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH (Hydra)", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_LOCALID", nullptr},
}};

// This process's place among the processes of its job on this node.
struct LocalRank {
  int rank = 0;
  // How many processes of the job run on this node, when the launcher says.
  std::optional<int> size;
  // "torchrun", "Open MPI", ...; empty when no launcher variable was set.
  std::string launcher;
  // "LOCAL_RANK=2" (and ", LOCAL_WORLD_SIZE=4"): what was read, for messages.
  std::string source;
  // Other launchers' rank variables that were set but lost, e.g. "SLURM_LOCALID=0".
  std::vector<std::string> overridden;
  // What says that the launcher gave each task GPUs of its own, so that this
  // process's device is its first visible GPU whatever its rank
  // ("SLURM_GPUS_PER_TASK=1": Note [Slurm tasks with GPUs of their own]); empty otherwise.
  std::string task_gpus;

  // "local rank 2 of 4 (torchrun: LOCAL_RANK=2, LOCAL_WORLD_SIZE=4)", or
  // "local rank 0 (no launcher variable is set)".
  GPUSEL_API std::string describe() const;
};

// Reads a variable: its value, or nullopt when it is unset.
using ReadVariable = std::function<std::optional<std::string>(const char* name)>;

// The local rank as the variables read through `read` say; nullopt when none
// of launcher_variables is set. Throws Error for a malformed value, or a rank
// not below the node's process count. Pure: reads nothing but `read`.
GPUSEL_API std::optional<LocalRank> find_local_rank(const ReadVariable& read);

// The local rank from this process's environment; see find_local_rank.
GPUSEL_API std::optional<LocalRank> local_rank();

// How ranks are spread over the visible devices.
enum class Placement {
  // The default. Rank r gets device r, as PyTorch's
  // torch.cuda.set_device(int(os.environ["LOCAL_RANK"])) does; a rank with no
  // device of its number is an Error, since sharing a GPU between ranks should
  // be asked for, not fall out of a modulo. With no GPU visible at all every
  // rank gets the CPU (the CPU fallback).
  rank_or_cpu,
  // Rank r gets device r % count: with more ranks than GPUs, ranks share them
  // (ask for it explicitly). With no GPU at all every rank gets the CPU.
  round_robin,
  // Every rank needs a GPU of its own: fewer visible GPUs than ranks on the
  // node is an Error (in every rank when the launcher tells the node's
  // process count, so that the whole job stops, not half of it), and so is
  // having no GPU at all.
  one_gpu_per_rank,
};

// The device for `rank` (nullopt: a process started alone, rank 0 of 1) when
// `visible_devices` devices are visible. `why_this_many`, when given, says so
// in errors ("2 CUDA devices are visible (cuda:0..cuda:1); CUDA_VISIBLE_DEVICES=1,3").
// Pure: makes no CUDA call.
GPUSEL_API Device device_for_local_rank(const std::optional<LocalRank>& rank, int visible_devices,
                                        Placement placement = Placement::rank_or_cpu,
                                        std::string_view why_this_many = {});

}  // namespace gpusel

// --- definitions (Note [Compile-once mode]) ---------------------------------
#if GPUSEL_DEFINITIONS

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"

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

// The variable that says Slurm gave each task GPUs of its own, as "NAME=value";
// empty when none does (Note [Slurm tasks with GPUs of their own]).
inline std::string slurm_task_gpus(const ReadVariable& read) {
  if (const std::optional<std::string> per_task = read("SLURM_GPUS_PER_TASK"); per_task && !per_task->empty())
    return "SLURM_GPUS_PER_TASK=" + *per_task;
  if (const std::optional<std::string> bind = read("SLURM_GPU_BIND")) {
    std::string_view kind = *bind;
    if (kind.substr(0, 8) == "verbose,") kind.remove_prefix(8);
    if (!kind.empty() && kind != "none") return "SLURM_GPU_BIND=" + *bind;
  }
  if (const std::optional<std::string> tres = read("SLURM_TRES_PER_TASK");
      tres && tres->find("gres/gpu") != std::string::npos)
    return "SLURM_TRES_PER_TASK=" + *tres;
  return {};
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

#endif  // GPUSEL_DEFINITIONS
