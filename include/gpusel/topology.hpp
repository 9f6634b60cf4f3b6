// How the machine's GPUs reach each other and the CPUs, as NVML's topology calls
// tell: GpuLink, in words, and CPU lists as taskset and numactl write them.
//
//   auto inventory = gpusel::query_inventory(gpusel::InventoryOptions::with_usage());
//   gpusel::GpuLink link = gpusel::link_between(inventory.gpus[0], inventory.gpus[1]);
//   gpusel::describe(link);                                    // "joined by NVLink"
//   gpusel::format_cpu_list(inventory.gpus[0].cpu_affinity);   // "0-15,32-47"
//
// What is read lives in each Gpu (numa_node, cpu_affinity, links) of
// inventory.hpp, which includes this header; link_between reads two Gpus, so
// it is declared there, with Gpu.
// This header includes no CUDA header and makes no CUDA call.
// Layer: machine (docs/layers.md).
#pragma once

#include <string>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel {

// How two GPUs reach each other, nearest first, from NVML's topology calls
// (Note [GPU topology]).
enum class GpuLink {
  nvlink,       // joined by NVLink
  pcie_switch,  // under one PCIe switch (or on one board)
  host_bridge,  // through one PCIe host bridge
  numa_node,    // on one NUMA node (CPU socket), across host bridges
  system,       // across NUMA nodes: through the link between CPU sockets
  unknown,      // NVML could not tell
};

// "joined by NVLink", "under one PCIe switch", "through one PCIe host bridge", "on one NUMA node",
// "across NUMA nodes", "connected in a way NVML could not tell".
GPUSEL_API std::string describe(GpuLink link);

// CPU numbers as ranges, the form taskset, numactl and /sys use: {0,1,2,3,8} is "0-3,8"; "" for none.
GPUSEL_API std::string format_cpu_list(const std::vector<int>& cpus);

// Note [GPU topology]
// ~~~~~~~~~~~~~~~~~~~
// For each pair of GPUs: nvmlDeviceGetP2PStatus(NVML_P2P_CAPS_INDEX_NVLINK) OK
// means NVLink; otherwise nvmlDeviceGetTopologyCommonAncestor gives their nearest
// common point on the PCIe tree: INTERNAL (one board), SINGLE and MULTIPLE (PCIe
// switches) are GpuLink::pcie_switch, HOSTBRIDGE host_bridge, NODE numa_node,
// SYSTEM system. What nvidia-smi topo -m shows as NV#, PIX/PXB, PHB, NODE and SYS.
// A GPU's NUMA node is nvmlDeviceGetNumaNodeId's (drivers from 545 on), its CPUs
// nvmlDeviceGetCpuAffinity's (the CPUs of its socket or node, for pinning host
// threads: taskset -c, numactl --physcpubind); an NVML that lacks either leaves the
// field unknown rather than guess.

}  // namespace gpusel

// --- definitions (Note [Compile-once mode]) ---------------------------------
#if GPUSEL_DEFINITIONS

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

#endif  // GPUSEL_DEFINITIONS
