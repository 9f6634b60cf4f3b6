#!/usr/bin/env bash
# ctest tool_*: the gpusel command, end to end, on machines described to the
# fake NVML (tests/fake_nvml), checking its output and exit statuses.
#   check_tool.sh <gpusel program> <fake NVML library> <scenario>
# Scenarios: list, explain, pick, pick_fails, mixed_models, no_driver, nvml_fails, odd_uuids, json, usage,
# impossible_readings, hostile_text, output.
set -uo pipefail
gpusel=$1
export GPUSEL_NVML_LIBRARY=$2
scenario=$3
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
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
# And one whose NVML reports a UUID twice and two GPUs without one: each row
# must still show its own GPU (its own PCI bus id and memory).
cat >"$work/odd.txt" <<EOF
gpu uuid=GPU-5a5a5a5a-0000-4000-8000-000000000000 pci=00000000:17:00.0 used_mib=1000
gpu uuid=GPU-5a5a5a5a-0000-4000-8000-000000000000 pci=00000000:18:00.0 used_mib=2000
gpu uuid= pci=00000000:19:00.0 used_mib=3000
gpu uuid= pci=00000000:1A:00.0 used_mib=4000
EOF
export GPUSEL_FAKE_NVML_CONFIG="$work/four.txt"

# run <expected status> <arguments...>: runs gpusel, keeps stdout and stderr in $out and $err.
run() {
  local expected=$1
  shift
  "$gpusel" "$@" >"$work/out" 2>"$work/err"
  local status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  echo "\$ gpusel $* -> exit $status"
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

case $scenario in
  list)
    run 0 list
    expect stdout "CUDA    PHYS  SMI  NAME         UUID"
    expect stdout "cuda:0  0     0    NVIDIA H200  GPU-0a1b2c3d-0000-4000-8000-000000000000  00000000:17:00.0  117.2 GiB / 140.4 GiB   97%   pid 4000000001, owner unknown"
    expect stdout "cuda:1  1     1    NVIDIA H200  GPU-1b2c3d4e-0000-4000-8000-000000000001  00000000:18:00.0  2.0 GiB / 140.4 GiB     3%    pid $$ of $(id -un)"
    expect stdout "GPU-2c3d4e5f-0000-4000-8000-000000000002  00000000:3A:00.0  0 B / 140.4 GiB         0%    unknown"
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
    ;;
  pick)
    run 0 pick
    [ "$out" = 1 ] || { echo "FAILED: pick printed [$out], expected 1"; failures=$((failures + 1)); }
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
    run 1 pick -n 2 --min-free 8GiB --max-util 10
    [ -z "$out" ] || { echo "FAILED: nothing may be printed on stdout when nothing fits"; failures=$((failures + 1)); }
    expect stderr "gpusel: gpusel::pick: 1 of 4 GPUs fit, 2 are needed (at least 2 GPUs (at most 2); at least 8.0 GiB free; at most 10% utilized; no other user's compute process; most free memory first):"
    expect stderr "GPU 0 (nvidia-smi 0, NVIDIA H200, GPU-0a1b2c3d-0000-4000-8000-000000000000), 23.2 GiB free, 97% utilized: 97% utilized, at most 10% allowed; another user's compute process runs on it (pid 4000000001, owner unknown: not visible from this PID namespace, 116.2 GiB)"
    expect stderr "GPU-1b2c3d4e-0000-4000-8000-000000000001), 138.4 GiB free, 3% utilized: fits"
    expect stderr "its compute processes are unknown (NVML could not list them)"
    expect stderr "MIG mode is enabled"
    run 2 pick --exclude 9
    expect stderr "cannot exclude \"9\": there is no GPU with that number (4 GPUs)"
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
    run 0 pick --all --order index --format index
    [ "$out" = "0,1,2,3" ] || { echo "FAILED: expected every GPU once, 0,1,2,3"; failures=$((failures + 1)); }
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
    run 0 pick --json -n 1
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
    expect stderr "the unit \"G\" is ambiguous"
    run 2 pick --max-util 101
    expect stderr "--max-util expects a percentage from 0 to 100"
    run 2 pick -n 0
    expect stderr "-n expects a whole number of at least 1"
    run 2 pick --format json
    expect stderr "--format expects index or uuid"
    run 2 list --min-free 1GiB
    expect stderr "--min-free is an option of pick only"
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
    run 0 pick --count=1 --format=uuid
    [ "$out" = GPU-1b2c3d4e-0000-4000-8000-000000000001 ] || { echo "FAILED: --count=1 --format=uuid"; failures=$((failures + 1)); }
    run 2 --min-free 1GiB list
    expect stderr "--min-free is an option of pick only, not of list"
    # counts: too large says so, and -n with --at-most is refused (it used to depend on their order)
    run 2 pick -n 99999999999
    expect stderr "-n expects a whole number of at most 2147483647"
    run 2 pick -n 2 --at-most 3
    expect stderr "-n cannot be combined with --at-least, --at-most or --all"
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
    ;;
  output)
    # A failed write is an error (6): a full disk, a closed stdout.
    for command in pick list help "explain --json"; do
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
    run 2 --json
    expect_json
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
