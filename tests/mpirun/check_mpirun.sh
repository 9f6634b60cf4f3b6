#!/usr/bin/env bash
# ctest launcher_mpirun: gpusel::local_rank_device under a real `mpirun`.
#   check_mpirun.sh <rank_device program>
# 1. `mpirun -np 4` on an emulated machine with 4 GPUs: the 4 ranks get 4
#    different devices, and each creates a context on its own device only.
# 2. `mpirun -np 5`, asking for one GPU per rank: every rank fails and says why.
# Exits 77 (ctest SKIP_RETURN_CODE) when mpirun is not installed.
set -uo pipefail
program=$1

if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: mpirun is not installed (Debian: apt-get install openmpi-bin)"
  exit 77
fi
flags=()
if mpirun --version 2>&1 | grep -q "Open MPI"; then
  flags+=(--oversubscribe)                              # more ranks than this machine has cores
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)    # CI runs as root
fi
fail() { echo "FAILED: $*"; exit 1; }

echo "--- mpirun -np 4 ${flags[*]} $program"
output=$(mpirun "${flags[@]}" -np 4 "$program" 2>&1) || fail "mpirun exited with $?: $output"
echo "$output"
lines=$(grep '^rank ' <<<"$output")
[ "$(wc -l <<<"$lines")" = 4 ] || fail "expected a line from each of the 4 ranks"
devices=$(sed -n 's/^rank [0-9]*: cuda:\([0-9]*\) .*/\1/p' <<<"$lines" | sort -n | tr '\n' ' ')
[ "$devices" = "0 1 2 3 " ] || fail "the 4 ranks did not get 4 different devices (got: $devices)"
while read -r line; do
  device=$(sed -n 's/^rank [0-9]*: cuda:\([0-9]*\) .*/\1/p' <<<"$line")
  rank=$(sed -n 's/^rank \([0-9]*\):.*/\1/p' <<<"$line")
  [ "$rank" = "$device" ] || fail "local rank $rank got cuda:$device: $line"
  [[ "$line" == *"contexts on $device" ]] || fail "a context was created on another device: $line"
done <<<"$lines"

echo "--- mpirun -np 5 ${flags[*]} $program one-gpu-per-rank"
output=$(mpirun "${flags[@]}" -np 5 "$program" one-gpu-per-rank 2>&1) || fail "mpirun exited with $?: $output"
echo "$output"
errors=$(grep -c '^rank [0-9]: error: .*5 processes on this node each need a GPU of their own, but 4 CUDA devices are visible' <<<"$output")
[ "$errors" = 5 ] || fail "expected all 5 ranks to fail with the reason, $errors did"
echo "PASSED: 4 ranks got 4 different devices; 5 ranks on 4 GPUs all stopped with the reason"
