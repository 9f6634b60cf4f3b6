// Reading the environment variables that decide which GPUs CUDA shows.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace gpusel::detail {

// nullopt when the variable is unset, which CUDA treats differently from set-but-empty.
inline std::optional<std::string> environment_variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// The same for a variable that names code to load (GPUSEL_NVML_LIBRARY): read with
// secure_getenv, so in a setuid or otherwise secure-execution process it counts
// as unset and the caller cannot choose what the program loads.
inline std::optional<std::string> secure_environment_variable(const char* name) {
  const char* value = secure_getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// "CUDA_VISIBLE_DEVICES=0,2" or "CUDA_VISIBLE_DEVICES is unset", for error messages.
inline std::string describe_variable(const char* name) {
  const auto value = environment_variable(name);
  if (!value) return std::string(name) + " is unset";
  return std::string(name) + "=" + (value->empty() ? std::string("\"\" (set but empty)") : *value);
}

}  // namespace gpusel::detail
