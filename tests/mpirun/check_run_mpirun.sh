#!/usr/bin/env bash
# ctest tool_run_mpirun: `gpusel run --local-rank` under a real `mpirun`, on a
# machine of 4 GPUs described to the fake NVML.
#   check_run_mpirun.sh <gpusel program> <fake NVML library>
# 1. `mpirun -np 4 gpusel run --local-rank -- sh -c ...`: rank i runs with the
#    i-th GPU's UUID as its CUDA_VISIBLE_DEVICES, four different GPUs.
# 2. The same while another job leases GPU 2: rank 2 fails with 125 and says who
#    holds its GPU, and does not take another; the other ranks run.
# Exits 77 (ctest SKIP_RETURN_CODE) when mpirun is not installed.
set -uo pipefail
gpusel=$1
library=$2

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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/machine.txt"
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER
# Passed through env(1), which every mpirun starts, rather than a launcher's own export flag.
environment=(env "GPUSEL_NVML_LIBRARY=$library" "GPUSEL_FAKE_NVML_CONFIG=$work/machine.txt"
  "GPUSEL_LEASE_DIR=$work/leases")
rank_says='echo "rank ${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-?}}: $CUDA_VISIBLE_DEVICES"; sleep 1'

# The ranks' stdout and gpusel's stderr are read apart: mpirun forwards each rank's
# streams in chunks of its own, so on one stream a rank's line could land
# inside another process's message.
echo "--- mpirun -np 4 ${flags[*]} gpusel run --local-rank -- sh -c ..."
output=$(mpirun "${flags[@]}" -np 4 "${environment[@]}" "$gpusel" run --local-rank -- sh -c "$rank_says" \
  2>"$work/stderr") || fail "mpirun exited with $?: $output $(cat "$work/stderr")"
echo "$output"
cat "$work/stderr"
for rank in 0 1 2 3; do
  grep -qx "rank $rank: GPU-fa4e0000-0000-0000-0000-00000000000$rank" <<<"$output" ||
    fail "rank $rank did not run on the job's GPU $rank"
done

echo "--- the same while another job leases GPU 2"
"${environment[@]}" "$gpusel" run --exclude 0,1,3 -- sleep 60 &
holder=$!
for _ in $(seq 50); do "${environment[@]}" "$gpusel" pick --exclude 0,1,3 >/dev/null 2>&1 || break; sleep 0.1; done
output=$(mpirun "${flags[@]}" -np 4 "${environment[@]}" "$gpusel" run --local-rank -- sh -c "$rank_says" \
  2>"$work/stderr")
status=$?
kill "$holder"
wait "$holder" 2>/dev/null
echo "$output"
cat "$work/stderr"
[ "$status" != 0 ] || fail "mpirun succeeded though rank 2's GPU is leased by another job"
grep -q "its GPU, cuda:2 of the job (physical 2, GPU-fa4e0000-0000-0000-0000-000000000002), is leased by another job (pid $holder" "$work/stderr" ||
  fail "rank 2 did not say that another job holds its GPU"
if grep -q "^rank 2:" <<<"$output"; then fail "rank 2 ran though its GPU is leased"; fi
echo "--- mpirun -np 2 ${flags[*]} gpusel pick: each rank names Open MPI (Note [Naming the engine])"
output=$(mpirun "${flags[@]}" -np 2 "${environment[@]}" "$gpusel" pick 2>&1 >/dev/null) || fail "mpirun exited with $?: $output"
echo "$output"
# (mpirun may put one rank's line inside the other's: the lines are counted, not anchored)
[ "$(grep -o "Open MPI started this process as a rank (OMPI_COMM_WORLD_LOCAL_RANK=[01], OMPI_COMM_WORLD_LOCAL_SIZE=2); Open MPI gives no GPU" <<<"$output" | wc -l)" = 2 ] ||
  fail "the 2 ranks' pick did not name Open MPI"
echo "PASSED: 4 ranks ran on the job's GPUs 0..3, leased; a rank whose GPU another job holds stopped with the reason;" \
  "pick names Open MPI"
