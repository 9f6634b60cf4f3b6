// Reading the GPUs through NVML with a time limit (Note [A hanging NVML] in devices.hpp).
#include "devices.hpp"

#include <gpusel/machine/slurm_numbering.hpp>
#include <gpusel/text.hpp>

#include <algorithm>
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

Choosing choosing_of(const Arguments& arguments) {
  return arguments.criteria.only_visible ? Choosing::within_visible : Choosing::whole_machine;
}

void require_allotment(const gpusel::DeviceMap& map, std::string_view who, Choosing choosing) {
  const gpusel::Allotment allotment = allotment_of(map);
  if (allotment.refusal_kind == gpusel::AllotmentRefusal::no_step && choosing != Choosing::rank_gpu) {
    if (choosing == Choosing::whole_machine) return;
    throw gpusel::Error(std::string(who) + ": " + allotment.refusal +
                        "; or choose among every GPU of the machine with --whole-machine");
  }
  allotment.require(who);
}

gpusel::DeviceMap in_slurm_numbers(const gpusel::DeviceMap& map) {
  static bool said = false;  // once per command: run --wait reads the machine again and again
  const gpusel::SlurmList slurm = gpusel::slurm_list(map);
  gpusel::DeviceMap resolved = gpusel::in_slurm_numbers(map, slurm);  // throws where Slurm's GPU is unknown
  if (!slurm.agrees() && !said) {
    std::string gpus;  // "Slurm's 0 (/dev/nvidia0) is GPU-... (...)" a line each, escaped already
    for (std::size_t start = 0, end = 0; start < slurm.described.size(); start = end + 1) {
      end = std::min(slurm.described.find(".\n", start), slurm.described.size());
      gpus += (gpus.empty() ? "" : "; ") + slurm.described.substr(start, end - start);
      end += 1;
    }
    std::cerr << "gpusel: reading CUDA_VISIBLE_DEVICES=" << gpusel::escape_for_terminal(slurm.value)
              << " in Slurm's numbers (" << gpusel::escape_for_terminal(slurm.rule)
              << "), as CUDA alone would not: " << gpus << "\n";
    said = true;
  }
  return resolved;
}

}  // namespace gpusel_tool
