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
// (Note [Fresh host memory], detail/data/memory/memory.hpp), where a drain into pages that
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
// is copied into with plain memcpy. A block the user filled by hand
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

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/memory/host_block_cache-inl.hpp"
#endif
