// Leases: two jobs on one machine never get the same GPU.
//
//   gpusel::GpuLease lease = gpusel::lease_gpu("GPU-1b2c3d4e-...");   // Error when another job holds it
//   std::optional<gpusel::GpuLease> maybe = gpusel::try_lease_gpu(uuid);  // nullopt when held
//   gpusel::lease_holder(uuid);   // "leased by pid 4242 (...)", or nullopt when free
//
// A lease is an advisory lock (flock) on a file named after the GPU's UUID in
// one directory per machine (Note [Leases]). The kernel drops it when the lease
// is destroyed or the process ends, however it ends (kill -9 included), so a
// crashed job never keeps a GPU. Picking (select.hpp) counts a leased GPU as
// busy; `gpusel run` and `gpusel::use_free_gpus` take leases on what they pick.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <unistd.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/error.hpp"

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
// The directory: secure_getenv("GPUSEL_LEASE_DIR") when set and not empty (a
// private directory, for tests, or a site's own shared one), else
// /tmp/gpusel-leases, made on first use with mode 1777 (every user may lease,
// the sticky bit keeps them from deleting each other's files). /tmp because it
// is the one directory every Linux machine has, local to the machine and
// writable by every user. It is opened with O_DIRECTORY|O_NOFOLLOW and must be a
// real directory, not a symlink, and sticky when others can write to it;
// otherwise leasing is an Error that says so, never a silent fallback.
//
// The files: <UUID>.lock, opened relative to that directory's descriptor (no path
// race), first without O_CREAT (fs.protected_regular refuses O_CREAT on another
// user's file in a sticky directory, even when it exists), else created with
// O_CREAT|O_EXCL|O_NOFOLLOW and mode 0666 (fchmod: past the umask), again on
// EEXIST; every descriptor is O_CLOEXEC, so a started command inherits none and
// cannot keep the lease alive after gpusel is gone. A file must be a regular
// file. The lock is flock(LOCK_EX|LOCK_NB) on a read-only descriptor.
//
// MIG: a lease on a MIG instance (a "MIG-" UUID) holds that instance's file
// exclusively and its GPU's file shared; a lease on a whole GPU holds the GPU's
// file exclusively. So two instances of one GPU can be leased by two jobs, and a
// whole GPU and any of its instances exclude each other.
//
// Looking (lease_holder) takes a shared lock for an instant; taking a lease that
// fails because of such a look tries again for a few milliseconds, so two jobs
// looking and leasing at once do not turn each other away.

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

}  // namespace detail

// The lease directory of this machine (Note [Leases]): GPUSEL_LEASE_DIR, read with
// secure_getenv, else "/tmp/gpusel-leases".
GPUSEL_API std::string lease_directory();

class GpuLease;
// Leases `uuid` (a GPU's UUID, or a MIG instance's with its GPU's UUID as
// `parent_gpu_uuid`; Note [Leases]); nullopt when another process holds it.
// Throws Error when the lease directory or file cannot be used.
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
  // Takes over `other`'s GPUs too.
  void merge(GpuLease&& other) {
    for (auto& descriptor : other.descriptors_) descriptors_.push_back(std::move(descriptor));
    for (auto& uuid : other.uuids_) uuids_.push_back(std::move(uuid));
    other.release();
  }

 private:
  friend std::optional<GpuLease> try_lease_gpu(std::string_view uuid, std::string_view parent_gpu_uuid);
  std::vector<detail::FileDescriptor> descriptors_;
  std::vector<std::string> uuids_;
};

// Who holds `uuid` (and, for a MIG instance, its GPU `parent_gpu_uuid`), in words
// ("leased by another job (pid 4242, lock /tmp/gpusel-leases/GPU-....lock)"), or
// nullopt when no lease holds it. A lease of this very process counts too (flock
// locks belong to open files, not processes). Throws Error as try_lease_gpu.
[[nodiscard]] GPUSEL_API std::optional<std::string> lease_holder(std::string_view uuid,
                                                                 std::string_view parent_gpu_uuid = {});

// Leases every GPU of `uuids`, all or none: throws Error naming the first one
// another process holds (or when the directory cannot be used).
GPUSEL_API GpuLease lease_gpus(const std::vector<std::string>& uuids);

// One GPU: lease_gpus({uuid}).
GPUSEL_API GpuLease lease_gpu(const std::string& uuid);

}  // namespace gpusel

// --- definitions (Note [Compile-once mode]) ---------------------------------
#if GPUSEL_DEFINITIONS

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "gpusel/detail/core/environment.hpp"

namespace gpusel {

GPUSEL_API std::string lease_directory() {
  const char* named = detail::read_environment("GPUSEL_LEASE_DIR", detail::Trust::secure);
  if (named != nullptr && *named != '\0') return named;
  return "/tmp/gpusel-leases";
}

namespace detail {

inline std::string errno_text(int error) { return std::strerror(error); }

// The lease directory, opened and checked (Note [Leases]); throws Error saying what is wrong.
inline FileDescriptor open_lease_directory(const std::string& path) {
  const bool shared_default =
      path == "/tmp/gpusel-leases" && detail::read_environment("GPUSEL_LEASE_DIR", detail::Trust::secure) == nullptr;
  const std::string what = "gpusel: the lease directory " + path;
  if (::mkdir(path.c_str(), shared_default ? 01777 : 0700) != 0 && errno != EEXIST)
    throw Error(what + " cannot be made: " + errno_text(errno));
  FileDescriptor directory(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (directory.get() < 0) {
    const int error = errno;
    throw Error(what + " cannot be opened" +
                (error == ELOOP || error == ENOTDIR ? std::string(": it is a symlink or not a directory")
                                                    : ": " + errno_text(error)));
  }
  struct stat status {};
  if (::fstat(directory.get(), &status) != 0 || !S_ISDIR(status.st_mode)) throw Error(what + " is not a directory");
  if (shared_default && status.st_uid == ::geteuid() && (status.st_mode & 07777) != 01777)
    (void)::fchmod(directory.get(), 01777);  // ours, made under a umask: every user must be able to lease
  if (::fstat(directory.get(), &status) != 0) throw Error(what + " cannot be read: " + errno_text(errno));
  if ((status.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (status.st_mode & S_ISVTX) == 0)
    throw Error(what +
                " is writable by other users but not sticky, so they could replace its lock files; make it mode 1777 "
                "(or set GPUSEL_LEASE_DIR to a directory of your own)");
  return directory;
}

// `uuid` as a file name: the characters UUIDs have only, so it cannot leave the directory.
inline std::string lease_file_name(std::string_view uuid) {
  if (uuid.empty()) throw Error("gpusel: cannot lease a GPU without a UUID (NVML reported none)");
  for (const char c : uuid) {
    const bool allowed = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
    if (!allowed) throw Error("gpusel: cannot lease \"" + std::string(uuid) + "\": not a GPU or MIG UUID");
  }
  return std::string(uuid) + ".lock";
}

// The lock file of `uuid` in `directory`, opened read-only (made when missing).
inline FileDescriptor open_lease_file(const FileDescriptor& directory, const std::string& directory_path,
                                      std::string_view uuid) {
  const std::string name = lease_file_name(uuid);
  for (int attempt = 0; attempt < 16; ++attempt) {
    FileDescriptor file(::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (file.get() < 0 && errno == ENOENT) {
      file = FileDescriptor(
          ::openat(directory.get(), name.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666));
      if (file.get() < 0 && errno == EEXIST) continue;  // another process made it first: open theirs
      if (file.get() >= 0) (void)::fchmod(file.get(), 0666);
    }
    if (file.get() < 0) {
      std::string message = "gpusel: cannot open the lease file " + directory_path;
      message += "/" + name + ": " + errno_text(errno);
      throw Error(message);
    }
    struct stat status {};
    if (::fstat(file.get(), &status) != 0 || !S_ISREG(status.st_mode)) {
      std::string message = "gpusel: the lease file " + directory_path;
      message += "/" + name + " is not a regular file";
      throw Error(message);
    }
    return file;
  }
  throw Error("gpusel: the lease file " + directory_path + "/" + name + " keeps disappearing");
}

// Who holds a lock on `file`, from /proc/locks: "pid 4242", or "" when it cannot be told
// (another PID namespace, no /proc).
inline std::string lock_holder(const FileDescriptor& file) {
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) return {};
  std::ifstream locks("/proc/locks");
  std::string line;
  const std::string inode = ":" + std::to_string(status.st_ino) + " ";
  while (std::getline(locks, line)) {
    if (line.find("FLOCK") == std::string::npos || line.find(inode) == std::string::npos) continue;
    std::istringstream fields(line);
    std::string number, kind, advisory, mode, pid;
    fields >> number >> kind;
    if (kind == "->") fields >> kind;  // a waiter
    fields >> advisory >> mode >> pid;
    if (mode == "WRITE" && !pid.empty() && pid != "-1" && pid != "0") return "pid " + pid;
  }
  return {};
}

// flock(operation | LOCK_NB), tried again for a few milliseconds while another process only looks.
inline bool lock_briefly_retrying(int fd, int operation, bool retry) {
  for (int attempt = 0;; ++attempt) {
    if (::flock(fd, operation | LOCK_NB) == 0) return true;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK || !retry || attempt >= 20) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

inline std::string held_text(std::string_view uuid, const std::string& holder, const std::string& directory) {
  return "leased by another job (" + (holder.empty() ? std::string("holder not visible from here") : holder) +
         ", lock " + directory + "/" + std::string(uuid) + ".lock)";
}

}  // namespace detail

GPUSEL_API std::optional<GpuLease> try_lease_gpu(std::string_view uuid, std::string_view parent_gpu_uuid) {
  const std::string path = lease_directory();
  const detail::FileDescriptor directory = detail::open_lease_directory(path);
  GpuLease lease;
  detail::FileDescriptor own = detail::open_lease_file(directory, path, uuid);
  if (!detail::lock_briefly_retrying(own.get(), LOCK_EX, true)) return std::nullopt;
  if (!parent_gpu_uuid.empty()) {
    detail::FileDescriptor parent = detail::open_lease_file(directory, path, parent_gpu_uuid);
    if (!detail::lock_briefly_retrying(parent.get(), LOCK_SH, true)) return std::nullopt;
    lease.descriptors_.push_back(std::move(parent));
  }
  lease.descriptors_.push_back(std::move(own));
  lease.uuids_.emplace_back(uuid);
  return lease;
}

GPUSEL_API std::optional<std::string> lease_holder(std::string_view uuid, std::string_view parent_gpu_uuid) {
  const std::string path = lease_directory();
  const detail::FileDescriptor directory = detail::open_lease_directory(path);
  for (const std::string_view each : {uuid, parent_gpu_uuid}) {
    if (each.empty()) continue;
    const detail::FileDescriptor file = detail::open_lease_file(directory, path, each);
    // A shared look fails only against an exclusive lease: on the instance itself, or on its whole GPU.
    if (!detail::lock_briefly_retrying(file.get(), LOCK_SH, false))
      return detail::held_text(each, detail::lock_holder(file), path);
  }
  return std::nullopt;
}

GPUSEL_API GpuLease lease_gpus(const std::vector<std::string>& uuids) {
  GpuLease all;
  for (const std::string& uuid : uuids) {
    std::optional<GpuLease> one = try_lease_gpu(uuid);
    if (!one) {
      const auto holder = lease_holder(uuid);
      throw Error("gpusel: " + uuid + " is " + holder.value_or("leased by another job"));
    }
    all.merge(std::move(*one));
  }
  return all;
}

GPUSEL_API GpuLease lease_gpu(const std::string& uuid) { return lease_gpus({uuid}); }

}  // namespace gpusel

#endif  // GPUSEL_DEFINITIONS
