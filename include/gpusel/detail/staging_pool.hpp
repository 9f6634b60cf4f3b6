// The pinned staging buffers the copy engine moves pageable data through,
// kept between copies and shared by all threads.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>

#include "gpusel/current_device.hpp"
#include "gpusel/detail/cuda_status.hpp"
#include "gpusel/detail/memory.hpp"
#include "gpusel/detail/runtime_state.hpp"

namespace gpusel::detail {

// Note [The staging pool]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The DMA engines read and write only page-locked memory, so a copy from
// ordinary memory goes through pinned "staging" chunks. Pinning is expensive
// (cudaMallocHost of a few MiB costs about as much as copying them), so the
// chunks are allocated once and reused by every later copy, from any thread:
// a mutex guards the list of idle chunks, and a chunk belongs to exactly one
// copy between acquire() and give_back(). A copy returns a chunk only once
// the DMA that used it has finished; when it cannot know that (waiting
// failed) it frees the chunk instead (cudaFreeHost waits for the device).
//
// The idle chunks are kept in a fixed array, so that give_back, which runs
// where a copy ends or unwinds, never allocates and cannot fail. The array
// holds what the largest copy engine gpusel allows keeps in flight at once,
// kMaxStagingWorkers pipelines of kSlotsPerStagingWorker chunks; idle chunks
// beyond that are freed, so a burst of parallel copies does not keep its peak
// forever. The pool lives until the process exits and frees its chunks then,
// ignoring errors: the CUDA runtime may already have shut down
// (cudaErrorCudartUnloading), and a destructor must not throw.
// release_cached_resources() (cached_resources.hpp) empties it earlier: call
// it before cudaDeviceReset, which frees pinned memory behind the pool's back.
inline constexpr std::size_t kStagingChunkBytes = std::size_t{4} << 20;
// The most staging pipelines (worker threads) any copy engine may run, room
// for an engine whose worker counts are tunable: twice the 8 today's engine
// runs at most (detail/staged_copy.hpp).
inline constexpr std::size_t kMaxStagingWorkers = 16;
inline constexpr std::size_t kSlotsPerStagingWorker = 2;  // one chunk filled while the other's DMA runs
inline constexpr std::size_t kMaxIdleChunks = kMaxStagingWorkers * kSlotsPerStagingWorker;  // 128 MiB

class StagingPool {
 public:
  // The pool of the CUDA runtime the caller links, shared by every copy of
  // gpusel that calls it (Note [One state per runtime]).
  static StagingPool& instance() noexcept {
    return runtime_object<StagingPool>(RuntimeObject::staging_pool,
                                       [](void* storage) noexcept { return new (storage) StagingPool; });
  }

  // A chunk of kStagingChunkBytes pinned bytes. Throws OutOfMemory when pinned
  // memory ran out, Error when pinning fails otherwise.
  void* acquire() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (idle_count_ > 0) return idle_[--idle_count_];
    }
    void* chunk = nullptr;
    const cudaError_t status = cudaMallocHost(&chunk, kStagingChunkBytes);
    if (status != cudaSuccess) {
      throw_allocation_error(
          status, cuda_error(status, "gpusel copy engine: cudaMallocHost",
                             std::to_string(kStagingChunkBytes) + " bytes of staging", describe_visible_devices()));
    }
    return chunk;
  }

  // Takes back a chunk whose copies have all finished.
  void give_back(void* chunk) noexcept {
    if (chunk == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (idle_count_ < kMaxIdleChunks) {
        idle_[idle_count_++] = chunk;
        return;
      }
    }
    discard(chunk);
  }

  // Frees a chunk that may still be in use by a copy (cudaFreeHost waits for it).
  static void discard(void* chunk) noexcept {
    if (chunk != nullptr && cudaFreeHost(chunk) != cudaSuccess) (void)cudaGetLastError();
  }

  // Frees every idle chunk.
  void release_idle() noexcept {
    std::array<void*, kMaxIdleChunks> idle{};
    std::size_t count = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      idle = idle_;
      count = std::exchange(idle_count_, 0);
    }
    for (std::size_t i = 0; i < count; ++i) discard(idle[i]);
  }

  ~StagingPool() { release_idle(); }

  StagingPool(const StagingPool&) = delete;  // one pool per process
  StagingPool& operator=(const StagingPool&) = delete;

 private:
  // Asking the runtime something first makes sure whatever runtime state it
  // keeps in static storage exists before the pool and so outlives it.
  StagingPool() {
    int version = 0;
    (void)cudaRuntimeGetVersion(&version);
  }

  std::mutex mutex_;
  // The idle chunks are idle_[0, idle_count_): never more than kMaxIdleChunks,
  // so keeping one never allocates (give_back cannot fail).
  std::array<void*, kMaxIdleChunks> idle_{};
  std::size_t idle_count_ = 0;
};

// One chunk, held for the lifetime of a pipeline slot. Ending the lease gives
// the chunk back, or discards it when the copy may still be using it.
class StagingLease {
 public:
  StagingLease() = default;
  explicit StagingLease(void* chunk) noexcept : chunk_(chunk) {}
  ~StagingLease() { end(true); }

  StagingLease(const StagingLease&) = delete;  // one owner per chunk
  StagingLease& operator=(const StagingLease&) = delete;
  StagingLease(StagingLease&& other) noexcept : chunk_(std::exchange(other.chunk_, nullptr)) {}
  StagingLease& operator=(StagingLease&& other) noexcept {
    if (this != &other) {
      end(true);
      chunk_ = std::exchange(other.chunk_, nullptr);
    }
    return *this;
  }

  char* get() const noexcept { return static_cast<char*>(chunk_); }

  void end(bool copies_finished) noexcept {
    if (chunk_ == nullptr) return;
    if (copies_finished)
      StagingPool::instance().give_back(chunk_);
    else
      StagingPool::discard(chunk_);
    chunk_ = nullptr;
  }

 private:
  void* chunk_ = nullptr;
};

}  // namespace gpusel::detail
