// The little of the CUDA_VISIBLE_DEVICES grammar that the CUDA runtime layer
// needs for its error messages, without the parser (gpusel/visible_devices.hpp,
// which includes this): how a token reads, and the map as far as the value
// alone tells it. CUDA-free and cheap, since every guard's error path uses it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel::detail {

// cudaErrorNoDevice and cudaErrorInvalidDevice, spelled without a CUDA header
// (current_device.hpp checks that they match cudaError_t).
inline constexpr int kCudaErrorNoDevice = 100;
inline constexpr int kCudaErrorInvalidDevice = 101;

// Whether `token` is a UUID token ("GPU-..." or "MIG-...").
GPUSEL_API bool is_uuid_token(std::string_view token) noexcept;

// An index token as the driver reads it (Note [How the driver reads CUDA_VISIBLE_DEVICES]):
// nullopt when it has no digit, else the 32-bit signed value.
GPUSEL_API std::optional<int> read_index_token(std::string_view token) noexcept;

// "1 CUDA device is visible (cuda:0)", "2 CUDA devices are visible (cuda:0..cuda:1)".
GPUSEL_API std::string visible_count_text(int count);

// The map as far as it can be told from the value alone once the runtime has
// said it shows `runtime_count` devices: the kept tokens are then exactly the
// first runtime_count tokens (the list ends at the first token not kept, and a
// value naming a device twice makes the runtime fail). For errors, where asking
// NVML would be slow: "cuda:0 is physical GPU 1" or "cuda:0 is GPU-948e02bd".
GPUSEL_API std::string describe_runtime_map(const std::optional<std::string>& value, int runtime_count);

}  // namespace gpusel::detail

// --- definitions (Note [Compile-once mode]) ---------------------------------
#if GPUSEL_DEFINITIONS

#include "gpusel/detail/core/decimal.hpp"

namespace gpusel::detail {

GPUSEL_API bool is_uuid_token(std::string_view token) noexcept {
  return token.substr(0, 4) == "GPU-" || token.substr(0, 4) == "MIG-";
}

GPUSEL_API std::optional<int> read_index_token(std::string_view token) noexcept {
  const DecimalRead read = read_decimal(token, DecimalGrammar::strtoul);
  if (!read.ok) return std::nullopt;
  const auto low = static_cast<std::uint32_t>(read.value);
  // The low 32 bits as a two's complement int, without implementation-defined conversions.
  return low <= 0x7fffffffu ? static_cast<int>(low) : -static_cast<int>(~low) - 1;
}

GPUSEL_API std::string visible_count_text(int count) {
  if (count == 1) return "1 CUDA device is visible (cuda:0)";
  return std::to_string(count) + " CUDA devices are visible (cuda:0..cuda:" + std::to_string(count - 1) + ")";
}

GPUSEL_API std::string describe_runtime_map(const std::optional<std::string>& value, int runtime_count) {
  if (!value || runtime_count <= 0) return {};
  std::string text;
  std::size_t start = 0;
  for (int logical = 0; logical < runtime_count; ++logical) {
    if (start > value->size()) return {};
    const std::size_t comma = value->find(',', start);
    const std::string_view token =
        std::string_view(*value).substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? value->size() + 1 : comma + 1;
    if (!text.empty()) text += ", ";
    text += "cuda:" + std::to_string(logical) + " is ";
    if (is_uuid_token(token)) {
      text += std::string(token);
    } else {
      const std::optional<int> index = read_index_token(token);
      if (!index || *index < 0) return {};  // the runtime disagrees with the model: say nothing rather than guess
      text += "physical GPU " + std::to_string(*index);
    }
  }
  return text;
}

}  // namespace gpusel::detail

#endif  // GPUSEL_DEFINITIONS
