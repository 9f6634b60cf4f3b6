// Amounts of memory as people write them: "8GiB", "512MiB", "10GB", "1.5GiB".
//
//   gpusel::parse_memory_size("8GiB")       // 8589934592
//   gpusel::format_memory_size(8589934592)  // "8.0 GiB"
//   gpusel::MemorySize size = "8GiB";        // a threshold: bytes or text
//
// This header includes no CUDA header.
// Layer: core (docs/layers.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/error.hpp"

namespace gpusel {

// Note [Memory size grammar]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A size is a decimal number and a unit, with nothing between or around them:
//   B                      bytes (a number alone is bytes too)
//   KiB MiB GiB TiB        powers of 1024, as nvidia-smi reports memory
//   KB  MB  GB  TB         powers of 1000, as disks and NVIDIA's spec sheets do
// The number may have a fraction ("1.5GiB"), rounded down to whole bytes; a
// fraction of a byte ("1.5", "1.5B") is an error, and so are more than 9
// digits after the '.'. Units are case-sensitive and
// a lone letter ("8G", "8g") is rejected rather than guessed: "8G" means
// 8 GiB to some tools and 8 GB to others, which differ by 7%, and a threshold
// is exactly where that matters. Blanks, signs and exponents are rejected.
// Sizes above 2^64-1 bytes are errors.

namespace detail {

struct MemoryUnit {
  std::string_view name;
  std::uint64_t bytes;
};

inline constexpr MemoryUnit memory_units[] = {
    {"B", 1},
    {"KiB", std::uint64_t{1} << 10},
    {"MiB", std::uint64_t{1} << 20},
    {"GiB", std::uint64_t{1} << 30},
    {"TiB", std::uint64_t{1} << 40},
    {"KB", 1000},
    {"MB", std::uint64_t{1000} * 1000},
    {"GB", std::uint64_t{1000} * 1000 * 1000},
    {"TB", std::uint64_t{1000} * 1000 * 1000 * 1000},
};

}  // namespace detail

// Parses a size (Note [Memory size grammar]) into bytes. Throws Error quoting the text.
[[nodiscard]] inline std::uint64_t parse_memory_size(std::string_view text) {
  const auto reject = [text](const std::string& why) {
    return Error("gpusel::parse_memory_size(\"" + std::string(text) + "\"): " + why +
                 "; expected a number and a unit with nothing between them, e.g. 8GiB, 512MiB, 10GB or 1.5GiB "
                 "(units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  };
  const detail::DecimalRead whole = detail::read_decimal(text, detail::DecimalGrammar::leading_digits);
  if (!whole.ok) throw reject(text.empty() ? "the size is empty" : "it does not start with a digit");
  std::string_view fraction;
  std::size_t position = whole.end;
  if (position < text.size() && text[position] == '.') {
    // Only the digits' extent: the fraction is added exactly, digit by digit, below.
    const detail::DecimalRead digits =
        detail::read_decimal(text.substr(position + 1), detail::DecimalGrammar::leading_digits);
    if (!digits.ok) throw reject("the '.' is not followed by a digit");
    fraction = text.substr(position + 1, digits.end);
    position += 1 + digits.end;
  }
  const std::string_view unit_text = text.substr(position);
  const detail::MemoryUnit* unit = nullptr;
  if (unit_text.empty()) {
    unit = &detail::memory_units[0];
  } else {
    for (const detail::MemoryUnit& candidate : detail::memory_units) {
      if (candidate.name == unit_text) unit = &candidate;
    }
  }
  if (unit == nullptr) {
    if (unit_text.size() == 1 && std::string_view("kKmMgGtT").find(unit_text[0]) != std::string_view::npos) {
      throw reject("the unit \"" + std::string(unit_text) + "\" is ambiguous (write " + std::string(unit_text) +
                   "iB for powers of 1024 or " + std::string(unit_text) +
                   "B for powers of 1000; units are case-sensitive)");
    }
    if (unit_text[0] == ' ' || unit_text[0] == '\t') throw reject("a blank separates the number from the unit");
    throw reject("unknown unit \"" + std::string(unit_text) + "\"");
  }

  if (!fraction.empty() && unit->bytes == 1) throw reject("a size in bytes cannot have a fraction");
  if (fraction.size() > 9) throw reject("more than 9 digits after the '.'");

  constexpr std::uint64_t limit = ~std::uint64_t{0};
  if (whole.overflow || whole.value > limit / unit->bytes) throw reject("the size is too large");
  std::uint64_t bytes = whole.value * unit->bytes;

  // The fraction, exactly: `owed` counts units of 10^-j bytes after j digits,
  // so no floating-point rounding decides a threshold. With at most 9 digits
  // and units of at most 2^40 bytes it stays far below 2^64.
  std::uint64_t owed = 0;
  std::uint64_t scale = 1;
  for (const char c : fraction) {
    owed = owed * 10 + static_cast<std::uint64_t>(c - '0') * unit->bytes;
    scale *= 10;
    const std::uint64_t whole_bytes = owed / scale;
    owed -= whole_bytes * scale;
    if (bytes > limit - whole_bytes) throw reject("the size is too large");
    bytes += whole_bytes;
  }
  return bytes;
}

// A threshold in bytes, written as a number of bytes or as text:
//   criteria.min_free_memory = std::uint64_t{8} << 30;   // or
//   criteria.min_free_memory = "8GiB";                   // parse_memory_size, which may throw
struct MemorySize {
  std::uint64_t bytes = 0;

  constexpr MemorySize() = default;
  // The constructors are implicit on purpose: a threshold reads as its text.
  // Any integer type, so that `= 0` and `= 512` are not ambiguous with text; a negative one throws.
  template <class Integer, std::enable_if_t<std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>, int> = 0>
  MemorySize(Integer number) : bytes(static_cast<std::uint64_t>(number)) {
    if constexpr (std::is_signed_v<Integer>) {
      if (number < 0) throw Error("gpusel::MemorySize: a size cannot be negative, got " + std::to_string(number));
    }
  }
  MemorySize(std::string_view text) : bytes(parse_memory_size(text)) {}
  MemorySize(const char* text) : MemorySize(std::string_view(text)) {}
  MemorySize(const std::string& text) : MemorySize(std::string_view(text)) {}

  friend constexpr bool operator==(MemorySize a, MemorySize b) noexcept { return a.bytes == b.bytes; }
  friend constexpr bool operator!=(MemorySize a, MemorySize b) noexcept { return a.bytes != b.bytes; }
};

// "0 B", "512 B", "1.5 KiB", "80.0 GiB": one decimal, in the largest binary
// unit that keeps the number at least 1. For messages and tables.
inline std::string format_memory_size(std::uint64_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  int unit = 0;
  auto value = static_cast<double>(bytes);
  while (value >= 1023.95 && unit < 6) {  // 1023.96 KiB prints as 1.0 MiB, not 1024.0 KiB
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

}  // namespace gpusel
