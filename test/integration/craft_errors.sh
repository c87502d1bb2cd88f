#!/usr/bin/env bash
# mrc-craft, bad options: each must give one error that names the option and
# a non-zero exit, quickly; never a signal (crash, uncaught exception), a
# hang, runaway memory, or a file written from options it did not read. A
# few good ones must still write their frames.
#   craft_errors.sh MRC_CRAFT
set -uo pipefail
craft=${1:?usage: craft_errors.sh MRC_CRAFT}
. "$(dirname "$0")/expect_errors.sh"
cmd=("$craft" -o "$work/out.pcap")

# Config files: a key that names no option, and a file that is no config
# (were ignored, and the default frames written).
printf 'size = 4\nsizes = 4\n' >"$work/typo.conf"
expect sizes --config "$work/typo.conf"
head -c 2000 "$craft" >"$work/binary.conf"
expect "not able to parse" --config "$work/binary.conf"

# Messages that would not fit in memory (were a bare "std::bad_alloc").
expect --size --size 4294967295 --mtu 256
expect --size --size 1073741824 1073741824 1073741824 1073741824 --mtu 8192

# Remote addresses that wrapped: -1 read as 2^64 - 1, and VAs past 2^64 as 0 on.
expect --va --va -1
expect --va --va 0xFFFFFFFFFFFFF000 --size 8192

# Malformed addresses (the trailing colon was accepted).
expect --src-mac --src-mac 02:00:00:00:00:01:
expect --src-mac --dst-mac 02:00:00:00:00:02::
expect --src-mac --src-mac 02:00:00:00:00

good() { # frames args...
  local want=$1
  shift
  local err rc=0 bad=0
  err=$(timeout 20 "$craft" -o "$work/good.pcap" "$@" 2>&1 >/dev/null) || rc=$?
  { [ $rc -ne 0 ] || ! grep -qF "wrote $want frames" <<<"$err"; } && bad=1
  record "$* writes $want frames" "$* -> rc=$rc, wanted $want frames: $(tail -n 2 <<<"$err")" $bad
}
good 2
good 2 --src-mac 2:0:0:0:0:1 --dst-mac 02:00:00:00:00:fe
good 4 --size 100 --size 8193 --mtu 4096
good 2 --va 0xFFFFFFFFFFFFE000 --size 8192
printf 'size = [100, 8193]\nemit = ["ack"]\n' >"$work/good.conf"
good 5 --config "$work/good.conf"

# Config paths CLI11 would read for ever or block on (were hangs).
mkfifo "$work/fifo"
expect "--config: /dev/zero is not a regular file" --config /dev/zero
expect "--config: $work/fifo is not a regular file" --config "$work/fifo"

# Per-plane addresses that wrapped (plane 1 of 10.0.0.255 was 10.0.0.0).
expect "--src-ip: its last byte plus 2 planes passes 255" --planes 2 --src-ip 10.0.0.255
expect "--dst-mac: plus 4 planes passes" --planes 4 --dst-mac ff:ff:ff:ff:ff:fe

finish
