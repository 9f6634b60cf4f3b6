// The line of jobs that wait for GPUs in the lease directory (Note [Waiting in line]):
// lease_free_gpus(criteria, wait) in select.hpp, which `gpusel run --wait` calls.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <string>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/lease_directory.hpp"

namespace gpusel::detail {

// Note [Waiting in line]
// ~~~~~~~~~~~~~~~~~~~~~~
// Jobs that wait for GPUs (lease_free_gpus with a wait, `gpusel run --wait`) are
// served in arrival order, so a job that needs 4 GPUs is not overtaken forever by
// a stream of 1-GPU jobs. A job notes when it arrived
// (CLOCK_REALTIME); once an attempt fails it joins the line: a ticket,
// wait-<ns>-<pid>.<uid>.ticket in the lease directory, flock'ed while it waits,
// made under a temporary name and renamed into place once locked, so no one sees
// it unlocked. A waiting job tries only while no locked ticket of an earlier
// arrival exists, and gives its ticket up once it has leased or given up. A ticket
// left by a crash holds no lock and is passed over. Only waiting jobs keep to the
// line: a job that does not wait takes what is free, and a ticket holds up only
// later waiters, never anyone's GPUs; a waiter that never gets what it waits for
// (no time limit) holds up the waiters behind it, and their message names it.
class WaitLine {
 public:
  // Notes the arrival; throws Error when the lease directory cannot be used.
  GPUSEL_API WaitLine();
  GPUSEL_API ~WaitLine();
  WaitLine(const WaitLine&) = delete;
  WaitLine& operator=(const WaitLine&) = delete;
  // Takes the place of this arrival in the line, once; throws Error when it cannot.
  GPUSEL_API void join();
  // "" when no earlier arrival waits, else who is first ("pid 4242 of uid 1001, waiting for 12 s").
  GPUSEL_API std::string ahead() const;

 private:
  std::string path_;
  std::string name_;  // the ticket's, once joined
  FileDescriptor directory_;
  FileDescriptor file_;
  unsigned long long arrived_ = 0;
  long pid_ = 0;
};
}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/machine/picking/wait_line-inl.hpp"
#endif
