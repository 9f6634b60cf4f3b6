// The definitions of gpusel/detail/data/buffer/batched_copy.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/data/buffer/batched_copy.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gpusel/copy_engine_options.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/forked_child.hpp"
#include "gpusel/detail/data/engine/copy_engine.hpp"
#include "gpusel/detail/data/engine/engine_cache.hpp"
#include "gpusel/detail/data/engine/peer_access.hpp"
#include "gpusel/detail/data/engine/staged_copy.hpp"
#include "gpusel/detail/data/engine/staging_pool.hpp"
#include "gpusel/guard.hpp"

namespace gpusel::detail {

// Pageable buffers up to this size are batched, larger ones go through the
// copy engine (Note [Moving many buffers at once]). It is the engine's own
// kDirectCopyBytes: at or below it the engine copies a buffer with one
// cudaMemcpy on one thread anyway, so packing it loses no parallelism and
// saves its call, staging and wait; above it the engine's threads fill staging
// in parallel, faster than the one thread that packs a batch.
inline constexpr std::size_t kLargestBatchedPageableBytes = kDirectCopyBytes;

// A stream of one GPU, with the staging chunks and the list of copies of the
// batches queued on it. The stream is the engine cache's stream of worker 0
// when the cache is free (Note [The engine cache]), else one of its own; it is
// a blocking stream, so the copies come after work on the legacy default
// stream, as the engine's cudaMemcpy does. The destructor waits for copies
// still in flight, then gives the chunks back; if it cannot wait it frees the
// chunks (cudaFreeHost waits) and destroys the stream rather than keep it.
// The caller holds a DeviceGuard on the stream's device.
class CopyBatch {
 public:
  CopyBatch(const MemoryPlace& to, const MemoryPlace& from, EngineCache* cache, const CopyEngineOptions& options)
      : to_(to),
        from_(from),
        resources_(cache != nullptr ? &cache->resources(0, stream_device()) : &own_),
        chunk_bytes_(options.chunk_bytes),
        keep_(std::max(options.host_to_device_workers, options.device_to_host_workers) * options.slots) {
    if (resources_->stream == nullptr) {
      const cudaError_t status = cudaStreamCreateWithFlags(&resources_->stream, cudaStreamDefault);
      if (status != cudaSuccess) fail(status, "cudaStreamCreateWithFlags");
    }
  }

  ~CopyBatch() {
    bool finished = true;
    if (in_flight_ && cudaStreamSynchronize(resources_->stream) != cudaSuccess) {
      (void)cudaGetLastError();
      finished = false;
    }
    for (StagingLease& chunk : chunks_) chunk.end(finished);
    if (!finished || resources_ == &own_) resources_->destroy();
  }

  CopyBatch(const CopyBatch&) = delete;  // owns a stream and chunks
  CopyBatch& operator=(const CopyBatch&) = delete;

  // The GPU whose stream carries the copies: the target's, else the source's.
  int stream_device() const noexcept { return to_.is_host() ? from_.device : to_.device; }
  std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }

  // Staging chunk `slot` (< kMaxCopySlots), pinned on first use.
  char* chunk(std::size_t slot) {
    if (chunks_[slot].get() == nullptr)
      chunks_[slot] = StagingLease(StagingPool::instance().acquire(chunk_bytes_), chunk_bytes_, keep_);
    return chunks_[slot].get();
  }

  // Adds a copy to the next batch.
  void add(void* destination, const void* source, std::size_t bytes) {
    destinations_.push_back(destination);
    sources_.push_back(const_cast<void*>(source));  // void**: 12.8's and 13.0's parameter types both accept it
    sizes_.push_back(bytes);
    ++copies_sent_;
    bytes_sent_ += bytes;
  }

  // Queues the copies added since the last send().
  void send() {
    if (sizes_.empty()) return;
    in_flight_ = true;  // from the first call on: a failed batch may have queued some of its copies
    if (!send_as_one_call()) send_one_by_one();
    destinations_.clear();
    sources_.clear();
    sizes_.clear();
  }

  // Waits for everything sent.
  void wait() {
    const cudaError_t status = cudaStreamSynchronize(resources_->stream);
    if (status != cudaSuccess) fail(status, "cudaStreamSynchronize");
    in_flight_ = false;
    copies_sent_ = 0;
    bytes_sent_ = 0;
  }

 private:
  // Throws the failure of `call`, naming the copies sent since the last wait.
  [[noreturn]] void fail(cudaError_t status, const char* call) const {
    throw cuda_error(status, std::string("gpusel copy engine: ") + call,
                     std::to_string(copies_sent_) + " copies (" + describe_copy(bytes_sent_, to_, from_) + ")");
  }

  // One cudaMemcpyBatchAsync (Note [Batched copies where the runtime has
  // them]); false when the runtime has none.
  bool send_as_one_call() {
#if CUDART_VERSION >= 12080
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    std::size_t first_copy = 0;  // attributes applies to copies 0..count-1
#if CUDART_VERSION >= 13000
    const cudaError_t status = cudaMemcpyBatchAsync(destinations_.data(), sources_.data(), sizes_.data(), sizes_.size(),
                                                    &attributes, &first_copy, 1, resources_->stream);
#else
    std::size_t failed_copy = 0;
    const cudaError_t status = cudaMemcpyBatchAsync(destinations_.data(), sources_.data(), sizes_.data(), sizes_.size(),
                                                    &attributes, &first_copy, 1, &failed_copy, resources_->stream);
#endif
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotSupported) fail(status, "cudaMemcpyBatchAsync");
    (void)cudaGetLastError();
#endif
    return false;
  }

  void send_one_by_one() {
    const bool between_gpus = !to_.is_host() && !from_.is_host();
    const cudaMemcpyKind kind =
        to_.is_host() ? cudaMemcpyDeviceToHost : (from_.is_host() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice);
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const cudaError_t status =
          between_gpus ? cudaMemcpyPeerAsync(destinations_[i], to_.device, sources_[i], from_.device, sizes_[i],
                                             resources_->stream)
                       : cudaMemcpyAsync(destinations_[i], sources_[i], sizes_[i], kind, resources_->stream);
      if (status != cudaSuccess) fail(status, between_gpus ? "cudaMemcpyPeerAsync" : "cudaMemcpyAsync");
    }
  }

  MemoryPlace to_, from_;
  PipelineResources own_;
  PipelineResources* resources_;
  std::size_t chunk_bytes_;
  std::size_t keep_;
  bool in_flight_ = false;
  std::size_t copies_sent_ = 0;  // since the last wait, for errors
  std::size_t bytes_sent_ = 0;
  StagingLease chunks_[kMaxCopySlots];
  std::vector<void*> destinations_, sources_;
  std::vector<std::size_t> sizes_;
};

// Where the next bytes to stage are: moves[group[move]], from byte `offset`.
struct StagingCursor {
  std::size_t move = 0;
  std::size_t offset = 0;
};

// Lays the next bytes of the group's buffers into a chunk of `chunk_bytes`,
// one after another (each starting on a kHostAlignment boundary), calling
// place(move, offset, at, length) for each piece; returns when the chunk is
// full or the group done.
template <class Place>
void fill_chunk(const BufferMove* moves, const std::vector<std::size_t>& group, std::size_t chunk_bytes,
                StagingCursor& cursor, const Place& place) {
  std::size_t used = 0;
  while (cursor.move < group.size() && used < chunk_bytes) {
    const std::size_t bytes = moves[group[cursor.move]].source->bytes();
    const std::size_t length = std::min(bytes - cursor.offset, chunk_bytes - used);
    place(moves[group[cursor.move]], cursor.offset, used, length);
    used += length;
    cursor.offset += length;
    if (cursor.offset == bytes) {
      ++cursor.move;
      cursor.offset = 0;
      std::size_t aligned = chunk_bytes;
      used = round_up(used, kHostAlignment, aligned) ? std::min(aligned, chunk_bytes) : chunk_bytes;
    }
  }
}

// Copies a group of small pageable host buffers to one GPU, or from one GPU
// into new pageable buffers, through the staging chunks: to the GPU, the
// buffers are packed one after another into a chunk, whose copies go out as
// one batch while the next chunk is filled; from the GPU, a round's copies
// land in the chunks and each buffer is unpacked by memcpy after the wait.
// One wait per round of `slots` chunks (CopyEngineOptions).
inline void move_staged(BufferMove* moves, const std::vector<std::size_t>& group, const CopyEngineOptions& options,
                        CopyBatch& batch) {
  const bool to_device = !moves[group.front()].target.is_host();
  struct Unpack {
    char* destination;
    const char* staged;
    std::size_t bytes;
  };
  std::vector<Unpack> unpack;
  StagingCursor cursor;
  while (cursor.move < group.size()) {
    for (std::size_t slot = 0; slot < options.slots && cursor.move < group.size(); ++slot) {
      char* const chunk = batch.chunk(slot);
      fill_chunk(moves, group, batch.chunk_bytes(), cursor,
                 [&](const BufferMove& move, std::size_t offset, std::size_t at, std::size_t length) {
                   char* const copy = static_cast<char*>(move.copy.data()) + offset;
                   const char* const source = static_cast<const char*>(move.source->data()) + offset;
                   if (to_device) {
                     std::memcpy(chunk + at, source, length);
                     batch.add(copy, chunk + at, length);
                   } else {
                     batch.add(chunk + at, source, length);
                     unpack.push_back(Unpack{copy, chunk + at, length});
                   }
                 });
      batch.send();  // its DMA runs while the next chunk is filled
    }
    batch.wait();
    for (const Unpack& piece : unpack) std::memcpy(piece.destination, piece.staged, piece.bytes);
    unpack.clear();
  }
}

// Copies a group of pinned or device buffers in one batch, with one wait:
// they need no host copy, so no staging, whatever their size.
inline void move_direct(BufferMove* moves, const std::vector<std::size_t>& group, CopyBatch& batch) {
  for (const std::size_t index : group)
    batch.add(moves[index].copy.data(), moves[index].source->data(), moves[index].source->bytes());
  batch.send();
  batch.wait();
}

// Copies a group of moves that share their source and target places, on one
// stream (Note [Moving many buffers at once]).
inline void move_group(BufferMove* moves, const std::vector<std::size_t>& group) {
  const MemoryPlace to = moves[group.front()].target;
  const MemoryPlace from = moves[group.front()].source->place();
  enter_cuda_work("gpusel copy engine");
  const CopyEngineOptions options = copy_engine_options();
  const EngineLease lease;
  DeviceGuard guard(to.is_host() ? from.device : to.device);
  if (!to.is_host() && !from.is_host())
    (void)PeerAccess::instance().enable(to.device, from.device);  // else staged by the driver: Note [Peer copies]
  CopyBatch batch(to, from, lease.get(), options);
  const bool pageable = to.kind == MemoryKind::pageable_host || from.kind == MemoryKind::pageable_host;
  if (pageable)
    move_staged(moves, group, options, batch);
  else
    move_direct(moves, group, batch);
}

// Whether a move goes through a batch rather than the copy engine alone.
inline bool batched(const BufferMove& move) noexcept {
  const MemoryPlace& from = move.source->place();
  if (move.target.is_host() && from.is_host()) return false;
  const bool pageable = move.target.kind == MemoryKind::pageable_host || from.kind == MemoryKind::pageable_host;
  return !pageable || move.source->bytes() <= kLargestBatchedPageableBytes;
}

GPUSEL_API void move_buffers(BufferMove* moves, std::size_t count, MoveFailure& failure) {
  const auto what = [&](std::size_t i) {
    const std::size_t bytes = moves[i].source->bytes();
    return MoveCall{moves[i].target.as_device(), moves[i].elements,
                    moves[i].elements != 0 ? bytes / moves[i].elements : 0, moves[i].source->place()};
  };
  for (std::size_t i = 0; i < count; ++i) {
    failure = MoveFailure{i, 1};
    const MoveCall call = what(i);
    const MemoryPlace& from = moves[i].source->place();
    moves[i].copy = UntypedBuffer::allocate(moves[i].source->bytes(), moves[i].target, call,
                                            from.kind == MemoryKind::device ? from.device : -1);
  }
  // Groups of batched moves, each of one source place and one target place.
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < count; ++i) {
    if (moves[i].source->bytes() == 0 || !batched(moves[i])) continue;
    const auto same_places = [&](const std::vector<std::size_t>& group) {
      return moves[group.front()].target == moves[i].target &&
             moves[group.front()].source->place() == moves[i].source->place();
    };
    const auto group = std::find_if(groups.begin(), groups.end(), same_places);
    if (group != groups.end())
      group->push_back(i);
    else
      groups.push_back({i});
  }
  for (const std::vector<std::size_t>& group : groups) {
    failure = MoveFailure{group.front(), group.size()};
    move_group(moves, group);
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (moves[i].source->bytes() == 0 || batched(moves[i])) continue;
    failure = MoveFailure{i, 1};
    const MoveCall call = what(i);
    moves[i].copy.copy_from(moves[i].source->data(), moves[i].source->place(), call);
  }
}

}  // namespace gpusel::detail
