// The steps of choose() (gpusel/machine/pick.hpp) among the candidates that fit:
// ranking them best first as the criteria's order asks, the message that names every
// candidate and its reasons when too few fit, and the connected subset a
// PickPlacement::connected pick keeps (Note [Connected GPUs] in connected_sets.hpp),
// read through candidate_link, which weakest_link reads too.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel {
struct Candidate;     // gpusel/machine/pick.hpp
enum class GpuLink;   // gpusel/machine/topology.hpp
struct PickCriteria;  // gpusel/machine/pick_criteria.hpp
}  // namespace gpusel

namespace gpusel::detail {

// How `a` reaches `b`: their GPUs' link, or unknown where either is a MIG instance (no peer
// path: Note [MIG instances]).
GPUSEL_API GpuLink candidate_link(const Candidate& a, const Candidate& b);

// Sorts `fitting` (positions in `all`) best first, as `criteria.order` asks; ties keep
// CUDA's physical order.
GPUSEL_API void sort_best_first(const PickCriteria& criteria, const std::vector<Candidate>& all,
                                std::vector<std::size_t>& fitting);

// Why too few of `all` fit ("1 of 4 GPUs fit, 2 are needed (...):" and a line a candidate, with
// its reasons, those all share said once, first), for choose()'s Error to say after "gpusel::pick: ".
GPUSEL_API std::string too_few_fit(const PickCriteria& criteria, const std::vector<Candidate>& all,
                                   std::size_t fitting);

// The `keep` of `fitting` (positions in `all`) whose farthest pair is nearest, in
// `fitting`'s order (Note [Connected GPUs]).
GPUSEL_API std::vector<std::size_t> connected_subset(const std::vector<Candidate>& all,
                                                     const std::vector<std::size_t>& fitting, std::size_t keep);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/picking/choosing-inl.hpp"
#endif
