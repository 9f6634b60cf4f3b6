// The definitions of gpusel/machine/detail/picking/criteria_checks.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/detail/picking/criteria_checks.hpp"

#include <cstddef>
#include <cstdint>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"
#include "gpusel/error.hpp"
#include "gpusel/machine/inventory.hpp"
#include "gpusel/machine/physical_order.hpp"
#include "gpusel/machine/pick_criteria.hpp"
#include "gpusel/machine/visibility.hpp"
#include "gpusel/text.hpp"
#include "gpusel/visible_devices.hpp"

namespace gpusel::detail {

// Whether CUDA_VISIBLE_DEVICES, set, lets this process see `instance` of physical GPU
// `physical`: when it names the instance's UUID (or a prefix), or the GPU; which of a
// named GPU's instances CUDA then shows is CUDA's to decide (Note [MIG instances as
// picks] in pick.hpp).
GPUSEL_API bool mig_instance_visible(const DeviceMap& map, int physical, const MigInstance& instance) {
  if (map.visible.logical(physical)) return true;
  for (const VisibleToken& token : map.visible.tokens())
    if (token.text.size() > 4 && token.text.rfind("MIG-", 0) == 0 &&
        starts_with_ignoring_case(instance.uuid, token.text))
      return true;
  return false;
}

// The error for `name`, which names nothing to exclude: `why`, and how to name a GPU.
inline Error unknown_exclusion(const std::string& name, const std::string& why) {
  std::string message = "gpusel::pick: cannot exclude \"" + escape_for_terminal(name) + "\": ";
  message += why;
  message +=
      "; name a GPU as pick prints it: CUDA's physical index (0, 1, ...) or its UUID or a unique prefix "
      "(GPU-8d2a); nvidia-smi's numbers are written smi:0, smi:1, ...";
  return Error(message);
}

// The error for `name`, which names `what`, hidden by CUDA_VISIBLE_DEVICES.
inline Error hidden_exclusion(const std::string& name, const DeviceMap& map, const std::string& what) {
  return Error("gpusel::pick: cannot exclude \"" + escape_for_terminal(name) + "\": it names " + what + ", which " +
               escape_for_terminal(describe_value("CUDA_VISIBLE_DEVICES", map.visible.variable())) +
               " hides, so it is no candidate anyway (only the GPUs this process sees are, unless the whole "
               "machine is asked for)");
}

// CUDA's physical index of each GPU of `map`'s inventory, by position; -1 for none.
inline std::vector<int> physical_of_positions(const DeviceMap& map) {
  std::vector<int> physical_of(map.inventory.gpus.size(), -1);
  for (int physical = 0; physical < map.order.count(); ++physical)
    physical_of[map.order.positions[static_cast<std::size_t>(physical)]] = physical;
  return physical_of;
}

// Whether CUDA_VISIBLE_DEVICES lets this process see the GPU at `position`, or one of its MIG instances.
inline bool gpu_visible(const DeviceMap& map, const std::vector<int>& physical_of, std::size_t position) {
  const int physical = physical_of[position];
  if (physical < 0) return false;
  if (map.visible.logical(physical)) return true;
  for (const MigInstance& instance : map.inventory.gpus[position].mig_instances)
    if (mig_instance_visible(map, physical, instance)) return true;
  return false;
}

// The position of the GPU `name` names, read as `number` (after "smi:" when `smi`) or as a
// GPU UUID or prefix. Throws Error when it names none or several.
inline std::size_t excluded_gpu_position(const std::string& name, bool smi, const DecimalRead& number,
                                         const DeviceMap& map) {
  const std::vector<Gpu>& gpus = map.inventory.gpus;
  std::vector<std::size_t> matches;  // positions in gpus
  if (number.ok && !number.overflow) {
    if (!smi) {
      if (number.value >= static_cast<std::uint64_t>(map.order.count()))
        throw unknown_exclusion(name, "there is no GPU with that number (" + std::to_string(map.order.count()) +
                                          " GPUs): a bare number is CUDA's physical index, as pick prints it");
      return map.order.positions[static_cast<std::size_t>(number.value)];
    }
    for (std::size_t position = 0; position < gpus.size(); ++position)
      if (gpus[position].nvml_index >= 0 && static_cast<std::uint64_t>(gpus[position].nvml_index) == number.value)
        matches.push_back(position);
    if (matches.empty())
      throw unknown_exclusion(name, "nvidia-smi numbers no GPU so (" + std::to_string(gpus.size()) + " GPUs)");
  } else if (number.ok || smi) {
    throw unknown_exclusion(
        name, smi ? "smi: is followed by no nvidia-smi number" : "there is no GPU with that physical index");
  } else if (name.rfind("GPU-", 0) == 0 && name.size() > 4) {
    for (std::size_t position = 0; position < gpus.size(); ++position)
      if (starts_with_ignoring_case(gpus[position].uuid, name)) matches.push_back(position);
    if (matches.empty()) throw unknown_exclusion(name, "no GPU has that UUID");
    if (matches.size() > 1)
      throw unknown_exclusion(name, "the prefix matches " + std::to_string(matches.size()) + " GPUs");
  } else {
    throw unknown_exclusion(name, "it is neither a number nor a GPU UUID");
  }
  return matches.front();
}

// The UUID of the MIG instance `name` ("MIG-" and more) names. Throws Error when it names
// none or several, and, when `hiding`, one CUDA_VISIBLE_DEVICES hides.
inline std::string excluded_mig_instance(const std::string& name, const DeviceMap& map,
                                         const std::vector<int>& physical_of, bool hiding) {
  const std::vector<Gpu>& gpus = map.inventory.gpus;
  std::vector<std::pair<const MigInstance*, std::size_t>> instances;  // and its GPU's position
  for (std::size_t position = 0; position < gpus.size(); ++position)
    for (const MigInstance& instance : gpus[position].mig_instances)
      if (starts_with_ignoring_case(instance.uuid, name)) instances.emplace_back(&instance, position);
  if (instances.empty()) throw unknown_exclusion(name, "no MIG instance has that UUID");
  if (instances.size() > 1)
    throw unknown_exclusion(name, "the prefix matches " + std::to_string(instances.size()) + " MIG instances");
  const auto [instance, position] = instances.front();
  if (hiding && (physical_of[position] < 0 || !mig_instance_visible(map, physical_of[position], *instance)))
    throw hidden_exclusion(name, map, "MIG instance " + escape_for_terminal(instance->uuid));
  return instance->uuid;
}

// Which GPUs of `map` `exclude` names: CUDA physical indices as pick prints them
// ("2"), nvidia-smi numbers written "smi:2", UUIDs or a unique prefix ("GPU-8d2a",
// "MIG-4a5b"). Throws Error for a name that matches none or several, and, with
// `only_visible` under CUDA_VISIBLE_DEVICES, for one that names only what the
// variable hides (no candidate, so excluding it would do nothing: a mistake).
GPUSEL_API Excluded excluded_gpus(const std::vector<std::string>& exclude, const DeviceMap& map, bool only_visible) {
  const std::vector<Gpu>& gpus = map.inventory.gpus;
  Excluded result{std::vector<std::string>(gpus.size()), {}};
  const bool hiding = only_visible && map.visible.variable().has_value();
  const std::vector<int> physical_of = physical_of_positions(map);
  for (const std::string& name : exclude) {
    const bool smi = name.rfind("smi:", 0) == 0;
    const DecimalRead number = read_decimal(smi ? name.substr(4) : name, DecimalGrammar::whole_text);
    if (!number.ok && !smi && name.rfind("MIG-", 0) == 0 && name.size() > 4) {
      result.mig_instances.emplace_back(excluded_mig_instance(name, map, physical_of, hiding), name);
      continue;
    }
    const std::size_t position = excluded_gpu_position(name, smi, number, map);
    if (hiding && !gpu_visible(map, physical_of, position))
      throw hidden_exclusion(name, map,
                             "GPU " + std::to_string(physical_of[position]) + " (nvidia-smi " +
                                 std::to_string(gpus[position].nvml_index) + ", " +
                                 escape_for_terminal(gpus[position].uuid) + ")");
    if (result.gpus[position].empty()) result.gpus[position] = name;
  }
  return result;
}

GPUSEL_API int wanted_at_most(const PickCriteria& criteria) {
  return criteria.at_most ? *criteria.at_most : criteria.at_least;
}

GPUSEL_API InventoryOptions usage_for(const PickCriteria& criteria) {
  InventoryOptions options = InventoryOptions::with_usage();
  options.links = criteria.placement == PickPlacement::connected;
  return options;
}

GPUSEL_API void check_criteria(const PickCriteria& criteria) {
  if (criteria.at_least < 0)
    throw Error("gpusel::pick: at_least cannot be negative, got " + std::to_string(criteria.at_least));
  if (wanted_at_most(criteria) < criteria.at_least)
    throw Error("gpusel::pick: at_most (" + std::to_string(wanted_at_most(criteria)) + ") is below at_least (" +
                std::to_string(criteria.at_least) + ")");
  if (criteria.max_utilization && (*criteria.max_utilization < 0 || *criteria.max_utilization > 100))
    throw Error("gpusel::pick: max_utilization is a percentage from 0 to 100, got " +
                std::to_string(*criteria.max_utilization));
}

}  // namespace gpusel::detail
