// The definitions of gpusel/machine/lease_directory.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/lease_directory.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/detail/system/system_text.hpp"

namespace gpusel {

GPUSEL_API std::string lease_directory() {
  const char* named = detail::read_environment("GPUSEL_LEASE_DIR", detail::Trust::secure);
  if (named == nullptr || *named == '\0') {
    struct stat status {};  // only root can make it: one made at boot (Note [The lease directory])
    const bool provisioned = ::lstat(detail::kRunLeaseDirectory, &status) == 0 && S_ISDIR(status.st_mode);
    return provisioned ? detail::kRunLeaseDirectory : detail::kTmpLeaseDirectory;
  }
  if (*named != '/')
    throw Error("gpusel: GPUSEL_LEASE_DIR=\"" + std::string(named) +
                "\" is a relative path, so jobs started in different directories would not see each other's "
                "leases; give an absolute one");
  return named;
}

GPUSEL_API void check_lease_directory() { (void)detail::open_lease_directory(lease_directory()); }

namespace detail {

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

// Whether files owned by `uid` may hold leases this process trusts: only root and
// this process's own user can then remove them (Note [Who can break a lease]).
inline bool trusted_owner(uid_t uid) noexcept { return uid == 0 || uid == ::geteuid(); }

// How to make `path` a directory every user may lease in: made at every boot and never
// aged (Note [Leases against cleaners]), unlike a directory made once by hand.
inline std::string provision_hint(const std::string& path) {
  return "; on a machine shared by several users, root makes it with a tmpfiles.d line 'd " + path +
         " 1777 root root -', or set GPUSEL_LEASE_DIR to a directory of your own (unset, leases live in /tmp, "
         "shared with no set-up)";
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

// Why component `path` (lstat `status`) on the way to the lease directory lets another
// user change where that way leads, or "": a symlink can only be replaced, by its owner
// (in a sticky directory) or whoever may write the directory it is in, checked before it.
inline std::string untrusted_component(const struct stat& status, const std::string& path) {
  if (!S_ISLNK(status.st_mode)) return untrusted_directory(status, path);
  if (trusted_owner(status.st_uid)) return {};
  return path + " is a symlink that belongs to " + user_text(status.st_uid) + ", who could point it elsewhere";
}

// The components of `path`, last first (a stack to walk).
inline std::vector<std::string> components_last_first(const std::string& path) {
  std::vector<std::string> names;
  for (std::size_t start = 0; start < path.size();) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) names.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return {names.rbegin(), names.rend()};
}

// Every directory above `path` (absolute), as written, and every symlink on the way
// with what it leads through, must be one only root or this user can change, or
// another user could swap the lease directory for another (Note [Who can break a lease]).
inline void check_directories_above(const std::string& path) {
  // "gpusel: the lease directory <path> <verdict><component>: <why>"
  const auto refusal = [&path](const char* verdict, const std::string& component, const std::string& why) {
    std::string message = "gpusel: the lease directory " + path;
    message += verdict;
    message += component;
    message += ": ";
    message += why;
    return Error(message);
  };
  std::vector<std::string> pending = components_last_first(path.substr(0, path.find_last_of('/')));
  std::string current = "/";  // where the walk is: symlinks resolved, each component checked
  int links = 0;
  for (bool root = true; root || !pending.empty(); root = false) {
    std::string next = current;
    if (!root) {
      const std::string name = std::move(pending.back());
      pending.pop_back();
      if (name == ".") continue;
      if (name == "..") {  // the directory above one already checked: checked too
        current = current.substr(0, std::max<std::size_t>(current.find_last_of('/'), 1));
        continue;
      }
      if (current != "/") next += '/';
      next += name;
    }
    struct stat status {};
    if (::lstat(next.c_str(), &status) != 0) {
      const int error = errno;
      throw refusal(error == ENOENT ? " cannot be made: " : " cannot be used: ", next, errno_text(error));
    }
    if (const std::string why = untrusted_component(status, next); !why.empty()) {
      std::string message = "gpusel: the lease directory " + path;
      message += " cannot be trusted: ";
      message += why;
      throw Error(message);
    }
    if (!S_ISLNK(status.st_mode)) {
      current = next;
      continue;
    }
    char target[PATH_MAX];
    const ssize_t length = ::readlink(next.c_str(), target, sizeof target - 1);
    const int error = errno;
    if (length <= 0 || ++links > 40)
      throw refusal(" cannot be used: ", next, length <= 0 ? errno_text(error) : std::string("too many symlinks"));
    const std::string leads_to(target, static_cast<std::size_t>(length));
    if (leads_to.front() == '/') current = "/";
    for (std::string& name : components_last_first(leads_to)) pending.push_back(std::move(name));
  }
}

GPUSEL_API FileDescriptor open_lease_directory(const std::string& path) {
  const std::string what = "gpusel: the lease directory " + path;
  check_directories_above(path);
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)  // only GPUSEL_LEASE_DIR's can be missing
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

// Whether `file` is still what `name` in `directory` names (lock-then-verify).
GPUSEL_API bool still_named(const FileDescriptor& directory, const std::string& name, const FileDescriptor& file) {
  struct stat held {
  }, named{};
  return ::fstat(file.get(), &held) == 0 &&
         ::fstatat(directory.get(), name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

}  // namespace detail

}  // namespace gpusel
