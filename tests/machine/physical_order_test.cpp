// Specification of CUDA's physical order (include/gpusel/machine/physical_order.hpp):
// what CUDA's indices mean under CUDA_DEVICE_ORDER, for inventories read from the
// fake NVML in tests/fake_nvml or made by hand. A pure test: no CUDA runtime is
// linked.
#include "gpusel/machine/physical_order.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fake_nvml_machine.hpp"
#include "gpusel/error.hpp"
#include "gpusel/machine/inventory.hpp"
#include "text_checks.hpp"

namespace {

using gpusel::InventoryStatus;
using gpusel_test::FakeNvmlMachine;

using gpusel_test::contains;

gpusel::Inventory inventory_of(const std::string& config) {
  FakeNvmlMachine machine(config);
  gpusel::Inventory inventory = gpusel::query_inventory();
  EXPECT_TRUE(inventory.ok()) << inventory.reason;
  return inventory;
}

// nvidia-smi's numbers of the GPUs in `order`, CUDA's physical index first.
std::vector<int> nvidia_smi_numbers(const gpusel::Inventory& inventory, const gpusel::CudaPhysicalOrder& order) {
  std::vector<int> numbers;
  for (int physical = 0; physical < order.count(); ++physical)
    numbers.push_back(order.gpu(inventory, physical).nvml_index);
  return numbers;
}

TEST(CudaPhysicalOrder, PciBusIdIsAscendingPciAddressAndExact) {
  const auto inventory = inventory_of("gpu pci=00000000:3B:00.0\ngpu pci=00000000:17:00.0\ngpu pci=00000001:05:00.0\n");
  const auto order = gpusel::cuda_physical_order(inventory, "PCI_BUS_ID");
  ASSERT_EQ(order.count(), 3);
  EXPECT_EQ(nvidia_smi_numbers(inventory, order), (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(order.positions, (std::vector<std::size_t>{1, 0, 2})) << "positions in the inventory, not copies";
  EXPECT_EQ(&order.gpu(inventory, 2), &inventory.gpus[2]);
  EXPECT_EQ(order.gpu(inventory, 0).pci_bus_id, "00000000:17:00.0");
  EXPECT_EQ(order.uuids(inventory),
            (std::vector<std::string_view>{inventory.gpus[1].uuid, inventory.gpus[0].uuid, inventory.gpus[2].uuid}));
  EXPECT_TRUE(order.exact);
}

TEST(CudaPhysicalOrder, FastestFirstOnOneModelIsPciOrderAndExact) {
  const auto inventory = inventory_of("gpu\ngpu\n");
  const auto order = gpusel::cuda_physical_order(inventory, std::nullopt);
  EXPECT_TRUE(order.exact);
  EXPECT_EQ(order.caveat, "");
  EXPECT_EQ(nvidia_smi_numbers(inventory, order), (std::vector<int>{0, 1}));
}

TEST(CudaPhysicalOrder, FastestFirstOnMixedModelsIsAGuessThatSaysSo) {
  const auto inventory = inventory_of("gpu name=\"Tesla T4\" cc=7.5\ngpu name=\"NVIDIA H200\" cc=9.0\n");
  const auto order = gpusel::cuda_physical_order(inventory, "FASTEST_FIRST");
  EXPECT_FALSE(order.exact);
  EXPECT_TRUE(contains(order.caveat, "nvidia-smi's numbers may not be CUDA's")) << order.caveat;
  EXPECT_EQ(order.gpu(inventory, 0).name, "NVIDIA H200") << "newest compute capability first";
  EXPECT_EQ(order.gpu(inventory, 0).nvml_index, 1);
  const auto pci = gpusel::cuda_physical_order(inventory, "PCI_BUS_ID");
  EXPECT_TRUE(pci.exact) << "PCI_BUS_ID makes every tool agree";
  EXPECT_EQ(pci.gpu(inventory, 0).name, "Tesla T4");
}

TEST(CudaPhysicalOrder, AskingForAGpuItDoesNotHaveIsAnError) {
  const auto inventory = inventory_of("gpu\n");
  const auto order = gpusel::cuda_physical_order(inventory, std::nullopt);
  EXPECT_THROW((void)order.gpu(inventory, 1), gpusel::Error);
  EXPECT_THROW((void)order.gpu(inventory, -1), gpusel::Error);
  EXPECT_THROW((void)order.gpu(gpusel::Inventory{}, 0), gpusel::Error) << "another, empty inventory";
}

// Many GPUs, by hand (no NVML): nvidia-smi's GPU i at the (count - 1 - i)th PCI
// address, so PCI_BUS_ID reverses nvidia-smi's order; models alternate.
gpusel::Inventory thousands_of_gpus(int count) {
  gpusel::Inventory inventory;
  inventory.status = InventoryStatus::ok;
  for (int i = 0; i < count; ++i) {
    gpusel::Gpu gpu;
    gpu.nvml_index = i;
    gpu.uuid = "GPU-" + std::to_string(100000 + i);
    gpu.name = i % 2 == 0 ? "NVIDIA H200" : "NVIDIA A100";
    gpu.compute_capability_major = i % 2 == 0 ? 9 : 8;
    const int address = count - 1 - i;
    char text[32];
    std::snprintf(text, sizeof text, "%08X:%02X:00.0", static_cast<unsigned>(address / 256),
                  static_cast<unsigned>(address % 256));
    gpu.pci_bus_id = text;
    inventory.gpus.push_back(std::move(gpu));
  }
  return inventory;
}

TEST(CudaPhysicalOrder, OrdersThousandsOfGpus) {
  // n log n: the insertion sort this replaced took seconds on 4000 GPUs.
  constexpr int kCount = 4000;
  const gpusel::Inventory inventory = thousands_of_gpus(kCount);
  const auto pci = gpusel::cuda_physical_order(inventory, "PCI_BUS_ID");
  ASSERT_EQ(pci.count(), kCount);
  for (int physical = 0; physical < kCount; ++physical)
    ASSERT_EQ(pci.gpu(inventory, physical).nvml_index, kCount - 1 - physical);
  const auto fastest = gpusel::cuda_physical_order(inventory, std::nullopt);
  ASSERT_EQ(fastest.count(), kCount);
  for (int physical = 0; physical < kCount / 2; ++physical) {  // the H200s (even numbers), then the A100s
    ASSERT_EQ(fastest.gpu(inventory, physical).nvml_index, kCount - 2 - 2 * physical);
    ASSERT_EQ(fastest.gpu(inventory, kCount / 2 + physical).nvml_index, kCount - 1 - 2 * physical);
  }
}

TEST(CudaPhysicalOrder, MigModeIsACaveat) {
  const auto inventory = inventory_of("gpu mig=1\ngpu\n");
  EXPECT_TRUE(inventory.gpus[0].mig_enabled);
  const auto order = gpusel::cuda_physical_order(inventory, std::nullopt);
  EXPECT_FALSE(order.exact);
  EXPECT_TRUE(contains(order.caveat, "GPU 0 is in MIG mode")) << order.caveat;
}

}  // namespace
