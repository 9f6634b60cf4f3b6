// What a process forked from one that used CUDA may still do, and the caches
// it forgets: Note [Caches across fork()].
#pragma once

#include <pthread.h>

#include <atomic>
#include <new>

#include "gpusel/detail/core/process_state.hpp"

namespace gpusel::detail {

// Note [Caches across fork()]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A child made by fork() has a copy of its parent's memory and one thread, and
// cannot use CUDA if its parent had started it. gpusel's caches hold what the
// parent made: pinned staging chunks, streams, events, worker threads (absent
// from the child), locks another thread may have held at the fork. So a
// pthread_atfork child handler, registered the first time gpusel starts CUDA
// work, makes each registered cache forget what it holds without touching it:
// no free of pinned memory, no join of a thread, no CUDA call, only plain
// stores (the locks are made anew). In a child of a parent that used CUDA
// through gpusel's data layer, every later entry into CUDA work through that
// layer throws Error; host-only work goes on, on fresh threads. A parent that
// used CUDA only by direct cudart calls is not detected.

// The table of what a child forgets has room for an object in every slot of
// every runtime the state tells apart and of the process, so it cannot run
// out before the runtime table does.
inline constexpr int kMaxForkForgets = (kMaxRuntimes + 1) * kObjectSlots;

struct ForkState {
  std::atomic<bool> cuda_used{false};
  std::atomic<bool> forked_after_cuda{false};
  std::atomic<unsigned> forks{0};  // children this process descends from, through fork()
  // forget_functions[i](forget_objects[i]), for i < forget_count, in a child.
  std::atomic<int> forget_count{0};
  std::atomic<void (*)(void*) noexcept> forget_functions[kMaxForkForgets]{};
  std::atomic<void*> forget_objects[kMaxForkForgets]{};
};

// The fork state this copy made and registered forget_after_fork() for, if it made one.
GPUSEL_DETAIL_PER_OBJECT inline std::atomic<ForkState*>& fork_state_made_here() noexcept {
  static std::atomic<ForkState*> made{nullptr};
  return made;
}

// The atfork child handler (Note [Caches across fork()]).
GPUSEL_DETAIL_PER_OBJECT inline void forget_after_fork() noexcept {
  ForkState* state = fork_state_made_here().load(std::memory_order_acquire);
  if (state == nullptr) return;
  if (state->cuda_used.load(std::memory_order_relaxed)) state->forked_after_cuda.store(true, std::memory_order_relaxed);
  state->forks.fetch_add(1, std::memory_order_relaxed);
  const int count = state->forget_count.load(std::memory_order_acquire);
  for (int i = 0; i < count && i < kMaxForkForgets; ++i) {
    void (*forget)(void*) noexcept = state->forget_functions[i].load(std::memory_order_acquire);
    if (forget != nullptr) forget(state->forget_objects[i].load(std::memory_order_relaxed));
  }
}

inline ForkState& fork_state() noexcept {
  static auto& state = process_object<ForkState>(ProcessObject::fork_state, [](ForkState& made) noexcept {
    fork_state_made_here().store(&made, std::memory_order_release);
    (void)pthread_atfork(nullptr, nullptr, &forget_after_fork);
  });
  return state;
}

// Has `forget(object)` called in every child forked from now on (the object
// lives until the process exits). Beyond kMaxForkForgets (objects of
// runtimes outside the table), nothing is registered. Takes no lock: it is called where a runtime object is made,
// under the state's mutex, so fork_state() must have been made before.
inline void forget_in_forked_child(ForkState& state, void (*forget)(void*) noexcept, void* object) noexcept {
  const int index = state.forget_count.fetch_add(1, std::memory_order_relaxed);
  if (index >= kMaxForkForgets) return;
  state.forget_objects[index].store(object, std::memory_order_relaxed);
  state.forget_functions[index].store(forget, std::memory_order_release);  // a slot not yet filled reads as null
}

// Whether this process is a child forked after gpusel used CUDA.
inline bool forked_after_cuda() noexcept { return fork_state().forked_after_cuda.load(std::memory_order_relaxed); }

}  // namespace gpusel::detail
