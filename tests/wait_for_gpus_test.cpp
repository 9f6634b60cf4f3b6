// Specification of waiting for free GPUs (include/gpusel/wait_for_gpus.hpp):
// lease_free_gpus(criteria, wait) and use_free_gpus(criteria, wait), end to end
// through the fake NVML, in line with other waiting processes (Note [Waiting in line]).
#include "gpusel/wait_for_gpus.hpp"

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "fake_nvml_machine.hpp"
#include "gpusel_test.hpp"
#include "lease_directory.hpp"
#include "pick_criteria_builders.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::FakeNvmlMachine;
using gpusel_test::ScopedEnvironment;
using gpusel_test::ScopedLeaseDirectory;

using gpusel_test::contains;
using gpusel_test::count;
using gpusel_test::error_from;

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

// --- waiting for GPUs: lease_free_gpus(criteria, wait) -----------------------------

// The GPUs of four_gpus() that fit `idle` (1 and 3), leased by "another job" here: a
// lease of this process excludes another of its own as another process's would.
struct HeldByAnotherJob {
  gpusel::GpuLease one = gpusel::lease_gpu("GPU-11111111-aaaa-0000-0000-000000000000");
  gpusel::GpuLease three = gpusel::lease_gpu("GPU-33333333-aaaa-0000-0000-000000000000");
};

gpusel::PickCriteria idle_gpu() {
  gpusel::PickCriteria idle = count(1);
  idle.max_utilization = 10;  // GPU 0 is 90% utilized; GPU 2 runs a process nobody here can see
  return idle;
}

gpusel::WaitForGpus quick_wait(std::optional<std::chrono::milliseconds> at_most) {
  gpusel::WaitForGpus wait;
  wait.at_most = at_most;
  wait.interval = std::chrono::milliseconds(20);
  return wait;
}

// The files of the lease directory whose name starts with `prefix`.
std::vector<std::string> files_named(const std::string& directory, const std::string& prefix) {
  std::vector<std::string> names;
  if (DIR* entries = opendir(directory.c_str())) {
    while (const dirent* entry = readdir(entries))
      if (std::string(entry->d_name).rfind(prefix, 0) == 0) names.emplace_back(entry->d_name);
    closedir(entries);
  }
  return names;
}

TEST(WaitForGpus, LeasesTheGpusOnceAnotherJobsLeaseEndsSayingOnceWhyItWaits) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  HeldByAnotherJob held;
  gpusel::WaitForGpus wait = quick_wait(std::chrono::seconds(30));
  std::vector<std::string> said;
  int looks = 0;
  wait.on_wait = [&said](const std::string& why) { said.push_back(why); };
  wait.read_devices = [&looks, &held] {
    if (++looks == 5) held.three.release();  // the other job ends
    return gpusel::visible_devices(gpusel::InventoryOptions::with_usage());
  };
  const gpusel::LeasedGpus leased = gpusel::lease_free_gpus(idle_gpu(), wait);
  EXPECT_EQ(leased.lease.uuids(), std::vector<std::string>{"GPU-33333333-aaaa-0000-0000-000000000000"});
  EXPECT_EQ(looks, 5);
  ASSERT_EQ(said.size(), 1u) << "said once, however long it waits";
  EXPECT_TRUE(contains(said[0], "0 of 4 GPUs fit")) << said[0];
  EXPECT_TRUE(files_named(leases.leases(), "wait-").empty()) << "its place in line is given up once it leased";
}

TEST(WaitForGpus, GivesUpOnceTheTimeIsUpSayingWhyAndHoldingNothing) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  HeldByAnotherJob held;
  try {
    (void)gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::milliseconds(100)));
    ADD_FAILURE() << "expected WaitTimedOut";
  } catch (const gpusel::WaitTimedOut& error) {
    EXPECT_TRUE(contains(error.what(), "leased by another job")) << error.what();
  }
  EXPECT_TRUE(files_named(leases.leases(), "wait-").empty()) << "its place in line is given up";
  EXPECT_THROW((void)gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::milliseconds(0))),
               gpusel::WaitTimedOut)
      << "no time to wait: one look";
}

TEST(WaitForGpus, FailsAtOnceOnWhatNoWaitCanFix) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::PickCriteria nothing_here = count(1);
  nothing_here.exclude = {"9"};
  const auto started = std::chrono::steady_clock::now();
  try {
    (void)gpusel::lease_free_gpus(nothing_here, quick_wait(std::chrono::seconds(10)));
    ADD_FAILURE() << "expected Error";
  } catch (const gpusel::WaitTimedOut& error) {
    ADD_FAILURE() << "waited for what no wait can fix: " << error.what();
  } catch (const gpusel::Error& error) {
    EXPECT_TRUE(contains(error.what(), "cannot exclude \"9\"")) << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  FakeNvmlMachine no_uuid("gpu uuid=\n");
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::lease_free_gpus(count(1), quick_wait(std::nullopt)); }),
                       "NVML reports no UUID for it"));
}

TEST(WaitForGpus, AnEarlierWaiterGoesFirstButHoldsUpNoOneWhoDoesNotWait) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::check_lease_directory();  // makes the directory
  // A ticket of a job that arrived first and waits still (locked: Note [Waiting in line]).
  const std::string ticket = leases.leases() + "/wait-1-1." + std::to_string(geteuid()) + ".ticket";
  const int earlier = open(ticket.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(earlier, 0);
  ASSERT_EQ(flock(earlier, LOCK_EX | LOCK_NB), 0);
  const std::string message =
      error_from([] { (void)gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::milliseconds(100))); });
  EXPECT_TRUE(contains(message, "another job waits for GPUs first (pid 1, waiting for ")) << message;
  EXPECT_EQ(gpusel::lease_free_gpus(idle_gpu()).gpus.size(), 1u) << "a job that does not wait takes what is free";
  close(earlier);  // that job ended
  EXPECT_EQ(gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::seconds(10))).gpus.size(), 1u);
}

TEST(WaitForGpus, UseFreeGpusWaitsThenMakesTheGpusVisible) {
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(4));
#endif
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
  if (gpusel::cuda_started()) {
    EXPECT_TRUE(contains(error_from([] { (void)gpusel::use_free_gpus(idle_gpu(), quick_wait(std::nullopt)); }),
                         "CUDA has already started"));
    return;
  }
  const auto picked = gpusel::use_free_gpus(idle_gpu(), quick_wait(std::chrono::seconds(10)));
  ASSERT_EQ(picked.gpus.size(), 1u);
  ASSERT_NE(std::getenv("CUDA_VISIBLE_DEVICES"), nullptr);
  EXPECT_EQ(std::string(std::getenv("CUDA_VISIBLE_DEVICES")), "GPU-33333333-aaaa-0000-0000-000000000000");
}

}  // namespace
