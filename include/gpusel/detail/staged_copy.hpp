// Copies between pageable host memory and a GPU through pinned staging chunks,
// pipelined and spread over threads. See Note [The copy engine].
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>

#include "gpusel/detail/cuda_status.hpp"
#include "gpusel/detail/parallel_parts.hpp"
#include "gpusel/detail/staging_pool.hpp"
#include "gpusel/guard.hpp"
#include "gpusel/stream.hpp"

namespace gpusel::detail {

// Note [The copy engine]
// ~~~~~~~~~~~~~~~~~~~~~~
// cudaMemcpy from pageable memory runs at 6 GB/s on the H200 where pinned
// memory reaches 55 GB/s (measured on an H200): the driver copies through its own small
// staging buffer, one piece at a time, on one thread. gpusel does the same
// work better:
//  - pinned staging chunks of kStagingChunkBytes come from a pool kept between
//    calls (Note [The staging pool]), so no copy pays for pinning;
//  - each worker owns two chunks and one stream: while the DMA engine moves
//    one chunk, the worker fills (host->device) or drains (device->host) the
//    other; a chunk is reused only after the event recorded behind its DMA
//    has completed (reusing it earlier corrupts the data: the emulated runtime
//    queues such copies until waited for, so the tests catch it);
//  - a large copy is cut into contiguous parts, one per worker thread, so the
//    host memcpys (the bottleneck) run in parallel, and so do the page faults
//    of a fresh destination (Note [Fresh host memory]);
//  - small copies (kDirectCopyBytes and less) go straight to cudaMemcpy: they
//    never touch the pool, a stream, an event or a thread.
// Every copy has arrived when the function returns.
inline constexpr std::size_t kDirectCopyBytes = std::size_t{1} << 20;
inline constexpr std::size_t kBytesPerCopyWorker = std::size_t{8} << 20;
inline constexpr std::size_t kMaxHostToDeviceWorkers = 6;
inline constexpr std::size_t kMaxDeviceToHostWorkers = 8;
static_assert(kMaxHostToDeviceWorkers <= kMaxStagingWorkers && kMaxDeviceToHostWorkers <= kMaxStagingWorkers,
              "the staging pool keeps the chunks of at most kMaxStagingWorkers pipelines");

enum class StagedDirection { host_to_device, device_to_host };

// One worker's pipeline: a stream on the device and two staging slots.
class StagedPipeline {
 public:
  explicit StagedPipeline(int device) : stream_(cuda(device)) {}

  // Waits for the DMA still in flight (after a failure) before giving the
  // chunks back; if waiting fails, frees them instead. Never throws.
  ~StagedPipeline() {
    bool in_flight = false;
    for (const Slot& slot : slots_) in_flight = in_flight || slot.in_flight;
    bool finished = true;
    if (in_flight && cudaStreamSynchronize(stream_.handle()) != cudaSuccess) {
      (void)cudaGetLastError();
      finished = false;
    }
    for (Slot& slot : slots_) {
      slot.chunk.end(finished || !slot.in_flight);
      if (slot.event != nullptr && cudaEventDestroy(slot.event) != cudaSuccess) (void)cudaGetLastError();
    }
  }

  StagedPipeline(const StagedPipeline&) = delete;  // owns chunks and events
  StagedPipeline& operator=(const StagedPipeline&) = delete;

  void host_to_device(char* device, const char* host, std::size_t bytes, const std::atomic<bool>& stop) {
    std::size_t index = 0;
    for (std::size_t offset = 0; offset < bytes; offset += kStagingChunkBytes, ++index) {
      if (stop.load(std::memory_order_relaxed)) return;
      Slot& slot = ready_slot(index);
      const std::size_t length = std::min(kStagingChunkBytes, bytes - offset);
      std::memcpy(slot.chunk.get(), host + offset, length);
      enqueue(slot, device + offset, slot.chunk.get(), length, cudaMemcpyHostToDevice);
    }
    finish();
  }

  void device_to_host(char* host, const char* device, std::size_t bytes, const std::atomic<bool>& stop) {
    const std::size_t chunks = (bytes + kStagingChunkBytes - 1) / kStagingChunkBytes;
    const auto issue = [&](std::size_t index) {
      Slot& slot = ready_slot(index);
      const std::size_t offset = index * kStagingChunkBytes;
      enqueue(slot, slot.chunk.get(), device + offset, std::min(kStagingChunkBytes, bytes - offset),
              cudaMemcpyDeviceToHost);
    };
    for (std::size_t index = 0; index < std::min(chunks, slots_.size()); ++index) issue(index);
    for (std::size_t index = 0; index < chunks; ++index) {
      if (stop.load(std::memory_order_relaxed)) return;
      Slot& slot = slots_[index % slots_.size()];
      wait(slot);
      const std::size_t offset = index * kStagingChunkBytes;
      std::memcpy(host + offset, slot.chunk.get(), std::min(kStagingChunkBytes, bytes - offset));
      if (index + slots_.size() < chunks) issue(index + slots_.size());
    }
  }

 private:
  struct Slot {
    StagingLease chunk;
    cudaEvent_t event = nullptr;
    bool in_flight = false;
  };

  void check(cudaError_t status, const char* call) const {
    if (status != cudaSuccess) throw cuda_error(status, std::string("gpusel copy engine: ") + call, stream_.device());
  }

  // The slot for chunk `index`, with its staging chunk and event, idle.
  Slot& ready_slot(std::size_t index) {
    Slot& slot = slots_[index % slots_.size()];
    if (slot.chunk.get() == nullptr) slot.chunk = StagingLease(StagingPool::instance().acquire());
    if (slot.event == nullptr)
      check(cudaEventCreateWithFlags(&slot.event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    wait(slot);
    return slot;
  }

  // Queues the slot's DMA and records its event behind it. The slot is in
  // flight from the moment the copy is queued: if recording the event fails,
  // the destructor must still wait for the stream before the chunk goes back
  // to the pool, or another copy could take the chunk while this DMA still
  // reads or writes it.
  void enqueue(Slot& slot, void* destination, const void* source, std::size_t length, cudaMemcpyKind kind) {
    check(cudaMemcpyAsync(destination, source, length, kind, stream_.handle()), "cudaMemcpyAsync");
    slot.in_flight = true;
    check(cudaEventRecord(slot.event, stream_.handle()), "cudaEventRecord");
  }

  void wait(Slot& slot) {
    if (!slot.in_flight) return;
    check(cudaEventSynchronize(slot.event), "cudaEventSynchronize");
    slot.in_flight = false;
  }

  void finish() {
    check(cudaStreamSynchronize(stream_.handle()), "cudaStreamSynchronize");
    for (Slot& slot : slots_) slot.in_flight = false;
  }

  Stream stream_;
  std::array<Slot, kSlotsPerStagingWorker> slots_;
};

// Copies `bytes` between pageable `host` memory and `device_memory` on
// `device`, through the pipelines above, spread over threads by size.
inline void staged_copy(StagedDirection direction, char* host, char* device_memory, std::size_t bytes, int device) {
  const std::size_t max_workers =
      direction == StagedDirection::host_to_device ? kMaxHostToDeviceWorkers : kMaxDeviceToHostWorkers;
  const std::size_t workers = worker_count(bytes, kBytesPerCopyWorker, max_workers);
  run_in_parts(bytes, workers, kStagingChunkBytes,
               [&](std::size_t begin, std::size_t end, const std::atomic<bool>& stop) {
                 DeviceGuard guard(device);  // a new thread starts on device 0
                 StagedPipeline pipeline(device);
                 if (direction == StagedDirection::host_to_device)
                   pipeline.host_to_device(device_memory + begin, host + begin, end - begin, stop);
                 else
                   pipeline.device_to_host(host + begin, device_memory + begin, end - begin, stop);
               });
}

}  // namespace gpusel::detail
