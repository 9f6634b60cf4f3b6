// Specification of gpusel::Stream (include/gpusel/stream.hpp). Built against
// the emulated and the real runtime (gpusel_test.hpp).
#include "gpusel/stream.hpp"

#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "gpusel/buffer.hpp"
#include "gpusel/guard.hpp"
#include "gpusel_test.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;

static_assert(!std::is_copy_constructible_v<gpusel::Stream>, "two owners would destroy one stream twice");
static_assert(std::is_nothrow_move_constructible_v<gpusel::Stream>);
static_assert(std::is_nothrow_move_assignable_v<gpusel::Stream>);

TEST(Stream, RemembersTheDeviceItWasMadeFor) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  const int before = gpusel::current_device();
  gpusel::Stream stream(gpusel::cuda(1));
  EXPECT_EQ(stream.device(), gpusel::cuda(1));
  EXPECT_EQ(stream.device_index(), 1);
  EXPECT_NE(stream.handle(), nullptr);
  EXPECT_EQ(gpusel::current_device(), before) << "making a stream elsewhere leaves the current device alone";
}

TEST(Stream, CudaWithoutAnIndexIsTheCurrentDevice) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::DeviceGuard guard(1);
  gpusel::Stream stream;
  EXPECT_EQ(stream.device(), gpusel::cuda(1));
  EXPECT_EQ(stream.order(), gpusel::StreamOrder::with_default_stream);
}

TEST(Stream, AMovedFromStreamOwnsNothingAndSaysSo) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::Stream first(gpusel::cuda(0));
  const cudaStream_t handle = first.handle();
  gpusel::Stream second(std::move(first));
  EXPECT_EQ(second.handle(), handle);
  EXPECT_EQ(first.handle(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_THROW(first.synchronize(), gpusel::Error);
  gpusel::Stream third(gpusel::cuda(0), gpusel::StreamOrder::independent);
  third = std::move(second);
  EXPECT_EQ(third.handle(), handle);
  EXPECT_NO_THROW(third.synchronize());
}

TEST(Stream, ADeviceThatDoesNotExistIsAClearError) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  const int missing = gpusel::device_count();
  try {
    gpusel::Stream stream(gpusel::cuda(missing));
    FAIL() << "a stream was made on a device that does not exist";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidDevice);
    EXPECT_TRUE(contains(e.what(), "gpusel::Stream(cuda:" + std::to_string(missing) + ")")) << e.what();
    EXPECT_TRUE(contains(e.what(), "CUDA_VISIBLE_DEVICES")) << e.what();
  }
  EXPECT_THROW({ gpusel::Stream on_cpu(gpusel::cpu()); }, gpusel::Error);
}

TEST(StreamWithoutDriver, CannotBeMadeAndSaysWhy) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  try {
    gpusel::Stream stream;
    FAIL() << "a stream was made without a driver";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInsufficientDriver);
    EXPECT_TRUE(contains(e.what(), "no NVIDIA driver was found")) << e.what();
  }
}

TEST(Stream, SynchronizeWaitsForQueuedCopies) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  auto host = gpusel::Buffer<int>::pinned(1000);
  for (int i = 0; i < 1000; ++i) host.data()[i] = i;
  gpusel::Stream stream(gpusel::cuda(0));
  auto device = host.to(gpusel::cuda(0), stream);
  stream.synchronize();
  EXPECT_TRUE(stream.ready());
  const std::vector<int> back = device.to_vector();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(back[static_cast<std::size_t>(i)], i);
}

#if GPUSEL_TEST_EMULATED

TEST(StreamEmulated, ReportsNotReadyWhileWorkIsQueuedWithoutLeavingAnError) {
  gpusel_test::need_devices(1);
  auto host = gpusel::Buffer<int>::pinned(10);
  gpusel::Stream stream(gpusel::cuda(0));
  auto device = host.to(gpusel::cuda(0), stream);
  EXPECT_EQ(gpusel_emulated::pending_operations(), 1);
  EXPECT_FALSE(stream.ready());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "'not ready' is an answer, not an error";
  stream.synchronize();
  EXPECT_EQ(gpusel_emulated::pending_operations(), 0);
  EXPECT_TRUE(stream.ready());
}

TEST(StreamEmulated, IsMadeAndDestroyedOnItsDeviceWithoutTouchingAnother) {
  gpusel_test::need_devices(2);
  {
    gpusel::Stream stream(gpusel::cuda(1));
    EXPECT_EQ(gpusel_emulated::live_streams(), 1);
  }
  EXPECT_EQ(gpusel_emulated::live_streams(), 0);
  EXPECT_TRUE(gpusel_emulated::has_primary_context(1));
  EXPECT_FALSE(gpusel_emulated::has_primary_context(0)) << "no stray context on the device the thread started on";
}

std::vector<std::string>& reported_errors() {
  static std::vector<std::string> errors;
  return errors;
}
void record_error(const gpusel::Error& error) { reported_errors().push_back(error.what()); }

// A failed switch to the stream's device does not leak the stream: it is
// destroyed from the current device, and the restore-error handler hears of it.
TEST(StreamEmulated, AFailedSwitchInTheDestructorStillDestroysTheStreamAndSaysSo) {
  gpusel_test::need_devices(2);
  gpusel::set_device(0);  // so the runtime really is back on cuda:0 after each Stream is made
  reported_errors().clear();
  const gpusel::RestoreErrorHandler previous = gpusel::set_restore_error_handler(&record_error);
  for (const char* call : {"cudaGetDevice", "cudaSetDevice"}) {
    {
      gpusel::Stream stream(gpusel::cuda(1));
      gpusel_emulated::fail_call(call, 1, cudaErrorUnknown);
    }
    gpusel_emulated::clear_failures();
    EXPECT_EQ(gpusel_emulated::live_streams(), 0) << call << ": the stream leaked";
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "reported through the handler, not left behind";
  }
  gpusel::set_restore_error_handler(previous);
  ASSERT_EQ(reported_errors().size(), 2u);
  for (const std::string& error : reported_errors()) {
    EXPECT_TRUE(contains(error, "gpusel::Stream's destructor could not make cuda:1 current")) << error;
    EXPECT_TRUE(contains(error, "cudaErrorUnknown")) << error;
  }
  EXPECT_TRUE(contains(reported_errors()[1], "cudaSetDevice")) << reported_errors()[1];
  EXPECT_EQ(gpusel::current_device(), 0);
}

// Note [Failed switches at exit]: a Stream and a Buffer destroyed after the
// runtime's teardown at exit fail quietly: nothing for the handler, nothing
// left behind, no exception.
TEST(StreamEmulated, DestroyedWhileTheRuntimeUnloadsSaysNothing) {
  gpusel_test::need_devices(2);
  gpusel::set_device(0);
  reported_errors().clear();
  const gpusel::RestoreErrorHandler previous = gpusel::set_restore_error_handler(&record_error);
  {
    gpusel::Stream stream(gpusel::cuda(1));
    gpusel::Buffer<int> memory(4, gpusel::cuda(1));
    auto pinned = gpusel::Buffer<int>::pinned(4);
    gpusel::DeviceGuard guard(1);  // its restore fails too
    gpusel_emulated::begin_process_exit();
  }
  EXPECT_GT(gpusel_emulated::calls_refused_while_unloading(), 3);
  gpusel::set_restore_error_handler(previous);
  EXPECT_TRUE(reported_errors().empty()) << reported_errors().front();
  gpusel_test::need_devices(1);  // a new process
}

TEST(StreamEmulated, OrderChoosesTheStreamFlags) {
  gpusel_test::need_devices(1);
  gpusel::Stream independent(gpusel::cuda(0), gpusel::StreamOrder::independent);
  gpusel::Stream ordered(gpusel::cuda(0));
  auto host = gpusel::Buffer<int>::pinned(4);
  auto a = host.to(gpusel::cuda(0), independent);
  auto b = host.to(gpusel::cuda(0), ordered);
  // A plain cudaMemcpy waits for the blocking stream only, as the legacy default stream does.
  int value = 0;
  ASSERT_EQ(cudaMemcpy(&value, b.data(), sizeof value, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(gpusel_emulated::pending_operations(), 1) << "the independent stream still holds its copy";
  independent.synchronize();
  EXPECT_EQ(gpusel_emulated::pending_operations(), 0);
}

#endif

}  // namespace
