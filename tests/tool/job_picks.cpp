// A program that picks its GPUs at start-up, as an inference server does, for the
// tool_run_compose test (check_run.sh): run under `gpusel run`, it must choose among
// the GPUs the job holds and lease them as the job's.
//   job_picks pick N    gpusel::pick of N GPUs: prints their UUIDs, a line each
//   job_picks use N     gpusel::use_free_gpus of N GPUs: prints each UUID and whether
//                       the lease is the job's ("GPU-... job" or "GPU-... own"), then
//                       CUDA_VISIBLE_DEVICES
//   job_picks lease U   gpusel::lease_gpu(U): prints U and "job" or "own"
//   job_picks hold N COMMAND...  gpusel::use_free_gpus of N GPUs, printed as by use, then runs
//                       COMMAND (system) while it holds them, and exits as it exited
// An Error prints its text on stderr and exits 1.
#include <gpusel/machine/lease.hpp>
#include <gpusel/machine/pick.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>

namespace {

void print_lease(const gpusel::GpuLease& lease) {
  for (const std::string& uuid : lease.uuids()) {
    const auto& job = lease.job_uuids();
    std::cout << uuid << (std::find(job.begin(), job.end(), uuid) != job.end() ? " job" : " own") << "\n";
  }
}

int run(const std::string& what, const std::string& argument) {
  if (what == "lease") {
    print_lease(gpusel::lease_gpu(argument));
    return 0;
  }
  gpusel::PickCriteria criteria;
  criteria.at_least = std::stoi(argument);
  criteria.at_most = criteria.at_least;
  if (what == "pick") {
    for (const gpusel::Candidate& candidate : gpusel::pick(criteria)) std::cout << candidate.uuid() << "\n";
    return 0;
  }
  if (what == "use") {
    const gpusel::LeasedGpus leased = gpusel::use_free_gpus(criteria);
    print_lease(leased.lease);
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    std::cout << "CUDA_VISIBLE_DEVICES=" << (visible != nullptr ? visible : "(unset)") << "\n";
    return 0;
  }
  std::cerr << "job_picks: pick N, use N or lease UUID\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "hold") {
    gpusel::PickCriteria criteria;
    criteria.at_least = std::stoi(argv[2]);
    criteria.at_most = criteria.at_least;
    gpusel::LeasedGpus held;  // held while COMMAND runs
    try {
      held = gpusel::use_free_gpus(criteria);
    } catch (const gpusel::Error& error) {
      std::cerr << error.what() << "\n";
      return 1;
    }
    print_lease(held.lease);
    std::cout.flush();
    std::string command;
    for (int i = 3; i < argc; ++i) command += std::string(i > 3 ? " " : "") + argv[i];
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  if (argc != 3) return run("", "");
  try {
    return run(argv[1], argv[2]);
  } catch (const gpusel::Error& error) {
    std::cerr << error.what() << "\n";
    return 1;
  }
}
