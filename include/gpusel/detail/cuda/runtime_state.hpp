// The state gpusel keeps for the CUDA runtime the calling code links: its
// entry in the process state's runtime table, its objects (the staging pool,
// the peer-access table) and the calling thread's record of its device there.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <new>

#include "gpusel/detail/core/process_state.hpp"

namespace gpusel::detail {

// Note [One state per runtime]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A CUDA runtime keeps its own current device per thread, its own contexts'
// view and its own pinned allocations. Shared objects that link libcudart.so
// call one runtime; shared objects that each link the static runtime
// (libcudart_static.a, nvcc's default) carry one each, and on one thread the
// two can be on different devices. So what gpusel keeps about a runtime is
// kept per runtime: a deferred restore is a statement about one runtime's
// current device, a staging chunk was pinned by one runtime, peer access was
// enabled in one runtime's contexts.
//
// A runtime is known by the address of its cudaGetDevice as the calling code
// sees it: one libcudart.so gives every object the same address, a static
// runtime inside each object gives each its own. The process state
// (Note [One state per process]) has a table of up to kMaxRuntimes runtimes;
// each entry holds that runtime's objects, and the state's thread_devices()
// holds, per thread, one record per entry. A shared object looks its entry up once (the
// first time it needs it) and keeps what it found in per-object caches, so the
// guard's fast path stays one cudaGetDevice and one thread-local read. A ninth
// runtime in one process gets an entry of its own in each shared object (its
// state is then not shared, which for a static runtime changes nothing).

// This code's runtime, as an address (Note [One state per runtime]).
inline const void* runtime_identity() noexcept { return reinterpret_cast<const void*>(&cudaGetDevice); }

// A runtime's entry, and its index in the table (-1 for an entry outside it).
struct RuntimeEntry {
  Runtime* runtime = nullptr;
  int index = -1;
};

// The entry of the runtime `identity`, added if new; {nullptr, -1} when the table is full.
inline RuntimeEntry find_runtime(const void* identity) noexcept {
  ProcessState& process = process_state();
  const StateLock lock(process.mutex);
  const int count = process.runtime_count.load(std::memory_order_relaxed);
  for (int i = 0; i < count; ++i)
    if (process.runtimes[i].identity.load(std::memory_order_relaxed) == identity) return {&process.runtimes[i], i};
  if (count == kMaxRuntimes) return {};
  process.runtimes[count].identity.store(identity, std::memory_order_relaxed);
  process.runtime_count.store(count + 1, std::memory_order_release);
  return {&process.runtimes[count], count};
}

// The entry of the runtime this shared object calls, looked up once per object.
GPUSEL_DETAIL_PER_OBJECT inline RuntimeEntry this_runtime() noexcept {
  static const RuntimeEntry entry = [] {
    const RuntimeEntry found = find_runtime(runtime_identity());
    if (found.runtime != nullptr) return found;
    static Runtime own;  // the table is full: this object keeps its own
    return RuntimeEntry{&own, -1};
  }();
  return entry;
}

// The calling thread's record of its device in this code's runtime, once
// looked up a thread-local read (Note [Restoring a device without creating its
// context], detail/cuda/device_switch.hpp).
GPUSEL_DETAIL_PER_OBJECT inline ThreadDevice& find_thread_device() noexcept {
  const int index = this_runtime().index;
  if (index >= 0) return process_state().thread_devices()[index];
  static thread_local ThreadDevice own;  // a runtime outside the table
  return own;
}

GPUSEL_DETAIL_PER_OBJECT inline ThreadDevice& thread_device() noexcept {
  static thread_local ThreadDevice* cached = nullptr;
  if (cached == nullptr) cached = &find_thread_device();
  return *cached;
}

// The object of type T in `slot` of this code's runtime, shared by every copy of
// gpusel that calls the runtime; `construct(storage)` makes one in `storage`
// (with placement new) the first time. The object lives until the process
// exits: the shared object that made it destroys it then, as a function-local
// static would be. Never fails: without memory for it, the object is made in
// this shared object's own storage.
template <typename T, typename Construct>
GPUSEL_DETAIL_PER_OBJECT T& runtime_object(RuntimeObject slot, Construct construct) noexcept {
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "operator new aligns the object");
  static T* made = nullptr;  // what this shared object made, to destroy at exit
  static T* const object = static_cast<T*>(shared_object(this_runtime().runtime->objects[static_cast<int>(slot)],
                                                         record_layout<T>(), [&]() noexcept -> void* {
                                                           void* storage = ::operator new(sizeof(T), std::nothrow);
                                                           if (storage == nullptr) {
                                                             alignas(T) static unsigned char own[sizeof(T)];
                                                             storage = own;
                                                           }
                                                           made = construct(storage);
                                                           (void)std::atexit([] { made->~T(); });
                                                           return made;
                                                         }));
  return *object;
}

}  // namespace gpusel::detail
