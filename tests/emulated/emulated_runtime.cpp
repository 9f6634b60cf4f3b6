// An emulated CUDA runtime: the cudart functions gpusel calls, implemented in
// host memory so that guards, buffers and modules can be tested on machines
// without a GPU. Tests link it in place of libcudart; see emulated_runtime.hpp.
//
// Note [Where the emulation differs from the real runtime]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Faithful, because gpusel's correctness depends on it:
//  - each host thread has its own current device, 0 until it sets one;
//  - cudaGetDevice, cudaGetDeviceCount, cudaGetDeviceProperties,
//    cudaDeviceGetAttribute, cudaDeviceCanAccessPeer and cudaPointerGetAttributes
//    create no context; cudaSetDevice (as since CUDA 12) and every call that
//    allocates, copies, synchronizes or creates a stream or event creates the
//    primary context of the device it acts on, cudaFree(nullptr) included;
//  - a failing call sets the thread's last error (cudaGetLastError reads and
//    clears it, cudaPeekAtLastError only reads it), except that a runtime that
//    failed to initialize (no driver) returns that failure from every call,
//    cudaGetLastError included, for ever;
//  - device memory belongs to the device it was allocated on, and cudaFree and
//    cudaMemcpy find it there whatever device is current (unified addressing);
//  - asynchronous copies between pinned host memory and a device, and between
//    devices, are queued on their stream and happen only when something waits
//    for them: cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize,
//    cudaFree/cudaFreeHost (which synchronize the device), or a synchronous
//    cudaMemcpy, which waits for the blocking streams of the current device,
//    as the legacy default stream does. So code that reuses a pinned staging
//    buffer before its copy finished reads wrong bytes here, as on a GPU.
//    Asynchronous copies involving pageable host memory happen at once, as the
//    real runtime stages them before returning.
//  - the CUDA driver library is loaded by the first call that initializes the
//    runtime (every call but cudaRuntimeGetVersion and cudaDriverGetVersion), as
//    observed on the H200 (libcuda.so.1 is not loaded before the first runtime
//    call and is loaded after it), and not at all when there is no driver
//    (cudaErrorInsufficientDriver). cudaDriverGetVersion does not initialize
//    the runtime but loads and initializes the driver, as measured there. The library loaded is a stand-in whose
//    SONAME is libcuda.so.1 (tests/emulated/fake_libcuda.cpp), opened by path,
//    so dlopen("libcuda.so.1", RTLD_NOLOAD) answers as in a real process, and
//    its cuDeviceGetCount returns CUDA_ERROR_NOT_INITIALIZED until the runtime
//    has initialized (and for ever when that failed), as the driver's does
//    before cuInit and after a failed one; reset() unloads it,
//    as a new process would start without it. (The fake NVML loads it too,
//    without initializing it, as the real NVML loads the driver: see
//    tests/support/fake_nvml_machine.hpp.)
//  - process exit (Note [The runtime unloads at exit]): the teardown is
//    registered with atexit by the first call that initializes the runtime, as
//    the static runtime (libcudart_static.a, nvcc's default) registers its own;
//    once it has run, every call answers cudaErrorCudartUnloading. So a Buffer
//    or Stream with static storage that was made before the runtime started
//    (a global assigned in main) is destroyed after the teardown, and meets the
//    unloading runtime, as in a real process.
//  - the emulated machine has no NVML: unless GPUSEL_NVML_LIBRARY is already
//    set (a test pointing at tests/fake_nvml), the emulation sets it to "none"
//    when the program starts, so the machine that runs the tests cannot leak its
//    real GPUs into gpusel's NVML-based answers.
// Simplified:
//  - the devices are the visible devices: CUDA_VISIBLE_DEVICES and
//    CUDA_DEVICE_ORDER are not read (the parser is tested against the driver's
//    observed behaviour separately); a test sets the devices directly;
//  - memory is accounted per device against DeviceSpec::memory_bytes; a primary
//    context costs no device memory here (about 500 MiB on an H200);
//  - an event wait (cudaStreamWaitEvent, cudaEventSynchronize) runs everything
//    queued on the event's stream, not only what came before the record;
//  - cudaMemcpyBatchAsync checks a whole batch before queueing any of it, and
//    runs its copies last to first (Note [cudaMemcpyBatchAsync as emulated]);
//  - cudaMemcpyDefault infers directions from the emulation's own records, and a
//    copy whose declared direction disagrees with the pointers fails with
//    cudaErrorInvalidValue (the real runtime is sometimes more forgiving);
//  - cudaStreamDestroy runs the work still queued on the stream before it
//    returns, where the real runtime returns at once and finishes the work
//    later; operations_left_to_stream_destroy() counts such work so tests can
//    check that gpusel never reuses memory a destroyed stream still uses;
//  - there are no kernels, and no error ever becomes sticky;
//  - the runtime's own state is never destroyed (it lives on the heap), so it
//    outlives every static object; the real runtime's teardown destroys its
//    contexts and frees their memory, where the emulation keeps its records
//    (tests read them) and only answers cudaErrorCudartUnloading from then on;
//    begin_process_exit() runs the teardown early, within a test, and reset()
//    starts a process whose runtime is loaded again;
//  - memory pools (Note [The emulated memory pools]) keep freed blocks for
//    reuse and count them as used by the device until trimmed, as the real
//    stream-ordered allocator does; they differ from it as that Note says;
//  - cudaFree and cudaStreamDestroy accept memory and streams of any device
//    whatever device is current (as the real runtime does with unified
//    addressing, though for streams it does not promise it);
//  - built twice, as a static library (each shared object that links it gets
//    its own copy, hidden inside it, as with libcudart_static.a) and as a
//    shared library (gpusel_emulated_cudart_shared, as libcudart.so), for the
//    state test (tests/state). A static copy also emulates its own driver:
//    the driver functions one copy hands out answer about that copy's
//    contexts, where the runtimes of a real process all reach one libcuda.
//    And every copy reads the same environment and loads the same stand-in
//    libcuda.so.1.
#include "emulated_runtime.hpp"

#include <dlfcn.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

struct CUstream_st {
  int device = 0;
  bool blocking = true;  // cudaStreamDefault; cudaStreamNonBlocking streams do not wait for the legacy stream
  std::deque<std::function<void()>> pending;
};

struct CUevent_st {
  CUstream_st* recorded_on = nullptr;
};

// Note [The emulated memory pools]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A pool (cudaMemPoolCreate) holds memory of one device in blocks. Faithful:
//  - cudaMallocFromPoolAsync hands out a cached block (freed earlier, its free
//    already executed) at least as large as asked, else reserves a new one
//    from the device; before running out it releases the pool's cached
//    blocks and tries again; it creates the device's context;
//  - cudaFreeAsync queues the free on its stream: the block goes back to the
//    pool when the stream reaches it, and is cached, still reserved, so
//    cudaMemGetInfo counts it as used until it is trimmed (cudaMemPoolTrimTo)
//    or released at a synchronization (cudaStreamSynchronize,
//    cudaEventSynchronize, cudaDeviceSynchronize release what the pool caches
//    beyond its cudaMemPoolAttrReleaseThreshold, 0 by default);
//  - a free queued on the legacy default stream waits for the device's
//    blocking streams first, as the legacy stream does, so it runs after the
//    work queued there before it; a non-blocking stream is not waited for;
//  - memory freed while a copy into it is still queued is overwritten by that
//    copy when it runs, also after another allocation reused the block;
//  - cudaMemPoolDestroy with allocations outstanding returns at once, and the
//    pool goes away when the last of them is freed;
//  - cudaFree of pool memory synchronizes and returns the block to its pool.
// Simplified:
//  - one block per allocation (the real pool suballocates 2 MiB granules); a
//    block is reused once its free has run, or before, by an allocation on the
//    stream the free is queued on (stream order makes that safe, and the real
//    allocator does it too); the real allocator also follows event
//    dependencies between streams, which the emulation does not;
//  - cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported) says
//    DeviceSpec::memory_pools; there is no default pool per device
//    (cudaDeviceGetDefaultMemPool, cudaMallocAsync are not emulated);
//  - a peer copy whose source is pool memory counts as peer (peer_copies())
//    only when the pool granted the destination access (cudaMemPoolSetAccess),
//    else as staged; cudaMemPoolSetAccess for a device that cannot access the
//    pool's device fails with cudaErrorInvalidDevice;
//  - attributes: the release threshold (set and get), reserved and used memory
//    (get); the others answer cudaErrorInvalidValue.
struct CUmemPoolHandle_st {
  int device = 0;
  std::uint64_t release_threshold = 0;
  std::size_t reserved = 0;                           // bytes held from the device: in use, pending free and cached
  std::size_t used = 0;                               // bytes of blocks handed out whose free has not run
  std::map<std::uintptr_t, std::size_t> blocks;       // every block, by address: its size
  std::multimap<std::size_t, std::uintptr_t> cached;  // free blocks, by size
  std::set<int> accessors;                            // devices granted access besides its own
  struct PendingFree {
    CUstream_st* stream;
    std::uint64_t token;  // which free: a block reused before its free ran is freed again later
  };
  std::map<std::uintptr_t, PendingFree> pending;  // blocks whose cudaFreeAsync is queued, not yet run
  std::uint64_t frees = 0;
  bool destroyed = false;  // destroyed with allocations outstanding: goes when the last is freed
};

namespace gpusel_emulated {
namespace {

enum class MemoryKind { Device, PinnedHost };

struct Allocation {
  MemoryKind kind;
  int device;  // -1 for host memory
  std::size_t bytes;
  CUmemPoolHandle_st* pool = nullptr;  // the pool it came from, or null (cudaMalloc, host memory)
};

struct RegisteredRange {
  std::size_t bytes;
};

struct DeviceState {
  DeviceSpec spec;
  bool primary_context = false;
  std::size_t bytes_in_use = 0;
  std::set<int> peers_enabled;  // devices whose memory this one has mapped
  std::unique_ptr<CUstream_st> legacy_stream;
};

struct ArmedFailure {
  std::string function;
  int remaining_calls;  // fires when this reaches 1 on a call
  bool persistent;
  cudaError_t status;
};

// Note [The call log is bounded]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A benchmark makes millions of calls: a log of every one grew to 605 MB in
// 1.8 s of the emulated buffer benchmark. So the log keeps the last
// kCallLogCapacity calls, in order (a ring of pointers to the functions'
// names, which are string literals), and counts the ones it let go
// (dropped_calls()); calls() counts every call exactly, whatever the cap.
// Tests read short logs (a few calls after clear_calls()), far under the cap.
constexpr std::size_t kCallLogCapacity = std::size_t{1} << 16;  // 512 KiB of pointers

class CallLog {
 public:
  void add(const char* function) {
    if (ring_.size() < kCallLogCapacity) {
      ring_.push_back(function);
    } else {
      ring_[oldest_] = function;
      oldest_ = (oldest_ + 1) % kCallLogCapacity;
    }
    ++total_;
  }
  // Oldest first.
  std::vector<std::string> entries() const {
    std::vector<std::string> in_order;
    in_order.reserve(ring_.size());
    for (std::size_t i = 0; i < ring_.size(); ++i) in_order.emplace_back(ring_[(oldest_ + i) % ring_.size()]);
    return in_order;
  }
  std::uint64_t dropped() const { return total_ - ring_.size(); }
  void clear() {
    ring_.clear();
    oldest_ = 0;
    total_ = 0;
  }

 private:
  std::vector<const char*> ring_;
  std::size_t oldest_ = 0;  // where the oldest entry is, once the ring is full
  std::uint64_t total_ = 0;
};

struct State {
  std::mutex mutex;
  Config config;
  std::vector<DeviceState> devices;
  std::map<std::uintptr_t, Allocation> allocations;      // by start address
  std::map<std::uintptr_t, RegisteredRange> registered;  // cudaHostRegister'd ranges
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
  std::set<CUmemPoolHandle_st*> pools;  // live pools, destroyed ones with allocations outstanding included
  std::map<std::string, int> call_counts;
  CallLog call_log;  // Note [The call log is bounded]
  std::vector<ArmedFailure> failures;
  int peer_copies = 0;
  int staged_device_copies = 0;
  int operations_left_to_stream_destroy = 0;
  std::uint64_t generation = 1;
  void* libcuda = nullptr;  // the fake libcuda.so.1, loaded on initialization
  // Note [The runtime unloads at exit]
  bool teardown_registered = false;  // with atexit, once per process
  bool unloading = false;
  int calls_refused_while_unloading = 0;
};

// Note [The runtime unloads at exit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A process ends by running its atexit handlers and static destructors in
// reverse order of registration and construction. The static CUDA runtime
// registers its teardown when it initializes; a static object constructed
// before that (a global Buffer assigned in main) is destroyed after it, and
// every CUDA call it makes then answers cudaErrorCudartUnloading. The
// emulation does the same: the first initializing call registers
// `tear_down_at_exit`, which marks the runtime unloading. Its state lives on
// the heap and is never destroyed, so that a static destroyed after the
// teardown still reaches it (as a function-local static it would be destroyed
// before such an object, and the object's cudaFree would touch freed memory).
State& state() {
  static State* const instance = new State;  // never destroyed: see the Note
  return *instance;
}

void tear_down_at_exit() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.unloading = true;
}

// The emulated machine has no NVML unless a test names one (see the Note).
[[maybe_unused]] const bool nvml_hidden = setenv("GPUSEL_NVML_LIBRARY", "none", /*overwrite=*/0) == 0;

struct ThreadState {
  std::uint64_t generation = 0;
  int current_device = 0;
  cudaError_t last_error = cudaSuccess;
};

ThreadState& thread_state(State& s) {
  thread_local ThreadState thread;
  if (thread.generation != s.generation) thread = ThreadState{s.generation, 0, cudaSuccess};
  return thread;
}

std::string default_uuid(int index) {
  char text[64];
  std::snprintf(text, sizeof text, "GPU-%08x-0000-4000-8000-%012x", 0xe0000000u + static_cast<unsigned>(index),
                static_cast<unsigned>(index));
  return text;
}

std::string default_pci_bus_id(int index) {
  char text[32];
  std::snprintf(text, sizeof text, "00000000:%02X:00.0", 0x10 + index);
  return text;
}

// Calls `name` in the stand-in driver library (tests/emulated/fake_libcuda.cpp).
template <typename Function, typename... Arguments>
void fake_libcuda_call(void* library, const char* name, Arguments... arguments) {
  if (library == nullptr) return;
  if (auto function = reinterpret_cast<Function>(dlsym(library, name))) function(arguments...);
}

// What the runtime's first call does to the driver: loads libcuda.so.1 (unless
// there is none) and runs cuInit, which fails, leaving the driver uninitialized,
// when the runtime's initialization fails (measured on the H200: after
// CUDA_VISIBLE_DEVICES=1 on one GPU, cuDeviceGetCount still answers
// CUDA_ERROR_NOT_INITIALIZED).
void load_driver(State& s) {
  if (s.libcuda != nullptr || s.config.initialization_error == cudaErrorInsufficientDriver) return;
  s.libcuda = dlopen(GPUSEL_EMULATED_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  if (s.config.initialization_error == cudaSuccess)
    fake_libcuda_call<void (*)(int)>(s.libcuda, "gpusel_fake_libcuda_initialize",
                                     static_cast<int>(s.config.devices.size()));
}

// One emulated call: counts it, applies armed failures and the initialization
// error, and records the outcome as the thread's last error.
class Call {
 public:
  Call(const char* function, bool counts_as_initialization = true)
      : s_(state()), lock_(s_.mutex), thread_(thread_state(s_)) {
    ++s_.call_counts[function];
    s_.call_log.add(function);
    if (s_.unloading) {  // Note [The runtime unloads at exit]
      ++s_.calls_refused_while_unloading;
      armed_ = cudaErrorCudartUnloading;
      return;
    }
    if (counts_as_initialization && !s_.teardown_registered) {
      s_.teardown_registered = true;
      (void)std::atexit(&tear_down_at_exit);
    }
    // Every failure armed for this function counts this call, so failures armed
    // for calls 1 and 2 fail calls 1 and 2; where two fire at once, the first
    // armed gives the status.
    for (auto it = s_.failures.begin(); it != s_.failures.end();) {
      if (it->function != function) {
        ++it;
      } else if (it->remaining_calls > 1) {
        --it->remaining_calls;
        ++it;
      } else {
        if (armed_ == cudaSuccess) armed_ = it->status;
        it = it->persistent ? it + 1 : s_.failures.erase(it);
      }
    }
    if (counts_as_initialization) load_driver(s_);
    if (counts_as_initialization && s_.config.initialization_error != cudaSuccess && armed_ == cudaSuccess)
      armed_ = s_.config.initialization_error;
  }

  // The status an armed failure or a missing driver imposes, or cudaSuccess.
  cudaError_t imposed() const { return armed_; }

  cudaError_t finish(cudaError_t status) {
    if (status != cudaSuccess) thread_.last_error = status;
    return status;
  }

  State& s() { return s_; }
  ThreadState& thread() { return thread_; }

  bool valid_device(int device) const { return device >= 0 && device < static_cast<int>(s_.devices.size()); }

  void ensure_context(int device) { s_.devices[static_cast<std::size_t>(device)].primary_context = true; }

 private:
  State& s_;
  std::unique_lock<std::mutex> lock_;
  ThreadState& thread_;
  cudaError_t armed_ = cudaSuccess;
};

// Host memory for an emulated allocation of `bytes`, aligned to `alignment`
// (a power of two), or nullptr when there is none or the size rounded up to
// the alignment cannot be represented (it would wrap to almost nothing).
void* allocate_host(std::size_t bytes, std::size_t alignment) {
  if (bytes > SIZE_MAX - (alignment - 1)) return nullptr;
  return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}

// Whether [address, address + bytes) lies in [start, start + length), given
// address >= start, without computing an end that could wrap.
bool within(std::uintptr_t address, std::size_t bytes, std::uintptr_t start, std::size_t length) {
  return bytes <= length && address - start <= length - bytes;
}

// Finds the allocation that contains [pointer, pointer + bytes), if any.
const Allocation* find_allocation(State& s, const void* pointer, std::size_t bytes = 1) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  auto it = s.allocations.upper_bound(address);
  if (it == s.allocations.begin()) return nullptr;
  --it;
  if (!within(address, bytes, it->first, it->second.bytes)) return nullptr;
  return &it->second;
}

bool is_registered(State& s, const void* pointer, std::size_t bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  auto it = s.registered.upper_bound(address);
  if (it == s.registered.begin()) return false;
  --it;
  return within(address, bytes, it->first, it->second.bytes);
}

// Where one side of a copy lives.
struct Location {
  bool device = false;
  bool pinned = false;  // page-locked host memory: allowed to be copied asynchronously
  int device_index = -1;
};

Location locate(State& s, const void* pointer, std::size_t bytes) {
  if (const Allocation* a = find_allocation(s, pointer, bytes)) {
    if (a->kind == MemoryKind::Device) return {true, false, a->device};
    return {false, true, -1};
  }
  return {false, is_registered(s, pointer, bytes), -1};
}

bool direction_matches(cudaMemcpyKind kind, const Location& destination, const Location& source) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return !destination.device && !source.device;
    case cudaMemcpyHostToDevice:
      return destination.device && !source.device;
    case cudaMemcpyDeviceToHost:
      return !destination.device && source.device;
    case cudaMemcpyDeviceToDevice:
      return destination.device && source.device;
    case cudaMemcpyDefault:
      return true;
  }
  return false;
}

void drain(CUstream_st* stream) {
  while (!stream->pending.empty()) {
    auto operation = std::move(stream->pending.front());
    stream->pending.pop_front();
    operation();
  }
}

void drain_device(State& s, int device, bool only_blocking) {
  for (CUstream_st* stream : s.streams) {
    if (stream->device == device && (!only_blocking || stream->blocking)) drain(stream);
  }
  drain(s.devices[static_cast<std::size_t>(device)].legacy_stream.get());
}

void drain_everything(State& s) {
  for (CUstream_st* stream : s.streams) drain(stream);
  for (DeviceState& device : s.devices) drain(device.legacy_stream.get());
}

CUstream_st* resolve_stream(Call& call, cudaStream_t stream) {
  if (stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread) return stream;
  return call.s().devices[static_cast<std::size_t>(call.thread().current_device)].legacy_stream.get();
}

bool known_stream(State& s, cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread ||
         s.streams.count(stream) != 0;
}

// --- memory pools (Note [The emulated memory pools]) -------------------------
bool known_pool(State& s, cudaMemPool_t pool) {
  return pool != nullptr && s.pools.count(pool) != 0 && !pool->destroyed;
}

// Gives a block's memory back to the device.
void release_block(State& s, CUmemPoolHandle_st* pool, std::uintptr_t address) {
  auto it = pool->blocks.find(address);
  pool->reserved -= it->second;
  s.devices[static_cast<std::size_t>(pool->device)].bytes_in_use -= it->second;
  pool->blocks.erase(it);
  std::free(reinterpret_cast<void*>(address));
}

// Releases cached blocks, largest first, until the pool reserves at most `keep` bytes.
void release_cached(State& s, CUmemPoolHandle_st* pool, std::size_t keep) {
  while (pool->reserved > keep && !pool->cached.empty()) {
    auto largest = std::prev(pool->cached.end());
    const std::uintptr_t address = largest->second;
    pool->cached.erase(largest);
    release_block(s, pool, address);
  }
}

// A destroyed pool goes once nothing of it is outstanding.
void delete_if_done(State& s, CUmemPoolHandle_st* pool) {
  if (!pool->destroyed || pool->used != 0) return;
  release_cached(s, pool, 0);
  s.pools.erase(pool);
  delete pool;
}

// What a synchronization does to the pools of `device`: each releases what it
// caches beyond its release threshold.
void apply_release_thresholds(State& s, int device) {
  for (CUmemPoolHandle_st* pool : s.pools)
    if (pool->device == device)
      release_cached(s, pool, static_cast<std::size_t>(std::min<std::uint64_t>(pool->release_threshold, SIZE_MAX)));
}

// Returns a block whose free has run to its pool's cache.
void return_block(State& s, CUmemPoolHandle_st* pool, std::uintptr_t address) {
  const std::size_t size = pool->blocks.at(address);
  pool->used -= size;
  pool->cached.emplace(size, address);
  delete_if_done(s, pool);
}

// Queues `operation` on `stream` of `device`, in stream order. Work queued on
// the legacy default stream waits for the device's blocking streams first.
void enqueue(State& s, CUstream_st* stream, std::function<void()> operation) {
  if (stream == s.devices[static_cast<std::size_t>(stream->device)].legacy_stream.get()) {
    for (CUstream_st* other : s.streams)
      if (other->device == stream->device && other->blocking) drain(other);
  }
  stream->pending.emplace_back(std::move(operation));
}

// The shared body of every copy. `stream` is null for synchronous copies.
cudaError_t copy(Call& call, void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind,
                 CUstream_st* stream) {
  gpusel_emulated::State& s = call.s();
  if (bytes == 0) return cudaSuccess;
  if (destination == nullptr || source == nullptr) return cudaErrorInvalidValue;
  const Location to = locate(s, destination, bytes);
  const Location from = locate(s, source, bytes);
  if (!direction_matches(kind, to, from)) return cudaErrorInvalidValue;
  if (to.device && from.device && to.device_index != from.device_index) {
    const auto& peers = s.devices[static_cast<std::size_t>(to.device_index)].peers_enabled;
    const CUmemPoolHandle_st* pool = find_allocation(s, source, bytes)->pool;
    if (peers.count(from.device_index) != 0 && (pool == nullptr || pool->accessors.count(to.device_index) != 0))
      ++s.peer_copies;
    else
      ++s.staged_device_copies;
  }
  const int acting_device =
      to.device ? to.device_index : (from.device ? from.device_index : call.thread().current_device);
  call.ensure_context(call.thread().current_device);
  call.ensure_context(acting_device);
  auto operation = [destination, source, bytes] { std::memmove(destination, source, bytes); };
  if (stream == nullptr) {
    drain_device(s, call.thread().current_device, /*only_blocking=*/true);
    if (acting_device != call.thread().current_device) drain_device(s, acting_device, true);
    operation();
    return cudaSuccess;
  }
  const bool host_side_pageable = (!to.device && !to.pinned) || (!from.device && !from.pinned);
  if (host_side_pageable) {
    drain(stream);  // the real runtime stages pageable memory before it returns
    operation();
  } else {
    stream->pending.emplace_back(std::move(operation));
  }
  return cudaSuccess;
}

}  // namespace

Config devices(int count, std::size_t memory_bytes) {
  Config config;
  config.devices.assign(static_cast<std::size_t>(count), DeviceSpec{});
  for (auto& device : config.devices) device.memory_bytes = memory_bytes;
  return config;
}

namespace {
struct ResetHooks {
  std::mutex mutex;
  std::vector<void (*)() noexcept> hooks;
};

ResetHooks& reset_hooks() {
  static ResetHooks* hooks = new ResetHooks;  // never destroyed, like the state
  return *hooks;
}

void reset_locked(const Config& config);
}  // namespace

void on_reset(void (*forget)() noexcept) {
  ResetHooks& hooks = reset_hooks();
  std::lock_guard<std::mutex> lock(hooks.mutex);
  if (hooks.hooks.size() == 8) std::abort();
  hooks.hooks.push_back(forget);
}

void reset(const Config& config) {
  reset_locked(config);
  ResetHooks& hooks = reset_hooks();
  std::lock_guard<std::mutex> lock(hooks.mutex);
  for (auto* forget : hooks.hooks) forget();
}

namespace {
void reset_locked(const Config& config) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto& [address, allocation] : s.allocations) std::free(reinterpret_cast<void*>(address));
  for (CUstream_st* stream : s.streams) delete stream;
  for (CUevent_st* event : s.events) delete event;
  for (CUmemPoolHandle_st* pool : s.pools) {
    for (const auto& [address, size] : pool->blocks)
      if (s.allocations.count(address) == 0) std::free(reinterpret_cast<void*>(address));  // else freed above
    delete pool;
  }
  s.pools.clear();
  s.allocations.clear();
  s.registered.clear();
  s.streams.clear();
  s.events.clear();
  s.call_counts.clear();
  s.call_log.clear();
  s.failures.clear();
  s.peer_copies = 0;
  s.staged_device_copies = 0;
  s.operations_left_to_stream_destroy = 0;
  s.unloading = false;
  s.calls_refused_while_unloading = 0;
  s.config = config;
  s.devices.clear();
  for (std::size_t i = 0; i < config.devices.size(); ++i) {
    DeviceState device;
    device.spec = config.devices[i];
    if (device.spec.uuid.empty()) device.spec.uuid = default_uuid(static_cast<int>(i));
    if (device.spec.pci_bus_id.empty()) device.spec.pci_bus_id = default_pci_bus_id(static_cast<int>(i));
    device.legacy_stream = std::make_unique<CUstream_st>();
    device.legacy_stream->device = static_cast<int>(i);
    s.devices.push_back(std::move(device));
  }
  ++s.generation;
  if (s.libcuda != nullptr) {
    // The fake NVML may hold the library loaded too: a new process starts uninitialized.
    fake_libcuda_call<void (*)()>(s.libcuda, "gpusel_fake_libcuda_forget");
    dlclose(s.libcuda);
  }
  s.libcuda = nullptr;
}
}  // namespace

int calls(const std::string& function) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.call_counts.find(function);
  return it == s.call_counts.end() ? 0 : it->second;
}

std::vector<std::string> call_log() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.call_log.entries();
}

std::uint64_t dropped_calls() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.call_log.dropped();
}

std::size_t call_log_capacity() { return kCallLogCapacity; }

void clear_calls() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.call_counts.clear();
  s.call_log.clear();
}

bool has_primary_context(int device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return device >= 0 && device < static_cast<int>(s.devices.size()) &&
         s.devices[static_cast<std::size_t>(device)].primary_context;
}

int primary_context_count() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return static_cast<int>(
      std::count_if(s.devices.begin(), s.devices.end(), [](const DeviceState& d) { return d.primary_context; }));
}

std::size_t bytes_in_use(int device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (device < 0 || device >= static_cast<int>(s.devices.size())) return 0;
  return s.devices[static_cast<std::size_t>(device)].bytes_in_use;
}

std::size_t bytes_allocated(int device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::size_t total = 0;
  for (const auto& [address, allocation] : s.allocations)
    if (allocation.kind == MemoryKind::Device && allocation.device == device) total += allocation.bytes;
  return total;
}

int live_pools() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return static_cast<int>(s.pools.size());
}

std::size_t pinned_host_bytes_in_use() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::size_t total = 0;
  for (const auto& [address, allocation] : s.allocations)
    if (allocation.kind == MemoryKind::PinnedHost) total += allocation.bytes;
  return total;
}

int registered_host_ranges() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return static_cast<int>(s.registered.size());
}

int live_streams() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return static_cast<int>(s.streams.size());
}

int live_events() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return static_cast<int>(s.events.size());
}

int pending_operations() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::size_t total = 0;
  for (CUstream_st* stream : s.streams) total += stream->pending.size();
  for (const DeviceState& device : s.devices) total += device.legacy_stream->pending.size();
  return static_cast<int>(total);
}

int peer_copies() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.peer_copies;
}

int staged_device_copies() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.staged_device_copies;
}

std::string fake_libcuda_path() { return GPUSEL_EMULATED_LIBCUDA; }

int operations_left_to_stream_destroy() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.operations_left_to_stream_destroy;
}

void fail_call(const std::string& function, int nth, cudaError_t status) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.failures.push_back({function, nth, false, status});
}

void fail_calls_from(const std::string& function, int nth, cudaError_t status) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.failures.push_back({function, nth, true, status});
}

void clear_failures() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.failures.clear();
}

void begin_process_exit() { tear_down_at_exit(); }

bool unloading() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.unloading;
}

int calls_refused_while_unloading() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.calls_refused_while_unloading;
}

// Driver API functions handed out through the runtime's entry point call.
// CUresult is an int-sized enum and CUdevice an int; 0 is CUDA_SUCCESS and
// 101 CUDA_ERROR_INVALID_DEVICE in the driver API as in the runtime.
namespace {
int driver_device_get(int* device, int ordinal) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (device == nullptr) return 1;
  if (ordinal < 0 || ordinal >= static_cast<int>(s.devices.size())) return 101;
  ++s.call_counts["cuDeviceGet"];
  *device = ordinal;
  return 0;
}

int driver_primary_context_get_state(int device, unsigned int* flags, int* active) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (flags == nullptr || active == nullptr) return 1;
  if (device < 0 || device >= static_cast<int>(s.devices.size())) return 101;
  ++s.call_counts["cuDevicePrimaryCtxGetState"];
  *flags = 0;
  *active = s.devices[static_cast<std::size_t>(device)].primary_context ? 1 : 0;
  return 0;
}

// The driver function named `symbol`, as the runtime's entry point call
// `call_name` hands it out (Note [The driver's entry points by CUDA version]).
cudaError_t driver_entry_point(const char* call_name, const char* symbol, void** function,
                               cudaDriverEntryPointQueryResult* driver_status) {
  Call call(call_name);
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (symbol == nullptr || function == nullptr) return call.finish(cudaErrorInvalidValue);
  const std::string name = symbol;
  *function = nullptr;
  if (name == "cuDevicePrimaryCtxGetState") {
    *function = reinterpret_cast<void*>(&driver_primary_context_get_state);
  } else if (name == "cuDeviceGet") {
    *function = reinterpret_cast<void*>(&driver_device_get);
  }
  if (driver_status != nullptr)
    *driver_status = *function != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
}  // namespace

}  // namespace gpusel_emulated

using gpusel_emulated::Call;

extern "C" {

const char* cudaGetErrorName(cudaError_t status) {
  switch (status) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError:
      return "cudaErrorInitializationError";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorPeerAccessAlreadyEnabled:
      return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorPeerAccessNotEnabled:
      return "cudaErrorPeerAccessNotEnabled";
    case cudaErrorPeerAccessUnsupported:
      return "cudaErrorPeerAccessUnsupported";
    case cudaErrorHostMemoryAlreadyRegistered:
      return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered:
      return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorUnknown:
      return "cudaErrorUnknown";
    case cudaErrorCudartUnloading:
      return "cudaErrorCudartUnloading";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t status) {
  switch (status) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorCudartUnloading:
      return "driver shutting down";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorPeerAccessAlreadyEnabled:
      return "peer access is already enabled";
    case cudaErrorPeerAccessNotEnabled:
      return "peer access has not been enabled";
    case cudaErrorPeerAccessUnsupported:
      return "peer access is not supported between these two devices";
    case cudaErrorHostMemoryAlreadyRegistered:
      return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
      return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorNotSupported:
      return "operation not supported";
    default:
      return "unknown error";
  }
}

// A runtime that failed to initialize reports that failure from every call,
// cudaGetLastError and cudaPeekAtLastError included: it cannot be cleared
// (observed with CUDA 13 and no driver).
cudaError_t cudaGetLastError(void) {
  Call call("cudaGetLastError");
  if (call.imposed() != cudaSuccess) return call.imposed();
  const cudaError_t status = call.thread().last_error;
  call.thread().last_error = cudaSuccess;
  return status;
}

cudaError_t cudaPeekAtLastError(void) {
  Call call("cudaPeekAtLastError");
  if (call.imposed() != cudaSuccess) return call.imposed();
  return call.thread().last_error;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  Call call("cudaRuntimeGetVersion", false);
  if (version == nullptr) return call.finish(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  Call call("cudaDriverGetVersion", false);
  if (version == nullptr) return call.finish(cudaErrorInvalidValue);
  load_driver(call.s());  // measured on the H200: it loads and initializes the driver
  *version = call.s().config.initialization_error == cudaErrorInsufficientDriver ? 0 : CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  Call call("cudaGetDeviceCount");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (count == nullptr) return call.finish(cudaErrorInvalidValue);
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  *count = static_cast<int>(call.s().devices.size());
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  Call call("cudaGetDevice");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (device == nullptr) return call.finish(cudaErrorInvalidValue);
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  *device = call.thread().current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  Call call("cudaSetDevice");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  if (!call.valid_device(device)) return call.finish(cudaErrorInvalidDevice);
  call.thread().current_device = device;
  call.ensure_context(device);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  Call call("cudaDeviceSynchronize");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  call.ensure_context(call.thread().current_device);
  gpusel_emulated::drain_device(call.s(), call.thread().current_device, false);
  gpusel_emulated::apply_release_thresholds(call.s(), call.thread().current_device);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  Call call("cudaGetDeviceProperties");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (properties == nullptr) return call.finish(cudaErrorInvalidValue);
  if (!call.valid_device(device)) return call.finish(cudaErrorInvalidDevice);
  const auto& spec = call.s().devices[static_cast<std::size_t>(device)].spec;
  std::memset(properties, 0, sizeof *properties);
  std::snprintf(properties->name, sizeof properties->name, "%s", spec.name.c_str());
  properties->totalGlobalMem = spec.memory_bytes;
  properties->major = 9;
  properties->minor = 0;
  properties->unifiedAddressing = 1;
  properties->multiProcessorCount = 132;
  unsigned bus = 0;
  std::sscanf(spec.pci_bus_id.c_str(), "%*x:%x:", &bus);
  properties->pciBusID = static_cast<int>(bus);
  // The uuid's 16 bytes from its hex digits, as the driver reports them.
  std::string hex;
  for (char c : spec.uuid.substr(spec.uuid.find('-') + 1))
    if (c != '-') hex += c;
  for (std::size_t i = 0; i < 16 && 2 * i + 1 < hex.size(); ++i)
    properties->uuid.bytes[i] = static_cast<char>(std::strtoul(hex.substr(2 * i, 2).c_str(), nullptr, 16));
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  Call call("cudaDeviceGetAttribute");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (value == nullptr) return call.finish(cudaErrorInvalidValue);
  if (!call.valid_device(device)) return call.finish(cudaErrorInvalidDevice);
  switch (attribute) {
    case cudaDevAttrUnifiedAddressing:
      *value = 1;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = 132;
      break;
    case cudaDevAttrMemoryPoolsSupported:
      *value = call.s().devices[static_cast<std::size_t>(device)].spec.memory_pools ? 1 : 0;
      break;
    default:
      *value = 0;
      break;
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pci_bus_id, int length, int device) {
  Call call("cudaDeviceGetPCIBusId");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (pci_bus_id == nullptr || length <= 0) return call.finish(cudaErrorInvalidValue);
  if (!call.valid_device(device)) return call.finish(cudaErrorInvalidDevice);
  std::snprintf(pci_bus_id, static_cast<std::size_t>(length), "%s",
                call.s().devices[static_cast<std::size_t>(device)].spec.pci_bus_id.c_str());
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  Call call("cudaMemGetInfo");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (free_bytes == nullptr || total_bytes == nullptr) return call.finish(cudaErrorInvalidValue);
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  call.ensure_context(call.thread().current_device);
  const auto& device = call.s().devices[static_cast<std::size_t>(call.thread().current_device)];
  *total_bytes = device.spec.memory_bytes;
  *free_bytes = device.spec.memory_bytes - device.bytes_in_use;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  Call call("cudaMalloc");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (pointer == nullptr) return call.finish(cudaErrorInvalidValue);
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  const int device = call.thread().current_device;
  call.ensure_context(device);
  auto& state = call.s().devices[static_cast<std::size_t>(device)];
  if (bytes == 0) {
    *pointer = nullptr;
    return cudaSuccess;
  }
  if (bytes > state.spec.memory_bytes - state.bytes_in_use) return call.finish(cudaErrorMemoryAllocation);
  void* memory = gpusel_emulated::allocate_host(bytes, 256);
  if (memory == nullptr) return call.finish(cudaErrorMemoryAllocation);
  state.bytes_in_use += bytes;
  call.s().allocations.emplace(reinterpret_cast<std::uintptr_t>(memory),
                               gpusel_emulated::Allocation{gpusel_emulated::MemoryKind::Device, device, bytes});
  *pointer = memory;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  Call call("cudaFree");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  call.ensure_context(call.thread().current_device);  // cudaFree(nullptr) is the classic way to create a context
  if (pointer == nullptr) return cudaSuccess;
  auto it = call.s().allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == call.s().allocations.end() || it->second.kind != gpusel_emulated::MemoryKind::Device)
    return call.finish(cudaErrorInvalidValue);
  gpusel_emulated::drain_everything(call.s());
  if (CUmemPoolHandle_st* pool = it->second.pool) {  // pool memory: back to its pool (Note [The emulated memory pools])
    call.s().allocations.erase(it);
    gpusel_emulated::return_block(call.s(), pool, reinterpret_cast<std::uintptr_t>(pointer));
    return cudaSuccess;
  }
  call.s().devices[static_cast<std::size_t>(it->second.device)].bytes_in_use -= it->second.bytes;
  call.s().allocations.erase(it);
  std::free(pointer);
  return cudaSuccess;
}

// --- the stream-ordered allocator (Note [The emulated memory pools]) ---------

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* properties) {
  Call call("cudaMemPoolCreate");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (pool == nullptr || properties == nullptr || properties->allocType != cudaMemAllocationTypePinned ||
      properties->location.type != cudaMemLocationTypeDevice)
    return call.finish(cudaErrorInvalidValue);
  if (!call.valid_device(properties->location.id)) return call.finish(cudaErrorInvalidDevice);
  const int device = properties->location.id;
  if (!call.s().devices[static_cast<std::size_t>(device)].spec.memory_pools) return call.finish(cudaErrorNotSupported);
  call.ensure_context(device);
  auto* made = new CUmemPoolHandle_st;
  made->device = device;
  call.s().pools.insert(made);
  *pool = made;
  return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  Call call("cudaMemPoolDestroy");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (!gpusel_emulated::known_pool(call.s(), pool)) return call.finish(cudaErrorInvalidValue);
  pool->destroyed = true;  // returns at once; the pool goes when nothing of it is outstanding
  gpusel_emulated::release_cached(call.s(), pool, 0);
  gpusel_emulated::delete_if_done(call.s(), pool);
  return cudaSuccess;
}

cudaError_t cudaMallocFromPoolAsync(void** pointer, size_t bytes, cudaMemPool_t pool, cudaStream_t stream) {
  Call call("cudaMallocFromPoolAsync");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  gpusel_emulated::State& s = call.s();
  if (pointer == nullptr || !gpusel_emulated::known_pool(s, pool)) return call.finish(cudaErrorInvalidValue);
  if (!gpusel_emulated::known_stream(s, stream)) return call.finish(cudaErrorInvalidResourceHandle);
  call.ensure_context(pool->device);
  call.ensure_context(gpusel_emulated::resolve_stream(call, stream)->device);
  if (bytes == 0) {
    *pointer = nullptr;
    return cudaSuccess;
  }
  std::uintptr_t address = 0;
  std::size_t size = 0;
  CUstream_st* on = gpusel_emulated::resolve_stream(call, stream);
  auto cached = pool->cached.lower_bound(bytes);
  auto pending = std::find_if(pool->pending.begin(), pool->pending.end(), [&](const auto& entry) {
    return entry.second.stream == on && pool->blocks.at(entry.first) >= bytes;
  });
  if (cached != pool->cached.end()) {
    size = cached->first;
    address = cached->second;
    pool->cached.erase(cached);
  } else if (pending != pool->pending.end()) {  // freed on this stream, in stream order before this allocation
    address = pending->first;
    size = pool->blocks.at(address);
    pool->pending.erase(pending);
    pool->used -= size;  // counted again below
  } else {
    auto& device = s.devices[static_cast<std::size_t>(pool->device)];
    if (bytes > device.spec.memory_bytes - device.bytes_in_use) gpusel_emulated::release_cached(s, pool, 0);
    if (bytes > device.spec.memory_bytes - device.bytes_in_use) return call.finish(cudaErrorMemoryAllocation);
    void* memory = gpusel_emulated::allocate_host(bytes, 256);
    if (memory == nullptr) return call.finish(cudaErrorMemoryAllocation);
    address = reinterpret_cast<std::uintptr_t>(memory);
    size = bytes;
    pool->blocks.emplace(address, size);
    pool->reserved += size;
    device.bytes_in_use += size;
  }
  pool->used += size;
  s.allocations.emplace(address,
                        gpusel_emulated::Allocation{gpusel_emulated::MemoryKind::Device, pool->device, bytes, pool});
  *pointer = reinterpret_cast<void*>(address);
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  Call call("cudaFreeAsync");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  gpusel_emulated::State& s = call.s();
  if (pointer == nullptr) return cudaSuccess;
  if (!gpusel_emulated::known_stream(s, stream)) return call.finish(cudaErrorInvalidResourceHandle);
  auto it = s.allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == s.allocations.end() || it->second.pool == nullptr) return call.finish(cudaErrorInvalidValue);
  CUmemPoolHandle_st* pool = it->second.pool;
  CUstream_st* on = gpusel_emulated::resolve_stream(call, stream);
  call.ensure_context(on->device);
  s.allocations.erase(it);  // the pointer is no longer valid to the runtime's calls
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  gpusel_emulated::State* state = &s;
  const std::uint64_t token = ++pool->frees;
  pool->pending[address] = {on, token};
  gpusel_emulated::enqueue(s, on, [state, pool, address, token] {
    auto found = pool->pending.find(address);
    if (found == pool->pending.end() || found->second.token != token) return;  // reused before this free ran
    pool->pending.erase(found);
    gpusel_emulated::return_block(*state, pool, address);
  });
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  Call call("cudaMemPoolTrimTo");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (!gpusel_emulated::known_pool(call.s(), pool)) return call.finish(cudaErrorInvalidValue);
  gpusel_emulated::release_cached(call.s(), pool, keep);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) {
  Call call("cudaMemPoolSetAttribute");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (!gpusel_emulated::known_pool(call.s(), pool) || value == nullptr || attribute != cudaMemPoolAttrReleaseThreshold)
    return call.finish(cudaErrorInvalidValue);
  std::memcpy(&pool->release_threshold, value, sizeof pool->release_threshold);
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) {
  Call call("cudaMemPoolGetAttribute");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (!gpusel_emulated::known_pool(call.s(), pool) || value == nullptr) return call.finish(cudaErrorInvalidValue);
  std::uint64_t answer = 0;
  switch (attribute) {
    case cudaMemPoolAttrReleaseThreshold:
      answer = pool->release_threshold;
      break;
    case cudaMemPoolAttrReservedMemCurrent:
      answer = pool->reserved;
      break;
    case cudaMemPoolAttrUsedMemCurrent:
      answer = pool->used;
      break;
    default:
      return call.finish(cudaErrorInvalidValue);
  }
  std::memcpy(value, &answer, sizeof answer);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* descriptions, size_t count) {
  Call call("cudaMemPoolSetAccess");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (!gpusel_emulated::known_pool(call.s(), pool) || (descriptions == nullptr && count != 0))
    return call.finish(cudaErrorInvalidValue);
  const auto& matrix = call.s().config.peer_access;
  for (size_t i = 0; i < count; ++i) {  // all checked before any is applied
    const cudaMemAccessDesc& description = descriptions[i];
    if (description.location.type != cudaMemLocationTypeDevice) return call.finish(cudaErrorInvalidValue);
    const int device = description.location.id;
    if (!call.valid_device(device)) return call.finish(cudaErrorInvalidDevice);
    if (device != pool->device && !matrix.empty() &&
        !matrix.at(static_cast<std::size_t>(device)).at(static_cast<std::size_t>(pool->device)))
      return call.finish(cudaErrorInvalidDevice);
  }
  for (size_t i = 0; i < count; ++i) {
    const int device = descriptions[i].location.id;
    if (device == pool->device) continue;  // its own device always has access
    if (descriptions[i].flags == cudaMemAccessFlagsProtNone)
      pool->accessors.erase(device);
    else
      pool->accessors.insert(device);
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t pool, cudaMemLocation* location) {
  Call call("cudaMemPoolGetAccess");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (flags == nullptr || location == nullptr || !gpusel_emulated::known_pool(call.s(), pool) ||
      location->type != cudaMemLocationTypeDevice)
    return call.finish(cudaErrorInvalidValue);
  if (!call.valid_device(location->id)) return call.finish(cudaErrorInvalidDevice);
  const bool granted = location->id == pool->device || pool->accessors.count(location->id) != 0;
  *flags = granted ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtNone;
  return cudaSuccess;
}

namespace {
cudaError_t allocate_pinned(Call& call, void** pointer, size_t bytes) {
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (pointer == nullptr) return call.finish(cudaErrorInvalidValue);
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  call.ensure_context(call.thread().current_device);
  if (bytes == 0) {
    *pointer = nullptr;
    return cudaSuccess;
  }
  void* memory = gpusel_emulated::allocate_host(bytes, 4096);
  if (memory == nullptr) return call.finish(cudaErrorMemoryAllocation);
  call.s().allocations.emplace(reinterpret_cast<std::uintptr_t>(memory),
                               gpusel_emulated::Allocation{gpusel_emulated::MemoryKind::PinnedHost, -1, bytes});
  *pointer = memory;
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMallocHost(void** pointer, size_t bytes) {
  Call call("cudaMallocHost");
  return allocate_pinned(call, pointer, bytes);
}

cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int /*flags*/) {
  Call call("cudaHostAlloc");
  return allocate_pinned(call, pointer, bytes);
}

cudaError_t cudaFreeHost(void* pointer) {
  Call call("cudaFreeHost");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (pointer == nullptr) return cudaSuccess;
  auto it = call.s().allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == call.s().allocations.end() || it->second.kind != gpusel_emulated::MemoryKind::PinnedHost)
    return call.finish(cudaErrorInvalidValue);
  gpusel_emulated::drain_everything(call.s());
  call.s().allocations.erase(it);
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* pointer, size_t bytes, unsigned int /*flags*/) {
  Call call("cudaHostRegister");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (pointer == nullptr || bytes == 0) return call.finish(cudaErrorInvalidValue);
  call.ensure_context(call.thread().current_device);
  if (gpusel_emulated::is_registered(call.s(), pointer, 1)) return call.finish(cudaErrorHostMemoryAlreadyRegistered);
  call.s().registered.emplace(reinterpret_cast<std::uintptr_t>(pointer), gpusel_emulated::RegisteredRange{bytes});
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* pointer) {
  Call call("cudaHostUnregister");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  auto it = call.s().registered.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == call.s().registered.end()) return call.finish(cudaErrorHostMemoryNotRegistered);
  gpusel_emulated::drain_everything(call.s());
  call.s().registered.erase(it);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  Call call("cudaPointerGetAttributes");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (attributes == nullptr) return call.finish(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof *attributes);
  attributes->device = -1;
  if (const auto* allocation = gpusel_emulated::find_allocation(call.s(), pointer)) {
    attributes->type =
        allocation->kind == gpusel_emulated::MemoryKind::Device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    attributes->device = allocation->device;
    if (allocation->kind == gpusel_emulated::MemoryKind::Device)
      attributes->devicePointer = const_cast<void*>(pointer);
    else
      attributes->hostPointer = const_cast<void*>(pointer);
  } else if (gpusel_emulated::is_registered(call.s(), pointer, 1)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->hostPointer = const_cast<void*>(pointer);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind) {
  Call call("cudaMemcpy");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  return call.finish(gpusel_emulated::copy(call, destination, source, bytes, kind, nullptr));
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  Call call("cudaMemcpyAsync");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  if (!gpusel_emulated::known_stream(call.s(), stream)) return call.finish(cudaErrorInvalidResourceHandle);
  return call.finish(
      gpusel_emulated::copy(call, destination, source, bytes, kind, gpusel_emulated::resolve_stream(call, stream)));
}

cudaError_t cudaMemcpyPeer(void* destination, int destination_device, const void* source, int source_device,
                           size_t bytes) {
  Call call("cudaMemcpyPeer");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (!call.valid_device(destination_device) || !call.valid_device(source_device))
    return call.finish(cudaErrorInvalidDevice);
  return call.finish(gpusel_emulated::copy(call, destination, source, bytes, cudaMemcpyDeviceToDevice, nullptr));
}

cudaError_t cudaMemcpyPeerAsync(void* destination, int destination_device, const void* source, int source_device,
                                size_t bytes, cudaStream_t stream) {
  Call call("cudaMemcpyPeerAsync");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (!call.valid_device(destination_device) || !call.valid_device(source_device))
    return call.finish(cudaErrorInvalidDevice);
  if (!gpusel_emulated::known_stream(call.s(), stream)) return call.finish(cudaErrorInvalidResourceHandle);
  return call.finish(gpusel_emulated::copy(call, destination, source, bytes, cudaMemcpyDeviceToDevice,
                                           gpusel_emulated::resolve_stream(call, stream)));
}

#if CUDART_VERSION >= 12080
// Note [cudaMemcpyBatchAsync as emulated]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// CUDA 13.0's signature (cuda_runtime_api.h); CUDA 12.8 and 12.9 had a
// `size_t* failIdx` before the stream, which 13.0 removed; before 12.8 there is
// no such call, and the emulation has none. As NVIDIA documents it:
//  - the stream must not be the legacy NULL stream (nullptr, cudaStreamLegacy);
//  - each copy is governed by one of `attrs`: attrs[k] applies to copies
//    attrsIdxs[k] .. attrsIdxs[k+1]-1 (the last to count-1), so attrsIdxs[0]
//    is 0, the indices increase, the last is below count, numAttrs <= count;
//    each attribute's srcAccessOrder must be a valid one; otherwise
//    cudaErrorInvalidValue;
//  - the batch runs in stream order, but its copies in no promised order: the
//    emulation runs them last to first, so copies that depend on each other
//    show it;
//  - srcAccessOrder Stream reads the source in stream order (queued, as an
//    asynchronous copy of pinned or device memory; pageable memory is copied
//    at once, as cudaMemcpyAsync does here); DuringApiCall reads it before the
//    call returns (the emulation snapshots it then and writes the destination
//    in stream order); Any lets the driver read it out of stream order, later,
//    and the emulation reads it in stream order, one of the orders allowed.
// Where the emulation differs: it checks the whole batch before queueing any
// of it, so a failing call queued nothing, where the real runtime may have
// queued some copies (12.x reported the first failing one through failIdx):
// a caller must synchronize the stream before freeing what a failed batch
// touched. A batch of no copies is refused (cudaErrorInvalidValue; NVIDIA
// does not say); a copy of zero bytes does nothing. srcLocHint, dstLocHint
// and flags are hints for managed memory and are ignored, as the real runtime
// ignores them for other memory.
#if CUDART_VERSION >= 13000
cudaError_t cudaMemcpyBatchAsync(void* const* destinations, const void* const* sources, const size_t* sizes,
                                 size_t count, cudaMemcpyAttributes* attributes, size_t* attribute_starts,
                                 size_t attribute_count, cudaStream_t stream) {
#else
cudaError_t cudaMemcpyBatchAsync(void** destinations, void** sources, size_t* sizes, size_t count,
                                 cudaMemcpyAttributes* attributes, size_t* attribute_starts, size_t attribute_count,
                                 size_t* failed_copy, cudaStream_t stream) {
  // The emulation checks the whole batch before queueing any of it: no copy is the one that failed.
  if (failed_copy != nullptr) *failed_copy = std::numeric_limits<size_t>::max();
#endif
  Call call("cudaMemcpyBatchAsync");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  if (stream == nullptr || stream == cudaStreamLegacy) return call.finish(cudaErrorInvalidValue);
  if (!gpusel_emulated::known_stream(call.s(), stream)) return call.finish(cudaErrorInvalidResourceHandle);
  if (count == 0 || destinations == nullptr || sources == nullptr || sizes == nullptr || attributes == nullptr ||
      attribute_starts == nullptr || attribute_count == 0 || attribute_count > count || attribute_starts[0] != 0)
    return call.finish(cudaErrorInvalidValue);
  for (size_t k = 0; k < attribute_count; ++k) {
    if (k > 0 && attribute_starts[k] <= attribute_starts[k - 1]) return call.finish(cudaErrorInvalidValue);
    if (attribute_starts[k] >= count) return call.finish(cudaErrorInvalidValue);
    const cudaMemcpySrcAccessOrder order = attributes[k].srcAccessOrder;
    if (order != cudaMemcpySrcAccessOrderStream && order != cudaMemcpySrcAccessOrderDuringApiCall &&
        order != cudaMemcpySrcAccessOrderAny)
      return call.finish(cudaErrorInvalidValue);
  }
  for (size_t i = 0; i < count; ++i)
    if (sizes[i] != 0 && (destinations[i] == nullptr || sources[i] == nullptr))
      return call.finish(cudaErrorInvalidValue);
  CUstream_st* const queue = gpusel_emulated::resolve_stream(call, stream);
  size_t governing = attribute_count - 1;  // the attribute of copy i, walking down from the last copy
  for (size_t i = count; i-- > 0;) {
    while (attribute_starts[governing] > i) --governing;
    if (sizes[i] == 0) continue;
    if (attributes[governing].srcAccessOrder == cudaMemcpySrcAccessOrderDuringApiCall) {
      auto snapshot = std::make_shared<std::vector<char>>(static_cast<const char*>(sources[i]),
                                                          static_cast<const char*>(sources[i]) + sizes[i]);
      void* const destination = destinations[i];
      call.ensure_context(call.thread().current_device);
      queue->pending.emplace_back(
          [snapshot, destination] { std::memcpy(destination, snapshot->data(), snapshot->size()); });
      continue;
    }
    const cudaError_t status =
        gpusel_emulated::copy(call, destinations[i], sources[i], sizes[i], cudaMemcpyDefault, queue);
    if (status != cudaSuccess) return call.finish(status);
  }
  return cudaSuccess;
}
#endif

cudaError_t cudaMemset(void* pointer, int value, size_t bytes) {
  Call call("cudaMemset");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  const auto* allocation = gpusel_emulated::find_allocation(call.s(), pointer, bytes);
  if (allocation == nullptr || allocation->kind != gpusel_emulated::MemoryKind::Device)
    return call.finish(cudaErrorInvalidValue);
  call.ensure_context(call.thread().current_device);
  gpusel_emulated::drain_device(call.s(), allocation->device, true);
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  Call call("cudaStreamCreateWithFlags");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (stream == nullptr) return call.finish(cudaErrorInvalidValue);
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  call.ensure_context(call.thread().current_device);
  auto created = std::make_unique<CUstream_st>();
  created->device = call.thread().current_device;
  created->blocking = (flags & cudaStreamNonBlocking) == 0;
  *stream = created.release();
  call.s().streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Call call("cudaStreamDestroy");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  auto it = call.s().streams.find(stream);
  if (it == call.s().streams.end()) return call.finish(cudaErrorInvalidResourceHandle);
  // Queued work still completes, as on a GPU, where it finishes after
  // cudaStreamDestroy has returned: counted, since memory that work uses must
  // not be reused before it is done.
  call.s().operations_left_to_stream_destroy += static_cast<int>(stream->pending.size());
  gpusel_emulated::drain(stream);
  call.s().streams.erase(it);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Call call("cudaStreamSynchronize");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  if (!gpusel_emulated::known_stream(call.s(), stream)) return call.finish(cudaErrorInvalidResourceHandle);
  CUstream_st* resolved = gpusel_emulated::resolve_stream(call, stream);
  gpusel_emulated::drain(resolved);
  gpusel_emulated::apply_release_thresholds(call.s(), resolved->device);
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  Call call("cudaStreamGetFlags");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (flags == nullptr) return call.finish(cudaErrorInvalidValue);
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  if (!gpusel_emulated::known_stream(call.s(), stream)) return call.finish(cudaErrorInvalidResourceHandle);
  *flags = gpusel_emulated::resolve_stream(call, stream)->blocking ? cudaStreamDefault : cudaStreamNonBlocking;
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Call call("cudaStreamQuery");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  if (!gpusel_emulated::known_stream(call.s(), stream)) return call.finish(cudaErrorInvalidResourceHandle);
  return gpusel_emulated::resolve_stream(call, stream)->pending.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) {
  Call call("cudaEventCreateWithFlags");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (event == nullptr) return call.finish(cudaErrorInvalidValue);
  if (call.s().devices.empty()) return call.finish(cudaErrorNoDevice);
  call.ensure_context(call.thread().current_device);
  *event = new CUevent_st;
  call.s().events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Call call("cudaEventDestroy");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  auto it = call.s().events.find(event);
  if (it == call.s().events.end()) return call.finish(cudaErrorInvalidResourceHandle);
  call.s().events.erase(it);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Call call("cudaEventRecord");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().events.count(event) == 0 || !gpusel_emulated::known_stream(call.s(), stream))
    return call.finish(cudaErrorInvalidResourceHandle);
  event->recorded_on = gpusel_emulated::resolve_stream(call, stream);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Call call("cudaEventSynchronize");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().events.count(event) == 0) return call.finish(cudaErrorInvalidResourceHandle);
  if (event->recorded_on != nullptr) {
    gpusel_emulated::drain(event->recorded_on);
    gpusel_emulated::apply_release_thresholds(call.s(), event->recorded_on->device);
  }
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Call call("cudaEventQuery");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().events.count(event) == 0) return call.finish(cudaErrorInvalidResourceHandle);
  return event->recorded_on == nullptr || event->recorded_on->pending.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int /*flags*/) {
  Call call("cudaStreamWaitEvent");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (call.s().events.count(event) == 0 || !gpusel_emulated::known_stream(call.s(), stream))
    return call.finish(cudaErrorInvalidResourceHandle);
  if (event->recorded_on != nullptr) gpusel_emulated::drain(event->recorded_on);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
  Call call("cudaDeviceCanAccessPeer");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (can_access == nullptr) return call.finish(cudaErrorInvalidValue);
  if (!call.valid_device(device) || !call.valid_device(peer_device)) return call.finish(cudaErrorInvalidDevice);
  const auto& matrix = call.s().config.peer_access;
  bool allowed = device != peer_device;
  if (allowed && !matrix.empty())
    allowed = matrix.at(static_cast<std::size_t>(device)).at(static_cast<std::size_t>(peer_device));
  *can_access = allowed ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned int flags) {
  Call call("cudaDeviceEnablePeerAccess");
  if (call.imposed() != cudaSuccess) return call.finish(call.imposed());
  if (flags != 0) return call.finish(cudaErrorInvalidValue);
  if (!call.valid_device(peer_device)) return call.finish(cudaErrorInvalidDevice);
  const int device = call.thread().current_device;
  call.ensure_context(device);
  const auto& matrix = call.s().config.peer_access;
  const bool allowed =
      device != peer_device &&
      (matrix.empty() || matrix.at(static_cast<std::size_t>(device)).at(static_cast<std::size_t>(peer_device)));
  if (!allowed) return call.finish(cudaErrorPeerAccessUnsupported);
  auto& peers = call.s().devices[static_cast<std::size_t>(device)].peers_enabled;
  if (!peers.insert(peer_device).second) return call.finish(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

// Note [The driver's entry points by CUDA version]
// CUDA 12.5 added cudaGetDriverEntryPointByVersion, which gpusel calls from
// then on (detail/cuda/primary_context.hpp); before it, gpusel calls
// cudaGetDriverEntryPoint. The emulation gives the one this CUDA's header
// declares for gpusel, under its own name (the name fault injection and the
// call counters use: gpusel_test::kDriverEntryPointCall).
#if CUDART_VERSION >= 12050
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned int /*cuda_version*/,
                                             unsigned long long /*flags*/,
                                             cudaDriverEntryPointQueryResult* driver_status) {
  return gpusel_emulated::driver_entry_point("cudaGetDriverEntryPointByVersion", symbol, function, driver_status);
}
#else
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** function, unsigned long long /*flags*/,
                                    cudaDriverEntryPointQueryResult* driver_status) {
  return gpusel_emulated::driver_entry_point("cudaGetDriverEntryPoint", symbol, function, driver_status);
}
#endif

}  // extern "C"

// A program that never calls reset() (an example, run by ctest against the
// emulation) starts on the machine GPUSEL_EMULATED_DEVICES=N describes: N
// devices of 16 GiB. Without the variable it has none until a test resets it.
// Last in the file, so that everything reset() uses is initialized first.
namespace gpusel_emulated {
namespace {
void reset_from_environment() {
  const char* count = std::getenv("GPUSEL_EMULATED_DEVICES");
  if (count == nullptr) return;
  const long devices_wanted = std::strtol(count, nullptr, 10);
  if (devices_wanted < 0 || devices_wanted > 64) {
    std::fprintf(stderr, "GPUSEL_EMULATED_DEVICES=%s: expected 0..64\n", count);
    std::abort();
  }
  reset(devices(static_cast<int>(devices_wanted)));
}

[[maybe_unused]] const bool machine_from_environment = (reset_from_environment(), true);
}  // namespace
}  // namespace gpusel_emulated
