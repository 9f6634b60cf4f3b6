// Splitting a large copy into contiguous parts done by several host threads.
// This header includes no CUDA header.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "gpusel/detail/core/fork_safe_mutex.hpp"
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
                              const std::atomic<bool>& stop);

// What the threads of one run_in_parts share.
struct PartsRun {
  const void* work = nullptr;
  PartFunction function = nullptr;
  std::atomic<bool> stop{false};
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

// Starts a thread running `main`; throws Error when none can be started.
template <class Main>
std::thread start_copy_thread(Main&& main) {
  try {
    return std::thread(std::forward<Main>(main));
  } catch (const std::system_error& error) {
    throw Error(std::string("gpusel copy engine: could not start a copy thread: ") + error.what());
  }
}

// Note [Worker threads kept between copies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Starting threads for every copy is overhead a short copy feels: a copy on 12
// threads would start 11 (the figure: docs/benchmarks.md). PartWorkers keeps
// the threads: thread i does part i of every job, so what a part keeps per
// thread (a stream, its events: the engine cache,
// detail/data/engine/engine_cache.hpp) is used by one thread at a time. One job
// runs at a time; its owner (the engine cache's lease) makes sure of that, and
// a copy that finds the workers busy starts threads for itself alone. The
// threads wait on a condition variable between jobs, and are joined by stop()
// (release_cached_resources(), process exit). In a child made by fork() they do
// not exist: forget() drops them without a join and makes the locks anew (Note
// [Caches across fork()], detail/core/fork_state.hpp).
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
      const std::lock_guard<ForkSafeMutex> lock(mutex_);
      while (started_ + 1 < count) {
        const Start start{started_ + 1, job_};  // the job posted below is new to it
        threads_[started_] = start_copy_thread([this, start] { main(start); });
        ++started_;
      }
      run_ = &run;
      for (std::size_t i = 0; i < count; ++i) parts_[i] = parts[i];
      count_ = count;
      remaining_ = count - 1;
      ++job_;
      wake_.notify_all();
    }
    run.run(0, parts[0].begin, parts[0].end);
    std::unique_lock<std::mutex> lock(mutex_.native());
    done_.wait(lock, [this] { return remaining_ == 0; });
    run_ = nullptr;
  }

  // How many threads are kept.
  std::size_t threads() noexcept {
    const std::lock_guard<ForkSafeMutex> lock(mutex_);
    return started_;
  }

  // Ends and joins the threads (none may be running a job). Never throws.
  void stop() noexcept {
    std::size_t started = 0;
    {
      const std::lock_guard<ForkSafeMutex> lock(mutex_);
      stopping_ = true;
      started = started_;
      wake_.notify_all();
    }
    for (std::size_t i = 0; i < started; ++i) threads_[i].join();
    const std::lock_guard<ForkSafeMutex> lock(mutex_);
    started_ = 0;
    stopping_ = false;
  }

  // In a forked child: the threads are gone. Forget them, and the locks: each
  // is made anew over the old one, whose destructor never runs.
  void forget() noexcept {
    mutex_.forget();
    new (&wake_) std::condition_variable;
    new (&done_) std::condition_variable;
    for (std::thread& thread : threads_) new (&thread) std::thread;
    started_ = 0;
    stopping_ = false;
    run_ = nullptr;
    remaining_ = 0;
  }

 private:
  struct Start {
    std::size_t index = 0;   // the part this thread does, 1 and up
    std::uint64_t seen = 0;  // the last job before the thread started
  };

  void main(Start start) noexcept {
    std::unique_lock<std::mutex> lock(mutex_.native());
    std::uint64_t seen = start.seen;
    for (;;) {
      wake_.wait(lock, [&] { return job_ != seen || stopping_; });
      if (stopping_) return;
      seen = job_;
      if (start.index >= count_) continue;
      PartsRun* run = run_;
      const PartRange range = parts_[start.index];
      lock.unlock();
      run->run(start.index, range.begin, range.end);
      lock.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  ForkSafeMutex mutex_;
  std::condition_variable wake_;  // a job was posted, or stop
  std::condition_variable done_;  // the last part finished
  std::thread threads_[kMaxPartWorkers - 1];
  std::size_t started_ = 0;
  bool stopping_ = false;
  std::uint64_t job_ = 0;
  PartsRun* run_ = nullptr;
  PartRange parts_[kMaxPartWorkers]{};
  std::size_t count_ = 0;
  std::size_t remaining_ = 0;
};

// run_in_parts without the type of the work, so that it is compiled once
// rather than once per kind of copy. With `workers` (kept threads, Note
// [Worker threads kept between copies]) the parts run there; without, on
// threads started for this call.
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
    std::array<std::thread, kMaxPartWorkers - 1> threads;  // one per part after the first
    std::size_t started = 0;
    try {
      for (std::size_t i = 1; i < parts_count; ++i, ++started) {
        const PartRange range = parts[i];
        threads[started] = start_copy_thread([&run, i, range] { run.run(i, range.begin, range.end); });
      }
    } catch (...) {
      // A thread could not be started: stop the others and say so.
      run.stop.store(true);
      for (std::size_t j = 0; j < started; ++j) threads[j].join();
      throw;
    }
    run.run(0, parts[0].begin, parts[0].end);
    for (std::size_t i = 0; i < started; ++i) threads[i].join();
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
      [](const void* erased, std::size_t index, std::size_t begin, std::size_t end, const std::atomic<bool>& stop) {
        (*static_cast<const Work*>(erased))(index, begin, end, stop);
      },
      workers);
}

}  // namespace gpusel::detail
