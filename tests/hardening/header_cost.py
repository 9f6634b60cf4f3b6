#!/usr/bin/env python3
"""What gpusel's headers cost the compiler, in instructions, against budgets.

    tests/hardening/header_cost.py [--cxx g++] [--cuda-include DIR] [--jobs N] [--json FILE] [--reported]

Each translation unit (TU) is a file of #include lines compiled with
`<cxx> -std=c++17 -fsyntax-only -I include -isystem <cuda include>` under
`valgrind --tool=callgrind --trace-children=yes`; its cost is the sum of the
instructions of every process the compiler driver runs (cc1plus for g++).
That count is the same run after run, whatever else the machine does, so a
ratio is judged as it is read: no repeated runs, no noise margin.

Anchors outside gpusel: A is <string> + <stdexcept> (what a header with an
exception type needs); T is a typical training file: <vector> <string>
<iostream> <memory> <functional> <mutex> <thread> <cuda_runtime_api.h>.
"T + gpusel/x.hpp" is T with x included after it. "compile-once" in a TU's
name defines GPUSEL_COMPILE_ONCE before the includes (Note [Compile-once mode]);
without it the TU is header-only. docs/benchmarks.md has the figures.
The header-only rows are reported, never judged, and measured only with
--reported: they are more than a third of the instructions of a run.
Exit 0 when every budget is met, 1 when one is missed, 2 when a TU does not
compile or valgrind cannot run.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = os.path.join(ROOT, "include")
ANCHORS = {
    "A": ["string", "stdexcept"],
    "T": ["vector", "string", "iostream", "memory", "functional", "mutex", "thread", "cuda_runtime_api.h"],
}
MODES = {"compile-once": "GPUSEL_COMPILE_ONCE"}

# measured TU / baseline TU <= budget
BUDGETS = [
    ("gpusel/error.hpp", "A", 1.25),
    ("gpusel/device.hpp", "gpusel/error.hpp", 1.20),
    ("gpusel/guard.hpp", "gpusel/error.hpp", 2.00),
    ("gpusel/stream.hpp", "gpusel/error.hpp", 2.00),
    ("T + gpusel/guard.hpp", "T", 1.20),
    ("T + compile-once + gpusel/buffer.hpp", "T", 1.30),
    # 1.40 until the lease trust rule, the wait line and the pick and guard work of issue 20 took clang to 1.412
    # (g++ 1.377): docs/benchmarks.md.
    # 1.45 until waiting for GPUs, the Slurm allotment and compute modes joined the umbrella and took clang to
    # 1.452; 1.47 until StreamView, LeaseState and the job's lease took it to 1.476; 1.48 until the typed
    # reasons (Rejection, RejectReason), Caller and rank_gpu took it to 1.486 (docs/benchmarks.md).
    ("T + compile-once + gpusel/gpusel.hpp", "T", 1.49),
]
# Reported, never judged: what a header-only file pays (with --reported).
REPORTED = [("T + gpusel/buffer.hpp", "T"), ("T + gpusel/gpusel.hpp", "T")]


def default_cuda_include():
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and os.path.exists(os.path.join(home, "include", "cuda_runtime_api.h")):
            return os.path.join(home, "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include")
    return "/usr/local/cuda/include"


def source_of(tu):
    parts = [part.strip() for part in tu.split("+")]
    defines = [f"#define {MODES[part]}\n" for part in parts if part in MODES]
    headers = [header for part in parts if part not in MODES for header in ANCHORS.get(part, [part])]
    return "".join(defines) + "".join(f"#include <{header}>\n" for header in headers)


def instructions(tu, number, options, work):
    """The instructions the compiler's processes execute on `tu`; raises RuntimeError if it does not compile."""
    name = os.path.join(work, f"tu{number}")
    with open(name + ".cpp", "w", encoding="utf-8") as file:
        file.write(source_of(tu))
    command = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={name}.%p.out",
               options.cxx, "-std=c++17", "-fsyntax-only", "-I", INCLUDE, "-isystem", options.cuda_include,
               name + ".cpp"]
    result = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{tu} does not compile with {options.cxx}:\n{result.stderr[-4000:]}")
    total = 0
    for out in glob.glob(name + ".*.out"):  # one per process: the driver, cc1plus
        with open(out, encoding="utf-8", errors="replace") as file:
            total += sum(int(line.split()[1]) for line in file if line.startswith("summary:"))
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cxx", default="g++", help="the compiler to measure (default g++)")
    parser.add_argument("--cuda-include", default=default_cuda_include(), help="where cuda_runtime_api.h is")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="TUs measured at once")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    parser.add_argument("--reported", action="store_true",
                        help="also measure the header-only rows, which no budget judges")
    options = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("header cost: valgrind is not installed", file=sys.stderr)
        return 2

    rows = [(m, b, budget) for m, b, budget in BUDGETS]
    if options.reported:
        rows += [(m, b, None) for m, b in REPORTED]
    tus = list(dict.fromkeys(tu for measured, baseline, _ in rows for tu in (measured, baseline)))
    with tempfile.TemporaryDirectory() as work, concurrent.futures.ThreadPoolExecutor(options.jobs) as pool:
        futures = {tu: pool.submit(instructions, tu, number, options, work) for number, tu in enumerate(tus)}
        try:
            count = {tu: future.result() for tu, future in futures.items()}
        except RuntimeError as error:
            print(f"header cost: {error}", file=sys.stderr)
            return 2

    version = subprocess.run([options.cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"{version}: -std=c++17 -fsyntax-only, compiler instructions (callgrind), millions")
    width = max(len(tu) for tu in tus)
    for tu in tus:
        print(f"  {tu:<{width}}  {count[tu] / 1e6:8.0f}")
    failed, results = False, []
    width = max(len(f"{m} / {b}") for m, b, _ in rows)
    for measured, baseline, budget in rows:
        ratio = count[measured] / count[baseline]
        if budget is None:
            status = "reported"
        elif ratio <= budget:
            status = f"met (budget {budget:.2f})"
        else:
            status, failed = f"MISSED (budget {budget:.2f})", True
        results.append({"measured": measured, "baseline": baseline, "budget": budget, "ratio": round(ratio, 4)})
        print(f"  {measured + ' / ' + baseline:<{width}}  {ratio:5.3f}  {status}")
    if options.json:
        with open(options.json, "w", encoding="utf-8") as file:
            json.dump({"compiler": version, "instructions": count, "ratios": results, "passed": not failed},
                      file, indent=2)
    if failed:
        print("header cost: a budget is missed: see what the header includes (g++ -H) and what its inline bodies "
              "instantiate (callgrind_annotate on the compiler's output)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
