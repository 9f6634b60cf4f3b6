// The definitions of gpusel/text.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: core (docs/layers.md).
#pragma once

#include "gpusel/text.hpp"

namespace gpusel {

GPUSEL_API std::size_t utf8_sequence(std::string_view text, std::size_t at, std::uint32_t& code_point) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) {
    code_point = lead;
    return 1;
  }
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // no overlong forms
    if (lead == 0xed) high = 0x9f;  // no surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (text.size() - at < length) return 0;
  std::uint32_t value = lead & (0x7fu >> length);
  for (std::size_t i = 1; i < length; ++i) {
    const unsigned char next = byte(at + i);
    if (next < (i == 1 ? low : 0x80) || next > (i == 1 ? high : 0xbf)) return 0;
    value = (value << 6) | (next & 0x3fu);
  }
  code_point = value;
  return length;
}

GPUSEL_API std::string escape_for_terminal(std::string_view text) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string result;
  result.reserve(text.size());
  const auto escape = [&](unsigned char byte) {
    result += "\\x";
    result += digits[byte >> 4];
    result += digits[byte & 0xf];
  };
  for (std::size_t at = 0; at < text.size();) {
    std::uint32_t code_point = 0;
    const std::size_t length = utf8_sequence(text, at, code_point);
    if (length == 0) {  // not valid UTF-8: a raw 0x9b is CSI on a terminal in 8-bit mode
      escape(static_cast<unsigned char>(text[at++]));
      continue;
    }
    // C0 controls, DEL, and the C1 controls as UTF-8 (U+0080-U+009F, which terminals
    // may obey as CSI and OSC). Other valid UTF-8 ("é", "中") passes unchanged.
    if (code_point < 0x20 || code_point == 0x7f || (code_point >= 0x80 && code_point <= 0x9f)) {
      for (std::size_t i = 0; i < length; ++i) escape(static_cast<unsigned char>(text[at + i]));
    } else {
      result.append(text.substr(at, length));
    }
    at += length;
  }
  return result;
}

}  // namespace gpusel
