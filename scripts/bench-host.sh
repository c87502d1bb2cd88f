#!/usr/bin/env bash
# The host path (a program on lib_mrc.so) against mrc-nic's built-in workload, in the same run
# on the same two-process memif setup (one worker core per side, each on its own CPU):
#   1. 1 MiB WRITEs on 4 QPs: mrc-nic --workload, then mrc-perf (polling, then --event)
#   2. 64 B WRITEs on 4 QPs: the same, as a message rate
#   3. mrc-perf sweeps: bandwidth 1 B .. 4 MiB, and latency (WRITE polling memory, WRITE_IMM
#      with --event)
# Prints one JSON line per measurement, then a summary with the ratios.
# usage: scripts/bench-host.sh [--seconds N] [--rounds N] [--planes N]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/memif-rings.sh
seconds=5 rounds=1 planes=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --planes) planes=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
nic=build/app/mrc-nic
perf=build/app/mrc-perf
py=/usr/bin/python3
work=$(mktemp -d)
export MRC_RUN_DIR=$work/run
pids=()
stop_all() {
  for p in "${pids[@]}"; do pkill -KILL -P "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Both NICs with the same settings in either mode; the ACK timeout is longer than a scheduler
# slice because the host program shares the 2 CPUs with the busy-polling workers.
common=(--telemetry false --timeout 13)
eal=(--no-huge -m 1024 --no-pci --no-shconf --log-level='*:error')
start_pair() { # responder-args -- requester-args
  local vs=() vc=() ps=() pc=() rargs=() qargs=()
  while [ "$1" != "--" ]; do rargs+=("$1"); shift; done
  shift
  qargs=("$@")
  rm -rf "$work/m.sock" "$MRC_RUN_DIR"
  local rsize
  rsize=$(memif_rsize "$planes")
  for ((p = 0; p < planes; ++p)); do
    vs+=(--vdev "net_memif$p,role=server,id=$p,socket=$work/m.sock,socket-abstract=no,bsize=8192,rsize=$rsize")
    vc+=(--vdev "net_memif$p,role=client,id=$p,socket=$work/m.sock,socket-abstract=no,bsize=8192,rsize=$rsize")
    ps+=(--plane "mrc1 port=net_memif$p ip=10.0.$p.2")
    pc+=(--plane "mrc0 port=net_memif$p ip=10.0.$p.1")
  done
  timeout 300 "$nic" "${eal[@]}" -l 0,1 "${vs[@]}" -- --device mrc1 "${ps[@]}" "${common[@]}" "${rargs[@]}" \
    >"$work/s.json" 2>"$work/s.log" &
  pids+=($!)
  for _ in $(seq 1 100); do [ -S "$work/m.sock" ] && break; sleep 0.05; done
  timeout 300 "$nic" "${eal[@]}" --lcores '0@1,1@0' "${vc[@]}" -- --device mrc0 "${pc[@]}" "${common[@]}" \
    "${qargs[@]}" >"$work/c.json" 2>"$work/c.log" &
  pids+=($!)
}

workload() { # label size
  local port
  port=$(free_port)
  start_pair --workload write --wl-listen "$port" -- --workload write --wl-connect "127.0.0.1:$port" \
    --wl-seconds "$seconds" --wl-size "$2" --wl-qps 4
  wait "${pids[-1]}" 2>/dev/null || true
  stop_all
  $py - "$work/c.json" "$1" <<'EOF'
import json, sys
try:
    w = json.load(open(sys.argv[1]))["workload"]
    print(json.dumps({"tool": "mrc-nic", "label": sys.argv[2], "size": w["size"], "gbps": round(w["goodput_gbps"], 3),
                      "mmsgps": round(w["messages"] / w["seconds"] / 1e6, 4), "integrity_ok": w["integrity_ok"]}))
except Exception as e:
    print(json.dumps({"tool": "mrc-nic", "label": sys.argv[2], "error": f"no summary ({e})"}))
EOF
}

host_up() {
  start_pair --
  for _ in $(seq 1 100); do
    [ -S "$MRC_RUN_DIR/mrc0.sock" ] && [ -S "$MRC_RUN_DIR/mrc1.sock" ] && return 0
    sleep 0.05
  done
  echo "bench-host: the devices did not come up" >&2
  tail -n 5 "$work/s.log" "$work/c.log" >&2
  exit 1
}

perf_run() { # label mrc-perf-client-args...
  local label=$1 port
  shift
  port=$(free_port)
  timeout 300 "$perf" --dev mrc1 --port "$port" >"$work/ps.txt" 2>&1 &
  local server=$!
  sleep 0.2
  timeout 300 "$perf" --dev mrc0 --connect "127.0.0.1:$port" "$@" --json "$work/p.json" >"$work/pc.txt" 2>&1 || true
  wait $server 2>/dev/null || true
  $py - "$work/p.json" "$label" <<'EOF'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print(json.dumps({"tool": "mrc-perf", "label": sys.argv[2], "error": f"no JSON ({e})"}))
    sys.exit(0)
for r in j["results"]:
    out = {"tool": "mrc-perf", "label": sys.argv[2], "size": r["bytes"], "gbps": round(r["gbps"], 3),
           "mmsgps": round(r["mmsgps"], 4), "integrity_ok": r.get("integrity_ok")}
    if "lat_us" in r:
        out.update({f"lat_{k}_us": round(v, 2) for k, v in r["lat_us"].items() if k in ("min", "p50", "p99")})
    print(json.dumps(out))
if j.get("error"):
    print(json.dumps({"tool": "mrc-perf", "label": sys.argv[2], "error": j["error"]}))
EOF
}

{
  for ((r = 0; r < rounds; ++r)); do
    workload workload-1M 1M
    host_up
    perf_run host-poll-1M --size 1M --qps 4 --seconds "$seconds"
    perf_run host-event-1M --size 1M --qps 4 --seconds "$seconds" --event
    stop_all
    workload workload-64B 64
    host_up
    perf_run host-poll-64B --size 64 --qps 4 --seconds "$seconds"
    perf_run host-event-64B --size 64 --qps 4 --seconds "$seconds" --event
    stop_all
  done
  host_up
  perf_run sweep-bw-write-event --sweep 1:4M --qps 4 --iters 2000 --event
  perf_run sweep-lat-write --test lat --op write --sweep 1:64K --iters 1000
  perf_run sweep-lat-write_imm-event --test lat --op write_imm --event --sweep 1:64K --iters 1000
  stop_all
} | tee "$work/results.jsonl"

echo
$py - "$work/results.jsonl" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
errs = [r for r in rows if "error" in r]
for r in errs:
    print(f"error: {r['label']}: {r['error']}")
by = collections.defaultdict(list)
for r in rows:
    if "error" not in r and r["label"].split("-")[-1] in ("1M", "64B"):
        by[r["label"]].append(r)
def med(label, key):
    v = [r[key] for r in by.get(label, [])]
    return statistics.median(v) if v else float("nan")
print("summary (medians over rounds):")
for size, key, unit in (("1M", "gbps", "Gb/s"), ("64B", "mmsgps", "Mmsg/s")):
    base = med(f"workload-{size}", key)
    for mode in ("poll", "event"):
        v = med(f"host-{mode}-{size}", key)
        print(f"  {size:>3} WRITEs, 4 QPs: workload {base:.3f} {unit}, mrc-perf ({mode}) {v:.3f} {unit} = {v / base:.2f} of the workload")
bad = [r for r in rows if r.get("integrity_ok") is False]
print(f"integrity: {'every measurement verified' if not bad else f'{len(bad)} FAILED'}")
EOF
