// The C++ twin of main.cu: a plain C++ program, linked beside the CUDA ones.
#include <gpusel/gpusel.hpp>

#include <cstdio>

int main() {
  const gpusel::Device device = gpusel::preferred_device();
  std::printf("gpusel %s under a C++ compiler runs on %s\n", gpusel::version(), device.str().c_str());
  return 0;
}
