// Specification of the runtime basics (include/gpusel/runtime.hpp). Built
// against the emulated runtime and against the real one (gpusel_test.hpp).
#include "gpusel/runtime.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "gpusel/guard.hpp"
#include "gpusel_test.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;

// --- with no driver: the CPU fallback ---------------------------------------

TEST(RuntimeWithoutDriver, CountsZeroDevicesWithoutThrowing) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  EXPECT_EQ(gpusel::device_count(), 0);
  EXPECT_FALSE(gpusel::is_available());
}

TEST(RuntimeWithoutDriver, PrefersTheCpu) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  EXPECT_EQ(gpusel::preferred_device(), gpusel::cpu());
}

TEST(RuntimeWithoutDriver, SetDeviceThrowsAnErrorThatSaysThereIsNoDriver) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  try {
    gpusel::set_device(0);
    FAIL() << "set_device(0) succeeded without a driver";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInsufficientDriver);
    EXPECT_EQ(e.code_name(), "cudaErrorInsufficientDriver");
    // gpusel's sentence first (no usable GPU, and why), the runtime's words after it.
    EXPECT_EQ(
        std::string(e.what()).rfind("cudaSetDevice(cuda:0): no CUDA device is usable: no NVIDIA driver was found", 0),
        0u)
        << e.what();
    EXPECT_TRUE(contains(e.what(),
                         "; the CUDA runtime says: CUDA driver version is insufficient for CUDA runtime "
                         "version (cudaErrorInsufficientDriver)"))
        << e.what();
  }
}

TEST(RuntimeWithoutDriver, SaysWhyNoDeviceIsUsableWithoutProvokingAnError) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  const std::optional<std::string> reason = gpusel::no_cuda_device_reason();
  ASSERT_TRUE(reason.has_value());
  EXPECT_TRUE(contains(*reason, "no NVIDIA driver was found")) << *reason;
  EXPECT_EQ(gpusel::describe_cuda_devices(), *reason);
}

TEST(RuntimeWithoutDriver, CurrentDeviceThrowsLikePyTorch) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  EXPECT_THROW((void)gpusel::current_device(), gpusel::Error);
}

TEST(RuntimeWithoutDriver, TheInitializationFailureStaysVisibleToRawCode) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  EXPECT_THROW(gpusel::set_device(0), gpusel::Error);
  // The runtime cannot forget that it failed to start: raw code still sees it.
  EXPECT_EQ(cudaGetLastError(), cudaErrorInsufficientDriver);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInsufficientDriver);
}

TEST(RuntimeWithoutDriver, SynchronizeThrows) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  EXPECT_THROW(gpusel::synchronize(), gpusel::Error);
  EXPECT_NO_THROW(gpusel::synchronize(gpusel::cpu())) << "the cpu has nothing to wait for";
}

// --- with GPUs ---------------------------------------------------------------

TEST(Runtime, CountsTheVisibleDevices) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  EXPECT_GE(gpusel::device_count(), 1);
  EXPECT_TRUE(gpusel::is_available());
}

TEST(Runtime, PrefersTheCurrentCudaDevice) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  EXPECT_EQ(gpusel::preferred_device(), gpusel::cuda(gpusel::current_device()));
}

TEST(Runtime, DescribesTheVisibleDevicesAndHasNoReasonForNone) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  EXPECT_EQ(gpusel::no_cuda_device_reason(), std::nullopt);
  EXPECT_TRUE(contains(gpusel::describe_cuda_devices(), "visible (cuda:0")) << gpusel::describe_cuda_devices();
}

TEST(Runtime, PreferredDeviceFollowsTheCurrentDeviceLikeTorchDeviceCuda) {
  // preferred_device() is torch.device("cuda" if torch.cuda.is_available() else "cpu") resolved to the
  // current device: cuda:1 inside a guard on 1, not always cuda:0.
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::DeviceGuard guard(1);
  EXPECT_EQ(gpusel::preferred_device(), gpusel::cuda(1));
}

TEST(Runtime, SetDeviceMakesADeviceCurrent) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(1);
  EXPECT_EQ(gpusel::current_device(), 1);
  EXPECT_EQ(gpusel::preferred_device(), gpusel::cuda(1)) << "preferred_device follows set_device";
  gpusel::set_device(gpusel::cuda(0));
  EXPECT_EQ(gpusel::current_device(), 0);
}

TEST(Runtime, SetDeviceToCudaWithoutIndexKeepsTheCurrentDevice) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(1);
  gpusel::set_device(gpusel::cuda());
  EXPECT_EQ(gpusel::current_device(), 1);
  gpusel::set_device(0);
}

TEST(Runtime, SetDeviceRejectsTheCpu) { EXPECT_THROW(gpusel::set_device(gpusel::cpu()), gpusel::Error); }

TEST(Runtime, SetDeviceRejectsNegativeIndices) {
  try {
    gpusel::set_device(-1);
    FAIL();
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "cannot be negative")) << e.what();
  }
}

TEST(Runtime, SetDeviceToAMissingDeviceSaysHowManyAreVisible) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  const int count = gpusel::device_count();
  try {
    gpusel::set_device(count);
    FAIL() << "set_device(" << count << ") succeeded with " << count << " devices";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidDevice);
    EXPECT_TRUE(contains(e.what(), "cudaSetDevice(cuda:" + std::to_string(count) + "): invalid device ordinal"))
        << e.what();
    EXPECT_TRUE(contains(e.what(), std::to_string(count) + " CUDA device")) << e.what();
    EXPECT_TRUE(contains(e.what(), "CUDA_VISIBLE_DEVICES")) << e.what();
  }
  EXPECT_EQ(gpusel::current_device(), 0) << "a failed set_device leaves the current device alone";
}

TEST(Runtime, ErrorsLeaveNoLastErrorBehind) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  EXPECT_THROW(gpusel::set_device(gpusel::device_count()), gpusel::Error);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess)
      << "the failure was reported by the exception; raw code must not see it again";
}

TEST(Runtime, SynchronizesTheCurrentDeviceAndANamedOne) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  EXPECT_NO_THROW(gpusel::synchronize());
  EXPECT_NO_THROW(gpusel::synchronize(gpusel::cuda(1)));
  EXPECT_EQ(gpusel::current_device(), 0) << "synchronize(device) restores the current device";
}

#if GPUSEL_TEST_EMULATED
TEST(RuntimeEmulated, NoDeviceBecauseTheVariableHidesThemAllSaysSo) {
  gpusel_emulated::Config config;
  config.initialization_error = cudaErrorNoDevice;
  gpusel_emulated::reset(config);
  ::setenv("CUDA_VISIBLE_DEVICES", "NoDevFiles", 1);
  try {
    gpusel::set_device(0);
    FAIL();
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorNoDevice);
    EXPECT_EQ(
        std::string(e.what()).rfind(
            "cudaSetDevice(cuda:0): no CUDA device is usable: CUDA_VISIBLE_DEVICES=NoDevFiles hides every GPU", 0),
        0u)
        << e.what();
    EXPECT_TRUE(contains(e.what(), "; the CUDA runtime says: ")) << e.what();
  }
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(gpusel::device_count(), 0);
  EXPECT_EQ(gpusel::preferred_device(), gpusel::cpu());
  ::setenv("CUDA_VISIBLE_DEVICES", "NoDevFiles", 1);
  EXPECT_TRUE(contains(gpusel::no_cuda_device_reason().value_or(""), "hides every GPU"));
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(RuntimeEmulated, SetDeviceErrorQuotesTheVariable) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  ::setenv("CUDA_VISIBLE_DEVICES", "0,2", 1);
  try {
    gpusel::set_device(3);
    FAIL();
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "2 CUDA devices are visible (cuda:0..cuda:1)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "CUDA_VISIBLE_DEVICES=0,2")) << e.what();
  }
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(RuntimeEmulated, DeviceCountCreatesNoContext) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  (void)gpusel::device_count();
  (void)gpusel::current_device();
  (void)gpusel::preferred_device();
  EXPECT_EQ(gpusel_emulated::primary_context_count(), 0);
}
#endif

}  // namespace
