// Specification of gpusel::Error (include/gpusel/error.hpp).
#include "gpusel/error.hpp"

#include <gtest/gtest.h>

#include <type_traits>

namespace {

TEST(Error, IsARuntimeErrorCarryingTheCudaStatus) {
  static_assert(std::is_base_of_v<std::runtime_error, gpusel::Error>);
  const gpusel::Error e(101, "cudaErrorInvalidDevice", "cudaSetDevice(cuda:3): invalid device ordinal");
  EXPECT_EQ(e.code(), 101);
  EXPECT_EQ(e.code_name(), "cudaErrorInvalidDevice");
  EXPECT_STREQ(e.what(), "cudaSetDevice(cuda:3): invalid device ordinal");
}

TEST(Error, FromOutsideCudaHasStatusZeroAndNoName) {
  const gpusel::Error e("bad input");
  EXPECT_EQ(e.code(), 0);
  EXPECT_EQ(e.code_name(), "");
  EXPECT_STREQ(e.what(), "bad input");
}

TEST(Error, CanBeCaughtAsStdException) {
  try {
    throw gpusel::Error(2, "cudaErrorMemoryAllocation", "out of memory");
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "out of memory");
  }
}

TEST(OutOfMemory, IsAnErrorSoCatchingErrorCatchesIt) {
  static_assert(std::is_base_of_v<gpusel::Error, gpusel::OutOfMemory>);
  try {
    throw gpusel::OutOfMemory(2, "cudaErrorMemoryAllocation", "cudaMalloc(cuda:0): out of memory");
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), 2);
    EXPECT_EQ(e.code_name(), "cudaErrorMemoryAllocation");
  }
}

TEST(Error, RethrowWithPrefixKeepsTheCodeAndPutsTheContextFirst) {
  try {
    gpusel::detail::rethrow_with_prefix(gpusel::Error(101, "cudaErrorInvalidDevice", "cudaSetDevice(cuda:3)"),
                                        "Buffer::to(cuda:3)");
  } catch (const gpusel::OutOfMemory&) {
    ADD_FAILURE() << "a plain Error came back as OutOfMemory";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), 101);
    EXPECT_EQ(e.code_name(), "cudaErrorInvalidDevice");
    EXPECT_STREQ(e.what(), "Buffer::to(cuda:3): cudaSetDevice(cuda:3)");
  }
}

TEST(Error, RethrowWithPrefixKeepsOutOfMemoryAnOutOfMemory) {
  EXPECT_THROW(gpusel::detail::rethrow_with_prefix(gpusel::OutOfMemory(2, "cudaErrorMemoryAllocation", "cudaMalloc"),
                                                   "Module::to(cuda:0)"),
               gpusel::OutOfMemory);
}

}  // namespace
