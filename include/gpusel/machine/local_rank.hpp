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
// gpusel::allotment() says which GPUs the process may choose among at all:
// inside a Slurm step, the step's (Note [The GPUs this process may choose among]).
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
// Launchers nest, and an outer one's variables stay in the environment of the
// processes the inner one starts: under `srun torchrun ...` every worker has
// its LOCAL_RANK and also its torchrun's SLURM_LOCALID=0, and under `mpirun` in
// an sbatch script every rank inherits the batch step's SLURM_LOCALID=0. Only
// the launcher that started *this* process, the innermost one, knows its rank,
// so the most specific variable wins: launcher_variables lists them innermost
// first, from torchrun's LOCAL_RANK to Slurm's SLURM_LOCALID. Those that lost
// are kept in LocalRank::overridden, so a surprise can be explained. A
// malformed value in the winning variable is an Error, not a reason to try the
// next one: guessing a rank puts two processes on one GPU. When no variable is
// set the process was started alone: local rank 0 of 1.

// Note [Slurm tasks with GPUs of their own]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Slurm gives a step's tasks on a node either one shared list of GPUs or each
// task GPUs of its own (--gpus-per-task, --ntasks-per-gpu, --gpu-bind=single,
// map_gpu, mask_gpu, per_task), and says which in two variables it sets in
// every task: CUDA_VISIBLE_DEVICES, the task's GPUs, and SLURM_GPUS_ON_NODE,
// the step's GPUs on the node. A task whose CUDA_VISIBLE_DEVICES lists fewer
// GPUs than SLURM_GPUS_ON_NODE was given GPUs of its own and takes its first
// visible GPU, cuda:0; otherwise local rank r takes cuda:r. The options
// themselves are not trusted: srun does not put them in its tasks' environment
// (SLURM_GPUS_PER_TASK, SLURM_GPU_BIND and SLURM_TRES_PER_TASK appear only where
// sbatch exported its own options, whatever the step asked for).
// SLURM_STEP_GPUS and SLURM_JOB_GPUS are Slurm's names, node-wide, and under
// ConstrainDevices not the driver's: they are never mapped to devices. The
// rule applies where SLURM_LOCALID is the rank that wins: a launcher inside a
// task (`srun --gpus-per-task=4 torchrun ...`) sets its own rank, and its
// workers share the task's GPUs by their ranks. Judged by a real Slurm:
// tests/slurm/check_slurm.sh, and the environments it recorded in docs/launchers.md.

// One launcher's pair of variables: this process's rank on the node, and how
// many processes of the job run on the node (nullptr where the launcher sets none).
struct LauncherVariables {
  const char* launcher;
  const char* rank_variable;
  const char* size_variable;
};

// In precedence order, innermost launcher first; see Note [Which launcher variable wins].
inline constexpr std::array<LauncherVariables, 5> launcher_variables{{
    {"torchrun", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},  // and torch.distributed.launch
    {"Open MPI", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    // MVAPICH under Hydra sets MPI_LOCALRANKID too, to the same value.
    {"MVAPICH", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH (Hydra)", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},  // MPICH and Intel MPI
    {"Slurm", "SLURM_LOCALID", nullptr},                      // srun
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
  // What says that Slurm gave this task GPUs of its own, so that its device is
  // its first visible GPU whatever its rank ("CUDA_VISIBLE_DEVICES=1 lists 1 GPU
  // of the step's SLURM_GPUS_ON_NODE=4": Note [Slurm tasks with GPUs of their own]);
  // empty otherwise.
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

// Note [The GPUs this process may choose among]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A process chooses only among its allotment: the GPUs a scheduler gave it or,
// where none did, every GPU CUDA_VISIBLE_DEVICES shows. Inside a Slurm step
// given GPUs on this node (SLURM_GPUS_ON_NODE above 0) Slurm names them in
// CUDA_VISIBLE_DEVICES, so the visible GPUs are the step's. Where it is unset
// and more GPUs are visible than SLURM_GPUS_ON_NODE (`srun --gpu-bind=none`
// with several tasks), Slurm allocated GPUs without saying which: any visible
// one may be another job's, so local_rank_device(), `gpusel run` and `gpusel
// pick` refuse rather than guess (gpusel runs no Slurm command to find out). A
// step given no GPU chooses as outside Slurm. SLURM_STEP_GPUS and
// SLURM_JOB_GPUS are Slurm's names (under ConstrainDevices not the driver's):
// shown as they are, never mapped to devices. Inside `gpusel run` (srun's step
// included) the job's GPUs are those run leased (GPUSEL_JOB_LEASE), each counted
// only once its descriptor is seen to hold its lock (Note [The job's lease] in
// gpusel/machine/detail/leases/job_lease.hpp): picking chooses among them, and
// leasing one is the job's lease.

// The GPUs this process may choose among (Note [The GPUs this process may choose among]).
struct Allotment {
  // "Slurm" inside a Slurm job (SLURM_JOB_ID is set); empty outside any scheduler.
  std::string scheduler;
  // Slurm's name of this step, "12.0" (SLURM_JOB_ID.SLURM_STEP_ID), or "job 12" where no
  // step is set (a batch script, salloc's shell); empty outside Slurm.
  std::string step;
  // The step's GPUs on this node (SLURM_GPUS_ON_NODE); nullopt when Slurm gave it none.
  std::optional<int> gpus_on_node;
  // What Slurm said, in its own names: "SLURM_GPUS_ON_NODE=2, SLURM_STEP_GPUS=2,3".
  std::string said;
  // Why this process may choose no GPU at all; empty when it may choose among the visible ones.
  std::string refusal;
  // NVIDIA_VISIBLE_DEVICES, which the NVIDIA container runtime reads when it starts a
  // container to mount the host's GPUs it names; nullopt where it is unset.
  std::optional<std::string> nvidia_visible_devices;
  // GPUSEL_JOB_LEASE, as `gpusel run` set it for the job this process belongs to; nullopt
  // outside gpusel run.
  std::optional<std::string> job_lease;
  // The GPUs the job holds, by UUID, each checked against the lock its descriptor holds
  // (allotment() checks; find_allotment, which reads nothing but its variables, leaves it empty).
  std::vector<std::string> job_gpus;
  // Why the GPUs of job_lease that are not among job_gpus are not, a line each ("GPU-...:
  // descriptor 10 holds no lock on ..."), or why job_lease cannot be read; "" otherwise.
  std::string job_lease_problems;

  [[nodiscard]] bool known() const noexcept { return refusal.empty(); }
  // What the scheduler and the container runtime gave, in their own names, a line
  // each: "Slurm gave this step (12.0) 2 GPUs on this node: SLURM_GPUS_ON_NODE=2,
  // SLURM_STEP_GPUS=2,3, in Slurm's names (...).\n", the refusal, or "Slurm gave
  // this step (12.0) no GPU; choosing as outside Slurm.\n"; empty outside both. What comes from the environment is
  // escaped for a terminal (Note [Hostile text]). Then describe_job().
  [[nodiscard]] GPUSEL_API std::string describe() const;
  // What `gpusel run` leased the job, a line: "gpusel run leased this job 2 GPUs
  // (GPUSEL_JOB_LEASE=GPU-...:10,GPU-...:11); choosing among them.\n", and a line for each GPU
  // it names that does not count, with why; "" outside gpusel run. Escaped for a terminal.
  [[nodiscard]] GPUSEL_API std::string describe_job() const;
  // Throws Error("<who>: <refusal>") when the allotment is not known.
  GPUSEL_API void require(std::string_view who) const;
};

// The allotment as the variables read through `read` say, when `visible_gpus`
// GPUs are visible. Pure: reads nothing but `read`.
GPUSEL_API Allotment find_allotment(const ReadVariable& read, int visible_gpus);

// The allotment from this process's environment; see find_allotment. Also checks each GPU
// of GPUSEL_JOB_LEASE against the lock its descriptor holds (job_gpus).
GPUSEL_API Allotment allotment(int visible_gpus);

// The device for `rank` (nullopt: a process started alone, rank 0 of 1) when
// `visible_devices` devices are visible. `why_this_many`, when given, says so
// in errors ("2 CUDA devices are visible (cuda:0..cuda:1); CUDA_VISIBLE_DEVICES=1,3").
// Pure: makes no CUDA call.
GPUSEL_API Device device_for_local_rank(const std::optional<LocalRank>& rank, int visible_devices,
                                        Placement placement = Placement::rank_or_cpu,
                                        std::string_view why_this_many = {});

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/local_rank-inl.hpp"
#endif
