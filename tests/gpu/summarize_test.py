#!/usr/bin/env python3
"""Tests of tests/gpu/summarize.py, the table the GPU check prints: fed made-up
results of a GPU run, it must count tests, read each benchmark's paired-ratio
rows, judge the targets (the ones the binaries leave to it too: device -> new
host against THP and the host calibration, PyTorch round by round), report the
host's THP state and calibration, and set the exit status. (The check itself
only runs in full on a GPU machine; its parsing is checked here, everywhere.)"""
import os
import subprocess
import sys
import tempfile
import unittest

SUMMARIZE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "summarize.py")
GIB = 1 << 30

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
HEADER = ("compare gpusel baseline args n gpusel_s baseline_s ratio q1 q3 bytes target verdict\n")


def compare(gpusel, baseline, args, n, gpusel_s, baseline_s, ratio, q1, q3, nbytes, target, verdict):
    fields = [gpusel, baseline, args, n, gpusel_s, baseline_s, ratio, q1, q3, nbytes, target, verdict]
    return "compare " + " ".join(str(field) for field in fields) + "\n"


GUARD_LOG = ("raw_get_device    62 ns\n" + HEADER +
             compare("guard_on_current_device", "raw_get_device", "-", 15, 7e-8, 6.2e-8, 1.129, 1.1, 1.15, "-",
                     "ratio<=1.2", "met") +
             compare("guard_switching_device", "raw_get_set_set", "-", 15, 1.5e-7, 1.24e-7, 1.21, 1.2, 1.22, "-",
                     "ratio<=1.1", "MISSED"))

CALIBRATION_GRANTED = """calibration host cpus=16 thp_enabled=always_[madvise]_never thp_defrag=[madvise]
calibration memcpy threads=1 mib_per_thread=128 passes=4 GB/s=10.20 per_thread_GB/s=10.20
calibration memcpy threads=16 mib_per_thread=128 passes=4 GB/s=80.00 per_thread_GB/s=5.00
calibration touch pages=4k threads=1 mib=1024 s_per_GiB=0.2500 GB/s=4.29 per_thread_GB/s=4.29 huge_MiB=0
calibration drain pages=4k threads=1 mib=1024 s_per_GiB=0.4000 GB/s=2.68 per_thread_GB/s=2.68 huge_MiB=0
calibration drain pages=4k threads=8 mib=1024 s_per_GiB=0.0400 GB/s=25.00 per_thread_GB/s=3.12 huge_MiB=0
calibration touch pages=thp threads=1 mib=1024 s_per_GiB=0.1000 GB/s=10.7 per_thread_GB/s=10.7 huge_MiB=1024
calibration stores into=existing store=memcpy threads=1 mib=512 chunk_mib=4 streaming=yes GB/s=7.00 per_thread_GB/s=7.00
calibration stores into=existing store=streaming threads=1 mib=512 chunk_mib=4 streaming=yes GB/s=10.50 per_thread_GB/s=10.50
calibration stores into=fresh store=memcpy threads=1 mib=512 chunk_mib=4 streaming=yes GB/s=1.60 per_thread_GB/s=1.60
calibration done seconds=4.0
"""
CALIBRATION_NOT_GRANTED = CALIBRATION_GRANTED.replace("huge_MiB=1024", "huge_MiB=0")


class Summary(unittest.TestCase):
    def run_summary(self, tests=None, benches=None, rounds=None, calibration=None, files=None):
        """tests/benches: {name: (log, "status seconds")}; rounds: [(gpusel log, torch log)];
        files: {relative path: text}, written last."""
        with tempfile.TemporaryDirectory() as results:
            for folder in ("tests", "bench", "rounds"):
                os.makedirs(os.path.join(results, folder))

            def write(path, text):
                with open(os.path.join(results, path), "w") as file:
                    file.write(text)

            write("machine", "0, NVIDIA H200, 580.159.04, 143771 MiB\n")
            write("settings", "repetitions 15 min_time 0.05 rounds 5 round_repetitions 3 torch_repeats 3 budget 285\n")
            write("thp", "cpus 16\nenabled always [madvise] never\ndefrag always defer defer+madvise [madvise] never\n")
            for folder, entries in (("tests", tests or {}), ("bench", benches or {})):
                for name, (log, status) in entries.items():
                    write(f"{folder}/{name}.log", log)
                    write(f"{folder}/{name}.log.status", status)
            for number, (gpusel_log, torch_log) in enumerate(rounds or [], 1):
                write(f"rounds/gpusel.{number}.log", gpusel_log)
                write(f"rounds/gpusel.{number}.log.status", "0 8")
                write(f"rounds/torch.{number}.log", torch_log)
                write(f"rounds/torch.{number}.log.status", "0 12")
            if rounds is None:
                write("rounds/not_run", "not run: python3 cannot import torch\n")
            if calibration is not None:
                write("calibration.log", calibration)
                write("calibration.log.status", "0 4")
            for path, text in (files or {}).items():
                write(path, text)
            result = subprocess.run([sys.executable, SUMMARIZE, results, "42"], capture_output=True, text=True)
            self.assertEqual(result.stderr, "")
            return result.returncode, result.stdout

    def test_counts_tests_per_binary_and_passes_when_all_pass(self):
        code, table = self.run_summary({"runtime_test_real": (GTEST_OK, "0 1")})
        self.assertEqual(code, 0, table)
        self.assertRegex(table, r"runtime_test_real\s+2\s+0\s+1\s+1s\s+ok")
        self.assertIn("PASSED in 42 s", table)

    def test_a_failed_test_fails_the_check_and_is_named(self):
        code, table = self.run_summary({"buffer_test_real": (GTEST_FAILED, "1 2")})
        self.assertEqual(code, 1)
        self.assertRegex(table, r"buffer_test_real\s+3\s+1\s+0\s+2s\s+FAILED \(exit 1\)")
        self.assertIn("failed: buffer_test_real", table)

    def test_a_timeout_and_a_crash_are_told_apart(self):
        code, table = self.run_summary({"a_real": ("[ RUN      ] A.B\n", "124 90"),
                                        "b_real": ("[ RUN      ] B.C\n", "139 0")})
        self.assertEqual(code, 1)
        self.assertIn("TIMEOUT", table)
        self.assertIn("CRASHED (signal 11)", table)

    def test_the_ratio_is_the_binarys_median_of_paired_ratios_and_targets_are_judged(self):
        code, table = self.run_summary(benches={"guard_bench": (GUARD_LOG, "0 3")})
        self.assertRegex(table, r"guard_on_current_device vs raw_get_device\s+-\s+15\s+70 ns\s+62 ns\s+1\.129 "
                                r"\[1\.100-1\.150\]\s+1\.13x slower\s+ratio<=1\.2 met")
        self.assertRegex(table, r"guard_switching_device vs raw_get_set_set.*1\.210.*ratio<=1\.1 MISSED")
        self.assertEqual(code, 1, "a missed target fails the check")
        self.assertIn("targets missed: guard_switching_device", table)
        self.assertIn("15 interleaved repetitions", table)

    def test_sizes_speeds_and_a_gbps_target(self):
        log = HEADER + compare("gpusel_pageable_to_device", "raw_pageable_to_device", GIB, 15, 0.0238, 0.1627,
                               0.146, 0.14, 0.15, GIB, "-", "-")
        log += compare("gpusel_pageable_to_device", "-", GIB, 15, 0.0238, "-", "-", "-", "-", GIB, "GB/s>=45", "met")
        code, table = self.run_summary(benches={"buffer_bench": (log, "0 60")})
        self.assertEqual(code, 0, table)
        self.assertRegex(table, r"gpusel_pageable_to_device vs raw\s+1 GiB\s+15\s+23\.8 ms 45\.1GB/s\s+163 ms\s+"
                                r"0\.146 \[0\.140-0\.150\]\s+6\.85x faster\s+-")
        self.assertRegex(table, r"\n  gpusel_pageable_to_device\s+1 GiB\s+15\s+23\.8 ms 45\.1GB/s\s+-\s+-\s+-\s+-"
                                r"\s+GB/s>=45 met")

    def new_host(self, gpusel_s, calibration, files=None):
        log = HEADER + compare("gpusel_device_to_new_host", "-", GIB, 15, gpusel_s, "-", "-", "-", "-", GIB,
                               "new_host", "host")
        return self.run_summary(benches={"buffer_bench": (log, "0 60")}, calibration=calibration, files=files)

    def test_device_to_new_host_needs_30_gbps_where_huge_pages_are_granted(self):
        code, table = self.new_host(GIB / 25e9, CALIBRATION_GRANTED)  # 25 GB/s
        self.assertEqual(code, 1, table)
        self.assertIn("huge pages granted", table)
        self.assertRegex(table, r"gpusel_device_to_new_host\s+1 GiB.*25\.0GB/s.*GB/s>=30 \(THP\) MISSED")

    def test_device_to_new_host_needs_80_percent_of_the_fault_limit_where_they_are_not(self):
        code, table = self.new_host(GIB / 21e9, CALIBRATION_NOT_GRANTED)  # 21 GB/s, limit 25 GB/s
        self.assertEqual(code, 0, table)
        self.assertIn("huge pages NOT granted", table)
        self.assertIn("page-fault limit (best 4 KiB drain into fresh memory): 25.0 GB/s", table)
        self.assertRegex(table, r"gpusel_device_to_new_host\s+1 GiB.*GB/s>=20 \(0\.8x fault limit\) met")

    def test_reports_the_stores_rows_and_the_engines_prefault_decision(self):
        line = ("gpusel host memory: prefault=no (transparent_hugepage [madvise], GPUSEL_PREFAULT unset: policy auto) "
                "host_cache=2147483648B/8blocks streaming_stores=yes")
        _, table = self.run_summary(calibration=CALIBRATION_GRANTED, files={"host_memory": line + "\n"})
        self.assertIn("engine's host memory (buffer_bench): " + line, table)
        self.assertIn("drain into existing pages, 4 MiB chunks, GB/s: 1 thr memcpy 7.0; 1 thr streaming 10.5", table)
        self.assertIn("drain into fresh pages, 4 MiB chunks, GB/s: 1 thr memcpy 1.6", table)
        _, table = self.run_summary(calibration=CALIBRATION_GRANTED)
        self.assertIn("engine's host memory (buffer_bench): not reported", table)

    def test_thp_fallbacks_during_the_run_count_as_not_granted(self):
        files = {"vmstat.before": "thp_fault_alloc 100\nthp_fault_fallback 5\n",
                 "vmstat.after": "thp_fault_alloc 110\nthp_fault_fallback 900\n"}
        code, table = self.new_host(GIB / 21e9, CALIBRATION_GRANTED, files)
        self.assertIn("thp_fault_alloc +10, thp_fault_fallback +895", table)
        self.assertIn("huge pages NOT granted", table)
        self.assertRegex(table, r"GB/s>=20 \(0\.8x fault limit\) met")
        self.assertEqual(code, 0, table)

    def test_device_to_new_host_without_calibration_is_not_judged_and_said_so(self):
        code, table = self.new_host(GIB / 21e9, None)
        self.assertEqual(code, 0, table)
        self.assertIn("not judged: gpusel_device_to_new_host 1 GiB (no calibration)", table)

    def test_the_host_line_and_the_calibration(self):
        code, table = self.run_summary(calibration=CALIBRATION_GRANTED)
        self.assertEqual(code, 0, table)
        self.assertIn("host: 16 cpus; transparent huge pages: enabled=madvise defrag=madvise", table)
        self.assertIn("memcpy, all threads together: 1 thr 10.2 GB/s, 16 thr 80.0 GB/s", table)
        self.assertIn("touch 1 thr 0.250 s/GiB (4.3 GB/s)", table)
        self.assertIn("touch 1 thr 0.100 s/GiB (10.7 GB/s, 1024 of 1024 MiB huge)", table)

    def test_a_calibration_that_failed_fails_the_check(self):
        code, table = self.run_summary(calibration="Segmentation fault\n",
                                       files={"calibration.log.status": "139 1"})
        self.assertEqual(code, 1, table)
        self.assertIn("host calibration: CRASHED (signal 11)", table)

    def test_pytorch_is_compared_round_by_round(self):
        def gpusel_round(seconds):
            return HEADER + compare("gpusel_make_drop", "torch", 1 << 20, 3, seconds, "-", "-", "-", "-", "-",
                                    "ratio<=1", "torch") + compare(
                "gpusel_module_to_cuda_resnet50", "torch", "-", 3, 0.004, "-", "-", "-", "-", 102228128,
                "speedup>=3", "torch")

        rounds = [(gpusel_round(1e-6), "torch torch_make_drop 1048576 2e-06 3\n"
                                       "torch torch_module_to_cuda_resnet50 - 0.010 3\n"),
                  (gpusel_round(3e-6), "torch torch_make_drop 1048576 2e-06 3\n"
                                       "torch torch_module_to_cuda_resnet50 - 0.014 3\n"),
                  (gpusel_round(1e-6), "torch torch_make_drop 1048576 4e-06 3\n"
                                       "torch torch_module_to_cuda_resnet50 - 0.016 3\n")]
        code, table = self.run_summary(rounds=rounds, files={"rounds/stopped": "stopped before round 4 of 5"})
        # make_drop ratios 0.5, 1.5, 0.25: median 0.5; resnet50 ratios 0.4, 0.286, 0.25: median 0.286
        self.assertRegex(table, r"gpusel_make_drop vs torch\s+1 MiB\s+3\s+1 us\s+2 us\s+0\.500\s+2\.00x faster"
                                r"\s+ratio<=1 met")
        self.assertRegex(table, r"gpusel_module_to_cuda_resnet50 vs torch\s+-\s+3\s+4 ms\s+14 ms\s+0\.286\s+"
                                r"3\.50x faster\s+speedup>=3 met")
        self.assertIn("3 alternating rounds", table)
        self.assertIn("stopped before round 4 of 5", table)
        self.assertEqual(code, 0, table)

    def test_without_pytorch_its_targets_are_listed_as_not_judged(self):
        log = HEADER + compare("gpusel_make_drop", "torch", 1 << 20, 15, 1e-6, "-", "-", "-", "-", "-",
                               "ratio<=1", "torch")
        code, table = self.run_summary(benches={"buffer_bench": (log, "0 60")})
        self.assertEqual(code, 0, table)
        self.assertIn("PyTorch: not run: python3 cannot import torch", table)
        self.assertIn("not judged: gpusel_make_drop 1 MiB vs torch", table)

    def test_a_failed_torch_round_fails_the_check(self):
        code, table = self.run_summary(rounds=[("", "Traceback ...\n")], files={"rounds/torch.1.log.status": "1 3"})
        self.assertEqual(code, 1, table)
        self.assertIn("failed: round 1 transfer_torch.py", table)

    def test_bytes_that_did_not_arrive_fail_the_check_and_are_named(self):
        log = HEADER + compare("gpusel_device_to_device", "raw_device_to_device", 41943040, 0, "-", "-", "-", "-",
                               "-", "-", "speedup>=0.97", "ERROR")
        log += "compare-note gpusel_device_to_device 41943040: the bytes did not arrive intact\n"
        code, table = self.run_summary(benches={"buffer_bench": (log, "0 9")})
        self.assertEqual(code, 1, table)
        self.assertIn("ERROR: the bytes did not arrive intact", table)
        self.assertIn("failed: gpusel_device_to_device 40 MiB", table)

    def test_benchmarks_that_all_skip_say_why_and_do_not_fail(self):
        why = "needs a CUDA device, this machine shows none"
        log = HEADER + compare("guard_on_current_device", "raw_get_device", "-", 0, "-", "-", "-", "-", "-", "-",
                               "ratio<=1.2", "skipped")
        log += f"compare-note guard_on_current_device -: {why}\n"
        code, table = self.run_summary(benches={"guard_bench": (log, "0 0")})
        self.assertEqual(code, 0, table)
        self.assertIn(f"guard_bench: every benchmark skipped: {why}", table)

    def test_a_benchmark_without_a_comparison_table_fails(self):
        code, table = self.run_summary(benches={"new_bench": ("no table here\n", "0 1")})
        self.assertEqual(code, 1)
        self.assertIn("new_bench: ran in 1 s but printed no comparison table", table)

    def test_the_time_each_step_took_against_the_budget(self):
        steps = ("host_calibration 0 4\nruntime_test_real 0 3\nbuffer_test_real 0 5\nbuffer_bench 0 80\n"
                 "round 1: buffer_bench gpusel_* 0 8\nround 1: transfer_torch.py 0 12\n")
        code, table = self.run_summary(files={"steps": steps})
        self.assertEqual(code, 0, table)
        self.assertIn("time: host_calibration 4 s, tests 8 s, buffer_bench 80 s, PyTorch rounds 20 s; "
                      "the check 42 s of its 285 s budget", table)


if __name__ == "__main__":
    unittest.main()
