// How many CUDA devices the runtime shows, and the words for why none is
// usable: what current_device.hpp's functions and resolve_device.hpp quote in
// their errors.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

// Why no CUDA device is usable, in words, from the status cudaGetDeviceCount gave.
GPUSEL_API std::string no_device_reason(cudaError_t status);

// The number of visible devices and the status the runtime gave when asked.
struct DeviceCountResult {
  int count = 0;
  cudaError_t status = cudaSuccess;
};

inline DeviceCountResult query_device_count() noexcept {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // an expected outcome on CPU-only machines, reported by the caller
    return {0, status};
  }
  return {count, cudaSuccess};
}

// What to add to an error about a device index: how many devices there are, and why.
GPUSEL_API std::string describe_visible_devices();

// Throws the Error for a cpu device given to `function`, which needs a cuda one.
[[noreturn]] GPUSEL_API void throw_not_cuda(const char* function, const Device& device);

}  // namespace gpusel::detail

// --- definitions (Note [Compile-once mode]) ---------------------------------
#if GPUSEL_DEFINITIONS

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/core/visible_tokens.hpp"

namespace gpusel::detail {

static_assert(kCudaErrorNoDevice == cudaErrorNoDevice && kCudaErrorInvalidDevice == cudaErrorInvalidDevice,
              "detail/core/visible_tokens.hpp spells these cudaError_t values without a CUDA header");

GPUSEL_API std::string no_device_reason(cudaError_t status) {
  switch (status) {
    case cudaErrorInsufficientDriver:
      return "no CUDA device is usable: no NVIDIA driver was found, or it is older than this CUDA runtime "
             "(in a container, check that the driver is exposed to it)";
    case cudaErrorNoDevice:
      if (environment_variable("CUDA_VISIBLE_DEVICES"))
        return "no CUDA device is usable: " + describe_variable("CUDA_VISIBLE_DEVICES") +
               " hides every GPU on this machine";
      return "no CUDA device is usable: the driver found no CUDA-capable GPU";
    case cudaErrorInvalidDevice:
      return "no CUDA device is usable: the CUDA runtime rejected the device list (" +
             describe_variable("CUDA_VISIBLE_DEVICES") + ", " + describe_variable("CUDA_DEVICE_ORDER") +
             "); a device named twice or an unknown CUDA_DEVICE_ORDER does this";
    default:
      return "no CUDA device is usable: cudaGetDeviceCount failed with " + describe_status(status);
  }
}

GPUSEL_API std::string describe_visible_devices() {
  const DeviceCountResult result = query_device_count();
  if (result.status != cudaSuccess) return no_device_reason(result.status);
  const std::string devices = visible_count_text(result.count);
  // The map read from the variable alone: no NVML, nothing slow (see describe_runtime_map).
  const std::string map = describe_runtime_map(environment_variable("CUDA_VISIBLE_DEVICES"), result.count);
  return devices + "; " + describe_variable("CUDA_VISIBLE_DEVICES") + (map.empty() ? "" : ": " + map);
}

[[noreturn]] GPUSEL_API void throw_not_cuda(const char* function, const Device& device) {
  throw Error(std::string(function) + "(" + device.str() + "): expected a cuda device, got " + device.str());
}

}  // namespace gpusel::detail

#endif  // GPUSEL_DEFINITIONS
