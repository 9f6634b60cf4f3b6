// gpusel/dlpack.hpp: Buffers handed to DLPack and taken from it, zero copy,
// with every check of a foreign tensor and who owns what on an Error.
#include "gpusel/dlpack.hpp"

#include <gtest/gtest.h>

#include <complex>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpusel/buffer.hpp"
#include "gpusel_test.hpp"

#if GPUSEL_TEST_EMULATED
#include "forked_child.hpp"
#include "gpusel/detail/core/fork_state.hpp"
#endif

namespace {

using gpusel::dlpack::ManagedTensor;
using gpusel::dlpack::ManagedTensorVersioned;

// A producer's tensor over host memory it owns, as numpy's or another
// library's would be; its deleter counts its calls.
struct Produced {
  std::vector<double> values;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  ManagedTensorVersioned managed{};
  int deleted = 0;

  explicit Produced(std::vector<double> data) : values(std::move(data)), shape{std::int64_t(values.size())} {
    managed.version = {1, 0};
    managed.manager_ctx = this;
    managed.deleter = [](ManagedTensorVersioned* self) { ++static_cast<Produced*>(self->manager_ctx)->deleted; };
    auto& t = managed.dl_tensor;
    t.data = values.data();
    t.device = {gpusel::dlpack::kDLCPU, 0};
    t.ndim = 1;
    t.dtype = {gpusel::dlpack::kDLFloat, 64, 1};
    t.shape = shape.data();
    t.strides = nullptr;
  }
  Produced(const Produced&) = delete;
  Produced& operator=(const Produced&) = delete;
};

// Whether `call` throws a gpusel::Error whose message contains `words`.
template <class Call>
::testing::AssertionResult throws_saying(Call&& call, const std::string& words) {
  try {
    call();
  } catch (const gpusel::Error& error) {
    if (std::string(error.what()).find(words) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the Error says: " << error.what();
  }
  return ::testing::AssertionFailure() << "no Error";
}

TEST(ToDlpack, HandsACpuBuffersMemoryToTheTensorAndLeavesTheBufferEmpty) {
  gpusel::Buffer<float> buffer{1, 2, 3, 4};
  const float* address = buffer.data();
  ManagedTensorVersioned* tensor = gpusel::to_dlpack(std::move(buffer));
  EXPECT_TRUE(buffer.empty());  // NOLINT(bugprone-use-after-move): the move is the point
  EXPECT_EQ(tensor->version.major, 1u);
  EXPECT_EQ(tensor->flags, 0u);
  const auto& t = tensor->dl_tensor;
  EXPECT_EQ(t.data, address);
  EXPECT_EQ(t.device.device_type, gpusel::dlpack::kDLCPU);
  EXPECT_EQ(t.ndim, 1);
  EXPECT_EQ(t.shape[0], 4);
  ASSERT_NE(t.strides, nullptr) << "export always fills strides";
  EXPECT_EQ(t.strides[0], 1);
  EXPECT_EQ(t.dtype.code, gpusel::dlpack::kDLFloat);
  EXPECT_EQ(t.dtype.bits, 32);
  EXPECT_EQ(t.dtype.lanes, 1);
  EXPECT_EQ(t.byte_offset, 0u);
  EXPECT_EQ(static_cast<const float*>(t.data)[3], 4.0f);
  tensor->deleter(tensor);  // frees the memory: AddressSanitizer sees a leak otherwise
}

TEST(ToDlpack, GivesTheShapeTheCallerAsksForWithRowMajorStrides) {
  auto tensor = gpusel::to_dlpack(gpusel::Buffer<std::int32_t>(6), {2, 1, 3});
  const auto& t = tensor->dl_tensor;
  ASSERT_EQ(t.ndim, 3);
  EXPECT_EQ(std::vector<std::int64_t>(t.shape, t.shape + 3), (std::vector<std::int64_t>{2, 1, 3}));
  EXPECT_EQ(std::vector<std::int64_t>(t.strides, t.strides + 3), (std::vector<std::int64_t>{3, 3, 1}));
  EXPECT_EQ(t.dtype.code, gpusel::dlpack::kDLInt);
  tensor->deleter(tensor);
}

TEST(ToDlpack, AShapeOfAnotherCountIsAnErrorAndTheBufferKeepsItsMemory) {
  gpusel::Buffer<double> buffer{1, 2, 3};
  const double* address = buffer.data();
  EXPECT_TRUE(throws_saying(
      [&] {
        (void)gpusel::to_dlpack(std::move(buffer), {2, 2});
      },
      "the shape {2, 2} does not count 3 elements"));
  EXPECT_TRUE(throws_saying([&] { (void)gpusel::to_dlpack(std::move(buffer), {-1, -3}); }, "{-1, -3}"));
  EXPECT_EQ(buffer.data(), address);  // NOLINT(bugprone-use-after-move): unchanged on an Error
  EXPECT_EQ(buffer.to_vector(), (std::vector<double>{1, 2, 3}));
}

TEST(ToDlpack, AShapeOfNoElementWhoseStridesPassInt64IsAnError) {
  gpusel::Buffer<double> buffer;
  constexpr std::int64_t two_to_40 = std::int64_t{1} << 40;
  EXPECT_TRUE(throws_saying(
      [&] {
        (void)gpusel::to_dlpack(std::move(buffer), {0, two_to_40, two_to_40});
      },
      "the shape {0, 1099511627776, 1099511627776} gives strides past int64_t's range"));
  // NOLINTNEXTLINE(bugprone-use-after-move): unchanged on an Error
  auto* tensor = gpusel::to_dlpack(std::move(buffer), {0, two_to_40, 1 << 20});  // 2^60: fits
  EXPECT_EQ(tensor->dl_tensor.strides[0], std::int64_t{1} << 60);
  tensor->deleter(tensor);
}

TEST(ToDlpack, AnEmptyBufferExportsATensorOfShapeZero) {
  auto tensor = gpusel::to_dlpack(gpusel::Buffer<bool>());
  EXPECT_EQ(tensor->dl_tensor.ndim, 1);
  EXPECT_EQ(tensor->dl_tensor.shape[0], 0);
  EXPECT_EQ(tensor->dl_tensor.dtype.code, gpusel::dlpack::kDLBool);
  EXPECT_EQ(tensor->dl_tensor.dtype.bits, 8);
  tensor->deleter(tensor);
}

TEST(ToDlpack, NamesEveryElementTypeAsDlpackDoes) {
  using gpusel::detail::dlpack_data_type;
  EXPECT_EQ(dlpack_data_type<std::uint16_t>().code, gpusel::dlpack::kDLUInt);
  EXPECT_EQ(dlpack_data_type<std::uint16_t>().bits, 16);
  EXPECT_EQ(dlpack_data_type<std::int64_t>().bits, 64);
  EXPECT_EQ(dlpack_data_type<std::int8_t>().code, gpusel::dlpack::kDLInt);
  EXPECT_EQ(dlpack_data_type<std::complex<float>>().code, gpusel::dlpack::kDLComplex);
  EXPECT_EQ(dlpack_data_type<std::complex<float>>().bits, 64);
  EXPECT_EQ(dlpack_data_type<std::complex<double>>().bits, 128);
  EXPECT_EQ(dlpack_data_type<double>().code, gpusel::dlpack::kDLFloat);
}

TEST(ToDlpackUnversioned, GivesTheStructOlderConsumersTake) {
  gpusel::Buffer<std::uint8_t> buffer{7, 8};
  const auto* address = buffer.data();
  ManagedTensor* tensor = gpusel::to_dlpack_unversioned(std::move(buffer));
  EXPECT_EQ(tensor->dl_tensor.data, address);
  EXPECT_EQ(tensor->dl_tensor.dtype.code, gpusel::dlpack::kDLUInt);
  tensor->deleter(tensor);
}

TEST(FromDlpack, TakesATensorWithoutACopyAndCallsItsDeleterOnceWhenTheBufferDies) {
  Produced produced({1.5, 2.5, 3.5});
  {
    gpusel::Buffer<double> buffer = gpusel::from_dlpack<double>(&produced.managed);
    EXPECT_EQ(buffer.data(), produced.values.data());
    EXPECT_EQ(buffer.size(), 3u);
    EXPECT_TRUE(buffer.is_cpu());
    EXPECT_FALSE(buffer.is_pinned());
    EXPECT_EQ(buffer.to_vector(), produced.values);
    gpusel::Buffer<double> moved = std::move(buffer);
    EXPECT_EQ(produced.deleted, 0);
    moved = std::move(moved).to(gpusel::cpu());  // already there: handed over, still the producer's memory
    EXPECT_EQ(moved.data(), produced.values.data());
    EXPECT_EQ(produced.deleted, 0);
  }
  EXPECT_EQ(produced.deleted, 1);
}

TEST(FromDlpack, TakesBackWhatToDlpackGaveAtTheSameAddress) {
  gpusel::Buffer<std::int16_t> buffer{1, 2, 3, 4, 5, 6};
  const auto* address = buffer.data();
  auto* tensor = gpusel::to_dlpack_unversioned(std::move(buffer), {3, 2});
  gpusel::Buffer<std::int16_t> back = gpusel::from_dlpack<std::int16_t>(tensor);
  EXPECT_EQ(back.data(), address);
  EXPECT_EQ(back.to_vector(), (std::vector<std::int16_t>{1, 2, 3, 4, 5, 6}));
}

TEST(FromDlpack, NullptrIsAnError) {
  EXPECT_TRUE(throws_saying([] { (void)gpusel::from_dlpack<float>(static_cast<ManagedTensorVersioned*>(nullptr)); },
                            "gpusel::from_dlpack: the tensor is nullptr"));
}

// Each bad tensor is refused with an Error that names what differs, and the
// caller keeps it: its deleter is not called.
struct Refused {
  const char* says;
  void (*spoil)(Produced&);
};

// Each case spoils a fresh four-element tensor; the import must refuse it, saying `says`, and
// leave the tensor (its deleter uncalled) to the caller.
template <std::size_t N>
void expect_each_refused_and_left_to_the_caller(const Refused (&cases)[N]) {
  for (const Refused& refused : cases) {
    Produced produced({1, 2, 3, 4});
    refused.spoil(produced);
    EXPECT_TRUE(throws_saying([&] { (void)gpusel::from_dlpack<double>(&produced.managed); }, refused.says))
        << refused.says;
    EXPECT_EQ(produced.deleted, 0) << refused.says;
  }
}

TEST(FromDlpack, RefusesWhatABufferCannotHoldAndLeavesTheTensorToTheCaller) {
  const Refused cases[] = {
      {"the Buffer's element type is float64", [](Produced& p) { p.managed.dl_tensor.dtype.code = 0; }},
      {"int64 tensor", [](Produced& p) { p.managed.dl_tensor.dtype.code = 0; }},
      {"float32 tensor", [](Produced& p) { p.managed.dl_tensor.dtype.bits = 32; }},
      {"float64x2 (2 lanes)", [](Produced& p) { p.managed.dl_tensor.dtype.lanes = 2; }},
      {"DLPack version 2.0; gpusel speaks DLPack 1.x",
       [](Produced& p) {
         p.managed.version = {2, 0};
       }},
      {"read-only", [](Produced& p) { p.managed.flags = gpusel::dlpack::kFlagBitmaskReadOnly; }},
      {"device type 7, id 0, which gpusel cannot use",
       [](Produced& p) { p.managed.dl_tensor.device.device_type = gpusel::dlpack::kDLVulkan; }},
      {"not contiguous: strides[0] is 2, row-major needs 1",
       [](Produced& p) {
         p.strides = {2};
         p.managed.dl_tensor.strides = p.strides.data();
       }},
      {" + 4 = 0x", [](Produced& p) { p.managed.dl_tensor.byte_offset = 4; }},
      {"shape[0] is -3",
       [](Produced& p) {
         p.shape = {-3};
         p.managed.dl_tensor.shape = p.shape.data();
       }},
      {"data is NULL", [](Produced& p) { p.managed.dl_tensor.data = nullptr; }},
  };
  expect_each_refused_and_left_to_the_caller(cases);
}

// Sizes whose arithmetic overflows (Note [DLPack sizes that fit]): each refused
// before ownership passes, never a Buffer of a wrapped size or address.
TEST(FromDlpack, RefusesSizesAndOffsetsThatOverflowAndLeavesTheTensorToTheCaller) {
  constexpr std::int64_t two_to_61 = std::int64_t{1} << 61;
  constexpr std::int64_t two_to_62 = std::int64_t{1} << 62;
  const Refused cases[] = {
      {"the shape {2305843009213693953} counts more than 1152921504606846975 elements of 8 bytes",
       [](Produced& p) {  // times 8 is 8 mod 2^64: a Buffer of one element
         p.shape = {two_to_61 + 1};
         p.managed.dl_tensor.shape = p.shape.data();
       }},
      {"the shape {4611686018427387904} counts more than",
       [](Produced& p) {  // times 8 is 0 mod 2^64: an empty Buffer
         p.shape = {two_to_62};
         p.managed.dl_tensor.shape = p.shape.data();
       }},
      {"the shape {4611686018427387904, 2} counts more than",
       [](Produced& p) {  // the row-major strides' product passes int64_t
         p.shape = {two_to_62, 2};
         p.strides = {2, 1};
         p.managed.dl_tensor.ndim = 2;
         p.managed.dl_tensor.shape = p.shape.data();
         p.managed.dl_tensor.strides = p.strides.data();
       }},
      {"the shape {4294967296, 4294967296, 2} counts more than",
       [](Produced& p) {  // the count itself passes size_t
         p.shape = {std::int64_t{1} << 32, std::int64_t{1} << 32, 2};
         p.managed.dl_tensor.ndim = 3;
         p.managed.dl_tensor.shape = p.shape.data();
       }},
      {") + byte_offset (18446744073709551608) + the 32 bytes of its elements pass the end of the address space",
       [](Produced& p) { p.managed.dl_tensor.byte_offset = ~std::uint64_t{7}; }},
      {"device_id is -1, which names no CUDA device",
       [](Produced& p) {
         p.managed.dl_tensor.device = {gpusel::dlpack::kDLCUDA, -1};
       }},
      {"gpusel::from_dlpack(float64 tensor on kDLCUDA:-2): device_id is -2",
       [](Produced& p) {
         p.managed.dl_tensor.device = {gpusel::dlpack::kDLCUDA, -2};
       }},
      {"shape[1] is -1",
       [](Produced& p) {  // no element, but a negative extent all the same
         p.shape = {0, -1};
         p.managed.dl_tensor.ndim = 2;
         p.managed.dl_tensor.shape = p.shape.data();
       }},
  };
  if (gpusel_test::kEmulated) (void)gpusel_test::need_devices(2);
  expect_each_refused_and_left_to_the_caller(cases);
}

TEST(FromDlpack, AMisalignedStartIsNamedByItsAddressAndTheAlignmentNeeded) {
  Produced produced({1, 2, 3, 4});
  produced.shape = {2};
  produced.managed.dl_tensor.byte_offset = 12;
  const auto data = reinterpret_cast<std::uintptr_t>(produced.values.data());
  std::ostringstream expected;
  expected << std::hex << "data + byte_offset (0x" << data << " + " << std::dec << 12 << " = 0x" << std::hex
           << data + 12 << ") is not aligned to 8 bytes, as the element type needs";
  EXPECT_TRUE(throws_saying([&] { (void)gpusel::from_dlpack<double>(&produced.managed); }, expected.str()));
  EXPECT_EQ(produced.deleted, 0);
}

TEST(FromDlpack, AnExtentOfZeroMakesAnEmptyBufferWhateverTheOtherExtents) {
  Produced produced({1});
  produced.shape = {std::int64_t{1} << 62, 0, std::int64_t{1} << 62};
  produced.managed.dl_tensor.ndim = 3;
  produced.managed.dl_tensor.shape = produced.shape.data();
  { EXPECT_TRUE(gpusel::from_dlpack<double>(&produced.managed).empty()); }
  EXPECT_EQ(produced.deleted, 1);
}

TEST(FromDlpack, TakesContiguousNDTensorsFlattenedWhateverTheirSizeOneStrides) {
  Produced produced({1, 2, 3, 4, 5, 6});
  produced.shape = {2, 1, 3};
  produced.strides = {3, 99, 1};  // a dimension of size 1 may have any stride
  produced.managed.dl_tensor.ndim = 3;
  produced.managed.dl_tensor.shape = produced.shape.data();
  produced.managed.dl_tensor.strides = produced.strides.data();
  {
    auto buffer = gpusel::from_dlpack<double>(&produced.managed);
    EXPECT_EQ(buffer.size(), 6u);
    EXPECT_EQ(buffer.to_vector()[5], 6.0);
  }
  EXPECT_EQ(produced.deleted, 1);
}

TEST(FromDlpack, AnAlignedByteOffsetStartsTheBufferThere) {
  Produced produced({1, 2, 3, 4});
  produced.shape = {2};
  produced.managed.dl_tensor.byte_offset = 2 * sizeof(double);
  {
    auto buffer = gpusel::from_dlpack<double>(&produced.managed);
    EXPECT_EQ(buffer.data(), produced.values.data() + 2);
    EXPECT_EQ(buffer.to_vector(), (std::vector<double>{3, 4}));
  }
  EXPECT_EQ(produced.deleted, 1);
}

TEST(FromDlpack, AnEmptyTensorGivesAnEmptyBufferThatStillCallsTheDeleter) {
  Produced produced({});
  { EXPECT_TRUE(gpusel::from_dlpack<double>(&produced.managed).empty()); }
  EXPECT_EQ(produced.deleted, 1);
}

TEST(FromDlpack, AZeroDimensionalTensorIsOneElement) {
  Produced produced({42});
  produced.managed.dl_tensor.ndim = 0;
  auto buffer = gpusel::from_dlpack<double>(&produced.managed);
  EXPECT_EQ(buffer.to_vector(), std::vector<double>{42});
}

TEST(FromDlpack, ACudaTensorOfADeviceThisProcessDoesNotSeeIsAnError) {
  Produced produced({1});
  produced.managed.dl_tensor.device = {gpusel::dlpack::kDLCUDA, 7};
  if (gpusel_test::kEmulated) (void)gpusel_test::need_devices(2);
  EXPECT_TRUE(throws_saying([&] { (void)gpusel::from_dlpack<double>(&produced.managed); },
                            "gpusel::from_dlpack(float64 tensor on kDLCUDA:7)"));
  EXPECT_EQ(produced.deleted, 0);
}

// On a GPU (the GPU check runs dlpack_test_real there), as on the emulated runtime.
TEST(DlpackOnAGpu, ACudaBufferGoesOutOnTheConsumersStreamAndComesBackAtTheSameAddress) {
  if (auto why = gpusel_test::need_devices(1)) GTEST_SKIP() << *why;
  gpusel::Stream consumer(gpusel::cuda(0), gpusel::StreamOrder::independent);
  auto buffer = gpusel::full<float>(1000, 1.5f, gpusel::cuda(0));
  const float* address = buffer.data();
  auto* tensor = gpusel::to_dlpack(std::move(buffer), consumer, {10, 100});
  EXPECT_EQ(tensor->dl_tensor.device.device_type, gpusel::dlpack::kDLCUDA);
  EXPECT_EQ(tensor->dl_tensor.device.device_id, 0);
  EXPECT_EQ(tensor->dl_tensor.data, address);
  std::vector<float> seen(1000);
  ASSERT_EQ(cudaMemcpyAsync(seen.data(), tensor->dl_tensor.data, 1000 * sizeof(float), cudaMemcpyDeviceToHost,
                            consumer.handle()),
            cudaSuccess);
  consumer.synchronize();
  EXPECT_EQ(seen, std::vector<float>(1000, 1.5f));
  gpusel::Buffer<float> back = gpusel::from_dlpack<float>(tensor, consumer);
  EXPECT_EQ(back.data(), address);
  EXPECT_EQ(back.to_vector(), std::vector<float>(1000, 1.5f));
}

#if GPUSEL_TEST_EMULATED
TEST(ToDlpack, APinnedBufferIsACudaHostTensor) {
  (void)gpusel_test::need_devices(1);
  auto buffer = gpusel::Buffer<float>::pinned(8);
  const float* address = buffer.data();
  auto* tensor = gpusel::to_dlpack(std::move(buffer));
  EXPECT_EQ(tensor->dl_tensor.device.device_type, gpusel::dlpack::kDLCUDAHost);
  EXPECT_EQ(tensor->dl_tensor.data, address);
  auto back = gpusel::from_dlpack<float>(tensor);
  EXPECT_TRUE(back.is_pinned());
  EXPECT_EQ(back.data(), address);
}

TEST(ToDlpack, ACudaBufferWithoutTheConsumersStreamIsAnErrorAndStaysWhole) {
  (void)gpusel_test::need_devices(2);
  gpusel::Buffer<float> buffer(4, gpusel::cuda(1));
  const float* address = buffer.data();
  EXPECT_TRUE(throws_saying([&] { (void)gpusel::to_dlpack(std::move(buffer)); },
                            "gpusel::to_dlpack(4 elements on cuda:1): a CUDA Buffer is exported on the consumer's "
                            "stream: pass its StreamView"));
  EXPECT_EQ(buffer.data(), address);  // NOLINT(bugprone-use-after-move): unchanged on an Error
}

// --- device memory, on the emulated runtime ----------------------------------

std::vector<std::string>& reported_errors() {
  static std::vector<std::string> errors;
  return errors;
}
void record_error(const gpusel::Error& error) { reported_errors().push_back(error.what()); }

// A producer's tensor over device memory it allocated itself with cudaMalloc
// on `device`; its deleter frees it at once, and notes what was still queued.
struct ProducedOnDevice {
  std::vector<std::int64_t> shape;
  ManagedTensorVersioned managed{};
  int deleted = 0;
  int pending_when_deleted = -1;

  ProducedOnDevice(std::int64_t count, int device) : shape{count} {
    cudaSetDevice(device);
    void* memory = nullptr;
    cudaMalloc(&memory, static_cast<std::size_t>(count) * sizeof(float));
    cudaSetDevice(0);
    managed.version = {1, 1};
    managed.manager_ctx = this;
    managed.deleter = [](ManagedTensorVersioned* self) {
      auto* produced = static_cast<ProducedOnDevice*>(self->manager_ctx);
      ++produced->deleted;
      produced->pending_when_deleted = gpusel_emulated::pending_operations();
      cudaFree(self->dl_tensor.data);
    };
    managed.dl_tensor.data = memory;
    managed.dl_tensor.device = {gpusel::dlpack::kDLCUDA, device};
    managed.dl_tensor.ndim = 1;
    managed.dl_tensor.dtype = {gpusel::dlpack::kDLFloat, 32, 1};
    managed.dl_tensor.shape = shape.data();
  }
};

TEST(ToDlpackOnAGpu, TheConsumersStreamWaitsForGpuselsPendingWorkWithEventsOnly) {
  (void)gpusel_test::need_devices(2);
  gpusel::Stream copying(gpusel::cuda(1), gpusel::StreamOrder::independent);
  gpusel::Stream consumer(gpusel::cuda(1), gpusel::StreamOrder::independent);
  auto pinned = gpusel::Buffer<float>::pinned(256);
  pinned.fill(2.5f);
  auto buffer = pinned.to(gpusel::cuda(1), copying);  // queued on `copying`, recorded for the Buffer
  ASSERT_EQ(gpusel_emulated::pending_operations(), 1);
  const float* address = buffer.data();
  gpusel_emulated::clear_calls();
  auto* tensor = gpusel::to_dlpack(std::move(buffer), consumer);
  EXPECT_EQ(tensor->dl_tensor.data, address);
  EXPECT_EQ(tensor->dl_tensor.device.device_type, gpusel::dlpack::kDLCUDA);
  EXPECT_EQ(tensor->dl_tensor.device.device_id, 1);
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamWaitEvent"), 2) << "the legacy stream's event and the copy's";
  EXPECT_EQ(gpusel_emulated::pending_operations(), 0) << "the consumer's stream waited for the copy";
  EXPECT_EQ(gpusel_emulated::calls("cudaDeviceSynchronize"), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamSynchronize"), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaEventSynchronize"), 0);
  std::vector<float> seen(256);
  cudaMemcpy(seen.data(), tensor->dl_tensor.data, 256 * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(seen, std::vector<float>(256, 2.5f));
  tensor->deleter(tensor);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(1), 0u) << "back to gpusel's pool";
  EXPECT_EQ(gpusel_emulated::live_events(), 0);
}

TEST(ToDlpackOnAGpu, TheDeleterFreesOnTheBuffersGpuFromAnotherThreadWithAnotherDeviceCurrent) {
  (void)gpusel_test::need_devices(2);
  gpusel::Stream consumer(gpusel::cuda(1));
  auto* tensor = gpusel::to_dlpack(gpusel::Buffer<float>(1024, gpusel::cuda(1)), consumer);
  ASSERT_GT(gpusel_emulated::bytes_allocated(1), 0u);
  int current_after = -1;
  std::thread other([&] {  // a fresh thread: device 0 current, which has no context
    tensor->deleter(tensor);
    current_after = gpusel::current_device();
  });
  other.join();
  EXPECT_EQ(gpusel_emulated::bytes_allocated(1), 0u);
  EXPECT_EQ(current_after, 0) << "the thread's device is restored (deferred: Note [What a guard restores])";
  EXPECT_FALSE(gpusel_emulated::has_primary_context(0)) << "freed on cuda:1, nothing made on cuda:0";
  EXPECT_EQ(gpusel_emulated::live_events(), 0);
}

TEST(ToDlpackOnAGpu, TheFreeIsOrderedAfterWhatTheConsumerQueuedBeforeDroppingTheTensor) {
  (void)gpusel_test::need_devices(2);
  gpusel::Stream consumer(gpusel::cuda(1), gpusel::StreamOrder::independent);
  auto* tensor = gpusel::to_dlpack(gpusel::Buffer<float>(256, gpusel::cuda(1)), consumer);
  auto pinned = gpusel::Buffer<float>::pinned(256);
  pinned.fill(1.0f);
  // the consumer's own work on the tensor, on its stream
  cudaMemcpyAsync(tensor->dl_tensor.data, pinned.data(), 256 * sizeof(float), cudaMemcpyHostToDevice,
                  consumer.handle());
  ASSERT_EQ(gpusel_emulated::pending_operations(), 1);
  gpusel_emulated::clear_calls();
  tensor->deleter(tensor);
  EXPECT_EQ(gpusel_emulated::calls("cudaEventRecord"), 1);
  EXPECT_GE(gpusel_emulated::calls("cudaStreamWaitEvent"), 1) << "the legacy stream waits for the consumer's";
  EXPECT_EQ(gpusel_emulated::pending_operations(), 1)
      << "only the free is queued: the consumer's copy ran when the legacy stream waited for its stream";
  EXPECT_EQ(gpusel_emulated::calls("cudaDeviceSynchronize"), 0);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(1), 0u);

  // Without the consumer's stream, nothing orders the free after its copy.
  auto* unordered = gpusel::to_dlpack(gpusel::Buffer<float>(256, gpusel::cuda(1)), gpusel::dlpack::no_synchronize);
  cudaMemcpyAsync(unordered->dl_tensor.data, pinned.data(), 256 * sizeof(float), cudaMemcpyHostToDevice,
                  consumer.handle());
  const int queued = gpusel_emulated::pending_operations();
  unordered->deleter(unordered);
  EXPECT_EQ(gpusel_emulated::pending_operations(), queued + 1) << "the copy is still queued beside the free";
  consumer.synchronize();
}

TEST(ToDlpackOnAGpu, NoSynchronizeMakesNoStreamWait) {
  (void)gpusel_test::need_devices(2);
  gpusel::Buffer<double> buffer(16, gpusel::cuda(1));
  gpusel_emulated::clear_calls();
  auto* tensor = gpusel::to_dlpack_unversioned(std::move(buffer), gpusel::dlpack::no_synchronize, {4, 4});
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamWaitEvent"), 0);
  EXPECT_EQ(gpusel_emulated::calls("cudaEventRecord"), 0);
  EXPECT_EQ(tensor->dl_tensor.strides[0], 4);
  tensor->deleter(tensor);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(1), 0u);
}

TEST(ToDlpackOnAGpu, AConsumersStreamOfAnotherGpuIsAnErrorAndTheBufferStaysWhole) {
  (void)gpusel_test::need_devices(2);
  gpusel::Stream on_0(gpusel::cuda(0));
  gpusel::Buffer<float> buffer(4, gpusel::cuda(1));
  const float* address = buffer.data();
  EXPECT_TRUE(throws_saying([&] { (void)gpusel::to_dlpack(std::move(buffer), on_0); },
                            "gpusel::to_dlpack(16 bytes on cuda:1): the consumer's stream is a stream of cuda:0, "
                            "not of the Buffer's GPU"));
  EXPECT_EQ(buffer.data(), address);  // NOLINT(bugprone-use-after-move): unchanged on an Error
}

// Each CUDA call of an export and its deleter failing, once each: the export
// throws with the Buffer whole, or succeeds; either way nothing leaks.
TEST(ToDlpackOnAGpu, AFailingCallAtExportOrInTheDeleterLeaksNothing) {
  for (const char* function : {"cudaEventCreateWithFlags", "cudaEventRecord", "cudaStreamWaitEvent"}) {
    for (int nth = 1; nth <= 2; ++nth) {
      (void)gpusel_test::need_devices(2);
      {
        gpusel::Stream consumer(gpusel::cuda(1), gpusel::StreamOrder::independent);
        gpusel::Buffer<float> buffer(64, gpusel::cuda(1));
        gpusel_emulated::fail_call(function, nth, cudaErrorLaunchFailure);
        try {
          auto* tensor = gpusel::to_dlpack(std::move(buffer), consumer);
          tensor->deleter(tensor);
        } catch (const gpusel::Error&) {
          EXPECT_EQ(buffer.size(), 64u) << function << " " << nth;  // NOLINT(bugprone-use-after-move)
        }
        gpusel_emulated::clear_failures();
      }
      EXPECT_EQ(gpusel_emulated::bytes_allocated(1), 0u) << function << " " << nth;
      EXPECT_EQ(gpusel_emulated::live_events(), 0) << function << " " << nth;
    }
  }
}

TEST(ToDlpackOnAGpu, TheDeleterAtExitNeitherThrowsNorCrashesNorReports) {
  (void)gpusel_test::need_devices(2);
  reported_errors().clear();
  const gpusel::RestoreErrorHandler previous = gpusel::set_restore_error_handler(&record_error);
  {
    gpusel::Stream consumer(gpusel::cuda(1));
    auto* tensor = gpusel::to_dlpack(gpusel::Buffer<float>(64, gpusel::cuda(1)), consumer);
    auto* pinned = gpusel::to_dlpack(gpusel::Buffer<float>::pinned(64));
    gpusel_emulated::begin_process_exit();
    tensor->deleter(tensor);  // the runtime refuses: the process takes the memory
    pinned->deleter(pinned);
  }
  EXPECT_GT(gpusel_emulated::calls_refused_while_unloading(), 0);
  gpusel::set_restore_error_handler(previous);
  EXPECT_TRUE(reported_errors().empty()) << reported_errors().front();
  (void)gpusel_test::need_devices(1);  // a new process
}

TEST(ToDlpackOnAGpu, TheDeleterInAChildForkedAfterCudaStartedLeaksAndCallsNoCuda) {
  (void)gpusel_test::need_devices(2);
  gpusel::Stream consumer(gpusel::cuda(1));
  auto* tensor = gpusel::to_dlpack(gpusel::Buffer<float>(64, gpusel::cuda(1)), consumer);
  auto* pinned = gpusel::to_dlpack(gpusel::Buffer<float>::pinned(64));
  const int status = gpusel_test::in_forked_child([&] {
    if (!gpusel::detail::forked_after_cuda()) return 2;
    gpusel_emulated::clear_calls();
    tensor->deleter(tensor);
    pinned->deleter(pinned);
    return gpusel_emulated::call_log().empty() ? 0 : 3;
  });
  EXPECT_EQ(status, 0);
  tensor->deleter(tensor);  // the parent still owns its tensors
  pinned->deleter(pinned);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(1), 0u);
}

TEST(FromDlpackOnAGpu, TheProducersDeleterRunsAfterTheWorkRecordedOnTheBuffer) {
  (void)gpusel_test::need_devices(2);
  ProducedOnDevice produced(256, 1);
  auto pinned = gpusel::Buffer<float>::pinned(256);
  pinned.fill(3.0f);
  gpusel::Stream stream(gpusel::cuda(1), gpusel::StreamOrder::independent);
  {
    auto buffer = gpusel::from_dlpack<float>(&produced.managed);
    EXPECT_TRUE(buffer.is_cuda());
    EXPECT_EQ(buffer.device(), gpusel::cuda(1));
    EXPECT_EQ(buffer.data(), produced.managed.dl_tensor.data);
    cudaMemcpyAsync(buffer.data(), pinned.data(), buffer.bytes(), cudaMemcpyHostToDevice, stream.handle());
    buffer.record_stream(stream);
    ASSERT_EQ(gpusel_emulated::pending_operations(), 1);
    gpusel_emulated::clear_calls();
  }
  EXPECT_EQ(produced.deleted, 1);
  EXPECT_EQ(produced.pending_when_deleted, 0) << "the recorded copy was done before the producer freed";
  EXPECT_EQ(gpusel_emulated::calls("cudaDeviceSynchronize"), 0);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(1), 0u);
  EXPECT_EQ(gpusel_emulated::live_events(), 0);
}

TEST(FromDlpackOnAGpu, GpuselsWorkIsOrderedAfterTheProducersStream) {
  (void)gpusel_test::need_devices(2);
  ProducedOnDevice produced(256, 1);
  gpusel::Stream producer(gpusel::cuda(1), gpusel::StreamOrder::independent);
  auto pinned = gpusel::Buffer<float>::pinned(256);
  pinned.fill(4.0f);
  cudaMemcpyAsync(produced.managed.dl_tensor.data, pinned.data(), 256 * sizeof(float), cudaMemcpyHostToDevice,
                  producer.handle());  // the producer's work, still queued
  ASSERT_EQ(gpusel_emulated::pending_operations(), 1);
  gpusel_emulated::clear_calls();
  auto buffer = gpusel::from_dlpack<float>(&produced.managed, producer);
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamWaitEvent"), 1);
  EXPECT_EQ(gpusel_emulated::calls("cudaStreamSynchronize") + gpusel_emulated::calls("cudaDeviceSynchronize"), 0);
  EXPECT_EQ(buffer.to_vector(), std::vector<float>(256, 4.0f)) << "gpusel's copy came after the producer's";
}

TEST(FromDlpackOnAGpu, AProducersStreamOfAnotherGpuIsAnErrorAndTheCallerKeepsTheTensor) {
  (void)gpusel_test::need_devices(2);
  ProducedOnDevice produced(4, 1);
  gpusel::Stream on_0(gpusel::cuda(0));
  EXPECT_TRUE(throws_saying([&] { (void)gpusel::from_dlpack<float>(&produced.managed, on_0); },
                            "the producer's stream is a stream of cuda:0, not of the tensor's GPU"));
  EXPECT_EQ(produced.deleted, 0);
  produced.managed.deleter(&produced.managed);
}

TEST(FromDlpackOnAGpu, ABufferThatDiesInAForkedChildLeavesTheTensorAlone) {
  (void)gpusel_test::need_devices(2);
  ProducedOnDevice produced(16, 1);
  auto buffer = gpusel::from_dlpack<float>(&produced.managed);
  gpusel::Stream stream(gpusel::cuda(1), gpusel::StreamOrder::independent);
  buffer.record_stream(stream);  // an event the child must not destroy
  const int status = gpusel_test::in_forked_child([&] {
    gpusel_emulated::clear_calls();
    { gpusel::Buffer<float> dying = std::move(buffer); }
    if (produced.deleted != 0) return 2;
    return gpusel_emulated::call_log().empty() ? 0 : 3;
  });
  EXPECT_EQ(status, 0);
  buffer = gpusel::Buffer<float>();
  EXPECT_EQ(produced.deleted, 1);
}
#endif

}  // namespace
