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
// Layer: machine (docs/layers.md).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/inventory.hpp"

namespace gpusel {

// Note [CUDA's physical order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Integer tokens of CUDA_VISIBLE_DEVICES, and cuda:N when the variable is
// unset, count GPUs in the order CUDA_DEVICE_ORDER selects, which gpusel must
// know *without* starting CUDA (asking the runtime would initialize it):
//  - PCI_BUS_ID: ascending PCI address (domain, bus, device, function). NVML and
//    nvidia-smi number GPUs the same way, so this order is exact.
//  - FASTEST_FIRST (the default): CUDA's documentation says only that it "guesses
//    which device is fastest using a simple heuristic"; the heuristic is not
//    published. What holds in practice: identical GPUs are left in PCI order, so
//    on a machine of one model FASTEST_FIRST equals PCI_BUS_ID (and nvidia-smi's
//    numbers are CUDA's). With several models gpusel orders by compute capability,
//    newest first, then PCI address: a guess, marked `exact = false`, with a caveat
//    saying nvidia-smi's numbers may not be CUDA's. Within one compute capability
//    the driver may rank by multiprocessor count and clock, which NVML alone does
//    not give; set CUDA_DEVICE_ORDER=PCI_BUS_ID to make every tool agree.
// GPUs in MIG mode are listed as GPUs; CUDA shows their MIG instances instead,
// numbered as CUDA decides (exact = false, with a caveat; Note [MIG instances]).
// Whatever the order, gpusel matches NVML's GPUs to CUDA's by UUID or PCI bus
// id, never by index.
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

// --- definitions (Note [Compile-once mode]) ---------------------------------
#if GPUSEL_DEFINITIONS

#include <algorithm>

#include "gpusel/error.hpp"

namespace gpusel {

// detail::pci_address and PciAddress come with inventory.hpp's definitions.
GPUSEL_API CudaPhysicalOrder cuda_physical_order(const Inventory& inventory,
                                                 std::optional<std::string_view> cuda_device_order) {
  const std::vector<Gpu>& gpus = inventory.gpus;
  std::vector<detail::PciAddress> addresses;  // parsed once: sorting compares them n log n times
  addresses.reserve(gpus.size());
  for (const Gpu& each : gpus) addresses.push_back(detail::pci_address(each.pci_bus_id));
  CudaPhysicalOrder order;
  order.positions.resize(gpus.size());
  for (std::size_t position = 0; position < gpus.size(); ++position) order.positions[position] = position;
  const auto by_pci = [&addresses](std::size_t a, std::size_t b) { return addresses[a] < addresses[b]; };
  const bool pci_order = cuda_device_order && *cuda_device_order == "PCI_BUS_ID";
  bool one_model = true;
  for (const Gpu& each : gpus) one_model = one_model && each.name == gpus.front().name;
  if (pci_order || one_model) {
    std::stable_sort(order.positions.begin(), order.positions.end(), by_pci);
  } else {
    const auto capability = [&gpus](std::size_t position) {
      return gpus[position].compute_capability_major * 10 + gpus[position].compute_capability_minor;
    };
    std::stable_sort(order.positions.begin(), order.positions.end(), [&](std::size_t a, std::size_t b) {
      if (capability(a) != capability(b)) return capability(a) > capability(b);
      return by_pci(a, b);
    });
    order.exact = false;
    order.caveat =
        "this machine has GPUs of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA ranks them "
        "FASTEST_FIRST by a heuristic NVML cannot reproduce exactly, so nvidia-smi's numbers may not be CUDA's "
        "(set CUDA_DEVICE_ORDER=PCI_BUS_ID to make them agree)";
  }
  for (const std::size_t position : order.positions) {
    if (!gpus[position].mig_enabled) continue;
    order.exact = false;
    if (!order.caveat.empty()) order.caveat += "; ";
    order.caveat += "GPU " + std::to_string(gpus[position].nvml_index) +
                    " is in MIG mode: CUDA shows its MIG instances instead, numbered as CUDA decides (name them by "
                    "their MIG- UUIDs)";
  }
  return order;
}

GPUSEL_API const Gpu& CudaPhysicalOrder::gpu(const Inventory& inventory, int physical) const {
  if (physical < 0 || physical >= count() || positions[static_cast<std::size_t>(physical)] >= inventory.gpus.size())
    throw Error("gpusel::CudaPhysicalOrder::gpu(" + std::to_string(physical) + "): there is no physical GPU " +
                std::to_string(physical) + " (the order has " + std::to_string(count()) + ", the inventory " +
                std::to_string(inventory.gpus.size()) + ")");
  return inventory.gpus[positions[static_cast<std::size_t>(physical)]];
}

GPUSEL_API std::vector<std::string_view> CudaPhysicalOrder::uuids(const Inventory& inventory) const {
  std::vector<std::string_view> result;
  result.reserve(positions.size());
  for (const std::size_t position : positions)
    result.emplace_back(position < inventory.gpus.size() ? std::string_view(inventory.gpus[position].uuid)
                                                         : std::string_view());
  return result;
}

}  // namespace gpusel

#endif  // GPUSEL_DEFINITIONS
