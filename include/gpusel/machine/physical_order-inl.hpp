// The definitions of gpusel/machine/physical_order.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/physical_order.hpp"

#include <algorithm>

#include "gpusel/detail/core/pci_address.hpp"
#include "gpusel/error.hpp"

namespace gpusel {

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
    // CUDA's documentation says only that FASTEST_FIRST "guesses which device is
    // fastest using a simple heuristic". The guess: compute capability, newest
    // first, then PCI address. Within one compute capability the driver may rank
    // by multiprocessor count and clock, which NVML alone does not give.
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
