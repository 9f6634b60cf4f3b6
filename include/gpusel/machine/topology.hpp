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

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/topology-inl.hpp"
#endif
