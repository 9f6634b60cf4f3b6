// Reading decimal numbers from text: the one reader gpusel's parsers share,
// with an explicit grammar for each kind of caller.
// This header includes no CUDA header and is cheap: it needs only <cstddef>,
// <cstdint> and <string_view>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpusel::detail {

// Which text read_decimal accepts.
enum class DecimalGrammar : std::uint8_t {
  // The whole text is decimal digits, at least one: "0", "42", "007" (leading
  // zeros are the caller's business). No blanks, no sign.
  whole_text,
  // The digits at the start of the text, at least one; what follows them is
  // the caller's to read ("8GiB": 8, then "GiB" from `end`).
  leading_digits,
  // Exactly C's strtoul(text, nullptr, 10) with a 64-bit unsigned long, which
  // is how the CUDA driver reads CUDA_VISIBLE_DEVICES: leading isspace() blanks
  // skipped, an optional sign ('-' negates modulo 2^64), the digits, anything
  // after them ignored; an overflow saturates to UINT64_MAX without the sign.
  strtoul,
};

struct DecimalRead {
  bool ok = false;          // the text fits the grammar (whole_text, leading_digits, strtoul: a digit was read)
  bool overflow = false;    // the digits exceed UINT64_MAX; `value` is then UINT64_MAX
  std::uint64_t value = 0;  // the number (strtoul: after the sign and the saturation)
  std::size_t end = 0;      // one past the last digit read; 0 when none was
};

// Reads a non-negative decimal number from `text` in `grammar`. Never throws:
// callers phrase their own errors, since each knows what the number is for.
[[nodiscard]] constexpr DecimalRead read_decimal(std::string_view text, DecimalGrammar grammar) noexcept {
  DecimalRead read;
  std::size_t at = 0;
  bool negative = false;
  if (grammar == DecimalGrammar::strtoul) {
    while (at < text.size() && (text[at] == ' ' || (text[at] >= '\t' && text[at] <= '\r'))) ++at;  // C's isspace()
    if (at < text.size() && (text[at] == '+' || text[at] == '-')) negative = text[at++] == '-';
  }
  const std::size_t first_digit = at;
  for (; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at) {
    const auto digit = static_cast<std::uint64_t>(text[at] - '0');
    if (read.overflow || read.value > (UINT64_MAX - digit) / 10)
      read.overflow = true;
    else
      read.value = read.value * 10 + digit;
  }
  if (at == first_digit) return DecimalRead{};
  read.end = at;
  if (read.overflow)
    read.value = UINT64_MAX;  // strtoul saturates and does not apply the sign
  else if (negative)
    read.value = 0 - read.value;
  read.ok = grammar != DecimalGrammar::whole_text || at == text.size();
  return read;
}

}  // namespace gpusel::detail
