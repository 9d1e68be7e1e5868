#!/usr/bin/env bash
# A cluster of N hosts on one machine, for multi-node runs without a cluster: each host is a
# network namespace (and, for the processes started on it, a UTS namespace with its own host
# name), joined to the others by a veth pair on a bridge. Addresses are in 198.18.0.0/15, the
# range RFC 2544 reserves for network benchmarks: host i is 198.18.0.i. The root namespace has
# no address on the bridge, so the hosts' traffic stays among them.
#
#   scripts/netns-cluster.sh up N DIR    make hosts 1..N and write, into DIR:
#       hostfile   one "ADDR slots=1" line per host (mpirun --hostfile)
#       rsh        the remote-shell agent for OpenMPI (--mca plm_rsh_agent DIR/rsh): runs the
#                  command on the host whose address it is given, as ssh does on a cluster
#       on         DIR/on HOST CMD...: runs CMD on host HOST (1..N, a name or an address)
#       hosts      "NAME ADDR" per host
#   scripts/netns-cluster.sh down        remove every namespace, veth and bridge it made
#   scripts/netns-cluster.sh link HOST up|down   raise or cut host HOST's link (its veth in the
#                  root namespace): a cut link drops packets silently, as a pulled cable does;
#                  up returns once the other hosts and HOST reach each other again
#   scripts/netns-cluster.sh rate HOST RATE|off   shape host HOST's traffic in both directions
#                  with a token bucket (tc tbf, e.g. RATE 10gbit); off removes it
#
# Names: namespaces rn50-${RN50_NETNS_TAG}h1..hN, bridge rn50-${TAG}br, veths rn50-${TAG}v1..
# (host side eth0). RN50_NETNS_TAG (at most 4 characters, default empty) lets several clusters
# exist at once (the tests use one per test). Needs root (ip netns, ip link, tc).
#
# mpirun across the hosts (OpenMPI 4: TCP between hosts, as on a cluster without InfiniBand):
#   DIR/on 1 mpirun --allow-run-as-root --hostfile DIR/hostfile --mca plm_rsh_agent DIR/rsh \
#     --mca btl tcp,self --mca btl_tcp_if_include 198.18.0.0/15 \
#     --mca oob_tcp_if_include 198.18.0.0/15 -np N --bind-to none rn50 train ...
set -euo pipefail

TAG=${RN50_NETNS_TAG:-}
if [ ${#TAG} -gt 4 ]; then
  echo "netns-cluster: RN50_NETNS_TAG '$TAG' is longer than 4 characters" >&2
  exit 2
fi
NS=rn50-${TAG}h
BR=rn50-${TAG}br
VETH=rn50-${TAG}v

die() { echo "netns-cluster: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "needs root (ip netns, ip link, tc)"; }
# Host number from 1..N, rn50-h2 or 198.18.0.2.
host_index() {
  case $1 in
    198.18.0.*) echo "${1##*.}" ;;
    "$NS"*) echo "${1#"$NS"}" ;;
    *[!0-9]* | '') die "unknown host '$1' (use 1..N, ${NS}K or 198.18.0.K)" ;;
    *) echo "$1" ;;
  esac
}

up() {
  local n=$1 dir=$2 i
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] || die "N must be 1..250, got '$n'"
  need_root
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  down_quiet
  ip link add "$BR" type bridge
  ip link set "$BR" up
  : > "$dir/hostfile"
  : > "$dir/hosts"
  for ((i = 1; i <= n; i++)); do
    ip netns add "$NS$i"
    ip link add "$VETH$i" type veth peer name eth0 netns "$NS$i"
    ip link set "$VETH$i" master "$BR" up
    ip -n "$NS$i" addr add "198.18.0.$i/15" dev eth0
    ip -n "$NS$i" link set eth0 up
    ip -n "$NS$i" link set lo up
    echo "198.18.0.$i slots=1" >> "$dir/hostfile"
    echo "$NS$i 198.18.0.$i" >> "$dir/hosts"
  done
  # DIR/on HOST CMD...: the host's network namespace, a UTS namespace named after the host.
  cat > "$dir/on" << EOF
#!/usr/bin/env bash
# Runs a command on a host of the namespace cluster made by scripts/netns-cluster.sh.
set -euo pipefail
h=\$1; shift
case \$h in 198.18.0.*) i=\${h##*.} ;; $NS*) i=\${h#$NS} ;; *) i=\$h ;; esac
[ -e /run/netns/$NS\$i ] || { echo "on: no host \$h (no namespace $NS\$i)" >&2; exit 255; }
exec ip netns exec $NS\$i unshare --uts sh -c 'hostname "\$0" && exec "\$@"' $NS\$i "\$@"
EOF
  # DIR/rsh [options] HOST CMD...: what OpenMPI's rsh launcher calls (ssh's arguments); the
  # command is one shell string, as ssh would pass it to the remote shell.
  cat > "$dir/rsh" << EOF
#!/usr/bin/env bash
# OpenMPI's remote-shell agent for the namespace cluster (--mca plm_rsh_agent $dir/rsh).
set -euo pipefail
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
h=\$1; shift
exec "$dir/on" "\$h" sh -c "\$*"
EOF
  chmod +x "$dir/on" "$dir/rsh"
  echo "netns-cluster: $n hosts up (${NS}1..$n, 198.18.0.1..$n on $BR);" \
    "$dir/hostfile, $dir/rsh, $dir/on"
}

down_quiet() {
  local ns
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^${NS}[0-9]+$" || true); do
    ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
  for v in $(ip -o link show 2> /dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -E "^${VETH}[0-9]+$" || true); do
    ip link del "$v" 2> /dev/null || true
  done
  ip link del "$BR" 2> /dev/null || true
}

down() {
  need_root
  down_quiet
  echo "netns-cluster: down (${NS}*, ${VETH}*, $BR removed)"
}

link() {
  local i
  need_root
  i=$(host_index "$1")
  case $2 in
    down) ip link set "$VETH$i" down ;;
    up)
      ip link set "$VETH$i" up
      # Back only once every other host reaches it and it reaches them: their neighbour
      # entries may have failed while it was gone. A TCP connect to a closed port answers
      # "refused" when the host is reachable, and times out when not.
      local j k ok
      for j in $(ip netns list | awk '{print $1}' | grep -E "^${NS}[0-9]+$"); do
        ip -n "$j" neigh flush all 2> /dev/null || true
      done
      for ((k = 0; k < 100; k++)); do
        ok=1
        for j in $(ip netns list | awk '{print $1}' | grep -E "^${NS}[0-9]+$"); do
          [ "$j" = "$NS$i" ] && continue
          reach "$j" "198.18.0.$i" && reach "$NS$i" "198.18.0.${j#"$NS"}" || ok=0
        done
        [ $ok = 1 ] && return 0
        sleep 0.1
      done
      die "host $i: link up, but the other hosts do not reach it within 10 s"
      ;;
    *) die "link: use up or down, got '$2'" ;;
  esac
}

# Whether namespace $1 reaches address $2: a TCP connect to port 9 (discard, nobody listens)
# is refused by a reachable host and times out otherwise.
reach() {
  local out
  out=$(ip netns exec "$1" timeout 1 bash -c "exec 3<> /dev/tcp/$2/9" 2>&1 || true)
  [[ $out == *refused* ]]
}

rate() {
  local i
  need_root
  i=$(host_index "$1")
  tc qdisc del dev "$VETH$i" root 2> /dev/null || true
  ip netns exec "$NS$i" tc qdisc del dev eth0 root 2> /dev/null || true
  [ "$2" = off ] && return 0
  # Both directions: the root-side veth shapes what the host receives, eth0 what it sends.
  # burst: at least one 10 ms token refill at the rate (the tbf man page's rule of thumb).
  local unit=1
  case $2 in *gbit) unit=1250000 ;; *mbit) unit=1250 ;; esac
  local burst=$((${2%%[a-z]*} * unit))
  [ "$burst" -ge 65536 ] || burst=65536
  tc qdisc add dev "$VETH$i" root tbf rate "$2" burst "$burst" latency 50ms
  ip netns exec "$NS$i" tc qdisc add dev eth0 root tbf rate "$2" burst "$burst" latency 50ms
}

case ${1:-} in
  up) [ $# = 3 ] || die "usage: $0 up N DIR"; up "$2" "$3" ;;
  down) down ;;
  link) [ $# = 3 ] || die "usage: $0 link HOST up|down"; link "$2" "$3" ;;
  rate) [ $# = 3 ] || die "usage: $0 rate HOST RATE|off"; rate "$2" "$3" ;;
  *) die "usage: $0 up N DIR | down | link HOST up|down | rate HOST RATE|off" ;;
esac
