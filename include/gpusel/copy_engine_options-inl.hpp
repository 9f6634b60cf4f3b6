// The definitions of gpusel/copy_engine_options.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: data (docs/layers.md).
// This header includes no CUDA header.
#pragma once

#include "gpusel/copy_engine_options.hpp"

#include <sched.h>

#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <thread>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/detail/core/process_state.hpp"
#include "gpusel/error.hpp"

namespace gpusel {
namespace detail {

GPUSEL_API std::size_t usable_cores() noexcept {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return static_cast<std::size_t>(CPU_COUNT(&set));
#endif
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : hardware;
}

// Why `options` cannot be used, or "" when it can (zero fields are defaults).
inline std::string copy_options_problem(const CopyEngineOptions& options) {
  const auto workers = [](std::size_t n) { return n <= kMaxCopyWorkers; };  // 0: the default
  if (!workers(options.host_to_device_workers) || !workers(options.device_to_host_workers))
    return "workers must be 1 to " + std::to_string(kMaxCopyWorkers);
  if (options.slots != 0 && (options.slots < 2 || options.slots > kMaxCopySlots))
    return "slots must be 2 to " + std::to_string(kMaxCopySlots);
  if (options.chunk_bytes != 0 && (options.chunk_bytes < kMinCopyChunkBytes ||
                                   options.chunk_bytes > kMaxCopyChunkBytes || options.chunk_bytes % 4096 != 0))
    return "chunk_bytes must be a multiple of 4096 from " + std::to_string(kMinCopyChunkBytes) + " to " +
           std::to_string(kMaxCopyChunkBytes);
  return {};
}

// "10" -> 10, "2M" -> 2 MiB, "64K" -> 64 KiB; nullopt for anything else.
inline std::optional<std::size_t> read_option(const char* text, bool bytes) noexcept {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || value > (1ull << 40)) return std::nullopt;
  auto result = static_cast<std::size_t>(value);
  if (bytes && (*end == 'K' || *end == 'k')) result <<= 10, ++end;
  if (bytes && (*end == 'M' || *end == 'm')) result <<= 20, ++end;
  if (bytes && (*end == 'i' || *end == 'B')) ++end;
  if (bytes && *end == 'B') ++end;
  if (*end != '\0') return std::nullopt;
  return result;
}

// As read_option, with 0 for anything else.
inline std::size_t parse_option(const char* text, bool bytes) noexcept { return read_option(text, bytes).value_or(0); }

// GPUSEL_COPY_WORKERS sets both directions; GPUSEL_COPY_CHUNK takes bytes, or
// a K or M suffix ("2M").
inline void read_copy_environment(CopyEngineSettings& settings) noexcept {
  // `outside`: a value out of the variable's range. Written in a variable, 0 is a number out of
  // range (0 means the default only in CopyEngineOptions), and its problem names the range.
  struct Variable {
    const char* name;
    std::atomic<std::size_t>* field;
    bool bytes;
    std::size_t outside;
  };
  const Variable variables[] = {{"GPUSEL_COPY_WORKERS", &settings.host_to_device_workers, false, kMaxCopyWorkers + 1},
                                {"GPUSEL_COPY_SLOTS", &settings.slots, false, 1},
                                {"GPUSEL_COPY_CHUNK", &settings.chunk_bytes, true, 1}};
  for (const Variable& variable : variables) {
    const char* text = read_environment(variable.name);
    if (text == nullptr || *text == '\0') continue;
    const std::optional<std::size_t> read = read_option(text, variable.bytes);
    const std::size_t value = read.value_or(0);
    const bool zero = read == std::size_t{0};
    CopyEngineOptions one;
    const std::size_t checked = zero ? variable.outside : value;
    if (variable.field == &settings.host_to_device_workers) one.host_to_device_workers = checked;
    if (variable.field == &settings.slots) one.slots = checked;
    if (variable.field == &settings.chunk_bytes) one.chunk_bytes = checked;
    try {
      const std::string problem = zero         ? copy_options_problem(one) + " (unset the variable for the default)"
                                  : value == 0 ? std::string("not a number")
                                               : copy_options_problem(one);
      if (!problem.empty()) {
        if (settings.environment_problem[0] == '\0')
          (std::string(variable.name) + "=" + text + ": " + problem)
              .copy(settings.environment_problem, sizeof settings.environment_problem - 1);
        continue;
      }
    } catch (...) {  // no memory for the text: ignore the variable
      continue;
    }
    variable.field->store(value, std::memory_order_relaxed);
    if (variable.field == &settings.host_to_device_workers)
      settings.device_to_host_workers.store(value, std::memory_order_relaxed);
  }
}

GPUSEL_API CopyEngineSettings& copy_engine_settings() noexcept {
  static auto& settings =
      process_object<CopyEngineSettings>(ProcessObject::copy_engine_options, [](CopyEngineSettings& made) noexcept {
        made.cores = usable_cores();
        read_copy_environment(made);
      });
  return settings;
}

// The default workers are never more than settings.cores (sched_getaffinity,
// read once), so a 2-core container uses 2 (Note [Tuning the copy engine]).
GPUSEL_API CopyEngineOptions effective_copy_options() noexcept {
  const CopyEngineSettings& settings = copy_engine_settings();
  const std::size_t cores = settings.cores;
  const auto pick = [](std::size_t set, std::size_t fallback) { return set != 0 ? set : fallback; };
  CopyEngineOptions options;
  options.host_to_device_workers =
      pick(settings.host_to_device_workers.load(std::memory_order_relaxed), cores < 6 ? cores : 6);
  options.device_to_host_workers =
      pick(settings.device_to_host_workers.load(std::memory_order_relaxed), cores < 8 ? cores : 8);
  options.slots = pick(settings.slots.load(std::memory_order_relaxed), 2);
  options.chunk_bytes = pick(settings.chunk_bytes.load(std::memory_order_relaxed), std::size_t{4} << 20);
  return options;
}

}  // namespace detail
GPUSEL_API CopyEngineOptions copy_engine_options() {
  const detail::CopyEngineSettings& settings = detail::copy_engine_settings();
  if (settings.environment_problem[0] != '\0')
    throw Error(std::string("gpusel copy engine: ") + settings.environment_problem);
  return detail::effective_copy_options();
}

GPUSEL_API void set_copy_engine_options(const CopyEngineOptions& options) {
  const std::string problem = detail::copy_options_problem(options);
  if (!problem.empty()) throw Error("gpusel::set_copy_engine_options: " + problem);
  detail::CopyEngineSettings& settings = detail::copy_engine_settings();
  settings.host_to_device_workers.store(options.host_to_device_workers, std::memory_order_relaxed);
  settings.device_to_host_workers.store(options.device_to_host_workers, std::memory_order_relaxed);
  settings.slots.store(options.slots, std::memory_order_relaxed);
  settings.chunk_bytes.store(options.chunk_bytes, std::memory_order_relaxed);
  settings.environment_problem[0] = '\0';
}

}  // namespace gpusel
