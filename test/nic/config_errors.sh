#!/bin/bash
# Bad configuration: one clear error that names the key, and a non-zero exit.
#   config_errors.sh MRC_NIC WORKDIR
set -uo pipefail
nic=$1
work=$2
mkdir -p "$work"
eal=(--no-huge -m 256 --no-shconf --no-pci -l 0,1 --vdev net_ring0 --log-level='*:error')
good=(--device mrc0 --plane "mrc0 port=net_ring0 ip=10.0.0.1")
failures=0

expect() { # want_in_message args...
  local want=$1
  shift
  local out rc=0
  out=$(timeout 20 "$nic" "${eal[@]}" -- "$@" 2>&1 >/dev/null) || rc=$?
  if [ $rc -eq 0 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: $* -> rc=$rc, wanted an error naming '$want', got: $(tail -n 2 <<<"$out")"
    failures=$((failures + 1))
  else
    echo "ok: '$want' -> rc=$rc: $(grep -F -- "$want" <<<"$out" | head -n 1)"
  fi
}

expect "--plane" --device mrc0 --plane "mrc0 port=net_nope ip=10.0.0.1"
expect "--plane" --device mrc0 --plane "mrc0 port=net_ring0 ip=10.0.0.300"
expect "--plane" --device mrc0 --plane "mrc0 port=net_ring0 ip=10.0.0.1 mac=zz:00:00:00:00:01"
expect "--plane" --device mrc0 --plane "mrc9 port=net_ring0 ip=10.0.0.1"
expect "--plane" --device mrc0
expect "--device" --device "bad-name" --plane "bad-name port=net_ring0 ip=10.0.0.1"
# Would be a second "columns" key in /mrc/devices, beside the real one.
expect "--device 'columns'" --device columns --plane "columns port=net_ring0 ip=10.0.0.1" --duration 0.1
# Would pass for /mrc/qps's count of QPNs left out.
expect "--device 'omitted'" --device omitted --plane "omitted port=net_ring0 ip=10.0.0.1" --duration 0.1
expect "--ev-values" "${good[@]}" --ev-values 70000
expect "--ev-values" "${good[@]}" --ev-values 9-3
expect "--ev-values: 40001 EVs" "${good[@]}" --ev-values 0-40000
expect "--fault" "${good[@]}" --fault "mrc0 drop=2"
expect "--fault" "${good[@]}" --fault "mrc0:7 drop=0.1"
expect "--link-event" "${good[@]}" --link-event "mrc0:0 sideways at-ms=1"
# Taken before, silently: no time, keys of another kind, a flap ending before it starts, a key twice.
expect "at-ms is required" "${good[@]}" --link-event "mrc0:0 down"
expect "belong to flap" "${good[@]}" --link-event "mrc0:0 down at-ms=5 period-ms=5"
expect "until-ms must come after" "${good[@]}" --link-event "mrc0:0 flap at-ms=10 period-ms=5 until-ms=1"
expect "given twice" "${good[@]}" --fault "mrc0 drop=1 drop=0"
# Any number read as true before.
expect "--host: Value 7" "${good[@]}" --host 7
expect "--nscc-disable-qa: Value 2" "${good[@]}" --nscc-disable-qa=2
expect "--fabric-trims: Value 2" "${good[@]}" --fabric-trims=2
expect "--capture" "${good[@]}" --capture /etc/hostname
expect "--lcores" "${good[@]}" --lcores "mrc0=0"
expect "--lcores" "${good[@]}" --lcores "mrc0=5"
expect "--mtu" "${good[@]}" --mtu 1000
expect "--mtu: 4096.0 is not one of" "${good[@]}" --mtu 4096.0
expect "--timeout" "${good[@]}" --timeout 40
expect "--probe-confirmations" "${good[@]}" --probe-confirmations 0
expect "--probe-interval-ns" "${good[@]}" --probe-interval-ns 0
expect "--ev-active-per-plane: 257 is more than the 256 EVs" "${good[@]}" --ev-active-per-plane 257
expect "--probe-interval-max-ns: must be at least" "${good[@]}" --probe-interval-ns 100000 --probe-interval-max-ns 50000
expect "--workload" "${good[@]}" --workload write
expect "--wl-from" "${good[@]}" --workload write --wl-from mrc0 --wl-to mrc0 --wl-bytes 1M
# CLI11 and stod read "nan" and "inf" as numbers, and NaN passes range checks.
expect "--wl-seconds" "${good[@]}" --wl-seconds nan
expect "--plane-rate-gbps" "${good[@]}" --plane-rate-gbps nan
expect "--fault" "${good[@]}" --fault "mrc0 drop=nan"
expect "--fault" "${good[@]}" --fault "mrc0 delay-us=1e30"
expect "--link-event" "${good[@]}" --link-event "mrc0:0 down at-ms=inf"
expect "--timeout" "${good[@]}" --timeout 25
expect "--max-wimm" "${good[@]}" --max-wimm 4000000000
# Values that ran as others: -1 as 2^64 - 1 (bytes: a workload without end),
# rates that broke NSCC's window (an integer cast overflowed, or one MTU).
expect "--wl-bytes" "${good[@]}" --duration 0.1 --wl-bytes -1
expect "--seed" "${good[@]}" --duration 0.1 --seed -1
expect "--plane-rate-gbps" "${good[@]}" --duration 0.1 --plane-rate-gbps 1e300
expect "--lcore-rate-gbps" "${good[@]}" --duration 0.1 --lcore-rate-gbps 1e-9
expect "--wl-size x --wl-depth" --add-vdev net_ring9 --device mrc0 --device mrc1 --plane "mrc0 port=net_ring0 ip=10.0.0.1" \
  --plane "mrc1 port=net_ring9 ip=10.0.0.2" --workload write --wl-from mrc0 --wl-to mrc1 --wl-size 1G \
  --wl-depth 4096 --sq-depth 4096 --wl-seconds 1
# EAL refusing its arguments is an error too, not a crash in the cleanup after it.
rc=0
out=$(timeout 20 "$nic" --no-such-eal-option 2>&1 >/dev/null) || rc=$?
if [ $rc -eq 0 ] || [ $rc -ge 124 ] || ! grep -qF "EAL initialisation failed" <<<"$out"; then
  echo "FAIL: bad EAL arguments -> rc=$rc, $(tail -n 1 <<<"$out")"
  failures=$((failures + 1))
else
  echo "ok: bad EAL arguments -> rc=$rc: $(grep -F 'EAL initialisation failed' <<<"$out")"
fi
# `mrc-nic -- --help` (as the README puts it) answers without EAL, which needs
# hugepages unless told --no-huge: the help must not depend on them.
rc=0
out=$(timeout 20 "$nic" -- --help 2>&1) || rc=$?
if [ $rc -ne 0 ] || ! grep -qF -- "--wl-connect" <<<"$out" || grep -qF "EAL:" <<<"$out"; then
  echo "FAIL: mrc-nic -- --help -> rc=$rc, $(grep -v '^ ' <<<"$out" | tail -n 2)"
  failures=$((failures + 1))
else
  echo "ok: mrc-nic -- --help -> rc=$rc, $(grep -c -- '^  --' <<<"$out") options, no EAL"
fi
printf 'device = ["mrc0"]\nplane = ["mrc0 port=net_ring0 ip=10.0.0.1"]\nmtu = 4096\nno-such-key = 1\n' >"$work/bad.conf"
expect "no-such-key" --config "$work/bad.conf"
printf 'device = ["mrc0"]\nplane = ["mrc0 port=net_ring0 ip=10.0.0.1"]\nretry-exp = 26\n' >"$work/bad2.conf"
expect "retry-exp" --config "$work/bad2.conf"

# A worker that cannot be launched (forced under gdb: the EAL offers no way
# to hold a configured lcore busy) is a clear error and a non-zero exit, not
# std::terminate. The first rte_eal_remote_launch is the EAL's own (lcore 1).
if command -v gdb >/dev/null; then
  rc=0
  out=$(timeout 60 gdb -q -batch -ex 'set confirm off' -ex 'break rte_eal_remote_launch' -ex 'ignore 1 1' -ex run \
    -ex 'return (int)-16' -ex continue -ex 'info program' --args "$nic" "${eal[@]}" -- "${good[@]}" --duration 0.2 \
    --link-wait 0 2>&1) || rc=$?
  if [ $rc -ne 0 ] || ! grep -qF "mrc-nic: cannot launch a worker on lcore 1" <<<"$out" ||
    ! grep -qF "exited with code 01" <<<"$out"; then
    echo "FAIL: worker launch failure -> rc=$rc: $(grep -E 'mrc-nic:|terminate|exited|signal' <<<"$out" | tail -n 3)"
    failures=$((failures + 1))
  else
    echo "ok: worker launch failure -> $(grep -F 'cannot launch' <<<"$out")"
  fi
else
  echo "skip: worker launch failure (no gdb)"
fi

# And a good configuration starts and stops cleanly.
if ! "$nic" "${eal[@]}" -- "${good[@]}" --duration 0.2 --link-wait 0 >/dev/null 2>"$work/good.log"; then
  echo "FAIL: a good configuration did not run: $(tail -n 3 "$work/good.log")"
  failures=$((failures + 1))
fi
# A period shorter than the main loop's printed a row on every pass, for ever behind.
expect "--stats-interval: 0 (no table) or at least 0.01 s" "${good[@]}" --stats-interval 1e-300 --duration 0.2
# Config paths CLI11 would read for ever or block on (were hangs).
rm -f "$work/fifo" && mkfifo "$work/fifo"
expect "--config: /dev/zero is not a regular file" --config /dev/zero
expect "--config: $work/fifo is not a regular file" --config "$work/fifo"

[ $failures -eq 0 ] && echo "PASS: every bad configuration named its key" || exit 1
