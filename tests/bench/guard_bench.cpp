// What a guard costs beside the raw CUDA runtime calls it replaces, measured in
// the same run and reported as ratios of paired repetitions (the table after
// the benchmarks; Note [Paired ratios] in comparison_reporter.hpp).
//
// The targets: a guard on the current device <= 1.2x one cudaGetDevice;
// a guard that switches device and back <= 1.1x the raw get + set + set.
// On the emulated runtime this is a smoke test only: the numbers mean nothing.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "comparison_reporter.hpp"
#include "gpusel/guard.hpp"
#include "gpusel/runtime.hpp"

#if GPUSEL_BENCH_EMULATED
#include "emulated_runtime.hpp"
#endif

namespace {

// Why this machine cannot run a benchmark that needs `count` devices, or "".
std::string missing_devices(int count) {
  const int present = gpusel::device_count();
  if (present >= count) return "";
  return "needs " + std::to_string(count) + " CUDA device(s), this machine shows " + std::to_string(present) + " (" +
         (present == 0 ? gpusel::detail::describe_visible_devices() : std::string("too few")) + ")";
}

// Prepares device 0 as a program that uses it has it: current, with its context.
bool prepare(benchmark::State& state, int devices) {
  const std::string why = missing_devices(devices);
  if (!why.empty()) {
    state.SkipWithError(why.c_str());
    return false;
  }
  for (int device = devices - 1; device >= 0; --device) gpusel::set_device(device);  // every context exists
  return true;
}

// --- a guard on the device already current ---------------------------------------
void raw_get_device(benchmark::State& state) {
  if (!prepare(state, 1)) return;
  int device = 0;
  for (auto _ : state) {
    cudaGetDevice(&device);
    benchmark::DoNotOptimize(device);
  }
}

void guard_on_current_device(benchmark::State& state) {
  if (!prepare(state, 1)) return;
  for (auto _ : state) {
    gpusel::DeviceGuard guard(0);
    benchmark::DoNotOptimize(&guard);
  }
}

// --- current_device() ---------------------------------------------------------
void current_device(benchmark::State& state) {
  if (!prepare(state, 1)) return;
  for (auto _ : state) benchmark::DoNotOptimize(gpusel::current_device());
}

// --- set_device() to the device already current ----------------------------------
void raw_set_device_same(benchmark::State& state) {
  if (!prepare(state, 1)) return;
  for (auto _ : state) benchmark::DoNotOptimize(cudaSetDevice(0));
}

void set_device_same(benchmark::State& state) {
  if (!prepare(state, 1)) return;
  for (auto _ : state) gpusel::set_device(0);
}

// --- a guard that switches to another device and back ------------------------------
void raw_get_set_set(benchmark::State& state) {
  if (!prepare(state, 2)) return;
  int device = 0;
  for (auto _ : state) {
    cudaGetDevice(&device);
    if (device != 1) cudaSetDevice(1);
    cudaSetDevice(device);
    benchmark::DoNotOptimize(device);
  }
}

void guard_switching_device(benchmark::State& state) {
  if (!prepare(state, 2)) return;
  for (auto _ : state) {
    gpusel::DeviceGuard guard(1);
    benchmark::DoNotOptimize(&guard);
  }
}

// gpusel time / raw time, median of the paired repetitions (the targets are a most).
std::vector<gpusel_bench::Comparison> comparisons() {
  return {
      {"guard_on_current_device", "raw_get_device", {{"", "ratio<=1.2"}}},
      {"current_device", "raw_get_device", {}},
      {"set_device_same", "raw_set_device_same", {}},
      {"guard_switching_device", "raw_get_set_set", {{"", "ratio<=1.1"}}},
  };
}

}  // namespace

int main(int argc, char** argv) {
#if GPUSEL_BENCH_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(2));
#endif
  const std::vector<std::pair<const char*, void (*)(benchmark::State&)>> benchmarks = {
      {"raw_get_device", raw_get_device},
      {"guard_on_current_device", guard_on_current_device},
      {"current_device", current_device},
      {"raw_set_device_same", raw_set_device_same},
      {"set_device_same", set_device_same},
      {"raw_get_set_set", raw_get_set_set},
      {"guard_switching_device", guard_switching_device},
  };
  for (const auto& [name, function] : benchmarks) benchmark::RegisterBenchmark(name, function);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const std::string why = missing_devices(1);
  if (!why.empty()) std::printf("gpusel guard benchmarks skipped: %s\n", why.c_str());
  gpusel_bench::ComparisonReporter reporter(comparisons());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
