// What the copy engine keeps between copies besides pinned memory: its worker
// threads, and each worker's stream and events on each device.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <new>
#include <thread>
#include <vector>

#include "gpusel/copy_engine_options.hpp"
#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/forgetting_object.hpp"
#include "gpusel/detail/cuda/runtime_state.hpp"
#include "gpusel/detail/data/engine/parallel_parts.hpp"

namespace gpusel::detail {

// One worker's CUDA objects on one device: a stream and an event per slot,
// made on first use (cudaStream_t and cudaEvent_t are per device). When the
// stream could not be synchronized after a failure they are destroyed, not kept.
struct PipelineResources {
  cudaStream_t stream = nullptr;
  cudaEvent_t events[kMaxCopySlots] = {};

  // Destroys what was made; errors are ignored (at exit the runtime may be
  // unloading: cudaErrorCudartUnloading).
  void destroy() noexcept {
    for (cudaEvent_t& event : events) {
      if (event != nullptr && cudaEventDestroy(event) != cudaSuccess) (void)cudaGetLastError();
      event = nullptr;
    }
    if (stream != nullptr && cudaStreamDestroy(stream) != cudaSuccess) (void)cudaGetLastError();
    stream = nullptr;
  }
};

// Note [The engine cache]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Making threads, streams and events on every large copy is pure overhead, so
// the cache keeps them, per CUDA runtime (Note [One state per runtime]):
// PartWorkers' threads (Note [Worker threads kept between copies]) and, for
// worker i on device d, one stream and kMaxCopySlots events. One copy at a time
// holds the cache (a lease: try_acquire); a copy that finds it held makes its
// own, so concurrent copies still run concurrently. Part i of a copy runs on
// worker thread i (0 on the caller) and uses only by_device_[i], so no lock is
// needed past the lease. release_cached_resources() and process exit join the
// threads and destroy the CUDA objects; a forked child forgets them (Note
// [Caches across fork()]).
class EngineCache {
 public:
  static EngineCache& instance() noexcept {
    return ForgettingRuntimeObject::of<EngineCache>(RuntimeObject::copy_engine);
  }

  // Takes the cache for one copy; false when another copy holds it.
  bool try_acquire() noexcept { return !busy_.exchange(true, std::memory_order_acquire); }
  void give_back() noexcept { busy_.store(false, std::memory_order_release); }

  // Only while holding the cache.
  PartWorkers& workers() noexcept { return workers_; }

  // Worker `index`'s objects on `device` (made by the caller, as needed),
  // only while holding the cache, and only from the thread doing part `index`.
  PipelineResources& resources(std::size_t index, int device) {
    std::vector<PipelineResources>& made = by_device_[index];
    const auto wanted = static_cast<std::size_t>(device) + 1;
    if (made.size() < wanted) made.resize(wanted);
    return made[static_cast<std::size_t>(device)];
  }

  // Joins the threads and destroys the streams and events, waiting for a copy
  // that holds the cache to finish.
  void release() noexcept {
    while (!try_acquire()) std::this_thread::yield();
    release_held();
    give_back();
  }

  // How many threads and streams are kept.
  std::size_t threads() noexcept { return workers_.threads(); }

  ~EngineCache() {
    if (try_acquire()) release_held();  // else a copy still runs at exit: leave it alone
  }

  EngineCache(const EngineCache&) = delete;
  EngineCache& operator=(const EngineCache&) = delete;

 private:
  friend class ForgettingRuntimeObject;
  EngineCache() = default;

  void release_held() noexcept {
    workers_.stop();
    for (std::vector<PipelineResources>& made : by_device_) {
      for (PipelineResources& resources : made) resources.destroy();
      made = std::vector<PipelineResources>();  // frees the storage, as clear() need not
    }
  }

  // In a forked child: plain stores only. The vectors' storage is leaked, not
  // freed (a parent's thread may have been growing one at the fork): each is
  // made anew, empty, over the old one, which is never destroyed.
  void forget() noexcept {
    workers_.forget();
    for (std::vector<PipelineResources>& made : by_device_) new (&made) std::vector<PipelineResources>();
    busy_.store(false, std::memory_order_relaxed);
  }

  std::atomic<bool> busy_{false};
  PartWorkers workers_;
  // Worker i's objects on devices [0, by_device_[i].size()).
  std::vector<PipelineResources> by_device_[kMaxCopyWorkers];
};

// Holds the engine cache for one copy, if it is free.
class EngineLease {
 public:
  EngineLease() noexcept : cache_(&EngineCache::instance()) {
    if (!cache_->try_acquire()) cache_ = nullptr;
  }
  ~EngineLease() {
    if (cache_ != nullptr) cache_->give_back();
  }
  EngineLease(const EngineLease&) = delete;
  EngineLease& operator=(const EngineLease&) = delete;

  // The cache, or nullptr when another copy holds it.
  EngineCache* get() const noexcept { return cache_; }

 private:
  EngineCache* cache_;
};

}  // namespace gpusel::detail
