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
// workers share the task's GPUs by their ranks. A variable that only repeats
// Slurm's rank (LOCAL_RANK=$SLURM_LOCALID set by hand: the same number, and no
// size, which every launcher that starts processes sets) keeps the rule. Judged by a real Slurm:
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

// Note [Naming the engine]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// explain, list and pick say which engine started this process, and whether it gave
// it its GPUs: Ray (a task or actor, or a Ray Train worker), torchrun, an MPI
// launcher, Slurm. Each is named from variables it sets in the processes it starts,
// the innermost first (Note [Which launcher variable wins]): torchrun sets
// TORCHELASTIC_RUN_ID beside LOCAL_RANK; Ray sets RAY_JOB_ID and RAY_RAYLET_PID in its
// workers and their children, and Ray Train sets LOCAL_RANK in its workers but no
// TORCHELASTIC_*; an MPI launcher sets its local rank; Slurm SLURM_JOB_ID (checked
// under torchrun 2.15, Ray 2.60 and Open MPI: tests/engines, tests/mpirun). Ray sets
// the same variables in a task as in an actor, so the role says "a task or actor";
// the title Ray gives its worker process (/proc/<pid>/cmdline of the raylet's child
// this process is or runs under: "ray::preprocess", "ray::Trainer.fit") tells them
// apart, and is shown as it is. The script that called ray.init gets neither
// variable, and is named nothing. Anyone
// can copy a variable, so a name decides nothing: the rank's GPU and the GPUs a
// process may choose among are decided as without it. The name says only who set
// CUDA_VISIBLE_DEVICES or the rank, so that a surprise can be traced to its source.

// Which engine started this process, named from its variables (Note [Naming the engine]).
struct Engine {
  // "Ray", "Ray Train", "torchrun", "Open MPI", "MVAPICH", "MPICH (Hydra)", "Slurm"; empty: none.
  std::string name;
  // What it started this process as: "a task or actor", "a worker", "a rank", "a task".
  std::string role;
  // The variables that name it, as set: "RAY_JOB_ID=01000000, RAY_RAYLET_PID=4242".
  std::string said;
  // Whether the engine gives its processes GPUs by CUDA_VISIBLE_DEVICES (Ray, Slurm), or
  // leaves each rank to take the visible GPU of its number (torchrun, MPI).
  bool gives_gpus = false;
  // Ray: the title of the Ray worker this process is or runs under, as /proc shows it
  // ("ray::Trainer.fit": a method of actor Trainer; "ray::preprocess": task preprocess),
  // which tells a task from an actor; empty elsewhere, where it cannot be read, and from
  // find_engine, which reads nothing but variables (engine() and allotment() read it).
  std::string worker;

  [[nodiscard]] bool known() const noexcept { return !name.empty(); }
  // A line: "Ray started this process as a task or actor (RAY_JOB_ID=01000000, ...) and
  // gives it its GPUs by CUDA_VISIBLE_DEVICES; named from its variables, which decide
  // nothing.\n"; "" when no engine is known. Escaped for a terminal.
  [[nodiscard]] GPUSEL_API std::string describe() const;
};

// The engine as the variables read through `read` say (Note [Naming the engine]). Pure,
// and throws nothing but std::bad_alloc: a malformed rank is local_rank()'s error.
[[nodiscard]] GPUSEL_API Engine find_engine(const ReadVariable& read);

// The engine from this process's environment; see find_engine.
[[nodiscard]] GPUSEL_API Engine engine();

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
// pick` refuse rather than guess (gpusel runs no Slurm command to find out), and
// say what they saw. So do they in a job that has GPUs (SLURM_GPUS and the like)
// where this process is in none of its steps (salloc's own shell, which on a real
// cluster usually runs on the submit host): Slurm names the job's GPUs only to its
// steps, so they ask for srun. A batch script is the batch step: Slurm names the
// job's GPUs there (SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES). A step given no GPU
// chooses as outside Slurm. SLURM_STEP_GPUS and
// SLURM_JOB_GPUS are Slurm's names (under ConstrainDevices not the driver's):
// shown as they are, never mapped to devices. Inside `gpusel run` (srun's step
// included) the job's GPUs are those run leased (GPUSEL_JOB_LEASE), each counted
// only once its descriptor is seen to hold its lock (Note [The job's lease] in
// gpusel/machine/detail/leases/job_lease.hpp): picking chooses among them, and
// leasing one is the job's lease.

// Why a process in a Slurm job may choose no GPU (Allotment::refusal_kind).
enum class AllotmentRefusal {
  none,          // it may choose among the visible GPUs
  unnamed_gpus,  // the step has GPUs on this node, but Slurm named none of this task's
  no_step,       // the job has GPUs, but this process is in no step, where Slurm would name them
};

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
  AllotmentRefusal refusal_kind = AllotmentRefusal::none;
  // The engine that started this process (Note [Naming the engine]); it decides nothing.
  Engine engine;
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
