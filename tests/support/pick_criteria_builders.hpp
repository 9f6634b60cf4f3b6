// PickCriteria as the pick tests write them: count(2), count(1, 3), connected(2). Needs no CUDA.
#pragma once

#include <optional>

#include "gpusel/machine/pick_criteria.hpp"

namespace gpusel_test {

// At least `at_least` GPUs, at most `at_most` (nullopt: as many as at_least).
inline gpusel::PickCriteria count(int at_least, std::optional<int> at_most = std::nullopt) {
  gpusel::PickCriteria criteria;
  criteria.at_least = at_least;
  criteria.at_most = at_most;
  return criteria;
}

// `n` GPUs, connected ones preferred (PickPlacement::connected).
inline gpusel::PickCriteria connected(int n) {
  gpusel::PickCriteria criteria = count(n);
  criteria.placement = gpusel::PickPlacement::connected;
  return criteria;
}

}  // namespace gpusel_test
