// Starting run's command and waiting for it, the lease held with it (job.cpp).
#pragma once

#include <gpusel/lease.hpp>

#include <string>
#include <vector>

namespace gpusel_tool {

// Starts `command_line`, holding `lease` with it (Note [The job holds the lease]),
// waits for it, and ends as it ended: its exit status, or death by its signal (as
// env: so a shell loop stops at Ctrl-C).
int start_and_wait(const std::vector<std::string>& command_line, const gpusel::GpuLease& lease);

}  // namespace gpusel_tool
