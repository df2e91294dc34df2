#!/usr/bin/env bash
# Emulated hosts on one machine (issue #25): N network namespaces joined to a
# bridge by veth pairs, shaped links, and an OpenMPI hostfile, so that
# `mpirun` places ranks per host and uses TCP between hosts (shared memory
# within one).
#
#   scripts/nodes.sh up N [--rate 1gbit] [--delay 50us] [--slots K]
#   scripts/nodes.sh run MPIRUN-ARGS...    mpirun on host 1 over the hosts
#   scripts/nodes.sh link H up|down        take host H's link down or up again
#   scripts/nodes.sh down                  remove everything (also after a killed run)
#   scripts/nodes.sh status
#
# Layout: namespace strata-sw holds the bridge (the "switch"); namespace
# strata-nK (K = 1..N) is host nK with one interface eth0 at 10.77.0.K/24
# whose other end is sK on the bridge. Nothing is added to the machine's own
# namespace: the addresses exist inside the namespaces only, and
# /etc/netns/strata-nK/hosts (which `ip netns exec` mounts over /etc/hosts)
# names the hosts. Each host's eth0 and its switch port sK egress through
# netem with the given rate and one-way delay (so a message between two
# hosts crosses two shaped links: rate R, latency 2 x delay; a kernel
# without netem gets a token bucket, rate only). Each host runs
# in its own UTS namespace too (hostname nK), so Open MPI sees N nodes.
#
# `run` starts mpirun inside host n1 with the launcher agent
# (OMPI_MCA_plm_rsh_agent, the script $STATE/agent) that starts each remote
# host's orted through `ip netns exec strata-nK`, and with TCP (out-of-band
# and the byte transfer layer) restricted to 10.77.0.0/24.
#
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): without it every command but
# status exits 77 with the reason. State: $STRATA_NODES_STATE (default
# /run/strata-nodes). STRATA_NODES_PREFIX (default strata) names the
# namespaces (PREFIX-sw, PREFIX-nK): two sets with different prefixes (a test
# and a benchmark) live side by side, each with its own bridge.
set -euo pipefail

STATE=${STRATA_NODES_STATE:-/run/strata-nodes}
P=${STRATA_NODES_PREFIX:-strata}
[[ "$P" =~ ^[a-z][a-z0-9]{0,11}$ ]] || { echo "nodes.sh: STRATA_NODES_PREFIX='$P': expected" \
  "1-12 lower-case letters and digits, starting with a letter" >&2; exit 2; }
SW=$P-sw
SUBNET=10.77.0.0/24

die() { echo "nodes.sh: $*" >&2; exit 1; }

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "nodes.sh: needs root (network namespaces, veth, tc): run it as root" >&2
    exit 77
  fi
  local probe="$P-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "nodes.sh: cannot create a network namespace here (ip netns add refused: no" \
         "CAP_SYS_ADMIN/CAP_NET_ADMIN, or a container without them)" >&2
    exit 77
  fi
  ip netns del "$probe"
  command -v unshare >/dev/null || { echo "nodes.sh: unshare (util-linux) is missing" >&2; exit 77; }
}

hosts() { # the host namespaces that exist
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$P-n[0-9]+\$" | sort -V || true
}

cmd_down() {
  need_root
  local ns
  for ns in $(hosts) $(ip netns list 2>/dev/null | awk '{print $1}' | grep -x "$SW" || true); do
    # every process still inside (a killed run's orted and ranks)
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$STATE"
}

# The egress shaping of interface $2 in namespace $1: netem (rate and delay)
# where the kernel has it, else a token bucket (rate only; the delay is then
# not emulated, said once by `up`).
shape() {
  if [ "$netem" = 1 ]; then
    ip netns exec "$1" tc qdisc add dev "$2" root netem delay "$delay" rate "$rate" limit 100000
  else
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 200ms
  fi
}

cmd_up() {
  local n=${1:-}
  shift || true
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] ||
    die "up N: N must be an integer in 1..64 (got '${n}')"
  local rate=1gbit delay=50us slots=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate) rate=$2; shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      --slots) slots=$2; shift 2 ;;
      *) die "up: unknown option '$1' (--rate R, --delay D, --slots K)" ;;
    esac
  done
  need_root
  cmd_down
  trap 'cmd_down; echo "nodes.sh: up failed; removed what it had made" >&2' ERR
  mkdir -p "$STATE"
  ip netns add "$SW"
  ip -n "$SW" link set lo up
  netem=1
  ip netns exec "$SW" tc qdisc add dev lo root netem delay 1us 2>/dev/null || netem=0
  ip netns exec "$SW" tc qdisc del dev lo root 2>/dev/null || true
  [ "$netem" = 1 ] || echo "nodes.sh: this kernel has no netem qdisc (sch_netem): links are" \
    "rate-limited with tbf at $rate, and --delay $delay is not emulated" >&2
  ip -n "$SW" link add br0 type bridge forward_delay 0 stp_state 0
  ip -n "$SW" link set br0 up
  local k ns hostsfile=""
  for k in $(seq 1 "$n"); do
    hostsfile+="10.77.0.$k n$k"$'\n'
  done
  for k in $(seq 1 "$n"); do
    ns=$P-n$k
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # a dead link is found in seconds, not TCP's default quarter hour of
    # retransmissions (the launcher's kill then reaches every host it can)
    ip netns exec "$ns" sh -c 'echo 3 > /proc/sys/net/ipv4/tcp_retries2'
    ip link add "st$$-$k" type veth peer name "sp$$-$k"
    ip link set "st$$-$k" netns "$ns"
    ip link set "sp$$-$k" netns "$SW"
    ip -n "$ns" link set "st$$-$k" name eth0
    ip -n "$SW" link set "sp$$-$k" name "s$k"
    ip -n "$SW" link set "s$k" master br0
    ip -n "$ns" addr add "10.77.0.$k/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$SW" link set "s$k" up
    # the link's shaping, both directions
    shape "$ns" eth0
    shape "$SW" "s$k"
    mkdir -p "/etc/netns/$ns"
    printf '127.0.0.1 localhost\n%s' "$hostsfile" > "/etc/netns/$ns/hosts"
    echo "n$k slots=$slots" >> "$STATE/hostfile"
  done
  cat > "$STATE/agent" <<EOF
#!/bin/sh
# Open MPI's launcher agent (plm_rsh_agent): "agent HOST COMMAND...", as ssh.
host=\$1; shift
exec ip netns exec "$P-\$host" unshare --uts sh -c "hostname \$host; \$*"
EOF
  chmod +x "$STATE/agent"
  printf 'n=%s\nrate=%s\ndelay=%s\nnetem=%s\nslots=%s\n' "$n" "$rate" "$delay" "$netem" "$slots" \
    > "$STATE/config"
  trap - ERR
  # n1 reaches every other host: a TCP connect to a closed port is refused
  # at once when the host answers (no ping needed)
  local k2 try out
  for k2 in $(seq 2 "$n"); do
    for try in 1 2 3 4 5; do
      out=$(timeout 3 ip netns exec "$P-n1" bash -c "exec 3<>/dev/tcp/10.77.0.$k2/9" 2>&1 || true)
      case "$out" in *refused*) break ;; esac
      sleep 0.2
    done
    if [[ "$out" != *refused* ]]; then
      k=$k2
      [ -n "${STRATA_NODES_KEEP:-}" ] || cmd_down
      die "host n$k does not answer from n1"
    fi
  done
  local d="$delay each way"
  [ "$netem" = 1 ] || d="no added delay"
  echo "nodes.sh: $n hosts n1..n$n (10.77.0.1-$n), links $rate, $d; hostfile $STATE/hostfile"
}

cmd_run() {
  need_root
  [ -f "$STATE/hostfile" ] || die "no hosts: run 'nodes.sh up N' first"
  export OMPI_MCA_plm_rsh_agent="$STATE/agent"
  export OMPI_MCA_oob_tcp_if_include=$SUBNET OMPI_MCA_btl_tcp_if_include=$SUBNET
  export OMPI_MCA_btl=self,vader,tcp
  export OMPI_MCA_oob_tcp_keepalive_time=2 OMPI_MCA_oob_tcp_keepalive_intvl=1
  export OMPI_MCA_oob_tcp_keepalive_probes=3
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # mpirun's own children on n1 see hostname n1 as the orteds do theirs
  exec ip netns exec "$P-n1" unshare --uts sh -c 'hostname n1; exec mpirun "$@"' mpirun \
    --hostfile "$STATE/hostfile" "$@"
}

cmd_link() {
  need_root
  local k=${1:-} state=${2:-}
  [[ "$k" =~ ^[0-9]+$ ]] && { [ "$state" = up ] || [ "$state" = down ]; } ||
    die "link H up|down (H a host number)"
  ip -n "$SW" link set "s$k" "$state"
  ip -n "$P-n$k" link set eth0 "$state"
}

cmd_status() {
  if [ -f "$STATE/config" ]; then cat "$STATE/config"; cat "$STATE/hostfile"; else echo "no hosts"; fi
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  run) shift; cmd_run "$@" ;;
  link) shift; cmd_link "$@" ;;
  status) cmd_status ;;
  *) echo "usage: nodes.sh up N [--rate R] [--delay D] [--slots K] | run MPIRUN-ARGS... |" \
          "link H up|down | down | status" >&2; exit 2 ;;
esac
