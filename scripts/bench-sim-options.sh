#!/usr/bin/env bash
# One mrc-sim scenario under two sets of options, seed by seed. A seed moves
# a run by several points, so the two are compared seed against seed: prints
# each seed's fraction of ideal and retransmits under A and B, then the
# means, the paired difference's mean and spread, and how many seeds B won.
# Two runs at a time; fails if any run breaks integrity or completions.
# usage: scripts/bench-sim-options.sh [--seeds "1 2 ... 10"] --a "OPTS" --b "OPTS" -- mrc-sim args
#   e.g. --a "--probe-confirmations 1" --b "--probe-confirmations 3" --
#        --config config/bench/gray_plane_128.conf --fail-loss 0.2
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/sim-bench-common.sh
seeds="1 2 3 4 5 6 7 8 9 10" a="" b=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds | --a | --b) [ $# -ge 2 ] || { echo "$1 needs a value" >&2; exit 2; } ;;&
    --seeds) seeds=$2; shift 2 ;;
    --a) a=$2; shift 2 ;;
    --b) b=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "${seeds// /}" ] || { echo "--seeds: no seed given" >&2; exit 2; }
[ $# -gt 0 ] || { echo "give the scenario after --, e.g. -- --config config/bench/permutation_128.conf" >&2; exit 2; }
# $a and $b are split into words on purpose: each holds several options.
# shellcheck disable=SC2086
refuse_seed "$@" $a $b
sim_bench_setup
for s in $seeds; do
  pids=()
  # $a and $b are split into words on purpose: each holds several options.
  # shellcheck disable=SC2086
  build/app/mrc-sim "$@" $a --seed "$s" >"$work/a.$s.json" 2>"$work/a.$s.err" &
  pids+=($!)
  # shellcheck disable=SC2086
  build/app/mrc-sim "$@" $b --seed "$s" >"$work/b.$s.json" 2>"$work/b.$s.err" &
  pids+=($!)
  for side in a b; do
    wait "${pids[0]}" || { echo "seed $s: run $side failed: $(tail -n 3 "$work/$side.$s.err")" >&2; exit 1; }
    pids=("${pids[@]:1}")
  done
done
/usr/bin/python3 - "$work" "$a" "$b" $seeds <<'PY'
import json, statistics, sys
work, opt_a, opt_b, seeds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
print(f"A: {opt_a or '(defaults)'}\nB: {opt_b or '(defaults)'}")
print(f"{'seed':>5} {'A':>7} {'B':>7} {'B-A':>7} {'A rtx':>9} {'B rtx':>9}")
fa, fb, ra, rb = [], [], [], []
for s in seeds:
    ja, jb = (json.load(open(f"{work}/{side}.{s}.json")) for side in "ab")
    for side, j in (("A", ja), ("B", jb)):
        assert j["integrity_ok"] and j["completions_ok"], f"seed {s}: run {side} failed its checks"
    fa.append(ja["goodput_fraction"]); fb.append(jb["goodput_fraction"])
    ra.append(ja["retransmitted_packets"]); rb.append(jb["retransmitted_packets"])
    print(f"{s:>5} {fa[-1]:7.3f} {fb[-1]:7.3f} {fb[-1] - fa[-1]:+7.3f} {ra[-1]:9d} {rb[-1]:9d}")
d = [y - x for x, y in zip(fa, fb)]
sd = statistics.stdev(d) if len(d) > 1 else 0.0
print(f"mean {statistics.mean(fa):.4f} (A) {statistics.mean(fb):.4f} (B); B-A {statistics.mean(d):+.4f}, "
      f"sd {sd:.4f}, B ahead on {sum(x > 0 for x in d)} of {len(d)} seeds; "
      f"retransmits {statistics.mean(ra):.0f} (A) {statistics.mean(rb):.0f} (B)")
PY
