// The per-runtime caches that a forked child forgets (Note [Caches across fork()]).
#pragma once

#include <cuda_runtime_api.h>

#include <new>

#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/runtime_state.hpp"

namespace gpusel::detail {

// The per-runtime objects that a forked child forgets: ForgettingRuntimeObject::of<T>(slot)
// is the T of this code's runtime in `slot` (runtime_object), default-made,
// whose forget() every child forked from then on calls (Note [Caches across
// fork()]). T befriends this class to keep its constructor and forget() private.
// The runtime is asked something before T is made, so that whatever state it
// keeps in static storage exists before the object and so outlives it.
class ForgettingRuntimeObject {
 public:
  template <typename T>
  static T& of(RuntimeObject slot) noexcept {
    ForkState& fork = fork_state();  // made first: runtime_object holds the state's mutex while it makes the object
    return runtime_object<T>(slot, [&fork](void* storage) noexcept {
      int version = 0;
      (void)cudaRuntimeGetVersion(&version);
      T* object = new (storage) T;
      forget_in_forked_child(
          fork, [](void* made) noexcept { static_cast<T*>(made)->forget(); }, object);
      return object;
    });
  }
};

}  // namespace gpusel::detail
