#!/usr/bin/env bash
# ctest engines_torchrun: each rank's GPU under a real torchrun, judged by torchrun's own LOCAL_RANK, on the
# fake NVML's 4-GPU machine; `gpusel run --local-rank` (leased) and gpusel::local_rank_device() side by side.
#   check_torchrun.sh <python with torch> <gpusel> <fake NVML library> <rank device program>
# 1. 4 ranks: rank r gets GPU r, and explain names torchrun (TORCHELASTIC_RUN_ID beside LOCAL_RANK).
# 2. CUDA_VISIBLE_DEVICES=2,3 with 2 ranks: GPUs 2 and 3. 3. With 3 ranks: rank 2 refused, with the reason.
# Exits 77 (ctest SKIP_RETURN_CODE) with the reason where the Python cannot import torch.distributed.run.
set -uo pipefail
python=$1 gpusel=$2 fake_nvml=$3 rank_device=$4
if ! "$python" -c "import torch.distributed.run" 2>/dev/null; then
  echo "SKIPPED: $python cannot import torch.distributed.run (torchrun; .ci/run installs torch into" \
    "build/venv-torch and sets GPUSEL_ENGINES_PYTHON)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER LOCAL_RANK LOCAL_WORLD_SIZE TORCHELASTIC_RUN_ID RAY_JOB_ID RAY_RAYLET_PID \
  SLURM_JOB_ID SLURM_LOCALID OMPI_COMM_WORLD_LOCAL_RANK GPUSEL_JOB_LEASE
export GPUSEL_NVML_LIBRARY=$fake_nvml GPUSEL_LEASE_DIR=$work/leases TMPDIR=$work  # torchrun's error files too
printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/four.txt"
export GPUSEL_FAKE_NVML_CONFIG=$work/four.txt ENGINES_GPUSEL=$gpusel ENGINES_RANK_DEVICE=$rank_device
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
gpu() { echo "GPU-fa4e0000-0000-0000-0000-00000000000$1"; }

# torchrun_job <ranks> <first GPU> [<variables...>]: the job's ranks, each judged by its LOCAL_RANK.
torchrun_job() {
  local ranks=$1 first=$2 rank
  shift 2
  export ENGINES_OUT=$work/job.$ranks.$first
  mkdir -p "$ENGINES_OUT"
  echo "--- $* torchrun --standalone --nproc-per-node $ranks --no-python torchrun_rank.sh"
  env "$@" "$python" -m torch.distributed.run --standalone --nproc-per-node "$ranks" --no-python \
    "$(dirname "$0")/torchrun_rank.sh" >"$work/torchrun.log" 2>&1 || { cat "$work/torchrun.log"; fail "torchrun exited with $?"; }
  for ((rank = 0; rank < ranks; rank++)); do
    local out=$ENGINES_OUT/rank.$rank expected
    expected=$(gpu $((first + rank)))
    echo "rank $rank: $(tr '\n' ' ' <"$out" 2>/dev/null)"
    python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["allotment"]["engine"]; sys.exit(not (e["name"] == "torchrun" and "TORCHELASTIC_RUN_ID=" in e["said"] and "LOCAL_RANK=%s," % sys.argv[2] in e["said"]))' \
      "$out.explain.json" "$rank" || fail "rank $rank: explain does not name torchrun: $(cat "$out.explain.json")"
    if ((first + rank < 4 && (first == 0 || rank < 2))); then
      grep -qx "command 0 $expected" "$out" || fail "rank $rank: gpusel run --local-rank did not give $expected"
      grep -qx "library 0 $expected" "$out" || fail "rank $rank: local_rank_device() did not give $expected"
    else
      grep -qx "command 125 " "$out" && grep -q "local rank $rank has no GPU of its number" "$out.command_err" ||
        fail "rank $rank: gpusel run --local-rank was not refused with the reason: $(cat "$out.command_err")"
      grep -qx "library 1 " "$out" && grep -q "local rank $rank has no GPU of its number" "$out.library_err" ||
        fail "rank $rank: local_rank_device() was not refused with the reason: $(cat "$out.library_err")"
    fi
  done
}

started=$SECONDS
torchrun_job 4 0
torchrun_job 2 2 CUDA_VISIBLE_DEVICES=2,3
torchrun_job 3 2 CUDA_VISIBLE_DEVICES=2,3
echo "torchrun: $((SECONDS - started)) s"
[ $failures = 0 ] || { echo "FAILED: $failures checks"; exit 1; }
echo "PASSED: each rank took the GPU of its LOCAL_RANK, by the command and by the library; rank 2 of 3 on 2 GPUs refused"
