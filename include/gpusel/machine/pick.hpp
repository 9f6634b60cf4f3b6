// Picking free GPUs, like GPUtil, setGPU and nvitop's nvisel do for Python.
//
//   gpusel::PickCriteria criteria;
//   criteria.at_least = 2;                  // Error when fewer fit
//   criteria.min_free_memory = "8GiB";
//   criteria.max_utilization = 10;          // percent
//   auto gpus = gpusel::pick(criteria);     // the best 2, most free memory first
//   gpusel::use_free_gpus(criteria);        // ... and make them this process's cuda:0, cuda:1
//
// Picking reads NVML only (inventory.hpp): it creates no CUDA context and makes
// no CUDA call, so it can run before CUDA starts, as use_free_gpus must.
// This header includes no CUDA header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/error.hpp"
#include "gpusel/machine/inventory.hpp"
#include "gpusel/machine/lease.hpp"
#include "gpusel/machine/physical_order.hpp"
#include "gpusel/machine/pick_criteria.hpp"
#include "gpusel/machine/visibility.hpp"
#include "gpusel/memory_size.hpp"
#include "gpusel/text.hpp"

namespace gpusel {

// Note [Whose process is it]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// NVML lists the compute processes on each GPU by pid; the owner comes from
// /proc/<pid>/status, compared with this process's own real user (read the
// same way, so names and bare uids compare alike). A process in another
// container or PID namespace is not visible in /proc: its owner is unknown,
// and it counts as another user's, since a GPU shared with a job we cannot
// see is exactly what picking is meant to avoid. This user's own processes
// make a GPU busy too: a job of one's own at 100% is no less in the way than
// another user's, and a pick is a GPU nobody is using. Only the caller
// (Caller::pid: the process that picks, which may already hold a context) is
// no obstacle; share_own lets this user's processes share, allow_other_users
// everyone's. When NVML cannot list a GPU's processes at all, the GPU is
// rejected unless allow_other_users is set. Candidate::busy_processes keeps
// the processes that made a GPU busy, for the report.

// Note [One UUID, one GPU]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A broken or virtualized NVML may report one UUID for two GPUs (or MIG
// instances). CUDA_VISIBLE_DEVICES and leases name a GPU by its UUID, so two
// such records cannot be told apart where it matters: -n 2 would print the
// UUID twice and lease one lock file twice. gpusel counts them as one GPU:
// the first in CUDA's physical order is the candidate, each later one is
// rejected with the reason. An empty UUID names nothing and is no duplicate.

// Note [Compute modes in picking]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An administrator can make the driver itself keep jobs apart (`nvidia-smi -c
// EXCLUSIVE_PROCESS`): CUDA then gives a context on the GPU to one process at a
// time and refuses every other, whoever owns it; PROHIBITED refuses all. Leases
// only keep apart jobs started through gpusel, so the mode is the stronger rule
// and picking follows it: a Prohibited GPU is never a candidate, and an
// exclusive one only while no compute process but the caller's runs on it (or
// while its processes are unknown, never). share_own and allow_other_users do
// not relax it: they say what this job may share, and the driver allows no
// sharing at all. gpusel judges a MIG instance by its GPU's mode and the
// instance's own processes (not checked on a real MIG machine).

// Note [MIG instances as picks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The unit of picking is what CUDA can be given: a GPU, or, for a GPU in MIG
// mode, each of its MIG instances (Note [MIG instances] in inventory.hpp); the
// GPU in MIG mode is never picked whole, since CUDA never shows it whole. An
// instance is judged by its own memory and processes (NVML does not measure its
// utilization, so a max_utilization rejects it), and named by its MIG- UUID
// wherever picks are printed, whatever the format, since no index names it in
// CUDA_VISIBLE_DEVICES. CUDA shows one process one MIG instance only (CUDA 11
// and 12, NVIDIA's MIG user guide), so several instances picked are for several
// processes, a lease each: instances of one GPU go to different jobs, and the
// whole GPU's lease and any instance's exclude each other (Note [MIG leases]).
// docs/mig.md gives users these rules.

// Why a candidate does not fit: what a program (a wait, the command) switches on. Each
// comes with its sentence, a Rejection.
enum class RejectReason {
  invalid_device_order,  // CUDA_DEVICE_ORDER is neither FASTEST_FIRST nor PCI_BUS_ID: the runtime would fail
  excluded,              // PickCriteria::exclude names it
  hidden,                // CUDA_VISIBLE_DEVICES hides it (PickCriteria::only_visible)
  impossible_readings,   // NVML's readings of it cannot be true
  mig_mode,              // in MIG mode with no MIG instance NVML lists: CUDA never shows it whole
  free_memory,           // less free memory than PickCriteria::min_free_memory, or unknown
  utilization,           // more utilized than PickCriteria::max_utilization, or unknown
  compute_process,       // a compute process not the caller's runs on it, or they are unknown
  compute_mode,          // its compute mode refuses this process a context (Note [Compute modes in picking])
  duplicate_uuid,        // NVML reports another candidate's UUID for it (Note [One UUID, one GPU])
  leased,                // another job holds its lease (Note [Leases] in lease.hpp)
  cannot_be_leased,      // its UUID or its lease files cannot be used, so no lease can hold it
  outside_job,           // inside gpusel run: not one of the job's GPUs (GPUSEL_JOB_LEASE)
};

// RejectReason's name as it is written: "free_memory", "leased", ... (`gpusel pick --json`'s
// "rejected_for"; "?" for a value that names none).
[[nodiscard]] GPUSEL_API const char* describe(RejectReason reason) noexcept;

// One reason a candidate does not fit, and its sentence ("only 7.0 GiB free, 9.0 GiB needed"),
// escaped for a terminal.
struct Rejection {
  RejectReason reason = RejectReason::excluded;
  std::string text;

  friend bool operator==(const Rejection& a, const Rejection& b) { return a.reason == b.reason && a.text == b.text; }
  friend bool operator!=(const Rejection& a, const Rejection& b) { return !(a == b); }
};

// Note [One look per attempt]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An attempt at GPUs reads the machine once (visible_devices: one NVML query) and judges
// each GPU once (assess, then reject_leased_gpus, which reads the lease directory once);
// choose_and_lease leases from those verdicts, and a GPU taken since the look is rejected
// there, not judged again. So the verdicts a user reads are the ones the lease followed,
// and two judgements cannot disagree. pick(), lease_free_gpus, use_free_gpus (which makes
// the GPUs visible on the same map), each look of lease_free_gpus(criteria, wait), and
// `gpusel pick` and `gpusel run` keep to it; tests/machine/pick_through_nvml_test.cpp and
// tests/tool count the fake NVML's reads per attempt.

// One GPU, or one MIG instance of a GPU (Note [MIG instances as picks]), and the verdict on it.
struct Candidate {
  Gpu gpu;                                  // what NVML said
  int physical_index = 0;                   // CUDA's physical index: what an integer in CUDA_VISIBLE_DEVICES names
  std::vector<Rejection> rejections;        // why it does not fit; empty when it fits
  std::optional<MigInstance> mig_instance;  // the MIG instance of `gpu` this is; nullopt: the whole GPU
  // The compute processes that make it busy under the criteria (Note [Whose process is it]).
  std::vector<GpuProcess> busy_processes;

  bool fits() const noexcept { return rejections.empty(); }
  // Whether one of its rejections is for `reason`.
  bool rejected_for(RejectReason reason) const noexcept {
    for (const Rejection& rejection : rejections)
      if (rejection.reason == reason) return true;
    return false;
  }
  // What CUDA_VISIBLE_DEVICES and a lease name it by: the MIG instance's UUID, else the GPU's.
  const std::string& uuid() const noexcept { return mig_instance ? mig_instance->uuid : gpu.uuid; }
  // Its free memory: the MIG instance's, else the GPU's.
  std::optional<std::uint64_t> memory_free_bytes() const noexcept {
    return mig_instance ? mig_instance->memory_free_bytes : gpu.memory_free_bytes;
  }
};

// This process's real user, named as GpuProcess::user names processes' owners
// (so the two compare alike; see Note [Whose process is it]).
GPUSEL_API std::string current_user();

// Who picks (Note [Whose process is it]): the user whose compute processes are its own,
// and the process whose own compute work never makes a GPU busy.
struct Caller {
  std::string user;      // named as GpuProcess::user names owners
  unsigned int pid = 0;  // 0: no process of the machine is the caller's

  // This process: current_user() and getpid().
  [[nodiscard]] GPUSEL_API static Caller this_process();
};

// "pid 4242 of alice (python3), 2.0 GiB", "pid 31337, owner unknown: not visible from this PID namespace".
// The user and command are escaped for a terminal (Note [Hostile text]): any user names their process.
GPUSEL_API std::string describe(const GpuProcess& process);

// A candidate in words, escaped for a terminal: "GPU 1 (nvidia-smi 1, NVIDIA H200,
// GPU-...), 137.5 GiB free, 0% utilized".
GPUSEL_API std::string describe(const Candidate& candidate);

// The farthest connection between any two of `picked` (Note [Connected GPUs]);
// nullopt for fewer than two.
GPUSEL_API std::optional<GpuLink> weakest_link(const std::vector<Candidate>& picked);

// Why `picked` (choose's answer to `criteria`) is connected as it is, escaped for a
// terminal: "GPUs 0 and 1 are joined by NVLink"; with PickPlacement::connected and a
// set farther than NVLink, also that no nearer set fits; "" for fewer than two.
GPUSEL_API std::string describe_connection(const std::vector<Candidate>& picked, const PickCriteria& criteria);

// Every GPU of `map` (each MIG instance, for a GPU in MIG mode: Note [MIG instances
// as picks]), in CUDA's physical order, with the reasons it does not fit `criteria`, for
// `caller` (whose processes are not another user's, and which process is the caller: Note
// [Whose process is it]). Pure: reads nothing but its arguments (the default caller reads
// this process's user). Throws Error for criteria that make no sense, or an exclusion that
// names no candidate.
[[nodiscard]] GPUSEL_API std::vector<Candidate> assess(const PickCriteria& criteria, const DeviceMap& map,
                                                       const Caller& caller = Caller::this_process());

// The GPUs among `assessed` (assess's verdicts) that fit, best first
// (criteria.order; with PickPlacement::connected, the best-connected set: Note
// [Connected GPUs]), at most criteria.at_most of them. Throws Error when fewer
// than criteria.at_least fit, naming every GPU and why it was rejected.
[[nodiscard]] GPUSEL_API std::vector<Candidate> choose(const PickCriteria& criteria, std::vector<Candidate> assessed);

// The GPUs of `map` that fit: choose(criteria, assess(criteria, map, caller)).
// Pure, like assess. Throws Error when the map is unknown (no NVML) or fewer
// than criteria.at_least fit.
[[nodiscard]] GPUSEL_API std::vector<Candidate> pick(const PickCriteria& criteria, const DeviceMap& map,
                                                     const Caller& caller = Caller::this_process());

// Rejects, among `assessed`, every GPU another lease holds (Note [Leases] in
// lease.hpp: RejectReason::leased), with who holds it, every GPU whose UUID or
// lease files cannot be used (cannot_be_leased), with why and whose, and inside
// gpusel run every GPU not the job's (outside_job). Throws Error when the lease
// directory cannot be used.
GPUSEL_API void reject_leased_gpus(std::vector<Candidate>& assessed);

// The GPUs of this machine that fit, read through NVML now, GPUs that another
// job leases counting as busy (reject_leased_gpus); takes no lease itself. Among
// the visible GPUs (criteria.only_visible), it throws Error where Slurm gave this
// process GPUs without naming them (Note [The GPUs this process may choose among]) or
// named them in numbers CUDA reads otherwise (Note [Slurm's GPU numbers]), as the
// next two do.
[[nodiscard]] GPUSEL_API std::vector<Candidate> pick(const PickCriteria& criteria = {});

// Picked GPUs and the lease that holds them: while `lease` lives, no other job
// that leases through gpusel gets them.
struct [[nodiscard]] LeasedGpus {
  std::vector<Candidate> gpus;  // best first
  GpuLease lease;
};

// Chooses among `assessed` (assess's verdicts, leased GPUs rejected: reject_leased_gpus)
// as choose() does, and leases what it chose, judging nothing again: a GPU another job
// leased since the look, or whose UUID or lease files cannot be used, is rejected with
// the reason (RejectReason::leased, cannot_be_leased) and the choice made again without
// it, so two jobs never get the same GPU. Throws Error, holding nothing, when too few
// fit or can be leased (choose's message, naming each GPU and why), or the lease
// directory cannot be used.
[[nodiscard]] GPUSEL_API LeasedGpus choose_and_lease(const PickCriteria& criteria, std::vector<Candidate> assessed);

// Picks GPUs of `map` as pick(criteria, map, caller) does, and leases them: assess,
// reject_leased_gpus and choose_and_lease, each once. Throws Error, holding nothing, when
// too few fit or can be leased, or the lease directory cannot be used.
[[nodiscard]] GPUSEL_API LeasedGpus lease_free_gpus(const PickCriteria& criteria, const DeviceMap& map,
                                                    const Caller& caller = Caller::this_process());

// The same on this machine, read through NVML once, for this process.
[[nodiscard]] GPUSEL_API LeasedGpus lease_free_gpus(const PickCriteria& criteria = {});

// Picks and leases GPUs (lease_free_gpus(criteria)) and makes exactly those
// visible to this process, best first: cuda:0 is the best one. Keep the result
// alive for as long as the GPUs are used (until the process ends, usually): its
// lease is what keeps other jobs off them. Must run before CUDA starts (see
// set_visible_devices, which it calls with the GPUs' UUIDs, over the whole
// machine when criteria.only_visible is false); throws Error, and changes
// nothing, when CUDA has started or too few GPUs fit.
[[nodiscard]] GPUSEL_API LeasedGpus use_free_gpus(const PickCriteria& criteria = {});

namespace detail {
// What use_free_gpus and its waiting form share: the Error, naming `function`, when
// CUDA has started; and making `picked` this process's GPUs as `criteria` scope them,
// on `map`, the machine they were picked on (NVML is not read again).
GPUSEL_API void require_cuda_not_started(const char* function);
GPUSEL_API void make_visible(const LeasedGpus& picked, const PickCriteria& criteria, const DeviceMap& map);
}  // namespace detail

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/pick-inl.hpp"
#endif
