// Specification of the search beneath PickPlacement::connected, which knows the GPUs by rank
// only (include/gpusel/machine/detail/picking/connected_sets.hpp). pick_test checks it through
// gpusel::pick.
#include "gpusel/machine/detail/picking/connected_sets.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "gpusel/machine/topology.hpp"

namespace {

TEST(ConnectedSet, TakesTheNearestSetByRankAndEveryGpuWhenThereAreTooFew) {
  using gpusel::GpuLink;
  // Ranked 0 (best) to 3: 1 and 3 joined by NVLink, every other pair across NUMA nodes.
  std::vector<std::vector<GpuLink>> links(4, std::vector<GpuLink>(4, GpuLink::system));
  links[1][3] = links[3][1] = GpuLink::nvlink;
  EXPECT_EQ(gpusel::detail::connected_set(links, 2), (std::vector<std::size_t>{1, 3}));
  EXPECT_EQ(gpusel::detail::connected_set(links, 3), (std::vector<std::size_t>{0, 1, 2}))
      << "no three are nearer than across nodes: the best three";
  EXPECT_EQ(gpusel::detail::connected_set(links, 5), (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_TRUE(gpusel::detail::connected_set({}, 2).empty());
}

}  // namespace
