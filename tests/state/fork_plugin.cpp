// One of the shared objects of the fork test (tests/state/CMakeLists.txt):
// each links its own static (emulated) CUDA runtime, hidden in it, so each is
// a runtime of its own with its own staging pool, device pools and copy
// engine cache, each of which a forked child must forget.
#include <atomic>
#include <cstddef>

#include "gpusel/detail/data/engine/engine_cache.hpp"
#include "gpusel/detail/data/engine/parallel_parts.hpp"
#include "gpusel/detail/data/engine/staging_pool.hpp"
#include "gpusel/detail/data/memory/device_pool.hpp"

#define FORK_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

// Makes this runtime's objects, and has its copy engine keep one worker
// thread; returns how many threads the engine keeps.
FORK_PLUGIN_EXPORT std::size_t fork_plugin_use_runtime() {
  (void)gpusel::detail::StagingPool::instance();
  (void)gpusel::detail::DevicePools::instance();
  gpusel::detail::EngineCache& cache = gpusel::detail::EngineCache::instance();
  gpusel::detail::PartsRun run;
  run.function = [](const void*, std::size_t, std::size_t, std::size_t, const std::atomic<bool>&) {};
  const gpusel::detail::PartRange parts[2] = {{0, 1}, {1, 2}};
  cache.workers().run(run, parts, 2);
  return cache.workers().threads();
}

// How many threads this runtime's copy engine keeps: none in a child that forgot them.
FORK_PLUGIN_EXPORT std::size_t fork_plugin_engine_threads() {
  return gpusel::detail::EngineCache::instance().workers().threads();
}
