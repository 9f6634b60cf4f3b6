// Device memory from CUDA's stream-ordered allocator: a memory pool gpusel
// makes per device, with a bounded release threshold, and cudaMalloc where a
// device has no pools (Note [Device memory from a pool]).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/core/fork_safe_mutex.hpp"

namespace gpusel::detail {

class StreamUses;  // detail/data/memory/stream_uses.hpp

// Note [Device memory from a pool]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cudaFree waits for the whole device, which would serialize a loop that makes
// and drops temporaries. So a device Buffer's memory comes from
// cudaMallocFromPoolAsync and goes back with cudaFreeAsync, on a pool gpusel
// creates per device, not the default pool that user code and other libraries
// allocate from, trim and configure. The allocator is CUDA's; gpusel keeps no
// blocks. A pool is made inside the first allocation's guard, so no device the
// program does not use gets a context. Frees are queued on the legacy default
// stream (Note [When freed device memory is reused]); running out waits for
// them and retries once before OutOfMemory. A device without pools gets
// cudaMalloc and cudaFree. At exit the process takes the pools;
// release_cached_resources() destroys them and must come before cudaDeviceReset.

// Note [The release threshold]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A pool keeps freed memory for reuse, and the driver counts it as used:
// cudaMemGetInfo and NVML, and so every other job's `gpusel pick --min-free`,
// see it as taken. At each synchronization a pool gives back to the device what
// it holds beyond its release threshold; CUDA's default, 0, gives back
// everything, so a loop that synchronizes each step would map its memory afresh
// each step. gpusel sets 1 GiB: enough to keep a step's temporaries mapped
// between steps, and little beside what a job using a GPU already shows. Memory
// in use is never given back, whatever the threshold; release_cached_resources()
// gives back all that is cached. GPUSEL_POOL_RELEASE_THRESHOLD, a size read when
// a pool is made, overrides it.

// The default cudaMemPoolAttrReleaseThreshold (Note [The release threshold]).
// A pool applies its threshold at cudaStreamSynchronize, cudaEventSynchronize
// and cudaDeviceSynchronize.
inline constexpr std::uint64_t kDefaultPoolReleaseThreshold = std::uint64_t{1} << 30;
// Devices 0-63 are pooled; a device with a higher index gets cudaMalloc.
inline constexpr int kMaxPooledDevices = 64;

// What an allocation gave: the memory, or the status and name of the call
// that failed, and whether that call allocates (only then is running out of
// memory an OutOfMemory).
struct DeviceAllocation {
  void* pointer = nullptr;
  cudaError_t status = cudaSuccess;
  const char* call = "";
  bool allocating = true;
};

// The release threshold pools are made with (Note [The release threshold]):
// GPUSEL_POOL_RELEASE_THRESHOLD, a size as `gpusel pick` reads it (0B gives
// back everything at each synchronization, 8GiB keeps more), else the default.
// Throws Error when GPUSEL_POOL_RELEASE_THRESHOLD is set to something that is not a size.
[[nodiscard]] GPUSEL_API std::uint64_t pool_release_threshold();

// The pools of one CUDA runtime, one per device (Note [Device memory from a pool]).
class DevicePools {
 public:
  // The pools of the CUDA runtime the caller links, shared by every copy of
  // gpusel that calls it (Note [One state per runtime]).
  GPUSEL_API static DevicePools& instance() noexcept;

  // `bytes` (> 0) on `device`, which the caller has made current, ordered on
  // `stream` (cudaStreamLegacy for memory used by synchronous work). Throws
  // Error only for a bad GPUSEL_POOL_RELEASE_THRESHOLD; a failed call is in
  // the result.
  [[nodiscard]] GPUSEL_API DeviceAllocation allocate(std::size_t bytes, int device, cudaStream_t stream);

  // Frees what allocate() gave on `device`, which the caller has made current,
  // after the recorded `uses` (may be null). A free that cannot be queued is
  // done by cudaFree, which waits for the device and frees pool memory too.
  // Never throws.
  GPUSEL_API void free(void* pointer, int device, StreamUses* uses) noexcept;

  // Grants `accessor` access to `owner`'s pool, now and when it is made: peer
  // access (Note [Peer copies]) does not reach pool memory. Never throws.
  GPUSEL_API void allow_peer(int accessor, int owner) noexcept;

  // Waits for each pooled device, trims its pool to nothing, destroys it (a
  // pool with live Buffers goes away when the last is freed) and forgets what
  // was decided: the next Buffer asks again whether its device has pools and
  // makes a new one (Note [Device memory from a pool]). Never throws.
  GPUSEL_API void release() noexcept;

  // At exit nothing is called: the process takes its pools (Note [Device memory from a pool]).
  ~DevicePools() = default;

  // Copying is deleted: there is one per runtime.
  DevicePools(const DevicePools&) = delete;
  DevicePools& operator=(const DevicePools&) = delete;

 private:
  enum Mode : int { undecided = 0, pooled = 1, plain = 2 };

  friend class ForgettingRuntimeObject;
  DevicePools() = default;

  // The pool of `device`, made if needed, under mutex_; null with the failure in `failed`.
  GPUSEL_API cudaMemPool_t pool_of(int device, DeviceAllocation& failed);

  // In a forked child: plain stores only (Note [Caches across fork()]).
  void forget() noexcept {
    mutex_.forget();
    for (int device = 0; device < kMaxPooledDevices; ++device) {
      modes_[device].store(undecided, std::memory_order_relaxed);
      pools_[device] = nullptr;
      accessors_[device] = 0;
    }
  }

  ForkSafeMutex mutex_;
  // By device: whether it is pooled (read without the lock by free()), its
  // pool, and the devices to grant access to it (a bit per device).
  std::atomic<int> modes_[kMaxPooledDevices]{};
  cudaMemPool_t pools_[kMaxPooledDevices] = {};
  std::uint64_t accessors_[kMaxPooledDevices] = {};
};

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/memory/device_pool-inl.hpp"
#endif
