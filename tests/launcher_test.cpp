// Specification of the launchers' device choice (include/gpusel/launcher.hpp).
// The decision is pure and checked with made-up environments; local_rank_device()
// is checked against the process environment on the emulated and the real runtime.
// tests/mpirun/ checks it under a real `mpirun -np 4`.
#include "gpusel/launcher.hpp"
#include "gpusel/detail/core/environment.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpusel_test.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;

// A made-up environment for find_local_rank.
gpusel::ReadVariable environment(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](const char* name) -> std::optional<std::string> {
    const auto it = variables.find(name);
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
}

using gpusel_test::error_from;

// --- reading the launchers' variables ----------------------------------------

TEST(FindLocalRank, FindsNothingWhenNoLauncherVariableIsSet) {
  EXPECT_EQ(gpusel::find_local_rank(environment({})), std::nullopt);
  EXPECT_EQ(gpusel::find_local_rank(environment({{"RANK", "3"}, {"WORLD_SIZE", "8"}})), std::nullopt)
      << "the global rank is not the rank on the node";
}

TEST(FindLocalRank, ReadsEachLaunchersRankVariable) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"LOCAL_RANK", "torchrun"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
      {"MV2_COMM_WORLD_LOCAL_RANK", "MVAPICH"},
      {"MPI_LOCALRANKID", "MPICH (Hydra)"},
      {"SLURM_LOCALID", "Slurm"},
  };
  for (const auto& [variable, launcher] : expected) {
    const auto rank = gpusel::find_local_rank(environment({{variable, "3"}}));
    ASSERT_TRUE(rank.has_value()) << variable;
    EXPECT_EQ(rank->rank, 3) << variable;
    EXPECT_EQ(rank->launcher, launcher) << variable;
    EXPECT_EQ(rank->source, variable + "=3");
    EXPECT_EQ(rank->size, std::nullopt) << variable;
  }
}

TEST(FindLocalRank, ReadsTheNodesProcessCountWhereTheLauncherSetsIt) {
  const auto torchrun = gpusel::find_local_rank(environment({{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}}));
  ASSERT_TRUE(torchrun.has_value());
  EXPECT_EQ(torchrun->size, 4);
  EXPECT_EQ(torchrun->describe(), "local rank 1 of 4 (torchrun: LOCAL_RANK=1, LOCAL_WORLD_SIZE=4)");

  const auto open_mpi =
      gpusel::find_local_rank(environment({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  ASSERT_TRUE(open_mpi.has_value());
  EXPECT_EQ(open_mpi->size, 2);
  const auto mpich = gpusel::find_local_rank(environment({{"MPI_LOCALRANKID", "5"}, {"MPI_LOCALNRANKS", "6"}}));
  ASSERT_TRUE(mpich.has_value());
  EXPECT_EQ(mpich->size, 6);
}

TEST(FindLocalRank, TheInnermostLauncherWins) {
  // srun torchrun --nproc-per-node 4: every worker inherits SLURM_LOCALID=0.
  const auto under_srun = gpusel::find_local_rank(environment({{"LOCAL_RANK", "2"}, {"SLURM_LOCALID", "0"}}));
  ASSERT_TRUE(under_srun.has_value());
  EXPECT_EQ(under_srun->rank, 2);
  EXPECT_EQ(under_srun->launcher, "torchrun");
  EXPECT_EQ(under_srun->overridden, std::vector<std::string>{"SLURM_LOCALID=0"});
  EXPECT_EQ(under_srun->describe(), "local rank 2 (torchrun: LOCAL_RANK=2; SLURM_LOCALID=0 ignored)");

  // mpirun inside an sbatch script.
  const auto mpirun = gpusel::find_local_rank(
      environment({{"SLURM_LOCALID", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"MPI_LOCALRANKID", "1"}}));
  ASSERT_TRUE(mpirun.has_value());
  EXPECT_EQ(mpirun->rank, 3);
  EXPECT_EQ(mpirun->launcher, "Open MPI");
  EXPECT_EQ(mpirun->overridden, (std::vector<std::string>{"MPI_LOCALRANKID=1", "SLURM_LOCALID=0"}));

  // MVAPICH under Hydra sets both of its variables.
  const auto mvapich =
      gpusel::find_local_rank(environment({{"MPI_LOCALRANKID", "1"}, {"MV2_COMM_WORLD_LOCAL_RANK", "1"}}));
  ASSERT_TRUE(mvapich.has_value());
  EXPECT_EQ(mvapich->launcher, "MVAPICH");
}

TEST(FindLocalRank, RejectsMalformedValuesQuotingThem) {
  for (const std::string value : {"", "-1", "+1", " 1", "1 ", "1a", "0x1", "1.0", "one", "99999999999"}) {
    const std::string message = error_from([&] {
      (void)gpusel::find_local_rank(environment({{"OMPI_COMM_WORLD_LOCAL_RANK", value}}));
    });
    EXPECT_TRUE(contains(message, "OMPI_COMM_WORLD_LOCAL_RANK=\"" + value + "\""))
        << "value [" << value << "]: " << message;
    EXPECT_TRUE(contains(message, "expected a non-negative decimal integer")) << message;
  }
  EXPECT_TRUE(contains(error_from([] {
                         (void)gpusel::find_local_rank(environment({{"LOCAL_RANK", ""}}));
                       }),
                       "is set but empty"));
  EXPECT_TRUE(contains(error_from([] {
                         (void)gpusel::find_local_rank(environment({{"LOCAL_RANK", "99999999999"}}));
                       }),
                       "is out of range"));
}

TEST(FindLocalRank, AMalformedWinningValueIsAnErrorEvenIfALaterLauncherIsWellFormed) {
  const std::string message = error_from([] {
    (void)gpusel::find_local_rank(environment({{"LOCAL_RANK", "two"}, {"SLURM_LOCALID", "2"}}));
  });
  EXPECT_TRUE(contains(message, "LOCAL_RANK=\"two\"")) << message;
}

TEST(FindLocalRank, IgnoresMalformedValuesOfLauncherVariablesThatLost) {
  const auto rank = gpusel::find_local_rank(environment({{"LOCAL_RANK", "1"}, {"SLURM_LOCALID", "junk"}}));
  ASSERT_TRUE(rank.has_value());
  EXPECT_EQ(rank->rank, 1);
}

TEST(FindLocalRank, RejectsAMalformedProcessCountAndARankNotBelowIt) {
  EXPECT_TRUE(contains(error_from([] {
                         (void)gpusel::find_local_rank(environment({{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4x"}}));
                       }),
                       "LOCAL_WORLD_SIZE=\"4x\""));
  const std::string message = error_from([] {
    (void)gpusel::find_local_rank(
        environment({{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
  });
  EXPECT_EQ(message,
            "gpusel::local_rank(): OMPI_COMM_WORLD_LOCAL_RANK=4, OMPI_COMM_WORLD_LOCAL_SIZE=4: the rank must be "
            "below the number of processes");
}

// --- srun and sbatch: the environments a real Slurm 22.05 set -----------------
// Recorded under tests/slurm/cluster.sh (one node, 4 GPUs as GRES, no cgroups);
// tests/slurm/check_slurm.sh runs the same shapes under the real srun and sbatch.

// One task's Slurm variables: its SLURM_LOCALID, CUDA_VISIBLE_DEVICES (nullopt:
// unset) and SLURM_GPUS_ON_NODE (nullopt: unset).
struct SlurmTask {
  int local_id;
  std::optional<std::string> visible;
  std::optional<std::string> gpus_on_node;
};

std::map<std::string, std::string> slurm_variables(const SlurmTask& task) {
  std::map<std::string, std::string> variables{{"SLURM_LOCALID", std::to_string(task.local_id)},
                                               {"SLURM_JOB_ID", "12"}};
  if (task.visible) variables["CUDA_VISIBLE_DEVICES"] = *task.visible;
  if (task.visible) variables["SLURM_STEP_GPUS"] = *task.visible;  // equal to it, without cgroups
  if (task.gpus_on_node) variables["SLURM_GPUS_ON_NODE"] = *task.gpus_on_node;
  return variables;
}

// The device each task takes, as "cuda:N" or the Error's text, with `extra`
// variables added to the task's environment.
std::string device_of(const SlurmTask& task, const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> variables = slurm_variables(task);
  for (const auto& [name, value] : extra) variables[name] = value;
  int count = 4;  // as the driver counts CUDA_VISIBLE_DEVICES's entries (all 4 when it is unset)
  if (task.visible) count = static_cast<int>(std::count(task.visible->begin(), task.visible->end(), ',')) + 1;
  try {
    return gpusel::device_for_local_rank(gpusel::find_local_rank(environment(variables)), count).str();
  } catch (const gpusel::Error& error) {
    return std::string("Error: ") + error.what();
  }
}

// Newer Slurm versions set these in some shapes (sbatch exports its own options
// to its steps in 22.05 too): the answer must not depend on them.
const std::vector<std::map<std::string, std::string>> kPerTaskVariables = {
    {},
    {{"SLURM_GPUS_PER_TASK", "1"}},
    {{"SLURM_TRES_PER_TASK", "cpu:1,gres/gpu:1"}},
    {{"SLURM_GPUS_PER_TASK", "1"}, {"SLURM_GPU_BIND", "none"}},
    {{"SLURM_GPU_BIND", "closest"}},
};

TEST(SlurmShapes, SharedShapesGiveLocalRankRItsRthGpu) {
  // srun -n2 --gpus=2, srun -n2 --gres=gpu:2, and the steps of sbatch -n2 --gres=gpu:2:
  // both tasks CUDA_VISIBLE_DEVICES=0,1 and SLURM_GPUS_ON_NODE=2.
  // srun -n4 --gpus=4 --gpu-bind=closest (no topology known): all 4 tasks 0,1,2,3.
  // With GPUs 0 and 1 held by another job, srun -n2 --gpus=2: 2,3 in both.
  for (const auto& extra : kPerTaskVariables) {
    EXPECT_EQ(device_of({0, "0,1", "2"}, extra), "cuda:0");
    EXPECT_EQ(device_of({1, "0,1", "2"}, extra), "cuda:1");
    EXPECT_EQ(device_of({3, "0,1,2,3", "4"}, extra), "cuda:3");
    EXPECT_EQ(device_of({1, "2,3", "2"}, extra), "cuda:1");
  }
}

TEST(SlurmShapes, TasksGivenGpusOfTheirOwnTakeTheirFirstVisibleGpu) {
  // srun -n4 --gpus-per-task=1 and srun -n4 --ntasks-per-gpu=1: task i CUDA_VISIBLE_DEVICES=i,
  // SLURM_GPUS_ON_NODE=4, and none of SLURM_GPUS_PER_TASK, SLURM_GPU_BIND, SLURM_TRES_PER_TASK.
  // srun -n4 --gpus=4 --gpu-bind=map_gpu:3,2,1,0: task i 3-i. srun -n2 --gpus-per-task=2 and
  // --gpus=4 --gpu-bind=per_task:2: 0,1 and 2,3. srun -n4 --ntasks-per-gpu=2: 0,0,1,1 of 2.
  for (const auto& extra : kPerTaskVariables) {
    for (int task = 0; task < 4; ++task) {
      EXPECT_EQ(device_of({task, std::to_string(task), "4"}, extra), "cuda:0") << "task " << task;
      EXPECT_EQ(device_of({task, std::to_string(3 - task), "4"}, extra), "cuda:0") << "task " << task;
      EXPECT_EQ(device_of({task, std::to_string(task / 2), "2"}, extra), "cuda:0") << "task " << task;
    }
    EXPECT_EQ(device_of({1, "2,3", "4"}, extra), "cuda:0");
    EXPECT_EQ(device_of({1, "3", "2"}, extra), "cuda:0");  // --gpus-per-task=1 while GPUs 0,1 are taken
  }
  const auto rank = gpusel::find_local_rank(environment(slurm_variables({1, "1", "4"})));
  ASSERT_TRUE(rank.has_value());
  EXPECT_EQ(rank->describe(),
            "local rank 1 (Slurm: SLURM_LOCALID=1; each task has GPUs of its own: CUDA_VISIBLE_DEVICES=1 lists 1 "
            "GPU of the step's SLURM_GPUS_ON_NODE=4)");
}

TEST(SlurmShapes, ATaskOfAStepGivenNoGpuIsRankedAsOutsideSlurm) {
  // srun -n2 without --gpus: no CUDA_VISIBLE_DEVICES, no SLURM_GPUS_ON_NODE.
  EXPECT_EQ(device_of({1, std::nullopt, std::nullopt}), "cuda:1");
  EXPECT_TRUE(contains(device_of({1, "0", std::nullopt}), "has no GPU of its number"));
}

TEST(SlurmShapes, ConstrainDevicesIndicesAreReadAsTheDriverReadsThem) {
  // Simulated (no cgroups in this sandbox): with ConstrainDevices a task of srun --gpus=1 sees its
  // GPU as CUDA_VISIBLE_DEVICES=0 inside its cgroup while Slurm names it SLURM_STEP_GPUS=2.
  std::map<std::string, std::string> variables = slurm_variables({0, "0", "1"});
  variables["SLURM_STEP_GPUS"] = "2";
  EXPECT_EQ(gpusel::device_for_local_rank(gpusel::find_local_rank(environment(variables)), 1), gpusel::cuda(0));
  // Per task under cgroups: task 1 of srun -n2 --gpus-per-task=1 sees its GPU as 1 of the step's 2.
  variables = slurm_variables({1, "1", "2"});
  variables["SLURM_STEP_GPUS"] = "3";
  EXPECT_EQ(gpusel::device_for_local_rank(gpusel::find_local_rank(environment(variables)), 1), gpusel::cuda(0));
}

TEST(SlurmShapes, UuidsInCudaVisibleDevicesCountAsEntries) {
  // Simulated (Debian has Slurm 22.05 only): Slurm 25.11 may write the GPUs' UUIDs.
  const std::string first = "GPU-f9ee9551-5061-9acc-ea2a-e3926e258ba9";
  const std::string second = "GPU-948e02bd-d547-dd13-8fac-9694a9f10034";
  EXPECT_EQ(device_of({1, first + "," + second, "2"}), "cuda:1");
  EXPECT_EQ(device_of({1, second, "2"}), "cuda:0");
}

TEST(SlurmShapes, ALauncherInsideAStepKeepsItsOwnRank) {
  // srun -n2 --gpus-per-task=2 torchrun --nproc-per-node 2: each task sees 2 of the step's 4 GPUs,
  // and torchrun's workers share them by their LOCAL_RANK.
  for (const auto& extra : kPerTaskVariables) {
    std::map<std::string, std::string> with_torchrun = extra;
    with_torchrun["LOCAL_RANK"] = "1";
    with_torchrun["LOCAL_WORLD_SIZE"] = "2";
    EXPECT_EQ(device_of({1, "2,3", "4"}, with_torchrun), "cuda:1");
    EXPECT_EQ(device_of({0, "0,1", "2"}, with_torchrun), "cuda:1");
  }
  const auto rank = gpusel::find_local_rank(environment(
      {{"LOCAL_RANK", "1"}, {"SLURM_LOCALID", "0"}, {"CUDA_VISIBLE_DEVICES", "2,3"}, {"SLURM_GPUS_ON_NODE", "4"}}));
  ASSERT_TRUE(rank.has_value());
  EXPECT_EQ(rank->task_gpus, "");
}

TEST(SlurmShapes, ALauncherVariableThatRepeatsSlurmsRankKeepsThePerTaskRule) {
  // srun -n2 --gpus-per-task=1 sh -c 'LOCAL_RANK=$SLURM_LOCALID prog': task 1 sees its own GPU as cuda:0.
  EXPECT_EQ(device_of({1, "1", "2"}, {{"LOCAL_RANK", "1"}}), "cuda:0");
  EXPECT_EQ(device_of({1, "3", "4"}, {{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}), "cuda:0");
  const auto rank = gpusel::find_local_rank(environment(
      {{"LOCAL_RANK", "1"}, {"SLURM_LOCALID", "1"}, {"CUDA_VISIBLE_DEVICES", "1"}, {"SLURM_GPUS_ON_NODE", "2"}}));
  ASSERT_TRUE(rank.has_value());
  EXPECT_EQ(rank->describe(),
            "local rank 1 (torchrun: LOCAL_RANK=1; each task has GPUs of its own: LOCAL_RANK=1 repeats "
            "SLURM_LOCALID=1, and CUDA_VISIBLE_DEVICES=1 lists 1 GPU of the step's SLURM_GPUS_ON_NODE=2)");
  // A launcher that starts processes says how many (torchrun's LOCAL_WORLD_SIZE): its rank wins.
  EXPECT_TRUE(
      contains(device_of({1, "1", "2"}, {{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}), "has no GPU of its number"));
  // Another number is another launcher's rank: it wins, as before.
  EXPECT_TRUE(contains(device_of({0, "0", "2"}, {{"LOCAL_RANK", "1"}}), "has no GPU of its number"));
}

// --- the GPUs this process may choose among ----------------------------------

gpusel::Allotment allotment_of(const SlurmTask& task, int visible_gpus) {
  return gpusel::find_allotment(environment(slurm_variables(task)), visible_gpus);
}

TEST(Allotment, OutsideSlurmIsEveryVisibleGpu) {
  const gpusel::Allotment outside = gpusel::find_allotment(environment({{"LOCAL_RANK", "1"}}), 4);
  EXPECT_EQ(outside.scheduler, "");
  EXPECT_TRUE(outside.known());
  EXPECT_NO_THROW(outside.require("pick"));
}

TEST(Allotment, ASlurmStepThatNamesItsGpusIsKnown) {
  // srun -n2 --gpus=2 while another job holds GPUs 0 and 1; srun -n4 --gpus-per-task=1.
  const gpusel::Allotment shared = allotment_of({1, "2,3", "2"}, 2);
  EXPECT_EQ(shared.scheduler, "Slurm");
  EXPECT_EQ(shared.gpus_on_node, 2);
  EXPECT_EQ(shared.said, "SLURM_GPUS_ON_NODE=2, SLURM_STEP_GPUS=2,3");
  EXPECT_TRUE(shared.known());
  EXPECT_TRUE(allotment_of({3, "3", "4"}, 1).known());
  // srun -n1 --gpus-per-task=1 --gpu-bind=none: with one task Slurm does name its GPU.
  EXPECT_TRUE(allotment_of({0, "0", "1"}, 1).known());
}

TEST(Allotment, ASlurmStepGivenGpusWithoutSayingWhichIsRefusedSayingWhatWasSeen) {
  // srun -n2 --gpus-per-task=1 --gpu-bind=none: CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS unset
  // in both tasks, SLURM_GPUS_ON_NODE=2, and the node's 4 GPUs visible.
  const gpusel::Allotment unnamed = allotment_of({1, std::nullopt, "2"}, 4);
  EXPECT_FALSE(unnamed.known());
  const std::string message = error_from([&] { unnamed.require("pick"); });
  EXPECT_TRUE(contains(message,
                       "pick: Slurm gave this step 2 GPUs on this node (SLURM_GPUS_ON_NODE=2) without "
                       "saying which: CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS are unset in this task, and 4 GPUs "
                       "are visible"))
      << message;
  // srun's options are not in the task's environment: a typed --gpus-per-task=a100:1 leaves the
  // same variables, so no option is guessed.
  EXPECT_FALSE(contains(message, "--gpu-bind")) << message;
  // With every visible GPU the step's (srun -n4 --gpus=4 --gpu-bind=none on this node), any is its own.
  EXPECT_TRUE(allotment_of({1, std::nullopt, "4"}, 4).known());
}

TEST(Allotment, AProcessInNoStepOfAJobWithGpusIsRefusedAskingForSrun) {
  // salloc --gpus=2's own shell: SLURM_JOB_ID and SLURM_GPUS, no step, no CUDA_VISIBLE_DEVICES.
  const gpusel::Allotment shell = gpusel::find_allotment(environment({{"SLURM_JOB_ID", "72"}, {"SLURM_GPUS", "2"}}), 4);
  EXPECT_FALSE(shell.known());
  EXPECT_EQ(shell.refusal_kind, gpusel::AllotmentRefusal::no_step);
  const std::string message = error_from([&] { shell.require("pick"); });
  EXPECT_TRUE(contains(message,
                       "pick: Slurm gave job 72 GPUs (SLURM_GPUS=2), but this process is in no step of it "
                       "(SLURM_STEP_ID and CUDA_VISIBLE_DEVICES are unset"))
      << message;
  EXPECT_TRUE(contains(message, "run it under srun")) << message;
  EXPECT_TRUE(contains(shell.describe(), "Slurm gave job 72 GPUs (SLURM_GPUS=2)")) << shell.describe();
  // A job without GPUs, a machine without any, and the batch script, where Slurm names the job's.
  EXPECT_TRUE(gpusel::find_allotment(environment({{"SLURM_JOB_ID", "72"}}), 4).known());
  EXPECT_TRUE(gpusel::find_allotment(environment({{"SLURM_JOB_ID", "72"}, {"SLURM_GPUS", "2"}}), 0).known());
  EXPECT_TRUE(gpusel::find_allotment(environment({{"SLURM_JOB_ID", "72"},
                                                  {"SLURM_GPUS", "2"},
                                                  {"SLURM_JOB_GPUS", "2,3"},
                                                  {"CUDA_VISIBLE_DEVICES", "2,3"}}),
                                     4)
                  .known());
  EXPECT_FALSE(
      gpusel::find_allotment(environment({{"SLURM_JOB_ID", "7"}, {"SLURM_TRES_PER_NODE", "gres/gpu:2"}}), 4).known());
  EXPECT_TRUE(
      gpusel::find_allotment(environment({{"SLURM_JOB_ID", "7"}, {"SLURM_TRES_PER_NODE", "cpu:2"}}), 4).known());
}

TEST(Allotment, ASlurmStepGivenNoGpuChoosesAsOutsideSlurm) {
  // srun -n2 without --gpus: no SLURM_GPUS_ON_NODE, no CUDA_VISIBLE_DEVICES.
  const gpusel::Allotment none = allotment_of({1, std::nullopt, std::nullopt}, 4);
  EXPECT_EQ(none.scheduler, "Slurm");
  EXPECT_EQ(none.gpus_on_node, std::nullopt);
  EXPECT_TRUE(none.known());
  EXPECT_TRUE(allotment_of({1, std::nullopt, "0"}, 4).known());
}

TEST(Allotment, SaysWhatSlurmGaveTheStepInSlurmsOwnNames) {
  // srun -n2 --gpus=2 while another job holds GPUs 0 and 1.
  std::map<std::string, std::string> variables = slurm_variables({1, "2,3", "2"});
  variables["SLURM_STEP_ID"] = "0";
  variables["SLURM_JOB_GPUS"] = "2,3";
  const gpusel::Allotment given = gpusel::find_allotment(environment(variables), 2);
  EXPECT_EQ(given.step, "12.0");
  EXPECT_EQ(given.describe(),
            "Slurm gave this step (12.0) 2 GPUs on this node: SLURM_GPUS_ON_NODE=2, SLURM_STEP_GPUS=2,3, "
            "SLURM_JOB_GPUS=2,3, in Slurm's names (node-wide; under ConstrainDevices not the driver's, so gpusel "
            "maps no GPU by them).\n");
  // The batch script of sbatch --gres=gpu:2 has no step of its own.
  EXPECT_TRUE(contains(allotment_of({0, "0,1", "2"}, 2).describe(), "Slurm gave this step (job 12) 2 GPUs"));
}

TEST(Allotment, SaysThatSlurmGaveGpusWithoutSayingWhichOrNone) {
  const std::string unnamed = allotment_of({1, std::nullopt, "2"}, 4).describe();
  EXPECT_TRUE(contains(unnamed, "Slurm gave this step 2 GPUs on this node (SLURM_GPUS_ON_NODE=2) without saying which"))
      << unnamed;
  EXPECT_EQ(allotment_of({1, std::nullopt, std::nullopt}, 4).describe(),
            "Slurm gave this step (job 12) no GPU; choosing as outside Slurm.\n");
  EXPECT_EQ(allotment_of({1, std::nullopt, "0"}, 4).describe(),
            "Slurm gave this step (job 12) no GPU (SLURM_GPUS_ON_NODE=0); choosing as outside Slurm.\n");
  EXPECT_EQ(gpusel::find_allotment(environment({}), 4).describe(), "") << "outside Slurm and any container";
}

TEST(Allotment, SaysWhatTheContainerWasGivenAndEscapesWhatItQuotes) {
  const gpusel::Allotment container = gpusel::find_allotment(environment({{"NVIDIA_VISIBLE_DEVICES", "2,3"}}), 2);
  EXPECT_EQ(container.nvidia_visible_devices, "2,3");
  EXPECT_TRUE(contains(container.describe(), "NVIDIA_VISIBLE_DEVICES=2,3")) << container.describe();
  EXPECT_TRUE(contains(gpusel::find_allotment(environment({{"NVIDIA_VISIBLE_DEVICES", "all"}}), 2).describe(),
                       "every GPU of the host"));
  EXPECT_TRUE(
      contains(gpusel::find_allotment(environment({{"NVIDIA_VISIBLE_DEVICES", "none"}}), 0).describe(), "no GPU"));
  std::map<std::string, std::string> hostile = slurm_variables({0, "0", "1"});
  hostile["SLURM_STEP_GPUS"] = "0\x1b[2J";
  const std::string text = gpusel::find_allotment(environment(hostile), 1).describe();
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << "a control character is escaped (Note [Hostile text])";
}

// --- naming the engine (Note [Naming the engine]) ---------------------------
// The variables as torchrun 2.15, Ray 2.60 and Open MPI set them (tests/engines checks them on the real engines).

const std::map<std::string, std::string> kRayWorker{{"RAY_JOB_ID", "01000000"}, {"RAY_RAYLET_PID", "4242"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> variables,
                                        const std::map<std::string, std::string>& more) {
  variables.insert(more.begin(), more.end());
  return variables;
}

TEST(FindEngine, NamesNoEngineOutsideEveryEngine) {
  const gpusel::Engine none = gpusel::find_engine(environment({{"CUDA_VISIBLE_DEVICES", "1"}}));
  EXPECT_FALSE(none.known());
  EXPECT_EQ(none.describe(), "");
}

TEST(FindEngine, NamesARayTaskOrActorAndSaysRayGaveItsGpus) {
  const gpusel::Engine ray = gpusel::find_engine(environment(with(kRayWorker, {{"CUDA_VISIBLE_DEVICES", "2"}})));
  EXPECT_EQ(ray.name, "Ray");
  EXPECT_EQ(ray.role, "a task or actor");
  EXPECT_TRUE(ray.gives_gpus);
  EXPECT_EQ(ray.describe(),
            "Ray started this process as a task or actor (RAY_JOB_ID=01000000, RAY_RAYLET_PID=4242) and gives it its "
            "GPUs by CUDA_VISIBLE_DEVICES; named from its variables, which decide nothing.\n");
  gpusel::Engine actor = ray;
  actor.worker = "ray::OneGpu.look\x1b[2J";  // the worker's title (engine() reads it from /proc), escaped
  EXPECT_TRUE(contains(actor.describe(), "RAY_RAYLET_PID=4242; its Ray worker is ray::OneGpu.look\\x1b[2J)"))
      << actor.describe();
  EXPECT_EQ(ray.worker, "") << "find_engine reads nothing but variables";
  // A Ray node started inside a Slurm step: its workers inherit the step's task variables, and Ray is inner.
  EXPECT_EQ(gpusel::find_engine(environment(with(kRayWorker, {{"SLURM_JOB_ID", "7"}, {"SLURM_LOCALID", "0"}}))).name,
            "Ray");
}

TEST(FindEngine, TellsTorchrunFromRayTrainByTorchelasticRunId) {
  const std::map<std::string, std::string> rank{{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}};
  const gpusel::Engine train = gpusel::find_engine(environment(with(rank, kRayWorker)));
  EXPECT_EQ(train.name, "Ray Train");
  EXPECT_EQ(train.role, "a worker");
  EXPECT_TRUE(train.gives_gpus);
  EXPECT_EQ(train.said, "LOCAL_RANK=1, LOCAL_WORLD_SIZE=2, RAY_JOB_ID=01000000, RAY_RAYLET_PID=4242");
  // torchrun started from a Ray task: its workers inherit Ray's variables, and torchrun is inner.
  const gpusel::Engine torchrun =
      gpusel::find_engine(environment(with(with(rank, kRayWorker), {{"TORCHELASTIC_RUN_ID", "none"}})));
  EXPECT_EQ(torchrun.name, "torchrun");
  EXPECT_FALSE(torchrun.gives_gpus);
  EXPECT_EQ(torchrun.describe(),
            "torchrun started this process as a rank (LOCAL_RANK=1, LOCAL_WORLD_SIZE=2, TORCHELASTIC_RUN_ID=none); "
            "torchrun gives no GPU: each rank takes the visible GPU of its number; named from its variables, which "
            "decide nothing.\n");
  EXPECT_EQ(gpusel::find_local_rank(environment(with(rank, kRayWorker)))->describe(),
            "local rank 1 of 2 (Ray Train: LOCAL_RANK=1, LOCAL_WORLD_SIZE=2)");
  EXPECT_EQ(
      gpusel::find_local_rank(environment(with(with(rank, kRayWorker), {{"TORCHELASTIC_RUN_ID", "x"}})))->launcher,
      "torchrun");
}

TEST(FindEngine, NamesMpiLaunchersAndSlurmInnermostFirst) {
  const gpusel::Engine mpi = gpusel::find_engine(environment(with(
      kRayWorker, {{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"SLURM_LOCALID", "0"}})));
  EXPECT_EQ(mpi.name, "Open MPI") << "mpirun started from a Ray task is inner";
  EXPECT_EQ(mpi.said, "OMPI_COMM_WORLD_LOCAL_RANK=1, OMPI_COMM_WORLD_LOCAL_SIZE=2");
  EXPECT_FALSE(mpi.gives_gpus);
  EXPECT_EQ(gpusel::find_engine(environment({{"MPI_LOCALRANKID", "0"}})).name, "MPICH (Hydra)");
  EXPECT_EQ(gpusel::find_engine(environment({{"SLURM_JOB_ID", "12"}})).name, "Slurm");
  EXPECT_EQ(gpusel::find_engine(environment({{"SLURM_JOB_ID", "12"}, {"SLURM_LOCALID", "1"}})).role, "a task");
}

TEST(FindEngine, DecidesNothingAndThrowsNothingForAMalformedRank) {
  const gpusel::Engine engine = gpusel::find_engine(environment(with(kRayWorker, {{"LOCAL_RANK", "1a"}})));
  EXPECT_EQ(engine.name, "Ray Train");  // local_rank() is where a malformed rank is an Error
  EXPECT_EQ(
      gpusel::device_for_local_rank(gpusel::find_local_rank(environment(with(kRayWorker, {{"LOCAL_RANK", "1"}}))), 4),
      gpusel::cuda(1));
}

TEST(Allotment, SaysWhichEngineStartedTheProcessBesideSlurmsLineAndEscapesIt) {
  const std::string ray =
      gpusel::find_allotment(environment(with(kRayWorker, {{"CUDA_VISIBLE_DEVICES", "0"}})), 1).describe();
  EXPECT_TRUE(contains(ray, "Ray started this process as a task or actor")) << ray;
  std::map<std::string, std::string> slurm = slurm_variables({0, "0,1", "2"});
  const gpusel::Allotment step = gpusel::find_allotment(environment(slurm), 2);
  EXPECT_EQ(step.engine.name, "Slurm");
  EXPECT_FALSE(contains(step.describe(), "started this process")) << "Slurm's own line says it";
  const std::string ray_in_step = gpusel::find_allotment(environment(with(slurm, kRayWorker)), 2).describe();
  EXPECT_EQ(ray_in_step.rfind("Slurm gave this step", 0), 0u) << ray_in_step;
  EXPECT_TRUE(contains(ray_in_step, "\nRay started this process")) << ray_in_step;
  const std::string hostile = gpusel::find_allotment(environment({{"RAY_JOB_ID", "01\x1b[2J"}}), 0).describe();
  EXPECT_EQ(hostile.find('\x1b'), std::string::npos) << "a control character is escaped (Note [Hostile text])";
}

// --- from the rank to the device -------------------------------------------

gpusel::LocalRank rank_of(int rank, std::optional<int> size = std::nullopt) {
  gpusel::LocalRank local;
  local.rank = rank;
  local.size = size;
  local.launcher = "Open MPI";
  local.source = "OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(rank);
  return local;
}

TEST(DeviceForLocalRank, GivesEachRankTheDeviceWithItsNumberModuloTheCount) {
  std::vector<int> devices;
  for (int rank = 0; rank < 8; ++rank) {
    devices.push_back(gpusel::device_for_local_rank(rank_of(rank), 4, gpusel::Placement::round_robin).index());
  }
  EXPECT_EQ(devices, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(gpusel::device_for_local_rank(rank_of(5, 6), 2, gpusel::Placement::round_robin), gpusel::cuda(1));
}

TEST(DeviceForLocalRank, ByDefaultGivesEachRankTheDeviceWithItsNumber) {
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(gpusel::device_for_local_rank(rank_of(rank, 4), 4), gpusel::cuda(rank));
}

TEST(DeviceForLocalRank, ByDefaultARankBeyondTheVisibleDevicesIsAnErrorNotASharedGpu) {
  // LOCAL_RANK=6 on 4 GPUs: PyTorch's set_device(int(LOCAL_RANK)) raises; a modulo would put it on cuda:2.
  const std::string message = error_from([] {
    (void)gpusel::device_for_local_rank(rank_of(6), 4, gpusel::Placement::rank_or_cpu,
                                        "4 CUDA devices are visible (cuda:0..cuda:3); CUDA_VISIBLE_DEVICES is unset");
  });
  EXPECT_EQ(message,
            "gpusel::local_rank_device(rank_or_cpu): local rank 6 has no GPU of its number, but 4 CUDA devices are "
            "visible (cuda:0..cuda:3); CUDA_VISIBLE_DEVICES is unset; this process is local rank 6 (Open MPI: "
            "OMPI_COMM_WORLD_LOCAL_RANK=6); to share GPUs between ranks, ask for it: "
            "local_rank_device(gpusel::Placement::round_robin)");
}

TEST(DeviceForLocalRank, ByDefaultFallsBackToTheCpuWhenNoDeviceIsVisible) {
  EXPECT_EQ(gpusel::device_for_local_rank(rank_of(3), 0), gpusel::cpu());
}

TEST(DeviceForLocalRank, AProcessStartedAloneGetsTheFirstDevice) {
  EXPECT_EQ(gpusel::device_for_local_rank(std::nullopt, 3), gpusel::cuda(0));
  EXPECT_EQ(gpusel::device_for_local_rank(std::nullopt, 3, gpusel::Placement::round_robin), gpusel::cuda(0));
  EXPECT_EQ(gpusel::device_for_local_rank(std::nullopt, 1, gpusel::Placement::one_gpu_per_rank), gpusel::cuda(0));
}

TEST(DeviceForLocalRank, FallsBackToTheCpuWhenNoDeviceIsVisibleAndSharingIsAllowed) {
  EXPECT_EQ(gpusel::device_for_local_rank(rank_of(3), 0, gpusel::Placement::round_robin), gpusel::cpu());
  EXPECT_EQ(gpusel::device_for_local_rank(std::nullopt, 0, gpusel::Placement::round_robin), gpusel::cpu());
}

TEST(DeviceForLocalRank, OneGpuPerRankGivesEachRankItsOwnDevice) {
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(gpusel::device_for_local_rank(rank_of(rank, 4), 4, gpusel::Placement::one_gpu_per_rank),
              gpusel::cuda(rank));
  }
}

TEST(DeviceForLocalRank, OneGpuPerRankIsAnErrorWhenThisRankHasNone) {
  const std::string message = error_from([] {
    (void)gpusel::device_for_local_rank(rank_of(2), 2, gpusel::Placement::one_gpu_per_rank,
                                        "2 CUDA devices are visible (cuda:0..cuda:1); CUDA_VISIBLE_DEVICES=0,3");
  });
  EXPECT_EQ(message,
            "gpusel::local_rank_device(one_gpu_per_rank): local rank 2 needs a GPU of its own, but 2 CUDA devices "
            "are visible (cuda:0..cuda:1); CUDA_VISIBLE_DEVICES=0,3; this process is local rank 2 (Open MPI: "
            "OMPI_COMM_WORLD_LOCAL_RANK=2)");
}

TEST(DeviceForLocalRank, OneGpuPerRankFailsInEveryRankWhenTheNodeHasMoreRanksThanGpus) {
  // Rank 0 would fit, but rank 4 would not: the whole job stops, not a part of it.
  const std::string message =
      error_from([] { (void)gpusel::device_for_local_rank(rank_of(0, 5), 4, gpusel::Placement::one_gpu_per_rank); });
  EXPECT_TRUE(
      contains(message, "5 processes on this node each need a GPU of their own, but 4 CUDA devices are visible"))
      << message;
}

TEST(DeviceForLocalRank, OneGpuPerRankWithNoGpuIsAnError) {
  const std::string message =
      error_from([] { (void)gpusel::device_for_local_rank(std::nullopt, 0, gpusel::Placement::one_gpu_per_rank); });
  EXPECT_TRUE(
      contains(message, "but 0 CUDA devices are visible; this process is local rank 0 (no launcher variable is set)"))
      << message;
}

TEST(DeviceForLocalRank, RejectsANegativeDeviceCount) {
  EXPECT_THROW((void)gpusel::device_for_local_rank(std::nullopt, -1, gpusel::Placement::round_robin), gpusel::Error);
}

// --- from this process's environment -----------------------------------------

// Sets launcher variables for one test and restores the environment after it.
class LauncherEnvironment {
 public:
  explicit LauncherEnvironment(std::initializer_list<std::pair<std::string, std::string>> variables) {
    for (const gpusel::LauncherVariables& launcher : gpusel::launcher_variables) {
      for (const char* name : {launcher.rank_variable, launcher.size_variable}) {
        if (name == nullptr) continue;
        saved_.emplace_back(name, gpusel::detail::environment_variable(name));
        unsetenv(name);
      }
    }
    for (const char* name : {"SLURM_JOB_ID", "SLURM_GPUS_ON_NODE"}) {  // the allotment's
      saved_.emplace_back(name, gpusel::detail::environment_variable(name));
      unsetenv(name);
    }
    for (const auto& [name, value] : variables) setenv(name.c_str(), value.c_str(), 1);
  }
  ~LauncherEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  LauncherEnvironment(const LauncherEnvironment&) = delete;
  LauncherEnvironment& operator=(const LauncherEnvironment&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(LocalRankDevice, RefusesWhenSlurmGaveGpusWithoutSayingWhich) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  if (gpusel::detail::environment_variable("CUDA_VISIBLE_DEVICES")) GTEST_SKIP() << "CUDA_VISIBLE_DEVICES is set";
  // A task of srun -n2 --gpus-per-task=1 --gpu-bind=none on a node whose GPUs are all visible.
  const LauncherEnvironment environment({{"SLURM_LOCALID", "0"}, {"SLURM_JOB_ID", "12"}, {"SLURM_GPUS_ON_NODE", "1"}});
  const std::string message = error_from([] { (void)gpusel::local_rank_device(); });
  EXPECT_TRUE(contains(message, "gpusel::local_rank_device(): Slurm gave this step 1 GPU")) << message;
  EXPECT_TRUE(contains(message, "CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS are unset in this task")) << message;
}

TEST(LocalRank, ReadsThisProcesssEnvironment) {
  const LauncherEnvironment environment({{"SLURM_LOCALID", "1"}, {"LOCAL_RANK", "3"}});
  const auto rank = gpusel::local_rank();
  ASSERT_TRUE(rank.has_value());
  EXPECT_EQ(rank->rank, 3);
  EXPECT_EQ(rank->overridden, std::vector<std::string>{"SLURM_LOCALID=1"});
}

TEST(LocalRankDevice, TakesTheRanksVisibleDeviceWithoutCreatingAContext) {
  if (auto why = gpusel_test::need_devices(4)) GTEST_SKIP() << *why;
  const int count = gpusel::device_count();
  const LauncherEnvironment environment({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}});
  EXPECT_EQ(gpusel::local_rank_device(), gpusel::cuda(3 % count));
#if GPUSEL_TEST_EMULATED
  EXPECT_EQ(gpusel_emulated::primary_context_count(), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaSetDevice"), 0);
#endif
}

TEST(LocalRankDevice, WrapsAroundWhenRanksOutnumberDevicesOnlyWhenAskedTo) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  const int count = gpusel::device_count();
  const LauncherEnvironment environment({{"LOCAL_RANK", "5"}, {"LOCAL_WORLD_SIZE", "6"}});
  EXPECT_EQ(gpusel::local_rank_device(gpusel::Placement::round_robin), gpusel::cuda(5 % count));
  if (count < 6) {
    const std::string by_default = error_from([] { (void)gpusel::local_rank_device(); });
    EXPECT_TRUE(contains(by_default, "local rank 5 has no GPU of its number")) << by_default;
    EXPECT_TRUE(contains(by_default, "LOCAL_RANK=5")) << "the message names the launcher variable: " << by_default;
    const std::string message =
        error_from([] { (void)gpusel::local_rank_device(gpusel::Placement::one_gpu_per_rank); });
    EXPECT_TRUE(contains(message, "6 processes on this node each need a GPU of their own")) << message;
    EXPECT_TRUE(contains(message, "CUDA_VISIBLE_DEVICES")) << "the message says what decided the count: " << message;
  }
}

TEST(LocalRankDeviceWithoutDriver, FallsBackToTheCpuOrSaysWhyThereIsNoGpu) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  const LauncherEnvironment environment({{"MPI_LOCALRANKID", "1"}});
  EXPECT_EQ(gpusel::local_rank_device(), gpusel::cpu());
  const std::string message = error_from([] { (void)gpusel::local_rank_device(gpusel::Placement::one_gpu_per_rank); });
  EXPECT_TRUE(contains(message, "local rank 1 needs a GPU of its own, but no CUDA device is usable")) << message;
  EXPECT_TRUE(contains(message, "no NVIDIA driver was found")) << message;
}

TEST(LocalRankDevice, AMalformedRankIsAnErrorNotDeviceZero) {
  const LauncherEnvironment environment({{"SLURM_LOCALID", "0,1"}});
  const std::string message = error_from([] { (void)gpusel::local_rank_device(); });
  EXPECT_TRUE(contains(message, "SLURM_LOCALID=\"0,1\"")) << message;
}

}  // namespace
