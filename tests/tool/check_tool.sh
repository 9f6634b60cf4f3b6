#!/usr/bin/env bash
# ctest tool_*: the gpusel command, end to end, on machines described to the
# fake NVML (tests/fake_nvml), checking its output and exit statuses.
#   check_tool.sh <gpusel program> <fake NVML library> <scenario> [<job picks program>]
# Scenarios: list, explain, pick, pick_fails, mixed_models, no_driver, nvml_fails, nvml_hangs, odd_uuids, json,
# usage, run, run_leases, run_wait, run_wait_unfixable, run_job, run_signals, run_local_rank, run_compose,
# exclude_numbering, device_order, memory, impossible_readings, hostile_text, output, mig, topology, messages,
# scheduler. <job picks program>, tests/tool/job_picks.cpp, picks through the library (run_compose).
set -uo pipefail
gpusel=$1
export GPUSEL_NVML_LIBRARY=$2
scenario=$3
job_picks=${4:-}
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER NVIDIA_VISIBLE_DEVICES SLURM_JOB_ID SLURM_STEP_ID SLURM_LOCALID SLURM_GPUS_ON_NODE \
  SLURM_STEP_GPUS SLURM_JOB_GPUS GPUSEL_JOB_LEASE  # this process's launcher, container and job are no part of a scenario

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

case $scenario in
  messages)
    # The messages people read every day, word for word.
    printf 'gpu\ngpu\n' >"$work/two.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/two.txt"
    # One "gpusel: " per line, also before an Error of the library's leases; the command speaks as itself, not as
    # the library's function (gpusel::pick).
    touch "$work/not-a-directory"
    GPUSEL_LEASE_DIR="$work/not-a-directory" run 125 run -n 1 -- true
    expect stderr "gpusel: the lease directory $work/not-a-directory cannot be opened"
    expect_not stderr "gpusel: gpusel:"
    # --wait says what it waits for and why not yet, in one line that ends in a word, not a colon.
    "$gpusel" run --exclude 1 -- sh -c 'echo $$ >"$1"; exec sleep 30' sh "$work/holder" >/dev/null 2>&1 &
    holder=$!
    until_file "$work/holder"
    run 125 run -n 2 --wait=1s -- true
    expect_line stderr "gpusel: waiting for at least 2 GPUs (at most 2); no compute process (this user's own included); most free memory first (at most 1s): 1 of 2 GPUs fit, 2 are needed"
    expect stderr "gpusel: gave up waiting"
    expect_not stderr "gpusel::"
    kill "$(cat "$work/holder")"
    wait $holder
    # A request no GPU here could meet even idle is said at once, not waited for.
    run 125 run -n 3 --wait=1s -- true
    expect_line stderr "gpusel: no wait can meet this request: even with every GPU idle, 2 of 2 GPUs fit, 3 are needed (at least 3 GPUs (at most 3); no compute process (this user's own included); most free memory first):"
    expect_line stderr "gpusel: not waiting: no wait can fix this"
    expect_not stderr "gpusel::"
    # An invalid CUDA_DEVICE_ORDER is said once, not once for every GPU.
    CUDA_DEVICE_ORDER=pci_bus_id run 1 pick
    expect_line stderr "gpusel: 0 of 2 GPUs fit, 1 is needed (at least 1 GPU (at most 1); no compute process (this user's own included); most free memory first):"
    expect_line stderr "  every GPU: CUDA_DEVICE_ORDER=pci_bus_id is neither FASTEST_FIRST nor PCI_BUS_ID, so the CUDA runtime fails with cudaErrorInvalidDevice"
    expect_line stderr "  GPU 0 (nvidia-smi 0, NVIDIA H200, GPU-fa4e0000-0000-0000-0000-000000000000), 140.4 GiB free, 0% utilized"
    if [ "$(grep -o 'neither FASTEST_FIRST' <<<"$err" | wc -l)" != 1 ]; then
      echo "FAILED: the CUDA_DEVICE_ORDER sentence is printed more than once"
      failures=$((failures + 1))
    fi
    # MIG instances are counted as such, and their caution comes only with a picked instance.
    export GPUSEL_FAKE_NVML_CONFIG="$work/mig.txt"
    run 1 pick -n 5
    expect stderr "gpusel: 3 of 4 GPUs and MIG instances fit, 5 are needed"
    run 0 pick -n 1 --order index
    expect stdout "0"
    expect_not stderr "MIG"
    # NVML loaded but nvmlInit failed (here: a machine-file line that does not parse) is NVML failing (4), not
    # the absence of a driver (3).
    printf 'gpu\nnot a directive\n' >"$work/unparsable.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/unparsable.txt"
    run 4 list
    expect stderr "gpusel: NVML failed to start: nvmlInit failed: Unknown Error (NVML status 999)"
    run 4 pick --json
    expect_in_json 'd["error"] == "nvml_failed" and d["exit_status"] == 4'
    ;;
  list)
    run 0 list
    expect stdout "CUDA    PHYS  SMI  NAME         UUID"
    expect stdout "cuda:0  0     0    NVIDIA H200  GPU-0a1b2c3d-0000-4000-8000-000000000000  00000000:17:00.0  117.2 GiB / 140.4 GiB   97%   free   pid 4000000001, owner unknown"
    expect stdout "cuda:1  1     1    NVIDIA H200  GPU-1b2c3d4e-0000-4000-8000-000000000001  00000000:18:00.0  2.0 GiB / 140.4 GiB     3%    free   pid $$ of $(id -un)"
    expect stdout "GPU-2c3d4e5f-0000-4000-8000-000000000002  00000000:3A:00.0  0 B / 140.4 GiB         0%    free   unknown"
    expect stdout "MIG mode; none"
    expect stdout "Caution: GPU 3 is in MIG mode"
    CUDA_VISIBLE_DEVICES=2,0 run 0 list
    expect stdout "cuda:1  0     0 "
    expect stdout "hidden  1     1 "
    expect stdout "cuda:0  2     2 "
    ;;
  explain)
    CUDA_VISIBLE_DEVICES=1 run 0 explain
    expect stdout "CUDA_VISIBLE_DEVICES=1"
    expect stdout "1 CUDA device is visible"
    expect stdout "cuda:0  physical 1  nvidia-smi 1  NVIDIA H200  GPU-1b2c3d4e-0000-4000-8000-000000000001"
    expect stdout "Hidden from this process:"
    CUDA_VISIBLE_DEVICES=1,7,0 run 0 explain
    expect stdout "\"7\""
    expect stdout "ends the list"
    # A value that makes CUDA fail is an exit status a job script can test, with and without --json.
    CUDA_VISIBLE_DEVICES=0,0 run 1 explain
    expect stdout "names physical GPU 0 twice"
    CUDA_VISIBLE_DEVICES=0,0 run 1 explain --json
    expect_json
    expect stdout '"ok": false'
    CUDA_VISIBLE_DEVICES=-1 run 1 explain
    expect stdout "No CUDA device is visible"
    ;;
  pick)
    run 0 pick --share-own
    [ "$out" = 1 ] || { echo "FAILED: pick printed [$out], expected 1"; failures=$((failures + 1)); }
    # By default this user's own process (the shell running this script, not gpusel) makes GPU 1 busy too,
    # and the report says which process did.
    run 1 pick
    [ -z "$out" ] || { echo "FAILED: GPU 1 runs this user's process: nothing is free"; failures=$((failures + 1)); }
    expect stderr "0 of 4 GPUs fit, 1 is needed (at least 1 GPU (at most 1); no compute process (this user's own included); most free memory first)"
    expect stderr "GPU-1b2c3d4e-0000-4000-8000-000000000001), 138.4 GiB free, 3% utilized: this user's own compute process runs on it (pid $$ of $(id -un)"
    run 1 pick --json
    expect_json
    expect_in_json "d['assessed'][1]['busy_processes'][0]['pid'] == $$ and d['assessed'][0]['busy_processes'][0]['pid'] == 4000000001"
    expect_in_json "d['assessed'][2]['busy_processes'] == []"
    run 0 pick -n 2 --min-free 8GiB --max-util 10 --allow-other-users --exclude 3
    [ "$out" = "2,1" ] || { echo "FAILED: expected 2,1 (most free memory first)"; failures=$((failures + 1)); }
    run 0 pick --format uuid --exclude GPU-1b2c --allow-other-users --max-util 99 --order util --all
    [ "$out" = "GPU-2c3d4e5f-0000-4000-8000-000000000002,GPU-0a1b2c3d-0000-4000-8000-000000000000" ] ||
      { echo "FAILED: unexpected UUIDs"; failures=$((failures + 1)); }
    CUDA_VISIBLE_DEVICES=0,2 run 0 pick --allow-other-users --all
    [ "$out" = "2,0" ] || { echo "FAILED: expected 2,0: only the GPUs CUDA_VISIBLE_DEVICES shows"; failures=$((failures + 1)); }
    CUDA_VISIBLE_DEVICES=0,2 run 0 pick --allow-other-users --all --whole-machine --order index
    [ "$out" = "0,1,2" ] || { echo "FAILED: expected 0,1,2 with --whole-machine"; failures=$((failures + 1)); }
    ;;
  pick_fails)
    run 1 pick -n 2 --min-free 8GiB --max-util 10 --share-own
    [ -z "$out" ] || { echo "FAILED: nothing may be printed on stdout when nothing fits"; failures=$((failures + 1)); }
    expect stderr "gpusel: 1 of 4 GPUs fit, 2 are needed (at least 2 GPUs (at most 2); at least 8.0 GiB free; at most 10% utilized; no other user's compute process; most free memory first):"
    expect stderr "GPU 0 (nvidia-smi 0, NVIDIA H200, GPU-0a1b2c3d-0000-4000-8000-000000000000), 23.2 GiB free, 97% utilized: 97% utilized, at most 10% allowed; another user's compute process runs on it (pid 4000000001, owner unknown: not visible from this PID namespace, 116.2 GiB)"
    expect stderr "GPU-1b2c3d4e-0000-4000-8000-000000000001), 138.4 GiB free, 3% utilized: fits"
    expect stderr "its compute processes are unknown (NVML could not list them)"
    expect stderr "MIG mode is enabled"
    run 2 pick --exclude 9
    expect stderr "gpusel: cannot exclude \"9\": there is no GPU with that number (4 GPUs)"
    # a GPU CUDA_VISIBLE_DEVICES hides is no candidate: excluding it is a mistake too, said as such
    CUDA_VISIBLE_DEVICES=2,3 run 2 pick --exclude 1
    expect stderr "cannot exclude \"1\": it names GPU 1 (nvidia-smi 1, GPU-1b2c3d4e-0000-4000-8000-000000000001), which CUDA_VISIBLE_DEVICES=2,3 hides, so it is no candidate anyway"
    CUDA_VISIBLE_DEVICES=2,3 run 2 pick --json --exclude 1
    expect_json
    expect stdout '"error": "usage"'
    CUDA_VISIBLE_DEVICES=0,1 run 1 pick --exclude 1 --share-own
    expect stderr "excluded (\"1\" names it)"
    ;;
  mixed_models)
    export GPUSEL_FAKE_NVML_CONFIG="$work/mixed.txt"
    run 0 list
    expect stdout "cuda:0  0     1    NVIDIA H200"
    expect stdout "cuda:1  1     2    NVIDIA L4"
    expect stdout "cuda:2  2     0    NVIDIA A100-SXM4-80GB"
    expect stdout "Caution: this machine has GPUs of different models"
    run 0 pick
    [ "$out" = 0 ] || { echo "FAILED: the H200 is CUDA's physical 0 under FASTEST_FIRST"; failures=$((failures + 1)); }
    expect stderr "--format uuid names the GPUs exactly"
    CUDA_DEVICE_ORDER=PCI_BUS_ID run 0 pick --format index
    [ "$out" = 1 ] || { echo "FAILED: under PCI_BUS_ID the H200 is physical 1"; failures=$((failures + 1)); }
    [ -z "$err" ] || { echo "FAILED: no caution is due under PCI_BUS_ID"; failures=$((failures + 1)); }
    run 0 pick --min-free 100GiB --format uuid
    [ "$out" = GPU-b2000000-0000-4000-8000-000000000000 ] || { echo "FAILED: only the H200 has 100 GiB"; failures=$((failures + 1)); }
    ;;
  no_driver)
    export GPUSEL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1
    for command in list pick; do
      run 3 "$command"
      expect stderr "gpusel: no NVIDIA driver to ask, so no GPU can be seen: NVML (/nonexistent/libnvidia-ml.so.1) could not be loaded"
    done
    run 3 explain
    expect stdout "The physical GPUs are unknown"
    run 3 explain --json
    expect_json
    GPUSEL_FAKE_NVML_CONFIG=/dev/null GPUSEL_NVML_LIBRARY=$2 run 0 list
    expect stdout "(NVML sees no GPU)"
    ;;
  nvml_fails)
    printf 'gpu\ngpu uuid_error=999\n' >"$work/failing.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/failing.txt"
    for command in list pick; do
      run 4 "$command"
      expect stderr "gpusel: NVML failed while reading the GPUs: nvmlDeviceGetUUID failed for the GPU nvidia-smi numbers 1: Unknown Error (NVML status 999)"
    done
    run 4 explain
    expect stdout "The physical GPUs are unknown: nvmlDeviceGetUUID failed"
    ;;
  nvml_hangs)
    # An NVML call that never returns (a wedged driver): list, pick, explain and run give up after
    # GPUSEL_NVML_TIMEOUT, saying so (each run is bounded by timeout(1), so a hang fails rather than blocks).
    export GPUSEL_NVML_TIMEOUT=1
    printf '#!/bin/sh\nexec timeout 20 "%s" "$@"\n' "$gpusel" >"$work/bounded"
    chmod +x "$work/bounded"
    gpusel="$work/bounded"
    for call in init count processes; do
      printf 'gpu\ngpu\nhang %s\n' "$call" >"$work/hang.txt"
      export GPUSEL_FAKE_NVML_CONFIG="$work/hang.txt"
      for command in list pick; do
        started=$(date +%s)
        run 4 "$command"
        expect stderr "gpusel: NVML did not answer in 1 s"
        [ $(($(date +%s) - started)) -le 10 ] || { echo "FAILED: $command took too long"; failures=$((failures + 1)); }
      done
      run 4 pick --json
      expect_json
      expect stdout '"error": "nvml_failed"'
      expect stdout '"exit_status": 4'
      run 125 run -- touch "$work/started"
      expect stderr "gpusel: NVML did not answer in 1 s"
      [ ! -e "$work/started" ] || { echo "FAILED: run started the command"; failures=$((failures + 1)); }
    done
    printf 'gpu\nhang init\n' >"$work/hang.txt"
    run 4 explain
    expect stderr "gpusel: NVML did not answer in 1 s"
    # a hang that ends within the limit is no failure; a malformed limit is a usage error
    printf 'gpu\ninit_delay_ms 300\n' >"$work/slow.txt"
    GPUSEL_FAKE_NVML_CONFIG="$work/slow.txt" run 0 pick
    GPUSEL_NVML_TIMEOUT=0 GPUSEL_FAKE_NVML_CONFIG="$work/slow.txt" run 0 pick
    GPUSEL_NVML_TIMEOUT=soon run 2 list
    expect stderr "GPUSEL_NVML_TIMEOUT expects a duration such as 30s, 5m or 1h, got \"soon\""
    unset GPUSEL_NVML_TIMEOUT GPUSEL_FAKE_NVML_CONFIG
    ;;
  odd_uuids)
    export GPUSEL_FAKE_NVML_CONFIG="$work/odd.txt"
    run 0 list
    expect stdout "cuda:0  0     0    NVIDIA H200  GPU-5a5a5a5a-0000-4000-8000-000000000000  00000000:17:00.0  1000.0 MiB"
    expect stdout "cuda:1  1     1    NVIDIA H200  GPU-5a5a5a5a-0000-4000-8000-000000000000  00000000:18:00.0  2.0 GiB"
    expect stdout "cuda:2  2     2    NVIDIA H200                                            00000000:19:00.0  2.9 GiB"
    expect stdout "cuda:3  3     3    NVIDIA H200                                            00000000:1A:00.0  3.9 GiB"
    run 0 list --json
    expect_json
    for bus in 17 18 19 1A; do expect stdout "\"pci_bus_id\": \"00000000:$bus:00.0\""; done
    # GPU 1 reports GPU 0's UUID: one GPU counted twice (Note [One UUID, one GPU]), picked once and said so
    run 0 pick --all --order index --format index
    [ "$out" = "0,2,3" ] || { echo "FAILED: expected the duplicate once, 0,2,3, got [$out]"; failures=$((failures + 1)); }
    run 1 pick -n 2 --format uuid --exclude 2,3
    [ -z "$out" ] || { echo "FAILED: one UUID is one GPU, printed twice as [$out]"; failures=$((failures + 1)); }
    expect stderr "NVML reports the UUID of GPU 0 for it too (GPU-5a5a5a5a-0000-4000-8000-000000000000), so gpusel counts the two as one GPU, GPU 0"
    run 0 list
    expect stdout "Caution: NVML reports GPU-5a5a5a5a-0000-4000-8000-000000000000 for GPUs 0 and 1: pick counts them as one GPU"
    run 0 pick --min-free 139GiB
    [ "$out" = 0 ] || { echo "FAILED: only GPU 0 has 139 GiB free"; failures=$((failures + 1)); }
    ;;
  json)
    CUDA_VISIBLE_DEVICES=1,3 run 0 list --json
    expect_json
    expect stdout '"uuid": "GPU-1b2c3d4e-0000-4000-8000-000000000001"'
    CUDA_VISIBLE_DEVICES='1,"x' run 0 explain --json
    expect_json
    expect stdout '"cuda_visible_devices": "1,\"x"'
    run 0 pick --json -n 1 --share-own
    expect_json
    expect stdout '"cuda_visible_devices": "1"'
    run 1 pick --json -n 3
    expect_json
    expect stdout '"ok": false'
    expect stdout '"rejected_because": ['
    ;;
  usage)
    run 0 --help
    expect stdout "usage: gpusel <command> [options]"
    expect stdout "Exit status:"
    run 0 pick --help
    expect stdout "--min-free SIZE"
    run 0 --version
    expect stdout "gpusel "
    run 2
    expect stderr "no command given"
    run 2 frobnicate
    expect stderr "unknown command \"frobnicate\""
    run 2 pick --min-free 8G
    expect stderr "gpusel: --min-free \"8G\": the unit \"G\" is ambiguous"
    expect_not stderr "gpusel::"
    run 2 pick --max-util 101
    expect stderr "--max-util expects a percentage from 0 to 100"
    run 2 pick -n 0
    expect stderr "-n expects a whole number of at least 1"
    run 2 pick --format json
    expect stderr "--format expects index or uuid"
    run 2 list --min-free 1GiB
    expect stderr "--min-free is an option of pick and run only"
    run 2 pick --at-least 3 --at-most 2
    expect stderr "--at-most 2 is below --at-least 3"
    run 2 pick --count
    expect stderr "--count expects a value"
    # help and version are commands too
    run 0 help
    expect stdout "usage: gpusel <command> [options]"
    run 0 version
    expect stdout "gpusel "
    run 2 version --json
    expect stderr "--json is an option of list, explain and pick only, not of version"
    # an option that takes no value refuses one rather than turning on
    run 2 list --json=false
    expect stderr "--json takes no value, got \"--json=false\""
    [ -z "$out" ] || { echo "FAILED: nothing may be listed after a usage error"; failures=$((failures + 1)); }
    run 2 pick --all=0
    expect stderr "--all takes no value, got \"--all=0\""
    run 2 pick --whole-machine=yes
    expect stderr "--whole-machine takes no value"
    # one command at a time: a second word is an extra argument, not an option
    run 2 list pick
    expect stderr "unexpected argument \"pick\": list takes no arguments"
    if grep -qF "unknown option" <<<"$err"; then echo "FAILED: \"pick\" is no option"; failures=$((failures + 1)); fi
    # values attached with '=', options before the command
    run 0 pick --count=1 --format=uuid --share-own
    [ "$out" = GPU-1b2c3d4e-0000-4000-8000-000000000001 ] || { echo "FAILED: --count=1 --format=uuid"; failures=$((failures + 1)); }
    run 2 --min-free 1GiB list
    expect stderr "--min-free is an option of pick and run only, not of list"
    # counts: too large says so, and -n with --at-most is refused (it used to depend on their order)
    run 2 pick -n 99999999999
    expect stderr "-n expects a whole number of at most 2147483647"
    run 2 pick -n 2 --at-most 3
    expect stderr "-n cannot be combined with --at-least, --at-most or --all"
    # a short option's value may be attached, as getopt takes it: -n2 is -n 2
    run 0 pick -n1 --format=uuid --share-own
    [ "$out" = GPU-1b2c3d4e-0000-4000-8000-000000000001 ] || { echo "FAILED: -n1"; failures=$((failures + 1)); }
    run 1 pick -n2
    expect stderr "0 of 4 GPUs fit, 2 are needed"
    run 2 pick -nx
    expect stderr "-n expects a whole number of at least 1, got \"x\""
    run 2 pick -hx
    expect stderr "unknown option \"-hx\""
    ;;
  run)
    # The command sees exactly the GPUs chosen, in order, as UUIDs; its status is gpusel's.
    cat >"$work/idle.txt" <<EOF
gpu uuid=GPU-0a000000-0000-4000-8000-000000000000 pci=00000000:17:00.0 used_mib=1000
gpu uuid=GPU-1b000000-0000-4000-8000-000000000000 pci=00000000:18:00.0 used_mib=3000
gpu uuid=GPU-2c000000-0000-4000-8000-000000000000 pci=00000000:19:00.0 used_mib=2000
EOF
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle.txt"
    run 0 run -n 2 -- sh -c 'echo "$CUDA_VISIBLE_DEVICES ${CUDA_DEVICE_ORDER-unset}"'
    [ "$out" = "GPU-0a000000-0000-4000-8000-000000000000,GPU-2c000000-0000-4000-8000-000000000000 unset" ] ||
      { echo "FAILED: expected the two GPUs with the most free memory, best first, as UUIDs"; failures=$((failures + 1)); }
    run 7 run -- sh -c 'exit 7'
    run 143 run -- sh -c 'kill -TERM $$'
    # A command that cannot be run is said before any GPU is chosen or leased: as execvp finds it, by path or
    # through PATH, 127 when it is not there and 126 when it is not executable.
    run 127 run -- /nonexistent/command
    expect_line stderr "gpusel: cannot run \"/nonexistent/command\": No such file or directory"
    expect_not stderr "running"
    expect_not stderr "leased"
    launcher=(env "PATH=$work")
    run 127 run -n 3 --wait -- gpusel-no-such-command
    launcher=()
    expect_line stderr "gpusel: cannot run \"gpusel-no-such-command\": No such file or directory"
    expect_not stderr "leased"
    run 126 run -- "$work"
    expect_line stderr "gpusel: cannot run \"$work\": Permission denied"
    expect_not stderr "leased"
    # nothing fits: 125, the command is not started, and each GPU and why is on stderr
    run 125 run -n 4 -- touch "$work/started"
    [ ! -e "$work/started" ] || { echo "FAILED: the command was started though nothing fit"; failures=$((failures + 1)); }
    expect stderr "3 of 3 GPUs fit, 4 are needed"
    expect stderr "GPU-1b000000-0000-4000-8000-000000000000), 137.5 GiB free, 0% utilized: fits"
    run 2 run -n 1
    expect stderr "run expects a command to run"
    run 2 run --wait=soon -- true
    expect stderr "--wait expects a duration such as 30s, 5m or 1h"
    run 2 run --no-lease=1 -- true
    expect stderr "--no-lease takes no value"
    # --format index: PCI bus order indices, with CUDA_DEVICE_ORDER=PCI_BUS_ID set for the command. The H200
    # is CUDA's physical 0 under FASTEST_FIRST, but PCI_BUS_ID number 1.
    export GPUSEL_FAKE_NVML_CONFIG="$work/mixed.txt"
    run 0 run --min-free 100GiB --format index -- sh -c 'echo "$CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER"'
    [ "$out" = "1 PCI_BUS_ID" ] || { echo "FAILED: expected the H200 as PCI_BUS_ID index 1"; failures=$((failures + 1)); }
    # the command holds a descriptor of each lock file (Note [The job holds the lease]), numbered 10 or
    # above, clear of a shell's redirections 3-9; the arguments reach it as given
    lease_fds='for fd in /proc/$$/fd/*; do case $(readlink "$fd") in *.lock) echo "${fd##*/}";; esac; done'
    run 0 run -n 2 -- sh -c "$lease_fds"'; printf "[%s]" "$@"' sh "a b" ""
    [ "$(grep -c '^[0-9]' <<<"$out")" = 2 ] || { echo "FAILED: the command must hold the lease's 2 descriptors"; failures=$((failures + 1)); }
    [ "$(tail -n 1 <<<"$out")" = "[a b][]" ] || { echo "FAILED: the command's arguments changed"; failures=$((failures + 1)); }
    for fd in $(grep '^[0-9]' <<<"$out"); do
      [ "$fd" -ge 10 ] || { echo "FAILED: lease descriptor $fd is one a shell redirects (3-9)"; failures=$((failures + 1)); }
    done
    run 0 run --no-lease -- sh -c "$lease_fds"
    [ -z "$out" ] || { echo "FAILED: --no-lease gave the command a lock file"; failures=$((failures + 1)); }
    # an executable file without #! runs through /bin/sh, as execvp runs it, by path and through PATH
    printf 'echo "no #! line: $1"\n' >"$work/script"
    chmod +x "$work/script"
    run 0 run -- "$work/script" one
    [ "$out" = "no #! line: one" ] || { echo "FAILED: a file without #! must run through /bin/sh"; failures=$((failures + 1)); }
    PATH="$work:$PATH" run 0 run -- script two
    [ "$out" = "no #! line: two" ] || { echo "FAILED: a file without #! found in PATH must run through /bin/sh"; failures=$((failures + 1)); }
    chmod -x "$work/script"
    run 126 run -- "$work/script"
    # signals sent to gpusel reach the command; gpusel returns its status
    "$gpusel" run -- sh -c 'trap "echo got TERM; exit 9" TERM; echo ready; sleep 5 & wait' >"$work/sig" 2>&1 &
    pid=$!
    for _ in $(seq 50); do grep -q ready "$work/sig" && break; sleep 0.1; done
    kill -TERM $pid
    wait $pid
    status=$?
    echo "\$ kill -TERM (gpusel run) -> exit $status: $(cat "$work/sig")"
    { [ "$status" = 9 ] && grep -q "got TERM" "$work/sig"; } || { echo "FAILED: SIGTERM was not forwarded"; failures=$((failures + 1)); }
    ;;
  run_leases | run_wait)
    # 6 jobs at once on 4 idle GPUs: 4 get 4 different GPUs; the other 2 fail with 125 (or, with --wait,
    # get GPUs once the first ones end).
    printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/idle4.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle4.txt"
    wait_flag=()
    [ "$scenario" = run_wait ] && wait_flag=(--wait=20s)
    pids=()
    for job in 1 2 3 4 5 6; do
      "$gpusel" run -n 1 "${wait_flag[@]}" -- sh -c "echo \$CUDA_VISIBLE_DEVICES >$work/job$job; sleep 2" 2>"$work/err$job" &
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
    if [ "$scenario" = run_leases ]; then
      { [ "$started" = 4 ] && [ "$distinct" = 4 ]; } || { echo "FAILED: expected 4 jobs on 4 different GPUs"; failures=$((failures + 1)); }
      [ "$(tr ' ' '\n' <<<"${statuses[*]}" | grep -c '^125$')" = 2 ] || { echo "FAILED: expected 2 jobs to fail with 125"; failures=$((failures + 1)); }
      grep -qh "leased by another job" "$work"/err? || { echo "FAILED: the reason, a lease, is not given"; failures=$((failures + 1)); }
      # while a job holds a GPU, pick counts it busy and says who holds it; kill -9 frees it
      # (Away from the test's output, which ctest waits on until it closes.)
      "$gpusel" run --exclude 1,2,3 -- sh -c 'echo $$ >"$1"; exec sleep 30' sh "$work/holder_command" >/dev/null 2>&1 &
      holder=$!
      until_file "$work/holder_command"
      run 1 pick --exclude 1,2,3
      expect stderr "leased by another job (pid $holder gpusel since "
      expect stderr ", lock $GPUSEL_LEASE_DIR/GPU-fa4e0000-0000-0000-0000-000000000000.$(id -u).lock)"
      run 1 pick --json --exclude 1,2,3
      expect_json
      expect stdout '"cuda_visible_devices": null'
      run 125 run --exclude 1,2,3 -- true
      run 125 run --no-lease --exclude 1,2,3 -- true
      expect stderr "leased by another job (pid $holder"
      # list says who holds each GPU: the user, and a live process of the job (gpusel run, while it lives)
      run 0 list
      expect stdout "$(id -un) (uid $(id -u)): pid $holder gpusel since "
      run 0 list --json
      expect_json
      expect_in_json "d['gpus'][0]['lease']['held'] and d['gpus'][0]['lease']['pid'] == $holder and d['gpus'][0]['lease']['command'] == 'gpusel' and d['gpus'][0]['lease']['uid'] == $(id -u) and d['gpus'][1]['lease']['text'] == 'free' and d['leases_problem'] is None"
      # After kill -9 of run alone its command holds the lease, and is the process named, not the dead run.
      kill -9 $holder
      wait $holder 2>/dev/null
      run 1 pick --exclude 1,2,3
      expect stderr "leased by another job (pid $(cat "$work/holder_command") sleep since "
      run 0 list
      expect stdout "$(id -un) (uid $(id -u)): pid $(cat "$work/holder_command") sleep since "
      # kill -9 of the whole job (gpusel run and its command) releases it
      kill -9 $holder "$(cat "$work/holder_command")" 2>/dev/null
      wait $holder 2>/dev/null
      until_free --exclude 1,2,3
      run 0 pick --exclude 1,2,3
      [ "$out" = 0 ] || { echo "FAILED: kill -9 of the job must release the lease"; failures=$((failures + 1)); }
      # A holder's name is whatever its job made it: escaped on the terminal, exact as hex in JSON.
      rm -f "$work/holder_command"
      "$gpusel" run --exclude 1,2,3 -- python3 -c 'import os, sys, time
open("/proc/self/comm", "wb").write(b"\x1b]0;owned\x07\xff")
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(30)' "$work/holder_command" >/dev/null 2>&1 &
      holder=$!
      until_file "$work/holder_command"
      kill -9 $holder
      wait $holder 2>/dev/null
      run 0 list
      expect stdout "pid $(cat "$work/holder_command") \x1b]0;owned\x07\xff since "
      expect_utf8
      run 0 list --json
      expect_json
      expect_in_json "d['gpus'][0]['lease']['command_hex'] == '1b5d303b6f776e656407ff'"
      kill -9 "$(cat "$work/holder_command")"
      until_free --exclude 1,2,3
      # list and explain work where the lease directory cannot be trusted, and list says so.
      mkdir "$work/untrusted" && chmod 0777 "$work/untrusted"
      GPUSEL_LEASE_DIR="$work/untrusted" run 0 list
      expect stdout "Leases cannot be read (LEASE ?): the lease directory $work/untrusted is writable by other users but not sticky"
      GPUSEL_LEASE_DIR="$work/untrusted" run 0 list --json
      expect_in_json "'not sticky' in d['leases_problem'] and d['gpus'][0]['lease'] is None"
      GPUSEL_LEASE_DIR="$work/untrusted" run 0 explain
      GPUSEL_LEASE_DIR="$work/never-made" run 0 list
      expect stdout "0%    free   "
      # One unusable lock file (a directory where GPU 3's would be, under either name gpusel
      # ever gave it) rejects GPU 3 alone, with the reason; the other GPUs are picked as before.
      rm -f "$GPUSEL_LEASE_DIR"/GPU-fa4e0000-0000-0000-0000-000000000003.*lock
      mkdir "$GPUSEL_LEASE_DIR/GPU-fa4e0000-0000-0000-0000-000000000003.lock" \
        "$GPUSEL_LEASE_DIR/GPU-fa4e0000-0000-0000-0000-000000000003.$(id -u).lock"
      run 0 pick -n 3 --order index
      [ "$out" = 0,1,2 ] || { echo "FAILED: one unusable lock file must not stop the other GPUs' picks"; failures=$((failures + 1)); }
      run 1 pick -n 4
      expect stderr "GPU-fa4e0000-0000-0000-0000-000000000003), 140.4 GiB free, 0% utilized: cannot be leased: its lease file $GPUSEL_LEASE_DIR/GPU-fa4e0000-0000-0000-0000-000000000003.$(id -u).lock is not a regular file (it belongs to "
      run 0 pick --json --order index
      expect_in_json 'any("not a regular file" in r for r in d["assessed"][3]["rejected_because"])'
      run 125 run --exclude 0,1,2 -- true
      expect stderr "cannot be leased: its lease file"
      rmdir "$GPUSEL_LEASE_DIR"/GPU-fa4e0000-0000-0000-0000-000000000003.*lock
      # Another local user made the lease directory: every other user's run is refused, naming the owner and
      # the fix (Note [Who can break a lease]); staged with setpriv, as root only.
      if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
        chmod 755 "$work"
        mkdir -m 1777 "$work/shared"
        as() { local uid=$1; shift; GPUSEL_LEASE_DIR="$work/shared/leases" setpriv --reuid "$uid" --regid "$uid" --clear-groups "$@"; }
        as 4101 "$gpusel" run -- true 2>/dev/null || { echo "FAILED: uid 4101 could not lease in a directory of its own"; failures=$((failures + 1)); }
        as 4102 "$gpusel" run -- true >"$work/out" 2>"$work/err"
        status=$?
        err=$(cat "$work/err")
        echo "\$ (as uid 4102) gpusel run -- true -> exit $status"
        [ "$status" = 125 ] || { echo "FAILED: expected 125 for a lease directory of another user"; failures=$((failures + 1)); }
        expect stderr "$work/shared/leases belongs to uid 4101 and is private to that user"
        expect stderr "install -d -m 1777 -o root $work/shared/leases"
      else
        echo "skipped: staging another local user needs root and setpriv"
      fi
      # Only taking a lease makes the lease directory: pick, list, explain and run --no-lease never do (the
      # first to make /tmp/gpusel-leases would own it, and other users' leases would fail).
      never_made="$work/never-made"
      for command in "pick" "pick --json" "list" "list --json" "explain" "run --no-lease -- true"; do
        # shellcheck disable=SC2086 # the command's words
        GPUSEL_LEASE_DIR="$never_made" "$gpusel" $command >/dev/null 2>&1
        [ ! -e "$never_made" ] || { echo "FAILED: gpusel $command made the lease directory"; failures=$((failures + 1)); rmdir "$never_made"; }
      done
      GPUSEL_LEASE_DIR="$never_made" run 0 run -- true
      [ -d "$never_made" ] || { echo "FAILED: run (a lease) did not make the lease directory"; failures=$((failures + 1)); }
      # --no-lease takes none: while such a job runs, its GPU can still be picked
      "$gpusel" run --no-lease --exclude 1,2,3 -- sleep 30 &
      holder=$!
      sleep 0.5
      run 0 pick --exclude 1,2,3
      [ "$out" = 0 ] || { echo "FAILED: --no-lease took a lease"; failures=$((failures + 1)); }
      kill $holder
      wait $holder 2>/dev/null
    else
      [ "$started" = 6 ] || { echo "FAILED: expected all 6 jobs to run"; failures=$((failures + 1)); }
      [ "${statuses[*]}" = "0 0 0 0 0 0" ] || { echo "FAILED: expected every job to succeed"; failures=$((failures + 1)); }
      [ "$distinct" = 4 ] || { echo "FAILED: expected the 6 jobs on the 4 GPUs"; failures=$((failures + 1)); }
      [ "$(grep -l "gpusel: waiting for at least 1 GPU" "$work"/err? | wc -l)" = 2 ] ||
        { echo "FAILED: the 2 waiting jobs say once what they wait for"; failures=$((failures + 1)); }
      # Waiting jobs are served in arrival order: a 4-GPU job is not overtaken forever by a stream of
      # 1-GPU jobs (three workers, each starting the next as its last ends, so a GPU is always busy).
      workers=()
      for worker in 1 2 3; do
        (while [ ! -e "$work/stream_stop" ]; do "$gpusel" run -n 1 --wait -- sleep 0.5 2>/dev/null; done) &
        workers+=($!)
      done
      sleep 1
      run 0 run -n 4 --wait=12s -- true
      expect stderr "gpusel: leased GPU 3"
      touch "$work/stream_stop"
      wait "${workers[@]}"
      # An earlier waiter's live ticket holds up a waiting job (whose message names it), never one that does
      # not wait; a dead ticket (a killed waiter's, unlocked) holds up no one and goes; nor does a stopped waiter.
      : >"$GPUSEL_LEASE_DIR/wait-$(id -u)-00000000000000aa.ticket"
      run 0 run -n 1 --wait=10s -- true
      expect stderr "gpusel: leased GPU"
      [ ! -e "$GPUSEL_LEASE_DIR/wait-$(id -u)-00000000000000aa.ticket" ] ||
        { echo "FAILED: a dead ticket stays in the lease directory"; failures=$((failures + 1)); }
      flock "$GPUSEL_LEASE_DIR/wait-$(id -u)-00000000000000bb.ticket" sleep 3 &
      earlier=$!
      sleep 0.5
      run 0 run -n 1 -- true
      began=$(date +%s)
      run 0 run -n 1 --wait=10s -- true
      expect stderr "another job waits for GPUs first (pid "
      [ $(($(date +%s) - began)) -ge 2 ] || { echo "FAILED: a waiting job went before an earlier waiter"; failures=$((failures + 1)); }
      wait $earlier
      # A stopped waiter (Ctrl-Z) holds up no one: a -n 4 job waits behind a lease, is stopped, and a later
      # --wait job goes.
      "$gpusel" run -n 1 -- sh -c 'echo $$ >"$1"; exec sleep 30' sh "$work/one_holder" >/dev/null 2>&1 &
      one_holder=$!
      until_file "$work/one_holder"
      "$gpusel" run -n 4 --wait=60s -- true 2>"$work/stopped_err" &
      stopped=$!
      for _ in $(seq 50); do [ -s "$work/stopped_err" ] && break; sleep 0.1; done
      kill -STOP $stopped
      began=$(date +%s)
      run 0 run -n 1 --wait=20s -- true
      [ $(($(date +%s) - began)) -lt 10 ] || { echo "FAILED: a stopped waiter held up the line"; failures=$((failures + 1)); }
      kill -KILL $stopped "$(cat "$work/one_holder")" 2>/dev/null
      wait $stopped $one_holder 2>/dev/null
      # A request no GPU here could meet even idle fails at once, with the reason (timeout(1) ends a wait).
      launcher=(timeout 20)
      run 125 run -n 5 --wait -- true
      expect stderr "no wait can meet this request: even with every GPU idle"
      expect stderr "gpusel: not waiting: no wait can fix this"
      run 125 run --min-free 500GiB --wait -- true
      expect stderr "500.0 GiB needed"
      run 125 run --no-lease -n 5 --wait -- true  # not in line, and no wait can serve it either
      expect stderr "no wait can meet this request: even with every GPU idle"
      expect stderr "gpusel: not waiting: no wait can fix this"
      launcher=()
      # A lease directory no wait can fix (writable by everyone, not sticky): 125 at once, with the reason.
      mkdir "$work/loose" && chmod 0777 "$work/loose"
      began=$(date +%s)
      GPUSEL_LEASE_DIR="$work/loose" run 125 run --wait=15s -- true
      expect stderr "writable by other users but not sticky"
      [ $(($(date +%s) - began)) -lt 10 ] || { echo "FAILED: run --wait waited on a lease directory no wait can fix"; failures=$((failures + 1)); }
    fi
    ;;
  run_job)
    # The lease lasts as long as the job (Note [The job holds the lease]): whatever ends gpusel run, kill -9 or a
    # signal whose default kills, a second job does not get the GPU while the command lives, and does once it ends.
    printf 'gpu\ngpu\n' >"$work/idle2.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle2.txt"
    for signal in KILL USR1 USR2 ALRM PIPE VTALRM PROF; do
      rm -f "$work/command" "$work/got"
      # The command survives the signal (and notes that it came), so that only gpusel run can die of it.
      trap_it=""
      [ $signal = KILL ] || trap_it='trap "echo got >\"\$2\"" '$signal';'
      "$gpusel" run --exclude 1 -- sh -c "$trap_it"' echo $$ >"$1"; while :; do sleep 0.1; done' \
        sh "$work/command" "$work/got" 2>/dev/null &
      runner=$!
      until_file "$work/command"
      kill -$signal $runner
      sleep 0.3
      echo "kill -$signal (gpusel run):"
      run 125 run --exclude 1 -- true
      expect stderr "leased by another job"
      if [ $signal != KILL ]; then
        until_file "$work/got"
        [ -s "$work/got" ] || { echo "FAILED: SIG$signal was not passed on to the command"; failures=$((failures + 1)); }
      fi
      kill "$(cat "$work/command")"
      wait $runner 2>/dev/null
      until_free --exclude 1
      run 0 run --exclude 1 -- true
    done
    # A command that puts its work in the background keeps the GPU while that work runs.
    run 0 run --exclude 1 -- sh -c 'sleep 30 >/dev/null 2>&1 & echo $! >"$1"' sh "$work/background"
    run 125 run --exclude 1 -- true
    expect stderr "leased by another job"
    kill "$(cat "$work/background")"
    until_free --exclude 1
    run 0 run --exclude 1 -- true
    ;;
  run_signals)
    printf 'gpu\n' >"$work/idle1.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle1.txt"
    # Signals ignored when gpusel run starts stay ignored in the command: nohup gpusel run, as nohup env.
    launcher=(nohup)
    run 0 run -- sh -c 'kill -HUP $$; echo survived'
    [ "$out" = survived ] || { echo "FAILED: under nohup the command must ignore SIGHUP"; failures=$((failures + 1)); }
    launcher=(sh -c 'trap "" INT QUIT; exec "$@"' sh)
    run 0 run -- sh -c 'kill -INT $$; kill -QUIT $$; echo survived'
    [ "$out" = survived ] || { echo "FAILED: ignored SIGINT and SIGQUIT must stay ignored"; failures=$((failures + 1)); }
    # Started with SIGCHLD ignored (which makes the kernel reap children unasked), run still gets the status.
    launcher=(python3 -c 'import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); os.execvp(sys.argv[1], sys.argv[1:])')
    run 3 run -- sh -c 'exit 3'
    run 0 run -- grep SigIgn /proc/self/status
    (( 0x${out##*:[[:space:]]} & 1 << ($(kill -l CHLD) - 1) )) ||
      { echo "FAILED: the command must inherit SIGCHLD ignored"; failures=$((failures + 1)); }
    launcher=()
    # A command killed by signal N: gpusel run dies of N too (as env does), not exit 128+N.
    for signal in TERM INT QUIT USR1 KILL SEGV; do
      status=$(wait_status "$gpusel" run -- sh -c "ulimit -c 0; kill -$signal \$\$")
      echo "\$ gpusel run -- sh -c 'kill -$signal \$\$' -> $status"
      [ "$status" = "signal $(kill -l $signal)" ] ||
        { echo "FAILED: gpusel run must die of SIG$signal"; failures=$((failures + 1)); }
    done
    status=$(wait_status "$gpusel" run -- sh -c 'exit 3')
    [ "$status" = "exit 3" ] || { echo "FAILED: expected exit 3, got $status"; failures=$((failures + 1)); }
    # So Ctrl-C (SIGINT to the foreground process group) stops a shell loop of gpusel run.
    python3 -c '
import os, signal, subprocess, sys, time
gpusel, log = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGINT, signal.SIG_DFL)
loop = subprocess.Popen(["bash", "-c", "for i in 1 2 3; do \"$0\" run -- sh -c \"echo started >>$1; exec sleep 10\"; done; echo finished >>$1", gpusel, log],
                        start_new_session=True, stderr=subprocess.DEVNULL)
for _ in range(100):
    if os.path.exists(log) and open(log).read():
        break
    time.sleep(0.1)
os.killpg(loop.pid, signal.SIGINT)
try:
    loop.wait(timeout=5)
except subprocess.TimeoutExpired:
    os.killpg(loop.pid, signal.SIGKILL)
    loop.wait()
print("loop:", loop.returncode, open(log).read().split())
sys.exit(0 if loop.returncode == -signal.SIGINT and open(log).read().split() == ["started"] else 1)
' "$gpusel" "$work/loop" || { echo "FAILED: Ctrl-C must stop a shell loop of gpusel run"; failures=$((failures + 1)); }
    ;;
  run_wait_unfixable)
    # run --wait fails at once (125, with the reason) where no wait can help; timeout(1) ends a run that waits.
    printf 'gpu\ngpu\n' >"$work/idle2.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle2.txt"
    launcher=(timeout 10)
    mkdir -m 0777 "$work/open"
    chmod 0777 "$work/open"  # past the umask
    GPUSEL_LEASE_DIR="$work/open" run 125 run --wait -- true
    expect stderr "gpusel: the lease directory $work/open is writable by other users but not sticky"
    expect stderr "gpusel: not waiting: no wait can fix this"
    # An unusable lease file is its GPU's problem alone (Note [Who can break a lease]): that GPU is passed over
    # with the reason, and a wait for the others goes on until it gives up.
    own_lock="$GPUSEL_LEASE_DIR/GPU-fa4e0000-0000-0000-0000-000000000000.$(id -u).lock"
    mkdir -p "$own_lock"
    run 0 run -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
    [ "$out" = GPU-fa4e0000-0000-0000-0000-000000000001 ] ||
      { echo "FAILED: a GPU whose lease file is unusable must be passed over for the next"; failures=$((failures + 1)); }
    run 125 run --wait=1s -n 2 -- true
    expect stderr "$own_lock is not a regular file"
    expect stderr "gpusel: gave up waiting"
    rmdir "$own_lock"
    printf 'gpu uuid=\n' >"$work/no_uuid.txt"
    GPUSEL_FAKE_NVML_CONFIG="$work/no_uuid.txt" run 125 run --wait -- true
    expect stderr "NVML reports no UUID for it"
    run 125 run --wait --exclude 9 -- true
    expect stderr "gpusel: cannot exclude \"9\""
    # What a wait can end, it waits for: a GPU another job holds.
    "$gpusel" run --exclude 1 -- sh -c 'echo $$ >"$1"; exec sleep 2' sh "$work/holder" 2>/dev/null &
    holder=$!
    until_file "$work/holder"
    run 0 run --wait=20s --exclude 1 -- true
    expect stderr "gpusel: waiting for"
    wait $holder
    launcher=()
    ;;
  run_local_rank)
    # Each rank of a job gets the i-th GPU the job sees, leased; a GPU another job holds is that rank's error.
    printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/idle4.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle4.txt"
    for rank in 0 1; do
      LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 CUDA_VISIBLE_DEVICES=3,1 run 0 run --local-rank -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
      [ "$out" = "GPU-fa4e0000-0000-0000-0000-00000000000$([ $rank = 0 ] && echo 3 || echo 1)" ] ||
        { echo "FAILED: rank $rank must get cuda:$rank of the job"; failures=$((failures + 1)); }
    done
    OMPI_COMM_WORLD_LOCAL_RANK=2 run 0 run --local-rank --format index -- sh -c 'echo $CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER'
    [ "$out" = "2 PCI_BUS_ID" ] || { echo "FAILED: Open MPI's rank 2 gets physical 2"; failures=$((failures + 1)); }
    LOCAL_RANK=2 CUDA_VISIBLE_DEVICES=3,1 run 125 run --local-rank -- true
    expect stderr "local rank 2 has no GPU of its number"
    LOCAL_RANK=x run 125 run --local-rank -- true
    expect stderr "LOCAL_RANK=\"x\" is not a non-negative decimal integer"
    run 2 run --local-rank -n 2 -- true
    expect stderr "--local-rank takes the rank's own GPU, so -n cannot apply"
    # no launcher variable: local rank 0 of 1, said on stderr
    run 0 run --local-rank -- true
    expect stderr "gpusel: no launcher variable is set (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID), so this process runs as local rank 0 of 1"
    LOCAL_RANK=0 run 0 run --local-rank -- true
    if grep -qF "no launcher variable" <<<"$err"; then echo "FAILED: LOCAL_RANK is set"; failures=$((failures + 1)); fi
    # another user's job keeps the rank's GPU 97% busy: the rank's error, with the reason
    printf 'gpu\ngpu utilization=97 used_mib=100000\ngpu\ngpu\nprocess gpu=1 pid=4000000001 used_mib=100000\n' >"$work/busy4.txt"
    GPUSEL_FAKE_NVML_CONFIG="$work/busy4.txt" LOCAL_RANK=1 run 125 run --local-rank -- touch "$work/started"
    expect stderr "local rank 1 (torchrun: LOCAL_RANK=1): its GPU, cuda:1 of the job (physical 1, GPU-fa4e0000-0000-0000-0000-000000000001), is busy: another user's compute process runs on it (pid 4000000001, owner unknown"
    [ ! -e "$work/started" ] || { echo "FAILED: the rank ran on a busy GPU"; failures=$((failures + 1)); }
    GPUSEL_FAKE_NVML_CONFIG="$work/busy4.txt" LOCAL_RANK=1 run 0 run --local-rank --allow-other-users -- true
    GPUSEL_FAKE_NVML_CONFIG="$work/busy4.txt" LOCAL_RANK=0 run 0 run --local-rank -- true
    # another job holds physical 1: rank 1 fails, and does not take another GPU
    "$gpusel" run --exclude 0,2,3 -- sleep 30 &
    holder=$!
    for _ in $(seq 50); do "$gpusel" pick --exclude 0,2,3 >/dev/null 2>&1 || break; sleep 0.1; done
    LOCAL_RANK=1 run 125 run --local-rank -- touch "$work/started"
    expect stderr "its GPU, cuda:1 of the job (physical 1, GPU-fa4e0000-0000-0000-0000-000000000001), is leased by another job (pid $holder"
    [ ! -e "$work/started" ] || { echo "FAILED: the rank ran on another GPU"; failures=$((failures + 1)); }
    LOCAL_RANK=1 run 0 run --local-rank --no-lease -- true
    kill $holder
    wait $holder 2>/dev/null
    # a rank whose GPU is in MIG mode is not given the GPU whole (CUDA would show its instances), leased or not
    export GPUSEL_FAKE_NVML_CONFIG="$work/mig.txt"
    for lease in "" --no-lease; do
      LOCAL_RANK=1 run 125 run --local-rank $lease -- touch "$work/mig_started"
      expect stderr "local rank 1 (torchrun: LOCAL_RANK=1): its GPU, cuda:1 of the job (physical 1, GPU-3d4e5f60-0000-4000-8000-000000000003), is in MIG mode"
      [ ! -e "$work/mig_started" ] || { echo "FAILED: the rank ran on a GPU in MIG mode"; failures=$((failures + 1)); }
    done
    LOCAL_RANK=0 run 0 run --local-rank -- true
    ;;
  run_compose)
    # A program that picks at start-up (an inference server), run as `gpusel run -n 2 -- ./server`: inside the
    # job it chooses among the job's GPUs, and leasing one is the job's lease (Note [The job's lease]).
    cat >"$work/idle4.txt" <<EOF
gpu uuid=GPU-c0000000-0000-4000-8000-000000000000 pci=00000000:17:00.0
gpu uuid=GPU-c1000000-0000-4000-8000-000000000001 pci=00000000:18:00.0
gpu uuid=GPU-c2000000-0000-4000-8000-000000000002 pci=00000000:3A:00.0
gpu uuid=GPU-c3000000-0000-4000-8000-000000000003 pci=00000000:3B:00.0
EOF
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle4.txt"
    g0=GPU-c0000000-0000-4000-8000-000000000000 g1=GPU-c1000000-0000-4000-8000-000000000001
    g2=GPU-c2000000-0000-4000-8000-000000000002
    run 0 run -n 2 --format uuid -- "$job_picks" pick 2
    expect_line stdout "$g0"
    expect_line stdout "$g1"
    expect stderr " GPUSEL_JOB_LEASE=$g0:"
    run 0 run -n 2 --format uuid -- "$job_picks" use 2
    expect_line stdout "$g0 job"
    expect_line stdout "$g1 job"
    expect_line stdout "CUDA_VISIBLE_DEVICES=$g0,$g1"
    # More than the job holds: the rest are not the job's, whatever else hides them.
    run 1 run -n 2 -- "$job_picks" pick 3
    expect stderr "$g0), 140.4 GiB free, 0% utilized: fits"
    expect stderr "$g2), 140.4 GiB free, 0% utilized: hidden by CUDA_VISIBLE_DEVICES"
    expect stderr "not one of this job's GPUs (GPUSEL_JOB_LEASE names 2 GPUs that gpusel run leased it)"
    expect_not stderr "leased by another job"
    run 1 run -n 1 --whole-machine -- "$job_picks" use 2
    expect stderr "not one of this job's GPUs"
    # lease_gpu of the job's GPU is the job's; of another free GPU, a lease of its own.
    run 0 run -n 1 -- "$job_picks" lease "$g0"
    expect_line stdout "$g0 job"
    run 0 run -n 1 -- "$job_picks" lease "$g2"
    expect_line stdout "$g2 own"
    # The job's lease ends with the job: a job started after it gets the GPUs.
    run 0 run -n 2 -- true
    # gpusel run inside gpusel run chooses among the outer job's GPUs, and its command's lease is the job's.
    run 0 run -n 2 --format uuid -- "$gpusel" run -n 1 --format uuid -- "$job_picks" use 1
    expect_line stdout "$g0 job"
    expect stderr "$g0), 140.4 GiB free, 0% utilized: the job's lease (GPUSEL_JOB_LEASE), no lock of its own"
    # explain and pick say that they choose among the job's GPUs.
    run 0 run -n 2 -- "$gpusel" explain
    expect stdout "gpusel run leased this job 2 GPUs (GPUSEL_JOB_LEASE=$g0:"
    expect stdout "); choosing among them."
    run 0 run -n 2 -- "$gpusel" pick -n 2 --format uuid
    expect_line stdout "$g0,$g1"
    expect stderr "gpusel: gpusel run leased this job 2 GPUs"
    run 0 run -n 2 -- "$gpusel" explain --json
    expect_in_json 'd["allotment"]["job_gpus"] == ["'"$g0"'", "'"$g1"'"] and d["allotment"]["job_lease"].startswith("'"$g0"':")'
    run 0 explain --json
    expect_in_json 'd["allotment"]["job_gpus"] == [] and d["allotment"]["job_lease"] is None'
    # list inside the job says which GPUs are the job's own, not another job's.
    run 0 run -n 2 -- "$gpusel" list
    expect stdout "this job, "
    expect_not stdout "leased by another job"
    run 0 run -n 2 -- "$gpusel" list --json
    expect_in_json '[g["lease"]["this_job"] for g in d["gpus"]] == [True, True, False, False]'
    # The variable is not the lease: named outside a job, with a descriptor that holds no lock, or another job's
    # lock, it counts for nothing, and says why.
    "$gpusel" run --format uuid -n 1 -- sh -c 'echo ready >"$1"; exec sleep 30' sh "$work/holding" 2>/dev/null &
    holder=$!
    until_file "$work/holding"
    lock=$(ls "$GPUSEL_LEASE_DIR/$g0".*.lock)
    GPUSEL_JOB_LEASE="$g0:10" "$job_picks" lease "$g0" >"$work/out" 2>"$work/err" 10<"$lock"
    echo "\$ GPUSEL_JOB_LEASE=$g0:10 job_picks lease $g0 10<(another job's lock) -> exit $?: $(cat "$work/out" "$work/err")"
    grep -qF "$g0 is leased by another job" "$work/err" ||
      { echo "FAILED: a faked GPUSEL_JOB_LEASE got $g0"; failures=$((failures + 1)); }
    GPUSEL_JOB_LEASE="$g0:10" "$job_picks" pick 4 >"$work/out" 2>"$work/err" 10<"$lock"
    grep -qF "GPUSEL_JOB_LEASE names it as this job's, but another process holds $lock, not descriptor 10" "$work/err" ||
      { echo "FAILED: pick did not say why GPUSEL_JOB_LEASE did not count: $(cat "$work/err")"; failures=$((failures + 1)); }
    GPUSEL_JOB_LEASE="$g0:250" "$job_picks" pick 4 >"$work/out" 2>"$work/err"
    grep -qF "but descriptor 250 is not open in this process" "$work/err" ||
      { echo "FAILED: a closed descriptor was not said: $(cat "$work/err")"; failures=$((failures + 1)); }
    kill "$holder"
    wait "$holder" 2>/dev/null
    until_free -n 4
    GPUSEL_JOB_LEASE="$g0:10" "$job_picks" lease "$g0" >"$work/out" 2>"$work/err" 10<"$lock"
    grep -qxF "$g0 own" "$work/out" ||
      { echo "FAILED: a descriptor without the lock counted as the job's: $(cat "$work/out")"; failures=$((failures + 1)); }
    ;;
  exclude_numbering)
    # What pick prints, --exclude takes: on mixed models CUDA's physical 0 is the H200, nvidia-smi's 0 the A100.
    export GPUSEL_FAKE_NVML_CONFIG="$work/mixed.txt"
    run 0 pick
    [ "$out" = 0 ] || { echo "FAILED: expected physical 0, the H200"; failures=$((failures + 1)); }
    run 0 pick --exclude 0 --format uuid
    [ "$out" != GPU-b2000000-0000-4000-8000-000000000000 ] || { echo "FAILED: --exclude 0 must exclude what pick printed"; failures=$((failures + 1)); }
    run 0 pick --exclude smi:0,smi:2 --format uuid
    [ "$out" = GPU-b2000000-0000-4000-8000-000000000000 ] || { echo "FAILED: smi:N names nvidia-smi's GPU N"; failures=$((failures + 1)); }
    run 2 pick --exclude smi:7
    expect stderr "cannot exclude \"smi:7\": nvidia-smi numbers no GPU so (3 GPUs)"
    ;;
  device_order)
    # An invalid CUDA_DEVICE_ORDER makes the runtime fail: pick and run fail too, as explain says.
    CUDA_DEVICE_ORDER=pci_bus_id run 1 pick
    [ -z "$out" ] || { echo "FAILED: nothing may be printed"; failures=$((failures + 1)); }
    expect stderr "CUDA_DEVICE_ORDER=pci_bus_id is neither FASTEST_FIRST nor PCI_BUS_ID, so the CUDA runtime fails with cudaErrorInvalidDevice"
    CUDA_DEVICE_ORDER=pci_bus_id run 1 pick --json
    expect_json
    expect stdout '"ok": false'
    CUDA_DEVICE_ORDER=pci_bus_id run 125 run -- true
    CUDA_DEVICE_ORDER=pci_bus_id run 1 explain --json
    expect stdout '"ok": false'
    # pick never prints an empty list: --at-least 0 is refused, and a visible set that hides everything fails
    run 2 pick --at-least 0
    expect stderr "--at-least expects a whole number of at least 1"
    [ -z "$out" ] || { echo "FAILED: nothing may be printed"; failures=$((failures + 1)); }
    run 2 pick --all --at-least 0
    CUDA_VISIBLE_DEVICES= run 1 pick --all --allow-other-users
    [ -z "$out" ] || { echo "FAILED: an empty list was printed"; failures=$((failures + 1)); }
    # MIG instance UUIDs: explain says what it knows and leaves the rest to CUDA
    CUDA_VISIBLE_DEVICES=MIG-4a5b6c7d-0000-4000-8000-000000000000 run 0 explain
    expect stdout "names a MIG instance"
    expect stdout "CUDA's to decide"
    ;;
  memory)
    # NVML's v2 memory call: "used" as nvidia-smi shows it, the driver's reservation apart; v1 where v2 is missing.
    cat >"$work/reserved.txt" <<EOF
gpu uuid=GPU-0a000000-0000-4000-8000-000000000000 pci=00000000:17:00.0 used_mib=0 reserved_mib=615
gpu uuid=GPU-1b000000-0000-4000-8000-000000000000 pci=00000000:18:00.0 used_mib=0 reserved_mib=615 memory_v2=unsupported
EOF
    export GPUSEL_FAKE_NVML_CONFIG="$work/reserved.txt"
    run 0 list
    expect stdout "00000000:17:00.0  0 B / 140.4 GiB         0%    free   615.0 MiB reserved by the driver; none"
    expect stdout "00000000:18:00.0  615.0 MiB / 140.4 GiB   0%    free   none"
    run 0 list --json
    expect_json
    expect stdout '"memory_reserved_bytes": 644874240'
    expect stdout '"memory_reserved_bytes": null'
    ;;
  impossible_readings)
    # An NVML whose readings cannot be true: 3000000000% utilization (once shown as
    # -1294967296% and picked under --max-util 0), more memory free than in total.
    cat >"$work/absurd.txt" <<EOF
gpu uuid=GPU-0a000000-0000-4000-8000-000000000000 utilization=3000000000
gpu uuid=GPU-1b000000-0000-4000-8000-000000000000 memory_mib=1024 used_mib=2048
gpu uuid=GPU-2c000000-0000-4000-8000-000000000000 utilization=5 process_count=4294967295
EOF
    export GPUSEL_FAKE_NVML_CONFIG="$work/absurd.txt"
    run 0 list
    if grep -qE -- "-[0-9]+%" <<<"$out"; then echo "FAILED: a negative utilization is shown"; failures=$((failures + 1)); fi
    expect stdout "readings cannot be true: NVML reports 3000000000% utilization"
    run 1 pick --max-util 0 --allow-other-users
    expect stderr "GPU-0a000000-0000-4000-8000-000000000000), 140.4 GiB free: its readings cannot be true (NVML reports 3000000000% utilization"
    run 1 pick --min-free 1GiB --allow-other-users
    expect stderr "its readings cannot be true (NVML reports"
    expect stderr "4294967295 compute processes, more than the 4096 gpusel reads"
    run 0 list --json
    expect_json
    expect stdout '"impossible_readings": "NVML reports 3000000000% utilization'
    ;;
  compute_modes)
    # The driver's own exclusivity (nvidia-smi -c): list shows a mode that is not Default,
    # and pick never takes a Prohibited GPU, nor an Exclusive_Process one that runs a
    # compute process, whatever --share-own and --allow-other-users say.
    cat >"$work/modes.txt" <<EOF
gpu uuid=GPU-0a000000-0000-4000-8000-000000000000 compute_mode=prohibited
gpu uuid=GPU-1b000000-0000-4000-8000-000000000000 compute_mode=exclusive_process
gpu uuid=GPU-2c000000-0000-4000-8000-000000000000 compute_mode=exclusive_process
process gpu=1 pid=4000000001 used_mib=512
EOF
    export GPUSEL_FAKE_NVML_CONFIG="$work/modes.txt"
    run 0 list
    expect stdout "Prohibited mode; none"
    expect stdout "Exclusive_Process mode; pid 4000000001"
    run 0 list --json
    expect_json
    expect_in_json '[g["compute_mode"] for g in d["gpus"]] == ["Prohibited", "Exclusive_Process", "Exclusive_Process"]'
    run 0 pick -n 1 --share-own --allow-other-users
    expect_line stdout "2"
    run 1 pick -n 2 --share-own --allow-other-users
    expect stderr "its compute mode is Prohibited: CUDA creates no context on it"
    expect stderr "its compute mode is Exclusive_Process and a compute process runs on it (pid 4000000001"
    ;;
  hostile_text)
    # Processes named by their owners (the comm of a program is its file's name, cut
    # to 15 bytes): one that would retitle and clear the terminal, and one whose
    # name the kernel cuts inside a UTF-8 sequence ("abcdefghijklmn\xc3").
    ln -s "$(command -v sleep)" "$work/"$'\e]0;owned\a\e[2J'
    ln -s "$(command -v sleep)" "$work/abcdefghijklmné"
    "$work/"$'\e]0;owned\a\e[2J' 30 &
    hostile=$!
    "$work/abcdefghijklmné" 30 &
    cut=$!
    trap 'kill $hostile $cut 2>/dev/null; rm -rf "$work"' EXIT
    printf 'gpu\nprocess gpu=0 pid=%s used_mib=1\nprocess gpu=0 pid=%s used_mib=1\n' $hostile $cut >"$work/hostile.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/hostile.txt"
    for _ in 1 2 3 4 5 6 7 8 9 10; do  # until both have exec'd
      grep -q abcdefghijklmn /proc/$cut/comm 2>/dev/null && grep -q owned /proc/$hostile/comm 2>/dev/null && break
      sleep 0.1
    done
    run 0 list
    if LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' "$work/out" "$work/err"; then
      echo "FAILED: a control character reached the terminal"
      failures=$((failures + 1))
    fi
    expect stdout '(\x1b]0;owned\x07\x1b[2J)'
    expect stdout '(abcdefghijklmn\xc3)'
    run 0 list --json
    expect_json
    expect_utf8
    expect stdout '"command": "abcdefghijklmn�"'
    expect stdout '"command_hex": "6162636465666768696a6b6c6d6ec3"'
    expect stdout '"command": "\u001b]0;owned\u0007\u001b[2J"'
    CUDA_VISIBLE_DEVICES=$'0,\xff' run 0 explain --json
    expect_json
    expect_utf8
    expect stdout '"cuda_visible_devices_hex": "302cff"'
    expect stdout '"text_hex": "ff"'
    CUDA_VISIBLE_DEVICES=$'0,\e[2J\xff' run 0 explain
    if LC_ALL=C grep -q $'[\x1b\xff]' "$work/out"; then echo "FAILED: explain printed raw bytes"; failures=$((failures + 1)); fi
    expect stdout 'CUDA_VISIBLE_DEVICES=0,\x1b[2J\xff'
    # A UUID from NVML that would clear the terminal: pick's and run's messages escape it, and pick --json
    # still prints one document when the UUID cannot name a lease file.
    printf 'gpu uuid=GPU-\e[2J00\n' >"$work/hostile_uuid.txt"
    for command in "pick" "pick --json" "run -- true" "run --wait=1 -- true"; do
      # shellcheck disable=SC2086
      GPUSEL_FAKE_NVML_CONFIG="$work/hostile_uuid.txt" run "$([ "${command%% *}" = run ] && echo 125 || echo 1)" $command
      if LC_ALL=C grep -q $'\x1b' "$work/out" "$work/err"; then
        echo "FAILED: $command printed a raw escape"
        failures=$((failures + 1))
      fi
      expect stderr 'cannot lease "GPU-\x1b[2J00": not a GPU or MIG UUID'
    done
    GPUSEL_FAKE_NVML_CONFIG="$work/hostile_uuid.txt" run 1 pick --json
    expect_json
    # One GPU that cannot be leased is that GPU's problem alone (Note [Who can break a lease]): rejected, with why.
    expect_in_json 'd["ok"] is False and d["error"] == "nothing_fits" and any("not a GPU or MIG UUID" in r for r in d["assessed"][0]["rejected_because"])'
    # A lease directory that cannot be trusted: one JSON document too.
    mkdir -m 0777 "$work/open_leases" && chmod 0777 "$work/open_leases"
    GPUSEL_LEASE_DIR="$work/open_leases" run 1 pick --json
    expect_json
    expect_in_json 'd["ok"] is False and d["error"] == "leases" and "not sticky" in d["reason"] and d["exit_status"] == 1'
    ;;
  output)
    # A failed write is an error (6): a full disk, a closed stdout.
    for command in "pick --share-own" list help "explain --json"; do
      # shellcheck disable=SC2086
      "$gpusel" $command >/dev/full 2>"$work/err"
      status=$?
      echo "\$ gpusel $command >/dev/full -> exit $status; $(cat "$work/err")"
      [ "$status" = 6 ] || { echo "FAILED: expected exit status 6"; failures=$((failures + 1)); }
      grep -qF "gpusel: cannot write the output: No space left on device" "$work/err" ||
        { echo "FAILED: the write error is not said"; failures=$((failures + 1)); }
    done
    "$gpusel" list >&- 2>"$work/err"
    status=$?
    echo "\$ gpusel list >&- -> exit $status; $(cat "$work/err")"
    [ "$status" = 6 ] || { echo "FAILED: a closed stdout must fail with 6"; failures=$((failures + 1)); }
    # Every --json run prints one JSON document, errors included.
    GPUSEL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 run 3 list --json
    expect_json
    expect stdout '"ok": false'
    expect stdout '"error": "no_driver"'
    expect stdout '"exit_status": 3'
    GPUSEL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 run 3 pick --json -n 2
    expect_json
    expect stdout '"error": "no_driver"'
    printf 'gpu\ngpu uuid_error=999\n' >"$work/failing.txt"
    GPUSEL_FAKE_NVML_CONFIG="$work/failing.txt" run 4 pick --json
    expect_json
    expect stdout '"error": "nvml_failed"'
    expect stdout 'nvmlDeviceGetUUID failed'
    run 2 list --json --frobnicate
    expect_json
    expect stdout '"error": "usage"'
    expect stdout '"exit_status": 2'
    expect stderr 'unknown option "--frobnicate"'
    run 2 pick --json --exclude 9
    expect_json
    expect stdout '"error": "usage"'
    # pick's own document: "error" is a code, "reason" the message, as in every error document
    run 1 pick --json -n 9 --allow-other-users
    expect_json
    expect_in_json 'd["ok"] is False and d["error"] == "nothing_fits" and "9 are needed" in d["reason"]'
    run 0 pick --json --share-own
    expect_in_json 'd["ok"] is True and d["error"] == "" and d["reason"] == ""'
    run 2 --json
    expect_json
    ;;
  mig)
    export GPUSEL_FAKE_NVML_CONFIG="$work/mig.txt"
    # Listed under their GPU, with their UUIDs, ids and memory, in text and JSON.
    run 0 list
    expect stdout "MIG GI 1 CI 0  MIG-4a5b6c7d-0000-4000-8000-000000000000                    29.3 GiB / 70.0 GiB"
    expect stdout "MIG GI 2 CI 1  MIG-6c7d8e9f-0000-4000-8000-000000000002                    1.0 GiB / 35.0 GiB"
    run 0 list --json
    expect_json
    expect_in_json 'd["gpus"][1]["mig_instances"][1] == {"uuid": "MIG-5b6c7d8e-0000-4000-8000-000000000001", "gpu_instance_id": 2, "compute_instance_id": 0, "memory_total_bytes": 35840 << 20, "memory_used_bytes": 0, "memory_free_bytes": 35840 << 20, "processes": [], "lease": d["gpus"][1]["mig_instances"][1]["lease"]}'
    expect_in_json 'd["gpus"][1]["mig_instances"][1]["lease"]["text"] == "free"'
    expect_in_json 'd["gpus"][1]["mig_instances"][0]["processes"][0]["pid"] == 4000000001'
    # Each instance is one GPU for -n, judged by its own memory and processes, printed as its MIG- UUID.
    run 0 pick --min-free 30GiB
    [ "$out" = MIG-5b6c7d8e-0000-4000-8000-000000000001 ] ||
      { echo "FAILED: expected the free MIG instance, got [$out]"; failures=$((failures + 1)); }
    run 1 pick -n 3 --min-free 30GiB
    expect stderr "MIG instance MIG-4a5b6c7d-0000-4000-8000-000000000000 (GI 1, CI 0) of GPU 1"
    expect stderr "another user's compute process runs on it (pid 4000000001"
    run 0 pick -n 2 --exclude 0 --format index
    [ "$out" = MIG-5b6c7d8e-0000-4000-8000-000000000001,MIG-6c7d8e9f-0000-4000-8000-000000000002 ] ||
      { echo "FAILED: expected two MIG instances of GPU 1, got [$out]"; failures=$((failures + 1)); }
    expect stderr "CUDA 11 and 12 show one process a single MIG instance"
    run 0 pick --exclude 0,MIG-5b6c
    [ "$out" = MIG-6c7d8e9f-0000-4000-8000-000000000002 ] ||
      { echo "FAILED: --exclude MIG-5b6c should leave the other instance, got [$out]"; failures=$((failures + 1)); }
    CUDA_VISIBLE_DEVICES=MIG-6c7d8e9f run 0 explain
    expect stdout "names a MIG instance (\"MIG-6c7d8e9f\"), an instance of physical GPU 1 (nvidia-smi 1; GI 2, CI 1)"
    CUDA_VISIBLE_DEVICES=MIG-6c7d8e9f-0000-4000-8000-000000000002 run 0 pick
    [ "$out" = MIG-6c7d8e9f-0000-4000-8000-000000000002 ] ||
      { echo "FAILED: only the instance CUDA_VISIBLE_DEVICES names is visible, got [$out]"; failures=$((failures + 1)); }
    # run: the command's CUDA_VISIBLE_DEVICES is the MIG- UUID, and a lease on one instance
    # leaves the GPU's other instance to a second job.
    "$gpusel" run --exclude 0 -- sh -c 'echo "$CUDA_VISIBLE_DEVICES" >"$1"; sleep 3' sh "$work/first" 2>/dev/null &
    first=$!
    for _ in $(seq 50); do [ -s "$work/first" ] && break; sleep 0.1; done
    run 0 run --exclude 0 -- sh -c 'echo "$CUDA_VISIBLE_DEVICES"'
    [ "$(cat "$work/first")" = MIG-5b6c7d8e-0000-4000-8000-000000000001 ] ||
      { echo "FAILED: the first job should get MIG-5b6c7d8e..., got [$(cat "$work/first")]"; failures=$((failures + 1)); }
    [ "$out" = MIG-6c7d8e9f-0000-4000-8000-000000000002 ] ||
      { echo "FAILED: the second job should get the other instance, got [$out]"; failures=$((failures + 1)); }
    expect stderr "gpusel: running sh with CUDA_VISIBLE_DEVICES=MIG-6c7d8e9f-0000-4000-8000-000000000002"
    run 125 run --exclude 0 --allow-other-users -n 3 -- true
    expect stderr "leased by another job"
    wait "$first"
    unset GPUSEL_FAKE_NVML_CONFIG
    ;;
  topology)
    export GPUSEL_FAKE_NVML_CONFIG="$work/topology.txt"
    # NUMA node and CPUs, as ranges, so host threads can be pinned.
    run 0 list
    expect stdout "NUMA  CPUS         LEASE  PROCESSES"
    expect stdout "0%    1     16-31,48-63  free   none"
    run 0 list --json --links
    expect_json
    expect_in_json 'd["gpus"][0]["numa_node"] == 0 and d["gpus"][0]["cpu_affinity"] == "0-15,32-47"'
    expect_in_json 'd["gpus"][0]["links"] == [{"nvml_index": 1, "link": "nvlink"}, {"nvml_index": 2, "link": "system"}, {"nvml_index": 3, "link": "system"}]'
    # links grow as the square of the GPUs: only when asked for (list --links), never in pick's document
    run 0 list --json
    expect_json
    expect_in_json 'all(g["links"] is None for g in d["gpus"]) and d["gpus"][2]["numa_node"] == 1'
    run 0 list --links
    expect stdout "GPUs 0 and 1 are joined by NVLink"
    expect stdout "GPUs 1 and 3 are across NUMA nodes"
    run 2 pick --links
    expect stderr "--links is an option of list only, not of pick"
    run 0 pick -n 2 --connected --json
    expect_json
    expect_in_json 'all(c["links"] is None for c in d["assessed"]) and d["connection"]["weakest_link"] == "nvlink"'
    # Without --connected, most free memory first: 0 and 2, across NUMA nodes; with it, an NVLink pair.
    run 0 pick -n 2
    [ "$out" = 0,2 ] || { echo "FAILED: expected 0,2 by free memory, got [$out]"; failures=$((failures + 1)); }
    run 0 pick -n 2 --connected
    [ "$out" = 0,1 ] || { echo "FAILED: expected the NVLink pair 0,1, got [$out]"; failures=$((failures + 1)); }
    expect stderr "gpusel: connected: GPUs 0 and 1 are joined by NVLink"
    run 0 pick -n 2 --connected --exclude 1 --json
    expect_json
    expect_in_json 'd["connection"]["weakest_link"] == "nvlink" and d["cuda_visible_devices"] == "2,3"'
    expect stdout "excluding 1; connected GPUs preferred (NVLink, else one PCIe switch, else one host bridge, else one NUMA node)"
    # No connected set fits: the best one that does, with the reason.
    run 0 pick -n 2 --connected --exclude 1,3
    [ "$out" = 0,2 ] || { echo "FAILED: expected the fallback 0,2, got [$out]"; failures=$((failures + 1)); }
    expect stderr "GPUs 0 and 2 are across NUMA nodes (no 2 of the GPUs that fit are connected more closely)"
    # run takes it too.
    run 0 run -n 2 --connected --exclude 0 --format index -- sh -c 'echo "$CUDA_VISIBLE_DEVICES"'
    [ "$out" = 2,3 ] || { echo "FAILED: run --connected should give the NVLink pair 2,3, got [$out]"; failures=$((failures + 1)); }
    expect stderr "gpusel: connected: GPUs 2 and 3 are joined by NVLink"
    unset GPUSEL_FAKE_NVML_CONFIG
    ;;
  scheduler)
    # What CUDA ignores is said right under the headline, on examples/machines/h200x4.machine as in the docs.
    export GPUSEL_FAKE_NVML_CONFIG=$(dirname "$0")/../../examples/machines/h200x4.machine
    CUDA_VISIBLE_DEVICES=1,,2 run 0 explain
    ignored='CUDA ignores ",2" of CUDA_VISIBLE_DEVICES: token 2, "", ends the list: it is not a number.'
    [ "$(sed -n 2p <<<"$out")" = "$ignored" ] || { echo "FAILED: line 2 is not: $ignored"; failures=$((failures + 1)); }
    # Without NVML, a token that ends the list on any machine is judged too.
    GPUSEL_NVML_LIBRARY=none CUDA_VISIBLE_DEVICES=1,,2 run 3 explain
    expect_line stdout 'CUDA ignores at least ",2" of CUDA_VISIBLE_DEVICES: token 2, "", ends the list on any machine: it is not a number.'
    # A task of srun -n2 --gpus-per-task=1 while another job holds GPUs 0 and 1: Slurm's names beside CUDA's.
    slurm=(env SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=1 SLURM_GPUS_ON_NODE=2 SLURM_STEP_GPUS=3 CUDA_VISIBLE_DEVICES=3)
    launcher=("${slurm[@]}")
    run 0 explain
    expect_line stdout "Slurm gave this step (12.0) 2 GPUs on this node: SLURM_GPUS_ON_NODE=2, SLURM_STEP_GPUS=3, in Slurm's names (node-wide; under ConstrainDevices not the driver's, so gpusel maps no GPU by them)."
    expect_line stdout "This task has GPUs of its own, 1 of the step's 2 (CUDA_VISIBLE_DEVICES lists 1): cuda:0 is GPU-c06a5e21-9f3b-a4d8-61e7-0b5d3c2f8e94."
    run 0 explain --json
    expect_json
    expect_in_json 'd["allotment"]["scheduler"] == "Slurm" and d["allotment"]["step"] == "12.0" and d["allotment"]["gpus_on_node"] == 2'
    expect_in_json 'd["allotment"]["slurm_step_gpus"] == "3" and d["allotment"]["slurm_job_gpus"] is None and d["allotment"]["known"]'
    expect_in_json 'd["allotment"]["text"].startswith("Slurm gave this step (12.0) 2 GPUs")'
    run 0 list
    expect_line stdout "Slurm gave this step (12.0) 2 GPUs on this node: SLURM_GPUS_ON_NODE=2, SLURM_STEP_GPUS=3, in Slurm's names (node-wide; under ConstrainDevices not the driver's, so gpusel maps no GPU by them)."
    expect stdout "cuda:0  3 "
    run 0 list --json
    expect_json
    expect_in_json 'd["allotment"]["slurm_step_gpus"] == "3" and d["allotment"]["refusal"] == ""'
    # Slurm gave GPUs without saying which (srun -n2 --gpu-bind=none): explain says so, and exits 0.
    launcher=(env SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=1 SLURM_GPUS_ON_NODE=2)
    run 0 explain
    expect stdout "Slurm gave this step 2 GPUs on this node (SLURM_GPUS_ON_NODE=2) without saying which"
    run 0 list --json
    expect_in_json 'not d["allotment"]["known"] and "--gpu-bind=none" in d["allotment"]["refusal"]'
    # A step given no GPU (srun -n2 without --gpus): explain, list and pick's report say so.
    launcher=(env SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=1)
    run 0 explain
    expect_line stdout "Slurm gave this step (12.0) no GPU; choosing as outside Slurm."
    run 0 list
    expect_line stdout "Slurm gave this step (12.0) no GPU; choosing as outside Slurm."
    run 0 pick
    expect stderr "gpusel: Slurm gave this step (12.0) no GPU; choosing as outside Slurm"
    run 0 pick --json
    expect_in_json 'd["allotment"]["scheduler"] == "Slurm" and d["allotment"]["gpus_on_node"] is None'
    expect stderr "gpusel: Slurm gave this step (12.0) no GPU; choosing as outside Slurm"
    launcher=()
    run 0 pick
    expect_not stderr "Slurm"
    # In a container: what NVIDIA_VISIBLE_DEVICES asked the container runtime for.
    launcher=(env NVIDIA_VISIBLE_DEVICES=GPU-948e02bd,3)
    run 0 explain
    expect stdout "NVIDIA_VISIBLE_DEVICES=GPU-948e02bd,3: in a container the NVIDIA container runtime mounted"
    run 0 list --json
    expect_in_json 'd["allotment"]["nvidia_visible_devices"] == "GPU-948e02bd,3" and d["allotment"]["scheduler"] is None'
    launcher=()
    run 0 explain
    expect_not stdout "Slurm"
    expect_not stdout "NVIDIA_VISIBLE_DEVICES"
    ;;
  *)
    echo "unknown scenario $scenario"
    exit 2
    ;;
esac

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) FAILED"
  exit 1
fi
echo "PASSED"
