// The definitions of gpusel/detail/cuda/cuda_status.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/cuda/cuda_status.hpp"

namespace gpusel::detail {

GPUSEL_API std::string describe_status(cudaError_t status) {
  const char* description = cudaGetErrorString(status);
  const char* name = cudaGetErrorName(status);
  return std::string(description != nullptr ? description : "unknown error") + " (" +
         (name != nullptr ? name : "cudaError " + std::to_string(static_cast<int>(status))) + ")";
}

GPUSEL_API Error cuda_error(cudaError_t status, std::string_view call, const std::string& target,
                            const std::string& context) {
  (void)cudaGetLastError();
  std::string message = std::string(call) + "(" + target + "): ";
  // Where no GPU is usable at all, gpusel's sentence comes first ("no CUDA device is usable:
  // no NVIDIA driver was found, ..."), the runtime's words after it: they name versions, not the cause.
  if (!context.empty() && (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice))
    message += context + "; the CUDA runtime says: " + describe_status(status);
  else
    message += describe_status(status) + (context.empty() ? "" : "; " + context);
  const char* name = cudaGetErrorName(status);
  return Error(static_cast<int>(status), name != nullptr ? name : "", message);
}

GPUSEL_API Error cuda_error(cudaError_t status, std::string_view call, const Device& device,
                            const std::string& context) {
  return cuda_error(status, call, device.str(), context);
}

}  // namespace gpusel::detail
