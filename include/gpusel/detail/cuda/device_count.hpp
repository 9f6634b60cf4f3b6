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

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/cuda/device_count-inl.hpp"
#endif
