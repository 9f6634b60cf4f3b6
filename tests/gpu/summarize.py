#!/usr/bin/env python3
"""The one table tests/gpu/check.sh prints last, from the results it left.

    summarize.py <results directory> <seconds the check took>

Sections, in order: the machine (GPU, transparent huge pages: the settings and
/proc/vmstat's thp_fault_alloc / thp_fault_fallback around the benchmarks), the
host calibration (host_calibration's "calibration ..." lines), the tests
(GoogleTest's summary lines of each *_real binary), the benchmarks against the
raw runtime (each binary's own "compare ..." lines: medians of paired
repetitions, Note [Paired ratios] in tests/bench/comparison_reporter.hpp), the
benchmarks against PyTorch (rounds: buffer_bench's "compare ... torch ..." lines
and transfer_torch.py's "torch <name> <args> <seconds> <samples>" lines, the
ratio taken round by round, then the median over rounds), the time each step
took, and the verdict.

Targets the binaries cannot judge are judged here: "new_host" (device -> a new
host buffer) needs >= 30 GB/s where huge pages are granted, else >= 0.8x the
host's page-fault limit (the best 4 KiB "drain" GB/s of the calibration);
huge pages count as granted when the calibration's THP region was at least
half backed by huge pages and, during the benchmarks, thp_fault_fallback did
not outgrow thp_fault_alloc. Targets against PyTorch: "ratio<=X" is gpusel time
/ PyTorch time at most X, "speedup>=X" PyTorch time / gpusel time at least X.
Exit status 0 when every test passed, every step ran, no benchmark failed its
bytes check and every target judged was met.
"""
import os
import re
import statistics
import sys

GIGA = 1e9


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
    if not size or not size.isdigit():
        return "-"
    value = int(size)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale} {unit}"
    return f"{value} B"


def time_text(seconds):
    if seconds is None:
        return "-"
    ns = seconds * 1e9
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def reads_as(ratio):
    if ratio is None or ratio <= 0:
        return "-"
    return f"{1 / ratio:.2f}x faster" if ratio < 1 else f"{ratio:.2f}x slower"


# --- what the binaries printed -------------------------------------------------------
COMPARE_FIELDS = ["gpusel", "baseline", "args", "n", "gpusel_s", "baseline_s", "ratio", "q1", "q3", "bytes",
                  "target", "verdict"]


def compare_rows(log):
    """The binary's "compare ..." rows (dicts) and notes {(gpusel, args): message}."""
    rows, notes = [], {}
    for line in log.splitlines():
        fields = line.split()
        if fields[:1] == ["compare-note"] and len(fields) >= 3:
            notes[(fields[1], fields[2].rstrip(":"))] = line.split(":", 1)[1].strip() if ":" in line else ""
            continue
        if fields[:1] != ["compare"] or len(fields) != len(COMPARE_FIELDS) + 1 or fields[1:3] == ["gpusel", "baseline"]:
            continue
        row = dict(zip(COMPARE_FIELDS, fields[1:]))
        for key in ("n",):
            row[key] = int(row[key]) if row[key].isdigit() else 0
        for key in ("gpusel_s", "baseline_s", "ratio", "q1", "q3", "bytes"):
            row[key] = number(row[key])
        rows.append(row)
    return rows, notes


def torch_times(log):
    """{(gpusel name, args): seconds} from "torch torch_<what> <args> <seconds> <samples>" lines."""
    times = {}
    for match in re.finditer(r"^torch (torch_\S+) (\S+) ([0-9.eE+-]+) (\d+)\s*$", log, re.MULTILINE):
        times[("gpusel_" + match.group(1)[len("torch_"):], match.group(2))] = float(match.group(3))
    return times


def calibration(log):
    """(rows: [(what, {key: value})], host facts {key: value})"""
    rows, host = [], {}
    for line in log.splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[0] != "calibration":
            continue
        values = dict(field.split("=", 1) for field in fields[2:] if "=" in field)
        if fields[1] == "host":
            host = values
        else:
            rows.append((fields[1], values))
    return rows, host


def vmstat(path):
    values = {}
    for line in read(path).splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].isdigit():
            values[fields[0]] = int(fields[1])
    return values


def versus(gpusel, baseline):
    """ "gpusel_x vs raw" when the baseline is raw_x, else "gpusel_x vs <baseline>"; "gpusel_x" alone for "-"."""
    if baseline == "-":
        return gpusel
    if gpusel.startswith("gpusel_") and baseline in ("raw_" + gpusel[len("gpusel_"):], "torch"):
        return f"{gpusel} vs {baseline.split('_')[0]}"
    return f"{gpusel} vs {baseline}"


def judge(target, ratio, gbps):
    """met / MISSED for the targets any row can have; None when not judgeable here."""
    match = re.fullmatch(r"(ratio<=|speedup>=|GB/s>=)([0-9.]+)", target)
    if not match:
        return None
    kind, value = match.group(1), float(match.group(2))
    if kind == "ratio<=":
        return None if ratio is None else ("met" if ratio <= value else "MISSED")
    if kind == "speedup>=":
        return None if not ratio else ("met" if 1 / ratio >= value else "MISSED")
    return None if gbps is None else ("met" if gbps >= value else "MISSED")


def main():
    results, seconds = sys.argv[1], sys.argv[2]
    dry_run = os.path.exists(os.path.join(results, "dry_run"))
    failures, missed, unjudged = [], [], []
    lines = []
    machine = read(os.path.join(results, "machine")).strip().splitlines()
    lines.append("gpusel GPU check" + (" (DRY RUN)" if dry_run else "") + ": " + "; ".join(machine))
    settings = read(os.path.join(results, "settings")).split()
    settings = dict(zip(settings[::2], settings[1::2]))

    # --- the host: THP and the calibration ----------------------------------------------
    thp = {}
    for line in read(os.path.join(results, "thp")).splitlines():
        key, _, value = line.partition(" ")
        chosen = re.search(r"\[([^\]]+)\]", value)  # "always [madvise] never": the kernel's choice
        thp[key] = chosen.group(1) if chosen else value
    before, after = vmstat(os.path.join(results, "vmstat.before")), vmstat(os.path.join(results, "vmstat.after"))
    deltas = {key: after[key] - before[key] for key in ("thp_fault_alloc", "thp_fault_fallback")
              if key in before and key in after}
    thp_line = (f"host: {thp.get('cpus', '?')} cpus; transparent huge pages: enabled={thp.get('enabled', '?')} "
                f"defrag={thp.get('defrag', '?')}")
    if deltas:
        thp_line += (f"; during the benchmarks thp_fault_alloc +{deltas.get('thp_fault_alloc', '?')}, "
                     f"thp_fault_fallback +{deltas.get('thp_fault_fallback', '?')}")
    else:
        thp_line += "; /proc/vmstat THP counters unread"
    calibration_path = os.path.join(results, "calibration.log")
    calibration_log = read(calibration_path)
    rows, _ = calibration(calibration_log)
    memcpy = [(int(v["threads"]), number(v.get("GB/s"))) for what, v in rows if what == "memcpy" and "GB/s" in v]
    touches = [(what, v) for what, v in rows if what in ("touch", "drain") and "GB/s" in v]
    drains_4k = [number(v["GB/s"]) for what, v in touches if what == "drain" and v.get("pages") == "4k"]
    fault_limit = max(drains_4k) if drains_4k else None
    thp_rows = [v for what, v in touches if v.get("pages") == "thp"]
    granted = None
    if thp_rows:
        granted = all(int(v.get("huge_MiB", 0)) * 2 >= int(v.get("mib", 1)) for v in thp_rows)
        if granted and deltas.get("thp_fault_fallback", 0) > deltas.get("thp_fault_alloc", 0):
            granted = False
    if granted is not None:
        thp_line += "; huge pages " + ("granted" if granted else "NOT granted") + " to madvise(MADV_HUGEPAGE) memory"
    lines.append(thp_line)
    host_memory = read(os.path.join(results, "host_memory")).strip()
    lines.append("engine's host memory (buffer_bench): " + (host_memory or "not reported (buffer_bench did not run)"))
    status, took = step_status(calibration_path)
    if not os.path.exists(calibration_path):
        lines.append("host calibration: not run (no calibration.log)")
    elif calibration_log.startswith("not run"):
        lines.append(f"host calibration: {calibration_log.strip()}")
    elif status != 0 or not rows:
        lines.append(f"host calibration: {describe_exit(status)}, no 'calibration ...' lines")
        failures.append("host_calibration")
    else:
        lines.append("host calibration (host_calibration, " + f"{took} s): memcpy, all threads together: " +
                     ", ".join(f"{t} thr {g:.1f} GB/s" for t, g in memcpy))
        for pages, label in (("4k", "4 KiB pages"), ("thp", "THP")):
            parts = [f"{what} {v['threads']} thr {number(v['s_per_GiB']):.3f} s/GiB ({number(v['GB/s']):.1f} GB/s"
                     + (f", {v['huge_MiB']} of {v['mib']} MiB huge" if pages == "thp" else "") + ")"
                     for what, v in touches if v.get("pages") == pages]
            if parts:
                lines.append(f"  first touch, {label}: " + "; ".join(parts))
        if fault_limit is not None:
            lines.append(f"  page-fault limit (best 4 KiB drain into fresh memory): {fault_limit:.1f} GB/s")
        stores = [v for what, v in rows if what == "stores" and "GB/s" in v]
        for into in ("existing", "fresh"):
            parts = [f"{v['threads']} thr {v['store']} {number(v['GB/s']):.1f}" for v in stores if v.get("into") == into]
            if parts:
                lines.append(f"  drain into {into} pages, 4 MiB chunks, GB/s: " + "; ".join(parts))

    # --- tests ---------------------------------------------------------------------------
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

    # --- benchmarks against the raw runtime ------------------------------------------------
    table = []  # (label, the rest of the row) or (a whole line, None)
    torch_targets = {}  # (gpusel, args) -> target, from the main run
    bench_dir = os.path.join(results, "bench")
    for file in sorted(os.listdir(bench_dir)):
        if not file.endswith(".log"):
            continue
        name, log_path = file[:-4], os.path.join(bench_dir, file)
        log = read(log_path)
        status, took = step_status(log_path)
        result = describe_exit(status)
        if result != "ok":
            failures.append(name)
            table.append((f"{name}: {result} after {took} s", None))
            continue
        rows, notes = compare_rows(log)
        if not rows:
            table.append((f"{name}: ran in {took} s but printed no comparison table (compare <gpusel> ...)", None))
            failures.append(name)
            continue
        if all(row["verdict"] == "skipped" for row in rows):
            why = next(iter(notes.values()), "no reason given")
            table.append((f"{name}: every benchmark skipped: {why}", None))
            continue
        if any(row["baseline"] != "torch" for row in rows):
            table.append((f"{name}:", None))
        for row in rows:
            if row["baseline"] == "torch":
                torch_targets[(row["gpusel"], row["args"])] = row["target"]
                continue
            label = "  " + versus(row["gpusel"], row["baseline"])
            where = row["gpusel"] + (f" {size_text(row['args'])}" if row["args"] != "-" else "")
            verdict, target = row["verdict"], row["target"]
            if verdict in ("skipped", "ERROR"):
                note = notes.get((row["gpusel"], row["args"]), "")
                table.append((label, f"{size_text(row['args']):>7} {verdict}: {note}"))
                if verdict == "ERROR":
                    failures.append(where)
                continue
            gbps = row["bytes"] / row["gpusel_s"] / GIGA if row["bytes"] and row["gpusel_s"] else None
            if target == "new_host":
                if granted:
                    target = "GB/s>=30"
                elif fault_limit is not None:
                    target = f"GB/s>={0.8 * fault_limit:.3g}"
                verdict = judge(target, row["ratio"], gbps) if target != "new_host" else None
                if verdict is None:
                    unjudged.append(f"{where} (no calibration)")
                    verdict = "not judged"
                target += " (THP)" if granted else " (0.8x fault limit)" if fault_limit is not None else ""
            ours = time_text(row["gpusel_s"]) + (f" {gbps:.1f}GB/s" if gbps is not None else "")
            spread = f"[{row['q1']:.3f}-{row['q3']:.3f}]" if row["q1"] is not None else "-"
            ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "-"
            shown = "-" if target == "-" else f"{target} {verdict}"
            if verdict == "MISSED":
                missed.append(where)
            table.append((label, f"{size_text(row['args']):>7} {row['n']:>3} {ours:>19} {time_text(row['baseline_s']):>9} "
                                 f"{ratio:>7} {spread:<13} {reads_as(row['ratio']):<13} {shown}"))
    lines.append("")
    lines.append("ratio: gpusel time / baseline time, the median of paired ratios (repetition by repetition against "
                 "the raw runtime, round by round against PyTorch); [q1-q3]: their quartiles")
    width = max([len(label) for label, rest in table if rest is not None] + [40])
    repetitions = settings.get("repetitions", "?")
    lines.append(f"{'vs the raw runtime, ' + repetitions + ' interleaved repetitions':<{width}} {'size':>7} "
                 f"{'n':>3} {'gpusel (median)':>19} {'raw':>9} {'ratio':>7} {'[q1-q3]':<13} {'reads as':<13} target")
    lines.extend(label if rest is None else f"{label:<{width}} {rest}" for label, rest in table)

    # --- benchmarks against PyTorch, in rounds ---------------------------------------------
    lines.append("")
    rounds_dir = os.path.join(results, "rounds")
    not_run = read(os.path.join(rounds_dir, "not_run")).strip()
    round_numbers = sorted({int(m.group(1)) for f in os.listdir(rounds_dir)
                            for m in [re.fullmatch(r"(?:gpusel|torch)\.(\d+)\.log", f)] if m})
    gpusel_by_round, torch_by_round, torch_notes = {}, {}, []
    for number_ in round_numbers:
        for side in ("gpusel", "torch"):
            path = os.path.join(rounds_dir, f"{side}.{number_}.log")
            if not os.path.exists(path):
                continue
            status, _ = step_status(path)
            log = read(path)
            if status != 0:
                failures.append(f"round {number_} {'buffer_bench' if side == 'gpusel' else 'transfer_torch.py'}")
                continue
            if side == "gpusel":
                gpusel_by_round[number_] = {(r["gpusel"], r["args"]): r for r in compare_rows(log)[0]
                                            if r["baseline"] == "torch" and r["gpusel_s"]}
            else:
                skipped = re.search(r"^torch transfers skipped: .*$", log, re.MULTILINE)
                if skipped:
                    torch_notes.append(skipped.group(0))
                torch_by_round[number_] = torch_times(log)
    if not_run:
        lines.append(f"PyTorch: {not_run}")
    elif not round_numbers:
        lines.append("PyTorch: no round ran")
    elif torch_notes and not any(torch_by_round.values()):
        lines.append(f"PyTorch: {torch_notes[0]}")
    else:
        stopped = read(os.path.join(rounds_dir, "stopped")).strip()
        lines.append(f"{'vs PyTorch, ' + str(len(round_numbers)) + ' alternating rounds':<{width}} "
                     f"{'size':>7} {'n':>3} {'gpusel (median)':>19} {'torch':>9} {'ratio':>7} {'':<13} "
                     f"{'reads as':<13} target" + (f"  [{stopped}]" if stopped else ""))
        keys = list(dict.fromkeys(key for r in sorted(gpusel_by_round) for key in gpusel_by_round[r]))  # as printed
        for key in keys:
            gpusel_name, args = key
            pairs = [(gpusel_by_round[r][key]["gpusel_s"], torch_by_round[r][key]) for r in round_numbers
                     if key in gpusel_by_round.get(r, {}) and key in torch_by_round.get(r, {})]
            target = gpusel_by_round[next(r for r in round_numbers if key in gpusel_by_round.get(r, {}))][key]["target"]
            label = "  " + versus(gpusel_name, "torch")
            where = gpusel_name + (f" {size_text(args)}" if args != "-" else "")
            if not pairs:
                lines.append(f"{label:<{width}} {size_text(args):>7} torch reported no time for it")
                if target != "-":
                    unjudged.append(f"{where} vs torch")
                continue
            ratio = statistics.median(g / t for g, t in pairs)
            verdict = judge(target, ratio, None) if target != "-" else None
            if verdict == "MISSED":
                missed.append(f"{where} vs torch")
            ours = time_text(statistics.median(g for g, _ in pairs))
            theirs = time_text(statistics.median(t for _, t in pairs))
            shown = "-" if target == "-" else f"{target} {verdict}"
            lines.append(f"{label:<{width}} {size_text(args):>7} {len(pairs):>3} {ours:>19} {theirs:>9} {ratio:>7.3f} "
                         f"{'':<13} {reads_as(ratio):<13} {shown}")
    if not round_numbers or not_run or (torch_notes and not any(torch_by_round.values())):
        for (gpusel_name, args), target in sorted(torch_targets.items()):
            if target != "-":
                unjudged.append(gpusel_name + (f" {size_text(args)}" if args != "-" else "") + " vs torch")

    # --- where the time went ---------------------------------------------------------------
    steps = []
    for line in read(os.path.join(results, "steps")).splitlines():
        parts = line.rsplit(" ", 2)
        if len(parts) == 3:
            steps.append((parts[0], parts[1], int(parts[2]) if parts[2].isdigit() else 0))
    if steps:
        groups = {}
        for name, _, took in steps:
            group = ("tests" if name.endswith("_real") else "PyTorch rounds" if name.startswith("round ")
                     else name)
            groups[group] = groups.get(group, 0) + took
        lines.append("")
        budget = settings.get("budget", "?")
        lines.append("time: " + ", ".join(f"{group} {took} s" for group, took in groups.items()) +
                     f"; the check {seconds} s of its {budget} s budget")

    lines.append("")
    verdict = "PASSED" if not failures and not missed else "FAILED"
    summary = f"{verdict} in {seconds} s"
    if failures:
        summary += "; failed: " + ", ".join(failures)
    if missed:
        summary += "; targets missed: " + ", ".join(missed)
    if unjudged:
        summary += "; not judged: " + ", ".join(unjudged)
    if dry_run:
        summary += " (dry run: no GPU, so nothing GPU-specific was measured)"
    lines.append(summary)
    print("\n".join(lines))
    return 0 if verdict == "PASSED" else 1


if __name__ == "__main__":
    sys.exit(main())
