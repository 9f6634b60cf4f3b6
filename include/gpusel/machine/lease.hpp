// Leases: two jobs on one machine never get the same GPU.
//
//   gpusel::GpuLease lease = gpusel::lease_gpu("GPU-1b2c3d4e-...");   // Error when another job holds it
//   std::optional<gpusel::GpuLease> maybe = gpusel::try_lease_gpu(uuid);  // nullopt when held
//   gpusel::lease_holder(uuid);   // "leased by pid 4242 (...)", or nullopt when free
//
// A lease is an advisory lock (flock) on a file named after the GPU's UUID and
// the user, in one directory per machine (Note [Leases]). The kernel drops it when the lease
// is destroyed or the process ends, however it ends (kill -9 included), so a
// crashed job never keeps a GPU. Picking (pick.hpp) counts a leased GPU as
// busy; `gpusel run` and `gpusel::use_free_gpus` take leases on what they pick.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/error.hpp"
#include "gpusel/machine/inventory.hpp"
#include "gpusel/machine/lease_directory.hpp"

namespace gpusel {

// Note [Leases]
// ~~~~~~~~~~~~~
// What they guarantee: processes of one machine that lease through gpusel (the
// `gpusel run` command, gpusel::use_free_gpus, lease_gpu) and share the lease
// directory never hold the same GPU at once, and a GPU one of them holds counts
// as busy for the others' picks. What they cannot: a job that does not use
// gpusel takes no lease and sees none (it shows up only once it runs a compute
// process, which picking rejects anyway); processes that do not share the
// directory (containers with their own /tmp, systemd's PrivateTmp, other
// machines) do not see each other's leases. Where they live: Note [The lease
// directory]; who could break one: Note [Who can break a lease].
//
// Looking (lease_holder) takes a shared lock for an instant; taking a lease that
// fails because of such a look tries again for a few milliseconds, so two jobs
// looking and leasing at once do not turn each other away.

// Note [Lease files]
// ~~~~~~~~~~~~~~~~~~
// gpusel-<UUID>.<uid>.lock in the lease directory, one per GPU and user, opened
// relative to that directory's descriptor (no path race), first without O_CREAT
// (fs.protected_regular refuses O_CREAT on another user's file in a sticky
// directory), else created with O_CREAT|O_EXCL|O_NOFOLLOW and mode 01644 (fchmod:
// past the umask; others need only read it to look; the sticky bit keeps cleaners
// away: Note [Leases against cleaners]); every descriptor is O_CLOEXEC, so a command
// the process starts inherits none by accident. `gpusel run` hands its command copies
// on purpose (file_descriptors(); Note [The job holds the lease] in tools/job.cpp): a
// flock lock belongs to the open file description, so the lease then lasts until the
// last process of the job ends. A lease is flock(LOCK_NB) on the caller's own file; a
// GPU whose files cannot be used (not a regular file, another user's under the
// caller's name, unreadable) is that GPU's problem alone: picks reject it with the
// reason, naming the file's owner. Being readable, any user may lock another's idle
// file: that is a lease (the GPU is held), and the holder named is the process that
// holds the lock, with its user, as /proc/locks and /proc/<pid>/status show it, never
// the file's owner.
//
// A job's processes take its GPUs by member files, gpusel-<UUID>.<uid>.<inode>.lock
// (Note [A job's members]): lock files of the GPU to every other job, as these are.
//
// Whose file is whose: the <uid> of a name only keeps users' files apart. It is
// the uid where the file was made, and a user namespace changes it: the same
// user is 1000 on the host and 0 in a rootless container (podman, apptainer
// --fakeroot), and each side sees the other's file under another uid than its
// name's. So a name is trusted for nothing: a lease locks only the file of its
// own name, which fstat must show to be the caller's, then tries every other
// <UUID>.<n>.lock of the GPU, whoever owns it and whatever <n> says. Trying a
// file more can refuse a lease, never give one GPU to two jobs. A held lock
// whose holder /proc/locks does not show (a job in another PID namespace: a
// container's, or the host's seen from one) is held all the same; its pid is
// unknown here, and the messages say so.

// Note [MIG leases]
// ~~~~~~~~~~~~~~~~~
// A lease on a MIG instance (a "MIG-" UUID) holds that instance exclusively
// and its GPU shared (every entry point: the GPU is looked up through NVML when
// not given); a lease on a whole GPU holds it exclusively. So two instances of
// one GPU can be leased by two jobs, and a whole GPU and any of its instances
// exclude each other.

namespace detail {

struct LeaseTry;
// A lease of `uuid` (its MIG parent looked up through NVML when not given), or
// why its lease files cannot be used; throws Error for the directory.
GPUSEL_API LeaseTry lease_one(std::string_view uuid, std::string_view parent_gpu_uuid);

}  // namespace detail

// Whether `uuid` can name a lease: a GPU's or MIG instance's UUID written whole as NVML
// writes it ("GPU-" or "MIG-", then 8-4-4-4-12 lower-case hexadecimal digits, as
// nvidia-smi -L prints it). A lock file is named by the UUID, so an upper-case UUID or a
// prefix would lock a file of its own and exclude no job. Asks nothing of the machine.
[[nodiscard]] GPUSEL_API bool is_lease_name(std::string_view uuid) noexcept;

class GpuLease;
// Leases `uuid` (a GPU's UUID, or a MIG instance's, which also holds its GPU
// shared: `parent_gpu_uuid`, or looked up through NVML when not given; Note
// [MIG leases]); nullopt when another process holds it. Throws Error for a UUID not
// written whole as NVML writes it (GPU-/MIG- and 8-4-4-4-12 lower-case hex digits),
// and when the lease directory or the GPU's lease files cannot be used, saying why and whose.
[[nodiscard]] GPUSEL_API std::optional<GpuLease> try_lease_gpu(std::string_view uuid,
                                                               std::string_view parent_gpu_uuid = {});

// GPUs leased by this process: held until the lease is destroyed or released,
// or the process ends. Move-only.
class [[nodiscard]] GpuLease {
 public:
  // Holds nothing.
  GpuLease() noexcept = default;
  GpuLease(GpuLease&&) noexcept = default;
  GpuLease& operator=(GpuLease&&) noexcept = default;
  // A copy would hold the same locks: destroying either would release the GPUs
  // while the other still claims them. Move the lease instead.
  GpuLease(const GpuLease&) = delete;
  GpuLease& operator=(const GpuLease&) = delete;
  ~GpuLease() = default;  // the descriptors close, and the kernel drops the locks

  // The UUIDs leased, in the order they were leased.
  const std::vector<std::string>& uuids() const noexcept { return uuids_; }
  // Those of uuids() that the job this process belongs to held already: `gpusel run`
  // leased them for it (GPUSEL_JOB_LEASE), taken for this process among the job's; they
  // stay held while the job or this lease lives (Notes [The job's lease] and [A job's
  // members] in gpusel/machine/detail/leases/job_lease.hpp).
  const std::vector<std::string>& job_uuids() const noexcept { return job_uuids_; }
  bool empty() const noexcept { return uuids_.empty(); }
  // Releases every GPU now (but those the job holds, which stay the job's).
  void release() noexcept {
    descriptors_.clear();
    uuids_.clear();
    exclusive_.clear();
    job_uuids_.clear();
  }
  // The lease's descriptors (O_CLOEXEC): its lock files, for a process that lends the
  // lease to a command it starts: a copy the command inherits holds the lease too (Note
  // [Lease files]).
  std::vector<int> file_descriptors() const {
    std::vector<int> numbers;
    for (const auto& descriptor : descriptors_) numbers.push_back(descriptor.get());
    return numbers;
  }
  // For each of uuids(), in order, the descriptor that holds its lock exclusively (one
  // of file_descriptors(); a MIG instance's GPU is held shared by another of them).
  GPUSEL_API std::vector<int> exclusive_descriptors() const;
  // Takes over `other`'s GPUs too.
  GPUSEL_API void merge(GpuLease&& other);

 private:
  friend detail::LeaseTry detail::lease_one(std::string_view uuid, std::string_view parent_gpu_uuid);
  std::vector<detail::FileDescriptor> descriptors_;
  std::vector<std::string> uuids_;
  std::vector<std::size_t> exclusive_;  // for each of uuids_, its exclusive lock's place in descriptors_
  std::vector<std::string> job_uuids_;
};

namespace detail {
struct LeaseTry {
  std::optional<GpuLease> lease;  // nullopt: held by another job, or unusable
  std::string unusable;           // why the GPU's lease files cannot be used, or ""
  std::string held_by;            // held by another process of this job: which (Note [A job's members]), or ""
};

}  // namespace detail

// Who holds `uuid` (and, for a MIG instance, its GPU `parent_gpu_uuid`, looked up
// through NVML when not given), in words (LeaseState::describe: "leased by another job (pid
// 4242 python3 since ..., lock /tmp/gpusel-GPU-....0.lock)", with the user when another's), or why it
// cannot be leased ("cannot be leased: its lease file ... belongs to ..."); nullopt
// when it is free. A lease of this very process counts too (flock locks belong to
// open files, not processes). Throws Error when the lease directory cannot be used.
[[nodiscard]] GPUSEL_API std::optional<std::string> lease_holder(std::string_view uuid,
                                                                 std::string_view parent_gpu_uuid = {});

// A GPU's lease as `gpusel list` shows it (lease_states): free, held (by whom: a live
// process of the job that holds it and its user, as /proc shows them; never the lock
// file's owner, which anyone can lock: Note [Lease files]), or not to be had (why).
struct LeaseState {
  bool held = false;                    // a job holds it (this process's own leases included)
  std::string problem;                  // why it cannot be leased, or ""
  std::string lock_file;                // held: the lock file held
  std::optional<uid_t> user;            // held: the user of `pid` (/proc/<pid>/status), when one is named
  std::optional<long> pid;              // held: a live process of the job, when one is visible
  std::string command;                  // its name, /proc/<pid>/comm: any bytes (escape before printing)
  std::optional<std::int64_t> started;  // its start, in seconds since the epoch
  std::string unseen;                   // held, no pid: why none is named
  bool this_job = false;                // held by the job this process runs in (GPUSEL_JOB_LEASE, checked)
  bool member_took = false;             // this_job: a process of the job took it (Note [A job's members])
  std::optional<long> member_pid;       // member_took: that process, as /proc/locks names it, when it does
  // Held: "pid 4242 python3 since 2026-12-04 00:01:02" (local time), or why no pid is named; control bytes escaped.
  GPUSEL_API std::string holder_text() const;
  // Held: the holder's user, "alice (uid 1001)", or "" when no holder is visible; control bytes escaped.
  GPUSEL_API std::string user_text() const;
  // "free", "leased by another job (pid 4242 python3 since 2026-12-04 00:01:02, alice (uid 1001), lock
  // /tmp/gpusel-GPU-....1001.lock)" ("leased by this job (...)" for this_job), or "cannot be
  // leased: ..."; control bytes escaped.
  GPUSEL_API std::string describe() const;
};

// The lease of each GPU or MIG instance of `uuids`, its own alone (an instance's, not its
// GPU's), reading the lease directory once; where there is none, every GPU is free. Throws
// Error when the lease directory cannot be used.
[[nodiscard]] GPUSEL_API std::vector<LeaseState> lease_states(const std::vector<std::string>& uuids);

namespace detail {
// The lease of each (uuid, parent GPU uuid) of `wanted` as a pick sees it: a MIG instance's
// and its GPU's, this job's (GPUSEL_JOB_LEASE) marked so, reading the lease directory once;
// throws Error when it cannot be used. lease_holder and reject_leased_gpus say them.
GPUSEL_API std::vector<LeaseState> lease_holders(const std::vector<std::pair<std::string, std::string>>& wanted);
}  // namespace detail

// Leases every GPU of `uuids`, all or none: throws Error naming the first one
// another process holds (or when the directory cannot be used).
GPUSEL_API GpuLease lease_gpus(const std::vector<std::string>& uuids);

// One GPU: lease_gpus({uuid}).
GPUSEL_API GpuLease lease_gpu(const std::string& uuid);

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/lease-inl.hpp"
#endif
