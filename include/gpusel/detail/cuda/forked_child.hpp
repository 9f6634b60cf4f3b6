// CUDA work refused in a child forked after CUDA started, and recorded
// otherwise (Note [Caches across fork()] in detail/core/fork_state.hpp).
#pragma once

#include <string>

#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

[[noreturn]] inline void throw_forked_after_cuda(const char* what) {
  throw Error(std::string(what) +
              ": CUDA cannot be used in a process forked after CUDA started (the parent had used CUDA before "
              "fork()); start the process with the spawn or forkserver start method, or fork before CUDA starts");
}

// Called where gpusel's data layer starts CUDA work (allocating on a GPU, a copy
// involving one, the engine's pinned staging): throws in a child forked after
// CUDA started, and otherwise records that CUDA is in use. The check is one
// relaxed load per entry, with no getpid() per call.
inline void enter_cuda_work(const char* what) {
  ForkState& state = fork_state();
  if (state.forked_after_cuda.load(std::memory_order_relaxed)) throw_forked_after_cuda(what);
  if (!state.cuda_used.load(std::memory_order_relaxed)) state.cuda_used.store(true, std::memory_order_relaxed);
}

}  // namespace gpusel::detail
