// What the benchmark binaries share: Google Benchmark's console report, then a
// table comparing each gpusel benchmark with the baseline it replaces, from
// every repetition of one run (tests/gpu/summarize.py reads the table).
//
// Note [Paired ratios]
// ~~~~~~~~~~~~~~~~~~~~
// Run with --benchmark_repetitions=N --benchmark_enable_random_interleaving=true
// (tests/gpu/check.sh does, N = 15): Google Benchmark 1.7 runs the repetitions
// of every benchmark in a shuffled order, so a slow moment of the machine falls
// on gpusel and raw alike rather than on whichever ran second, and hands this
// reporter all N repetitions of a benchmark at once, each with its index. The
// reporter keeps every repetition's time per (benchmark, argument), in the order
// the repetitions ran, and for each comparison takes the ratio pair by pair:
// ratio_i = gpusel_i / raw_i for each repetition index i, then the median (and
// quartiles) of those ratios, beside the median times. One repetition (the
// default) gives one pair: a figure, not a trustworthy one.
//
// Each comparison row is one line, whitespace-separated, a field never empty:
//   compare <gpusel> <baseline> <args> <pairs> <gpusel s> <baseline s> <ratio> <q1> <q3> <bytes> <target> <verdict>
// - baseline: a raw benchmark of the same binary; "-" for a target on gpusel's
//   own figure (GB/s); "torch" for PyTorch, which runs in another process and
//   is judged by the summary (tests/gpu/check.sh alternates the two in rounds);
// - args: the benchmark's argument (bytes for transfers), "-" when none;
// - times: the medians in seconds; ratio, q1, q3: of gpusel_i / baseline_i
//   ("-" without a baseline in this binary);
// - bytes: moved per iteration (the "bytes" counter), "-" when not a transfer;
// - target: "-", "ratio<=X" (gpusel time / raw time at most X), "speedup>=X"
//   (raw time / gpusel time at least X), "GB/s>=X" (gpusel's median speed), or
//   a target the summary judges from facts this binary does not have:
//   "new_host" (device -> a new host buffer: >= 30 GB/s where huge pages are
//   granted, else >= 0.8x the page-fault limit of the host calibration);
//   with baseline "torch": "ratio<=X" and "speedup>=X" against PyTorch's time;
// - verdict: met, MISSED, "-" (no target), skipped (the machine lacks what the
//   benchmark needs: its error message starts with "needs "), ERROR (any other
//   error, such as bytes that did not arrive), or who judges it: torch, host.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace gpusel_bench {

// One comparison: a gpusel benchmark, its baseline, and targets by argument.
struct Comparison {
  std::string gpusel;
  std::string baseline;  // a raw benchmark's name, "-" or "torch" (see the Note)
  // Target by argument ("" for a benchmark without one); "*" for every argument.
  std::map<std::string, std::string> targets;
  // A row for every argument gpusel was measured with (target "-" where none
  // is set), or only for the arguments in `targets`.
  bool every_argument = true;
};

// What one benchmark (function, argument) measured, repetition by repetition.
struct Samples {
  std::vector<std::pair<long long, double>> seconds;  // (repetition index, real time per iteration)
  double bytes = 0;                                   // the "bytes" counter: moved per iteration
  std::string error;                                  // set when any repetition failed or skipped
};

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// The q-quantile (0..1) by linear interpolation between order statistics.
inline double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(position);
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (values[above] - values[below]) * (position - static_cast<double>(below));
}

// Keeps every repetition of every run and, after the console report, prints
// the comparison table (Note [Paired ratios]).
class ComparisonReporter : public benchmark::ConsoleReporter {
 public:
  explicit ComparisonReporter(std::vector<Comparison> comparisons) : comparisons_(std::move(comparisons)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      Samples& samples = samples_[run.run_name.function_name][run.run_name.args];
      if (run.error_occurred) {
        if (samples.error.empty()) samples.error = run.error_message;
        continue;
      }
      samples.seconds.emplace_back(run.repetition_index,
                                   run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit));
      const auto bytes = run.counters.find("bytes");
      if (bytes != run.counters.end()) samples.bytes = bytes->second.value;
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    GetOutputStream().flush();  // the table follows the console report, not inside it
    std::cout.flush();
    print_table();
#if GPUSEL_BENCH_EMULATED
    std::printf("(emulated CUDA runtime: a smoke test; these ratios say nothing about a GPU)\n");
#endif
    std::fflush(stdout);
  }

 private:
  static std::vector<double> in_order(const Samples& samples) {
    std::vector<std::pair<long long, double>> sorted = samples.seconds;
    std::sort(sorted.begin(), sorted.end());
    std::vector<double> seconds;
    for (const auto& [index, value] : sorted) seconds.push_back(value);
    return seconds;
  }

  static std::string number(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.6g", value);
    return text;
  }

  static bool is_skip(const std::string& error) { return error.rfind("needs ", 0) == 0; }

  // The verdict of a target this binary can judge, or "" when it cannot.
  static std::string judge(const std::string& target, double ratio, double gbps) {
    const auto value_after = [&target](std::size_t prefix) { return std::stod(target.substr(prefix)); };
    if (target.rfind("ratio<=", 0) == 0) return ratio <= value_after(7) ? "met" : "MISSED";
    if (target.rfind("speedup>=", 0) == 0) return 1 / ratio >= value_after(9) ? "met" : "MISSED";
    if (target.rfind("GB/s>=", 0) == 0) return gbps >= value_after(6) ? "met" : "MISSED";
    return "";
  }

  void print_row(const Comparison& c, const std::string& args, const std::string& target) const {
    const Samples& ours = samples_.at(c.gpusel).at(args);
    const std::string shown_args = args.empty() ? "-" : args;
    char bytes_text[32];
    std::snprintf(bytes_text, sizeof bytes_text, "%.0f", ours.bytes);
    const std::string bytes = ours.bytes > 0 ? bytes_text : "-";
    const bool in_binary = c.baseline != "-" && c.baseline != "torch";
    const Samples* theirs = nullptr;
    if (in_binary) {
      const auto by_function = samples_.find(c.baseline);
      if (by_function != samples_.end()) {
        const auto by_args = by_function->second.find(args);
        if (by_args != by_function->second.end()) theirs = &by_args->second;
      }
    }
    const auto row = [&](std::size_t pairs, const std::string& gpusel_s, const std::string& base_s,
                         const std::string& ratio, const std::string& q1, const std::string& q3,
                         const std::string& verdict) {
      std::printf("compare %-32s %-28s %-10s %3zu %-11s %-11s %-8s %-8s %-8s %-10s %-13s %s\n", c.gpusel.c_str(),
                  c.baseline.c_str(), shown_args.c_str(), pairs, gpusel_s.c_str(), base_s.c_str(), ratio.c_str(),
                  q1.c_str(), q3.c_str(), bytes.c_str(), target.c_str(), verdict.c_str());
    };
    std::string error = ours.error;
    if (error.empty() && in_binary && theirs == nullptr) error = "needs its baseline " + c.baseline + " measured";
    if (error.empty() && theirs != nullptr) error = theirs->error;
    if (!error.empty()) {
      row(0, "-", "-", "-", "-", "-", is_skip(error) ? "skipped" : "ERROR");
      std::printf("compare-note %s %s: %s\n", c.gpusel.c_str(), shown_args.c_str(), error.c_str());
      return;
    }
    const std::vector<double> gpusel_seconds = in_order(ours);
    const double gpusel_median = median(gpusel_seconds);
    const double gbps = ours.bytes > 0 && gpusel_median > 0 ? ours.bytes / gpusel_median / 1e9 : 0;
    if (theirs == nullptr) {
      std::string verdict = target == "-" ? "-" : c.baseline == "torch" ? "torch" : judge(target, 0, gbps);
      if (verdict.empty()) verdict = "host";
      row(gpusel_seconds.size(), number(gpusel_median), "-", "-", "-", "-", verdict);
      return;
    }
    const std::vector<double> raw_seconds = in_order(*theirs);
    std::vector<double> ratios;
    for (std::size_t i = 0; i < gpusel_seconds.size() && i < raw_seconds.size(); ++i)
      ratios.push_back(gpusel_seconds[i] / raw_seconds[i]);
    const double ratio = median(ratios);
    std::string verdict = target == "-" ? "-" : judge(target, ratio, gbps);
    if (verdict.empty()) verdict = "host";
    row(ratios.size(), number(gpusel_median), number(median(raw_seconds)), number(ratio),
        number(quantile(ratios, 0.25)), number(quantile(ratios, 0.75)), verdict);
  }

  void print_table() const {
    std::printf("\ncompare %-32s %-28s %-10s %3s %-11s %-11s %-8s %-8s %-8s %-10s %-13s %s\n", "gpusel", "baseline",
                "args", "n", "gpusel_s", "baseline_s", "ratio", "q1", "q3", "bytes", "target", "verdict");
    for (const Comparison& c : comparisons_) {
      const auto measured = samples_.find(c.gpusel);
      if (measured == samples_.end()) continue;  // filtered out
      std::vector<std::string> arguments;
      for (const auto& [args, samples] : measured->second) arguments.push_back(args);
      std::sort(arguments.begin(), arguments.end(), [](const std::string& a, const std::string& b) {
        return a.size() != b.size() ? a.size() < b.size() : a < b;  // numerically, for plain numbers
      });
      for (const std::string& args : arguments) {
        auto target = c.targets.find(args);
        if (target == c.targets.end()) target = c.targets.find("*");
        if (target == c.targets.end() && !c.every_argument) continue;
        print_row(c, args, target == c.targets.end() ? "-" : target->second);
      }
    }
  }

  std::vector<Comparison> comparisons_;
  std::map<std::string, std::map<std::string, Samples>> samples_;  // by function, then argument
};

}  // namespace gpusel_bench
