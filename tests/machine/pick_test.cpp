// Specification of choosing among assessed GPUs (include/gpusel/machine/pick.hpp: choose,
// pick, weakest_link, describe_connection, describe, current_user): the order, the count,
// connected sets, and the message when too few fit. Pure: each machine is written down here
// (pick_machines.hpp); what assess() judges of each GPU is pick_assess_test's, and picking
// through NVML and leases pick_through_nvml_test's.
#include "gpusel/machine/pick.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "gpusel/machine/detail/system/process_files.hpp"
#include "gpusel/machine/visibility.hpp"
#include "pick_criteria_builders.hpp"
#include "pick_machines.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::alice;
using gpusel_test::connected;
using gpusel_test::contains;
using gpusel_test::count;
using gpusel_test::error_from;
using gpusel_test::gpu;
using gpusel_test::indices;
using gpusel_test::kGiB;
using gpusel_test::machine;
using gpusel_test::process_of;
using gpusel_test::whole_and_mig;

// --- choosing among the GPUs that fit ----------------------------------------------

TEST(Pick, TakesTheGpuWithTheMostFreeMemoryByDefault) {
  const auto map = machine({gpu(0, 20, 0), gpu(1, 120, 50), gpu(2, 80, 0)});
  EXPECT_EQ(indices(gpusel::pick({}, map, alice)), std::vector<int>{1});
  EXPECT_EQ(indices(gpusel::pick(count(3), map, alice)), (std::vector<int>{1, 2, 0}));
}

TEST(Pick, OrdersByLeastUtilizationOrByIndexWhenAsked) {
  const auto map = machine({gpu(0, 20, 30), gpu(1, 120, 50), gpu(2, 80, 0), gpu(3, 90, 30)});
  gpusel::PickCriteria criteria = count(4);
  criteria.order = gpusel::PickOrder::least_utilized;
  EXPECT_EQ(indices(gpusel::pick(criteria, map, alice)), (std::vector<int>{2, 3, 0, 1}))
      << "ties in utilization go to the GPU with more free memory";
  criteria.order = gpusel::PickOrder::index;
  EXPECT_EQ(indices(gpusel::pick(criteria, map, alice)), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Pick, TiesGoToTheLowerIndex) {
  const auto map = machine({gpu(0, 100, 0), gpu(1, 100, 0), gpu(2, 100, 0)});
  EXPECT_EQ(indices(gpusel::pick(count(3), map, alice)), (std::vector<int>{0, 1, 2}));
}

TEST(Pick, ReturnsAtMostTheCountAskedFor) {
  const auto map = machine({gpu(0, 100, 0), gpu(1, 110, 0), gpu(2, 120, 0), gpu(3, 130, 0)});
  EXPECT_EQ(indices(gpusel::pick(count(2), map, alice)), (std::vector<int>{3, 2})) << "at_most defaults to at_least";
  EXPECT_EQ(indices(gpusel::pick(count(1, 3), map, alice)), (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(gpusel::pick(count(1, gpusel::PickCriteria::all), map, alice).size(), 4u);
  EXPECT_TRUE(gpusel::pick(count(0), map, alice).empty());
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
  EXPECT_EQ(indices(gpusel::pick(count(2), map, alice)), (std::vector<int>{0, 2})) << "without it";
  const auto picked = gpusel::pick(connected(2), map, alice);
  EXPECT_EQ(indices(picked), (std::vector<int>{0, 1}));
  EXPECT_EQ(gpusel::weakest_link(picked), gpusel::GpuLink::nvlink);
  EXPECT_EQ(gpusel::describe_connection(picked, connected(2)), "GPUs 0 and 1 are joined by NVLink");
  gpusel::PickCriteria without_zero = connected(2);
  without_zero.exclude = {"0"};
  EXPECT_EQ(indices(gpusel::pick(without_zero, map, alice)), (std::vector<int>{2, 3}));
}

TEST(PickConnected, FallsBackToOnePcieSwitchThenOneNumaNode) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 140, 0), gpu(1, 130, 0), gpu(2, 120, 0)};
  for (gpusel::Gpu& each : gpus) each.links.assign(3, gpusel::GpuLink::unknown);
  gpus[0].links[1] = gpus[1].links[0] = gpusel::GpuLink::numa_node;
  gpus[0].links[2] = gpus[2].links[0] = gpusel::GpuLink::pcie_switch;
  gpus[1].links[2] = gpus[2].links[1] = gpusel::GpuLink::system;
  EXPECT_EQ(indices(gpusel::pick(connected(2), machine(gpus), alice)), (std::vector<int>{0, 2}));
  gpus[0].links[2] = gpus[2].links[0] = gpusel::GpuLink::system;
  EXPECT_EQ(indices(gpusel::pick(connected(2), machine(gpus), alice)), (std::vector<int>{0, 1}));
}

TEST(PickConnected, WhenNoConnectedSetFitsPicksTheBestThatDoesAndSaysSo) {
  const auto map = machine(two_nvlink_pairs());
  gpusel::PickCriteria criteria = connected(2);
  criteria.exclude = {"1", "3"};
  const auto picked = gpusel::pick(criteria, map, alice);
  EXPECT_EQ(indices(picked), (std::vector<int>{0, 2}));
  EXPECT_EQ(gpusel::weakest_link(picked), gpusel::GpuLink::system);
  EXPECT_EQ(gpusel::describe_connection(picked, criteria),
            "GPUs 0 and 2 are across NUMA nodes (no 2 of the GPUs that fit are connected more closely)");
  EXPECT_EQ(gpusel::describe_connection(picked, count(2)), "GPUs 0 and 2 are across NUMA nodes")
      << "without --connected nothing closer was looked for";
  EXPECT_EQ(gpusel::weakest_link({picked[0]}), std::nullopt);
}

TEST(PickConnected, CountsMigInstancesAsJoinedByNothing) {
  const auto picked = gpusel::pick(connected(2), machine(whole_and_mig()), alice);
  EXPECT_EQ(gpusel::weakest_link(picked), gpusel::GpuLink::unknown);
  EXPECT_TRUE(contains(gpusel::describe_connection(picked, connected(2)), "MIG instances have no peer-to-peer path"));
}

TEST(Pick, TooFewFittingGpusIsAnErrorThatSaysWhyEachWasRejected) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 2, 97), gpu(2, 100, 0)};
  gpus[2].processes->push_back(process_of("bob", 777));
  gpusel::PickCriteria criteria = count(2);
  criteria.min_free_memory = "8GiB";
  criteria.max_utilization = 10;
  const std::string message = error_from([&] { (void)gpusel::pick(criteria, machine(gpus), alice); });
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
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::pick(count(2, 1), map, alice); }), "at_most (1) is below at_least (2)"));
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::pick(count(-1), map, alice); }), "cannot be negative"));
  gpusel::PickCriteria criteria;
  criteria.max_utilization = 101;
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::pick(criteria, map, alice); }), "a percentage from 0 to 100, got 101"));
}

TEST(Pick, WithoutNvmlSaysItCannotSeeTheGpus) {
  gpusel::DeviceMap map;
  map.inventory.status = gpusel::InventoryStatus::library_not_found;
  map.inventory.reason = "libnvidia-ml.so.1 was not found";
  EXPECT_EQ(error_from([&] { (void)gpusel::pick({}, map, alice); }),
            "gpusel::pick: cannot see the GPUs without NVML: libnvidia-ml.so.1 was not found");
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

  const auto verdicts = gpusel::assess({}, map, alice);
  ASSERT_EQ(verdicts.size(), static_cast<std::size_t>(kCount));
  for (int physical = 0; physical < kCount; ++physical) {
    ASSERT_EQ(verdicts[static_cast<std::size_t>(physical)].gpu.nvml_index, kCount - 1 - physical);
    ASSERT_TRUE(verdicts[static_cast<std::size_t>(physical)].fits());
  }
  const auto picked = gpusel::pick(count(kCount), map, alice);
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
  const std::vector<gpusel::Candidate> verdicts = gpusel::assess(criteria, map, alice);
  EXPECT_EQ(indices(gpusel::choose(criteria, verdicts)), (std::vector<int>{2, 0}));
  EXPECT_EQ(indices(gpusel::choose(criteria, verdicts)), indices(gpusel::pick(criteria, map, alice)))
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
  const std::string message = error_from([&] { (void)gpusel::pick(count(1), machine(gpus), alice); });
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
  EXPECT_EQ(message.find('\r'), std::string::npos) << message;
  EXPECT_NE(message.find("NVIDIA \\x1b[31mH200"), std::string::npos) << message;
}

TEST(CurrentUser, IsNamedAsTheInventoryNamesProcessOwners) {
  const std::string user = gpusel::current_user();
  EXPECT_FALSE(user.empty());
  EXPECT_EQ(user, gpusel::detail::process_user(static_cast<unsigned>(getpid())));
}

}  // namespace
