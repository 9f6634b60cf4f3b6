// Specification of a launcher's rank's GPU under the rank's rules (include/gpusel/machine/
// rank_gpu.hpp, Note [A rank's own GPU]): the GPU of its number, refused in MIG mode or busy,
// never another. Pure: each machine is written down here (pick_machines.hpp); local_rank_device()
// and `gpusel run --local-rank` side by side on the fake NVML are tool_run_local_rank_library's.
#include "gpusel/machine/rank_gpu.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "pick_machines.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::alice;
using gpusel_test::contains;
using gpusel_test::error_from;
using gpusel_test::gpu;
using gpusel_test::machine;
using gpusel_test::process_of;

// Local rank `rank` of torchrun.
gpusel::LocalRank torchrun(int rank) {
  gpusel::LocalRank local;
  local.rank = rank;
  local.launcher = "torchrun";
  local.source = "LOCAL_RANK=" + std::to_string(rank);
  return local;
}

TEST(RankGpu, IsTheVisibleGpuOfTheRanksNumber) {
  const auto map = machine({gpu(0, 100, 0), gpu(1, 100, 0), gpu(2, 100, 0), gpu(3, 100, 0)}, "3,1");
  const gpusel::RankGpu own = gpusel::rank_gpu(torchrun(1), map, gpusel::Placement::rank_or_cpu, {}, alice);
  EXPECT_EQ(own.device, gpusel::cuda(1));
  EXPECT_EQ(own.physical_index, 1);
  EXPECT_EQ(own.refusal, gpusel::RankRefusal::none);
  EXPECT_EQ(own.reason, "");
  EXPECT_EQ(own.described,
            "local rank 1 (torchrun: LOCAL_RANK=1): its GPU, cuda:1 of the job (physical 1, "
            "GPU-1aaaaaaa-0000-0000-0000-000000000000)");
  EXPECT_EQ(gpusel::rank_gpu(std::nullopt, map, gpusel::Placement::rank_or_cpu, {}, alice).physical_index, 3)
      << "a process started alone is rank 0";
}

TEST(RankGpu, RefusesAGpuInMigModeNeverTakingAnother) {
  std::vector<gpusel::Gpu> gpus = gpusel_test::whole_and_mig();
  const gpusel::RankGpu own = gpusel::rank_gpu(torchrun(1), machine(gpus), gpusel::Placement::rank_or_cpu, {}, alice);
  EXPECT_EQ(own.refusal, gpusel::RankRefusal::mig_mode);
  EXPECT_EQ(own.device, gpusel::cuda(1)) << "its GPU, refused: not GPU 0 instead";
  EXPECT_TRUE(contains(own.reason,
                       "(physical 1, GPU-1aaaaaaa-0000-0000-0000-000000000000), is in MIG mode, and "
                       "gpusel never gives a GPU in MIG mode whole"))
      << own.reason;
  gpusel::RankSharing everyone;
  everyone.allow_other_users = true;
  EXPECT_EQ(gpusel::rank_gpu(torchrun(1), machine(gpus), gpusel::Placement::rank_or_cpu, everyone, alice).refusal,
            gpusel::RankRefusal::mig_mode)
      << "sharing does not make a GPU in MIG mode whole";
}

TEST(RankGpu, RefusesABusyGpuUnlessSharingAllowsItsProcesses) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 100, 0), gpu(1, 100, 0), gpu(2, 100, 0)};
  gpus[1].processes->push_back(process_of("bob", 777));
  gpus[2].processes->push_back(process_of("alice", 4242));
  gpus[2].processes->push_back(process_of("alice", 99));  // the rank itself
  const auto map = machine(gpus);
  const gpusel::RankGpu bobs = gpusel::rank_gpu(torchrun(1), map, gpusel::Placement::rank_or_cpu, {}, alice);
  EXPECT_EQ(bobs.refusal, gpusel::RankRefusal::busy);
  EXPECT_TRUE(contains(bobs.reason, "), is busy: another user's compute process runs on it (pid 777 of bob"))
      << bobs.reason;
  ASSERT_EQ(bobs.busy_processes.size(), 1u);
  EXPECT_EQ(bobs.busy_processes[0].pid, 777u);

  const gpusel::Caller rank{"alice", 99};
  const gpusel::RankGpu sibling = gpusel::rank_gpu(torchrun(2), map, gpusel::Placement::rank_or_cpu, {}, rank);
  EXPECT_EQ(sibling.refusal, gpusel::RankRefusal::busy) << "a sibling rank's process is this user's own";
  EXPECT_TRUE(contains(sibling.reason, "this user's own compute process runs on it (pid 4242")) << sibling.reason;
  EXPECT_FALSE(contains(sibling.reason, "pid 99")) << "the rank's own process makes its GPU no busier";

  gpusel::RankSharing own;
  own.share_own = true;
  EXPECT_EQ(gpusel::rank_gpu(torchrun(2), map, gpusel::Placement::rank_or_cpu, own, rank).refusal,
            gpusel::RankRefusal::none);
  EXPECT_EQ(gpusel::rank_gpu(torchrun(1), map, gpusel::Placement::rank_or_cpu, own, rank).refusal,
            gpusel::RankRefusal::busy)
      << "share_own does not share another user's GPU";
  gpusel::RankSharing everyone;
  everyone.allow_other_users = true;
  EXPECT_EQ(gpusel::rank_gpu(torchrun(1), map, gpusel::Placement::rank_or_cpu, everyone, rank).refusal,
            gpusel::RankRefusal::none);
  EXPECT_EQ(gpusel::rank_gpu(torchrun(2), map, gpusel::Placement::round_robin, {}, rank).refusal,
            gpusel::RankRefusal::none)
      << "round-robin ranks share GPUs, and so their own processes";
}

TEST(RankGpu, IsAnErrorWhereNoneIsVisibleOrTheRankHasNoGpuOfItsNumber) {
  const auto two = machine({gpu(0, 100, 0), gpu(1, 100, 0)});
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::rank_gpu(torchrun(2), two, gpusel::Placement::rank_or_cpu, {}, alice); }),
               "local rank 2 has no GPU of its number"))
      << "device_for_local_rank's Error";
  EXPECT_EQ(gpusel::rank_gpu(torchrun(2), two, gpusel::Placement::round_robin, {}, alice).device, gpusel::cuda(0));
  EXPECT_TRUE(contains(
      error_from([&] { (void)gpusel::rank_gpu(torchrun(0), machine({}), gpusel::Placement::rank_or_cpu, {}, alice); }),
      "gpusel::rank_gpu: which GPUs are visible is unknown: this machine has no GPU"));
  gpusel::DeviceMap unknown;
  unknown.inventory.reason = "libnvidia-ml.so.1 was not found";
  EXPECT_EQ(
      error_from([&] { (void)gpusel::rank_gpu(torchrun(0), unknown, gpusel::Placement::rank_or_cpu, {}, alice); }),
      "gpusel::rank_gpu: cannot see the GPUs without NVML: libnvidia-ml.so.1 was not found");
}

}  // namespace
