// libFuzzer target over parse_memory_size (Note [Memory size grammar]).
// Besides "no crash, no sanitizer report" it checks, for every text:
//  - the parser throws gpusel::Error or gives a number of bytes, nothing else;
//  - a whole number and a unit ("12GiB", "7") give exactly number x unit,
//    computed here in 128 bits, and an Error exactly when that exceeds 2^64-1;
//  - a number with a fraction gives at least whole x unit and less than
//    (whole + 1) x unit;
//  - what is accepted is a digit, then digits, '.', and one of the units;
//  - format_memory_size of the result is text.
// Input: the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gpusel/memory_size.hpp"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

using Wide = unsigned __int128;

// The unit's bytes, or 0 when `unit` is none ("" is bytes).
std::uint64_t unit_bytes(std::string_view unit) {
  if (unit.empty()) return 1;
  for (const gpusel::detail::MemoryUnit& known : gpusel::detail::memory_units)
    if (known.name == unit) return known.bytes;
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The reference reading: digits, optionally '.' and digits, then a unit.
  std::size_t at = 0;
  Wide whole = 0;
  bool whole_overflows = false;
  while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
    whole = whole * 10 + static_cast<unsigned>(text[at++] - '0');
    if (whole > (Wide{1} << 80)) {  // far above 2^64 already: stop growing
      whole_overflows = true;
      whole = Wide{1} << 80;
    }
  }
  const bool has_digits = at > 0;
  bool has_fraction = false;
  if (at < text.size() && text[at] == '.') {
    has_fraction = true;
    ++at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
  }
  const std::uint64_t unit = unit_bytes(text.substr(at));

  std::uint64_t bytes = 0;
  bool accepted = false;
  try {
    bytes = gpusel::parse_memory_size(text);
    accepted = true;
  } catch (const gpusel::Error& error) {
    check(std::string_view(error.what()).find("gpusel::parse_memory_size(") == 0);
  }
  if (accepted) {
    check(has_digits && unit != 0);
    const Wide low = whole * unit;
    check(!whole_overflows && low <= bytes);
    if (has_fraction) check(bytes < (whole + 1) * unit);
    check(!gpusel::format_memory_size(bytes).empty());
  }
  if (has_digits && !has_fraction && unit != 0) {
    const Wide exact = whole * unit;
    const bool fits = !whole_overflows && exact <= ~std::uint64_t{0};
    check(accepted == fits);
    if (fits) check(bytes == static_cast<std::uint64_t>(exact));
  }
  return 0;
}
