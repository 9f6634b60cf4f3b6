// The definitions of gpusel/machine/detail/leases/lock_files.hpp's out-of-line functions
// (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp).
#pragma once

#include "gpusel/machine/detail/leases/lock_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <thread>

#include "gpusel/error.hpp"
#include "gpusel/machine/detail/system/system_text.hpp"

namespace gpusel::detail {

GPUSEL_API bool canonical_uuid(std::string_view uuid) noexcept {
  constexpr std::string_view kShape = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  if (uuid.size() != 4 + kShape.size() || (uuid.substr(0, 4) != "GPU-" && uuid.substr(0, 4) != "MIG-")) return false;
  for (std::size_t i = 0; i < kShape.size(); ++i) {
    const char c = uuid[4 + i];
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (kShape[i] == '-' ? c != '-' : !hex) return false;
  }
  return true;
}

GPUSEL_API std::string lease_name_problem(std::string_view uuid) {
  if (uuid.empty()) return "cannot lease a GPU without a UUID (NVML reported none)";
  if (canonical_uuid(uuid)) return {};
  return "cannot lease \"" + std::string(uuid) +
         "\": not a GPU or MIG UUID as NVML reports it (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx or MIG-..., "
         "lower-case hexadecimal digits, whole: as nvidia-smi -L prints it)";
}

GPUSEL_API void check_lease_name(std::string_view uuid) {
  if (std::string problem = lease_name_problem(uuid); !problem.empty()) throw Error("gpusel: " + problem);
}

GPUSEL_API std::string lease_file_name(std::string_view uuid, uid_t uid) {
  return std::string(kLeaseFilePrefix) + std::string(uuid) + "." + std::to_string(uid) + ".lock";
}

GPUSEL_API std::string member_file_name(std::string_view uuid, uid_t uid, unsigned long long lock_inode) {
  return std::string(kLeaseFilePrefix) + std::string(uuid) + "." + std::to_string(uid) + "." +
         std::to_string(lock_inode) + ".lock";
}

// Whether `number` is a number as lock file names write them ("1000").
inline bool lock_number(std::string_view number) {
  return !number.empty() && number.size() <= 20 && number.find_first_not_of("0123456789") == std::string_view::npos;
}

// "its lease file <path>/<name>", for messages.
inline std::string lease_file_text(const std::string& path, const std::string& name) {
  std::string text = "its lease file ";
  text += path;
  text += '/';
  text += name;
  return text;
}

GPUSEL_API std::optional<std::vector<std::string>> directory_names(const FileDescriptor& directory) {
  const int copy = ::openat(directory.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* entries = copy < 0 ? nullptr : ::fdopendir(copy);
  if (entries == nullptr) {
    const int error = errno;
    if (copy >= 0) ::close(copy);
    errno = error;
    return std::nullopt;
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(entries)) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(entries);
  return names;
}

GPUSEL_API bool names_lock_file_of(std::string_view name, std::string_view uuid) noexcept {
  const std::string_view prefix = kLeaseFilePrefix;
  const std::size_t dot = prefix.size() + uuid.size();
  return name.size() > dot + 6 && name.substr(0, prefix.size()) == prefix &&
         name.substr(prefix.size(), uuid.size()) == uuid && name[dot] == '.' && name.substr(name.size() - 5) == ".lock";
}

GPUSEL_API LeaseListing list_other_files(const FileDescriptor& directory, const std::string& path,
                                         std::string_view only) {
  LeaseListing listing;
  const std::optional<std::vector<std::string>> names = directory_names(directory);
  if (!names) {
    const int error = errno;
    listing.problem = "the lease directory " + path + " cannot be listed: " + errno_text(error);
    return listing;
  }
  for (const std::string& entry : *names) {
    const std::string_view name = entry, prefix = kLeaseFilePrefix;
    if (name.size() <= prefix.size() + 5 || name.substr(0, prefix.size()) != prefix ||
        name.substr(name.size() - 5) != ".lock")
      continue;
    const std::string_view stem = name.substr(prefix.size(), name.size() - prefix.size() - 5);
    const std::size_t dot = stem.find('.'), second = dot == std::string_view::npos ? dot : stem.find('.', dot + 1);
    if (dot == std::string_view::npos || dot == 0) continue;
    const std::string_view uuid = stem.substr(0, dot), number = stem.substr(dot + 1, second - dot - 1);
    if (!lock_number(number) || (second != std::string_view::npos && !lock_number(stem.substr(second + 1))))
      continue;  // a lease file "<UUID>.<uid>", or a member file "<UUID>.<uid>.<inode>" (Note [A job's members])
    if ((!only.empty() && uuid != only) || name == lease_file_name(uuid, ::geteuid())) continue;
    listing.others[std::string(uuid)].emplace_back(name);
  }
  return listing;
}

// Note [One lock file at a time]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A GPU may have as many lock files as users can make (any user may make readable files
// of any name in the lease directory). A lease and a look open each, try it and close it
// before the next, so they need one descriptor more than the lease keeps, however many
// files there are: with every file open at once, ~1100 readable files of one user made
// the GPU unusable to everyone at a soft limit of 1024 descriptors (EMFILE). Trying one
// at a time gives up nothing: a lease holds its own file locked while it tries the others
// (Note [Who can break a lease]), so a job that locks its own file after this lease tried
// it finds this lease's own held, and the lock a try takes goes with the close.
GPUSEL_API bool visit_other_files(const FileDescriptor& directory, const std::string& path, std::string_view uuid,
                                  const LeaseListing& listing, std::string& problem,
                                  const std::function<bool(const LeaseFile&)>& visit) {
  if (!listing.problem.empty()) {
    problem = listing.problem;
    return true;
  }
  const auto named = listing.others.find(uuid);
  if (named == listing.others.end()) return true;
  for (const std::string& name : named->second) {
    LeaseFile found{
        FileDescriptor(::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)), name};
    struct stat status {};
    if (found.file.get() < 0) {
      const int error = errno;
      if (::fstatat(directory.get(), found.name.c_str(), &status, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISREG(status.st_mode) && problem.empty()) {
        problem = lease_file_text(path, found.name);
        problem += " of " + user_text(status.st_uid);
        problem += " cannot be opened (" + errno_text(error);
        problem += "), so whether a job holds it cannot be told";
      }
      continue;  // gone, or a symlink: no lease
    }
    if (::fstat(found.file.get(), &status) != 0 || !S_ISREG(status.st_mode)) continue;
    found.owner = status.st_uid;
    if (!visit(found)) return false;
  }
  return true;
}

GPUSEL_API FileDescriptor open_own_file(const FileDescriptor& directory, const std::string& path,
                                        const std::string& name, std::string& problem) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    FileDescriptor file(::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (file.get() < 0 && errno == ENOENT) {
      file = FileDescriptor(::openat(directory.get(), name.c_str(),
                                     O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kLeaseFileMode));
      if (file.get() < 0 && errno == EEXIST) continue;  // made by another process of ours first: open that
      if (file.get() >= 0) (void)::fchmod(file.get(), kLeaseFileMode);  // past the umask
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

GPUSEL_API bool lock_briefly_retrying(int fd, int operation, bool retry) {
  for (int attempt = 0;; ++attempt) {
    if (::flock(fd, operation | LOCK_NB) == 0) return true;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK || !retry || attempt >= 20) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

GPUSEL_API LockAttempt lock_for_every_user(const FileDescriptor& directory, const std::string& path,
                                           std::string_view uuid, int mode) {
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
    bool conflict = false;  // a conflicting lock on another file is another job's lease
    (void)visit_other_files(directory, path, uuid, list_other_files(directory, path, uuid), attempt.reason,
                            [mode, &conflict](const LeaseFile& other) {
                              conflict = ::flock(other.file.get(), mode | LOCK_NB) != 0;
                              return !conflict;
                            });
    if (!attempt.reason.empty()) {
      attempt.own.file.reset();
      attempt.outcome = LockAttempt::Outcome::unusable;
      return attempt;
    }
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

}  // namespace gpusel::detail
