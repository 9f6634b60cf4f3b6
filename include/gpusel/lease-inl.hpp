// The definitions of gpusel/lease.hpp's out-of-line functions (Note [Compile-once mode]
// in gpusel/detail/core/compile_once.hpp): the header includes this file where
// they are compiled, header-only or in gpusel's one implementation file.
// Layer: machine (docs/layers.md).
#pragma once

#include "gpusel/lease.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "gpusel/detail/core/environment.hpp"

namespace gpusel {

GPUSEL_API std::string lease_directory() {
  const char* named = detail::read_environment("GPUSEL_LEASE_DIR", detail::Trust::secure);
  if (named == nullptr || *named == '\0') return "/tmp/gpusel-leases";
  if (*named != '/')
    throw Error("gpusel: GPUSEL_LEASE_DIR=\"" + std::string(named) +
                "\" is a relative path, so jobs started in different directories would not see each other's "
                "leases; give an absolute one");
  return named;
}

namespace detail {

inline std::string errno_text(int error) { return std::strerror(error); }

GPUSEL_API const char* network_filesystem(std::uint32_t f_type) noexcept {
  switch (f_type) {
    case 0x6969u:
      return "NFS";
    case 0x517Bu:
      return "SMB";
    case 0xFF534D42u:
      return "CIFS";
    case 0xFE534D42u:
      return "SMB2";
    case 0x0BD00BD0u:
      return "Lustre";
    case 0x47504653u:
      return "GPFS";
    case 0x00C36400u:
      return "CephFS";
    case 0x5346414Fu:  // AFS_FS_MAGIC
    case 0x6B414653u:  // AFS_SUPER_MAGIC
      return "AFS";
    case 0x01021997u:
      return "9P";
    case 0x19830326u:
      return "BeeGFS";
    case 0x7461636Fu:
      return "OCFS2";
    case 0x01161970u:
      return "GFS2";
    case 0x73757245u:
      return "Coda";
    default:
      return nullptr;
  }
}

// "alice (uid 1001)", or "uid 1001" for a uid with no name.
inline std::string user_text(uid_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  char buffer[1024];
  std::string number = "uid " + std::to_string(uid);
  if (getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr)
    return std::string(found->pw_name) + " (" + number + ")";
  return number;
}

// Whether files owned by `uid` may hold leases this process trusts: only root and
// this process's own user can then remove them (Note [Who can break a lease]).
inline bool trusted_owner(uid_t uid) noexcept { return uid == 0 || uid == ::geteuid(); }

// How to make `path` a directory every user may lease in.
inline std::string provision_hint(const std::string& path) {
  return "; on a machine shared by several users, root makes it once (install -d -m 1777 -o root " + path +
         ", or a systemd-tmpfiles line 'd " + path +
         " 1777 root root -'), or set GPUSEL_LEASE_DIR to a directory of your own";
}

// Why directory `status` (at `path`) may not hold leases, or "" when it may.
inline std::string untrusted_directory(const struct stat& status, const std::string& path) {
  if (!S_ISDIR(status.st_mode)) return path + " is not a directory";
  if (!trusted_owner(status.st_uid))
    return path + " belongs to " + user_text(status.st_uid) + ", who could remove other users' leases";
  if ((status.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (status.st_mode & S_ISVTX) == 0)
    return path + " is writable by other users but not sticky, so they could replace what it holds";
  return {};
}

// Every directory above `path` (absolute), resolved, must be one only root or this
// user can change, or another user could swap the lease directory for another.
inline void check_directories_above(const std::string& path) {
  std::string above = path.substr(0, path.find_last_of('/'));
  if (above.empty()) above = "/";
  char resolved[PATH_MAX];
  if (::realpath(above.c_str(), resolved) == nullptr)
    throw Error("gpusel: the lease directory " + path + " cannot be made: " + above + ": " + errno_text(errno));
  const std::string real = resolved;
  std::vector<std::string> prefixes{"/"};
  for (std::size_t end = 1; end <= real.size(); ++end)
    if (end == real.size() || real[end] == '/') prefixes.push_back(real.substr(0, end));
  for (const std::string& prefix : prefixes) {
    struct stat status {};
    std::string message = "gpusel: the lease directory " + path;
    if (::lstat(prefix.c_str(), &status) != 0) {
      const int error = errno;
      message += " cannot be used: ";
      message += prefix + ": " + errno_text(error);
      throw Error(message);
    }
    const std::string why = untrusted_directory(status, prefix);
    if (!why.empty()) {
      message += " cannot be trusted: ";
      message += why;
      throw Error(message);
    }
  }
}

// The lease directory, opened and checked (Note [Leases]); throws Error saying what is wrong.
inline FileDescriptor open_lease_directory(const std::string& path) {
  const bool shared_default =
      path == "/tmp/gpusel-leases" && detail::read_environment("GPUSEL_LEASE_DIR", detail::Trust::secure) == nullptr;
  const std::string what = "gpusel: the lease directory " + path;
  check_directories_above(path);
  if (::mkdir(path.c_str(), shared_default ? 01777 : 0700) != 0 && errno != EEXIST)
    throw Error(what + " cannot be made: " + errno_text(errno));
  FileDescriptor directory(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (directory.get() < 0) {
    const int error = errno;
    struct stat status {};
    if (error == EACCES && ::lstat(path.c_str(), &status) == 0 && !trusted_owner(status.st_uid))
      throw Error(what + " belongs to " + user_text(status.st_uid) + " and is private to that user" +
                  provision_hint(path));
    throw Error(what + " cannot be opened" +
                (error == ELOOP || error == ENOTDIR ? std::string(": it is a symlink or not a directory")
                                                    : ": " + errno_text(error)));
  }
  struct stat status {};
  if (::fstat(directory.get(), &status) != 0 || !S_ISDIR(status.st_mode)) throw Error(what + " is not a directory");
  if (shared_default && status.st_uid == ::geteuid() && (status.st_mode & 07777) != 01777)
    (void)::fchmod(directory.get(), 01777);  // ours, made under a umask: every user must be able to lease
  if (::fstat(directory.get(), &status) != 0) throw Error(what + " cannot be read: " + errno_text(errno));
  if (!trusted_owner(status.st_uid))
    throw Error(what + " cannot be trusted: it belongs to " + user_text(status.st_uid) +
                ", who could remove other users' leases" + provision_hint(path));
  if ((status.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (status.st_mode & S_ISVTX) == 0)
    throw Error(what +
                " is writable by other users but not sticky, so they could replace its lock files; make it mode 1777 "
                "(or set GPUSEL_LEASE_DIR to a directory of your own)");
  struct statfs filesystem {};
  if (::fstatfs(directory.get(), &filesystem) == 0)
    if (const char* network = network_filesystem(static_cast<std::uint32_t>(filesystem.f_type)))
      throw Error(what + " is on " + network +
                  ", a network filesystem, where flock may become a lock of each process that a second open "
                  "silently drops; set GPUSEL_LEASE_DIR to a directory on a local filesystem (such as /tmp)");
  return directory;
}

// `uuid` checked as a file name: the characters UUIDs have only, so it cannot leave the directory.
inline void check_lease_name(std::string_view uuid) {
  if (uuid.empty()) throw Error("gpusel: cannot lease a GPU without a UUID (NVML reported none)");
  for (const char c : uuid) {
    const bool allowed = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
    if (!allowed) throw Error("gpusel: cannot lease \"" + std::string(uuid) + "\": not a GPU or MIG UUID");
  }
}

// The lock file of `uuid` for user `uid`: "<UUID>.<uid>.lock" (Note [Who can break a lease]).
inline std::string lease_file_name(std::string_view uuid, uid_t uid) {
  return std::string(uuid) + "." + std::to_string(uid) + ".lock";
}

// "its lease file <path>/<name>", for messages.
inline std::string lease_file_text(const std::string& path, const std::string& name) {
  std::string text = "its lease file ";
  text += path;
  text += '/';
  text += name;
  return text;
}

// One user's lock file of a GPU, opened read-only.
struct LeaseFile {
  FileDescriptor file;
  std::string name;
  uid_t owner = 0;
};

// Other users' lock files of the directory, by UUID: each "<UUID>.<uid>.lock" whose
// uid is not this user's, as (name, uid). Read once for every GPU a pick looks at.
struct LeaseListing {
  std::map<std::string, std::vector<std::pair<std::string, uid_t>>, std::less<>> others;
  std::string problem;  // why the directory cannot be listed, or ""
};

// Lists `directory`; with `only`, keeps that UUID's files alone.
inline LeaseListing list_other_users_files(const FileDescriptor& directory, const std::string& path,
                                           std::string_view only = {}) {
  LeaseListing listing;
  const int copy = ::openat(directory.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* entries = copy < 0 ? nullptr : ::fdopendir(copy);
  if (entries == nullptr) {
    const int error = errno;
    if (copy >= 0) ::close(copy);
    listing.problem = "the lease directory " + path + " cannot be listed: " + errno_text(error);
    return listing;
  }
  while (const dirent* entry = ::readdir(entries)) {
    std::string_view name = entry->d_name;
    if (name.size() <= 5 || name.substr(name.size() - 5) != ".lock") continue;
    const std::string_view stem = name.substr(0, name.size() - 5);
    const std::size_t dot = stem.rfind('.');
    if (dot == std::string_view::npos || dot == 0) continue;
    const std::string_view number = stem.substr(dot + 1), uuid = stem.substr(0, dot);
    if (number.empty() || number.size() > 10 || number.find_first_not_of("0123456789") != std::string_view::npos)
      continue;
    if (!only.empty() && uuid != only) continue;
    const unsigned long uid = std::strtoul(std::string(number).c_str(), nullptr, 10);
    if (uid == ::geteuid() || uid > 0xFFFFFFFEul) continue;
    listing.others[std::string(uuid)].emplace_back(std::string(name), static_cast<uid_t>(uid));
  }
  ::closedir(entries);
  return listing;
}

// The lock files of `uuid` that other users' leases may hold, from `listing`: named
// for a user and owned by that user, regular files, opened read-only. `problem` is
// set, naming the file and its owner, for one that cannot be opened: it might hold a
// lease unseen; or when the directory could not be listed.
inline std::vector<LeaseFile> other_users_files(const FileDescriptor& directory, const std::string& path,
                                                std::string_view uuid, const LeaseListing& listing,
                                                std::string& problem) {
  std::vector<LeaseFile> files;
  if (!listing.problem.empty()) {
    problem = listing.problem;
    return files;
  }
  const auto named = listing.others.find(uuid);
  if (named == listing.others.end()) return files;
  for (const auto& [name, uid] : named->second) {
    LeaseFile found{
        FileDescriptor(::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)), name,
        uid};
    struct stat status {};
    if (found.file.get() < 0) {
      const int error = errno;
      if (::fstatat(directory.get(), found.name.c_str(), &status, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISREG(status.st_mode) && status.st_uid == found.owner && problem.empty()) {
        problem = lease_file_text(path, found.name);
        problem += " of " + user_text(status.st_uid);
        problem += " cannot be opened (" + errno_text(error);
        problem += "), so whether that user's job holds it cannot be told";
      }
      continue;  // gone, a symlink, or not that user's own: no lease of theirs
    }
    if (::fstat(found.file.get(), &status) != 0 || !S_ISREG(status.st_mode) || status.st_uid != found.owner) continue;
    files.push_back(std::move(found));
  }
  return files;
}

// This user's lock file of `uuid`, made when missing; "" in `problem` unless it cannot be
// used, then why (naming its owner).
inline FileDescriptor open_own_file(const FileDescriptor& directory, const std::string& path, const std::string& name,
                                    std::string& problem) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    FileDescriptor file(::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (file.get() < 0 && errno == ENOENT) {
      file = FileDescriptor(
          ::openat(directory.get(), name.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
      if (file.get() < 0 && errno == EEXIST) continue;  // made by another process of ours first: open that
      if (file.get() >= 0) (void)::fchmod(file.get(), 0644);
    }
    const int open_error = file.get() < 0 ? errno : 0;
    struct stat status {};
    const bool seen = ::fstatat(directory.get(), name.c_str(), &status, AT_SYMLINK_NOFOLLOW) == 0;
    const std::string owner = seen ? " (it belongs to " + user_text(status.st_uid) + ")" : std::string();
    problem = lease_file_text(path, name);
    if (file.get() < 0) {
      problem += " cannot be opened: " + errno_text(open_error);
      problem += owner;
      return file;
    }
    if (::fstat(file.get(), &status) != 0 || !S_ISREG(status.st_mode)) {
      problem += " is not a regular file" + owner;
      return FileDescriptor();
    }
    if (status.st_uid != ::geteuid()) {
      problem += " is not this user's: it belongs to " + user_text(status.st_uid);
      problem += ", who could remove it while a job holds it";
      return FileDescriptor();
    }
    problem.clear();
    return file;
  }
  problem = lease_file_text(path, name) + " keeps disappearing";
  return FileDescriptor();
}

// Whether `file` is still what `name` in `directory` names (lock-then-verify).
inline bool still_named(const FileDescriptor& directory, const std::string& name, const FileDescriptor& file) {
  struct stat held {
  }, named{};
  return ::fstat(file.get(), &held) == 0 &&
         ::fstatat(directory.get(), name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
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

inline std::string held_text(const LeaseFile& file, const std::string& directory) {
  const std::string holder = lock_holder(file.file);
  return "leased by another job (" + (holder.empty() ? std::string("holder not visible from here") : holder) +
         (file.owner == ::geteuid() ? std::string() : ", " + user_text(file.owner)) + ", lock " + directory + "/" +
         file.name + ")";
}

// One GPU's lock: taken, held by another job, or not to be had (with the reason).
struct LockAttempt {
  enum class Outcome { taken, held, unusable } outcome = Outcome::held;
  LeaseFile own;       // taken: this user's file, locked
  std::string reason;  // unusable: why, naming the file and its owner
};

// Locks `uuid` in `mode` (LOCK_EX or LOCK_SH) against every user (Note [Who can break
// a lease]): this user's file first, verified, then a look at every other user's that
// would conflict; on a conflict this user's lock is let go and the round tried again,
// so two jobs that lock at once do not both lose for long.
inline LockAttempt lock_for_every_user(const FileDescriptor& directory, const std::string& path, std::string_view uuid,
                                       int mode) {
  LockAttempt attempt;
  attempt.own.name = lease_file_name(uuid, ::geteuid());
  attempt.own.owner = ::geteuid();
  for (int round = 0; round < 24; ++round) {
    if (round > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(
          500 + (static_cast<unsigned>(::getpid()) * 7919u + static_cast<unsigned>(round)) % 1500u));
    if (attempt.own.file.get() < 0) {
      attempt.own.file = open_own_file(directory, path, attempt.own.name, attempt.reason);
      if (!attempt.reason.empty()) {
        attempt.outcome = LockAttempt::Outcome::unusable;
        return attempt;
      }
    }
    if (::flock(attempt.own.file.get(), mode | LOCK_NB) != 0) {
      const int error = errno;
      if (error == EWOULDBLOCK || error == EINTR) continue;  // another job of ours, or someone looking
      attempt.outcome = LockAttempt::Outcome::unusable;
      attempt.reason = lease_file_text(path, attempt.own.name) + " cannot be locked: " + errno_text(error);
      return attempt;
    }
    if (!still_named(directory, attempt.own.name, attempt.own.file)) {
      attempt.own.file.reset();  // removed or replaced before the lock: lock what the name names now
      continue;
    }
    std::vector<LeaseFile> others =
        other_users_files(directory, path, uuid, list_other_users_files(directory, path, uuid), attempt.reason);
    if (!attempt.reason.empty()) {
      attempt.own.file.reset();
      attempt.outcome = LockAttempt::Outcome::unusable;
      return attempt;
    }
    bool conflict = false;
    for (const LeaseFile& other : others)
      if (::flock(other.file.get(), (mode == LOCK_EX ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) conflict = true;
    if (!conflict) {
      attempt.outcome = LockAttempt::Outcome::taken;
      return attempt;
    }
    (void)::flock(attempt.own.file.get(), LOCK_UN);
  }
  attempt.own.file.reset();
  attempt.outcome = LockAttempt::Outcome::held;
  return attempt;
}

// The GPU of MIG instance `uuid`, from NVML; throws Error when NVML does not list it.
inline std::string mig_parent(std::string_view uuid) {
  const Inventory inventory = query_inventory();
  for (const Gpu& gpu : inventory.gpus)
    for (const MigInstance& instance : gpu.mig_instances)
      if (instance.uuid == uuid) return gpu.uuid;
  throw Error("gpusel: cannot lease " + std::string(uuid) + ": NVML does not list it as a MIG instance (" +
              (inventory.ok() ? "not found" : inventory.reason) +
              "), so its GPU, which the lease must hold shared, is unknown; pass the GPU's UUID too");
}

inline std::string parent_for(std::string_view uuid, std::string_view parent_gpu_uuid) {
  if (!parent_gpu_uuid.empty() || uuid.substr(0, 4) != "MIG-") return std::string(parent_gpu_uuid);
  return mig_parent(uuid);
}

// Why `uuid` cannot name a lease file, without "gpusel: ", or "".
inline std::string unusable_name(std::string_view uuid) {
  try {
    check_lease_name(uuid);
  } catch (const Error& error) {
    return std::string(error.what()).substr(std::string_view("gpusel: ").size());
  }
  return {};
}

GPUSEL_API LeaseTry lease_one(std::string_view uuid, std::string_view parent_gpu_uuid) {
  LeaseTry result;
  result.unusable = unusable_name(uuid);
  if (!result.unusable.empty()) return result;  // this GPU's problem alone: a pick passes it over
  const std::string parent = parent_for(uuid, parent_gpu_uuid);
  if (!parent.empty()) result.unusable = unusable_name(parent);
  if (!result.unusable.empty()) return result;
  const std::string path = lease_directory();
  const FileDescriptor directory = open_lease_directory(path);
  LockAttempt own = lock_for_every_user(directory, path, uuid, LOCK_EX);
  if (own.outcome != LockAttempt::Outcome::taken) {
    result.unusable = std::move(own.reason);
    return result;
  }
  GpuLease lease;
  if (!parent.empty()) {
    LockAttempt shared = lock_for_every_user(directory, path, parent, LOCK_SH);
    if (shared.outcome != LockAttempt::Outcome::taken) {
      result.unusable = std::move(shared.reason);
      return result;
    }
    lease.descriptors_.push_back(std::move(shared.own.file));
  }
  lease.descriptors_.push_back(std::move(own.own.file));
  lease.uuids_.emplace_back(uuid);
  result.lease = std::move(lease);
  return result;
}

// Who holds `uuid` (and `parent`), or why it cannot be leased, as lease_holder says, from
// `listing` of the opened lease directory.
inline std::optional<std::string> holder_in(const FileDescriptor& directory, const std::string& path,
                                            const LeaseListing& listing, std::string_view uuid,
                                            std::string_view parent) {
  if (uuid.empty()) return std::nullopt;  // no lease can name it, so none holds it
  for (const std::string_view each : {uuid, parent}) {
    if (each.empty()) continue;
    if (std::string why = unusable_name(each); !why.empty()) return "cannot be leased: " + why;
    std::string problem;
    std::vector<LeaseFile> files = other_users_files(directory, path, each, listing, problem);
    if (!problem.empty()) return "cannot be leased: " + problem;
    LeaseFile own{FileDescriptor(), lease_file_name(each, ::geteuid()), ::geteuid()};
    own.file =
        FileDescriptor(::openat(directory.get(), own.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    const bool missing = own.file.get() < 0 && errno == ENOENT;
    if (!missing) {
      struct stat status {};
      if (own.file.get() < 0 || ::fstat(own.file.get(), &status) != 0 || !S_ISREG(status.st_mode) ||
          status.st_uid != ::geteuid()) {
        own.file.reset();
        (void)open_own_file(directory, path, own.name, problem);  // says what is wrong with it
        if (!problem.empty()) return "cannot be leased: " + problem;
      } else {
        files.push_back(std::move(own));
      }
    }
    // A shared look fails only against an exclusive lease: on the instance itself, or on its whole GPU.
    for (const LeaseFile& file : files)
      if (!lock_briefly_retrying(file.file.get(), LOCK_SH, false)) return held_text(file, path);
  }
  return std::nullopt;
}

GPUSEL_API std::vector<std::optional<std::string>> lease_holders(
    const std::vector<std::pair<std::string, std::string>>& wanted) {
  const std::string path = lease_directory();
  const FileDescriptor directory = open_lease_directory(path);
  const LeaseListing listing = list_other_users_files(directory, path);
  std::vector<std::optional<std::string>> holders;
  holders.reserve(wanted.size());
  for (const auto& [uuid, parent] : wanted) {
    if (std::string why = uuid.empty() ? std::string() : unusable_name(uuid); !why.empty())
      holders.emplace_back("cannot be leased: " + why);
    else
      holders.push_back(holder_in(directory, path, listing, uuid, parent_for(uuid, parent)));
  }
  return holders;
}

}  // namespace detail

namespace detail {

// A ticket's place from its name "wait-<ns>-<pid>.<uid>.ticket": arrival, pid and uid; nullopt for another name.
struct TicketPlace {
  unsigned long long arrived = 0;
  long pid = 0;
  unsigned long uid = 0;
};
inline std::optional<TicketPlace> ticket_place(std::string_view name) {
  constexpr std::string_view start = "wait-", end = ".ticket";
  if (name.size() <= start.size() + end.size() || name.substr(0, start.size()) != start ||
      name.substr(name.size() - end.size()) != end)
    return std::nullopt;
  const std::string middle(name.substr(start.size(), name.size() - start.size() - end.size()));
  TicketPlace place;
  char tail = 0;
  if (std::sscanf(middle.c_str(), "%20llu-%19ld.%10lu%c", &place.arrived, &place.pid, &place.uid, &tail) != 3)
    return std::nullopt;
  return place;
}

GPUSEL_API WaitLine::WaitLine()
    : path_(lease_directory()), directory_(open_lease_directory(path_)), pid_(static_cast<long>(::getpid())) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  arrived_ = static_cast<unsigned long long>(now.tv_sec) * 1000000000ull + static_cast<unsigned long long>(now.tv_nsec);
}

GPUSEL_API void WaitLine::join() {
  if (file_.get() >= 0) return;
  const std::string uid = std::to_string(::geteuid());
  const std::string name = "wait-" + std::to_string(arrived_) + "-" + std::to_string(pid_) + "." + uid + ".ticket";
  const std::string temporary = ".wait-" + std::to_string(pid_) + "." + uid + ".new";
  (void)::unlinkat(directory_.get(), temporary.c_str(), 0);  // this pid's own, left by a crash
  FileDescriptor file(
      ::openat(directory_.get(), temporary.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (file.get() < 0 || ::flock(file.get(), LOCK_EX | LOCK_NB) != 0 ||
      ::renameat(directory_.get(), temporary.c_str(), directory_.get(), name.c_str()) != 0) {
    const int error = errno;
    (void)::unlinkat(directory_.get(), temporary.c_str(), 0);
    throw Error("gpusel: cannot take a place in line in the lease directory " + path_ + ": " + errno_text(error));
  }
  file_ = std::move(file);
  name_ = name;
}

GPUSEL_API WaitLine::~WaitLine() {
  if (file_.get() >= 0 && still_named(directory_, name_, file_)) (void)::unlinkat(directory_.get(), name_.c_str(), 0);
}

GPUSEL_API std::string WaitLine::ahead() const {
  const int copy = ::openat(directory_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* entries = copy < 0 ? nullptr : ::fdopendir(copy);
  if (entries == nullptr) {
    if (copy >= 0) ::close(copy);
    return {};  // cannot tell: the lease itself will say what is wrong
  }
  std::optional<TicketPlace> first;
  while (const dirent* entry = ::readdir(entries)) {
    const std::optional<TicketPlace> place = ticket_place(entry->d_name);
    if (!place || place->arrived > arrived_ || (place->arrived == arrived_ && place->pid >= pid_)) continue;
    if (first && (first->arrived < place->arrived || (first->arrived == place->arrived && first->pid < place->pid)))
      continue;  // a still earlier one is already known to wait
    const FileDescriptor ticket(
        ::openat(directory_.get(), entry->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat status {};
    if (ticket.get() < 0 || ::fstat(ticket.get(), &status) != 0 || !S_ISREG(status.st_mode) ||
        status.st_uid != place->uid)
      continue;                                                   // not that user's own ticket: no place of theirs
    if (::flock(ticket.get(), LOCK_SH | LOCK_NB) == 0) continue;  // its job has ended: a stale ticket
    first = place;
  }
  ::closedir(entries);
  if (!first) return {};
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const long long since = static_cast<long long>(now.tv_sec) - static_cast<long long>(first->arrived / 1000000000ull);
  return "pid " + std::to_string(first->pid) +
         (first->uid == ::geteuid() ? std::string() : " of " + user_text(static_cast<uid_t>(first->uid))) +
         ", waiting for " + std::to_string(since < 0 ? 0 : since) + " s";
}

}  // namespace detail

GPUSEL_API void check_lease_directory() { (void)detail::open_lease_directory(lease_directory()); }

GPUSEL_API std::optional<GpuLease> try_lease_gpu(std::string_view uuid, std::string_view parent_gpu_uuid) {
  detail::check_lease_name(uuid);  // its own words, as always
  detail::LeaseTry attempt = detail::lease_one(uuid, parent_gpu_uuid);
  if (!attempt.unusable.empty()) throw Error("gpusel: cannot lease " + std::string(uuid) + ": " + attempt.unusable);
  return std::move(attempt.lease);
}

GPUSEL_API std::optional<std::string> lease_holder(std::string_view uuid, std::string_view parent_gpu_uuid) {
  return detail::lease_holders({{std::string(uuid), std::string(parent_gpu_uuid)}}).front();
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
