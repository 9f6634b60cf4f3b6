// The large pageable host blocks gpusel allocates: the live ones, with whether
// gpusel has written them yet, and a small capped cache of freed ones that the
// next allocations reuse (Note [The host block cache]); and how the copy
// engine drains a GPU's data into one (plan_host_drain).
// This header includes no CUDA header.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/core/fork_safe_mutex.hpp"

namespace gpusel::detail {

// Note [The host block cache]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `buffer.to(gpusel::cpu())` in a loop allocates a new host array each time,
// and draining a GPU's data into fresh pages is limited by their page faults
// (Note [Fresh host memory], detail/data/memory.hpp), where a drain into pages that
// are already there runs at memory speed (and faster still with streaming
// stores, Note [Streaming stores]). So freed pageable blocks of
// kHostBlockCacheMinBytes or more (the 2 MiB-aligned ones, advised
// MADV_HUGEPAGE) are not given back at once: up to kMaxCachedHostBlocks of
// them, and at most the cache's byte limit in all, wait for the next
// allocation of the same or a slightly smaller size (at most 1/8 of the block
// unused), which takes the smallest that fits. Only freed blocks enter, so a
// block is never handed out while a Buffer still owns it.
//
// Why a cap, and this one: cached memory is resident memory the program no
// longer uses. Other processes, the OOM killer and a job scheduler count it,
// and a host runs one process per GPU (8 on an H200 box), so each keeps
// little: by default 2 GiB or 1/16 of physical memory, whichever is less,
// enough for the large tensors a loop cycles through, not a model's worth of
// RAM; and 8 blocks, so giving one back never allocates (a fixed array) and
// finding one is a short scan. GPUSEL_HOST_CACHE sets the limit in bytes
// ("512MiB", "4GiB", Note [Memory size grammar]; "0" turns the cache off),
// read once; a value that is not a size is an error: allocating a large host
// block throws Error naming it. A block larger than the limit is freed at once;
// one that does not fit pushes out the blocks freed longest ago.
//
// The cache also keeps, for each live block, whether gpusel has written it
// yet, so the copy engine knows how to drain into it (plan_host_drain): a
// fresh block is prefaulted when the process decided so (Note [Prefaulting
// fresh host memory]); a reused one, or one gpusel has drained into before,
// takes streaming stores; memory gpusel did not allocate (a user's pointer)
// is copied into with memcpy, as before. A block the user filled by hand
// still counts as fresh: the prefault then only walks pages that are there.
//
// release_cached_resources() frees the cached blocks. When an allocation of a
// large block fails, the cache is emptied and the allocation tried once more.
// The cache is one per process (host memory is the process's, whichever CUDA
// runtime copies into it), thread-safe (a mutex; nothing blocks under it).
// At exit it frees its blocks and closes, so later frees (a static Buffer's)
// go straight to free(): LeakSanitizer and valgrind find nothing held. In a
// child made by fork() it forgets everything without freeing (the lists may
// have been half-updated by another thread at the fork): the child's copies of
// the cached blocks are pages shared with the parent until written, and a
// live block freed in the child is free()d as memory the cache does not know.
inline constexpr std::size_t kHostBlockCacheMinBytes = std::size_t{4} << 20;
inline constexpr std::size_t kHostBlockAlignment = std::size_t{2} << 20;
inline constexpr std::size_t kMaxCachedHostBlocks = 8;
inline constexpr std::size_t kDefaultHostCacheBytes = std::size_t{2} << 30;

// What gpusel knows of a host range's pages.
enum class HostPages : std::uint8_t { unknown, fresh, faulted };

// How the copy engine writes one device->host copy's host memory.
struct HostDrain {
  bool prefault = false;   // prefault each chunk before draining it
  bool streaming = false;  // streaming stores (Note [Streaming stores])
};

// The default byte limit: kDefaultHostCacheBytes or 1/16 of physical memory, whichever is less.
[[nodiscard]] GPUSEL_API std::size_t default_host_cache_bytes() noexcept;

// GPUSEL_HOST_CACHE's value (`text`, null when unset) into `bytes` (left
// alone when unset); false, with why in `problem`, when it is not a size.
[[nodiscard]] GPUSEL_API bool parse_host_cache_limit(const char* text, std::size_t& bytes,
                                                     std::string& problem) noexcept;

class HostBlocks {
 public:
  // The process's cache, made (and GPUSEL_HOST_CACHE read) the first time.
  GPUSEL_API static HostBlocks& instance() noexcept;
  // The process's cache, or nullptr when nothing has made it yet.
  GPUSEL_API static HostBlocks* find() noexcept;

  // Throws Error when GPUSEL_HOST_CACHE could not be used, naming it.
  GPUSEL_API void check_environment() const;

  // A cached block of `bytes` to bytes + bytes / 8 (`bytes` a multiple of
  // kHostBlockAlignment), the smallest that fits, now live; nullptr when none fits.
  [[nodiscard]] GPUSEL_API void* take(std::size_t bytes) noexcept;
  // Records a block of `bytes` just allocated with aligned_alloc, not yet
  // written. Best effort: without memory for the record the block is simply unknown.
  GPUSEL_API void add_fresh(void* block, std::size_t bytes) noexcept;
  // Takes back a live block when the cache knows it (then keeps it, or frees
  // it): true; false for memory it does not know, which the caller frees.
  [[nodiscard]] GPUSEL_API bool give_back(void* block) noexcept;
  // What gpusel knows of [begin, begin + bytes), which a copy is about to
  // write; a fresh block that the range covers is counted as written from now on.
  [[nodiscard]] GPUSEL_API HostPages claim(const void* begin, std::size_t bytes) noexcept;

  // Frees every cached block (release_cached_resources()).
  GPUSEL_API void release_cached() noexcept;
  // The byte limit (GPUSEL_HOST_CACHE's); 0 turns the cache off. Frees what no longer fits.
  GPUSEL_API void set_limit(std::size_t bytes) noexcept;

  struct Counts {
    std::size_t cached_blocks = 0;
    std::size_t cached_bytes = 0;
    std::size_t live_blocks = 0;
    std::size_t limit_bytes = 0;
    std::uint64_t reused = 0;  // allocations served from the cache
  };
  [[nodiscard]] GPUSEL_API Counts counts() noexcept;

  // Bytes drained with streaming stores (for tests and the benchmarks' line).
  std::atomic<std::uint64_t> streamed_bytes{0};

  HostBlocks() = default;
  ~HostBlocks() = default;  // frees nothing: close() at exit does (the process's object is never destroyed)
  HostBlocks(const HostBlocks&) = delete;  // one per process
  HostBlocks& operator=(const HostBlocks&) = delete;

 private:
  struct Block {
    void* pointer = nullptr;
    std::size_t bytes = 0;
    HostPages pages = HostPages::unknown;
  };

  // Frees every cached block and the live list; later blocks go to free() (at exit).
  GPUSEL_API void close() noexcept;
  // In a forked child (Note [Caches across fork()]): plain stores only.
  GPUSEL_API void forget() noexcept;
  // Appends to the live list, under the lock; false without memory.
  GPUSEL_API bool add_live(const Block& block) noexcept;
  // Moves cached blocks out until `bytes` more fit, under the lock, into `evicted`.
  GPUSEL_API std::size_t make_room(std::size_t bytes, Block* evicted) noexcept;

  ForkSafeMutex mutex_;
  Block cached_[kMaxCachedHostBlocks]{};  // oldest first
  std::size_t cached_count_ = 0;
  std::size_t cached_bytes_ = 0;
  Block* live_ = nullptr;  // live_[0, live_count_), in no order
  std::size_t live_count_ = 0;
  std::size_t live_capacity_ = 0;
  std::size_t limit_bytes_ = 0;
  std::uint64_t reused_ = 0;
  bool closed_ = false;
  char environment_problem_[160] = {};
  // What a forked child forgot (forget()): never read or freed, kept here only so that it stays reachable
  // (LeakSanitizer, in a child that exits normally). A grandchild's fork overwrites it.
  Block* forgotten_live_ = nullptr;
  Block forgotten_cached_[kMaxCachedHostBlocks]{};
};

// How to drain a GPU's data into [host, host + bytes) (Note [The host block
// cache]). Throws Error when GPUSEL_PREFAULT has a value it cannot use.
[[nodiscard]] GPUSEL_API HostDrain plan_host_drain(void* host, std::size_t bytes);

// Copies one drained chunk as `drain` says.
GPUSEL_API void drain_chunk(const HostDrain& drain, void* destination, const void* source, std::size_t bytes) noexcept;

// "host cache: limit 2147483648 bytes, 8 blocks; streaming stores: yes (SSE2)", for the benchmarks' line.
[[nodiscard]] GPUSEL_API std::string describe_host_block_cache();

}  // namespace gpusel::detail

#if GPUSEL_DEFINITIONS

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/core/process_state.hpp"
#include "gpusel/detail/data/host_prefault.hpp"
#include "gpusel/detail/data/streaming_copy.hpp"
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

#endif  // GPUSEL_DEFINITIONS
