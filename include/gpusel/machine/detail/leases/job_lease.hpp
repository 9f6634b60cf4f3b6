// The job's lease: which GPUs `gpusel run` leased for the job this process belongs
// to (GPUSEL_JOB_LEASE), each checked against the lock its descriptor holds, so that
// picking and leasing inside the job choose among them and reuse the job's lease.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel::detail {

// Note [The job's lease]
// ~~~~~~~~~~~~~~~~~~~~~~
// `gpusel run` leases GPUs, then runs its command with GPUSEL_JOB_LEASE set to
// "UUID:descriptor" for each GPU, comma-separated: the descriptor is the command's
// inherited copy of that GPU's lock (Note [The job holds the lease] in tools/job.cpp).
// Inside the job those GPUs are the allotment: pick chooses among them, any other is
// "not one of this job's GPUs", and leasing one takes no second lock (it would
// conflict with the job's own) but a copy of the job's descriptor, so the lease is
// the job's and lasts while either lives. The string proves nothing by itself: a GPU
// counts as the job's only when its descriptor is a lock file of that GPU in the
// lease directory (fstat and fstatat agree on device and inode) and holds its
// exclusive lock: a fresh open of the file cannot take a shared lock (someone holds
// it exclusively) and the descriptor can take the exclusive one (so that someone is
// this descriptor's open file). A copied or stale variable, a descriptor closed or
// reused, a lock another job holds: the GPU is judged as outside a job, and the
// reason says why GPUSEL_JOB_LEASE did not count. What remains: were the holder to
// let go between the two tries, the descriptor would take the lock itself, a lease
// that skipped the other users' files (Note [Who can break a lease]); only a program
// that opened the lock file itself and named it in the variable can come there.

inline constexpr const char* kJobLeaseVariable = "GPUSEL_JOB_LEASE";

// One GPU GPUSEL_JOB_LEASE names.
struct JobGpu {
  std::string uuid;
  int descriptor = -1;
  std::string problem;  // why it is not the job's ("descriptor 10 holds no lock on it"); "" when it is
};

// GPUSEL_JOB_LEASE, read and checked.
struct JobLease {
  std::optional<std::string> said;  // the variable as set; nullopt outside gpusel run
  std::vector<JobGpu> gpus;         // as listed
  std::string malformed;            // why the variable cannot be read, or ""

  // The GPU `uuid` when the job holds it (checked), else nullptr.
  [[nodiscard]] GPUSEL_API const JobGpu* held(std::string_view uuid) const noexcept;
  // The UUIDs the job holds (checked), as listed.
  [[nodiscard]] GPUSEL_API std::vector<std::string> held_uuids() const;
};

// GPUSEL_JOB_LEASE's value `value` read, nothing checked. Pure.
GPUSEL_API JobLease parse_job_lease(std::string_view value);

// GPUSEL_JOB_LEASE of this process's environment, each GPU checked (Note [The job's lease]).
GPUSEL_API JobLease job_lease();

// A copy (O_CLOEXEC) of the descriptor through which the job holds `uuid`, or -1 when the
// job does not hold it (checked now); the caller closes it.
GPUSEL_API int job_lease_descriptor(std::string_view uuid);

// Why `uuid` may not be chosen inside the job `job`, or nullopt: it is the job's, or
// there is no job (no GPU of GPUSEL_JOB_LEASE checks out).
GPUSEL_API std::optional<std::string> outside_job(const JobLease& job, std::string_view uuid);

// "; GPUSEL_JOB_LEASE names it as this job's, but descriptor 10 holds no lock on ...": why the
// variable did not count for `uuid`, after the reason another lease holds it; "" where it names it not.
GPUSEL_API std::string job_lease_not_counted(const JobLease& job, std::string_view uuid);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/leases/job_lease-inl.hpp"
#endif
