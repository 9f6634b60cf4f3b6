// The library's side of tool_run_local_rank_library (check_run_local_rank.sh): this
// process's GPU as gpusel::local_rank_device() gives it, on the machine the fake NVML
// describes, printed as its UUID, to set beside what `gpusel run --local-rank` gives the
// same rank on the same machine. An Error prints "gpusel: <what>" on stderr and exits 1.
//   rank_device [<GPUs>]   the emulated runtime shows <GPUs> (default 4), as CUDA would:
//                          it answers device_count() where NVML cannot (a GPU in MIG mode)
// The fake NVML loads the emulation's stand-in driver library, as a real NVML loads the
// driver, so NVML counts the GPUs before CUDA starts (Note [NVML without the driver library]).
#include <stdlib.h>

#include <gpusel/launcher.hpp>
#include <gpusel/machine/visibility.hpp>

#include <iostream>
#include <string>

#include "emulated_runtime.hpp"

int main(int argc, char** argv) {
  gpusel_emulated::reset(gpusel_emulated::devices(argc > 1 ? std::stoi(argv[1]) : 4));
  setenv("GPUSEL_FAKE_NVML_LIBCUDA", gpusel_emulated::fake_libcuda_path().c_str(), 0);
  try {
    const gpusel::Device device = gpusel::local_rank_device();
    if (device.is_cpu()) {
      std::cout << "cpu\n";
      return 0;
    }
    const gpusel::DeviceMap map = gpusel::visible_devices();
    const gpusel::Gpu* gpu = map.device(device.index());
    std::cout << (gpu != nullptr ? gpu->uuid : device.str()) << "\n";
    return 0;
  } catch (const gpusel::Error& error) {
    std::cerr << "gpusel: " << error.what() << "\n";
    return 1;
  }
}
