// What gpusel's copies, allocations and module moves cost beside the raw CUDA
// runtime calls they replace, measured in the same run, repetition by
// repetition (the table after the benchmarks: Note [Paired ratios] in
// comparison_reporter.hpp), and beside PyTorch (tests/bench/transfer_torch.py,
// which runs the same work under the names torch_<what>; tests/gpu/check.sh
// alternates the two processes in rounds).
//
// gpusel's targets for an H200 (comparisons() below): pageable
// host -> device 1 GiB >= 45 GB/s; device -> a new host buffer 1 GiB >= 30 GB/s
// where huge pages are granted, else >= 0.8x the host's page-fault limit; 4 KiB
// and 64 KiB copies both ways <= 1.02x raw cudaMemcpy; pinned transfers and
// device -> device, 40 MiB and 1 GiB, >= 0.97x raw; making and dropping a 1 MiB
// device Buffer >= 10x faster than cudaMalloc + cudaFree and no slower than
// PyTorch; Module::to of ResNet-50's and BERT-base's parameter shapes
// (tests/bench/model_shapes.txt) to the GPU and back >= 3x faster than PyTorch.
// 40 MiB is PyTorch's torch.rand([1024, 1024, 10]).cuda(), a common first example.
//
// Every benchmark checks, at the end of each repetition, that the bytes
// arrived. Setup that every repetition would repeat (patterned sources, their
// device copies, the modules) is made once and kept. On the emulated runtime
// this is a smoke test only: the numbers mean nothing, and the modules hold
// 1/64 of each tensor's elements (the same number of tensors).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comparison_reporter.hpp"
#include "gpusel/buffer.hpp"
#include "gpusel/detail/data/memory/host_block_cache.hpp"
#include "gpusel/detail/data/memory/host_prefault.hpp"
#include "gpusel/module.hpp"
#include "gpusel/runtime.hpp"

#if GPUSEL_BENCH_EMULATED
#include "emulated_runtime.hpp"
#endif

namespace {

using Bytes = gpusel::Buffer<std::uint8_t>;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kKiB = 1 << 10;
constexpr std::int64_t kMiB = 1 << 20;
constexpr std::int64_t kGiB = 1 << 30;
#if GPUSEL_BENCH_EMULATED
const std::vector<std::int64_t> kLargeSizes = {40 * kMiB};  // host memory stands in for the GPU's
constexpr std::size_t kModuleScale = 64;                    // elements per tensor divided by this
#else
const std::vector<std::int64_t> kLargeSizes = {40 * kMiB, kGiB};
constexpr std::size_t kModuleScale = 1;
#endif
const std::vector<std::int64_t> kSmallSizes = {4 * kKiB, 64 * kKiB};
const char* const kModels[] = {"resnet50", "bert_base"};

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

// Fails the run when a raw call fails; true when it succeeded.
bool ok(benchmark::State& state, cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  const std::string message = std::string(what) + " failed: " + cudaGetErrorName(status);
  state.SkipWithError(message.c_str());
  return false;
}

// A pattern with no period (xorshift64), eight bytes at a time.
void write_pattern(void* destination, std::size_t bytes, std::uint64_t seed) {
  std::uint64_t x = 0x9E3779B97F4A7C15u ^ (seed * 0xBF58476D1CE4E5B9u);
  auto* out = static_cast<std::uint8_t*>(destination);
  for (std::size_t i = 0; i < bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out + i, &x, std::min<std::size_t>(8, bytes - i));
  }
}

// memcmp, on up to 8 threads for large ranges, so that checking 1 GiB every
// repetition costs milliseconds, not a tenth of a second.
bool same_bytes(const void* a, const void* b, std::size_t bytes) {
  constexpr std::size_t kPerThread = 64 << 20;
  const std::size_t threads = std::min<std::size_t>(8, (bytes + kPerThread - 1) / kPerThread);
  if (threads <= 1) return std::memcmp(a, b, bytes) == 0;
  const std::size_t part = (bytes + threads - 1) / threads;
  std::vector<char> equal(threads, 0);
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const std::size_t begin = t * part;
      const std::size_t length = std::min(part, bytes - begin);
      equal[t] = std::memcmp(static_cast<const char*>(a) + begin, static_cast<const char*>(b) + begin, length) == 0;
    });
  }
  for (std::thread& worker : workers) worker.join();
  return std::all_of(equal.begin(), equal.end(), [](char e) { return e != 0; });
}

// What setup every repetition would otherwise repeat, made once per process.
struct Cache {
  std::map<std::pair<std::size_t, bool>, Bytes> host;  // by (bytes, pinned): the pattern
  std::map<std::size_t, Bytes> device;                 // the pattern, on cuda:0
  std::map<std::size_t, Bytes> pinned_scratch;         // where device contents are read back
};
Cache& cache() {
  static Cache instance;
  return instance;
}

// A host buffer holding the pattern, touched, as user data is.
const Bytes& host_pattern(std::size_t bytes, bool pinned) {
  Bytes& buffer = cache().host[{bytes, pinned}];
  if (buffer.size() != bytes) {
    buffer = pinned ? Bytes::pinned(bytes) : Bytes(bytes, gpusel::cpu());
    write_pattern(buffer.data(), bytes, 0);
  }
  return buffer;
}

const Bytes& device_pattern(std::size_t bytes) {
  Bytes& buffer = cache().device[bytes];
  if (buffer.size() != bytes) buffer = host_pattern(bytes, false).to(gpusel::cuda(0));
  return buffer;
}

Bytes& pinned_scratch(std::size_t bytes) {
  Bytes& buffer = cache().pinned_scratch[bytes];
  if (buffer.size() != bytes) buffer = Bytes::pinned(bytes);
  return buffer;
}

void check(benchmark::State& state, const void* got, const void* expected, std::size_t bytes) {
  if (!same_bytes(got, expected, bytes)) state.SkipWithError("the bytes did not arrive intact");
}

// Device memory read back (raw cudaMemcpy into pinned memory) and compared.
void check_device(benchmark::State& state, const void* on_gpu, const void* expected, std::size_t bytes) {
  Bytes& scratch = pinned_scratch(bytes);  // a successful cudaMemcpy overwrote all of it
  if (!ok(state, cudaMemcpy(scratch.data(), on_gpu, bytes, cudaMemcpyDeviceToHost), "reading back (cudaMemcpy)"))
    return;
  check(state, scratch.data(), expected, bytes);
}

void count(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
  state.counters["bytes"] = bytes;
}

// A destination on cuda:0 that does not already hold the answer.
Bytes zeroed_on_device(std::size_t bytes) {
  Bytes destination(bytes, gpusel::cuda(0));
  destination.fill(0);
  return destination;
}

// --- host -> device -----------------------------------------------------------------
void host_to_device(benchmark::State& state, bool pinned, bool raw) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes& source = host_pattern(bytes, pinned);
  Bytes destination = zeroed_on_device(bytes);
  for (auto _ : state) {
    if (raw) {
      cudaMemcpy(destination.data(), source.data(), bytes, cudaMemcpyHostToDevice);
      cudaStreamSynchronize(nullptr);  // pageable copies may return before the DMA lands
    } else {
      destination.copy_from(source);
    }
  }
  count(state, static_cast<double>(bytes));
  check_device(state, destination.data(), source.data(), bytes);
}
void raw_pageable_to_device(benchmark::State& s) { host_to_device(s, false, true); }
void gpusel_pageable_to_device(benchmark::State& s) { host_to_device(s, false, false); }
void raw_pinned_to_device(benchmark::State& s) { host_to_device(s, true, true); }
void gpusel_pinned_to_device(benchmark::State& s) { host_to_device(s, true, false); }

// x.to(cuda): allocation of the destination included (PyTorch's x.to("cuda")).
void gpusel_to_cuda(benchmark::State& state) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes& source = host_pattern(bytes, false);
  Bytes last;
  for (auto _ : state) {
    last = Bytes();
    last = source.to(gpusel::cuda(0));
  }
  count(state, static_cast<double>(bytes));
  check_device(state, last.data(), source.data(), bytes);
}

// --- device -> existing host memory, pageable or pinned -------------------------------
void device_to_host(benchmark::State& state, bool pinned, bool raw) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes& source = device_pattern(bytes);
  Bytes pageable;
  if (!pinned) pageable = Bytes(bytes, gpusel::cpu());
  Bytes& destination = pinned ? pinned_scratch(bytes) : pageable;
  std::memset(destination.data(), 0, bytes);  // touched, and not already holding the answer
  for (auto _ : state) {
    if (raw) {
      cudaMemcpy(destination.data(), source.data(), bytes, cudaMemcpyDeviceToHost);
    } else {
      destination.copy_from(source);
    }
  }
  count(state, static_cast<double>(bytes));
  check(state, destination.data(), host_pattern(bytes, false).data(), bytes);
}
void raw_device_to_host(benchmark::State& s) { device_to_host(s, false, true); }
void gpusel_device_to_host(benchmark::State& s) { device_to_host(s, false, false); }
void raw_device_to_pinned(benchmark::State& s) { device_to_host(s, true, true); }
void gpusel_device_to_pinned(benchmark::State& s) { device_to_host(s, true, false); }

// --- device -> a new host buffer ---------------------------------------------------------
void raw_device_to_new_host(benchmark::State& state) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes& source = device_pattern(bytes);
  std::unique_ptr<std::uint8_t[]> last;
  for (auto _ : state) {
    last.reset();
    last.reset(new std::uint8_t[bytes]);  // uninitialized, like torch.empty
    cudaMemcpy(last.get(), source.data(), bytes, cudaMemcpyDeviceToHost);
  }
  count(state, static_cast<double>(bytes));
  check(state, last.get(), host_pattern(bytes, false).data(), bytes);
}

// `reuse`: the freed block is kept for the next iteration, as the host block
// cache keeps it in a program's loop (Note [The host block cache]); without,
// the cache is emptied first, so every iteration drains into fresh pages, as
// the raw baseline's new[] does.
void device_to_new_host(benchmark::State& state, bool reuse) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes& source = device_pattern(bytes);
  Bytes last;
  for (auto _ : state) {
    last = Bytes();
    if (!reuse) gpusel::detail::HostBlocks::instance().release_cached();
    last = source.to(gpusel::cpu());
  }
  count(state, static_cast<double>(bytes));
  check(state, last.data(), host_pattern(bytes, false).data(), bytes);
}
void gpusel_device_to_new_host(benchmark::State& s) { device_to_new_host(s, false); }
void gpusel_device_to_reused_host(benchmark::State& s) { device_to_new_host(s, true); }

// --- device -> device -------------------------------------------------------------------
void device_to_device(benchmark::State& state, bool raw) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Bytes& source = device_pattern(bytes);
  Bytes destination = zeroed_on_device(bytes);
  for (auto _ : state) {
    if (raw) {
      cudaMemcpy(destination.data(), source.data(), bytes, cudaMemcpyDeviceToDevice);
      cudaStreamSynchronize(nullptr);
    } else {
      destination.copy_from(source);
    }
  }
  count(state, static_cast<double>(bytes));
  check_device(state, destination.data(), host_pattern(bytes, false).data(), bytes);
}
void raw_device_to_device(benchmark::State& s) { device_to_device(s, true); }
void gpusel_device_to_device(benchmark::State& s) { device_to_device(s, false); }

// --- making and dropping a device buffer, as temporaries are ---------------------------------
// Afterwards one more is made and must hold what is copied in.
void raw_make_drop(benchmark::State& state) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* memory = nullptr;
    if (!ok(state, cudaMalloc(&memory, bytes), "cudaMalloc")) return;
    benchmark::DoNotOptimize(memory);
    cudaFree(memory);
  }
  void* last = nullptr;
  if (!ok(state, cudaMalloc(&last, bytes), "cudaMalloc")) return;
  const Bytes& expected = host_pattern(bytes, false);
  if (ok(state, cudaMemcpy(last, expected.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy"))
    check_device(state, last, expected.data(), bytes);
  cudaFree(last);
}

// gpusel's Buffers come from its memory pool (Note [Device memory from a
// pool]): cudaMallocFromPoolAsync and cudaFreeAsync, which waits for nothing.
// On the emulation the row fails if the loop went to cudaMalloc instead.
void gpusel_make_drop(benchmark::State& state) {
  if (!prepare(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
#if GPUSEL_BENCH_EMULATED
  const int plain_before = gpusel_emulated::calls("cudaMalloc");
  const int pooled_before = gpusel_emulated::calls("cudaMallocFromPoolAsync");
#endif
  for (auto _ : state) {
    Bytes temporary(bytes, gpusel::cuda(0));
    benchmark::DoNotOptimize(temporary.data());
  }
#if GPUSEL_BENCH_EMULATED
  if (gpusel_emulated::calls("cudaMalloc") != plain_before ||
      gpusel_emulated::calls("cudaMallocFromPoolAsync") == pooled_before) {
    state.SkipWithError("the Buffers did not come from the memory pool");
    return;
  }
#endif
  Bytes last(bytes, gpusel::cuda(0));
  const Bytes& expected = host_pattern(bytes, false);
  last.copy_from(expected);
  check_device(state, last.data(), expected.data(), bytes);
}

// --- a model's parameters, moved at once ---------------------------------------------------
// Note [Model shapes]: tests/bench/model_shapes.txt lists the parameter tensors
// of ResNet-50 and BERT-base; transfer_torch.py builds its nn.Modules from the
// same file. The path: $GPUSEL_BENCH_MODEL_SHAPES (check.sh sets it), else the
// source tree's copy, where this binary was built.
struct Tensor {
  std::string name;
  std::size_t elements;
};
using Models = std::map<std::string, std::vector<Tensor>>;

std::string model_shapes_path() {
  const char* path = std::getenv("GPUSEL_BENCH_MODEL_SHAPES");
  return path != nullptr && *path != '\0' ? path : GPUSEL_BENCH_MODEL_SHAPES_DEFAULT;
}

// The models, or an empty map and `error` set.
const Models& models(std::string* error) {
  static std::string read_error;
  static const Models parsed = [] {
    Models result;
    std::ifstream file(model_shapes_path());
    if (!file) {
      read_error = "cannot read the model shapes " + model_shapes_path() + " (set GPUSEL_BENCH_MODEL_SHAPES)";
      return result;
    }
    std::string line;
    while (std::getline(file, line)) {
      if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
      std::istringstream fields(line);
      std::string model, name;
      if (!(fields >> model >> name)) continue;
      std::size_t elements = 1, dimension = 0;
      while (fields >> dimension) elements *= dimension;
      result[model].push_back(Tensor{name, std::max<std::size_t>(1, elements / kModuleScale)});
    }
    return result;
  }();
  *error = read_error;
  return parsed;
}

// The expected contents of each tensor of a model, made once.
const std::vector<Bytes>& expected_tensors(const std::string& model, const std::vector<Tensor>& tensors) {
  static std::map<std::string, std::vector<Bytes>> made;
  std::vector<Bytes>& expected = made[model];
  if (expected.empty()) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      expected.emplace_back(tensors[i].elements * sizeof(float), gpusel::cpu());
      write_pattern(expected.back().data(), expected.back().size(), i + 1);
    }
  }
  return expected;
}

// A module holding one float Buffer per tensor ('.' in names becomes '_':
// Module separates children's names with it), on the cpu, with the pattern.
class ShapedModule : public gpusel::Module {
 public:
  ShapedModule(const std::vector<Tensor>& tensors, const std::vector<Bytes>& expected) {
    tensors_.reserve(tensors.size());  // registered Buffers must not move
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      tensors_.emplace_back(tensors[i].elements, gpusel::cpu());
      std::memcpy(tensors_.back().data(), expected[i].data(), expected[i].size());
      std::string name = tensors[i].name;
      std::replace(name.begin(), name.end(), '.', '_');
      register_buffer(name, tensors_.back());
    }
  }
  const std::vector<gpusel::Buffer<float>>& tensors() const { return tensors_; }

 private:
  std::vector<gpusel::Buffer<float>> tensors_;
};

struct ModelSetup {
  const std::vector<Tensor>* tensors = nullptr;
  const std::vector<Bytes>* expected = nullptr;
  double bytes = 0;
};

bool prepare_model(benchmark::State& state, const std::string& model, ModelSetup* setup) {
  if (!prepare(state)) return false;
  std::string error;
  const Models& all = models(&error);
  const auto found = all.find(model);
  if (found == all.end()) {
    if (error.empty()) error = "the model shapes " + model_shapes_path() + " have no model " + model;
    state.SkipWithError(error.c_str());
    return false;
  }
  setup->tensors = &found->second;
  setup->expected = &expected_tensors(model, found->second);
  for (const Bytes& tensor : *setup->expected) setup->bytes += static_cast<double>(tensor.size());
  return true;
}

ShapedModule& shaped_module(const std::string& model, const ModelSetup& setup) {
  static std::map<std::string, std::unique_ptr<ShapedModule>> made;
  std::unique_ptr<ShapedModule>& module = made[model];
  if (!module) module = std::make_unique<ShapedModule>(*setup.tensors, *setup.expected);
  return *module;
}

void check_module(benchmark::State& state, const ShapedModule& module, const ModelSetup& setup) {
  for (std::size_t i = 0; i < module.tensors().size(); ++i) {
    const auto& tensor = module.tensors()[i];
    if (tensor.device() != gpusel::cpu() || !same_bytes(tensor.data(), (*setup.expected)[i].data(), tensor.bytes())) {
      state.SkipWithError("the bytes did not arrive intact");
      return;
    }
  }
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Module::to(cuda(0)), timed; back to the cpu untimed, so the next iteration moves it again.
void gpusel_module_to_cuda(benchmark::State& state, const std::string& model) {
  ModelSetup setup;
  if (!prepare_model(state, model, &setup)) return;
  ShapedModule& module = shaped_module(model, setup);
  module.to(gpusel::cpu());
  for (auto _ : state) {
    const auto start = Clock::now();
    module.to(gpusel::cuda(0));
    cudaDeviceSynchronize();
    state.SetIterationTime(seconds_since(start));
    module.to(gpusel::cpu());
  }
  count(state, setup.bytes);
  check_module(state, module, setup);
}

// Module::to(cpu()), timed; to the GPU untimed before each.
void gpusel_module_to_cpu(benchmark::State& state, const std::string& model) {
  ModelSetup setup;
  if (!prepare_model(state, model, &setup)) return;
  ShapedModule& module = shaped_module(model, setup);
  for (auto _ : state) {
    module.to(gpusel::cuda(0));
    cudaDeviceSynchronize();
    const auto start = Clock::now();
    module.to(gpusel::cpu());
    cudaDeviceSynchronize();
    state.SetIterationTime(seconds_since(start));
  }
  count(state, setup.bytes);
  check_module(state, module, setup);
}

// The raw runtime's move to the GPU: per tensor, cudaMalloc + cudaMemcpy from
// pageable memory (the host copies are kept, so raw pays no host free).
void raw_module_to_cuda(benchmark::State& state, const std::string& model) {
  ModelSetup setup;
  if (!prepare_model(state, model, &setup)) return;
  const std::vector<Bytes>& host = *setup.expected;
  std::vector<void*> device(host.size(), nullptr);
  const auto free_device = [&device] {
    for (void*& memory : device) {
      cudaFree(memory);
      memory = nullptr;
    }
  };
  bool failed = false;
  for (auto _ : state) {
    free_device();  // untimed: the previous iteration's copies
    const auto start = Clock::now();
    for (std::size_t i = 0; i < host.size() && !failed; ++i) {
      failed = !ok(state, cudaMalloc(&device[i], host[i].size()), "cudaMalloc") ||
               !ok(state, cudaMemcpy(device[i], host[i].data(), host[i].size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    cudaDeviceSynchronize();
    state.SetIterationTime(seconds_since(start));
    if (failed) break;
  }
  count(state, setup.bytes);
  for (std::size_t i = 0; i < host.size() && !failed; ++i) {
    check_device(state, device[i], host[i].data(), host[i].size());
    failed = state.error_occurred();
  }
  free_device();
}

// The raw runtime's move to the host: per tensor, a new host array + cudaMemcpy.
void raw_module_to_cpu(benchmark::State& state, const std::string& model) {
  ModelSetup setup;
  if (!prepare_model(state, model, &setup)) return;
  const std::vector<Bytes>& expected = *setup.expected;
  std::vector<void*> device(expected.size(), nullptr);
  bool failed = false;
  for (std::size_t i = 0; i < expected.size() && !failed; ++i) {
    failed =
        !ok(state, cudaMalloc(&device[i], expected[i].size()), "cudaMalloc") ||
        !ok(state, cudaMemcpy(device[i], expected[i].data(), expected[i].size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  std::vector<std::unique_ptr<std::uint8_t[]>> host(expected.size());
  for (auto _ : state) {
    if (failed) break;
    for (auto& array : host) array.reset();  // untimed: the previous iteration's copies
    const auto start = Clock::now();
    for (std::size_t i = 0; i < expected.size() && !failed; ++i) {
      host[i].reset(new std::uint8_t[expected[i].size()]);  // uninitialized, like torch.empty
      failed =
          !ok(state, cudaMemcpy(host[i].get(), device[i], expected[i].size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    }
    state.SetIterationTime(seconds_since(start));
  }
  count(state, setup.bytes);
  for (std::size_t i = 0; i < expected.size() && !failed && host[i]; ++i) {
    check(state, host[i].get(), expected[i].data(), expected[i].size());
    failed = state.error_occurred();
  }
  for (void* memory : device) cudaFree(memory);
}

// The comparison table (Note [Paired ratios] in comparison_reporter.hpp).
std::vector<gpusel_bench::Comparison> comparisons() {
  const std::string small_4k = std::to_string(4 * kKiB), small_64k = std::to_string(64 * kKiB);
  const std::string gib = std::to_string(kGiB);
  std::vector<gpusel_bench::Comparison> table = {
      {"gpusel_pageable_to_device", "raw_pageable_to_device", {{small_4k, "ratio<=1.02"}, {small_64k, "ratio<=1.02"}}},
      {"gpusel_pageable_to_device", "-", {{gib, "GB/s>=45"}}, false},
      {"gpusel_pageable_to_device", "torch", {}},
      {"gpusel_pinned_to_device", "raw_pinned_to_device", {{"*", "speedup>=0.97"}}},
      {"gpusel_pinned_to_device", "torch", {}},
      {"gpusel_to_cuda", "raw_pageable_to_device", {}},
      {"gpusel_to_cuda", "torch", {}},
      {"gpusel_device_to_host", "raw_device_to_host", {{small_4k, "ratio<=1.02"}, {small_64k, "ratio<=1.02"}}},
      {"gpusel_device_to_host", "torch", {}},
      {"gpusel_device_to_pinned", "raw_device_to_pinned", {{"*", "speedup>=0.97"}}},
      {"gpusel_device_to_pinned", "torch", {}},
      {"gpusel_device_to_new_host", "raw_device_to_new_host", {}},
      {"gpusel_device_to_new_host", "-", {{gib, "new_host"}}, false},
      {"gpusel_device_to_new_host", "torch", {}},
      {"gpusel_device_to_reused_host", "raw_device_to_new_host", {}},
      {"gpusel_device_to_device", "raw_device_to_device", {{"*", "speedup>=0.97"}}},
      {"gpusel_device_to_device", "torch", {}},
      {"gpusel_make_drop", "raw_make_drop", {{"*", "speedup>=10"}}},
      {"gpusel_make_drop", "torch", {{"*", "ratio<=1"}}},
  };
  for (const char* model : kModels) {
    for (const char* direction : {"to_cuda_", "to_cpu_"}) {
      const std::string what = std::string("module_") + direction + model;
      table.push_back({"gpusel_" + what, "raw_" + what, {}});
      table.push_back({"gpusel_" + what, "torch", {{"", "speedup>=3"}}});
    }
  }
  return table;
}

}  // namespace

int main(int argc, char** argv) {
#if GPUSEL_BENCH_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(1));
#endif
  struct Entry {
    const char* name;
    void (*function)(benchmark::State&);
    std::vector<std::int64_t> sizes;
  };
  std::vector<std::int64_t> every_size = kLargeSizes;
  every_size.insert(every_size.end(), kSmallSizes.begin(), kSmallSizes.end());
  const std::vector<Entry> entries = {
      {"raw_pageable_to_device", raw_pageable_to_device, every_size},
      {"gpusel_pageable_to_device", gpusel_pageable_to_device, every_size},
      {"raw_pinned_to_device", raw_pinned_to_device, kLargeSizes},
      {"gpusel_pinned_to_device", gpusel_pinned_to_device, kLargeSizes},
      {"gpusel_to_cuda", gpusel_to_cuda, kLargeSizes},
      {"raw_device_to_host", raw_device_to_host, kSmallSizes},
      {"gpusel_device_to_host", gpusel_device_to_host, kSmallSizes},
      {"raw_device_to_pinned", raw_device_to_pinned, kLargeSizes},
      {"gpusel_device_to_pinned", gpusel_device_to_pinned, kLargeSizes},
      {"raw_device_to_new_host", raw_device_to_new_host, every_size},
      {"gpusel_device_to_new_host", gpusel_device_to_new_host, every_size},
      {"gpusel_device_to_reused_host", gpusel_device_to_reused_host, kLargeSizes},
      {"raw_device_to_device", raw_device_to_device, kLargeSizes},
      {"gpusel_device_to_device", gpusel_device_to_device, kLargeSizes},
      {"raw_make_drop", raw_make_drop, {kMiB}},
      {"gpusel_make_drop", gpusel_make_drop, {kMiB}},
  };
  for (const Entry& entry : entries) {
    auto* benchmark = benchmark::RegisterBenchmark(entry.name, entry.function);
    benchmark->UseRealTime()->Unit(benchmark::kMillisecond);
    for (const std::int64_t size : entry.sizes) benchmark->Arg(size);
  }
  using ModelBenchmark = void (*)(benchmark::State&, const std::string&);
  const std::pair<const char*, ModelBenchmark> model_benchmarks[] = {
      {"raw_module_to_cuda_", raw_module_to_cuda},
      {"gpusel_module_to_cuda_", gpusel_module_to_cuda},
      {"raw_module_to_cpu_", raw_module_to_cpu},
      {"gpusel_module_to_cpu_", gpusel_module_to_cpu},
  };
  for (const char* model : kModels)
    for (const auto& [prefix, function] : model_benchmarks)
      benchmark::RegisterBenchmark((prefix + std::string(model)).c_str(), function, std::string(model))
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // What the engine decided for host memory (tests/gpu/check.sh records it beside the THP counters).
  std::printf("gpusel host memory: %s %s\n", gpusel::detail::describe_prefault().c_str(),
              gpusel::detail::describe_host_block_cache().c_str());
  const std::string why = missing_device();
  if (!why.empty()) std::printf("gpusel buffer benchmarks skipped: %s\n", why.c_str());
  gpusel_bench::ComparisonReporter reporter(comparisons());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  cache() = Cache();  // frees device and pinned memory while the runtime is still up
  return 0;
}
