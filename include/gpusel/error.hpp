// gpusel::Error: the one exception type gpusel throws.
//
// This header includes no CUDA header, so that the CUDA-free parts of gpusel
// (device.hpp, visible_devices.hpp) can throw it too.
#pragma once

#include <stdexcept>
#include <string>
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

}  // namespace gpusel
