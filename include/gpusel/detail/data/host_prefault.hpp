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
// the fresh destination (Note [Fresh host memory], detail/data/memory.hpp). How
// to take them best depends on whether the kernel gives the buffer's
// madvise(MADV_HUGEPAGE) huge pages, which the system's setting says
// (/sys/kernel/mm/transparent_hugepage/enabled, e.g. "always [madvise] never"):
//  - "[always]" or "[madvise]": huge pages. A fault zeroes 2 MiB at memory
//    speed, inside the drain's own memcpy; prefaulting first was slower (the
//    memory is then walked twice), so the engine does not;
//  - "[never]", or no such file (a kernel without THP): 4 KiB pages, one fault
//    each. Each worker then populates the chunk it is about to drain with
//    madvise(MADV_POPULATE_WRITE) (Linux 5.14) while that chunk's DMA is still
//    in flight: the kernel takes the faults in one call, not one trap per page
//    inside memcpy, which took 30% less CPU than faulting during the copy on a
//    2-core x86 host. Where the kernel predates it (EINVAL), the worker writes
//    one byte of each page instead (an atomic or of 0: the contents are kept),
//    and the process remembers not to ask again. Any other failure leaves the
//    pages to fault during the copy, as they would have.
// The faults are spread over the workers because each prefaults only the
// chunks of its own part. Decided once per process, the first time a copy
// needs it; GPUSEL_PREFAULT=auto|always|never overrides the decision ("auto",
// or unset: the rule above). Any other value is an error: the copies that
// would read it throw Error naming it, rather than run with a policy the user
// did not ask for. The decision is plain data, so a child made by fork()
// keeps it (same system, same answer), and there is nothing to forget.
// Drains into host memory gpusel did not just allocate (a reused block, a
// user's pointer) are not prefaulted: their pages are already there, or
// gpusel cannot know (detail/data/host_block_cache.hpp).

// The word in brackets of /sys/kernel/mm/transparent_hugepage/enabled.
enum class TransparentHugePages : std::uint8_t { always, madvise, never, unknown };

// GPUSEL_PREFAULT: auto (the system's setting decides), always, never.
enum class PrefaultPolicy : std::uint8_t { automatic, always, never };

// madvise's shape, so that a test can say what the kernel answers.
using AdviseFunction = int (*)(void* address, std::size_t bytes, int advice) noexcept;

// MADV_POPULATE_WRITE (Linux 5.14), spelled here for headers that predate it.
inline constexpr int kAdvisePopulateWrite = 23;

// The process's decision and what it was made from (Note [One state per process]).
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
// kept, through `advise` (madvise), or by writing each page when the kernel
// lacks MADV_POPULATE_WRITE (Note [Prefaulting fresh host memory]). Never throws.
GPUSEL_API void prefault_pages(void* begin, std::size_t bytes, HostPrefaultSettings& settings,
                               AdviseFunction advise) noexcept;
GPUSEL_API void prefault_pages(void* begin, std::size_t bytes) noexcept;

// "prefault=no (transparent_hugepage [madvise], GPUSEL_PREFAULT unset)", for
// the benchmarks' and the GPU check's record of the decision.
[[nodiscard]] GPUSEL_API std::string describe_prefault();

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/host_prefault-inl.hpp"
#endif
