// gpusel::Error: the exception type gpusel throws, and OutOfMemory, the one
// kind of Error a caller may want to catch apart (to free a cache and retry).
//
// This header includes no CUDA header, so that the CUDA-free parts of gpusel
// (device.hpp, visible_devices.hpp) can throw it too.
// Layer: core (docs/layers.md).
#pragma once

// What gpusel needs, said in one sentence each rather than in a page of errors
// from the code below: every header includes this one. After the sentence, an
// include of a file that cannot exist ends the compilation at once (g++, clang++
// and nvcc stop at a missing include), so the sentence is the only error but that
// include's own line.
#if !defined(__cpp_exceptions) && !defined(__EXCEPTIONS)
#error "gpusel needs C++ exceptions (every failure is a thrown gpusel::Error): compile without -fno-exceptions"
#include "gpusel stops here: the #error above says why"
#endif
#if !defined(__linux__)
#error "gpusel supports Linux only: it loads NVML with dlopen, leases GPUs with flock and needs POSIX threads"
#include "gpusel stops here: the #error above says why"
#endif

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace gpusel {

// An Error carries the CUDA status that caused it (as the integer value of
// cudaError_t, so this header needs no CUDA include; 0, cudaSuccess, when the
// error did not come from CUDA, e.g. a string that does not parse) and its
// name ("cudaErrorInvalidDevice"). what() names what was attempted and on
// which device, e.g.
//   cudaSetDevice(cuda:3): invalid device ordinal (cudaErrorInvalidDevice);
//   2 CUDA devices are visible (CUDA_VISIBLE_DEVICES=0,2)
class Error : public std::runtime_error {
 public:
  // An error that did not come from a CUDA call.
  explicit Error(const std::string& message) : std::runtime_error(message) {}

  Error(int code, std::string code_name, const std::string& message)
      : std::runtime_error(message), code_(code), code_name_(std::move(code_name)) {}

  // The cudaError_t value; compare with the enumerators: e.code() == cudaErrorNoDevice.
  int code() const noexcept { return code_; }

  // "cudaErrorInvalidDevice", or "" when the error did not come from CUDA.
  const std::string& code_name() const noexcept { return code_name_; }

 private:
  int code_ = 0;
  std::string code_name_;
};

// Device or host memory ran out: cudaMalloc or cudaMallocHost answered
// cudaErrorMemoryAllocation, the host allocator returned nothing, or the size
// asked for cannot be represented at all. Like rmm::out_of_memory and c10's
// OutOfMemoryError, it is an Error, so code that catches Error catches it too.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

namespace detail {
// Throws `error` again with "prefix: " before its message, keeping its code
// and its type (an OutOfMemory stays one), for callers that add what they were
// doing to an error from a call beneath them.
[[noreturn]] inline void rethrow_with_prefix(const Error& error, std::string_view prefix) {
  std::string message = std::string(prefix) + ": " + error.what();
  if (dynamic_cast<const OutOfMemory*>(&error) != nullptr) throw OutOfMemory(error.code(), error.code_name(), message);
  throw Error(error.code(), error.code_name(), message);
}
}  // namespace detail

}  // namespace gpusel
