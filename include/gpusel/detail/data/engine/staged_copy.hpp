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

#include "gpusel/copy_engine_options.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/data/engine/engine_cache.hpp"
#include "gpusel/detail/data/engine/parallel_parts.hpp"
#include "gpusel/detail/data/engine/staging_pool.hpp"
#include "gpusel/detail/data/memory/host_block_cache.hpp"
#include "gpusel/detail/data/memory/host_prefault.hpp"
#include "gpusel/guard.hpp"

namespace gpusel::detail {

// Note [The copy engine]
// ~~~~~~~~~~~~~~~~~~~~~~
// cudaMemcpy from pageable memory runs far below the bus's speed: the driver
// copies through its own small staging buffer, one piece at a time, on one
// thread. gpusel does that work itself: pinned staging chunks come from a pool
// kept between calls (Note [The staging pool]); each worker owns `slots` chunks
// and one stream, and fills or drains one while the DMA engine moves the
// others, reusing a chunk only after the event recorded behind its DMA has
// completed; a large copy is cut into contiguous parts, one per worker thread,
// so the host memcpys (the bottleneck) and the page faults of a fresh
// destination (Note [Fresh host memory]) run in parallel. Workers, slots and
// chunk size are set at run time (Note [Tuning the copy engine]). Every copy
// has arrived when it returns.

// Copies of kDirectCopyBytes or less go straight to cudaMemcpy: they never
// touch the pool, a stream, an event or a thread. A larger copy gets at most
// one worker per kBytesPerCopyWorker.
inline constexpr std::size_t kDirectCopyBytes = std::size_t{1} << 20;
inline constexpr std::size_t kBytesPerCopyWorker = std::size_t{8} << 20;
static_assert(kMaxCopyWorkers <= kMaxStagingWorkers && kMaxCopyWorkers <= kMaxPartWorkers,
              "the staging pool and the part workers hold what the largest engine keeps in flight");

enum class StagedDirection { host_to_device, device_to_host };

// One worker's pipeline: a stream on the device and `slots` staging slots.
// The stream and events are the engine cache's, kept between copies, when
// `cached` is given (Note [The engine cache]), else the pipeline's own,
// destroyed with it.
class StagedPipeline {
 public:
  StagedPipeline(int device, const CopyEngineOptions& options, PipelineResources* cached)
      : device_(device),
        resources_(cached != nullptr ? cached : &own_),
        slot_count_(options.slots),
        chunk_bytes_(options.chunk_bytes),
        keep_(std::max(options.host_to_device_workers, options.device_to_host_workers) * options.slots) {
    if (resources_->stream == nullptr)
      check(cudaStreamCreateWithFlags(&resources_->stream, cudaStreamDefault), "cudaStreamCreateWithFlags");
  }

  // Waits for the DMA still in flight (after a failure) before giving the
  // chunks back; if waiting fails, frees them instead, and destroys the
  // stream and events rather than keep them. Never throws.
  ~StagedPipeline() {
    bool in_flight = false;
    for (std::size_t i = 0; i < slot_count_; ++i) in_flight = in_flight || slots_[i].in_flight;
    bool finished = true;
    if (in_flight && cudaStreamSynchronize(resources_->stream) != cudaSuccess) {
      (void)cudaGetLastError();
      finished = false;
    }
    for (std::size_t i = 0; i < slot_count_; ++i) slots_[i].chunk.end(finished || !slots_[i].in_flight);
    if (!finished || resources_ == &own_) resources_->destroy();
  }

  StagedPipeline(const StagedPipeline&) = delete;  // owns chunks and events
  StagedPipeline& operator=(const StagedPipeline&) = delete;

  void host_to_device(char* device, const char* host, std::size_t bytes, const std::atomic<bool>& stop) {
    std::size_t index = 0;
    for (std::size_t offset = 0; offset < bytes; offset += chunk_bytes_, ++index) {
      if (stop.load(std::memory_order_relaxed)) return;
      Slot& slot = ready_slot(index);
      const std::size_t length = std::min(chunk_bytes_, bytes - offset);
      std::memcpy(slot.chunk.get(), host + offset, length);
      enqueue(slot, device + offset, slot.chunk.get(), length, cudaMemcpyHostToDevice);
    }
    finish();
  }

  // `drain` says how to write the host memory (Note [The host block cache]):
  // a chunk to prefault is prefaulted while its DMA is still in flight.
  void device_to_host(char* host, const char* device, std::size_t bytes, const std::atomic<bool>& stop,
                      const HostDrain& drain) {
    const std::size_t chunks = (bytes + chunk_bytes_ - 1) / chunk_bytes_;
    const auto issue = [&](std::size_t index) {
      Slot& slot = ready_slot(index);
      const std::size_t offset = index * chunk_bytes_;
      enqueue(slot, slot.chunk.get(), device + offset, std::min(chunk_bytes_, bytes - offset), cudaMemcpyDeviceToHost);
    };
    for (std::size_t index = 0; index < std::min(chunks, slot_count_); ++index) issue(index);
    for (std::size_t index = 0; index < chunks; ++index) {
      if (stop.load(std::memory_order_relaxed)) return;
      Slot& slot = slots_[index % slot_count_];
      const std::size_t offset = index * chunk_bytes_;
      const std::size_t length = std::min(chunk_bytes_, bytes - offset);
      if (drain.prefault) prefault_pages(host + offset, length);
      wait(slot);
      drain_chunk(drain, host + offset, slot.chunk.get(), length);
      if (index + slot_count_ < chunks) issue(index + slot_count_);
    }
  }

 private:
  struct Slot {
    StagingLease chunk;
    cudaEvent_t* event = nullptr;
    bool in_flight = false;
  };

  void check(cudaError_t status, const char* call) const {
    if (status != cudaSuccess) throw cuda_error(status, std::string("gpusel copy engine: ") + call, cuda(device_));
  }

  // The slot for chunk `index`, with its staging chunk and event, idle. Reusing
  // a chunk before its event completes corrupts the data: the emulated runtime
  // queues such copies until waited for, so the tests catch it.
  Slot& ready_slot(std::size_t index) {
    const std::size_t number = index % slot_count_;
    Slot& slot = slots_[number];
    if (slot.chunk.get() == nullptr)
      slot.chunk = StagingLease(StagingPool::instance().acquire(chunk_bytes_), chunk_bytes_, keep_);
    slot.event = &resources_->events[number];
    if (*slot.event == nullptr)
      check(cudaEventCreateWithFlags(slot.event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    wait(slot);
    return slot;
  }

  // Queues the slot's DMA and records its event behind it. The slot is in
  // flight from the moment the copy is queued: if recording the event fails,
  // the destructor must still wait for the stream before the chunk goes back
  // to the pool, or another copy could take the chunk while this DMA still
  // reads or writes it.
  void enqueue(Slot& slot, void* destination, const void* source, std::size_t length, cudaMemcpyKind kind) {
    check(cudaMemcpyAsync(destination, source, length, kind, resources_->stream), "cudaMemcpyAsync");
    slot.in_flight = true;
    check(cudaEventRecord(*slot.event, resources_->stream), "cudaEventRecord");
  }

  void wait(Slot& slot) {
    if (!slot.in_flight) return;
    check(cudaEventSynchronize(*slot.event), "cudaEventSynchronize");
    slot.in_flight = false;
  }

  void finish() {
    check(cudaStreamSynchronize(resources_->stream), "cudaStreamSynchronize");
    for (std::size_t i = 0; i < slot_count_; ++i) slots_[i].in_flight = false;
  }

  int device_;
  PipelineResources own_;
  PipelineResources* resources_;
  std::size_t slot_count_;
  std::size_t chunk_bytes_;
  std::size_t keep_;
  std::array<Slot, kMaxCopySlots> slots_;
};

// Copies `bytes` between pageable `host` memory and `device_memory` on
// `device`, through the pipelines above, spread over threads by size and by
// the engine's options; on the engine cache's threads, streams and events
// when no other copy holds them.
inline void staged_copy(StagedDirection direction, char* host, char* device_memory, std::size_t bytes, int device) {
  const CopyEngineOptions options = copy_engine_options();
  const std::size_t max_workers =
      direction == StagedDirection::host_to_device ? options.host_to_device_workers : options.device_to_host_workers;
  const std::size_t workers = worker_count(bytes, kBytesPerCopyWorker, max_workers);
  const HostDrain drain = direction == StagedDirection::device_to_host ? plan_host_drain(host, bytes) : HostDrain{};
  const EngineLease lease;
  EngineCache* const cache = lease.get();
  run_in_parts(bytes, workers, options.chunk_bytes, cache != nullptr ? &cache->workers() : nullptr,
               [&](std::size_t index, std::size_t begin, std::size_t end, const std::atomic<bool>& stop) {
                 DeviceGuard guard(device);  // a new thread starts on device 0
                 StagedPipeline pipeline(device, options,
                                         cache != nullptr ? &cache->resources(index, device) : nullptr);
                 if (direction == StagedDirection::host_to_device)
                   pipeline.host_to_device(device_memory + begin, host + begin, end - begin, stop);
                 else
                   pipeline.device_to_host(host + begin, device_memory + begin, end - begin, stop, drain);
               });
}

}  // namespace gpusel::detail
