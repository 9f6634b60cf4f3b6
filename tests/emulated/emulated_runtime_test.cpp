// Specification of the emulated CUDA runtime itself: the tests of everything
// else trust it, so it is held to what the real runtime does (see the Note in
// emulated_runtime.cpp).
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emulated_runtime.hpp"

namespace {

namespace emu = gpusel_emulated;

class EmulatedRuntime : public ::testing::Test {
 protected:
  void SetUp() override { emu::reset(emu::devices(3, 1 << 20)); }
};

TEST_F(EmulatedRuntime, ShowsTheConfiguredDevices) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 3);
}

TEST_F(EmulatedRuntime, EachThreadHasItsOwnCurrentDeviceStartingAtZero) {
  ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
  int seen_on_other_thread = -1;
  std::thread([&] {
    (void)cudaGetDevice(&seen_on_other_thread);
    (void)cudaSetDevice(1);
  }).join();
  EXPECT_EQ(seen_on_other_thread, 0);
  int here = -1;
  ASSERT_EQ(cudaGetDevice(&here), cudaSuccess);
  EXPECT_EQ(here, 2) << "another thread's cudaSetDevice does not change this thread's device";
}

TEST_F(EmulatedRuntime, ResetGivesEveryThreadDeviceZeroAgain) {
  ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
  emu::reset(emu::devices(3));
  int here = -1;
  ASSERT_EQ(cudaGetDevice(&here), cudaSuccess);
  EXPECT_EQ(here, 0);
}

bool driver_library_loaded() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

// What the stand-in driver's cuDeviceGetCount answers: 3 (CUDA_ERROR_NOT_INITIALIZED)
// before a successful cuInit, -1 when no driver library is loaded.
int driver_device_count_status() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (handle == nullptr) return -1;
  const auto device_count = reinterpret_cast<int (*)(int*)>(dlsym(handle, "cuDeviceGetCount"));
  int count = 0;
  const int status = device_count != nullptr ? device_count(&count) : -2;
  dlclose(handle);
  return status;
}

TEST_F(EmulatedRuntime, InitializesTheDriverWhenItInitializes) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(driver_device_count_status(), 0);
}

TEST_F(EmulatedRuntime, DriverGetVersionLoadsAndInitializesTheDriverAsMeasuredOnTheH200) {
  int version = 0;
  ASSERT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
  EXPECT_EQ(driver_device_count_status(), 0);
  EXPECT_EQ(emu::primary_context_count(), 0);
}

TEST_F(EmulatedRuntime, AFailedInitializationLeavesTheDriverLoadedButUninitialized) {
  emu::Config config = emu::devices(1);
  config.initialization_error = cudaErrorNoDevice;  // CUDA_VISIBLE_DEVICES named no GPU
  emu::reset(config);
  int count = 0;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorNoDevice);
  EXPECT_EQ(driver_device_count_status(), 3) << "cuInit failed: CUDA_ERROR_NOT_INITIALIZED";
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorNoDevice) << "and the runtime remembers its failure";
}

TEST_F(EmulatedRuntime, LoadsTheDriverLibraryOnItsFirstInitializingCallAsTheRealRuntimeDoes) {
  int version = 0;
  (void)cudaRuntimeGetVersion(&version);
  EXPECT_FALSE(driver_library_loaded()) << "asking the runtime's own version starts nothing";
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_TRUE(driver_library_loaded());
  emu::reset(emu::devices(1));
  EXPECT_FALSE(driver_library_loaded()) << "a new emulated process starts without it";
}

TEST_F(EmulatedRuntime, WithoutADriverNoDriverLibraryIsLoaded) {
  emu::Config config;
  config.initialization_error = cudaErrorInsufficientDriver;
  emu::reset(config);
  int count = 0;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorInsufficientDriver);
  EXPECT_FALSE(driver_library_loaded());
}

TEST_F(EmulatedRuntime, GetDeviceAndCountCreateNoContextButSetDeviceDoes) {
  int value = 0;
  (void)cudaGetDevice(&value);
  (void)cudaGetDeviceCount(&value);
  cudaDeviceProp properties;
  (void)cudaGetDeviceProperties(&properties, 1);
  (void)cudaDeviceCanAccessPeer(&value, 0, 1);
  EXPECT_EQ(emu::primary_context_count(), 0);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_TRUE(emu::has_primary_context(1));
  EXPECT_FALSE(emu::has_primary_context(0));
}

TEST_F(EmulatedRuntime, FreeOfNullCreatesTheCurrentDevicesContext) {
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  EXPECT_TRUE(emu::has_primary_context(0));
  EXPECT_EQ(emu::primary_context_count(), 1);
}

TEST_F(EmulatedRuntime, PrimaryContextStateIsReadableThroughTheDriverEntryPoint) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050  // Note [The driver's entry points by CUDA version]
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &function, 12000, cudaEnableDefault, &found),
            cudaSuccess);
#else
  ASSERT_EQ(cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState", &function, cudaEnableDefault, &found), cudaSuccess);
#endif
  ASSERT_EQ(found, cudaDriverEntryPointSuccess);
  auto get_state = reinterpret_cast<int (*)(int, unsigned*, int*)>(function);
  unsigned flags = 0;
  int active = -1;
  ASSERT_EQ(get_state(2, &flags, &active), 0);
  EXPECT_EQ(active, 0);
  ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
  ASSERT_EQ(get_state(2, &flags, &active), 0);
  EXPECT_EQ(active, 1);
  EXPECT_EQ(emu::primary_context_count(), 1) << "asking created nothing";
}

TEST_F(EmulatedRuntime, CountsCalls) {
  int device = 0;
  (void)cudaGetDevice(&device);
  (void)cudaGetDevice(&device);
  (void)cudaSetDevice(1);
  EXPECT_EQ(emu::calls("cudaGetDevice"), 2);
  EXPECT_EQ(emu::calls("cudaSetDevice"), 1);
  EXPECT_EQ(emu::calls("cudaMalloc"), 0);
  EXPECT_EQ(emu::call_log(), (std::vector<std::string>{"cudaGetDevice", "cudaGetDevice", "cudaSetDevice"}));
  emu::clear_calls();
  EXPECT_EQ(emu::calls("cudaGetDevice"), 0);
}

TEST_F(EmulatedRuntime, TheCallLogKeepsTheLastCallsAndTheCountsStayExact) {
  const std::size_t capacity = emu::call_log_capacity();
  int device = 0;
  (void)cudaSetDevice(1);
  for (std::size_t i = 0; i < capacity + 9; ++i) (void)cudaGetDevice(&device);
  EXPECT_EQ(emu::calls("cudaGetDevice"), static_cast<int>(capacity + 9)) << "counts are not capped";
  EXPECT_EQ(emu::calls("cudaSetDevice"), 1);
  const std::vector<std::string> log = emu::call_log();
  ASSERT_EQ(log.size(), capacity);
  EXPECT_EQ(emu::dropped_calls(), 10u) << "cudaSetDevice and the first nine cudaGetDevice calls";
  EXPECT_EQ(log.front(), "cudaGetDevice");
  (void)cudaSetDevice(0);
  EXPECT_EQ(emu::call_log().back(), "cudaSetDevice") << "the newest call is last";
  emu::clear_calls();
  EXPECT_TRUE(emu::call_log().empty());
  EXPECT_EQ(emu::dropped_calls(), 0u);
}

TEST_F(EmulatedRuntime, FailsTheNthCallAsArmedAndOnlyThatOne) {
  emu::fail_call("cudaMalloc", 2, cudaErrorMemoryAllocation);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  EXPECT_EQ(cudaMalloc(&a, 64), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&b, 64), cudaErrorMemoryAllocation);
  EXPECT_EQ(b, nullptr) << "a failed call does nothing";
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaGetLastError clears";
  EXPECT_EQ(cudaMalloc(&c, 64), cudaSuccess);
  EXPECT_EQ(emu::bytes_in_use(0), 128u);
  (void)cudaFree(a);
  (void)cudaFree(c);
}

TEST_F(EmulatedRuntime, FailuresArmedForConsecutiveCallsFailExactlyThoseCalls) {
  // Each armed failure counts calls from when it was armed, whichever fires first.
  emu::fail_call("cudaSetDevice", 1, cudaErrorInvalidDevice);
  emu::fail_call("cudaSetDevice", 2, cudaErrorNotPermitted);
  emu::fail_call("cudaSetDevice", 4, cudaErrorUnknown);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorNotPermitted);
  EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorUnknown);
  EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
}

TEST_F(EmulatedRuntime, AOneOffFailureAndAPersistentOneCountTheSameCalls) {
  emu::fail_call("cudaSetDevice", 1, cudaErrorNotPermitted);
  emu::fail_calls_from("cudaSetDevice", 3, cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorNotPermitted);
  EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
}

TEST_F(EmulatedRuntime, FailsEveryCallFromTheNthWhenPersistent) {
  emu::fail_calls_from("cudaSetDevice", 2, cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  emu::clear_failures();
  EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
}

TEST_F(EmulatedRuntime, WithoutADriverEveryCallFails) {
  emu::Config config;
  config.initialization_error = cudaErrorInsufficientDriver;
  emu::reset(config);
  int value = 0;
  void* pointer = nullptr;
  EXPECT_EQ(cudaGetDeviceCount(&value), cudaErrorInsufficientDriver);
  EXPECT_EQ(cudaGetDevice(&value), cudaErrorInsufficientDriver);
  EXPECT_EQ(cudaSetDevice(0), cudaErrorInsufficientDriver);
  EXPECT_EQ(cudaMalloc(&pointer, 8), cudaErrorInsufficientDriver);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInsufficientDriver), "cudaErrorInsufficientDriver");
}

TEST_F(EmulatedRuntime, AccountsMemoryPerDeviceAndRunsOutLikeAGpu) {
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* big = nullptr;
  ASSERT_EQ(cudaMalloc(&big, 1 << 19), cudaSuccess);
  EXPECT_EQ(emu::bytes_in_use(1), std::size_t{1} << 19);
  EXPECT_EQ(emu::bytes_in_use(0), 0u);
  void* too_big = nullptr;
  EXPECT_EQ(cudaMalloc(&too_big, 1 << 20), cudaErrorMemoryAllocation);
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(total, std::size_t{1} << 20);
  EXPECT_EQ(free_bytes, std::size_t{1} << 19);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaFree(big), cudaSuccess) << "memory is freed on its own device whatever device is current";
  EXPECT_EQ(emu::bytes_in_use(1), 0u);
}

TEST_F(EmulatedRuntime, CopiesBytesAndChecksDirections) {
  std::vector<int> host{1, 2, 3, 4};
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 16), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, host.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<int> back(4);
  ASSERT_EQ(cudaMemcpy(back.data(), device, 16, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_EQ(cudaMemcpy(device, host.data(), 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(device, host.data(), 32, cudaMemcpyHostToDevice), cudaErrorInvalidValue)
      << "a copy past the end of an allocation is not device memory";
  (void)cudaFree(device);
}

// 16 pinned host bytes, 16 device bytes and a non-blocking stream to copy
// between them asynchronously; all freed at the end of the test.
struct PinnedCopy {
  void* pinned = nullptr;
  void* device = nullptr;
  cudaStream_t stream = nullptr;

  PinnedCopy() {
    EXPECT_EQ(cudaMallocHost(&pinned, 16), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&device, 16), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  }
  ~PinnedCopy() {
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    (void)cudaFree(device);
    (void)cudaFreeHost(pinned);
  }
  PinnedCopy(const PinnedCopy&) = delete;  // frees what it made
  PinnedCopy& operator=(const PinnedCopy&) = delete;

  cudaError_t queue() const { return cudaMemcpyAsync(device, pinned, 16, cudaMemcpyHostToDevice, stream); }
  cudaError_t destroy_stream() { return cudaStreamDestroy(std::exchange(stream, nullptr)); }
};

TEST_F(EmulatedRuntime, QueuesAsyncCopiesFromPinnedMemoryUntilSomethingWaits) {
  {
    PinnedCopy copy;
    std::memset(copy.pinned, 7, 16);
    ASSERT_EQ(copy.queue(), cudaSuccess);
    EXPECT_EQ(emu::pending_operations(), 1);
    EXPECT_EQ(cudaStreamQuery(copy.stream), cudaErrorNotReady);
    std::memset(copy.pinned, 9, 16);  // too early: on a GPU the DMA may read either value
    ASSERT_EQ(cudaStreamSynchronize(copy.stream), cudaSuccess);
    EXPECT_EQ(emu::pending_operations(), 0);
    unsigned char back[16];
    ASSERT_EQ(cudaMemcpy(back, copy.device, 16, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back[0], 9) << "the queued copy read the buffer when it ran, exposing the early reuse";
  }
  EXPECT_EQ(emu::live_streams(), 0);
  EXPECT_EQ(emu::pinned_host_bytes_in_use(), 0u);
}

TEST_F(EmulatedRuntime, DestroyingAStreamFinishesItsQueuedCopiesAndCountsThem) {
  PinnedCopy copy;
  ASSERT_EQ(copy.queue(), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(copy.stream), cudaSuccess);
  ASSERT_EQ(copy.queue(), cudaSuccess);
  EXPECT_EQ(emu::operations_left_to_stream_destroy(), 0);
  ASSERT_EQ(copy.destroy_stream(), cudaSuccess);
  EXPECT_EQ(emu::pending_operations(), 0) << "the work of a destroyed stream still completes";
  EXPECT_EQ(emu::operations_left_to_stream_destroy(), 1) << "only the copy nobody waited for";
}

TEST_F(EmulatedRuntime, AsyncCopiesFromPageableMemoryHappenAtOnce) {
  std::vector<unsigned char> host(16, 5);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 16), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device, host.data(), 16, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  EXPECT_EQ(emu::pending_operations(), 0);
  (void)cudaFree(device);
}

// Note [cudaMemcpyBatchAsync as emulated], in emulated_runtime.cpp: CUDA 12.8 and newer.
#if CUDART_VERSION >= 12080
struct Batch {
  unsigned char* pinned = nullptr;  // 4 x 16 bytes
  unsigned char* device = nullptr;  // 4 x 16 bytes
  cudaStream_t stream = nullptr;
  void* destinations[4] = {};
  void* sources[4] = {};  // void**: 12.8's and 13.0's parameter types both accept it
  size_t sizes[4] = {16, 16, 16, 16};
  cudaMemcpyAttributes attributes[2] = {};
  size_t starts[2] = {0, 2};

  Batch() {
    EXPECT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 64), cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 64), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    for (int i = 0; i < 4; ++i) {
      std::memset(pinned + 16 * i, i + 1, 16);
      destinations[i] = device + 16 * i;
      sources[i] = pinned + 16 * i;
    }
    for (auto& attribute : attributes) attribute.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  }
  ~Batch() {
    (void)cudaStreamDestroy(stream);
    (void)cudaFree(device);
    (void)cudaFreeHost(pinned);
  }
  Batch(const Batch&) = delete;  // frees what it made
  Batch& operator=(const Batch&) = delete;

  cudaError_t run(size_t count = 4, size_t attribute_count = 2, cudaStream_t on = nullptr) {
    return run_on(on != nullptr ? on : stream, count, attribute_count);
  }
  cudaError_t run_on(cudaStream_t on, size_t count = 4, size_t attribute_count = 2) {
#if CUDART_VERSION >= 13000
    return cudaMemcpyBatchAsync(destinations, sources, sizes, count, attributes, starts, attribute_count, on);
#else
    size_t failed_copy = 0;
    return cudaMemcpyBatchAsync(destinations, sources, sizes, count, attributes, starts, attribute_count, &failed_copy,
                                on);
#endif
  }
  std::vector<unsigned char> device_bytes() const {
    std::vector<unsigned char> back(64);
    EXPECT_EQ(cudaMemcpy(back.data(), device, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    return back;
  }
};

TEST_F(EmulatedRuntime, BatchCopiesAreQueuedInStreamOrderUntilSomethingWaits) {
  Batch batch;
  ASSERT_EQ(batch.run(), cudaSuccess);
  EXPECT_EQ(emu::pending_operations(), 4);
  std::memset(batch.pinned, 9, 16);  // too early: the DMA reads it when it runs
  ASSERT_EQ(cudaStreamSynchronize(batch.stream), cudaSuccess);
  const std::vector<unsigned char> back = batch.device_bytes();
  EXPECT_EQ(back[0], 9);
  EXPECT_EQ(back[16], 2);
  EXPECT_EQ(back[63], 4);
  EXPECT_EQ(emu::calls("cudaMemcpyBatchAsync"), 1);
}

TEST_F(EmulatedRuntime, BatchCopiesReadAnEphemeralSourceDuringTheCall) {
  Batch batch;
  for (auto& attribute : batch.attributes) attribute.srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
  ASSERT_EQ(batch.run(), cudaSuccess);
  std::memset(batch.pinned, 9, 64);  // after the call: the copies read the source already
  ASSERT_EQ(cudaStreamSynchronize(batch.stream), cudaSuccess);
  const std::vector<unsigned char> back = batch.device_bytes();
  EXPECT_EQ(back[0], 1);
  EXPECT_EQ(back[63], 4);
}

TEST_F(EmulatedRuntime, BatchCopiesRunInNoPromisedOrderSoDependentCopiesShow) {
  Batch batch;
  // Copy 0 writes device[0..16) from pinned; copy 1 reads device[0..16) into device[16..32).
  batch.sources[1] = batch.device;
  ASSERT_EQ(cudaMemset(batch.device, 0, 64), cudaSuccess);
  ASSERT_EQ(batch.run(2, 1), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(batch.stream), cudaSuccess);
  const std::vector<unsigned char> back = batch.device_bytes();
  EXPECT_EQ(back[0], 1);
  EXPECT_EQ(back[16], 0) << "the emulation runs a batch last to first: copy 1 read device[0] before copy 0 wrote it";
}

TEST_F(EmulatedRuntime, BatchCopiesRefuseWhatNvidiaDocumentsAsInvalidAndQueueNothing) {
  Batch batch;
  EXPECT_EQ(batch.run(4, 2, cudaStreamLegacy), cudaErrorInvalidValue) << "not the legacy NULL stream";
  EXPECT_EQ(batch.run_on(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(batch.run(0, 1), cudaErrorInvalidValue);
  EXPECT_EQ(batch.run(1, 2), cudaErrorInvalidValue) << "more attributes than copies";
  batch.starts[1] = 4;
  EXPECT_EQ(batch.run(), cudaErrorInvalidValue) << "an attribute starting past the last copy";
  batch.starts[0] = 1;
  batch.starts[1] = 2;
  EXPECT_EQ(batch.run(), cudaErrorInvalidValue) << "the first attribute starts at copy 0";
  batch.starts[0] = 0;
  batch.attributes[1].srcAccessOrder = cudaMemcpySrcAccessOrderInvalid;
  EXPECT_EQ(batch.run(), cudaErrorInvalidValue) << "every copy needs a valid access order";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(emu::pending_operations(), 0);
  batch.attributes[1].srcAccessOrder = cudaMemcpySrcAccessOrderAny;
  emu::fail_call("cudaMemcpyBatchAsync", 1, cudaErrorMemoryAllocation);
  EXPECT_EQ(batch.run(), cudaErrorMemoryAllocation) << "fault injection";
  EXPECT_EQ(emu::pending_operations(), 0) << "a failed batch queued nothing here (the real runtime may have)";
  EXPECT_EQ(batch.run(), cudaSuccess);
  EXPECT_EQ(emu::pending_operations(), 4);
}
#else
TEST_F(EmulatedRuntime, BatchCopiesNeedCuda12_8) {
  GTEST_SKIP() << "cudaMemcpyBatchAsync needs CUDA 12.8 or newer; this build's CUDART_VERSION is " << CUDART_VERSION;
}
#endif

TEST_F(EmulatedRuntime, RegisteredHostMemoryCountsAsPinned) {
  std::vector<unsigned char> host(64, 1);
  ASSERT_EQ(cudaHostRegister(host.data(), 64, cudaHostRegisterDefault), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(host.data(), 64, cudaHostRegisterDefault), cudaErrorHostMemoryAlreadyRegistered);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 64), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device, host.data(), 64, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  EXPECT_EQ(emu::pending_operations(), 1);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(emu::pending_operations(), 0);
  ASSERT_EQ(cudaHostUnregister(host.data()), cudaSuccess);
  EXPECT_EQ(emu::registered_host_ranges(), 0);
  (void)cudaFree(device);
}

TEST_F(EmulatedRuntime, CopiesBetweenDevicesAreCountedAsPeerOrStaged) {
  emu::Config config = emu::devices(2);
  config.peer_access = {{false, false}, {false, false}};
  emu::reset(config);
  void* on_zero = nullptr;
  void* on_one = nullptr;
  ASSERT_EQ(cudaMalloc(&on_zero, 8), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&on_one, 8), cudaSuccess);
  int can = -1;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 1, 0), cudaSuccess);
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported);
  ASSERT_EQ(cudaMemcpyPeer(on_one, 1, on_zero, 0, 8), cudaSuccess);
  EXPECT_EQ(emu::staged_device_copies(), 1);
  EXPECT_EQ(emu::peer_copies(), 0);
  (void)cudaFree(on_zero);
  (void)cudaFree(on_one);
}

TEST_F(EmulatedRuntime, PeerAccessIsEnabledOnceFromTheCurrentDevice) {
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessAlreadyEnabled);
  void* on_zero = nullptr;
  void* on_one = nullptr;
  ASSERT_EQ(cudaMalloc(&on_one, 8), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&on_zero, 8), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(on_one, on_zero, 8, cudaMemcpyDeviceToDevice), cudaSuccess);
  EXPECT_EQ(emu::peer_copies(), 1);
  (void)cudaFree(on_zero);
  (void)cudaFree(on_one);
}

// Note [The runtime unloads at exit]: after the teardown every call answers
// cudaErrorCudartUnloading, cudaGetLastError included; reset() loads it again.
TEST_F(EmulatedRuntime, AfterTheTeardownAtExitEveryCallAnswersUnloading) {
  void* memory = nullptr;
  ASSERT_EQ(cudaMalloc(&memory, 8), cudaSuccess);
  emu::begin_process_exit();
  EXPECT_TRUE(emu::unloading());
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaErrorCudartUnloading);
  EXPECT_EQ(cudaSetDevice(0), cudaErrorCudartUnloading);
  EXPECT_EQ(cudaFree(memory), cudaErrorCudartUnloading);
  EXPECT_EQ(cudaGetLastError(), cudaErrorCudartUnloading);
  EXPECT_EQ(emu::calls_refused_while_unloading(), 4);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorCudartUnloading), "cudaErrorCudartUnloading");
  emu::reset(emu::devices(1));
  EXPECT_FALSE(emu::unloading());
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
}

// cudaMallocHost acts on the calling thread's current device and makes its
// primary context (what Note [Which device pins host memory] works around).
TEST_F(EmulatedRuntime, PinningMakesTheCurrentDevicesContext) {
  void* pinned = nullptr;
  std::thread([&] { ASSERT_EQ(cudaMallocHost(&pinned, 64), cudaSuccess); }).join();
  EXPECT_TRUE(emu::has_primary_context(0));
  EXPECT_EQ(emu::primary_context_count(), 1);
  ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
  void* more = nullptr;
  ASSERT_EQ(cudaMallocHost(&more, 64), cudaSuccess);
  EXPECT_TRUE(emu::has_primary_context(2));
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(more), cudaSuccess);
}

// A program with a static Buffer on a GPU, a static Stream and gpusel's caches,
// all destroyed after the runtime's teardown at exit: it exits with status 0,
// prints nothing and does not abort (tests/emulated/static_objects_at_exit.cpp).
// --- memory pools (Note [The emulated memory pools]) --------------------------

cudaMemPool_t make_pool(int device) {
  cudaMemPoolProps properties{};
  properties.allocType = cudaMemAllocationTypePinned;
  properties.location.type = cudaMemLocationTypeDevice;
  properties.location.id = device;
  cudaMemPool_t pool = nullptr;
  EXPECT_EQ(cudaMemPoolCreate(&pool, &properties), cudaSuccess);
  return pool;
}

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute) {
  std::uint64_t value = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, attribute, &value), cudaSuccess);
  return value;
}

std::size_t free_memory_of_current_device() {
  std::size_t free_bytes = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  return free_bytes;
}

TEST_F(EmulatedRuntime, APoolCreatesTheContextOfItsDeviceOnlyAndOnlyWherePoolsAreSupported) {
  int supported = -1;
  ASSERT_EQ(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 2), cudaSuccess);
  EXPECT_EQ(supported, 1);
  cudaMemPool_t pool = make_pool(2);
  EXPECT_TRUE(emu::has_primary_context(2));
  EXPECT_EQ(emu::primary_context_count(), 1) << "not the current device's (0)";
  EXPECT_EQ(emu::live_pools(), 1);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(emu::live_pools(), 0);

  emu::Config config = emu::devices(1);
  config.devices[0].memory_pools = false;
  emu::reset(config);
  ASSERT_EQ(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0), cudaSuccess);
  EXPECT_EQ(supported, 0);
  cudaMemPoolProps properties{};
  properties.allocType = cudaMemAllocationTypePinned;
  properties.location = {cudaMemLocationTypeDevice, 0};
  EXPECT_EQ(cudaMemPoolCreate(&pool, &properties), cudaErrorNotSupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);
}

TEST_F(EmulatedRuntime, APoolCachesFreedMemoryAsUsedUntilTrimmedAndReusesIt) {
  cudaMemPool_t pool = make_pool(0);
  std::uint64_t threshold = 1 << 20;
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrReleaseThreshold), threshold);
  const std::size_t all = free_memory_of_current_device();
  void* first = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&first, 4096, pool, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(emu::bytes_allocated(0), 4096u);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent), 4096u);
  ASSERT_EQ(cudaFreeAsync(first, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(emu::bytes_allocated(0), 0u) << "the program no longer holds it";
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent), 4096u) << "the free is queued, not run";
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent), 0u);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent), 4096u) << "cached under the threshold";
  EXPECT_EQ(free_memory_of_current_device(), all - 4096) << "cached memory is used memory to everyone else";
  void* second = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&second, 1000, pool, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(second, first) << "the cached block is reused";
  ASSERT_EQ(cudaFreeAsync(second, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_EQ(free_memory_of_current_device(), all) << "trimmed: given back";
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

TEST_F(EmulatedRuntime, AnAllocationOnTheStreamOfAQueuedFreeReusesTheBlockInStreamOrder) {
  cudaMemPool_t pool = make_pool(0);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  void* first = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&first, 4096, pool, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(first, cudaStreamLegacy), cudaSuccess);  // queued, not run
  void* elsewhere = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&elsewhere, 4096, pool, other), cudaSuccess);
  EXPECT_NE(elsewhere, first) << "another stream is not ordered after the free";
  void* same_stream = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&same_stream, 4096, pool, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(same_stream, first) << "the stream of the free is";
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);  // the first free runs, and finds the block reused
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent), 8192u);
  ASSERT_EQ(cudaFreeAsync(same_stream, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(elsewhere, other), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent), 0u);
  ASSERT_EQ(cudaStreamDestroy(other), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(emu::live_pools(), 0);
}

TEST_F(EmulatedRuntime, APoolReleasesWhatItCachesBeyondItsThresholdAtASynchronization) {
  cudaMemPool_t pool = make_pool(0);  // threshold 0, the default
  void* memory = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&memory, 8192, pool, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(memory, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(emu::bytes_in_use(0), 8192u);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(emu::bytes_in_use(0), 0u);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

TEST_F(EmulatedRuntime, APoolThatRunsOutReleasesItsCacheFirstThenFails) {
  cudaMemPool_t pool = make_pool(0);
  std::uint64_t threshold = 1 << 20;
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  void* small = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&small, 1000, pool, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(small, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  void* whole = nullptr;
  EXPECT_EQ(cudaMallocFromPoolAsync(&whole, 1 << 20, pool, cudaStreamLegacy), cudaSuccess) << "the cache made room";
  void* more = nullptr;
  EXPECT_EQ(cudaMallocFromPoolAsync(&more, 1, pool, cudaStreamLegacy), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(emu::live_pools(), 1) << "an allocation is outstanding";
  ASSERT_EQ(cudaFreeAsync(whole, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(emu::live_pools(), 0);
  EXPECT_EQ(emu::bytes_in_use(0), 0u);
}

// What the reuse rule in gpusel rests on: a free queued on the legacy stream
// runs after the blocking streams' earlier work, not after a non-blocking
// stream's, whose copy then lands in whoever reuses the block.
TEST_F(EmulatedRuntime, AFreeOnTheLegacyStreamWaitsForBlockingStreamsOnly) {
  cudaMemPool_t pool = make_pool(0);
  std::uint64_t threshold = 1 << 20;
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 64), cudaSuccess);
  std::memset(pinned, 7, 64);
  for (const unsigned flags : {unsigned{cudaStreamDefault}, unsigned{cudaStreamNonBlocking}}) {
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, flags), cudaSuccess);
    void* used = nullptr;
    ASSERT_EQ(cudaMallocFromPoolAsync(&used, 64, pool, stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(used, pinned, 64, cudaMemcpyHostToDevice, stream), cudaSuccess);
    ASSERT_EQ(cudaFreeAsync(used, cudaStreamLegacy), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
    void* reused = nullptr;
    ASSERT_EQ(cudaMallocFromPoolAsync(&reused, 64, pool, cudaStreamLegacy), cudaSuccess);
    EXPECT_EQ(reused, used);
    const std::vector<char> zeros(64, 0);
    ASSERT_EQ(cudaMemcpy(reused, zeros.data(), 64, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<char> seen(64, 1);
    ASSERT_EQ(cudaMemcpy(seen.data(), reused, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(seen == zeros, flags == cudaStreamDefault) << "flags " << flags;
    ASSERT_EQ(cudaFreeAsync(reused, cudaStreamLegacy), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  }
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

TEST_F(EmulatedRuntime, PoolAccessDecidesWhetherACopyFromPoolMemoryIsAPeerCopy) {
  cudaMemPool_t pool = make_pool(0);
  void* source = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&source, 64, pool, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
  void* destination = nullptr;
  ASSERT_EQ(cudaMalloc(&destination, 64), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(destination, source, 64, cudaMemcpyDeviceToDevice), cudaSuccess);
  EXPECT_EQ(emu::peer_copies(), 0) << "peer access does not reach pool memory";
  EXPECT_EQ(emu::staged_device_copies(), 1);
  cudaMemLocation where{cudaMemLocationTypeDevice, 1};
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtReadWrite;
  ASSERT_EQ(cudaMemPoolGetAccess(&flags, pool, &where), cudaSuccess);
  EXPECT_EQ(flags, cudaMemAccessFlagsProtNone);
  const cudaMemAccessDesc access{{cudaMemLocationTypeDevice, 1}, cudaMemAccessFlagsProtReadWrite};
  ASSERT_EQ(cudaMemPoolSetAccess(pool, &access, 1), cudaSuccess);
  ASSERT_EQ(cudaMemPoolGetAccess(&flags, pool, &where), cudaSuccess);
  EXPECT_EQ(flags, cudaMemAccessFlagsProtReadWrite);
  ASSERT_EQ(cudaMemcpy(destination, source, 64, cudaMemcpyDeviceToDevice), cudaSuccess);
  EXPECT_EQ(emu::peer_copies(), 1);

  emu::Config config = emu::devices(2);
  config.peer_access = {{false, false}, {false, false}};
  emu::reset(config);
  pool = make_pool(0);
  const cudaMemAccessDesc refused{{cudaMemLocationTypeDevice, 1}, cudaMemAccessFlagsProtReadWrite};
  EXPECT_EQ(cudaMemPoolSetAccess(pool, &refused, 1), cudaErrorInvalidDevice);
}

TEST_F(EmulatedRuntime, FreeingPoolMemoryWithCudaFreeSynchronizesAndReturnsItToThePool) {
  cudaMemPool_t pool = make_pool(0);
  std::uint64_t threshold = 1 << 20;
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  void* memory = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&memory, 64, pool, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaFree(memory), cudaSuccess);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent), 0u);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent), 64u);
  EXPECT_EQ(cudaFreeAsync(memory, cudaStreamLegacy), cudaErrorInvalidValue) << "freed already";
  (void)cudaGetLastError();
}

TEST_F(EmulatedRuntime, EveryPoolCallCanBeMadeToFail) {
  cudaMemPool_t pool = make_pool(0);
  void* memory = nullptr;
  std::uint64_t value = 0;
  const cudaMemAccessDesc access{{cudaMemLocationTypeDevice, 1}, cudaMemAccessFlagsProtReadWrite};
  cudaMemPoolProps properties{};
  properties.allocType = cudaMemAllocationTypePinned;
  properties.location = {cudaMemLocationTypeDevice, 0};
  cudaMemPool_t other = nullptr;
  int supported = 0;
  const std::pair<const char*, std::function<cudaError_t()>> calls[] = {
      {"cudaMemPoolCreate", [&] { return cudaMemPoolCreate(&other, &properties); }},
      {"cudaMallocFromPoolAsync", [&] { return cudaMallocFromPoolAsync(&memory, 64, pool, cudaStreamLegacy); }},
      {"cudaFreeAsync", [&] { return cudaFreeAsync(memory, cudaStreamLegacy); }},
      {"cudaMemPoolTrimTo", [&] { return cudaMemPoolTrimTo(pool, 0); }},
      {"cudaMemPoolSetAttribute",
       [&] { return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &value); }},
      {"cudaMemPoolGetAttribute",
       [&] { return cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &value); }},
      {"cudaMemPoolSetAccess", [&] { return cudaMemPoolSetAccess(pool, &access, 1); }},
      {"cudaDeviceGetAttribute",
       [&] { return cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0); }},
      {"cudaMemPoolDestroy", [&] { return cudaMemPoolDestroy(pool); }}};
  for (const auto& [name, call] : calls) {
    emu::fail_call(name, 1, cudaErrorUnknown);
    EXPECT_EQ(call(), cudaErrorUnknown) << name;
    EXPECT_EQ(cudaGetLastError(), cudaErrorUnknown) << name;
    EXPECT_EQ(call(), cudaSuccess) << name << ": only the armed call fails";
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // runs the free of the first pool's last allocation
  EXPECT_EQ(emu::live_pools(), 1) << "the second pool; the first was destroyed";
}

TEST(EmulatedRuntimeAtExit, StaticBuffersAndStreamsOutlivingTheRuntimeExitCleanly) {
  FILE* program = popen(GPUSEL_STATIC_OBJECTS_AT_EXIT " 2>&1", "r");
  ASSERT_NE(program, nullptr);
  std::string output;
  char chunk[256];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, program)) > 0;) output.append(chunk, n);
  const int status = pclose(program);
  ASSERT_TRUE(WIFEXITED(status)) << "the program died: " << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_EQ(output, "") << "gpusel printed something at exit";
}

}  // namespace
