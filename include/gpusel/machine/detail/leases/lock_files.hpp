// A lease's lock files (Note [Lease files] in gpusel/machine/lease.hpp): the UUID
// checked as a file's name, the lease directory listed for other users' files of a
// GPU, this user's own file opened, and a GPU locked against every user. lease.hpp's
// definitions take leases with them; lease_states.hpp looks at the leases others hold.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/machine/lease_directory.hpp"

namespace gpusel::detail {

// What begins the name of each lock file (Note [Lease files]).
inline constexpr const char* kLeaseFilePrefix = "gpusel-";

// The names in `directory` ("." and ".." left out), listed through a descriptor of its own so
// that `directory`'s offset stays where it was; nullopt, with errno saying why, when it cannot
// be listed.
GPUSEL_API std::optional<std::vector<std::string>> directory_names(const FileDescriptor& directory);

// Whether `name` is the name of a lock file of `uuid`: "gpusel-<UUID>.<...>.lock", a lease file
// or a member file (Note [Lease files]).
GPUSEL_API bool names_lock_file_of(std::string_view name, std::string_view uuid) noexcept;

// The mode of lock files and tickets: readable by everyone, so that anyone may look, and
// sticky, so that systemd-tmpfiles never ages them (Note [Leases against cleaners]).
inline constexpr mode_t kLeaseFileMode = 01644;

// Whether `uuid` is written as NVML reports a UUID: "GPU-" or "MIG-", then 8-4-4-4-12
// lower-case hexadecimal digits (gpusel::is_lease_name).
GPUSEL_API bool canonical_uuid(std::string_view uuid) noexcept;

// Why `uuid` cannot name a lease file, a sentence ("cannot lease a GPU without a UUID
// (NVML reported none)"), or "" when it can. A lock file is named by the UUID, so only
// NVML's own spelling may name one: an upper-case UUID or a prefix would lock a file of
// its own, excluding no job that names the GPU as NVML does (and none of it leaves the
// directory).
GPUSEL_API std::string lease_name_problem(std::string_view uuid);

// Throws Error("gpusel: " + lease_name_problem(uuid)) when `uuid` cannot name a lease.
GPUSEL_API void check_lease_name(std::string_view uuid);

// The lock file of `uuid` for user `uid`: "gpusel-<UUID>.<uid>.lock" (Note [Who can break a lease]).
GPUSEL_API std::string lease_file_name(std::string_view uuid, uid_t uid);

// The member file of `uuid` for user `uid` under the lock of inode `lock_inode`:
// "gpusel-<UUID>.<uid>.<inode>.lock" (Note [A job's members] in job_lease.hpp).
GPUSEL_API std::string member_file_name(std::string_view uuid, uid_t uid, unsigned long long lock_inode);

// A lock file of a GPU, opened read-only; `owner` as fstat tells it here.
struct LeaseFile {
  FileDescriptor file;
  std::string name;
  uid_t owner = 0;
};

// The directory's lock files other than this process's own, by UUID: each "gpusel-<UUID>.<n>.lock"
// or member file "gpusel-<UUID>.<n>.<m>.lock" whose name is not lease_file_name(UUID, geteuid()). The uid <n> names no
// owner (Note [Lease files]): a rootless container's user writes its own uid, 0. Read once for every GPU a pick looks
// at.
struct LeaseListing {
  std::map<std::string, std::vector<std::string>, std::less<>> others;
  std::string problem;  // why the directory cannot be listed, or ""
};

// Lists `directory`; with `only`, keeps that UUID's files alone.
GPUSEL_API LeaseListing list_other_files(const FileDescriptor& directory, const std::string& path,
                                         std::string_view only = {});

// Visits the lock files of `uuid` that other jobs' leases may hold, from `listing`: every
// regular file, whoever owns it (Note [Lease files]), opened read-only one at a time and
// closed before the next (Note [One lock file at a time]), until `visit` returns false.
// `problem` is set, naming the file and its owner, for one that cannot be opened: it might
// hold a lease unseen; or when the directory could not be listed. Returns false when `visit` did.
GPUSEL_API bool visit_other_files(const FileDescriptor& directory, const std::string& path, std::string_view uuid,
                                  const LeaseListing& listing, std::string& problem,
                                  const std::function<bool(const LeaseFile&)>& visit);

// This user's lock file of `uuid`, made when missing; "" in `problem` unless it cannot be
// used, then why (naming its owner).
GPUSEL_API FileDescriptor open_own_file(const FileDescriptor& directory, const std::string& path,
                                        const std::string& name, std::string& problem);

// flock(operation | LOCK_NB), tried again for a few milliseconds while another process only looks.
GPUSEL_API bool lock_briefly_retrying(int fd, int operation, bool retry);

// One GPU's lock: taken, held by another job, or not to be had (with the reason).
struct LockAttempt {
  enum class Outcome { taken, held, unusable } outcome = Outcome::held;
  LeaseFile own;       // taken: this user's file, locked
  std::string reason;  // unusable: why, naming the file and its owner
};

// Locks `uuid` in `mode` (LOCK_EX or LOCK_SH) against every user (Note [Who can break
// a lease]): this user's file first, verified, then a conflicting lock tried on every
// other user's file of the GPU; any one held is another job's lease. On a conflict
// this user's lock is let go and the round tried again, a bounded number of times,
// so two jobs that lock at once do not both lose for long.
GPUSEL_API LockAttempt lock_for_every_user(const FileDescriptor& directory, const std::string& path,
                                           std::string_view uuid, int mode);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/leases/lock_files-inl.hpp"
#endif
