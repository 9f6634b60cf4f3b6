// A compile-once program of three files, linked with gpusel::compiled_no_runtime
// (libgpusel.a, src/gpusel.cpp): this one includes the umbrella header,
// machine.cpp the machine layer alone, and header_only.cpp is compiled
// header-only beside them. Run by check.sh on a machine described to the fake
// NVML; it prints what it found.
#include <gpusel/gpusel.hpp>

#include <iostream>
#include <string>
#include <vector>

std::string describe_picks();    // machine.cpp
std::string header_only_view();  // header_only.cpp

namespace {

struct Layer : gpusel::Module {
  gpusel::Buffer<float> weight{gpusel::full<float>(3 << 20, 0.5f, gpusel::cpu())};  // 12 MiB: the staged, threaded path
  gpusel::Buffer<int> steps{std::vector<int>{1, 2, 3}};
  Layer() {
    register_buffer("weight", weight);
    register_buffer("steps", steps);
  }
};

// The data layer in this mode: a Module and a Buffer to a GPU and back, through the copy engine.
std::string move_data() {
  Layer layer;
  layer.to(gpusel::cuda(1));
  gpusel::synchronize(gpusel::cuda(1));
  std::string text = "module on " + layer.device().str() + "\n";
  const std::vector<float> weights = layer.weight.to(gpusel::cpu()).to_vector();
  bool same = weights.size() == std::size_t{3} << 20;
  for (float weight : weights) same = same && weight == 0.5f;
  layer.cpu();
  same = same && layer.steps.to_vector() == std::vector<int>{1, 2, 3};
  gpusel::release_cached_resources();
  return text + "round trip: " + (same ? "same bytes" : "different bytes") + "\n";
}

// The cuda layer's error paths, compiled once too: a guard on a device that is not there.
std::string missing_device_error() {
  try {
    const gpusel::DeviceGuard guard(7);
  } catch (const gpusel::Error& error) {
    return std::string("missing device: ") + error.what() + "\n";
  }
  return "missing device: no error\n";
}

}  // namespace

int main() {
  try {
    const gpusel::Inventory inventory = gpusel::query_inventory();
    std::cout << "inventory: " << inventory.gpus.size() << " GPUs, driver " << inventory.driver_version << "\n";
    // device_count() is inline in runtime.hpp and calls the machine layer's detail::count_devices_without_cuda.
    std::cout << "device_count: " << gpusel::device_count() << "\n";
    std::cout << gpusel::explain();
    std::cout << describe_picks();
    {
      const gpusel::GpuLease lease = gpusel::lease_gpu(inventory.gpus.at(1).uuid);
      std::cout << "leased: " << lease.uuids().size() << "\n";
      std::cout << "holder: " << gpusel::lease_holder(inventory.gpus.at(1).uuid).value_or("none").substr(0, 22) << "\n";
    }
    std::cout << "after release: " << gpusel::lease_holder(inventory.gpus.at(1).uuid).value_or("free") << "\n";
    const std::optional<gpusel::LocalRank> rank = gpusel::local_rank();
    std::cout << (rank ? rank->describe() : std::string("no local rank")) << "\n";
    std::cout << "local_rank_device: " << gpusel::local_rank_device() << "\n";
    std::cout << "escaped: " << gpusel::escape_for_terminal("\x1b]0;owned\x07") << "\n";
    std::cout << move_data();
    std::cout << missing_device_error();
    std::cout << header_only_view();
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "compile_once_program: " << error.what() << "\n";
    return 1;
  }
}
