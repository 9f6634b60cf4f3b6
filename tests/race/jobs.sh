#!/bin/bash
# The race test's `gpusel run` jobs (check_race.sh), run as one of its users:
#   jobs.sh run <uid>    until $END: gpusel run -n 2 of a job that starts a gpusel run -n 1
#                        sub-job, then gpusel run -n 1
#   jobs.sh wait <uid>   until $END: gpusel run --wait=5s -n 1
#   jobs.sh hold [sub]   the job itself: the GPUs of CUDA_VISIBLE_DEVICES held from t0 to t1,
#                        written to $LOG under its holder (a sub-job's under its job's)
# Each gpusel run's exit status goes to $OUTCOMES ("run <uid> <status>"), its stderr to
# $ERRORS unless it only says the GPUs are leased (125: leased by another job, or gave up waiting).
set -u
if [ "$1" = hold ]; then
  holder=${RACE_HOLDER:-job-$(id -u)-$$}
  t0=$(date +%s%N)
  if [ "${2:-}" = sub ]; then
    said=$(RACE_HOLDER=$holder "$GPUSEL" run -n 1 -- "$0" hold 2>&1 >/dev/null)
    sub=$?
    [ "$sub" = 0 ] || printf 'a sub-job of %s exited %s:\n%s\n' "$holder" "$sub" "$said" >>"$ERRORS"
  fi
  sleep "0.00$((RANDOM % 9))"
  t1=$(date +%s%N)
  for uuid in ${CUDA_VISIBLE_DEVICES//,/ }; do echo "$uuid $t0 $t1 $holder" >>"$LOG"; done
  exit 0
fi
kind=$1 uid=$2
job() {  # job <gpusel run arguments...> (no file of its own in /tmp: the cleaner ages it)
  local said status
  said=$("$GPUSEL" run "$@" 2>&1 >/dev/null)
  status=$?
  echo "$kind $uid $status" >>"$OUTCOMES"
  [ "$status" = 0 ] && return
  case $said in
    *"leased by another job"* | *"gave up waiting"*) ;;  # the GPUs were another job's
    *) printf '%s %s exited %s:\n%s\n' "$kind" "$uid" "$status" "$said" >>"$ERRORS" ;;
  esac
}
while [ "$(date +%s)" -lt "$END" ]; do
  if [ "$kind" = run ]; then
    job -n 2 -- "$0" hold sub
    job -n 1 -- "$0" hold
  else
    job --wait=5s -n 1 -- "$0" hold
  fi
done
