// Starting run's command and waiting for it, the lease held with it (job.cpp).
#pragma once

#include <gpusel/machine/lease.hpp>

#include <optional>
#include <string>
#include <vector>

namespace gpusel_tool {

// When command_line[0] cannot be run (execvp would fail before running it, searching PATH
// as it does), says so and returns run's exit status for it: 127 not found, 126 otherwise;
// nullopt when it can. run checks before it chooses GPUs, so a typo leases nothing.
[[nodiscard]] std::optional<int> refuse_unrunnable(const std::vector<std::string>& command_line);

// The lease as the command gets it (Note [The job holds the lease]): a copy of each of its
// descriptors, numbered 10 or above (clear of a shell's redirections 3-9) and close-on-exec
// until start_and_wait clears that in the command, and GPUSEL_JOB_LEASE's value naming the
// copies (Note [The job's lease]); "" for an empty lease. The copies close with it.
class LentLease {
 public:
  explicit LentLease(const gpusel::GpuLease& lease);
  ~LentLease();
  LentLease(const LentLease&) = delete;
  LentLease& operator=(const LentLease&) = delete;
  const std::vector<int>& copies() const noexcept { return copies_; }
  const std::string& variable() const noexcept { return variable_; }
  // GPUSEL_JOB_LOCKS: "UUID:inode,..." of the locks variable() names (Note [A job's members]).
  const std::string& locks_variable() const noexcept { return locks_variable_; }
  // Why a copy could not be made ("fcntl: Too many open files"), or "": the command would
  // start without the lease, which would then end with run.
  const std::string& failure() const noexcept { return failure_; }

 private:
  std::vector<int> copies_;
  std::string variable_;
  std::string locks_variable_;
  std::string failure_;
};

// Starts `command_line` with `lent`'s copies of the lease (Note [The job holds the lease]),
// waits for it, and ends as it ended: its exit status, or death by its signal (as
// env: so a shell loop stops at Ctrl-C).
int start_and_wait(const std::vector<std::string>& command_line, const LentLease& lent);

}  // namespace gpusel_tool
