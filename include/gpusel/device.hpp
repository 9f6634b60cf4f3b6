// gpusel::Device: where data lives and code runs, like torch.device.
//
//   Device::parse("cuda:1"), gpusel::cuda(1), gpusel::cuda(), gpusel::cpu()
//
// A Device is a value: two small integers, cheap to copy, compare and hash.
// This header includes no CUDA header; a Device is only a name until it is used.
// Layer: core (docs/layers.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>  // also declares std::hash, specialized below
#include <string_view>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/error.hpp"

namespace gpusel {

enum class DeviceType : std::int8_t { CPU = 0, CUDA = 1 };

// Note [Device grammar]
// ~~~~~~~~~~~~~~~~~~~~~
// The grammar is PyTorch's (c10/core/Device.cpp): a lower-case type, then
// optionally ':' and an index written as 0 or [1-9][0-9]*.
//   accepted: "cpu", "cpu:0", "cuda", "cuda:0", "cuda:12"
//   rejected: "CUDA:1", "gpu:0", "cuda:", "cuda:-1", "cuda:01", "cuda: 1",
//             "cuda:1:2", "", "cpu:1"
// c10 checks that the index fits its integer type only in debug builds; gpusel
// always does, so "cuda:99999999999" is an error rather than a wrapped index.
// Whether the index names a device that exists is decided when the Device is
// used (set_device, DeviceGuard, Buffer), since that depends on the process's
// CUDA_VISIBLE_DEVICES and the machine.
//
// A cuda Device without an index means "the current device": it is resolved
// when used, so inside DeviceGuard g(1) a Buffer made on gpusel::cuda() lands
// on device 1, exactly as torch.device("cuda") does.
class Device;
namespace detail {
constexpr Device checked_device(DeviceType type, int index) noexcept;
}  // namespace detail

class Device {
 public:
  using Index = int;
  static constexpr Index kNoIndex = -1;
  static constexpr Index kMaxIndex = std::numeric_limits<Index>::max();

  // No default constructor: there is no natural default device, and
  // gpusel::default_device() says which one a program chose.
  Device() = delete;

  // Throws Error for a negative index other than kNoIndex, or cpu with an index other than 0.
  constexpr Device(DeviceType type, Index index = kNoIndex) : type_(type), index_(index) {
    if (index < kNoIndex)
      throw Error("gpusel::Device: a device index cannot be negative, got " + std::to_string(index));
    if (type == DeviceType::CPU && index > 0)
      throw Error("gpusel::Device: the cpu device has no index other than 0, got cpu:" + std::to_string(index));
  }

  // Parses "cpu", "cpu:0", "cuda", "cuda:N" (Note [Device grammar]); throws Error quoting the text.
  [[nodiscard]] static Device parse(std::string_view text);

  constexpr DeviceType type() const noexcept { return type_; }
  constexpr bool is_cpu() const noexcept { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const noexcept { return type_ == DeviceType::CUDA; }
  constexpr bool has_index() const noexcept { return index_ != kNoIndex; }
  // The index, or kNoIndex (-1) when the device has none ("cuda": the current device).
  constexpr Index index() const noexcept { return index_; }

  // "cpu", "cpu:0", "cuda", "cuda:1": parse(d.str()) == d for every Device d.
  std::string str() const {
    std::string text = is_cpu() ? "cpu" : "cuda";
    if (has_index()) text += ":" + std::to_string(index_);
    return text;
  }

  friend constexpr bool operator==(const Device& a, const Device& b) noexcept {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }
  friend constexpr bool operator!=(const Device& a, const Device& b) noexcept { return !(a == b); }

  // A template, so that this header needs only <iosfwd>: the body is compiled
  // where it is used, and a file that streams a Device has <ostream> already.
  template <class CharT, class Traits>
  friend std::basic_ostream<CharT, Traits>& operator<<(std::basic_ostream<CharT, Traits>& out, const Device& device) {
    return out << device.str();
  }

 private:
  // For values already known to be valid: checks nothing, so it cannot throw.
  struct Checked {};
  constexpr Device(DeviceType type, Index index, Checked) noexcept : type_(type), index_(index) {}
  friend constexpr Device detail::checked_device(DeviceType type, int index) noexcept;

  DeviceType type_;
  Index index_;
};

namespace detail {
// A Device from a type and index the caller has already checked (an index
// >= kNoIndex; 0 or kNoIndex for cpu), as the runtime reports them.
constexpr Device checked_device(DeviceType type, int index) noexcept { return Device(type, index, Device::Checked{}); }
}  // namespace detail

constexpr Device cpu() noexcept { return detail::checked_device(DeviceType::CPU, Device::kNoIndex); }
// The current CUDA device, resolved when used.
constexpr Device cuda() noexcept { return detail::checked_device(DeviceType::CUDA, Device::kNoIndex); }
// Throws Error for a negative index.
constexpr Device cuda(Device::Index index) { return Device(DeviceType::CUDA, index); }

inline Device Device::parse(std::string_view text) {
  const auto reject = [text](std::string_view why) -> Error {
    return Error("gpusel::Device::parse(\"" + std::string(text) + "\"): " + std::string(why) +
                 "; expected \"cpu\", \"cuda\" or \"cuda:N\" with N written as 0 or [1-9][0-9]* (e.g. \"cuda:1\")");
  };
  const std::size_t colon = text.find(':');
  const std::string_view type_text = text.substr(0, colon);
  DeviceType type = DeviceType::CPU;
  if (type_text == "cpu") {
    type = DeviceType::CPU;
  } else if (type_text == "cuda") {
    type = DeviceType::CUDA;
  } else if (type_text.empty()) {
    throw reject("the device type is missing");
  } else {
    throw reject("unknown device type \"" + std::string(type_text) + "\" (device types are lower case: cpu, cuda)");
  }
  if (colon == std::string_view::npos) return Device(type);

  const std::string_view digits = text.substr(colon + 1);
  if (digits.empty()) throw reject("the index after ':' is missing");
  const detail::DecimalRead index = detail::read_decimal(digits, detail::DecimalGrammar::whole_text);
  if (!index.ok) throw reject("the index \"" + std::string(digits) + "\" is not a non-negative decimal number");
  if (digits.size() > 1 && digits[0] == '0')
    throw reject("the index \"" + std::string(digits) + "\" has a leading zero");
  if (index.overflow || index.value > static_cast<std::uint64_t>(kMaxIndex))
    throw reject("the index " + std::string(digits) + " is out of range (0.." + std::to_string(kMaxIndex) + ")");
  if (type == DeviceType::CPU && index.value != 0) throw reject("the cpu device has no index other than 0");
  return Device(type, static_cast<Index>(index.value));
}

}  // namespace gpusel

template <>
struct std::hash<gpusel::Device> {
  std::size_t operator()(const gpusel::Device& device) const noexcept {
    // Type and index in one word: distinct devices hash apart, as std::hash<long long> would.
    return static_cast<std::size_t>(static_cast<std::uint64_t>(device.type()) << 32 |
                                    static_cast<std::uint32_t>(device.index()));
  }
};
