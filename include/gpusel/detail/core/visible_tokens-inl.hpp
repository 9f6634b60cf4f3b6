// The definitions of gpusel/detail/core/visible_tokens.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/core/visible_tokens.hpp"

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
