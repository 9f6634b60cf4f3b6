// The definitions of gpusel/launcher.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: top (docs/layers.md).
#pragma once

#include "gpusel/launcher.hpp"

#include "gpusel/machine/slurm_numbering.hpp"

namespace gpusel {

namespace detail {

// What local_rank_device's refusal says to do, after its reason.
inline const char* rank_refusal_advice(RankRefusal refusal) noexcept {
  switch (refusal) {
    case RankRefusal::mig_mode:
      return "; name the rank's MIG instance in CUDA_VISIBLE_DEVICES, or pick an instance with "
             "gpusel::use_free_gpus";
    case RankRefusal::busy:
      return "; a rank keeps its GPU rather than take another (gpusel::RankSharing, share_own or "
             "allow_other_users, as local_rank_device's second argument shares it)";
    case RankRefusal::none:
      break;
  }
  return "";
}

}  // namespace detail

GPUSEL_API Device local_rank_device(Placement placement, const RankSharing& sharing) {
  const std::optional<LocalRank> rank = local_rank();
  const int visible = device_count();                         // from NVML before CUDA starts: starts nothing
  allotment(visible).require("gpusel::local_rank_device()");  // Note [The GPUs this process may choose among]
  Device device = cpu();
  try {
    device = device_for_local_rank(rank, visible, placement);
  } catch (const Error&) {
    // The decision is pure: made again with the runtime's account of the devices for the message, which
    // asks the CUDA runtime (and so starts CUDA) only now that there is an error to explain.
    return device_for_local_rank(rank, visible, placement, detail::describe_visible_devices());
  }
  if (device.is_cpu()) return device;
  InventoryOptions options = InventoryOptions::with_usage();  // the processes, for the rank's rules
  options.links = false;
  const DeviceMap map = visible_devices(options);
  slurm_list(map).require("gpusel::local_rank_device()");  // Note [Slurm's GPU numbers]
  // Which GPU cuda:r is, NVML tells only where it sees what CUDA sees (not with a GPU in MIG mode, say).
  if (!map.known() || !map.visible.ok() || map.visible.count() != visible) return device;
  const RankGpu own = rank_gpu(rank, map, placement, sharing);  // Note [A rank's own GPU]
  if (own.refusal != RankRefusal::none)
    throw Error("gpusel::local_rank_device(): " + own.reason + detail::rank_refusal_advice(own.refusal));
  return own.device;
}

}  // namespace gpusel
