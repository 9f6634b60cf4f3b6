// The definitions of gpusel/machine/detail/picking/connected_sets.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/detail/picking/connected_sets.hpp"

#include <algorithm>

namespace gpusel::detail {

GPUSEL_API std::vector<std::size_t> connected_set(const std::vector<std::vector<GpuLink>>& links, std::size_t size) {
  const std::size_t count = links.size();
  std::vector<GpuLink> levels;  // every link the matrix holds, nearest first: the search widens level by level
  for (std::size_t a = 0; a < count; ++a)
    for (std::size_t b = 0; b < count; ++b)
      if (a != b) levels.push_back(links[a][b]);
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  for (const GpuLink level : levels) {
    for (std::size_t first = 0; first < count; ++first) {
      std::vector<std::size_t> ranks{first};  // the set started from `first`
      for (std::size_t other = 0; other < count && ranks.size() < size; ++other) {
        if (other == first) continue;
        bool near_all = true;
        for (const std::size_t member : ranks) near_all = near_all && links[member][other] <= level;
        if (near_all) ranks.push_back(other);
      }
      if (ranks.size() < size) continue;
      std::sort(ranks.begin(), ranks.end());
      return ranks;
    }
  }
  std::vector<std::size_t> ranks(std::min(size, count));
  for (std::size_t rank = 0; rank < ranks.size(); ++rank) ranks[rank] = rank;
  return ranks;
}

}  // namespace gpusel::detail
