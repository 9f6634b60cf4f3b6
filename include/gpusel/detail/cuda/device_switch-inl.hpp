// The definitions of gpusel/detail/cuda/device_switch.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/detail/cuda/device_switch.hpp"

#include <cstdio>

namespace gpusel::detail {

// The default report: the first failed restore of the process goes to stderr
// (a program that wants every one sets a handler).
inline void print_restore_error_once(const char* message) noexcept {
  if (process_state().restore_error_printed.exchange(true)) return;
  std::fprintf(stderr,
               "gpusel: %s\n(gpusel reports the first failed device restore of a process here; "
               "gpusel::set_restore_error_handler receives every one)\n",
               message);
}

GPUSEL_API Error restore_error(const RestoreResult& result, const char* who, int device) {
  return cuda_error(
      result.status,
      std::string(who) + " could not switch the thread back to " + cuda(device).str() + ": " + result.call,
      cuda(device));
}

// Hands the Error `make_error()` builds for a failed switch (`status`) to the
// restore-error handler, or by default to stderr, once per process; says
// `fallback` on stderr when even the message cannot be built. Never throws.
template <class MakeError>
void report_switch_failure(cudaError_t status, const MakeError& make_error, const char* fallback) noexcept {
  if (status == cudaErrorCudartUnloading) {  // Note [Failed switches at exit]
    (void)cudaGetLastError();
    return;
  }
  try {
    const Error error = make_error();
    const RestoreErrorHandler handler = restore_error_handler().load(std::memory_order_acquire);
    if (handler == nullptr) {
      print_restore_error_once(error.what());
      return;
    }
    try {
      handler(error);
    } catch (...) {
      print_restore_error_once(error.what());
    }
  } catch (...) {  // no memory for the message: say what we can
    (void)cudaGetLastError();
    print_restore_error_once(fallback);
  }
}

GPUSEL_API void report_restore_failure(const RestoreResult& result, const char* who, int device) noexcept {
  report_switch_failure(
      result.status, [&] { return restore_error(result, who, device); },
      "a device guard could not restore the device on exit (no memory to say more)");
}

GPUSEL_API void report_release_failure(const EnterResult& entered, const char* who, int device) noexcept {
  report_switch_failure(
      entered.status,
      [&] {
        return cuda_error(entered.status,
                          std::string(who) + " could not make " + cuda(device).str() +
                              " current, and released it from the current device instead: " + entered.call,
                          cuda(device));
      },
      "gpusel could not switch devices to release memory or a stream (no memory to say more)");
}

}  // namespace gpusel::detail
