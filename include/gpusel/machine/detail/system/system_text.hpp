// How gpusel's messages name what the system reports: an errno value, a user.
// The lease directory, the leases and the wait line say with them why a file
// cannot be used and whose it is.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <sys/types.h>

#include <string>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel::detail {

// strerror's text for `error`: "Permission denied".
GPUSEL_API std::string errno_text(int error);

// "alice (uid 1001)", or "uid 1001" for a uid with no name.
GPUSEL_API std::string user_text(uid_t uid);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/system/system_text-inl.hpp"
#endif
