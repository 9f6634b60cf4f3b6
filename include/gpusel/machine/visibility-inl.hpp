// The definitions of gpusel/machine/visibility.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// explain()'s paragraphs are machine/detail/system/explain_parts.hpp's.
#pragma once

#include "gpusel/machine/visibility.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/detail/system/explain_parts.hpp"

namespace gpusel {

// Note [Knowing whether CUDA has started]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The CUDA driver reads CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER in cuInit,
// which the runtime's first call makes; once it has succeeded, changing them
// changes nothing in this process. So "started" means the driver is
// initialized, not that libcuda.so.1 is loaded: nvmlInit loads the driver
// library without initializing it, and it stays loaded after nvmlShutdown, so
// any program that has listed its GPUs has it loaded. gpusel asks the driver
// itself, if it is loaded, and starts nothing by asking:
// dlopen("libcuda.so.1", RTLD_NOLOAD) finds a loaded library by its SONAME and
// never loads one, and cuDeviceGetCount, which answers
// CUDA_ERROR_NOT_INITIALIZED before a successful cuInit, neither initializes
// nor changes anything.
namespace detail {
inline constexpr int kCudaErrorNotInitialized = 3;  // CUDA_ERROR_NOT_INITIALIZED (cuda.h, not included)

inline bool cuda_driver_initialized() noexcept {
  void* handle = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (handle == nullptr) return false;
  using DeviceGetCount = int (*)(int*);
  const auto device_count = reinterpret_cast<DeviceGetCount>(dlsym(handle, "cuDeviceGetCount"));
  int count = 0;
  // Before a successful cuInit every driver call but cuInit, cuDriverGetVersion and
  // cuGetProcAddress returns CUDA_ERROR_NOT_INITIALIZED; a failed cuInit leaves it so.
  // A libcuda without cuDeviceGetCount is no driver gpusel knows: call it started, the safe side.
  const bool initialized = device_count == nullptr || device_count(&count) != kCudaErrorNotInitialized;
  dlclose(handle);  // NOLOAD took a reference: give it back
  return initialized;
}

// Note [NVML without the driver library]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// NVML can see GPUs that CUDA cannot use: a container started with
// NVIDIA_DRIVER_CAPABILITIES=utility has libnvidia-ml.so.1 but no
// libcuda.so.1, and every runtime call fails (cudaErrorInsufficientDriver).
// So device_count() counts from NVML only when the driver library loads:
// dlopen("libcuda.so.1", RTLD_NOLOAD) finds it when NVML loaded it (as the
// real nvmlInit does), else gpusel loads it itself, as NVML would have, and
// keeps it loaded. Neither calls cuInit, so nothing starts (Note [Knowing
// whether CUDA has started]) and a parent can still fork workers. Nothing is
// cached: a process may load the library later, and a failed load costs one
// search of the library path per count.
inline bool cuda_driver_library_loads() noexcept {
  if (void* handle = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY)) {
    dlclose(handle);  // NOLOAD took a reference: give it back
    return true;
  }
  return dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr;  // kept loaded, as NVML keeps it
}
}  // namespace detail

GPUSEL_API bool cuda_started() noexcept { return detail::cuda_driver_initialized(); }

GPUSEL_API DeviceMap visible_devices(const InventoryOptions& options) {
  DeviceMap map;
  map.inventory = query_inventory(options);
  const auto order_variable = detail::environment_variable("CUDA_DEVICE_ORDER");
  map.order = cuda_physical_order(map.inventory, order_variable);
  map.visible = parse_visible_devices(detail::environment_variable("CUDA_VISIBLE_DEVICES"),
                                      map.order.uuids(map.inventory), order_variable);
  return map;
}

namespace detail {

GPUSEL_API std::optional<int> count_devices_without_cuda(int runtime_version) noexcept {
  try {
    if (cuda_driver_initialized()) return std::nullopt;
    const DeviceMap map = visible_devices();
    if (!map.known()) return std::nullopt;
    if (!cuda_driver_library_loads()) return 0;  // Note [NVML without the driver library]
    const int driver = map.inventory.cuda_driver_version;
    if (driver > 0 && driver / 1000 < runtime_version / 1000) return 0;
    for (const Gpu& gpu : map.inventory.gpus)
      if (gpu.mig_enabled) return std::nullopt;
    return map.visible.count();
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace detail

GPUSEL_API bool DeviceMap::cuda_would_fail() const noexcept {
  return known() && !visible.ok() && detail::mig_token_ending_list(visible) == nullptr;
}

GPUSEL_API std::string explain(const DeviceMap& map) {
  const VisibleDevices& visible = map.visible;
  const detail::MigEnd mig_end = map.known() ? detail::find_mig_end(map) : detail::MigEnd{};
  // What CUDA ignores comes right under the headline: the token list at the end is easily missed.
  std::string text =
      detail::explain_variables(visible) + detail::explain_ignored(map, mig_end) + detail::explain_cuda_started();
  if (!map.known()) {
    text += "The physical GPUs are unknown: " + escape_for_terminal(map.inventory.reason) +
            ".\nWithout NVML gpusel cannot list them without starting CUDA; gpusel::device_count() asks the CUDA "
            "runtime.\n";
  } else {
    text += detail::explain_nvml(map.inventory);
    if (mig_end.token != nullptr) text += detail::explain_mig_end(visible, mig_end);
    if (!visible.ok() && mig_end.token == nullptr) {
      text += "No CUDA device is visible: " + escape_for_terminal(visible.reason()) + "; the CUDA runtime fails with " +
              visible.error_name() + ".\n";
    } else if (visible.ok()) {
      text += detail::explain_visible_devices(map);
    }
    text += detail::explain_hidden(map, mig_end.owner);
    if (!map.order.exact) text += "Caution: " + map.order.caveat + ".\n";
  }
  return text + detail::explain_allotment(map) + detail::explain_tokens(map, mig_end);
}

GPUSEL_API std::string explain() { return explain(visible_devices()); }

namespace detail {

// `value` (a list of GPU- or MIG- UUIDs, or of indices) checked and set. MIG- tokens name MIG
// instances, which NVML's GPU list does not hold: they are checked for form only, and CUDA
// decides what they show.
inline void set_visible_value(const std::string& call, const std::string& value, std::size_t tokens, VisibleScope scope,
                              const DeviceMap* read) {
  if (cuda_driver_initialized())
    throw Error(call +
                ": CUDA has already started in this process (the driver is initialized), so CUDA_VISIBLE_DEVICES=" +
                value + " would have no effect here (" + variable_in_force("CUDA_VISIBLE_DEVICES") +
                "); call it before the first CUDA call, or set the variable in the environment "
                "that starts the process");
  const DeviceMap map = read != nullptr ? *read : visible_devices();
  std::string checked_value;  // value without its MIG- tokens
  std::size_t checked_tokens = 0;
  for (std::size_t start = 0; start <= value.size() && tokens > 0;) {
    const std::size_t comma = std::min(value.find(',', start), value.size());
    const std::string token = value.substr(start, comma - start);
    if (token.rfind("MIG-", 0) != 0) {
      checked_value += (checked_value.empty() ? "" : ",") + token;
      ++checked_tokens;
    }
    start = comma + 1;
  }
  if (map.known() && checked_tokens > 0) {
    const VisibleDevices checked =
        parse_visible_devices(checked_value, map.order.uuids(map.inventory), environment_variable("CUDA_DEVICE_ORDER"));
    if (!checked.ok() || static_cast<std::size_t>(checked.count()) != checked_tokens) {
      std::string why = checked.reason();
      for (const VisibleToken& token : checked.tokens())
        if (!token.kept()) {
          why = quote(token.text) + " " + token.why(checked.physical_count());
          break;
        }
      throw Error(call + ": CUDA_VISIBLE_DEVICES=" + value + " would not show what was asked: " + why);
    }
    if (scope == VisibleScope::within_visible && map.visible.variable()) {
      for (const int physical : checked)
        if (!map.visible.logical(physical))
          throw Error(call + ": physical GPU " + std::to_string(physical) + " (" +
                      map.order.gpu(map.inventory, physical).uuid + ") is hidden by " +
                      describe_value("CUDA_VISIBLE_DEVICES", map.visible.variable()) +
                      ", this job's allocation: name a GPU it shows (keep_visible_devices({0}) keeps cuda:0), or "
                      "leave the allocation explicitly with gpusel::VisibleScope::whole_machine");
    }
  }
  if (setenv("CUDA_VISIBLE_DEVICES", value.c_str(), 1) != 0)
    throw Error(call + ": setenv(\"CUDA_VISIBLE_DEVICES\") failed");
}

}  // namespace detail

GPUSEL_API void set_visible_devices(const std::vector<int>& physical_indices, VisibleScope scope) {
  std::string value;
  for (const int index : physical_indices) value += (value.empty() ? "" : ",") + std::to_string(index);
  const std::string call = "gpusel::set_visible_devices({" + value + "})";
  for (std::size_t i = 0; i < physical_indices.size(); ++i) {
    if (physical_indices[i] < 0) throw Error(call + ": a physical index cannot be negative");
    for (std::size_t j = 0; j < i; ++j)
      if (physical_indices[i] == physical_indices[j])
        throw Error(call + ": physical GPU " + std::to_string(physical_indices[i]) +
                    " is named twice, which makes CUDA fail with cudaErrorInvalidDevice");
  }
  detail::set_visible_value(call, value, physical_indices.size(), scope, nullptr);
}

namespace detail {

GPUSEL_API void set_visible_uuids(const std::vector<std::string>& uuids, VisibleScope scope, const DeviceMap* map) {
  std::string value;
  for (const std::string& uuid : uuids) value += (value.empty() ? "" : ",") + uuid;
  const std::string call = "gpusel::set_visible_devices({" + value + "})";
  for (const std::string& uuid : uuids) {
    if (!is_uuid_token(uuid) || uuid.size() == 4 || uuid.find(',') != std::string::npos)
      throw Error(
          call + ": " + quote(uuid) +
          " is not a GPU UUID: expected \"GPU-\" or \"MIG-\" and (a prefix of) the hex UUID, as nvidia-smi -L shows");
  }
  set_visible_value(call, value, uuids.size(), scope, map);
}

}  // namespace detail

GPUSEL_API void set_visible_devices(const std::vector<std::string>& uuids, VisibleScope scope) {
  detail::set_visible_uuids(uuids, scope, nullptr);
}

GPUSEL_API void set_visible_devices(std::initializer_list<int> physical_indices, VisibleScope scope) {
  set_visible_devices(std::vector<int>(physical_indices), scope);
}
GPUSEL_API void set_visible_devices(std::initializer_list<std::string_view> uuids, VisibleScope scope) {
  std::vector<std::string> copies;
  for (const std::string_view uuid : uuids) copies.emplace_back(uuid);
  set_visible_devices(copies, scope);
}

GPUSEL_API void keep_visible_devices(const std::vector<int>& logical_indices) {
  std::string asked;
  for (const int index : logical_indices) asked += (asked.empty() ? "" : ",") + std::to_string(index);
  const std::string call = "gpusel::keep_visible_devices({" + asked + "})";
  const DeviceMap map = visible_devices();
  const VisibleDevices& visible = map.visible;
  const bool unknown = !map.known() && visible.variable();  // no NVML: count the tokens themselves
  std::vector<std::string> kept_tokens;
  for (const VisibleToken& token : visible.tokens()) {
    if (!unknown && !token.kept()) break;
    if (unknown && token.text.empty()) break;
    kept_tokens.push_back(token.text);
  }
  const int count = map.known() ? visible.count() : static_cast<int>(kept_tokens.size());
  if (map.known() && !visible.ok())
    throw Error(call + ": no CUDA device is visible now (" + visible.reason() + "), so there is nothing to keep");
  std::string value;
  for (std::size_t i = 0; i < logical_indices.size(); ++i) {
    const int logical = logical_indices[i];
    if (logical < 0 || logical >= count)
      throw Error(call + ": there is no cuda:" + std::to_string(logical) + " to keep; " +
                  (map.known() ? visible.summary()
                               : std::to_string(count) + " devices are named by " +
                                     detail::describe_variable("CUDA_VISIBLE_DEVICES")));
    for (std::size_t j = 0; j < i; ++j)
      if (logical_indices[j] == logical) throw Error(call + ": cuda:" + std::to_string(logical) + " is named twice");
    const std::string token =
        visible.variable() ? kept_tokens[static_cast<std::size_t>(logical)] : std::to_string(visible.physical(logical));
    value += (i == 0 ? "" : ",") + token;
  }
  detail::set_visible_value(call, value, logical_indices.size(), VisibleScope::within_visible, nullptr);
}

GPUSEL_API void keep_visible_devices(std::initializer_list<int> logical_indices) {
  keep_visible_devices(std::vector<int>(logical_indices));
}

}  // namespace gpusel
