// The definitions of gpusel/detail/cuda/device_count.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/cuda/device_count.hpp"

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/core/visible_tokens.hpp"

namespace gpusel::detail {

static_assert(kCudaErrorNoDevice == cudaErrorNoDevice && kCudaErrorInvalidDevice == cudaErrorInvalidDevice,
              "detail/core/visible_tokens.hpp spells these cudaError_t values without a CUDA header");

GPUSEL_API std::string no_device_reason(cudaError_t status) {
  switch (status) {
    case cudaErrorInsufficientDriver:  // what the runtime says for each of the three: it cannot tell them apart
      return "no CUDA device is usable: no NVIDIA driver was found, or it is older than this CUDA runtime, or the "
             "libcuda.so.1 found is not NVIDIA's (gpusel's stand-in for the fake machine starts no GPU); in a "
             "container, check that the driver is exposed to it";
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
