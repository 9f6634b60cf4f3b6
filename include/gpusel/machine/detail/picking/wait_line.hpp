// The line of jobs that wait for GPUs in the lease directory (Note [Waiting in line]):
// lease_free_gpus(criteria, wait) in wait_for_gpus.hpp, which `gpusel run --wait` calls.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/machine/lease_directory.hpp"

namespace gpusel::detail {

// Note [Waiting in line]
// ~~~~~~~~~~~~~~~~~~~~~~
// Jobs that wait for GPUs (lease_free_gpus with a wait, `gpusel run --wait`) are
// served in arrival order, so a job that needs 4 GPUs is not overtaken forever by
// a stream of 1-GPU jobs. A waiter whose look fails joins the line: a ticket
// gpusel-wait-<uid>-<random>.ticket in the lease directory, flock'ed while it waits, made
// under an unpredictable temporary name and linked into place once locked (a
// squatted name is skipped for another). Its arrival is the ticket's ctime, which
// the kernel sets and no owner can move back. A waiter lets an earlier ticket go
// first only while that ticket is locked (else it is dead: whoever finds it removes
// it) and its holder, which /proc/locks names, is not stopped. The bound: a waiter
// lets earlier ones go first for at most WaitForGpus::yield_at_most in all (5 min)
// while enough GPUs for it are free, then takes them; so no ticket, honest or
// forged, delays anyone longer, and a large job goes first when the jobs on the
// GPUs it waits for end within that time (the price: a GPU idle that long).
// A ticket holds one line, "gpus=<n>\n": how many GPUs its waiter needs, which `gpusel
// list` shows (Note [The wait line shown] in wait_line-inl.hpp); the order reads none of it.
// Only a waiter that leases could serve keeps a ticket: one that waits for what
// no lease holds (another's process) waits out of line, and one no GPU could
// serve even idle fails at once. Jobs that do not wait take what is free: a
// ticket holds up only later waiters, never anyone's GPUs.

class WaitLine {
 public:
  // Opens the lease directory; throws Error when it cannot be used.
  GPUSEL_API WaitLine();
  GPUSEL_API ~WaitLine();
  WaitLine(const WaitLine&) = delete;
  WaitLine& operator=(const WaitLine&) = delete;
  // Takes a place in line for `gpus` GPUs, unless it holds one; throws Error when it cannot.
  GPUSEL_API void join(int gpus);
  // Gives its place up (a later join arrives anew).
  GPUSEL_API void leave() noexcept;
  // "" when no live, running waiter arrived earlier, else who is first
  // ("pid 4242 of uid 1001, waiting for 2 min 5 s"). Removes dead tickets it may.
  GPUSEL_API std::string ahead() const;

 private:
  std::string path_;
  std::string name_;  // the ticket's, once joined
  FileDescriptor directory_;
  FileDescriptor file_;
  long long arrived_ns_ = 0;  // the ticket's ctime, once joined
};

// A live ticket of the line: one its waiter holds locked (Note [Waiting in line]).
struct LiveTicket {
  std::string name;
  uid_t owner = 0;           // the uid its name and the file's owner agree on
  long long arrived_ns = 0;  // its ctime: the arrival
  std::optional<long> pid;   // its waiter, as /proc/locks names it
  std::optional<int> gpus;   // how many GPUs it needs, as its contents say
  bool stopped = false;      // its waiter is stopped (Ctrl-Z): it holds up no one
};

// The live tickets of the lease directory `directory`, in arrival order; changes nothing there.
// Throws Error when it cannot be listed (`path` names it).
GPUSEL_API std::vector<LiveTicket> live_tickets(const FileDescriptor& directory, const std::string& path);

// "45 s", "2 min 5 s", "3 h 20 min", "4 d 2 h": `seconds` for people.
GPUSEL_API std::string duration_text(long long seconds);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/picking/wait_line-inl.hpp"
#endif
