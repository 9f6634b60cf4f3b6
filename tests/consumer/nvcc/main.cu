// A CUDA program built by nvcc that uses gpusel: device code and gpusel in one
// translation unit, and exactly one CUDA runtime in the program.
#include <gpusel/gpusel.hpp>

#include <cstdio>

__global__ void add_one(float* values, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) values[i] += 1.0f;
}

int main() {
  const gpusel::Device device = gpusel::preferred_device();
  std::printf("gpusel %s under nvcc runs on %s\n", gpusel::version(), device.str().c_str());
  if (device.is_cpu()) return 0;  // the CPU fallback: nothing to launch
  gpusel::Buffer<float> values = gpusel::Buffer<float>{1.0f, 2.0f}.to(device);
  add_one<<<1, 32>>>(values.data(), static_cast<int>(values.size()));
  gpusel::synchronize(device);
  return values.to_vector()[1] == 3.0f ? 0 : 1;
}
