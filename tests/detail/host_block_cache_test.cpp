// Tests of the host block cache and the drains it decides
// (include/gpusel/detail/data/memory/host_block_cache.hpp, detail/data/memory/streaming_copy.hpp):
// freed large host blocks are reused by best fit, within the cap, trimmed by
// release_cached_resources(), never while in use, from many threads, forgotten
// in a forked child; and on every drain path (prefaulted fresh memory,
// streaming stores into a reused block, memory gpusel does not know) the bytes
// arrive exactly. The GPU paths are built against the emulated runtime; the
// real-runtime build checks the host side and skips the rest without a GPU.
#include "gpusel/detail/data/memory/host_block_cache.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "byte_pattern.hpp"
#include "gpusel/buffer.hpp"
#include "gpusel/cached_resources.hpp"
#include "gpusel/detail/data/memory/host_prefault.hpp"
#include "gpusel/detail/data/memory/streaming_copy.hpp"
#include "gpusel_test.hpp"
#include "tsan_fork_options.hpp"  // its fork tests start threads in the child

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

gpusel::detail::HostBlocks& blocks() { return gpusel::detail::HostBlocks::instance(); }

// Empties the cache and sets its limit for one test; puts the limit back after.
class HostBlockCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    limit_ = blocks().counts().limit_bytes;
    gpusel::release_cached_resources();
    blocks().set_limit(std::size_t{1} << 30);
  }
  void TearDown() override {
    gpusel::release_cached_resources();
    blocks().set_limit(limit_);
  }

 private:
  std::size_t limit_ = 0;
};

// Test fixtures of one name per group, so each group's tests share SetUp.
using HostBlockCache = HostBlockCacheTest;

TEST_F(HostBlockCache, AFreedLargeBlockIsReusedForTheSameSize) {
  const void* first = nullptr;
  {
    gpusel::Buffer<char> buffer(24 * kMiB, gpusel::cpu());
    first = buffer.data();
    EXPECT_EQ(blocks().counts().cached_blocks, 0u) << "a live block is never in the cache";
  }
  EXPECT_EQ(blocks().counts().cached_blocks, 1u);
  EXPECT_EQ(blocks().counts().cached_bytes, 24 * kMiB);
  const std::uint64_t reused = blocks().counts().reused;
  gpusel::Buffer<char> again(24 * kMiB, gpusel::cpu());
  EXPECT_EQ(static_cast<const void*>(again.data()), first);
  EXPECT_EQ(blocks().counts().reused, reused + 1);
  EXPECT_EQ(blocks().counts().cached_blocks, 0u);
}

TEST_F(HostBlockCache, ReusesTheSmallestBlockThatFitsASlightlySmallerSize) {
  const void* small = nullptr;
  {
    gpusel::Buffer<char> a(64 * kMiB, gpusel::cpu());
    gpusel::Buffer<char> b(32 * kMiB, gpusel::cpu());
    gpusel::Buffer<char> c(36 * kMiB, gpusel::cpu());
    small = b.data();
  }
  EXPECT_EQ(blocks().counts().cached_blocks, 3u);
  gpusel::Buffer<char> slightly_smaller(31 * kMiB + 5, gpusel::cpu());  // 32 MiB rounded: b, not c
  EXPECT_EQ(static_cast<const void*>(slightly_smaller.data()), small);
  // Much smaller: reusing 36 or 64 MiB for 8 would keep too much unused.
  const std::uint64_t reused = blocks().counts().reused;
  gpusel::Buffer<char> much_smaller(8 * kMiB, gpusel::cpu());
  EXPECT_EQ(blocks().counts().reused, reused);
  EXPECT_EQ(blocks().counts().cached_blocks, 2u);
  // Larger than every block: a fresh one.
  gpusel::Buffer<char> larger(80 * kMiB, gpusel::cpu());
  EXPECT_EQ(blocks().counts().reused, reused);
}

TEST_F(HostBlockCache, TwoLiveBuffersNeverShareABlock) {
  std::vector<gpusel::Buffer<char>> live;
  { gpusel::Buffer<char> freed(16 * kMiB, gpusel::cpu()); }
  for (int i = 0; i < 3; ++i) live.emplace_back(16 * kMiB, gpusel::cpu());
  EXPECT_NE(live[0].data(), live[1].data());
  EXPECT_NE(live[1].data(), live[2].data());
  EXPECT_NE(live[0].data(), live[2].data());
  EXPECT_EQ(blocks().counts().live_blocks, 3u);
}

TEST_F(HostBlockCache, SmallBlocksAreNotCached) {
  { gpusel::Buffer<char> small(4 * kMiB - 1, gpusel::cpu()); }
  { gpusel::Buffer<char> tiny(100, gpusel::cpu()); }
  EXPECT_EQ(blocks().counts().cached_blocks, 0u);
}

TEST_F(HostBlockCache, KeepsNoMoreThanItsLimitInBytesAndBlocks) {
  blocks().set_limit(40 * kMiB);
  for (int i = 0; i < 4; ++i) {
    gpusel::Buffer<char> a(16 * kMiB, gpusel::cpu());
    gpusel::Buffer<char> b(16 * kMiB, gpusel::cpu());
    gpusel::Buffer<char> c(16 * kMiB, gpusel::cpu());
  }
  EXPECT_EQ(blocks().counts().cached_blocks, 2u);
  EXPECT_EQ(blocks().counts().cached_bytes, 32 * kMiB);
  { gpusel::Buffer<char> too_large(48 * kMiB, gpusel::cpu()); }
  EXPECT_EQ(blocks().counts().cached_bytes, 32 * kMiB) << "a block above the limit is freed at once";

  blocks().set_limit(std::size_t{1} << 30);
  {
    std::vector<gpusel::Buffer<char>> many;
    for (std::size_t i = 0; i < gpusel::detail::kMaxCachedHostBlocks + 3; ++i)
      many.emplace_back((4 + 2 * i) * kMiB, gpusel::cpu());  // sizes no cached block can serve
  }
  EXPECT_EQ(blocks().counts().cached_blocks, gpusel::detail::kMaxCachedHostBlocks);

  blocks().set_limit(10 * kMiB);
  EXPECT_LE(blocks().counts().cached_bytes, 10 * kMiB) << "a lower limit frees what no longer fits";
  blocks().set_limit(0);
  EXPECT_EQ(blocks().counts().cached_blocks, 0u);
  { gpusel::Buffer<char> off(16 * kMiB, gpusel::cpu()); }
  EXPECT_EQ(blocks().counts().cached_blocks, 0u) << "a limit of 0 turns the cache off";
}

TEST_F(HostBlockCache, ReleaseCachedResourcesFreesTheCachedBlocks) {
  {
    gpusel::Buffer<char> a(16 * kMiB, gpusel::cpu());
    gpusel::Buffer<char> b(24 * kMiB, gpusel::cpu());
  }
  EXPECT_EQ(blocks().counts().cached_blocks, 2u);
  gpusel::release_cached_resources();
  EXPECT_EQ(blocks().counts().cached_blocks, 0u);
  EXPECT_EQ(blocks().counts().cached_bytes, 0u);
}

TEST_F(HostBlockCache, ManyThreadsNeverShareALiveBlock) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      for (int round = 0; round < 12; ++round) {
        const std::size_t size = (8 + 2 * static_cast<std::size_t>((t + round) % 3)) * kMiB;
        gpusel::Buffer<std::uint8_t> buffer(size, gpusel::cpu());
        const auto mark = static_cast<std::uint8_t>(t * 16 + round);
        std::memset(buffer.data(), mark, size);
        std::this_thread::yield();
        for (std::size_t i = 0; i < size; i += 4096)
          if (buffer.data()[i] != mark) failures.fetch_add(1);
        if (round % 4 == 0) gpusel::release_cached_resources();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0) << "a block was handed to two owners at once";
  EXPECT_LE(blocks().counts().cached_blocks, gpusel::detail::kMaxCachedHostBlocks);
}

TEST_F(HostBlockCache, AForkedChildForgetsTheCache) {
  { gpusel::Buffer<char> freed(16 * kMiB, gpusel::cpu()); }
  gpusel::Buffer<char> live(8 * kMiB, gpusel::cpu());
  ASSERT_EQ(blocks().counts().cached_blocks, 1u);
  const pid_t pid = fork();
  if (pid == 0) {
    int status = 0;
    if (blocks().counts().cached_blocks != 0) status = 2;
    if (blocks().counts().live_blocks != 0) status = 3;
    {
      gpusel::Buffer<char> in_child(16 * kMiB, gpusel::cpu());  // allocates and caches anew
      std::memset(in_child.data(), 1, 16 * kMiB);
    }
    if (blocks().counts().cached_blocks != 1) status = 4;
    live = gpusel::Buffer<char>();  // the parent's live block, unknown here: freed with free()
    std::fflush(nullptr);
    std::exit(status);  // a normal exit: under ASan, LeakSanitizer checks that what was forgotten is not lost
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(blocks().counts().cached_blocks, 1u) << "the parent keeps its cache";
}

TEST(HostBlockCacheLimit, ReadsGpuselHostCacheAsASize) {
  std::size_t bytes = 7;
  std::string problem;
  EXPECT_TRUE(gpusel::detail::parse_host_cache_limit(nullptr, bytes, problem));
  EXPECT_EQ(bytes, 7u) << "unset: the default stays";
  EXPECT_TRUE(gpusel::detail::parse_host_cache_limit("512MiB", bytes, problem));
  EXPECT_EQ(bytes, 512 * kMiB);
  EXPECT_TRUE(gpusel::detail::parse_host_cache_limit("0", bytes, problem));
  EXPECT_EQ(bytes, 0u);
  EXPECT_FALSE(gpusel::detail::parse_host_cache_limit("8G", bytes, problem));
  EXPECT_EQ(bytes, 0u);
  EXPECT_NE(problem.find("GPUSEL_HOST_CACHE=8G: not a size"), std::string::npos) << problem;
  EXPECT_LE(gpusel::detail::default_host_cache_bytes(), gpusel::detail::kDefaultHostCacheBytes);
  EXPECT_GT(gpusel::detail::default_host_cache_bytes(), 0u);
}

TEST(StreamingCopy, CopiesEveryByteAtEveryAlignment) {
  const std::vector<std::uint8_t> source = gpusel_test::pattern(1 << 16, 11);
  std::vector<std::uint8_t> destination(source.size() + 64);
  for (const std::size_t offset : {0u, 1u, 7u, 15u, 16u, 33u})
    for (const std::size_t length : {0u, 1u, 15u, 16u, 63u, 64u, 65u, 1000u, 65536u - 64u}) {
      std::fill(destination.begin(), destination.end(), std::uint8_t{0xee});
      gpusel::detail::streaming_copy(destination.data() + offset, source.data() + 3, length);
      for (std::size_t i = 0; i < destination.size(); ++i) {
        const bool inside = i >= offset && i < offset + length;
        ASSERT_EQ(destination[i], inside ? source[3 + i - offset] : std::uint8_t{0xee})
            << "offset " << offset << " length " << length << " byte " << i;
      }
    }
}

#if GPUSEL_TEST_EMULATED

// Sets the process's prefault decision for one test (as GPUSEL_PREFAULT would), and puts it back.
class ScopedPrefault {
 public:
  explicit ScopedPrefault(bool prefault) : before_(settings().prefault.exchange(prefault)) {}
  ~ScopedPrefault() { settings().prefault.store(before_); }
  ScopedPrefault(const ScopedPrefault&) = delete;
  ScopedPrefault& operator=(const ScopedPrefault&) = delete;
  static gpusel::detail::HostPrefaultSettings& settings() { return gpusel::detail::host_prefault_settings(); }

 private:
  bool before_;
};

using HostDrains = HostBlockCacheTest;

// Sizes that span several staging chunks and workers, with an odd tail.
constexpr std::size_t kDrainBytes = 21 * kMiB + 4099;

TEST_F(HostDrains, AFreshBlockIsPrefaultedWhenTheProcessDecidedSo) {
  ASSERT_FALSE(gpusel_test::need_devices(1));
  const std::vector<std::uint8_t> bytes = gpusel_test::pattern(kDrainBytes, 5);
  const gpusel::Buffer<std::uint8_t> on_gpu(bytes, gpusel::cuda(0));
  for (const bool prefault : {true, false}) {
    const ScopedPrefault scoped(prefault);
    const std::uint64_t before = ScopedPrefault::settings().prefaulted_bytes.load();
    gpusel::release_cached_resources();  // a fresh block, not a reused one
    const gpusel::Buffer<std::uint8_t> on_cpu = on_gpu.to(gpusel::cpu());
    EXPECT_EQ(on_cpu.to_vector(), bytes) << "prefault " << prefault;
    const std::uint64_t prefaulted = ScopedPrefault::settings().prefaulted_bytes.load() - before;
    if (prefault) {
      EXPECT_GE(prefaulted, kDrainBytes - 2 * 4096) << "every whole page of the fresh block";
      EXPECT_LE(prefaulted, kDrainBytes);
    } else {
      EXPECT_EQ(prefaulted, 0u);
    }
  }
}

TEST_F(HostDrains, AReusedBlockTakesStreamingStoresAndIsNotPrefaulted) {
  ASSERT_FALSE(gpusel_test::need_devices(1));
  const ScopedPrefault scoped(true);
  const std::vector<std::uint8_t> first = gpusel_test::pattern(kDrainBytes, 6);
  const std::vector<std::uint8_t> second = gpusel_test::pattern(kDrainBytes, 7);
  const void* block = nullptr;
  {
    const gpusel::Buffer<std::uint8_t> on_cpu = gpusel::Buffer<std::uint8_t>(first, gpusel::cuda(0)).to(gpusel::cpu());
    EXPECT_EQ(on_cpu.to_vector(), first);
    block = on_cpu.data();
  }
  const std::uint64_t prefaulted = ScopedPrefault::settings().prefaulted_bytes.load();
  const std::uint64_t streamed = blocks().streamed_bytes.load();
  const gpusel::Buffer<std::uint8_t> on_gpu(second, gpusel::cuda(0));
  const gpusel::Buffer<std::uint8_t> again = on_gpu.to(gpusel::cpu());
  EXPECT_EQ(static_cast<const void*>(again.data()), block) << "the freed block was reused";
  EXPECT_EQ(again.to_vector(), second);
  EXPECT_EQ(ScopedPrefault::settings().prefaulted_bytes.load(), prefaulted) << "its pages are there already";
  EXPECT_EQ(blocks().streamed_bytes.load() - streamed, gpusel::detail::kStreamingStores ? kDrainBytes : 0u);
}

TEST_F(HostDrains, ABlockDrainedOnceIsNoLongerFresh) {
  ASSERT_FALSE(gpusel_test::need_devices(1));
  const ScopedPrefault scoped(true);
  const std::vector<std::uint8_t> bytes = gpusel_test::pattern(kDrainBytes, 8);
  const gpusel::Buffer<std::uint8_t> on_gpu(bytes, gpusel::cuda(0));
  gpusel::Buffer<std::uint8_t> on_cpu(kDrainBytes, gpusel::cpu());
  on_cpu.copy_from(on_gpu);
  const std::uint64_t prefaulted = ScopedPrefault::settings().prefaulted_bytes.load();
  const std::uint64_t streamed = blocks().streamed_bytes.load();
  on_cpu.copy_from(on_gpu);
  EXPECT_EQ(on_cpu.to_vector(), bytes);
  EXPECT_EQ(ScopedPrefault::settings().prefaulted_bytes.load(), prefaulted);
  EXPECT_EQ(blocks().streamed_bytes.load() - streamed, gpusel::detail::kStreamingStores ? kDrainBytes : 0u);
}

TEST_F(HostDrains, MemoryGpuselDidNotAllocateIsCopiedAsBefore) {
  ASSERT_FALSE(gpusel_test::need_devices(1));
  const ScopedPrefault scoped(true);
  const std::vector<std::uint8_t> bytes = gpusel_test::pattern(kDrainBytes, 9);
  const gpusel::Buffer<std::uint8_t> on_gpu(bytes, gpusel::cuda(0));
  const std::uint64_t prefaulted = ScopedPrefault::settings().prefaulted_bytes.load();
  const std::uint64_t streamed = blocks().streamed_bytes.load();
  EXPECT_EQ(on_gpu.to_vector(), bytes);  // into a std::vector's memory
  EXPECT_EQ(ScopedPrefault::settings().prefaulted_bytes.load(), prefaulted);
  EXPECT_EQ(blocks().streamed_bytes.load(), streamed);
}

TEST_F(HostDrains, AnUnusablePrefaultSettingFailsTheCopyNamingIt) {
  ASSERT_FALSE(gpusel_test::need_devices(1));
  gpusel::detail::HostPrefaultSettings& settings = ScopedPrefault::settings();
  const std::string problem = settings.environment_problem;
  std::snprintf(settings.environment_problem, sizeof settings.environment_problem, "%s",
                "GPUSEL_PREFAULT=sometimes: expected auto, always or never");
  const gpusel::Buffer<std::uint8_t> on_gpu(gpusel_test::pattern(kDrainBytes, 10), gpusel::cuda(0));
  try {
    (void)on_gpu.to(gpusel::cpu());
    ADD_FAILURE() << "the copy ran with a policy nobody asked for";
  } catch (const gpusel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPUSEL_PREFAULT=sometimes"), std::string::npos) << e.what();
  }
  std::snprintf(settings.environment_problem, sizeof settings.environment_problem, "%s", problem.c_str());
}

#endif  // GPUSEL_TEST_EMULATED

}  // namespace
