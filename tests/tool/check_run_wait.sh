#!/usr/bin/env bash
# ctest tool_<scenario> of `gpusel run --wait`: waiting in line for GPUs, and failing at once where no wait can help.
# End to end on machines described to the fake NVML; helpers.sh holds what the scripts share.
#   check_run_wait.sh <gpusel program> <fake NVML library> <scenario>
# Scenarios: run_wait, run_wait_unfixable, run_wait_list.
. "$(dirname "$0")/helpers.sh"

case $scenario in
  run_wait)
    # 6 jobs at once on 4 idle GPUs, waiting: 4 get 4 different GPUs, the other 2 theirs once the first
    # ones end.
    six_jobs_on_four_gpus --wait=20s
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
    : >"$GPUSEL_LEASE_DIR/gpusel-wait-$(id -u)-00000000000000aa.ticket"
    run 0 run -n 1 --wait=10s -- true
    expect stderr "gpusel: leased GPU"
    [ ! -e "$GPUSEL_LEASE_DIR/gpusel-wait-$(id -u)-00000000000000aa.ticket" ] ||
      { echo "FAILED: a dead ticket stays in the lease directory"; failures=$((failures + 1)); }
    flock "$GPUSEL_LEASE_DIR/gpusel-wait-$(id -u)-00000000000000bb.ticket" sleep 3 &
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
    # with the reason; a wait that only it could serve fails at once (Note [A GPU no wait can free]).
    own_lock="$GPUSEL_LEASE_DIR/gpusel-GPU-fa4e0000-0000-0000-0000-000000000000.$(id -u).lock"
    mkdir -p "$own_lock"
    run 0 run -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
    [ "$out" = GPU-fa4e0000-0000-0000-0000-000000000001 ] ||
      { echo "FAILED: a GPU whose lease file is unusable must be passed over for the next"; failures=$((failures + 1)); }
    run 125 run --wait=1s -n 2 -- true
    expect stderr "$own_lock is not a regular file"
    expect stderr "no wait can meet this request"
    expect stderr "gpusel: not waiting: no wait can fix this"
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
  run_wait_list)
    # `gpusel list` shows the line: a job holds both GPUs, a --wait job for 2 waits behind it; list and list --json
    # name the waiter (pid, user, how many GPUs, since when), and not once it has gone (kill -9: its ticket stays).
    printf 'gpu\ngpu\n' >"$work/idle2.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle2.txt"
    run 0 list
    expect_not stdout "waiting:"
    "$gpusel" run -n 2 -- sh -c 'echo $$ >"$1"; exec sleep 30' sh "$work/holder" >/dev/null 2>&1 &
    holder=$!
    until_file "$work/holder"
    began=$(date +%s)
    "$gpusel" run -n 2 --wait=60s -- true 2>"$work/waiter_err" &
    waiter=$!
    for _ in $(seq 50); do [ -s "$work/waiter_err" ] && break; sleep 0.1; done
    run 0 list
    expect stdout "waiting: pid $waiter of "
    expect stdout "uid $(id -u)) for 2 GPUs since "
    run 0 list --json
    expect_json
    expect_in_json "[(w['pid'], w['uid'], w['gpus'], w['stopped']) for w in d['waiting']] == [($waiter, $(id -u), 2, False)]"
    expect_in_json "$began - 1 <= d['waiting'][0]['since_unix'] <= $(date +%s) and d['waiting_problem'] is None"
    expect_in_json "d['waiting'][0]['text'].startswith('pid $waiter of ')"
    # A ticket's contents are its owner's claim: control bytes in them never reach the terminal, nor the count.
    ticket="$GPUSEL_LEASE_DIR/gpusel-wait-$(id -u)-00000000000000cc.ticket"
    printf 'gpus=\033]0;owned\007\n' >"$ticket"
    (flock 9 && exec sleep 30) 9<"$ticket" &  # its "waiter" holds it locked, as sleep's pid
    forger=$!
    sleep 0.5
    run 0 list
    expect stdout "for GPUs (how many, its ticket does not say) since"
    expect_not stdout $'\033'
    run 0 list --json
    expect_utf8
    expect_in_json "[w['gpus'] for w in d['waiting']].count(None) == 1 and len(d['waiting']) == 2"
    kill -KILL $waiter $forger
    wait $waiter $forger 2>/dev/null
    [ -n "$(ls "$GPUSEL_LEASE_DIR"/gpusel-wait-* 2>/dev/null)" ] ||
      { echo "FAILED: expected the killed waiter's ticket to stay"; failures=$((failures + 1)); }
    run 0 list
    expect_not stdout "waiting:"
    run 0 list --json
    expect_in_json "d['waiting'] == []"
    kill -KILL "$(cat "$work/holder")" 2>/dev/null
    wait $holder 2>/dev/null
    ;;
  *)
    unknown_scenario
    ;;
esac
finish
