// Test data for copies: bytes whose position can be read back from them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpusel_test {

// n bytes of a pattern with no period (so a chunk landing at the wrong offset
// shows), different for each `seed`.
inline std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> bytes(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t x = (i + std::uint64_t{seed} * 0x100000001u) * 0x9E3779B97F4A7C15u;
    x ^= x >> 31;
    bytes[i] = static_cast<std::uint8_t>(x >> 24);
  }
  return bytes;
}

}  // namespace gpusel_test
