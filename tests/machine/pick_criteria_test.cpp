// Specification of the picking criteria (include/gpusel/machine/pick_criteria.hpp):
// PickCriteria in words. What the criteria pick, and the errors for criteria that
// make no sense (pick_test) or an exclusion that names no GPU (pick_assess_test), are
// the pick tests', which judge GPUs by them. A pure test: no CUDA runtime is linked.
#include "gpusel/machine/pick_criteria.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "pick_criteria_builders.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::connected;
using gpusel_test::contains;
using gpusel_test::count;

TEST(DescribeCriteria, SaysConnectedGpusArePreferred) {
  EXPECT_TRUE(contains(gpusel::describe(connected(2)),
                       "; connected GPUs preferred (NVLink, else one PCIe switch, else one host bridge, else one NUMA "
                       "node)"))
      << gpusel::describe(connected(2));
}

TEST(DescribeCriteria, SaysEverythingThatWasAsked) {
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.exclude = {"3", "GPU-8d2a"};
  criteria.allow_other_users = true;
  criteria.only_visible = false;
  criteria.order = gpusel::PickOrder::index;
  EXPECT_EQ(gpusel::describe(criteria),
            "at least 1 GPU (all that fit); excluding 3 GPU-8d2a; any GPU of the machine, CUDA_VISIBLE_DEVICES aside; "
            "in CUDA's order");
}

}  // namespace
