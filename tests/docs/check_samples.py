#!/usr/bin/env python3
"""The sample outputs of the docs are the gpusel command's real output.

A console block marked by the comment `<!-- sample: examples/machines/NAME.machine -->` on the line before it
is run: each `$ ` line goes to bash, with `gpusel` the command under test and the fake NVML describing the
machine file, and what it prints (stdout and stderr in order, as on a terminal) must be the lines that follow,
up to the next `$ ` line. Every run of a block starts in a fresh directory with its own lease directory and an
executable `./train` that prints nothing; CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and the launchers' variables
are unset unless the line sets them. The fake NVML's path is printed as libnvidia-ml.so.1, the real one's name.

  check_samples.py --gpusel PROGRAM --nvml LIBRARY --root SOURCE_DIR [--update] FILE...

A FILE without samples is skipped, but the first FILE (the README) must hold one. --update rewrites the blocks with
what the command printed.
"""
import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile

MARK = re.compile(r"^<!-- sample: (\S+) -->$")
LAUNCHER_VARIABLES = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                      "MPI_LOCALRANKID", "SLURM_LOCALID", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                      "GPUSEL_LEASE_DIR", "GPUSEL_FAKE_NVML_CONFIG", "SLURM_JOB_ID", "SLURM_STEP_ID",
                      "SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "NVIDIA_VISIBLE_DEVICES")


def blocks(lines):
    """(mark line index, machine, first line of the block body, index of its closing fence)"""
    for index, line in enumerate(lines):
        match = MARK.match(line)
        if not match:
            continue
        if index + 1 >= len(lines) or lines[index + 1] != "```console":
            raise SystemExit(f"line {index + 1}: a sample mark must be followed by a ```console block")
        end = index + 2
        while end < len(lines) and lines[end] != "```":
            end += 1
        yield index, match.group(1), index + 2, end


def run_block(body, machine, args):
    """The block as the command prints it now."""
    out = []
    with tempfile.TemporaryDirectory() as work:
        wrapper_dir = os.path.join(work, "bin")
        os.mkdir(wrapper_dir)
        # Line-buffered stdout, as on a terminal, so that stdout and stderr keep their order in one pipe.
        with open(os.path.join(wrapper_dir, "gpusel"), "w") as wrapper:
            wrapper.write(f'#!/bin/sh\nexec stdbuf -oL "{args.gpusel}" "$@"\n')
        os.chmod(os.path.join(wrapper_dir, "gpusel"), 0o755)
        cwd = os.path.join(work, "cwd")
        os.mkdir(cwd)
        with open(os.path.join(cwd, "train"), "w") as train:
            train.write("#!/bin/sh\nexit 0\n")
        os.chmod(os.path.join(cwd, "train"), 0o755)
        environment = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
        environment.update(PATH=wrapper_dir + os.pathsep + environment.get("PATH", "/usr/bin:/bin"),
                           GPUSEL_NVML_LIBRARY=args.nvml,
                           GPUSEL_FAKE_NVML_CONFIG=os.path.join(args.root, machine),
                           GPUSEL_LEASE_DIR=os.path.join(work, "leases"), LC_ALL="C")
        for line in body:
            if not line.startswith("$ "):
                continue
            done = subprocess.run(["bash", "-c", line[2:]], cwd=cwd, env=environment, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=60)
            out.append(line)
            out.extend(done.stdout.replace(args.nvml, "libnvidia-ml.so.1").splitlines())
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpusel", required=True)
    parser.add_argument("--nvml", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--update", action="store_true")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    failures = 0
    for name in args.files:
        path = os.path.join(args.root, name)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        found = list(blocks(lines))
        if not found:
            if name == args.files[0]:
                print(f"{name}: no sample block (<!-- sample: ... --> before a ```console block)")
                failures += 1
            continue
        for mark, machine, start, end in reversed(found):
            expected = lines[start:end]
            if not expected or not expected[0].startswith("$ "):
                print(f"{name}:{start + 1}: a sample block starts with a $ line")
                failures += 1
                continue
            actual = run_block(expected, machine, args)
            if actual == expected:
                continue
            if args.update:
                lines[start:end] = actual
                continue
            failures += 1
            print(f"{name}:{mark + 1}: the sample on {machine} is not what the command prints:")
            sys.stdout.writelines(l + "\n" for l in difflib.unified_diff(expected, actual, "documented", "printed",
                                                                          lineterm=""))
        if args.update:
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
        print(f"{name}: {len(found)} sample block(s) on {sorted(set(m for _, m, _, _ in found))}")
    if failures:
        print(f"{failures} sample(s) differ (run with --update to take the command's output)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
