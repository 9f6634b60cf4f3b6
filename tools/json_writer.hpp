// A small JSON writer for the gpusel command's --json output: objects,
// arrays, strings (escaped), integers, booleans and null, indented by two
// spaces. It checks nothing about the order of calls beyond what keeps the
// output valid: keys only inside objects, a comma between members.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "gpusel/text.hpp"

namespace gpusel_tool {

// `text` as a JSON string literal, quotes included, always valid UTF-8 JSON:
// control characters (C0, DEL and C1) are escaped as \u00XX, and each byte that
// is not part of valid UTF-8 becomes U+FFFD (JSON carries text, not bytes: see
// Note [Hostile text] in gpusel/text.hpp, and hex_bytes below for the exact bytes).
inline std::string json_string(std::string_view text) {
  std::string quoted = "\"";
  for (std::size_t at = 0; at < text.size();) {
    std::uint32_t code_point = 0;
    const std::size_t length = gpusel::utf8_sequence(text, at, code_point);
    if (length == 0) {
      quoted += "\xef\xbf\xbd";  // U+FFFD REPLACEMENT CHARACTER, in UTF-8
      ++at;
      continue;
    }
    switch (code_point) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\r':
        quoted += "\\r";
        break;
      case '\t':
        quoted += "\\t";
        break;
      default:
        if (code_point < 0x20 || (code_point >= 0x7f && code_point <= 0x9f)) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(code_point));
          quoted += escaped;
        } else {
          quoted.append(text.substr(at, length));
        }
    }
    at += length;
  }
  return quoted + "\"";
}

// The bytes of `text` as lowercase hex, two digits each: "ff41" for "\xff" "A"; the
// exact bytes beside a text that JSON carries as valid UTF-8 (process names,
// CUDA_VISIBLE_DEVICES).
inline std::string hex_bytes(std::string_view text) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string result;
  result.reserve(2 * text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    result += digits[byte >> 4];
    result += digits[byte & 0xf];
  }
  return result;
}

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  // The next value is the member `name` of the enclosing object.
  JsonWriter& key(std::string_view name) {
    separate();
    text_ += json_string(name) + ": ";
    after_key_ = true;
    return *this;
  }

  JsonWriter& value(std::string_view text) { return raw(json_string(text)); }
  JsonWriter& value(const char* text) { return raw(json_string(text)); }
  JsonWriter& value(bool flag) { return raw(flag ? "true" : "false"); }
  JsonWriter& value(int number) { return raw(std::to_string(number)); }
  JsonWriter& value(unsigned number) { return raw(std::to_string(number)); }
  JsonWriter& value(std::int64_t number) { return raw(std::to_string(number)); }
  JsonWriter& value(std::uint64_t number) { return raw(std::to_string(number)); }
  JsonWriter& null() { return raw("null"); }

  // The document, with a final newline.
  std::string str() const { return text_ + "\n"; }

 private:
  JsonWriter& open(char bracket) {
    separate();
    text_ += bracket;
    members_.push_back(0);
    return *this;
  }

  JsonWriter& close(char bracket) {
    const bool empty = members_.back() == 0;
    members_.pop_back();
    if (!empty) newline();
    text_ += bracket;
    return *this;
  }

  JsonWriter& raw(std::string_view literal) {
    separate();
    text_ += literal;
    return *this;
  }

  // Before a member of an array or object: a comma after the previous one and
  // a new line; nothing after a key, or at the top level.
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (members_.empty()) return;
    if (members_.back()++ > 0) text_ += ',';
    newline();
  }

  void newline() {
    text_ += '\n';
    text_.append(2 * members_.size(), ' ');
  }

  std::string text_;
  std::vector<int> members_;  // per open bracket: members written so far
  bool after_key_ = false;
};

}  // namespace gpusel_tool
