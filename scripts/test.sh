#!/usr/bin/env bash
# The whole test run: installs what is missing, builds the release and the
# sanitizer (ASan + UBSan) trees, runs every suite, runs the libFuzzer target
# for a bounded number of inputs, and ends with "N passed, M failed".
# Exits non-zero on any failure. CI (.ci/run) calls exactly this.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)

passed=0 failed=0 failures=()
record() {  # name, exit code
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$1"); fi
}

# Meson prints one line per test; count those, so N and M count tests, not steps.
run_meson_tests() {  # build dir, label, meson test args...
  local dir=$1 label=$2; shift 2
  local log; log=$(mktemp)
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs" "$@" 2>&1 | tee "$log"
  local ok fail
  ok=$(grep -cE '^ *[0-9]+/[0-9]+ .* (OK|EXPECTEDFAIL) ' "$log")
  fail=$(grep -cE '^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS) ' "$log")
  passed=$((passed + ok))
  failed=$((failed + fail))
  [ "$fail" -eq 0 ] || failures+=("$label: $(grep -E '^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT|ERROR)' "$log" | awk '{print $2 " " $4}' | tr '\n' ' ')")
  [ "$ok" -gt 0 ] || { failed=$((failed + 1)); failures+=("$label: no tests ran"); }
  rm -f "$log"
}

step() { echo; echo "=== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }

step "setup"
scripts/setup.sh; record setup $?

step "build (release, static-min DPDK)"
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build; record build $?

step "build (ASan + UBSan)"
[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
  -Dbuildtype=debugoptimized -Db_lto=false >/dev/null
# Only the DPDK-free targets: EAL under ASan is not what this tree tests.
ninja -C build-asan test/unit-tests test/engine-tests test/parser-property; record build-asan $?

step "tests (release)"
run_meson_tests build release

step "tests (ASan + UBSan: unit, engine and the 1M-frame parser property test)"
ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  run_meson_tests build-asan sanitizer --suite unit --suite fuzz

step "libFuzzer (clang, ASan + UBSan)"
if command -v clang++ >/dev/null; then
  fz=build-fuzz
  mkdir -p "$fz/corpus"
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Ilib -Itest test/fuzz/fuzz_parser.cc lib/wire/packet.cc lib/wire/icrc.cc -lisal -o "$fz/fuzz-parser"
  rc=$?
  if [ $rc -eq 0 ]; then
    # Seed the corpus with real frames so the fuzzer starts past the headers.
    build/app/mrc-craft --all-opcodes --negative all --out "$fz/seed.pcap" >/dev/null 2>&1 &&
      /usr/bin/python3 - "$fz/seed.pcap" "$fz/corpus" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
off, n = 24, 0
while off + 16 <= len(data):
    incl = struct.unpack_from("<I", data, off + 8)[0]
    open(f"{sys.argv[2]}/seed{n}", "wb").write(data[off + 16:off + 16 + incl])
    off += 16 + incl; n += 1
PY
    "$fz/fuzz-parser" -runs=300000 -max_len=9200 -print_final_stats=1 "$fz/corpus" 2>&1 | tail -n 4
    rc=${PIPESTATUS[0]}
  fi
  record libfuzzer "$rc"
else
  echo "libFuzzer skipped: clang++ is not installed (scripts/setup.sh installs it)"
fi

echo
echo "total time: $((SECONDS / 60))m$((SECONDS % 60))s"
if [ ${#failures[@]} -gt 0 ]; then printf 'failed: %s\n' "${failures[@]}"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
