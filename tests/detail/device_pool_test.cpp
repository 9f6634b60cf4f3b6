// Specification of device memory from CUDA's stream-ordered allocator
// (include/gpusel/detail/data/memory/device_pool.hpp, Note [Device memory from a pool])
// and of the rule that keeps freed memory from being reused under running work
// (detail/data/memory/stream_uses.hpp, Note [When freed device memory is reused]), seen
// through Buffer. Built against the emulated and the real runtime (gpusel_test.hpp).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "forked_child.hpp"
#include "gpusel/buffer.hpp"
#include "gpusel/detail/data/memory/device_pool.hpp"
#include "gpusel/guard.hpp"
#include "gpusel/stream.hpp"
#include "gpusel_test.hpp"
#include "text_checks.hpp"
#include "tsan_fork_options.hpp"  // its fork tests start threads in the child

namespace {

using gpusel_test::contains;

// Sets an environment variable for a scope (read when a pool is made).
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedVariable() { unsetenv(name_); }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
};

TEST(DevicePool, AReleaseThresholdThatIsNotASizeIsAnError) {
  const ScopedVariable variable("GPUSEL_POOL_RELEASE_THRESHOLD", "lots");
  try {
    (void)gpusel::detail::pool_release_threshold();
    FAIL() << "accepted";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "GPUSEL_POOL_RELEASE_THRESHOLD=lots: gpusel::parse_memory_size")) << e.what();
  }
}

TEST(DevicePool, TheReleaseThresholdIsOneGiBUnlessTheEnvironmentSaysOtherwise) {
  EXPECT_EQ(gpusel::detail::pool_release_threshold(), std::uint64_t{1} << 30);
  const ScopedVariable variable("GPUSEL_POOL_RELEASE_THRESHOLD", "256MiB");
  EXPECT_EQ(gpusel::detail::pool_release_threshold(), std::uint64_t{256} << 20);
}

// Every stream use of a Buffer in host memory needs no record (the Note).
TEST(DevicePool, RecordingAStreamOnAHostBufferDoesNothing) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::Stream stream(gpusel::cuda(0));
  gpusel::Buffer<int> host({1, 2}, gpusel::cpu());
  host.record_stream(stream);
  auto pinned = gpusel::Buffer<int>::pinned(2);
  pinned.record_stream(stream);
  gpusel::Buffer<int> empty;
  empty.record_stream(stream);
}

TEST(DevicePool, RecordingAMovedFromStreamIsAnError) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::Stream stream(gpusel::cuda(0));
  gpusel::Stream taken = std::move(stream);
  gpusel::Buffer<int> on_gpu({1, 2}, gpusel::cuda(0));
  EXPECT_THROW(on_gpu.record_stream(stream), gpusel::Error);
}

#if GPUSEL_TEST_EMULATED

namespace emu = gpusel_emulated;

// A machine of `count` devices of `memory` bytes, with gpusel's caches (the pools) dropped first.
void machine(int count, std::size_t memory = std::size_t{16} << 30, bool pools = true) {
  gpusel::release_cached_resources();
  emu::Config config = emu::devices(count, memory);
  for (auto& device : config.devices) device.memory_pools = pools;
  emu::reset(config);
}

std::size_t free_memory(int device) {
  gpusel::DeviceGuard guard(device);
  std::size_t free_bytes = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  return free_bytes;
}

TEST(DevicePoolEmulated, BuffersComeFromOnePoolPerDeviceAndReuseItsMemory) {
  machine(1);
  emu::clear_calls();
  const void* first = nullptr;
  {
    gpusel::Buffer<float> x(1024, gpusel::cuda(0));
    first = x.data();
    EXPECT_EQ(emu::bytes_allocated(0), 4096u);
  }
  EXPECT_EQ(emu::bytes_allocated(0), 0u) << "freed";
  gpusel::synchronize(gpusel::cuda(0));  // the queued free runs
  gpusel::Buffer<float> y(1024, gpusel::cuda(0));
  EXPECT_EQ(y.data(), first) << "the pool handed the same memory out again";
  EXPECT_EQ(emu::calls("cudaMemPoolCreate"), 1);
  EXPECT_EQ(emu::calls("cudaMallocFromPoolAsync"), 2);
  EXPECT_EQ(emu::calls("cudaFreeAsync"), 1);
  EXPECT_EQ(emu::calls("cudaMalloc"), 0);
  EXPECT_EQ(emu::calls("cudaFree"), 0) << "nothing waits for the whole device";
  EXPECT_EQ(emu::live_pools(), 1);
}

TEST(DevicePoolEmulated, WithoutPoolsAFailedCudaMallocLeaksNothing) {
  machine(1, std::size_t{16} << 30, /*pools=*/false);
  emu::fail_call("cudaMalloc", 1, cudaErrorMemoryAllocation);
  EXPECT_THROW(gpusel::Buffer<int>(4, gpusel::cuda(0)), gpusel::OutOfMemory);
  EXPECT_EQ(emu::bytes_in_use(0), 0u);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST(DevicePoolEmulated, CachedMemoryShowsAsUsedUntilReleaseCachedResourcesTrimsIt) {
  machine(1);
  const std::size_t all = free_memory(0);
  { gpusel::Buffer<std::uint8_t> x(std::size_t{64} << 20, gpusel::cuda(0)); }
  gpusel::synchronize(gpusel::cuda(0));
  EXPECT_EQ(free_memory(0), all - (std::size_t{64} << 20)) << "under the 1 GiB threshold: kept, and counted as used";
  gpusel::release_cached_resources();
  EXPECT_EQ(free_memory(0), all) << "trimmed: given back";
  EXPECT_EQ(emu::live_pools(), 0);
  gpusel::Buffer<int> again({1, 2}, gpusel::cuda(0));
  EXPECT_EQ(again.to_vector(), (std::vector<int>{1, 2})) << "a new pool after the release";
  EXPECT_EQ(emu::live_pools(), 1);
}

TEST(DevicePoolEmulated, ReleaseCachedResourcesLeavesLiveBuffersAlone) {
  machine(1);
  gpusel::Buffer<int> kept({1, 2, 3}, gpusel::cuda(0));
  gpusel::release_cached_resources();
  EXPECT_EQ(kept.to_vector(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(emu::bytes_allocated(0), 12u);
  kept = gpusel::Buffer<int>();
  EXPECT_EQ(emu::bytes_allocated(0), 0u);
  gpusel::synchronize(gpusel::cuda(0));
  EXPECT_EQ(emu::live_pools(), 0) << "the destroyed pool went with its last Buffer";
  EXPECT_EQ(emu::bytes_in_use(0), 0u);
}

TEST(DevicePoolEmulated, TheReleaseThresholdComesFromTheEnvironment) {
  machine(1);
  const ScopedVariable variable("GPUSEL_POOL_RELEASE_THRESHOLD", "0B");
  { gpusel::Buffer<std::uint8_t> x(std::size_t{8} << 20, gpusel::cuda(0)); }
  gpusel::synchronize(gpusel::cuda(0));
  EXPECT_EQ(emu::bytes_in_use(0), 0u) << "a threshold of 0 gives everything back at a synchronization";
}

TEST(DevicePoolEmulated, ABadReleaseThresholdFailsTheAllocationAndMakesNothing) {
  machine(1);
  const ScopedVariable variable("GPUSEL_POOL_RELEASE_THRESHOLD", "-1");
  try {
    gpusel::Buffer<int> x(4, gpusel::cuda(0));
    FAIL() << "made";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "GPUSEL_POOL_RELEASE_THRESHOLD=-1")) << e.what();
  }
  EXPECT_EQ(emu::live_pools(), 0);
  EXPECT_EQ(emu::bytes_in_use(0), 0u);
}

TEST(DevicePoolEmulated, DevicesWithoutPoolsGetCudaMalloc) {
  machine(1, std::size_t{16} << 30, /*pools=*/false);
  emu::clear_calls();
  {
    gpusel::Buffer<int> x({1, 2, 3}, gpusel::cuda(0));
    EXPECT_EQ(x.to_vector(), (std::vector<int>{1, 2, 3}));
  }
  EXPECT_EQ(emu::calls("cudaMalloc"), 1);
  EXPECT_EQ(emu::calls("cudaFree"), 1);
  EXPECT_EQ(emu::calls("cudaMemPoolCreate"), 0);
  EXPECT_EQ(emu::calls("cudaFreeAsync"), 0);
  EXPECT_EQ(emu::bytes_in_use(0), 0u) << "cudaFree gives it back at once";
}

TEST(DevicePoolEmulated, FreesOnItsOwnDeviceFromAnotherThreadAndAnotherCurrentDevice) {
  machine(2);
  auto x = std::make_unique<gpusel::Buffer<int>>(std::vector<int>{1, 2}, gpusel::cuda(1));
  ASSERT_FALSE(emu::has_primary_context(0));
  std::thread([&] {
    EXPECT_EQ(gpusel::current_device(), 0);
    x.reset();
    EXPECT_EQ(gpusel::current_device(), 0) << "the thread's device is what it was";
  }).join();
  EXPECT_EQ(emu::bytes_allocated(1), 0u);
  EXPECT_FALSE(emu::has_primary_context(0)) << "freeing on cuda:1 made no context on cuda:0";
  gpusel::set_device(0);
  gpusel::Buffer<int> y({3}, gpusel::cuda(1));
  gpusel::set_device(1);
  {
    gpusel::DeviceGuard guard(0);
    y = gpusel::Buffer<int>();
  }
  EXPECT_EQ(emu::bytes_allocated(1), 0u);
}

TEST(DevicePoolEmulated, NoPoolAndNoContextOnADeviceTheProgramDoesNotUse) {
  machine(3);
  gpusel::Buffer<int> on_2({1, 2}, gpusel::cuda(2));
  EXPECT_EQ(emu::live_pools(), 1);
  EXPECT_EQ(emu::primary_context_count(), 1);
  EXPECT_TRUE(emu::has_primary_context(2));
  gpusel::release_cached_resources();
  EXPECT_EQ(emu::primary_context_count(), 1) << "releasing the pools made no context either";
}

TEST(DevicePoolEmulated, APeerThatCopiesTheMemoryDirectlyGetsAccessToThePool) {
  machine(2);
  gpusel::Buffer<int> on_0({1, 2, 3}, gpusel::cuda(0));
  auto on_1 = on_0.to(gpusel::cuda(1));
  EXPECT_EQ(on_1.to_vector(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(emu::calls("cudaMemPoolSetAccess"), 1);
  EXPECT_EQ(emu::peer_copies(), 1) << "cuda:1 reads cuda:0's pool memory directly";
  EXPECT_EQ(emu::staged_device_copies(), 0);
  gpusel::release_cached_resources();
  gpusel::Buffer<int> again({4, 5}, gpusel::cuda(0));
  EXPECT_EQ(again.to(gpusel::cuda(1)).to_vector(), (std::vector<int>{4, 5}));
  EXPECT_EQ(emu::peer_copies(), 2) << "the new pool is granted access again";
}

TEST(DevicePoolEmulated, APoolThatCannotGrantAccessStillCopiesStaged) {
  machine(2);
  gpusel::Buffer<int> on_0({1, 2, 3}, gpusel::cuda(0));
  emu::fail_call("cudaMemPoolSetAccess", 1, cudaErrorUnknown);
  EXPECT_EQ(on_0.to(gpusel::cuda(1)).to_vector(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(emu::staged_device_copies(), 1);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "the failure was not left behind";
}

// --- the reuse rule: Note [When freed device memory is reused] --------------

// Queues a copy of `value`s into `memory` on `stream` from a pinned buffer
// (pending in the emulation until something waits for the stream).
void queue_write(gpusel::Buffer<int>& memory, const gpusel::Buffer<int>& pinned, gpusel::StreamView stream) {
  ASSERT_EQ(cudaMemcpyAsync(memory.data(), pinned.data(), memory.bytes(), cudaMemcpyHostToDevice, stream.handle()),
            cudaSuccess);
}

// After `drop` frees a Buffer that `stream`'s queued copy still writes, makes
// a new Buffer, which the pool may give the same memory, fills it with zeros,
// lets the stream finish and says whether the new Buffer kept its zeros.
template <class Drop>
bool new_buffer_survives(gpusel::StreamView stream, const Drop& drop, bool& same_memory) {
  const int* old_memory = drop();
  EXPECT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);  // the free runs; not the non-blocking stream
  gpusel::Buffer<int> reused(64, gpusel::cuda(0));
  same_memory = reused.data() == old_memory;
  reused.fill(0);
  stream.synchronize();
  return reused.to_vector() == std::vector<int>(64, 0);
}

TEST(DevicePoolEmulated, ANonBlockingStreamsWorkIsWaitedForOnceRecorded) {
  machine(1);
  auto pinned = gpusel::Buffer<int>::pinned(64);
  pinned.fill(7);
  gpusel::Stream stream(gpusel::cuda(0), gpusel::StreamOrder::independent);
  bool same_memory = false;
  EXPECT_TRUE(new_buffer_survives(
      stream,
      [&] {
        gpusel::Buffer<int> used(64, gpusel::cuda(0));
        queue_write(used, pinned, stream);
        used.record_stream(stream);
        return used.data();
      },
      same_memory))
      << "the queued copy landed in memory the pool had handed out again";
  EXPECT_TRUE(same_memory) << "the test needs the memory reused";
  EXPECT_EQ(emu::calls("cudaStreamWaitEvent"), 1);
  EXPECT_EQ(emu::live_events(), 0) << "the event went with the Buffer";
}

// What record_stream is for, shown: without it the copy lands in the next
// Buffer (the emulation runs it late, as a busy GPU would).
TEST(DevicePoolEmulated, WithoutARecordANonBlockingStreamsWorkLandsInTheNextBuffer) {
  machine(1);
  auto pinned = gpusel::Buffer<int>::pinned(64);
  pinned.fill(7);
  gpusel::Stream stream(gpusel::cuda(0), gpusel::StreamOrder::independent);
  bool same_memory = false;
  EXPECT_FALSE(new_buffer_survives(
      stream,
      [&] {
        gpusel::Buffer<int> used(64, gpusel::cuda(0));
        queue_write(used, pinned, stream);
        return used.data();
      },
      same_memory));
  EXPECT_TRUE(same_memory);
}

TEST(DevicePoolEmulated, ABlockingStreamsWorkNeedsNoRecord) {
  machine(1);
  auto pinned = gpusel::Buffer<int>::pinned(64);
  pinned.fill(7);
  gpusel::Stream stream(gpusel::cuda(0));  // StreamOrder::with_default_stream
  bool same_memory = false;
  EXPECT_TRUE(new_buffer_survives(
      stream,
      [&] {
        gpusel::Buffer<int> used(64, gpusel::cuda(0));
        queue_write(used, pinned, stream);
        used.record_stream(stream);  // allowed, and costs nothing
        return used.data();
      },
      same_memory));
  EXPECT_TRUE(same_memory);
  EXPECT_EQ(emu::calls("cudaEventCreateWithFlags"), 0) << "the legacy stream waits for a blocking stream anyway";
}

TEST(DevicePoolEmulated, AnAsyncToOnANonBlockingStreamRecordsTheStreamForItsResult) {
  machine(1);
  auto pinned = gpusel::Buffer<int>::pinned(64);
  pinned.fill(7);
  gpusel::Stream stream(gpusel::cuda(0), gpusel::StreamOrder::independent);
  bool same_memory = false;
  EXPECT_TRUE(new_buffer_survives(
      stream,
      [&] {
        gpusel::Buffer<int> result = pinned.to(gpusel::cuda(0), stream);  // queued, then dropped before it ran
        return result.data();
      },
      same_memory));
  EXPECT_TRUE(same_memory);
}

// A stream a framework owns (c10's pool streams are non-blocking), made by
// hand here: record_stream asks the runtime how it was made.
class ForeignStream {
 public:
  explicit ForeignStream(unsigned flags) { EXPECT_EQ(cudaStreamCreateWithFlags(&handle_, flags), cudaSuccess); }
  ~ForeignStream() { EXPECT_EQ(cudaStreamDestroy(handle_), cudaSuccess); }
  ForeignStream(const ForeignStream&) = delete;
  ForeignStream& operator=(const ForeignStream&) = delete;
  gpusel::StreamView view() const { return gpusel::StreamView(handle_, gpusel::cuda(0)); }

 private:
  cudaStream_t handle_ = nullptr;
};

TEST(DevicePoolEmulated, ANonBlockingStreamSomeoneElseOwnsIsWaitedForOnceRecorded) {
  machine(1);
  auto pinned = gpusel::Buffer<int>::pinned(64);
  pinned.fill(7);
  const ForeignStream foreign(cudaStreamNonBlocking);
  bool same_memory = false;
  EXPECT_TRUE(new_buffer_survives(
      foreign.view(),
      [&] {
        gpusel::Buffer<int> used(64, gpusel::cuda(0));
        queue_write(used, pinned, foreign.view());
        used.record_stream(foreign.view());
        return used.data();
      },
      same_memory));
  EXPECT_TRUE(same_memory);
  EXPECT_EQ(emu::calls("cudaStreamGetFlags"), 1);
  EXPECT_EQ(emu::calls("cudaStreamWaitEvent"), 1);
}

TEST(DevicePoolEmulated, ABlockingStreamSomeoneElseOwnsNeedsNoEvent) {
  machine(1);
  const ForeignStream foreign(cudaStreamDefault);
  gpusel::Buffer<int> used(64, gpusel::cuda(0));
  used.record_stream(foreign.view());
  EXPECT_EQ(emu::calls("cudaStreamGetFlags"), 1);
  EXPECT_EQ(emu::calls("cudaEventCreateWithFlags"), 0) << "the legacy stream waits for a blocking stream anyway";
}

// The legacy stream waits for the per-thread default stream, and 0 is one of
// the two (CUDA's "Stream synchronization behavior"): nothing to record or ask.
TEST(DevicePoolEmulated, TheDefaultStreamsOfTheBuffersDeviceNeedNoEvent) {
  machine(2);
  gpusel::Buffer<int> used(64, gpusel::cuda(1));
  for (const gpusel::StreamView view :
       {gpusel::StreamView::legacy_default(gpusel::cuda(1)), gpusel::StreamView::per_thread_default(gpusel::cuda(1)),
        gpusel::StreamView(nullptr, gpusel::cuda(1))})
    used.record_stream(view);
  EXPECT_EQ(emu::calls("cudaStreamGetFlags"), 0);
  EXPECT_EQ(emu::calls("cudaEventCreateWithFlags"), 0);
  used.record_stream(gpusel::StreamView::legacy_default(gpusel::cuda(0)));
  EXPECT_EQ(emu::live_events(), 1) << "another device's default stream is recorded";
}

TEST(DevicePoolEmulated, AHandleThatIsNoStreamIsAnErrorNamingTheDevice) {
  machine(1);
  cudaStream_t gone = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&gone, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(gone), cudaSuccess);
  gpusel::Buffer<int> used(64, gpusel::cuda(0));
  try {
    used.record_stream(gpusel::StreamView(gone, gpusel::cuda(0)));
    FAIL() << "a destroyed stream was recorded";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidResourceHandle);
    EXPECT_TRUE(contains(e.what(), "gpusel::Buffer::record_stream")) << e.what();
    EXPECT_TRUE(contains(e.what(), "cudaStreamGetFlags(cuda:0)")) << e.what();
  }
  EXPECT_EQ(emu::live_events(), 0);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

// to(device, stream) records the stream for its result: when asking how the
// stream was made fails, the result is freed after the copy and nothing leaks.
TEST(DevicePoolEmulated, AnAsyncToWhoseStreamCannotBeAskedLeavesNothingBehind) {
  machine(1);
  auto pinned = gpusel::Buffer<int>::pinned(64);
  pinned.fill(7);
  const ForeignStream foreign(cudaStreamNonBlocking);
  emu::fail_call("cudaStreamGetFlags", 1, cudaErrorUnknown);
  EXPECT_THROW((void)pinned.to(gpusel::cuda(0), foreign.view()), gpusel::Error);
  EXPECT_TRUE(foreign.view().ready()) << "the copy finished before its target was freed";
  EXPECT_EQ(emu::bytes_allocated(0), 0u);
  EXPECT_EQ(emu::live_events(), 0);
}

TEST(DevicePoolEmulated, RecordingAStreamAgainDropsTheEventsOfFinishedWork) {
  machine(1);
  gpusel::Stream stream(gpusel::cuda(0), gpusel::StreamOrder::independent);
  gpusel::Buffer<int> used(64, gpusel::cuda(0));
  for (int i = 0; i < 5; ++i) {
    used.record_stream(stream);
    stream.synchronize();
  }
  EXPECT_EQ(emu::live_events(), 1);
}

TEST(DevicePoolEmulated, AFailedRecordThrowsAndLeavesNothingBehind) {
  machine(1);
  gpusel::Stream stream(gpusel::cuda(0), gpusel::StreamOrder::independent);
  gpusel::Buffer<int> used(64, gpusel::cuda(0));
  for (const char* call : {"cudaEventCreateWithFlags", "cudaEventRecord"}) {
    emu::fail_call(call, 1, cudaErrorUnknown);
    try {
      used.record_stream(stream);
      ADD_FAILURE() << call << " failed and record_stream did not say so";
    } catch (const gpusel::Error& e) {
      EXPECT_EQ(e.code(), cudaErrorUnknown);
      EXPECT_TRUE(contains(e.what(), "gpusel::Buffer::record_stream")) << e.what();
      EXPECT_TRUE(contains(e.what(), call)) << e.what();
    }
    EXPECT_EQ(emu::live_events(), 0) << call;
  }
}

TEST(DevicePoolEmulated, AWaitThatCannotBeQueuedIsMadeOnTheHost) {
  machine(1);
  auto pinned = gpusel::Buffer<int>::pinned(64);
  pinned.fill(7);
  gpusel::Stream stream(gpusel::cuda(0), gpusel::StreamOrder::independent);
  bool same_memory = false;
  EXPECT_TRUE(new_buffer_survives(
      stream,
      [&] {
        gpusel::Buffer<int> used(64, gpusel::cuda(0));
        queue_write(used, pinned, stream);
        used.record_stream(stream);
        emu::fail_call("cudaStreamWaitEvent", 1, cudaErrorUnknown);
        return used.data();
      },
      same_memory));
  EXPECT_EQ(emu::calls("cudaEventSynchronize"), 1);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

// --- running out, and failures of every new call ------------------------------

TEST(DevicePoolEmulated, RunningOutIsAnOutOfMemoryThatSaysHowMuchIsFree) {
  machine(1, std::size_t{1} << 20);
  try {
    gpusel::Buffer<float> x(1 << 20, gpusel::cuda(0));
    FAIL() << "4 MiB fit in 1 MiB";
  } catch (const gpusel::OutOfMemory& e) {
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
    EXPECT_TRUE(contains(e.what(),
                         "gpusel::Buffer(1048576 elements, 4194304 bytes, cuda:0): "
                         "cudaMallocFromPoolAsync(cuda:0)"))
        << e.what();
    EXPECT_TRUE(contains(e.what(), "cuda:0 has 1 MiB free of 1 MiB")) << e.what();
  }
  EXPECT_EQ(emu::bytes_allocated(0), 0u);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

// A free still queued on the legacy stream can be reused in stream order there,
// but not by an allocation on another stream: that one runs out, and gpusel
// waits for the queued frees, trims the pool and tries again.
TEST(DevicePoolEmulated, FreesStillQueuedAreWaitedForBeforeMemoryRunsOut) {
  machine(1, std::size_t{1} << 20);
  auto pinned = gpusel::Buffer<std::uint8_t>::pinned(std::size_t{600} << 10);
  pinned.fill(3);
  gpusel::Stream stream(gpusel::cuda(0), gpusel::StreamOrder::independent);
  { gpusel::Buffer<std::uint8_t> large(std::size_t{600} << 10, gpusel::cuda(0)); }  // its free is still queued
  emu::clear_calls();
  auto copy = pinned.to(gpusel::cuda(0), stream);
  stream.synchronize();
  EXPECT_EQ(copy.to_vector(), std::vector<std::uint8_t>(std::size_t{600} << 10, 3));
  EXPECT_EQ(emu::calls("cudaMallocFromPoolAsync"), 2) << "ran out once, then tried again";
  EXPECT_EQ(emu::calls("cudaMemPoolTrimTo"), 1);
  EXPECT_EQ(emu::bytes_allocated(0), std::size_t{600} << 10);
}

TEST(DevicePoolEmulated, EveryNewCallThatFailsFailsTheAllocationAndLeaksNothing) {
  for (const char* call :
       {"cudaDeviceGetAttribute", "cudaMemPoolCreate", "cudaMemPoolSetAttribute", "cudaMallocFromPoolAsync"}) {
    machine(1);
    const bool allocating = std::string(call) == "cudaMemPoolCreate" || std::string(call) == "cudaMallocFromPoolAsync";
    emu::fail_calls_from(call, 1, cudaErrorMemoryAllocation);  // a pool allocation that runs out is retried once
    try {
      gpusel::Buffer<int> x({1, 2}, gpusel::cuda(0));
      ADD_FAILURE() << call << " failed and the Buffer was made";
    } catch (const gpusel::Error& e) {
      EXPECT_EQ(dynamic_cast<const gpusel::OutOfMemory*>(&e) != nullptr, allocating)
          << call << ": only a call that allocates runs out of memory: " << e.what();
      EXPECT_EQ(e.code(), cudaErrorMemoryAllocation) << e.what();
      EXPECT_TRUE(contains(e.what(), std::string("gpusel::Buffer(2 elements, 8 bytes, cuda:0): ") + call)) << e.what();
    }
    emu::clear_failures();
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << call;
    EXPECT_EQ(emu::bytes_allocated(0), 0u) << call;
    gpusel::release_cached_resources();
    EXPECT_EQ(emu::live_pools(), 0) << call;
    EXPECT_EQ(emu::bytes_in_use(0), 0u) << call;
    gpusel::Buffer<int> after({3}, gpusel::cuda(0));
    EXPECT_EQ(after.to_vector(), std::vector<int>{3}) << call << ": the next allocation works";
  }
}

TEST(DevicePoolEmulated, AFreeThatCannotBeQueuedIsMadeByCudaFree) {
  machine(1);
  {
    gpusel::Buffer<int> x({1, 2}, gpusel::cuda(0));
    emu::fail_call("cudaFreeAsync", 1, cudaErrorUnknown);
  }
  EXPECT_EQ(emu::calls("cudaFree"), 1);
  EXPECT_EQ(emu::bytes_allocated(0), 0u);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST(DevicePoolEmulated, FailuresWhileReleasingThePoolsAreSwallowed) {
  for (const char* call : {"cudaDeviceSynchronize", "cudaMemPoolTrimTo", "cudaMemPoolDestroy"}) {
    machine(1);
    { gpusel::Buffer<int> x({1, 2}, gpusel::cuda(0)); }
    emu::fail_call(call, 1, cudaErrorUnknown);
    gpusel::release_cached_resources();  // noexcept
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << call;
    gpusel::Buffer<int> after({3}, gpusel::cuda(0));
    EXPECT_EQ(after.to_vector(), std::vector<int>{3}) << call;
  }
}

using gpusel_test::in_forked_child;

TEST(DevicePoolEmulated, AForkedChildForgetsThePoolsWithoutACall) {
  machine(1);
  gpusel::Buffer<int> parent({1, 2}, gpusel::cuda(0));
  emu::clear_calls();
  const int status = in_forked_child([] {
    gpusel::release_cached_resources();
    try {
      gpusel::Buffer<int> x(4, gpusel::cuda(0));
      return 2;
    } catch (const gpusel::Error&) {
    }
    return emu::calls("cudaMemPoolTrimTo") + emu::calls("cudaMemPoolDestroy") == 0 ? 0 : 3;
  });
  EXPECT_EQ(status, 0);
  EXPECT_EQ(parent.to_vector(), (std::vector<int>{1, 2}));
}

#endif

}  // namespace
