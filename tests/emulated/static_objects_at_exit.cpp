// A program whose Buffers, Stream and gpusel caches have static storage and are
// destroyed after the CUDA runtime has begun to unload (Note [The runtime
// unloads at exit] in emulated_runtime.cpp). It must exit with status 0,
// print nothing, and not abort: emulated_runtime_test runs it and checks.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "emulated_runtime.hpp"
#include "gpusel/buffer.hpp"
#include "gpusel/stream.hpp"

namespace {

// Made first, so destroyed last: fails the program, loudly, if nothing below
// met the unloading runtime, since then it proved nothing.
struct Verdict {
  Verdict() = default;
  Verdict(const Verdict&) = delete;
  Verdict& operator=(const Verdict&) = delete;
  ~Verdict() {
    if (!gpusel_emulated::unloading() || gpusel_emulated::calls_refused_while_unloading() == 0) {
      std::fputs("static_objects_at_exit: no destructor met the unloading runtime\n", stderr);
      std::_Exit(3);
    }
  }
} verdict;

// The staging pool and the peer table, made before the runtime starts, so
// that they are destroyed after its teardown.
const bool caches_made = (gpusel::release_cached_resources(), true);

// Made empty before the runtime starts, filled in main: destroyed after the teardown.
gpusel::Buffer<float> weights;
gpusel::Buffer<float> pinned;
std::optional<gpusel::Stream> stream;

}  // namespace

int main() {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  const std::vector<float> values(std::size_t{1} << 20, 1.5f);  // 4 MiB: staged, so the pool keeps chunks
  weights = gpusel::Buffer<float>(values, gpusel::cuda(1));
  stream.emplace(gpusel::cuda(1));
  pinned = weights.to(gpusel::cpu(), *stream);
  stream->synchronize();
  const gpusel::Buffer<float> on_0 = weights.to(gpusel::cuda(0));       // the peer table learns a pair
  static const gpusel::Stream made_after_the_runtime(gpusel::cuda(0));  // destroyed before the teardown
  return caches_made && on_0.size() == values.size() && made_after_the_runtime.device_index() == 0 ? 0 : 1;
}
