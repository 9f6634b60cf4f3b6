// The state gpusel keeps for the whole process, in one object that every copy
// of gpusel in the process finds, whichever shared object it was built into:
// Note [One state per process]. docs/state.md says which state is whose.
#pragma once

#include <pthread.h>

#include <atomic>
#include <type_traits>

namespace gpusel {
class Error;
}  // namespace gpusel

// Note [One state per process]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// gpusel is header-only, so every shared object that uses it (a pybind11 or
// PyTorch extension, a plugin) carries its own copy of the code. State kept in
// an ordinary function-local static of an inline function is then one per
// shared object when they are built with -fvisibility=hidden, as extensions
// are: library A's set_default_device(cuda(1)) would leave library B on cpu.
// So everything gpusel keeps for the process or for a CUDA runtime lives in
// one object, ProcessState, reached through process_state(), whose namespace
// has default visibility whatever the build's flags:
//  - g++ gives the object STB_GNU_UNIQUE binding: the dynamic linker
//    resolves every copy in the process to the first one, also across objects
//    loaded with dlopen(RTLD_LOCAL), as Python loads extensions. One state per
//    process. (The per-thread records are thread-locals reached through the
//    object, so they are always those of the copy whose object is used.)
//  - clang gives it weak binding: the copies in the global scope (the
//    program and what it links, objects loaded with RTLD_GLOBAL) resolve to
//    one, but an object loaded with RTLD_LOCAL keeps its own. There the state
//    is one per such object: load it with RTLD_GLOBAL (Python:
//    sys.setdlopenflags(os.RTLD_NOW | os.RTLD_GLOBAL) before the import) to
//    share, or accept separate state (each object then has its own default
//    device and caches, and its own record of deferred restores).
//  - a program's own symbols reach the dynamic linker only when exported: a
//    program that uses gpusel itself and loads shared objects that use it
//    links with -rdynamic (CMake: ENABLE_EXPORTS), else its copy stays apart
//    (with g++ as well). Exported, it is in the global scope, and every
//    object, a clang one loaded with RTLD_LOCAL included, resolves to it.
//
// What is whose:
//  - per process: the default device, the restore-error handler (and whether
//    the first failed restore was printed), the driver entry points (one
//    driver, libcuda, per process), the loaded NVML libraries, the copy
//    engine's options, the fork record, the prefault decision and the cache
//    of large host blocks; later also the GPU leases (`objects`, free slots).
//  - per CUDA runtime (Note [One state per runtime], detail/cuda/runtime_state.hpp):
//    the staging pool, the peer-access table, the copy engine's cache, the
//    device memory pools (detail/data/device_pool.hpp), and per thread the deferred
//    restore (ThreadDevice); later also cached streams (free slots of
//    Runtime::objects). Two shared objects that link libcudart.so call
//    one runtime and share these; two that each link the static runtime have
//    two runtimes, which keep two current devices per thread, so each has its
//    own.
//
// The layout is versioned. Copies of different gpusel versions in one process
// share this object, so its layout is the namespace's version (state_v1): the
// structs below, the meaning of their fields and slots, and the types they
// point to (nvml::Library, StagingPool, PeerAccess, and the Error a restore
// handler receives). A change to any of them — a field added, removed, moved
// or retyped; a slot given another type — bumps the version (state_v2), so
// that two gpusel versions with different layouts keep separate states instead
// of corrupting each other. Giving a free slot its first type needs no bump:
// older copies never read it. Since the pointed-to types hold standard library
// types (std::mutex, std::vector, std::string), the standard library's ABI is
// part of the name as well: libc++, libstdc++'s debug mode and its old string
// ABI each get their own state.
//
// The state is constant-initialized and never destroyed (no constructor runs,
// no destructor is registered: it is usable from any static constructor or
// destructor), and holds only atomics, C types and pointers. Objects it points
// to are created on first use and live until the process exits; gpusel assumes
// the shared objects that use it stay loaded until then, as Python's
// extensions do (glibc keeps an object with STB_GNU_UNIQUE symbols loaded).

#if defined(_LIBCPP_VERSION)
#define GPUSEL_DETAIL_STATE state_v1_libcxx
#elif defined(_GLIBCXX_DEBUG)
#define GPUSEL_DETAIL_STATE state_v1_libstdcxx_debug
#elif defined(__GLIBCXX__) && !_GLIBCXX_USE_CXX11_ABI
#define GPUSEL_DETAIL_STATE state_v1_libstdcxx_cow_string
#else
#define GPUSEL_DETAIL_STATE state_v1
#endif

namespace gpusel::detail {

namespace nvml {
struct Library;
}  // namespace nvml

// Default visibility whatever the build's -fvisibility and
// -fvisibility-inlines-hidden (Note [One state per process]).
#pragma GCC visibility push(default)
namespace GPUSEL_DETAIL_STATE {

// The default device (default_device.hpp): kDefaultIsCpu, kDefaultIsCurrentCuda,
// or a cuda index >= 0.
inline constexpr int kDefaultIsCpu = -2;
inline constexpr int kDefaultIsCurrentCuda = -1;

// See gpusel::set_restore_error_handler (guard.hpp).
using RestoreErrorHandler = void (*)(const Error& error);

// Two driver functions, looked up through the runtime (Note [Reaching the
// driver through the runtime], detail/cuda/primary_context.hpp). The driver
// API types are spelled without cuda.h: CUresult is an int-sized enum whose
// CUDA_SUCCESS is 0, CUdevice an int.
struct DriverEntryPoints {
  using DeviceGet = int (*)(int* device, int ordinal);
  using PrimaryContextGetState = int (*)(int device, unsigned int* flags, int* active);
  enum Lookup : int { NotYet = 0, Found = 1, Absent = 2 };

  std::atomic<DeviceGet> device_get{nullptr};
  std::atomic<PrimaryContextGetState> primary_context_get_state{nullptr};
  std::atomic<int> lookup{NotYet};
};

// What gpusel knows about a thread's device in one runtime beyond what
// cudaGetDevice says (Note [Restoring a device without creating its context],
// detail/cuda/device_switch.hpp).
struct ThreadDevice {
  // The device gpusel reports while a restore is deferred, else -1.
  int deferred_device = -1;
  // The device the runtime was left on when the restore was deferred.
  int runtime_device = -1;
  // Counts gpusel's switches of this thread's device, so a guard that made no
  // switch can tell at exit, without a CUDA call, that nothing switched inside it.
  unsigned switches = 0;
};

// How many CUDA runtimes the table tells apart, and how many objects each keeps.
inline constexpr int kMaxRuntimes = 8;
inline constexpr int kObjectSlots = 8;

// What each slot of Runtime::objects holds; the others are free. Slot 0 held
// the staging pool of fixed 4 MiB chunks: copies of older gpusel versions
// still use it, so the pool of tunable chunks took a free slot instead of
// changing slot 0's type (which would have meant a new layout version).
enum class RuntimeObject : int {
  staging_pool_fixed_chunks = 0,
  peer_access = 1,
  staging_pool = 2,
  copy_engine = 3,
  device_pools = 4,
};

// What each slot of ProcessState::objects holds; the others are free (slot 0
// is meant for the GPU leases). Host memory is the process's, whatever
// runtime copies into it: the prefault decision and the host block cache
// live here, not per runtime.
enum class ProcessObject : int { copy_engine_options = 1, fork_state = 2, host_prefault = 3, host_blocks = 4 };

// One CUDA runtime of the process (Note [One state per runtime]).
struct Runtime {
  // Which runtime: the address of its cudaGetDevice. Null while the entry is free.
  std::atomic<const void*> identity{nullptr};
  // The runtime's objects, by RuntimeObject; null until first used.
  std::atomic<void*> objects[kObjectSlots]{};
};

// The calling thread's records, one per runtime, indexed like
// ProcessState::runtimes. Every copy reaches them through the state
// (ProcessState::thread_devices), so that they are the records of the copy
// whose state the process uses, however the copies were resolved.
inline ThreadDevice* thread_devices() noexcept {
  static thread_local ThreadDevice devices[kMaxRuntimes];
  return devices;
}

struct ProcessState {
  std::atomic<int> default_device{kDefaultIsCpu};
  std::atomic<RestoreErrorHandler> restore_error_handler{nullptr};
  std::atomic<bool> restore_error_printed{false};
  DriverEntryPoints driver{};
  // The loaded NVML libraries, newest first (detail/machine/nvml.hpp), published with
  // a compare-exchange and never removed: no lock is held across dlopen and
  // nvmlInit (Note [Loading NVML without a lock]).
  std::atomic<const nvml::Library*> nvml_libraries{nullptr};
  // Taken to add a runtime and to fill an object slot. A pthread mutex, not
  // std::mutex: its C initializer and layout are the same for every copy,
  // whatever standard library it was built with.
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  // runtimes[0, runtime_count) are in use, in the order the runtimes were first seen.
  std::atomic<int> runtime_count{0};
  Runtime runtimes[kMaxRuntimes]{};
  // The process's objects (GPU leases, later); all free.
  std::atomic<void*> objects[kObjectSlots]{};
  // The calling thread's records: thread_devices() of the copy that owns this state.
  ThreadDevice* (*thread_devices)() noexcept = &GPUSEL_DETAIL_STATE::thread_devices;
};

static_assert(std::is_trivially_destructible_v<ProcessState> && std::is_trivially_destructible_v<ThreadDevice>,
              "the state is never destroyed (Note [One state per process])");

// The state's atomics have their value's layout and are lock-free, so the
// state holds no lock of the standard library's and its layout is that of
// plain ints and pointers (the layout version names it).
template <class T>
inline constexpr bool kPlainAtomic = sizeof(std::atomic<T>) == sizeof(T) &&
                                     alignof(std::atomic<T>) == alignof(T) && std::atomic<T>::is_always_lock_free;
static_assert(kPlainAtomic<int> && kPlainAtomic<bool> && kPlainAtomic<unsigned> && kPlainAtomic<void*> &&
                  kPlainAtomic<const void*> && kPlainAtomic<RestoreErrorHandler> &&
                  kPlainAtomic<DriverEntryPoints::DeviceGet>,
              "std::atomic<T> has T's layout (Note [One state per process])");

inline ProcessState& process_state() noexcept {
  static ProcessState state;
  return state;
}

}  // namespace GPUSEL_DETAIL_STATE
#pragma GCC visibility pop

using GPUSEL_DETAIL_STATE::DriverEntryPoints;
using GPUSEL_DETAIL_STATE::kDefaultIsCpu;
using GPUSEL_DETAIL_STATE::kDefaultIsCurrentCuda;
using GPUSEL_DETAIL_STATE::kMaxRuntimes;
using GPUSEL_DETAIL_STATE::process_state;
using GPUSEL_DETAIL_STATE::ProcessObject;
using GPUSEL_DETAIL_STATE::ProcessState;
using GPUSEL_DETAIL_STATE::RestoreErrorHandler;
using GPUSEL_DETAIL_STATE::Runtime;
using GPUSEL_DETAIL_STATE::RuntimeObject;
using GPUSEL_DETAIL_STATE::ThreadDevice;

// Holds a pthread mutex of the state for a scope. Locking a default mutex
// fails only on misuse, which the state never makes.
class StateLock {
 public:
  explicit StateLock(pthread_mutex_t& mutex) noexcept : mutex_(mutex) { (void)pthread_mutex_lock(&mutex_); }
  ~StateLock() { (void)pthread_mutex_unlock(&mutex_); }
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

 private:
  pthread_mutex_t& mutex_;
};

// The object in `slot`, made by `make()` (noexcept, returns a void* to it) if
// the slot is empty. Every copy of gpusel that asks gets the one object.
template <typename Make>
void* shared_object(std::atomic<void*>& slot, Make&& make) noexcept {
  if (void* object = slot.load(std::memory_order_acquire)) return object;
  const StateLock lock(process_state().mutex);
  if (void* object = slot.load(std::memory_order_relaxed)) return object;
  void* object = make();
  slot.store(object, std::memory_order_release);
  return object;
}

}  // namespace gpusel::detail
