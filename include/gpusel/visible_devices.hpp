// CUDA_VISIBLE_DEVICES exactly as the CUDA driver reads it: a pure parser.
//
//   auto map = gpusel::parse_visible_devices("2,0", uuids);   // uuids: the GPUs' UUIDs, CUDA's physical order
//   map.ok(); map.count();          // true, 2
//   map.physical(0);                // 2: cuda:0 is physical GPU 2
//   map.logical(0);                 // 1: physical GPU 0 is cuda:1
//   for (int physical_index : map) ...
//   map.tokens()[i].why();          // why each token was kept or ignored
//
// This header includes no CUDA header and makes no CUDA call: it answers what
// the runtime *would* do, so it can be asked before CUDA starts, from a parent
// process, or with an inventory of another machine.
// Layer: core (docs/layers.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/visible_tokens.hpp"
#include "gpusel/error.hpp"
#include "gpusel/text.hpp"

namespace gpusel {

// The physical GPUs as parse_visible_devices reads them: one UUID per GPU, in
// CUDA's physical order (CUDA_DEVICE_ORDER; see Note [CUDA's physical order] in
// physical_order.hpp), so uuids[i] is physical GPU i's ("GPU-f9ee9551-5061-...";
// an empty one matches no token). The parser needs nothing else of a GPU, so
// this is a view of the caller's strings: it owns nothing, and is meant to be
// passed straight to parse_visible_devices, which keeps no part of it.
class PhysicalUuids {
 public:
  // No GPU: parse_visible_devices(value, {}).
  PhysicalUuids() noexcept = default;
  // Implicit, so that a list of UUIDs can be passed as it is.
  PhysicalUuids(const std::vector<std::string>& uuids) noexcept : strings_(uuids.data()), size_(uuids.size()) {}
  PhysicalUuids(const std::vector<std::string_view>& uuids) noexcept : views_(uuids.data()), size_(uuids.size()) {}

  std::size_t size() const noexcept { return size_; }
  // Physical GPU i's UUID; i < size().
  std::string_view operator[](std::size_t i) const noexcept {
    return strings_ != nullptr ? std::string_view(strings_[i]) : views_[i];
  }

 private:
  const std::string* strings_ = nullptr;
  const std::string_view* views_ = nullptr;
  std::size_t size_ = 0;
};

// Note [How the driver reads CUDA_VISIBLE_DEVICES]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// parse_visible_devices answers what the CUDA runtime will do, so it follows
// the driver's rules exactly, quirks included, and not PyTorch's parser or what
// a value seems to mean: the process gets the GPUs the driver makes of the
// value, and where PyTorch reads "0,0" as no device the runtime fails with
// cudaErrorInvalidDevice. The rules were observed on the driver; they are
// listed beside parse_visible_devices in visible_devices-inl.hpp, each backed
// by rows of tests/data/visible_devices_h200*.tsv (every row a test), and
// docs/visible-devices.md gives users the pitfalls among them. A rule changes
// only with the driver's answer; where no answer was seen, Note [Rules chosen
// where the driver was not observed] decides.
//
// Note [Rules chosen where the driver was not observed]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With one GPU some cases could not be seen; these follow from the observed ones:
//  - A UUID prefix matching several GPUs ends the list, like an unknown one: the
//    driver matches prefixes, so a prefix that names no single GPU names nothing
//    it could pick (PyTorch's parser, written against the driver, does the same).
//  - After a token that names a device twice nothing more is read: the value is
//    an error whatever follows, so the remaining tokens change nothing.
//  - An invalid CUDA_DEVICE_ORDER wins over an empty list: the order decides what
//    the indices mean, so it is checked first (both are errors either way).
//  - MIG devices: a "MIG-" token is matched against GPU UUIDs, as observed; the
//    UUIDs of MIG instances are not among the physical GPUs' UUIDs, so a MIG-instance
//    UUID ends the list here, while the driver would select that instance.

// What happened to one token of CUDA_VISIBLE_DEVICES.
enum class TokenOutcome : std::uint8_t {
  kept,            // names a device that became visible
  no_digits,       // an index token with no digit ("", "abc", "-", " ")
  negative,        // an index that reads as a negative int ("-1", "4294967295")
  out_of_range,    // an index >= the number of physical GPUs
  unknown_uuid,    // a UUID token that selects no GPU ("GPU-", "GPU-bad")
  ambiguous_uuid,  // a UUID prefix that several GPUs share
  other_kind,      // a UUID in an index list, or an index in a UUID list
  duplicate,       // names a device already kept: the whole value is an error
  not_read,        // comes after the token that ended the list
};

struct VisibleToken {
  std::string text;
  TokenOutcome outcome = TokenOutcome::not_read;
  int physical = -1;    // the GPU it named (kept, duplicate), else -1
  long long value = 0;  // for index tokens read: the int the driver saw

  bool kept() const noexcept { return outcome == TokenOutcome::kept; }
  // "kept: physical GPU 1", "ignored: ends the list: it is out of range (5; this machine has 1 GPU: 0)".
  GPUSEL_API std::string why(int physical_count) const;
};

// The physical->logical map for one value of CUDA_VISIBLE_DEVICES.
class VisibleDevices;
// Declared before the class that befriends it, so that its first declaration carries GPUSEL_API.
[[nodiscard]] GPUSEL_API VisibleDevices parse_visible_devices(std::optional<std::string_view> cuda_visible_devices,
                                                              PhysicalUuids physical,
                                                              std::optional<std::string_view> cuda_device_order);

class VisibleDevices {
 public:
  // cudaErrorNoDevice and cudaErrorInvalidDevice as integers: this header
  // includes no CUDA header (runtime.hpp checks they match cudaError_t).
  static constexpr int kNoDevice = detail::kCudaErrorNoDevice;
  static constexpr int kInvalidDevice = detail::kCudaErrorInvalidDevice;

  // Whether the runtime would start with at least one device.
  bool ok() const noexcept { return error_code_ == 0; }
  // "cudaErrorNoDevice", "cudaErrorInvalidDevice", or "" when ok().
  const char* error_name() const noexcept {
    return error_code_ == kNoDevice        ? "cudaErrorNoDevice"
           : error_code_ == kInvalidDevice ? "cudaErrorInvalidDevice"
                                           : "";
  }
  // The cudaError_t value the runtime would return (0 when ok()).
  int error_code() const noexcept { return error_code_; }
  // Why the value is an error, in words; "" when ok().
  const std::string& reason() const noexcept { return reason_; }

  // How many devices CUDA would show (0 when not ok()).
  int count() const noexcept { return static_cast<int>(physical_.size()); }
  // The physical index of cuda:logical. Throws Error, naming the map, when there is no such device.
  GPUSEL_API int physical(int logical) const;
  // The logical index of a physical GPU, or nullopt when it is hidden.
  GPUSEL_API std::optional<int> logical(int physical) const noexcept;

  // The map, logical order: physical_indices()[logical] is the physical index.
  const std::vector<int>& physical_indices() const noexcept { return physical_; }
  std::vector<int>::const_iterator begin() const noexcept { return physical_.begin(); }
  std::vector<int>::const_iterator end() const noexcept { return physical_.end(); }

  // Each token of the value, in order, with what happened to it (empty when unset).
  const std::vector<VisibleToken>& tokens() const noexcept { return tokens_; }
  // Whether the list was read as UUIDs (its first token starts with GPU- or MIG-).
  bool uuid_list() const noexcept { return uuid_list_; }
  const std::optional<std::string>& variable() const noexcept { return variable_; }
  const std::optional<std::string>& device_order() const noexcept { return device_order_; }
  int physical_count() const noexcept { return physical_count_; }

  // "2 CUDA devices are visible: cuda:0 is physical GPU 2, cuda:1 is physical GPU 0
  // (CUDA_VISIBLE_DEVICES=2,0)", or the reason when not ok().
  GPUSEL_API std::string summary() const;

 private:
  friend VisibleDevices parse_visible_devices(std::optional<std::string_view>, PhysicalUuids,
                                              std::optional<std::string_view>);
  std::vector<int> physical_;
  std::vector<int> logical_;  // logical_[physical]: its cuda:N, -1 when hidden (every one when not ok())
  std::vector<VisibleToken> tokens_;
  std::optional<std::string> variable_;
  std::optional<std::string> device_order_;
  std::string reason_;
  int error_code_ = 0;
  int physical_count_ = 0;
  bool uuid_list_ = false;
};

// What the CUDA runtime would make of these variables on a machine whose GPUs,
// in CUDA's physical order, have the UUIDs `physical` (nullopt = the variable
// is unset). See Note [How the driver reads CUDA_VISIBLE_DEVICES]. Never throws
// Error. Takes time linear in the value's length and in the number of GPUs.
[[nodiscard]] GPUSEL_API VisibleDevices
parse_visible_devices(std::optional<std::string_view> cuda_visible_devices, PhysicalUuids physical,
                      std::optional<std::string_view> cuda_device_order = std::nullopt);

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/visible_devices-inl.hpp"
#endif
