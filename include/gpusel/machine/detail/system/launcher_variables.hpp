// Readers of the variables launchers and engines set (torchrun, Ray, Slurm): pure, each
// reads through a ReadVariable.
//
// Included only by gpusel/machine/local_rank-inl.hpp, below gpusel/machine/local_rank.hpp's
// declarations (ReadVariable, Engine), which this header cannot include: header-only,
// local_rank.hpp includes its definitions, which include this header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

// A rank or a count as launchers write it: decimal digits only, fitting an int.
inline int parse_launcher_number(const char* variable, const std::string& value) {
  const auto reject = [&](const char* why) {
    return Error(std::string("gpusel::local_rank(): ") + variable + "=\"" + value + "\" " + why +
                 "; expected a non-negative decimal integer as launchers set it (e.g. " + variable + "=0)");
  };
  if (value.empty()) throw reject("is set but empty");
  const DecimalRead number = read_decimal(value, DecimalGrammar::whole_text);
  if (!number.ok) throw reject("is not a non-negative decimal integer");
  if (number.overflow || number.value > static_cast<std::uint64_t>(Device::kMaxIndex)) throw reject("is out of range");
  return static_cast<int>(number.value);
}

// How many entries a CUDA_VISIBLE_DEVICES that Slurm wrote lists: indices or
// UUIDs, comma-separated; none in an empty one.
inline int listed_gpus(std::string_view list) {
  if (list.empty()) return 0;
  return static_cast<int>(std::count(list.begin(), list.end(), ',')) + 1;
}

// The step's GPUs on this node as SLURM_GPUS_ON_NODE says; nullopt when it is unset or malformed.
inline std::optional<int> slurm_gpus_on_node(const ReadVariable& read) {
  const std::optional<std::string> text = read("SLURM_GPUS_ON_NODE");
  if (!text) return std::nullopt;
  const DecimalRead number = read_decimal(*text, DecimalGrammar::whole_text);
  if (!number.ok || number.overflow || number.value > static_cast<std::uint64_t>(Device::kMaxIndex))
    return std::nullopt;
  return static_cast<int>(number.value);
}

// What says Slurm gave this task GPUs of its own; empty when nothing does
// (Note [Slurm tasks with GPUs of their own]).
inline std::string slurm_task_gpus(const ReadVariable& read) {
  const std::optional<int> on_node = slurm_gpus_on_node(read);
  const std::optional<std::string> visible = read("CUDA_VISIBLE_DEVICES");
  if (!on_node || !visible) return {};
  const int listed = listed_gpus(*visible);
  if (listed >= *on_node) return {};
  return "CUDA_VISIBLE_DEVICES=" + *visible + " lists " + std::to_string(listed) + (listed == 1 ? " GPU" : " GPUs") +
         " of the step's SLURM_GPUS_ON_NODE=" + std::to_string(*on_node);
}

// Ray's variables, as set in its workers and their children ("RAY_JOB_ID=01000000,
// RAY_RAYLET_PID=4242"); "" outside Ray (Note [Naming the engine]).
inline std::string ray_said(const ReadVariable& read) {
  std::string said;
  for (const char* name : {"RAY_JOB_ID", "RAY_RAYLET_PID"})
    if (const std::optional<std::string> value = read(name))
      said += (said.empty() ? "" : ", ") + std::string(name) + "=" + *value;
  return said;
}

// Who set LOCAL_RANK: Ray Train in a Ray worker that torchrun did not start, else torchrun
// (Note [Naming the engine]); a name only, which decides nothing.
inline const char* local_rank_launcher(const ReadVariable& read) {
  return !read("TORCHELASTIC_RUN_ID") && !ray_said(read).empty() ? "Ray Train" : "torchrun";
}

}  // namespace gpusel::detail
