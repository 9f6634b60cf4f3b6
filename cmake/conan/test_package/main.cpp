// The Conan package's test: gpusel found by find_package, built and run. Without a GPU it runs
// on the CPU and says why; it fails only if gpusel cannot answer at all.
#include <gpusel/runtime.hpp>
#include <gpusel/version.hpp>

#include <iostream>

#if defined(GPUSEL_COMPILE_ONCE)
constexpr const char* kMode = "compiled once";
#else
constexpr const char* kMode = "header-only";
#endif

int main() {
  const gpusel::Device device = gpusel::preferred_device();
  std::cout << "gpusel " << gpusel::version() << " (" << kMode << ") from Conan: " << gpusel::device_count()
            << " GPU(s); running on " << device << "\n";
  if (device.is_cpu())
    if (const auto why = gpusel::no_cuda_device_reason()) std::cout << "  (why: " << *why << ")\n";
  return gpusel::Device::parse(device.str()) == device ? 0 : 1;
}
