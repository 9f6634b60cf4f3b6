#!/usr/bin/env python3
"""Stages a CUDA 12 folder that CMake's FindCUDAToolkit takes as CUDAToolkit_ROOT, from PyPI's wheels.

  stage_cuda.py RUNTIME_WHEEL NVCC_WHEEL OUT

PyPI's nvidia-cuda-runtime-cu12 holds the runtime's headers and libcudart.so.12, but not the crt/ headers that
cuda_runtime_api.h includes (they come with nvcc: nvidia-cuda-nvcc-cu12 of the same release, which holds no nvcc
that can compile, only headers and a few tools). OUT gets:
  include/         both wheels' headers;
  lib64/           libcudart.so.12, and the link libcudart.so -> libcudart.so.12 that find_library and -lcudart need
                   (the wheel has no unversioned name);
  bin/             empty: FindCUDAToolkit derives the root from it;
  version.txt      "CUDA Version <the runtime wheel's version>": without nvcc, FindCUDAToolkit finds the root by
                   this file and reads its version there.
"""
import os
import re
import shutil
import sys
import zipfile


def extract(wheel, prefix, destination):
    """Copies the wheel's files under `prefix` into `destination`; returns how many."""
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            target = os.path.join(destination, name[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with archive.open(name) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            count += 1
    return count


def main():
    runtime_wheel, nvcc_wheel, out = sys.argv[1:4]
    version = re.match(r"nvidia_cuda_runtime_cu12-([0-9.]+)-", os.path.basename(runtime_wheel)).group(1)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "bin"))
    if extract(runtime_wheel, "nvidia/cuda_runtime/include/", os.path.join(out, "include")) == 0:
        sys.exit(f"{runtime_wheel}: no nvidia/cuda_runtime/include/")
    if extract(nvcc_wheel, "nvidia/cuda_nvcc/include/", os.path.join(out, "include")) == 0:
        sys.exit(f"{nvcc_wheel}: no nvidia/cuda_nvcc/include/")
    lib = os.path.join(out, "lib64")
    if extract(runtime_wheel, "nvidia/cuda_runtime/lib/", lib) == 0 or not os.path.exists(f"{lib}/libcudart.so.12"):
        sys.exit(f"{runtime_wheel}: no nvidia/cuda_runtime/lib/libcudart.so.12")
    os.symlink("libcudart.so.12", os.path.join(lib, "libcudart.so"))
    with open(os.path.join(out, "version.txt"), "w") as f:
        f.write(f"CUDA Version {version}\n")
    print(f"staged CUDA {version} in {out}")


if __name__ == "__main__":
    main()
