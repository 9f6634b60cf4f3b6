#!/usr/bin/env python3
"""Sweeps the copy engine's tunables and recommends defaults.

Opt-in, separate from the GPU check (tests/gpu/check.sh never runs it): for
every point of a grid of workers x slots x chunk sizes it runs buffer_bench's
pageable host->device and device->new-host benchmarks in a process of its own,
with GPUSEL_COPY_WORKERS / GPUSEL_COPY_SLOTS / GPUSEL_COPY_CHUNK set (Note
[Tuning the copy engine] in include/gpusel/copy_engine_options.hpp), and takes
the median GB/s of the repetitions. It prints one table and the best point per
direction. The grid points run in a shuffled order, so that a host whose
speed drifts (other jobs, thermal limits) does not favour one end of the grid.

    tests/bench/sweep_engine.py build/gpu-check              # the real benchmark, 1 GiB, on a GPU
    tests/bench/sweep_engine.py build/default --emulated     # a smoke test of the script on the emulation

On the emulation the figures say nothing about a GPU: it only shows that the
grid runs and the bytes arrive (every benchmark checks them).
"""
import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

BENCHMARKS = {
    "host->device": "gpusel_pageable_to_device",
    "device->new host": "gpusel_device_to_new_host",
}


def parse_list(text):
    return [int(item) for item in text.split(",") if item]


def run_point(binary, size, workers, slots, chunk_mib, repetitions, min_time):
    environment = dict(os.environ)
    environment.update(
        GPUSEL_COPY_WORKERS=str(workers), GPUSEL_COPY_SLOTS=str(slots), GPUSEL_COPY_CHUNK=f"{chunk_mib}M")
    names = "|".join(BENCHMARKS.values())
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [
            binary,
            f"--benchmark_filter=^({names})/{size}(/|$)",
            f"--benchmark_repetitions={repetitions}",
            f"--benchmark_min_time={min_time}",
            f"--benchmark_out={out.name}",
            "--benchmark_out_format=json",
        ]
        result = subprocess.run(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout[-2000:]}")
        if "benchmarks skipped:" in result.stdout:
            raise SystemExit(f"the benchmark skipped: {result.stdout.strip()[-500:]}")
        report = json.load(open(out.name))
    rates = {direction: [] for direction in BENCHMARKS}
    for run in report.get("benchmarks", []):
        if run.get("run_type") != "iteration" or run.get("error_occurred"):
            if run.get("error_occurred"):
                raise SystemExit(f"{run['name']}: {run.get('error_message')}")
            continue
        for direction, name in BENCHMARKS.items():
            if run["name"].startswith(name + "/") and "bytes_per_second" in run:
                rates[direction].append(run["bytes_per_second"] / 1e9)
    return {direction: statistics.median(values) if values else None for direction, values in rates.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", help="the build folder holding tests/bench/buffer_bench")
    parser.add_argument("--emulated", action="store_true", help="run buffer_bench_emulated (a smoke test)")
    parser.add_argument("--workers", default="6,8,10,12")
    parser.add_argument("--slots", default="2,3")
    parser.add_argument("--chunk-mib", default="1,2,4")
    parser.add_argument("--size", type=int, default=None, help="bytes (default: 1 GiB, 40 MiB emulated)")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", default="0.05")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    binary = os.path.join(args.build, "tests", "bench", "buffer_bench_emulated" if args.emulated else "buffer_bench")
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"no {binary}: build the benchmarks first")
    size = args.size or ((40 << 20) if args.emulated else (1 << 30))
    grid = list(itertools.product(parse_list(args.workers), parse_list(args.slots), parse_list(args.chunk_mib)))
    order = grid[:]
    random.Random(args.seed).shuffle(order)
    results = {}
    for index, point in enumerate(order, 1):
        print(f"[{index}/{len(order)}] workers={point[0]} slots={point[1]} chunk={point[2]} MiB", file=sys.stderr)
        results[point] = run_point(binary, size, *point, args.repetitions, args.min_time)

    print(f"copy engine sweep, {size} bytes, median GB/s of {args.repetitions} repetitions"
          + (" (EMULATED: no GPU figure)" if args.emulated else ""))
    header = f"{'workers':>7} {'slots':>5} {'chunk':>6}" + "".join(f" {d:>17}" for d in BENCHMARKS)
    print(header)
    for point in grid:
        cells = "".join(
            f" {results[point][d]:>17.2f}" if results[point][d] is not None else f" {'-':>17}" for d in BENCHMARKS)
        print(f"{point[0]:>7} {point[1]:>5} {str(point[2]) + ' MiB':>6}{cells}")
    print("recommended (best median per direction):")
    for direction in BENCHMARKS:
        measured = [point for point in grid if results[point][direction] is not None]
        if not measured:
            print(f"  {direction}: no figure")
            continue
        best = max(measured, key=lambda point: results[point][direction])
        print(f"  {direction}: workers={best[0]} slots={best[1]} chunk={best[2]} MiB "
              f"({results[best][direction]:.2f} GB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
