// The pinned staging buffers the copy engine moves pageable data through,
// kept between copies and shared by all threads.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include "gpusel/copy_engine_options.hpp"
#include "gpusel/current_device.hpp"
#include "gpusel/detail/core/fork_safe_mutex.hpp"
#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/forgetting_object.hpp"
#include "gpusel/detail/cuda/forked_child.hpp"
#include "gpusel/detail/cuda/runtime_state.hpp"
#include "gpusel/detail/data/memory/memory.hpp"

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
// kMaxStagingWorkers pipelines of kMaxSlotsPerStagingWorker chunks; a copy
// keeps idle only what the engine's options keep in flight (workers times
// slots) and frees chunks beyond that, so a burst of parallel copies does not
// keep its peak forever. The pool lives until the process exits and frees its chunks then,
// ignoring errors: the CUDA runtime may already have shut down
// (cudaErrorCudartUnloading), and a destructor must not throw.
// release_cached_resources() (cached_resources.hpp) empties it earlier: call
// it before cudaDeviceReset, which frees pinned memory behind the pool's back.
//
// Chunks have the size the engine's options give (CopyEngineOptions::chunk_bytes,
// Note [Tuning the copy engine]); the idle ones are all of one size, and a copy
// that asks for another size frees them first. In a child made by fork() the
// pool forgets its chunks without freeing them: they were pinned in the
// parent's CUDA context (Note [Caches across fork()]).
inline constexpr std::size_t kDefaultStagingChunkBytes = std::size_t{4} << 20;
// The most staging pipelines (worker threads) any copy engine may run, and
// the most chunks each keeps in flight (CopyEngineOptions' bounds).
inline constexpr std::size_t kMaxStagingWorkers = kMaxCopyWorkers;
inline constexpr std::size_t kMaxSlotsPerStagingWorker = kMaxCopySlots;
inline constexpr std::size_t kMaxIdleChunks = kMaxStagingWorkers * kMaxSlotsPerStagingWorker;

class StagingPool {
 public:
  // The pool of the CUDA runtime the caller links, shared by every copy of
  // gpusel that calls it (Note [One state per runtime]).
  static StagingPool& instance() noexcept {
    return ForgettingRuntimeObject::of<StagingPool>(RuntimeObject::staging_pool);
  }

  // A chunk of `bytes` pinned bytes. Throws OutOfMemory when pinned memory
  // ran out, Error when pinning fails otherwise.
  void* acquire(std::size_t bytes) {
    enter_cuda_work("gpusel copy engine");
    std::array<void*, kMaxIdleChunks> other_size{};
    std::size_t other_count = 0;
    {
      const std::lock_guard<ForkSafeMutex> lock(mutex_);
      if (bytes == chunk_bytes_ && idle_count_ > 0) return idle_[--idle_count_];
      if (bytes != chunk_bytes_) {
        other_size = idle_;
        other_count = std::exchange(idle_count_, 0);
        chunk_bytes_ = bytes;
      }
    }
    for (std::size_t i = 0; i < other_count; ++i) discard(other_size[i]);
    void* chunk = nullptr;
    const cudaError_t status = cudaMallocHost(&chunk, bytes);
    if (status != cudaSuccess) {
      throw_allocation_error(
          status, cuda_error(status, "gpusel copy engine: cudaMallocHost", std::to_string(bytes) + " bytes of staging",
                             describe_visible_devices()));
    }
    return chunk;
  }

  // Takes back a chunk of `bytes` whose copies have all finished, keeping at
  // most `keep` idle (what the engine's options keep in flight).
  void give_back(void* chunk, std::size_t bytes, std::size_t keep) noexcept {
    if (chunk == nullptr) return;
    {
      const std::lock_guard<ForkSafeMutex> lock(mutex_);
      if (bytes == chunk_bytes_ && idle_count_ < keep && idle_count_ < kMaxIdleChunks) {
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
      const std::lock_guard<ForkSafeMutex> lock(mutex_);
      idle = idle_;
      count = std::exchange(idle_count_, 0);
    }
    for (std::size_t i = 0; i < count; ++i) discard(idle[i]);
  }

  // How many chunks are idle, and their size.
  std::size_t idle_chunks() noexcept {
    const std::lock_guard<ForkSafeMutex> lock(mutex_);
    return idle_count_;
  }

  ~StagingPool() { release_idle(); }

  StagingPool(const StagingPool&) = delete;  // one pool per CUDA runtime (runtime_object)
  StagingPool& operator=(const StagingPool&) = delete;

 private:
  friend class ForgettingRuntimeObject;
  StagingPool() = default;

  // In a forked child (Note [Caches across fork()]): plain stores only.
  void forget() noexcept {
    mutex_.forget();
    idle_count_ = 0;
  }

  ForkSafeMutex mutex_;
  // The idle chunks are idle_[0, idle_count_), each of chunk_bytes_: never
  // more than kMaxIdleChunks, so keeping one never allocates (give_back
  // cannot fail).
  std::array<void*, kMaxIdleChunks> idle_{};
  std::size_t idle_count_ = 0;
  std::size_t chunk_bytes_ = kDefaultStagingChunkBytes;
};

// One chunk, held for the lifetime of a pipeline slot. Ending the lease gives
// the chunk back, or discards it when the copy may still be using it.
class StagingLease {
 public:
  StagingLease() = default;
  // `chunk` has `bytes`; giving it back keeps at most `keep` chunks idle.
  StagingLease(void* chunk, std::size_t bytes, std::size_t keep) noexcept : chunk_(chunk), bytes_(bytes), keep_(keep) {}
  ~StagingLease() { end(true); }

  StagingLease(const StagingLease&) = delete;  // one owner per chunk
  StagingLease& operator=(const StagingLease&) = delete;
  StagingLease(StagingLease&& other) noexcept
      : chunk_(std::exchange(other.chunk_, nullptr)), bytes_(other.bytes_), keep_(other.keep_) {}
  StagingLease& operator=(StagingLease&& other) noexcept {
    if (this != &other) {
      end(true);
      chunk_ = std::exchange(other.chunk_, nullptr);
      bytes_ = other.bytes_;
      keep_ = other.keep_;
    }
    return *this;
  }

  char* get() const noexcept { return static_cast<char*>(chunk_); }

  void end(bool copies_finished) noexcept {
    if (chunk_ == nullptr) return;
    if (copies_finished)
      StagingPool::instance().give_back(chunk_, bytes_, keep_);
    else
      StagingPool::discard(chunk_);
    chunk_ = nullptr;
  }

 private:
  void* chunk_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t keep_ = 0;
};

}  // namespace gpusel::detail
