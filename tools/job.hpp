// Starting run's command and waiting for it, the lease held with it (job.cpp).
#pragma once

#include <gpusel/lease.hpp>

#include <optional>
#include <string>
#include <vector>

namespace gpusel_tool {

// When command_line[0] cannot be run (execvp would fail before running it, searching PATH
// as it does), says so and returns run's exit status for it: 127 not found, 126 otherwise;
// nullopt when it can. run checks before it chooses GPUs, so a typo leases nothing.
[[nodiscard]] std::optional<int> refuse_unrunnable(const std::vector<std::string>& command_line);

// Starts `command_line`, holding `lease` with it (Note [The job holds the lease]),
// waits for it, and ends as it ended: its exit status, or death by its signal (as
// env: so a shell loop stops at Ctrl-C).
int start_and_wait(const std::vector<std::string>& command_line, const gpusel::GpuLease& lease);

}  // namespace gpusel_tool
