// The definitions of gpusel/launcher.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: top (docs/layers.md).
#pragma once

#include "gpusel/launcher.hpp"

namespace gpusel {

GPUSEL_API Device local_rank_device(Placement placement) {
  const std::optional<LocalRank> rank = local_rank();
  const int visible = device_count();                         // from NVML before CUDA starts: starts nothing
  allotment(visible).require("gpusel::local_rank_device()");  // Note [The GPUs this process may choose among]
  try {
    return device_for_local_rank(rank, visible, placement);
  } catch (const Error&) {
    // The decision is pure: made again with the runtime's account of the devices for the message, which
    // asks the CUDA runtime (and so starts CUDA) only now that there is an error to explain.
    return device_for_local_rank(rank, visible, placement, detail::describe_visible_devices());
  }
}

}  // namespace gpusel
