// The definitions of gpusel/machine/detail/system/nvml_topology.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/detail/system/nvml_topology.hpp"

#include <climits>

namespace gpusel::detail {

GPUSEL_API std::optional<int> read_numa_node(const nvml::Library& library, nvml::Device device) {
  unsigned int node = 0;
  if (library.numa_node_id != nullptr && library.numa_node_id(device, &node) == nvml::kSuccess &&
      node <= static_cast<unsigned int>(INT_MAX))
    return static_cast<int>(node);
  return std::nullopt;
}

GPUSEL_API std::vector<int> read_cpu_affinity(const nvml::Library& library, nvml::Device device) {
  std::vector<int> cpus;
  constexpr unsigned int kWords = 64;  // 4096 CPUs
  unsigned long mask[kWords] = {};
  if (library.cpu_affinity != nullptr && library.cpu_affinity(device, kWords, mask) == nvml::kSuccess) {
    constexpr int kBits = static_cast<int>(sizeof(unsigned long) * CHAR_BIT);
    for (int cpu = 0; cpu < static_cast<int>(kWords) * kBits; ++cpu)
      if ((mask[cpu / kBits] >> (cpu % kBits)) & 1UL) cpus.push_back(cpu);
  }
  return cpus;
}

GPUSEL_API GpuLink read_link(const nvml::Library& library, nvml::Device a, nvml::Device b) {
  int p2p = -1;
  if (library.p2p_status != nullptr && library.p2p_status(a, b, nvml::kP2pCapsIndexNvlink, &p2p) == nvml::kSuccess &&
      p2p == nvml::kP2pStatusOk)
    return GpuLink::nvlink;
  int level = -1;
  if (library.topology_common_ancestor == nullptr || library.topology_common_ancestor(a, b, &level) != nvml::kSuccess)
    return GpuLink::unknown;
  switch (level) {
    case nvml::kTopologyInternal:
    case nvml::kTopologySingle:
    case nvml::kTopologyMultiple:
      return GpuLink::pcie_switch;
    case nvml::kTopologyHostBridge:
      return GpuLink::host_bridge;
    case nvml::kTopologyNode:
      return GpuLink::numa_node;
    case nvml::kTopologySystem:
      return GpuLink::system;
    default:
      return GpuLink::unknown;
  }
}

}  // namespace gpusel::detail
