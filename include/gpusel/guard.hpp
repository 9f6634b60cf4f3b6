// Device guards: the C++ `with torch.cuda.device(1):`.
//
//   {
//     gpusel::DeviceGuard guard(1);          // with torch.cuda.device(1):
//     ... gpusel::cuda() now means cuda:1 ...
//   }                                        // back to the device before, also on an exception
//
//   gpusel::OptionalDeviceGuard guard;       // empty: changes nothing
//   for (int d = 0; d < n; ++d) {
//     guard.set_device(d);                   // one guard, many devices,
//     ...                                    // one restore at the end
//   }
//
// Guards make no CUDA call they can avoid, and never create a CUDA context on a
// device the program does not otherwise use: see Note [Restoring a device
// without creating its context] in detail/cuda/device_switch.hpp.
// Layer: cuda (docs/layers.md).
#pragma once

#include <optional>
#include <string>

#include "gpusel/current_device.hpp"
#include "gpusel/detail/cuda/device_switch.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel {

// Called with the Error when a guard (or synchronize(device)) could not switch
// the thread back to the device it found, or when a Buffer or Stream could not
// switch to its own device to free itself (and freed itself from the current
// device instead). A destructor cannot throw, so this is where those failures
// go; the handler must not throw either (if it does, the failure goes to
// stderr). Failures while the CUDA runtime unloads at exit are not reported
// (Note [Failed switches at exit] in detail/cuda/device_switch.hpp).
using RestoreErrorHandler = detail::RestoreErrorHandler;

// Sets who hears about a failed restore; nullptr brings back the default, one
// message on stderr per process. Returns the previous handler. The handler is
// called on the thread whose guard ended, possibly on several threads at once.
inline RestoreErrorHandler set_restore_error_handler(RestoreErrorHandler handler) noexcept {
  return detail::restore_error_handler().exchange(handler, std::memory_order_acq_rel);
}

namespace detail {

// What both guards keep: the device gpusel reported before the guard, the one
// the guard made current, and gpusel's switch count for the thread after the
// guard's own switch (Note [What a guard restores]).
struct GuardState {
  int original = -1;
  int current = -1;
  unsigned switches = 0;

  void enter(int index, const char* who) {
    original = checked_enter(index, who);
    current = index;
    switches = thread_device().switches;
  }

  void move_to(int index, const char* who) {
    (void)checked_enter(index, who);
    current = index;
    switches = thread_device().switches;
  }

  static int checked_enter(int index, const char* who) {
    const EnterResult entered = enter_device(index);
    if (entered.status != cudaSuccess) {
      // cudaGetDevice takes no device: name the guard's target beside `who`, and what the call asked for.
      if (std::string_view(entered.call) == "cudaGetDevice")
        throw cuda_error(entered.status, std::string(who) + "(" + cuda(index).str() + "): " + entered.call,
                         "current device", describe_visible_devices());
      throw cuda_error(entered.status, std::string(who) + ": " + entered.call, cuda(index), describe_visible_devices());
    }
    return entered.original;
  }

  void leave(const char* who) noexcept {
    RestoreResult result;
    if (current != original) {
      result = restore_device(original, /*check_first=*/false);
    } else if (thread_device().switches != switches) {
      result = restore_device(original, /*check_first=*/true);
    } else {
      // Nothing switched since the guard's own switch: no call. A guard entered on
      // the current device has then made one cudaGetDevice and nothing more.
      return;
    }
    if (result.status != cudaSuccess) report_restore_failure(result, who, original);
  }
};

// The cuda index a guard switches to: the device's index, or for `cuda` the current device.
inline int guard_index(const Device& device, const char* who) {
  if (device.has_index()) return device.index();
  int index = 0;
  const cudaError_t status = get_current_device(&index);
  if (status != cudaSuccess)
    throw cuda_error(status, std::string(who) + ": cudaGetDevice", "current device", describe_visible_devices());
  return index;
}

inline void check_guard_index(int index, const char* who) {
  if (index < 0) throw Error(std::string(who) + "(" + std::to_string(index) + "): a device index cannot be negative");
}

// Runs `action` (which must not throw) with cuda:`device` current and then
// restores the device, for a destructor that releases something there (a
// stream, device memory). When the device cannot be made current (a failed
// cudaGetDevice or cudaSetDevice), runs `action` from the current device all
// the same: releasing from another device's context usually works, where
// dropping the handle always leaks; and reports the failed switch through the
// restore-error handler (Note [Failed switches at exit] for why not at exit).
// Never throws.
template <class Action>
void release_on_device(int device, const char* who, const Action& action) noexcept {
  const EnterResult entered = enter_device(device);
  if (entered.status != cudaSuccess) {
    report_release_failure(entered, who, device);
    action();
    return;
  }
  GuardState state;
  state.original = entered.original;
  state.current = device;
  state.switches = thread_device().switches;
  action();
  state.leave(who);
}

}  // namespace detail

// Note [What a guard restores]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A guard remembers the device gpusel reported as current when it began
// (gpusel::current_device()) and, when it ends, normally or by an exception,
// makes that device current again if anything changed it: the guard's own
// switch, or a set_device, another guard or synchronize(device) inside the
// scope, nested at any depth. A raw cudaSetDevice inside a guard that did not
// need to switch is not seen (seeing it would cost a cudaGetDevice at every
// exit); a guard that switched restores its original device whatever the scope
// did. Switching back never creates a context (Note [Restoring a device without
// creating its context]). A failed restore cannot throw from a destructor: it
// goes to the handler set with set_restore_error_handler.

// Makes a device current for a scope, like `with torch.cuda.device(d):`.
// A cpu device makes it a no-op; `gpusel::cuda()` names the current device.
class DeviceGuard {
 public:
  // Makes cuda:index current. Throws Error when it does not exist or no GPU is usable.
  explicit DeviceGuard(int index) {
    detail::check_guard_index(index, "gpusel::DeviceGuard");
    state_.enter(index, "gpusel::DeviceGuard");
  }

  // A cuda device becomes current; cpu changes nothing (code on the CPU has no current GPU).
  explicit DeviceGuard(const Device& device) {
    if (device.is_cpu()) return;
    state_.enter(detail::guard_index(device, "gpusel::DeviceGuard"), "gpusel::DeviceGuard");
  }

  // No default constructor: a guard with no device would be a guard that does
  // nothing, which reads like it does something. Use OptionalDeviceGuard when
  // the device is chosen later.
  DeviceGuard() = delete;

  // No copy: two guards would both restore, and the second restore would undo
  // whatever the program made current after the first.
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // No move: a moved-from guard would need an "empty" state (that is
  // OptionalDeviceGuard), and a guard moved out of its scope, or to another
  // thread, would restore at the wrong time or on a thread it never switched:
  // the current device belongs to one thread.
  DeviceGuard(DeviceGuard&&) = delete;
  DeviceGuard& operator=(DeviceGuard&&) = delete;

  // Restores the device found at construction (Note [What a guard restores]). Never throws.
  ~DeviceGuard() {
    if (state_.original >= 0) state_.leave("gpusel::DeviceGuard");
  }

  // The device current when the guard began; cpu for a cpu guard.
  // NOLINTNEXTLINE(bugprone-exception-escape): cuda(index) is called only with an index >= 0
  Device original_device() const noexcept { return state_.original >= 0 ? cuda(state_.original) : cpu(); }
  // The device the guard made current; cpu for a cpu guard.
  // NOLINTNEXTLINE(bugprone-exception-escape): cuda(index) is called only with an index >= 0
  Device current_device() const noexcept { return state_.current >= 0 ? cuda(state_.current) : cpu(); }

 private:
  detail::GuardState state_;
};

// A guard that may hold no device: it starts empty (or with a device), takes
// one with set_device() later, may switch again, and restores once — at
// reset() or at its end — the device current when it first took a device.
class OptionalDeviceGuard {
 public:
  // Empty: changes nothing, restores nothing.
  OptionalDeviceGuard() noexcept = default;
  explicit OptionalDeviceGuard(const Device& device) { set_device(device); }
  explicit OptionalDeviceGuard(std::optional<Device> device) {
    if (device) set_device(*device);
  }

  // No copy, no move: for the reasons DeviceGuard gives.
  OptionalDeviceGuard(const OptionalDeviceGuard&) = delete;
  OptionalDeviceGuard& operator=(const OptionalDeviceGuard&) = delete;
  OptionalDeviceGuard(OptionalDeviceGuard&&) = delete;
  OptionalDeviceGuard& operator=(OptionalDeviceGuard&&) = delete;

  ~OptionalDeviceGuard() { reset(); }

  // Makes cuda:index current. The first call remembers the device to restore;
  // later calls switch again and keep that first original. Throws Error when
  // the device does not exist, or the guard holds cpu.
  void set_device(int index) {
    detail::check_guard_index(index, "gpusel::OptionalDeviceGuard::set_device");
    if (holds_cpu_) throw_mixed(cuda(index));
    if (!engaged()) {
      state_.enter(index, "gpusel::OptionalDeviceGuard::set_device");
    } else {
      state_.move_to(index, "gpusel::OptionalDeviceGuard::set_device");
    }
  }

  // As set_device(index); `cuda` names the current device. A cpu device
  // engages the guard on the cpu, which changes nothing. A guard does not mix
  // cpu and cuda: reset() it first.
  void set_device(const Device& device) {
    if (device.is_cpu()) {
      if (state_.original >= 0) throw_mixed(device);
      holds_cpu_ = true;
      return;
    }
    if (holds_cpu_) throw_mixed(device);
    set_device(detail::guard_index(device, "gpusel::OptionalDeviceGuard::set_device"));
  }

  // Restores the original device now (if the guard holds one) and empties the guard. Never throws.
  void reset() noexcept {
    if (state_.original >= 0) state_.leave("gpusel::OptionalDeviceGuard");
    state_ = detail::GuardState{};
    holds_cpu_ = false;
  }

  // The device current when the guard took its first device; empty when it holds none.
  std::optional<Device> original_device() const noexcept {
    if (holds_cpu_) return cpu();
    if (state_.original < 0) return std::nullopt;
    return cuda(state_.original);
  }

  // The device the guard made current last; empty when it holds none.
  std::optional<Device> current_device() const noexcept {
    if (holds_cpu_) return cpu();
    if (state_.current < 0) return std::nullopt;
    return cuda(state_.current);
  }

 private:
  bool engaged() const noexcept { return state_.original >= 0; }

  [[noreturn]] void throw_mixed(const Device& wanted) const {
    throw Error("gpusel::OptionalDeviceGuard::set_device(" + wanted.str() + "): the guard holds " +
                (holds_cpu_ ? std::string("cpu") : cuda(state_.current).str()) +
                "; a guard does not mix cpu and cuda devices (reset() it first)");
  }

  detail::GuardState state_;
  bool holds_cpu_ = false;
};

}  // namespace gpusel
