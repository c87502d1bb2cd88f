#!/usr/bin/env bash
# What a dead plane costs: two mrc-nic devices in one process over 4 ring
# planes (config/nic/rings.conf), mrc0 -> mrc1 WRITEs, and mrc0's plane 1 goes
# down at 0.5 s and stays down. Silent by default (the engine finds out from
# its losses); --port-status also tells both engines. Prints one JSON line
# per run: the EV probes mrc0 and mrc1 sent (loss probes left out), data
# packets, goodput, and the EV probes per QP per second the plane was down.
# --nic BIN measures another build (e.g. a copy of an older one); give
# --base BIN as well to alternate the two, base first, in each round.
# usage: scripts/bench-dead-plane.sh [--seconds N] [--rounds N] [--port-status] [--nic BIN] [--base BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=4 rounds=1 port_status=() nic=build/app/mrc-nic base=
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --port-status) port_status=(--port-status); shift ;;
    --nic) nic=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
for v in "$seconds" "$rounds"; do
  [[ $v =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] || { echo "--seconds and --rounds take whole numbers, 1 or more" >&2; exit 2; }
done
for b in "$nic" $base; do [ -x "$b" ] || { echo "$b: not an executable (build first: ninja -C build)" >&2; exit 2; }; done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Without the keys older builds lack (session 28's); they hold the defaults.
grep -v -e '^probe-interval' -e '^fabric-trims' config/nic/rings.conf >"$out/rings.conf"

run() {
  local bin=$1
  timeout $((seconds + 60)) "$bin" --no-huge -m 1024 --no-pci --no-shconf --log-level='*:warning' \
    --lcores '0@0,1@1,2@0' -- --config "$out/rings.conf" --workload write --wl-from mrc0 --wl-to mrc1 \
    --wl-seconds "$seconds" --link-event "mrc0:1 down at-ms=500" --stats-interval 0 "${port_status[@]}" \
    >"$out/run.json" 2>"$out/run.log" || { tail -5 "$out/run.log" >&2; exit 1; }
  /usr/bin/python3 - "$out/run.json" "$bin" "$seconds" "${#port_status[@]}" <<'EOF'
import json, sys
j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
w, seconds = j["workload"], float(sys.argv[3])
def ev_probes(dev):
    c = j["devices"][dev]["counters"]
    return c.get("qp_tx_probes", 0) - c.get("qp_tx_tail_probes", 0)
req, resp = ev_probes("mrc0"), ev_probes("mrc1")
data = j["devices"]["mrc0"]["counters"].get("qp_tx_data_pkts", 0)
down = seconds - 0.5
print(json.dumps({"nic": sys.argv[2], "port_status": sys.argv[4] == "1", "seconds": seconds,
                  "ev_probes_mrc0": req, "ev_probes_mrc1": resp, "data_packets": data,
                  "probe_share": round(req / max(1, req + data), 4),
                  "ev_probes_per_qp_s": round((req + resp) / w["qps"] / down),
                  "goodput_gbps": w["goodput_gbps"], "integrity_ok": w["integrity_ok"]}))
EOF
}

for ((r = 0; r < rounds; ++r)); do
  [ -n "$base" ] && run "$base"
  run "$nic"
done
