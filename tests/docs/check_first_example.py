#!/usr/bin/env python3
"""The README's first example builds with the README's first compile line, as written, from a folder of its own,
and runs where the loader does not know the CUDA directory: its -Wl,-rpath names the directory the program takes
its CUDA runtime from.

The block clones gpusel into a folder and the compile line includes that folder's include/ by an absolute path
($HOME/...), so that it works from any folder. The line's CUDA paths (/usr/local/cuda/include,
/usr/local/cuda/lib64) become this toolkit's include directory and a fresh directory holding copies of its
libcudart, which no loader cache or default path knows: the program must load its CUDA runtime from there, by its
own RUNPATH. `c++` becomes CXX and the clone's include/ this checkout's. Where the program finds no GPU (no driver,
as on CI), its output is the README's block for that case, word for word: gpusel's sentence before the runtime's.

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
    block = re.findall(r"```sh\n(.*?)```", text, re.S)[0].splitlines()
    line = next(l for l in block if l.startswith("c++ "))
    print(f"README's first compile line: {line}")
    clone = next((l.split()[-1] for l in block if l.startswith("git clone ")), None)
    if clone is None or not clone.startswith("~/"):
        print("the README's first block does not clone gpusel into a folder of the home directory")
        return 1
    include = "$HOME/" + clone[2:] + "/include"
    if f" -I{include} " not in line:
        print(f"the compile line does not include {include}, the clone's headers, by an absolute path")
        return 1
    no_gpu = re.search(r"```text\n(0 GPU\(s\); running on cpu\n.*?)```", text, re.S)
    if no_gpu is None:
        print("the README does not show the example's output on a machine without a GPU")
        return 1
    with tempfile.TemporaryDirectory() as work:
        libraries = os.path.join(work, "cuda", "lib64")
        os.makedirs(libraries)
        for library in glob.glob(os.path.join(cuda_library, "libcudart.so*")):
            shutil.copy(library, libraries, follow_symlinks=True)
        checkout_include = os.path.join(os.path.dirname(os.path.abspath(readme)), "include")
        with open(os.path.join(work, "app.cpp"), "w") as f:
            f.write(source)
        command = line.replace("/usr/local/cuda/include", cuda_include).replace("/usr/local/cuda/lib64", libraries)
        command = command.replace(include, checkout_include)
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
        if "no NVIDIA driver was found" in run.stderr and run.stdout + run.stderr != no_gpu.group(1):
            print(f"without a driver the program's output is not the README's:\n{no_gpu.group(1)}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
