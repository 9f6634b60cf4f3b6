// libFuzzer target over the gpusel command's argument parser (tools/arguments.cpp,
// built with the command's other parts but its main.cpp: parse_arguments throws
// UsageError and never exits). Besides "no crash, no sanitizer report" it checks what must hold for
// every command line:
//  - parsing either throws UsageError (a usage error, exit status 2) or gives a
//    command; no other exception escapes;
//  - a parsed pick asks for something consistent: 0 <= at_least <= at_most,
//    a utilization limit within 0..100;
//  - the usage error's message, escaped for the terminal (Note [Hostile text]),
//    holds no control character, and as a JSON string it is valid UTF-8.
//
// Input: the command line's words, separated by NUL bytes.
#include <gpusel/machine/pick_criteria.hpp>
#include <gpusel/text.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "arguments.hpp"
#include "json_writer.hpp"

namespace {

using gpusel_tool::Arguments;
using gpusel_tool::UsageError;

void check(bool condition) {
  if (!condition) std::abort();
}

bool valid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    std::uint32_t code_point = 0;
    const std::size_t length = gpusel::utf8_sequence(text, at, code_point);
    if (length == 0) return false;
    at += length;
  }
  return true;
}

void check_message(const std::string& message) {
  const std::string shown = gpusel::escape_for_terminal(message);
  for (const char c : shown) check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
  check(valid_utf8(shown));
  check(valid_utf8(gpusel_tool::json_string(message)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> words;
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (std::size_t start = 0; start <= text.size() && words.size() < 64;) {
    const std::size_t end = std::min(text.find('\0', start), text.size());
    words.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  try {
    const Arguments arguments = gpusel_tool::parse_arguments(words);
    check(arguments.command != nullptr);
    if (!arguments.done && arguments.command->bit == gpusel_tool::kPick) {
      const gpusel::PickCriteria& criteria = arguments.criteria;
      check(criteria.at_least >= 0);
      check(!criteria.at_most || *criteria.at_most >= criteria.at_least);
      check(!criteria.max_utilization || (*criteria.max_utilization >= 0 && *criteria.max_utilization <= 100));
      check_message(gpusel::describe(criteria));
    }
  } catch (const UsageError& error) {
    check(error.what()[0] != '\0');
    check_message(error.what());
  }
  return 0;
}
