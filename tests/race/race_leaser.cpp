// A process that leases GPUs through the library in a loop, for the race test
// (check_race.sh): each GPU it holds is written to the log as an interval.
//   race_leaser <seconds> <log> <holder> <uuid>...
// Until <seconds> have passed: leases one of the UUIDs (gpusel::try_lease_gpu, now and
// then two with gpusel::lease_gpus), reads the clock, holds them a few milliseconds, reads
// the clock again, appends "<uuid> <start ns> <end ns> <holder>-<n>" for each to <log>, and
// releases them. The interval lies inside the lease, so two intervals of one GPU that
// overlap are two holders at once. Prints "<holds> <refusals> <errors>" at the end; an
// Error's text goes to stderr (the first few).
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <gpusel/machine/lease.hpp>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

long long now_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<long long>(now.tv_sec) * 1000000000ll + now.tv_nsec;
}

struct Counts {
  long holds = 0, refusals = 0, errors = 0;
};

// Leases `uuids` (all or none), or nullopt when another job holds one.
std::optional<gpusel::GpuLease> lease(const std::vector<std::string>& uuids) {
  if (uuids.size() == 1) return gpusel::try_lease_gpu(uuids.front());
  try {
    return gpusel::lease_gpus(uuids);
  } catch (const gpusel::Error& error) {
    if (std::string(error.what()).find("leased by another job") != std::string::npos) return std::nullopt;
    throw;
  }
}

void hold_once(const std::vector<std::string>& uuids, int log, const std::string& holder, std::mt19937& random,
               Counts& counts) {
  std::optional<gpusel::GpuLease> held = lease(uuids);
  if (!held) {
    ++counts.refusals;
    return;
  }
  const long long start = now_ns();
  usleep(static_cast<useconds_t>(500 + random() % 8000));
  const long long end = now_ns();
  std::string lines;
  for (const std::string& uuid : held->uuids())
    lines += uuid + " " + std::to_string(start) + " " + std::to_string(end) + " " + holder + "-" +
             std::to_string(counts.holds) + "\n";
  if (write(log, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) ++counts.errors;
  ++counts.holds;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "race_leaser <seconds> <log> <holder> <uuid>...\n";
    return 2;
  }
  const long long until = now_ns() + std::atoll(argv[1]) * 1000000000ll;
  const int log = open(argv[2], O_WRONLY | O_APPEND | O_CLOEXEC);
  if (log < 0) {
    std::perror(argv[2]);
    return 2;
  }
  const std::string holder = argv[3];
  const std::vector<std::string> gpus(argv + 4, argv + argc);
  std::mt19937 random(static_cast<unsigned>(getpid()));
  Counts counts;
  while (now_ns() < until) {
    const std::size_t first = random() % gpus.size();
    std::vector<std::string> uuids{gpus[first]};
    if (gpus.size() > 1 && random() % 4 == 0)
      uuids.push_back(gpus[(first + 1 + random() % (gpus.size() - 1)) % gpus.size()]);
    try {
      hold_once(uuids, log, holder, random, counts);
    } catch (const gpusel::Error& error) {
      if (counts.errors++ < 3) std::cerr << "race_leaser " << holder << ": " << error.what() << "\n";
      usleep(2000);
    }
  }
  std::cout << counts.holds << " " << counts.refusals << " " << counts.errors << "\n";
  return 0;
}
