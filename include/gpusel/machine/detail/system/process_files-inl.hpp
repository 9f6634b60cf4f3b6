// The definitions of gpusel/machine/detail/system/process_files.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/detail/system/process_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string_view>

namespace gpusel::detail {

GPUSEL_API std::vector<FlockLock> flock_locks() {
  std::vector<FlockLock> locks;
  std::ifstream listing("/proc/locks");
  std::string line;
  while (std::getline(listing, line)) {
    if (line.find("->") != std::string::npos || line.find("FLOCK") == std::string::npos) continue;  // a waiter
    std::istringstream words(line);
    std::string number, kind, advisory, access, device;
    FlockLock lock;
    if ((words >> number >> kind >> advisory >> access >> lock.pid >> device) &&
        std::sscanf(device.c_str(), "%x:%x:%llu", &lock.major_number, &lock.minor_number, &lock.inode) == 3) {
      lock.exclusive = access == "WRITE";
      locks.push_back(lock);
    }
  }
  return locks;
}

GPUSEL_API std::optional<long> exclusive_locker(const std::vector<FlockLock>& locks, const struct stat& file) {
  for (const FlockLock& lock : locks)
    if (lock.exclusive && lock.pid > 0 && lock.major_number == major(file.st_dev) &&
        lock.minor_number == minor(file.st_dev) && lock.inode == file.st_ino)
      return lock.pid;
  return std::nullopt;
}

// The text of /proc file `path`, or "" when it cannot be read: its process may end while it is
// read, and a read then fails (ESRCH), which std::istreambuf_iterator turns into an exception.
inline std::string proc_text(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[4096];
  for (ssize_t got = ::read(fd, buffer, sizeof buffer); got != 0; got = ::read(fd, buffer, sizeof buffer)) {
    if (got > 0) {
      text.append(buffer, static_cast<std::size_t>(got));
    } else if (errno != EINTR) {
      text.clear();
      break;
    }
  }
  ::close(fd);
  return text;
}

GPUSEL_API std::optional<ProcessInfo> process_info(long pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  const std::string text = proc_text(base + "/stat");
  const std::size_t name_end = text.rfind(')');  // the name may hold anything, ')' and spaces included
  if (name_end == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(name_end + 1));
  std::string field, state;
  fields >> state;
  int number = 3;  // field 22: the start, in clock ticks after boot
  while (number < 22 && fields >> field) ++number;
  if (state.empty()) return std::nullopt;
  ProcessInfo info;
  info.state = state[0];
  const std::string comm = proc_text(base + "/comm");
  info.command = comm.substr(0, comm.find('\n'));
  const std::string status = "\n" + proc_text(base + "/status");
  if (const std::size_t uid_line = status.find("\nUid:"); uid_line != std::string::npos) {
    const char* const start = status.c_str() + uid_line + 5;
    char* end = nullptr;
    const unsigned long long uid = std::strtoull(start, &end, 10);
    if (end != start && uid <= static_cast<unsigned long long>(static_cast<uid_t>(-1)))
      info.uid = static_cast<uid_t>(uid);
  }
  std::string line;
  std::ifstream system_stat("/proc/stat");
  long long boot = -1;
  while (boot < 0 && std::getline(system_stat, line))
    if (line.rfind("btime ", 0) == 0) boot = std::atoll(line.c_str() + 6);
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (boot >= 0 && ticks > 0 && number == 22)
    info.started = boot + static_cast<std::int64_t>(std::strtoull(field.c_str(), nullptr, 10) /
                                                    static_cast<unsigned long long>(ticks));
  return info;
}

GPUSEL_API std::optional<bool> has_open(long pid, const struct stat& file, const std::string& name) {
  const std::string descriptors = "/proc/" + std::to_string(pid) + "/fd";
  DIR* entries = ::opendir(descriptors.c_str());
  if (entries == nullptr) return std::nullopt;
  std::optional<bool> found = false;
  char target[PATH_MAX];
  while (const dirent* entry = ::readdir(entries)) {
    if (entry->d_name[0] == '.') continue;
    const std::string link = descriptors + "/" + entry->d_name;
    const ssize_t length = ::readlink(link.c_str(), target, sizeof target);
    if (length < 0) {
      if (errno == EACCES || errno == EPERM) found.reset();  // listed, but not to be read
      continue;
    }
    const std::string_view text(target, static_cast<std::size_t>(length));
    if (text.size() <= name.size() || text.substr(text.size() - name.size()) != name ||
        text[text.size() - name.size() - 1] != '/')
      continue;
    struct stat status {};
    if (::stat(link.c_str(), &status) == 0 && status.st_dev == file.st_dev && status.st_ino == file.st_ino) {
      found = true;
      break;
    }
  }
  ::closedir(entries);
  return found;
}

GPUSEL_API std::optional<long> earliest_opener(const struct stat& file, const std::string& name) {
  DIR* processes = ::opendir("/proc");
  if (processes == nullptr) return std::nullopt;
  std::optional<long> earliest;
  std::int64_t earliest_start = 0;
  while (const dirent* entry = ::readdir(processes)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == ::getpid() || !has_open(pid, file, name).value_or(false)) continue;
    const std::optional<ProcessInfo> candidate = process_info(pid);
    if (!candidate || candidate->state == 'Z' || candidate->state == 'X') continue;  // a zombie holds no file
    if (!earliest || candidate->started.value_or(0) < earliest_start) {
      earliest = pid;
      earliest_start = candidate->started.value_or(0);
    }
  }
  ::closedir(processes);
  return earliest;
}

GPUSEL_API std::string local_time_text(std::int64_t seconds) {
  const auto time = static_cast<std::time_t>(seconds);
  std::tm local{};
  char text[32] = "";
  if (::localtime_r(&time, &local) == nullptr || std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local) == 0)
    return "@" + std::to_string(seconds);
  return text;
}

}  // namespace gpusel::detail
