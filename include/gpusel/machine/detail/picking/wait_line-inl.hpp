// The definitions of gpusel/machine/detail/picking/wait_line.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/detail/picking/wait_line.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "gpusel/error.hpp"
#include "gpusel/machine/detail/leases/lock_files.hpp"
#include "gpusel/machine/detail/system/process_files.hpp"
#include "gpusel/machine/detail/system/system_text.hpp"

namespace gpusel::detail {

GPUSEL_API std::string duration_text(long long seconds) {
  if (seconds < 0) seconds = 0;
  struct Unit {
    long long seconds;
    const char* name;
  };
  constexpr Unit units[] = {{86400, "d"}, {3600, "h"}, {60, "min"}, {1, "s"}};
  for (std::size_t i = 0; i + 1 < std::size(units); ++i)
    if (seconds >= units[i].seconds) {
      const long long rest = (seconds % units[i].seconds) / units[i + 1].seconds;
      return std::to_string(seconds / units[i].seconds) + " " + units[i].name +
             (rest == 0 ? std::string() : " " + std::to_string(rest) + " " + units[i + 1].name);
    }
  return std::to_string(seconds) + " s";
}

// 16 hex digits nobody can predict (getrandom), for names another user must not squat.
inline std::string unpredictable_text() {
  unsigned long long bits = 0;
  if (::getrandom(&bits, sizeof bits, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof bits)) {
    timespec now{};  // no entropy yet (early boot): the clock, mixed with this process
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    bits = static_cast<unsigned long long>(now.tv_nsec) * 0x9E3779B97F4A7C15ull ^
           (static_cast<unsigned long long>(::getpid()) << 32) ^ static_cast<unsigned long long>(now.tv_sec);
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", bits);
  return text;
}

// The owner's uid a ticket's name "gpusel-wait-<uid>-<random>.ticket" gives; nullopt for another name.
inline std::optional<unsigned long> ticket_uid(std::string_view name) {
  constexpr std::string_view start = "gpusel-wait-", end = ".ticket";
  if (name.size() <= start.size() + end.size() || name.substr(0, start.size()) != start ||
      name.substr(name.size() - end.size()) != end)
    return std::nullopt;
  const std::string middle(name.substr(start.size(), name.size() - start.size() - end.size()));
  unsigned long uid = 0;
  char random[17] = {}, tail = 0;
  if (std::sscanf(middle.c_str(), "%10lu-%16[0-9a-f]%c", &uid, random, &tail) != 2) return std::nullopt;
  return uid;
}

inline long long ctime_ns(const struct stat& status) {
  return static_cast<long long>(status.st_ctim.tv_sec) * 1000000000ll + status.st_ctim.tv_nsec;
}

// Whether process `pid` is stopped (Ctrl-Z, SIGSTOP) or stopped by a tracer; false when it cannot be told.
inline bool stopped(std::optional<long> pid) {
  const std::optional<ProcessInfo> process = pid ? process_info(*pid) : std::nullopt;
  return process && (process->state == 'T' || process->state == 't');
}

GPUSEL_API WaitLine::WaitLine() : path_(lease_directory()), directory_(open_lease_directory(path_)) {}

GPUSEL_API void WaitLine::join(int gpus) {
  if (file_.get() >= 0) return;
  const std::string start = "gpusel-wait-" + std::to_string(::geteuid()) + "-";
  int error = EEXIST;
  for (int attempt = 0; attempt < 16 && error == EEXIST; ++attempt) {  // a name taken: another, unpredictable
    std::string name = start + unpredictable_text();
    std::string temporary = "." + name;
    temporary += ".new";  // made under ".gpusel-wait-<uid>-<hex>.new", then linked as "gpusel-wait-<uid>-<hex>.ticket"
    name += ".ticket";
    FileDescriptor file(::openat(directory_.get(), temporary.c_str(),
                                 O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kLeaseFileMode));
    if (file.get() < 0) {
      error = errno;
      continue;
    }
    (void)::fchmod(file.get(), kLeaseFileMode);                          // sticky: no cleaner ages a waiter's place
    const std::string contents = "gpus=" + std::to_string(gpus) + "\n";  // Note [The wait line shown]
    const bool written = ::write(file.get(), contents.data(), contents.size()) == static_cast<ssize_t>(contents.size());
    (void)written;  // unwritten (a full disk), the ticket keeps its place: list shows its count unknown
    struct stat status {};
    // Locked before its name appears, so no one sees it unlocked (which would make it dead).
    const bool placed = ::flock(file.get(), LOCK_EX | LOCK_NB) == 0 &&
                        ::linkat(directory_.get(), temporary.c_str(), directory_.get(), name.c_str(), 0) == 0;
    error = placed ? 0 : errno;
    (void)::unlinkat(directory_.get(), temporary.c_str(), 0);
    if (placed && ::fstat(file.get(), &status) == 0) {  // the link set its ctime: the arrival
      file_ = std::move(file);
      name_ = name;
      arrived_ns_ = ctime_ns(status);
      return;
    }
    if (placed) (void)::unlinkat(directory_.get(), name.c_str(), 0);
  }
  throw Error("gpusel: cannot take a place in line in the lease directory " + path_ + ": " + errno_text(error));
}

GPUSEL_API void WaitLine::leave() noexcept {
  if (file_.get() >= 0 && still_named(directory_, name_, file_)) (void)::unlinkat(directory_.get(), name_.c_str(), 0);
  file_ = FileDescriptor();
  name_.clear();
  arrived_ns_ = 0;
}

GPUSEL_API WaitLine::~WaitLine() { leave(); }

// The ticket `name` in `directory`, opened, with its status, when it is a regular file of the
// user its name gives; an unopened descriptor for any other name or file: no place of theirs.
inline FileDescriptor open_own_ticket(const FileDescriptor& directory, const std::string& name, struct stat& status) {
  const std::optional<unsigned long> uid = ticket_uid(name);
  if (!uid) return FileDescriptor();
  FileDescriptor ticket(::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (ticket.get() < 0 || ::fstat(ticket.get(), &status) != 0 || !S_ISREG(status.st_mode) || status.st_uid != *uid)
    return FileDescriptor();
  return ticket;
}

GPUSEL_API std::string WaitLine::ahead() const {
  const std::optional<std::vector<std::string>> names = directory_names(directory_);
  if (!names) return {};                                   // cannot tell: the lease itself will say what is wrong
  std::optional<std::pair<long long, std::string>> first;  // arrival and name
  struct stat first_status {};
  std::optional<std::vector<FlockLock>> locks;
  for (const std::string& name : *names) {
    if (name == name_) continue;
    struct stat status {};
    const FileDescriptor ticket = open_own_ticket(directory_, name, status);
    if (ticket.get() < 0) continue;
    const std::pair<long long, std::string> place{ctime_ns(status), name};
    if ((file_.get() >= 0 && place >= std::pair<long long, std::string>{arrived_ns_, name_}) ||
        (first && *first < place))
      continue;  // arrived later, or a still earlier one is already known to wait
    if (::flock(ticket.get(), LOCK_SH | LOCK_NB) == 0) {  // its waiter has ended: a dead ticket
      if (still_named(directory_, name, ticket)) (void)::unlinkat(directory_.get(), name.c_str(), 0);
      continue;
    }
    if (!locks) locks = flock_locks();                        // read once, and only when a live ticket is ahead
    if (stopped(exclusive_locker(*locks, status))) continue;  // Ctrl-Z holds up no one
    first = place;
    first_status = status;
  }
  if (!first) return {};
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const std::optional<long> pid = exclusive_locker(*locks, first_status);
  const long long since =
      (static_cast<long long>(now.tv_sec) * 1000000000ll + now.tv_nsec - ctime_ns(first_status)) / 1000000000ll;
  const std::string who = pid ? "pid " + std::to_string(*pid) : std::string("a job");
  const std::string whose =
      first_status.st_uid == ::geteuid() ? std::string() : " of " + user_text(first_status.st_uid);
  return who + whose + ", waiting for " + duration_text(since);
}

// Note [The wait line shown]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `gpusel list` shows each live ticket: its owner, the pid that holds it locked
// (/proc/locks), its arrival and how many GPUs its waiter needs. The arrival is the
// ticket's ctime, which orders the line and which no owner can move back (an mtime
// `touch` could); the count is the ticket's contents, "gpus=<n>\n", written before
// the ticket is linked into place, so no reader sees it empty. Contents are the
// owner's own claim: anything else reads as an unknown count, and no one's place
// depends on them. A dead ticket (no lock) is not shown, and a look removes nothing.

// How many GPUs the ticket open as `fd` says its waiter needs: "gpus=<n>\n", else nullopt.
inline std::optional<int> ticket_gpus(int fd) {
  char text[24];
  const ssize_t size = ::pread(fd, text, sizeof text, 0);
  if (size < 7 || size >= static_cast<ssize_t>(sizeof text)) return std::nullopt;
  const std::string_view contents(text, static_cast<std::size_t>(size));
  if (contents.substr(0, 5) != "gpus=" || contents.back() != '\n') return std::nullopt;
  const std::string_view digits = contents.substr(5, contents.size() - 6);
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  return std::stoi(std::string(digits));
}

GPUSEL_API std::vector<LiveTicket> live_tickets(const FileDescriptor& directory, const std::string& path) {
  const std::optional<std::vector<std::string>> names = directory_names(directory);
  if (!names) {
    const int error = errno;
    throw Error("gpusel: the lease directory " + path + " cannot be listed: " + errno_text(error));
  }
  std::vector<LiveTicket> tickets;
  std::optional<std::vector<FlockLock>> locks;
  for (const std::string& name : *names) {
    struct stat status {};
    const FileDescriptor ticket = open_own_ticket(directory, name, status);
    if (ticket.get() < 0) continue;
    if (::flock(ticket.get(), LOCK_SH | LOCK_NB) == 0) continue;  // its waiter has ended; the close unlocks it
    if (!locks) locks = flock_locks();
    LiveTicket live;
    live.name = name;
    live.owner = status.st_uid;
    live.arrived_ns = ctime_ns(status);
    live.pid = exclusive_locker(*locks, status);
    live.stopped = stopped(live.pid);
    live.gpus = ticket_gpus(ticket.get());
    tickets.push_back(std::move(live));
  }
  std::sort(tickets.begin(), tickets.end(), [](const LiveTicket& a, const LiveTicket& b) {
    return std::tie(a.arrived_ns, a.name) < std::tie(b.arrived_ns, b.name);
  });
  return tickets;
}

}  // namespace gpusel::detail
