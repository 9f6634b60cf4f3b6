// Specification of gpusel::Device (include/gpusel/device.hpp).
#include "gpusel/device.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <unordered_set>

namespace {

using gpusel::Device;
using gpusel::DeviceType;

TEST(Device, ParsesCpu) {
  const Device d = Device::parse("cpu");
  EXPECT_TRUE(d.is_cpu());
  EXPECT_FALSE(d.is_cuda());
  EXPECT_FALSE(d.has_index());
  EXPECT_EQ(d.index(), Device::kNoIndex);
  EXPECT_EQ(d, gpusel::cpu());
}

TEST(Device, ParsesCpuZeroAsCpuWithIndexZero) {
  const Device d = Device::parse("cpu:0");
  EXPECT_TRUE(d.is_cpu());
  EXPECT_TRUE(d.has_index());
  EXPECT_EQ(d.index(), 0);
  EXPECT_NE(d, gpusel::cpu()) << "as in PyTorch, torch.device('cpu:0') != torch.device('cpu')";
}

TEST(Device, ParsesCudaWithoutIndexAsTheCurrentDevice) {
  const Device d = Device::parse("cuda");
  EXPECT_TRUE(d.is_cuda());
  EXPECT_FALSE(d.has_index());
  EXPECT_EQ(d, gpusel::cuda());
}

TEST(Device, ParsesCudaIndices) {
  EXPECT_EQ(Device::parse("cuda:0"), gpusel::cuda(0));
  EXPECT_EQ(Device::parse("cuda:1").index(), 1);
  EXPECT_EQ(Device::parse("cuda:10").index(), 10);
  EXPECT_EQ(Device::parse("cuda:2147483647").index(), 2147483647);
}

TEST(Device, StrRoundTrips) {
  for (const char* text : {"cpu", "cpu:0", "cuda", "cuda:0", "cuda:7", "cuda:123"}) {
    EXPECT_EQ(Device::parse(text).str(), text);
    EXPECT_EQ(Device::parse(Device::parse(text).str()), Device::parse(text));
  }
}

TEST(Device, StreamsItsName) {
  std::ostringstream out;
  out << gpusel::cuda(3) << " " << gpusel::cpu();
  EXPECT_EQ(out.str(), "cuda:3 cpu");
}

TEST(Device, IsARegularValueType) {
  static_assert(std::is_trivially_copyable_v<Device>);
  static_assert(sizeof(Device) <= 8);
  static_assert(!std::is_default_constructible_v<Device>);
  constexpr Device compile_time = gpusel::cuda(2);
  static_assert(compile_time.index() == 2 && compile_time.is_cuda());
  Device a = gpusel::cuda(1);
  Device b = a;
  EXPECT_EQ(a, b);
  b = gpusel::cpu();
  EXPECT_NE(a, b);
}

TEST(Device, HashesEqualDevicesAlikeAndDistinguishesOthers) {
  std::unordered_set<Device> set{gpusel::cpu(), gpusel::cuda(), gpusel::cuda(0), gpusel::cuda(1),
                                 Device::parse("cpu:0")};
  EXPECT_EQ(set.size(), 5u);
  EXPECT_EQ(set.count(Device::parse("cuda:1")), 1u);
  EXPECT_EQ(std::hash<Device>()(gpusel::cuda(4)), std::hash<Device>()(Device::parse("cuda:4")));
}

TEST(Device, ConstructorRejectsNegativeIndicesAndIndexedCpu) {
  EXPECT_THROW(Device(DeviceType::CUDA, -2), gpusel::Error);
  EXPECT_THROW(Device(DeviceType::CPU, 1), gpusel::Error);
  EXPECT_THROW(gpusel::cuda(-5), gpusel::Error);
  EXPECT_NO_THROW(Device(DeviceType::CPU, 0));
}

struct Rejected {
  const char* text;
  const char* reason;  // a part of the message that says what is wrong
};

class DeviceParseRejects : public ::testing::TestWithParam<Rejected> {};

TEST_P(DeviceParseRejects, WithAnErrorThatQuotesTheTextAndSaysWhatWasExpected) {
  const Rejected& c = GetParam();
  try {
    (void)Device::parse(c.text);
    FAIL() << "accepted \"" << c.text << "\"";
  } catch (const gpusel::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(std::string("\"") + c.text + "\""), std::string::npos) << message;
    EXPECT_NE(message.find(c.reason), std::string::npos) << message;
    EXPECT_NE(message.find("expected \"cpu\", \"cuda\" or \"cuda:N\""), std::string::npos) << message;
    EXPECT_EQ(e.code(), 0) << "a parse error did not come from CUDA";
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryMalformedForm, DeviceParseRejects,
    ::testing::Values(
        Rejected{"CUDA:1", "unknown device type \"CUDA\""}, Rejected{"Cpu", "unknown device type \"Cpu\""},
        Rejected{"gpu:0", "unknown device type \"gpu\""}, Rejected{"cuda:", "the index after ':' is missing"},
        Rejected{"cuda:-1", "is not a non-negative decimal number"},
        Rejected{"cuda:+1", "is not a non-negative decimal number"}, Rejected{"cuda:01", "has a leading zero"},
        Rejected{"cuda:00", "has a leading zero"}, Rejected{"cuda: 1", "is not a non-negative decimal number"},
        Rejected{" cuda:1", "unknown device type \" cuda\""},
        Rejected{"cuda:1 ", "is not a non-negative decimal number"},
        Rejected{"cuda:1:2", "is not a non-negative decimal number"},
        Rejected{"cuda:1a", "is not a non-negative decimal number"},
        Rejected{"cuda:99999999999", "is out of range (0..2147483647)"}, Rejected{"cuda:2147483648", "is out of range"},
        Rejected{"", "the device type is missing"}, Rejected{":0", "the device type is missing"},
        Rejected{"cpu:1", "the cpu device has no index other than 0"},
        Rejected{"cpu:", "the index after ':' is missing"}));

}  // namespace
