// Timing `.cuda()` against `.to(device)`, as PyTorch users do, in C++:
//   x = torch.rand([1024, 1024, 10])
//   t = time.time(); y = x.cuda(); print(time.time() - t)
//   t = time.time(); y = x.to(device); print(time.time() - t)
// They are the same operation, in gpusel as in PyTorch: x.cuda() is
// x.to(gpusel::cuda()), the current device. 40 MiB of floats, moved to the
// preferred device (the CPU fallback without a GPU), timed, and checked. The
// first move pays for CUDA's start-up, as in PyTorch; the later ones show the copy.
#include <gpusel/gpusel.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

namespace {

// Runs `move` (which returns the moved Buffer), prints its time, and checks the data arrived.
template <class Move>
bool timed(const char* what, const gpusel::Buffer<float>& x, const std::vector<float>& values, Move move) {
  const auto start = std::chrono::steady_clock::now();
  const gpusel::Buffer<float> y = move();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-22s %8.2f ms for %.0f MiB (%.1f GB/s), on %s\n", what, seconds * 1e3,
              static_cast<double>(x.bytes()) / (1 << 20), static_cast<double>(x.bytes()) / seconds / 1e9,
              y.device().str().c_str());
  if (y.to_vector() == values) return true;
  std::printf("the data did not arrive intact\n");
  return false;
}

}  // namespace

int main() {
  try {
    const gpusel::Device device = gpusel::preferred_device();
    std::vector<float> values(std::size_t{1024} * 1024 * 10);
    std::mt19937 random(42);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (float& v : values) v = uniform(random);
    const gpusel::Buffer<float> x(values, gpusel::cpu());  // torch.rand([1024, 1024, 10])

    bool ok = timed("first x.to(device)", x, values, [&] { return x.to(device); });
    if (device.is_cuda()) {
      ok = timed("x.cuda()", x, values, [&] { return x.cuda(); }) && ok;  // the same operation
      ok = timed("x.to(device)", x, values, [&] { return x.to(device); }) && ok;
    } else {
      std::printf("no GPU: x.cuda() would throw (%s)\n",
                  gpusel::no_cuda_device_reason().value_or("no CUDA device").c_str());
      ok = timed("x.to(device)", x, values, [&] { return x.to(device); }) && ok;
    }
    return ok ? 0 : 1;
  } catch (const gpusel::Error& error) {
    std::printf("error: %s\n", error.what());
    return 1;
  }
}
