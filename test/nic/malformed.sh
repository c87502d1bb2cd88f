#!/usr/bin/env bash
# Hostile traffic against a live mrc-nic device.
#
# Usage: malformed.sh MRC_NIC MRC_CRAFT WORKDIR
#
# One mrc-nic process: mrc0 writes to mrc1 over two rte_ring pairs, and mrc1
# has a third plane on a net_pcap port whose rx_pcap replays hostile frames
# (gen_hostile.py) while the workload runs. EVs are dealt over the largest
# plane count (3), so mrc0 gets a third plane too, on a net_pcap port that
# only transmits to a file: mrc0's plane-2 EVs black-hole, and the engine
# must route around them (a resilience check on top; the workload still has
# to verify).
#
# Pass 1 replays only the mrc-craft negative vectors, so every drop counter
# of mrc1 can be attributed and is asserted exactly. Pass 2 adds garbage,
# bit flips, random BTHs, ARP/ND and runts, and asserts that nothing
# crashes, the workload's data stays intact, and every frame is accounted
# for: nic_rx_frames == nic_rx_to_engine + sum(nic_rx_drop_*) + replies +
# ARP/ND learned or announced.
set -euo pipefail

[[ $# -eq 3 ]] || { echo "usage: $0 MRC_NIC MRC_CRAFT WORKDIR" >&2; exit 2; }
NIC=$1 CRAFT=$2 WD=$3
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
mkdir -p "$WD"
fails=0
start=$SECONDS

check() {  # check DESCRIPTION TEST...: runs the test, reports, counts failures
  local what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}

# The workload's first responder QP on mrc1 is QPN 16, and it expects PSN
# 7919 first (app/mrc-nic/workload.cc psn_for(0)). The vectors start 1000
# PSNs behind that: the valid write is then a duplicate whatever the
# workload's progress (never placed), and the oor-psn vector (base + 2^23-1)
# stays out of the window, so its verdict does not depend on timing either.
$PY "$HERE/gen_hostile.py" --craft "$CRAFT" --seed 1 --qpn 16 --psn 6919 \
  --mac 02:00:00:00:02:02 --ip 10.0.2.2 --peer-mac 02:00:00:00:02:01 --peer-ip 10.0.2.1 \
  --out "$WD/hostile.pcap" --vectors-out "$WD/vectors.pcap" --expect "$WD/expect.json"

declare -A R X  # R: the run's JSON summary, X: gen_hostile's expectations
flatten() {  # JSON -> "key value" lines: wl.errors, mrc1.nic_rx_frames, mrc1.plane2.rx_frames, ...
  $PY -c '
import json, sys
SHORT = {"workload": "wl", "devices": None, "counters": None, "planes": None}
def walk(prefix, v):
    if isinstance(v, dict):
        for k, x in v.items():
            walk(prefix + [SHORT.get(k, k)], x)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            walk(prefix + [f"plane{i}"], x)
    else:
        print(".".join(p for p in prefix if p), v)
walk([], json.load(open(sys.argv[1])))' "$1"
}
load() {  # load ARRAY FILE
  local -n a=$1
  local k v
  a=()
  # shellcheck disable=SC2034  # a is a nameref to the caller's array
  while read -r k v; do a[$k]=$v; done < <(flatten "$2")
}
r() { echo "${R[$1]:-0}"; }  # a counter of the run; the JSON omits zeros
x() { echo "${X[$1]:-0}"; }

# run_nic NAME RX_PCAP SECONDS: one mrc-nic process; loads its summary into R.
run_nic() {
  local name=$1 rx=$2 secs=$3 rc=0
  rm -f "$WD/$name"-{tx,sink}.pcap
  timeout 40 "$NIC" --no-huge -m 1024 --no-pci --no-shconf -l 0,1 --log-level='*:warning' -- \
    --device mrc0 --device mrc1 --ring-pair ra0:rb0 --ring-pair ra1:rb1 \
    --add-vdev "net_pcap0,rx_pcap=$rx,tx_pcap=$WD/$name-tx.pcap" \
    --add-vdev "net_pcap1,tx_pcap=$WD/$name-sink.pcap" \
    --plane "mrc0 port=ra0 ip=10.0.0.1 mac=02:00:00:00:00:01" \
    --plane "mrc0 port=ra1 ip=10.0.1.1 mac=02:00:00:00:01:01" \
    --plane "mrc0 port=net_pcap1 ip=10.0.2.1 mac=02:00:00:00:02:01" \
    --plane "mrc1 port=rb0 ip=10.0.0.2 mac=02:00:00:00:00:02" \
    --plane "mrc1 port=rb1 ip=10.0.1.2 mac=02:00:00:00:01:02" \
    --plane "mrc1 port=net_pcap0 ip=10.0.2.2 mac=02:00:00:00:02:02" \
    --neighbour "10.0.2.1 02:00:00:00:02:01" \
    --workload write --wl-from mrc0 --wl-to mrc1 --wl-size 64k --wl-qps 2 --wl-seconds "$secs" \
    >"$WD/$name.json" 2>"$WD/$name.err" || rc=$?
  echo "== $name: mrc-nic exited $rc after replaying $rx"
  if [[ $rc -ne 0 || ! -s $WD/$name.json ]]; then
    tail -20 "$WD/$name.err"
    echo "FAIL $name: mrc-nic exited $rc (crash, timeout or integrity failure); see $WD/$name.err"
    exit 1
  fi
  load R "$WD/$name.json"
}

# common_checks PLANE2_FRAMES: what holds whatever was replayed.
common_checks() {
  check "workload integrity_ok=$(r wl.integrity_ok), errors=$(r wl.errors)" \
    test "$(r wl.integrity_ok)" = True -a "$(r wl.errors)" -eq 0
  check "mrc1 plane 2 rx_frames $(r mrc1.plane2.rx_frames) == frames replayed $1" \
    test "$(r mrc1.plane2.rx_frames)" -eq "$1"
  local dev drops k planes p
  for dev in mrc0 mrc1; do
    drops=0
    for k in "${!R[@]}"; do [[ $k == $dev.nic_rx_drop_* ]] && drops=$((drops + R[$k])); done
    check "$dev: nic_rx_frames $(r $dev.nic_rx_frames) == rx_to_engine $(r $dev.nic_rx_to_engine) \
+ nic_rx_drop_* $drops + arp_replies $(r $dev.nic_arp_replies) + nd_replies $(r $dev.nic_nd_replies) \
+ neighbours_learned $(r $dev.nic_neighbours_learned) + neighbour_static_kept $(r $dev.nic_neighbour_static_kept) \
+ rx_announcements_unused $(r $dev.nic_rx_announcements_unused)" \
      test "$(r $dev.nic_rx_frames)" -eq $(($(r $dev.nic_rx_to_engine) + drops + $(r $dev.nic_arp_replies) \
        + $(r $dev.nic_nd_replies) + $(r $dev.nic_neighbours_learned) + $(r $dev.nic_neighbour_static_kept) \
        + $(r $dev.nic_rx_announcements_unused)))
    planes=0
    for p in 0 1 2; do planes=$((planes + $(r $dev.plane$p.rx_frames))); done
    check "$dev: nic_rx_frames $(r $dev.nic_rx_frames) == sum of the planes' rx_frames $planes" \
      test "$(r $dev.nic_rx_frames)" -eq "$planes"
    check "$dev: engine rx_frames $(r $dev.rx_frames) == nic_rx_to_engine $(r $dev.nic_rx_to_engine)" \
      test "$(r $dev.rx_frames)" -eq "$(r $dev.nic_rx_to_engine)"
  done
  # mrc0's plane 2 transmits into a file and hears nothing: the engine must
  # have tried it, lost EVs there, and (integrity above) recovered.
  check "mrc0 plane 2 (black hole): tx_frames $(r mrc0.plane2.tx_frames) > 0, rx_frames $(r mrc0.plane2.rx_frames) == 0, \
EVs marked bad $(r mrc0.qp_ev_marked_bad) > 0" \
    test "$(r mrc0.plane2.tx_frames)" -gt 0 -a "$(r mrc0.plane2.rx_frames)" -eq 0 -a "$(r mrc0.qp_ev_marked_bad)" -gt 0
}

load X "$WD/expect.json"
sumx() {  # sumx REGEX: the sum of gen_hostile's expectations whose keys match
  local s=0 k
  for k in "${!X[@]}"; do [[ $k =~ $1 ]] && s=$((s + X[$k])); done
  echo $s
}
# Expected verdict of each mrc-craft kind at an MRC device on an IPv4 plane
# (read off lib/engine/engine.cc Engine::on_rx and responder.cc on_data):
# parse errors and the ICRC are checked before anything else; RC opcodes
# then fail the transport check; an MRC write half the PSN space ahead is
# NACKed as out of window; IPv6 to an IPv4-only plane is not ours at the NIC.
K='^craft_kinds\.'
declare -A WANT=(
  [rx_drop_bad_icrc]=$(sumx "$K.*-ipv4\.bad_icrc$")
  [rx_drop_truncated_header]=$(sumx "$K.*-ipv4\.truncated_header$")
  [rx_drop_bad_ip_length]=$(sumx "$K.*-ipv4\.bad_ip_length$")
  [rx_drop_bad_pad_count]=$(sumx "$K.*-ipv4\.bad_pad_count$")
  [qp_rx_drop_psn_oor]=$(sumx "${K}mrc-ipv4\.oor_psn$")
  [qp_tx_nacks]=$(sumx "${K}mrc-ipv4\.oor_psn$")
  [rx_drop_wrong_transport]=$(sumx "${K}rocev2-ipv4\.(valid|oor_psn)$")
  [nic_rx_drop_not_ours]=$(sumx "$K.*-ipv6\.")
  [nic_rx_drop_malformed]=0
  [nic_arp_replies]=0
)
# A kind mrc-craft learns later must get an expectation here before it passes.
kinds=$(sumx "$K") known=$(sumx "$K.*\.(valid|bad_icrc|truncated_header|bad_ip_length|bad_pad_count|oor_psn)$")
check "every mrc-craft vector kind has an expectation ($known of $kinds vectors)" test "$known" -eq "$kinds" -a "$kinds" -gt 0

run_nic vectors "$WD/vectors.pcap" 1
common_checks "$kinds"
for k in $(printf '%s\n' "${!WANT[@]}" | sort); do
  check "vectors: mrc1 $k $(r "mrc1.$k") == ${WANT[$k]}" test "$(r "mrc1.$k")" -eq "${WANT[$k]}"
done

run_nic storm "$WD/hostile.pcap" 2
common_checks "$(x frames)"
# The vectors are in the storm too; random frames may add to any reason.
for k in $(printf '%s\n' "${!WANT[@]}" | sort); do
  [[ $k == nic_* || $k == qp_tx_nacks ]] && continue
  check "storm: mrc1 $k $(r "mrc1.$k") >= ${WANT[$k]}" test "$(r "mrc1.$k")" -ge "${WANT[$k]}"
done
check "storm: mrc1 nic_rx_drop_not_ours $(r mrc1.nic_rx_drop_not_ours) >= $(x not_ours_min)" \
  test "$(r mrc1.nic_rx_drop_not_ours)" -ge "$(x not_ours_min)"
check "storm: mrc1 nic_rx_drop_malformed $(r mrc1.nic_rx_drop_malformed) >= $(x malformed_min)" \
  test "$(r mrc1.nic_rx_drop_malformed)" -ge "$(x malformed_min)"
check "storm: mrc1 nic_arp_replies $(r mrc1.nic_arp_replies) == $(x arp_replies), nd_replies $(r mrc1.nic_nd_replies) == 0 (IPv4 plane)" \
  test "$(r mrc1.nic_arp_replies)" -eq "$(x arp_replies)" -a "$(r mrc1.nic_nd_replies)" -eq 0
# 10.0.2.1 is a static neighbour (--neighbour): what the wire says of it
# never enters the table, so nothing at all is learned. The other device's
# planes announce themselves as their links come up, so announcements of
# IPs not in the table number at least the storm's.
check "storm: mrc1 neighbour_static_kept $(r mrc1.nic_neighbour_static_kept) == $(x static_kept), \
rx_drop_neighbour_static_conflict $(r mrc1.nic_rx_drop_neighbour_static_conflict) == $(x static_conflicts), \
neighbours_learned $(r mrc1.nic_neighbours_learned) == 0, \
rx_announcements_unused $(r mrc1.nic_rx_announcements_unused) >= $(x announcements_unused)" \
  test "$(r mrc1.nic_neighbour_static_kept)" -eq "$(x static_kept)" \
  -a "$(r mrc1.nic_rx_drop_neighbour_static_conflict)" -eq "$(x static_conflicts)" \
  -a "$(r mrc1.nic_neighbours_learned)" -eq 0 \
  -a "$(r mrc1.nic_rx_announcements_unused)" -ge "$(x announcements_unused)"
# Counted is not sent: the replies must be on the wire, from our address to the asker.
replies=$(tshark -n -r "$WD/storm-tx.pcap" \
  -Y 'arp.opcode == 2 && arp.src.proto_ipv4 == 10.0.2.2 && arp.src.hw_mac == 02:00:00:00:02:02 && arp.dst.proto_ipv4 == 10.0.2.1' \
  2>/dev/null | wc -l)
check "storm: $replies ARP replies from 10.0.2.2 on the wire == $(x arp_replies)" test "$replies" -eq "$(x arp_replies)"

echo "malformed: $([[ $fails -eq 0 ]] && echo PASS || echo FAIL): $fails failures; $((SECONDS - start))s"
[[ $fails -eq 0 ]]
