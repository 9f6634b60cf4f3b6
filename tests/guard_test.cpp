// Specification of the device guards (include/gpusel/guard.hpp) and of the
// lazy restore under them (Note [Restoring a device without creating its
// context]). Built against the emulated runtime and against the real one.
#include "gpusel/guard.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "gpusel_test.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;

// Whether `device` has its primary context: the emulation's record, or the driver's answer.
bool has_context(int device) {
#if GPUSEL_TEST_EMULATED
  return gpusel_emulated::has_primary_context(device);
#else
  return gpusel::detail::primary_context_state(device) == gpusel::detail::PrimaryContextState::Active;
#endif
}

int raw_current_device() {
  int index = -1;
  EXPECT_EQ(cudaGetDevice(&index), cudaSuccess);
  return index;
}

// Runs `body` on a new thread, which starts, as CUDA threads do, on device 0 with nothing chosen.
template <typename Body>
void on_fresh_thread(Body body) {
  std::thread thread(body);
  thread.join();
}

// --- what the types allow ------------------------------------------------------

static_assert(!std::is_default_constructible_v<gpusel::DeviceGuard>, "a guard names its device");
static_assert(!std::is_copy_constructible_v<gpusel::DeviceGuard> && !std::is_copy_assignable_v<gpusel::DeviceGuard>,
              "a copy would restore twice");
static_assert(!std::is_move_constructible_v<gpusel::DeviceGuard> && !std::is_move_assignable_v<gpusel::DeviceGuard>,
              "a moved guard would restore on the wrong scope or thread");
static_assert(std::is_nothrow_destructible_v<gpusel::DeviceGuard>, "destructors never throw");
static_assert(std::is_nothrow_default_constructible_v<gpusel::OptionalDeviceGuard>, "an empty guard costs nothing");
static_assert(!std::is_copy_constructible_v<gpusel::OptionalDeviceGuard> &&
                  !std::is_move_constructible_v<gpusel::OptionalDeviceGuard>,
              "the optional guard is not copied or moved either");
static_assert(!std::is_convertible_v<int, gpusel::DeviceGuard>, "a guard is made on purpose, never converted to");

// --- without a GPU -------------------------------------------------------------

TEST(DeviceGuard, OnTheCpuChangesNothingAndNeedsNoGpu) {
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(2));
#endif
  {
    gpusel::DeviceGuard guard(gpusel::cpu());
    EXPECT_EQ(guard.original_device(), gpusel::cpu());
    EXPECT_EQ(guard.current_device(), gpusel::cpu());
  }
#if GPUSEL_TEST_EMULATED
  EXPECT_TRUE(gpusel_emulated::call_log().empty()) << "a cpu guard makes no CUDA call";
#endif
}

TEST(DeviceGuard, RejectsANegativeIndex) {
  try {
    gpusel::DeviceGuard guard(-1);
    FAIL() << "DeviceGuard(-1) was accepted";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "gpusel::DeviceGuard(-1): a device index cannot be negative")) << e.what();
  }
}

TEST(DeviceGuardWithoutDriver, ThrowsAnErrorThatSaysWhy) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  try {
    gpusel::DeviceGuard guard(0);
    FAIL() << "a guard on cuda:0 succeeded without a driver";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInsufficientDriver);
    // cudaGetDevice takes no device: the message names the guard's target and what the call asked for.
    EXPECT_TRUE(contains(e.what(), "gpusel::DeviceGuard(cuda:0): cudaGetDevice(current device): ")) << e.what();
    EXPECT_TRUE(contains(e.what(), "no NVIDIA driver was found")) << e.what();
  }
  EXPECT_NO_THROW({ gpusel::DeviceGuard guard(gpusel::cpu()); }) << "the cpu needs no driver";
}

// --- on one GPU ----------------------------------------------------------------

TEST(DeviceGuard, OnTheCurrentDeviceKeepsIt) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  {
    gpusel::DeviceGuard guard(0);
    EXPECT_EQ(guard.original_device(), gpusel::cuda(0));
    EXPECT_EQ(guard.current_device(), gpusel::cuda(0));
    EXPECT_EQ(gpusel::current_device(), 0);
  }
  EXPECT_EQ(gpusel::current_device(), 0);
  EXPECT_EQ(raw_current_device(), 0);
}

TEST(DeviceGuard, OnCudaWithoutAnIndexTakesTheCurrentDevice) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  gpusel::DeviceGuard guard(gpusel::cuda());
  EXPECT_EQ(guard.current_device(), gpusel::cuda(0));
  EXPECT_EQ(guard.original_device(), gpusel::cuda(0));
}

TEST(DeviceGuard, OnAMissingDeviceThrowsAndLeavesTheCurrentDevice) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  const int missing = gpusel::device_count();
  try {
    gpusel::DeviceGuard guard(missing);
    FAIL() << "a guard on a device that does not exist succeeded";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidDevice);
    EXPECT_TRUE(contains(e.what(), "gpusel::DeviceGuard: cudaSetDevice(cuda:" + std::to_string(missing) + ")"))
        << e.what();
    EXPECT_TRUE(contains(e.what(), "visible")) << "the message says which devices exist: " << e.what();
  }
  EXPECT_EQ(gpusel::current_device(), 0);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "the failure was reported once, by the exception";
}

TEST(DeviceGuard, TheDriverReportsPrimaryContextsThroughTheRuntime) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  EXPECT_EQ(gpusel::detail::primary_context_state(0), gpusel::detail::PrimaryContextState::Active)
      << "cudaSetDevice creates the primary context since CUDA 12, and the driver entry point sees it";
  EXPECT_EQ(gpusel::detail::primary_context_state(gpusel::device_count()), gpusel::detail::PrimaryContextState::Unknown)
      << "a device that does not exist has no state";
}

// A new process (a child re-running this test alone), so that no context exists yet.
TEST(DeviceGuardDeathTest, ReadingTheCurrentDeviceCreatesNoContextInANewProcess) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const bool before = has_context(0);
        { gpusel::DeviceGuard guard(gpusel::cuda()); }
        (void)gpusel::current_device();
        const bool after = has_context(0);
        gpusel::set_device(0);
        std::exit((before ? 1 : 0) | (after ? 2 : 0) | (has_context(0) ? 0 : 4));
      },
      ::testing::ExitedWithCode(0), "")
      << "exit code bits: 1 = a context before any call, 2 = a guard on the current device made one, "
         "4 = set_device(0) made none";
}

// --- on two GPUs -----------------------------------------------------------------

TEST(DeviceGuard, SwitchesForTheScopeAndBack) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  {
    gpusel::DeviceGuard guard(1);
    EXPECT_EQ(gpusel::current_device(), 1);
    EXPECT_EQ(raw_current_device(), 1);
    EXPECT_EQ(guard.original_device(), gpusel::cuda(0));
    EXPECT_EQ(guard.current_device(), gpusel::cuda(1));
  }
  EXPECT_EQ(gpusel::current_device(), 0);
  EXPECT_EQ(raw_current_device(), 0) << "device 0 has a context, so the restore is immediate";
}

TEST(DeviceGuard, NestsLikeTorchCudaDevice) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  {
    gpusel::DeviceGuard outer(gpusel::cuda(1));  // with torch.cuda.device(1):
    {
      gpusel::DeviceGuard on_current(gpusel::cuda());  // torch.device("cuda") inside: cuda:1
      EXPECT_EQ(on_current.current_device(), gpusel::cuda(1));
    }
    {
      gpusel::DeviceGuard on_zero(gpusel::cuda(0));  // an explicit cuda:0 is still cuda:0
      EXPECT_EQ(on_zero.current_device(), gpusel::cuda(0));
      EXPECT_EQ(gpusel::current_device(), 0);
    }
    EXPECT_EQ(gpusel::current_device(), 1);
  }
  EXPECT_EQ(gpusel::current_device(), 0);
}

TEST(DeviceGuard, RestoresWhenTheScopeEndsByAnException) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  try {
    gpusel::DeviceGuard guard(1);
    throw std::runtime_error("work on cuda:1 failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(gpusel::current_device(), 0);
  EXPECT_EQ(raw_current_device(), 0);
}

TEST(DeviceGuard, UndoesASetDeviceInsideItsScope) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  {
    gpusel::DeviceGuard guard(0);  // already current: no switch of its own
    gpusel::set_device(1);
  }
  EXPECT_EQ(gpusel::current_device(), 0) << "a set_device inside the scope is undone at its end";
  {
    gpusel::DeviceGuard guard(1);
    gpusel::set_device(0);
    gpusel::set_device(1);
  }
  EXPECT_EQ(gpusel::current_device(), 0);
}

TEST(OptionalDeviceGuard, StartsEmptyAndChangesNothing) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(1);
  {
    gpusel::OptionalDeviceGuard guard;
    EXPECT_EQ(guard.original_device(), std::nullopt);
    EXPECT_EQ(guard.current_device(), std::nullopt);
    gpusel::OptionalDeviceGuard also_empty(std::optional<gpusel::Device>{});
    EXPECT_EQ(also_empty.current_device(), std::nullopt);
  }
  EXPECT_EQ(gpusel::current_device(), 1);
  gpusel::set_device(0);
}

TEST(OptionalDeviceGuard, TakesDevicesLaterAndRestoresOnce) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  {
    gpusel::OptionalDeviceGuard guard;
    for (int device : {1, 0, 1}) {  // the loop idiom: one guard, many devices
      guard.set_device(device);
      EXPECT_EQ(gpusel::current_device(), device);
      EXPECT_EQ(guard.current_device(), gpusel::cuda(device));
      EXPECT_EQ(guard.original_device(), gpusel::cuda(0)) << "the first device found is the one restored";
    }
  }
  EXPECT_EQ(gpusel::current_device(), 0);
}

TEST(OptionalDeviceGuard, ResetRestoresNowAndEmptiesTheGuard) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  gpusel::OptionalDeviceGuard guard(gpusel::cuda(1));
  EXPECT_EQ(gpusel::current_device(), 1);
  guard.reset();
  EXPECT_EQ(gpusel::current_device(), 0);
  EXPECT_EQ(guard.original_device(), std::nullopt);
  guard.reset();  // a second reset has nothing to do
  gpusel::set_device(1);
  guard.set_device(0);  // reusable: the original is now cuda:1
  EXPECT_EQ(guard.original_device(), gpusel::cuda(1));
  guard.reset();
  EXPECT_EQ(gpusel::current_device(), 1);
  gpusel::set_device(0);
}

TEST(OptionalDeviceGuard, DoesNotMixCpuAndCuda) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  gpusel::OptionalDeviceGuard on_cpu(gpusel::cpu());
  EXPECT_EQ(on_cpu.current_device(), gpusel::cpu());
  EXPECT_THROW(on_cpu.set_device(1), gpusel::Error);
  gpusel::OptionalDeviceGuard on_gpu(gpusel::cuda(1));
  try {
    on_gpu.set_device(gpusel::cpu());
    FAIL() << "a cuda guard took the cpu";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "the guard holds cuda:1")) << e.what();
  }
  EXPECT_EQ(gpusel::current_device(), 1) << "the failed set_device left the guard as it was";
}

TEST(DeviceGuard, ThreadsKeepTheirOwnDevices) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  int devices = gpusel_test::kEmulated ? 4 : gpusel::device_count();
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(devices));
#endif
  gpusel::set_device(0);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, devices, &wrong] {
      for (int round = 0; round < 200; ++round) {
        const int mine = (t + round) % devices;
        gpusel::DeviceGuard guard(mine);
        {
          gpusel::DeviceGuard inner((mine + 1) % devices);
          if (gpusel::current_device() != (mine + 1) % devices) ++wrong;
        }
        if (gpusel::current_device() != mine) ++wrong;
        std::this_thread::yield();
        if (gpusel::current_device() != mine) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0) << "a guard on one thread changed another thread's device";
  EXPECT_EQ(gpusel::current_device(), 0) << "the main thread's device is its own";
}

TEST(Synchronize, LeavesTheCurrentDeviceAsItWas) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  gpusel::set_device(0);
  gpusel::DeviceGuard guard(1);  // give cuda:1 a context, so there is something to wait for
  gpusel::set_device(0);
  EXPECT_NO_THROW(gpusel::synchronize(gpusel::cuda(1)));
  EXPECT_EQ(gpusel::current_device(), 0);
  EXPECT_EQ(raw_current_device(), 0);
}

// The heart of the matter on real hardware: a new process on a machine with two GPUs.
TEST(DeviceGuardDeathTest, AGuardOnAnotherDeviceLeavesNoContextOnDeviceZero) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        { gpusel::DeviceGuard guard(1); }
        const bool stray = has_context(0);
        const bool reported_zero = gpusel::current_device() == 0;
        std::exit((stray ? 1 : 0) | (reported_zero ? 0 : 2) | (has_context(1) ? 0 : 4));
      },
      ::testing::ExitedWithCode(0), "")
      << "exit code bits: 1 = a context on cuda:0, 2 = current_device() is not 0, 4 = no context on cuda:1";
}

#if GPUSEL_TEST_EMULATED
// --- what the emulation can count ------------------------------------------------

using gpusel_emulated::calls;
using gpusel_emulated::has_primary_context;
using gpusel_emulated::primary_context_count;

TEST(DeviceGuardCalls, OnTheCurrentDeviceOnlyReadsIt) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  gpusel::set_device(0);
  gpusel_emulated::clear_calls();
  { gpusel::DeviceGuard guard(0); }
  EXPECT_EQ(calls("cudaGetDevice"), 1);
  EXPECT_EQ(calls("cudaSetDevice"), 0) << "no cudaSetDevice to the device already current";
  EXPECT_EQ(calls("cuDevicePrimaryCtxGetState"), 0) << "the fast path does not ask the driver";
  EXPECT_EQ(gpusel_emulated::call_log().size(), 1u);
}

TEST(DeviceGuardCalls, ASwitchCostsOneGetAndTwoSets) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  gpusel::set_device(0);
  gpusel_emulated::clear_calls();
  { gpusel::DeviceGuard guard(1); }
  EXPECT_EQ(calls("cudaGetDevice"), 1);
  EXPECT_EQ(calls("cudaSetDevice"), 2);
  EXPECT_EQ(calls("cuDevicePrimaryCtxGetState"), 1) << "the context state is read once, to switch back";
}

// Note [What a restore remembers about a device]
TEST(DeviceGuardCalls, ASwitchAsksTheDriverOnlyWhatCanStillChange) {
  ASSERT_FALSE(gpusel_test::need_devices(2));
  gpusel::set_device(0);
  gpusel_emulated::clear_calls();
  { gpusel::DeviceGuard guard(1); }
  EXPECT_EQ(calls("cuDeviceGet"), 1) << "cuda:0's CUdevice is asked the first time";
  EXPECT_EQ(calls("cuDevicePrimaryCtxGetState"), 1);
  gpusel_emulated::clear_calls();
  for (int i = 0; i < 3; ++i) {
    gpusel::DeviceGuard guard(1);
  }
  EXPECT_EQ(calls("cudaGetDevice"), 3);
  EXPECT_EQ(calls("cudaSetDevice"), 6);
  EXPECT_EQ(calls("cuDeviceGet"), 0) << "a runtime ordinal's CUdevice cannot change";
  EXPECT_EQ(calls("cuDevicePrimaryCtxGetState"), 0) << "a context known to exist stays until cudaDeviceReset";
  EXPECT_EQ(gpusel_emulated::call_log().size(), 9u) << "the raw get + set + set, three times, and nothing else";
}

TEST(DeviceGuardCalls, ADeviceWithoutItsContextIsAskedAgainAtEveryRestore) {
  ASSERT_FALSE(gpusel_test::need_devices(2));
  { gpusel::DeviceGuard guard(1); }  // the thread never chose a device: cuda:0 has no context
  gpusel_emulated::clear_calls();
  { gpusel::DeviceGuard guard(1); }
  EXPECT_EQ(calls("cuDeviceGet"), 0);
  EXPECT_EQ(calls("cuDevicePrimaryCtxGetState"), 1) << "another thread may have made the context meanwhile";
  EXPECT_FALSE(has_primary_context(0));
  std::thread([] { gpusel::set_device(0); }).join();
  gpusel_emulated::clear_calls();
  { gpusel::DeviceGuard guard(1); }
  EXPECT_EQ(calls("cuDevicePrimaryCtxGetState"), 1);
  EXPECT_EQ(raw_current_device(), 0) << "the context another thread made is seen, and the restore is made";
}

TEST(DeviceGuardCalls, ReleasingCachedResourcesForgetsWhichDevicesHaveTheirContext) {
  ASSERT_FALSE(gpusel_test::need_devices(2));
  gpusel::set_device(0);
  { gpusel::DeviceGuard guard(1); }
  gpusel::release_cached_resources();  // as before cudaDeviceReset
  gpusel_emulated::clear_calls();
  { gpusel::DeviceGuard guard(1); }
  EXPECT_EQ(calls("cuDevicePrimaryCtxGetState"), 1) << "the context is asked about again";
  EXPECT_EQ(calls("cuDeviceGet"), 0) << "the CUdevice is still known";
}

TEST(DeviceGuardCalls, ANewEmulatedProcessKnowsNoContext) {
  ASSERT_FALSE(gpusel_test::need_devices(2));
  gpusel::set_device(0);
  { gpusel::DeviceGuard guard(1); }
  gpusel_emulated::reset(gpusel_emulated::devices(2));  // cuda:0 has no context now
  { gpusel::DeviceGuard guard(1); }
  EXPECT_FALSE(has_primary_context(0)) << "the restore did not trust what the old process knew";
  EXPECT_EQ(raw_current_device(), 1) << "the restore of cuda:0 was deferred";
  EXPECT_EQ(gpusel::current_device(), 0);
}

TEST(DeviceGuardCalls, NestedGuardsOnTheSameDeviceMakeNoSet) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  gpusel::set_device(1);
  gpusel_emulated::clear_calls();
  {
    gpusel::DeviceGuard a(1);
    gpusel::DeviceGuard b(gpusel::cuda(1));
    gpusel::DeviceGuard c(gpusel::cuda());
  }
  EXPECT_EQ(calls("cudaSetDevice"), 0);
  gpusel_emulated::clear_calls();
  {
    gpusel::DeviceGuard outer(1);
    { gpusel::DeviceGuard inner(0); }
  }
  EXPECT_EQ(calls("cudaSetDevice"), 2) << "the inner guard switches and back; the outer one checks and sees 1";
  EXPECT_EQ(gpusel::current_device(), 1);
  gpusel::set_device(0);
}

TEST(DeviceGuardCalls, AnOptionalGuardSkipsTheDeviceItIsOn) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  gpusel::set_device(0);
  gpusel_emulated::clear_calls();
  {
    gpusel::OptionalDeviceGuard guard;
    guard.set_device(1);
    guard.set_device(1);
  }
  EXPECT_EQ(calls("cudaSetDevice"), 2) << "one switch there, one back; the repeat costs none";
}

TEST(DeviceGuardContexts, AGuardOnAFreshThreadLeavesNoContextOnDeviceZero) {
  gpusel_emulated::reset(gpusel_emulated::devices(4));
  on_fresh_thread([] {
    { gpusel::DeviceGuard guard(2); }
    EXPECT_FALSE(has_primary_context(0)) << "restoring device 0 must not create its context";
    EXPECT_TRUE(has_primary_context(2));
    EXPECT_EQ(primary_context_count(), 1);
    // Note [Restoring a device without creating its context]: gpusel reports the
    // restored device, the runtime is still on the guard's device.
    EXPECT_EQ(gpusel::current_device(), 0);
    EXPECT_EQ(gpusel::preferred_device(), gpusel::cuda(0));
    EXPECT_EQ(raw_current_device(), 2);
  });
  EXPECT_EQ(primary_context_count(), 1);
}

TEST(DeviceGuardContexts, TheMainThreadOfANewProcessIsAFreshThreadToo) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  { gpusel::DeviceGuard guard(1); }
  EXPECT_FALSE(has_primary_context(0));
  EXPECT_EQ(gpusel::current_device(), 0);
  gpusel::set_device(0);  // leave this thread on a real device 0 for the next test
}

TEST(DeviceGuardContexts, SetDeviceMakesADeferredRestoreReal) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  on_fresh_thread([] {
    { gpusel::DeviceGuard guard(1); }
    gpusel::set_device(gpusel::current_device());  // what raw CUDA code after a guard should do first
    EXPECT_TRUE(has_primary_context(0)) << "now the program uses device 0";
    EXPECT_EQ(raw_current_device(), 0);
    EXPECT_EQ(gpusel::current_device(), 0);
  });
}

TEST(DeviceGuardContexts, AGuardOnTheDeferredDeviceMakesItCurrentAndKeepsIt) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  on_fresh_thread([] {
    { gpusel::DeviceGuard guard(1); }
    gpusel_emulated::clear_calls();
    {
      gpusel::DeviceGuard guard(0);
      EXPECT_EQ(guard.original_device(), gpusel::cuda(0));
      EXPECT_EQ(raw_current_device(), 0) << "code inside a guard on cuda:0 runs on cuda:0";
    }
    EXPECT_EQ(calls("cudaSetDevice"), 1) << "made current once, then nothing to restore";
    EXPECT_EQ(raw_current_device(), 0);
  });
}

TEST(DeviceGuardContexts, AGuardOnTheDevicesTheRuntimeIsStillOnReportsItInside) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  on_fresh_thread([] {
    { gpusel::DeviceGuard guard(1); }
    gpusel_emulated::clear_calls();
    {
      gpusel::DeviceGuard guard(1);
      EXPECT_EQ(gpusel::current_device(), 1);
      EXPECT_EQ(guard.original_device(), gpusel::cuda(0));
    }
    EXPECT_EQ(calls("cudaSetDevice"), 0) << "the runtime was on cuda:1 all along";
    EXPECT_EQ(gpusel::current_device(), 0) << "and the restore is deferred again";
    EXPECT_FALSE(has_primary_context(0));
  });
}

TEST(DeviceGuardContexts, ARawSetDeviceEndsADeferredRestore) {
  gpusel_emulated::reset(gpusel_emulated::devices(3));
  on_fresh_thread([] {
    { gpusel::DeviceGuard guard(1); }
    ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
    EXPECT_EQ(gpusel::current_device(), 2) << "gpusel sees the runtime moved and follows it";
    EXPECT_FALSE(has_primary_context(0));
  });
}

TEST(DeviceGuardContexts, NestedGuardsOnAFreshThreadCreateContextsOnlyWhereUsed) {
  gpusel_emulated::reset(gpusel_emulated::devices(4));
  on_fresh_thread([] {
    {
      gpusel::DeviceGuard outer(2);
      { gpusel::DeviceGuard inner(3); }
      EXPECT_EQ(raw_current_device(), 2) << "cuda:2 has a context: restored at once";
    }
    EXPECT_EQ(gpusel::current_device(), 0);
    EXPECT_FALSE(has_primary_context(0));
    EXPECT_FALSE(has_primary_context(1));
    EXPECT_EQ(primary_context_count(), 2);
  });
}

TEST(DeviceGuardContexts, AGuardAfterADeferredRestoreStillRestoresTheFirstDevice) {
  gpusel_emulated::reset(gpusel_emulated::devices(3));
  on_fresh_thread([] {
    { gpusel::DeviceGuard guard(1); }
    {
      gpusel::DeviceGuard guard(2);
      EXPECT_EQ(guard.original_device(), gpusel::cuda(0));
    }
    EXPECT_EQ(gpusel::current_device(), 0);
    EXPECT_EQ(raw_current_device(), 2);
    EXPECT_FALSE(has_primary_context(0));
  });
}

TEST(DeviceGuardContexts, ThreadsDeferTheirOwnRestoresOnly) {
  gpusel_emulated::reset(gpusel_emulated::devices(4));
  gpusel::set_device(3);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 1; t <= 3; ++t) {
    threads.emplace_back([t, &wrong] {
      for (int round = 0; round < 100; ++round) {
        { gpusel::DeviceGuard guard(t); }
        if (gpusel::current_device() != 0) ++wrong;
        if (raw_current_device() != t) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_FALSE(has_primary_context(0));
  EXPECT_EQ(gpusel::current_device(), 3);
  gpusel::set_device(0);
}

TEST(SynchronizeContexts, ADeviceWithoutAContextHasNothingToWaitFor) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  on_fresh_thread([] {
    EXPECT_NO_THROW(gpusel::synchronize(gpusel::cuda(1)));
    EXPECT_EQ(primary_context_count(), 0) << "synchronize(cuda:1) created a context";
    EXPECT_EQ(raw_current_device(), 0);
  });
}

TEST(SynchronizeContexts, TheCurrentDeviceWithoutAContextHasNothingToWaitForEither) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  on_fresh_thread([] {
    EXPECT_NO_THROW(gpusel::synchronize(gpusel::cuda(0)));  // cuda:0 is this thread's current device
    EXPECT_EQ(primary_context_count(), 0) << "synchronize(cuda:0) created the current device's context";
    EXPECT_EQ(raw_current_device(), 0);
  });
}

TEST(SynchronizeContexts, SwitchesBackWithoutCreatingAContext) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  { gpusel::DeviceGuard guard(1); }  // cuda:1 now has a context, cuda:0 none
  on_fresh_thread([] {
    gpusel_emulated::clear_calls();
    EXPECT_NO_THROW(gpusel::synchronize(gpusel::cuda(1)));
    EXPECT_EQ(calls("cudaDeviceSynchronize"), 1);
    EXPECT_FALSE(has_primary_context(0)) << "the old synchronize restored with cudaSetDevice(0)";
    EXPECT_EQ(gpusel::current_device(), 0);
  });
  EXPECT_FALSE(has_primary_context(0));
  gpusel::set_device(0);
}

TEST(SynchronizeContexts, ReportsAMissingDevice) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  try {
    gpusel::synchronize(gpusel::cuda(5));
    FAIL() << "synchronize(cuda:5) succeeded on two devices";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidDevice);
    EXPECT_TRUE(contains(e.what(), "cudaSetDevice(cuda:5)")) << e.what();
  }
}

// --- failures -----------------------------------------------------------------------

std::vector<std::string>& reported_errors() {
  static std::vector<std::string> errors;
  return errors;
}
void record_error(const gpusel::Error& error) { reported_errors().push_back(error.what()); }

class DeviceGuardFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    gpusel_emulated::reset(gpusel_emulated::devices(2));
    reported_errors().clear();
    previous_ = gpusel::set_restore_error_handler(&record_error);
  }
  void TearDown() override { gpusel::set_restore_error_handler(previous_); }
  gpusel::RestoreErrorHandler previous_ = nullptr;
};

TEST_F(DeviceGuardFailures, AFailedRestoreGoesToTheHandlerNotAnException) {
  gpusel::set_device(0);
  gpusel_emulated::fail_call("cudaSetDevice", 2, cudaErrorUnknown);  // the switch back
  EXPECT_NO_THROW({ gpusel::DeviceGuard guard(1); });
  ASSERT_EQ(reported_errors().size(), 1u);
  EXPECT_TRUE(contains(reported_errors()[0], "gpusel::DeviceGuard could not switch the thread back to cuda:0"))
      << reported_errors()[0];
  EXPECT_TRUE(contains(reported_errors()[0], "cudaErrorUnknown")) << reported_errors()[0];
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "reported once, through the handler";
  EXPECT_EQ(gpusel::current_device(), 1) << "the device the failed restore left";
}

TEST_F(DeviceGuardFailures, AFailedSwitchThrowsAndRestoresNothing) {
  gpusel::set_device(0);
  gpusel_emulated::fail_call("cudaSetDevice", 1, cudaErrorUnknown);
  gpusel_emulated::clear_calls();
  EXPECT_THROW(gpusel::DeviceGuard guard(1), gpusel::Error);
  EXPECT_EQ(calls("cudaSetDevice"), 1);
  EXPECT_TRUE(reported_errors().empty());
  EXPECT_EQ(gpusel::current_device(), 0);
}

TEST_F(DeviceGuardFailures, AnExceptionAndAFailedRestoreAreBothReported) {
  gpusel::set_device(0);
  gpusel_emulated::fail_call("cudaSetDevice", 2, cudaErrorUnknown);
  try {
    gpusel::DeviceGuard guard(1);
    throw std::runtime_error("work failed");
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "work failed") << "the scope's own exception reaches the caller";
  }
  EXPECT_EQ(reported_errors().size(), 1u);
}

TEST_F(DeviceGuardFailures, OptionalGuardResetReportsToo) {
  gpusel::set_device(0);
  gpusel::OptionalDeviceGuard guard(gpusel::cuda(1));
  gpusel_emulated::fail_call("cudaSetDevice", 1, cudaErrorUnknown);
  guard.reset();
  ASSERT_EQ(reported_errors().size(), 1u);
  EXPECT_TRUE(contains(reported_errors()[0], "gpusel::OptionalDeviceGuard could not switch")) << reported_errors()[0];
}

TEST_F(DeviceGuardFailures, SynchronizeThrowsAFailedRestore) {
  gpusel::set_device(0);
  { gpusel::DeviceGuard guard(1); }  // cuda:1 gets a context: synchronize has something to wait for
  gpusel_emulated::fail_call("cudaSetDevice", 2, cudaErrorUnknown);
  try {
    gpusel::synchronize(gpusel::cuda(1));
    FAIL() << "a failed restore in synchronize was lost";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "gpusel::synchronize could not switch the thread back to cuda:0")) << e.what();
  }
}

void throwing_handler(const gpusel::Error&) { throw std::logic_error("a handler that throws"); }

TEST(DeviceGuardFailuresDeathTest, WithoutAHandlerTheFirstFailureGoesToStderrOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        gpusel_emulated::reset(gpusel_emulated::devices(2));
        gpusel::set_device(0);
        std::fprintf(stderr, "BEGIN\n");
        gpusel_emulated::fail_calls_from("cudaSetDevice", 2, cudaErrorUnknown);
        { gpusel::DeviceGuard guard(1); }  // reported
        gpusel_emulated::clear_failures();
        gpusel::set_device(0);
        gpusel_emulated::fail_calls_from("cudaSetDevice", 2, cudaErrorUnknown);
        { gpusel::DeviceGuard guard(1); }  // not repeated
        std::fprintf(stderr, "END\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      // exactly the two lines of one report between BEGIN and END
      "BEGIN\ngpusel: gpusel::DeviceGuard could not switch the thread back to cuda:0[^\n]*\n"
      "[^\n]*set_restore_error_handler[^\n]*\nEND\n");
}

TEST(DeviceGuardFailuresDeathTest, AHandlerThatThrowsFallsBackToStderr) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        gpusel_emulated::reset(gpusel_emulated::devices(2));
        gpusel::set_restore_error_handler(&throwing_handler);
        gpusel::set_device(0);
        gpusel_emulated::fail_call("cudaSetDevice", 2, cudaErrorUnknown);
        { gpusel::DeviceGuard guard(1); }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "could not switch the thread back to cuda:0");
}

TEST(DeviceGuardFallbackDeathTest, WithoutTheDriverEntryPointTheRestoreIsEager) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        gpusel_emulated::reset(gpusel_emulated::devices(2));
        gpusel_emulated::fail_calls_from(gpusel_test::kDriverEntryPointCall, 1, cudaErrorNotSupported);
        { gpusel::DeviceGuard guard(1); }
        int raw = -1;
        (void)cudaGetDevice(&raw);
        // The context state is unknown: restore as CUDA before 12 did, and keep the runtime truthful.
        std::exit((raw == 0 ? 0 : 1) | (has_primary_context(0) ? 0 : 2));
      },
      ::testing::ExitedWithCode(0), "");
}
#endif  // GPUSEL_TEST_EMULATED

}  // namespace
