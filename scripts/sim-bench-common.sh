# Sourced by the mrc-sim benches that run one scenario over many seeds.

# refuse_seed ARGS...: each run's seed is the bench's to set.
refuse_seed() {
  local x
  for x in "$@"; do
    case "$x" in --seed | --seed=*) echo "--seed: the script sets each run's seed (use --seeds)" >&2; exit 2 ;; esac
  done
}

# Builds mrc-sim and makes $work, a directory removed on exit together with
# any run still listed in $pids.
sim_bench_setup() {
  [ -f build/build.ninja ] || meson setup build >/dev/null
  ninja -C build app/mrc-sim >/dev/null
  work=$(mktemp -d)
  pids=()
  trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
}
