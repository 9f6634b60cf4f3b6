// Specification of picking free GPUs (include/gpusel/machine/pick.hpp). The choice is
// pure and checked on machines written down here; pick() and use_free_gpus() are
// checked end to end through the fake NVML, on the emulated runtime (which
// counts CUDA calls: picking makes none) and on the real one.
#include "gpusel/machine/pick.hpp"

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "fake_nvml_machine.hpp"
#include "gpusel/machine/detail/picking/connected_sets.hpp"
#include "gpusel/machine/physical_order.hpp"
#include "gpusel_test.hpp"
#include "lease_directory.hpp"
#include "pick_criteria_builders.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::FakeNvmlMachine;
using gpusel_test::ScopedEnvironment;
using gpusel_test::ScopedLeaseDirectory;

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

using gpusel_test::connected;
using gpusel_test::contains;
using gpusel_test::count;

using gpusel_test::error_from;

// A GPU as NVML would describe it: 141 GiB in all, `free_gib` of it free.
gpusel::Gpu gpu(int nvml_index, std::uint64_t free_gib, int utilization, std::string name = "NVIDIA H200",
                int compute_capability = 90) {
  gpusel::Gpu result;
  result.nvml_index = nvml_index;
  result.uuid = "GPU-" + std::to_string(nvml_index) + "aaaaaaa-0000-0000-0000-000000000000";
  result.name = std::move(name);
  result.pci_bus_id = "00000000:" + std::to_string(17 + nvml_index) + ":00.0";
  result.compute_capability_major = compute_capability / 10;
  result.compute_capability_minor = compute_capability % 10;
  result.memory_total_bytes = 141 * kGiB;
  result.memory_free_bytes = free_gib * kGiB;
  result.memory_used_bytes = (141 - free_gib) * kGiB;
  result.utilization_percent = utilization;
  result.processes = std::vector<gpusel::GpuProcess>{};
  return result;
}

gpusel::GpuProcess process_of(const std::string& user, unsigned pid = 4242) {
  gpusel::GpuProcess process;
  process.pid = pid;
  process.user = user;
  process.command = user.empty() ? "" : "python3";
  process.used_memory_bytes = 2 * kGiB;
  return process;
}

// This process's view of a machine with `gpus`, under these variables (nullopt: unset).
gpusel::DeviceMap machine(std::vector<gpusel::Gpu> gpus, std::optional<std::string> visible = std::nullopt,
                          std::optional<std::string> order = std::nullopt) {
  gpusel::DeviceMap map;
  map.inventory.status = gpusel::InventoryStatus::ok;
  map.inventory.gpus = std::move(gpus);
  map.order = gpusel::cuda_physical_order(map.inventory, order);
  map.visible = gpusel::parse_visible_devices(visible, map.order.uuids(map.inventory), order);
  return map;
}

std::vector<int> indices(const std::vector<gpusel::Candidate>& candidates) {
  std::vector<int> result;
  for (const gpusel::Candidate& candidate : candidates) result.push_back(candidate.physical_index);
  return result;
}

// --- choosing among the GPUs that fit ----------------------------------------------

TEST(Pick, TakesTheGpuWithTheMostFreeMemoryByDefault) {
  const auto map = machine({gpu(0, 20, 0), gpu(1, 120, 50), gpu(2, 80, 0)});
  EXPECT_EQ(indices(gpusel::pick({}, map, "alice")), std::vector<int>{1});
  EXPECT_EQ(indices(gpusel::pick(count(3), map, "alice")), (std::vector<int>{1, 2, 0}));
}

TEST(Pick, OrdersByLeastUtilizationOrByIndexWhenAsked) {
  const auto map = machine({gpu(0, 20, 30), gpu(1, 120, 50), gpu(2, 80, 0), gpu(3, 90, 30)});
  gpusel::PickCriteria criteria = count(4);
  criteria.order = gpusel::PickOrder::least_utilized;
  EXPECT_EQ(indices(gpusel::pick(criteria, map, "alice")), (std::vector<int>{2, 3, 0, 1}))
      << "ties in utilization go to the GPU with more free memory";
  criteria.order = gpusel::PickOrder::index;
  EXPECT_EQ(indices(gpusel::pick(criteria, map, "alice")), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Pick, TiesGoToTheLowerIndex) {
  const auto map = machine({gpu(0, 100, 0), gpu(1, 100, 0), gpu(2, 100, 0)});
  EXPECT_EQ(indices(gpusel::pick(count(3), map, "alice")), (std::vector<int>{0, 1, 2}));
}

TEST(Pick, ReturnsAtMostTheCountAskedFor) {
  const auto map = machine({gpu(0, 100, 0), gpu(1, 110, 0), gpu(2, 120, 0), gpu(3, 130, 0)});
  EXPECT_EQ(indices(gpusel::pick(count(2), map, "alice")), (std::vector<int>{3, 2})) << "at_most defaults to at_least";
  EXPECT_EQ(indices(gpusel::pick(count(1, 3), map, "alice")), (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(gpusel::pick(count(1, gpusel::PickCriteria::all), map, "alice").size(), 4u);
  EXPECT_TRUE(gpusel::pick(count(0), map, "alice").empty());
}

TEST(Pick, RejectsGpusWithTooLittleFreeMemoryWrittenAsBytesOrText) {
  const auto map = machine({gpu(0, 7, 0), gpu(1, 8, 0), gpu(2, 100, 0)});
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.min_free_memory = "8GiB";
  EXPECT_EQ(indices(gpusel::pick(criteria, map, "alice")), (std::vector<int>{2, 1}));
  criteria.min_free_memory = 9 * kGiB;
  EXPECT_EQ(indices(gpusel::pick(criteria, map, "alice")), std::vector<int>{2});
  const auto verdicts = gpusel::assess(criteria, map, "alice");
  EXPECT_EQ(verdicts[0].rejected_because, std::vector<std::string>{"only 7.0 GiB free, 9.0 GiB needed"});
}

TEST(Pick, RejectsBusyGpus) {
  const auto map = machine({gpu(0, 100, 11), gpu(1, 100, 10), gpu(2, 100, 95)});
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.max_utilization = 10;
  EXPECT_EQ(indices(gpusel::pick(criteria, map, "alice")), std::vector<int>{1});
  EXPECT_EQ(gpusel::assess(criteria, map, "alice")[2].rejected_because,
            std::vector<std::string>{"95% utilized, at most 10% allowed"});
}

TEST(Pick, RejectsGpusWhereAnotherUserRunsAComputeProcess) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0), gpu(2, 90, 0)};
  gpus[0].processes->push_back(process_of("bob", 777));
  gpus[1].processes->push_back(process_of("alice"));
  const auto map = machine(gpus);
  gpusel::PickCriteria own = count(1, gpusel::PickCriteria::all);
  own.share_own = true;
  EXPECT_EQ(indices(gpusel::pick(own, map, "alice")), (std::vector<int>{1, 2}))
      << "with share_own, alice's own process does not disqualify GPU 1";
  EXPECT_EQ(gpusel::assess({}, map, "alice")[0].rejected_because,
            std::vector<std::string>{"another user's compute process runs on it (pid 777 of bob (python3), 2.0 GiB)"});

  gpusel::PickCriteria sharing = count(3);
  sharing.allow_other_users = true;
  EXPECT_EQ(indices(gpusel::pick(sharing, map, "alice")), (std::vector<int>{0, 1, 2}));
}

TEST(Pick, AGpuWhereThisUsersOwnProcessRunsIsBusyUnlessSharingOwnGpusIsAsked) {
  // alice's own job keeps GPU 0 busy (130 of 141 GiB free is beside the point: the job may grow).
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].processes->push_back(process_of("alice", 4242));
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, "alice")), std::vector<int>{1});
  EXPECT_EQ(
      gpusel::assess({}, map, "alice")[0].rejected_because,
      std::vector<std::string>{"this user's own compute process runs on it (pid 4242 of alice (python3), 2.0 GiB)"});
  gpusel::PickCriteria sharing;
  sharing.share_own = true;
  EXPECT_EQ(indices(gpusel::pick(sharing, map, "alice")), std::vector<int>{0});
  EXPECT_TRUE(contains(gpusel::describe(gpusel::PickCriteria{}), "no compute process (this user's own included)"));
  EXPECT_TRUE(contains(gpusel::describe(sharing), "no other user's compute process"));
}

TEST(Pick, TheCallingProcessItselfNeverMakesItsGpuBusy) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].processes->push_back(process_of("alice", 4242));
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, "alice", 4242)), std::vector<int>{0}) << "pid 4242 is the caller";
  EXPECT_TRUE(gpusel::assess({}, map, "alice", 4242)[0].fits());
  EXPECT_FALSE(gpusel::assess({}, map, "alice", 4243)[0].fits());
}

// --- the driver's own exclusivity: compute modes (Note [Compute modes in picking]) ----

TEST(Pick, NeverPicksAProhibitedGpu) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].compute_mode = gpusel::ComputeMode::prohibited;
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, "alice")), std::vector<int>{1});
  EXPECT_EQ(gpusel::assess({}, map, "alice")[0].rejected_because,
            std::vector<std::string>{"its compute mode is Prohibited: CUDA creates no context on it"});
  gpusel::PickCriteria anything = count(2);
  anything.allow_other_users = true;
  EXPECT_THROW((void)gpusel::pick(anything, map, "alice"), gpusel::Error) << "only one GPU fits";
}

TEST(Pick, AnExclusiveProcessGpuWithAnyComputeProcessIsNeverPickedEvenWhenSharingIsAllowed) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 120, 0), gpu(2, 100, 0)};
  gpus[0].compute_mode = gpusel::ComputeMode::exclusive_process;
  gpus[0].processes->push_back(process_of("bob", 777));
  gpus[1].compute_mode = gpusel::ComputeMode::exclusive_process;
  gpus[1].processes->push_back(process_of("alice", 4242));
  const auto map = machine(gpus);
  gpusel::PickCriteria sharing = count(1, gpusel::PickCriteria::all);
  sharing.share_own = true;
  sharing.allow_other_users = true;
  EXPECT_EQ(indices(gpusel::pick(sharing, map, "alice")), std::vector<int>{2});
  EXPECT_EQ(gpusel::assess(sharing, map, "alice")[0].rejected_because,
            std::vector<std::string>{"its compute mode is Exclusive_Process and a compute process runs on it (pid 777 "
                                     "of bob (python3), 2.0 GiB): CUDA would refuse this process a context, shared "
                                     "or not"});
}

TEST(Pick, AnIdleExclusiveGpuFitsAndSoDoesOneWhoseOnlyProcessIsTheCaller) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 120, 0)};
  gpus[0].compute_mode = gpusel::ComputeMode::exclusive_process;
  gpus[1].compute_mode = gpusel::ComputeMode::exclusive_thread;
  gpus[1].processes->push_back(process_of("alice", 4242));
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick(count(2), map, "alice", 4242)), (std::vector<int>{0, 1}));
  EXPECT_FALSE(gpusel::assess({}, map, "alice", 99)[1].fits()) << "pid 4242 is not the caller here";
}

TEST(Pick, AnExclusiveGpuWhoseProcessesAreUnknownIsNeverPicked) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0)};
  gpus[0].compute_mode = gpusel::ComputeMode::exclusive_process;
  gpus[0].processes.reset();
  const auto map = machine(gpus);
  gpusel::PickCriteria sharing;
  sharing.allow_other_users = true;  // which skips the process check itself
  EXPECT_EQ(gpusel::assess(sharing, map, "alice")[0].rejected_because,
            std::vector<std::string>{"its compute mode is Exclusive_Process and its compute processes are unknown "
                                     "(NVML could not list them)"});
}

TEST(ComputeMode, IsDescribedInNvidiaSmisWords) {
  EXPECT_STREQ(gpusel::describe(gpusel::ComputeMode::default_mode), "Default");
  EXPECT_STREQ(gpusel::describe(gpusel::ComputeMode::exclusive_thread), "Exclusive_Thread");
  EXPECT_STREQ(gpusel::describe(gpusel::ComputeMode::prohibited), "Prohibited");
  EXPECT_STREQ(gpusel::describe(gpusel::ComputeMode::exclusive_process), "Exclusive_Process");
}

TEST(Assess, SaysWhichProcessesMadeAGpuBusy) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].processes->push_back(process_of("alice", 4242));
  gpus[0].processes->push_back(process_of("bob", 777));
  gpus[0].processes->push_back(process_of("alice", 99));  // the caller
  const auto map = machine(gpus);
  const auto verdicts = gpusel::assess({}, map, "alice", 99);
  ASSERT_EQ(verdicts[0].busy_processes.size(), 2u);
  EXPECT_EQ(verdicts[0].busy_processes[0].pid, 4242u);
  EXPECT_EQ(verdicts[0].busy_processes[1].pid, 777u);
  EXPECT_TRUE(verdicts[1].busy_processes.empty());
  gpusel::PickCriteria sharing;
  sharing.share_own = true;
  ASSERT_EQ(gpusel::assess(sharing, map, "alice", 99)[0].busy_processes.size(), 1u);
  EXPECT_EQ(gpusel::assess(sharing, map, "alice", 99)[0].busy_processes[0].pid, 777u);
}

TEST(Pick, AProcessWhoseOwnerCannotBeSeenCountsAsAnotherUsers) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].processes->push_back(process_of("", 31337));  // in another container
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, "alice")), std::vector<int>{1});
  EXPECT_EQ(gpusel::assess({}, map, "alice")[0].rejected_because,
            std::vector<std::string>{
                "another user's compute process runs on it (pid 31337, owner unknown: not visible from this PID "
                "namespace, 2.0 GiB)"});
}

TEST(Pick, RejectsWhatNvmlCouldNotTellOnlyWhenACriterionNeedsIt) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].memory_free_bytes.reset();
  gpus[0].utilization_percent.reset();
  gpus[0].processes.reset();
  const auto map = machine(gpus);
  gpusel::PickCriteria criteria;
  criteria.min_free_memory = "1GiB";
  criteria.max_utilization = 50;
  EXPECT_EQ(gpusel::assess(criteria, map, "alice")[0].rejected_because,
            (std::vector<std::string>{"its free memory is unknown (NVML could not tell)",
                                      "its utilization is unknown (NVML could not tell)",
                                      "its compute processes are unknown (NVML could not list them)"}));
  gpusel::PickCriteria lenient = count(2);
  lenient.allow_other_users = true;
  EXPECT_EQ(indices(gpusel::pick(lenient, map, "alice")), (std::vector<int>{1, 0})) << "unknown free memory sorts last";
}

TEST(Pick, NeverPicksAGpuInMigModeWhole) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].mig_enabled = true;  // and no MIG instance on it
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, "alice")), std::vector<int>{1});
  ASSERT_EQ(gpusel::assess({}, map, "alice")[0].rejected_because.size(), 1u);
  EXPECT_TRUE(contains(gpusel::assess({}, map, "alice")[0].rejected_because[0],
                       "MIG mode is enabled and NVML lists no MIG instance on it"));
}

// A MIG instance of GPU `gpu_index`: GPU instance `gi`, compute instance `ci`, `free_gib` of 35 GiB free.
gpusel::MigInstance mig_instance(int gpu_index, unsigned gi, unsigned ci, std::uint64_t free_gib) {
  gpusel::MigInstance instance;
  instance.uuid = "MIG-" + std::to_string(gpu_index) + std::to_string(gi) + std::to_string(ci) +
                  "bbbbb-0000-0000-0000-000000000000";
  instance.gpu_instance_id = gi;
  instance.compute_instance_id = ci;
  instance.memory_total_bytes = 35 * kGiB;
  instance.memory_free_bytes = free_gib * kGiB;
  instance.memory_used_bytes = (35 - free_gib) * kGiB;
  instance.processes = std::vector<gpusel::GpuProcess>{};
  return instance;
}

// GPU 0 whole (`free_gib` free) and GPU 1 in MIG mode with instances of 20 and 30 GiB free.
std::vector<gpusel::Gpu> whole_and_mig(std::uint64_t free_gib = 10) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, free_gib, 0), gpu(1, 130, 0)};
  gpus[1].mig_enabled = true;
  gpus[1].utilization_percent.reset();  // NVML does not measure a GPU in MIG mode
  gpus[1].mig_instances = {mig_instance(1, 1, 0, 20), mig_instance(1, 2, 0, 30)};
  return gpus;
}

std::vector<std::string> uuids(const std::vector<gpusel::Candidate>& candidates) {
  std::vector<std::string> result;
  for (const gpusel::Candidate& candidate : candidates) result.push_back(candidate.uuid());
  return result;
}

TEST(Pick, EachMigInstanceIsOneGpuForTheCountNamedByItsMigUuid) {
  const auto map = machine(whole_and_mig());
  EXPECT_EQ(gpusel::assess({}, map, "alice").size(), 3u) << "GPU 0, and GPU 1's two instances in its place";
  const auto picked = gpusel::pick(count(3), map, "alice");
  EXPECT_EQ(uuids(picked), (std::vector<std::string>{"MIG-120bbbbb-0000-0000-0000-000000000000",
                                                     "MIG-110bbbbb-0000-0000-0000-000000000000",
                                                     "GPU-0aaaaaaa-0000-0000-0000-000000000000"}))
      << "most free memory first, the instances' own";
  ASSERT_TRUE(picked[0].mig_instance.has_value());
  EXPECT_EQ(picked[0].physical_index, 1) << "its GPU's";
  EXPECT_FALSE(picked[2].mig_instance.has_value());
  EXPECT_TRUE(contains(gpusel::describe(picked[0]),
                       "MIG instance MIG-120bbbbb-0000-0000-0000-000000000000 (GI 2, CI 0) of GPU 1 (nvidia-smi 1, "
                       "NVIDIA H200, GPU-1aaaaaaa-0000-0000-0000-000000000000), 30.0 GiB free"))
      << gpusel::describe(picked[0]);
}

TEST(Pick, JudgesAMigInstanceByItsOwnMemoryAndProcesses) {
  std::vector<gpusel::Gpu> gpus = whole_and_mig();
  gpus[1].mig_instances[1].processes->push_back(process_of("bob"));
  const auto map = machine(gpus);
  gpusel::PickCriteria criteria = count(1);
  criteria.min_free_memory = "15GiB";
  const auto assessed = gpusel::assess(criteria, map, "alice");
  EXPECT_EQ(assessed[0].rejected_because, (std::vector<std::string>{"only 10.0 GiB free, 15.0 GiB needed"}));
  EXPECT_TRUE(assessed[1].fits());
  ASSERT_EQ(assessed[2].rejected_because.size(), 1u);
  EXPECT_TRUE(contains(assessed[2].rejected_because[0], "another user's compute process runs on it (pid 4242 of bob"));
  criteria.max_utilization = 50;
  EXPECT_TRUE(contains(gpusel::assess(criteria, map, "alice")[1].rejected_because.back(),
                       "its utilization is unknown (NVML does not measure MIG instances)"));
}

TEST(Pick, AMigInstanceIsVisibleWhenCudaVisibleDevicesNamesItOrItsGpu) {
  const auto by_uuid = machine(whole_and_mig(), "MIG-110bbbbb");
  EXPECT_EQ(uuids(gpusel::pick(count(1, gpusel::PickCriteria::all), by_uuid, "alice")),
            std::vector<std::string>{"MIG-110bbbbb-0000-0000-0000-000000000000"});
  const auto by_gpu = machine(whole_and_mig(), "1");
  EXPECT_EQ(gpusel::pick(count(1, gpusel::PickCriteria::all), by_gpu, "alice").size(), 2u)
      << "both instances of GPU 1: which one CUDA shows is CUDA's to decide";
}

TEST(Pick, ExcludesAMigInstanceByItsUuidPrefixAndAllOfThemByTheirGpu) {
  const auto map = machine(whole_and_mig());
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.exclude = {"MIG-120b"};
  EXPECT_EQ(uuids(gpusel::pick(criteria, map, "alice")),
            (std::vector<std::string>{"MIG-110bbbbb-0000-0000-0000-000000000000",
                                      "GPU-0aaaaaaa-0000-0000-0000-000000000000"}));
  criteria.exclude = {"1"};
  EXPECT_EQ(indices(gpusel::pick(criteria, map, "alice")), std::vector<int>{0});
  criteria.exclude = {"MIG-9"};
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::assess(criteria, map, "alice"); }), "no MIG instance has that UUID"));
}

// Four GPUs: 0-1 and 2-3 joined by NVLink, each pair on a NUMA node of its own; by
// free memory 0 is best, then 2, 1, 3.
std::vector<gpusel::Gpu> two_nvlink_pairs() {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 140, 0), gpu(1, 120, 0), gpu(2, 130, 0), gpu(3, 110, 0)};
  for (gpusel::Gpu& each : gpus) {
    each.links.assign(4, gpusel::GpuLink::system);
    each.links[static_cast<std::size_t>(each.nvml_index)] = gpusel::GpuLink::unknown;
    each.numa_node = each.nvml_index / 2;
  }
  gpus[0].links[1] = gpus[1].links[0] = gpusel::GpuLink::nvlink;
  gpus[2].links[3] = gpus[3].links[2] = gpusel::GpuLink::nvlink;
  return gpus;
}

TEST(PickConnected, PrefersGpusJoinedByNvlinkOverTheMostFreeMemory) {
  const auto map = machine(two_nvlink_pairs());
  EXPECT_EQ(indices(gpusel::pick(count(2), map, "alice")), (std::vector<int>{0, 2})) << "without it";
  const auto picked = gpusel::pick(connected(2), map, "alice");
  EXPECT_EQ(indices(picked), (std::vector<int>{0, 1}));
  EXPECT_EQ(gpusel::weakest_link(picked), gpusel::GpuLink::nvlink);
  EXPECT_EQ(gpusel::describe_connection(picked, connected(2)), "GPUs 0 and 1 are joined by NVLink");
  gpusel::PickCriteria without_zero = connected(2);
  without_zero.exclude = {"0"};
  EXPECT_EQ(indices(gpusel::pick(without_zero, map, "alice")), (std::vector<int>{2, 3}));
}

TEST(PickConnected, FallsBackToOnePcieSwitchThenOneNumaNode) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 140, 0), gpu(1, 130, 0), gpu(2, 120, 0)};
  for (gpusel::Gpu& each : gpus) each.links.assign(3, gpusel::GpuLink::unknown);
  gpus[0].links[1] = gpus[1].links[0] = gpusel::GpuLink::numa_node;
  gpus[0].links[2] = gpus[2].links[0] = gpusel::GpuLink::pcie_switch;
  gpus[1].links[2] = gpus[2].links[1] = gpusel::GpuLink::system;
  EXPECT_EQ(indices(gpusel::pick(connected(2), machine(gpus), "alice")), (std::vector<int>{0, 2}));
  gpus[0].links[2] = gpus[2].links[0] = gpusel::GpuLink::system;
  EXPECT_EQ(indices(gpusel::pick(connected(2), machine(gpus), "alice")), (std::vector<int>{0, 1}));
}

TEST(PickConnected, WhenNoConnectedSetFitsPicksTheBestThatDoesAndSaysSo) {
  const auto map = machine(two_nvlink_pairs());
  gpusel::PickCriteria criteria = connected(2);
  criteria.exclude = {"1", "3"};
  const auto picked = gpusel::pick(criteria, map, "alice");
  EXPECT_EQ(indices(picked), (std::vector<int>{0, 2}));
  EXPECT_EQ(gpusel::weakest_link(picked), gpusel::GpuLink::system);
  EXPECT_EQ(gpusel::describe_connection(picked, criteria),
            "GPUs 0 and 2 are across NUMA nodes (no 2 of the GPUs that fit are connected more closely)");
  EXPECT_EQ(gpusel::describe_connection(picked, count(2)), "GPUs 0 and 2 are across NUMA nodes")
      << "without --connected nothing closer was looked for";
  EXPECT_EQ(gpusel::weakest_link({picked[0]}), std::nullopt);
}

TEST(PickConnected, CountsMigInstancesAsJoinedByNothing) {
  const auto picked = gpusel::pick(connected(2), machine(whole_and_mig()), "alice");
  EXPECT_EQ(gpusel::weakest_link(picked), gpusel::GpuLink::unknown);
  EXPECT_TRUE(contains(gpusel::describe_connection(picked, connected(2)), "MIG instances have no peer-to-peer path"));
}

// The search beneath PickPlacement::connected, which knows the GPUs by rank only
// (gpusel/machine/detail/picking/connected_sets.hpp).
TEST(ConnectedSet, TakesTheNearestSetByRankAndEveryGpuWhenThereAreTooFew) {
  using gpusel::GpuLink;
  // Ranked 0 (best) to 3: 1 and 3 joined by NVLink, every other pair across NUMA nodes.
  std::vector<std::vector<GpuLink>> links(4, std::vector<GpuLink>(4, GpuLink::system));
  links[1][3] = links[3][1] = GpuLink::nvlink;
  EXPECT_EQ(gpusel::detail::connected_set(links, 2), (std::vector<std::size_t>{1, 3}));
  EXPECT_EQ(gpusel::detail::connected_set(links, 3), (std::vector<std::size_t>{0, 1, 2}))
      << "no three are nearer than across nodes: the best three";
  EXPECT_EQ(gpusel::detail::connected_set(links, 5), (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_TRUE(gpusel::detail::connected_set({}, 2).empty());
}

TEST(Pick, ExcludesGpusByNvidiaSmiNumberOrUuidPrefix) {
  const auto map = machine({gpu(0, 130, 0), gpu(1, 120, 0), gpu(2, 110, 0), gpu(3, 100, 0)});
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.exclude = {"0", "GPU-2AAA"};
  EXPECT_EQ(indices(gpusel::pick(criteria, map, "alice")), (std::vector<int>{1, 3})) << "UUID prefixes ignore case";
  EXPECT_EQ(gpusel::assess(criteria, map, "alice")[0].rejected_because,
            std::vector<std::string>{"excluded (\"0\" names it)"});
  EXPECT_EQ(gpusel::assess(criteria, map, "alice")[2].rejected_because,
            std::vector<std::string>{"excluded (\"GPU-2AAA\" names it)"});
}

TEST(Pick, AnExclusionOfAGpuThisProcessCannotSeeIsAnError) {
  // CUDA_VISIBLE_DEVICES=2,3: GPU 1 is no candidate, so "--exclude 1" is a mistake (a typo, or CUDA's numbers
  // taken for this process's cuda:N), not a no-op.
  const auto map = machine({gpu(0, 130, 0), gpu(1, 120, 0), gpu(2, 110, 0), gpu(3, 100, 0)}, "2,3");
  gpusel::PickCriteria criteria;
  for (const std::string name : {"1", "GPU-1aaa", "smi:0"}) {
    criteria.exclude = {name};
    const std::string message = error_from([&] { (void)gpusel::assess(criteria, map, "alice"); });
    EXPECT_TRUE(contains(message, "cannot exclude \"" + name + "\": it names GPU ")) << message;
    EXPECT_TRUE(contains(message, "which CUDA_VISIBLE_DEVICES=2,3 hides, so it is no candidate anyway")) << message;
  }
  criteria.exclude = {"2"};
  EXPECT_EQ(indices(gpusel::pick(criteria, map, "alice")), std::vector<int>{3});
  criteria.only_visible = false;  // the whole machine: every GPU is a candidate, so each may be excluded
  criteria.exclude = {"1"};
  EXPECT_EQ(indices(gpusel::pick(criteria, map, "alice")), std::vector<int>{0});
  // A MIG instance that CUDA_VISIBLE_DEVICES hides, likewise.
  const auto mig = machine(whole_and_mig(), "0,MIG-110bbbbb");
  gpusel::PickCriteria instance;
  instance.exclude = {"MIG-120b"};
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::assess(instance, mig, "alice"); }),
                       "which CUDA_VISIBLE_DEVICES=0,MIG-110bbbbb hides"));
  instance.exclude = {"MIG-110b"};
  EXPECT_EQ(gpusel::assess(instance, mig, "alice")[1].rejected_because,
            std::vector<std::string>{"excluded (\"MIG-110b\" names it)"});
}

TEST(Pick, AnExclusionThatNamesNoGpuIsAnError) {
  const auto map = machine({gpu(0, 130, 0), gpu(1, 120, 0)});
  gpusel::PickCriteria criteria;
  for (const std::string name : {"2", "GPU-9", "gpu-0", "", "-1", "GPU-"}) {
    criteria.exclude = {name};
    const std::string message = error_from([&] { (void)gpusel::pick(criteria, map, "alice"); });
    EXPECT_TRUE(contains(message, "gpusel::pick: cannot exclude \"" + name + "\"")) << message;
  }
  criteria.exclude = {"2"};
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::pick(criteria, map, "alice"); }),
                       "there is no GPU with that number (2 GPUs)"));
  criteria.exclude = {"GPU-"};
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::pick(criteria, map, "alice"); }), "neither a number nor a GPU UUID"));
}

TEST(Pick, ExcludesByTheNumbersPickPrintsAndNvidiaSmisWrittenSmi) {
  // nvidia-smi 0 is an A100, 1 an H200; under FASTEST_FIRST CUDA's physical 0 is the H200.
  const auto map = machine({gpu(0, 70, 0, "NVIDIA A100-SXM4-80GB", 80), gpu(1, 130, 0)});
  const auto printed = gpusel::pick({}, map, "alice");
  ASSERT_EQ(indices(printed), std::vector<int>{0});
  gpusel::PickCriteria criteria;
  criteria.exclude = {std::to_string(printed[0].physical_index)};
  const auto next = gpusel::pick(criteria, map, "alice");
  EXPECT_EQ(next[0].gpu.name, "NVIDIA A100-SXM4-80GB") << "excluding what pick printed excludes that GPU";
  criteria.exclude = {"smi:0"};
  EXPECT_EQ(gpusel::pick(criteria, map, "alice")[0].gpu.name, "NVIDIA H200") << "smi:0 is nvidia-smi's 0, the A100";
  criteria.exclude = {"smi:2"};
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::pick(criteria, map, "alice"); }), "nvidia-smi numbers no GPU so"));
  criteria.exclude = {"smi:"};
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::pick(criteria, map, "alice"); }), "cannot exclude \"smi:\""));
}

TEST(Pick, FailsUnderAnInvalidCudaDeviceOrderAsTheRuntimeWould) {
  const auto map = machine({gpu(0, 130, 0), gpu(1, 120, 0)}, std::nullopt, "pci_bus_id");
  const std::string message = error_from([&] { (void)gpusel::pick({}, map, "alice"); });
  EXPECT_TRUE(contains(message, "0 of 2 GPUs fit")) << message;
  EXPECT_TRUE(
      contains(message,
               "CUDA_DEVICE_ORDER=pci_bus_id is neither FASTEST_FIRST nor PCI_BUS_ID, so the CUDA runtime fails "
               "with cudaErrorInvalidDevice"))
      << message;
  gpusel::PickCriteria whole_machine;
  whole_machine.only_visible = false;
  EXPECT_FALSE(error_from([&] { (void)gpusel::pick(whole_machine, map, "alice"); }).empty())
      << "the order matters on the whole machine too";
}

TEST(Pick, AnAmbiguousUuidPrefixIsAnError) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 120, 0)};
  gpus[1].uuid = "GPU-0aaaaaab-0000-0000-0000-000000000000";
  gpusel::PickCriteria criteria;
  criteria.exclude = {"GPU-0aaa"};
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::pick(criteria, machine(gpus), "alice"); }), "the prefix matches 2 GPUs"));
}

TEST(Pick, ChoosesOnlyAmongTheGpusCudaVisibleDevicesShows) {
  // Slurm gave this job GPUs 1 and 3.
  const auto map = machine({gpu(0, 140, 0), gpu(1, 100, 0), gpu(2, 140, 0), gpu(3, 120, 0)}, "1,3");
  EXPECT_EQ(indices(gpusel::pick(count(1, gpusel::PickCriteria::all), map, "alice")), (std::vector<int>{3, 1}));
  EXPECT_EQ(gpusel::assess({}, map, "alice")[0].rejected_because,
            std::vector<std::string>{"hidden by CUDA_VISIBLE_DEVICES=1,3"});
  gpusel::PickCriteria whole_machine = count(1, gpusel::PickCriteria::all);
  whole_machine.only_visible = false;
  EXPECT_EQ(indices(gpusel::pick(whole_machine, map, "alice")), (std::vector<int>{0, 2, 3, 1}));
}

TEST(Pick, ReportsCudasPhysicalIndexWhichOnMixedModelsIsNotNvidiaSmis) {
  // nvidia-smi (PCI order): 0 is an A100 (8.0), 1 an H200 (9.0). CUDA's default
  // FASTEST_FIRST order puts the H200 first; with PCI_BUS_ID it is second.
  const std::vector<gpusel::Gpu> gpus = {gpu(0, 70, 0, "NVIDIA A100-SXM4-80GB", 80), gpu(1, 130, 0)};
  const auto fastest_first = gpusel::pick({}, machine(gpus), "alice");
  ASSERT_EQ(fastest_first.size(), 1u);
  EXPECT_EQ(fastest_first[0].gpu.nvml_index, 1);
  EXPECT_EQ(fastest_first[0].physical_index, 0);
  const auto pci_order = gpusel::pick({}, machine(gpus, std::nullopt, "PCI_BUS_ID"), "alice");
  EXPECT_EQ(pci_order[0].physical_index, 1);
}

TEST(Pick, TooFewFittingGpusIsAnErrorThatSaysWhyEachWasRejected) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 2, 97), gpu(2, 100, 0)};
  gpus[2].processes->push_back(process_of("bob", 777));
  gpusel::PickCriteria criteria = count(2);
  criteria.min_free_memory = "8GiB";
  criteria.max_utilization = 10;
  const std::string message = error_from([&] { (void)gpusel::pick(criteria, machine(gpus), "alice"); });
  EXPECT_EQ(message,
            "gpusel::pick: 1 of 3 GPUs fit, 2 are needed (at least 2 GPUs (at most 2); at least 8.0 GiB free; at most "
            "10% utilized; no compute process (this user's own included); most free memory first):\n"
            "  GPU 0 (nvidia-smi 0, NVIDIA H200, GPU-0aaaaaaa-0000-0000-0000-000000000000), 130.0 GiB free, 0% "
            "utilized: fits\n"
            "  GPU 1 (nvidia-smi 1, NVIDIA H200, GPU-1aaaaaaa-0000-0000-0000-000000000000), 2.0 GiB free, 97% "
            "utilized: only 2.0 GiB free, 8.0 GiB needed; 97% utilized, at most 10% allowed\n"
            "  GPU 2 (nvidia-smi 2, NVIDIA H200, GPU-2aaaaaaa-0000-0000-0000-000000000000), 100.0 GiB free, 0% "
            "utilized: another user's compute process runs on it (pid 777 of bob (python3), 2.0 GiB)");
}

TEST(Pick, RejectsCriteriaThatMakeNoSense) {
  const auto map = machine({gpu(0, 130, 0)});
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::pick(count(2, 1), map, "alice"); }),
                       "at_most (1) is below at_least (2)"));
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::pick(count(-1), map, "alice"); }), "cannot be negative"));
  gpusel::PickCriteria criteria;
  criteria.max_utilization = 101;
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::pick(criteria, map, "alice"); }), "a percentage from 0 to 100, got 101"));
}

TEST(Pick, WithoutNvmlSaysItCannotSeeTheGpus) {
  gpusel::DeviceMap map;
  map.inventory.status = gpusel::InventoryStatus::library_not_found;
  map.inventory.reason = "libnvidia-ml.so.1 was not found";
  EXPECT_EQ(error_from([&] { (void)gpusel::pick({}, map, "alice"); }),
            "gpusel::pick: cannot see the GPUs without NVML: libnvidia-ml.so.1 was not found");
}

TEST(Assess, KeepsEachGpuItsOwnRecordWhenNvmlReportsDuplicateOrEmptyUuids) {
  // A broken or virtualized NVML can report one UUID twice, or none at all:
  // each GPU must still be described by its own record, not by the first
  // one that shares its UUID; the second of a UUID is that GPU counted again
  // (Note [One UUID, one GPU]), so only the first is picked.
  std::vector<gpusel::Gpu> gpus = {gpu(0, 10, 0), gpu(1, 20, 0), gpu(2, 30, 0), gpu(3, 40, 0)};
  gpus[1].uuid = gpus[0].uuid;
  gpus[2].uuid = "";
  gpus[3].uuid = "";
  const auto map = machine(gpus);
  const auto verdicts = gpusel::assess({}, map, "alice");
  ASSERT_EQ(verdicts.size(), 4u);
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    EXPECT_EQ(verdicts[i].physical_index, static_cast<int>(i));
    EXPECT_EQ(verdicts[i].gpu.nvml_index, static_cast<int>(i));
    EXPECT_EQ(verdicts[i].gpu.pci_bus_id, gpus[i].pci_bus_id);
    EXPECT_EQ(verdicts[i].gpu.memory_free_bytes, gpus[i].memory_free_bytes);
  }
  EXPECT_EQ(indices(gpusel::pick(count(3), map, "alice")), (std::vector<int>{3, 2, 0}));
  EXPECT_EQ(
      verdicts[1].rejected_because,
      std::vector<std::string>{"NVML reports the UUID of GPU 0 for it too (GPU-0aaaaaaa-0000-0000-0000-000000000000), "
                               "so gpusel counts the two as one GPU, GPU 0"});
  EXPECT_TRUE(verdicts[2].fits() && verdicts[3].fits()) << "an empty UUID names no GPU, so it is no duplicate";
}

TEST(Assess, AMigInstanceNvmlReportsTwiceIsOneGpu) {
  std::vector<gpusel::Gpu> gpus = whole_and_mig();
  gpus[1].mig_instances[1].uuid = gpus[1].mig_instances[0].uuid;
  const auto map = machine(gpus);
  const auto picked = gpusel::pick(count(1, gpusel::PickCriteria::all), map, "alice");
  EXPECT_EQ(uuids(picked), (std::vector<std::string>{"MIG-110bbbbb-0000-0000-0000-000000000000",
                                                     "GPU-0aaaaaaa-0000-0000-0000-000000000000"}))
      << "printed once, not MIG-110b...,MIG-110b...";
  EXPECT_TRUE(contains(gpusel::assess({}, map, "alice")[2].rejected_because.at(0),
                       "NVML reports the UUID of MIG instance MIG-110bbbbb-0000-0000-0000-000000000000 (GI 1, CI 0) "
                       "for it too"));
}

// 4000 GPUs, numbered by nvidia-smi in an order that PCI_BUS_ID reverses:
// nvidia-smi's GPU i has the (3999 - i)th PCI address.
std::vector<gpusel::Gpu> thousands_of_gpus(int count) {
  std::vector<gpusel::Gpu> gpus;
  for (int i = 0; i < count; ++i) {
    gpusel::Gpu each = gpu(i, 100 + static_cast<std::uint64_t>(i % 7), 0);
    const int address = count - 1 - i;
    char text[64];
    std::snprintf(text, sizeof text, "GPU-%08x-0000-4000-8000-%012x", static_cast<unsigned>(i),
                  static_cast<unsigned>(i));
    each.uuid = text;
    std::snprintf(text, sizeof text, "%08X:%02X:00.0", static_cast<unsigned>(address / 256),
                  static_cast<unsigned>(address % 256));
    each.pci_bus_id = text;
    gpus.push_back(std::move(each));
  }
  return gpus;
}

TEST(Pick, ScalesToThousandsOfGpus) {
  // Every lookup is linear or n log n: a quadratic one took seconds here.
  constexpr int kCount = 4000;
  const std::vector<gpusel::Gpu> gpus = thousands_of_gpus(kCount);
  std::string visible;  // every GPU by UUID, nvidia-smi's order: CUDA's physical order reversed
  for (const gpusel::Gpu& each : gpus) visible += (visible.empty() ? "" : ",") + each.uuid;
  const auto map = machine(gpus, visible, "PCI_BUS_ID");
  ASSERT_TRUE(map.visible.ok()) << map.visible.reason();
  ASSERT_EQ(map.visible.count(), kCount);
  for (int logical = 0; logical < kCount; ++logical)
    ASSERT_EQ(map.visible.physical(logical), kCount - 1 - logical) << "cuda:" << logical;

  const auto verdicts = gpusel::assess({}, map, "alice");
  ASSERT_EQ(verdicts.size(), static_cast<std::size_t>(kCount));
  for (int physical = 0; physical < kCount; ++physical) {
    ASSERT_EQ(verdicts[static_cast<std::size_t>(physical)].gpu.nvml_index, kCount - 1 - physical);
    ASSERT_TRUE(verdicts[static_cast<std::size_t>(physical)].fits());
  }
  const auto picked = gpusel::pick(count(kCount), map, "alice");
  ASSERT_EQ(picked.size(), static_cast<std::size_t>(kCount));
  EXPECT_EQ(picked.front().gpu.memory_free_bytes, 106 * kGiB) << "the most free memory first";
  EXPECT_EQ(picked.back().gpu.memory_free_bytes, 100 * kGiB);
  for (std::size_t i = 1; i < picked.size(); ++i)
    ASSERT_GE(*picked[i - 1].gpu.memory_free_bytes, *picked[i].gpu.memory_free_bytes);
  EXPECT_TRUE(contains(gpusel::explain(map), "\n  cuda:3999  physical 0  nvidia-smi 3999  "))
      << "columns as wide as the widest";
}

TEST(Choose, PicksAmongVerdictsAlreadyReachedWithoutAssessingAgain) {
  const auto map = machine({gpu(0, 20, 0), gpu(1, 120, 50), gpu(2, 80, 0)});
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.max_utilization = 10;
  const std::vector<gpusel::Candidate> verdicts = gpusel::assess(criteria, map, "alice");
  EXPECT_EQ(indices(gpusel::choose(criteria, verdicts)), (std::vector<int>{2, 0}));
  EXPECT_EQ(indices(gpusel::choose(criteria, verdicts)), indices(gpusel::pick(criteria, map, "alice")))
      << "pick is choose after assess";
  criteria.at_least = 3;
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::choose(criteria, verdicts); }), "2 of 3 GPUs fit, 3 are needed"));
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::choose(count(2, 1), verdicts); }), "at_most (1) is below at_least (2)"))
      << "choose checks the criteria too";
}

TEST(DescribeProcess, SaysWhoseProcessItIsWhenThatCanBeSeen) {
  EXPECT_EQ(gpusel::describe(process_of("bob", 777)), "pid 777 of bob (python3), 2.0 GiB");
  EXPECT_EQ(gpusel::describe(process_of("", 31337)),
            "pid 31337, owner unknown: not visible from this PID namespace, 2.0 GiB");
}

// Another user names their process freely (prctl): what reaches a terminal is
// escaped (Note [Hostile text]), in describe() and so in pick's reasons.
TEST(DescribeProcess, EscapesControlCharactersInTheCommandAndUser) {
  gpusel::GpuProcess hostile = process_of("mallory", 666);
  hostile.command = "\x1b]0;owned\x07\x1b[2J";
  const std::string text = gpusel::describe(hostile);
  EXPECT_EQ(text, "pid 666 of mallory (\\x1b]0;owned\\x07\\x1b[2J), 2.0 GiB");
  hostile.command =
      "caf\xc3\xa9 \xc2\x9b"
      "1m \x9b"
      "1m \x7f";  // é, C1 CSI as UTF-8, raw CSI, DEL
  hostile.user = "eve\r";
  EXPECT_EQ(gpusel::describe(hostile),
            "pid 666 of eve\\x0d (caf\xc3\xa9 \\xc2\\x9b"
            "1m \\x9b"
            "1m \\x7f), 2.0 GiB");

  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0)};
  gpus[0].name = "NVIDIA \x1b[31mH200";
  gpus[0].processes->push_back(hostile);
  const std::string message = error_from([&] { (void)gpusel::pick(count(1), machine(gpus), "alice"); });
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
  EXPECT_EQ(message.find('\r'), std::string::npos) << message;
  EXPECT_NE(message.find("NVIDIA \\x1b[31mH200"), std::string::npos) << message;
}

TEST(CurrentUser, IsNamedAsTheInventoryNamesProcessOwners) {
  const std::string user = gpusel::current_user();
  EXPECT_FALSE(user.empty());
  EXPECT_EQ(user, gpusel::detail::process_user(static_cast<unsigned>(getpid())));
}

// --- end to end, through NVML ---------------------------------------------------------

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
  EXPECT_TRUE(contains(message, "GPU-3d4e5f60-0000-4000-8000-000000000003." + std::to_string(geteuid()) + ".lock"))
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
      leases.leases() + "/GPU-1b2c3d4e-0000-4000-8000-000000000001." + std::to_string(geteuid()) + ".lock";
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
