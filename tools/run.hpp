// run's parts: one attempt at the GPUs, by picking (run.cpp) or as a launcher's rank (local_rank.cpp).
#pragma once

#include <gpusel/machine/inventory.hpp>
#include <gpusel/machine/lease.hpp>
#include <gpusel/machine/pick.hpp>
#include <gpusel/machine/visibility.hpp>

#include <string>
#include <vector>

#include "arguments.hpp"

namespace gpusel_tool {

// One attempt at the GPUs: the chosen ones (and their lease), or why there are none.
struct Attempt {
  std::vector<gpusel::Candidate> chosen;
  gpusel::GpuLease lease;
  std::string failure;  // "" when chosen
};

// `said_rank`: whether the rank without a launcher variable was said already (once per run, --wait or not).
Attempt attempt_local_rank(const Arguments& arguments, const gpusel::DeviceMap& map, bool& said_rank);

}  // namespace gpusel_tool
