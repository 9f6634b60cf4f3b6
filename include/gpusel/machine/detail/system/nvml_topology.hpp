// The NVML readers of the topology (Note [GPU topology] in gpusel/machine/topology.hpp),
// which query_inventory (inventory.hpp) calls for each GPU read with usage, and
// for each pair of them.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <optional>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/machine/detail/system/nvml.hpp"
#include "gpusel/machine/topology.hpp"

namespace gpusel::detail {

// The GPU's NUMA node (Note [GPU topology]): nullopt when NVML cannot tell.
GPUSEL_API std::optional<int> read_numa_node(const nvml::Library& library, nvml::Device device);

// The GPU's CPUs, ascending (Note [GPU topology]): empty when NVML cannot tell.
GPUSEL_API std::vector<int> read_cpu_affinity(const nvml::Library& library, nvml::Device device);

// How the GPUs of two handles reach each other (Note [GPU topology]).
GPUSEL_API GpuLink read_link(const nvml::Library& library, nvml::Device a, nvml::Device b);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/system/nvml_topology-inl.hpp"
#endif
