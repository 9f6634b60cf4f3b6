// Specification of gpusel::Stream and gpusel::StreamView (include/gpusel/stream.hpp).
// Built against the emulated and the real runtime (gpusel_test.hpp).
#include "gpusel/stream.hpp"

#include <gtest/gtest.h>

#include <optional>
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

// A view is a value: copied, compared and passed in registers like a handle.
static_assert(std::is_trivially_copyable_v<gpusel::StreamView>);
static_assert(sizeof(gpusel::StreamView) <= 2 * sizeof(void*));
static_assert(!std::is_default_constructible_v<gpusel::StreamView>, "a view names a stream of a device");
static_assert(std::is_convertible_v<const gpusel::Stream&, gpusel::StreamView>);
static_assert(!std::is_convertible_v<gpusel::StreamView, gpusel::Stream>, "a view owns nothing to give a Stream");
static_assert(!std::is_constructible_v<gpusel::StreamView, cudaStream_t>, "a handle alone does not say its device");

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

TEST(StreamView, AStreamConvertsToAViewOfItsHandleAndDevice) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::Stream stream(gpusel::cuda(1));
  const gpusel::StreamView view = stream;
  EXPECT_EQ(view.handle(), stream.handle());
  EXPECT_EQ(view.device(), gpusel::cuda(1));
  EXPECT_EQ(view.device_index(), 1);
  EXPECT_EQ(view, gpusel::StreamView(stream.handle(), gpusel::cuda(1)));
  EXPECT_NE(view, gpusel::StreamView(stream.handle(), gpusel::cuda(0))) << "the device is part of the value";
}

TEST(StreamView, ViewsAreEqualWhenHandleAndDeviceAre) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  using gpusel::StreamView;
  EXPECT_EQ(StreamView::legacy_default(gpusel::cuda(0)), StreamView::legacy_default(gpusel::cuda(0)));
  EXPECT_EQ(StreamView::legacy_default(gpusel::cuda(0)), StreamView(cudaStreamLegacy, gpusel::cuda(0)));
  EXPECT_NE(StreamView::legacy_default(gpusel::cuda(0)), StreamView::legacy_default(gpusel::cuda(1)));
  EXPECT_NE(StreamView::legacy_default(gpusel::cuda(0)), StreamView::per_thread_default(gpusel::cuda(0)));
  EXPECT_EQ(StreamView::per_thread_default(gpusel::cuda(1)).handle(), cudaStreamPerThread);
  // The same stream in a default build, yet another handle (Note [A stream and its device]).
  EXPECT_NE(StreamView(nullptr, gpusel::cuda(0)), StreamView::legacy_default(gpusel::cuda(0)));
  const StreamView view(nullptr, gpusel::cuda(1));
  StreamView copy = StreamView::legacy_default(gpusel::cuda(0));
  copy = view;
  EXPECT_EQ(copy, view);
}

TEST(StreamView, CudaWithoutAnIndexIsTheCurrentDeviceResolvedWhenTheViewIsMade) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  std::optional<gpusel::StreamView> legacy, raw;
  {
    gpusel::DeviceGuard guard(1);
    legacy = gpusel::StreamView::legacy_default();
    raw = gpusel::StreamView(nullptr, gpusel::cuda());
  }
  EXPECT_EQ(legacy->device(), gpusel::cuda(1));
  EXPECT_EQ(raw->device(), gpusel::cuda(1));
}

TEST(StreamView, ADeviceThatDoesNotExistIsAClearErrorNamingIt) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  const int missing = gpusel::device_count();
  const std::string device = "cuda:" + std::to_string(missing);
  const auto expect_named = [&](const auto& make, const std::string& who) {
    try {
      (void)make();
      ADD_FAILURE() << who << " made a view of a device that does not exist";
    } catch (const gpusel::Error& e) {
      EXPECT_EQ(e.code(), cudaErrorInvalidDevice);
      EXPECT_TRUE(contains(e.what(), who + "(" + device + ")")) << e.what();
      EXPECT_TRUE(contains(e.what(), "CUDA_VISIBLE_DEVICES")) << e.what();
    }
  };
  expect_named([&] { return gpusel::StreamView(nullptr, gpusel::cuda(missing)); }, "gpusel::StreamView");
  expect_named([&] { return gpusel::StreamView::legacy_default(gpusel::cuda(missing)); },
               "gpusel::StreamView::legacy_default");
  expect_named([&] { return gpusel::StreamView::per_thread_default(gpusel::cuda(missing)); },
               "gpusel::StreamView::per_thread_default");
  try {
    (void)gpusel::StreamView(nullptr, gpusel::cpu());
    FAIL() << "a view of a stream of the cpu";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "gpusel::StreamView(cpu): expected a cuda device, got cpu")) << e.what();
  }
}

TEST(StreamViewWithoutDriver, CannotBeMadeAndSaysWhy) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  try {
    (void)gpusel::StreamView::legacy_default();
    FAIL() << "a view was made without a driver";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInsufficientDriver);
    EXPECT_TRUE(contains(e.what(), "gpusel::StreamView::legacy_default(cuda)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "no NVIDIA driver was found")) << e.what();
  }
}

TEST(StreamView, AMovedFromStreamGivesNoView) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::Stream stream(gpusel::cuda(0));
  gpusel::Stream taken = std::move(stream);
  try {
    const gpusel::StreamView view = stream;  // NOLINT(bugprone-use-after-move): the moved-from state is specified
    FAIL() << "a view of no stream, handle " << view.handle();
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "gpusel::Stream::operator StreamView: the Stream was moved from")) << e.what();
  }
}

TEST(StreamView, SynchronizeWaitsForWorkQueuedThroughTheView) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  auto host = gpusel::Buffer<int>::pinned(1000);
  for (int i = 0; i < 1000; ++i) host.data()[i] = i;
  gpusel::Stream stream(gpusel::cuda(0), gpusel::StreamOrder::independent);
  const gpusel::StreamView view = stream;
  auto device = host.to(gpusel::cuda(0), view);
  view.synchronize();
  EXPECT_TRUE(view.ready());
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

TEST(StreamViewEmulated, ADefaultStreamOfAnotherDeviceIsWaitedForThere) {
  gpusel_test::need_devices(2);
  auto host = gpusel::Buffer<int>::pinned(10);
  const auto legacy_1 = gpusel::StreamView::legacy_default(gpusel::cuda(1));
  auto device = host.to(gpusel::cuda(1), legacy_1);  // queued on cuda:1's legacy stream, cuda:0 current
  EXPECT_EQ(gpusel_emulated::pending_operations(), 1);
  EXPECT_TRUE(gpusel::StreamView::legacy_default(gpusel::cuda(0)).ready()) << "cuda:0's legacy stream has nothing";
  EXPECT_FALSE(legacy_1.ready());
  gpusel::StreamView::legacy_default(gpusel::cuda(0)).synchronize();
  EXPECT_EQ(gpusel_emulated::pending_operations(), 1) << "cuda:0's legacy stream had nothing to wait for";
  legacy_1.synchronize();
  EXPECT_EQ(gpusel_emulated::pending_operations(), 0);
  EXPECT_EQ(gpusel::current_device(), 0) << "the view's device was current only while it was used";
}

TEST(StreamViewEmulated, ViewsOfOneStreamOwnNothing) {
  gpusel_test::need_devices(1);
  {
    gpusel::Stream stream(gpusel::cuda(0));
    std::vector<gpusel::StreamView> views(3, stream);
    views.push_back(views.front());
    EXPECT_EQ(gpusel_emulated::live_streams(), 1);
  }
  EXPECT_EQ(gpusel_emulated::live_streams(), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamDestroy"), 1);
}

TEST(StreamViewEmulated, AFailedSynchronizeNamesTheViewAndItsDevice) {
  gpusel_test::need_devices(2);
  const auto view = gpusel::StreamView::per_thread_default(gpusel::cuda(1));
  gpusel_emulated::fail_call("cudaStreamSynchronize", 1, cudaErrorLaunchFailure);
  try {
    view.synchronize();
    FAIL() << "a failed cudaStreamSynchronize went unreported";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorLaunchFailure);
    EXPECT_TRUE(contains(e.what(), "gpusel::StreamView::synchronize: cudaStreamSynchronize(cuda:1)")) << e.what();
  }
  EXPECT_EQ(gpusel::current_device(), 0);
}

#endif

}  // namespace
