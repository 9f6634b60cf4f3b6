// Machines as the pick tests write them down, with no NVML: GPUs, their processes and MIG
// instances, and this process's view of them (a DeviceMap). Needs no CUDA.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpusel/machine/inventory.hpp"
#include "gpusel/machine/physical_order.hpp"
#include "gpusel/machine/pick.hpp"
#include "gpusel/machine/visibility.hpp"
#include "gpusel/visible_devices.hpp"

namespace gpusel_test {

inline constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// A GPU as NVML would describe it: 141 GiB in all, `free_gib` of it free.
inline gpusel::Gpu gpu(int nvml_index, std::uint64_t free_gib, int utilization, std::string name = "NVIDIA H200",
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

// A compute process of `user` ("": an owner not visible from here), running python3 in 2 GiB.
inline gpusel::GpuProcess process_of(const std::string& user, unsigned pid = 4242) {
  gpusel::GpuProcess process;
  process.pid = pid;
  process.user = user;
  process.command = user.empty() ? "" : "python3";
  process.used_memory_bytes = 2 * kGiB;
  return process;
}

// This process's view of a machine with `gpus`, under these variables (nullopt: unset).
inline gpusel::DeviceMap machine(std::vector<gpusel::Gpu> gpus, std::optional<std::string> visible = std::nullopt,
                                 std::optional<std::string> order = std::nullopt) {
  gpusel::DeviceMap map;
  map.inventory.status = gpusel::InventoryStatus::ok;
  map.inventory.gpus = std::move(gpus);
  map.order = gpusel::cuda_physical_order(map.inventory, order);
  map.visible = gpusel::parse_visible_devices(visible, map.order.uuids(map.inventory), order);
  return map;
}

// The candidates' CUDA physical indices, in their order.
inline std::vector<int> indices(const std::vector<gpusel::Candidate>& candidates) {
  std::vector<int> result;
  for (const gpusel::Candidate& candidate : candidates) result.push_back(candidate.physical_index);
  return result;
}

// The candidates' UUIDs (a MIG instance's own), in their order.
inline std::vector<std::string> uuids(const std::vector<gpusel::Candidate>& candidates) {
  std::vector<std::string> result;
  for (const gpusel::Candidate& candidate : candidates) result.push_back(candidate.uuid());
  return result;
}

// Who picks in these tests: alice, no process of the machine (Note [Whose process is it]).
inline const gpusel::Caller alice{"alice", 0};

// The sentences of `candidate`'s rejections, in their order.
inline std::vector<std::string> reasons(const gpusel::Candidate& candidate) {
  std::vector<std::string> result;
  for (const gpusel::Rejection& rejection : candidate.rejections) result.push_back(rejection.text);
  return result;
}

// A MIG instance of GPU `gpu_index`: GPU instance `gi`, compute instance `ci`, `free_gib` of 35 GiB free.
inline gpusel::MigInstance mig_instance(int gpu_index, unsigned gi, unsigned ci, std::uint64_t free_gib) {
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
inline std::vector<gpusel::Gpu> whole_and_mig(std::uint64_t free_gib = 10) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, free_gib, 0), gpu(1, 130, 0)};
  gpus[1].mig_enabled = true;
  gpus[1].utilization_percent.reset();  // NVML does not measure a GPU in MIG mode
  gpus[1].mig_instances = {mig_instance(1, 1, 0, 20), mig_instance(1, 2, 0, 30)};
  return gpus;
}

}  // namespace gpusel_test
