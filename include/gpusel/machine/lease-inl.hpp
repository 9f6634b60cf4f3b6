// The definitions of gpusel/machine/lease.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// The lock files a lease takes are machine/detail/leases/lock_files.hpp's; who
// holds a lease, as lease_states and lease_holder say it, is lease_states.hpp's.
#pragma once

#include "gpusel/machine/lease.hpp"

#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <optional>
#include <utility>

#include "gpusel/machine/detail/leases/job_lease.hpp"
#include "gpusel/machine/detail/leases/lease_states.hpp"
#include "gpusel/machine/detail/leases/lock_files.hpp"
#include "gpusel/machine/detail/system/process_files.hpp"
#include "gpusel/machine/detail/system/system_text.hpp"
#include "gpusel/text.hpp"

namespace gpusel {

namespace detail {

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

GPUSEL_API LeaseTry lease_one(std::string_view uuid, std::string_view parent_gpu_uuid) {
  LeaseTry result;
  result.unusable = lease_name_problem(uuid);
  if (!result.unusable.empty()) return result;  // this GPU's problem alone: a pick passes it over
  const std::string parent = parent_for(uuid, parent_gpu_uuid);
  if (!parent.empty()) result.unusable = lease_name_problem(parent);
  if (!result.unusable.empty()) return result;
  const std::string path = lease_directory();
  const FileDescriptor directory = open_lease_directory(path);
  JobShare share = take_job_gpu(uuid);  // one of the job's GPUs: taken for this process (Note [A job's members])
  const bool job = share.outcome != JobShare::Outcome::not_the_jobs;
  if (share.outcome == JobShare::Outcome::held_by_member || share.outcome == JobShare::Outcome::unusable) {
    (share.outcome == JobShare::Outcome::unusable ? result.unusable : result.held_by) = std::move(share.reason);
    return result;
  }
  LockAttempt own;
  own.own.file = std::move(share.member);
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
  if (share.job_copy.get() >= 0) lease.descriptors_.push_back(std::move(share.job_copy));  // the job's lasts too
  lease.exclusive_.push_back(lease.descriptors_.size());
  lease.descriptors_.push_back(std::move(own.own.file));
  lease.uuids_.emplace_back(uuid);
  if (job) lease.job_uuids_.emplace_back(uuid);
  result.lease = std::move(lease);
  return result;
}

}  // namespace detail

GPUSEL_API bool is_lease_name(std::string_view uuid) noexcept { return detail::canonical_uuid(uuid); }

namespace detail {

GPUSEL_API std::vector<LeaseState> lease_holders(const std::vector<std::pair<std::string, std::string>>& wanted) {
  const LeaseLook look = look_at_leases();
  const JobLease job = job_lease();  // inside gpusel run: its GPUs are this job's (Note [The job's lease])
  std::vector<LeaseState> states;
  states.reserve(wanted.size());
  for (const auto& [uuid, parent] : wanted) {
    LeaseState state;
    if (!uuid.empty()) state.problem = lease_name_problem(uuid);
    if (state.problem.empty() && !uuid.empty()) {
      if (look.none)  // nobody holds it; a GPU named so that no lease could hold it is said still
        state.problem = parent.empty() ? std::string() : lease_name_problem(parent);
      else
        state = state_in(look.directory, look.path, look.listing, uuid, parent_for(uuid, parent));
    }
    state.this_job = state.held && job.held(uuid) != nullptr;
    if (state.this_job) state.member_took = taken_by_member(look.directory, *job.held(uuid), state.member_pid);
    states.push_back(std::move(state));
  }
  return states;
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
  const LeaseState state = detail::lease_holders({{std::string(uuid), std::string(parent_gpu_uuid)}}).front();
  if (!state.held && state.problem.empty()) return std::nullopt;
  return state.describe();
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

GPUSEL_API std::string LeaseState::user_text() const {
  return user ? escape_for_terminal(detail::user_text(*user)) : std::string();
}

GPUSEL_API std::string LeaseState::describe() const {
  if (!problem.empty()) return "cannot be leased: " + escape_for_terminal(problem);
  if (!held) return "free";
  std::string text = (this_job ? "leased by this job (" : "leased by another job (") + holder_text();
  if (member_took)
    text += member_pid ? ", taken by its pid " + std::to_string(*member_pid) : ", taken by a process of it";
  if (user && *user != ::geteuid()) text += ", " + detail::user_text(*user);
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
      if (!uuid.empty()) states.back().problem = detail::lease_name_problem(uuid);
    } else {
      states.push_back(detail::state_in(look.directory, look.path, look.listing, uuid, {}));
      LeaseState& state = states.back();
      state.this_job = state.held && job.held(uuid) != nullptr;
      if (state.this_job)
        state.member_took = detail::taken_by_member(look.directory, *job.held(uuid), state.member_pid);
    }
  }
  return states;
}

GPUSEL_API GpuLease lease_gpus(const std::vector<std::string>& uuids) {
  GpuLease all;
  for (const std::string& uuid : uuids) {
    detail::check_lease_name(uuid);
    detail::LeaseTry one = detail::lease_one(uuid, {});
    if (!one.unusable.empty()) throw Error("gpusel: cannot lease " + uuid + ": " + one.unusable);
    if (!one.lease) {
      const auto holder = one.held_by.empty() ? lease_holder(uuid) : one.held_by;  // Note [A job's members]
      throw Error("gpusel: " + uuid + " is " + holder.value_or("leased by another job"));
    }
    all.merge(std::move(*one.lease));
  }
  return all;
}

GPUSEL_API GpuLease lease_gpu(const std::string& uuid) { return lease_gpus({uuid}); }

}  // namespace gpusel
