// Reading the GPUs through NVML with a time limit (Note [A hanging NVML] in devices.hpp).
#include "devices.hpp"

#include <exception>
#include <future>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "output.hpp"

namespace gpusel_tool {

bool g_nvml_hung = false;  // a thread is left inside NVML: main ends with _Exit

std::optional<gpusel::DeviceMap> read_devices(const gpusel::InventoryOptions& options,
                                              std::chrono::milliseconds timeout) {
  if (timeout.count() == 0) return gpusel::visible_devices(options);
  auto answer = std::make_shared<std::promise<gpusel::DeviceMap>>();
  std::future<gpusel::DeviceMap> map = answer->get_future();
  std::thread reader([answer, options] {
    try {
      answer->set_value(gpusel::visible_devices(options));
    } catch (...) {
      answer->set_exception(std::current_exception());
    }
  });
  if (map.wait_for(timeout) != std::future_status::ready) {
    reader.detach();
    g_nvml_hung = true;
    return std::nullopt;
  }
  reader.join();
  return map.get();
}

int report_nvml_hung(const Arguments& arguments, int status) {
  const std::string reason = "NVML did not answer in " + std::to_string(arguments.nvml_timeout.count() / 1000) +
                             " s (GPUSEL_NVML_TIMEOUT sets how long to wait; nvidia-smi and dmesg may say why "
                             "the driver hangs)";
  std::cerr << "gpusel: " << reason << "\n";
  if (arguments.json) print_error_json("nvml_failed", reason, status);
  return status;
}

gpusel::InventoryOptions usage(bool links) {
  gpusel::InventoryOptions options = gpusel::InventoryOptions::with_usage();
  options.links = links;
  return options;
}

gpusel::Allotment allotment_of(const gpusel::DeviceMap& map) {
  return gpusel::allotment(map.known() && map.visible.ok() ? map.visible.count() : 0);
}

void require_allotment(const gpusel::DeviceMap& map, std::string_view who) { allotment_of(map).require(who); }

}  // namespace gpusel_tool
