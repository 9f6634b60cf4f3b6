// A GPU's PCI bus ID as numbers ("0000:3b:00.0"): the inventory finds a GPU by
// it, and CUDA's PCI_BUS_ID order (physical_order.hpp) sorts by it.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <string_view>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel::detail {

// A PCI address as numbers, ordered as PCI_BUS_ID orders GPUs: domain, bus, device, function.
struct PciAddress {
  unsigned domain = ~0u;  // all ones when the text does not parse
  unsigned bus = ~0u;
  unsigned device = ~0u;
  unsigned function = ~0u;

  friend bool operator==(const PciAddress& a, const PciAddress& b) noexcept {
    return a.domain == b.domain && a.bus == b.bus && a.device == b.device && a.function == b.function;
  }
  friend bool operator<(const PciAddress& a, const PciAddress& b) noexcept {
    if (a.domain != b.domain) return a.domain < b.domain;
    if (a.bus != b.bus) return a.bus < b.bus;
    if (a.device != b.device) return a.device < b.device;
    return a.function < b.function;
  }
};

// The address "domain:bus:device.function" (hexadecimal) names; all ones where it does not parse.
GPUSEL_API PciAddress pci_address(std::string_view text);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/core/pci_address-inl.hpp"
#endif
