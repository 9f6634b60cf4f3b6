// Splitting a large copy into contiguous parts done by several host threads.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "gpusel/error.hpp"

namespace gpusel::detail {

// The most threads one copy is split over (the copy engine asks for 8 at most).
inline constexpr std::size_t kMaxPartWorkers = 8;

// How many threads a copy of `bytes` is worth: one per `bytes_per_worker`, at
// most `max_workers`, kMaxPartWorkers and the machine's hardware threads, at least one.
inline std::size_t worker_count(std::size_t bytes, std::size_t bytes_per_worker, std::size_t max_workers) noexcept {
  const std::size_t hardware = std::max<std::size_t>(1, std::thread::hardware_concurrency());
  return std::max<std::size_t>(1, std::min({bytes / bytes_per_worker, max_workers, hardware, kMaxPartWorkers}));
}

// The work of one part, type-erased: `work` is the callable run_in_parts was given.
using PartFunction = void (*)(const void* work, std::size_t begin, std::size_t end, const std::atomic<bool>& stop);

// What the threads of one run_in_parts share.
struct PartsRun {
  const void* work = nullptr;
  PartFunction function = nullptr;
  std::atomic<bool> stop{false};
  std::mutex failure_mutex;
  std::exception_ptr failure;  // the first exception a part threw

  void run(std::size_t begin, std::size_t end) noexcept {
    try {
      function(work, begin, end, stop);
    } catch (...) {
      stop.store(true);
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  }
};

// One part, run on a thread of its own.
struct PartThread {
  PartsRun* run = nullptr;
  std::size_t begin = 0;
  std::size_t end = 0;
  pthread_t thread{};

  static void* start(void* part) noexcept {
    auto* self = static_cast<PartThread*>(part);
    self->run->run(self->begin, self->end);
    return nullptr;
  }
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
// switching.
inline void run_erased_parts(std::size_t bytes, std::size_t workers, std::size_t granularity, const void* work,
                             PartFunction function) {
  workers = std::min(workers, kMaxPartWorkers);
  std::size_t part = (bytes + workers - 1) / workers;
  part = (part + granularity - 1) / granularity * granularity;
  PartsRun run;
  run.work = work;
  run.function = function;
  std::array<PartThread, kMaxPartWorkers - 1> threads;  // one per part after the first
  std::size_t started = 0;
  for (std::size_t begin = part; begin < bytes; begin += part) {
    PartThread& thread = threads[started];
    thread = PartThread{&run, begin, std::min(bytes, begin + part), {}};
    if (const int error = pthread_create(&thread.thread, nullptr, &PartThread::start, &thread); error != 0) {
      // A thread could not be started: stop the others and say so.
      run.stop.store(true);
      for (std::size_t i = 0; i < started; ++i) pthread_join(threads[i].thread, nullptr);
      throw Error(std::string("gpusel copy engine: could not start a copy thread: ") + std::strerror(error));
    }
    ++started;
  }
  run.run(0, std::min(bytes, part));
  for (std::size_t i = 0; i < started; ++i) pthread_join(threads[i].thread, nullptr);
  if (run.failure) std::rethrow_exception(run.failure);
}

// Runs work(begin, end, stop) over contiguous parts of [0, bytes), each part a
// multiple of `granularity` bytes except the last, on up to `workers` threads
// (kMaxPartWorkers at most): the calling thread does the first part, new
// threads the others. When a part throws, `stop` is set so the others can give
// up early; after every thread has finished, the first exception is rethrown.
// Threads are started per call: the copies worth splitting take milliseconds,
// a thread start microseconds.
template <class Work>
void run_in_parts(std::size_t bytes, std::size_t workers, std::size_t granularity, const Work& work) {
  run_erased_parts(bytes, workers, granularity, &work,
                   [](const void* erased, std::size_t begin, std::size_t end, const std::atomic<bool>& stop) {
                     (*static_cast<const Work*>(erased))(begin, end, stop);
                   });
}

}  // namespace gpusel::detail
