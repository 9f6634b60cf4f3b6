// What list and pick cost as a machine grows, on the fake NVML (tests/fake_nvml):
// each reads N GPUs with 16 compute processes each (one of them this process,
// the same on every GPU; the others not visible here), and should grow linearly
// in N, which ->Complexity(oN) fits (issue 20: every pair's topology, an owner
// looked up per process and a quadratic JSON made 4 096 GPUs take seconds).
//   pick_bench --benchmark_filter=Pick
// Machine layer only: no CUDA runtime is linked.
#include <benchmark/benchmark.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "gpusel/machine/pick.hpp"

namespace {

constexpr int kProcessesPerGpu = 16;

// A machine of `gpus` idle GPUs, each running kProcessesPerGpu processes, described to the fake NVML.
class Machine {
 public:
  explicit Machine(int gpus) {
    char pattern[] = "/tmp/gpusel_pick_bench_XXXXXX";
    directory_ = mkdtemp(pattern);
    std::ofstream out(directory_ + "/machine.txt");
    for (int gpu = 0; gpu < gpus; ++gpu) out << "gpu used_mib=" << (gpu % 7) << "\n";
    for (int gpu = 0; gpu < gpus; ++gpu)
      for (int process = 0; process < kProcessesPerGpu; ++process)
        out << "process gpu=" << gpu << " pid="
            << (process == 0 ? static_cast<unsigned>(getpid())
                             : 4000000000u + static_cast<unsigned>(gpu * kProcessesPerGpu + process))
            << " used_mib=1\n";
    setenv("GPUSEL_FAKE_NVML_CONFIG", (directory_ + "/machine.txt").c_str(), 1);
    setenv("GPUSEL_NVML_LIBRARY", GPUSEL_FAKE_NVML, 1);
    setenv("GPUSEL_LEASE_DIR", (directory_ + "/leases").c_str(), 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
  }
  ~Machine() {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);  // the machine, and the lease files pick looked at
  }
  Machine(const Machine&) = delete;
  Machine& operator=(const Machine&) = delete;

 private:
  std::string directory_;
};

// What `gpusel list` reads: every GPU's identity and usage, no links.
void BM_ListInventory(benchmark::State& state) {
  const Machine machine(static_cast<int>(state.range(0)));
  gpusel::InventoryOptions options = gpusel::InventoryOptions::with_usage();
  options.links = false;
  for (auto _ : state) {
    const gpusel::DeviceMap map = gpusel::visible_devices(options);
    if (map.inventory.gpus.size() != static_cast<std::size_t>(state.range(0))) state.SkipWithError("not read");
    benchmark::DoNotOptimize(map.inventory.gpus.data());
  }
  state.SetComplexityN(state.range(0));
}

// What `gpusel pick -n 2 --allow-other-users` does: read, assess, check the leases, choose.
void BM_Pick(benchmark::State& state) {
  const Machine machine(static_cast<int>(state.range(0)));
  gpusel::PickCriteria criteria;
  criteria.at_least = 2;
  criteria.allow_other_users = true;  // else every GPU is busy
  for (auto _ : state) {
    const std::vector<gpusel::Candidate> picked = gpusel::pick(criteria);
    benchmark::DoNotOptimize(picked.data());
  }
  state.SetComplexityN(state.range(0));
}

BENCHMARK(BM_ListInventory)->RangeMultiplier(4)->Range(16, 1024)->Complexity(benchmark::oN);
BENCHMARK(BM_Pick)->RangeMultiplier(4)->Range(16, 1024)->Complexity(benchmark::oN);

}  // namespace

BENCHMARK_MAIN();
