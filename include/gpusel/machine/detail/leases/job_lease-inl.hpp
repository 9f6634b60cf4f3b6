// The definitions of gpusel/machine/detail/leases/job_lease.hpp's out-of-line functions
// (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp).
#pragma once

#include "gpusel/machine/detail/leases/job_lease.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/detail/leases/lock_files.hpp"
#include "gpusel/machine/detail/system/process_files.hpp"
#include "gpusel/machine/detail/system/system_text.hpp"
#include "gpusel/machine/lease_directory.hpp"

namespace gpusel::detail {

GPUSEL_API const JobGpu* JobLease::held(std::string_view uuid) const noexcept {
  for (const JobGpu& gpu : gpus)
    if (gpu.uuid == uuid && gpu.problem.empty()) return &gpu;
  return nullptr;
}

GPUSEL_API std::vector<std::string> JobLease::held_uuids() const {
  std::vector<std::string> uuids;
  for (const JobGpu& gpu : gpus)
    if (gpu.problem.empty()) uuids.push_back(gpu.uuid);
  return uuids;
}

GPUSEL_API JobLease parse_job_lease(std::string_view value) {
  JobLease job;
  job.said = std::string(value);
  for (std::size_t start = 0; start <= value.size();) {
    std::size_t comma = value.find(',', start);
    if (comma == std::string_view::npos) comma = value.size();
    const std::string_view entry = value.substr(start, comma - start);
    const std::size_t colon = entry.rfind(':');
    const DecimalRead number = colon == std::string_view::npos
                                   ? DecimalRead{}
                                   : read_decimal(entry.substr(colon + 1), DecimalGrammar::whole_text);
    if (colon == 0 || !number.ok || number.overflow || number.value > static_cast<std::uint64_t>(INT_MAX)) {
      job.malformed = "\"" + std::string(entry) + "\" is not UUID:descriptor";
      job.gpus.clear();
      return job;
    }
    job.gpus.push_back({std::string(entry.substr(0, colon)), static_cast<int>(number.value), {}});
    start = comma + 1;
  }
  return job;
}

// The name in `directory` of a lock file of `uuid` that is the file `status` describes
// ("gpusel-<UUID>.<...>.lock"), or "" when none is.
inline std::string lock_file_named(const FileDescriptor& directory, std::string_view uuid, const struct stat& status) {
  const std::optional<std::vector<std::string>> names = directory_names(directory);
  if (!names) return {};
  for (const std::string& name : *names) {
    if (!names_lock_file_of(name, uuid)) continue;
    struct stat named {};
    if (::fstatat(directory.get(), name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(named.st_mode) &&
        named.st_dev == status.st_dev && named.st_ino == status.st_ino)
      return name;
  }
  return {};
}

// Why `gpu`'s descriptor does not hold the exclusive lock of a lock file of its GPU in
// `directory` (at `path`), or "" when it does (Note [The job's lease]); the file's inode in `gpu`.
inline std::string check_job_gpu(const FileDescriptor& directory, const std::string& path, JobGpu& gpu) {
  const std::string descriptor = "descriptor " + std::to_string(gpu.descriptor);
  struct stat status {};
  if (gpu.descriptor < 0 || ::fstat(gpu.descriptor, &status) != 0)
    return descriptor + " is not open in this process (closed since the job started?)";
  const std::string name = S_ISREG(status.st_mode) ? lock_file_named(directory, gpu.uuid, status) : std::string();
  if (name.empty()) return descriptor + " is not a lock file of " + gpu.uuid + " in " + path;
  const FileDescriptor fresh(::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fresh.get() < 0) return path + "/" + name + " cannot be opened: " + errno_text(errno);
  if (::flock(fresh.get(), LOCK_SH | LOCK_NB) == 0) return descriptor + " holds no lock on " + path + "/" + name;
  if (errno != EWOULDBLOCK) return path + "/" + name + " cannot be locked: " + errno_text(errno);
  if (::flock(gpu.descriptor, LOCK_EX | LOCK_NB) != 0)
    return "another process holds " + path + "/" + name + ", not " + descriptor;
  gpu.lock_inode = status.st_ino;
  return {};
}

// This process's ancestors, parent first, as /proc/<pid>/stat names them (Note [A job's members]);
// pid 1 too (`gpusel run` may be a container's first process).
inline std::vector<long> ancestors() {
  std::vector<long> found;
  for (long pid = ::getppid(); pid > 0 && found.size() < 4096;) {
    found.push_back(pid);
    if (pid == 1) break;
    std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
    const std::size_t close = text.rfind(')');
    char state = 0;
    long parent = 0;
    if (close == std::string::npos || std::sscanf(text.c_str() + close + 1, " %c %ld", &state, &parent) != 2) break;
    pid = parent;
  }
  return found;
}

// Proves `gpu` the job's by ancestry (Note [A job's members]): the nearest ancestor among
// `lineage` that took, per `locks`, the exclusive lock of one of its GPU's lock files held
// now and has that file open. Returns whether one did; sets gpu.anchor and gpu.lock_inode.
inline bool prove_by_ancestry(const FileDescriptor& directory, const std::vector<FlockLock>& locks,
                              const std::vector<long>& lineage, JobGpu& gpu) {
  const std::optional<std::vector<std::string>> names = directory_names(directory);
  if (!names) return false;
  std::size_t best = lineage.size();
  for (const std::string& name : *names) {
    if (!names_lock_file_of(name, gpu.uuid)) continue;
    struct stat status {};
    if (::fstatat(directory.get(), name.c_str(), &status, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(status.st_mode))
      continue;
    const std::optional<long> locker = exclusive_locker(locks, status);
    const auto at = locker ? std::find(lineage.begin(), lineage.end(), *locker) : lineage.end();
    if (at == lineage.end() || static_cast<std::size_t>(at - lineage.begin()) >= best ||
        (gpu.named_inode != 0 && status.st_ino != gpu.named_inode))
      continue;
    const FileDescriptor fresh(::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (fresh.get() < 0 || ::flock(fresh.get(), LOCK_SH | LOCK_NB) == 0) continue;  // held no longer
    if (has_open(*locker, status, name) != std::optional<bool>(true)) continue;
    best = static_cast<std::size_t>(at - lineage.begin());
    gpu.anchor = *locker;
    gpu.lock_inode = status.st_ino;
  }
  return best < lineage.size();
}

// GPUSEL_JOB_LOCKS's inode of each of `job`'s GPUs, where it names one (Note [A job's members]).
inline void name_lock_inodes(JobLease& job) {
  const std::string value = environment_variable(kJobLocksVariable).value_or("");
  for (std::size_t start = 0; start < value.size();) {
    std::size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    const std::string_view entry = std::string_view(value).substr(start, comma - start);
    const std::size_t colon = entry.rfind(':');
    const DecimalRead number = colon == std::string_view::npos
                                   ? DecimalRead{}
                                   : read_decimal(entry.substr(colon + 1), DecimalGrammar::whole_text);
    for (JobGpu& gpu : job.gpus)
      if (number.ok && !number.overflow && entry.substr(0, colon) == gpu.uuid) gpu.named_inode = number.value;
    start = comma + 1;
  }
}

GPUSEL_API JobLease job_lease() {
  const std::optional<std::string> value = environment_variable(kJobLeaseVariable);
  if (!value) return {};
  JobLease job = parse_job_lease(*value);
  if (job.gpus.empty()) return job;
  std::string path, problem;
  FileDescriptor directory;
  try {
    path = lease_directory();
    struct stat status {};
    if (::lstat(path.c_str(), &status) != 0)
      problem = "the lease directory " + path + " cannot be seen: " + errno_text(errno);
    else
      directory = open_lease_directory(path);
  } catch (const Error& error) {
    problem = error.what();
  }
  name_lock_inodes(job);
  std::optional<std::vector<FlockLock>> locks;  // read once, where a descriptor did not count
  std::vector<long> lineage;
  for (JobGpu& gpu : job.gpus) {
    gpu.problem = problem.empty() ? check_job_gpu(directory, path, gpu) : problem;
    if (gpu.problem.empty() || !problem.empty()) continue;
    if (!locks) locks = flock_locks(), lineage = ancestors();
    if (prove_by_ancestry(directory, *locks, lineage, gpu))
      gpu.problem.clear();
    else
      gpu.problem += ", and no ancestor of this process holds a lock file of it";
  }
  return job;
}

// Opens and locks `gpu`'s member file (Note [A job's members]) into `share`.
inline void take_member_file(const FileDescriptor& directory, const std::string& path, const JobGpu& gpu,
                             JobShare& share) {
  const std::string name = member_file_name(gpu.uuid, ::geteuid(), gpu.lock_inode);
  for (int attempt = 0; attempt < 16; ++attempt) {
    share.member = open_own_file(directory, path, name, share.reason);
    if (!share.reason.empty()) {
      share.outcome = JobShare::Outcome::unusable;
      return;
    }
    if (::flock(share.member.get(), LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      share.member.reset();
      if (error == EINTR) continue;
      share.outcome = error == EWOULDBLOCK ? JobShare::Outcome::held_by_member : JobShare::Outcome::unusable;
      std::string file = path;
      file += '/';
      file += name;
      share.reason = error == EWOULDBLOCK ? "taken by another process of this job (" + file + ")"
                                          : file + " cannot be locked: " + errno_text(error);
      return;
    }
    if (still_named(directory, name, share.member)) {
      (void)::futimens(share.member.get(), nullptr);  // a fresh age for cleaners that ignore locks
      share.outcome = JobShare::Outcome::taken;
      return;
    }
  }
  share.member.reset();
  share.outcome = JobShare::Outcome::unusable;
  share.reason = path + "/" + name + " keeps disappearing";
}

GPUSEL_API bool taken_by_member(const FileDescriptor& directory, const JobGpu& gpu, std::optional<long>& pid) {
  const std::string name = member_file_name(gpu.uuid, ::geteuid(), gpu.lock_inode);
  const FileDescriptor file(::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat status {};
  if (file.get() < 0 || ::fstat(file.get(), &status) != 0 || !S_ISREG(status.st_mode)) return false;
  if (::flock(file.get(), LOCK_SH | LOCK_NB) == 0 || errno != EWOULDBLOCK) return false;  // the close lets go
  pid = exclusive_locker(flock_locks(), status);
  return true;
}

GPUSEL_API JobShare take_job_gpu(std::string_view uuid) {
  JobShare share;
  if (!environment_variable(kJobLeaseVariable)) return share;  // outside gpusel run: nothing to read
  const JobLease job = job_lease();
  const JobGpu* gpu = job.held(uuid);
  if (gpu == nullptr) return share;
  const std::string path = lease_directory();
  const FileDescriptor directory = open_lease_directory(path);
  take_member_file(directory, path, *gpu, share);
  if (share.outcome == JobShare::Outcome::taken && gpu->anchor == 0)
    share.job_copy = FileDescriptor(::fcntl(gpu->descriptor, F_DUPFD_CLOEXEC, 0));
  return share;
}

GPUSEL_API std::optional<std::string> outside_job(const JobLease& job, std::string_view uuid) {
  if (job.held(uuid) != nullptr) return std::nullopt;
  const std::vector<std::string> held = job.held_uuids();
  if (held.empty()) return std::nullopt;
  return "not one of this job's GPUs (" + std::string(kJobLeaseVariable) + " names " +
         (held.size() == 1 ? std::string("1 GPU") : std::to_string(held.size()) + " GPUs") +
         " that gpusel run leased it)";
}

GPUSEL_API std::string job_lease_not_counted(const JobLease& job, std::string_view uuid) {
  for (const JobGpu& gpu : job.gpus)
    if (gpu.uuid == uuid && !gpu.problem.empty())
      return "; " + std::string(kJobLeaseVariable) + " names it as this job's, but " + gpu.problem;
  return {};
}

}  // namespace gpusel::detail
