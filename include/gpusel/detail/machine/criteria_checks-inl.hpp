// The definitions of gpusel/detail/machine/criteria_checks.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/machine/criteria_checks.hpp"

#include <cstddef>
#include <cstdint>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/detail/core/environment.hpp"
#include "gpusel/error.hpp"
#include "gpusel/inventory.hpp"
#include "gpusel/physical_order.hpp"
#include "gpusel/pick_criteria.hpp"
#include "gpusel/text.hpp"
#include "gpusel/visibility.hpp"
#include "gpusel/visible_devices.hpp"

namespace gpusel::detail {

GPUSEL_API bool mig_instance_visible(const DeviceMap& map, int physical, const MigInstance& instance) {
  if (map.visible.logical(physical)) return true;
  for (const VisibleToken& token : map.visible.tokens())
    if (token.text.size() > 4 && token.text.rfind("MIG-", 0) == 0 &&
        starts_with_ignoring_case(instance.uuid, token.text))
      return true;
  return false;
}

GPUSEL_API Excluded excluded_gpus(const std::vector<std::string>& exclude, const DeviceMap& map, bool only_visible) {
  const std::vector<Gpu>& gpus = map.inventory.gpus;
  Excluded result{std::vector<std::string>(gpus.size()), {}};
  const bool hiding = only_visible && map.visible.variable().has_value();
  std::vector<int> physical_of(gpus.size(), -1);  // positions to CUDA's physical indices
  for (int physical = 0; physical < map.order.count(); ++physical)
    physical_of[map.order.positions[static_cast<std::size_t>(physical)]] = physical;
  const auto gpu_visible = [&](std::size_t position) {
    const int physical = physical_of[position];
    if (physical < 0) return false;
    if (map.visible.logical(physical)) return true;
    for (const MigInstance& instance : gpus[position].mig_instances)
      if (mig_instance_visible(map, physical, instance)) return true;
    return false;
  };
  for (const std::string& name : exclude) {
    const auto reject = [&](const std::string& why) {
      std::string message = "gpusel::pick: cannot exclude \"" + escape_for_terminal(name) + "\": ";
      message += why;
      message +=
          "; name a GPU as pick prints it: CUDA's physical index (0, 1, ...) or its UUID or a unique prefix "
          "(GPU-8d2a); nvidia-smi's numbers are written smi:0, smi:1, ...";
      return Error(message);
    };
    const auto reject_hidden = [&](const std::string& what) {
      return Error("gpusel::pick: cannot exclude \"" + escape_for_terminal(name) + "\": it names " + what + ", which " +
                   escape_for_terminal(describe_value("CUDA_VISIBLE_DEVICES", map.visible.variable())) +
                   " hides, so it is no candidate anyway (only the GPUs this process sees are, unless the whole "
                   "machine is asked for)");
    };
    const bool smi = name.rfind("smi:", 0) == 0;
    const DecimalRead number = read_decimal(smi ? name.substr(4) : name, DecimalGrammar::whole_text);
    std::vector<std::size_t> matches;  // positions in gpus
    if (number.ok && !number.overflow) {
      if (smi) {
        for (std::size_t position = 0; position < gpus.size(); ++position)
          if (gpus[position].nvml_index >= 0 && static_cast<std::uint64_t>(gpus[position].nvml_index) == number.value)
            matches.push_back(position);
        if (matches.empty()) throw reject("nvidia-smi numbers no GPU so (" + std::to_string(gpus.size()) + " GPUs)");
      } else {
        if (number.value >= static_cast<std::uint64_t>(map.order.count()))
          throw reject("there is no GPU with that number (" + std::to_string(map.order.count()) +
                       " GPUs): a bare number is CUDA's physical index, as pick prints it");
        matches.push_back(map.order.positions[static_cast<std::size_t>(number.value)]);
      }
    } else if (number.ok || smi) {
      throw reject(smi ? "smi: is followed by no nvidia-smi number" : "there is no GPU with that physical index");
    } else if (name.rfind("GPU-", 0) == 0 && name.size() > 4) {
      for (std::size_t position = 0; position < gpus.size(); ++position)
        if (starts_with_ignoring_case(gpus[position].uuid, name)) matches.push_back(position);
      if (matches.empty()) throw reject("no GPU has that UUID");
      if (matches.size() > 1) throw reject("the prefix matches " + std::to_string(matches.size()) + " GPUs");
    } else if (name.rfind("MIG-", 0) == 0 && name.size() > 4) {
      std::vector<std::pair<const MigInstance*, std::size_t>> instances;  // and its GPU's position
      for (std::size_t position = 0; position < gpus.size(); ++position)
        for (const MigInstance& instance : gpus[position].mig_instances)
          if (starts_with_ignoring_case(instance.uuid, name)) instances.emplace_back(&instance, position);
      if (instances.empty()) throw reject("no MIG instance has that UUID");
      if (instances.size() > 1)
        throw reject("the prefix matches " + std::to_string(instances.size()) + " MIG instances");
      const auto [instance, position] = instances.front();
      if (hiding && (physical_of[position] < 0 || !mig_instance_visible(map, physical_of[position], *instance)))
        throw reject_hidden("MIG instance " + escape_for_terminal(instance->uuid));
      result.mig_instances.emplace_back(instance->uuid, name);
      continue;
    } else {
      throw reject("it is neither a number nor a GPU UUID");
    }
    const std::size_t position = matches.front();
    if (hiding && !gpu_visible(position))
      throw reject_hidden("GPU " + std::to_string(physical_of[position]) + " (nvidia-smi " +
                          std::to_string(gpus[position].nvml_index) + ", " + escape_for_terminal(gpus[position].uuid) +
                          ")");
    if (result.gpus[position].empty()) result.gpus[position] = name;
  }
  return result;
}

GPUSEL_API int wanted_at_most(const PickCriteria& criteria) {
  return criteria.at_most ? *criteria.at_most : criteria.at_least;
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
