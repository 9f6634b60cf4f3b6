#!/usr/bin/env python3
"""The table tests/gpu/check.sh prints last, from the results it left.

    summarize.py <results directory> <seconds the check took>

Tests: GoogleTest's summary lines of each *_real binary. Benchmarks: which
gpusel benchmark compares with which raw CUDA one comes from the ratio table
each benchmark binary prints (a header line "gpusel  raw runtime ...", then
one row per pair: gpusel name, raw name, optionally the size in bytes, ...,
and its verdict: "<= 1.2", "OVER 1.2", ">= 3.00", "UNDER 3.00" or "-"); the
times come from the binary's JSON output, so every ratio here is computed the
same way: gpusel time / raw time, measured in the same run. PyTorch figures
come from "torch <name> <bytes> <GB/s>" lines (tests/bench/transfer_torch.py),
joined to gpusel_<what> rows by the name torch_<what> and the size.
Exit status 0 when everything passed and every declared target was met.
"""
import json
import os
import re
import sys

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return ""


def step_status(log_path):
    """(exit status or None when not run, seconds)"""
    fields = read(log_path + ".status").split()
    if not fields or fields[0] == "budget":
        return None, 0
    return int(fields[0]), int(fields[1])


def describe_exit(status):
    if status is None:
        return "NOT RUN (budget spent)"
    if status == 124 or status == 137:
        return "TIMEOUT"
    if status > 128:
        return f"CRASHED (signal {status - 128})"
    return "ok" if status == 0 else f"FAILED (exit {status})"


def count(log, word):
    match = re.search(r"^\[  " + word + r"\s*\] (\d+) tests?", log, re.MULTILINE)
    return int(match.group(1)) if match else 0


def size_text(size):
    if not size:
        return "-"
    value = int(size)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale} {unit}"
    return f"{value} B"


def time_text(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def benchmark_times(json_path):
    """{"name/args": real time in ns} and the skip messages, from --benchmark_out."""
    times, skips = {}, []
    try:
        with open(json_path, encoding="utf-8") as file:
            report = json.load(file)
    except (OSError, json.JSONDecodeError):
        return times, skips
    for run in report.get("benchmarks", []):
        name = re.sub(r"/(real_time|process_time|manual_time|min_time:[^/]*|iterations:[^/]*)", "", run["name"])
        if run.get("error_occurred"):
            skips.append(run.get("error_message", "error"))
            continue
        if run.get("run_type", "iteration") != "iteration":
            continue
        times[name] = run["real_time"] * UNIT_NS.get(run.get("time_unit", "ns"), 1.0)
    return times, skips


def comparison_rows(log):
    """(gpusel name, raw name, size or "", verdict) from the binary's own ratio table."""
    rows, in_table = [], False
    for line in log.splitlines():
        if re.match(r"^gpusel\s+raw runtime", line):
            in_table = True
            continue
        if in_table:
            fields = line.split()
            if not fields or line.startswith(("(", "transfer ")):
                in_table = False
                continue
            size = fields[2] if len(fields) > 2 and fields[2].isdigit() else ""
            verdict = re.search(r"((?:<=|>=|OVER|UNDER)\s+[0-9.]+)\s*$", line)
            rows.append((fields[0], fields[1], size, verdict.group(1) if verdict else "-"))
    return rows


def torch_speeds(log):
    """{(name, bytes): GB/s} from "torch <name> <bytes> <GB/s>" lines."""
    speeds = {}
    for match in re.finditer(r"^torch (\S+) (\d+) ([0-9.eE+-]+)\s*$", log, re.MULTILINE):
        speeds[(match.group(1), match.group(2))] = float(match.group(3))
    return speeds


def main():
    results, seconds = sys.argv[1], sys.argv[2]
    dry_run = os.path.exists(os.path.join(results, "dry_run"))
    failures, missed = [], []
    lines = []
    machine = read(os.path.join(results, "machine")).strip().splitlines()
    lines.append("gpusel GPU check" + (" (DRY RUN)" if dry_run else "") + ": " + "; ".join(machine))

    # --- tests -------------------------------------------------------------------
    lines.append("")
    lines.append(f"{'test binary':<34} {'passed':>6} {'failed':>6} {'skipped':>7} {'time':>6}  result")
    totals = [0, 0, 0]
    test_dir = os.path.join(results, "tests")
    for file in sorted(os.listdir(test_dir)):
        if not file.endswith(".log"):
            continue
        name, log_path = file[:-4], os.path.join(test_dir, file)
        log = read(log_path)
        status, took = step_status(log_path)
        passed, failed, skipped = count(log, "PASSED"), count(log, "FAILED"), count(log, "SKIPPED")
        totals = [totals[0] + passed, totals[1] + failed, totals[2] + skipped]
        result = describe_exit(status)
        if status == 0 and "[  PASSED  ]" not in log:
            result = "FAILED (no GoogleTest summary)"
        if result != "ok":
            failures.append(name)
        lines.append(f"{name:<34} {passed:>6} {failed:>6} {skipped:>7} {took:>5}s  {result}")
    lines.append(f"{'all tests':<34} {totals[0]:>6} {totals[1]:>6} {totals[2]:>7}")

    # --- benchmarks ----------------------------------------------------------------
    torch_log = read(os.path.join(results, "torch.log"))
    torch = torch_speeds(torch_log)
    lines.append("")
    table = []  # (label, the rest of the row) or (a whole line, None)
    bench_dir = os.path.join(results, "bench")
    for file in sorted(os.listdir(bench_dir)):
        if not file.endswith(".log"):
            continue
        name, log_path = file[:-4], os.path.join(bench_dir, file)
        log = read(log_path)
        status, took = step_status(log_path)
        times, skips = benchmark_times(os.path.join(bench_dir, name + ".json"))
        result = describe_exit(status)
        if result != "ok":
            failures.append(name)
            table.append((f"{name}: {result} after {took} s", None))
            continue
        if skips and not times:
            table.append((f"{name}: every benchmark skipped: {skips[0]}", None))
            continue
        rows = comparison_rows(log)
        if not rows:
            table.append((f"{name}: ran in {took} s but printed no ratio table (gpusel <name> raw <name> ...)", None))
            failures.append(name)
            continue
        for gpusel, raw, size, verdict in rows:
            key = gpusel + ("/" + size if size else "")
            raw_key = raw + ("/" + size if size else "")
            label = f"{name}: {gpusel} vs {raw}"
            if key not in times or raw_key not in times:
                table.append((label, f"{size_text(size):>7} {'skipped':>9}"))
                continue
            ratio = times[key] / times[raw_key]
            reads = f"{1 / ratio:.2f}x faster" if ratio < 1 else f"{ratio:.2f}x slower"
            target = "-"
            if verdict != "-":
                met = not verdict.startswith(("OVER", "UNDER"))
                target = verdict.replace("OVER ", "<= ").replace("UNDER ", ">= ") + (" met" if met else " MISSED")
                if not met:
                    missed.append(gpusel + (f" {size_text(size)}" if size else ""))
            versus_torch = "-"
            torch_name = "torch_" + gpusel[len("gpusel_"):] if gpusel.startswith("gpusel_") else None
            if size and torch_name and (torch_name, size) in torch:
                gpusel_speed = int(size) / times[key]  # bytes per ns = GB/s
                versus_torch = f"{gpusel_speed / torch[(torch_name, size)]:.2f}x torch's GB/s"
            table.append((label, f"{size_text(size):>7} {time_text(times[key]):>9} {time_text(times[raw_key]):>9} "
                                 f"{ratio:>10.3f}  {reads:<13} {target:<14} {versus_torch}"))
    width = max([len(label) for label, rest in table if rest is not None] + [38])
    lines.append(f"{'benchmark: gpusel vs raw CUDA runtime':<{width}} {'size':>7} {'gpusel':>9} {'raw':>9} "
                 f"{'gpusel/raw':>10}  {'reads as':<13} {'target':<14} PyTorch")
    lines.extend(label if rest is None else f"{label:<{width}} {rest}" for label, rest in table)
    if torch_log.startswith("not run"):
        lines.append(f"PyTorch: {torch_log.strip()}")
    elif torch:
        lines.append("PyTorch (transfer_torch.py): " + ", ".join(
            f"{n} {size_text(s)} {v:.2f} GB/s" for (n, s), v in sorted(torch.items())))
    elif os.path.exists(os.path.join(results, "torch.log")):
        status, _ = step_status(os.path.join(results, "torch.log"))
        skipped = re.search(r"^torch transfers skipped: .*$", torch_log, re.MULTILINE)
        lines.append(f"PyTorch: {skipped.group(0)}" if skipped and status == 0
                     else f"PyTorch (transfer_torch.py): {describe_exit(status)}, no 'torch <name> <bytes> <GB/s>' lines")
        if status != 0:
            failures.append("transfer_torch.py")

    lines.append("")
    verdict = "PASSED" if not failures and not missed else "FAILED"
    summary = f"{verdict} in {seconds} s"
    if failures:
        summary += "; failed: " + ", ".join(failures)
    if missed:
        summary += "; targets missed: " + ", ".join(missed)
    if dry_run:
        summary += " (dry run: no GPU, so nothing GPU-specific was measured)"
    lines.append(summary)
    print("\n".join(lines))
    return 0 if verdict == "PASSED" else 1


if __name__ == "__main__":
    sys.exit(main())
