// Specification of the default device (include/gpusel/default_device.hpp):
// where Buffers made without a device land. Built against the emulated and the
// real runtime (gpusel_test.hpp).
#include "gpusel/default_device.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "gpusel/buffer.hpp"
#include "gpusel/guard.hpp"
#include "gpusel_test.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;

// Every test starts and ends with the default back on the cpu: the default is per process.
class DefaultDevice : public ::testing::Test {
 protected:
  void SetUp() override { gpusel::set_default_device(gpusel::cpu()); }
  void TearDown() override { gpusel::set_default_device(gpusel::cpu()); }
};

TEST_F(DefaultDevice, IsTheCpuUntilSet) {
  EXPECT_EQ(gpusel::default_device(), gpusel::cpu());
  gpusel::Buffer<float> x(6);
  EXPECT_EQ(x.device(), gpusel::cpu());
}

TEST_F(DefaultDevice, RemembersWhatWasSetIncludingCudaWithoutAnIndex) {
  gpusel::set_default_device(gpusel::cuda(1));
  EXPECT_EQ(gpusel::default_device(), gpusel::cuda(1));
  gpusel::set_default_device(gpusel::cuda());
  EXPECT_EQ(gpusel::default_device(), gpusel::cuda()) << "cuda stays unresolved: it is resolved per Buffer";
  EXPECT_FALSE(gpusel::default_device().has_index());
  gpusel::set_default_device(gpusel::cpu());
  EXPECT_EQ(gpusel::default_device(), gpusel::cpu());
}

TEST_F(DefaultDevice, IsSharedByEveryThreadOfTheProcess) {
  std::thread([] { gpusel::set_default_device(gpusel::cuda(3)); }).join();
  EXPECT_EQ(gpusel::default_device(), gpusel::cuda(3));
  gpusel::Device seen = gpusel::cpu();
  std::thread([&seen] { seen = gpusel::default_device(); }).join();
  EXPECT_EQ(seen, gpusel::cuda(3));
}

TEST_F(DefaultDevice, MakesBuffersWithoutADeviceLandOnTheGpu) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::set_default_device(gpusel::cuda());  // torch.set_default_tensor_type('torch.cuda.FloatTensor')
  gpusel::Buffer<float> x(6);
  EXPECT_TRUE(x.is_cuda());
  EXPECT_EQ(x.device(), gpusel::cuda(gpusel::current_device()));
  gpusel::Buffer<float> y{1, 2, 3};
  EXPECT_TRUE(y.is_cuda());
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2, 3}));
}

TEST_F(DefaultDevice, CudaWithoutAnIndexFollowsTheThreadsCurrentDevice) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_default_device(gpusel::cuda());
  gpusel::Buffer<int> on_current(4);
  EXPECT_EQ(on_current.device(), gpusel::cuda(gpusel::current_device()));
  {
    gpusel::DeviceGuard guard(1);
    gpusel::Buffer<int> inside(4);
    EXPECT_EQ(inside.device(), gpusel::cuda(1));
  }
  gpusel::Device from_thread = gpusel::cpu();
  std::thread([&from_thread] {
    gpusel::DeviceGuard guard(1);
    from_thread = gpusel::Buffer<int>(4).device();
  }).join();
  EXPECT_EQ(from_thread, gpusel::cuda(1));
}

TEST_F(DefaultDevice, AnIndexThatDoesNotExistFailsWhenABufferIsMadeAndSaysWhy) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  const int missing = gpusel::device_count();
  gpusel::set_default_device(gpusel::cuda(missing));  // not checked here: no CUDA call
  try {
    gpusel::Buffer<float> x(6);
    FAIL() << "a Buffer was made on a device that does not exist";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidDevice);
    EXPECT_TRUE(contains(e.what(), "cuda:" + std::to_string(missing))) << e.what();
    EXPECT_TRUE(contains(e.what(), "24 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "CUDA_VISIBLE_DEVICES")) << e.what();
  }
}

TEST_F(DefaultDevice, WithoutADriverACudaDefaultFailsClearlyAndTheCpuStillWorks) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  gpusel::set_default_device(gpusel::cuda());
  try {
    gpusel::Buffer<float> x(6);
    FAIL() << "a cuda Buffer was made without a driver";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInsufficientDriver);
    EXPECT_TRUE(contains(e.what(), "no NVIDIA driver was found")) << e.what();
  }
  gpusel::Buffer<float> on_cpu(6, gpusel::cpu());
  EXPECT_EQ(on_cpu.device(), gpusel::cpu());
}

}  // namespace
