// The definitions of gpusel/detail/data/memory/device_pool.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/data/memory/device_pool.hpp"

#include <cstdlib>
#include <string>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/forgetting_object.hpp"
#include "gpusel/detail/cuda/runtime_state.hpp"
#include "gpusel/detail/data/memory/stream_uses.hpp"
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
  for (int accessor = 0; accessor < kMaxPooledDevices; ++accessor) {  // peer pairs enabled before the pool
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
    // Asked once per device and runtime. Some virtualized GPUs and WSL's older
    // drivers have no pools: they get cudaMalloc and cudaFree.
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
