// The definitions of gpusel/detail/data/memory/host_block_cache.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// This header includes no CUDA header.
#pragma once

#include "gpusel/detail/data/memory/host_block_cache.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/core/process_state.hpp"
#include "gpusel/detail/data/memory/host_prefault.hpp"
#include "gpusel/detail/data/memory/streaming_copy.hpp"
#include "gpusel/error.hpp"
#include "gpusel/memory_size.hpp"

namespace gpusel::detail {

GPUSEL_API std::size_t default_host_cache_bytes() noexcept {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return kDefaultHostCacheBytes;
  const std::uint64_t sixteenth = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 16;
  return sixteenth < kDefaultHostCacheBytes ? static_cast<std::size_t>(sixteenth) : kDefaultHostCacheBytes;
}

GPUSEL_API bool parse_host_cache_limit(const char* text, std::size_t& bytes, std::string& problem) noexcept {
  if (text == nullptr) return true;
  try {
    const std::uint64_t value = parse_memory_size(text);
    bytes = static_cast<std::size_t>(value);
    return true;
  } catch (const std::exception& error) {
    try {
      problem = std::string("GPUSEL_HOST_CACHE=") + text + ": not a size (" + error.what() + ")";
    } catch (...) {  // no memory for the text
    }
    return false;
  }
}

GPUSEL_API HostBlocks* HostBlocks::find() noexcept {
  return static_cast<HostBlocks*>(
      find_object(process_state().objects[static_cast<int>(ProcessObject::host_blocks)], record_layout<HostBlocks>()));
}

GPUSEL_API HostBlocks& HostBlocks::instance() noexcept {
  static HostBlocks* const blocks = [] {
    ForkState& fork = fork_state();  // made first: shared_object holds the state's mutex while it makes the cache
    return static_cast<HostBlocks*>(shared_object(
        process_state().objects[static_cast<int>(ProcessObject::host_blocks)], record_layout<HostBlocks>(),
        [&fork]() noexcept -> void* {
          auto* made = new (std::nothrow) HostBlocks;
          if (made == nullptr) {
            static HostBlocks own;
            made = &own;
          }
          made->limit_bytes_ = default_host_cache_bytes();
          std::string problem;
          if (!parse_host_cache_limit(read_environment("GPUSEL_HOST_CACHE"), made->limit_bytes_, problem)) {
            made->limit_bytes_ = 0;
            (void)problem.copy(made->environment_problem_, sizeof made->environment_problem_ - 1);
          }
          forget_in_forked_child(
              fork, [](void* object) noexcept { static_cast<HostBlocks*>(object)->forget(); }, made);
          (void)std::atexit([] {
            if (HostBlocks* self = find()) self->close();
          });
          return made;
        }));
  }();
  return *blocks;
}

GPUSEL_API void HostBlocks::check_environment() const {
  if (environment_problem_[0] != '\0') throw Error(std::string("gpusel host memory: ") + environment_problem_);
}

GPUSEL_API bool HostBlocks::add_live(const Block& block) noexcept {
  if (live_count_ == live_capacity_) {
    const std::size_t capacity = live_capacity_ == 0 ? 16 : live_capacity_ * 2;
    auto* grown = new (std::nothrow) Block[capacity];
    if (grown == nullptr) return false;
    for (std::size_t i = 0; i < live_count_; ++i) grown[i] = live_[i];
    delete[] live_;
    live_ = grown;
    live_capacity_ = capacity;
  }
  live_[live_count_++] = block;
  return true;
}

GPUSEL_API void* HostBlocks::take(std::size_t bytes) noexcept {
  const std::lock_guard<ForkSafeMutex> lock(mutex_);
  std::size_t best = kMaxCachedHostBlocks;
  for (std::size_t i = 0; i < cached_count_; ++i) {
    const std::size_t size = cached_[i].bytes;
    if (size >= bytes && size - bytes <= size / 8 && (best == kMaxCachedHostBlocks || size < cached_[best].bytes))
      best = i;
  }
  if (best == kMaxCachedHostBlocks) return nullptr;
  Block block = cached_[best];
  for (std::size_t i = best + 1; i < cached_count_; ++i) cached_[i - 1] = cached_[i];
  --cached_count_;
  cached_bytes_ -= block.bytes;
  ++reused_;
  block.pages = HostPages::faulted;
  (void)add_live(block);  // without a record it is freed as unknown memory: still correct
  return block.pointer;
}

GPUSEL_API void HostBlocks::add_fresh(void* block, std::size_t bytes) noexcept {
  const std::lock_guard<ForkSafeMutex> lock(mutex_);
  if (!closed_) (void)add_live(Block{block, bytes, HostPages::fresh});
}

GPUSEL_API std::size_t HostBlocks::make_room(std::size_t bytes, Block* evicted) noexcept {
  std::size_t count = 0;
  while (cached_count_ > 0 && (cached_count_ == kMaxCachedHostBlocks || cached_bytes_ + bytes > limit_bytes_)) {
    evicted[count++] = cached_[0];
    cached_bytes_ -= cached_[0].bytes;
    for (std::size_t i = 1; i < cached_count_; ++i) cached_[i - 1] = cached_[i];
    --cached_count_;
  }
  return count;
}

GPUSEL_API bool HostBlocks::give_back(void* block) noexcept {
  if (reinterpret_cast<std::uintptr_t>(block) % kHostBlockAlignment != 0) return false;  // small: never recorded
  Block evicted[kMaxCachedHostBlocks + 1];
  std::size_t evicted_count = 0;
  {
    const std::lock_guard<ForkSafeMutex> lock(mutex_);
    std::size_t index = 0;
    while (index < live_count_ && live_[index].pointer != block) ++index;
    if (index == live_count_) return false;
    const Block found = live_[index];
    live_[index] = live_[--live_count_];
    if (closed_ || found.bytes > limit_bytes_) {
      evicted[evicted_count++] = found;
    } else {
      evicted_count = make_room(found.bytes, evicted);
      cached_[cached_count_++] = found;
      cached_bytes_ += found.bytes;
    }
  }
  for (std::size_t i = 0; i < evicted_count; ++i) std::free(evicted[i].pointer);
  return true;
}

GPUSEL_API HostPages HostBlocks::claim(const void* begin, std::size_t bytes) noexcept {
  const auto* first = static_cast<const char*>(begin);
  const std::lock_guard<ForkSafeMutex> lock(mutex_);
  for (std::size_t i = 0; i < live_count_; ++i) {
    Block& block = live_[i];
    const auto* start = static_cast<const char*>(block.pointer);
    if (first < start || first >= start + block.bytes || bytes > block.bytes - static_cast<std::size_t>(first - start))
      continue;
    const HostPages pages = block.pages;
    // Written from now on when the copy covers all of it but the rounding (block.bytes is rounded up to 2 MiB).
    if (first == start && bytes + kHostBlockAlignment > block.bytes) block.pages = HostPages::faulted;
    return pages;
  }
  return HostPages::unknown;
}

GPUSEL_API void HostBlocks::release_cached() noexcept {
  Block cached[kMaxCachedHostBlocks];
  std::size_t count = 0;
  {
    const std::lock_guard<ForkSafeMutex> lock(mutex_);
    for (std::size_t i = 0; i < cached_count_; ++i) cached[i] = cached_[i];
    count = cached_count_;
    cached_count_ = 0;
    cached_bytes_ = 0;
  }
  for (std::size_t i = 0; i < count; ++i) std::free(cached[i].pointer);
}

GPUSEL_API void HostBlocks::set_limit(std::size_t bytes) noexcept {
  Block evicted[kMaxCachedHostBlocks + 1];
  std::size_t count = 0;
  {
    const std::lock_guard<ForkSafeMutex> lock(mutex_);
    limit_bytes_ = bytes;
    count = make_room(0, evicted);
  }
  for (std::size_t i = 0; i < count; ++i) std::free(evicted[i].pointer);
}

GPUSEL_API HostBlocks::Counts HostBlocks::counts() noexcept {
  const std::lock_guard<ForkSafeMutex> lock(mutex_);
  return Counts{cached_count_, cached_bytes_, live_count_, limit_bytes_, reused_};
}

GPUSEL_API void HostBlocks::close() noexcept {
  Block* live = nullptr;
  {
    const std::lock_guard<ForkSafeMutex> lock(mutex_);
    closed_ = true;
    live = live_;
    live_ = nullptr;
    live_count_ = 0;
    live_capacity_ = 0;
  }
  delete[] live;  // the live blocks stay their owners'; freeing one later finds no record and free()s it
  release_cached();
}

GPUSEL_API void HostBlocks::forget() noexcept {
  mutex_.forget();
  for (std::size_t i = 0; i < kMaxCachedHostBlocks; ++i) forgotten_cached_[i] = cached_[i];
  cached_count_ = 0;
  cached_bytes_ = 0;
  forgotten_live_ = live_;  // leaked, not freed: another thread may have been growing it at the fork
  live_ = nullptr;
  live_count_ = 0;
  live_capacity_ = 0;
}

GPUSEL_API HostDrain plan_host_drain(void* host, std::size_t bytes) {
  HostDrain drain;
  const bool prefault = prefault_fresh_host_memory();  // throws for a GPUSEL_PREFAULT it cannot use
  HostBlocks* const blocks = HostBlocks::find();
  const HostPages pages = blocks != nullptr ? blocks->claim(host, bytes) : HostPages::unknown;
  drain.prefault = pages == HostPages::fresh && prefault;
  drain.streaming = pages == HostPages::faulted && kStreamingStores;
  return drain;
}

GPUSEL_API void drain_chunk(const HostDrain& drain, void* destination, const void* source, std::size_t bytes) noexcept {
  if (!drain.streaming) {
    std::memcpy(destination, source, bytes);
    return;
  }
  streaming_copy(destination, source, bytes);
  HostBlocks::instance().streamed_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

GPUSEL_API std::string describe_host_block_cache() {
  const HostBlocks::Counts counts = HostBlocks::instance().counts();
  return "host_cache=" + std::to_string(counts.limit_bytes) + "B/" + std::to_string(kMaxCachedHostBlocks) +
         "blocks streaming_stores=" + (kStreamingStores ? "yes" : "no");
}

}  // namespace gpusel::detail
