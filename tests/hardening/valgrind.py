#!/usr/bin/env python3
"""Runs tests under valgrind memcheck: by default the real-runtime tests and the
examples, i.e. gpusel's own code against the real CUDA runtime on its no-GPU
path (no driver on CI machines).

    tests/hardening/valgrind.py <build directory> [ctest label regex, default ^(real|example)$]

The tests and how to run them (command, arguments, environment, working
directory) come from ctest itself, so tests added later are picked up. A
memcheck error or a definite or possible leak fails the test
(--error-exitcode=1).

No suppressions are needed: on the no-GPU path the CUDA runtime (13.0) fails
to load libcuda.so.1 and returns cudaErrorInsufficientDriver without leaving
a definite or possible leak. If a later runtime does, add a suppression file
here with a comment saying which allocation is the runtime's own, and pass it
with --suppressions.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import time

def tests_to_run(build_dir, labels):
    listing = subprocess.run(["ctest", "--test-dir", build_dir, "-L", labels, "--show-only=json-v1"],
                             check=True, capture_output=True, text=True).stdout
    tests = []
    for test in json.loads(listing)["tests"]:
        properties = {p["name"]: p["value"] for p in test.get("properties", [])}
        if "command" not in test:
            sys.exit(f"valgrind.py: {test['name']} is not built in {build_dir}: build it first")
        tests.append((test["name"], test["command"], properties))
    return tests


def run_one(test):
    name, command, properties = test
    environment = dict(os.environ)
    for assignment in properties.get("ENVIRONMENT", []):
        key, _, value = assignment.partition("=")
        environment[key] = value
    valgrind = ["valgrind", "--tool=memcheck", "--error-exitcode=1", "--leak-check=full",
                "--errors-for-leak-kinds=definite,possible", "--show-leak-kinds=definite,possible",
                "--track-origins=yes", "--num-callers=30", "--gen-suppressions=all", "--quiet"]
    start = time.monotonic()
    result = subprocess.run(valgrind + command, cwd=properties.get("WORKING_DIRECTORY"), env=environment,
                            capture_output=True, text=True, timeout=600)
    return name, result.returncode, time.monotonic() - start, result.stdout + result.stderr


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build_dir = sys.argv[1]
    labels = sys.argv[2] if len(sys.argv) > 2 else "^(real|example)$"
    tests = tests_to_run(build_dir, labels)
    if not tests:
        sys.exit(f"valgrind.py: no test labelled {labels} in {build_dir}")
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for name, code, seconds, output in pool.map(run_one, tests):
            print(f"{'ok  ' if code == 0 else 'FAIL'} {name} ({seconds:.1f} s)", flush=True)
            if code != 0:
                failed.append(name)
                print(output)
    print(f"valgrind memcheck: {len(tests) - len(failed)} of {len(tests)} clean")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
