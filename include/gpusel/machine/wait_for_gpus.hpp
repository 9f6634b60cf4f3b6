// Waiting for free GPUs: a server at start-up, or `gpusel run --wait`, leases
// GPUs that fit as soon as they do, in line with every other process that
// waits in the same lease directory.
//
//   gpusel::WaitForGpus wait;
//   wait.at_most = std::chrono::minutes(30);
//   wait.on_wait = [](const std::string& why) { std::cerr << "waiting: " << why << "\n"; };
//   gpusel::LeasedGpus gpus = gpusel::use_free_gpus(criteria, wait);  // then cuda:0, cuda:1, ...
//   for (const gpusel::WaitingJob& job : gpusel::waiting_jobs()) std::cout << job.describe() << "\n";
//
// This header includes no CUDA header.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/error.hpp"
#include "gpusel/machine/pick.hpp"
#include "gpusel/machine/pick_criteria.hpp"
#include "gpusel/machine/visibility.hpp"

namespace gpusel {

// How lease_free_gpus(criteria, wait) waits for GPUs that fit.
struct WaitForGpus {
  // The longest wait; nullopt: until enough GPUs fit.
  std::optional<std::chrono::milliseconds> at_most;
  // The time between two looks at the machine.
  std::chrono::milliseconds interval{500};
  // The longest this waiter lets earlier waiters go first, in all, while enough GPUs
  // for it are free; then it takes them (the line's bound: Note [Waiting in line]).
  std::chrono::milliseconds yield_at_most{std::chrono::minutes(5)};
  // Called once, when the first look finds too few GPUs, with why (what choose's Error
  // says, or which earlier waiter goes first); empty: nothing is said.
  std::function<void(const std::string& why)> on_wait;
  // Reads the machine for each look; empty: visible_devices through NVML, as
  // lease_free_gpus(criteria) reads it.
  std::function<DeviceMap()> read_devices;
  // What on_wait or read_devices throws ends the wait there, holding nothing.
};

// The wait of lease_free_gpus(criteria, wait) ended (WaitForGpus::at_most) before
// enough GPUs fit; what() says why the last look failed.
class WaitTimedOut : public Error {
 public:
  using Error::Error;
};

// lease_free_gpus(criteria), waiting while too few GPUs fit: it looks again every
// wait.interval, in line with the other processes that wait for GPUs in the same
// lease directory, which are served in arrival order within wait.yield_at_most (Note
// [Waiting in line]), until it leases or wait.at_most has passed (WaitTimedOut,
// holding nothing). What no wait can fix throws Error at once: a request no GPU here
// could meet even idle (more GPUs than there are, more memory than any has),
// criteria that name nothing here, a lease directory that cannot be used, a GPU NVML
// gives no UUID, no NVML. `gpusel run --wait` waits so.
[[nodiscard]] GPUSEL_API LeasedGpus lease_free_gpus(const PickCriteria& criteria, const WaitForGpus& wait);

// Throws Error, saying why, when no GPU of `map` could meet `criteria` even idle (more
// GPUs than there are, more memory than any has): no wait can serve the request.
// lease_free_gpus and use_free_gpus with a wait check it first; a program that waits in
// a loop of its own (`gpusel run --wait --no-lease`) calls it before waiting.
GPUSEL_API void check_wait_can_serve(const PickCriteria& criteria, const DeviceMap& map);

// use_free_gpus(criteria), waiting for the GPUs as lease_free_gpus(criteria, wait) does.
[[nodiscard]] GPUSEL_API LeasedGpus use_free_gpus(const PickCriteria& criteria, const WaitForGpus& wait);

// A job that waits in line for GPUs in the lease directory (lease_free_gpus with a wait,
// `gpusel run --wait`), as waiting_jobs() reads its ticket.
struct WaitingJob {
  std::string ticket;       // the ticket's name in the lease directory
  uid_t user = 0;           // the ticket's owner
  std::optional<long> pid;  // the waiting process, as /proc/locks names it (nullopt: in another PID namespace)
  std::optional<int> gpus;  // how many GPUs it needs, as its ticket says (nullopt: it says nothing readable)
  std::int64_t since = 0;   // its arrival in line, in seconds since the epoch: the ticket's ctime
  bool stopped = false;     // the process is stopped (Ctrl-Z): it holds up no one
  // "pid 4242 of alice (uid 1001) for 2 GPUs since 2026-12-08 00:01:02 (3 min 5 s)", local
  // time; control bytes escaped.
  GPUSEL_API std::string describe() const;
};

// The jobs that wait in line for GPUs in the lease directory, first arrived first: one for
// each live ticket (its waiter holds it locked); a ticket whose waiter ended is left out.
// Changes nothing there; none where the lease directory does not exist. Throws Error when
// it cannot be used. `gpusel list` shows them.
[[nodiscard]] GPUSEL_API std::vector<WaitingJob> waiting_jobs();

namespace detail {
// lease_free_gpus(criteria, wait), leaving in `map` the machine as its last look read it.
[[nodiscard]] GPUSEL_API LeasedGpus lease_in_line(const PickCriteria& criteria, const WaitForGpus& wait,
                                                  DeviceMap& map);
}  // namespace detail

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/wait_for_gpus-inl.hpp"
#endif
