// Small helpers the test files share for checking messages. Needs no CUDA.
#pragma once

#include <string>

#include "gpusel/error.hpp"

namespace gpusel_test {

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the gpusel::Error that `action` throws, or "" when it throws none.
template <class Action>
std::string error_from(Action action) {
  try {
    action();
  } catch (const gpusel::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace gpusel_test
