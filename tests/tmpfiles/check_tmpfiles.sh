#!/usr/bin/env bash
# ctest -L tmpfiles: a held lease survives the real systemd-tmpfiles cleaning /tmp, where
# leases live with nothing set up, as it cleans /tmp on Fedora, RHEL or Arch (upstream
# tmp.conf: 'q /tmp 1777 root root 10d'), here with an age of 1 s on a stand-in for /tmp of
# this test's own (never the machine's /tmp): lock files are sticky, and systemd-tmpfiles
# never ages a sticky file (Note [Leases against cleaners]); a plain file beside them goes.
#   check_tmpfiles.sh <gpusel program> <fake NVML library>
# A lease directory below the cleaned one that once held a lease lasts, idle; and the /run
# line the docs give makes a directory gpusel finds (below).
# Skips (77) without systemd-tmpfiles, unless GPUSEL_REQUIRE_TMPFILES=1 (.ci/run).
set -uo pipefail
gpusel=$1
export GPUSEL_NVML_LIBRARY=$2
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER NVIDIA_VISIBLE_DEVICES SLURM_JOB_ID SLURM_STEP_ID SLURM_LOCALID \
  SLURM_GPUS_ON_NODE SLURM_STEP_GPUS SLURM_JOB_GPUS
here=$(cd "$(dirname "$0")" && pwd)
tmpfiles=$(command -v systemd-tmpfiles || true)

# In a private mount namespace with a /run of its own (the second part, below): the line
# docs/choosing-gpus.md gives, as written, makes /run/gpusel-leases, and gpusel leases there
# without GPUSEL_LEASE_DIR.
if [ "${3:-}" = --in-private-run ]; then
  mount -t tmpfs -o mode=755 tmpfs /run || exit 1
  unset GPUSEL_LEASE_DIR
  line=$(grep -m1 '^d /run/gpusel-leases ' "$here/../../docs/choosing-gpus.md")
  echo "the tmpfiles.d line of docs/choosing-gpus.md: $line"
  printf '%s\n' "$line" >"$4/gpusel.conf"
  "$tmpfiles" --create "$4/gpusel.conf" || exit 1
  made=$(stat -c '%a %U' /run/gpusel-leases)
  [ "$made" = "1777 root" ] || { echo "FAILED: /run/gpusel-leases is \"$made\", not \"1777 root\""; exit 1; }
  held=$("$gpusel" run -- sh -c 'ls /run/gpusel-leases' 2>/dev/null)
  echo "a lease without GPUSEL_LEASE_DIR holds: $held"
  [ -n "$held" ] || { echo "FAILED: the lease was not taken in /run/gpusel-leases"; exit 1; }
  exit 0
fi
if [ -z "$tmpfiles" ]; then
  echo "systemd-tmpfiles is not installed (Debian package systemd): the cleaning cannot be tried"
  [ "${GPUSEL_REQUIRE_TMPFILES:-0}" = 1 ] && exit 1
  exit 77
fi
"$tmpfiles" --version | head -1

work=$(mktemp -d)
runners=()
trap 'for p in "${runners[@]}"; do kill "$p" 2>/dev/null; done; [ -s "$work/command" ] && kill "$(cat "$work/command")" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -m 1777 "$work/tmp"                          # stands for /tmp
export GPUSEL_LEASE_DIR="$work/tmp"  # as /tmp is, without GPUSEL_LEASE_DIR
printf 'd %s - - - 1s\n' "$work/tmp" >"$work/age.conf"
printf 'gpu\n' >"$work/one.txt"
export GPUSEL_FAKE_NVML_CONFIG="$work/one.txt"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

# clean: systemd-tmpfiles --clean once every file of the lease is older than the age; a plain
# file as old goes (the cleaning ran), or the test fails.
clean() {
  touch "$work/tmp/plain"
  sleep 1.5
  "$tmpfiles" --clean "$work/age.conf" || fail "systemd-tmpfiles --clean failed"
  echo "after systemd-tmpfiles --clean: $(cd "$work/tmp" && find . | sort | tr '\n' ' ')"
  [ ! -e "$work/tmp/plain" ] || fail "the cleaning aged nothing: a plain file older than the age stayed"
}
# second_job_refused: another job asks for the only GPU and must be turned away.
second_job_refused() {
  local status
  "$gpusel" run -- true >"$work/out" 2>"$work/err"
  status=$?
  echo "a second job: exit $status: $(cat "$work/err")"
  [ $status = 125 ] && grep -q "leased by another job" "$work/err" || fail "a second job got the GPU a job holds ($1)"
}
# start_job: gpusel run of a command that lives until killed; its pid in $work/command, run's in $runner.
start_job() {
  rm -f "$work/command"
  "$gpusel" run -- sh -c 'echo $$ >"$1"; while :; do sleep 0.1; done' sh "$work/command" 2>/dev/null &
  runner=$!
  runners+=("$runner")
  for _ in $(seq 50); do [ -s "$work/command" ] && return; sleep 0.1; done
  fail "the job did not start"
}
end_job() {
  kill "$(cat "$work/command")" 2>/dev/null
  wait "$runner" 2>/dev/null
  rm -f "$work/command"
  # the command's last sleep may hold the lease a moment longer
  for _ in $(seq 50); do "$gpusel" pick >/dev/null 2>&1 && return; sleep 0.1; done
  fail "the GPU stayed leased after the job ended"
}

echo "== a job holds the only GPU while systemd-tmpfiles cleans"
start_job
clean
[ -n "$(ls "$GPUSEL_LEASE_DIR"/gpusel-*.lock 2>/dev/null)" ] || fail "the held lock file was deleted"
second_job_refused "gpusel run alive"
end_job

echo "== kill -9 of gpusel run: the command alone holds the lease while systemd-tmpfiles cleans"
start_job
kill -KILL "$runner"
wait "$runner" 2>/dev/null
clean
[ -n "$(ls "$GPUSEL_LEASE_DIR"/gpusel-*.lock 2>/dev/null)" ] || fail "the held lock file was deleted"
second_job_refused "gpusel run killed"
end_job

echo "== once the job ended, cleaning keeps the lock file (sticky), and leasing works after it"
clean
[ -n "$(ls "$GPUSEL_LEASE_DIR"/gpusel-*.lock 2>/dev/null)" ] || fail "the idle lock file was aged"
"$gpusel" run -- true || fail "no lease after the cleaning"

echo "== a lease directory below the cleaned one (GPUSEL_LEASE_DIR) that held a lease lasts, idle"
GPUSEL_LEASE_DIR="$work/tmp/gpusel-leases" "$gpusel" run -- true 2>/dev/null || fail "no lease"
clean
[ -n "$(ls "$work/tmp/gpusel-leases"/gpusel-*.lock 2>/dev/null)" ] || fail "the cleaning aged the lease directory away"

echo "== the tmpfiles.d line of docs/choosing-gpus.md makes /run/gpusel-leases, where gpusel finds it"
if [ "$(id -u)" = 0 ] && unshare -m --propagation private true 2>/dev/null; then
  unshare -m --propagation private "$0" "$gpusel" "$GPUSEL_NVML_LIBRARY" --in-private-run "$work" ||
    fail "in a private /run"
else
  echo "skipped: a private /run needs root and unshare -m"
  [ "${GPUSEL_REQUIRE_TMPFILES:-0}" = 1 ] && fail "GPUSEL_REQUIRE_TMPFILES=1 and the /run part was skipped"
fi

[ $failures = 0 ] && echo "all passed" || echo "$failures failed"
[ $failures = 0 ]
