// The lease directory: where this machine's leases (gpusel/machine/lease.hpp) live, and
// whom gpusel trusts with it.
//
//   gpusel::lease_directory();        // GPUSEL_LEASE_DIR, "/run/gpusel-leases" or "/tmp"
//   gpusel::check_lease_directory();  // an Error saying what is wrong with it, and how to fix it
//
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/error.hpp"

namespace gpusel {

// Note [The lease directory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// secure_getenv("GPUSEL_LEASE_DIR") when set and not empty (an absolute path: a relative one is an Error, since jobs in
// different working directories would not see each other); else /run/gpusel-leases when it is a directory, which only
// root can make (a tmpfiles.d line makes it at boot: docs/choosing-gpus.md), whose place root chose; else /tmp itself,
// the one directory every Linux machine has, local, writable by every user and root's: a shared directory another user
// could own, or a cleaner could age away while idle, would need root to set it up and keep it (Note [Leases against
// cleaners]), and /tmp needs neither. gpusel's files there say whose they are: gpusel-<UUID>.<uid>.lock (Note [Lease
// files]) and gpusel-wait-<uid>-<random>.ticket (Note [Waiting in line]). A GPUSEL_LEASE_DIR gpusel makes is 0700, the
// caller's own, since another user's directory is trusted by nobody else anyway. It is opened with
// O_DIRECTORY|O_NOFOLLOW, must pass Note [Who can break a lease], and must not be on a network filesystem (statfs: NFS,
// SMB, Lustre, GPFS, ...), where flock can become a POSIX lock that any close drops. Whatever is wrong is an Error that
// says so and how to fix it, never a silent fallback. Every job of a machine must find the same one: a container that
// sees /tmp but not /run (apptainer's default binds) needs /run/gpusel-leases bound in too, where root made it.

// Note [Who can break a lease]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Whoever can unlink a held lock file lets the next job make a new one and share the
// GPU; in a sticky directory that is the file's owner, the directory's owner and root.
// So the lease directory, every directory above it as the path is written, and every
// symlink on the way (and what it leads through) must belong to root or the caller
// (directories sticky where others may write), else an Error names the owner and the
// fix; and each user locks a file of its own, gpusel-<UUID>.<uid>.lock, which only that
// user and root can remove. A lease locks its own file, checks that the name still
// names it, then tries every other file of the GPU, whoever owns it (lock_for_every_user;
// Note [Lease files] says why no name is trusted): two jobs cannot both win, since each
// holds its own before it looks at the other's. A crashed job's file holds no lock. A
// lease holds no lock on the directory (Note [Leases against cleaners]), so no user can
// stop every lease with one lock. What remains, each named where it bites: a file of a
// GPU under the caller's name made first by another user, or one nobody else can read,
// makes that one GPU unusable, the message and `gpusel list` naming the file's owner
// (one file per GPU and victim: a layout of a directory per user would close the first,
// not the second, since an unreadable file might hold a lease unseen; a member file of
// the caller's name, Note [A job's members], made first by another user, likewise makes
// that GPU unusable inside the job, its owner named); root can do
// anything; a user's own clean-up (rm /tmp/gpusel-*) ends the leases of their running
// jobs and hands those GPUs to other users' jobs, since an unlinked file has no name left
// to find it by, and no rule keeps a user from removing their own files; a cleaner that
// ignores locks and the sticky bit does the same once a lease is older than its age (Note
// [Leases against cleaners]).

// Note [Leases against cleaners]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// gpusel makes a lock file once and a flock changes no timestamp, so a cleaner that
// ages /tmp (systemd's tmp.conf: 10 days, on Fedora, RHEL, Arch) would delete a file
// a running job holds, and the next job would get its GPU. Lock files and tickets are
// mode 01644: systemd-tmpfiles never ages a file with the sticky bit set, wherever it
// is, nor removes a directory that still holds one (checked on systemd 252:
// tests/tmpfiles, tests/race). A lock on the directory would not do: systemd-tmpfiles
// honours one on a directory below the one a rule names, not on the named one itself
// (/tmp), and any user who may read a directory may lock it exclusively, which would
// stop every lease on the machine. gpusel never removes a lock file, so a lease
// directory that held one lasts until reboot (/run and a tmpfs /tmp are empty after
// one, as are leases). Cleaners that ignore the sticky bit (tmpreaper, tmpwatch) see
// timestamps only, which a lease refreshes when taken: a lease is safe from them for
// their age (tmpreaper's default 7 days) from when it was taken, no longer.

namespace detail {

// The lease directories gpusel finds without GPUSEL_LEASE_DIR (Note [The lease directory]).
inline constexpr const char* kRunLeaseDirectory = "/run/gpusel-leases";
inline constexpr const char* kTmpLeaseDirectory = "/tmp";

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
// or nullptr for any other: leases refuse a directory on one (Note [The lease directory]).
GPUSEL_API const char* network_filesystem(std::uint32_t f_type) noexcept;

// The lease directory at `path`, made when missing, opened and checked (Note [The
// lease directory], Note [Who can break a lease]); throws Error saying what is
// wrong and how to fix it.
GPUSEL_API FileDescriptor open_lease_directory(const std::string& path);

// Whether `file` is still what `name` in `directory` names (lock-then-verify:
// fstat and fstatat agree on device and inode).
GPUSEL_API bool still_named(const FileDescriptor& directory, const std::string& name, const FileDescriptor& file);

}  // namespace detail

// The lease directory of this machine (Note [The lease directory]): GPUSEL_LEASE_DIR, read with
// secure_getenv, else "/run/gpusel-leases" when that is a directory, else "/tmp".
// Throws Error when GPUSEL_LEASE_DIR is a relative path.
GPUSEL_API std::string lease_directory();

// Opens the lease directory as every lease does (making it when missing; a look at
// who holds a GPU makes none) and checks it (Note [Who can break a lease]); throws
// Error saying what is wrong and how to fix it. For a command that would otherwise
// wait on what no wait fixes.
GPUSEL_API void check_lease_directory();

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/lease_directory-inl.hpp"
#endif
