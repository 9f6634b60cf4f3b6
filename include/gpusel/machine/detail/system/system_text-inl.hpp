// The definitions of gpusel/machine/detail/system/system_text.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/detail/system/system_text.hpp"

#include <pwd.h>

#include <cstring>

namespace gpusel::detail {

GPUSEL_API std::string errno_text(int error) { return std::strerror(error); }

GPUSEL_API std::string user_text(uid_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  char buffer[1024];
  std::string number = "uid " + std::to_string(uid);
  if (getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr)
    return std::string(found->pw_name) + " (" + number + ")";
  return number;
}

}  // namespace gpusel::detail
