#!/usr/bin/env python3
"""Tests of tests/gpu/summarize.py, the table the GPU check prints: fed made-up
results of a GPU run, it must count tests, join each benchmark to its raw
baseline, judge targets and set the exit status. (The check itself only runs
in full on a GPU machine; its parsing is checked here, everywhere.)"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SUMMARIZE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "summarize.py")

GTEST_OK = """[==========] 3 tests from 1 test suite ran. (1 ms total)
[  PASSED  ] 2 tests.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] Runtime.NeedsTwoGpus
"""
GTEST_FAILED = """[==========] 4 tests from 1 test suite ran. (1 ms total)
[  PASSED  ] 3 tests.
[  FAILED  ] 1 test, listed below:
[  FAILED  ] Buffer.CopiesBytes
"""
GUARD_TABLE = """
gpusel                     raw runtime             gpusel ns     raw ns   ratio target
guard_on_current_device    raw_get_device               70.0       62.0    1.13 <= 1.2
guard_switching_device     raw_get_set_set             150.0      124.0    1.21 OVER 1.1
"""
BUFFER_TABLE = """
gpusel                      raw runtime                   bytes    gpusel       raw speedup target
gpusel_pageable_to_device   raw_pageable_to_device   1073741824   18.00 GB/s    6.00 GB/s   3.00x >= 3.00
transfer gpusel_pageable_to_device 1073741824 18.000
"""


def benchmark_json(times, errors=()):
    runs = [{"name": name, "run_type": "iteration", "real_time": value, "time_unit": unit}
            for name, (value, unit) in times.items()]
    runs += [{"name": name, "run_type": "iteration", "error_occurred": True, "error_message": message,
              "real_time": 0, "time_unit": "ns"} for name, message in errors]
    return json.dumps({"benchmarks": runs})


class Summary(unittest.TestCase):
    def run_summary(self, tests, benches, torch=None):
        with tempfile.TemporaryDirectory() as results:
            os.makedirs(os.path.join(results, "tests"))
            os.makedirs(os.path.join(results, "bench"))
            with open(os.path.join(results, "machine"), "w") as file:
                file.write("0, NVIDIA H200, 580.159.04, 143771 MiB\n")
            for name, (log, status) in tests.items():
                path = os.path.join(results, "tests", name + ".log")
                with open(path, "w") as file:
                    file.write(log)
                with open(path + ".status", "w") as file:
                    file.write(status)
            for name, (log, status, times, *errors) in benches.items():
                path = os.path.join(results, "bench", name + ".log")
                with open(path, "w") as file:
                    file.write(log)
                with open(path + ".status", "w") as file:
                    file.write(status)
                with open(os.path.join(results, "bench", name + ".json"), "w") as file:
                    file.write(benchmark_json(times, errors[0] if errors else ()))
            if torch is not None:
                with open(os.path.join(results, "torch.log"), "w") as file:
                    file.write(torch)
                with open(os.path.join(results, "torch.log.status"), "w") as file:
                    file.write("0 4")
            result = subprocess.run([sys.executable, SUMMARIZE, results, "42"], capture_output=True, text=True)
            return result.returncode, result.stdout

    def test_counts_tests_per_binary_and_passes_when_all_pass(self):
        code, table = self.run_summary({"runtime_test_real": (GTEST_OK, "0 1")}, {})
        self.assertEqual(code, 0, table)
        self.assertRegex(table, r"runtime_test_real\s+2\s+0\s+1\s+1s\s+ok")
        self.assertIn("PASSED in 42 s", table)

    def test_a_failed_test_fails_the_check_and_is_named(self):
        code, table = self.run_summary({"buffer_test_real": (GTEST_FAILED, "1 2")}, {})
        self.assertEqual(code, 1)
        self.assertRegex(table, r"buffer_test_real\s+3\s+1\s+0\s+2s\s+FAILED \(exit 1\)")
        self.assertIn("failed: buffer_test_real", table)

    def test_a_timeout_and_a_crash_are_told_apart(self):
        code, table = self.run_summary({"a_real": ("[ RUN      ] A.B\n", "124 90"),
                                        "b_real": ("[ RUN      ] B.C\n", "139 0")}, {})
        self.assertEqual(code, 1)
        self.assertIn("TIMEOUT", table)
        self.assertIn("CRASHED (signal 11)", table)

    def test_benchmark_ratio_is_gpusel_time_over_raw_time_from_the_json(self):
        times = {"guard_on_current_device": (70.0, "ns"), "raw_get_device": (62.0, "ns"),
                 "guard_switching_device": (150.0, "ns"), "raw_get_set_set": (124.0, "ns")}
        code, table = self.run_summary({}, {"guard_bench": (GUARD_TABLE, "0 3", times)})
        self.assertRegex(table, r"guard_on_current_device vs raw_get_device\s+-\s+70 ns\s+62 ns\s+1\.129\s+1\.13x slower\s+<= 1\.2 met")
        self.assertRegex(table, r"guard_switching_device vs raw_get_set_set.*1\.210.*<= 1\.1 MISSED")
        self.assertEqual(code, 1, "a missed target fails the check")
        self.assertIn("targets missed: guard_switching_device", table)

    def test_sizes_join_transfers_and_pytorch_joins_by_name(self):
        gib = 1 << 30
        times = {f"gpusel_pageable_to_device/{gib}/real_time": (59.65, "ms"),
                 f"raw_pageable_to_device/{gib}/real_time": (178.96, "ms")}
        code, table = self.run_summary({}, {"buffer_bench": (BUFFER_TABLE, "0 9", times)},
                                       torch=f"torch torch_pageable_to_device {gib} 7.70\n")
        self.assertEqual(code, 0, table)
        self.assertRegex(table, r"gpusel_pageable_to_device vs raw_pageable_to_device\s+1 GiB\s+59\.6 ms\s+179 ms\s+0\.333\s+3\.00x faster\s+>= 3\.00 met\s+2\.34x torch's GB/s")

    def test_benchmarks_that_all_skip_say_why_and_do_not_fail(self):
        why = "needs a CUDA device, this machine shows none"
        code, table = self.run_summary({}, {"guard_bench": (GUARD_TABLE, "0 0", {}, [("raw_get_device", why)])})
        self.assertEqual(code, 0, table)
        self.assertIn(f"guard_bench: every benchmark skipped: {why}", table)

    def test_a_benchmark_without_a_ratio_table_fails(self):
        times = {"raw_get_device": (62.0, "ns")}
        code, table = self.run_summary({}, {"new_bench": ("no table here\n", "0 1", times)})
        self.assertEqual(code, 1)
        self.assertIn("new_bench: ran in 1 s but printed no ratio table", table)

if __name__ == "__main__":
    unittest.main()
