#!/usr/bin/env bash
# ctest header_compile_once_program: runs the compile-once program (main.cpp,
# machine.cpp, header_only.cpp, linked with libgpusel.a) on two H200s described
# to the fake NVML and checks what it prints.
#   check.sh <program> <fake NVML library>
set -uo pipefail
program=$1
export GPUSEL_NVML_LIBRARY=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER OMPI_COMM_WORLD_LOCAL_RANK MV2_COMM_WORLD_LOCAL_RANK MPI_LOCALRANKID \
  SLURM_LOCALID
export GPUSEL_LEASE_DIR="$work/leases" LOCAL_RANK=1 LOCAL_WORLD_SIZE=2
# The emulated runtime shows as many GPUs as NVML, for what asks the runtime once CUDA has started.
export GPUSEL_EMULATED_DEVICES=2
cat >"$work/two.txt" <<MACHINE
driver 580.159.04
cuda_driver 13000
gpu name="NVIDIA H200" uuid=GPU-0a1b2c3d-0000-4000-8000-000000000000 pci=00000000:17:00.0 used_mib=120000 utilization=97
gpu name="NVIDIA H200" uuid=GPU-1b2c3d4e-0000-4000-8000-000000000001 pci=00000000:18:00.0 used_mib=0 utilization=0
MACHINE
export GPUSEL_FAKE_NVML_CONFIG="$work/two.txt"
if ! out=$("$program" 2>&1); then
  echo "$out"
  echo "FAILED: the program failed"
  exit 1
fi
echo "$out"
failures=0
for expected in \
  "inventory: 2 GPUs, driver 580.159.04" \
  "device_count: 2" \
  "CUDA_VISIBLE_DEVICES is unset" \
  "2 CUDA devices are visible (cuda:0..cuda:1):" \
  "  cuda:1  physical 1  nvidia-smi 1  NVIDIA H200  GPU-1b2c3d4e-0000-4000-8000-000000000001  00000000:18:00.0" \
  "criteria: at least 1 GPU (at most 1); most free memory first" \
  "topology: joined by NVLink, CPUs 0-3,8" \
  "physical order: 2 GPUs, exact, nvidia-smi 0 GPU-0a1b2c3d-0000-4000-8000-000000000000, nvidia-smi 1 GPU-1b2c3d4e-0000-4000-8000-000000000001" \
  "assessed: GPU 0 (nvidia-smi 0, NVIDIA H200, GPU-0a1b2c3d-0000-4000-8000-000000000000)" \
  "% utilized: fits" \
  "picked: GPU 1" \
  "leased: 1" \
  "holder: leased by another job" \
  "after release: free" \
  "local rank 1 of 2 (torchrun: LOCAL_RANK=1, LOCAL_WORLD_SIZE=2)" \
  "local_rank_device: cuda:1" \
  'escaped: \x1b]0;owned\x07' \
  "module on cuda:1" \
  "round trip: same bytes" \
  "header-only file: inventory 2 GPUs, picked GPU 1, round trip same values" \
  "missing device: gpusel::DeviceGuard: cudaSetDevice(cuda:7): invalid device ordinal (cudaErrorInvalidDevice); 2 CUDA devices are visible (cuda:0..cuda:1); CUDA_VISIBLE_DEVICES is unset"; do
  if ! grep -qF -- "$expected" <<<"$out"; then
    echo "FAILED: expected: $expected"
    failures=$((failures + 1))
  fi
done
[ "$failures" = 0 ] && echo "compile-once program: all checks passed"
exit "$failures"
