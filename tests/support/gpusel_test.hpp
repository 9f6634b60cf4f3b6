// What the test suite shares: building one test source against the emulated
// runtime and against the real one, and saying why a test cannot run here.
#pragma once

#include <optional>
#include <string>

#include "gpusel/cached_resources.hpp"
#include "gpusel/runtime.hpp"

#if GPUSEL_TEST_EMULATED
#include "emulated_runtime.hpp"
#include "gpusel/detail/cuda/primary_context.hpp"
#endif

namespace gpusel_test {

#if GPUSEL_TEST_EMULATED
// A reset of the emulation starts a new process, which knows no CUdevice and
// no context yet (Note [What a restore remembers about a device]).
inline const bool kDeviceFactsGoAtReset = [] {
  gpusel_emulated::on_reset([]() noexcept { gpusel::detail::DeviceFacts::instance().forget(); });
  return true;
}();
#endif

inline constexpr bool kEmulated = GPUSEL_TEST_EMULATED != 0;

// Prepares a machine with at least `count` usable GPUs. On the emulated
// runtime: a fresh emulated process with exactly `count` devices (so every
// test starts with no contexts and device 0 current). On the real runtime: the
// GPUs present, or the reason to skip. Use as
//   if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
inline std::optional<std::string> need_devices(int count) {
#if GPUSEL_TEST_EMULATED
  // gpusel's caches (pinned staging chunks, peer access) belong to the old
  // emulated process: drop them before it ends, as a program would before cudaDeviceReset.
  gpusel::release_cached_resources();
  gpusel_emulated::reset(gpusel_emulated::devices(count));
  return std::nullopt;
#else
  const int present = gpusel::device_count();
  if (present >= count) return std::nullopt;
  return "needs " + std::to_string(count) + " CUDA device(s), this machine shows " + std::to_string(present) + " (" +
         (present == 0 ? gpusel::detail::describe_visible_devices() : std::string("too few")) + ")";
#endif
}

#if GPUSEL_TEST_EMULATED
// The runtime calls gpusel's data layer makes that can fail, which the fault-injection tests of
// Buffer and Module make fail in turn, each at every call.
inline constexpr const char* kFallibleDataCalls[] = {
    "cudaDeviceGetAttribute",   "cudaMemPoolCreate",   "cudaMemPoolSetAttribute", "cudaMallocFromPoolAsync",
    "cudaMallocHost",           "cudaMemcpy",          "cudaMemcpyAsync",         "cudaMemcpyPeerAsync",
    "cudaStreamSynchronize",    "cudaEventRecord",     "cudaEventSynchronize",    "cudaStreamCreateWithFlags",
    "cudaEventCreateWithFlags", "cudaMemcpyBatchAsync"};

// The runtime call through which gpusel reads the driver's entry points (Note [The
// driver's entry points by CUDA version], emulated_runtime.cpp).
inline constexpr const char* kDriverEntryPointCall =
    CUDART_VERSION >= 12050 ? "cudaGetDriverEntryPointByVersion" : "cudaGetDriverEntryPoint";
#endif

// cudaMemcpyBatchAsync came with CUDA 12.8; built against an older CUDA, gpusel
// copies one by one (Note [Batched copies where the runtime has them]), and a
// test of the batches skips.
#define GPUSEL_SKIP_WITHOUT_BATCHED_COPIES() \
  if (CUDART_VERSION < 12080)                \
  GTEST_SKIP() << "cudaMemcpyBatchAsync needs CUDA 12.8 or newer; this build's CUDART_VERSION is " << CUDART_VERSION

// Prepares a machine with no usable GPU because there is no driver: on the
// emulated runtime by configuring it so; on the real runtime only when the
// machine really has none (CI), else the reason to skip.
inline std::optional<std::string> need_no_driver() {
#if GPUSEL_TEST_EMULATED
  gpusel::release_cached_resources();
  gpusel_emulated::Config config;
  config.initialization_error = cudaErrorInsufficientDriver;
  gpusel_emulated::reset(config);
  return std::nullopt;
#else
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (status == cudaErrorInsufficientDriver) return std::nullopt;
  return std::string("this machine has a CUDA driver; the no-driver path is tested on the emulated runtime and on CI");
#endif
}

}  // namespace gpusel_test
