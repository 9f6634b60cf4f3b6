// The definitions of gpusel/detail/data/memory/host_prefault.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// This header includes no CUDA header.
#pragma once

#include "gpusel/detail/data/memory/host_prefault.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/core/process_state.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

GPUSEL_API TransparentHugePages parse_transparent_huge_pages(const char* text) noexcept {
  if (text == nullptr) return TransparentHugePages::unknown;
  const char* open = std::strchr(text, '[');
  const char* close = open != nullptr ? std::strchr(open, ']') : nullptr;
  if (close == nullptr) return TransparentHugePages::unknown;
  const std::string_view word(open + 1, static_cast<std::size_t>(close - open - 1));
  if (word == "always") return TransparentHugePages::always;
  if (word == "madvise") return TransparentHugePages::madvise;
  if (word == "never") return TransparentHugePages::never;
  return TransparentHugePages::unknown;
}

GPUSEL_API bool parse_prefault_policy(const char* text, PrefaultPolicy& policy) noexcept {
  if (text == nullptr) return false;
  const std::string_view word(text);
  if (word == "auto") {
    policy = PrefaultPolicy::automatic;
  } else if (word == "always") {
    policy = PrefaultPolicy::always;
  } else if (word == "never") {
    policy = PrefaultPolicy::never;
  } else {
    return false;
  }
  return true;
}

GPUSEL_API bool should_prefault(TransparentHugePages huge_pages, PrefaultPolicy policy) noexcept {
  if (policy != PrefaultPolicy::automatic) return policy == PrefaultPolicy::always;
  // Huge pages for madvise(MADV_HUGEPAGE) memory: the faults are cheap enough already.
  return huge_pages != TransparentHugePages::always && huge_pages != TransparentHugePages::madvise;
}

GPUSEL_API void decide_prefault(HostPrefaultSettings& settings, const char* environment,
                                const char* huge_pages_text) noexcept {
  settings.huge_pages = parse_transparent_huge_pages(huge_pages_text);
  settings.policy = PrefaultPolicy::automatic;
  settings.environment_problem[0] = '\0';
  (void)std::snprintf(settings.environment_value, sizeof settings.environment_value, "%s",
                      environment != nullptr ? environment : "");
  if (environment != nullptr && *environment != '\0' && !parse_prefault_policy(environment, settings.policy)) {
    (void)std::snprintf(settings.environment_problem, sizeof settings.environment_problem,
                        "GPUSEL_PREFAULT=%.40s: expected auto, always or never", environment);
  }
  settings.prefault.store(should_prefault(settings.huge_pages, settings.policy), std::memory_order_relaxed);
  const long page = sysconf(_SC_PAGESIZE);
  settings.page_bytes = page > 0 ? static_cast<std::size_t>(page) : 4096;
}

GPUSEL_API HostPrefaultSettings& host_prefault_settings() noexcept {
  static auto& settings =
      process_object<HostPrefaultSettings>(ProcessObject::host_prefault, [](HostPrefaultSettings& made) noexcept {
        char text[128] = {};
        const char* huge_pages_text = nullptr;
        if (std::FILE* file = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r")) {
          if (std::fgets(text, sizeof text, file) != nullptr) huge_pages_text = text;
          (void)std::fclose(file);
        }
        decide_prefault(made, read_environment("GPUSEL_PREFAULT"), huge_pages_text);
      });
  return settings;
}

GPUSEL_API bool prefault_fresh_host_memory() {
  const HostPrefaultSettings& settings = host_prefault_settings();
  if (settings.environment_problem[0] != '\0')
    throw Error(std::string("gpusel copy engine: ") + settings.environment_problem);
  return settings.prefault.load(std::memory_order_relaxed);
}

inline int system_madvise(void* address, std::size_t bytes, int advice) noexcept {
  return madvise(address, bytes, advice);
}

GPUSEL_API void prefault_pages(void* begin, std::size_t bytes, HostPrefaultSettings& settings,
                               AdviseFunction advise) noexcept {
  const std::size_t page = settings.page_bytes;
  const auto start = reinterpret_cast<std::uintptr_t>(begin);
  const std::uintptr_t first = (start + page - 1) / page * page;  // the pages wholly inside the range
  const std::uintptr_t last = (start + bytes) / page * page;
  if (bytes == 0 || first >= last) return;
  char* const pages = static_cast<char*>(begin) + (first - start);
  const std::size_t length = last - first;
  if (!settings.populate_missing.load(std::memory_order_relaxed)) {
    if (advise(pages, length, kAdvisePopulateWrite) == 0) {
      settings.prefaulted_bytes.fetch_add(length, std::memory_order_relaxed);
      return;
    }
    if (errno != EINVAL) return;  // e.g. ENOMEM: the copy will fault, and fail, as it would have
    settings.populate_missing.store(true, std::memory_order_relaxed);
  }
  // An atomic or-with-zero takes the write fault without changing a byte another
  // thread may be storing there at the same time. The pages hold no std::atomic
  // object, and C++17 has no std::atomic_ref: the builtin is what it would call.
  for (std::size_t offset = 0; offset < length; offset += page)
    (void)__atomic_fetch_or(pages + offset, char{0}, __ATOMIC_RELAXED);  // one write fault, contents kept
  settings.prefaulted_bytes.fetch_add(length, std::memory_order_relaxed);
}

GPUSEL_API void prefault_pages(void* begin, std::size_t bytes) noexcept {
  prefault_pages(begin, bytes, host_prefault_settings(), &system_madvise);
}

GPUSEL_API std::string describe_prefault() {
  const HostPrefaultSettings& settings = host_prefault_settings();
  static constexpr const char* kPages[] = {"[always]", "[madvise]", "[never]", "unknown"};
  static constexpr const char* kPolicies[] = {"auto", "always", "never"};
  std::string text =
      std::string("prefault=") + (settings.prefault.load() ? "yes" : "no") + " (transparent_hugepage " +
      kPages[static_cast<int>(settings.huge_pages)] + ", GPUSEL_PREFAULT " +
      (settings.environment_value[0] == '\0' ? std::string("unset") : std::string("=") + settings.environment_value) +
      ": policy " + kPolicies[static_cast<int>(settings.policy)] + ")";
  if (settings.environment_problem[0] != '\0') text += std::string(" error: ") + settings.environment_problem;
  if (settings.populate_missing.load()) text += " MADV_POPULATE_WRITE missing: pages touched instead";
  return text;
}

}  // namespace gpusel::detail
