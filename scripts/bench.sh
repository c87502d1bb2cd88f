#!/usr/bin/env bash
# Benchmarks (not tests): prints the figures recorded in BENCHMARKS.md.
# usage: scripts/bench.sh [wire|engine|nic|host|sim|sim-seeds|sim-scale]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
what=${1:-wire}
case "$what" in
  wire)
    echo "== wire library, one core, 4 KB payload"
    build/test/wire-bench --rounds 9 --iters 300000
    echo
    echo "== wire library, one core, 1 KB payload"
    build/test/wire-bench --rounds 9 --iters 300000 --payload 1024
    ;;
  engine)
    echo "== protocol engine, both ends on one core, 4 KB MTU"
    build/test/engine-bench --packets 1000000
    echo
    echo "== protocol engine, 1 KB MTU"
    build/test/engine-bench --packets 1000000 --mtu 1024
    ;;
  nic)
    echo "== mrc-nic over memif against dpdk-testpmd on the same vdev, one core per side"
    scripts/bench-nic.sh --seconds 5 --rounds 3
    ;;
  host)
    echo "== host programs (mrc-perf on lib_mrc.so) against mrc-nic's own workload, same memif pair"
    scripts/bench-host.sh --seconds 5 --rounds 2
    ;;
  sim)
    echo "== mrc-sim: the issue's scenarios (config/bench), both transports"
    summary=$(cat <<'PY'
import json, sys
j = json.load(sys.stdin)
extra = ""
if j.get("recovery_us") is not None:
    extra += " recovery_us %s" % j["recovery_us"]
if j.get("victim") and j["victim"].get("fraction") is not None:
    extra += " victim %.3f of fair share" % j["victim"]["fraction"]
print("%-28s %-7s %7.1f Tb/s (%.3f of ideal) retx %d integrity %s completions %s%s" % (
    j["scenario"], j["transport"], j["goodput_gbps"] / 1000, j["goodput_fraction"],
    j["retransmitted_packets"], j["integrity_ok"], j["completions_ok"], extra))
PY
)
    for c in config/bench/*.conf; do
      for t in mrc rocev2; do
        build/app/mrc-sim --config "$c" --transport "$t" | /usr/bin/python3 -c "$summary"
      done
    done
    ;;
  sim-seeds)
    echo "== mrc-sim: permutation and 0.1 % loss, 128 hosts, seeds 1-10"
    scripts/bench-sim-seeds.sh
    ;;
  sim-scale)
    echo "== mrc-sim: cost against the number of hosts"
    scripts/bench-sim-scale.sh
    ;;
  *) echo "unknown benchmark: $what" >&2; exit 2 ;;
esac
