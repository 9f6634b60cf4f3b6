// gpusel/version.hpp: one version, written once; every spelling of it agrees.
// (CMake reads the project version from the same three macros, and
// tests/packaging checks the vcpkg manifest and gpusel.pc against it.)
#include "gpusel/version.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(Version, StringIsMajorDotMinorDotPatch) {
  const std::string expected = std::to_string(GPUSEL_VERSION_MAJOR) + "." + std::to_string(GPUSEL_VERSION_MINOR) + "." +
                               std::to_string(GPUSEL_VERSION_PATCH);
  EXPECT_EQ(GPUSEL_VERSION_STRING, expected);
}

TEST(Version, FunctionReturnsTheMacroString) { EXPECT_STREQ(gpusel::version(), GPUSEL_VERSION_STRING); }

TEST(Version, NumberOrdersLikeTheVersion) {
  static_assert(GPUSEL_VERSION_MINOR < 100 && GPUSEL_VERSION_PATCH < 100,
                "GPUSEL_VERSION packs minor and patch in two digits each");
  EXPECT_EQ(GPUSEL_VERSION, GPUSEL_VERSION_MAJOR * 10000 + GPUSEL_VERSION_MINOR * 100 + GPUSEL_VERSION_PATCH);
#if GPUSEL_VERSION < 100
#error "GPUSEL_VERSION must be usable in #if: this release is 0.1.0 or later"
#endif
}

TEST(Version, UsableInConstantExpressions) {
  constexpr const char* text = gpusel::version();
  static_assert(text[0] >= '0' && text[0] <= '9', "the version string starts with a digit");
  EXPECT_NE(text, nullptr);
}

}  // namespace
