// The definitions of gpusel/visible_devices.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: core (docs/layers.md).
#pragma once

#include "gpusel/visible_devices.hpp"

#include "gpusel/detail/core/environment.hpp"

namespace gpusel {

namespace detail {

// A GPU's UUID as UUID tokens' text after their "GPU-"/"MIG-" is compared with
// it: without its own "GPU-"/"MIG-", in lower case.
inline std::string uuid_key(std::string_view uuid) {
  if (is_uuid_token(uuid)) uuid.remove_prefix(4);
  return lower_ascii(uuid);
}

// The physical GPUs' uuid_keys in a trie, to find which GPUs a UUID token
// selects in time linear in the token, however many GPUs there are (a sort
// would need <algorithm>, which this cheap core header does without).
class UuidIndex {
 public:
  explicit UuidIndex(PhysicalUuids physical) : nodes_(1) {
    for (std::size_t i = 0; i < physical.size(); ++i) {
      const std::string key = uuid_key(physical[i]);
      if (key.empty()) continue;  // selects nothing: a token's text must be non-empty and match
      std::size_t node = 0;
      for (const char c : key) {
        node = find_or_add_child(node, c);
        nodes_[node].below.add(static_cast<int>(i));
      }
      nodes_[node].ending.add(static_cast<int>(i));
    }
  }

  // How many GPUs `rest` (a token's text after "GPU-") selects, the shorter of
  // it and a UUID being a prefix of the longer: 0, 1 or 2 (2: several), and
  // which one when 1.
  struct Match {
    int count = 0;
    int physical = -1;
  };
  Match match(std::string_view rest) const {
    const std::string key = lower_ascii(rest);  // compared as it is: "MIG-GPU-..." does not name GPU-...
    Matches found;
    std::size_t node = 0;
    for (std::size_t i = 0; i < key.size(); ++i) {
      node = find_child(node, key[i]);
      if (node == 0) break;  // no GPU's key continues this way
      // Past the token's end, every key below matches; before it, keys that end here.
      found.add(i + 1 == key.size() ? nodes_[node].below : nodes_[node].ending);
    }
    return {found.count, found.count == 1 ? found.physical : -1};
  }

 private:
  // Counts GPUs up to 2 (several), remembering one.
  struct Matches {
    int count = 0;
    int physical = -1;
    void add(int gpu) noexcept { add(Matches{1, gpu}); }
    void add(const Matches& more) noexcept {
      if (more.count == 0) return;
      physical = count == 0 ? more.physical : physical;
      count = count + more.count > 2 ? 2 : count + more.count;
    }
  };
  struct Node {
    char c = 0;
    std::size_t first_child = 0;   // 0: none (the root is no one's child)
    std::size_t next_sibling = 0;  // 0: none
    Matches ending;                // GPUs whose key ends here
    Matches below;                 // GPUs whose key passes through or ends here
  };

  // The child of `node` for `c`; 0 when there is none.
  std::size_t find_child(std::size_t node, char c) const noexcept {
    for (std::size_t at = nodes_[node].first_child; at != 0; at = nodes_[at].next_sibling)
      if (nodes_[at].c == c) return at;
    return 0;
  }
  std::size_t find_or_add_child(std::size_t node, char c) {
    if (const std::size_t found = find_child(node, c)) return found;
    Node added;
    added.c = c;
    added.next_sibling = nodes_[node].first_child;
    nodes_.push_back(added);
    nodes_[node].first_child = nodes_.size() - 1;
    return nodes_.size() - 1;
  }

  std::vector<Node> nodes_;  // nodes_[0] is the root
};

inline std::string gpu_count_text(int count) {
  if (count == 0) return "no GPU";
  if (count == 1) return "1 GPU, index 0";
  return std::to_string(count) + " GPUs, indices 0.." + std::to_string(count - 1);
}

// "cuda:0 is physical GPU 2, cuda:1 is physical GPU 0"
inline std::string describe_mapping(const std::vector<int>& physical) {
  std::string text;
  for (std::size_t logical = 0; logical < physical.size(); ++logical) {
    if (!text.empty()) text += ", ";
    text += "cuda:" + std::to_string(logical) + " is physical GPU " + std::to_string(physical[logical]);
  }
  return text;
}

}  // namespace detail

namespace detail {
// What is wrong with a token that ended the list, phrased to follow "it is".
inline std::string token_problem(const VisibleToken& token, int physical_count) {
  switch (token.outcome) {
    case TokenOutcome::no_digits:
      return "not a number";
    case TokenOutcome::negative:
      return "a negative index (it reads as " + std::to_string(token.value) + ")";
    case TokenOutcome::out_of_range:
      return "out of range (" + std::to_string(token.value) + "; this machine has " + gpu_count_text(physical_count) +
             ")";
    case TokenOutcome::unknown_uuid:
      if (token.text.rfind("MIG-", 0) == 0)
        return "a MIG instance's UUID, which is none of the GPUs' UUIDs: whether CUDA shows that instance only CUDA "
               "can say (gpusel does not see MIG instances here)";
      return "a UUID prefix that no GPU has";
    case TokenOutcome::ambiguous_uuid:
      return "a UUID prefix that several GPUs share";
    case TokenOutcome::other_kind:
      return "of the other kind (the list's first token decided it holds " +
             std::string(is_uuid_token(token.text) ? "indices" : "UUIDs") + ")";
    default:
      return {};
  }
}
}  // namespace detail

GPUSEL_API std::string VisibleToken::why(int physical_count) const {
  switch (outcome) {
    case TokenOutcome::kept:
      return "kept: physical GPU " + std::to_string(physical);
    case TokenOutcome::duplicate:
      return "error: names physical GPU " + std::to_string(physical) + " again (cudaErrorInvalidDevice)";
    case TokenOutcome::not_read:
      return "ignored: after the end of the list";
    default:
      return "ignored: ends the list: it is " + detail::token_problem(*this, physical_count);
  }
}

GPUSEL_API int VisibleDevices::physical(int logical) const {
  if (logical < 0 || logical >= count())
    throw Error(error_code_ == 0 ? kInvalidDevice : error_code_,
                error_code_ == 0 ? "cudaErrorInvalidDevice" : error_name(),
                "gpusel::VisibleDevices::physical(" + std::to_string(logical) +
                    "): there is no cuda:" + std::to_string(logical) + "; " + summary());
  return physical_[static_cast<std::size_t>(logical)];
}

GPUSEL_API std::optional<int> VisibleDevices::logical(int physical) const noexcept {
  if (physical < 0 || static_cast<std::size_t>(physical) >= logical_.size()) return std::nullopt;
  const int logical = logical_[static_cast<std::size_t>(physical)];
  if (logical < 0) return std::nullopt;
  return logical;
}

GPUSEL_API std::string VisibleDevices::summary() const {
  const std::string variable = detail::describe_value("CUDA_VISIBLE_DEVICES", variable_);
  if (!ok()) return "no CUDA device is visible: " + reason_ + " (" + error_name() + ")";
  return detail::visible_count_text(count()) + ": " + detail::describe_mapping(physical_) + " (" + variable + ")";
}

namespace detail {

// The value split on ',' only: every token, none read yet.
inline std::vector<VisibleToken> split_visible_value(std::string_view value) {
  std::vector<VisibleToken> tokens;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = value.find(',', start);
    tokens.push_back({std::string(value.substr(start, comma == std::string_view::npos ? comma : comma - start)),
                      TokenOutcome::not_read, -1, 0});
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return tokens;
}

// Reads `token` as a token of its list (`uuids` set for a UUID list): its outcome, and its
// value for an index. Returns the physical GPU it selects when kept, else -1.
inline int read_visible_token(VisibleToken& token, const std::optional<UuidIndex>& uuids, int physical_count) {
  const bool uuid_list = uuids.has_value();
  if (is_uuid_token(token.text) != uuid_list) {
    token.outcome = TokenOutcome::other_kind;
    return -1;
  }
  if (uuid_list) {
    const UuidIndex::Match match = uuids->match(std::string_view(token.text).substr(4));
    token.outcome = match.count == 0  ? TokenOutcome::unknown_uuid
                    : match.count > 1 ? TokenOutcome::ambiguous_uuid
                                      : TokenOutcome::kept;
    return match.physical;
  }
  const std::optional<int> index = read_index_token(token.text);
  if (index) token.value = *index;
  if (!index)
    token.outcome = TokenOutcome::no_digits;
  else if (*index < 0)
    token.outcome = TokenOutcome::negative;
  else if (*index >= physical_count)
    token.outcome = TokenOutcome::out_of_range;
  else
    token.outcome = TokenOutcome::kept;
  return token.outcome == TokenOutcome::kept ? *index : -1;
}

// Why the runtime fails with what `visible` has read (the variables, the kept devices, and
// `duplicate_reason` when a device was named twice): an error code and its reason, or nullopt.
struct VisibleFailure {
  int code;
  std::string reason;
};
inline std::optional<VisibleFailure> visible_failure(const VisibleDevices& visible,
                                                     const std::string& duplicate_reason) {
  const std::optional<std::string>& order = visible.device_order();
  if (order && *order != "FASTEST_FIRST" && *order != "PCI_BUS_ID")
    return VisibleFailure{VisibleDevices::kInvalidDevice,
                          describe_value("CUDA_DEVICE_ORDER", order) +
                              " is neither FASTEST_FIRST nor PCI_BUS_ID (exactly so: upper case, no blanks)"};
  if (!duplicate_reason.empty()) return VisibleFailure{VisibleDevices::kInvalidDevice, duplicate_reason};
  if (visible.count() > 0) return std::nullopt;
  if (!visible.variable()) return VisibleFailure{VisibleDevices::kNoDevice, "this machine has no GPU"};
  const VisibleToken& first = visible.tokens().front();
  return VisibleFailure{VisibleDevices::kNoDevice, describe_value("CUDA_VISIBLE_DEVICES", visible.variable()) +
                                                       " selects no GPU: its first token " + quote(first.text) +
                                                       " is " + token_problem(first, visible.physical_count())};
}

}  // namespace detail

// The driver's rules, which this parser implements (Note [How the driver reads
// CUDA_VISIBLE_DEVICES]); the driver's own answers are the tables
// tests/data/visible_devices_h200*.tsv, every row a test:
//  - The value is split on ',' only. An unset variable shows every GPU.
//  - The first token decides the list's kind: a token starting with "GPU-" or
//    "MIG-" (case-sensitive) makes a UUID list, anything else an index list.
//    A token of the other kind ends the list ("0,GPU-..." keeps 0).
//  - An index token is read as C's strtoul(token, nullptr, 10) on a 64-bit
//    unsigned long: leading isspace() blanks skipped, an optional sign ('-'
//    negates modulo 2^64), trailing junk ignored ("0abc", "0.5", "0 1" read 0),
//    overflow saturating to ULONG_MAX, and no digit at all making it invalid.
//    The value is then cut to 32 bits and read as a signed int: negative is
//    invalid ("-1", "4294967295", "99999999999999999999"), and "4294967296" and
//    "-0" name GPU 0. An index >= the number of GPUs ends the list.
//  - A UUID token is "GPU-" or "MIG-" and then text compared, ignoring case, with
//    the GPU's UUID after its "GPU-": it selects the GPU when the shorter of the
//    two is a prefix of the longer ("GPU-948e02bd" selects, and so does the full
//    UUID followed by junk). Nothing is trimmed (" GPU-..." is an index token
//    with no digits; "GPU-948e02bd " matches nothing), and "GPU-" alone selects
//    nothing. A token that selects no GPU ends the list.
//  - The first invalid token ends the list; the tokens before it stay.
//  - A device named twice among the kept tokens ("0,0", "00,0", "0,-0", a UUID
//    and a prefix of it) makes the whole value an error: the runtime fails with
//    cudaErrorInvalidDevice. "0,1,0" on one GPU is GPU 0: the list ended at 1.
//  - No kept device (an empty value, "NoDevFiles", words) is cudaErrorNoDevice.
//  - CUDA_DEVICE_ORDER other than exactly FASTEST_FIRST or PCI_BUS_ID (lower
//    case, blanks, set but empty) is cudaErrorInvalidDevice.
GPUSEL_API VisibleDevices parse_visible_devices(std::optional<std::string_view> cuda_visible_devices,
                                                PhysicalUuids physical,
                                                std::optional<std::string_view> cuda_device_order) {
  VisibleDevices result;
  result.physical_count_ = static_cast<int>(physical.size());
  if (cuda_visible_devices) result.variable_ = std::string(*cuda_visible_devices);
  if (cuda_device_order) result.device_order_ = std::string(*cuda_device_order);
  if (cuda_visible_devices) {
    result.tokens_ = detail::split_visible_value(*cuda_visible_devices);
    result.uuid_list_ = detail::is_uuid_token(result.tokens_.front().text);
  }

  std::string duplicate_reason;
  result.logical_.assign(physical.size(), -1);
  const auto keep = [&result](int physical_index) {
    result.logical_[static_cast<std::size_t>(physical_index)] = static_cast<int>(result.physical_.size());
    result.physical_.push_back(physical_index);
  };
  if (!cuda_visible_devices) {
    for (int index = 0; index < result.physical_count_; ++index) keep(index);
  } else {
    std::optional<detail::UuidIndex> uuids;
    if (result.uuid_list_) uuids.emplace(physical);
    for (VisibleToken& token : result.tokens_) {
      const int selected = detail::read_visible_token(token, uuids, result.physical_count_);
      if (token.outcome != TokenOutcome::kept) break;  // the first token not kept ends the list
      token.physical = selected;
      if (result.logical(selected)) {
        token.outcome = TokenOutcome::duplicate;
        duplicate_reason = detail::describe_value("CUDA_VISIBLE_DEVICES", result.variable_) + " names physical GPU " +
                           std::to_string(selected) + " twice (the second time as " + detail::quote(token.text) + ")";
        break;
      }
      keep(selected);
    }
  }

  if (std::optional<detail::VisibleFailure> failure = detail::visible_failure(result, duplicate_reason)) {
    result.error_code_ = failure->code;
    result.reason_ = std::move(failure->reason);
    result.physical_.clear();
    result.logical_.assign(result.logical_.size(), -1);
  }
  return result;
}

}  // namespace gpusel
