// The definitions of gpusel/machine/visibility.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/visibility.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/local_rank.hpp"

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

// The first token not kept, when it is a MIG- one: from there on what CUDA
// shows is CUDA's to decide, not known to fail. nullptr otherwise.
inline const VisibleToken* mig_token_ending_list(const VisibleDevices& visible) noexcept {
  for (const VisibleToken& token : visible.tokens())
    if (!token.kept())
      return token.outcome == TokenOutcome::unknown_uuid && token.text.rfind("MIG-", 0) == 0 ? &token : nullptr;
  return nullptr;
}

// Escaped for a terminal (Note [Hostile text]), as all of explain() is.
inline std::string describe_gpu(int physical, const Gpu& gpu) {
  std::string text = "physical " + std::to_string(physical) + "  nvidia-smi " + std::to_string(gpu.nvml_index) + "  ";
  if (!gpu.name.empty()) text += escape_for_terminal(gpu.name) + "  ";
  return text + escape_for_terminal(gpu.uuid) + "  " + escape_for_terminal(gpu.pci_bus_id);
}

}  // namespace detail

GPUSEL_API bool DeviceMap::cuda_would_fail() const noexcept {
  return known() && !visible.ok() && detail::mig_token_ending_list(visible) == nullptr;
}

namespace detail {

// explain()'s headline: the two variables.
inline std::string explain_variables(const VisibleDevices& visible) {
  return escape_for_terminal(describe_value("CUDA_VISIBLE_DEVICES", visible.variable())) + "  " +
         escape_for_terminal(describe_value("CUDA_DEVICE_ORDER", visible.device_order())) +
         (visible.device_order() ? "" : " (FASTEST_FIRST)") + "\n";
}

// Whether changing the variables still matters.
inline std::string explain_cuda_started() {
  return cuda_started() ? "CUDA has started in this process: changing these variables now has no effect here.\n"
                        : "CUDA has not started in this process: the variables can still be changed.\n";
}

// "NVML (libnvidia-ml.so.1) sees 4 GPUs, driver 550.54.15 (CUDA 12.4).\n"
inline std::string explain_nvml(const Inventory& inventory) {
  std::string text = "NVML (" + escape_for_terminal(inventory.nvml_library) + ") sees " +
                     std::to_string(inventory.gpus.size()) + (inventory.gpus.size() == 1 ? " GPU" : " GPUs");
  if (!inventory.driver_version.empty()) text += ", driver " + escape_for_terminal(inventory.driver_version);
  if (inventory.cuda_driver_version > 0)
    text += " (CUDA " + std::to_string(inventory.cuda_driver_version / 1000) + "." +
            std::to_string(inventory.cuda_driver_version % 1000 / 10) + ")";
  return text + ".\n";
}

// A MIG- token that ended the list, and the MIG instance it names when NVML lists it
// (Note [MIG instances]); CUDA's enumeration stays CUDA's.
struct MigEnd {
  const VisibleToken* token = nullptr;  // nullptr: no MIG- token ended the list
  int owner = -1;                       // the physical GPU of the instance it names, when NVML lists it
  std::string owner_text;               // ", an instance of physical GPU 1 (...)", then
  std::string why;                      // what the token is, then
};

inline MigEnd find_mig_end(const DeviceMap& map) {
  MigEnd end;
  end.token = mig_token_ending_list(map.visible);
  if (end.token == nullptr) return end;
  for (int physical = 0; physical < map.order.count(); ++physical) {
    const Gpu& gpu = map.order.gpu(map.inventory, physical);
    for (const MigInstance& instance : gpu.mig_instances) {
      if (!starts_with_ignoring_case(instance.uuid, end.token->text)) continue;
      const std::string ids =
          "GI " + std::to_string(instance.gpu_instance_id) + ", CI " + std::to_string(instance.compute_instance_id);
      end.owner = physical;
      end.owner_text = ", an instance of physical GPU " + std::to_string(physical) + " (nvidia-smi " +
                       std::to_string(gpu.nvml_index) + "; " + ids + ")";
      end.why = "ends gpusel's list: MIG instance (" + ids + ") of physical GPU " + std::to_string(physical) +
                "; what CUDA shows from this token on is CUDA's to decide";
      return end;
    }
  }
  return end;
}

// What the MIG- token `end` names, and what is known of the map before it.
inline std::string explain_mig_end(const VisibleDevices& visible, const MigEnd& end) {
  return "CUDA_VISIBLE_DEVICES names a MIG instance (" + escape_for_terminal(quote(end.token->text)) +
         (end.owner_text.empty() ? std::string("), which is none of the GPUs or MIG instances NVML lists")
                                 : ")" + end.owner_text) +
         ": what CUDA shows from that token on is CUDA's to decide (nvidia-smi -L lists the instances; "
         "CUDA 11 and 12 show a process one MIG instance). Known before it: " +
         (visible.ok() ? visible_count_text(visible.count()) : std::string("nothing")) + ".\n";
}

// Where CUDA_VISIBLE_DEVICES's list ends: the token that ends it, and its position.
struct ListEnd {
  std::size_t position;
  VisibleToken token;
};

// Where the list ends on every machine, whatever its GPUs, read as the driver reads it: at a
// token with no digit, a negative one or a UUID in an index list, at an index in a UUID list
// (Note [How the driver reads CUDA_VISIBLE_DEVICES]); nullopt when only the GPUs can tell.
inline std::optional<ListEnd> list_end_on_every_machine(const VisibleDevices& visible) {
  const std::vector<VisibleToken>& tokens = visible.tokens();
  for (std::size_t position = 0; position < tokens.size(); ++position) {
    VisibleToken token = tokens[position];
    if (is_uuid_token(token.text) != is_uuid_token(tokens.front().text)) {
      token.outcome = TokenOutcome::other_kind;
      return ListEnd{position, token};
    }
    const std::optional<int> index = is_uuid_token(token.text) ? 0 : read_index_token(token.text);
    if (index && *index >= 0) continue;
    token.outcome = index ? TokenOutcome::negative : TokenOutcome::no_digits;
    token.value = index.value_or(0);
    return ListEnd{position, token};
  }
  return std::nullopt;
}

// Where the list ends on this machine, when devices are visible and the tokens from there on are
// ignored: not after a GPU named twice (the value is an error) nor at a MIG instance (CUDA decides).
inline std::optional<ListEnd> list_end_on_this_machine(const DeviceMap& map, const MigEnd& mig_end) {
  const std::vector<VisibleToken>& tokens = map.visible.tokens();
  if (!map.visible.ok()) return std::nullopt;
  for (std::size_t position = 0; position < tokens.size(); ++position) {
    const VisibleToken& token = tokens[position];
    if (token.kept()) continue;
    if (token.outcome == TokenOutcome::duplicate || &token == mig_end.token) return std::nullopt;
    return ListEnd{position, token};
  }
  return std::nullopt;
}

// What CUDA ignores of CUDA_VISIBLE_DEVICES, said under the headline: the tokens from the one
// that ends the list on, where one before it is kept ("" where none is: then no device is visible,
// which is said below). Without NVML, only where the list ends on every machine.
inline std::string explain_ignored(const DeviceMap& map, const MigEnd& mig_end) {
  const std::optional<ListEnd> end =
      map.known() ? list_end_on_this_machine(map, mig_end) : list_end_on_every_machine(map.visible);
  if (!end || end->position == 0) return {};
  const std::vector<VisibleToken>& tokens = map.visible.tokens();
  std::string ignored;
  for (std::size_t i = end->position; i < tokens.size(); ++i)
    ignored += (i == end->position ? "" : ",") + tokens[i].text;
  std::string why = end->token.why(map.visible.physical_count());  // "ignored: ends the list: it is ..."
  why.erase(0, why.find(": ") + 2);
  if (!map.known()) why.insert(why.find(':'), " on any machine");
  return "CUDA ignores " + std::string(map.known() ? "" : "at least ") + escape_for_terminal(quote(ignored)) +
         " of CUDA_VISIBLE_DEVICES: token " + std::to_string(end->position + 1) + ", " +
         escape_for_terminal(quote(end->token.text)) + ", " + escape_for_terminal(why) + ".\n";
}

// The visible devices, one a line, for a map that is ok().
inline std::string explain_visible_devices(const DeviceMap& map) {
  const VisibleDevices& visible = map.visible;
  // A GPU in MIG mode is not a CUDA device: CUDA shows its instances instead
  // and numbers the devices from there on itself, so it gets no cuda:N, nor do those after it.
  int first_mig = -1;
  for (int logical = 0; logical < visible.count() && first_mig < 0; ++logical)
    if (map.device(logical)->mig_enabled) first_mig = logical;
  std::string text = first_mig < 0
                         ? visible_count_text(visible.count()) + ":\n"
                         : std::to_string(visible.count()) + (visible.count() == 1 ? " GPU is" : " GPUs are") +
                               " visible; CUDA shows the MIG instances of a GPU in MIG mode instead, and "
                               "numbers the devices from cuda:" +
                               std::to_string(first_mig) + " on itself:\n";
  // As wide as the widest label and two blanks: "cuda:1000" needs more than "cuda:0".
  const std::size_t width = std::string("cuda:").size() + std::to_string(visible.count() - 1).size() + 2;
  for (int logical = 0; logical < visible.count(); ++logical) {
    const Gpu& gpu = *map.device(logical);
    const std::string label = first_mig < 0 || logical < first_mig ? "cuda:" + std::to_string(logical)
                              : gpu.mig_enabled                    ? std::string("MIG")
                                                                   : std::string("cuda:?");
    text += "  " + pad(label, width < 8 ? 8 : width) +
            describe_gpu(visible.physical_indices()[static_cast<std::size_t>(logical)], gpu) + "\n";
  }
  return text;
}

// The GPUs CUDA_VISIBLE_DEVICES hides, but for `mig_owner`: the GPU of the instance it names is not hidden.
inline std::string explain_hidden(const DeviceMap& map, int mig_owner) {
  std::string hidden;
  for (int physical = 0; physical < map.order.count(); ++physical)
    if (!map.visible.logical(physical) && physical != mig_owner)
      hidden += "  " + describe_gpu(physical, map.order.gpu(map.inventory, physical)) + "\n";
  return hidden.empty() ? hidden : "Hidden from this process:\n" + hidden;
}

// What CUDA_VISIBLE_DEVICES gives this task of its step's `gpus_on_node` GPUs: whether they are
// its own or shared, and their cuda:N and UUIDs, which only the driver's reading of it gives.
inline std::string explain_task_gpus(const DeviceMap& map, int gpus_on_node) {
  const VisibleDevices& visible = map.visible;
  std::string text = "This task's CUDA_VISIBLE_DEVICES is unset";
  if (visible.variable()) {
    const int listed = static_cast<int>(visible.tokens().size());  // entries, as Slurm writes them
    text = listed < gpus_on_node ? "This task has GPUs of its own, " + std::to_string(listed) + " of the step's " +
                                       std::to_string(gpus_on_node)
                                 : std::string("This task sees the step's GPUs");
    text += " (CUDA_VISIBLE_DEVICES lists " + std::to_string(listed) + ")";
  }
  for (int logical = 0; map.known() && logical < visible.count(); ++logical)
    text += (logical == 0 ? ": " : ", ") + std::string("cuda:") + std::to_string(logical) + " is " +
            escape_for_terminal(map.device(logical)->uuid);
  return text + ".\n";
}

// The scheduler's and the container runtime's part (Note [The GPUs this process may choose
// among]): what they gave, in their own names, never mapped to GPUs, and beside it what
// CUDA_VISIBLE_DEVICES gives this task. "" outside Slurm and containers.
inline std::string explain_allotment(const DeviceMap& map) {
  const Allotment allotment = gpusel::allotment(map.known() && map.visible.ok() ? map.visible.count() : 0);
  std::string text = allotment.describe();          // escaped, a line each
  if (allotment.known() && allotment.gpus_on_node)  // under Slurm's line, which comes first
    text.insert(text.find('\n') + 1, explain_task_gpus(map, *allotment.gpus_on_node));
  return text;
}

// How CUDA reads each token of CUDA_VISIBLE_DEVICES ("" when it is unset).
inline std::string explain_tokens(const DeviceMap& map, const MigEnd& mig_end) {
  const VisibleDevices& visible = map.visible;
  if (visible.tokens().empty()) return {};
  std::string text = "How CUDA reads CUDA_VISIBLE_DEVICES (split on ','; the first token not kept ends the list):\n";
  for (const VisibleToken& token : visible.tokens())
    text +=
        "  " + pad(escape_for_terminal(quote(token.text)), 14) + " " +
        (!map.known()                                      ? std::string("not checked: the GPUs are unknown")
         : &token == mig_end.token && !mig_end.why.empty() ? mig_end.why
                                                           : escape_for_terminal(token.why(visible.physical_count()))) +
        "\n";
  return text;
}

}  // namespace detail

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
inline void set_visible_value(const std::string& call, const std::string& value, std::size_t tokens,
                              VisibleScope scope) {
  if (cuda_driver_initialized())
    throw Error(call +
                ": CUDA has already started in this process (the driver is initialized), so CUDA_VISIBLE_DEVICES=" +
                value + " would have no effect here (" + variable_in_force("CUDA_VISIBLE_DEVICES") +
                "); call it before the first CUDA call, or set the variable in the environment "
                "that starts the process");
  const DeviceMap map = visible_devices();
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
  detail::set_visible_value(call, value, physical_indices.size(), scope);
}

GPUSEL_API void set_visible_devices(const std::vector<std::string>& uuids, VisibleScope scope) {
  std::string value;
  for (const std::string& uuid : uuids) value += (value.empty() ? "" : ",") + uuid;
  const std::string call = "gpusel::set_visible_devices({" + value + "})";
  for (const std::string& uuid : uuids) {
    if (!detail::is_uuid_token(uuid) || uuid.size() == 4 || uuid.find(',') != std::string::npos)
      throw Error(
          call + ": " + detail::quote(uuid) +
          " is not a GPU UUID: expected \"GPU-\" or \"MIG-\" and (a prefix of) the hex UUID, as nvidia-smi -L shows");
  }
  detail::set_visible_value(call, value, uuids.size(), scope);
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
  detail::set_visible_value(call, value, logical_indices.size(), VisibleScope::within_visible);
}

GPUSEL_API void keep_visible_devices(std::initializer_list<int> logical_indices) {
  keep_visible_devices(std::vector<int>(logical_indices));
}

}  // namespace gpusel
