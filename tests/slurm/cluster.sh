#!/usr/bin/env bash
# A single-node Slurm cluster on loopback, for the tests judged by a real Slurm.
#   cluster.sh start DIR   starts munged, slurmctld and slurmd; DIR/env is then a file to source
#   cluster.sh stop DIR    stops every daemon that `start DIR` started, by its pid
# GPUSEL_CLUSTER_GRES sets the node's Gres= (default gpu:4), and GPUSEL_CLUSTER_GRES_LINES
# gres.conf's gpu lines, DEV standing for the devices' folder (default: Name=gpu File=DEV/nvidia[0-3]).
# GPUSEL_CLUSTER_NODES="n1 n2" makes several nodes on this host, a `slurmd -N` each with a port of
# its own (spool, pid and log per node: %n), and GPUSEL_CLUSTER_TASK_PROLOG names a TaskProlog.
# Everything lives in DIR: slurm.conf (the clients find it through SLURM_CONF),
# gres.conf, munge's key, socket, pid and log, Slurm's state, spool and logs. No
# system configuration is read. The node declares 4 GPUs as GRES, backed by
# character devices made in DIR (major 195 as NVIDIA's, minor 0..3): Slurm
# only needs them to exist, and no driver is behind them.
#
# What lets it start in a sandbox without cgroups or systemd:
#   ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
#   JobAcctGatherType=jobacct_gather/none  (no cgroup plugin anywhere)
#   SlurmdParameters=config_overrides      (8 CPUs declared on a 2-core machine)
#   AuthInfo=socket=DIR/munge.socket       (munged of its own, with its own key)
#   slurmctld -i                           (a fresh state directory is not an error)
#   SchedulerParameters=sched_interval=1   (a batch job waits 1 s, not 10, for a pass)
# and ports of its own choosing (free ones, so that two runs do not clash).
# Exits 77 (ctest's skip) when Slurm or munge is not installed, or not run as root.
set -euo pipefail
action=${1:-}
dir=${2:-}
[ -n "$action" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

stop() {
  local name pid
  for name in slurmd $(cd "$dir" && ls slurmd-*.pid 2>/dev/null | sed 's/\.pid$//' || true) slurmctld munged; do  # the nodes first, munge (which they need to talk) last
    [ -f "$dir/$name.pid" ] || continue
    pid=$(cat "$dir/$name.pid")
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$dir/$name.pid"
  done
}

if [ "$action" = stop ]; then
  stop
  exit 0
fi
[ "$action" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

for program in munged slurmctld slurmd srun sbatch scontrol sinfo; do
  if ! command -v "$program" >/dev/null && [ ! -x "/usr/sbin/$program" ]; then
    echo "SKIPPED: $program is not installed (Debian: apt-get install slurm-wlm slurmctld slurmd slurm-client munge)"
    exit 77
  fi
done
if [ "$(id -u)" != 0 ]; then  # mknod makes the GRES devices, and slurmd starts tasks as their user
  echo "SKIPPED: starting a Slurm cluster needs root (CI runs as root)"
  exit 77
fi
PATH=$PATH:/usr/sbin
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
chmod 700 "$dir"
mkdir -p "$dir/state" "$dir/spool" "$dir/dev"
for minor in 0 1 2 3; do
  [ -c "$dir/dev/nvidia$minor" ] || mknod "$dir/dev/nvidia$minor" c 195 "$minor"
done

host=$(hostname -s)
read -ra nodes <<<"${GPUSEL_CLUSTER_NODES:-$host}"
# Free ports, from the kernel (port 0), for slurmctld and each slurmd.
read -r controller_port node_port node_ports < <(python3 -c '
import socket, sys
sockets = [socket.socket() for _ in range(int(sys.argv[1]) + 1)]
for s in sockets: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in sockets))' "${#nodes[@]}")
read -ra ports <<<"$node_port ${node_ports:-}"
per_node=""  # several nodes: spool, pid and log a node (%n: slurmd's node name)
[ -n "${GPUSEL_CLUSTER_NODES:-}" ] && per_node=-%n
user=$(id -un)

cat >"$dir/slurm.conf" <<CONF
ClusterName=gpusel
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$controller_port
SlurmdPort=$node_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool${per_node/-//}
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd$per_node.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd$per_node.log${GPUSEL_CLUSTER_TASK_PROLOG:+
TaskProlog=$GPUSEL_CLUSTER_TASK_PROLOG}
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=300
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
for i in "${!nodes[@]}"; do
  if [ -n "${GPUSEL_CLUSTER_NODES:-}" ]; then
    echo "NodeName=${nodes[$i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[$i]} CPUs=8 Gres=${GPUSEL_CLUSTER_GRES:-gpu:4} State=UNKNOWN"
    mkdir -p "$dir/spool/${nodes[$i]}"
  else
    echo "NodeName=$host NodeAddr=127.0.0.1 CPUs=8 Gres=${GPUSEL_CLUSTER_GRES:-gpu:4} State=UNKNOWN"
  fi
done >>"$dir/slurm.conf"
gres_lines=${GPUSEL_CLUSTER_GRES_LINES:-Name=gpu File=DEV/nvidia[0-3]}
printf 'AutoDetect=off\n%s\n' "${gres_lines//DEV/$dir/dev}" >"$dir/gres.conf"
: >"$dir/plugstack.conf"
cat >"$dir/env" <<ENV
export SLURM_CONF=$dir/slurm.conf
export PATH=\$PATH:/usr/sbin
ENV
export SLURM_CONF=$dir/slurm.conf

fail() {
  echo "cluster.sh: $*" >&2
  for log in munged.log slurmctld.log $(cd "$dir" && ls slurmd*.log 2>/dev/null || true); do
    [ -f "$dir/$log" ] && { echo "--- $dir/$log (last lines)" >&2; tail -15 "$dir/$log" >&2; }
  done
  stop
  exit 1
}
[ -f "$dir/munge.key" ] || { head -c 1024 /dev/urandom >"$dir/munge.key"; chmod 400 "$dir/munge.key"; }
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" || fail "munged did not start"
slurmctld -i || fail "slurmctld did not start"
if [ -n "${GPUSEL_CLUSTER_NODES:-}" ]; then
  for node in "${nodes[@]}"; do slurmd -N "$node" || fail "slurmd -N $node did not start"; done
else
  slurmd || fail "slurmd did not start"
fi
for _ in $(seq 200); do  # about 1 s to an idle node
  state=$(sinfo -h -o %T 2>/dev/null | sort -u | tr '\n' ' ' | sed 's/ $//' || true)
  [ "$state" = idle ] && { echo "cluster.sh: Slurm $(sinfo -V | cut -d' ' -f2), node $host idle with ${GPUSEL_CLUSTER_GRES:-gpu:4} (${nodes[*]}), ports $controller_port and $node_port, in $dir"; exit 0; }
  sleep 0.05
done
fail "the node is not idle after 10 s (state: ${state:-none})"
