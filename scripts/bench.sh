#!/usr/bin/env bash
# Benchmarks (not tests): prints the figures recorded in BENCHMARKS.md.
# usage: scripts/bench.sh [wire]   (more benchmarks join as the datapath lands)
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
  *) echo "unknown benchmark: $what" >&2; exit 2 ;;
esac
