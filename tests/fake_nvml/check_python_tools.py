#!/usr/bin/env python3
"""NVML's Python binding (nvidia-ml-py's pynvml) and nvitop's nvisel on the fake NVML (ctest fake_nvml_pynvml_nvisel).

As docs/trying-without-a-gpu.md says to run them: the build's fake_driver/ folder on LD_LIBRARY_PATH, so that they
load the fake by its real name, libnvidia-ml.so.1. On a machine whose free GPUs are unambiguous (two idle H200s
beside two busy ones):
  - pynvml reads what the machine file says (count, names, UUIDs, memory, utilization, processes); nvmlInit and
    nvmlShutdown are counted, and a call after the last shutdown raises NVMLError_Uninitialized;
  - every NVML function pynvml and nvisel look up exists in the fake (the binding raises FunctionNotFound for one
    that does not: a tool then shows an error where a real GPU shows N/A);
  - nvisel chooses among the GPUs `gpusel pick` calls free.
Skips (77) where the Python given has no pynvml or nvitop.

  check_python_tools.py PYTHON GPUSEL FAKE_DRIVER_DIR FAKE_NVML
"""
import os
import subprocess
import sys
import tempfile

MACHINE = """\
driver 580.159.04
cuda_driver 13000
gpu uuid=GPU-0a000000-0000-4000-8000-000000000000 used_mib=130000 utilization=97
gpu uuid=GPU-0b000000-0000-4000-8000-000000000001
gpu uuid=GPU-0c000000-0000-4000-8000-000000000002 used_mib=120000 utilization=88
gpu uuid=GPU-0d000000-0000-4000-8000-000000000003
process gpu=0 pid=4000000001 used_mib=129000
process gpu=2 pid=4000000002 used_mib=119000
"""

# Runs in the tool's Python: records each NVML function the binding looks up and what the fake answered,
# then runs the rest of argv as a module, as `python -m`.
RECORDING = """\
import runpy, sys, pynvml
looked_up, missing = set(), set()
original = pynvml._nvmlGetFunctionPointer
def recording(name):
    looked_up.add(name)
    try:
        return original(name)
    except pynvml.NVMLError_FunctionNotFound:
        missing.add(name)
        raise
pynvml._nvmlGetFunctionPointer = recording
import atexit
atexit.register(lambda: print("looked up:", " ".join(sorted(looked_up)), "\\nmissing:", " ".join(sorted(missing)),
                              file=sys.stderr))
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__")
"""

READING = """\
import pynvml
pynvml.nvmlInit()
pynvml.nvmlInit()  # counted: one shutdown leaves it initialized
pynvml.nvmlShutdown()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    memory = pynvml.nvmlDeviceGetMemoryInfo(h)
    processes = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    print(i, pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h), memory.used >> 20,
          pynvml.nvmlDeviceGetUtilizationRates(h).gpu, [p.pid for p in processes])
pynvml.nvmlShutdown()
try:
    pynvml.nvmlDeviceGetCount()
    print("a call after the last shutdown succeeded")
except pynvml.NVMLError_Uninitialized:
    print("uninitialized after the last shutdown")
"""

EXPECTED_READING = """\
0 NVIDIA H200 GPU-0a000000-0000-4000-8000-000000000000 130000 97 [4000000001]
1 NVIDIA H200 GPU-0b000000-0000-4000-8000-000000000001 0 0 []
2 NVIDIA H200 GPU-0c000000-0000-4000-8000-000000000002 120000 88 [4000000002]
3 NVIDIA H200 GPU-0d000000-0000-4000-8000-000000000003 0 0 []
uninitialized after the last shutdown
"""


def main():
    python, gpusel, fake_driver, fake_nvml = sys.argv[1:5]
    has = subprocess.run([python, "-c", "import pynvml, nvitop"], capture_output=True, text=True)
    if has.returncode != 0:
        print(f"skipped: {python} has no pynvml or nvitop (pip install nvidia-ml-py nvitop): {has.stderr.strip()}")
        return 77
    problems = []
    with tempfile.TemporaryDirectory() as work:
        machine = os.path.join(work, "two-free.machine")
        with open(machine, "w") as f:
            f.write(MACHINE)
        recording = os.path.join(work, "recording.py")
        with open(recording, "w") as f:
            f.write(RECORDING)
        environment = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "GPUSEL_NVML_LIBRARY")}
        environment.update(GPUSEL_FAKE_NVML_CONFIG=machine, GPUSEL_LEASE_DIR=os.path.join(work, "leases"))
        tool = dict(environment, LD_LIBRARY_PATH=fake_driver)
        read = subprocess.run([python, "-c", READING], capture_output=True, text=True, env=tool, timeout=60)
        print(f"pynvml:\n{read.stdout}{read.stderr}")
        if read.stdout != EXPECTED_READING:
            problems.append(f"pynvml did not read the machine file as written:\n{EXPECTED_READING}")
        chosen = subprocess.run([python, recording, "nvitop.select", "-n", "2"], capture_output=True, text=True,
                                env=tool, timeout=60)
        print(f"nvisel -n 2: exit {chosen.returncode}\n{chosen.stdout}{chosen.stderr}")
        missing = [line for line in chosen.stderr.splitlines() if line.startswith("missing:")]
        if chosen.returncode != 0 or missing != ["missing: "]:
            problems.append("nvisel failed, or looked up NVML functions the fake lacks")
        free = subprocess.run([gpusel, "pick", "--all"], capture_output=True, text=True,
                              env=dict(environment, GPUSEL_NVML_LIBRARY=fake_nvml), timeout=60)
        print(f"gpusel pick --all: exit {free.returncode}\n{free.stdout}{free.stderr}")
        free_gpus = set(free.stdout.strip().split(","))
        nvisel_gpus = set(chosen.stdout.strip().split(","))
        if free_gpus != {"1", "3"} or len(nvisel_gpus) != 2 or not nvisel_gpus <= free_gpus:
            problems.append(f"nvisel chose {sorted(nvisel_gpus)}, gpusel calls {sorted(free_gpus)} free")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
