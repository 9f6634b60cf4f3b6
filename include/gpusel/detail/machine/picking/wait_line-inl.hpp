// The definitions of gpusel/detail/machine/picking/wait_line.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/machine/picking/wait_line.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string_view>

#include "gpusel/detail/machine/system/system_text.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

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

}  // namespace gpusel::detail
