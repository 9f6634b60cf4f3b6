// Controls for the emulated CUDA runtime (tests/emulated/emulated_runtime.cpp).
//
// Test binaries built "emulated" link this library in place of libcudart: the
// gpusel headers are the production headers, unchanged, and their cuda* calls
// land here. Tests use the functions below to shape the simulated machine
// (how many GPUs, how much memory, which pairs can use peer access, whether a
// driver exists), to read what happened (calls made, contexts created, bytes
// still allocated) and to make chosen calls fail.
//
// See Note [Where the emulation differs from the real runtime] in the .cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpusel_emulated {

struct DeviceSpec {
  std::string name = "Emulated GPU";
  std::size_t memory_bytes = std::size_t{16} << 30;
  std::string uuid;        // "GPU-xxxxxxxx-..."; made from the index when empty
  std::string pci_bus_id;  // "00000000:0N:00.0"; made from the index when empty
  // cudaDevAttrMemoryPoolsSupported: whether cudaMemPoolCreate works on it.
  bool memory_pools = true;
};

struct Config {
  // The devices the runtime shows, logical 0..n-1 (the emulation does not read
  // CUDA_VISIBLE_DEVICES: a test sets the visible devices directly).
  std::vector<DeviceSpec> devices = std::vector<DeviceSpec>(2);
  // When not cudaSuccess, every runtime call fails with this status, as the real
  // runtime does with no driver (cudaErrorInsufficientDriver), with
  // CUDA_VISIBLE_DEVICES hiding every GPU (cudaErrorNoDevice), or with an
  // invalid list (cudaErrorInvalidDevice).
  cudaError_t initialization_error = cudaSuccess;
  // peer_access[a][b]: whether device a can map device b's memory. Empty: every pair can.
  std::vector<std::vector<bool>> peer_access;
};

// A config with `count` identical devices.
Config devices(int count, std::size_t memory_bytes = std::size_t{16} << 30);

// Starts a new emulated process: forgets every device, allocation, stream,
// context, counter and armed failure, and every thread's current device.
void reset(const Config& config = Config{});
// Has reset() call `forget` (after its own work, without its lock held), so
// that what the program knew about the old emulated process (gpusel's facts
// about devices: tests/support/gpusel_test.hpp) goes with it, as a new process
// starts without it. At most 8; each is called in the order registered.
void on_reset(void (*forget)() noexcept);

// --- what happened --------------------------------------------------------
// How many times `function` ("cudaSetDevice") was called since the last reset or clear_calls().
int calls(const std::string& function);
// The calls since the last reset or clear_calls(), in order, across threads:
// the last call_log_capacity() of them (see Note [The call log is bounded]).
std::vector<std::string> call_log();
// Calls made since the last reset or clear_calls() that the log no longer holds.
std::uint64_t dropped_calls();
std::size_t call_log_capacity();
void clear_calls();

// Whether the device's primary context exists (cuDevicePrimaryCtxGetState's `active`).
bool has_primary_context(int device);
// How many devices have a primary context.
int primary_context_count();
// Device memory `device` counts as used (what cudaMemGetInfo subtracts), in
// bytes: cudaMalloc'd memory not yet freed, and what its memory pools reserve,
// memory they cache for reuse included (Note [The emulated memory pools]).
std::size_t bytes_in_use(int device);
// Device memory on `device` the program holds: allocated (cudaMalloc,
// cudaMallocFromPoolAsync) and not yet freed (cudaFree, cudaFreeAsync called), in bytes.
std::size_t bytes_allocated(int device);
// Memory pools created and not yet gone (a destroyed pool stays until its allocations are freed).
int live_pools();
// Pinned host memory (cudaMallocHost / cudaHostAlloc) not yet freed, in bytes.
std::size_t pinned_host_bytes_in_use();
// Ranges registered with cudaHostRegister and not yet unregistered.
int registered_host_ranges();
// Streams and events created and not yet destroyed.
int live_streams();
int live_events();
// Asynchronous operations queued on streams and not yet executed (see the Note).
int pending_operations();
// Copies made between two devices' memory with peer access enabled, and without it.
int peer_copies();
int staged_device_copies();
// The stand-in driver library (SONAME libcuda.so.1) the emulation loads when it
// initializes (tests/emulated/fake_libcuda.cpp).
std::string fake_libcuda_path();
// Operations still queued on a stream when it was destroyed. The real runtime
// finishes them after cudaStreamDestroy returns, so whoever queued them must
// not free or reuse their memory until then.
int operations_left_to_stream_destroy();

// --- making things fail -----------------------------------------------------
// The nth call to `function` from now (1 = the next one) fails with `status`,
// without doing anything else, as a real failure would. Several can be armed;
// each counts the calls made after it was armed, so armed for calls 1 and 2,
// calls 1 and 2 fail.
void fail_call(const std::string& function, int nth, cudaError_t status);
// Every call to `function` from the nth on fails with `status`.
void fail_calls_from(const std::string& function, int nth, cudaError_t status);
void clear_failures();

// --- process exit (Note [The runtime unloads at exit] in the .cpp) -----------
// Runs the runtime's exit-time teardown now: from here on every call answers
// cudaErrorCudartUnloading, as after the teardown the first initializing call
// registered with atexit. reset() loads the runtime again.
void begin_process_exit();
bool unloading();
// Calls answered cudaErrorCudartUnloading since the last reset.
int calls_refused_while_unloading();

}  // namespace gpusel_emulated
