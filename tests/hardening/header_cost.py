#!/usr/bin/env python3
"""What including <gpusel/gpusel.hpp> costs the compiler, beside the CUDA
runtime header it needs.

    tests/hardening/header_cost.py [--cxx g++] [--cuda-include DIR] [--runs 7] [--limit 0.5] [--breakdown]

Times `<cxx> -std=c++17 -fsyntax-only` (the front end: what a header costs
every file that includes it) of three one-line files, interleaved, and takes
the median of --runs runs of each:
  cuda     #include <cuda_runtime_api.h>
  cuda+std that, plus every standard and system header gpusel's headers include
  gpusel   #include <gpusel/gpusel.hpp>
and prints all three with the ratios.

Note [What the header-cost limit measures]
The C++ standard headers gpusel needs (<string>, <ostream>, <functional>, ...)
alone cost several times what <cuda_runtime_api.h>, a C header, costs: no
header that uses std::string can stay within 50% of it. So the limit applies
to gpusel's own code: gpusel over cuda+std must stay under --limit (50%).
gpusel over cuda alone is printed beside it, for the record.
The 50% target is not met yet: on a 2-core machine shared with other builds
gpusel's own code adds +42..77% over cuda+std (it was +78..116% while inline
bodies instantiated std::map, std::stable_sort, std::thread and a std::vector
per element type). What is left is mostly gpusel's own inline bodies and the
std::vector, std::optional and std::string members its public types need, spread
thin. CI runs it with --limit 1.1 as a regression guard until that is slimmed
(the median of seven runs still moved by some 30 points between runs here).
Keeping it slim: the body of an inline function that is not a template is
compiled in every file that includes gpusel, and so is every template it uses;
on lists of a few GPUs a loop costs less to compile than an <algorithm> or <map>
template and runs as fast, and a std::vector of a type gpusel already keeps
costs less than one of a new type.
"""
import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = os.path.join(ROOT, "include")


def default_cuda_include():
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if candidate and os.path.exists(os.path.join(candidate, "include", "cuda_runtime_api.h")):
            return os.path.join(candidate, "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include")
    return "/usr/local/cuda/include"


def system_headers_of_umbrella():
    """Every <...> header gpusel.hpp reaches through gpusel's own headers, CUDA's left out."""
    seen, system, pending = set(), set(), ["gpusel/gpusel.hpp"]
    while pending:
        header = pending.pop()
        if header in seen:
            continue
        seen.add(header)
        with open(os.path.join(INCLUDE, header), encoding="utf-8") as file:
            for line in file:
                match = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', line)
                if not match:
                    continue
                if match.group(1) == '"' and match.group(2).startswith("gpusel/"):
                    pending.append(match.group(2))
                elif match.group(1) == "<" and not match.group(2).startswith(("cuda", "driver_types", "nvml")):
                    system.add(match.group(2))
    return sorted(system)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    parser.add_argument("--cuda-include", default=default_cuda_include())
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--limit", type=float, default=0.5, help="the most gpusel may add over cuda+std (0.5: 50%%)")
    parser.add_argument("--breakdown", action="store_true", help="also time each public header alone")
    options = parser.parse_args()

    system = system_headers_of_umbrella()
    sources = {
        "cuda": "#include <cuda_runtime_api.h>\n",
        "cuda+std": "#include <cuda_runtime_api.h>\n" + "".join(f"#include <{h}>\n" for h in system),
        "gpusel": "#include <gpusel/gpusel.hpp>\n",
    }
    seconds = {name: [] for name in sources}
    with tempfile.TemporaryDirectory() as work:
        commands = {}
        for name, text in sources.items():
            path = os.path.join(work, name.replace("+", "_") + ".cpp")
            with open(path, "w", encoding="utf-8") as file:
                file.write(text)
            commands[name] = [options.cxx, "-std=c++17", "-fsyntax-only", "-I", INCLUDE,
                              "-isystem", options.cuda_include, path]
        for name, command in commands.items():  # once, untimed: warm caches, and fail early
            subprocess.run(command, check=True)
        for _ in range(options.runs):
            for name, command in commands.items():
                start = time.perf_counter()
                subprocess.run(command, check=True)
                seconds[name].append(time.perf_counter() - start)

    median = {name: statistics.median(values) for name, values in seconds.items()}
    own = median["gpusel"] / median["cuda+std"] - 1
    print(f"{options.cxx} -fsyntax-only, median of {options.runs} runs:")
    print(f"  cuda_runtime_api.h alone        {median['cuda'] * 1000:7.0f} ms")
    print(f"  + the {len(system):2d} std/system headers {median['cuda+std'] * 1000:7.0f} ms  ({', '.join(system)})")
    print(f"  gpusel/gpusel.hpp               {median['gpusel'] * 1000:7.0f} ms")
    print(f"  gpusel / cuda_runtime_api.h alone: {median['gpusel'] / median['cuda']:.2f}x "
          f"(dominated by the standard headers: see Note [What the header-cost limit measures])")
    print(f"  gpusel's own code over cuda+std:   {own * 100:+.0f}% (limit {options.limit * 100:.0f}%)")
    if options.breakdown:
        print("  each public header alone (median of 3; includes what it includes):")
        for header in sorted(glob.glob(os.path.join(INCLUDE, "gpusel", "*.hpp"))):
            command = [options.cxx, "-std=c++17", "-fsyntax-only", "-I", INCLUDE, "-isystem", options.cuda_include,
                       "-x", "c++", "-"]
            source = f"#include <gpusel/{os.path.basename(header)}>\n"
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                subprocess.run(command, check=True, input=source, text=True)
                runs.append(time.perf_counter() - start)
            print(f"    gpusel/{os.path.basename(header):<22} {statistics.median(runs) * 1000:6.0f} ms")
    if own > options.limit:
        print("header cost: over the limit: see what the headers instantiate or include beyond the standard library")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
