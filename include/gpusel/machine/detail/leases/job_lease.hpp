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
#include "gpusel/machine/lease_directory.hpp"

namespace gpusel::detail {

// Note [The job's lease]
// ~~~~~~~~~~~~~~~~~~~~~~
// `gpusel run` leases GPUs, then runs its command with GPUSEL_JOB_LEASE set to
// "UUID:descriptor" for each GPU, comma-separated: the descriptor is the command's
// inherited copy of that GPU's lock (Note [The job holds the lease] in tools/job.cpp).
// Inside the job those GPUs are the allotment: pick chooses among them, any other is
// "not one of this job's GPUs", and leasing one takes no second lock of the GPU (it
// would conflict with the job's own) but a copy of the job's descriptor, so the lease is
// the job's and lasts while either lives, and its member file (Note [A job's members]). The string proves nothing by
// itself: a GPU counts as the job's only when its descriptor is a lock file of that GPU in the lease directory (fstat
// and fstatat agree on device and inode) and holds its exclusive lock: a fresh open of the file cannot take a shared
// lock (someone holds it exclusively) and the descriptor can take the exclusive one (so that someone is this
// descriptor's open file). A copied or stale variable, a descriptor closed or reused (but where ancestry proves the
// process a member: Note [A job's members]), a lock another job holds: the GPU is judged as outside a job, and the
// reason says why GPUSEL_JOB_LEASE did not count. What remains: were the holder to let go between the two tries, the
// descriptor would take the lock itself, a lease that skipped the other users' files (Note [Who can break a lease]);
// only a program that opened the lock file itself and named it in the variable can come there.

inline constexpr const char* kJobLeaseVariable = "GPUSEL_JOB_LEASE";
// "UUID:inode,...": the inode of each lock GPUSEL_JOB_LEASE's descriptors hold, the level a
// member whose descriptors were closed asks at (Note [A job's members]).
inline constexpr const char* kJobLocksVariable = "GPUSEL_JOB_LOCKS";

// One GPU GPUSEL_JOB_LEASE names.
struct JobGpu {
  std::string uuid;
  int descriptor = -1;
  std::string problem;                 // why it is not the job's ("descriptor 10 holds no lock on it"); "" when it is
  unsigned long long lock_inode = 0;   // the job's: the inode of the lock file it holds the GPU by
  unsigned long long named_inode = 0;  // GPUSEL_JOB_LOCKS's inode for it, or 0
  long anchor = 0;  // the job's by ancestry: the ancestor holding that lock (Note [A job's members]); 0 by descriptor
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

// Note [A job's members]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A process of the job that leases one of the job's GPUs (a nested `gpusel run`,
// use_free_gpus, lease_gpu) takes it for itself: an exclusive flock(LOCK_NB) on the
// GPU's member file, gpusel-<UUID>.<uid>.<inode>.lock beside the lease files, <inode>
// that of the lock the job holds the GPU by, so each nesting level has its own (a
// sub-job holds its GPU by a member file, and its command's asks take the member files
// keyed by that one). A member file held is a GPU taken: another member passes it over,
// and an ask beyond the job's untaken GPUs fails (or waits). The kernel drops the lock
// when the member ends. Member files are lock files of the GPU to every other job, so a
// member holds the GPU also once the job's own lock is gone.
// Membership is proved by the job's descriptor (Note [The job's lease]) or, where it was
// closed (Python's subprocess closes every descriptor), by ancestry: a lock file of the
// GPU is held exclusively (a fresh shared lock fails) by a process that /proc/locks names
// as its taker, that has the file open (/proc/<pid>/fd) and that is an ancestor of this
// process (/proc/<pid>/stat, parent by parent), the lock GPUSEL_JOB_LOCKS names beside the
// descriptor (a hint, proving nothing: so a process that took a GPU does not lend it to
// its workers, by ancestry or by descriptor alike); else the nearest such ancestor's.
// A copied variable cannot pass: a process outside the job has no such ancestor (its
// ancestors hold no lock of the GPU), and a pid the variable names is never trusted. Cost
// per ask, only where a descriptor did not count: one read of /proc/locks, the ancestors'
// stat files, one listing of the directory, and the descriptors of the lock's taker.
// While members outlive the command: those holding the job's descriptor keep the job's
// lease; those proved by ancestry hold their member file (the GPU stays held to other
// jobs) but, once the job's `gpusel run` has ended, can no longer prove membership for
// new asks; nor can a daemon that both double-forks (init is its parent) and closes the
// job's descriptors. `list` inside the job says which GPUs a member took (member_took).
// A process of the same user that opens the lock file and locks it itself is a
// lease of its own, not a member (Note [Who can break a lease]).

// What a process of the job gets when it asks for one of the job's GPUs (Note [A job's members]).
struct JobShare {
  enum class Outcome { not_the_jobs, taken, held_by_member, unusable } outcome = Outcome::not_the_jobs;
  FileDescriptor member;    // taken: the member file, locked exclusively
  FileDescriptor job_copy;  // taken by descriptor: a copy (O_CLOEXEC) of the job's, so the job's lease lasts too
  std::string reason;       // held_by_member or unusable: why
};

// Whether a process of the job holds `gpu`'s member file in `directory` (a look: a shared lock
// tried for an instant); `pid` is the one /proc/locks names as its taker, when one does.
GPUSEL_API bool taken_by_member(const FileDescriptor& directory, const JobGpu& gpu, std::optional<long>& pid);

// Takes `uuid` for this process when the job holds it (checked now; Note [A job's members]).
GPUSEL_API JobShare take_job_gpu(std::string_view uuid);

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
