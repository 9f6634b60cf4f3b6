#!/usr/bin/env bash
# The GPU check: runs every real-runtime test and every benchmark from prebuilt
# binaries on a machine with a GPU, and prints one table last.
#
#   tests/gpu/check.sh [--dry-run] [build directory, default build/gpu-check]
#
# Build the binaries (on any Linux machine with the CUDA Toolkit, GoogleTest
# and Google Benchmark) with the gpu-check preset:
#   cmake --preset gpu-check && cmake --build --preset gpu-check
# It links the CUDA runtime, GoogleTest and libstdc++ statically and copies
# Google Benchmark's shared library to <build>/lib, so the GPU machine needs
# only the NVIDIA driver (and python3 + PyTorch for the PyTorch column).
#
# Binaries are discovered, so new ones are picked up: <build>/tests/*_real
# (GoogleTest) and <build>/tests/bench/* (Google Benchmark; the *_emulated
# smoke-test builds are left out). Some tests describe made-up machines to a
# fake NVML, found in <build>/tests/fake_nvml/: copy it along with the tests. Each step has a hard timeout and the whole
# check a budget (defaults below: under 5 minutes on one GPU).
#
# With no GPU (or --dry-run) it runs the same steps quickly: the tests check
# the no-GPU behaviour and skip the rest, the benchmarks skip, and the table
# says so. Exit status: 0 when every test passed and every benchmark binary
# ran and met the targets it declares; 1 otherwise; 2 for a usage error.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dry_run=0
build=build/gpu-check
for argument in "$@"; do
  case $argument in
    --dry-run) dry_run=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check.sh: unknown option $argument (see --help)" >&2; exit 2 ;;
    *) build=$argument ;;
  esac
done
if [[ ! -d $build/tests ]]; then
  echo "check.sh: $build/tests does not exist; build with: cmake --preset gpu-check && cmake --build --preset gpu-check" >&2
  exit 2
fi
build=$(cd "$build" && pwd)

test_timeout=${GPUSEL_CHECK_TEST_TIMEOUT:-90}     # seconds, per test binary
bench_timeout=${GPUSEL_CHECK_BENCH_TIMEOUT:-120}  # seconds, per benchmark binary
budget=${GPUSEL_CHECK_BUDGET:-270}                # seconds, the whole check
results=$build/gpu-check-results
rm -rf "$results"
mkdir -p "$results/tests" "$results/bench"
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start=$SECONDS

# The machine, for the table's first line.
if gpus=$(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null) &&
   [[ -n $gpus ]]; then
  printf '%s\n' "$gpus" > "$results/machine"
else
  echo "no GPU visible (nvidia-smi found none): dry run, every GPU test and benchmark skips" > "$results/machine"
  dry_run=1
fi
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}" >> "$results/machine"
min_time=${GPUSEL_CHECK_MIN_TIME:-0.2}  # seconds per benchmark (Google Benchmark 1.7 syntax)
if ((dry_run)); then
  min_time=0.01
  echo "dry run" > "$results/dry_run"
fi

# run_step <name> <timeout> <log> <command...>: runs one step with a hard
# timeout clipped to what is left of the budget; records status and seconds.
run_step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((budget - (SECONDS - start)))
  if ((left < 5)); then
    echo "not run: the check's ${budget} s budget was spent" > "$log"
    echo "budget" > "$log.status"
    return
  fi
  ((limit > left)) && limit=$left
  echo "--- $name (timeout ${limit} s)"
  local step_start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$log" 2>&1
  local status=$?
  echo "$status $((SECONDS - step_start))" > "$log.status"
  tail -n 3 "$log" | sed 's/^/    /'
}

shopt -s nullglob
found=0
for binary in "$build"/tests/*_real; do
  [[ -f $binary && -x $binary ]] || continue
  found=1
  name=$(basename "$binary")
  run_step "$name" "$test_timeout" "$results/tests/$name.log" "$binary" --gtest_color=no
done
((found)) || echo "check.sh: no test binary matches $build/tests/*_real" >&2

for binary in "$build"/tests/bench/*; do
  [[ -f $binary && -x $binary && $binary != *_emulated && $binary != *.so* ]] || continue
  name=$(basename "$binary")
  run_step "$name" "$bench_timeout" "$results/bench/$name.log" "$binary" \
    "--benchmark_min_time=$min_time" --benchmark_color=false \
    "--benchmark_out=$results/bench/$name.json" --benchmark_out_format=json
done

torch_script=$here/../bench/transfer_torch.py
if [[ -f $torch_script ]]; then
  if python3 -c "import torch" > /dev/null 2>&1; then
    run_step "transfer_torch.py" "$bench_timeout" "$results/torch.log" python3 "$torch_script"
  else
    echo "not run: python3 cannot import torch" > "$results/torch.log"
  fi
fi

echo
if command -v python3 > /dev/null; then
  python3 "$here/summarize.py" "$results" "$((SECONDS - start))"
else
  echo "python3 not found: raw results are in $results" >&2
  grep -H -E "PASSED|FAILED|SKIPPED" "$results"/tests/*.log
  exit 1
fi
