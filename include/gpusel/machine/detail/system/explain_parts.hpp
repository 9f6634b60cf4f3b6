// The parts gpusel::explain() (gpusel/machine/visibility.hpp) is written from, a
// paragraph each: the variables and whether CUDA has started, what CUDA ignores of
// CUDA_VISIBLE_DEVICES, what NVML sees, a MIG- token that ends the list, the visible
// and hidden GPUs, the scheduler's allotment, and how CUDA reads each token. Every
// part is escaped for a terminal (Note [Hostile text]), as all of explain() is.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <string>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel {
struct DeviceMap;      // gpusel/machine/visibility.hpp
struct Inventory;      // gpusel/machine/inventory.hpp
struct VisibleToken;   // gpusel/visible_devices.hpp
class VisibleDevices;  // gpusel/visible_devices.hpp
}  // namespace gpusel

namespace gpusel::detail {

// The first token not kept, when it is a MIG- one: from there on what CUDA
// shows is CUDA's to decide, not known to fail. nullptr otherwise.
GPUSEL_API const VisibleToken* mig_token_ending_list(const VisibleDevices& visible) noexcept;

// explain()'s headline: the two variables.
GPUSEL_API std::string explain_variables(const VisibleDevices& visible);

// Whether changing the variables still matters.
GPUSEL_API std::string explain_cuda_started();

// "NVML (libnvidia-ml.so.1) sees 4 GPUs, driver 550.54.15 (CUDA 12.4).\n"
GPUSEL_API std::string explain_nvml(const Inventory& inventory);

// A MIG- token that ended the list, and the MIG instance it names when NVML lists it
// (Note [MIG instances]); CUDA's enumeration stays CUDA's.
struct MigEnd {
  const VisibleToken* token = nullptr;  // nullptr: no MIG- token ended the list
  int owner = -1;                       // the physical GPU of the instance it names, when NVML lists it
  std::string owner_text;               // ", an instance of physical GPU 1 (...)", then
  std::string why;                      // what the token is, then
};

GPUSEL_API MigEnd find_mig_end(const DeviceMap& map);

// What the MIG- token `end` names, and what is known of the map before it.
GPUSEL_API std::string explain_mig_end(const VisibleDevices& visible, const MigEnd& end);

// What CUDA ignores of CUDA_VISIBLE_DEVICES, said under the headline: the tokens from the one
// that ends the list on, where one before it is kept ("" where none is: then no device is visible,
// which is said below). Without NVML, only where the list ends on every machine.
GPUSEL_API std::string explain_ignored(const DeviceMap& map, const MigEnd& mig_end);

// The visible devices, one a line, for a map that is ok().
GPUSEL_API std::string explain_visible_devices(const DeviceMap& map);

// The GPUs CUDA_VISIBLE_DEVICES hides, but for `mig_owner`: the GPU of the instance it names is not hidden.
GPUSEL_API std::string explain_hidden(const DeviceMap& map, int mig_owner);

// The scheduler's and the container runtime's part (Note [The GPUs this process may choose
// among]): what they gave, in their own names, never mapped to GPUs, and beside it what
// CUDA_VISIBLE_DEVICES gives this task. "" outside Slurm and containers.
GPUSEL_API std::string explain_allotment(const DeviceMap& map);

// How CUDA reads each token of CUDA_VISIBLE_DEVICES ("" when it is unset).
GPUSEL_API std::string explain_tokens(const DeviceMap& map, const MigEnd& mig_end);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/system/explain_parts-inl.hpp"
#endif
