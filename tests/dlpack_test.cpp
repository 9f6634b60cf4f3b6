// gpusel/dlpack.hpp: Buffers handed to DLPack and taken from it, zero copy,
// with every check of a foreign tensor and who owns what on an Error.
#include "gpusel/dlpack.hpp"

#include <gtest/gtest.h>

#include <complex>
#include <cstdint>
#include <string>
#include <vector>

#include "gpusel/buffer.hpp"
#include "gpusel_test.hpp"

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
      {"byte_offset (4) is not aligned to 8 bytes", [](Produced& p) { p.managed.dl_tensor.byte_offset = 4; }},
      {"shape[0] is -3",
       [](Produced& p) {
         p.shape = {-3};
         p.managed.dl_tensor.shape = p.shape.data();
       }},
      {"data is NULL", [](Produced& p) { p.managed.dl_tensor.data = nullptr; }},
  };
  for (const Refused& refused : cases) {
    Produced produced({1, 2, 3, 4});
    refused.spoil(produced);
    EXPECT_TRUE(throws_saying([&] { (void)gpusel::from_dlpack<double>(&produced.managed); }, refused.says))
        << refused.says;
    EXPECT_EQ(produced.deleted, 0) << refused.says;
  }
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
#endif

}  // namespace
