#!/usr/bin/env python3
"""The README's first example builds with the README's first compile line, as written, and runs where the
loader does not know the CUDA directory: its -Wl,-rpath names the directory the program takes its CUDA runtime
from.

The line's CUDA paths (/usr/local/cuda/include, /usr/local/cuda/lib64) become this toolkit's include directory
and a fresh directory holding copies of its libcudart, which no loader cache or default path knows: the program
must load its CUDA runtime from there, by its own RUNPATH. `c++` becomes CXX and `gpusel/include` this checkout's.

  check_first_example.py README CXX CUDA_INCLUDE_DIR CUDA_LIBRARY_DIR
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    readme, cxx, cuda_include, cuda_library = sys.argv[1:5]
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    source = re.search(r"```cpp\n(.*?)```", text, re.S).group(1)
    line = next(l for l in re.findall(r"```sh\n(.*?)```", text, re.S)[0].splitlines() if l.startswith("c++ "))
    print(f"README's first compile line: {line}")
    with tempfile.TemporaryDirectory() as work:
        libraries = os.path.join(work, "cuda", "lib64")
        os.makedirs(libraries)
        for library in glob.glob(os.path.join(cuda_library, "libcudart.so*")):
            shutil.copy(library, libraries, follow_symlinks=True)
        os.symlink(os.path.dirname(os.path.abspath(readme)), os.path.join(work, "gpusel"))
        with open(os.path.join(work, "app.cpp"), "w") as f:
            f.write(source)
        command = line.replace("/usr/local/cuda/include", cuda_include).replace("/usr/local/cuda/lib64", libraries)
        command = re.sub(r"^c\+\+ ", f"'{cxx}' ", command)
        build = subprocess.run(command, shell=True, cwd=work, capture_output=True, text=True)
        if build.returncode != 0:
            print(f"the README's compile line fails:\n{build.stdout}{build.stderr}")
            return 1
        environment = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        ldd = subprocess.run(["ldd", "./app"], cwd=work, capture_output=True, text=True, env=environment)
        loaded = re.search(r"libcudart\.so\S*\s+=>\s+(\S+)", ldd.stdout)
        if not loaded or os.path.dirname(os.path.realpath(loaded.group(1))) != os.path.realpath(libraries):
            print(f"the program does not take its CUDA runtime from the directory of its -L (no -Wl,-rpath?):\n"
                  f"{ldd.stdout}")
            return 1
        run = subprocess.run(["./app"], cwd=work, capture_output=True, text=True, env=environment)
        print(f"./app: exit {run.returncode}\n{run.stdout}{run.stderr}")
        if run.returncode != 0 or not re.match(r"\d+ GPU\(s\); running on (cpu|cuda:\d+)\n", run.stdout):
            print("the program did not run as the README says")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
