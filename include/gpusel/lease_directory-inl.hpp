// The definitions of gpusel/lease_directory.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: machine (docs/layers.md).
#pragma once

#include "gpusel/lease_directory.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/machine/system/system_text.hpp"

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

GPUSEL_API FileDescriptor open_lease_directory(const std::string& path) {
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
