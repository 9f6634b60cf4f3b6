// A consumer of gpusel: it must build with only the package's include path and link line.
#include <gpusel/gpusel.hpp>

#include <iostream>

int main() {
  const gpusel::Device device = gpusel::preferred_device();
  std::cout << "gpusel " << gpusel::version() << " consumer runs on " << device << "\n";
  return gpusel::Device::parse(device.str()) == device ? 0 : 1;
}
