#!/usr/bin/env bash
# ctest tool_<scenario> of the gpusel program whatever the command: its usage, its output (JSON documents, failed
# writes), the messages people read every day, hostile text, and NVML missing, failing or hanging.
# End to end on machines described to the fake NVML; helpers.sh holds what the scripts share.
#   check_gpusel.sh <gpusel program> <fake NVML library> <scenario>
# Scenarios: usage, output, json, messages, hostile_text, no_driver, nvml_fails, nvml_hangs.
. "$(dirname "$0")/helpers.sh"

case $scenario in
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
    expect_in_json 'd["assessed"][0]["rejected_for"][-1] == "cannot_be_leased"'
    # A lease directory that cannot be trusted: one JSON document too.
    mkdir -m 0777 "$work/open_leases" && chmod 0777 "$work/open_leases"
    GPUSEL_LEASE_DIR="$work/open_leases" run 1 pick --json
    expect_json
    expect_in_json 'd["ok"] is False and d["error"] == "leases" and "not sticky" in d["reason"] and d["exit_status"] == 1'
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
    GPUSEL_FAKE_NVML_CONFIG=/dev/null GPUSEL_NVML_LIBRARY=$fake_nvml run 0 list
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
  *)
    unknown_scenario
    ;;
esac
finish
