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

class StreamUses;  // detail/data/stream_uses.hpp

// Note [Device memory from a pool]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every device Buffer was one cudaMalloc, and its end one cudaFree, which
// waits for the whole device: a loop that makes and drops temporaries, what
// training and inference do all day, serialized on it. Now a Buffer's memory
// comes from cudaMallocFromPoolAsync and goes back with cudaFreeAsync, on a
// memory pool gpusel creates for each device it allocates on
// (cudaMemPoolCreate, pinned, located on that device). Not the device's
// default pool: user code and other libraries allocate from and trim that one,
// and set its attributes. The allocator is CUDA's; gpusel keeps no blocks.
//  - A pool is made when the first Buffer on its device is allocated, inside
//    the guard that allocation holds: the device has its context then, so no
//    context is made on a device the program does not use.
//  - A device without pools (cudaDevAttrMemoryPoolsSupported == 0: some
//    virtualized GPUs, WSL's older drivers) gets cudaMalloc and cudaFree, as
//    before. The answer is asked once per device and runtime.
//  - The free is queued on the legacy default stream after the waits that
//    Note [When freed device memory is reused] (detail/data/stream_uses.hpp)
//    requires. A free that cannot be queued is done by cudaFree, which
//    waits for the device and frees pool memory too.
//  - Memory running out (cudaErrorMemoryAllocation): frees still queued may
//    hold what is missing, so gpusel waits for the device, trims the pool and
//    tries once more before it throws OutOfMemory, as cudaFree's waiting
//    made memory come back at once before.
//  - A device that reads this device's memory directly (peer access, Note
//    [Peer copies] in detail/data/peer_access.hpp) is granted access to the pool
//    (cudaMemPoolSetAccess): cudaDeviceEnablePeerAccess does not reach pool
//    memory. Pairs enabled before the pool was made are granted when it is.
//  - release_cached_resources() waits for each pooled device, trims its pool
//    to nothing (cudaMemPoolTrimTo 0), destroys it and forgets it (a pool
//    with live Buffers goes away when the last is freed), and asks again
//    whether devices have pools; the next Buffer makes a new one. Before
//    cudaDeviceReset, which destroys the pools behind gpusel's back, call it.
//  - The pools are per CUDA runtime (Note [One state per runtime]); a child
//    forked after CUDA started forgets them without a call (Note [Caches
//    across fork()]); at exit nothing is called: the process takes its pools.
//  - Devices 0-63 are pooled; a device with a higher index gets cudaMalloc.

// Note [The release threshold]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A pool keeps freed memory for reuse, and the driver counts it as used:
// cudaMemGetInfo and NVML, and so every other job's `gpusel pick --min-free`,
// see it as taken. At each synchronization (cudaStreamSynchronize,
// cudaEventSynchronize, cudaDeviceSynchronize) a pool gives back to the device
// what it holds beyond its release threshold (cudaMemPoolAttrReleaseThreshold);
// CUDA's default, 0, gives back everything, so a loop that synchronizes each
// step would map its memory afresh each step. gpusel sets 1 GiB: enough to keep
// a step's temporaries (the make-and-drop loop, a model's activations of
// modest size) mapped between steps, and little beside what a job using a GPU
// already shows (under 1% of an H200's 141 GiB, 1.25% of 80 GiB). Memory in use
// is never given back, whatever the threshold; release_cached_resources()
// gives back all that is cached. GPUSEL_POOL_RELEASE_THRESHOLD overrides it,
// read when a pool is made: a size as `gpusel pick` reads it (0B gives back
// everything at each synchronization, 8GiB keeps more).
inline constexpr std::uint64_t kDefaultPoolReleaseThreshold = std::uint64_t{1} << 30;
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

// The release threshold pools are made with (Note [The release threshold]).
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
  // after the recorded `uses` (may be null). Never throws.
  GPUSEL_API void free(void* pointer, int device, StreamUses* uses) noexcept;

  // Grants `accessor` access to `owner`'s pool, now and when it is made. Never throws.
  GPUSEL_API void allow_peer(int accessor, int owner) noexcept;

  // Waits for each pooled device, trims and destroys its pool, and forgets
  // what was decided (Note [Device memory from a pool]). Never throws.
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

#if GPUSEL_DEFINITIONS

#include <cstdlib>
#include <string>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/runtime_state.hpp"
#include "gpusel/detail/data/forgetting_object.hpp"
#include "gpusel/detail/data/stream_uses.hpp"
#include "gpusel/error.hpp"
#include "gpusel/guard.hpp"
#include "gpusel/memory_size.hpp"

namespace gpusel::detail {

GPUSEL_API DevicePools& DevicePools::instance() noexcept {
  return ForgettingRuntimeObject::of<DevicePools>(RuntimeObject::device_pools);
}

GPUSEL_API std::uint64_t pool_release_threshold() {
  const char* text = read_environment("GPUSEL_POOL_RELEASE_THRESHOLD");
  if (text == nullptr) return kDefaultPoolReleaseThreshold;
  try {
    return parse_memory_size(text);
  } catch (const Error& error) {
    throw Error(std::string("GPUSEL_POOL_RELEASE_THRESHOLD=") + text + ": " + error.what());
  }
}

GPUSEL_API cudaMemPool_t DevicePools::pool_of(int device, DeviceAllocation& failed) {
  if (pools_[device] != nullptr) return pools_[device];
  const std::uint64_t threshold = pool_release_threshold();  // may throw: before anything is made
  cudaMemPoolProps properties{};
  properties.allocType = cudaMemAllocationTypePinned;
  properties.handleTypes = cudaMemHandleTypeNone;
  properties.location.type = cudaMemLocationTypeDevice;
  properties.location.id = device;
  cudaMemPool_t pool = nullptr;
  cudaError_t status = cudaMemPoolCreate(&pool, &properties);
  if (status != cudaSuccess) {
    failed = {nullptr, status, "cudaMemPoolCreate"};
    return nullptr;
  }
  std::uint64_t value = threshold;
  status = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &value);
  if (status != cudaSuccess) {
    failed = {nullptr, status, "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)", false};
    (void)cudaGetLastError();
    if (cudaMemPoolDestroy(pool) != cudaSuccess) (void)cudaGetLastError();
    return nullptr;
  }
  for (int accessor = 0; accessor < kMaxPooledDevices; ++accessor) {
    if ((accessors_[device] >> accessor & 1) == 0) continue;
    const cudaMemAccessDesc access{{cudaMemLocationTypeDevice, accessor}, cudaMemAccessFlagsProtReadWrite};
    if (cudaMemPoolSetAccess(pool, &access, 1) != cudaSuccess) (void)cudaGetLastError();  // copies get staged
  }
  pools_[device] = pool;
  return pool;
}

GPUSEL_API DeviceAllocation DevicePools::allocate(std::size_t bytes, int device, cudaStream_t stream) {
  DeviceAllocation made;
  std::unique_lock<ForkSafeMutex> lock(mutex_);
  int mode = device < kMaxPooledDevices ? modes_[device].load(std::memory_order_relaxed) : plain;
  if (mode == undecided) {
    int supported = 0;
    const cudaError_t status = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device);
    if (status != cudaSuccess)
      return {nullptr, status, "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)", false};
    mode = supported != 0 ? pooled : plain;
    modes_[device].store(mode, std::memory_order_release);
  }
  if (mode == plain) {
    lock.unlock();
    made.status = cudaMalloc(&made.pointer, bytes);
    made.call = "cudaMalloc";
    return made;
  }
  cudaMemPool_t pool = pool_of(device, made);
  if (pool == nullptr) return made;
  made.call = "cudaMallocFromPoolAsync";
  made.status = cudaMallocFromPoolAsync(&made.pointer, bytes, pool, stream);
  if (made.status == cudaErrorMemoryAllocation) {
    // Frees still queued may hold the memory: wait for them, give back the
    // cache, and try once more (Note [Device memory from a pool]).
    (void)cudaGetLastError();
    if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
    if (cudaMemPoolTrimTo(pool, 0) != cudaSuccess) (void)cudaGetLastError();
    made.status = cudaMallocFromPoolAsync(&made.pointer, bytes, pool, stream);
  }
  return made;
}

GPUSEL_API void DevicePools::free(void* pointer, int device, StreamUses* uses) noexcept {
  if (uses != nullptr) uses->order_before_legacy_stream();
  if (device < kMaxPooledDevices && modes_[device].load(std::memory_order_acquire) == pooled) {
    const cudaError_t status = cudaFreeAsync(pointer, cudaStreamLegacy);
    if (status == cudaSuccess) return;
    (void)cudaGetLastError();
    if (status == cudaErrorCudartUnloading) return;  // Note [Failed switches at exit]: the process takes it
  }
  if (cudaFree(pointer) != cudaSuccess) (void)cudaGetLastError();  // also frees pool memory, waiting first
}

GPUSEL_API void DevicePools::allow_peer(int accessor, int owner) noexcept {
  if (accessor < 0 || accessor >= kMaxPooledDevices || owner < 0 || owner >= kMaxPooledDevices) return;
  const std::lock_guard<ForkSafeMutex> lock(mutex_);
  accessors_[owner] |= std::uint64_t{1} << accessor;
  if (pools_[owner] == nullptr) return;  // granted when it is made
  const cudaMemAccessDesc access{{cudaMemLocationTypeDevice, accessor}, cudaMemAccessFlagsProtReadWrite};
  if (cudaMemPoolSetAccess(pools_[owner], &access, 1) != cudaSuccess) (void)cudaGetLastError();
}

GPUSEL_API void DevicePools::release() noexcept {
  const std::lock_guard<ForkSafeMutex> lock(mutex_);
  for (int device = 0; device < kMaxPooledDevices; ++device) {
    if (cudaMemPool_t pool = pools_[device]) {
      release_on_device(device, "gpusel releasing a device's memory pool", [pool]() noexcept {
        if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();  // the queued frees run
        if (cudaMemPoolTrimTo(pool, 0) != cudaSuccess) (void)cudaGetLastError();
        if (cudaMemPoolDestroy(pool) != cudaSuccess) (void)cudaGetLastError();
      });
      pools_[device] = nullptr;
    }
    modes_[device].store(undecided, std::memory_order_release);
    accessors_[device] = 0;
  }
}

}  // namespace gpusel::detail

#endif  // GPUSEL_DEFINITIONS
