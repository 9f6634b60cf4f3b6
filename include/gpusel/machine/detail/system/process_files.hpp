// Which processes hold or have open a file, as /proc shows them to this process: the
// flock locks /proc/locks lists, a process's descriptors, its name, state and start.
// The leases name a live process of the job that holds a GPU with them; the wait line
// tells a waiting process from a stopped one.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel::detail {

// A flock lock as /proc/locks lists it: its file's device and inode, and the pid that took it as
// this PID namespace sees it (0 when it took it in another).
struct FlockLock {
  unsigned int major_number = 0, minor_number = 0;
  unsigned long long inode = 0;
  long pid = 0;
  bool exclusive = false;
};

// The flock locks held on this machine (not those waited for), read from /proc/locks at once;
// none without /proc.
GPUSEL_API std::vector<FlockLock> flock_locks();

// The pid that took the exclusive flock lock on `file` among `locks` (it may have ended since);
// nullopt when none is listed, or its taker is in another PID namespace.
GPUSEL_API std::optional<long> exclusive_locker(const std::vector<FlockLock>& locks, const struct stat& file);

// A process as /proc/<pid> shows it.
struct ProcessInfo {
  char state = '?';                     // R, S, D, T (stopped), t (traced), Z (zombie), ...
  std::string command;                  // /proc/<pid>/comm: any bytes
  std::optional<std::int64_t> started;  // in seconds since the epoch
  std::optional<uid_t> uid;             // its real user, /proc/<pid>/status "Uid:" as this namespace maps it
};

// Process `pid` as /proc shows it; nullopt when it has ended or cannot be seen.
GPUSEL_API std::optional<ProcessInfo> process_info(long pid);

// Whether process `pid` has `file` (named `name`) open; nullopt when its descriptors cannot be
// read (another user's process, one of another user namespace, or it has ended). Only a
// descriptor whose link ends in `name` is followed (stat), so that a look never waits on
// another file's filesystem.
GPUSEL_API std::optional<bool> has_open(long pid, const struct stat& file, const std::string& name);

// The earliest-started live process, other than this one, that has `file` open, of those whose
// descriptors this user may read; nullopt when none.
GPUSEL_API std::optional<long> earliest_opener(const struct stat& file, const std::string& name);

// `seconds` since the epoch as local time: "2026-12-04 00:01:02".
GPUSEL_API std::string local_time_text(std::int64_t seconds);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/system/process_files-inl.hpp"
#endif
