#!/usr/bin/env bash
# Benchmarks (not tests): prints the figures recorded in BENCHMARKS.md.
# usage: scripts/bench.sh [wire|engine|nic|host]
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
  *) echo "unknown benchmark: $what" >&2; exit 2 ;;
esac
