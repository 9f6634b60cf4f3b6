// The definitions of gpusel/machine/wait_for_gpus.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/wait_for_gpus.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <thread>
#include <utility>
#include <vector>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/detail/picking/choosing.hpp"
#include "gpusel/machine/detail/picking/criteria_checks.hpp"
#include "gpusel/machine/detail/picking/wait_line.hpp"
#include "gpusel/machine/detail/system/process_files.hpp"
#include "gpusel/machine/detail/system/system_text.hpp"
#include "gpusel/text.hpp"

namespace gpusel {

namespace detail {

// `gpu` as it would read idle: no process, no memory used, 0% utilized.
inline void make_idle(Gpu& gpu) {
  if (gpu.memory_total_bytes) {
    gpu.memory_used_bytes = 0;
    gpu.memory_free_bytes =
        *gpu.memory_total_bytes - std::min(*gpu.memory_total_bytes, gpu.memory_reserved_bytes.value_or(0));
  }
  gpu.utilization_percent = 0;
  if (gpu.processes) gpu.processes->clear();
  for (MigInstance& instance : gpu.mig_instances) {
    if (instance.memory_total_bytes) {
      instance.memory_used_bytes = 0;
      instance.memory_free_bytes = instance.memory_total_bytes;
    }
    if (instance.processes) instance.processes->clear();
  }
}

// How many of `assessed` fit.
inline std::size_t fitting(const std::vector<Candidate>& assessed) {
  return static_cast<std::size_t>(
      std::count_if(assessed.begin(), assessed.end(), [](const Candidate& candidate) { return candidate.fits(); }));
}

// Whether enough of `assessed` fit `criteria` for choose() to choose.
inline bool enough_fit(const PickCriteria& criteria, const std::vector<Candidate>& assessed) {
  return static_cast<long long>(fitting(assessed)) >= criteria.at_least;
}

// What one look of lease_free_gpus(criteria, wait) finds on `map`, the line aside.
struct MachineForWaiter {
  std::vector<Candidate> now;      // assessed, leased GPUs rejected
  bool fits_now = false;           // enough GPUs fit now
  bool lease_could_serve = false;  // enough would fit once the GPUs that leases hold end
};

// The GPUs of `map` assessed as if idle, for `caller`; throws Error, saying why, when too few of
// them meet `criteria` (`function` throws it): no wait can.
inline std::vector<Candidate> assess_idle(const PickCriteria& criteria, const DeviceMap& map, const Caller& caller,
                                          const char* function) {
  DeviceMap idle_map = map;
  for (Gpu& gpu : idle_map.inventory.gpus) make_idle(gpu);
  std::vector<Candidate> idle = assess(criteria, idle_map, caller);
  if (!enough_fit(criteria, idle))
    throw Error(std::string(function) + ": no wait can meet this request: even with every GPU idle, " +
                too_few_fit(criteria, idle, fitting(idle)));
  return idle;
}

// Whether `candidate` is rejected for what reject_leased_gpus judges: another job's lease,
// lease files that cannot be used, or a GPU not the job's.
inline bool rejected_by_leases(const Candidate& candidate) {
  return candidate.rejected_for(RejectReason::leased) || candidate.rejected_for(RejectReason::cannot_be_leased) ||
         candidate.rejected_for(RejectReason::outside_job);
}

// Note [A GPU no wait can free]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A GPU whose lease files cannot be used (another user's unreadable file, a directory
// where a lock file belongs) is freed by no lease ending: only the files' owner or root
// can mend it. A waiter counts it as it is, not as idle once leases end: when too few
// GPUs remain that could serve it even idle, the request fails at once with each GPU's
// reason (no wait can meet it), rather than wait with no end holding a ticket every
// later waiter yields to; when enough remain, it waits for those.

// Throws Error, saying why, when no GPU of `map` could meet `criteria` even idle: no wait can.
inline MachineForWaiter look_at_machine(const PickCriteria& criteria, const DeviceMap& map, const Caller& caller) {
  std::vector<Candidate> idle = assess_idle(criteria, map, caller, "gpusel::lease_free_gpus");
  MachineForWaiter look;
  look.now = assess(criteria, map, caller);
  reject_leased_gpus(look.now);
  for (std::size_t i = 0; i < idle.size(); ++i)  // no lease ending frees it: Note [A GPU no wait can free]
    for (const Rejection& rejection : look.now[i].rejections)
      if (rejection.reason == RejectReason::cannot_be_leased) idle[i].rejections.push_back(rejection);
  if (!enough_fit(criteria, idle))
    throw Error("gpusel::lease_free_gpus: no wait can meet this request: " +
                too_few_fit(criteria, idle, fitting(idle)));
  std::vector<Candidate> leases_ended = look.now;
  for (std::size_t i = 0; i < leases_ended.size(); ++i)
    if (rejected_by_leases(leases_ended[i])) leases_ended[i] = idle[i];  // leased: idle once it ends
  look.fits_now = enough_fit(criteria, look.now);
  look.lease_could_serve = enough_fit(criteria, leases_ended);
  return look;
}

// One look of lease_free_gpus(criteria, wait) at `map`: the GPUs leased, or why not
// (`why`, which a wait may end). Throws Error for what no wait can fix.
struct LookInLine {
  std::optional<LeasedGpus> leased;
  std::string why;
  bool yielded = false;     // enough GPUs fit, but an earlier waiter goes first
  bool keep_place = false;  // what it waits for is leases ending
};
inline LookInLine look_in_line(const PickCriteria& criteria, const DeviceMap& map, const Caller& caller,
                               const WaitLine& line, bool yield) {
  if (!map.known()) throw Error("gpusel::pick: cannot see the GPUs without NVML: " + map.inventory.reason);
  MachineForWaiter machine = look_at_machine(criteria, map, caller);
  LookInLine look;
  look.keep_place = machine.lease_could_serve;
  const std::string ahead = yield ? line.ahead() : std::string();
  if (!ahead.empty()) {
    look.why = "another job waits for GPUs first (" + ahead + "): waiting jobs are served in arrival order";
    look.yielded = machine.fits_now;
    return look;
  }
  std::vector<Candidate> chosen;
  try {
    chosen = choose(criteria, machine.now);
  } catch (const Error& error) {  // too few fit
    look.why = error.what();
    return look;
  }
  for (const Candidate& candidate : chosen)
    if (candidate.uuid().empty())  // a lock file is named by the UUID
      throw Error("gpusel: cannot lease " + describe(candidate) + ": NVML reports no UUID for it");
  try {  // leases from these verdicts, passing over a GPU another job leases first
    look.leased = choose_and_lease(criteria, std::move(machine.now));
  } catch (const Error& error) {
    look.why = error.what();
  }
  return look;
}

}  // namespace detail

GPUSEL_API void check_wait_can_serve(const PickCriteria& criteria, const DeviceMap& map) {
  (void)detail::assess_idle(criteria, map, Caller::this_process(), "gpusel::check_wait_can_serve");
}

GPUSEL_API LeasedGpus detail::lease_in_line(const PickCriteria& criteria, const WaitForGpus& wait, DeviceMap& map) {
  using Clock = std::chrono::steady_clock;
  const Caller caller = Caller::this_process();
  const auto started = Clock::now();
  detail::WaitLine line;  // throws Error when the lease directory cannot be used
  bool said = false;
  Clock::duration yielded{};  // while enough GPUs fit (Note [Waiting in line]: the bound)
  std::optional<Clock::time_point> yielding_since;
  while (true) {
    map = wait.read_devices ? wait.read_devices() : visible_devices(detail::usage_for(criteria));
    const bool yield = yielded < wait.yield_at_most;
    detail::LookInLine look = detail::look_in_line(criteria, map, caller, line, yield);
    if (look.leased) return std::move(*look.leased);  // the line's ticket goes: the next in line may go
    const auto now = Clock::now();
    if (yielding_since) yielded += now - *yielding_since;
    yielding_since = look.yielded ? std::optional<Clock::time_point>(now) : std::nullopt;
    if (look.yielded && yielded >= wait.yield_at_most) continue;  // the bound: look again now, not in line
    if (wait.at_most && now - started >= *wait.at_most) throw WaitTimedOut(look.why);
    if (look.keep_place)
      line.join(criteria.at_least);
    else
      line.leave();  // it waits for what no lease holds: it holds up no one
    if (!said && wait.on_wait) wait.on_wait(look.why);
    said = true;
    std::this_thread::sleep_for(wait.interval);
  }
}

GPUSEL_API LeasedGpus lease_free_gpus(const PickCriteria& criteria, const WaitForGpus& wait) {
  DeviceMap map;
  return detail::lease_in_line(criteria, wait, map);
}

GPUSEL_API LeasedGpus use_free_gpus(const PickCriteria& criteria, const WaitForGpus& wait) {
  detail::require_cuda_not_started("gpusel::use_free_gpus");
  DeviceMap map;
  LeasedGpus picked = detail::lease_in_line(criteria, wait, map);
  detail::make_visible(picked, criteria, map);  // on the last look's map: Note [One look per attempt]
  return picked;
}

GPUSEL_API std::string WaitingJob::describe() const {
  std::string text = pid ? "pid " + std::to_string(*pid) : std::string("a job");
  text += " of " + escape_for_terminal(detail::user_text(user));
  if (gpus)
    text += " for " + std::to_string(*gpus) + (*gpus == 1 ? " GPU" : " GPUs");
  else
    text += " for GPUs (how many, its ticket does not say)";
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  text += " since " + detail::local_time_text(since) + " (" +
          detail::duration_text(static_cast<long long>(now.tv_sec) - since) + ")";
  if (stopped) text += ", stopped: it holds up no one";
  return text;
}

GPUSEL_API std::vector<WaitingJob> waiting_jobs() {
  const std::string path = lease_directory();
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0 && errno == ENOENT) return {};  // nobody has waited here
  const detail::FileDescriptor directory = detail::open_lease_directory(path);
  std::vector<WaitingJob> jobs;
  for (detail::LiveTicket& ticket : detail::live_tickets(directory, path)) {
    WaitingJob job;
    job.ticket = std::move(ticket.name);
    job.user = ticket.owner;
    job.pid = ticket.pid;
    job.gpus = ticket.gpus;
    job.since = ticket.arrived_ns / 1000000000ll;
    job.stopped = ticket.stopped;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

}  // namespace gpusel
