#!/usr/bin/env bash
# How mrc-sim's cost grows with the number of hosts: the permutation of
# config/bench/permutation_128.conf (8 planes x 100 Gb/s, 16 hosts per leaf,
# 16 spines, 8 QPs per pair, 256 EVs) at several sizes, each host moving the
# same bytes. Prints one line per size: simulated time, events, wall time,
# events per second, wall seconds per simulated millisecond, peak memory.
# "run_s" is the event loop alone, without building the fabric.
# --partitions K cuts the fabric into K parts run side by side by --threads T
# threads (mrc-sim's options; the default, 1, is one loop on one thread).
# usage: scripts/bench-sim-scale.sh [--hosts "16 64 256 1024"] [--messages N] [--transport mrc|rocev2]
#                                   [--partitions K] [--threads T]
set -euo pipefail
cd "$(dirname "$0")/.."
hosts="16 32 64 128 256 512 1024" messages=2 transport=mrc partitions=1 threads=0
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --messages) messages=$2; shift 2 ;;
    --transport) transport=$2; shift 2 ;;
    --partitions) partitions=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build app/mrc-sim >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "partitions $partitions, threads $threads (0: one per partition, at most one per CPU)"
printf '%6s %10s %10s %9s %8s %10s %14s %9s %8s\n' hosts sim_us events wall_s run_s "M ev/s" "wall_s/sim_ms" peak_GB goodput
for h in $hosts; do
  /usr/bin/time -f '%M' -o "$work/rss" build/app/mrc-sim --config config/bench/permutation_128.conf \
    --hosts "$h" --messages "$messages" --transport "$transport" --scenario "scale_$h" \
    --partitions "$partitions" --threads "$threads" \
    >"$work/out.json" 2>"$work/err" || { echo "hosts=$h failed:"; cat "$work/err"; exit 1; }
  /usr/bin/python3 - "$h" "$work/out.json" "$work/err" "$work/rss" <<'EOF'
import json, re, sys
h, out, err, rss = sys.argv[1:]
j = json.load(open(out))
text = open(err).read()
m = re.search(r"wall ([0-9.]+) s, ([0-9]+) events", text)
wall, events = float(m.group(1)), int(m.group(2))
run = float(re.search(r"the run alone ([0-9.]+) s", text).group(1))
sim_us = j["sim_time_us"]
kb = int(open(rss).read().split()[-1])
assert j["integrity_ok"] and j["completions_ok"], "run failed its checks"
print(f"{int(h):6d} {sim_us:10.1f} {events:10d} {wall:9.2f} {run:8.2f} {events / wall / 1e6:10.3f} "
      f"{wall / (sim_us / 1000):14.1f} {kb / 1048576:9.2f} {j['goodput_fraction']:8.3f}")
EOF
done
