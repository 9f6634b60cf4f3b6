// Timing `.to(device)`, as PyTorch users do, in C++:
//   x = torch.rand([1024, 1024, 10]); t = time.time(); y = x.to(device); print(time.time() - t)
// 40 MiB of floats moved to the preferred device (the CPU fallback without a
// GPU), timed, and checked. The first move pays for CUDA's start-up, as in
// PyTorch; the second shows the copy itself.
#include <gpusel/gpusel.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const gpusel::Device device = gpusel::preferred_device();
  std::vector<float> values(std::size_t{1024} * 1024 * 10);
  std::mt19937 random(42);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (float& v : values) v = uniform(random);
  gpusel::Buffer<float> x(values, gpusel::cpu());  // torch.rand([1024, 1024, 10])

  for (const char* which : {"first", "second"}) {
    const auto start = std::chrono::steady_clock::now();
    gpusel::Buffer<float> y = x.to(device);  // y = x.to(device)
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s x.to(%s): %.2f ms for %.0f MiB (%.1f GB/s)\n", which, device.str().c_str(), seconds * 1e3,
                static_cast<double>(x.bytes()) / (1 << 20), static_cast<double>(x.bytes()) / seconds / 1e9);
    if (y.to_vector() != values) {
      std::printf("the data did not arrive intact\n");
      return 1;
    }
  }
  return 0;
}
