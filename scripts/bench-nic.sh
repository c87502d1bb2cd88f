#!/usr/bin/env bash
# mrc-nic against the memif baseline, measured in the same run, one worker
# core per side (each side on its own CPU):
#   1. dpdk-testpmd txonly -> rxonly over net_memif, 4 KB frames (the baseline)
#   2. build/test/memif-floor over the same vdev and CPUs: the data work alone
#      (each 4 KB payload copied from source memory into a frame, ICRC, memif,
#      ICRC check, copy into destination memory), with no protocol. testpmd
#      never reads a payload; this is what that work costs a NIC that places
#      data. Then without the ICRC, without the copies, and without both (then
#      it is testpmd's work again), and with 64 B payloads.
#   3. mrc-nic workload, 4 KB MTU WRITEs over 1 memif plane (the same vdev and
#      frame size as the baseline), then over 4 planes, then over 1 plane with
#      the responder as a zero-copy memif client (one copy fewer on its side)
#   4. mrc-nic, 64 B WRITEs: the small-message rate, with 8 QPs x 64 in flight
#      and with 2 QPs x 256 (fewer QPs: fewer ACKs per WRITE, as each QP's
#      ACKs coalesce over more packets)
# Prints one JSON line per measurement, then a summary with the ratios. Each
# line carries the cache-line round trip between the two CPUs just before and
# after the run (build/test/cpu-pair-rtt): the host moves this VM's vCPUs
# between cores that share a cache (60-110 ns here) and cores that do not
# (310-340 ns), and every rate here follows it. Before each run it waits up to
# --settle seconds (default 10; 0: not at all) for the CPUs to share a cache,
# so that runs, and the ratios between them, compare the same placement.
# --nic BIN measures another mrc-nic build (a copy of an older one, say);
# --only LABELS (comma-separated, e.g. testpmd,64B-1plane-2qps) runs only
# those measurements. Two builds compared: alternate runs of the two, e.g.
#   for i in 1 2 3; do for b in OLD build/app/mrc-nic; do
#     scripts/bench-nic.sh --nic $b --only 64B-1plane-2qps --seconds 3; done; done
# usage: scripts/bench-nic.sh [--seconds N] [--rounds N] [--settle S] [--nic BIN] [--only LABELS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/memif-rings.sh
seconds=5 rounds=1 settle=10 nic=build/app/mrc-nic only=
while [ $# -gt 0 ]; do
  case "$1" in
    --nic) nic=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
for v in "$seconds" "$rounds" "$settle"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "--seconds, --rounds and --settle take whole numbers" >&2; exit 2; }
done
# scripts/bench-memif-baseline.sh, the baseline, measures for 2 s or more.
((seconds >= 2)) || { echo "--seconds must be 2 or more" >&2; exit 2; }
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
[ -x "$nic" ] || { echo "--nic $nic: not an executable (build first: ninja -C build)" >&2; exit 2; }
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
rtt() { build/test/cpu-pair-rtt 2>/dev/null | sed -n 's/.*"rtt_ns":\([0-9.]*\).*/\1/p' || true; }  # empty: unknown
settle() {  # prints the round trip once under 150 ns, or the last one after $settle s
  local v end=$((SECONDS + settle))
  while :; do
    v=$(rtt)
    if [ -z "$v" ] || (( ${v%.*} < 150 || SECONDS >= end )); then echo "$v"; return; fi
    sleep 0.5
  done
}
work=$(mktemp -d)
# nic_pair runs in a pipeline's subshell (| tee), so the pids it starts are
# kept in a file the exit trap can read.
started() { echo "$1" >>"$work/pids"; }
cleanup() {
  if [ -f "$work/pids" ]; then
    while read -r p; do pkill -KILL -P "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done <"$work/pids"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# One mrc-nic pair over memif: the responder's worker on CPU 1, the
# requester's on CPU 0 (its control thread sleeps on CPU 1).
# --responder-zc: the responder is the memif client with zero-copy=yes, so
# its RX takes the frames where the requester's memif wrote them (one copy
# fewer on the responder); the requester is then the server.
nic_pair() { # [--responder-zc] label planes requester-args...
  local zc=0
  if [ "$1" = --responder-zc ]; then zc=1; shift; fi
  local label=$1 planes=$2
  shift 2
  local port vs=() vc=() ps=() pc=()
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  rm -f "$work/m.sock"
  local rsize
  rsize=$(memif_rsize "$planes")
  memif_roles "$zc"
  for ((p = 0; p < planes; ++p)); do
    local common="id=$p,socket=$work/m.sock,socket-abstract=no,bsize=8192,rsize=$rsize"
    vs+=(--vdev "net_memif$p,$MEMIF_RESPONDER_ROLE,$common")
    vc+=(--vdev "net_memif$p,$MEMIF_REQUESTER_ROLE,$common")
    ps+=(--plane "mrc1 port=net_memif$p ip=10.0.$p.2")
    pc+=(--plane "mrc0 port=net_memif$p ip=10.0.$p.1")
  done
  local eal=(--no-huge -m 1024 --no-pci --no-shconf --log-level='*:error') rtt0 rtt1
  local responder=("$nic" "${eal[@]}" "${MEMIF_RESPONDER_EAL[@]}" -l 0,1 "${vs[@]}" -- --device mrc1 "${ps[@]}"
    --telemetry false --workload write --wl-listen "$port")
  local requester=("$nic" "${eal[@]}" --lcores '0@1,1@0' "${vc[@]}" -- --device mrc0 "${pc[@]}" --telemetry false
    --workload write --wl-connect "127.0.0.1:$port" --wl-seconds "$seconds" "$@")
  rtt0=$(settle)
  # The memif server starts first (memif_roles).
  if ((zc)); then
    timeout 120 "${requester[@]}" >"$work/c.json" 2>"$work/c.log" &
    local req=$!
    started "$req"
    for _ in $(seq 1 100); do [ -S "$work/m.sock" ] && break; sleep 0.05; done
    timeout 120 "${responder[@]}" >"$work/s.json" 2>"$work/s.log" &
    local resp=$!
    started "$resp"
    wait "$req" || true
  else
    timeout 120 "${responder[@]}" >"$work/s.json" 2>"$work/s.log" &
    local resp=$!
    started "$resp"
    for _ in $(seq 1 100); do [ -S "$work/m.sock" ] && break; sleep 0.05; done
    timeout 120 "${requester[@]}" >"$work/c.json" 2>"$work/c.log" || true
  fi
  wait "$resp" 2>/dev/null || true
  rtt1=$(rtt)
  local rc=0
  /usr/bin/python3 - "$work/c.json" "$label" "$rtt0" "$rtt1" "$nic" <<'EOF' || rc=$?
import json, sys
rtt = [float(x) if x else None for x in sys.argv[3:5]]
try:
    j = json.load(open(sys.argv[1]))
except Exception:
    print(json.dumps({"tool": "mrc-nic", "label": sys.argv[2], "error": "no summary", "rtt_ns": rtt}))
    sys.exit(1)
w = j["workload"]
d = j["devices"]["mrc0"]
data_pkts = d["counters"].get("qp_tx_data_pkts", 0)
print(json.dumps({"tool": "mrc-nic", "nic": sys.argv[5], "label": sys.argv[2], "size": w["size"], "qps": w["qps"],
                  "depth": w["depth"], "seconds": round(w["seconds"], 3),
                  "goodput_gbps": round(w["goodput_gbps"], 2), "mops": round(w["mops"], 3),
                  "data_mpps": round(data_pkts / w["seconds"] / 1e6, 3) if w["seconds"] else 0,
                  "retransmits": d["retransmits"], "integrity_ok": w["integrity_ok"], "rtt_ns": rtt}))
EOF
  if (( rc != 0 )); then  # keep what the two processes said: a run without a summary is a bug to chase
    for f in c.log s.log; do echo "--- $label: tail of $f" >&2; tail -n 20 "$work/$f" >&2; done
  fi
}

# The data-work floor: both memif ends in one process, the sender on CPU 0
# and the receiver on CPU 1, as the mrc-nic pair's requester and responder.
floor_run() { # label memif-floor-args...
  local label=$1 rtt0 rtt1 line
  shift
  rm -f "$work/f.sock"
  rtt0=$(settle)
  line=$(timeout $((seconds + 60)) build/test/memif-floor --no-huge -m 1024 --no-pci --no-shconf --log-level='*:error' \
    --lcores '0@1,1@0' \
    --vdev "net_memif0,role=server,id=0,socket=$work/f.sock,socket-abstract=no,bsize=8192" \
    --vdev "net_memif1,role=client,id=0,socket=$work/f.sock,socket-abstract=no,bsize=8192" \
    -- --seconds "$seconds" "$@" 2>"$work/f.log") || { tail -n 5 "$work/f.log" >&2; line=${line:-'{"tool":"memif-floor","error":"no result"}'}; }
  rtt1=$(rtt)
  echo "${line%\}},\"label\":\"$label\",\"rtt_ns\":[${rtt0:-null},${rtt1:-null}]}"
}

results=$work/results.jsonl
for ((r = 0; r < rounds; ++r)); do
  if want testpmd; then
    r0=$(settle)
    line=$(scripts/bench-memif-baseline.sh --size 4096 --seconds "$seconds" 2>/dev/null) || line='{"tool":"testpmd","error":"no result"}'
    r1=$(rtt)
    echo "${line%\}},\"rtt_ns\":[${r0:-null},${r1:-null}]}" | tee -a "$results"
  fi
  want floor && floor_run floor | tee -a "$results"
  want floor-no-icrc && floor_run floor-no-icrc --no-icrc | tee -a "$results"
  want floor-no-copy && floor_run floor-no-copy --no-copy | tee -a "$results"
  want floor-neither && floor_run floor-neither --no-copy --no-icrc | tee -a "$results"
  want floor-64B && floor_run floor-64B --payload 64 --src-bytes 4160 --dst-bytes 32768 | tee -a "$results"  # the 64 B workload's buffers
  want 4KB-1plane && nic_pair "4KB-1plane" 1 --wl-size 1M --wl-qps 4 --wl-depth 4 | tee -a "$results"
  want 4KB-4planes && nic_pair "4KB-4planes" 4 --wl-size 1M --wl-qps 4 --wl-depth 4 | tee -a "$results"
  want 4KB-1plane-rzc && nic_pair --responder-zc "4KB-1plane-rzc" 1 --wl-size 1M --wl-qps 4 --wl-depth 4 | tee -a "$results"
  want 64B-1plane && nic_pair "64B-1plane" 1 --wl-size 64 --wl-qps 8 --wl-depth 64 | tee -a "$results"
  want 64B-1plane-2qps && nic_pair "64B-1plane-2qps" 1 --wl-size 64 --wl-qps 2 --wl-depth 256 | tee -a "$results"
done
/usr/bin/python3 - "$results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def placement(r):
    v = r.get("rtt_ns") or []
    if len(v) != 2 or None in v:
        return "unknown"
    return "shared cache" if max(v) < 150 else "apart" if min(v) >= 150 else "moved"
def best(pred, key):
    v = [r[key] for r in rows if pred(r) and key in r]
    return max(v) if v else 0.0
base = best(lambda r: r.get("tool") == "testpmd", "rx_gbps")
def floor_best(label):
    return best(lambda r: r.get("label") == label and r.get("ok"), "goodput_gbps")
floor = floor_best("floor")
one = best(lambda r: r.get("label") == "4KB-1plane", "goodput_gbps")
four = best(lambda r: r.get("label") == "4KB-4planes", "goodput_gbps")
rzc = best(lambda r: r.get("label") == "4KB-1plane-rzc", "goodput_gbps")
small = best(lambda r: r.get("label") == "64B-1plane", "mops")
small2 = best(lambda r: r.get("label") == "64B-1plane-2qps", "mops")
print()
print(f"baseline testpmd memif 4 KB frames: {base:.1f} Gb/s per core")
samples = [g for r in rows if r.get("tool") == "testpmd" for g in r.get("rx_gbps_per_sample", [])]
if samples:
    # The host moves this VM's vCPUs (test/bench/cpu_pair_rtt.cc): compare with care.
    print(f"  (its rate over ~1 s samples ranged {min(samples):.0f} to {max(samples):.0f} Gb/s)")
if base:
    print(f"data-work floor (memif-floor, no protocol): {floor:.1f} Gb/s goodput = {100 * floor / base:.0f} % of the baseline")
    for label, what in (("floor-no-icrc", "copies, no ICRC"), ("floor-no-copy", "ICRC, no copies"),
                        ("floor-neither", "neither: testpmd's work")):
        print(f"  {what:24}: {floor_best(label):.1f} Gb/s = {100 * floor_best(label) / base:.0f} % of the baseline")
    print(f"mrc-nic 4 KB MTU WRITEs, 1 plane : {one:.1f} Gb/s goodput = {100 * one / base:.0f} % of the baseline")
    print(f"mrc-nic 4 KB MTU WRITEs, 4 planes: {four:.1f} Gb/s goodput = {100 * four / base:.0f} % of the baseline")
    print(f"mrc-nic 4 KB, 1 plane, responder as zero-copy memif client: {rzc:.1f} Gb/s = "
          f"{100 * rzc / base:.0f} % of the baseline")
print(f"mrc-nic 64 B WRITEs, 8 QPs x 64: {small:.3f} Mops per core")
print(f"mrc-nic 64 B WRITEs, 2 QPs x 256: {small2:.3f} Mops per core")
# Best against best mixes placements; these compare runs that all had the
# CPUs sharing a cache.
def shared_best(pred, key):
    return best(lambda r: pred(r) and placement(r) == "shared cache", key)
s_base = shared_best(lambda r: r.get("tool") == "testpmd", "rx_gbps")
s_floor = shared_best(lambda r: r.get("label") == "floor" and r.get("ok"), "goodput_gbps")
if s_base and s_floor:
    print(f"with the CPUs sharing a cache only: testpmd {s_base:.1f} Gb/s, floor {s_floor:.1f} Gb/s "
          f"({100 * s_floor / s_base:.0f} %)")
    for label in ("4KB-1plane", "4KB-4planes", "4KB-1plane-rzc"):
        g = shared_best(lambda r: r.get("label") == label, "goodput_gbps")
        if g:
            print(f"  mrc-nic {label}: {g:.1f} Gb/s = {100 * g / s_base:.0f} % of testpmd, {100 * g / s_floor:.0f} % of the floor")
floor64 = best(lambda r: r.get("label") == "floor-64B" and r.get("ok"), "mpps")
if floor64:
    print(f"data-work floor at 64 B payloads: {floor64:.3f} M frames/s; mrc-nic's best = {100 * max(small, small2) / floor64:.0f} % of it")
print("each run, with the CPUs' placement around it (cpu-pair-rtt: shared cache < 150 ns <= apart):")
for r in rows:
    if "rx_gbps" in r:
        what = f'{r["rx_gbps"]:.1f} Gb/s'
    elif r.get("tool") == "memif-floor" and "goodput_gbps" in r:
        what = f'{r["goodput_gbps"]:.1f} Gb/s, {r["mpps"]:.3f} Mpps' + ("" if r.get("ok") else " (check failed)")
    elif "mops" in r:
        what = f'{r["goodput_gbps"]:.1f} Gb/s, {r["mops"]:.3f} Mops'
    else:
        what = r.get("error", "?")
    print(f'  {r.get("label", r.get("tool")):16} {what:26} rtt {r.get("rtt_ns")} -> {placement(r)}')
# Each round's own ratio too: the baseline swings with the vCPUs' placement
# (see above), so the spread of these says how much one round's ratio means.
# A ratio means something only when both runs had the same placement.
pairs, of_floor, base_now, floor_now = [], [], None, None
for r in rows:
    if r.get("tool") == "testpmd":
        base_now = r if r.get("rx_gbps") else None
    elif r.get("label") == "floor":
        floor_now = r if r.get("ok") else None
    elif r.get("label") == "4KB-1plane" and "goodput_gbps" in r:
        for ref, key, out in ((base_now, "rx_gbps", pairs), (floor_now, "goodput_gbps", of_floor)):
            if ref:
                out.append(f'{100 * r["goodput_gbps"] / ref[key]:.0f} % ({placement(r)} / {placement(ref)})')
if pairs:
    print("4 KB, 1 plane, each round against its own baseline: " + ", ".join(pairs))
if of_floor:
    print("4 KB, 1 plane, each round against its own floor: " + ", ".join(of_floor))
EOF
