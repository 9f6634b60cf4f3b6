#!/usr/bin/env bash
# The GPU check: a host calibration, every real-runtime test, every benchmark
# (15 repetitions, randomly interleaved) and PyTorch rounds, from prebuilt
# binaries on a machine with a GPU, within 5 minutes; prints one table last.
#
#   tests/gpu/check.sh [--dry-run] [build directory, default build/gpu-check]
#
# Build the binaries (on any Linux machine with the CUDA Toolkit, GoogleTest
# and Google Benchmark) with the gpu-check preset:
#   cmake --preset gpu-check && cmake --build --preset gpu-check
# It links the CUDA runtime, GoogleTest and libstdc++ statically and copies
# Google Benchmark's shared library to <build>/lib, so the GPU machine needs
# only the NVIDIA driver (and python3 + PyTorch for the PyTorch rounds).
#
# The steps, in order (docs/benchmarks.md gives the time budget of each):
#  1. the machine: nvidia-smi, transparent huge pages (enabled, defrag);
#  2. <build>/tests/bench/host_calibration: memcpy GB/s for 1-16 threads, first
#     touch with 4 KiB pages and with THP, memcpy against streaming stores
#     into existing and fresh pages (GPUSEL_CHECK_CALIBRATION_ARGS);
#  3. every <build>/tests/*_real (GoogleTest);
#  4. every benchmark binary in <build>/tests/bench (the *_emulated smoke-test
#     builds, host_calibration and pick_bench, which times the fake NVML, aside), with GPUSEL_CHECK_REPETITIONS (15)
#     randomly interleaved repetitions of GPUSEL_CHECK_MIN_TIME (0.05) s each;
#     /proc/vmstat's thp_fault_alloc and thp_fault_fallback are read before and
#     after, and buffer_bench's "gpusel host memory:" line (the engine's
#     prefault decision and host block cache) is kept;
#  5. PyTorch rounds, where `import torch` works: GPUSEL_CHECK_ROUNDS (5)
#     times, buffer_bench --benchmark_filter='^gpusel_' (GPUSEL_CHECK_ROUND_REPETITIONS,
#     3, repetitions) then tests/bench/transfer_torch.py (GPUSEL_CHECK_TORCH_REPEATS,
#     3, samples; GPUSEL_CHECK_TORCH_ARGS adds arguments); a round starts only
#     when the budget has room for one more as long as the last one took;
#  6. tests/gpu/summarize.py: the table.
# Some tests describe made-up machines to a fake NVML, found in
# <build>/tests/fake_nvml/: copy it along with the tests. Each step has a hard
# timeout and the whole check a budget (GPUSEL_CHECK_BUDGET, 285 s).
#
# With no GPU (or --dry-run) it runs the same steps quickly: a small
# calibration, the tests check the no-GPU behaviour and skip the rest, the
# benchmarks skip, and the table says so. Exit status: 0 when every test passed
# and every benchmark binary ran and met the targets it declares; 1 otherwise;
# 2 for a usage error.
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
bench_timeout=${GPUSEL_CHECK_BENCH_TIMEOUT:-150}  # seconds, per benchmark binary
round_timeout=${GPUSEL_CHECK_ROUND_TIMEOUT:-60}   # seconds, per process of a PyTorch round
budget=${GPUSEL_CHECK_BUDGET:-285}                # seconds, the whole check
results=$build/gpu-check-results
rm -rf "$results"
mkdir -p "$results/tests" "$results/bench" "$results/rounds"
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GPUSEL_BENCH_MODEL_SHAPES=$here/../bench/model_shapes.txt  # buffer_bench and transfer_torch.py read it
start=$SECONDS

# 1. The machine, for the table's first lines.
if gpus=$(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null) &&
   [[ -n $gpus ]]; then
  printf '%s\n' "$gpus" > "$results/machine"
else
  echo "no GPU visible (nvidia-smi found none): dry run, every GPU test and benchmark skips" > "$results/machine"
  dry_run=1
fi
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}" >> "$results/machine"
{
  echo "cpus $(nproc 2>/dev/null || echo '?')"
  for what in enabled defrag; do
    echo "$what $(cat /sys/kernel/mm/transparent_hugepage/$what 2>/dev/null || echo unreadable)"
  done
} > "$results/thp"
# The repetitions and sizes (docs/benchmarks.md: how they fit the budget); a
# dry run takes the small ones. The environment overrides either.
if ((dry_run)); then
  echo "dry run" > "$results/dry_run"
  defaults=(3 0.01 1 1 0.01 1 "--memcpy-mib=16 --passes=1 --threads=1,2 --touch-mib=64 --touch-threads=1,2")
else
  defaults=(15 0.05 5 3 0.02 3 "")
fi
repetitions=${GPUSEL_CHECK_REPETITIONS:-${defaults[0]}}
min_time=${GPUSEL_CHECK_MIN_TIME:-${defaults[1]}}  # seconds per repetition (Google Benchmark 1.7 syntax)
rounds=${GPUSEL_CHECK_ROUNDS:-${defaults[2]}}
round_repetitions=${GPUSEL_CHECK_ROUND_REPETITIONS:-${defaults[3]}}
round_min_time=${GPUSEL_CHECK_ROUND_MIN_TIME:-${defaults[4]}}
torch_repeats=${GPUSEL_CHECK_TORCH_REPEATS:-${defaults[5]}}
calibration_args=${GPUSEL_CHECK_CALIBRATION_ARGS:-${defaults[6]}}
torch_args=${GPUSEL_CHECK_TORCH_ARGS:-}  # more arguments for transfer_torch.py (--sizes, --groups)
echo "repetitions $repetitions min_time $min_time rounds $rounds round_repetitions $round_repetitions" \
  "torch_repeats $torch_repeats budget $budget" > "$results/settings"

# run_step <name> <timeout> <log> <command...>: runs one step with a hard
# timeout clipped to what is left of the budget; records status and seconds
# in <log>.status and a line in $results/steps.
run_step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((budget - (SECONDS - start)))
  if ((left < 5)); then
    echo "not run: the check's ${budget} s budget was spent" > "$log"
    echo "budget" > "$log.status"
    echo "$name budget 0" >> "$results/steps"
    return
  fi
  ((limit > left)) && limit=$left
  echo "--- $name (timeout ${limit} s)"
  local step_start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$log" 2>&1
  local status=$?
  echo "$status $((SECONDS - step_start))" > "$log.status"
  echo "$name $status $((SECONDS - step_start))" >> "$results/steps"
  tail -n 3 "$log" | sed 's/^/    /'
}

vmstat_thp() {  # the THP fault counters, "name value" lines
  grep -E '^thp_fault_(alloc|fallback) ' /proc/vmstat 2>/dev/null || true
}

# 2. What the host can do, before anything else loads it.
calibration=$build/tests/bench/host_calibration
if [[ -x $calibration ]]; then
  # shellcheck disable=SC2086 # the arguments are words on purpose
  run_step host_calibration 40 "$results/calibration.log" "$calibration" $calibration_args
else
  echo "not run: $calibration was not built" > "$results/calibration.log"
fi

# 3. The tests.
shopt -s nullglob
found=0
for binary in "$build"/tests/*_real; do
  [[ -f $binary && -x $binary ]] || continue
  found=1
  name=$(basename "$binary")
  run_step "$name" "$test_timeout" "$results/tests/$name.log" "$binary" --gtest_color=no
done
((found)) || echo "check.sh: no test binary matches $build/tests/*_real" >&2

# 4. The benchmarks, each beside its raw baseline in the same run.
# pick_bench times list and pick on the fake NVML: host work with no CUDA call to compare against.
is_benchmark() {
  [[ -f $1 && -x $1 && $1 != *_emulated && $1 != *.so* && $(basename "$1") != host_calibration &&
    $(basename "$1") != pick_bench ]]
}
vmstat_thp > "$results/vmstat.before"
for binary in "$build"/tests/bench/*; do
  is_benchmark "$binary" || continue
  name=$(basename "$binary")
  run_step "$name" "$bench_timeout" "$results/bench/$name.log" "$binary" \
    "--benchmark_repetitions=$repetitions" --benchmark_enable_random_interleaving=true \
    "--benchmark_min_time=$min_time" --benchmark_color=false \
    "--benchmark_out=$results/bench/$name.json" --benchmark_out_format=json
done
vmstat_thp > "$results/vmstat.after"
# Which prefault decision the engine made, and its host block cache (buffer_bench prints it first).
grep -h -m1 '^gpusel host memory:' "$results/bench/buffer_bench.log" > "$results/host_memory" 2>/dev/null || true

# 5. PyTorch, in its own process: alternating rounds with gpusel's side.
torch_script=$here/../bench/transfer_torch.py
gpusel_side=$build/tests/bench/buffer_bench
if [[ ! -f $torch_script ]]; then
  echo "not run: $torch_script is missing" > "$results/rounds/not_run"
elif ! python3 -c "import torch" > /dev/null 2>&1; then
  echo "not run: python3 cannot import torch" > "$results/rounds/not_run"
elif ! is_benchmark "$gpusel_side"; then
  echo "not run: $gpusel_side was not built" > "$results/rounds/not_run"
else
  last_round=40  # seconds a round is assumed to take before one has run
  for ((round = 1; round <= rounds; round++)); do
    left=$((budget - (SECONDS - start)))
    if ((left < last_round + 10)); then  # 10 s kept for the summary
      echo "stopped before round $round of $rounds: ${left} s of the budget left, a round took ${last_round} s" \
        > "$results/rounds/stopped"
      break
    fi
    round_start=$SECONDS
    run_step "round $round: buffer_bench gpusel_*" "$round_timeout" "$results/rounds/gpusel.$round.log" \
      "$gpusel_side" --benchmark_filter='^gpusel_' "--benchmark_repetitions=$round_repetitions" \
      --benchmark_enable_random_interleaving=true "--benchmark_min_time=$round_min_time" --benchmark_color=false
    # shellcheck disable=SC2086 # torch_args are words on purpose
    run_step "round $round: transfer_torch.py" "$round_timeout" "$results/rounds/torch.$round.log" \
      python3 "$torch_script" "--repeats=$torch_repeats" $torch_args
    last_round=$((SECONDS - round_start))
  done
fi

# 6. The table.
echo
if command -v python3 > /dev/null; then
  python3 "$here/summarize.py" "$results" "$((SECONDS - start))"
else
  echo "python3 not found: raw results are in $results" >&2
  grep -H -E "PASSED|FAILED|SKIPPED" "$results"/tests/*.log
  exit 1
fi
