// The machine layer alone, in compile-once mode: pick and assess, the criteria
// and the topology in words, and CUDA's physical order, declared here, defined
// in libgpusel.a.
#include <gpusel/machine/physical_order.hpp>
#include <gpusel/machine/pick.hpp>
#include <gpusel/machine/pick_criteria.hpp>
#include <gpusel/machine/topology.hpp>

#include <cstddef>
#include <string>
#include <vector>

std::string describe_picks();

std::string describe_picks() {
  gpusel::PickCriteria criteria;
  criteria.allow_other_users = true;
  std::string text = "criteria: " + gpusel::describe(criteria) + "\n";
  text += "topology: " + gpusel::describe(gpusel::GpuLink::nvlink) + ", CPUs " +
          gpusel::format_cpu_list({0, 1, 2, 3, 8}) + "\n";
  const gpusel::DeviceMap map = gpusel::visible_devices(gpusel::InventoryOptions::with_usage());
  const gpusel::CudaPhysicalOrder order = gpusel::cuda_physical_order(map.inventory, "PCI_BUS_ID");
  text += "physical order: " + std::to_string(order.count()) + " GPUs, " + (order.exact ? "exact" : "a guess");
  for (int physical = 0; physical < order.count(); ++physical)
    text += ", nvidia-smi " + std::to_string(order.gpu(map.inventory, physical).nvml_index) + " " +
            std::string(order.uuids(map.inventory)[static_cast<std::size_t>(physical)]);
  text += "\n";
  for (const gpusel::Candidate& candidate : gpusel::assess(criteria, map))
    text += "assessed: " + gpusel::describe(candidate) + (candidate.fits() ? ": fits\n" : ": rejected\n");
  for (const gpusel::Candidate& candidate : gpusel::pick(criteria))
    text += "picked: GPU " + std::to_string(candidate.physical_index) + "\n";
  return text;
}
