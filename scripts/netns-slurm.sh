#!/usr/bin/env bash
# Slurm on the namespace cluster of scripts/netns-cluster.sh: slurmctld on host 1, one slurmd
# per host (each a node named after its namespace, e.g. rn50-h2, at 198.18.0.K), and a private
# munged for their authentication, so that `srun -N 2 --ntasks-per-node 1 --mpi=pmix rn50 ...`
# runs on the hosts as on a real cluster (Debian's slurm-wlm 22.05, munge; OpenMPI's PMIx).
#
#   scripts/netns-slurm.sh up N DIR     after `netns-cluster.sh up N DIR`: writes DIR/slurm/
#                                       (slurm.conf, one per node, cgroup.conf, munge key and
#                                       socket, logs, state) and starts the daemons
#   scripts/netns-slurm.sh down DIR     stops them
# Then: DIR/on 1 env SLURM_CONF=DIR/slurm/slurm.conf srun -N 2 --ntasks-per-node 1 --mpi=pmix ...
# (OpenMPI between hosts over TCP: OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=198.18.0.0/15).
#
# What one machine needs beyond a real cluster, and why:
#  * the hosts share one /tmp, where Slurm's PMIx plugin makes a per-step directory under TmpFS:
#    each node gets its own slurm.conf differing only in TmpFS (DebugFlags=NO_CONF_HASH, or
#    slurmctld warns that the nodes' files differ);
#  * this machine mounts cgroup v1 and v2 side by side, which slurmd's autodetection refuses
#    ("Hybrid mode is not supported"): cgroup.conf names cgroup/v1; tasks are tracked by
#    /proc (proctrack/linuxproc) and not confined (task/none);
#  * munged runs as root with its own key and socket (AuthInfo=socket=...), not the system's.
# Needs root, slurm-wlm and munge (apt-get install slurm-wlm munge).
set -euo pipefail
die() { echo "netns-slurm: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root"
TAG=${RN50_NETNS_TAG:-}
NS=rn50-${TAG}h

up() {
  local n=$1 dir=$2 i s b
  for b in slurmctld slurmd munged; do
    command -v "$b" > /dev/null ||
      die "slurmctld, slurmd and munged are needed: apt-get install slurm-wlm munge"
  done
  dir=$(cd "$dir" && pwd)
  [ -x "$dir/on" ] || die "no cluster in $dir (scripts/netns-cluster.sh up N $dir first)"
  s=$dir/slurm
  down "$dir" 2> /dev/null || true
  mkdir -p "$s/state" "$s/log" "$s/munge"
  head -c 1024 /dev/urandom > "$s/munge/munge.key"
  chmod 700 "$s/munge"
  chmod 600 "$s/munge/munge.key"
  munged --force --socket="$s/munge/munge.socket" --key-file="$s/munge/munge.key" \
    --pid-file="$s/munge/munged.pid" --log-file="$s/log/munged.log" \
    --seed-file="$s/munge/munged.seed"
  local cpus
  cpus=$(nproc)
  {
    echo "ClusterName=rn50ns${TAG}"
    echo "SlurmctldHost=${NS}1(198.18.0.1)"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$s/munge/munge.socket"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$s/state"
    echo "SlurmdSpoolDir=$s/spool-%n"
    echo "SlurmctldPidFile=$s/slurmctld.pid"
    echo "SlurmdPidFile=$s/slurmd-%n.pid"
    echo "SlurmctldLogFile=$s/log/slurmctld.log"
    echo "SlurmdLogFile=$s/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SchedulerType=sched/builtin"
    echo "SelectType=select/linear"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "SlurmdTimeout=30"
    echo "KillWait=5"
    echo "DebugFlags=NO_CONF_HASH"
    for ((i = 1; i <= n; i++)); do
      echo "NodeName=$NS$i NodeAddr=198.18.0.$i CPUs=$cpus CoresPerSocket=$cpus State=UNKNOWN"
    done
    echo "PartitionName=main Nodes=${NS}[1-$n] Default=YES MaxTime=INFINITE State=UP"
  } > "$s/slurm.conf"
  printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nCgroupAutomount=no\n' \
    > "$s/cgroup.conf"
  "$dir/on" 1 slurmctld -f "$s/slurm.conf"
  for ((i = 1; i <= n; i++)); do
    mkdir -p "$s/tmp-$i" "$s/spool-$NS$i"
    sed "s|^ClusterName=.*|&\nTmpFS=$s/tmp-$i|" "$s/slurm.conf" > "$s/slurm-$i.conf"
    "$dir/on" "$i" slurmd -f "$s/slurm-$i.conf" -N "$NS$i"
  done
  # Wait until every node is idle (slurmd registered).
  for ((t = 0; t < 60; t++)); do
    local idle
    idle=$(SLURM_CONF=$s/slurm.conf "$dir/on" 1 sinfo -h -t idle -o '%D' 2> /dev/null | head -1)
    if [ "${idle:-0}" = "$n" ]; then
      echo "netns-slurm: $n nodes idle (SLURM_CONF=$s/slurm.conf)"
      return 0
    fi
    sleep 0.5
  done
  SLURM_CONF=$s/slurm.conf "$dir/on" 1 sinfo >&2 || true
  die "the nodes did not come up: see $s/log/"
}

down() {
  local dir s p
  dir=$(cd "$1" && pwd)
  s=$dir/slurm
  for p in "$s"/slurmd-*.pid "$s/slurmctld.pid" "$s/munge/munged.pid"; do
    [ -f "$p" ] && kill "$(cat "$p")" 2> /dev/null || true
  done
  sleep 0.5
  for p in "$s"/slurmd-*.pid "$s/slurmctld.pid" "$s/munge/munged.pid"; do
    [ -f "$p" ] && kill -9 "$(cat "$p")" 2> /dev/null || true
    rm -f "$p"
  done
}

case ${1:-} in
  up) [ $# = 3 ] || die "usage: $0 up N DIR"; up "$2" "$3" ;;
  down) [ $# = 2 ] || die "usage: $0 down DIR"; down "$2" ;;
  *) die "usage: $0 up N DIR | down DIR" ;;
esac
