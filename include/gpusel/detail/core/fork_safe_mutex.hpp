// A mutex that a forked child makes anew (Note [Caches across fork()],
// detail/core/fork_state.hpp): every lock of gpusel's caches is one.
#pragma once

#include <mutex>
#include <new>

namespace gpusel::detail {

// A std::mutex that a forked child makes anew: the thread that held it at the
// fork does not exist there. Lockable as std::mutex; a condition variable
// waits on native().
class ForkSafeMutex {
 public:
  void lock() { mutex_.lock(); }
  bool try_lock() noexcept { return mutex_.try_lock(); }
  void unlock() noexcept { mutex_.unlock(); }
  std::mutex& native() noexcept { return mutex_; }
  // In a forked child only: a new, unlocked mutex over the old one, whose
  // destructor never runs.
  void forget() noexcept { new (&mutex_) std::mutex; }

 private:
  std::mutex mutex_;
};

}  // namespace gpusel::detail
