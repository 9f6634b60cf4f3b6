// The definitions of gpusel/topology.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: machine (docs/layers.md).
#pragma once

#include "gpusel/topology.hpp"

#include <climits>
#include <optional>

#include "gpusel/detail/machine/nvml.hpp"

namespace gpusel {

namespace detail {

// The NVML readers of the topology, which query_inventory (inventory.hpp) calls
// for each GPU read with usage, and for each pair of them.

// The GPU's NUMA node (Note [GPU topology]): nullopt when NVML cannot tell.
inline std::optional<int> read_numa_node(const nvml::Library& library, nvml::Device device) {
  unsigned int node = 0;
  if (library.numa_node_id != nullptr && library.numa_node_id(device, &node) == nvml::kSuccess &&
      node <= static_cast<unsigned int>(INT_MAX))
    return static_cast<int>(node);
  return std::nullopt;
}

// The GPU's CPUs, ascending (Note [GPU topology]): empty when NVML cannot tell.
inline std::vector<int> read_cpu_affinity(const nvml::Library& library, nvml::Device device) {
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

// How the GPUs of two handles reach each other (Note [GPU topology]).
inline GpuLink read_link(const nvml::Library& library, nvml::Device a, nvml::Device b) {
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

}  // namespace detail

GPUSEL_API std::string describe(GpuLink link) {
  switch (link) {
    case GpuLink::nvlink:
      return "joined by NVLink";
    case GpuLink::pcie_switch:
      return "under one PCIe switch";
    case GpuLink::host_bridge:
      return "through one PCIe host bridge";
    case GpuLink::numa_node:
      return "on one NUMA node";
    case GpuLink::system:
      return "across NUMA nodes";
    case GpuLink::unknown:
      break;
  }
  return "connected in a way NVML could not tell";
}

GPUSEL_API std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string text;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t last = i;
    while (last + 1 < cpus.size() && cpus[last + 1] == cpus[last] + 1) ++last;
    text += (text.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (last > i) text += "-" + std::to_string(cpus[last]);
    i = last + 1;
  }
  return text;
}

}  // namespace gpusel
