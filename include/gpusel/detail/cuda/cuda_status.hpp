// Turning a failed CUDA runtime call into a gpusel::Error that explains itself.
#pragma once

#include <cuda_runtime_api.h>

// Every header that calls the CUDA runtime includes this one.
#if !defined(CUDART_VERSION) || CUDART_VERSION < 12000
#error "gpusel needs CUDA 12.0 or newer: it relies on cudaSetDevice creating the primary context, as CUDA 12 does"
#endif

#include <string>
#include <string_view>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

// "invalid device ordinal (cudaErrorInvalidDevice)"
GPUSEL_API std::string describe_status(cudaError_t status);

// Builds "call(device): description (name); context", or, where the status says no GPU is
// usable at all (no driver, no device), "call(device): context; the CUDA runtime says:
// description (name)": the context then says why, in gpusel's words.
//
// It also clears the runtime's per-thread last error, which every failing call
// sets: the failure is reported through the exception, and a later unrelated
// cudaGetLastError() in the user's code must not see it again. Sticky errors
// (a corrupted context) cannot be cleared and stay visible, as they should.
GPUSEL_API Error cuda_error(cudaError_t status, std::string_view call, const std::string& target,
                            const std::string& context = {});
GPUSEL_API Error cuda_error(cudaError_t status, std::string_view call, const Device& device,
                            const std::string& context = {});

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/cuda/cuda_status-inl.hpp"
#endif
