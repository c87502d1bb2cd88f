#!/usr/bin/env bash
# mrcctl, bad options it can judge without a NIC: each must give one error
# that names the option and a non-zero exit, quickly; never a signal, a hang,
# or a command run without an option it was given.
#   mrcctl_errors.sh MRCCTL
set -uo pipefail
ctl=${1:?usage: mrcctl_errors.sh MRCCTL}
cmd=("$ctl")
. "$(dirname "$0")/expect_errors.sh"
# No devices: the commands below must fail before they look for one.
export MRC_RUN_DIR=$work/run

# Config files: keys and sections that name no option (were ignored).
printf 'jsn = true\n' >"$work/typo.conf"
expect jsn --config "$work/typo.conf" dev
printf '[ev.add]\nmin-activ = 3\n' >"$work/section.conf"
expect ev.add.min-activ --config "$work/section.conf" dev
printf '[ev.ad]\nmin-active = 3\n' >"$work/command.conf"
expect ev.ad --config "$work/command.conf" dev

# Times that meant "for ever" (monitor followed events until killed, probe
# slept 46 days between rounds).
expect --seconds monitor mrc0 --seconds nan
expect --seconds monitor mrc0 --seconds -1
expect --seconds monitor mrc0 --seconds inf
expect --seconds monitor mrc0 --seconds 1e300
expect --interval-ms probe mrc0 --dgid 10.0.0.2 --ev 49152 --count 2 --interval-ms 4000000000

# NSCC parameters the device would have taken as NaN or inf (it does not
# check fi or fi_scale), and profile ids of -1 taken as 2^64 - 1.
expect --fi cc add mrc0 1 --fi nan
expect --fi-scale cc set mrc0 1 --fi-scale 1e39
expect --eta cc add mrc0 1 --eta inf
expect --gamma cc add mrc0 1 --gamma nan
expect ID cc add mrc0 -1
expect --fmt ev add mrc0 1 --fmt -1 --mode exp --evs 1
expect --profile monitor mrc0 --profile 1,-2

# And a good config still reads.
printf 'json = true\n[ev.add]\nmin-active = 3\n' >"$work/good.conf"
rc=0 bad=0
out=$(timeout 20 "$ctl" --config "$work/good.conf" dev 2>&1) || rc=$?
{ [ $rc -ne 0 ] || ! grep -q '"devices": *\[\]' <<<"$out"; } && bad=1
record "a good config reads" "a good config -> rc=$rc: $(tail -n 2 <<<"$out")" $bad

# Config paths CLI11 would read for ever or block on (were hangs).
mkfifo "$work/fifo"
expect "--config: /dev/zero is not a regular file" --config /dev/zero dev
expect "--config: $work/fifo is not a regular file" --config "$work/fifo" dev

finish
