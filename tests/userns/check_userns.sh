#!/usr/bin/env bash
# ctest userns_leases: leases between a user's job on the host and the same user's job in a
# rootless container (Note [Lease files], Note [Who can break a lease]), staged as podman or
# apptainer --fakeroot stage one: a user namespace that maps the user's uid to 0 (unshare -U -r),
# a mount namespace with a root filesystem of its own (a chroot), and the user's lease directory
# bind-mounted in. The two sides see the same lock files under different owners and names.
#   check_userns.sh <gpusel program> <fake NVML library>
# Checks, on a machine of one GPU:
#   - a job on the host holds the GPU: the container's run and pick see it held (and list says by whom);
#   - a job in the container holds it: the host's run and pick see it held;
#   - the same with the container in a PID namespace of its own as well, where the host's holder
#     is not visible: held all the same, its pid unknown.
# As root, the user is uid 4101 (setpriv); as anyone else, that user. Exits 77 (ctest's skip) with
# the reason where unshare, chroot or user namespaces are missing; .ci/run fails on that skip.
set -uo pipefail
gpusel=$1
library=$2
skip() {
  echo "skipped: $*"
  exit 77
}
for tool in unshare chroot mount; do command -v "$tool" >/dev/null || skip "$tool is not installed"; done
if [ "$(id -u)" = 0 ]; then
  command -v setpriv >/dev/null || skip "setpriv is not installed (util-linux): it stages an unprivileged user"
  as_user() { setpriv --reuid 4101 --regid 4101 --clear-groups "$@"; }
  user=4101
else
  as_user() { "$@"; }
  user=$(id -u)
fi
why=$(as_user unshare -U -r -m true 2>&1) ||
  skip "user namespaces are not available to uid $user (unshare -U -r -m: $why; see /proc/sys/user/max_user_namespaces)"

work=$(mktemp -d)
root=$work/root
cleanup() {
  [ -s "$root/ready" ] && kill "$(cat "$root/ready")" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
chmod 755 "$work"
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# The container's root filesystem, the user's own (mapped to 0 inside, as an image unpacked by
# rootless podman is): the system's /usr, /dev and /proc bound in, gpusel and the machine copied.
mkdir -p "$root"/{usr,dev,proc,opt,leases,run}
ln -s usr/bin "$root/bin" && ln -s usr/lib "$root/lib" && ln -s usr/lib64 "$root/lib64"
cp "$gpusel" "$root/opt/gpusel" && cp "$library" "$root/opt/libfake-nvidia-ml.so"
printf 'gpu\n' >"$root/opt/one.machine"
mkdir -m 700 "$work/leases"
[ "$(id -u)" = 0 ] && chown -R "$user:$user" "$root" "$work/leases"
# The host's side: the user's jobs, this lease directory.
host() {
  as_user env GPUSEL_LEASE_DIR="$work/leases" GPUSEL_NVML_LIBRARY="$root/opt/libfake-nvidia-ml.so" \
    GPUSEL_FAKE_NVML_CONFIG="$root/opt/one.machine" "$root/opt/gpusel" "$@"
}
# The container's side: `in_container [--pid] gpusel ARGS`: the same user, mapped to 0 in a user
# namespace, in the chroot, the lease directory at /leases; with --pid, in a PID namespace of its
# own too, with a /proc of its own (the host's processes are not visible).
in_container() {
  local pid_namespace=() proc='mount --rbind /proc "$root/proc"'
  if [ "$1" = --pid ]; then
    pid_namespace=(-p -f)
    proc='mount -t proc proc "$root/proc"'
    shift
  fi
  [ "$1" = gpusel ] && shift
  as_user unshare -U -r -m "${pid_namespace[@]}" sh -c '
    root=$1 leases=$2
    shift 2
    mount --rbind /usr "$root/usr" && mount --rbind /dev "$root/dev" && '"$proc"' &&
      mount --bind "$leases" "$root/leases" || exit 90
    exec chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin GPUSEL_LEASE_DIR=/leases \
      GPUSEL_NVML_LIBRARY=/opt/libfake-nvidia-ml.so GPUSEL_FAKE_NVML_CONFIG=/opt/one.machine /opt/gpusel "$@"' \
    sh "$root" "$work/leases" "$@"
}
# check <expected status> <side...> <arguments>: runs it, keeps $out and $err, says what it ran.
check() {
  local expected=$1
  shift
  "$@" >"$work/out" 2>"$work/err"
  local status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  echo "\$ $* -> exit $status"
  [ -n "$out" ] && echo "$out"
  [ -n "$err" ] && echo "[stderr] $err"
  [ "$status" = "$expected" ] || fail "expected exit status $expected"
}
expect() {  # expect <stdout|stderr> <text>
  local where=$err
  [ "$1" = stdout ] && where=$out
  grep -qF -- "$2" <<<"$where" || fail "expected on $1: $2"
}
# hold <ready file, as the side sees it> <side...>: a job of that side holds the GPU (gpusel run of a
# sleeping command) until release.
hold() {
  local ready=$1
  shift
  "$@" run -- sh -c 'echo $$ >"$1" && exec sleep 60' sh "$ready" >/dev/null 2>"$work/holder.err" &
  for _ in $(seq 100); do [ -s "$root/ready" ] && break; sleep 0.05; done
  [ -s "$root/ready" ] || { fail "the holder did not start"; cat "$work/holder.err"; }
}
release() {  # ends the holder's command (its pid, as the holder's side and this one see it), then run ends
  [ -s "$root/ready" ] && kill "$(cat "$root/ready")"
  wait 2>/dev/null
  holders=()
  rm -f "$root/ready"
}

check 0 in_container gpusel pick
[ "$out" = 0 ] || fail "the container sees the GPU free before any lease"

echo "--- a job on the host holds the GPU"
hold "$root/ready" host
check 125 in_container gpusel run -- true
expect stderr " gpusel since "
check 0 in_container gpusel list  # the same user, uid 0 in here (the chroot has no passwd), and gpusel run
expect stdout "uid 0: pid "
expect stdout " gpusel since "
check 1 in_container gpusel pick
check 1 host pick
release

echo "--- a job in the container holds the GPU"
hold /ready in_container
check 125 host run -- true
expect stderr "leased by another job (pid "
check 1 host pick
check 1 in_container gpusel pick
release

echo "--- a job on the host holds it; the container has a PID namespace of its own"
hold "$root/ready" host
check 125 in_container --pid gpusel run -- true
expect stderr "leased by another job (its holder's pid is not visible from this PID namespace, lock /leases/"
check 0 in_container --pid gpusel list
expect stdout "its holder's pid is not visible from this PID namespace"
grep -q "uid 0: its holder" <<<"$out" && fail "named the lock file's owner as the holder, whom it cannot see"
release

echo "--- after every job ended, either side gets the GPU"
check 0 in_container gpusel run -- true
check 0 host run -- true

[ "$failures" = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "userns_leases: every check passed"
