// The definitions of gpusel/machine/detail/leases/job_lease.hpp's out-of-line functions
// (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp).
#pragma once

#include "gpusel/machine/detail/leases/job_lease.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdint>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"
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
// ("<UUID>.<...>.lock"), or "" when none is.
inline std::string lock_file_named(const FileDescriptor& directory, std::string_view uuid, const struct stat& status) {
  const int copy = ::openat(directory.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* entries = copy < 0 ? nullptr : ::fdopendir(copy);
  if (entries == nullptr) {
    if (copy >= 0) ::close(copy);
    return {};
  }
  std::string found;
  while (const dirent* entry = ::readdir(entries)) {
    const std::string_view name = entry->d_name;
    if (name.size() <= uuid.size() + 6 || name.substr(0, uuid.size()) != uuid || name[uuid.size()] != '.' ||
        name.substr(name.size() - 5) != ".lock")
      continue;
    struct stat named {};
    if (::fstatat(directory.get(), entry->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(named.st_mode) &&
        named.st_dev == status.st_dev && named.st_ino == status.st_ino) {
      found = name;
      break;
    }
  }
  ::closedir(entries);
  return found;
}

// Why `gpu`'s descriptor does not hold the exclusive lock of a lock file of its GPU in
// `directory` (at `path`), or "" when it does (Note [The job's lease]).
inline std::string check_job_gpu(const FileDescriptor& directory, const std::string& path, const JobGpu& gpu) {
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
  return {};
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
  for (JobGpu& gpu : job.gpus) gpu.problem = problem.empty() ? check_job_gpu(directory, path, gpu) : problem;
  return job;
}

GPUSEL_API int job_lease_descriptor(std::string_view uuid) {
  if (!environment_variable(kJobLeaseVariable)) return -1;  // outside gpusel run: nothing to read
  const JobLease job = job_lease();
  const JobGpu* gpu = job.held(uuid);
  return gpu == nullptr ? -1 : ::fcntl(gpu->descriptor, F_DUPFD_CLOEXEC, 0);
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
