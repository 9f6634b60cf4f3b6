#!/usr/bin/env bash
# ctest slurm_numbers: Slurm's GPU numbers, typed requests and a job without a step, under a
# real Slurm, judged by Slurm's own record (SLURM_STEP_GPUS, scontrol show job -d).
#   check_slurm_numbers.sh <gpusel> <fake NVML library> <rank device program> <job picks program> <machines folder>
# Starts a single-node cluster (cluster.sh) twice:
#   - a node of two models, `Type=a100` on /dev/nvidia[0-1] and `Type=h100` on /dev/nvidia[2-3],
#     with a fake machine of two A100s (8.0) and two H100s (9.0) in PCI order, so that CUDA's
#     default order is not Slurm's: `gpusel run` in a step runs its command on the GPU Slurm gave
#     (Slurm's N is /dev/nvidiaN), also while another job holds the first A100, and
#     gpusel::local_rank_device() and gpusel::pick refuse, naming CUDA_DEVICE_ORDER=PCI_BUS_ID, and
#     take Slurm's GPU with it set; `gpusel explain` says which GPU Slurm's number is; a typed
#     --gpus-per-task=a100:1, which leaves CUDA_VISIBLE_DEVICES unset, is refused saying what was
#     seen, not a guessed option; salloc's own shell, in no step, is refused asking for srun while
#     srun inside the same allocation chooses among its GPUs;
#   - a node whose gres.conf lists /dev/nvidia3 first: Slurm's 0 is /dev/nvidia3, and `gpusel
#     run` gives the command that GPU;
#   - two nodes on this host (two `slurmd -N`), each with a fake machine of distinct UUIDs and a
#     lease directory of its own (a TaskProlog keyed on SLURMD_NODENAME): -N2 --gpus-per-node=2 and
#     --ntasks-per-node=2 --gpus-per-task=1 run each task on its own node's GPUs Slurm gave it.
# Exits 77 (ctest's skip) when Slurm is not installed, unless GPUSEL_REQUIRE_SLURM=1.
set -uo pipefail
gpusel=$1
library=$2
rank_device=$3
job_picks=$4
machines=$5
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
cluster=""
fail() {  # with what the last step said on stderr
  echo "FAILED: $*"
  [ -s "$work/stderr" ] && { echo "--- its stderr:"; cat "$work/stderr"; }
  exit 1
}
cleanup() {
  [ -n "$cluster" ] && "$here/cluster.sh" stop "$cluster"
  rm -rf "$work"
}
trap cleanup EXIT

# start_cluster NAME GRES LINES: a cluster of its own in $work/NAME (cluster.sh), the node's Gres= and gres.conf lines.
start_cluster() {
  [ -n "$cluster" ] && "$here/cluster.sh" stop "$cluster"
  cluster=$work/$1
  GPUSEL_CLUSTER_GRES=$2 GPUSEL_CLUSTER_GRES_LINES=$3 "$here/cluster.sh" start "$cluster"
  local status=$?
  if [ "$status" = 77 ] && [ "${GPUSEL_REQUIRE_SLURM:-0}" = 1 ]; then fail "Slurm is required here (GPUSEL_REQUIRE_SLURM=1)"; fi
  [ "$status" = 0 ] || exit "$status"
  # shellcheck disable=SC1090,SC1091
  source "$cluster/env"
  # Slurm's own record of its numbers: slurmd -G lists the node's GPU records in the order it numbers
  # them, each record's device files in turn. files[N] is the N of Slurm's GPU N's /dev/nvidiaN.
  mapfile -t files < <(slurmd ${GPUSEL_CLUSTER_NODES:+-N "${GPUSEL_CLUSTER_NODES%% *}"} -G 2>&1 | sed -n 's/.*Name=gpu .* File=[^ ]*nvidia\([^ ]*\).*/\1/p' | while read -r n; do
    if [[ $n =~ ^\[([0-9]+)-([0-9]+)\]$ ]]; then seq "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"; else echo "$n"; fi
  done)
  echo "slurmd -G: Slurm's GPUs 0..$((${#files[@]} - 1)) are /dev/nvidia${files[*]}"
  [ "${#files[@]}" = 4 ] || fail "slurmd -G did not list 4 GPUs: $(slurmd -G 2>&1)"
}
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER LOCAL_RANK LOCAL_WORLD_SIZE GPU_DEVICE_ORDINAL
export GPUSEL_NVML_LIBRARY=$library GPUSEL_LEASE_DIR=$work/leases
says='echo "step $SLURM_STEP_GPUS gpu $CUDA_VISIBLE_DEVICES"'
# expect_slurms LINES: each "step N gpu UUID" line ran on Slurm's GPU N: the device file Slurm
# numbers N ($files, from slurmd -G), whose minor is the fake GPU's (the machine's line of that number).
expect_slurms() {
  local line step uuid minor
  [ -n "$1" ] || fail "no task ran"
  while read -r line; do
    step=$(sed -n 's/^step \([0-9]*\)[0-9,]* gpu .*/\1/p' <<<"$line")  # local rank 0: the step's first GPU
    uuid=${line##* gpu }
    [ -n "$step" ] || fail "a task was given no GPU by Slurm: $line"
    minor=${files[$step]}
    [ "$uuid" = "${uuids[$minor]}" ] ||
      fail "Slurm's GPU $step is /dev/nvidia$minor (${uuids[$minor]}), but the task ran on $uuid: $line"
  done <<<"$1"
}
started=$SECONDS

echo "=== a node of two models: Gres=gpu:a100:2,gpu:h100:2"
start_cluster mixed gpu:a100:2,gpu:h100:2 $'Name=gpu Type=a100 File=DEV/nvidia[0-1]\nName=gpu Type=h100 File=DEV/nvidia[2-3]'
export GPUSEL_FAKE_NVML_CONFIG=$machines/a100-h100.machine
mapfile -t uuids < <(sed -n 's/^gpu .*uuid=\([^ ]*\).*/\1/p' "$GPUSEL_FAKE_NVML_CONFIG")
for type in a100 h100; do
  lines=$(srun --gpus=$type:1 "$gpusel" run --local-rank -- sh -c "$says" 2>"$work/stderr") || fail "srun --gpus=$type:1 gpusel run"
  echo "srun --gpus=$type:1: $lines"
  expect_slurms "$lines"
  grep -q "gpusel: reading CUDA_VISIBLE_DEVICES=[0-3] in Slurm's numbers" "$work/stderr" || fail "gpusel run did not say it read Slurm's numbers"
done
output=$(srun --gpus=a100:1 "$gpusel" explain 2>"$work/stderr") || fail "srun --gpus=a100:1 gpusel explain"
echo "$output"
grep -qx "Slurm's 0 (.*/dev/nvidia0) is ${uuids[0]} (NVIDIA A100-SXM4-80GB, 00000000:17:00.0)\." <<<"$output" ||
  fail "explain did not say that Slurm's 0 is the first A100"
grep -q "^Caution: Slurm wrote CUDA_VISIBLE_DEVICES=0 in its own numbers.*export CUDA_DEVICE_ORDER=PCI_BUS_ID" <<<"$output" ||
  fail "explain did not say that CUDA reads Slurm's 0 otherwise"
echo "--- the library refuses, naming CUDA_DEVICE_ORDER=PCI_BUS_ID, and with it takes Slurm's GPU"
output=$(srun --gpus=a100:1 "$rank_device" 4 2>&1)
echo "local_rank_device(): $output"
grep -q "^gpusel: gpusel::local_rank_device(): Slurm wrote CUDA_VISIBLE_DEVICES=0 .*CUDA_DEVICE_ORDER=PCI_BUS_ID" <<<"$output" ||
  fail "local_rank_device() did not refuse, naming CUDA_DEVICE_ORDER=PCI_BUS_ID"
output=$(srun --gpus=a100:1 "$job_picks" pick 1 2>&1)
echo "pick: $output"
grep -q "^gpusel::pick: Slurm wrote CUDA_VISIBLE_DEVICES=0 .*CUDA_DEVICE_ORDER=PCI_BUS_ID" <<<"$output" || fail "gpusel::pick did not refuse"
lines=$(srun --gpus=a100:1 bash -c 'echo "step $SLURM_STEP_GPUS gpu $(CUDA_DEVICE_ORDER=PCI_BUS_ID "$0" 4)"' "$rank_device" 2>"$work/stderr") ||
  fail "local_rank_device() under CUDA_DEVICE_ORDER=PCI_BUS_ID"
echo "with CUDA_DEVICE_ORDER=PCI_BUS_ID: $lines"
expect_slurms "$lines"

echo "--- a typed --gpus-per-task=a100:1 names no GPU: refused, saying what was seen"
output=$(srun -n2 --gpus-per-task=a100:1 bash -c 'env | grep -E "^(CUDA_VISIBLE_DEVICES|SLURM_STEP_GPUS|SLURM_GPUS_ON_NODE)=" | sort | tr "\n" " "; echo' 2>&1)
echo "the tasks' variables: $output"
output=$(srun -n2 --gpus-per-task=a100:1 "$gpusel" run --local-rank -- sh -c "$says" 2>&1)
echo "$output"
if grep -q '^step ' <<<"$output"; then fail "a task ran though Slurm named no GPU of its own"; fi
[ "$(grep -c 'CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS are unset in this task' <<<"$output")" = 2 ] ||
  fail "the tasks did not say what they saw"
if grep -q -- '--gpu-bind' <<<"$output"; then fail "the refusal guessed an option the step never gave"; fi

echo "--- while another job holds the first A100, a step given an A100 runs on the second"
holder=$(sbatch --parsable -o /dev/null --gpus=a100:1 --wrap 'sleep 120') || fail "the holding job was not submitted"
for _ in $(seq 100); do [ "$(squeue -h -j "$holder" -o %T)" = RUNNING ] && break; sleep 0.1; done
scontrol show job -d "$holder" | grep -q 'GRES=gpu:a100:1(IDX:0)' || fail "the holding job does not hold GPU 0: $(scontrol show job -d "$holder")"
lines=$(srun --gpus=a100:1 "$gpusel" run --local-rank -- sh -c "$says" 2>"$work/stderr") || fail "srun --gpus=a100:1 beside the holder"
echo "srun --gpus=a100:1: $lines"
[[ "$lines" == "step 1 gpu "* ]] || fail "Slurm did not give the step its GPU 1: $lines"
expect_slurms "$lines"

echo "--- salloc's own shell, in no step, while another job holds a GPU"
output=$(salloc -n1 --gpus=2 "$gpusel" run -n 1 -- sh -c "$says" 2>&1)
echo "$output"
if grep -q '^step ' <<<"$output"; then fail "salloc's shell chose a GPU though Slurm named none there"; fi
grep -q "gpusel: run: Slurm gave job [0-9]* GPUs (SLURM_GPUS=2), but this process is in no step of it.*run it under srun" <<<"$output" ||
  fail "salloc's shell was not refused, asking for srun"
lines=$(salloc -n1 --gpus=2 srun "$gpusel" run --local-rank -- sh -c "$says" 2>"$work/stderr") || fail "srun inside salloc"
echo "srun inside salloc: $lines"
expect_slurms "$lines"
scancel "$holder"

echo "=== a node whose gres.conf lists /dev/nvidia3 first"
start_cluster reversed gpu:4 $'Name=gpu File=DEV/nvidia3\nName=gpu File=DEV/nvidia[0-2]'
export GPUSEL_FAKE_NVML_CONFIG=$machines/h200x4.machine
mapfile -t uuids < <(sed -n 's/^gpu .*uuid=\([^ ]*\).*/\1/p' "$GPUSEL_FAKE_NVML_CONFIG")
[ "${files[*]}" = "3 0 1 2" ] || fail "Slurm does not number /dev/nvidia3 first: ${files[*]}"
for order in "" PCI_BUS_ID; do
  lines=$(srun --gpus=2 --export="ALL${order:+,CUDA_DEVICE_ORDER=$order}" "$gpusel" run --local-rank -- sh -c "$says" 2>"$work/stderr") ||
    fail "srun --gpus=2 gpusel run (CUDA_DEVICE_ORDER=${order:-unset})"
  echo "srun --gpus=2 (CUDA_DEVICE_ORDER=${order:-unset}): $lines"
  expect_slurms "$lines"
done

echo "=== two nodes on one host, each with a fake machine and a lease directory of its own"
for node in n1 n2; do  # distinct UUIDs: n2's begin GPU-e
  sed "s/uuid=GPU-./uuid=GPU-$([ $node = n1 ] && echo f || echo e)/" "$machines/h200x4.machine" >"$work/machine-$node"
done
cat >"$work/prolog.sh" <<PROLOG
#!/bin/sh
echo "export GPUSEL_FAKE_NVML_CONFIG=$work/machine-\$SLURMD_NODENAME"
echo "export GPUSEL_LEASE_DIR=$work/leases-\$SLURMD_NODENAME"
PROLOG
chmod +x "$work/prolog.sh"
GPUSEL_CLUSTER_NODES="n1 n2" GPUSEL_CLUSTER_TASK_PROLOG=$work/prolog.sh \
  start_cluster two gpu:4 'Name=gpu File=DEV/nvidia[0-3]'
unset GPUSEL_FAKE_NVML_CONFIG GPUSEL_LEASE_DIR  # each node's, from the TaskProlog
# expect_nodes KIND LINES: each "node N step S gpu UUID" ran on Slurm's GPU S of its node N; both nodes
# ran tasks; with KIND own, no two tasks of a node on one GPU.
expect_nodes() {
  local kind=$1 line node step uuid seen=""
  while read -r line; do
    node=$(sed -n 's/^node \([^ ]*\) .*/\1/p' <<<"$line")
    step=$(sed -n 's/.* step \([0-9]*\)[0-9,]* gpu .*/\1/p' <<<"$line")
    uuid=${line##* gpu }
    [ -f "$work/machine-$node" ] && [ -n "$step" ] || fail "a task ran on no node or GPU of Slurm's: $line"
    mapfile -t uuids < <(sed -n 's/^gpu .*uuid=\([^ ]*\).*/\1/p' "$work/machine-$node")
    [ "$uuid" = "${uuids[$step]}" ] || fail "Slurm's GPU $step of $node is ${uuids[$step]}, but the task ran on $uuid"
    seen+="$node $uuid"$'\n'
  done <<<"$2"
  grep -q '^n1 ' <<<"$seen" && grep -q '^n2 ' <<<"$seen" || fail "the tasks did not run on both nodes: $2"
  [ "$kind" = shared ] || [ -z "$(sort <<<"$seen" | sed '/^$/d' | uniq -d)" ] || fail "two tasks of a node ran on one GPU: $2"
}
says='echo "node $SLURMD_NODENAME step $SLURM_STEP_GPUS gpu $CUDA_VISIBLE_DEVICES"'
for shape in "shared:-N2 --gpus-per-node=2" "own:-N2 --ntasks-per-node=2 --gpus-per-task=1"; do
  # shellcheck disable=SC2086
  lines=$(srun ${shape#*:} "$gpusel" run --local-rank -- sh -c "$says" 2>"$work/stderr") || fail "srun ${shape#*:}"
  echo "srun ${shape#*:}:"$'\n'"$lines"
  expect_nodes "${shape%%:*}" "$lines"
done
echo "PASSED: every task ran on the GPU Slurm gave it, or refused saying why ($((SECONDS - started)) s)"
