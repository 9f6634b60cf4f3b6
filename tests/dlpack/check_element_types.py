#!/usr/bin/env python3
"""dlpack_element_types: the element types DLPack can name compile with
to_dlpack and from_dlpack; any other T stops at gpusel's static_assert.

    check_element_types.py --cxx CXX --include DIR --cuda-include DIR
"""
import argparse
import os
import subprocess
import sys
import tempfile

TAKEN = ["bool", "std::int8_t", "std::int16_t", "std::int32_t", "std::int64_t", "std::uint8_t", "std::uint16_t",
         "std::uint32_t", "std::uint64_t", "float", "double", "std::complex<float>", "std::complex<double>"]
REFUSED = ["char", "long double", "Pair", "char32_t"]
SAYS = "gpusel DLPack: T must be bool, a fixed-width integer, float, double or std::complex<float|double>"

PREAMBLE = """#include <complex>
#include <cstdint>
#include "gpusel/dlpack.hpp"
struct Pair { float a, b; };
"""
USE = """void use_{n}(gpusel::dlpack::ManagedTensorVersioned* tensor) {{
  gpusel::Buffer<{t}> buffer = gpusel::from_dlpack<{t}>(tensor);
  (void)gpusel::to_dlpack(std::move(buffer));
}}
"""


def start_compile(args, element_types, folder, name):
    # One file per call: the taken types together, each refused type alone.
    path = os.path.join(folder, name + ".cpp")
    with open(path, "w") as unit:
        unit.write(PREAMBLE + "".join(USE.format(n=n, t=t) for n, t in enumerate(element_types)))
    return subprocess.Popen([args.cxx, "-std=c++17", "-fsyntax-only", "-I", args.include, "-isystem",
                             args.cuda_include, path], stderr=subprocess.PIPE, text=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cxx", required=True)
    parser.add_argument("--include", required=True)
    parser.add_argument("--cuda-include", required=True)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory() as folder:
        taken = start_compile(args, TAKEN, folder, "taken")
        refused = [(t, start_compile(args, [t], folder, f"refused{n}")) for n, t in enumerate(REFUSED)]
        errors = taken.communicate()[1]
        print(f"{', '.join(TAKEN)}: {'compile' if taken.returncode == 0 else 'do not compile'}")
        if taken.returncode != 0:
            print(errors[-3000:])
            failed = True
        for element_type, process in refused:
            errors = process.communicate()[1]
            said = SAYS in errors
            print(f"{element_type}: {'compiles' if process.returncode == 0 else 'refused'}"
                  f"{'' if process.returncode == 0 or said else ' (without gpusel sentence)'}")
            if process.returncode == 0 or not said:
                print(errors[-3000:])
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
