// Reading the environment: every variable gpusel reads is read here.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace gpusel::detail {

// Whether a variable may choose what the program loads or where it writes
// (GPUSEL_NVML_LIBRARY, GPUSEL_LEASE_DIR): such a one is read with
// secure_getenv, so in a setuid or otherwise secure-execution process it
// counts as unset.
enum class Trust { plain, secure };

// The variable's text; null when it is unset, which CUDA treats differently
// from set-but-empty.
inline const char* read_environment(const char* name, Trust trust = Trust::plain) noexcept {
  return trust == Trust::secure ? secure_getenv(name) : std::getenv(name);
}

// The same as a string; nullopt when unset.
inline std::optional<std::string> environment_variable(const char* name, Trust trust = Trust::plain) {
  const char* value = read_environment(name, trust);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// "CUDA_VISIBLE_DEVICES=0,2", "CUDA_VISIBLE_DEVICES=\"\" (set but empty)" or
// "CUDA_VISIBLE_DEVICES is unset": `name` with `value`, for messages.
inline std::string describe_value(const char* name, const std::optional<std::string>& value) {
  if (!value) return std::string(name) + " is unset";
  if (value->empty()) return std::string(name) + "=\"\" (set but empty)";
  return std::string(name) + "=" + *value;
}

// describe_value of the variable as the environment holds it, for error messages.
inline std::string describe_variable(const char* name) { return describe_value(name, environment_variable(name)); }

// "CUDA_VISIBLE_DEVICES=1 stays in force", "CUDA_VISIBLE_DEVICES stays unset": what a change made too late leaves.
inline std::string variable_in_force(const char* name) {
  if (!environment_variable(name)) return std::string(name) + " stays unset";
  return describe_variable(name) + " stays in force";
}

}  // namespace gpusel::detail
