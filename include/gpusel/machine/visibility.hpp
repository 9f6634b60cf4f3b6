// Which GPUs this process sees, and why: the environment read against the
// machine's inventory, without starting CUDA.
//
//   gpusel::visible_devices()           the physical->logical map for this process
//   gpusel::explain()                   the same, in words: per cuda:N its physical GPU,
//                                       nvidia-smi number, name, UUID, PCI bus id; each token
//   gpusel::set_visible_devices({2})    os.environ["CUDA_VISIBLE_DEVICES"] = "2", checked: an Error
//                                       once CUDA has started (it would do nothing), or for a GPU
//                                       the current CUDA_VISIBLE_DEVICES (the job's allocation)
//                                       hides, unless VisibleScope::whole_machine is passed
//   gpusel::keep_visible_devices({1})   tf.config.set_visible_devices(gpus[1]): keeps cuda:1 of
//                                       what is visible now
//
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/error.hpp"
#include "gpusel/machine/inventory.hpp"
#include "gpusel/machine/physical_order.hpp"
#include "gpusel/text.hpp"
#include "gpusel/visible_devices.hpp"

namespace gpusel {

// Whether CUDA has started in this process, so that CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER no longer matter here (Note [Knowing whether CUDA has started]).
// After a first runtime call that failed (a value naming no GPU, or one twice)
// it is false: the driver would read the variables again, but the runtime keeps
// failing even once they are fixed, which cuda_started() cannot tell.
GPUSEL_API bool cuda_started() noexcept;

// This process's view of its GPUs.
struct DeviceMap {
  Inventory inventory;      // the physical GPUs; when !known(), its status and reason say why not
  CudaPhysicalOrder order;  // CUDA's physical order of them (Note [CUDA's physical order])
  VisibleDevices visible;   // the map: parse_visible_devices(environment, order.uuids(inventory))
  // Whether the map could be worked out (NVML answered). When not, `visible`
  // describes an empty machine and only the variables' text is meaningful.
  bool known() const noexcept { return inventory.ok(); }
  // The GPU behind cuda:logical, or nullptr when there is none or !known().
  const Gpu* device(int logical) const noexcept {
    if (logical < 0 || logical >= visible.count()) return nullptr;
    return physical_device(visible.physical_indices()[static_cast<std::size_t>(logical)]);
  }
  // Physical GPU `physical` (CUDA's physical index), or nullptr when there is none.
  const Gpu* physical_device(int physical) const noexcept {
    if (physical < 0 || physical >= order.count()) return nullptr;
    const std::size_t position = order.positions[static_cast<std::size_t>(physical)];
    return position < inventory.gpus.size() ? &inventory.gpus[position] : nullptr;
  }
  // Whether the CUDA runtime is known to fail under these variables (a GPU
  // named twice, an invalid CUDA_DEVICE_ORDER, every GPU hidden): known() and
  // !visible.ok(), unless a MIG instance's UUID ended the list, after which
  // what CUDA shows is CUDA's to decide. `gpusel explain` exits 1 then.
  GPUSEL_API bool cuda_would_fail() const noexcept;
};

// The map for this process from CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and
// NVML; each GPU's identity only, unless options ask for usage
// (InventoryOptions::with_usage()). Starts nothing and throws nothing but std::bad_alloc.
[[nodiscard]] GPUSEL_API DeviceMap visible_devices(const InventoryOptions& options = {});

namespace detail {
// The number of devices the runtime would show, worked out without starting
// CUDA; nullopt when only the runtime can say: CUDA has started already (the
// runtime is then exact and cheap), there is no NVML, or a GPU is in MIG mode.
// `runtime_version` is the CUDA runtime's CUDART_VERSION: a driver older than
// its major version shows no device (cudaErrorInsufficientDriver).
GPUSEL_API std::optional<int> count_devices_without_cuda(int runtime_version) noexcept;
}  // namespace detail

// Everything gpusel knows about which GPUs this process sees, in words, e.g.
//   CUDA_VISIBLE_DEVICES=1  CUDA_DEVICE_ORDER is unset (FASTEST_FIRST)
//   1 CUDA device is visible:
//     cuda:0  physical 1  nvidia-smi 1  NVIDIA H200  GPU-...  00000000:18:00.0
// Starts nothing; says so when there is no NVML (no driver). What comes from
// outside (the variables, NVML's strings) is escaped for a terminal (Note [Hostile text]).
[[nodiscard]] GPUSEL_API std::string explain(const DeviceMap& map);
// The same for this process: explain(visible_devices()).
[[nodiscard]] GPUSEL_API std::string explain();

// Which GPUs set_visible_devices may name.
enum class VisibleScope {
  // The default: only GPUs that the current CUDA_VISIBLE_DEVICES shows, when it
  // is set (Slurm and other schedulers set it to the job's allocation); naming
  // a GPU it hides is an Error.
  within_visible,
  // Any GPU of the machine, whatever CUDA_VISIBLE_DEVICES says now: leaving the
  // allocation, asked for by name.
  whole_machine,
};

// Makes exactly these physical GPUs (CUDA's physical indices, in this order)
// visible to this process, as CUDA_VISIBLE_DEVICES does: cuda:0 is the first.
// An empty list hides every GPU. Throws Error, changing nothing, when CUDA has
// already started (the change would have no effect), for a negative index, an
// index named twice, or (when NVML can tell) a GPU that does not exist or, unless
// `scope` is VisibleScope::whole_machine, one that the current
// CUDA_VISIBLE_DEVICES hides (the job's allocation). To narrow what is visible
// by cuda:N, as TensorFlow's set_visible_devices does, see keep_visible_devices.
// Like setenv, not safe while other threads read the environment.
GPUSEL_API void set_visible_devices(const std::vector<int>& physical_indices,
                                    VisibleScope scope = VisibleScope::within_visible);

// The same by UUID ("GPU-..." or "MIG-...", or a unique prefix such as "GPU-948e02bd").
// GPU- UUIDs are checked against NVML's GPUs; MIG- UUIDs (MIG instances) for form
// only, since CUDA alone decides which instances it shows.
GPUSEL_API void set_visible_devices(const std::vector<std::string>& uuids,
                                    VisibleScope scope = VisibleScope::within_visible);

namespace detail {
// set_visible_devices(uuids, scope), checked against `map` (this process's view, read already:
// Note [One look per attempt] in pick.hpp), or, when null, against visible_devices() read now.
GPUSEL_API void set_visible_uuids(const std::vector<std::string>& uuids, VisibleScope scope, const DeviceMap* map);
}  // namespace detail

// Braced lists: set_visible_devices({2, 0}) and set_visible_devices({"GPU-948e02bd"}).
GPUSEL_API void set_visible_devices(std::initializer_list<int> physical_indices,
                                    VisibleScope scope = VisibleScope::within_visible);
GPUSEL_API void set_visible_devices(std::initializer_list<std::string_view> uuids,
                                    VisibleScope scope = VisibleScope::within_visible);

// TensorFlow's tf.config.set_visible_devices: keeps these of the devices visible
// now, by their cuda:N (logical indices, in this order), and hides the rest:
// under CUDA_VISIBLE_DEVICES=2,3, keep_visible_devices({1}) leaves physical GPU 3
// alone visible, as cuda:0. Never leaves what is visible. Writes the kept
// tokens of the current value as they were (UUIDs stay UUIDs), or the physical
// indices when the variable is unset. Throws Error, changing nothing, when CUDA
// has started, for a logical index that is not visible or named twice, or when
// the current value is itself an error.
GPUSEL_API void keep_visible_devices(const std::vector<int>& logical_indices);

// Braced list: keep_visible_devices({1}).
GPUSEL_API void keep_visible_devices(std::initializer_list<int> logical_indices);

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/visibility-inl.hpp"
#endif
