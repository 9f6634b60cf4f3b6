#!/usr/bin/env bash
# ctest race_leases: contested leases of three local users never give one GPU two holders
# (Note [Leases], Note [Who can break a lease], Note [Leases against cleaners]).
#   check_race.sh <gpusel program> <fake NVML library> <race_leaser program> [<seconds>]
# In a private mount namespace with a /tmp and a /run of its own (nothing provisioned: the
# lease directory is what gpusel finds without GPUSEL_LEASE_DIR), three users (numeric uids
# through setpriv: no passwd entries needed) each run, for <seconds> (20 by default):
#   - library leases in a loop (race_leaser: try_lease_gpu and lease_gpus);
#   - `gpusel run -n 2` jobs, each starting a `gpusel run -n 1` sub-job, and `gpusel run -n 1` jobs;
#   - `gpusel run --wait=5s -n 1` jobs;
# on a machine of three GPUs, while systemd-tmpfiles --clean ages /tmp with an age of 1 s
# in a loop (Fedora's tmp.conf ages it so, in 10 days) and a fourth user holds /tmp locked
# exclusively (flock), as any user may (Note [Leases against cleaners]). Every holder writes each interval
# it held a GPU (read inside the lease); any two intervals of one GPU from two holders that
# overlap fail the test, as does a user who got no GPU one way or an Error other than a
# GPU leased by another job.
# First, a control: a few seconds with the third user in a lease directory of its own
# (GPUSEL_LEASE_DIR), so that its leases do not exclude the others': the same count must
# find overlaps there, or it could not find them at all.
# It takes about 30 s, so it runs only when GPUSEL_REQUIRE_RACE=1 (.ci/run's race step); it needs
# root (CI runs as root), setpriv, unshare, python3 and systemd-tmpfiles. Skips (77), saying why,
# where one is missing or it was not asked for; with GPUSEL_REQUIRE_RACE=1, a missing one fails.
set -uo pipefail
gpusel=$1
library=$2
leaser=$3
seconds=${4:-20}
here=$(cd "$(dirname "$0")" && pwd)
skip() {
  echo "skipped: $*"
  [ "${GPUSEL_REQUIRE_RACE:-0}" = 1 ] && exit 1
  exit 77
}

# The part inside the private mount namespace: check_race.sh ... --inside <work> <seconds> <control>
if [ "${5:-}" = --inside ]; then
  work=$6 control=$8
  seconds=$7
  mount -t tmpfs -o mode=755 tmpfs /run && mkdir /run/race && mount --bind "$work" /run/race &&
    mount -t tmpfs -o mode=1777 tmpfs /tmp || exit 90
  w=/run/race
  users=(4201 4202 4203)
  gpus=(GPU-7ace0000-0000-4000-8000-000000000000 GPU-7ace0000-0000-4000-8000-000000000001
    GPU-7ace0000-0000-4000-8000-000000000002)
  : >"$w/log" && : >"$w/outcomes" && : >"$w/errors" && chmod 666 "$w/log" "$w/outcomes" "$w/errors"
  printf 'd /tmp 1777 root root 1s\n' >"$w/age.conf"
  as_user() {  # as_user <uid> <lease directory or ""> <command...>
    local uid=$1 directory=$2
    shift 2
    setpriv --reuid "$uid" --regid "$uid" --clear-groups env -i PATH=/usr/bin:/bin HOME=/ \
      GPUSEL_NVML_LIBRARY="$w/bin/libfake-nvidia-ml.so" GPUSEL_FAKE_NVML_CONFIG="$w/three.machine" \
      ${directory:+GPUSEL_LEASE_DIR=$directory} GPUSEL="$w/bin/gpusel" LOG="$w/log" OUTCOMES="$w/outcomes" ERRORS="$w/errors" \
      END=$(($(date +%s) + seconds)) "$@"
  }
  (while [ ! -e "$w/stop" ]; do
    systemd-tmpfiles --clean "$w/age.conf" || echo "systemd-tmpfiles --clean failed" >>"$w/errors"
    sleep 0.2
  done) &
  cleaner=$!
  pids=()
  # A fourth user holds /tmp, where the leases live, locked exclusively throughout: it stops no lease.
  as_user 4204 "" flock -x -o /tmp sleep "$seconds" &
  locker=$!
  for uid in "${users[@]}"; do
    directory=
    [ "$control" = control ] && [ "$uid" = 4203 ] && directory=$w/other-leases
    as_user "$uid" "$directory" sh -c 'echo "lib $3 $("$1" "$2" "$LOG" "lib-$3" "$4" "$5" "$6" 2>>"$ERRORS")" >>"$OUTCOMES"' \
      sh "$w/bin/race_leaser" "$seconds" "$uid" "${gpus[@]}" &
    pids+=($!)
    as_user "$uid" "$directory" "$w/bin/jobs.sh" run "$uid" &
    pids+=($!)
    as_user "$uid" "$directory" "$w/bin/jobs.sh" wait "$uid" &
    pids+=($!)
  done
  wait "${pids[@]}"
  kill "$locker" 2>/dev/null
  touch "$w/stop"
  wait "$cleaner"
  exit 0
fi

[ "${GPUSEL_REQUIRE_RACE:-0}" = 1 ] ||
  { echo "skipped: the race takes about 30 s: set GPUSEL_REQUIRE_RACE=1 to run it (.ci/run does)"; exit 77; }
for tool in setpriv unshare mount systemd-tmpfiles python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
[ "$(id -u)" = 0 ] || skip "stages three users with setpriv and a private /tmp: needs root (CI runs as root)"
unshare -m --propagation private true 2>/dev/null || skip "unshare -m fails here: no private mount namespace"
systemd-tmpfiles --version | head -1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir "$work/bin"
cp "$gpusel" "$work/bin/gpusel" && cp "$library" "$work/bin/libfake-nvidia-ml.so" && cp "$leaser" "$work/bin/race_leaser" &&
  cp "$here/jobs.sh" "$work/bin/jobs.sh" || exit 1
for i in 0 1 2; do echo "gpu uuid=GPU-7ace0000-0000-4000-8000-00000000000$i used_mib=0 utilization=0"; done >"$work/three.machine"
chmod -R a+rX "$work"

# round <seconds> <control|shared>: one race; leaves the counts in $work/report.
round() {
  rm -rf "$work/log" "$work/outcomes" "$work/errors" "$work/stop" "$work/other-leases"
  mkdir -m 1777 "$work/other-leases"  # the control's directory, as root shares one
  unshare -m --propagation private "$0" "$gpusel" "$library" "$leaser" "$1" --inside "$work" "$1" "$2" ||
    { echo "FAILED: the race could not be staged"; return 1; }
  python3 "$here/overlaps.py" "$work/log" "$work/outcomes" "$work/errors" | tee "$work/report"
}

failures=0
echo "== the control: the third user leases in a directory of its own for 3 s"
round 3 control
grep -q '^overlaps: [1-9]' "$work/report" ||
  { echo "FAILED: the control found no overlap, so the count cannot find them"; failures=$((failures + 1)); }

echo "== three users share the machine's lease directory for $seconds s"
round "$seconds" shared
grep -q '^overlaps: 0$' "$work/report" || { echo "FAILED: a GPU had two holders at once"; failures=$((failures + 1)); }
grep -q '^errors: 0$' "$work/report" || { echo "FAILED: errors other than a GPU leased"; failures=$((failures + 1)); }
grep -q '^every user held GPUs every way: yes$' "$work/report" ||
  { echo "FAILED: a user got no GPU one of the ways"; failures=$((failures + 1)); }

[ "$failures" = 0 ] && echo "race_leases: every check passed"
[ "$failures" = 0 ]
