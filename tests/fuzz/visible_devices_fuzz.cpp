// libFuzzer target over the two grammars gpusel reads from text: the
// CUDA_VISIBLE_DEVICES parser and Device::parse. Besides "no crash, no
// sanitizer report" it checks what must hold for every input:
//  - count() <= the number of physical GPUs, and ok() exactly when count() > 0;
//  - the map is injective and logical(physical(i)) == i;
//  - the kept tokens are exactly the map, in order, and the first token not
//    kept ends the list (every later token is not_read);
//  - Device::parse either throws gpusel::Error or gives a Device d with
//    parse(d.str()) == d.
//
// Input: byte 0 picks the machine (0..8 GPUs), byte 1 CUDA_DEVICE_ORDER and
// whether CUDA_VISIBLE_DEVICES is unset; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpusel/device.hpp"
#include "gpusel/visible_devices.hpp"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

// UUIDs that share prefixes, so ambiguous prefixes are reachable.
const char* const kUuids[] = {
    "GPU-9942190a-aa31-4ff1-4aa9-c388d80f85f1", "GPU-9e8d35e3-a134-0fdd-0e01-23811fdbd293",
    "GPU-e429a63e-c61c-4795-b757-5132caeb8e70", "GPU-eee1dfbc-0a0f-6ad8-5ff6-dc942a8b9d98",
    "GPU-bbcd6503-5150-4e92-c266-97cc4390d04e", "GPU-472ea263-58d7-410d-cc82-f7fdece5bd28",
    "GPU-e56257c4-947f-6a5b-7ec9-0f45567ccf4e", "GPU-1c20e77d-1c1a-d9ed-fe37-18b8466a78ad",
};

void fuzz_visible_devices(int gpu_count, std::uint8_t flags, const std::string& text) {
  std::vector<std::string> physical;
  for (int i = 0; i < gpu_count; ++i) physical.emplace_back(kUuids[i]);
  const char* const orders[] = {nullptr, "FASTEST_FIRST", "PCI_BUS_ID", "pci_bus_id"};
  const char* order = orders[flags & 3];
  const bool unset = (flags & 4) != 0;
  const auto map = gpusel::parse_visible_devices(unset ? std::nullopt : std::optional<std::string_view>(text), physical,
                                                 order ? std::optional<std::string_view>(order) : std::nullopt);
  check(map.count() <= gpu_count);
  check(map.ok() == (map.count() > 0));
  check(map.ok() == (map.error_name()[0] == '\0'));
  std::vector<bool> seen(static_cast<std::size_t>(gpu_count), false);
  for (int logical = 0; logical < map.count(); ++logical) {
    const int index = map.physical(logical);
    check(index >= 0 && index < gpu_count);
    check(!seen[static_cast<std::size_t>(index)]);  // injective
    seen[static_cast<std::size_t>(index)] = true;
    check(map.logical(index) == logical);
  }
  for (int index = 0; index < gpu_count; ++index)
    if (const auto logical = map.logical(index)) check(map.physical(*logical) == index);
  if (map.ok() && !unset) {
    std::size_t kept = 0;
    bool ended = false;
    for (const gpusel::VisibleToken& token : map.tokens()) {
      if (ended) check(token.outcome == gpusel::TokenOutcome::not_read);
      if (token.kept())
        check(!ended && token.physical == map.physical(static_cast<int>(kept++)));
      else
        ended = true;
      check(!token.why(gpu_count).empty());
    }
    check(kept == static_cast<std::size_t>(map.count()));
  }
  (void)map.summary();
  (void)gpusel::detail::describe_runtime_map(std::string(text), map.count());
  try {
    (void)map.physical(map.count());
    check(false);
  } catch (const gpusel::Error&) {
  }
}

void fuzz_device_grammar(const std::string& text) {
  try {
    const gpusel::Device device = gpusel::Device::parse(text);
    check(gpusel::Device::parse(device.str()) == device);
    check(device.index() >= gpusel::Device::kNoIndex);
  } catch (const gpusel::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  fuzz_visible_devices(data[0] % 9, data[1], text);
  fuzz_device_grammar(text);
  return 0;
}
