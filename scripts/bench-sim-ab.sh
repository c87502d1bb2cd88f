#!/usr/bin/env bash
# Two mrc-sim builds on the same run, at the same time, one on each CPU, the
# CPUs swapped every round. This VM's speed swings by 2x from minute to
# minute, so runs one after the other compare phases more than builds; runs
# side by side share the phase (and the memory bus, which both then load).
# Prints each round's wall times, then the means, and fails if the two
# builds' outputs differ when --same is given.
# --run-alone times the event loop alone (mrc-sim's "the run alone"), not
# setup, whose page zeroing is most of a short large run's wall time.
# --in-turn runs the two one after the other instead: side by side they share
# the caches and the memory bus, which a change in cache misses needs alone.
# usage: scripts/bench-sim-ab.sh --base BIN [--new BIN] [--rounds N] [--same] [--run-alone] [--in-turn]
#                                [-- mrc-sim args]
#   default mrc-sim args: --config config/bench/permutation_128.conf
# To build a base: git worktree add /tmp/base <rev> && (cd /tmp/base && meson setup build &&
#   ninja -C build app/mrc-sim), then --base /tmp/base/build/app/mrc-sim.
set -euo pipefail
cd "$(dirname "$0")/.."
base="" new=build/app/mrc-sim rounds=4 same=0 what=wall in_turn=0
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --same) same=1; shift ;;
    --run-alone) what="run alone"; shift ;;
    --in-turn) in_turn=1; shift ;;
    --) shift; break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "$base" ] || { echo "--base BIN is required" >&2; exit 2; }
[ $# -gt 0 ] || set -- --config config/bench/permutation_128.conf
[ "$in_turn" = 1 ] || [ "$(nproc)" -ge 2 ] || { echo "needs two CPUs (or --in-turn)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wall() { grep -o "$what [0-9.]* s" "$1" | awk '{print $(NF - 1)}'; }
walls=""
for i in $(seq "$rounds"); do
  ca=$((i % 2)) cb=$(((i + 1) % 2))
  if [ "$in_turn" = 1 ]; then
    # Which goes first alternates, as the CPUs do side by side.
    ca=all cb=all
    for which in $([ $((i % 2)) = 1 ] && echo "a b" || echo "b a"); do
      bin=$base; [ "$which" = b ] && bin=$new
      "$bin" "$@" >"$work/$which.json" 2>"$work/$which.err" || { cat "$work/$which.err" >&2; exit 1; }
    done
  else
    taskset -c "$ca" "$base" "$@" >"$work/a.json" 2>"$work/a.err" &
    pid=$!
    taskset -c "$cb" "$new" "$@" >"$work/b.json" 2>"$work/b.err" || { cat "$work/b.err" >&2; exit 1; }
    wait "$pid" || { cat "$work/a.err" >&2; exit 1; }
  fi
  a=$(wall "$work/a.err") b=$(wall "$work/b.err")
  echo "round $i: base ${a} s (cpu $ca)   new ${b} s (cpu $cb)"
  walls="$walls $a $b"
  # Fields added since (sim_frame_events, session 14) are not a difference in the run.
  if [ "$same" = 1 ] && ! cmp -s <(sed 's/,"sim_frame_events":[0-9]*//' "$work/a.json") \
                              <(sed 's/,"sim_frame_events":[0-9]*//' "$work/b.json"); then
    echo "outputs differ" >&2
    exit 1
  fi
done
echo "$walls" | awk '{ for (i = 1; i <= NF; i += 2) { a += $i; b += $(i + 1) }
  printf "mean: base %.2f s   new %.2f s   new/base %.3f\n", a / (NF / 2), b / (NF / 2), b / a }'
