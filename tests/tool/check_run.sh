#!/usr/bin/env bash
# ctest tool_<scenario> of `gpusel run`: the command on leased GPUs, its status and signals, the lease it holds, and
# programs inside it that pick through the library.
# End to end on machines described to the fake NVML; helpers.sh holds what the scripts share.
#   check_run.sh <gpusel program> <fake NVML library> <scenario> [<job picks program>]
# Scenarios: run, run_leases, run_job, run_signals, run_compose, run_members.
# <job picks program>, tests/tool/job_picks.cpp, picks through the library (run_compose).
. "$(dirname "$0")/helpers.sh"

case $scenario in
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
    # One look at the machine an attempt (Note [One look per attempt]): leased as judged, not judged again.
    for how in --no-lease --wait=5s --connected ""; do
      GPUSEL_FAKE_NVML_LOG="$work/looks" run 0 run -n 2 $how -- true
      expect_looks 1 "gpusel run -n 2 $how"
    done
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
  run_leases)
    # 6 jobs at once on 4 idle GPUs: 4 get 4 different GPUs; the other 2 fail with 125.
    six_jobs_on_four_gpus
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
    expect stderr ", lock $GPUSEL_LEASE_DIR/gpusel-GPU-fa4e0000-0000-0000-0000-000000000000.$(id -u).lock)"
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
    rm -f "$GPUSEL_LEASE_DIR"/gpusel-GPU-fa4e0000-0000-0000-0000-000000000003.*lock
    mkdir "$GPUSEL_LEASE_DIR/GPU-fa4e0000-0000-0000-0000-000000000003.lock" \
      "$GPUSEL_LEASE_DIR/gpusel-GPU-fa4e0000-0000-0000-0000-000000000003.$(id -u).lock"
    run 0 pick -n 3 --order index
    [ "$out" = 0,1,2 ] || { echo "FAILED: one unusable lock file must not stop the other GPUs' picks"; failures=$((failures + 1)); }
    run 1 pick -n 4
    expect stderr "GPU-fa4e0000-0000-0000-0000-000000000003), 140.4 GiB free, 0% utilized: cannot be leased: its lease file $GPUSEL_LEASE_DIR/gpusel-GPU-fa4e0000-0000-0000-0000-000000000003.$(id -u).lock is not a regular file (it belongs to "
    run 0 pick --json --order index
    expect_in_json 'any("not a regular file" in r for r in d["assessed"][3]["rejected_because"])'
    expect_in_json 'd["assessed"][3]["rejected_for"] == ["cannot_be_leased"] and d["assessed"][0]["rejected_for"] == []'
    run 125 run --exclude 0,1,2 -- true
    expect stderr "cannot be leased: its lease file"
    rmdir "$GPUSEL_LEASE_DIR"/GPU-fa4e0000-0000-0000-0000-000000000003.*lock
    # Another local user made the lease directory: every other user's run is refused, naming the owner and
    # the fix (Note [Who can break a lease]); staged with setpriv, as root only.
    if can_stage_users; then
      chmod 755 "$work"
      mkdir -m 1777 "$work/shared"
      shared=(env GPUSEL_LEASE_DIR="$work/shared/leases" "$gpusel")
      as_uid 4101 "${shared[@]}" run -- true 2>/dev/null || { echo "FAILED: uid 4101 could not lease in a directory of its own"; failures=$((failures + 1)); }
      as_uid 4102 "${shared[@]}" run -- true >"$work/out" 2>"$work/err"
      status=$?
      err=$(cat "$work/err")
      echo "\$ (as uid 4102) gpusel run -- true -> exit $status"
      [ "$status" = 125 ] || { echo "FAILED: expected 125 for a lease directory of another user"; failures=$((failures + 1)); }
      expect stderr "$work/shared/leases belongs to uid 4101 and is private to that user"
      expect stderr "a tmpfiles.d line 'd $work/shared/leases 1777 root root -'"
    fi
    # Only taking a lease makes the lease directory: pick, list, explain and run --no-lease never do (the
    # first to make a shared GPUSEL_LEASE_DIR would own it, and other users' leases would fail).
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
    expect stderr "$g0), 140.4 GiB free, 0% utilized: the job's lease (GPUSEL_JOB_LEASE), taken for this sub-job"
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
    lock="$GPUSEL_LEASE_DIR/gpusel-$g0.$(id -u).lock"  # the lease file, not a member file
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
  run_members)
    # A job's processes get GPUs of their own among the job's (Note [A job's members]): two sub-jobs get different
    # GPUs, a nested one in a sub-job gets the sub-job's, an ask beyond them fails, one that ends frees its GPU, and
    # membership survives a Python worker started with close_fds=True and a setsid, nohup, double-forked daemon; a
    # process outside the job that copies its variable counts for nothing.
    printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/idle4.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle4.txt" W="$work" G="$gpusel" J="$job_picks"
    cat >"$work/job.sh" <<'EOF'
until_file() { for _ in $(seq 200); do [ -s "$1" ] && return; sleep 0.05; done; }
worker() { python3 -c 'import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:], close_fds=True).returncode)' "$@"; }
"$G" run -n 1 --format uuid -- sh -c '"$G" run -n 1 --format uuid -- sh -c "echo \$CUDA_VISIBLE_DEVICES >$W/a2" &&
  echo $CUDA_VISIBLE_DEVICES >"$W/a"; until [ -e "$W/go" ]; do sleep 0.05; done' 2>"$W/a.err" &
until_file "$W/a"
"$G" run -n 1 --format uuid -- sh -c 'echo $CUDA_VISIBLE_DEVICES >"$W/b"; until [ -e "$W/go" ]; do sleep 0.05; done' \
  2>"$W/b.err" &
until_file "$W/b"
"$G" list --json >"$W/list_taken.json"
"$G" run -n 1 -- true 2>"$W/third.err"; echo $? >"$W/third"
worker "$J" use 1 >"$W/py_full" 2>&1; echo $? >>"$W/py_full"
echo "$GPUSEL_JOB_LEASE" >"$W/variable"
until_file "$W/outside"
touch "$W/go"; wait
"$G" list --json >"$W/list_free.json"
worker "$J" use 1 >"$W/py" 2>&1
(setsid nohup sh -c '"$J" use 1 >"$W/daemon" 2>&1 &' >/dev/null 2>&1 &)
until_file "$W/daemon"
EOF
    "$gpusel" run -n 2 --format uuid -- sh "$work/job.sh" 2>"$work/job.err" &
    job=$!
    until_file "$work/variable"
    GPUSEL_JOB_LEASE=$(cat "$work/variable") "$job_picks" use 1 >"$work/outside" 2>&1
    wait $job
    a=$(cat "$work/a") b=$(cat "$work/b") job_gpus=$(sed -n 's/.*CUDA_VISIBLE_DEVICES=\([^ ]*\) .*/\1/p' "$work/job.err")
    echo "job $job_gpus; sub-jobs $a (nested $(cat "$work/a2")) and $b; third: exit $(cat "$work/third")"
    echo "python worker while both taken: $(cat "$work/py_full")"
    echo "python worker after: $(cat "$work/py"); daemon: $(cat "$work/daemon"); outside: $(cat "$work/outside")"
    [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] && [[ ",$job_gpus," == *",$a,"* && ",$job_gpus," == *",$b,"* ]] ||
      { echo "FAILED: two sub-jobs must get different GPUs of the job's"; failures=$((failures + 1)); }
    [ "$(cat "$work/a2")" = "$a" ] || { echo "FAILED: a sub-job's sub-job must get its GPU"; failures=$((failures + 1)); }
    [ "$(cat "$work/third")" = 125 ] && grep -qF "taken by another process of this job" "$work/third.err" ||
      { echo "FAILED: an ask beyond the job's GPUs must fail: $(cat "$work/third.err")"; failures=$((failures + 1)); }
    [ "$(tail -n 1 "$work/py_full")" = 1 ] || { echo "FAILED: a worker got a GPU no member left"; failures=$((failures + 1)); }
    grep -qxF "$a job" "$work/py" ||
      { echo "FAILED: a close_fds worker must get the freed GPU as the job's"; failures=$((failures + 1)); }
    grep -qE "^GPU-.* job$" "$work/daemon" ||
      { echo "FAILED: a double-forked daemon must get a GPU of the job's"; failures=$((failures + 1)); }
    grep -qE "^GPU-.* own$" "$work/outside" && ! grep -qF "$a" "$work/outside" && ! grep -qF "$b" "$work/outside" ||
      { echo "FAILED: a copied GPUSEL_JOB_LEASE must count for nothing"; failures=$((failures + 1)); }
    # list inside the job says which of the job's GPUs a member took.
    python3 -c '
import json, sys
taken, free = (json.load(open(name))["gpus"] for name in sys.argv[1:])
print("member_took while both held:", [g["lease"]["member_took"] for g in taken], "after:", [g["lease"]["member_took"] for g in free])
sys.exit(0 if [g["lease"]["member_took"] for g in taken] == [True, True, False, False] and
         all(isinstance(g["lease"]["member_pid"], int) for g in taken[:2]) and
         [g["lease"]["member_took"] for g in free] == [False] * 4 and
         [g["lease"]["this_job"] for g in free] == [True, True, False, False] else 1)' "$work/list_taken.json" "$work/list_free.json" ||
      { echo "FAILED: list inside the job must say which GPUs a member took"; failures=$((failures + 1)); }
    # A process that took a GPU and starts a worker: the worker asks at the job's level, as the job's descriptor
    # says, with it (exec) or without it (close_fds): the GPU taken is not the worker's to share.
    for how in exec close_fds; do
      start=""
      [ $how = close_fds ] && start="python3 -c 'import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:], close_fds=True).returncode)'"
      run 1 run -n 1 --format uuid -- "$job_picks" hold 1 "$start" "$job_picks" use 1
      expect stderr "taken by another process of this job"
    done
    # gpusel run as a container's first process (pid 1 of a PID namespace): a close_fds worker is the job's still.
    if unshare -pf --mount-proc true 2>/dev/null; then
      launcher=(unshare -pf --mount-proc)
      run 0 run -n 1 -- python3 -c 'import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:], close_fds=True).returncode)' \
        "$job_picks" use 1
      expect stdout " job"
      launcher=()
    else
      echo "(no PID namespace here: gpusel run as pid 1 not tried)"
    fi
    # With --wait, an ask beyond the job's untaken GPUs waits for a member to end, and gets its GPU.
    run 0 run -n 1 -- sh -c '"$G" run -n 1 -- sh -c "touch $W/held; sleep 1" 2>/dev/null &
      until [ -e "$W/held" ]; do sleep 0.05; done; "$G" run --wait -n 1 -- true'
    expect stderr "gpusel: waiting for"
    expect stderr "taken for this sub-job"
    ;;
  *)
    unknown_scenario
    ;;
esac
finish
