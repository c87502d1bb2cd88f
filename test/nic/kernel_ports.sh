#!/bin/bash
# mrc-nic on ports the Linux kernel stands behind, each case in a network
# namespace of its own.
#   kernel_ports.sh MRC_NIC WORKDIR [CASE]
# CASE (default: all of them, in turn):
#   tap-arp    one mrc-nic on two net_tap ports (an IPv4 plane, an IPv6 plane);
#              the kernel on the far side of each tap resolves the plane's
#              address (ip neigh), scapy sends ARP who-has / Neighbour
#              Solicitations for the plane's address and for one it does not
#              own; the replies must carry the plane's MAC, the stranger none,
#              and mrc-nic's counters must agree
#   af-packet  two mrc-nic on the two ends of a veth pair through
#              net_af_packet (MTU 9000 veths, --mtu 4096), 32 MiB of WRITEs
#              over 2 QPs, both sides must report integrity_ok
#   af-xdp     the same through net_af_xdp (MTU 1500 veths: veth XDP wants
#              a frame in a page; --mtu 1024)
# Needs root (netns, veth, tap). Exits 77 (meson's "skipped") when namespaces,
# veths or taps cannot be created here, or AF_XDP cannot attach.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 MRC_NIC WORKDIR [tap-arp|af-packet|af-xdp]" >&2
  exit 2
fi
nic=$1
work=$2
case_name=${3:-all}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/$(basename "${BASH_SOURCE[0]}")"
helper="$here/kernel_ports.py"
py=/usr/bin/python3
all_cases=(tap-arp af-packet af-xdp)

skip() {
  echo "skipped: $*"
  exit 77
}

[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces, veths and taps"
command -v ip >/dev/null || skip "no ip(8) (iproute2)"
command -v timeout >/dev/null || skip "no timeout(1)"
[ -x "$py" ] || skip "no $py"

case $nic in /*) ;; *) nic="$(pwd)/$nic" ;; esac
mkdir -p "$work"
work=$(cd "$work" && pwd)

# --- Default: every case in a child of its own, so that each cleans up after
# itself and one failure does not hide the others.
if [ "$case_name" = all ]; then
  failed=() skipped=() passed=()
  for c in "${all_cases[@]}"; do
    echo "=== $c"
    t0=$(date +%s.%N)
    rc=0
    "$BASH" "$self" "$nic" "$work" "$c" || rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    case $rc in
      0) passed+=("$c (${secs}s)") ;;
      77) skipped+=("$c") ;;
      *) failed+=("$c (rc $rc, ${secs}s)") ;;
    esac
  done
  echo "=== passed: ${passed[*]:-none}; skipped: ${skipped[*]:-none}; failed: ${failed[*]:-none}"
  [ ${#failed[@]} -eq 0 ] || exit 1
  # Everything skipped: the whole test is.
  [ ${#passed[@]} -gt 0 ] || exit 77
  exit 0
fi

case $case_name in
  tap-arp | af-packet | af-xdp) ;;
  *)
    echo "unknown case $case_name (expected one of: ${all_cases[*]})" >&2
    exit 2
    ;;
esac

# --- One case from here on.
[ -x "$nic" ] || { echo "FAIL: $nic is not executable" >&2; exit 1; }

tag="kp$$"        # unique per run: netns, file prefixes, interface names
ns="mrc-$tag-$case_name"
ns_made=0
pids=()           # each a `timeout`, the NIC its child
prefixes=()
log_dir="$work/$case_name"
rm -rf "$log_dir"
mkdir -p "$log_dir"

cleanup() {
  local rc=$? p
  set +e
  # (Quietly: no "Killed" job notices for what is killed on purpose.)
  {
    for p in "${pids[@]}"; do
      pkill -KILL -P "$p"
      kill -KILL "$p"
    done
    # Anything still running in the namespace was started by this script.
    [ $ns_made -eq 1 ] && for p in $(ip netns pids "$ns"); do kill -KILL "$p"; done
    for p in "${pids[@]}"; do wait "$p"; done
  } 2>/dev/null
  if [ $ns_made -eq 1 ]; then
    # Deleting the namespace deletes the veths and taps in it.
    ip netns del "$ns" 2>/dev/null || echo "warning: could not delete netns $ns" >&2
  fi
  for p in "${prefixes[@]}"; do rm -rf "/var/run/dpdk/$p"; done
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  local why
  # A port that cannot attach XDP is this machine's limit, not mrc-nic's.
  if [ "$case_name" = af-xdp ] && why=$(xdp_unavailable) && [ -n "$why" ]; then
    echo "($case_name: $*)"
    skip "AF_XDP unavailable here: $why"
  fi
  echo "FAIL: $case_name: $*"
  exit 1
}

xdp_unavailable() {
  grep -Eh "Failed to create xsk socket|Error attaching XDP program|Unknown driver.*af_xdp|failed to initialize net_af_xdp" \
    "$log_dir"/*.log 2>/dev/null | head -n 1
}

show_log() { # file
  echo "--- $1 (last lines, EV events left out)"
  grep -v "EV event" "$1" | tail -n 15 || true
}

# Namespaces a killed run (SIGKILL, no trap) left behind: their creator is gone.
for old_ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^mrc-kp[0-9]+-' || true); do
  creator=${old_ns#mrc-kp}
  creator=${creator%%-*}
  [ -d "/proc/$creator" ] && continue
  echo "removing stale netns $old_ns (its run, pid $creator, is gone)"
  for p in $(ip netns pids "$old_ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  ip netns del "$old_ns" 2>/dev/null || true
done

# netns and a loopback in it: without them, nothing here can run.
ip netns add "$ns" 2>"$log_dir/netns.err" || skip "cannot create a network namespace: $(head -n 1 "$log_dir/netns.err")"
ns_made=1
inns() { ip netns exec "$ns" "$@"; }
inns ip link set lo up || skip "cannot bring up lo in a network namespace"

eal_common=(--no-huge -m 512 --no-pci --log-level='*:warning')

# Starts the NIC in the namespace, in the background: start_nic NAME MAX_SECONDS ARGS...
# Sets started_pid (the `timeout`); stdout goes to $log_dir/NAME.json.
start_nic() {
  local name=$1 secs=$2
  shift 2
  prefixes+=("mrcnic-$tag-$name")
  # Not through inns: $! must be the `timeout` itself (ip netns exec execs it),
  # not a subshell, for signals to reach the NIC.
  ip netns exec "$ns" timeout "$secs" "$nic" "${eal_common[@]}" --file-prefix "mrcnic-$tag-$name" "$@" \
    >"$log_dir/$name.json" 2>"$log_dir/$name.log" &
  started_pid=$!
  pids+=("$started_pid")
}

# Waits up to SECONDS for a line matching REGEX in NAME's log; fails if the NIC exits first.
wait_log() { # name pid regex seconds
  local _
  for _ in $(seq 1 $(($4 * 20))); do
    grep -Eq "$3" "$log_dir/$1.log" 2>/dev/null && return 0
    if ! kill -0 "$2" 2>/dev/null; then
      show_log "$log_dir/$1.log"
      fail "$1 exited before logging /$3/"
    fi
    sleep 0.05
  done
  show_log "$log_dir/$1.log"
  fail "$1 did not log /$3/ within $4 s"
}

wait_ok() { # name pid
  local rc=0 p keep=()
  wait "$2" || rc=$?
  # Reaped: cleanup must not signal a pid the system may hand out again.
  for p in "${pids[@]}"; do [ "$p" = "$2" ] || keep+=("$p"); done
  pids=("${keep[@]}")
  if [ $rc -ne 0 ]; then
    show_log "$log_dir/$1.log"
    [ $rc -eq 124 ] && fail "$1 did not finish in time (killed by timeout)"
    fail "$1 exited with $rc"
  fi
  echo "ok: $1 exited with 0"
}

t_start=$(date +%s.%N)
elapsed() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ----------------------------------------------------------------------------
case_tap_arp() {
  [ -c /dev/net/tun ] || skip "no /dev/net/tun"
  $py -c 'import scapy.all' 2>/dev/null || skip "no scapy for $py"
  local t4="mrct4$$" t6="mrct6$$"        # kernel interfaces, at most 15 characters
  local mac4=02:77:00:00:04:02 mac6=02:77:00:00:06:02      # the planes'
  local kmac4=02:77:00:00:04:01 kmac6=02:77:00:00:06:01    # the kernel's ends
  start_nic tap 30 -l 0,1 \
    --vdev "net_tap0,iface=$t4" --vdev "net_tap1,iface=$t6" -- \
    --device mrc0 --device mrc1 \
    --plane "mrc0 port=net_tap0 ip=10.77.0.2 mac=$mac4" \
    --plane "mrc1 port=net_tap1 ip=fd00:77::2 mac=$mac6" \
    --duration 25 --link-wait 0
  local pid=$started_pid
  wait_log tap "$pid" "mrc1 plane 0: port net_tap1" 15
  echo "ok: mrc-nic serves $mac4 10.77.0.2 on tap $t4 and $mac6 fd00:77::2 on tap $t6"

  # net_tap gives the kernel's end of the tap the port's MAC, which mrc-nic set
  # to the plane's: give the kernel a MAC of its own, or a reply could not be
  # told from an echo of our own frames.
  inns ip link set "$t4" address "$kmac4"
  inns ip link set "$t6" address "$kmac6"
  inns ip link set "$t4" up
  inns ip link set "$t6" up
  inns ip addr add 10.77.0.1/24 dev "$t4"
  inns ip -6 addr add fd00:77::1/64 dev "$t6" nodad

  # 1. The kernel resolves the planes' addresses itself: a datagram to each
  # (to the discard port, which mrc-nic drops) makes it ARP / solicit.
  inns $py -c '
import socket
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("10.77.0.2", 9))
socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b"x", ("fd00:77::2", 9))'
  local ip mac dev line _
  for ip in 10.77.0.2 fd00:77::2; do
    if [ "$ip" = 10.77.0.2 ]; then mac=$mac4 dev=$t4; else mac=$mac6 dev=$t6; fi
    line=""
    for _ in $(seq 1 60); do
      line=$(inns ip neigh show "$ip" dev "$dev")
      echo "$line" | grep -Eq "lladdr $mac (REACHABLE|STALE|DELAY)" && break
      sleep 0.05
    done
    echo "$line" | grep -Eq "lladdr $mac (REACHABLE|STALE|DELAY)" ||
      fail "kernel neighbour entry for $ip on $dev is '${line:-none}', expected lladdr $mac REACHABLE/STALE"
    echo "ok: kernel neighbour table: $line"
  done

  # 2. scapy: who-has for the planes' addresses and for strangers.
  inns $py "$helper" probe \
    "$t4" 10.77.0.1 10.77.0.2 "$mac4" \
    "$t4" 10.77.0.1 10.77.0.9 none \
    "$t6" fd00:77::1 fd00:77::2 "$mac6" \
    "$t6" fd00:77::1 fd00:77::9 none ||
    fail "ARP/ND probes"

  # 3. mrc-nic's own account, once it has stopped (SIGINT: `timeout` passes it on).
  kill -INT "$pid"
  wait_ok tap "$pid"
  # Each plane answered the kernel and scapy (>= 2), and only its own protocol.
  local bad=0
  $py "$helper" counters "$log_dir/tap.json" mrc0 'nic_arp_replies>=2' 'nic_nd_replies==0' 'nic_rx_drop_not_ours>=1' || bad=1
  $py "$helper" counters "$log_dir/tap.json" mrc1 'nic_nd_replies>=2' 'nic_arp_replies==0' || bad=1
  [ $bad -eq 0 ] || fail "mrc-nic's counters"
}

# ----------------------------------------------------------------------------
# Two NICs on the ends of a veth pair: veth_pair DRIVER DEVARGS VETH_MTU NIC_MTU
veth_pair() {
  local drv=$1 devargs=$2 vmtu=$3 mtu=$4 v port
  inns ip link add va type veth peer name vb 2>"$log_dir/veth.err" ||
    skip "cannot create a veth pair: $(head -n 1 "$log_dir/veth.err")"
  for v in va vb; do
    # No kernel chatter (IPv6 router solicitations, MLD) on the planes.
    inns sysctl -qw "net.ipv6.conf.$v.disable_ipv6=1" 2>/dev/null || true
    inns ip link set "$v" mtu "$vmtu" up
  done
  echo "ok: veth va <-> vb, MTU $vmtu, up"
  port=$(inns $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  local bytes=$((32 << 20))
  # Each worker on its own CPU: the responder's lcore 1 on CPU 1, the requester's on CPU 0.
  start_nic responder 25 -l 0,1 --vdev "${drv}0,iface=va$devargs" -- \
    --device mrc1 --plane "mrc1 port=${drv}0 ip=10.78.0.2" --mtu "$mtu" --link-wait 5 \
    --workload write --wl-listen "$port"
  local rpid=$started_pid
  # The requester connects once the responder listens (its port is up by then).
  wait_log responder "$rpid" "waiting on TCP port $port" 15
  start_nic requester 20 --lcores '0@1,1@0' --vdev "${drv}0,iface=vb$devargs" -- \
    --device mrc0 --plane "mrc0 port=${drv}0 ip=10.78.0.1" --mtu "$mtu" --link-wait 5 \
    --workload write --wl-connect "127.0.0.1:$port" --wl-bytes "$bytes" --wl-qps 2
  local cpid=$started_pid
  echo "running: ${drv} va/vb, --mtu $mtu, write $bytes B over 2 QPs"
  wait_ok requester "$cpid"
  wait_ok responder "$rpid"
  local bad=0
  $py "$helper" workload "$log_dir/requester.json" requester "$bytes" || bad=1
  $py "$helper" workload "$log_dir/responder.json" responder "$bytes" || bad=1
  [ $bad -eq 0 ] || fail "workload summaries"
}

case_af_packet() {
  # TPACKET_V2 frames: an --mtu 4096 frame (4174 B) must fit one ring frame,
  # and a ring frame (less 32 B) the NIC's mbufs (4352 B of data room); ring
  # frames are packed back to back, so the block is a multiple of both the
  # frame and the page: 16 x 4352 = 17 x 4096.
  veth_pair net_af_packet ",framesz=4352,blocksz=69632,framecnt=512" 9000 4096
}

case_af_xdp() {
  # AF_XDP needs XDP on the veths, which veth only allows while a frame fits a
  # page: MTU 1500, and a UMEM frame (a page) holds an --mtu 1024 frame.
  veth_pair net_af_xdp ",start_queue=0,queue_count=1" 1500 1024
}

echo "case $case_name: netns $ns, logs in $log_dir"
case $case_name in
  tap-arp) case_tap_arp ;;
  af-packet) case_af_packet ;;
  af-xdp) case_af_xdp ;;
esac
echo "PASS: $case_name ($(elapsed) s)"
