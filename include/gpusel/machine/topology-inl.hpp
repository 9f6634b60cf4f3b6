// The definitions of gpusel/machine/topology.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/topology.hpp"

namespace gpusel {

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
