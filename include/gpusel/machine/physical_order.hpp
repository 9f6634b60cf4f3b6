// What CUDA's device indices mean, read without starting CUDA: CudaPhysicalOrder,
// the order in which CUDA_DEVICE_ORDER makes CUDA count the inventory's GPUs.
//
//   auto inventory = gpusel::query_inventory();
//   auto order = gpusel::cuda_physical_order(inventory, "PCI_BUS_ID");  // what CUDA's indices mean
//   const gpusel::Gpu& first = order.gpu(inventory, 0);                 // CUDA's physical GPU 0
//   if (!order.exact) std::cerr << order.caveat << "\n";                // a guess, saying why
//
// It orders the Gpus of inventory.hpp, which it includes; visibility.hpp (the
// DeviceMap) includes this header.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/machine/inventory.hpp"

namespace gpusel {

// Note [CUDA's physical order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Integer tokens of CUDA_VISIBLE_DEVICES, and cuda:N when the variable is
// unset, count GPUs in the order CUDA_DEVICE_ORDER selects, which gpusel must
// know *without* starting CUDA (asking the runtime would initialize it).
// PCI_BUS_ID is ascending PCI address, as NVML and nvidia-smi number GPUs, so
// it is exact. FASTEST_FIRST, the default, is an unpublished heuristic that
// leaves identical GPUs in PCI order, so on a machine of one model it is exact
// too. With several models, or a GPU in MIG mode (CUDA shows its instances
// instead, numbered as CUDA decides; Note [MIG instances]), the order is a
// guess: `exact = false`, with a caveat saying why. Whatever the order, gpusel
// matches NVML's GPUs to CUDA's by UUID or PCI bus id, never by index.
struct CudaPhysicalOrder {
  // positions[i]: where physical GPU i (CUDA's physical index i) is in the
  // inventory's `gpus`. Positions, not copies: the Gpu records stay the one
  // record of each GPU, and GPUs whose UUIDs NVML reports twice or empty stay apart.
  std::vector<std::size_t> positions;
  bool exact = true;
  std::string caveat;  // why the order may be wrong, "" when exact

  // How many physical GPUs there are.
  int count() const noexcept { return static_cast<int>(positions.size()); }
  // Physical GPU `physical` of `inventory` (the one this order was made from);
  // throws Error when there is no such GPU.
  GPUSEL_API const Gpu& gpu(const Inventory& inventory, int physical) const;
  // The GPUs' UUIDs in this order, for parse_visible_devices: views of
  // `inventory`'s strings, valid while it lives unchanged.
  GPUSEL_API std::vector<std::string_view> uuids(const Inventory& inventory) const;
};

// CUDA's physical order for `inventory`'s GPUs under this CUDA_DEVICE_ORDER
// (nullopt = unset = FASTEST_FIRST). See Note [CUDA's physical order].
[[nodiscard]] GPUSEL_API CudaPhysicalOrder cuda_physical_order(const Inventory& inventory,
                                                               std::optional<std::string_view> cuda_device_order);

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/physical_order-inl.hpp"
#endif
