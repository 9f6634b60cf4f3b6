// Specification of picking and leasing on this machine, read through NVML (include/gpusel/
// machine/pick.hpp: pick(), lease_free_gpus, use_free_gpus, reject_leased_gpus), end to end
// through the fake NVML, on the emulated runtime (which counts CUDA calls: picking makes none)
// and on the real one.
#include "gpusel/machine/pick.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "fake_nvml_machine.hpp"
#include "gpusel/machine/detail/system/process_files.hpp"
#include "gpusel/machine/wait_for_gpus.hpp"
#include "gpusel_test.hpp"
#include "lease_directory.hpp"
#include "pick_criteria_builders.hpp"
#include "pick_machines.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::FakeNvmlMachine;
using gpusel_test::ScopedEnvironment;
using gpusel_test::ScopedLeaseDirectory;

using gpusel_test::contains;
using gpusel_test::count;
using gpusel_test::error_from;
using gpusel_test::uuids;

// Four H200s: 0 is busy, 1 runs a process of this very test (its own user), 2 a
// process nobody here can see, 3 is idle with the most free memory.
std::string four_gpus() {
  return "gpu uuid=GPU-00000000-aaaa-0000-0000-000000000000 used_mib=100000 utilization=90\n"
         "gpu uuid=GPU-11111111-aaaa-0000-0000-000000000000 used_mib=4096 utilization=5\n"
         "gpu uuid=GPU-22222222-aaaa-0000-0000-000000000000 used_mib=0\n"
         "gpu uuid=GPU-33333333-aaaa-0000-0000-000000000000 used_mib=1024\n"
         "process gpu=1 pid=" +
         std::to_string(getpid()) + " used_mib=4000\n" + "process gpu=2 pid=4000000000 used_mib=na\n";
}

TEST(PickThroughNvml, ReadsTheMachineAndMakesNoCudaCall) {
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(4));
#endif
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::PickCriteria criteria = count(2);
  criteria.max_utilization = 10;
  const auto picked = gpusel::pick(criteria);
  ASSERT_EQ(picked.size(), 2u);
  EXPECT_EQ(picked[0].gpu.uuid, "GPU-33333333-aaaa-0000-0000-000000000000") << "the most free memory";
  EXPECT_EQ(picked[1].gpu.uuid, "GPU-11111111-aaaa-0000-0000-000000000000") << "this very process is no obstacle";
#if GPUSEL_TEST_EMULATED
  EXPECT_EQ(gpusel_emulated::call_log(), std::vector<std::string>{}) << "picking makes no CUDA call";
  EXPECT_EQ(gpusel_emulated::primary_context_count(), 0);
#endif
}

// How many looks at the machine the fake NVML logged to `log` (GPUSEL_FAKE_NVML_LOG: one
// nvmlDeviceGetCount_v2 a look) since the last call, which empties it.
int looks_since(const std::string& log) {
  std::ifstream in(log);
  int looks = 0;
  for (std::string line; std::getline(in, line);) ++looks;
  std::ofstream(log, std::ios::trunc);
  return looks;
}

TEST(PickThroughNvml, EachAttemptLooksAtTheMachineOnce) {
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(4));
#endif
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  const std::string log = leases.parent() + "/nvml.log";
  ScopedEnvironment logged("GPUSEL_FAKE_NVML_LOG", log);
  (void)gpusel::pick(count(1));
  EXPECT_EQ(looks_since(log), 1) << "pick()";
  (void)gpusel::lease_free_gpus(count(1));
  EXPECT_EQ(looks_since(log), 1) << "lease_free_gpus()";
  if (gpusel::cuda_started()) GTEST_SKIP() << "CUDA has started in this test process: use_free_gpus refuses";
  {
    const gpusel::LeasedGpus used = gpusel::use_free_gpus(count(1));
    EXPECT_EQ(looks_since(log), 1) << "use_free_gpus(): making the GPUs visible looks at the machine no more";
  }
  ScopedEnvironment unset_again("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::WaitForGpus wait;
  wait.at_most = std::chrono::seconds(10);
  const gpusel::LeasedGpus waited = gpusel::use_free_gpus(count(1), wait);
  EXPECT_EQ(looks_since(log), 1) << "use_free_gpus(criteria, wait), served at its first look";
}

TEST(PickThroughNvml, SaysWhyNothingFits) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  const std::string message = error_from([] { (void)gpusel::pick(count(4)); });
  EXPECT_TRUE(contains(message, "gpusel::pick: 3 of 4 GPUs fit, 4 are needed")) << message;
  EXPECT_TRUE(contains(message, "pid 4000000000, owner unknown")) << message;
}

TEST(PickThroughNvml, AnotherProcessOfThisUserMakesItsGpuBusy) {
  // The process that started this test (ctest, a shell) is this user's, and not this process.
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(
      "gpu uuid=GPU-00000000-aaaa-0000-0000-000000000000 used_mib=0\n"
      "gpu uuid=GPU-11111111-aaaa-0000-0000-000000000000 used_mib=4096\n"
      "process gpu=0 pid=" +
      std::to_string(getppid()) + " used_mib=1\n");
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  ASSERT_EQ(gpusel::detail::process_user(static_cast<unsigned>(getppid())), gpusel::current_user());
  const auto picked = gpusel::pick();
  ASSERT_EQ(picked.size(), 1u);
  EXPECT_EQ(picked[0].gpu.uuid, "GPU-11111111-aaaa-0000-0000-000000000000");
  gpusel::PickCriteria sharing;
  sharing.share_own = true;
  EXPECT_EQ(gpusel::pick(sharing).at(0).gpu.uuid, "GPU-00000000-aaaa-0000-0000-000000000000");
}

TEST(PickThroughNvml, UseFreeGpusMakesThePickedGpusVisibleBestFirst) {
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(4));
#endif
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
  if (gpusel::cuda_started()) {
    EXPECT_TRUE(contains(error_from([] { (void)gpusel::use_free_gpus(count(2)); }), "CUDA has already started"));
    return;
  }
  const auto picked = gpusel::use_free_gpus(count(2));
  ASSERT_EQ(picked.gpus.size(), 2u);
  EXPECT_EQ(picked.lease.uuids(), (std::vector<std::string>{"GPU-33333333-aaaa-0000-0000-000000000000",
                                                            "GPU-11111111-aaaa-0000-0000-000000000000"}))
      << "the picked GPUs stay leased while the result lives";
  EXPECT_TRUE(gpusel::lease_holder("GPU-33333333-aaaa-0000-0000-000000000000").has_value());
  ASSERT_NE(std::getenv("CUDA_VISIBLE_DEVICES"), nullptr);
  EXPECT_EQ(std::string(std::getenv("CUDA_VISIBLE_DEVICES")),
            "GPU-33333333-aaaa-0000-0000-000000000000,GPU-11111111-aaaa-0000-0000-000000000000");
  const gpusel::DeviceMap map = gpusel::visible_devices();
  ASSERT_EQ(map.visible.count(), 2);
  EXPECT_EQ(map.visible.physical(0), 3) << "cuda:0 is the best GPU";
  EXPECT_EQ(map.visible.physical(1), 1);
#if GPUSEL_TEST_EMULATED
  EXPECT_EQ(gpusel_emulated::call_log(), std::vector<std::string>{}) << "choosing makes no CUDA call";
#endif
}

TEST(PickThroughNvml, UseFreeGpusChangesNothingWhenTooFewFit) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "0,1,2,3");
  EXPECT_THROW((void)gpusel::use_free_gpus(count(4)), gpusel::Error);
  EXPECT_EQ(std::string(std::getenv("CUDA_VISIBLE_DEVICES")), "0,1,2,3");
}

TEST(PickThroughNvml, AGpuLeasedByAnotherJobIsBusyAndPassedOver) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  const gpusel::LeasedGpus first = gpusel::lease_free_gpus(count(1));
  ASSERT_EQ(first.gpus.size(), 1u);
  EXPECT_EQ(first.gpus[0].physical_index, 3) << "the most free memory";
  const gpusel::LeasedGpus second = gpusel::lease_free_gpus(count(1));
  ASSERT_EQ(second.gpus.size(), 1u);
  EXPECT_EQ(second.gpus[0].physical_index, 1) << "the next best: 3 is leased";
  gpusel::PickCriteria idle = count(1);
  idle.max_utilization = 10;  // GPU 0 is 90% utilized
  const std::string message = error_from([&] { (void)gpusel::pick(idle); });
  EXPECT_TRUE(contains(message,
                       "GPU-33333333-aaaa-0000-0000-000000000000), 139.4 GiB free, 0% utilized: leased by "
                       "another job (pid " +
                           std::to_string(getpid())))
      << message;
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::lease_free_gpus(idle); }), "0 of 4 GPUs fit"));
}

// GPU 0 whole and busy; GPU 1 in MIG mode with two instances.
const char* kMigMachine = R"(
gpu uuid=GPU-0a1b2c3d-0000-4000-8000-000000000000 used_mib=140000
gpu uuid=GPU-3d4e5f60-0000-4000-8000-000000000003 mig=1
mig gpu=1 uuid=MIG-4a5b6c7d-0000-4000-8000-000000000000 gi=1 ci=0 memory_mib=71680 used_mib=0
mig gpu=1 uuid=MIG-5b6c7d8e-0000-4000-8000-000000000001 gi=2 ci=0 memory_mib=35840 used_mib=0
)";

TEST(PickThroughNvml, LeasesMigInstancesApartAndTheWholeGpuExcludesThem) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(kMigMachine);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::PickCriteria one = count(1);
  one.min_free_memory = "30GiB";
  const gpusel::LeasedGpus first = gpusel::lease_free_gpus(one);
  EXPECT_EQ(uuids(first.gpus), std::vector<std::string>{"MIG-4a5b6c7d-0000-4000-8000-000000000000"});
  const gpusel::LeasedGpus second = gpusel::lease_free_gpus(one);
  EXPECT_EQ(uuids(second.gpus), std::vector<std::string>{"MIG-5b6c7d8e-0000-4000-8000-000000000001"})
      << "another instance of the same GPU goes to another job";
  EXPECT_FALSE(gpusel::try_lease_gpu("GPU-3d4e5f60-0000-4000-8000-000000000003").has_value())
      << "the whole GPU cannot be leased while an instance is";
  const std::string message = error_from([&] { (void)gpusel::lease_free_gpus(one); });
  EXPECT_TRUE(contains(message, "MIG-4a5b6c7d-0000-4000-8000-000000000000 (GI 1, CI 0) of GPU 1")) << message;
  EXPECT_TRUE(contains(message, "leased by another job")) << message;
}

TEST(PickThroughNvml, ALeaseOnTheWholeGpuMakesEachOfItsMigInstancesBusy) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(kMigMachine);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  const gpusel::GpuLease whole = gpusel::lease_gpu("GPU-3d4e5f60-0000-4000-8000-000000000003");
  gpusel::PickCriteria one = count(1);
  one.min_free_memory = "30GiB";
  const std::string message = error_from([&] { (void)gpusel::lease_free_gpus(one); });
  EXPECT_TRUE(contains(message, "0 of 3 GPUs and MIG instances fit")) << message;
  EXPECT_TRUE(contains(message, "leased by another job")) << message;
  EXPECT_TRUE(
      contains(message, "gpusel-GPU-3d4e5f60-0000-4000-8000-000000000003." + std::to_string(geteuid()) + ".lock"))
      << message;
}

TEST(PickThroughNvml, AGpuThatCannotBeLeasedIsPassedOverWithTheReason) {
  ScopedLeaseDirectory leases;
  // The best GPU has no UUID (NVML reported none), and the next one's lock file is a directory.
  FakeNvmlMachine nvml(
      "gpu uuid= used_mib=0\n"
      "gpu uuid=GPU-1b2c3d4e-0000-4000-8000-000000000001 used_mib=1000\n"
      "gpu uuid=GPU-2c3d4e5f-0000-4000-8000-000000000002 used_mib=2000\n");
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::check_lease_directory();  // makes the directory, as a lease does (a look makes none)
  const std::string planted =
      leases.leases() + "/gpusel-GPU-1b2c3d4e-0000-4000-8000-000000000001." + std::to_string(geteuid()) + ".lock";
  ASSERT_EQ(mkdir(planted.c_str(), 0700), 0);
  gpusel::LeasedGpus picked;
  EXPECT_EQ(error_from([&] { picked = gpusel::lease_free_gpus(count(1)); }), "")
      << "a GPU that cannot be leased failed the whole lease";
  EXPECT_EQ(uuids(picked.gpus), std::vector<std::string>{"GPU-2c3d4e5f-0000-4000-8000-000000000002"});
  const std::string none = error_from([&] { (void)gpusel::lease_free_gpus(count(1)); });
  EXPECT_TRUE(contains(none, "0 of 3 GPUs fit")) << none;
  EXPECT_TRUE(contains(none, "cannot be leased: cannot lease a GPU without a UUID")) << none;
  EXPECT_TRUE(contains(none, "cannot be leased: its lease file " + planted + " is not a regular file")) << none;
  EXPECT_TRUE(contains(none, "leased by another job")) << none;
}

TEST(PickThroughNvml, RejectingLeasedGpusSaysWhyAsAReasonToSwitchOn) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  const gpusel::GpuLease held = gpusel::lease_gpu("GPU-33333333-aaaa-0000-0000-000000000000");
  const std::string planted =
      leases.leases() + "/gpusel-GPU-22222222-aaaa-0000-0000-000000000000." + std::to_string(geteuid()) + ".lock";
  ASSERT_EQ(mkdir(planted.c_str(), 0700), 0);
  std::vector<gpusel::Candidate> assessed =
      gpusel::assess(count(1), gpusel::visible_devices(gpusel::InventoryOptions::with_usage()));
  gpusel::reject_leased_gpus(assessed);
  ASSERT_EQ(assessed.size(), 4u);
  ASSERT_EQ(assessed[3].rejections.size(), 1u);
  EXPECT_EQ(assessed[3].rejections[0].reason, gpusel::RejectReason::leased);
  EXPECT_TRUE(contains(assessed[3].rejections[0].text, "leased by another job (pid "))
      << assessed[3].rejections[0].text;
  EXPECT_TRUE(assessed[2].rejected_for(gpusel::RejectReason::cannot_be_leased));
  EXPECT_TRUE(assessed[2].rejected_for(gpusel::RejectReason::compute_process)) << "its process, judged by assess";
  EXPECT_FALSE(assessed[0].rejected_for(gpusel::RejectReason::leased));
}

TEST(PickThroughNvml, ChooseAndLeaseLeasesFromTheVerdictsGivenPassingOverWhatCannotBeHad) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(
      "gpu uuid= used_mib=0\n"
      "gpu uuid=GPU-1b2c3d4e-0000-4000-8000-000000000001 used_mib=1000\n"
      "gpu uuid=GPU-2c3d4e5f-0000-4000-8000-000000000002 used_mib=2000\n"
      "gpu uuid=GPU-3d4e5f60-0000-4000-8000-000000000003 used_mib=3000\n");
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  std::vector<gpusel::Candidate> assessed =
      gpusel::assess(count(1), gpusel::visible_devices(gpusel::InventoryOptions::with_usage()));
  gpusel::reject_leased_gpus(assessed);
  ASSERT_EQ(assessed.size(), 4u);
  ASSERT_TRUE(assessed[0].fits() && assessed[1].fits() && assessed[2].fits() && assessed[3].fits());
  // Since the look another job leased GPU 1; and these verdicts say GPU 2 does not fit.
  const gpusel::GpuLease taken = gpusel::lease_gpu("GPU-1b2c3d4e-0000-4000-8000-000000000001");
  assessed[2].rejections.push_back({gpusel::RejectReason::excluded, "excluded by this test"});
  const gpusel::LeasedGpus got = gpusel::choose_and_lease(count(1), assessed);
  EXPECT_EQ(uuids(got.gpus), std::vector<std::string>{"GPU-3d4e5f60-0000-4000-8000-000000000003"})
      << "GPU 0 has no UUID, 1 was taken, 2 these verdicts reject: they are not judged again";
  const std::string none = error_from([&] { (void)gpusel::choose_and_lease(count(2), assessed); });
  EXPECT_TRUE(contains(none, "gpusel::pick: 1 of 4 GPUs fit, 2 are needed")) << none;
  EXPECT_TRUE(contains(none, "cannot be leased: cannot lease a GPU without a UUID")) << none;
  EXPECT_TRUE(
      contains(none, "GPU-1b2c3d4e-0000-4000-8000-000000000001), 139.4 GiB free, 0% utilized: leased by another job"))
      << none;
  EXPECT_TRUE(contains(none, "excluded by this test")) << none;
}

TEST(PickThroughNvml, UseFreeGpusOverTheWholeMachineLeavesTheAllocationAsAsked) {
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(4));
#endif
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "0,1");
  if (gpusel::cuda_started()) GTEST_SKIP() << "CUDA has started in this test process";
  gpusel::PickCriteria criteria = count(1);
  criteria.only_visible = false;
  const auto picked = gpusel::use_free_gpus(criteria);
  EXPECT_EQ(std::string(std::getenv("CUDA_VISIBLE_DEVICES")), "GPU-33333333-aaaa-0000-0000-000000000000");
}

TEST(PickThroughNvml, WithoutNvmlIsAnErrorThatSaysSo) {
  ScopedEnvironment nvml("GPUSEL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  const std::string message = error_from([] { (void)gpusel::pick(); });
  EXPECT_TRUE(contains(message, "gpusel::pick: cannot see the GPUs without NVML")) << message;
  EXPECT_TRUE(contains(message, "could not be loaded")) << message;
  EXPECT_TRUE(contains(message, "(the library GPUSEL_NVML_LIBRARY names)")) << message;
}

}  // namespace
