// Splitting a large copy into contiguous parts done by several host threads.
// This header includes no CUDA header.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include "gpusel/detail/core/atomic.hpp"
#include "gpusel/detail/core/process_state.hpp"
#include "gpusel/error.hpp"

namespace gpusel::detail {

// The most threads one copy is split over (CopyEngineOptions' kMaxCopyWorkers).
inline constexpr std::size_t kMaxPartWorkers = 16;

// How many threads a copy of `bytes` is worth: one per `bytes_per_worker`, at
// most `max_workers` and kMaxPartWorkers, at least one. (`max_workers` is
// already bounded by the cores: CopyEngineOptions' defaults.)
inline std::size_t worker_count(std::size_t bytes, std::size_t bytes_per_worker, std::size_t max_workers) noexcept {
  return std::max<std::size_t>(1, std::min({bytes / bytes_per_worker, max_workers, kMaxPartWorkers}));
}

// The work of one part, type-erased: `work` is the callable run_in_parts was
// given, `index` the part's number (0 for the first, done by the caller).
using PartFunction = void (*)(const void* work, std::size_t index, std::size_t begin, std::size_t end,
                              const detail::Atomic<bool>& stop);

// What the threads of one run_in_parts share.
struct PartsRun {
  const void* work = nullptr;
  PartFunction function = nullptr;
  detail::Atomic<bool> stop{false};
  std::mutex failure_mutex;
  std::exception_ptr failure;  // the first exception a part threw

  void run(std::size_t index, std::size_t begin, std::size_t end) noexcept {
    try {
      function(work, index, begin, end, stop);
    } catch (...) {
      stop.store(true);
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  }
};

struct PartRange {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// One part, run on a thread of its own.
struct PartThread {
  PartsRun* run = nullptr;
  std::size_t index = 0;
  PartRange range;
  pthread_t thread{};

  static void* start(void* part) noexcept {
    auto* self = static_cast<PartThread*>(part);
    self->run->run(self->index, self->range.begin, self->range.end);
    return nullptr;
  }
};

// Note [Worker threads kept between copies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Starting a thread costs about 7 us on a 2-core host, and a 10 ms copy on 12
// threads started 11. PartWorkers keeps the threads: thread i does part i of
// every job, so what a part keeps per thread (a stream, its events: the engine
// cache, detail/data/engine_cache.hpp) is used by one thread at a time. One job
// runs at a time; its owner (the engine cache's lease) makes sure of that, and
// a copy that finds the workers busy starts threads of its own, as before.
// The threads wait on a condition variable between jobs, and are joined by
// stop() (release_cached_resources(), process exit). In a child made by
// fork() they do not exist: forget() drops them without a join and makes the
// locks anew (Note [Caches across fork()], detail/core/fork_state.hpp). Locks and
// threads are POSIX, not the standard library's, for compile time (below).
class PartWorkers {
 public:
  PartWorkers() = default;
  ~PartWorkers() { stop(); }
  PartWorkers(const PartWorkers&) = delete;  // owns threads
  PartWorkers& operator=(const PartWorkers&) = delete;

  // Runs parts[1, count) on the kept threads (starting those still missing)
  // and parts[0] on the caller, and returns when all are done. Throws Error
  // when a thread cannot be started (then nothing ran).
  void run(PartsRun& run, const PartRange* parts, std::size_t count) {
    {
      const StateLock lock(mutex_);
      while (started_ + 1 < count) {
        Start& start = starts_[started_];
        start = Start{this, started_ + 1, job_};  // the job posted below is new to it
        if (const int error = pthread_create(&threads_[started_], nullptr, &PartWorkers::main, &start); error != 0)
          throw Error(std::string("gpusel copy engine: could not start a copy thread: ") + std::strerror(error));
        ++started_;
      }
      run_ = &run;
      for (std::size_t i = 0; i < count; ++i) parts_[i] = parts[i];
      count_ = count;
      remaining_ = count - 1;
      ++job_;
      (void)pthread_cond_broadcast(&wake_);
    }
    run.run(0, parts[0].begin, parts[0].end);
    const StateLock lock(mutex_);
    while (remaining_ > 0) (void)pthread_cond_wait(&done_, &mutex_);
    run_ = nullptr;
  }

  // How many threads are kept.
  std::size_t threads() noexcept {
    const StateLock lock(mutex_);
    return started_;
  }

  // Ends and joins the threads (none may be running a job). Never throws.
  void stop() noexcept {
    std::size_t started = 0;
    {
      const StateLock lock(mutex_);
      stopping_ = true;
      started = started_;
      (void)pthread_cond_broadcast(&wake_);
    }
    for (std::size_t i = 0; i < started; ++i) (void)pthread_join(threads_[i], nullptr);
    const StateLock lock(mutex_);
    started_ = 0;
    stopping_ = false;
  }

  // In a forked child: the threads are gone. Forget them, and the locks.
  void forget() noexcept {
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t condition = PTHREAD_COND_INITIALIZER;
    std::memcpy(static_cast<void*>(&mutex_), &mutex, sizeof mutex);
    std::memcpy(static_cast<void*>(&wake_), &condition, sizeof condition);
    std::memcpy(static_cast<void*>(&done_), &condition, sizeof condition);
    started_ = 0;
    stopping_ = false;
    run_ = nullptr;
    remaining_ = 0;
  }

 private:
  struct Start {
    PartWorkers* workers = nullptr;
    std::size_t index = 0;   // the part this thread does, 1 and up
    std::uint64_t seen = 0;  // the last job before the thread started
  };

  static void* main(void* argument) noexcept {
    const Start start = *static_cast<Start*>(argument);
    PartWorkers& self = *start.workers;
    StateLock lock(self.mutex_);
    std::uint64_t seen = start.seen;
    for (;;) {
      while (self.job_ == seen && !self.stopping_) (void)pthread_cond_wait(&self.wake_, &self.mutex_);
      if (self.stopping_) return nullptr;
      seen = self.job_;
      if (start.index >= self.count_) continue;
      PartsRun* run = self.run_;
      const PartRange range = self.parts_[start.index];
      (void)pthread_mutex_unlock(&self.mutex_);
      run->run(start.index, range.begin, range.end);
      (void)pthread_mutex_lock(&self.mutex_);
      if (--self.remaining_ == 0) (void)pthread_cond_signal(&self.done_);
    }
  }

  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t wake_ = PTHREAD_COND_INITIALIZER;  // a job was posted, or stop
  pthread_cond_t done_ = PTHREAD_COND_INITIALIZER;  // the last part finished
  pthread_t threads_[kMaxPartWorkers - 1]{};
  Start starts_[kMaxPartWorkers - 1]{};
  std::size_t started_ = 0;
  bool stopping_ = false;
  std::uint64_t job_ = 0;
  PartsRun* run_ = nullptr;
  PartRange parts_[kMaxPartWorkers]{};
  std::size_t count_ = 0;
  std::size_t remaining_ = 0;
};

// run_in_parts without the type of the work, so that it is compiled once
// rather than once per kind of copy. The threads are POSIX threads, not
// std::thread (gpusel is POSIX-only already: dlopen), for compile time alone.
// Measured (g++ 12 -std=c++17 -fsyntax-only, compiler CPU time user+sys,
// median of 9 interleaved runs, 2 loaded cores) on a file including only
// <gpusel/buffer.hpp>, 670 ms with these threads: a std::thread per part in a
// std::vector, run_in_parts a template as before, made it 730 ms (+9%); the
// same std::thread inside this type-erased function, 710 ms (+6%). Both are
// above the 5% that would let the standard library win; measure again before
// switching. With `workers` (kept threads, Note [Worker threads kept between
// copies]) the parts run there; without, on threads started for this call.
inline void run_erased_parts(std::size_t bytes, std::size_t count, std::size_t granularity, const void* work,
                             PartFunction function, PartWorkers* workers) {
  count = std::max<std::size_t>(1, std::min(count, kMaxPartWorkers));
  std::size_t part = (bytes + count - 1) / count;
  part = (part + granularity - 1) / granularity * granularity;
  std::array<PartRange, kMaxPartWorkers> parts;
  std::size_t parts_count = 0;
  for (std::size_t begin = 0; begin < bytes || parts_count == 0; begin += part)
    parts[parts_count++] = PartRange{begin, std::min(bytes, begin + part)};
  PartsRun run;
  run.work = work;
  run.function = function;
  if (workers != nullptr && parts_count > 1) {
    workers->run(run, parts.data(), parts_count);
  } else {
    std::array<PartThread, kMaxPartWorkers - 1> threads;  // one per part after the first
    std::size_t started = 0;
    for (std::size_t i = 1; i < parts_count; ++i) {
      PartThread& thread = threads[started];
      thread = PartThread{&run, i, parts[i], {}};
      if (const int error = pthread_create(&thread.thread, nullptr, &PartThread::start, &thread); error != 0) {
        // A thread could not be started: stop the others and say so.
        run.stop.store(true);
        for (std::size_t j = 0; j < started; ++j) pthread_join(threads[j].thread, nullptr);
        throw Error(std::string("gpusel copy engine: could not start a copy thread: ") + std::strerror(error));
      }
      ++started;
    }
    run.run(0, parts[0].begin, parts[0].end);
    for (std::size_t i = 0; i < started; ++i) pthread_join(threads[i].thread, nullptr);
  }
  if (run.failure) std::rethrow_exception(run.failure);
}

// Runs work(index, begin, end, stop) over contiguous parts of [0, bytes),
// each part a multiple of `granularity` bytes except the last, on up to
// `count` threads (kMaxPartWorkers at most): the calling thread does part 0,
// the others the rest, on `workers`' kept threads when given. When a part
// throws, `stop` is set so the others can give up early; after every part has
// finished, the first exception is rethrown.
template <class Work>
void run_in_parts(std::size_t bytes, std::size_t count, std::size_t granularity, PartWorkers* workers,
                  const Work& work) {
  run_erased_parts(
      bytes, count, granularity, &work,
      [](const void* erased, std::size_t index, std::size_t begin, std::size_t end, const detail::Atomic<bool>& stop) {
        (*static_cast<const Work*>(erased))(index, begin, end, stop);
      },
      workers);
}

}  // namespace gpusel::detail
