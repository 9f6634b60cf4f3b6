// What gpusel's copies cost beside the raw CUDA runtime calls they replace,
// measured in the same run and reported as ratios (the table after the
// benchmarks): raw time / gpusel time, so 3.0 means three times as fast.
//
// The targets, for 1 GiB: pageable host -> device >= 3x cudaMemcpy;
// device -> a new host buffer >= 3x cudaMemcpy into a new array; pinned
// host -> device and device -> device >= 0.95x. 40 MiB is PyTorch's
// torch.rand([1024, 1024, 10]).cuda(), a common first example; 4 KiB and 64 KiB show that small copies
// do not pay for the machinery. Every benchmark checks that the bytes arrived.
// On the emulated runtime this is a smoke test only: the numbers mean nothing.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comparison_reporter.hpp"
#include "gpusel/buffer.hpp"
#include "gpusel/runtime.hpp"

#if GPUSEL_BENCH_EMULATED
#include "emulated_runtime.hpp"
#endif

namespace {

using Bytes = gpusel::Buffer<std::uint8_t>;

constexpr std::int64_t kKiB = 1 << 10;
constexpr std::int64_t kMiB = 1 << 20;
#if GPUSEL_BENCH_EMULATED
const std::vector<std::int64_t> kLargeSizes = {40 * kMiB};  // host memory stands in for the GPU's
#else
const std::vector<std::int64_t> kLargeSizes = {40 * kMiB, 1024 * kMiB};
#endif
const std::vector<std::int64_t> kSmallSizes = {4 * kKiB, 64 * kKiB};

std::string missing_device() {
  if (gpusel::device_count() >= 1) return "";
  return "needs a CUDA device, this machine shows none (" + gpusel::detail::describe_visible_devices() + ")";
}

bool prepare(benchmark::State& state) {
  const std::string why = missing_device();
  if (!why.empty()) {
    state.SkipWithError(why.c_str());
    return false;
  }
  gpusel::set_device(0);
  return true;
}

// A host buffer holding a pattern with no period, touched, as user data is.
Bytes pattern(std::size_t bytes, bool pinned) {
  Bytes buffer = pinned ? Bytes::pinned(bytes) : Bytes(bytes, gpusel::cpu());
  std::uint64_t x = 0x9E3779B97F4A7C15u;
  for (std::size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    buffer.data()[i] = static_cast<std::uint8_t>(x);
  }
  return buffer;
}

void check(benchmark::State& state, const void* got, const void* expected, std::size_t bytes) {
  if (std::memcmp(got, expected, bytes) != 0) state.SkipWithError("the bytes did not arrive intact");
}

void check_device(benchmark::State& state, const Bytes& on_gpu, const Bytes& expected) {
  check(state, on_gpu.to_vector().data(), expected.data(), expected.size());
}

void count(benchmark::State& state) { state.SetBytesProcessed(state.iterations() * state.range(0)); }

// --- host -> device -----------------------------------------------------------------
void host_to_device(benchmark::State& state, bool pinned, bool raw) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes source = pattern(bytes, pinned);
  Bytes destination(bytes, gpusel::cuda(0));
  for (auto _ : state) {
    if (raw) {
      cudaMemcpy(destination.data(), source.data(), bytes, cudaMemcpyHostToDevice);
      cudaStreamSynchronize(nullptr);  // pageable copies may return before the DMA lands
    } else {
      destination.copy_from(source);
    }
  }
  count(state);
  check_device(state, destination, source);
}
void raw_pageable_to_device(benchmark::State& s) { host_to_device(s, false, true); }
void gpusel_pageable_to_device(benchmark::State& s) { host_to_device(s, false, false); }
void raw_pinned_to_device(benchmark::State& s) { host_to_device(s, true, true); }
void gpusel_pinned_to_device(benchmark::State& s) { host_to_device(s, true, false); }

// x.to(cuda): allocation of the destination included (PyTorch's x.to("cuda")).
void gpusel_to_cuda(benchmark::State& state) {
  if (!prepare(state)) return;
  const Bytes source = pattern(static_cast<std::size_t>(state.range(0)), false);
  Bytes last;
  for (auto _ : state) last = source.to(gpusel::cuda(0));
  count(state);
  check_device(state, last, source);
}

// --- device -> a new host buffer ---------------------------------------------------------
void raw_device_to_new_host(benchmark::State& state) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes expected = pattern(bytes, false);
  const Bytes source = expected.to(gpusel::cuda(0));
  std::unique_ptr<std::uint8_t[]> last;
  for (auto _ : state) {
    last.reset();
    last.reset(new std::uint8_t[bytes]);  // uninitialized, like torch.empty
    cudaMemcpy(last.get(), source.data(), bytes, cudaMemcpyDeviceToHost);
  }
  count(state);
  check(state, last.get(), expected.data(), bytes);
}

void gpusel_device_to_new_host(benchmark::State& state) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes expected = pattern(bytes, false);
  const Bytes source = expected.to(gpusel::cuda(0));
  Bytes last;
  for (auto _ : state) {
    last = Bytes();
    last = source.to(gpusel::cpu());
  }
  count(state);
  check(state, last.data(), expected.data(), bytes);
}

// --- device -> device -------------------------------------------------------------------
void device_to_device(benchmark::State& state, bool raw) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes expected = pattern(bytes, false);
  const Bytes source = expected.to(gpusel::cuda(0));
  Bytes destination(bytes, gpusel::cuda(0));
  for (auto _ : state) {
    if (raw) {
      cudaMemcpy(destination.data(), source.data(), bytes, cudaMemcpyDeviceToDevice);
      cudaStreamSynchronize(nullptr);
    } else {
      destination.copy_from(source);
    }
  }
  count(state);
  check_device(state, destination, expected);
}
void raw_device_to_device(benchmark::State& s) { device_to_device(s, true); }
void gpusel_device_to_device(benchmark::State& s) { device_to_device(s, false); }

const std::vector<gpusel_bench::Comparison>& comparisons() {
  static const std::vector<gpusel_bench::Comparison> table = {
      {"gpusel_pageable_to_device", "raw_pageable_to_device", 3.0},
      {"gpusel_pinned_to_device", "raw_pinned_to_device", 0.95},
      {"gpusel_to_cuda", "raw_pageable_to_device", 0.0},
      {"gpusel_device_to_new_host", "raw_device_to_new_host", 3.0},
      {"gpusel_device_to_device", "raw_device_to_device", 0.95},
  };
  return table;
}

// gpusel/raw speed-ups (the target is a speed-up, checked at 1 GiB), then one
// parseable line per benchmark: "transfer <name> <bytes> <GB/s>".
class RatioReporter : public gpusel_bench::ComparisonReporter {
  void print_table(const gpusel_bench::Seconds& seconds) override {
    std::printf("\n%-27s %-24s %10s %9s %9s %7s %s\n", "gpusel", "raw runtime", "bytes", "gpusel", "raw", "speedup",
                "target");
    for (const gpusel_bench::Comparison& c : comparisons()) {
      const auto ours_by_size = seconds.find(c.gpusel);
      const auto theirs_by_size = seconds.find(c.raw);
      if (ours_by_size == seconds.end() || theirs_by_size == seconds.end()) continue;
      for (const auto& [size, ours] : ours_by_size->second) {
        const auto theirs = theirs_by_size->second.find(size);
        if (theirs == theirs_by_size->second.end()) continue;
        const double bytes = std::stod(size);
        const double ratio = theirs->second / ours;
        std::string verdict = "-";
        if (c.target > 0 && bytes >= 1 << 30)
          verdict = (ratio >= c.target ? ">= " : "UNDER ") + std::to_string(c.target).substr(0, 4);
        std::printf("%-27s %-24s %10s %7.2f GB/s %7.2f GB/s %6.2fx %s\n", c.gpusel, c.raw, size.c_str(),
                    bytes / ours / 1e9, bytes / theirs->second / 1e9, ratio, verdict.c_str());
      }
    }
    for (const auto& [name, sizes] : seconds)
      for (const auto& [size, time] : sizes)
        std::printf("transfer %s %s %.3f\n", name.c_str(), size.c_str(), std::stod(size) / time / 1e9);
  }
};

}  // namespace

int main(int argc, char** argv) {
#if GPUSEL_BENCH_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(1));
#endif
  struct Entry {
    const char* name;
    void (*function)(benchmark::State&);
    bool small_too;
  };
  const Entry entries[] = {
      {"raw_pageable_to_device", raw_pageable_to_device, true},
      {"gpusel_pageable_to_device", gpusel_pageable_to_device, true},
      {"raw_pinned_to_device", raw_pinned_to_device, false},
      {"gpusel_pinned_to_device", gpusel_pinned_to_device, false},
      {"gpusel_to_cuda", gpusel_to_cuda, false},
      {"raw_device_to_new_host", raw_device_to_new_host, true},
      {"gpusel_device_to_new_host", gpusel_device_to_new_host, true},
      {"raw_device_to_device", raw_device_to_device, false},
      {"gpusel_device_to_device", gpusel_device_to_device, false},
  };
  for (const Entry& entry : entries) {
    auto* benchmark = benchmark::RegisterBenchmark(entry.name, entry.function);
    benchmark->UseRealTime()->Unit(benchmark::kMillisecond);
    for (const std::int64_t size : kLargeSizes) benchmark->Arg(size);
    if (entry.small_too)
      for (const std::int64_t size : kSmallSizes) benchmark->Arg(size);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const std::string why = missing_device();
  if (!why.empty()) std::printf("gpusel buffer benchmarks skipped: %s\n", why.c_str());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
