// The definitions of gpusel/detail/data/memory/memory.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/data/memory/memory.hpp"

#include <cstdlib>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "gpusel/current_device.hpp"
#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/forked_child.hpp"
#include "gpusel/detail/data/memory/device_pool.hpp"
#include "gpusel/detail/data/memory/host_block_cache.hpp"
#include "gpusel/guard.hpp"

namespace gpusel::detail {

static_assert(kHugePageBytes == kHostBlockAlignment && kHugePageWorthwhileBytes == kHostBlockCacheMinBytes,
              "the host block cache keeps exactly the large, huge-page-aligned blocks");

// What cudaMemGetInfo says of `device`, for out-of-memory errors; "" when it cannot say.
inline std::string describe_free_memory(int device) {
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return "cuda:" + std::to_string(device) + " has " + std::to_string(free_bytes >> 20) + " MiB free of " +
         std::to_string(total_bytes >> 20) + " MiB";
}

inline void* allocate_pageable(std::size_t bytes, ErrorContext what) {
  const bool large = bytes >= kHugePageWorthwhileBytes;
  const std::size_t alignment = large ? kHugePageBytes : kHostAlignment;
  std::size_t rounded = 0;  // aligned_alloc wants a multiple of the alignment
  const bool representable = round_up(bytes, alignment, rounded);
  HostBlocks* const blocks = large ? &HostBlocks::instance() : nullptr;
  if (blocks != nullptr) {
    blocks->check_environment();
    if (representable)
      if (void* reused = blocks->take(rounded)) return reused;  // Note [The host block cache]
  }
  void* pointer = representable ? std::aligned_alloc(alignment, rounded) : nullptr;
  if (pointer == nullptr && representable && blocks != nullptr) {
    blocks->release_cached();  // what the cache keeps must not make an allocation fail
    pointer = std::aligned_alloc(alignment, rounded);
  }
  if (pointer == nullptr) {
    throw OutOfMemory(static_cast<int>(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation",
                      what() + " on cpu: out of host memory (" + std::to_string(bytes) + " bytes)");
  }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (large) (void)madvise(pointer, rounded, MADV_HUGEPAGE);  // advice; see Note [Fresh host memory]
#endif
  if (blocks != nullptr) blocks->add_fresh(pointer, rounded);
  return pointer;
}

// Note [Which device pins host memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cudaMallocHost works in the calling thread's current context, device 0's on
// a thread that never chose a device, and creates that primary context if it
// has none: a program that only uses cuda:1 would pay for cuda:0 the first
// time a worker thread pins memory. Pinned memory is usable from every
// context (unified addressing), so gpusel pins under a device that already has
// its context: the device the copy involves, if any (it holds memory); else the
// current device if it has its context (or the driver cannot say); else the
// lowest device that has one; else the current device, the one the program
// would use first. The switch is a guard's, so it creates nothing and the
// thread's device is restored (Note [Restoring a device without creating its
// context]).

// The device to pin host memory under (Note [Which device pins host memory]);
// `involved` is the device the copy involves (the source of pin_memory() or of
// to(cpu(), stream) from a GPU), or -1. Returns -1 when the runtime cannot say
// which device is current (cudaMallocHost will then fail and say why). The copy
// engine pins its staging chunks inside a guard on the copy's GPU
// (detail/data/engine/staged_copy.hpp): the device the copy involves.
inline int pinning_device(int involved) noexcept {
  if (involved >= 0) return involved;
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  if (primary_context_state(current) != PrimaryContextState::Inactive) return current;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return current;
  }
  for (int device = 0; device < count; ++device)
    if (device != current && primary_context_state(device) == PrimaryContextState::Active) return device;
  return current;
}

// `bytes` of pinned host memory, pinned under a device that already has its
// context (Note [Which device pins host memory]); `involved` is the device the
// copy involves, or -1. Throws OutOfMemory when pinned memory ran out.
inline void* allocate_pinned_for(std::size_t bytes, int involved, ErrorContext what) {
  if (forked_after_cuda()) throw_forked_after_cuda(what().c_str());  // Note [Caches across fork()]
  enter_cuda_work("gpusel::Buffer");
  OptionalDeviceGuard guard;
  const int device = pinning_device(involved);
  if (device >= 0) guard.set_device(device);
  void* pointer = nullptr;
  const cudaError_t status = cudaMallocHost(&pointer, bytes);
  if (status != cudaSuccess) {
    throw_allocation_error(status, cuda_error(status, what() + " in pinned host memory: cudaMallocHost",
                                              std::to_string(bytes) + " bytes", describe_visible_devices()));
  }
  return pointer;
}

// `bytes` on `device` from its memory pool (Note [Device memory from a pool],
// detail/data/memory/device_pool.hpp), ordered on `stream`.
inline void* allocate_device(std::size_t bytes, int device, ErrorContext what, cudaStream_t stream) {
  if (forked_after_cuda()) throw_forked_after_cuda(what().c_str());
  enter_cuda_work("gpusel::Buffer");
  DeviceGuard guard(device);
  const DeviceAllocation made = DevicePools::instance().allocate(bytes, device, stream);
  if (made.status != cudaSuccess) {
    const std::string context =
        made.status == cudaErrorMemoryAllocation ? describe_free_memory(device) : describe_visible_devices();
    if (!made.allocating) throw cuda_error(made.status, what() + ": " + made.call, cuda(device), context);
    throw_allocation_error(made.status, cuda_error(made.status, what() + ": " + made.call, cuda(device), context));
  }
  return made.pointer;
}

GPUSEL_API void* allocate_memory(std::size_t bytes, const MemoryPlace& place, ErrorContext what, int involved,
                                 cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  switch (place.kind) {
    case MemoryKind::pageable_host:
      return allocate_pageable(bytes, what);
    case MemoryKind::pinned_host:
      return allocate_pinned_for(bytes, involved, what);
    case MemoryKind::device:
      break;
  }
  return allocate_device(bytes, place.device, what, stream);
}

GPUSEL_API void free_memory(void* pointer, const MemoryPlace& place, StreamUses* uses) noexcept {
  if (pointer == nullptr) return;
  switch (place.kind) {
    case MemoryKind::pageable_host:
      if (HostBlocks* blocks = HostBlocks::find(); blocks == nullptr || !blocks->give_back(pointer)) std::free(pointer);
      break;
    case MemoryKind::pinned_host:
      if (cudaFreeHost(pointer) != cudaSuccess) (void)cudaGetLastError();
      break;
    case MemoryKind::device:
      release_on_device(place.device, "gpusel::Buffer freeing its device memory",
                        [&]() noexcept { DevicePools::instance().free(pointer, place.device, uses); });
      break;
  }
}

}  // namespace gpusel::detail
