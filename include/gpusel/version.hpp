// The version of gpusel, for code that must check it at compile time.
// Layer: core (docs/layers.md).
#pragma once

#define GPUSEL_VERSION_MAJOR 0
#define GPUSEL_VERSION_MINOR 1
#define GPUSEL_VERSION_PATCH 0
// major * 10000 + minor * 100 + patch, for #if comparisons
#define GPUSEL_VERSION (GPUSEL_VERSION_MAJOR * 10000 + GPUSEL_VERSION_MINOR * 100 + GPUSEL_VERSION_PATCH)
#define GPUSEL_VERSION_STRING "0.1.0"

namespace gpusel {
inline constexpr const char* version() noexcept { return GPUSEL_VERSION_STRING; }
}  // namespace gpusel
