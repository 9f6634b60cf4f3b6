// detail::Atomic<T>: the atomic integers, flags and pointers gpusel keeps, on
// the compiler's __atomic builtins instead of <atomic> (Note [Why not <atomic>]).
#pragma once

#include <type_traits>

namespace gpusel::detail {

// Note [Why not <atomic>]
// ~~~~~~~~~~~~~~~~~~~~~~~
// gpusel's process-wide and per-runtime state (detail/core/process_state.hpp,
// fork_state.hpp, the default device, the restore-error handler, the copy
// engine's options) is a few atomic integers and pointers, and the cuda
// layer's headers hold it, so every file that includes guard.hpp compiled
// <atomic>: its std::atomic specializations for every integer type, and one
// instantiation per type gpusel names. That was measured as the largest
// single part of what guard.hpp adds to a typical training file (the T of
// tests/hardening/header_cost.py), with g++ 12, in compiler instructions
// (callgrind, which, unlike CPU time, does not move from run to run):
//   <atomic> alone                                  68 M  (T is 1788 M)
//   guard.hpp, compile-once mode, on std::atomic   248 M
//   guard.hpp, compile-once mode, on this Atomic   157 M
//   gpusel.hpp, compile-once mode: 608 M -> 520 M
// In CPU time (header_cost.py, fastest of 9 interleaved runs, 2-core machine)
// the compile-once umbrella's ratio to T, whose budget is 1.40, went from
// 1.42-1.53 to 1.32 with g++ 12 and 1.27 with clang 14 (with the other cuts
// of that change), and T + guard.hpp from 1.17 to 1.09 and 1.16. So the state
// uses this: the operations gpusel needs, with std::atomic's names and
// meaning, on the __atomic builtins that libstdc++'s std::atomic is itself
// written on (GCC and clang have them; nvcc hands host code to one of them).
// The layout is T's, which is std::atomic<T>'s for these lock-free types
// (checked below), so state shared with another gpusel build that still uses
// std::atomic reads the same bytes. Code that needs more of <atomic> (fences,
// atomics of class types) should include <atomic> rather than grow this.

// std::memory_order's orders, as the builtins take them.
enum class MemoryOrder : int {
  relaxed = __ATOMIC_RELAXED,
  acquire = __ATOMIC_ACQUIRE,
  release = __ATOMIC_RELEASE,
  acq_rel = __ATOMIC_ACQ_REL,
  seq_cst = __ATOMIC_SEQ_CST,
};

// An integer, bool, enum or pointer read and written atomically, as
// std::atomic<T> with the same member names (the order defaults to seq_cst).
template <class T>
class Atomic {
  static_assert(std::is_integral_v<T> || std::is_enum_v<T> || std::is_pointer_v<T>,
                "detail::Atomic holds integers, bools, enums and pointers (Note [Why not <atomic>])");

 public:
  constexpr Atomic() noexcept = default;
  constexpr Atomic(T value) noexcept : value_(value) {}  // NOLINT(google-explicit-constructor): as std::atomic
  // As std::atomic: copying would be two reads and a write, not one atomic step.
  Atomic(const Atomic&) = delete;
  Atomic& operator=(const Atomic&) = delete;
  Atomic(Atomic&&) = delete;
  Atomic& operator=(Atomic&&) = delete;
  ~Atomic() = default;

  T load(MemoryOrder order = MemoryOrder::seq_cst) const noexcept {
    return __atomic_load_n(&value_, static_cast<int>(order));
  }
  void store(T value, MemoryOrder order = MemoryOrder::seq_cst) noexcept {
    __atomic_store_n(&value_, value, static_cast<int>(order));
  }
  T exchange(T value, MemoryOrder order = MemoryOrder::seq_cst) noexcept {
    return __atomic_exchange_n(&value_, value, static_cast<int>(order));
  }
  // As std::atomic: on failure `expected` receives the value found.
  bool compare_exchange_weak(T& expected, T desired, MemoryOrder success, MemoryOrder failure) noexcept {
    return __atomic_compare_exchange_n(&value_, &expected, desired, true, static_cast<int>(success),
                                       static_cast<int>(failure));
  }
  // Integers only; returns the value before.
  T fetch_add(T delta, MemoryOrder order = MemoryOrder::seq_cst) noexcept {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "fetch_add needs an integer");
    return __atomic_fetch_add(&value_, delta, static_cast<int>(order));
  }

 private:
  // Aligned to its size, as std::atomic aligns it, so that every access is one
  // lock-free instruction (a 64-bit value in 32-bit code included).
  alignas(sizeof(T)) T value_{};  // NOLINT(bugprone-sizeof-expression): a pointer's own size is meant
};

static_assert(sizeof(Atomic<void*>) == sizeof(void*) && alignof(Atomic<void*>) == alignof(void*) &&
                  sizeof(Atomic<int>) == sizeof(int) && sizeof(Atomic<bool>) == sizeof(bool),
              "detail::Atomic<T> has T's layout, as std::atomic<T> has (Note [Why not <atomic>])");

}  // namespace gpusel::detail
