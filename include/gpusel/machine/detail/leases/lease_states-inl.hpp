// The definitions of gpusel/machine/detail/leases/lease_states.hpp's out-of-line functions
// (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp).
#pragma once

#include "gpusel/machine/detail/leases/lease_states.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <utility>
#include <vector>

#include "gpusel/machine/detail/system/process_files.hpp"
#include "gpusel/machine/lease.hpp"

namespace gpusel::detail {

// Process `pid`'s name and start into `state`; false when it has ended (or is a zombie,
// which holds no file) or cannot be seen.
inline bool read_process(long pid, LeaseState& state) {
  const std::optional<ProcessInfo> process = process_info(pid);
  if (!process || process->state == 'Z' || process->state == 'X') return false;
  state.pid = pid;
  state.command = process->command;
  state.started = process->started;
  state.user = process->uid;  // the holder's user, never the file's owner: anyone may lock a 0644 file
  return true;
}

// A live process of the job that holds `file` locked, into `state` (Note [Lease files]): the
// process /proc/locks names while it lives and has the file open (`gpusel run`), else the
// earliest-started one with the file open (its command, which inherited the lock after a
// kill -9 of run); where none is visible, `state.unseen` says why.
inline void find_holder(const FileDescriptor& file, const std::string& name, LeaseState& state) {
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) return;
  const std::optional<long> locker = exclusive_locker(flock_locks(), status);
  if (locker && has_open(*locker, status, name).value_or(true) && read_process(*locker, state)) return;
  if (const std::optional<long> opener = earliest_opener(status, name); opener && read_process(*opener, state)) return;
  state.pid.reset();
  state.unseen = locker ? "pid " + std::to_string(*locker) +
                              ", which took it, has ended; no process of its job is visible to this user"
                        : "its holder's pid is not visible from this PID namespace";
}

// The state of a lease held on `file` (of `directory`).
inline LeaseState held_state(const LeaseFile& file, const std::string& directory) {
  LeaseState state;
  state.held = true;
  state.lock_file = directory + "/" + file.name;
  find_holder(file.file, file.name, state);
  return state;
}

GPUSEL_API LeaseState state_in(const FileDescriptor& directory, const std::string& path, const LeaseListing& listing,
                               std::string_view uuid, std::string_view parent) {
  LeaseState state;
  if (uuid.empty()) return state;  // no lease can name it, so none holds it
  for (const std::string_view each : {uuid, parent}) {
    if (each.empty()) continue;
    if (state.problem = lease_name_problem(each); !state.problem.empty()) return state;
    std::optional<LeaseState> held;  // a shared look fails only against an exclusive lease: on the
    const auto look = [&held, &path](const LeaseFile& file) {  // instance itself, or on its whole GPU
      if (lock_briefly_retrying(file.file.get(), LOCK_SH, false)) return true;
      held = held_state(file, path);
      return false;
    };
    if (!visit_other_files(directory, path, each, listing, state.problem, look)) return std::move(*held);
    if (!state.problem.empty()) return state;
    LeaseFile own{FileDescriptor(), lease_file_name(each, ::geteuid()), ::geteuid()};
    own.file =
        FileDescriptor(::openat(directory.get(), own.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (own.file.get() < 0 && errno == ENOENT) continue;
    struct stat status {};
    if (own.file.get() < 0 || ::fstat(own.file.get(), &status) != 0 || !S_ISREG(status.st_mode) ||
        status.st_uid != ::geteuid()) {
      own.file.reset();
      (void)open_own_file(directory, path, own.name, state.problem);  // says what is wrong with it
      if (!state.problem.empty()) return state;
    } else if (!look(own)) {
      return std::move(*held);
    }
  }
  return state;
}

GPUSEL_API LeaseLook look_at_leases() {
  LeaseLook look;
  look.path = lease_directory();
  struct stat status {};
  look.none = ::lstat(look.path.c_str(), &status) != 0 && errno == ENOENT;
  if (!look.none) {
    look.directory = open_lease_directory(look.path);
    look.listing = list_other_files(look.directory, look.path);
  }
  return look;
}

}  // namespace gpusel::detail
