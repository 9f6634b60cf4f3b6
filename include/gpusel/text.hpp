// Text that came from outside: process names (/proc/<pid>/comm, which any user
// sets freely with prctl), NVML's strings, the environment. Before it reaches a
// terminal it is escaped (escape_for_terminal); before it reaches JSON it is
// made valid UTF-8 (utf8_sequence says what is valid). See Note [Hostile text].
//
//   gpusel::escape_for_terminal("\x1b]0;owned\x07")   "\x1b]0;owned\x07" as text, harmless to print
// Layer: core (docs/layers.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel {

// Note [Hostile text]
// ~~~~~~~~~~~~~~~~~~~
// Another user names their process "\x1b]0;owned\x07" (prctl(PR_SET_NAME)):
// printed raw, `gpusel list` would retitle the terminal of whoever runs it, and
// "\x1b[2J" would clear it. So every human-readable text gpusel makes from
// outside strings goes through escape_for_terminal, which shows control
// characters and bytes that are not valid UTF-8 as \xNN, the exact bytes, and
// passes the rest unchanged, '\' included (escaping it would double the escapes
// of quoted text): a name that spells "\x1b" reads like one that holds ESC, and
// JSON's *_hex fields tell them apart. JSON carries Unicode text, not bytes, so
// the JSON writer makes each byte that is not valid UTF-8 U+FFFD; where the
// exact bytes matter (process names, CUDA_VISIBLE_DEVICES) the command adds
// them beside the text as hex.

// The length of the valid UTF-8 sequence that starts at text[at] (1 to 4), or 0
// when the byte there starts none (a stray continuation byte, an overlong or
// surrogate form, a sequence cut short); sets `code_point` when valid.
GPUSEL_API std::size_t utf8_sequence(std::string_view text, std::size_t at, std::uint32_t& code_point) noexcept;

// `text` safe to print on a terminal (Note [Hostile text]): control characters,
// and bytes that are not valid UTF-8 as \xNN; the rest unchanged.
GPUSEL_API std::string escape_for_terminal(std::string_view text);

namespace detail {

// ASCII helpers for gpusel's own text (UUIDs, tokens, tables): the locale
// must not decide what matches.
constexpr char lower_ascii(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// Whether `text` starts with `prefix`, ASCII letters compared ignoring case:
// UUIDs are ASCII, and the locale must not decide what matches.
constexpr bool starts_with_ignoring_case(std::string_view text, std::string_view prefix) noexcept {
  if (prefix.size() > text.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (lower_ascii(text[i]) != lower_ascii(prefix[i])) return false;
  return true;
}

// `text` in lower case (ASCII letters only).
inline std::string lower_ascii(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = lower_ascii(c);
  return lower;
}

// `text` in double quotes, with its newlines, tabs, quotes and backslashes escaped.
inline std::string quote(std::string_view text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '\n')
      quoted += "\\n";
    else if (c == '\t')
      quoted += "\\t";
    else if (c == '"' || c == '\\')
      quoted += std::string("\\") + c;
    else
      quoted += c;
  }
  return quoted + "\"";
}

// `text` padded with spaces to `width`.
inline std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

}  // namespace detail

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/text-inl.hpp"
#endif
