// Specification of the copy engine's run-time options and of what it keeps
// between copies (include/gpusel/copy_engine_options.hpp,
// detail/data/engine/engine_cache.hpp, detail/core/fork_state.hpp). Built against the emulated
// and the real runtime (gpusel_test.hpp).
#include "gpusel/copy_engine_options.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "byte_pattern.hpp"
#include "forked_child.hpp"
#include "gpusel/buffer.hpp"
#include "gpusel_test.hpp"
#include "text_checks.hpp"
#include "tsan_fork_options.hpp"  // its fork tests start threads in the child

namespace {

using gpusel_test::contains;

constexpr std::size_t kMiB = std::size_t{1} << 20;

using gpusel_test::pattern;

// Sets an environment variable for a scope (the settings read it on demand here).
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedVariable() { unsetenv(name_); }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
};

// Puts the options back to their defaults when a test ends.
struct DefaultOptionsAfter {
  ~DefaultOptionsAfter() { gpusel::set_copy_engine_options({}); }
};

TEST(CopyEngineOptions, DefaultsScaleWithTheCoresThisProcessMayUse) {
  const DefaultOptionsAfter restore;
  gpusel::set_copy_engine_options({});
  const gpusel::CopyEngineOptions options = gpusel::copy_engine_options();
  const std::size_t cores = gpusel::detail::usable_cores();
  EXPECT_EQ(options.host_to_device_workers, std::min<std::size_t>(6, cores));
  EXPECT_EQ(options.device_to_host_workers, std::min<std::size_t>(8, cores));
  EXPECT_EQ(options.slots, 2u);
  EXPECT_EQ(options.chunk_bytes, 4 * kMiB);
  EXPECT_GE(cores, 1u);
  EXPECT_LE(cores, std::max(1u, std::thread::hardware_concurrency()));
}

TEST(CopyEngineOptions, SetAndGetAndZeroMeansTheDefault) {
  const DefaultOptionsAfter restore;
  gpusel::set_copy_engine_options({10, 12, 3, 2 * kMiB});
  gpusel::CopyEngineOptions options = gpusel::copy_engine_options();
  EXPECT_EQ(options.host_to_device_workers, 10u);
  EXPECT_EQ(options.device_to_host_workers, 12u);
  EXPECT_EQ(options.slots, 3u);
  EXPECT_EQ(options.chunk_bytes, 2 * kMiB);
  gpusel::set_copy_engine_options({10, 0, 0, 0});
  options = gpusel::copy_engine_options();
  EXPECT_EQ(options.host_to_device_workers, 10u);
  EXPECT_EQ(options.slots, 2u);
  EXPECT_EQ(options.chunk_bytes, 4 * kMiB);
}

TEST(CopyEngineOptions, ValuesOutOfBoundsAreAnErrorAndChangeNothing) {
  const DefaultOptionsAfter restore;
  gpusel::set_copy_engine_options({3, 3, 3, kMiB});
  const gpusel::CopyEngineOptions bad[] = {
      {gpusel::kMaxCopyWorkers + 1, 0, 0, 0},   {0, 17, 0, 0},   {0, 0, 1, 0},
      {0, 0, gpusel::kMaxCopySlots + 1, 0},     {0, 0, 0, 4096}, {0, 0, 0, kMiB + 1},
      {0, 0, 0, gpusel::kMaxCopyChunkBytes * 2}};
  for (const gpusel::CopyEngineOptions& options : bad) {
    try {
      gpusel::set_copy_engine_options(options);
      ADD_FAILURE() << "accepted " << options.host_to_device_workers << " " << options.device_to_host_workers << " "
                    << options.slots << " " << options.chunk_bytes;
    } catch (const gpusel::Error& e) {
      EXPECT_TRUE(contains(e.what(), "gpusel::set_copy_engine_options: ")) << e.what();
    }
  }
  const gpusel::CopyEngineOptions kept = gpusel::copy_engine_options();
  EXPECT_EQ(kept.host_to_device_workers, 3u);
  EXPECT_EQ(kept.chunk_bytes, kMiB);
}

TEST(CopyEngineOptions, TheEnvironmentIsReadIntoTheSettings) {
  const ScopedVariable workers("GPUSEL_COPY_WORKERS", "12");
  const ScopedVariable slots("GPUSEL_COPY_SLOTS", "3");
  const ScopedVariable chunk("GPUSEL_COPY_CHUNK", "2M");
  gpusel::detail::CopyEngineSettings settings;
  gpusel::detail::read_copy_environment(settings);
  EXPECT_EQ(settings.host_to_device_workers.load(), 12u);
  EXPECT_EQ(settings.device_to_host_workers.load(), 12u);
  EXPECT_EQ(settings.slots.load(), 3u);
  EXPECT_EQ(settings.chunk_bytes.load(), 2 * kMiB);
  EXPECT_STREQ(settings.environment_problem, "");
  EXPECT_EQ(gpusel::detail::parse_option("1048576", true), kMiB);
  EXPECT_EQ(gpusel::detail::parse_option("64K", true), std::size_t{64} << 10);
  EXPECT_EQ(gpusel::detail::parse_option("4MiB", true), 4 * kMiB);
  EXPECT_EQ(gpusel::detail::parse_option("4M", false), 0u);
  EXPECT_EQ(gpusel::detail::parse_option("x", false), 0u);
}

TEST(CopyEngineOptions, ABadVariableIsNamedAndTheOthersStillApply) {
  const ScopedVariable workers("GPUSEL_COPY_WORKERS", "lots");
  const ScopedVariable slots("GPUSEL_COPY_SLOTS", "9");
  const ScopedVariable chunk("GPUSEL_COPY_CHUNK", "1M");
  gpusel::detail::CopyEngineSettings settings;
  gpusel::detail::read_copy_environment(settings);
  EXPECT_STREQ(settings.environment_problem, "GPUSEL_COPY_WORKERS=lots: not a number");
  EXPECT_EQ(settings.host_to_device_workers.load(), 0u);
  EXPECT_EQ(settings.slots.load(), 0u);
  EXPECT_EQ(settings.chunk_bytes.load(), kMiB);
}

TEST(CopyEngineOptions, AZeroInAVariableIsNamedAsOutOfRangeNotAsNotANumber) {
  gpusel::detail::CopyEngineSettings settings;
  {
    const ScopedVariable workers("GPUSEL_COPY_WORKERS", "0");
    gpusel::detail::read_copy_environment(settings);
  }
  EXPECT_STREQ(settings.environment_problem,
               "GPUSEL_COPY_WORKERS=0: workers must be 1 to 16 (unset the variable for the default)");
  EXPECT_EQ(settings.host_to_device_workers.load(), 0u);
  gpusel::detail::CopyEngineSettings chunk_settings;
  {
    const ScopedVariable chunk("GPUSEL_COPY_CHUNK", "0M");
    gpusel::detail::read_copy_environment(chunk_settings);
  }
  EXPECT_STREQ(chunk_settings.environment_problem,
               "GPUSEL_COPY_CHUNK=0M: chunk_bytes must be a multiple of 4096 from 65536 to 16777216 (unset the "
               "variable for the default)");
}

TEST(CopyEngine, WorkersSlotsAndChunkSizeTakeEffect) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  const DefaultOptionsAfter restore;
  gpusel::set_copy_engine_options({3, 2, 3, kMiB});
  const auto bytes = pattern(37 * kMiB + 13, 1);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::clear_calls();
#endif
  auto on_gpu = host.to(gpusel::cuda(0));
  auto back = on_gpu.to(gpusel::cpu());
  EXPECT_EQ(std::memcmp(back.data(), bytes.data(), bytes.size()), 0);
#if GPUSEL_TEST_EMULATED
  // Host->device: 3 workers of 13, 13 and 11 MiB, 1 MiB chunks, 3 slots each:
  // 9 chunks when the workers overlap, as few as one worker's 3 when the
  // machine runs them one after another (a worker's chunks go back to the
  // pool for the next). Device->host: 2 workers, whose slots reuse them.
  const int chunks = gpusel_emulated::calls("cudaMallocHost");
  EXPECT_GE(chunks, 3) << "a worker keeps 3 slots in flight";
  EXPECT_LE(chunks, 9);
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamCreateWithFlags"), 3);
  EXPECT_EQ(gpusel_emulated::calls("cudaEventCreateWithFlags"), 9);
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpyAsync"), 38 + 38);
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), static_cast<std::size_t>(chunks) * kMiB);
  gpusel_emulated::clear_calls();
  gpusel::set_copy_engine_options({3, 2, 2, 2 * kMiB});  // another chunk size: the old chunks go
  auto again = host.to(gpusel::cuda(0));
  EXPECT_EQ(again.to_vector(), bytes);
  EXPECT_EQ(gpusel_emulated::calls("cudaFreeHost"), chunks);
  const int new_chunks = gpusel_emulated::calls("cudaMallocHost");
  EXPECT_GE(new_chunks, 2);
  EXPECT_LE(new_chunks, 6);
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), static_cast<std::size_t>(new_chunks) * 2 * kMiB);
#endif
  gpusel::release_cached_resources();
}

TEST(CopyEngine, ThreadsStreamsAndEventsAreKeptUntilReleased) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  const DefaultOptionsAfter restore;
  gpusel::set_copy_engine_options({2, 2, 2, 4 * kMiB});
  const auto bytes = pattern(33 * kMiB, 2);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  auto first = host.to(gpusel::cuda(0));
  EXPECT_EQ(gpusel::detail::EngineCache::instance().threads(), 1u) << "the caller does part 0";
#if GPUSEL_TEST_EMULATED
  EXPECT_EQ(gpusel_emulated::live_streams(), 2);
  EXPECT_EQ(gpusel_emulated::live_events(), 4);
  // 2 workers keep 2 chunks each in flight: 4 pinned when they overlap, as few as 2 when the
  // machine runs them one after the other, so a later copy may pin the rest, never more.
  const std::size_t first_chunks = gpusel_emulated::pinned_host_bytes_in_use() / (4 * kMiB);
  EXPECT_GE(first_chunks, 2u);
  EXPECT_LE(first_chunks, 4u);
  gpusel_emulated::clear_calls();
#endif
  auto second = host.to(gpusel::cuda(0));
  auto back = second.to(gpusel::cpu());
  EXPECT_EQ(std::memcmp(back.data(), bytes.data(), bytes.size()), 0);
#if GPUSEL_TEST_EMULATED
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamCreateWithFlags"), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaEventCreateWithFlags"), 0);
  EXPECT_LE(gpusel_emulated::calls("cudaMallocHost"), 4 - static_cast<int>(first_chunks))
      << "the pool keeps the chunks it pinned and grows only to what the options keep in flight";
#endif
  gpusel::release_cached_resources();
  EXPECT_EQ(gpusel::detail::EngineCache::instance().threads(), 0u);
#if GPUSEL_TEST_EMULATED
  EXPECT_EQ(gpusel_emulated::live_streams(), 0);
  EXPECT_EQ(gpusel_emulated::live_events(), 0);
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), 0u);
  EXPECT_EQ(gpusel_emulated::operations_left_to_stream_destroy(), 0);
#endif
  // And they are made again when needed.
  auto third = host.to(gpusel::cuda(0));
  EXPECT_EQ(third.to_vector(), bytes);
  gpusel::release_cached_resources();
}

TEST(CopyEngine, ConcurrentCopiesShareTheCacheOrMakeTheirOwn) {
  if (auto why = gpusel_test::need_devices(2)) GTEST_SKIP() << *why;
  const DefaultOptionsAfter restore;
  gpusel::set_copy_engine_options({4, 4, 2, kMiB});
  std::vector<std::thread> threads;
  std::vector<int> ok(6, 0);
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([t, &ok] {
      const auto bytes = pattern(17 * kMiB + static_cast<std::size_t>(t) * 4099, static_cast<unsigned>(t));
      gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
      for (int round = 0; round < 3; ++round) {
        auto on_gpu = host.to(gpusel::cuda(t % 2));
        auto back = std::move(on_gpu).to(gpusel::cpu());
        auto copy = back.to(gpusel::cpu());  // host to host, also on the kept threads
        if (copy.to_vector() != bytes) return;
      }
      ok[static_cast<std::size_t>(t)] = 1;
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ok, std::vector<int>(6, 1));
  gpusel::release_cached_resources();
#if GPUSEL_TEST_EMULATED
  EXPECT_EQ(gpusel_emulated::live_streams(), 0);
  EXPECT_EQ(gpusel_emulated::live_events(), 0);
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), 0u);
#endif
}

#if GPUSEL_TEST_EMULATED

using gpusel_test::in_forked_child;

TEST(CopyEngineFork, AChildForgetsTheCachesAndCannotUseCuda) {
  gpusel_test::need_devices(1);
  const auto bytes = pattern(20 * kMiB, 3);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  auto on_gpu = host.to(gpusel::cuda(0));  // CUDA has started; the caches hold chunks, streams, threads
  const std::size_t pinned = gpusel_emulated::pinned_host_bytes_in_use();
  ASSERT_GT(pinned, 0u);
  const int status = in_forked_child([&] {
    if (!gpusel::detail::forked_after_cuda()) return 2;
    if (gpusel::detail::StagingPool::instance().idle_chunks() != 0) return 3;
    if (gpusel::detail::EngineCache::instance().threads() != 0) return 4;
    try {
      gpusel::Buffer<float> x(4, gpusel::cuda(0));
      return 5;
    } catch (const gpusel::Error& e) {
      if (!contains(e.what(), "CUDA cannot be used in a process forked after CUDA started")) return 6;
      if (!contains(e.what(), "gpusel::Buffer(4 elements, 16 bytes, cuda:0)")) return 7;
    }
    try {
      auto back = on_gpu.to(gpusel::cpu());
      return 8;
    } catch (const gpusel::Error& e) {
      if (!contains(e.what(), "CUDA cannot be used in a process forked after CUDA started")) return 9;
    }
    try {
      (void)gpusel::Buffer<float>::pinned(4);  // cudaMallocHost is CUDA work too
      return 12;
    } catch (const gpusel::Error& e) {
      if (!contains(e.what(), "CUDA cannot be used in a process forked after CUDA started")) return 13;
    }
    // Host work goes on, on fresh threads; releasing frees nothing of the parent's.
    auto copy = host.to(gpusel::cpu());
    if (copy.to_vector() != bytes) return 10;
    gpusel::release_cached_resources();
    if (gpusel_emulated::pinned_host_bytes_in_use() != pinned) return 11;
    return 0;
  });
  EXPECT_EQ(status, 0);
  // The parent's caches are its own still.
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), pinned);
  EXPECT_EQ(on_gpu.to(gpusel::cpu()).to_vector(), bytes);
  EXPECT_FALSE(gpusel::detail::forked_after_cuda());
  gpusel::release_cached_resources();
}

// Waits for `pid` at most `seconds`; kills it and returns -1 when it does not end by then.
int wait_at_most(pid_t pid, int seconds) {
  for (int tenth = 0; tenth < seconds * 10; ++tenth) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (done < 0) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGKILL);
  (void)waitpid(pid, nullptr, 0);
  return -1;
}

TEST(CopyEngineFork, ChildrenForkedWhileAnotherThreadCopiesNeverHang) {
  // A fork can land while a worker holds the staging pool's or the cache's lock, or in the middle of a
  // copy: the child must neither wait for a lock nobody will release nor for threads it does not have.
  gpusel_test::need_devices(1);
  const auto bytes = pattern(24 * kMiB, 5);
  const gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  std::atomic<bool> stop{false};
  std::atomic<int> copies{0};
  std::thread copier([&] {
    while (!stop.load()) {
      auto on_gpu = host.to(gpusel::cuda(0));
      auto back = std::move(on_gpu).to(gpusel::cpu());
      if (back.size() == bytes.size()) copies.fetch_add(1);
    }
  });
  while (copies.load() == 0) std::this_thread::yield();
  std::vector<int> statuses;
  for (int child = 0; child < 10; ++child) {
    const pid_t pid = fork();
    if (pid == 0) {
      int status = 0;
      try {
        if (host.to(gpusel::cpu()).to_vector() != bytes) status = 2;  // host work, on fresh threads
        try {
          (void)host.to(gpusel::cuda(0));
          status = 3;
        } catch (const gpusel::Error& e) {
          if (!contains(e.what(), "CUDA cannot be used in a process forked after CUDA started")) status = 4;
        }
      } catch (...) {
        status = 5;
      }
      _exit(status);
    }
    statuses.push_back(pid < 0 ? -1 : wait_at_most(pid, 20));
  }
  stop.store(true);
  copier.join();
  EXPECT_EQ(statuses, std::vector<int>(10, 0)) << "-1: a child hung (killed after 20 s) or crashed";
  gpusel::release_cached_resources();
}

TEST(CopyEngineFork, AChildThatExitsWithKeptThreadsEndsCleanly) {
  gpusel_test::need_devices(1);
  const auto bytes = pattern(64 * kMiB, 4);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  const int status = in_forked_child([&] {
    auto copy = host.to(gpusel::cpu());  // keeps worker threads in the child's cache
    if (copy.to_vector() != bytes) return 2;
    if (gpusel::detail::copy_engine_settings().cores > 1 && gpusel::detail::EngineCache::instance().threads() == 0)
      return 3;
    std::exit(0);  // runs the cache's destructor: it joins the threads
  });
  EXPECT_EQ(status, 0);
}

#endif

}  // namespace
