// Specification of gpusel::Buffer<T> and its copy engine
// (include/gpusel/buffer.hpp, detail/data/engine/copy_engine.hpp). Built against the
// emulated and the real runtime (gpusel_test.hpp).
#include "gpusel/buffer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "byte_pattern.hpp"
#include "gpusel/guard.hpp"
#include "gpusel/stream.hpp"
#include "gpusel_test.hpp"
#include "text_checks.hpp"

// BufferOnCpu.HostMemoryRunningOutIsAnOutOfMemory asks for more memory than
// any machine has: malloc answers null, but the sanitizers' allocators stop
// the program instead unless told to answer as malloc does.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GPUSEL_TEST_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GPUSEL_TEST_SANITIZER 1
#endif
#endif
#if defined(GPUSEL_TEST_SANITIZER)
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
extern "C" const char* __tsan_default_options() { return "allocator_may_return_null=1"; }
#endif

namespace {

using gpusel_test::contains;

// Drops the copy engine's cached staging memory and peer table, then prepares
// the machine: the emulated runtime's reset would otherwise free the cached
// memory behind the engine's back (as cudaDeviceReset would).
std::optional<std::string> machine_with(int devices) {
  gpusel::release_cached_resources();
  return gpusel_test::need_devices(devices);
}

using gpusel_test::pattern;

// Sizes that span many staging chunks (4 MiB) and end in an odd tail.
constexpr std::size_t kLarge = (std::size_t{37} << 20) + 13;

static_assert(!std::is_copy_constructible_v<gpusel::Buffer<float>>, "a hidden copy could be a gigabyte: use clone()");
static_assert(!std::is_copy_assignable_v<gpusel::Buffer<float>>);
static_assert(std::is_nothrow_move_constructible_v<gpusel::Buffer<float>>);
static_assert(std::is_nothrow_move_assignable_v<gpusel::Buffer<float>>);
static_assert(std::is_nothrow_destructible_v<gpusel::Buffer<float>>);

struct Pixel {
  std::uint8_t r, g, b;
  float weight;
  bool operator==(const Pixel& o) const { return r == o.r && g == o.g && b == o.b && weight == o.weight; }
};

// --- cpu buffers: everywhere, with or without a GPU --------------------------

TEST(BufferOnCpu, HoldsACopyOfHostData) {
  const std::vector<float> values{1, 2, 3, 4};
  gpusel::Buffer<float> from_vector(values, gpusel::cpu());
  gpusel::Buffer<float> from_list({1, 2, 3, 4}, gpusel::cpu());
  gpusel::Buffer<float> from_pointer(values.data(), values.size(), gpusel::cpu());
  for (const auto* buffer : {&from_vector, &from_list, &from_pointer}) {
    EXPECT_EQ(buffer->size(), 4u);
    EXPECT_EQ(buffer->bytes(), 16u);
    EXPECT_EQ(buffer->device(), gpusel::cpu());
    EXPECT_TRUE(buffer->is_cpu());
    EXPECT_FALSE(buffer->is_cuda());
    EXPECT_FALSE(buffer->is_pinned());
    EXPECT_EQ(buffer->to_vector(), values);
    EXPECT_NE(static_cast<const void*>(buffer->data()), static_cast<const void*>(values.data()));
  }
}

TEST(BufferOnCpu, ToReturnsANewBufferAndLeavesTheSourceUntouched) {
  gpusel::Buffer<int> x({1, 2, 3}, gpusel::cpu());
  gpusel::Buffer<int> y = x.to(gpusel::cpu());
  EXPECT_NE(y.data(), x.data()) << "a Buffer never aliases another, even on the same device";
  y.data()[0] = 42;
  EXPECT_EQ(x.to_vector(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(y.to_vector(), (std::vector<int>{42, 2, 3}));
}

TEST(BufferOnCpu, MovingToTheDeviceItIsOnHandsTheMemoryOver) {
  gpusel::Buffer<int> x({1, 2, 3}, gpusel::cpu());
  const int* memory = x.data();
  x = std::move(x).to(gpusel::cpu());
  EXPECT_EQ(x.data(), memory);
  gpusel::Buffer<int> y = std::move(x).to(gpusel::cpu());
  EXPECT_EQ(y.data(), memory);
  EXPECT_TRUE(x.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(x.data(), nullptr);
  EXPECT_EQ(x.device(), gpusel::cpu());
}

TEST(BufferOnCpu, MovesLeaveTheSourceEmpty) {
  gpusel::Buffer<double> x({1.5, 2.5}, gpusel::cpu());
  const double* memory = x.data();
  gpusel::Buffer<double> y(std::move(x));
  EXPECT_EQ(y.data(), memory);
  EXPECT_EQ(x.size(), 0u);  // NOLINT(bugprone-use-after-move)
  gpusel::Buffer<double> z;
  z = std::move(y);
  EXPECT_EQ(z.data(), memory);
  EXPECT_EQ(z.to_vector(), (std::vector<double>{1.5, 2.5}));
}

TEST(BufferOnCpu, CloneFillAndEmptyBuffers) {
  gpusel::Buffer<Pixel> pixels(1000, gpusel::cpu());
  pixels.fill(Pixel{1, 2, 3, 0.5f});
  gpusel::Buffer<Pixel> copy = pixels.clone();
  EXPECT_NE(copy.data(), pixels.data());
  for (const Pixel& p : copy.to_vector()) ASSERT_EQ(p, (Pixel{1, 2, 3, 0.5f}));
  gpusel::Buffer<int> empty(0, gpusel::cpu());
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.clone().size(), 0u);
  EXPECT_TRUE(empty.to_vector().empty());
  EXPECT_THROW(gpusel::Buffer<int>(static_cast<const int*>(nullptr), 3, gpusel::cpu()), gpusel::Error);
}

TEST(BufferOnCpu, LargeHostCopiesAreExact) {
  const auto bytes = pattern(kLarge, 1);
  gpusel::Buffer<std::uint8_t> x(bytes, gpusel::cpu());
  EXPECT_EQ(x.clone().to_vector(), bytes);
}

TEST(BufferOnCpu, AHugeSizeIsAnErrorNotAnOverflow) {
  try {
    gpusel::Buffer<double> x(std::size_t{1} << 62, gpusel::cpu());
    FAIL() << "2^62 doubles were allocated";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "elements")) << e.what();
  }
}

TEST(BufferOnCpu, HostMemoryRunningOutIsAnOutOfMemory) {
  // 4 EiB: more than any machine's address space, so aligned_alloc returns null.
  for (const std::size_t size : {std::size_t{1} << 62, std::numeric_limits<std::size_t>::max() - 10}) {
    try {
      gpusel::Buffer<std::uint8_t> x(size, gpusel::cpu());
      FAIL() << size << " bytes were allocated";
    } catch (const gpusel::OutOfMemory& e) {
      EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
      EXPECT_TRUE(contains(e.what(), "gpusel::Buffer(" + std::to_string(size) + " elements, " + std::to_string(size) +
                                         " bytes, cpu) on cpu: out of host memory"))
          << e.what();
    }
  }
  EXPECT_THROW(gpusel::Buffer<double>(std::size_t{1} << 62, gpusel::cpu()), gpusel::OutOfMemory)
      << "a size whose bytes cannot be counted does not fit in memory either";
}

// --- no driver: the CPU fallback ---------------------------------------------

TEST(BufferWithoutDriver, CpuBuffersMakeNoCudaCall) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::clear_calls();
#endif
  gpusel::Buffer<float> x({1, 2, 3}, gpusel::cpu());
  auto y = x.to(gpusel::cpu());
  y.fill(7);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{7, 7, 7}));
  EXPECT_EQ(std::move(x).to(gpusel::cpu()).size(), 3u);
#if GPUSEL_TEST_EMULATED
  EXPECT_TRUE(gpusel_emulated::call_log().empty());
#endif
}

TEST(BufferWithoutDriver, ToCudaThrowsAnErrorThatSaysWhy) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  gpusel::Buffer<float> x({1, 2, 3}, gpusel::cpu());
  for (const gpusel::Device device : {gpusel::cuda(), gpusel::cuda(0)}) {
    try {
      auto y = x.to(device);
      FAIL() << "to(" << device << ") succeeded without a driver";
    } catch (const gpusel::Error& e) {
      EXPECT_EQ(e.code(), cudaErrorInsufficientDriver);
      EXPECT_TRUE(contains(e.what(), "gpusel::Buffer::to(" + device.str() + ") of 3 elements (12 bytes) on cpu"))
          << e.what();
      EXPECT_TRUE(contains(e.what(), "no NVIDIA driver was found")) << e.what();
    }
  }
  EXPECT_EQ(x.to_vector(), (std::vector<float>{1, 2, 3})) << "the source is untouched";
  EXPECT_THROW(gpusel::Buffer<float>(4, gpusel::cuda(0)), gpusel::Error);
  EXPECT_THROW((void)gpusel::Buffer<float>::pinned(4), gpusel::Error) << "pinning needs a driver";
}

// --- on GPUs -----------------------------------------------------------------

TEST(Buffer, RoundTripsThroughAGpu) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  gpusel::Buffer<float> x({1, 2, 3}, gpusel::cpu());
  gpusel::Buffer<float> y = x.to(gpusel::cuda(0));
  EXPECT_TRUE(y.is_cuda());
  EXPECT_EQ(y.device(), gpusel::cuda(0));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(y.to(gpusel::cpu()).to_vector(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(x.device(), gpusel::cpu()) << "tensor.cuda() returns a new object: the source stays";
}

TEST(Buffer, CudaWithoutAnIndexIsResolvedWhenTheBufferIsMade) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  gpusel::Buffer<int> outside(3, gpusel::cuda());
  EXPECT_EQ(outside.device(), gpusel::cuda(gpusel::current_device()));
  gpusel::DeviceGuard guard(1);
  gpusel::Buffer<int> inside(3, gpusel::cuda());
  EXPECT_EQ(inside.device(), gpusel::cuda(1)) << "device() always carries the index";
  EXPECT_EQ(gpusel::Buffer<int>({1}, gpusel::cpu()).to(gpusel::cuda()).device(), gpusel::cuda(1));
}

TEST(Buffer, CudaAndCpuArePyTorchsSpellingsOfTo) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  const gpusel::Buffer<int> x({1, 2, 3}, gpusel::cpu());
  EXPECT_EQ(x.cuda(1).device(), gpusel::cuda(1)) << "x.cuda(1)";
  EXPECT_EQ(x.cuda(1).cpu().to_vector(), (std::vector<int>{1, 2, 3})) << "x.cuda(1).cpu()";
  {
    gpusel::DeviceGuard guard(1);
    EXPECT_EQ(x.cuda().device(), gpusel::cuda(1)) << "x.cuda() is the current device, as in PyTorch";
  }
  EXPECT_EQ(x.device(), gpusel::cpu()) << "a new Buffer each time: x stays where it was";
  gpusel::Buffer<int> moved = x.cuda(0);
  const int* memory = moved.data();
  gpusel::Buffer<int> same = std::move(moved).cuda(0);
  EXPECT_EQ(same.data(), memory) << "std::move(x).cuda() hands the memory over, as std::move(x).to() does";
  EXPECT_EQ(moved.size(), 0u);
}

TEST(Buffer, FactoriesMakeZerosOnesAndAFilledValueOnADevice) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  const gpusel::Buffer<float> z = gpusel::zeros<float>(5, gpusel::cuda(0));  // torch.zeros(5, device=cuda0)
  const gpusel::Buffer<float> o = gpusel::ones<float>(5, gpusel::cuda(0));   // torch.ones(5, device=cuda0)
  const gpusel::Buffer<int> f = gpusel::full<int>(3, 7, gpusel::cuda(0));    // torch.full((3,), 7, device=cuda0)
  EXPECT_EQ(z.device(), gpusel::cuda(0));
  EXPECT_EQ(z.to_vector(), (std::vector<float>(5, 0.0f)));
  EXPECT_EQ(o.to_vector(), (std::vector<float>(5, 1.0f)));
  EXPECT_EQ(f.to_vector(), (std::vector<int>{7, 7, 7}));
  EXPECT_EQ(gpusel::ones<int>(2, gpusel::cpu()).to_vector(), (std::vector<int>{1, 1}));
  EXPECT_EQ(gpusel::zeros<int>(0, gpusel::cuda(0)).size(), 0u);
}

TEST(Buffer, ToTheSameGpuCopiesAndMovingThereDoesNot) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  gpusel::Buffer<int> x({4, 5, 6}, gpusel::cuda(0));
  gpusel::Buffer<int> copy = x.to(gpusel::cuda(0));
  EXPECT_NE(copy.data(), x.data());
  EXPECT_EQ(copy.to_vector(), x.to_vector());
  const int* memory = x.data();
  x = std::move(x).to(gpusel::cuda(0));
  EXPECT_EQ(x.data(), memory) << "std::move(x).to(its own device) is free";
  gpusel::Buffer<int> moved = std::move(x).to(gpusel::cpu());
  EXPECT_TRUE(x.empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(moved.to_vector(), (std::vector<int>{4, 5, 6}));
}

TEST(Buffer, LargeCopiesArriveExactlyBothWays) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  const auto bytes = pattern(kLarge, 7);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  gpusel::Buffer<std::uint8_t> device = host.to(gpusel::cuda(0));
  gpusel::Buffer<std::uint8_t> back = device.to(gpusel::cpu());
  EXPECT_TRUE(back.is_cpu());
  EXPECT_FALSE(back.is_pinned());
  ASSERT_EQ(back.size(), bytes.size());
  EXPECT_EQ(std::memcmp(back.data(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(device.to_vector(), bytes);
  const std::vector<float> floats(3'000'001, 1.25f);
  EXPECT_EQ(gpusel::Buffer<float>(floats, gpusel::cuda(0)).to_vector(), floats);
}

TEST(Buffer, CopiesFromSeveralThreadsAtOnceStayExact) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (unsigned t = 0; t < 4; ++t) {
    threads.emplace_back([t, &ok] {
      const auto bytes = pattern((std::size_t{9} << 20) + t * 4099, t);
      const int device = static_cast<int>(t % 2);
      gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
      auto on_gpu = host.to(gpusel::cuda(device));
      auto back = on_gpu.to(gpusel::cpu());
      ok[t] = std::memcmp(back.data(), bytes.data(), bytes.size()) == 0 && on_gpu.device() == gpusel::cuda(device);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

TEST(Buffer, CopiesBetweenTwoGpus) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  const auto bytes = pattern(kLarge, 3);
  gpusel::Buffer<std::uint8_t> on_0(bytes, gpusel::cuda(0));
  gpusel::Buffer<std::uint8_t> on_1 = on_0.to(gpusel::cuda(1));
  EXPECT_EQ(on_1.device(), gpusel::cuda(1));
  EXPECT_EQ(on_1.to_vector(), bytes);
  EXPECT_EQ(on_0.to_vector(), bytes);
}

TEST(Buffer, FillsAnyTrivialTypeOnAGpu) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  for (const std::size_t size : {std::size_t{1}, std::size_t{17}, std::size_t{5461}, std::size_t{300'007}}) {
    gpusel::Buffer<Pixel> pixels(size, gpusel::cuda(0));
    pixels.fill(Pixel{9, 8, 7, -1.5f});
    const auto values = pixels.to_vector();
    ASSERT_EQ(values.size(), size);
    for (const Pixel& p : values) ASSERT_EQ(p, (Pixel{9, 8, 7, -1.5f})) << "size " << size;
  }
  gpusel::Buffer<std::int64_t> numbers(1'000'003, gpusel::cuda(0));
  numbers.fill(-3);
  for (const std::int64_t n : numbers.to_vector()) ASSERT_EQ(n, -3);
}

TEST(Buffer, CopyFromFillsAnExistingBufferWhereverEachSideLives) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  const auto bytes = pattern(kLarge, 21);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  gpusel::Buffer<std::uint8_t> on_0(bytes.size(), gpusel::cuda(0));
  gpusel::Buffer<std::uint8_t> on_1(bytes.size(), gpusel::cuda(1));
  gpusel::Buffer<std::uint8_t> back(bytes.size(), gpusel::cpu());
  const void* memory = on_0.data();
  on_0.copy_from(host);
  on_1.copy_from(on_0);
  back.copy_from(on_1);
  EXPECT_EQ(on_0.data(), memory) << "copy_from writes into the memory the Buffer has";
  EXPECT_EQ(back.to_vector(), bytes);
  gpusel::Buffer<std::uint8_t> shorter(3, gpusel::cpu());
  EXPECT_THROW(shorter.copy_from(host), gpusel::Error);
}

TEST(Buffer, PinnedHostMemory) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  auto pinned = gpusel::Buffer<int>::pinned(5);
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_EQ(pinned.device(), gpusel::cpu());
  pinned.fill(3);
  auto on_gpu = pinned.to(gpusel::cuda(0));
  EXPECT_EQ(on_gpu.to_vector(), (std::vector<int>{3, 3, 3, 3, 3}));
  EXPECT_TRUE(pinned.clone().is_pinned()) << "a clone keeps the kind of memory";
  EXPECT_TRUE(std::move(pinned).to(gpusel::cpu()).is_pinned()) << "already on the cpu: handed over as it is";
  gpusel::Buffer<int> pageable({1, 2}, gpusel::cpu());
  auto pinned_copy = pageable.pin_memory();
  EXPECT_TRUE(pinned_copy.is_pinned());
  EXPECT_EQ(pinned_copy.to_vector(), (std::vector<int>{1, 2}));
  EXPECT_TRUE(on_gpu.pin_memory().is_pinned());
  EXPECT_EQ(on_gpu.pin_memory().to_vector(), (std::vector<int>{3, 3, 3, 3, 3}));
}

TEST(Buffer, ToOnAStreamFromPinnedMemory) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  const auto bytes = pattern(kLarge, 11);
  auto pinned = gpusel::Buffer<std::uint8_t>::pinned(bytes.size());
  std::memcpy(pinned.data(), bytes.data(), bytes.size());
  gpusel::Stream stream(gpusel::cuda(0));
  auto on_gpu = pinned.to(gpusel::cuda(0), stream);
  auto back = on_gpu.to(gpusel::cpu(), stream);
  EXPECT_TRUE(back.is_pinned()) << "an asynchronous copy to the cpu lands in pinned memory";
  stream.synchronize();
  EXPECT_EQ(std::memcmp(back.data(), bytes.data(), bytes.size()), 0);
}

// A view of a default stream names a stream of its own device, whatever device is current.
TEST(Buffer, ToOnAViewOfAnotherDevicesDefaultStreamQueuesItThere) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  const auto bytes = pattern(kLarge, 5);
  auto pinned = gpusel::Buffer<std::uint8_t>::pinned(bytes.size());
  std::memcpy(pinned.data(), bytes.data(), bytes.size());
  gpusel::set_device(0);
  const auto legacy_1 = gpusel::StreamView::legacy_default(gpusel::cuda(1));
  auto on_gpu = pinned.to(gpusel::cuda(1), legacy_1);
  EXPECT_EQ(on_gpu.device(), gpusel::cuda(1));
  auto back = on_gpu.to(gpusel::cpu(), legacy_1);
  legacy_1.synchronize();
  EXPECT_EQ(std::memcmp(back.data(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(gpusel::current_device(), 0);
}

TEST(Buffer, ToOnAViewOfAnotherDeviceIsAnErrorNamingIt) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  auto pinned = gpusel::Buffer<int>::pinned(4);
  try {
    auto on_gpu = pinned.to(gpusel::cuda(0), gpusel::StreamView::per_thread_default(gpusel::cuda(1)));
    FAIL() << "a copy to cuda:0 was queued on a stream of cuda:1";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "gpusel::Buffer::to(cuda:0) of 4 elements")) << e.what();
    EXPECT_TRUE(contains(e.what(), "on a stream of cuda:1")) << e.what();
  }
}

TEST(Buffer, ToOnAStreamOfAnotherDeviceIsAnError) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  auto pinned = gpusel::Buffer<int>::pinned(4);
  gpusel::Stream stream(gpusel::cuda(1));
  try {
    auto on_gpu = pinned.to(gpusel::cuda(0), stream);
    FAIL() << "a copy to cuda:0 was queued on a stream of cuda:1";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "stream of cuda:1")) << e.what();
  }
}

TEST(Buffer, ADeviceThatDoesNotExistIsAClearError) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  const int missing = gpusel::device_count();
  try {
    gpusel::Buffer<float> x(256, gpusel::cuda(missing));
    FAIL() << "a Buffer was made on a device that does not exist";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidDevice);
    EXPECT_TRUE(contains(e.what(), "gpusel::Buffer(256 elements, 1024 bytes, cuda:" + std::to_string(missing) + ")"))
        << e.what();
    EXPECT_TRUE(contains(e.what(), "CUDA_VISIBLE_DEVICES")) << e.what();
  }
}

#if GPUSEL_TEST_EMULATED

TEST(BufferEmulated, FreesOnItsOwnDeviceWithoutCreatingAContextElsewhere) {
  machine_with(2);
  {
    gpusel::Buffer<float> x(1000, gpusel::cuda(1));
    EXPECT_EQ(gpusel_emulated::bytes_in_use(1), 4000u);
    EXPECT_EQ(gpusel::current_device(), 0) << "making it left the current device alone";
  }
  EXPECT_EQ(gpusel_emulated::bytes_allocated(1), 0u);
  EXPECT_FALSE(gpusel_emulated::has_primary_context(0)) << "freeing on cuda:1 made no context on cuda:0";
}

// What the restore-error handler is told.
std::vector<std::string>& reported_errors() {
  static std::vector<std::string> errors;
  return errors;
}
void record_error(const gpusel::Error& error) { reported_errors().push_back(error.what()); }

// A failed switch to the Buffer's device does not leak its memory: it is freed
// from the current device, and the handler hears of it.
TEST(BufferEmulated, AFailedSwitchStillFreesTheMemoryAndSaysSo) {
  machine_with(2);
  gpusel::set_device(0);  // so the runtime really is back on cuda:0 after each Buffer is made
  reported_errors().clear();
  const gpusel::RestoreErrorHandler previous = gpusel::set_restore_error_handler(&record_error);
  for (const char* call : {"cudaGetDevice", "cudaSetDevice"}) {
    {
      gpusel::Buffer<float> x(4, gpusel::cuda(1));
      ASSERT_EQ(gpusel_emulated::bytes_allocated(1), 16u);
      gpusel_emulated::fail_call(call, 1, cudaErrorUnknown);
    }
    gpusel_emulated::clear_failures();
    EXPECT_EQ(gpusel_emulated::bytes_allocated(1), 0u) << call << ": the 16 bytes leaked";
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "reported through the handler, not left behind";
  }
  gpusel::set_restore_error_handler(previous);
  ASSERT_EQ(reported_errors().size(), 2u);
  for (const std::string& error : reported_errors()) {
    EXPECT_TRUE(contains(error, "gpusel::Buffer freeing its device memory could not make cuda:1 current")) << error;
    EXPECT_TRUE(contains(error, "released it from the current device instead")) << error;
    EXPECT_TRUE(contains(error, "cudaErrorUnknown")) << error;
  }
  EXPECT_TRUE(contains(reported_errors()[0], "cudaGetDevice")) << reported_errors()[0];
  EXPECT_TRUE(contains(reported_errors()[1], "cudaSetDevice")) << reported_errors()[1];
  EXPECT_EQ(gpusel::current_device(), 0);
}

TEST(BufferEmulated, FreesOnItsOwnDeviceWhateverDeviceIsCurrent) {
  machine_with(2);
  auto x = gpusel::Buffer<float>({1, 2}, gpusel::cpu()).to(gpusel::cuda(0));
  gpusel::set_device(1);
  x = gpusel::Buffer<float>();
  EXPECT_EQ(gpusel_emulated::bytes_allocated(0), 0u);
  EXPECT_EQ(gpusel::current_device(), 1);
}

TEST(BufferEmulated, SmallBuffersDoNotPayForTheMachinery) {
  machine_with(1);
  const auto bytes = pattern(64 << 10, 5);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  gpusel_emulated::clear_calls();
  auto on_gpu = host.to(gpusel::cuda(0));
  auto back = on_gpu.to(gpusel::cpu());
  EXPECT_EQ(back.to_vector(), bytes);
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpy"), 2);
  EXPECT_EQ(gpusel_emulated::calls("cudaMallocHost"), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamCreateWithFlags"), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaEventCreateWithFlags"), 0);
}

TEST(BufferEmulated, LargeCopiesGoThroughReusedPinnedStaging) {
  machine_with(1);
  const auto bytes = pattern(kLarge, 2);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  auto first = host.to(gpusel::cuda(0));
  EXPECT_GT(gpusel_emulated::calls("cudaMemcpyAsync"), 9) << "37 MiB in 4 MiB chunks";
  const std::size_t pinned = gpusel_emulated::pinned_host_bytes_in_use();
  EXPECT_GT(pinned, 0u) << "the staging chunks are kept for the next copy";
  gpusel_emulated::clear_calls();
  auto second = host.to(gpusel::cuda(0));
  auto back = second.to(gpusel::cpu());
  EXPECT_EQ(gpusel_emulated::calls("cudaMallocHost"), 0) << "no pinning on later copies";
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), pinned);
  EXPECT_EQ(std::memcmp(back.data(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamCreateWithFlags"), 0) << "the streams are kept too";
  EXPECT_EQ(gpusel_emulated::calls("cudaEventCreateWithFlags"), 0) << "and the events";
  EXPECT_GT(gpusel_emulated::live_streams(), 0);
  gpusel::release_cached_resources();
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), 0u);
  EXPECT_EQ(gpusel_emulated::live_streams(), 0);
  EXPECT_EQ(gpusel_emulated::live_events(), 0);
}

TEST(BufferEmulated, UsesPeerAccessWhereAllowedEnablingItOnce) {
  machine_with(2);
  gpusel::Buffer<int> on_0({1, 2, 3}, gpusel::cuda(0));
  auto a = on_0.to(gpusel::cuda(1));
  auto b = on_0.to(gpusel::cuda(1));
  EXPECT_EQ(gpusel_emulated::peer_copies(), 2);
  EXPECT_EQ(gpusel_emulated::staged_device_copies(), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaDeviceEnablePeerAccess"), 1);
  EXPECT_EQ(b.to_vector(), (std::vector<int>{1, 2, 3}));
}

TEST(BufferEmulated, PeerAccessEnabledBySomeoneElseIsNotAnError) {
  machine_with(2);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
  gpusel::Buffer<int> on_0({1, 2, 3}, gpusel::cuda(0));
  auto on_1 = on_0.to(gpusel::cuda(1));
  EXPECT_EQ(on_1.to_vector(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(gpusel_emulated::peer_copies(), 1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaErrorPeerAccessAlreadyEnabled was not left behind";
}

TEST(BufferEmulated, StagesThroughTheHostWherePeerAccessIsImpossible) {
  gpusel::release_cached_resources();
  gpusel_emulated::Config config = gpusel_emulated::devices(2);
  config.peer_access = {{false, false}, {false, false}};
  gpusel_emulated::reset(config);
  const auto bytes = pattern(kLarge, 4);
  gpusel::Buffer<std::uint8_t> on_0(bytes, gpusel::cuda(0));
  auto on_1 = on_0.to(gpusel::cuda(1));
  EXPECT_EQ(gpusel_emulated::peer_copies(), 0);
  EXPECT_EQ(gpusel_emulated::staged_device_copies(), 1);
  EXPECT_EQ(on_1.to_vector(), bytes);
}

TEST(BufferEmulated, AnAsyncCopyFromPinnedMemoryIsQueuedUntilTheStreamIsSynchronized) {
  machine_with(1);
  auto pinned = gpusel::Buffer<int>::pinned(3);
  pinned.fill(5);
  gpusel::Stream stream(gpusel::cuda(0));
  auto on_gpu = pinned.to(gpusel::cuda(0), stream);
  EXPECT_EQ(gpusel_emulated::pending_operations(), 1) << "asynchronous: to() returned before the copy ran";
  stream.synchronize();
  EXPECT_EQ(gpusel_emulated::pending_operations(), 0);
  EXPECT_EQ(on_gpu.to_vector(), (std::vector<int>{5, 5, 5}));
  gpusel::Buffer<int> pageable({1, 2}, gpusel::cpu());
  auto synchronous = pageable.to(gpusel::cuda(0), stream);
  EXPECT_EQ(gpusel_emulated::pending_operations(), 0) << "from pageable memory the copy is done on return";
}

TEST(BufferEmulated, OutOfMemorySaysHowMuchIsFree) {
  gpusel::release_cached_resources();
  gpusel_emulated::reset(gpusel_emulated::devices(1, std::size_t{1} << 20));
  try {
    gpusel::Buffer<float> x(1 << 20, gpusel::cuda(0));
    FAIL() << "4 MiB fit in 1 MiB";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
    EXPECT_TRUE(
        contains(e.what(), "gpusel::Buffer(1048576 elements, 4194304 bytes, cuda:0): cudaMallocFromPoolAsync(cuda:0)"))
        << e.what();
    EXPECT_TRUE(contains(e.what(), "cuda:0 has 1 MiB free of 1 MiB")) << e.what();
  }
}

TEST(BufferEmulated, DeviceMemoryRunningOutIsAnOutOfMemory) {
  gpusel::release_cached_resources();
  gpusel_emulated::reset(gpusel_emulated::devices(1, std::size_t{1} << 20));
  EXPECT_THROW(gpusel::Buffer<float>(1 << 20, gpusel::cuda(0)), gpusel::OutOfMemory);
  gpusel::Buffer<float> host(1 << 20, gpusel::cpu());
  try {
    auto on_gpu = host.to(gpusel::cuda(0));
    FAIL() << "4 MiB fit in 1 MiB";
  } catch (const gpusel::OutOfMemory& e) {
    EXPECT_TRUE(contains(e.what(), "gpusel::Buffer::to(cuda:0) of 1048576 elements (4194304 bytes) on cpu: cudaMalloc"))
        << e.what();
  }
  EXPECT_EQ(gpusel_emulated::bytes_in_use(0), 0u);
}

TEST(BufferEmulated, OnlyMemoryRunningOutIsAnOutOfMemory) {
  machine_with(1);
  gpusel_emulated::fail_call("cudaMallocFromPoolAsync", 1, cudaErrorLaunchFailure);
  try {
    gpusel::Buffer<float> x(4, gpusel::cuda(0));
    FAIL() << "cudaMallocFromPoolAsync failed and the Buffer was made";
  } catch (const gpusel::OutOfMemory& e) {
    ADD_FAILURE() << "a launch failure came back as OutOfMemory: " << e.what();
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorLaunchFailure) << e.what();
  }
}

TEST(BufferEmulated, PinnedMemoryRunningOutIsAnOutOfMemory) {
  machine_with(1);
  gpusel_emulated::fail_call("cudaMallocHost", 1, cudaErrorMemoryAllocation);
  try {
    auto pinned = gpusel::Buffer<int>::pinned(4);
    FAIL() << "cudaMallocHost ran out of memory and the Buffer was made";
  } catch (const gpusel::OutOfMemory& e) {
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
    EXPECT_TRUE(
        contains(e.what(), "gpusel::Buffer::pinned(4 elements, 16 bytes, cpu) in pinned host memory: cudaMallocHost"))
        << e.what();
  }
  gpusel::Buffer<int> pageable({1, 2}, gpusel::cpu());
  gpusel_emulated::fail_call("cudaMallocHost", 1, cudaErrorMemoryAllocation);
  EXPECT_THROW((void)pageable.pin_memory(), gpusel::OutOfMemory);
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), 0u);
}

// Sizes whose rounding up to an allocation granule cannot be represented are
// OutOfMemory in every kind of memory, never an allocation of almost nothing.
TEST(BufferEmulated, SizesNearSizeMaxAreOutOfMemoryEverywhere) {
  machine_with(1);
  for (const std::size_t size :
       {std::numeric_limits<std::size_t>::max() - 100, std::numeric_limits<std::size_t>::max() - (std::size_t{2} << 20),
        std::numeric_limits<std::size_t>::max()}) {
    EXPECT_THROW(gpusel::Buffer<char>(size, gpusel::cpu()), gpusel::OutOfMemory) << size;
    EXPECT_THROW((void)gpusel::Buffer<char>::pinned(size), gpusel::OutOfMemory) << size;
    EXPECT_THROW(gpusel::Buffer<char>(size, gpusel::cuda(0)), gpusel::OutOfMemory) << size;
  }
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), 0u);
  EXPECT_EQ(gpusel_emulated::bytes_in_use(0), 0u);
}

TEST(DetailMemory, RoundUpIsCheckedArithmetic) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  std::size_t rounded = 7;
  EXPECT_TRUE(gpusel::detail::round_up(0, 256, rounded));
  EXPECT_EQ(rounded, 0u);
  EXPECT_TRUE(gpusel::detail::round_up(257, 256, rounded));
  EXPECT_EQ(rounded, 512u);
  EXPECT_TRUE(gpusel::detail::round_up(max - 255, 256, rounded)) << "already a multiple";
  EXPECT_EQ(rounded, max - 255);
  rounded = 7;
  EXPECT_FALSE(gpusel::detail::round_up(max - 254, 256, rounded));
  EXPECT_FALSE(gpusel::detail::round_up(max, std::size_t{2} << 20, rounded));
  EXPECT_EQ(rounded, 7u) << "left alone";
}

// Note [Which device pins host memory]: on a 2-GPU machine whose program only
// used cuda:1, a fresh thread (current device 0, no context) pins memory in
// every way a Buffer can, and cuda:0 gets no context.
TEST(BufferEmulated, PinningOnAFreshThreadMakesNoContextOnDevice0) {
  machine_with(2);
  const auto bytes = pattern(kLarge, 21);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  const gpusel::Buffer<std::uint8_t> on_1 = host.to(gpusel::cuda(1));  // staged: pinned chunks too
  ASSERT_FALSE(gpusel_emulated::has_primary_context(0));
  std::thread([&] {
    EXPECT_EQ(gpusel::Buffer<int>::pinned(16).size(), 16u);
    EXPECT_TRUE(host.pin_memory().is_pinned());
    EXPECT_EQ(on_1.pin_memory().to_vector(), bytes);
    gpusel::Stream stream(gpusel::cuda(1));
    const auto back = on_1.to(gpusel::cpu(), stream);
    stream.synchronize();
    EXPECT_TRUE(back.is_pinned());
    EXPECT_EQ(back.to_vector(), bytes);
    EXPECT_EQ(host.to(gpusel::cuda(1)).to_vector(), bytes) << "staged, on this thread";
    EXPECT_EQ(gpusel::current_device(), 0) << "the thread's device is what it was";
  }).join();
  EXPECT_FALSE(gpusel_emulated::has_primary_context(0)) << "pinning made a context on cuda:0";
  EXPECT_EQ(gpusel_emulated::primary_context_count(), 1);
}

// With no context anywhere, pinning makes the current device's (it needs one),
// and only that one.
TEST(BufferEmulated, PinningWithNoContextUsesTheCurrentDevice) {
  machine_with(2);
  std::thread([] { EXPECT_EQ(gpusel::Buffer<int>::pinned(4).size(), 4u); }).join();
  EXPECT_TRUE(gpusel_emulated::has_primary_context(0));
  EXPECT_EQ(gpusel_emulated::primary_context_count(), 1);
}

TEST(BufferEmulated, StagingMemoryRunningOutIsAnOutOfMemory) {
  machine_with(1);
  const auto bytes = pattern(kLarge, 13);
  gpusel::Buffer<std::uint8_t> host(bytes, gpusel::cpu());
  gpusel_emulated::fail_calls_from("cudaMallocHost", 1, cudaErrorMemoryAllocation);
  try {
    auto on_gpu = host.to(gpusel::cuda(0));
    FAIL() << "a large pageable copy went through no pinned staging";
  } catch (const gpusel::OutOfMemory& e) {
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
    EXPECT_TRUE(contains(e.what(), "gpusel::Buffer::to(cuda:0) of " + std::to_string(kLarge) + " elements"))
        << e.what();
    EXPECT_TRUE(contains(e.what(), "gpusel copy engine: cudaMallocHost(4194304 bytes of staging)")) << e.what();
  }
  gpusel_emulated::clear_failures();
  gpusel::release_cached_resources();
  EXPECT_EQ(gpusel_emulated::bytes_in_use(0), 0u);
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), 0u);
  EXPECT_EQ(host.to_vector(), bytes);
}

// Makes `function`'s nth call fail in every copy path, and checks each time
// that the source is intact and nothing stays allocated.
TEST(BufferEmulated, NothingLeaksWhenAnyAllocationOrCopyFails) {
  const auto& functions = gpusel_test::kFallibleDataCalls;
  const auto bytes = pattern((std::size_t{19} << 20) + 5, 9);
  int failures_seen = 0;
  for (const char* function : functions) {
    for (const gpusel::Device source_device : {gpusel::cpu(), gpusel::cuda(0)}) {
      for (const gpusel::Device target : {gpusel::cpu(), gpusel::cuda(1)}) {
        if (source_device == target) continue;
        for (int nth = 1;; ++nth) {
          machine_with(2);
          gpusel::Buffer<std::uint8_t> source(bytes, source_device);
          const void* memory = source.data();
          gpusel::release_cached_resources();
          const std::size_t before[] = {gpusel_emulated::bytes_in_use(0), gpusel_emulated::bytes_in_use(1),
                                        gpusel_emulated::pinned_host_bytes_in_use()};
          gpusel_emulated::fail_call(function, nth, cudaErrorLaunchFailure);
          bool failed = false;
          try {
            auto moved = source.to(target);
          } catch (const gpusel::Error& e) {
            failed = true;
            ++failures_seen;
            EXPECT_EQ(e.code(), cudaErrorLaunchFailure) << function << " #" << nth << ": " << e.what();
            EXPECT_TRUE(contains(e.what(), "gpusel::Buffer::to(" + target.str() + ")")) << e.what();
          }
          gpusel_emulated::clear_failures();
          gpusel::release_cached_resources();
          const std::size_t after[] = {gpusel_emulated::bytes_in_use(0), gpusel_emulated::bytes_in_use(1),
                                       gpusel_emulated::pinned_host_bytes_in_use()};
          EXPECT_TRUE(std::equal(std::begin(before), std::end(before), std::begin(after)))
              << function << " #" << nth << " " << source_device << "->" << target;
          EXPECT_EQ(gpusel_emulated::live_streams(), 0);
          EXPECT_EQ(gpusel_emulated::live_events(), 0);
          // A staging chunk goes back to the pool before its stream is
          // destroyed, so a DMA left for cudaStreamDestroy to finish would
          // still use a chunk another copy may already hold.
          EXPECT_EQ(gpusel_emulated::operations_left_to_stream_destroy(), 0)
              << function << " #" << nth << " " << source_device << "->" << target;
          EXPECT_EQ(source.data(), memory);
          EXPECT_EQ(source.to_vector(), bytes) << function << " #" << nth;
          if (!failed || nth > 40) break;
        }
      }
    }
  }
  EXPECT_GT(failures_seen, 30);
}

#endif

}  // namespace
