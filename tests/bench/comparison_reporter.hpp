// What the benchmark binaries share: Google Benchmark's console report, then a
// table comparing each gpusel benchmark with the raw CUDA runtime benchmark it
// replaces, measured in the same run (tests/gpu/summarize.py reads the table).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace gpusel_bench {

// One row of the table: a gpusel benchmark, the raw one it replaces, the target.
struct Comparison {
  const char* gpusel;
  const char* raw;
  double target;  // 0: no target, reported for information
};

// Real time per iteration in seconds, by benchmark function and argument ("" when it has none).
using Seconds = std::map<std::string, std::map<std::string, double>>;

// Keeps the time of every run and, after the console report, calls
// print_table with them.
class ComparisonReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      seconds_[run.run_name.function_name][run.run_name.args] =
          run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    GetOutputStream().flush();  // the table follows the console report, not inside it
    print_table(seconds_);
#if GPUSEL_BENCH_EMULATED
    std::printf("(emulated CUDA runtime: a smoke test; these ratios say nothing about a GPU)\n");
#endif
  }

 protected:
  virtual void print_table(const Seconds& seconds) = 0;

 private:
  Seconds seconds_;
};

}  // namespace gpusel_bench
