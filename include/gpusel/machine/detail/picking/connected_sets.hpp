// The search beneath PickPlacement::connected (pick_criteria.hpp): among GPUs
// ranked best first, the set of a given size whose GPUs are nearest one another
// (Note [Connected GPUs]). It knows GPUs only by rank and the GpuLink between
// each two, so it reads no Candidate: pick.hpp's choose() gives it those links.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <cstddef>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel {
enum class GpuLink;  // gpusel/machine/topology.hpp: nearer links compare lower
}  // namespace gpusel

namespace gpusel::detail {

// Note [Connected GPUs]
// ~~~~~~~~~~~~~~~~~~~~~
// PickPlacement::connected chooses, among the GPUs that fit, the set of the wanted
// size whose farthest pair is nearest (GpuLink's order: NVLink, one PCIe switch, one
// host bridge, one NUMA node, across nodes; Note [GPU topology] in gpusel/machine/topology.hpp),
// and among sets as near, the one holding the best GPUs by criteria.order. The search is
// greedy (a set is started from each fitting GPU, best first, and takes every other GPU
// near all it holds), which is exact for the PCIe and NUMA levels and for all-to-all
// NVLink. It prefers and does not require: when no connected set fits, it picks the
// best-connected set that does rather than fail, and says so (describe_connection); a
// job that needs NVLink checks weakest_link(). MIG instances have no peer path, so a set
// holding one is as far as `unknown`. With at_most above what fits (PickCriteria::all)
// every fitting GPU is picked, and the placement changes nothing but the order.

// The `size` of the GPUs ranked 0, 1, ... (best first) whose farthest pair is nearest,
// as their ranks, ascending (Note [Connected GPUs]). links[a][b]: how the GPU ranked
// `a` reaches the one ranked `b`, for every a != b (a square matrix, one row per GPU).
// Fewer than `size` GPUs: all of them.
GPUSEL_API std::vector<std::size_t> connected_set(const std::vector<std::vector<GpuLink>>& links, std::size_t size);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/picking/connected_sets-inl.hpp"
#endif
