// The definitions of gpusel/detail/core/pci_address.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/core/pci_address.hpp"

#include <cstdio>
#include <string>

namespace gpusel::detail {

GPUSEL_API PciAddress pci_address(std::string_view text) {
  PciAddress address;
  const std::string copy(text);
  if (std::sscanf(copy.c_str(), "%x:%x:%x.%x", &address.domain, &address.bus, &address.device, &address.function) != 4)
    return {};
  return address;
}

}  // namespace gpusel::detail
