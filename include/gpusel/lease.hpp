// Leases: two jobs on one machine never get the same GPU.
//
//   gpusel::GpuLease lease = gpusel::lease_gpu("GPU-1b2c3d4e-...");   // Error when another job holds it
//   std::optional<gpusel::GpuLease> maybe = gpusel::try_lease_gpu(uuid);  // nullopt when held
//   gpusel::lease_holder(uuid);   // "leased by pid 4242 (...)", or nullopt when free
//
// A lease is an advisory lock (flock) on a file named after the GPU's UUID and
// the user, in one directory per machine (Note [Leases]). The kernel drops it when the lease
// is destroyed or the process ends, however it ends (kill -9 included), so a
// crashed job never keeps a GPU. Picking (select.hpp) counts a leased GPU as
// busy; `gpusel run` and `gpusel::use_free_gpus` take leases on what they pick.
// This header includes no CUDA header and makes no CUDA call.
// Layer: machine (docs/layers.md).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/error.hpp"
#include "gpusel/inventory.hpp"

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
// machines) do not see each other's leases.
//
// The directory: secure_getenv("GPUSEL_LEASE_DIR") when set and not empty (an
// absolute path: a relative one is an Error, since jobs in different working
// directories would not see each other), else /tmp/gpusel-leases, made on first
// use with mode 1777; a GPUSEL_LEASE_DIR gpusel makes is 0700, the caller's own,
// since another user's directory is trusted by nobody else anyway. /tmp because
// it is the one directory every Linux machine has, local and writable by every
// user. It is opened with O_DIRECTORY|O_NOFOLLOW, must pass Note [Who can break a
// lease], and must not be on a network filesystem (statfs: NFS, SMB, Lustre,
// GPFS, ...), where flock can become a POSIX lock that any close drops. Whatever
// is wrong is an Error that says so and how to fix it, never a silent fallback.
//
// The files: <UUID>.<uid>.lock, one per GPU and user, opened relative to that
// directory's descriptor (no path race), first without O_CREAT
// (fs.protected_regular refuses O_CREAT on another user's file in a sticky
// directory), else created with O_CREAT|O_EXCL|O_NOFOLLOW and mode 0644 (fchmod:
// past the umask; others need only read it to look); every descriptor is
// O_CLOEXEC, so a command the process starts inherits none by accident. `gpusel
// run` hands its command copies on purpose (file_descriptors(); Note [The job
// holds the lease] in tools/gpusel.cpp): a flock lock belongs to the open file
// description, so the lease then lasts until the last process of the job ends.
// A lease is flock(LOCK_NB) on the caller's own file; a GPU whose files cannot
// be used (not a regular file, another user's under the caller's name,
// unreadable) is that GPU's problem alone: picks reject it with the reason.
//
// MIG: a lease on a MIG instance (a "MIG-" UUID) holds that instance exclusively
// and its GPU shared (every entry point: the GPU is looked up through NVML when
// not given); a lease on a whole GPU holds it exclusively. So two instances of
// one GPU can be leased by two jobs, and a whole GPU and any of its instances
// exclude each other.
//
// Looking (lease_holder) takes a shared lock for an instant; taking a lease that
// fails because of such a look tries again for a few milliseconds, so two jobs
// looking and leasing at once do not turn each other away.

// Note [Who can break a lease]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Whoever can unlink a held lock file lets the next job make a new one and share
// the GPU; in a sticky directory that is the file's owner, the directory's owner
// and root. So the lease directory, and every directory above it, must belong to
// root or the caller (and be sticky where others may write), else an Error names
// the owner and how root provisions it; and each user locks a file of its own,
// <UUID>.<uid>.lock, which only that user and root can remove. A lease: lock the
// own file, check that its name still names it (fstat and fstatat: same device
// and inode), then try every other user's file of the GPU with a conflicting
// lock; any one held means another job's lease, and the own lock is let go and
// the round tried again, a bounded number of times. Two jobs cannot both win
// (each holds its own before it looks at the other's). A crashed job's file holds
// no lock and blocks nothing. What remains: a user's job holds its GPU as long as
// it runs (shown with pid and user); a file squatting under the caller's name, or
// unreadable, makes that one GPU unusable, with the reason; root can do anything.

namespace detail {

// A descriptor, closed when destroyed.
class FileDescriptor {
 public:
  FileDescriptor() noexcept = default;
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  // Two owners would close one descriptor twice.
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { reset(); }
  int get() const noexcept { return fd_; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// The name of a network filesystem (NFS, CIFS, Lustre, ...) for a statfs f_type,
// or nullptr for any other: leases refuse a directory on one (Note [Leases]).
GPUSEL_API const char* network_filesystem(std::uint32_t f_type) noexcept;

struct LeaseTry;
// lease_holder of each (uuid, parent GPU uuid) of `wanted`, reading the lease
// directory once; throws Error when it cannot be used.
GPUSEL_API std::vector<std::optional<std::string>> lease_holders(
    const std::vector<std::pair<std::string, std::string>>& wanted);
// A lease of `uuid` (its MIG parent looked up through NVML when not given), or
// why its lease files cannot be used; throws Error for the directory.
GPUSEL_API LeaseTry lease_one(std::string_view uuid, std::string_view parent_gpu_uuid);

}  // namespace detail

// The lease directory of this machine (Note [Leases]): GPUSEL_LEASE_DIR, read with
// secure_getenv, else "/tmp/gpusel-leases". Throws Error when GPUSEL_LEASE_DIR is
// a relative path.
GPUSEL_API std::string lease_directory();

// Opens the lease directory as every lease and look does (making it when missing)
// and checks it (Note [Who can break a lease]); throws Error saying what is wrong
// and how to fix it. For a command that would otherwise wait on what no wait fixes.
GPUSEL_API void check_lease_directory();

class GpuLease;
// Leases `uuid` (a GPU's UUID, or a MIG instance's, which also holds its GPU
// shared: `parent_gpu_uuid`, or looked up through NVML when not given; Note
// [Leases]); nullopt when another process holds it. Throws Error when the lease
// directory or the GPU's lease files cannot be used, saying why and whose.
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
  bool empty() const noexcept { return uuids_.empty(); }
  // Releases every GPU now.
  void release() noexcept {
    descriptors_.clear();
    uuids_.clear();
  }
  // The lock files' descriptors (O_CLOEXEC), for a process that lends the lease to a
  // command it starts: a copy the command inherits holds the lease too (Note [Leases]).
  std::vector<int> file_descriptors() const {
    std::vector<int> numbers;
    for (const auto& descriptor : descriptors_) numbers.push_back(descriptor.get());
    return numbers;
  }
  // Takes over `other`'s GPUs too.
  void merge(GpuLease&& other) {
    for (auto& descriptor : other.descriptors_) descriptors_.push_back(std::move(descriptor));
    for (auto& uuid : other.uuids_) uuids_.push_back(std::move(uuid));
    other.release();
  }

 private:
  friend detail::LeaseTry detail::lease_one(std::string_view uuid, std::string_view parent_gpu_uuid);
  std::vector<detail::FileDescriptor> descriptors_;
  std::vector<std::string> uuids_;
};

namespace detail {
struct LeaseTry {
  std::optional<GpuLease> lease;  // nullopt: held by another job, or unusable
  std::string unusable;           // why the GPU's lease files cannot be used, or ""
};

// Note [Waiting in line]
// ~~~~~~~~~~~~~~~~~~~~~~
// `gpusel run --wait` jobs are served in arrival order, so a job that needs 4 GPUs
// is not overtaken forever by a stream of 1-GPU jobs. A job notes when it arrived
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
}  // namespace detail

// Who holds `uuid` (and, for a MIG instance, its GPU `parent_gpu_uuid`, looked up
// through NVML when not given), in words ("leased by another job (pid 4242, lock
// /tmp/gpusel-leases/GPU-....0.lock)", with the user when another's), or why it
// cannot be leased ("cannot be leased: its lease file ... belongs to ..."); nullopt
// when it is free. A lease of this very process counts too (flock locks belong to
// open files, not processes). Throws Error when the lease directory cannot be used.
[[nodiscard]] GPUSEL_API std::optional<std::string> lease_holder(std::string_view uuid,
                                                                 std::string_view parent_gpu_uuid = {});

// Leases every GPU of `uuids`, all or none: throws Error naming the first one
// another process holds (or when the directory cannot be used).
GPUSEL_API GpuLease lease_gpus(const std::vector<std::string>& uuids);

// One GPU: lease_gpus({uuid}).
GPUSEL_API GpuLease lease_gpu(const std::string& uuid);

}  // namespace gpusel

#if GPUSEL_DEFINITIONS  // Note [Compile-once mode]
#include "gpusel/lease-inl.hpp"
#endif
