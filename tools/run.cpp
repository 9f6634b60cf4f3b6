// gpusel run: free GPUs chosen, leased, and given to a command run on them.
#include <stdlib.h>
#include <unistd.h>

#include <gpusel/machine/lease.hpp>
#include <gpusel/machine/physical_order.hpp>
#include <gpusel/machine/pick.hpp>
#include <gpusel/machine/wait_for_gpus.hpp>
#include <gpusel/text.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "devices.hpp"
#include "job.hpp"
#include "output.hpp"
#include "run.hpp"

namespace gpusel_tool {
namespace {

// Physical GPU `physical` of `map` as PCI_BUS_ID numbers it: what an index means to
// the command, which runs with CUDA_DEVICE_ORDER=PCI_BUS_ID.
int pci_bus_index(const gpusel::DeviceMap& map, int physical) {
  const gpusel::CudaPhysicalOrder pci = gpusel::cuda_physical_order(map.inventory, std::string_view("PCI_BUS_ID"));
  const std::size_t position = map.order.positions[static_cast<std::size_t>(physical)];
  for (int index = 0; index < pci.count(); ++index)
    if (pci.positions[static_cast<std::size_t>(index)] == position) return index;
  return physical;
}

// Criteria that name nothing here, and leases that cannot be read (the lease directory,
// a lock file, a GPU without a UUID), throw Error: no wait can fix them, so run fails
// at once. Too few GPUs that fit is the attempt's failure, which a wait may end.
Attempt attempt_pick(const Arguments& arguments, const gpusel::DeviceMap& map) {
  Attempt attempt;
  require_allotment(map, "run", choosing_of(arguments));  // throws: no wait can fix it
  if (arguments.wait) gpusel::check_wait_can_serve(arguments.criteria, map);
  std::vector<gpusel::Candidate> assessed =
      gpusel::assess(arguments.criteria, map);  // once: Note [One look per attempt]
  gpusel::reject_leased_gpus(assessed);
  try {
    attempt.chosen = gpusel::choose(arguments.criteria, assessed);
  } catch (const gpusel::Error& error) {
    attempt.failure = error_text(error);
    return attempt;
  }
  if (!arguments.lease) return attempt;
  for (const gpusel::Candidate& candidate : attempt.chosen)
    if (candidate.uuid().empty())  // a lock file is named by the UUID
      throw gpusel::Error("cannot lease " + gpusel::describe(candidate) + ": NVML reports no UUID for it");
  try {  // leases from these verdicts, passing over a GPU another job leases first
    gpusel::LeasedGpus leased = gpusel::choose_and_lease(arguments.criteria, std::move(assessed));
    attempt.chosen = std::move(leased.gpus);
    attempt.lease = std::move(leased.lease);
  } catch (const gpusel::Error& error) {
    attempt.chosen.clear();
    attempt.failure = error_text(error);
  }
  return attempt;
}

// Says, once, that run waits, for what and why: the failure's first line, less what
// `what` says already and the colon that led to its list.
void say_waiting(const Arguments& arguments, const std::string& failure) {
  const std::string what = arguments.local_rank ? std::string("this rank's GPU to be free of other leases")
                                                : gpusel::describe(arguments.criteria);
  std::string first_line = failure.substr(0, failure.find('\n'));
  if (const auto at = first_line.find(" (" + what + ")"); at != std::string::npos)
    first_line.erase(at, what.size() + 3);
  if (!first_line.empty() && first_line.back() == ':') first_line.pop_back();
  std::cerr << "gpusel: waiting for " << what
            << (arguments.wait_at_most ? " (at most " + std::to_string(arguments.wait_at_most->count() / 1000) + "s)"
                                       : std::string(" (no time limit)"))
            << ": " << gpusel::escape_for_terminal(first_line) << "\n";
}

// What ends run while the library waits for it: the exit status, said already.
struct Ended {
  int status;
};

// run --wait of picked GPUs, leased: gpusel::lease_free_gpus with a wait, in line with the
// other waiting jobs (Note [Waiting in line]). `map` is the machine as last read. Returns
// the exit status when run ends here, nullopt once `attempt` holds the GPUs.
std::optional<int> lease_in_line(const Arguments& arguments, gpusel::DeviceMap& map, Attempt& attempt) {
  gpusel::WaitForGpus wait;
  wait.at_most = arguments.wait_at_most;
  wait.on_wait = [&arguments](const std::string& why) { say_waiting(arguments, error_text(why)); };
  wait.read_devices = [&arguments, &map] {
    std::optional<gpusel::DeviceMap> read =
        read_devices(usage(arguments.criteria.placement == gpusel::PickPlacement::connected), arguments.nvml_timeout);
    if (!read) throw Ended{report_nvml_hung(arguments, kExitRunFailed)};
    if (!read->known()) {
      (void)report_no_gpus(*read, false);
      throw Ended{kExitRunFailed};
    }
    map = in_slurm_numbers(*read);                          // throws: no wait can fix it
    require_allotment(map, "run", choosing_of(arguments));  // throws: no wait can fix it
    return map;
  };
  try {
    gpusel::LeasedGpus leased = gpusel::lease_free_gpus(arguments.criteria, wait);
    attempt.chosen = std::move(leased.gpus);
    attempt.lease = std::move(leased.lease);
    return std::nullopt;
  } catch (const Ended& ended) {
    return ended.status;
  } catch (const gpusel::WaitTimedOut& error) {
    std::cerr << "gpusel: " << escape_lines(error_text(error)) << "\ngpusel: gave up waiting\n";
  } catch (const gpusel::Error& error) {  // no wait can fix it
    std::cerr << "gpusel: " << escape_lines(error_text(error)) << "\ngpusel: not waiting: no wait can fix this\n";
  }
  return kExitRunFailed;
}

// The GPUs for run, tried once or, with --wait, until they fit (not in line: --no-lease or
// --local-rank). `map` is the machine as last read. Returns the exit status when run ends
// here, nullopt once `attempt` holds the GPUs.
std::optional<int> attempt_until_chosen(const Arguments& arguments, gpusel::DeviceMap& map, Attempt& attempt) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  bool said_waiting = false, said_rank = false;
  if (arguments.lease) {  // a lease directory no wait can fix: say so now (only a lease may make it)
    try {
      gpusel::check_lease_directory();
    } catch (const gpusel::Error& error) {
      std::cerr << escape_lines(error.what()) << "\n";
      if (arguments.wait) std::cerr << "gpusel: not waiting: no wait can fix this\n";
      return kExitRunFailed;
    }
  }
  while (true) {
    std::optional<gpusel::DeviceMap> read =
        read_devices(usage(arguments.criteria.placement == gpusel::PickPlacement::connected), arguments.nvml_timeout);
    if (!read) return report_nvml_hung(arguments, kExitRunFailed);
    map = std::move(*read);
    if (!map.known()) {
      (void)report_no_gpus(map, false);
      return kExitRunFailed;
    }
    try {
      map = in_slurm_numbers(map);  // Note [Slurm's GPU numbers]
      attempt = arguments.local_rank ? attempt_local_rank(arguments, map, said_rank) : attempt_pick(arguments, map);
    } catch (const gpusel::Error& error) {  // no wait can fix it
      std::cerr << "gpusel: " << escape_lines(error_text(error)) << "\n";
      if (arguments.wait) std::cerr << "gpusel: not waiting: no wait can fix this\n";
      return kExitRunFailed;
    }
    if (attempt.failure.empty()) return std::nullopt;
    const bool time_left =
        arguments.wait && (!arguments.wait_at_most || Clock::now() - started < *arguments.wait_at_most);
    if (!time_left) {
      std::cerr << "gpusel: " << escape_lines(attempt.failure) << "\n";
      if (arguments.wait) std::cerr << "gpusel: gave up waiting\n";
      return kExitRunFailed;
    }
    if (!said_waiting) say_waiting(arguments, attempt.failure);
    said_waiting = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// Gives the command the GPUs chosen (CUDA_VISIBLE_DEVICES), says so, and runs it.
int run_on(const Arguments& arguments, const gpusel::DeviceMap& map, const Attempt& attempt) {
  std::string value;
  for (const gpusel::Candidate& candidate : attempt.chosen)
    value += (value.empty() ? "" : ",") + (arguments.print_uuids || candidate.mig_instance
                                               ? candidate.uuid()
                                               : std::to_string(pci_bus_index(map, candidate.physical_index)));
  const std::vector<std::string>& jobs = attempt.lease.job_uuids();
  for (const gpusel::Candidate& candidate : attempt.chosen)
    std::cerr << "gpusel: " << (attempt.lease.empty() ? "using " : "leased ")
              << gpusel::escape_for_terminal(gpusel::describe(candidate))
              << (std::find(jobs.begin(), jobs.end(), candidate.uuid()) != jobs.end()
                      ? ": the job's lease (GPUSEL_JOB_LEASE), taken for this sub-job"
                      : "")
              << "\n";
  say_what_was_chosen(arguments, attempt.chosen);
  const LentLease lent(attempt.lease);  // held until the whole job has ended
  if (!lent.failure().empty()) {
    std::cerr << "gpusel: cannot lend the lease to the command: " << lent.failure() << "\n";
    return kExitRunFailed;
  }
  std::cerr << "gpusel: running " << gpusel::escape_for_terminal(arguments.command_line[0])
            << " with CUDA_VISIBLE_DEVICES=" << gpusel::escape_for_terminal(value)
            << (arguments.print_uuids ? "" : " CUDA_DEVICE_ORDER=PCI_BUS_ID")
            << (lent.variable().empty() ? "" : " GPUSEL_JOB_LEASE=" + lent.variable()) << "\n";
  if (setenv("CUDA_VISIBLE_DEVICES", value.c_str(), 1) != 0 ||
      (!arguments.print_uuids && setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1) != 0) ||
      (!lent.variable().empty() && setenv("GPUSEL_JOB_LEASE", lent.variable().c_str(), 1) != 0) ||
      (!lent.variable().empty() && setenv("GPUSEL_JOB_LOCKS", lent.locks_variable().c_str(), 1) != 0)) {
    std::cerr << "gpusel: setenv failed\n";
    return kExitRunFailed;
  }
  return start_and_wait(arguments.command_line, lent);
}

}  // namespace

int run_run(const Arguments& arguments) {
  if (const std::optional<int> cannot = refuse_unrunnable(arguments.command_line)) return *cannot;
  gpusel::DeviceMap map;
  Attempt attempt;
  // Only jobs that wait for a lease keep to the line: a job that does not wait takes what is free.
  const bool in_line = arguments.wait && arguments.lease && !arguments.local_rank;
  if (const std::optional<int> ended =
          in_line ? lease_in_line(arguments, map, attempt) : attempt_until_chosen(arguments, map, attempt))
    return *ended;
  return run_on(arguments, map, attempt);
}

}  // namespace gpusel_tool
