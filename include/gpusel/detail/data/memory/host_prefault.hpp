// Whether the copy engine prefaults fresh host memory before draining a GPU's
// data into it, decided once per process from the system's transparent huge
// page setting (or GPUSEL_PREFAULT), and the prefault itself: Note [Prefaulting
// fresh host memory].
// This header includes no CUDA header.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel::detail {

// Note [Prefaulting fresh host memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A copy from a GPU into a new host buffer is limited by the page faults of
// the fresh destination (Note [Fresh host memory]). Where the kernel grants
// the buffer's MADV_HUGEPAGE (transparent_hugepage "[always]" or "[madvise]"),
// a fault zeroes 2 MiB inside the drain's own memcpy, and prefaulting would
// walk the memory twice: the engine does not. Elsewhere ("[never]", or no THP)
// each worker populates the chunk it is about to drain with MADV_POPULATE_WRITE
// while that chunk's DMA is in flight: the kernel takes the faults in one call,
// not one trap per page inside memcpy. Only memory gpusel has just allocated is
// prefaulted. Decided once per process; GPUSEL_PREFAULT=auto|always|never
// overrides it, and any other value makes the copies that read it throw Error
// naming it, rather than run with a policy the user did not ask for.

// The word in brackets of /sys/kernel/mm/transparent_hugepage/enabled.
enum class TransparentHugePages : std::uint8_t { always, madvise, never, unknown };

// GPUSEL_PREFAULT: auto (the system's setting decides), always, never.
enum class PrefaultPolicy : std::uint8_t { automatic, always, never };

// madvise's shape, so that a test can say what the kernel answers.
using AdviseFunction = int (*)(void* address, std::size_t bytes, int advice) noexcept;

// MADV_POPULATE_WRITE (Linux 5.14), spelled here for headers that predate it.
inline constexpr int kAdvisePopulateWrite = 23;

// The process's decision and what it was made from (Note [One state per process]).
// Plain data: a child made by fork() keeps it (same system, same answer), and
// there is nothing to forget.
struct HostPrefaultSettings {
  std::atomic<bool> prefault{false};
  // The kernel answered MADV_POPULATE_WRITE with EINVAL: touch pages instead.
  std::atomic<bool> populate_missing{false};
  // Bytes prefaulted so far, by either way (for tests and the benchmarks' line).
  std::atomic<std::uint64_t> prefaulted_bytes{0};
  TransparentHugePages huge_pages = TransparentHugePages::unknown;
  PrefaultPolicy policy = PrefaultPolicy::automatic;
  std::size_t page_bytes = 4096;
  // GPUSEL_PREFAULT as read (truncated), or "" when unset.
  char environment_value[48] = {};
  // "GPUSEL_PREFAULT=<value>: why", or "" when the variable is unset or valid.
  char environment_problem[128] = {};
};

// The setting in `text`, the file's content ("always [madvise] never\n"); unknown without one bracketed word known.
[[nodiscard]] GPUSEL_API TransparentHugePages parse_transparent_huge_pages(const char* text) noexcept;

// "auto", "always" or "never" into `policy`; false for anything else, leaving it alone.
[[nodiscard]] GPUSEL_API bool parse_prefault_policy(const char* text, PrefaultPolicy& policy) noexcept;

// Whether fresh host memory is prefaulted under `policy` on a system whose setting is `huge_pages`.
[[nodiscard]] GPUSEL_API bool should_prefault(TransparentHugePages huge_pages, PrefaultPolicy policy) noexcept;

// Fills `settings` from GPUSEL_PREFAULT's value (`environment`, null when
// unset) and the THP file's content (`huge_pages_text`, null when unreadable).
GPUSEL_API void decide_prefault(HostPrefaultSettings& settings, const char* environment,
                                const char* huge_pages_text) noexcept;

// The process's settings, decided the first time they are asked for.
GPUSEL_API HostPrefaultSettings& host_prefault_settings() noexcept;

// Whether copies prefault fresh host memory. Throws Error when GPUSEL_PREFAULT
// has a value that is not auto, always or never, naming it.
[[nodiscard]] GPUSEL_API bool prefault_fresh_host_memory();

// Prefaults the whole pages inside [begin, begin + bytes), whose contents are
// kept, through `advise` (madvise), or by writing one byte of each page when
// the kernel lacks MADV_POPULATE_WRITE (EINVAL, remembered for the process;
// Note [Prefaulting fresh host memory]). Any other failure leaves the pages to
// fault during the copy. Never throws.
GPUSEL_API void prefault_pages(void* begin, std::size_t bytes, HostPrefaultSettings& settings,
                               AdviseFunction advise) noexcept;
GPUSEL_API void prefault_pages(void* begin, std::size_t bytes) noexcept;

// "prefault=no (transparent_hugepage [madvise], GPUSEL_PREFAULT unset)", for
// the benchmarks' and the GPU check's record of the decision.
[[nodiscard]] GPUSEL_API std::string describe_prefault();

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/memory/host_prefault-inl.hpp"
#endif
