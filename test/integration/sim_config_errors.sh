#!/usr/bin/env bash
# mrc-sim, bad options: each must give one error that names the option and a
# non-zero exit, quickly; never a signal (crash, uncaught exception), a hang,
# runaway memory, or a run that silently means nothing. A few good ones must
# still run.
#   sim_config_errors.sh MRC_SIM
set -uo pipefail
sim=${1:?usage: sim_config_errors.sh MRC_SIM}
cmd=("$sim")
. "$(dirname "$0")/expect_errors.sh"

# Failure targets outside the fabric (were SIGSEGV or std::out_of_range).
expect --fail-plane --fail-plane 5 --fail-at-us 10
expect --fail-link --fail-link host:0:99 --fail-at-us 10
expect --fail-link --fail-link host:7:0 --fail-at-us 10
expect --fail-link --fail-link fabric:0:999 --fail-at-us 10
expect --fail-switch --fail-switch leaf:0:99 --fail-at-us 10
expect --fail-switch --fail-switch spine:3:99 --fail-at-us 10
expect --fail-switch --fail-switch spine:3:99 --fail-at-us 10 --planes 4
# Malformed or incomplete failures (were silently ignored).
expect --fail-link --fail-link garbage --fail-at-us 10
expect --fail-link --fail-link host:0:1junk --fail-at-us 10
expect --fail-switch --fail-switch zzz --fail-at-us 10
expect --fail-switch --fail-switch router:0:0 --fail-at-us 10
expect --fail-at-us --fail-plane 0
expect --fail-at-us --fail-at-us 10
expect --restore-at-us --fail-plane 0 --fail-at-us 50 --restore-at-us 20
expect --fail-at-us --fail-plane 0 --fail-at-us 2000 --duration-us 1000
expect --fail-plane --fail-plane 0 --fail-link host:0:0 --fail-at-us 10
# Gray failures: a share of frames, of a target, with no port to report on.
expect --fail-loss --fail-loss 0.1
expect --fail-loss --fail-plane 0 --fail-at-us 10 --fail-loss 1.5
expect --fail-loss --fail-plane 0 --fail-at-us 10 --fail-loss nan
expect --fail-loss --fail-plane 0 --fail-at-us 10 --fail-loss -0.1
expect --port-status --fail-plane 0 --fail-at-us 10 --fail-loss 0.1 --port-status true
# Sizes that allocated gigabytes or ran away (ulimit -v above catches the former).
expect --hosts --hosts 4000000000
expect --spines --spines 4000000000
expect --spines --hosts 65534 --hosts-per-leaf 1 --spines 4096
expect --oversubscription --oversubscription 1e-9
expect --oversubscription --hosts-per-leaf 65534 --oversubscription 0.001
expect --flap-period-us --fail-plane 0 --fail-at-us 10 --flap-period-us 0.000001
expect --message-bytes --message-bytes 4294967295
expect --hosts --workload alltoall --hosts 65534
expect --sample-us --sample-us 0.0000001 --duration-us 100
expect --sample-us --loss 1 --sample-us 0.01 --duration-us 1000000 --timeline "$work/timeline.csv"
# Within the bounds but beyond the 4 GB above (was std::terminate on bad_alloc).
expect --message-bytes --qps-per-pair 2 --outstanding 256 --message-bytes 16777216 --payload bytes
# Not finite, or out of range.
expect --duration-us --duration-us -5
expect --duration-us --duration-us nan
expect --duration-us --duration-us inf
expect --loss --loss nan
expect --loss --loss 2
expect --corrupt --corrupt 5
expect --duplicate --duplicate -0.5
expect --sample-us --sample-us nan
expect --sample-us --sample-us 0
expect --fail-at-us --fail-plane 0 --fail-at-us nan
expect --reorder-window-growth --reorder-window-growth nan
expect --probe-confirmations --probe-confirmations 0
expect --probe-confirmations --probe-confirmations 65
expect --probe-interval-ns --probe-interval-ns 10
expect "--evs: 4 EVs cannot cover 8 planes" --planes 8 --evs 4
expect "--ev-active-per-plane: 5 is more than the 4 EVs" --planes 8 --evs 32 --ev-active-per-plane 5
expect "--probe-interval-max-ns: must be at least" --probe-interval-ns 100000 --probe-interval-max-ns 50000
expect --host-rate-gbps --host-rate-gbps 0
expect --host-rate-gbps --host-rate-gbps -1
expect --fabric-delay-ns --fabric-delay-ns inf
# Meaningless runs that exited 0, and errors that named no option.
expect --host-queue-bytes --host-queue-bytes 100
expect --host-queue-bytes --host-queue-bytes 0
expect --fabric-queue-bytes --fabric-queue-bytes 4096
expect --trim-bytes --trim-bytes 100
expect --trim-bytes --mtu 8192 --trim-bytes 8192
expect --messages --messages 0
expect --hosts --hosts 0
expect --hosts --hosts 1
expect --timeout --timeout 40
expect --retry-exp --retry-exp 30
expect --evs --evs 100000
expect --message-bytes --message-bytes 0
expect --incast-degree --incast-degree 0
expect --scenario --scenario 'a"b'
# Values that ran as others: a negative seed as 2^64 - 1, no EVs as one, an
# ECN max below the min as the min.
expect --seed --seed -1
expect --evs --evs 0
expect "--victim: Value 2" --victim 2
expect "--nscc-disable-qa: Value 2" --nscc-disable-qa=2
expect --ecn-max-bytes --ecn-min-bytes 65536 --ecn-max-bytes 32768
# From a config file too.
printf 'loss = nan\n' >"$work/nan.conf"
expect loss --config "$work/nan.conf"
printf 'fail-link = "host:0:99"\nfail-at-us = 10\n' >"$work/target.conf"
expect --fail-link --config "$work/target.conf"
# Keys that name no option, and a file that is no config (were ignored: the run used the defaults).
printf 'hosts = 4\nhostz = 64\n' >"$work/typo.conf"
expect hostz --config "$work/typo.conf"
printf '[sim]\nhosts = 4\n' >"$work/section.conf"
expect "parse sim" --config "$work/section.conf"
head -c 2000 "$sim" >"$work/binary.conf"
expect "not able to parse" --config "$work/binary.conf"

# Good options still run, failures included.
good() {
  local rc=0 bad=0
  timeout 20 "$sim" "$@" >"$work/out.json" 2>"$work/err" || rc=$?
  { [ $rc -ne 0 ] || ! grep -q '"completions_ok":true' "$work/out.json"; } && bad=1
  record "$* runs" "$* -> rc=$rc, wanted a complete run: $(tail -n 2 "$work/err")" $bad
}
good
good --hosts 32 --hosts-per-leaf 8 --workload permutation --planes 2 --message-bytes 65536 \
  --fail-link fabric:1:31 --fail-at-us 5 --restore-at-us 30
good --hosts 32 --hosts-per-leaf 8 --planes 2 --message-bytes 65536 \
  --fail-switch spine:1:7 --fail-at-us 5 --flap-period-us 10 --restore-at-us 60
good --hosts 32 --hosts-per-leaf 8 --planes 2 --message-bytes 65536 \
  --fail-link host:1:3 --fail-at-us 5 --fail-loss 0.3 --flap-period-us 10 --restore-at-us 60
good --timeout -1 --retry-exp 25 --evs 32768 --host-queue-bytes 4228
good --hosts 32 --hosts-per-leaf 8 --workload incast --trim-bytes 4228

# A base RTT or ACK timeout under the fabric's own round trip runs, but says
# why it crawls (0.6 % of ideal, silently, before); the defaults say nothing.
warns() { # want_warning(0|1) args...
  local want=$1 rc=0 warned=0
  shift
  timeout 20 "$sim" "$@" --duration-us 20 >/dev/null 2>"$work/err" || rc=$?
  grep -q -- "warning: " "$work/err" && warned=1
  record "$* -> rc=$rc, warned=$warned" "$* -> rc=$rc, warned=$warned, wanted $want: $(tail -n 2 "$work/err")" \
    $([ $rc -eq 0 ] && [ $warned -eq "$want" ] && echo 0 || echo 1)
}
warns 1 --base-rtt-ns 500
warns 0
warns 0 --base-rtt-ns 500 --transport rocev2
warns 1 --timeout 1
warns 0 --timeout 2

# Config paths CLI11 would read for ever or block on (were hangs).
mkfifo "$work/fifo"
head -c 2000000 /dev/zero >"$work/huge.conf"
expect "--config: /dev/zero is not a regular file" --config /dev/zero
expect "--config: $work/fifo is not a regular file" --config "$work/fifo"
expect "--config: $work/huge.conf has 2000000 bytes" --config "$work/huge.conf"

finish
