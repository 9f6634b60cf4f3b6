// A consumer of gpusel: it must build with only the package's include path and link line.
// Built twice: header-only (consumer, gpusel::gpusel) and compiled once (consumer_compiled, gpusel::compiled).
#include <gpusel/gpusel.hpp>

#include <iostream>

#if defined(GPUSEL_COMPILE_ONCE)
constexpr const char* mode = "compiled once";
#else
constexpr const char* mode = "header-only";
#endif

int main() {
  const gpusel::Device device = gpusel::preferred_device();
  std::cout << "gpusel " << gpusel::version() << " consumer (" << mode << ") runs on " << device << "\n";
  return gpusel::Device::parse(device.str()) == device ? 0 : 1;
}
