// The state gpusel keeps for the whole process, in one object that every copy
// of gpusel in the process finds, whichever shared object it was built into:
// Note [One state per process]. docs/state.md says which state is whose.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <type_traits>

namespace gpusel {
class Error;
}  // namespace gpusel

// Note [One state per process]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// gpusel is header-only, so every shared object that uses it carries its own
// copy, usually built with -fvisibility=hidden, and state in each copy's
// statics would split. So everything gpusel keeps for the process or a CUDA
// runtime lives in one object, ProcessState, whose namespace has default
// visibility whatever the flags (docs/state.md: which state is whose, what each
// compiler guarantees). Copies share it only where their layouts agree (Note
// [Layout signatures]); the namespace's name carries a version, bumped when a
// field's meaning changes, and the standard library's ABI. The state is
// constant-initialized and never destroyed, so usable from any static
// constructor or destructor; it holds only atomics, C types and pointers to
// what lives until the process exits (as the shared objects are assumed to).

// The namespace of the state: its version, and the standard library's ABI
// (libc++, libstdc++'s debug mode, its old string ABI) where it is not the default.
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
// -fvisibility-inlines-hidden (Note [One state per process]): g++ binds these
// symbols STB_GNU_UNIQUE, one per process even across RTLD_LOCAL; clang binds
// them weak, one among the objects in the global scope.
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

// An object the state holds, and the layout signature of its type
// (Note [Layout signatures]); both null until the object is made.
struct Slot {
  std::atomic<void*> object{nullptr};
  std::atomic<std::uint64_t> layout{0};
};

// What each slot of Runtime::objects holds; the others are free.
enum class RuntimeObject : int {
  peer_access = 0,
  staging_pool = 1,
  copy_engine = 2,
  device_pools = 3,
  device_facts = 4,
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
  Slot objects[kObjectSlots]{};
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
  // The loaded NVML libraries, newest first (machine/detail/system/nvml.hpp), published with
  // a compare-exchange and never removed: no lock is held across dlopen and
  // nvmlInit (Note [Loading NVML without a lock]).
  // The slot's object is the newest nvml::Library.
  Slot nvml_libraries{};
  // Taken to add a runtime and to fill an object slot. A pthread mutex, not
  // std::mutex: its C initializer and layout are the same for every copy,
  // whatever standard library it was built with.
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  // runtimes[0, runtime_count) are in use, in the order the runtimes were first seen.
  std::atomic<int> runtime_count{0};
  Runtime runtimes[kMaxRuntimes]{};
  // The process's objects, by ProcessObject.
  Slot objects[kObjectSlots]{};
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
                  kPlainAtomic<DriverEntryPoints::DeviceGet> && kPlainAtomic<std::uint64_t>,
              "std::atomic<T> has T's layout (Note [One state per process])");

// Note [Layout signatures]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Copies of gpusel may share the state only where they agree on its layout,
// and a hand-bumped version is forgotten: a record grew, the version did not,
// and a copy read past the end of another copy's record. So every layout the
// state shares carries a signature computed at compile time from sizes,
// alignments and field offsets. The state's own records sign the symbol that
// holds it (process_state_of<kStateLayout>: another layout is another object),
// and an object in a Slot is stored with its type's signature, which a copy
// checks when it finds the object: one that finds another layout's object
// makes its own and keeps it to itself. The version in the namespace's name
// stays for what sizes cannot tell (a field's meaning, the standard library).
constexpr std::uint64_t layout_signature(std::initializer_list<std::size_t> figures) noexcept {
  std::uint64_t hash = 14695981039346656037ULL;  // FNV-1a
  for (const std::size_t figure : figures) hash = (hash ^ figure) * 1099511628211ULL;
  return hash;
}

// The signature of T: its size and alignment, and `fields`, the offsets of
// its fields where T is standard layout.
template <class T>
constexpr std::uint64_t record_layout(std::initializer_list<std::size_t> fields = {}) noexcept {
  return layout_signature({sizeof(T), alignof(T), static_cast<std::size_t>(layout_signature(fields))});
}

inline constexpr std::uint64_t kStateLayout = layout_signature({
    static_cast<std::size_t>(record_layout<Slot>({offsetof(Slot, object), offsetof(Slot, layout)})),
    static_cast<std::size_t>(record_layout<DriverEntryPoints>({offsetof(DriverEntryPoints, device_get),
                                                               offsetof(DriverEntryPoints, primary_context_get_state),
                                                               offsetof(DriverEntryPoints, lookup)})),
    static_cast<std::size_t>(
        record_layout<ThreadDevice>({offsetof(ThreadDevice, deferred_device), offsetof(ThreadDevice, runtime_device),
                                     offsetof(ThreadDevice, switches), kMaxRuntimes})),
    static_cast<std::size_t>(record_layout<Runtime>({offsetof(Runtime, identity), offsetof(Runtime, objects)})),
    static_cast<std::size_t>(record_layout<ProcessState>(
        {offsetof(ProcessState, default_device), offsetof(ProcessState, restore_error_handler),
         offsetof(ProcessState, restore_error_printed), offsetof(ProcessState, driver),
         offsetof(ProcessState, nvml_libraries), offsetof(ProcessState, mutex), offsetof(ProcessState, runtime_count),
         offsetof(ProcessState, runtimes), offsetof(ProcessState, objects), offsetof(ProcessState, thread_devices)})),
});

// The state of the copies whose records have the layout `Layout`.
template <std::uint64_t Layout>
ProcessState& process_state_of() noexcept {
  static ProcessState state;
  return state;
}

inline ProcessState& process_state() noexcept { return process_state_of<kStateLayout>(); }

}  // namespace GPUSEL_DETAIL_STATE
#pragma GCC visibility pop

using GPUSEL_DETAIL_STATE::DriverEntryPoints;
using GPUSEL_DETAIL_STATE::kDefaultIsCpu;
using GPUSEL_DETAIL_STATE::kDefaultIsCurrentCuda;
using GPUSEL_DETAIL_STATE::kMaxRuntimes;
using GPUSEL_DETAIL_STATE::kObjectSlots;
using GPUSEL_DETAIL_STATE::process_state;
using GPUSEL_DETAIL_STATE::ProcessObject;
using GPUSEL_DETAIL_STATE::ProcessState;
using GPUSEL_DETAIL_STATE::record_layout;
using GPUSEL_DETAIL_STATE::RestoreErrorHandler;
using GPUSEL_DETAIL_STATE::Runtime;
using GPUSEL_DETAIL_STATE::RuntimeObject;
using GPUSEL_DETAIL_STATE::Slot;
using GPUSEL_DETAIL_STATE::ThreadDevice;

// What must stay one per shared object: a cache of what this object's code
// found, which another object (calling another runtime, or another layout)
// must not share, also in a build with default visibility.
#define GPUSEL_DETAIL_PER_OBJECT __attribute__((visibility("hidden")))

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

// The object in `slot` if it has the layout `layout`, else null.
inline void* find_object(const Slot& slot, std::uint64_t layout) noexcept {
  void* object = slot.object.load(std::memory_order_acquire);
  return object != nullptr && slot.layout.load(std::memory_order_relaxed) == layout ? object : nullptr;
}

// The object in `slot`, made by `make()` (noexcept, returns a void* to it,
// called under the state's mutex) if the slot is empty. Every copy of gpusel
// whose type has the layout `layout` gets the one object; a copy of another
// layout gets one `make()` made for it alone (Note [Layout signatures]).
template <typename Make>
void* shared_object(Slot& slot, std::uint64_t layout, Make&& make) noexcept {
  if (void* object = find_object(slot, layout)) return object;
  const StateLock lock(process_state().mutex);
  if (void* object = slot.object.load(std::memory_order_relaxed)) {
    if (slot.layout.load(std::memory_order_relaxed) == layout) return object;
    return make();  // another layout's object: this copy's own
  }
  void* object = make();
  slot.layout.store(layout, std::memory_order_relaxed);
  slot.object.store(object, std::memory_order_release);
  return object;
}

// The process's object of type T in `slot`, shared by every copy of gpusel
// whose T has this layout: made the first time with new (in this copy's own
// storage when there is no memory for it) and set up by `init(T&)` (noexcept,
// under the state's mutex). It is never destroyed: at exit another copy's code
// may still use it.
template <typename T, typename Init>
T& process_object(ProcessObject slot, Init&& init) noexcept {
  return *static_cast<T*>(
      shared_object(process_state().objects[static_cast<int>(slot)], record_layout<T>(), [&]() noexcept -> void* {
        T* made = new (std::nothrow) T;
        if (made == nullptr) {
          static T own;
          made = &own;
        }
        init(*made);
        return made;
      }));
}

}  // namespace gpusel::detail
