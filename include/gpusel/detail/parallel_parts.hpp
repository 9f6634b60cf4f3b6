// Splitting a large copy into contiguous parts done by several host threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "gpusel/error.hpp"

namespace gpusel::detail {

// How many threads a copy of `bytes` is worth: one per `bytes_per_worker`, at
// most `max_workers` and at most the machine's hardware threads, at least one.
inline std::size_t worker_count(std::size_t bytes, std::size_t bytes_per_worker, std::size_t max_workers) noexcept {
  const std::size_t hardware = std::max<std::size_t>(1, std::thread::hardware_concurrency());
  return std::max<std::size_t>(1, std::min({bytes / bytes_per_worker, max_workers, hardware}));
}

// Runs work(begin, end, stop) over contiguous parts of [0, bytes), each part a
// multiple of `granularity` bytes except the last, on up to `workers` threads:
// the calling thread does the first part, new threads the others. When a part
// throws, `stop` is set so the others can give up early; after every thread
// has finished, the first exception is rethrown. Threads are started per call:
// the copies worth splitting take milliseconds, a thread start microseconds.
template <class Work>
void run_in_parts(std::size_t bytes, std::size_t workers, std::size_t granularity, Work&& work) {
  std::size_t part = (bytes + workers - 1) / workers;
  part = (part + granularity - 1) / granularity * granularity;
  std::atomic<bool> stop{false};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  const auto run = [&](std::size_t begin, std::size_t end) noexcept {
    try {
      work(begin, end, stop);
    } catch (...) {
      stop.store(true);
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  try {
    threads.reserve(workers);
    for (std::size_t begin = part; begin < bytes; begin += part) {
      threads.emplace_back(run, begin, std::min(bytes, begin + part));
    }
  } catch (const std::exception& error) {  // a thread could not be started: stop the others and say so
    stop.store(true);
    for (std::thread& thread : threads) thread.join();
    throw Error(std::string("gpusel copy engine: could not start a copy thread: ") + error.what());
  }
  run(0, std::min(bytes, part));
  for (std::thread& thread : threads) thread.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace gpusel::detail
