#!/usr/bin/env bash
# ctest slurm_shapes: `gpusel run --local-rank` and gpusel::local_rank_device()
# under a real srun and sbatch, judged by Slurm's own record.
#   check_slurm.sh <gpusel> <fake NVML library> <task device program> <machine file> <job picks program>
# Starts a single-node cluster of 4 GPUs (cluster.sh) and, for every allocation
# shape srun and sbatch offer on a node, runs both in every task. Each task says
# which GPU it ran on, and SLURM_STEP_GPUS, which Slurm set for it; the judge:
#   - every task ran on one of the GPUs Slurm gave it (its SLURM_STEP_GPUS, in
#     Slurm's node-wide indices; without cgroups, the fake NVML's GPU N is
#     Slurm's GPU N, so the two name the same GPU);
#   - where Slurm gave each task GPUs of its own, distinct tasks ran on distinct
#     GPUs; where it gave all tasks one list, local rank r ran on its r-th GPU;
#   - the same with SLURM_GPUS_PER_TASK and SLURM_TRES_PER_TASK added (newer
#     Slurm sets them in some shapes), and with torchrun's LOCAL_RANK inside a step;
#   - where Slurm allocated GPUs without saying which (--gpu-bind=none with
#     several tasks), every task refuses, saying what it saw;
#   - while another job holds GPUs 0 and 1, no task of a step on 2 and 3 touches them;
#   - a program that picks and leases through the library, run by `gpusel run` in a step
#     (srun ... gpusel run ...), chooses among the job's GPUs, within the step's, as the job's lease;
#   - `gpusel explain` says what Slurm gave the step, in Slurm's names, and beside them the
#     cuda:N and UUID that CUDA_VISIBLE_DEVICES gives; that Slurm gave GPUs without saying
#     which; or that it gave the step none (pick's report says so too).
# Exits 77 (ctest's skip) when Slurm is not installed, unless GPUSEL_REQUIRE_SLURM=1
# (as .ci/run sets it): then that is a failure.
set -uo pipefail
gpusel=$1
library=$2
task_device=$3
machine=$4
job_picks=$5  # tests/tool/job_picks.cpp: picks and leases through the library
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
fail() {  # with what the last step said on stderr
  echo "FAILED: $*"
  [ -s "$work/stderr" ] && { echo "--- its stderr:"; cat "$work/stderr"; }
  exit 1
}

cleanup() { "$here/cluster.sh" stop "$work/cluster"; rm -rf "$work"; }
trap cleanup EXIT
"$here/cluster.sh" start "$work/cluster"
status=$?
if [ "$status" = 77 ] && [ "${GPUSEL_REQUIRE_SLURM:-0}" = 1 ]; then fail "Slurm is required here (GPUSEL_REQUIRE_SLURM=1)"; fi
[ "$status" = 0 ] || exit "$status"
# shellcheck disable=SC1091
source "$work/cluster/env"
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER LOCAL_RANK LOCAL_WORLD_SIZE
export GPUSEL_NVML_LIBRARY=$library GPUSEL_FAKE_NVML_CONFIG=$machine GPUSEL_LEASE_DIR=$work/leases
# The fake machine's UUIDs, in NVML's (and Slurm's) order.
mapfile -t uuids < <(sed -n 's/^gpu uuid=\([^ ]*\).*/\1/p' "$machine")
[ "${#uuids[@]}" = 4 ] || fail "$machine does not describe 4 GPUs"

# Each task prints: task <id> local <rank> step <SLURM_STEP_GPUS> gpu <Slurm's index> (or: error ...)
says='echo "task $SLURM_PROCID local ${LOCAL_RANK:-$SLURM_LOCALID} step ${SLURM_STEP_GPUS-none} gpu $CUDA_VISIBLE_DEVICES"'
# The program runs on the emulated runtime, which counts devices itself: no fake NVML for it.
program=(env -u GPUSEL_NVML_LIBRARY -u GPUSEL_FAKE_NVML_CONFIG "$task_device")
index_of_uuids() {  # the UUIDs that `gpusel run` gave, as the machine's indices
  local line uuid index
  while read -r line; do
    uuid=${line##* gpu }
    for index in 0 1 2 3; do [ "$uuid" = "${uuids[$index]}" ] && uuid=$index; done
    echo "${line% gpu *} gpu $uuid"
  done
}

# judge KIND LINES TASKS [WHAT]: KIND is own (distinct GPUs of their own), shared (rank r on
# its r-th), together (GPUs of their own, two tasks a GPU); WHAT says which run it judges.
judge() {
  local kind=$1 lines=$2 tasks=$3 what=${4:+$4: } line step gpu gpus="" rank
  [ "$(grep -c '^task ' <<<"$lines")" = "$tasks" ] || fail "${what}expected $tasks tasks to run: $lines"
  while read -r line; do
    step=$(sed -n 's/.* step \([^ ]*\) .*/\1/p' <<<"$line")
    gpu=${line##* gpu }
    [[ "$gpu" =~ ^[0-3]$ ]] || fail "${what}a task ran on no GPU of the machine: $line"
    [[ ",$step," == *",$gpu,"* ]] || fail "${what}a task ran outside the GPUs Slurm gave it: $line"
    if [ "$kind" = shared ]; then
      rank=$(sed -n 's/.* local \([0-9]*\) .*/\1/p' <<<"$line")
      IFS=, read -ra listed <<<"$step"
      [ "${listed[$rank]:-}" = "$gpu" ] || fail "${what}local rank $rank did not run on its step's GPU number $rank: $line"
    fi
    gpus+="$gpu "
  done < <(grep '^task ' <<<"$lines")
  if [ "$kind" = own ] && [ "$(tr ' ' '\n' <<<"$gpus" | sed '/^$/d' | sort | uniq -d)" != "" ]; then
    fail "${what}two tasks with GPUs of their own ran on one GPU: $lines"
  fi
}

# shape KIND TASKS SRUN-OPTIONS...: one step whose every task runs gpusel run, gpusel run with
# the per-task variables added, and the program, each line marked with which of them printed it.
shape() {
  local kind=$1 tasks=$2 lines lease=""
  shift 2
  [ "$kind" = together ] && lease=--no-lease  # Slurm put tasks on one GPU on purpose
  echo "--- srun $* (Slurm gives: $kind)"
  # shellcheck disable=SC2016
  lines=$(srun "$@" bash -c '
    "$1" run --local-rank $2 -- sh -c "$3" | sed "s/^/run /"
    env SLURM_GPUS_PER_TASK=1 SLURM_TRES_PER_TASK=cpu:1,gres/gpu:1 "$1" run --local-rank $2 -- sh -c "$3" |
      sed "s/^/added /"
    env -u GPUSEL_NVML_LIBRARY -u GPUSEL_FAKE_NVML_CONFIG "$4" | sed "s/^/program /"' \
    _ "$gpusel" "$lease" "$says" "$task_device" 2>"$work/stderr" | index_of_uuids)
  echo "$lines"
  judge "$kind" "$(sed -n 's/^run //p' <<<"$lines")" "$tasks" "gpusel run"
  judge "$kind" "$(sed -n 's/^added //p' <<<"$lines")" "$tasks" \
    "gpusel run with SLURM_GPUS_PER_TASK=1 SLURM_TRES_PER_TASK=cpu:1,gres/gpu:1 added"
  judge "$kind" "$(sed -n 's/^program //p' <<<"$lines")" "$tasks" "gpusel::local_rank_device()"
}

# refused SRUN-OPTIONS...: every task refuses, saying that Slurm named none of its GPUs: run --local-rank,
# local_rank_device(), pick and run.
refused() {
  local output
  echo "--- srun $* (Slurm allocates GPUs without saying which)"
  output=$(srun "$@" "$gpusel" run --local-rank -- sh -c "$says" 2>&1)
  echo "$output"
  if grep -q '^task ' <<<"$output"; then fail "a task ran though Slurm did not say which GPUs are its own"; fi
  [ "$(grep -c "$unnamed" <<<"$output")" -ge 2 ] || fail "the tasks did not say that Slurm left the GPUs unnamed"
  output=$(srun "$@" "${program[@]}" 2>&1)
  echo "$output"
  if grep -q '^task .* gpu ' <<<"$output"; then fail "the program took a GPU though Slurm did not say which"; fi
  [ "$(grep -c "$unnamed" <<<"$output")" -ge 2 ] || fail "the program did not say that Slurm left the GPUs unnamed"
  for command in pick "run -- true"; do
    # shellcheck disable=SC2086
    output=$(srun "$@" "$gpusel" $command 2>&1)
    echo "$output"
    [ "$(grep -c "gpusel: ${command%% *}: $unnamed" <<<"$output")" -ge 2 ] ||
      fail "$command did not refuse, saying that Slurm left the GPUs unnamed"
  done
}

# What a task says where Slurm names none of its GPUs: what it saw, never a guessed option.
unnamed='Slurm gave this step [0-9] GPUs\? on this node (SLURM_GPUS_ON_NODE=[0-9]) without saying which: CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS are unset in this task'
started=$SECONDS
shape shared 2 -n2 --gpus=2
shape shared 2 -n2 --gres=gpu:2
shape shared 4 -n4 --gpus=4 --gpu-bind=closest   # no topology here: the shared list
shape own 4 -n4 --gpus-per-task=1
shape own 2 -n2 --gpus-per-task=2
shape own 4 -n4 --ntasks-per-gpu=1
shape together 4 -n4 --ntasks-per-gpu=2
shape own 2 -n2 --gpus=2 --gpu-bind=single:1
shape own 4 -n4 --gpus=4 --gpu-bind=map_gpu:3,2,1,0
shape own 2 -n2 --gpus=2 --gpu-bind=mask_gpu:0x1,0x2
shape own 2 -n2 --gpus=4 --gpu-bind=per_task:2
shape own 1 -n1 --gpus-per-task=1 --gpu-bind=none  # one task: Slurm names its GPU
refused -n2 --gpus-per-task=1 --gpu-bind=none

echo "--- srun -n2 without GPUs: chosen as outside Slurm"
lines=$(srun -n2 "$gpusel" run --local-rank -- sh -c "$says" 2>"$work/stderr" | index_of_uuids) ||
  fail "srun -n2 gpusel run: $(cat "$work/stderr")"
echo "$lines"
for task in 0 1; do grep -qx "task $task local $task step none gpu $task" <<<"$lines" || fail "task $task did not take GPU $task"; done

echo "--- torchrun's LOCAL_RANK inside a step wins over SLURM_LOCALID"
workers='for r in 0 1; do LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 "$0" run --local-rank -- sh -c "$1" & done; wait'
for options in "-n1 --gpus=2" "-n2 --gpus-per-task=2"; do
  lines=$(srun $options bash -c "$workers" "$gpusel" "$says" 2>"$work/stderr" | index_of_uuids) ||
    fail "srun $options (2 workers a task): $(cat "$work/stderr")"
  echo "$lines"
  judge shared "$lines" "$(( ${options:2:1} * 2 ))"
done

echo "--- sbatch: the batch script and its steps"
cat >"$work/batch.sh" <<BATCH
#!/bin/bash
# The batch script has no step GPUs of its own: its job's are its own.
$gpusel run --local-rank --no-lease -- sh -c '${says/SLURM_STEP_GPUS-none/SLURM_JOB_GPUS}' | sed 's/^/script /'
srun $gpusel run --local-rank -- sh -c '$says' | sed 's/^/run /'
srun ${program[*]} | sed 's/^/program /'
BATCH
for options in "-n2 --gres=gpu:2:shared" "-n4 --gpus-per-task=1:own" "-n2 --gpus=4 --gpu-bind=single:1:own"; do
  kind=${options##*:}
  options=${options%:*}
  tasks=${options:2:1}
  rm -f "$work/batch.out"
  sbatch --wait -o "$work/batch.out" -e "$work/batch.err" $options "$work/batch.sh" >/dev/null || fail "sbatch $options: $(cat "$work/batch.out" "$work/batch.err")"
  echo "sbatch $options:"
  lines=$(index_of_uuids <"$work/batch.out")
  echo "$lines"
  judge shared "$(sed -n 's/^script //p' <<<"$lines")" 1
  judge "$kind" "$(sed -n 's/^run //p' <<<"$lines")" "$tasks"
  judge "$kind" "$(sed -n 's/^program //p' <<<"$lines")" "$tasks"
done

echo "--- explain tells what Slurm gave, in Slurm's names beside CUDA's"
output=$(srun --gpus=1 "$gpusel" explain 2>"$work/stderr") || fail "srun --gpus=1 gpusel explain"
echo "$output"
slurm_line=$(grep '^Slurm gave this step' <<<"$output") || fail "explain said nothing of Slurm"
step_gpu=$(sed -n 's/^Slurm gave this step ([0-9]*\.0) 1 GPU on this node: SLURM_GPUS_ON_NODE=1, SLURM_STEP_GPUS=\([0-3]\), in Slurm.s names .*/\1/p' <<<"$slurm_line")
[ -n "$step_gpu" ] || fail "explain did not say what Slurm gave the step: $slurm_line"
# Without cgroups Slurm's GPU N is the fake NVML's N: the UUID beside cuda:0 is that GPU's.
grep -qxF "This task sees the step's GPUs (CUDA_VISIBLE_DEVICES lists 1): cuda:0 is ${uuids[$step_gpu]}." <<<"$output" ||
  fail "explain did not give cuda:0 as Slurm's GPU $step_gpu (${uuids[$step_gpu]})"
output=$(srun -n2 --gpus-per-task=1 "$gpusel" explain 2>"$work/stderr") || fail "srun -n2 --gpus-per-task=1 gpusel explain"
[ "$(grep -c "^This task has GPUs of its own, 1 of the step's 2 (CUDA_VISIBLE_DEVICES lists 1): cuda:0 is GPU-" <<<"$output")" = 2 ] ||
  fail "explain did not say that each task has a GPU of its own: $output"
output=$(srun -n2 --gpus-per-task=1 --gpu-bind=none "$gpusel" explain 2>"$work/stderr") || fail "explain under --gpu-bind=none"
[ "$(grep -c "^$unnamed" <<<"$output")" = 2 ] ||
  fail "explain did not say that Slurm gave GPUs without saying which: $output"
output=$(srun -n1 "$gpusel" explain 2>"$work/stderr") || fail "srun -n1 gpusel explain"
grep -qx 'Slurm gave this step ([0-9]*\.0) no GPU; choosing as outside Slurm\.' <<<"$output" || fail "explain did not say that the step has no GPU: $output"
srun -n1 "$gpusel" pick >/dev/null 2>"$work/stderr" || fail "pick in a step given no GPU"
grep -q '^gpusel: Slurm gave this step ([0-9]*\.0) no GPU; choosing as outside Slurm' "$work/stderr" ||
  fail "pick did not say that the step has no GPU"
echo "explain and pick said what Slurm gave"

echo "--- gpusel run in a step: a program that picks chooses among the job's GPUs, the step's own"
for options in "-n1 --gpus=2" "-n2 --gpus=2" "-n2 --gpus-per-task=1"; do
  # shellcheck disable=SC2016,SC2086
  # Each task holds its GPU a while (sleep), so that the tasks of a step lease at once.
  lines=$(srun $options bash -c '"$1" run -n 1 --format uuid -- sh -c "\"\$0\" use 1 && sleep 2" "$2" |
    sed "s/^/step $SLURM_STEP_GPUS gpu /"' \
    _ "$gpusel" "$job_picks" 2>"$work/stderr") || fail "srun $options gpusel run -- job_picks use 1: $(cat "$work/stderr")"
  echo "$lines"
  tasks=${options:2:1}
  [ "$(grep -c ' job$' <<<"$lines")" = "$tasks" ] || fail "srun $options: a task's lease inside gpusel run was not the job's"
  gpus=""
  while read -r line; do
    uuid=$(sed -n 's/^step [^ ]* gpu \(GPU-[^ ]*\) job$/\1/p' <<<"$line")
    step=$(sed -n 's/^step \([^ ]*\) .*/\1/p' <<<"$line")
    for index in 0 1 2 3; do [ "$uuid" = "${uuids[$index]}" ] && gpus+="$index " && { [[ ",$step," == *",$index,"* ]] ||
      fail "srun $options: a task chose GPU $index outside its step's $step"; }; done
  done < <(grep ' job$' <<<"$lines")
  [ "$(wc -w <<<"$gpus")" = "$tasks" ] || fail "srun $options: a task's GPU is not one of the machine's: $lines"
  [ -z "$(tr ' ' '\n' <<<"$gpus" | sed '/^$/d' | sort | uniq -d)" ] || fail "srun $options: two tasks chose one GPU"
done

echo "--- while another job holds GPUs 0 and 1"
holder=$(sbatch --parsable -o /dev/null --gpus=2 --wrap 'sleep 120') || fail "the holding job was not submitted"
for _ in $(seq 100); do [ "$(squeue -h -j "$holder" -o %T)" = RUNNING ] && break; sleep 0.1; done
scontrol show job -d "$holder" | grep -q 'GRES=gpu:2(IDX:0-1)' || fail "the holding job does not hold GPUs 0 and 1: $(scontrol show job -d "$holder")"
for options in "-n2 --gpus=2:shared" "-n2 --gpus-per-task=1:own"; do
  kind=${options##*:}
  options=${options%:*}
  shape "$kind" 2 $options
  lines=$(srun $options "$gpusel" pick --format index 2>"$work/stderr") || fail "pick in srun $options: $(cat "$work/stderr")"
  echo "pick: $lines"
  if grep -q '\b[01]\b' <<<"$lines"; then fail "pick chose another job's GPU inside srun $options"; fi
done
refused -n2 --gpus-per-task=1 --gpu-bind=none
scancel "$holder"
echo "PASSED: every shape ran each task on its step's GPUs ($((SECONDS - started)) s)"
