# The helpers of the tool_* tests, sourced by each tests/tool/check_<command>.sh, whose arguments it reads:
#   <gpusel program> <fake NVML library> <scenario> [<job picks program> [<rank device program>]]
# It gives each scenario a work directory and lease directory of its own, the machines below (four.txt,
# this one, by default), `run` and the `expect` checks of its output, ways to wait on jobs, other
# local users staged by numeric uid (as_uid), and `finish`, which says how the scenario went.
set -uo pipefail
gpusel=$1
fake_nvml=$2
export GPUSEL_NVML_LIBRARY=$fake_nvml
scenario=$3
job_picks=${4:-}
rank_device=${5:-}
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER NVIDIA_VISIBLE_DEVICES SLURM_JOB_ID SLURM_STEP_ID SLURM_LOCALID SLURM_GPUS_ON_NODE \
  SLURM_STEP_GPUS SLURM_JOB_GPUS SLURM_GPUS SLURM_CONF SLURMD_NODENAME GPU_DEVICE_ORDINAL GPUSEL_JOB_LEASE GPUSEL_JOB_LOCKS \
  LOCAL_RANK LOCAL_WORLD_SIZE TORCHELASTIC_RUN_ID RAY_JOB_ID RAY_RAYLET_PID OMPI_COMM_WORLD_LOCAL_RANK  # this process's launcher, container and job are no part of a scenario

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GPUSEL_LEASE_DIR="$work/leases"  # this test's own: leases of other runs on this machine do not count
failures=0

# A machine: four H200s. 0 is busy, with another user's job (a pid not visible
# here); 1 runs a process of this script's own user; 2 is idle but its NVML
# cannot list processes; 3 is in MIG mode.
cat >"$work/four.txt" <<EOF
driver 580.159.04
cuda_driver 13000
gpu uuid=GPU-0a1b2c3d-0000-4000-8000-000000000000 pci=00000000:17:00.0 used_mib=120000 utilization=97
gpu uuid=GPU-1b2c3d4e-0000-4000-8000-000000000001 pci=00000000:18:00.0 used_mib=2048 utilization=3
gpu uuid=GPU-2c3d4e5f-0000-4000-8000-000000000002 pci=00000000:3A:00.0 used_mib=0 utilization=0 processes=unsupported
gpu uuid=GPU-3d4e5f60-0000-4000-8000-000000000003 pci=00000000:3B:00.0 used_mib=0 utilization=0 mig=1
process gpu=0 pid=4000000001 used_mib=119000
process gpu=1 pid=$$ used_mib=2000
EOF
# Another: an A100 (compute capability 8.0) before an H200 (9.0) in PCI order, and an idle L4.
cat >"$work/mixed.txt" <<EOF
gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-a1000000-0000-4000-8000-000000000000 pci=00000000:17:00.0 memory_mib=81920 used_mib=0 cc=8.0
gpu name="NVIDIA H200" uuid=GPU-b2000000-0000-4000-8000-000000000000 pci=00000000:18:00.0 used_mib=10240 utilization=20
gpu name="NVIDIA L4" uuid=GPU-c3000000-0000-4000-8000-000000000000 pci=00000000:19:00.0 memory_mib=23034 used_mib=0 cc=8.9
EOF
# A GPU in MIG mode with three instances beside a whole GPU: instance 0 runs another
# user's process, and instance 2 is a second compute instance of GPU instance 2.
cat >"$work/mig.txt" <<EOF
gpu uuid=GPU-0a1b2c3d-0000-4000-8000-000000000000 pci=00000000:17:00.0 used_mib=120000
gpu uuid=GPU-3d4e5f60-0000-4000-8000-000000000003 pci=00000000:3B:00.0 mig=1
mig gpu=1 uuid=MIG-4a5b6c7d-0000-4000-8000-000000000000 gi=1 ci=0 memory_mib=71680 used_mib=30000
mig gpu=1 uuid=MIG-5b6c7d8e-0000-4000-8000-000000000001 gi=2 ci=0 memory_mib=35840 used_mib=0
mig gpu=1 uuid=MIG-6c7d8e9f-0000-4000-8000-000000000002 gi=2 ci=1 memory_mib=35840 used_mib=1024
process gpu=1 mig=0 pid=4000000001 used_mib=30000
EOF
# Four GPUs in two NVLink pairs, one pair per NUMA node (0-1 on node 0, 2-3 on node 1).
# By free memory alone the best two are 0 and 2, on different nodes.
cat >"$work/topology.txt" <<EOF
gpu uuid=GPU-70000000-0000-4000-8000-000000000000 used_mib=0 numa=0 cpus=0-15,32-47
gpu uuid=GPU-71000000-0000-4000-8000-000000000001 used_mib=1000 numa=0 cpus=0-15,32-47
gpu uuid=GPU-72000000-0000-4000-8000-000000000002 used_mib=10 numa=1 cpus=16-31,48-63
gpu uuid=GPU-73000000-0000-4000-8000-000000000003 used_mib=2000 numa=1 cpus=16-31,48-63
link a=0 b=1 nvlink=1 level=10
link a=2 b=3 nvlink=1 level=10
link a=0 b=2 level=50
link a=0 b=3 level=50
link a=1 b=2 level=50
link a=1 b=3 level=50
EOF
# And one whose NVML reports a UUID twice and two GPUs without one: each row
# must still show its own GPU (its own PCI bus id and memory).
cat >"$work/odd.txt" <<EOF
gpu uuid=GPU-5a5a5a5a-0000-4000-8000-000000000000 pci=00000000:17:00.0 used_mib=1000
gpu uuid=GPU-5a5a5a5a-0000-4000-8000-000000000000 pci=00000000:18:00.0 used_mib=2000
gpu uuid= pci=00000000:19:00.0 used_mib=3000
gpu uuid= pci=00000000:1A:00.0 used_mib=4000
EOF
export GPUSEL_FAKE_NVML_CONFIG="$work/four.txt"

# run <expected status> <arguments...>: runs gpusel (under ${launcher[@]}, none unless a scenario sets
# one), keeps stdout and stderr in $out and $err.
launcher=()
run() {
  local expected=$1
  shift
  "${launcher[@]}" "$gpusel" "$@" >"$work/out" 2>"$work/err"
  local status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  echo "\$ ${launcher[*]}${launcher[*]:+ }gpusel $* -> exit $status"
  [ -n "$out" ] && echo "$out"
  [ -n "$err" ] && echo "[stderr] $err"
  if [ "$status" != "$expected" ]; then
    echo "FAILED: expected exit status $expected"
    failures=$((failures + 1))
  fi
}
# expect <stdout|stderr> <text>: the last run printed text there (a fixed string).
expect() {
  local stream=$1 text=$2 where
  if [ "$stream" = stdout ]; then where=$out; else where=$err; fi
  if ! grep -qF -- "$text" <<<"$where"; then
    echo "FAILED: expected on $stream: $text"
    failures=$((failures + 1))
  fi
}
# expect_line <stdout|stderr> <line>: the last run printed exactly this line there.
expect_line() {
  local stream=$1 text=$2 where
  if [ "$stream" = stdout ]; then where=$out; else where=$err; fi
  if ! grep -qxF -- "$text" <<<"$where"; then
    echo "FAILED: expected the line on $stream: $text"
    failures=$((failures + 1))
  fi
}
# expect_not <stdout|stderr> <text>: the last run did not print text there (a fixed string).
expect_not() {
  local stream=$1 text=$2 where
  if [ "$stream" = stdout ]; then where=$out; else where=$err; fi
  if grep -qF -- "$text" <<<"$where"; then
    echo "FAILED: not expected on $stream: $text"
    failures=$((failures + 1))
  fi
}
# The last run's stdout is valid UTF-8, strictly decoded.
expect_utf8() {
  if ! python3 -c 'import sys; sys.stdin.buffer.read().decode("utf-8", "strict")' <"$work/out"; then
    echo "FAILED: not valid UTF-8"
    failures=$((failures + 1))
  fi
}
expect_json() {
  if ! python3 -c 'import json, sys; json.loads(sys.stdin.buffer.read().decode("utf-8", "strict"))' <"$work/out"; then
    echo "FAILED: not valid JSON"
    failures=$((failures + 1))
  fi
}
# expect_in_json <python expression>: true of the last run's stdout, read as JSON into `d`.
expect_in_json() {
  if ! python3 -c 'import json, sys; d = json.load(sys.stdin); sys.exit(0 if eval(sys.argv[1]) else 1)' "$1" <"$work/out"; then
    echo "FAILED: expected of the JSON: $1"
    failures=$((failures + 1))
  fi
}

# expect_looks <n> <what>: the runs since the last call looked at the machine n times, as the fake NVML logged
# to $work/looks (GPUSEL_FAKE_NVML_LOG, one line a look: Note [One look per attempt]); starts the count again.
expect_looks() {
  local looks
  looks=$(cat "$work/looks" 2>/dev/null | wc -l)
  rm -f "$work/looks"
  if [ "$looks" != "$1" ]; then
    echo "FAILED: $2 looked at the machine $looks times, not $1"
    failures=$((failures + 1))
  fi
}

# until_free <pick options>: waits, 10 s at most, until pick finds a GPU (a lease has ended).
until_free() {
  for _ in $(seq 100); do "$gpusel" pick "$@" >/dev/null 2>&1 && return; sleep 0.1; done
}
# until_file <file>: waits, 5 s at most, until the file is not empty.
until_file() {
  for _ in $(seq 50); do [ -s "$1" ] && return; sleep 0.1; done
}
# wait_status <command...>: how the command ended, as a parent's waitpid sees it: "exit N" or "signal N".
wait_status() {
  python3 -c 'import subprocess, sys
r = subprocess.run(sys.argv[1:], stderr=subprocess.DEVNULL).returncode
print("signal %d" % -r if r < 0 else "exit %d" % r)' "$@"
}

# six_jobs_on_four_gpus [run options]: 6 jobs of `gpusel run -n 1` at once on 4 idle GPUs, each writing its
# CUDA_VISIBLE_DEVICES to $work/job<N> and its stderr to $work/err<N>; sets statuses, started and distinct.
six_jobs_on_four_gpus() {
  printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/idle4.txt"
  export GPUSEL_FAKE_NVML_CONFIG="$work/idle4.txt"
  pids=()
  for job in 1 2 3 4 5 6; do
    "$gpusel" run -n 1 "$@" -- sh -c "echo \$CUDA_VISIBLE_DEVICES >$work/job$job; sleep 2" 2>"$work/err$job" &
    pids+=($!)
  done
  statuses=()
  for pid in "${pids[@]}"; do
    wait "$pid"
    statuses+=($?)
  done
  echo "statuses: ${statuses[*]}"
  for job in 1 2 3 4 5 6; do echo "job $job: $(cat "$work/job$job" 2>/dev/null) $(head -c 300 "$work/err$job")"; done
  started=$(cat "$work"/job? 2>/dev/null | wc -l)
  distinct=$(cat "$work"/job? 2>/dev/null | sort -u | wc -l)
}

# can_stage_users: whether this test can run commands as other local users (root, with setpriv, by
# numeric uid: as_uid). Where it cannot, that part is skipped, said so, and fails where CI is set
# (.ci/run runs as root: there every part must run).
can_stage_users() {
  [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && return 0
  skipped "staging another local user needs root and setpriv"
  return 1
}
# skipped <why>: a part of the scenario does not run here; a failure where CI is set.
skipped() {
  if [ -n "${CI:-}" ]; then
    echo "FAILED: skipped, where CI is set: $1"
    failures=$((failures + 1))
  else
    echo "skipped: $1"
  fi
}
# as_uid <uid> <command...>: runs the command as user and group <uid>, with no other group; the uid
# needs no account.
as_uid() {
  local uid=$1
  shift
  setpriv --reuid "$uid" --regid "$uid" --clear-groups "$@"
}

unknown_scenario() {
  echo "unknown scenario $scenario"
  exit 2
}
# finish: the scenario's verdict, and its exit status.
finish() {
  if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) FAILED"
    exit 1
  fi
  echo "PASSED"
}
