#!/usr/bin/env python3
"""docs/trying-without-a-gpu.md's program on the fake machine, followed as written.

The block under `<!-- test: docs_fake_machine_program -->` runs the README's first example, built with the README's
first compile line, on a machine file, with the build's fake_driver/ folder on LD_LIBRARY_PATH; the ```text block
after it is what it prints. This builds the program as check_first_example.py does (the README's line, its CUDA
paths this toolkit's), runs the doc's line with $HOME/gpusel read as this checkout and $HOME/gpusel/build/demo as
this build tree, and compares stdout and stderr, in that order, with the block word for word.

  check_fake_machine_program.py README DOC CXX CUDA_INCLUDE_DIR CUDA_LIBRARY_DIR SOURCE_DIR BINARY_DIR
"""
import os
import re
import subprocess
import sys
import tempfile


def main():
    readme, doc, cxx, cuda_include, cuda_library, source_dir, binary_dir = sys.argv[1:8]
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    source = re.search(r"```cpp\n(.*?)```", text, re.S).group(1)
    line = next(l for l in re.findall(r"```sh\n(.*?)```", text, re.S)[0].splitlines() if l.startswith("c++ "))
    with open(doc, encoding="utf-8") as f:
        guide = f.read()
    found = re.search(r"<!-- test: docs_fake_machine_program -->\n```sh\n(.*?)```\n```text\n(.*?)```", guide, re.S)
    if found is None:
        print(f"{doc} has no block marked <!-- test: docs_fake_machine_program --> with its output after it")
        return 1
    commands, expected = found.group(1), found.group(2)
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "app.cpp"), "w") as f:
            f.write(source)
        build = line.replace("/usr/local/cuda/include", cuda_include).replace("/usr/local/cuda/lib64", cuda_library)
        build = build.replace("$HOME/gpusel/include", os.path.join(source_dir, "include"))
        build = re.sub(r"^c\+\+ ", f"'{cxx}' ", build)
        built = subprocess.run(build, shell=True, cwd=work, capture_output=True, text=True)
        if built.returncode != 0:
            print(f"the README's compile line fails:\n{built.stdout}{built.stderr}")
            return 1
        run = commands.replace("$HOME/gpusel/build/demo", binary_dir).replace("$HOME/gpusel", source_dir)
        print(f"the doc's lines, here:\n{run}")
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("LD_LIBRARY_PATH", "GPUSEL_NVML_LIBRARY", "CUDA_VISIBLE_DEVICES")}
        environment["GPUSEL_LEASE_DIR"] = os.path.join(work, "leases")
        ran = subprocess.run(["bash", "-e", "-c", run], cwd=work, capture_output=True, text=True, env=environment)
        said = ran.stdout + ran.stderr
        print(f"exit {ran.returncode}:\n{said}")
        if ran.returncode != 0 or said != expected:
            print(f"the doc says it prints:\n{expected}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
