// Specification of the topology (include/gpusel/machine/topology.hpp, and link_between
// in inventory.hpp): how the GPUs reach each other and the CPUs, as the inventory
// reads them from the fake NVML in tests/fake_nvml. A pure test: no CUDA runtime
// is linked.
#include "gpusel/machine/topology.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "fake_nvml_machine.hpp"
#include "gpusel/machine/inventory.hpp"

namespace {

using gpusel_test::FakeNvmlMachine;

TEST(Topology, ReadsWhereEachGpuSitsAndHowTheGpusAreJoined) {
  FakeNvmlMachine machine(R"(
gpu numa=0 cpus=0-15,32-47
gpu numa=0 cpus=0-15,32-47
gpu numa=1 cpus=16-31,48-63
gpu
link a=0 b=1 nvlink=1 level=10
link a=0 b=2 level=50
link a=1 b=2 level=40
link a=2 b=3 level=20
)");
  const gpusel::Inventory inventory = gpusel::query_inventory(gpusel::InventoryOptions::with_usage());
  ASSERT_TRUE(inventory.ok()) << inventory.reason;
  const std::vector<gpusel::Gpu>& gpus = inventory.gpus;
  EXPECT_EQ(gpus[2].numa_node, 1);
  EXPECT_EQ(gpusel::format_cpu_list(gpus[2].cpu_affinity), "16-31,48-63");
  EXPECT_EQ(gpus[0].cpu_affinity.size(), 32u);
  EXPECT_FALSE(gpus[3].numa_node.has_value()) << "NVML could not tell: unknown, not node 0";
  EXPECT_TRUE(gpus[3].cpu_affinity.empty());
  EXPECT_EQ(gpusel::link_between(gpus[0], gpus[1]), gpusel::GpuLink::nvlink);
  EXPECT_EQ(gpusel::link_between(gpus[1], gpus[0]), gpusel::GpuLink::nvlink);
  EXPECT_EQ(gpusel::link_between(gpus[0], gpus[2]), gpusel::GpuLink::system);
  EXPECT_EQ(gpusel::link_between(gpus[1], gpus[2]), gpusel::GpuLink::numa_node);
  EXPECT_EQ(gpusel::link_between(gpus[2], gpus[3]), gpusel::GpuLink::pcie_switch);
  EXPECT_EQ(gpusel::link_between(gpus[0], gpus[3]), gpusel::GpuLink::unknown) << "no answer from NVML";
  EXPECT_EQ(gpusel::link_between(gpus[0], gpus[0]), gpusel::GpuLink::unknown);
  EXPECT_TRUE(gpusel::query_inventory().gpus[0].links.empty()) << "topology is read with usage only";
  gpusel::InventoryOptions no_links = gpusel::InventoryOptions::with_usage();
  no_links.links = false;  // the N(N-1)/2 pairs, read only when asked for
  const gpusel::Inventory without = gpusel::query_inventory(no_links);
  ASSERT_TRUE(without.ok()) << without.reason;
  EXPECT_TRUE(without.gpus[0].links.empty());
  EXPECT_EQ(gpusel::link_between(without.gpus[0], without.gpus[1]), gpusel::GpuLink::unknown);
  EXPECT_EQ(without.gpus[2].numa_node, 1) << "where each GPU sits is still read: one call a GPU";
}

TEST(FormatCpuList, WritesRunsOfCpusAsRanges) {
  EXPECT_EQ(gpusel::format_cpu_list({}), "");
  EXPECT_EQ(gpusel::format_cpu_list({3}), "3");
  EXPECT_EQ(gpusel::format_cpu_list({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(gpusel::format_cpu_list({0, 2, 4, 5}), "0,2,4-5");
}

TEST(DescribeGpuLink, SaysHowTwoGpusAreJoinedInWords) {
  EXPECT_EQ(gpusel::describe(gpusel::GpuLink::nvlink), "joined by NVLink");
  EXPECT_EQ(gpusel::describe(gpusel::GpuLink::pcie_switch), "under one PCIe switch");
  EXPECT_EQ(gpusel::describe(gpusel::GpuLink::host_bridge), "through one PCIe host bridge");
  EXPECT_EQ(gpusel::describe(gpusel::GpuLink::numa_node), "on one NUMA node");
  EXPECT_EQ(gpusel::describe(gpusel::GpuLink::system), "across NUMA nodes");
  EXPECT_EQ(gpusel::describe(gpusel::GpuLink::unknown), "connected in a way NVML could not tell");
}

}  // namespace
