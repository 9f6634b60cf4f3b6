// The definitions of gpusel/machine/lease.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/lease.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <thread>

#include "gpusel/machine/detail/leases/job_lease.hpp"
#include "gpusel/machine/detail/system/process_files.hpp"
#include "gpusel/machine/detail/system/system_text.hpp"
#include "gpusel/text.hpp"

namespace gpusel {

namespace detail {

// Whether `uuid` is written as NVML reports a UUID: "GPU-" or "MIG-", then 8-4-4-4-12
// lower-case hexadecimal digits.
inline bool canonical_uuid(std::string_view uuid) {
  constexpr std::string_view kShape = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  if (uuid.size() != 4 + kShape.size() || (uuid.substr(0, 4) != "GPU-" && uuid.substr(0, 4) != "MIG-")) return false;
  for (std::size_t i = 0; i < kShape.size(); ++i) {
    const char c = uuid[4 + i];
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (kShape[i] == '-' ? c != '-' : !hex) return false;
  }
  return true;
}

// `uuid` checked as a lease's name. A lock file is named by the UUID, so only NVML's own
// spelling may name one: an upper-case UUID or a prefix would lock a file of its own,
// excluding no job that names the GPU as NVML does (and none of it leaves the directory).
inline void check_lease_name(std::string_view uuid) {
  if (uuid.empty()) throw Error("gpusel: cannot lease a GPU without a UUID (NVML reported none)");
  if (!canonical_uuid(uuid))
    throw Error("gpusel: cannot lease \"" + std::string(uuid) +
                "\": not a GPU or MIG UUID as NVML reports it (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx or "
                "MIG-..., lower-case hexadecimal digits, whole: as nvidia-smi -L prints it)");
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

// A lock file of a GPU, opened read-only; `owner` as fstat tells it here.
struct LeaseFile {
  FileDescriptor file;
  std::string name;
  uid_t owner = 0;
};

// The directory's lock files other than this process's own, by UUID: each "<UUID>.<n>.lock"
// whose name is not lease_file_name(UUID, geteuid()). The uid <n> names no owner (Note [Lease
// files]): a rootless container's user writes its own uid, 0. Read once for every GPU a pick looks at.
struct LeaseListing {
  std::map<std::string, std::vector<std::string>, std::less<>> others;
  std::string problem;  // why the directory cannot be listed, or ""
};

// Lists `directory`; with `only`, keeps that UUID's files alone.
inline LeaseListing list_other_files(const FileDescriptor& directory, const std::string& path,
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
    if ((!only.empty() && uuid != only) || name == lease_file_name(uuid, ::geteuid())) continue;
    listing.others[std::string(uuid)].emplace_back(name);
  }
  ::closedir(entries);
  return listing;
}

// The lock files of `uuid` that other jobs' leases may hold, from `listing`: every regular
// file, whoever owns it (Note [Lease files]), opened read-only. `problem` is set, naming the
// file and its owner, for one that cannot be opened: it might hold a lease unseen; or when
// the directory could not be listed.
inline std::vector<LeaseFile> other_files(const FileDescriptor& directory, const std::string& path,
                                          std::string_view uuid, const LeaseListing& listing, std::string& problem) {
  std::vector<LeaseFile> files;
  if (!listing.problem.empty()) {
    problem = listing.problem;
    return files;
  }
  const auto named = listing.others.find(uuid);
  if (named == listing.others.end()) return files;
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

// Process `pid`'s name and start into `state`; false when it has ended (or is a zombie,
// which holds no file) or cannot be seen.
inline bool read_process(long pid, LeaseState& state) {
  const std::optional<ProcessInfo> process = process_info(pid);
  if (!process || process->state == 'Z' || process->state == 'X') return false;
  state.pid = pid;
  state.command = process->command;
  state.started = process->started;
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

// flock(operation | LOCK_NB), tried again for a few milliseconds while another process only looks.
inline bool lock_briefly_retrying(int fd, int operation, bool retry) {
  for (int attempt = 0;; ++attempt) {
    if (::flock(fd, operation | LOCK_NB) == 0) return true;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK || !retry || attempt >= 20) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The state of a lease held on `file` (of `directory`).
inline LeaseState held_state(const LeaseFile& file, const std::string& directory) {
  LeaseState state;
  state.held = true;
  state.lock_file = directory + "/" + file.name;
  state.owner = file.owner;
  find_holder(file.file, file.name, state);
  return state;
}

// One GPU's lock: taken, held by another job, or not to be had (with the reason).
struct LockAttempt {
  enum class Outcome { taken, held, unusable } outcome = Outcome::held;
  LeaseFile own;       // taken: this user's file, locked
  std::string reason;  // unusable: why, naming the file and its owner
};

// Locks `uuid` in `mode` (LOCK_EX or LOCK_SH) against every user (Note [Who can break
// a lease]): this user's file first, verified, then a conflicting lock tried on every
// other user's file of the GPU; any one held is another job's lease. On a conflict
// this user's lock is let go and the round tried again, a bounded number of times,
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
        other_files(directory, path, uuid, list_other_files(directory, path, uuid), attempt.reason);
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
  FileDescriptor directory = open_lease_directory(path);
  hold_against_cleaners(directory, path);  // before the lock files: Note [Leases against cleaners]
  LockAttempt own;
  own.own.file = FileDescriptor(job_lease_descriptor(uuid));  // the job's lock, no second one: Note [The job's lease]
  const bool job = own.own.file.get() >= 0;
  if (!job) own = lock_for_every_user(directory, path, uuid, LOCK_EX);
  if (!job && own.outcome != LockAttempt::Outcome::taken) {
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
    (void)::futimens(shared.own.file.get(), nullptr);  // a fresh age for cleaners that ignore locks
    lease.descriptors_.push_back(std::move(shared.own.file));
  }
  (void)::futimens(own.own.file.get(), nullptr);
  lease.exclusive_.push_back(lease.descriptors_.size());
  lease.descriptors_.push_back(std::move(own.own.file));
  lease.descriptors_.push_back(std::move(directory));  // its shared lock lasts as long as the lease
  lease.uuids_.emplace_back(uuid);
  if (job) lease.job_uuids_.emplace_back(uuid);
  result.lease = std::move(lease);
  return result;
}

// Who holds `uuid` (and `parent`), or why it cannot be leased, from `listing` of the opened
// lease directory.
inline LeaseState state_in(const FileDescriptor& directory, const std::string& path, const LeaseListing& listing,
                           std::string_view uuid, std::string_view parent) {
  LeaseState state;
  if (uuid.empty()) return state;  // no lease can name it, so none holds it
  for (const std::string_view each : {uuid, parent}) {
    if (each.empty()) continue;
    if (state.problem = unusable_name(each); !state.problem.empty()) return state;
    std::vector<LeaseFile> files = other_files(directory, path, each, listing, state.problem);
    if (!state.problem.empty()) return state;
    LeaseFile own{FileDescriptor(), lease_file_name(each, ::geteuid()), ::geteuid()};
    own.file =
        FileDescriptor(::openat(directory.get(), own.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    const bool missing = own.file.get() < 0 && errno == ENOENT;
    if (!missing) {
      struct stat status {};
      if (own.file.get() < 0 || ::fstat(own.file.get(), &status) != 0 || !S_ISREG(status.st_mode) ||
          status.st_uid != ::geteuid()) {
        own.file.reset();
        (void)open_own_file(directory, path, own.name, state.problem);  // says what is wrong with it
        if (!state.problem.empty()) return state;
      } else {
        files.push_back(std::move(own));
      }
    }
    // A shared look fails only against an exclusive lease: on the instance itself, or on its whole GPU.
    for (const LeaseFile& file : files)
      if (!lock_briefly_retrying(file.file.get(), LOCK_SH, false)) return held_state(file, path);
  }
  return state;
}

// The lease directory opened for a look, and its listing; `none` where it does not exist (only
// a lease makes it: a look that made it would make it its caller's). Throws Error when it cannot be used.
struct LeaseLook {
  bool none = false;
  FileDescriptor directory;
  LeaseListing listing;
  std::string path;
};

inline LeaseLook look_at_leases() {
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

GPUSEL_API std::vector<std::optional<std::string>> lease_holders(
    const std::vector<std::pair<std::string, std::string>>& wanted) {
  const LeaseLook look = look_at_leases();
  const JobLease job = job_lease();  // inside gpusel run: its GPUs are this job's (Note [The job's lease])
  std::vector<std::optional<std::string>> holders;
  holders.reserve(wanted.size());
  for (const auto& [uuid, parent] : wanted) {
    LeaseState state;
    if (!uuid.empty()) state.problem = unusable_name(uuid);
    if (state.problem.empty() && !uuid.empty()) {
      if (look.none)  // nobody holds it; a GPU named so that no lease could hold it is said still
        state.problem = parent.empty() ? std::string() : unusable_name(parent);
      else
        state = state_in(look.directory, look.path, look.listing, uuid, parent_for(uuid, parent));
    }
    state.this_job = state.held && job.held(uuid) != nullptr;
    holders.push_back(state.held || !state.problem.empty() ? std::optional<std::string>(state.describe())
                                                           : std::nullopt);
  }
  return holders;
}

}  // namespace detail

GPUSEL_API std::optional<GpuLease> try_lease_gpu(std::string_view uuid, std::string_view parent_gpu_uuid) {
  detail::check_lease_name(uuid);  // its own words, as always
  if (!parent_gpu_uuid.empty()) detail::check_lease_name(parent_gpu_uuid);
  detail::LeaseTry attempt = detail::lease_one(uuid, parent_gpu_uuid);
  if (!attempt.unusable.empty()) throw Error("gpusel: cannot lease " + std::string(uuid) + ": " + attempt.unusable);
  return std::move(attempt.lease);
}

GPUSEL_API std::optional<std::string> lease_holder(std::string_view uuid, std::string_view parent_gpu_uuid) {
  return detail::lease_holders({{std::string(uuid), std::string(parent_gpu_uuid)}}).front();
}

GPUSEL_API std::vector<int> GpuLease::exclusive_descriptors() const {
  std::vector<int> numbers;
  for (const std::size_t position : exclusive_) numbers.push_back(descriptors_[position].get());
  return numbers;
}

GPUSEL_API void GpuLease::merge(GpuLease&& other) {
  for (const std::size_t position : other.exclusive_) exclusive_.push_back(descriptors_.size() + position);
  for (auto& descriptor : other.descriptors_) descriptors_.push_back(std::move(descriptor));
  for (auto& uuid : other.uuids_) uuids_.push_back(std::move(uuid));
  for (auto& uuid : other.job_uuids_) job_uuids_.push_back(std::move(uuid));
  other.release();
}

GPUSEL_API std::string LeaseState::holder_text() const {
  if (!pid) return unseen;
  std::string text = "pid " + std::to_string(*pid);
  if (!command.empty()) text += " " + escape_for_terminal(command);
  if (started) text += " since " + detail::local_time_text(*started);
  return text;
}

GPUSEL_API std::string LeaseState::owner_text() const {
  return owner ? escape_for_terminal(detail::user_text(*owner)) : std::string();
}

GPUSEL_API std::string LeaseState::describe() const {
  if (!problem.empty()) return "cannot be leased: " + escape_for_terminal(problem);
  if (!held) return "free";
  std::string text = (this_job ? "leased by this job (" : "leased by another job (") + holder_text();
  if (owner && *owner != ::geteuid()) text += ", " + detail::user_text(*owner);
  return text + ", lock " + escape_for_terminal(lock_file) + ")";
}

GPUSEL_API std::vector<LeaseState> lease_states(const std::vector<std::string>& uuids) {
  const detail::LeaseLook look = detail::look_at_leases();
  const detail::JobLease job = detail::job_lease();
  std::vector<LeaseState> states;
  states.reserve(uuids.size());
  for (const std::string& uuid : uuids) {
    if (look.none || uuid.empty()) {
      states.emplace_back();
      if (!uuid.empty()) states.back().problem = detail::unusable_name(uuid);
    } else {
      states.push_back(detail::state_in(look.directory, look.path, look.listing, uuid, {}));
      states.back().this_job = states.back().held && job.held(uuid) != nullptr;
    }
  }
  return states;
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
