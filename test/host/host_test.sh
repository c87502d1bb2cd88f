#!/bin/bash
# Host programs on mrc-nic devices, through lib_mrc.so as a user installs it.
#   host_test.sh CASE WORKDIR BUILD_DIR SOURCE_DIR
# CASE:
#   api       test/host/api_test.c, compiled as C against only the installed
#             mrc.h, mrc_ctl.h, lib_mrc.so and -libverbs (the OCP examples'
#             way), passes its checks between two devices, then again on
#             devices whose queue limits are not powers of two
#   layout    the installed headers match the published API's layouts
#   hostile   a client breaking the ABI (bad requests, unsealed memory,
#             garbage ring indices) is refused and counted, and a
#             well-behaved client run after it passes untouched
#   sigkill   an mrc-perf client killed with SIGKILL mid-transfer has its
#             QPs, CQs and MRs reclaimed; the device keeps serving
#   nic-death test/host/death_test.c: the NIC is killed under a client; a
#             blocked mrc_get_cq_event and later calls fail promptly (EIO)
#   nic-stall the same program with the NIC stopped (SIGSTOP): a control call
#             fails with ETIMEDOUT after MRC_CMD_TIMEOUT_MS, the device then
#             counts as failed; resumed, the NIC reclaims the failed client
#             and serves a new one
#   nic-busy  the same program with the NIC busy: six clients' QPs wait out
#             ARP lookups nobody answers, and a quick call queued behind them
#             succeeds, since the NIC shows signs of life meanwhile
#   nic-restart two mrc-nic processes over memif: the responder's NIC is
#             killed and started again (new MACs); mrc-perf between the same
#             devices works again (memif redial, ARP announcements)
#   perf      mrc-perf sweeps 1 B .. 4 MiB (WRITE, then WRITE_IMM) with
#             integrity checks, and a latency sweep
#   ctl       test/host/ctl_test.c, a C controller on mrc_ctl.h built against
#             the installed SDK: GEN EV profile expansion, NSCC profile, EV
#             deny, EV events after a plane fails under load, probes
#   nic-fds   test/host/fds_test.c against an mrc-nic with a low descriptor
#             limit: a request whose descriptors it cannot take fails with
#             EMFILE and the client keeps its connection; a new client is
#             refused with EMFILE at once (it used to wait for ever while the
#             control thread spun); both counted, and both work once freed
#   ctl-eperm the same program without CAP_NET_ADMIN: every controller call
#             that changes something is refused with EPERM
set -euo pipefail
# Programs find lib_mrc.so the way users build them (rpath to the installed SDK), not
# through the LD_LIBRARY_PATH meson sets for tests.
unset LD_LIBRARY_PATH

case_name=$1
work=$2
build=$3
src=$(cd "$4" && pwd)
mkdir -p "$work"
work=$(cd "$work" && pwd)
build=$(cd "$build" && pwd)
py=/usr/bin/python3
nic=$build/app/mrc-nic
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    pkill -KILL -P "$p" 2>/dev/null || true
    kill -KILL "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  [ -f "$work/nic.err" ] && tail -30 "$work/nic.err" >&2
  exit 1
}

# The installed SDK: headers and lib_mrc.so in one folder.
sdk=$work/sdk
install_sdk() {
  rm -rf "$work/destdir"
  meson install -C "$build" --no-rebuild --quiet --destdir "$work/destdir" >/dev/null
  local lib
  lib=$(find "$work/destdir" -name lib_mrc.so -print -quit)
  [ -n "$lib" ] || fail "meson install put no lib_mrc.so under $work/destdir"
  sdk=$(dirname "$lib")
  for h in mrc.h mrc_api_ver.h mrc_ctl.h mrc_ctl_api_ver.h; do
    [ -f "$sdk/$h" ] || fail "meson install put no $h next to lib_mrc.so"
  done
}

export MRC_RUN_DIR=$work/run
prefix="mrchost$$"
export MRC_TELEMETRY_PREFIX=$prefix # ctl_test reads per-EV counters through telemetry

start_nic() {
  rm -rf "$MRC_RUN_DIR"
  timeout 600 "$nic" --no-huge -m 1024 --no-pci --file-prefix "$prefix" -l 0,1 --log-level='*:warning' -- \
    --config "$src/config/host/rings.conf" "$@" >"$work/nic.out" 2>"$work/nic.err" &
  pids+=($!)
  for _ in $(seq 100); do
    [ -S "$MRC_RUN_DIR/mrc0.sock" ] && [ -S "$MRC_RUN_DIR/mrc1.sock" ] && return 0
    sleep 0.1
  done
  fail "mrc-nic did not start serving mrc0 and mrc1"
}

wait_socket() { # path tenths: until the socket exists, or fail (status 1)
  for _ in $(seq "$2"); do
    [ -S "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

telemetry() { # command
  echo "$1" | $py /usr/bin/dpdk-telemetry.py -f "$prefix" 2>/dev/null | $py -c '
import json, sys
text = sys.stdin.read()
start = text.find("{")
print(json.dumps(json.loads(text[start:text.rfind("}") + 1])) if start >= 0 else "{}")'
}

counter() { # command key
  telemetry "$1" | $py -c "import json,sys; d=json.load(sys.stdin); v=list(d.values())[0] if d else {}; print(v.get('$2', -1))"
}

build_api_test() {
  install_sdk
  # Exactly how the OCP examples build: -I<sdk>, <sdk>/lib_mrc.so with an rpath, then libibverbs.
  gcc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$sdk" -o "$work/api_test" "$src/test/host/api_test.c" \
    -L"$sdk" -Wl,-rpath,"$sdk" "$sdk/lib_mrc.so" -libverbs || fail "api_test.c does not build against the installed SDK"
}

run_api_test() { # label
  MRC_QUIET=1 timeout 120 "$work/api_test" mrc0 mrc1 10.0.0.1 10.0.0.2 >"$work/api_$1.txt" 2>&1 || {
    grep -v '^ok' "$work/api_$1.txt" >&2
    fail "api_test ($1)"
  }
  tail -1 "$work/api_$1.txt"
}

case $case_name in
  api)
    build_api_test
    start_nic
    run_api_test first
    # Queue limits that are not powers of two: what the device reports is
    # still granted.
    old=$(pgrep -P "${pids[-1]}" || true)
    cleanup
    for _ in $(seq 100); do
      [ -n "$old" ] && kill -0 "$old" 2>/dev/null || break
      sleep 0.1
    done
    wait "${pids[@]}" 2>/dev/null || true
    pids=()
    start_nic --sq-depth 1000 --rq-depth 100
    run_api_test odd-depths
    ;;
  layout)
    install_sdk
    gcc -std=gnu11 -Wall -Wextra -Werror -I"$sdk" -c -o "$work/layout.o" "$src/test/api/layout_check.c" ||
      fail "the installed headers do not match the published API"
    g++ -std=c++20 -Wall -Wextra -Werror -x c++ -fsyntax-only -I"$sdk" "$src/test/api/layout_check.c" ||
      fail "the installed headers do not match the published API (C++)"
    echo "layout: installed headers match"
    # A program whose only verbs call is one lib_mrc.so passes on, linked the
    # README's way (gcc's default --as-needed drops -libverbs): lib_mrc.so
    # must bring the real libibverbs itself.
    cat >"$work/status_str.c" <<'EOF'
#include <infiniband/verbs.h>
#include <stdio.h>
int main(void) { printf("%s|%s\n", ibv_wc_status_str(IBV_WC_SUCCESS), ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR)); return 0; }
EOF
    gcc -std=gnu11 -Wall -Werror -I"$sdk" -o "$work/status_str" "$work/status_str.c" -Wl,-rpath,"$sdk" "$sdk/lib_mrc.so" \
      -libverbs || fail "status_str.c does not build against the installed SDK"
    got=$("$work/status_str")
    [ "$got" = "success|remote access error" ] ||
      fail "ibv_wc_status_str through lib_mrc.so gave '$got' (libibverbs not loaded?)"
    echo "layout: lib_mrc.so brings libibverbs ($got)"
    ;;
  hostile)
    build_api_test
    start_nic
    timeout 120 "$build/test/hostile-client" "$MRC_RUN_DIR" mrc0 mrc1 >"$work/hostile.txt" 2>&1 || {
      cat "$work/hostile.txt" >&2
      fail "hostile client checks"
    }
    tail -1 "$work/hostile.txt"
    run_api_test after-hostile
    for k in bad_requests bad_memfds async_events async_events_dropped clients_reclaimed; do
      v=$(counter /mrc/host "$k")
      [ "$v" -gt 0 ] || fail "/mrc/host $k is $v after the hostile client"
      echo "/mrc/host $k = $v"
    done
    for k in nic_host_bad_sq_index nic_host_bad_rq_index nic_host_bad_cq_index nic_host_cq_overflow nic_host_qp_cq_failed; do
      v=$(counter /mrc/counters,mrc0 "$k")
      [ "$v" -gt 0 ] || fail "/mrc/counters,mrc0 $k is $v after the hostile client"
      echo "/mrc/counters,mrc0 $k = $v"
    done
    ;;
  sigkill)
    start_nic
    perf=$build/app/mrc-perf
    port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    timeout 120 "$perf" --dev mrc1 --port "$port" >"$work/server.txt" 2>&1 &
    pids+=($!)
    sleep 0.5
    timeout 120 "$perf" --dev mrc0 --connect "127.0.0.1:$port" --size 64K --qps 4 --seconds 30 \
      >"$work/client.txt" 2>&1 &
    client=$!
    # Kill it once its QPs carry traffic.
    for _ in $(seq 100); do
      [ "$(counter /mrc/counters,mrc0 nic_host_sqe)" -gt 1000 ] && break
      sleep 0.1
    done
    [ "$(counter /mrc/counters,mrc0 nic_host_sqe)" -gt 1000 ] || fail "the mrc-perf client never got going"
    before=$(counter /mrc/host clients_reclaimed)
    pkill -KILL -P $client mrc-perf || kill -KILL $client
    for _ in $(seq 100); do
      [ "$(counter /mrc/host clients_reclaimed)" -gt "$before" ] && break
      sleep 0.1
    done
    after=$(counter /mrc/host clients_reclaimed)
    [ "$after" -gt "$before" ] || fail "the killed client was not reclaimed (clients_reclaimed $before -> $after)"
    qps=$(telemetry /mrc/qps | $py -c 'import json,sys; d=json.load(sys.stdin)["/mrc/qps"]; print(len(d.get("mrc0", [])))')
    echo "clients_reclaimed $before -> $after; QPs left on mrc0: $qps"
    [ "$qps" -eq 0 ] || fail "$qps QPs of the killed client are still on mrc0"
    # What the reclaimed QPs counted stays in the device's totals.
    sent=$(counter /mrc/counters,mrc0 qp_tx_data_pkts)
    echo "qp_tx_data_pkts of mrc0 after the reclaim: $sent"
    [ "$sent" -gt 0 ] || fail "the reclaimed QPs' counters left /mrc/counters (qp_tx_data_pkts $sent)"
    # The server lost its peer; the device keeps serving new clients.
    build_api_test
    run_api_test after-kill
    ;;
  nic-fds)
    install_sdk
    gcc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$sdk" -o "$work/fds_test" "$src/test/host/fds_test.c" \
      -Wl,-rpath,"$sdk" "$sdk/lib_mrc.so" -libverbs || fail "fds_test.c does not build against the installed SDK"
    # About 25 descriptors are the NIC's own; the rest go to the client's CQs.
    ulimit -n 96
    start_nic
    timeout 120 "$work/fds_test" mrc0 | tee "$work/fds.txt" || fail "fds_test failed"
    lost=$(counter /mrc/host requests_fds_lost)
    refused=$(counter /mrc/host clients_refused_fds)
    echo "requests_fds_lost $lost, clients_refused_fds $refused"
    [ "$lost" -ge 1 ] && [ "$refused" -ge 1 ] || fail "the refusals were not counted"
    ;;
  nic-death | nic-stall | nic-busy)
    install_sdk
    gcc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$sdk" -o "$work/death_test" \
      "$src/test/host/death_test.c" -L"$sdk" -Wl,-rpath,"$sdk" "$sdk/lib_mrc.so" -libverbs -lpthread ||
      fail "death_test.c does not build against the installed SDK"
    start_nic
    nicpid=$(pgrep -P "${pids[-1]}" | head -n 1)
    [ -n "$nicpid" ] || fail "no mrc-nic process under ${pids[-1]}"
    mode=kill
    [ "$case_name" = nic-stall ] && mode=stop
    [ "$case_name" = nic-busy ] && mode=busy
    before=$(counter /mrc/host clients_reclaimed)
    # A short command timeout: the stopped NIC fails the call in seconds.
    MRC_QUIET=1 MRC_CMD_TIMEOUT_MS=500 timeout 60 "$work/death_test" mrc0 "$nicpid" $mode >"$work/$mode.txt" 2>&1 || {
      kill -CONT "$nicpid" 2>/dev/null || true
      grep -v '^ok' "$work/$mode.txt" >&2
      fail "death_test $mode"
    }
    tail -1 "$work/$mode.txt"
    if [ $mode = stop ]; then
      for _ in $(seq 50); do
        [ "$(counter /mrc/host clients_reclaimed)" -gt "$before" ] && break
        sleep 0.1
      done
      after=$(counter /mrc/host clients_reclaimed)
      echo "clients_reclaimed $before -> $after"
      [ "$after" -gt "$before" ] || fail "the timed-out client was not reclaimed (clients_reclaimed $before -> $after)"
    fi
    ;;
  nic-restart)
    # Two mrc-nic processes over 2 memif planes. The responder's NIC is
    # killed and started again, with new MACs: the requester's NIC must find
    # it again (its memif client ports redial; the new NIC announces its
    # addresses, which replace the cached MACs), so a second mrc-perf run
    # between the same devices completes.
    perf=$build/app/mrc-perf
    sock=$work/memif.sock
    rm -rf "$MRC_RUN_DIR" "$sock"
    vdevs() { # role
      for p in 0 1; do echo "--vdev=net_memif$p,role=$1,id=$p,socket=$sock,socket-abstract=no"; done
    }
    planes() { # device host
      for p in 0 1; do echo "--plane=$1 port=net_memif$p ip=10.0.$p.$2"; done
    }
    start_responder() {
      mapfile -t v < <(vdevs server)
      mapfile -t pl < <(planes mrc1 2)
      timeout 120 "$nic" --no-huge -m 1024 --no-pci --file-prefix "${prefix}r" -l 0,1 --log-level='*:warning' \
        "${v[@]}" -- --device mrc1 "${pl[@]}" >"$work/responder$1.out" 2>"$work/responder$1.err" &
      pids+=($!)
      responder=$!
      # A memif client connects only to a socket that exists; the device is
      # served once its links are up, so after the requester's NIC.
      wait_socket "$sock" 100 || fail "the responder's mrc-nic ($1) did not start"
    }
    wait_served() { # device
      wait_socket "$MRC_RUN_DIR/$1.sock" 150 || fail "$1 is not served"
    }
    run_perf() { # round
      local port
      port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      timeout 60 "$perf" --dev mrc1 --port "$port" >"$work/server$1.txt" 2>&1 &
      local server=$!
      sleep 0.5
      timeout 60 "$perf" --dev mrc0 --connect "127.0.0.1:$port" --size 64K --qps 2 --seconds 1 \
        >"$work/client$1.txt" 2>&1 || { tail -3 "$work/client$1.txt" >&2; fail "mrc-perf round $1"; }
      wait "$server" || fail "the mrc-perf server of round $1"
      grep -q '^integrity: ok' "$work/client$1.txt" || fail "mrc-perf round $1: no integrity line"
      echo "round $1: $(grep -E '^ +65536 ' "$work/client$1.txt")"
    }
    start_responder 1
    mapfile -t v < <(vdevs client)
    mapfile -t pl < <(planes mrc0 1)
    timeout 120 "$nic" --no-huge -m 1024 --no-pci --file-prefix "${prefix}q" --lcores '0@1,1@0' \
      --log-level='*:warning' "${v[@]}" -- --device mrc0 "${pl[@]}" >"$work/requester.out" 2>"$work/nic.err" &
    pids+=($!)
    requester=$!
    wait_served mrc0
    wait_served mrc1
    run_perf 1
    pkill -KILL -P "$responder"
    wait "$responder" 2>/dev/null || true
    rm -f "$sock" "$MRC_RUN_DIR/mrc1.sock"
    start_responder 2
    wait_served mrc1
    # The requester redials each second; then each side announces itself.
    for _ in $(seq 100); do
      [ "$(grep -c 'connected again' "$work/nic.err")" -ge 2 ] && break
      sleep 0.1
    done
    grep 'connected again' "$work/nic.err" || fail "the requester's memif ports did not connect to the new responder"
    run_perf 2
    ;;
  perf)
    perf=$build/app/mrc-perf
    # Bad arguments are refused before connecting, by one error naming the
    # option. Nothing listens on port 1, so a client that got past its checks
    # fails there instead, naming no option.
    while read -r opt args; do
      conn="--connect 127.0.0.1:1"
      [[ $args == *--connect* ]] && conn=
      rc=0
      # shellcheck disable=SC2086
      timeout 10 "$perf" --dev mrc0 $conn $args >"$work/badarg.txt" 2>&1 || rc=$?
      [ "$rc" -eq 1 ] && head -n 1 "$work/badarg.txt" | grep -q -- "$opt" ||
        fail "mrc-perf $args: exit $rc, want 1 and an error naming $opt: $(head -c 300 "$work/badarg.txt")"
    done <<'ARGS'
--size --size 17179869185G
--size --size 2G
--sweep --sweep 1:8589934592G
--sweep --sweep 1:2G
--seconds --seconds nan
--seconds --seconds inf
--seconds --seconds 1e300
--stats-interval --stats-interval nan
--stats-interval --stats-interval 1e-12
--gid-idx --gid-idx 256
--port --port 0 --connect 127.0.0.1
--iters --iters 18446744073709551615
--iters --test lat --iters 281474976710656
--warmup --warmup 9223372036854775807
ARGS
    echo "mrc-perf: bad arguments refused"
    # A client that skips those checks: the server refuses its settings
    # before it opens the device (none runs yet), exiting 1 with the reason.
    while read -r what field value; do
      port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      rc=0
      timeout 20 "$perf" --dev mrc1 --port "$port" >"$work/server_bad.txt" 2>&1 &
      server=$!
      $py - "$port" "$field" "$value" <<'EOF' || fail "fake mrc-perf client ($what) could not talk to the server"
import socket, struct, sys, time
port, field, value = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
hello = dict(ver=3, op=0, test=0, verify=1, event=0, mtu=1024, gid_idx=0, qps=1, iters=10, warmup=1,
             tx_depth=64, cq_mod=16, seconds_ms=0, seed=1)
hello[field] = value
body = struct.pack("<HBBBBIIIQQIIQQI", *hello.values(), 1) + struct.pack("<Q", 4096)
for _ in range(100):
    try:
        s = socket.create_connection(("127.0.0.1", port))
        break
    except ConnectionRefusedError:
        time.sleep(0.05)
s.sendall(struct.pack("<IHHI", 0x5043524D, 1, 0, len(body)) + body)
s.settimeout(15)
while s.recv(4096):
    pass
EOF
      wait $server || rc=$?
      if [ "$what" = valid ]; then  # the fake client's encoding is right: these settings pass
        ! grep -q "invalid configuration" "$work/server_bad.txt" ||
          fail "mrc-perf server refused the fake client's valid settings: $(head -c 300 "$work/server_bad.txt")"
        continue
      fi
      [ "$rc" -eq 1 ] && grep -q "invalid configuration" "$work/server_bad.txt" ||
        fail "mrc-perf server took a client's $what: exit $rc, $(head -c 300 "$work/server_bad.txt")"
    done <<'BAD'
valid qps 1
gid-index-256 gid_idx 256
warmup+iters-wrapping warmup 18446744073709551615
no-iterations iters 0
cq-mod-0 cq_mod 0
seconds-past-the-limit seconds_ms 18446744073709551615
BAD
    echo "mrc-perf: a client's invalid settings refused by the server"
    start_nic
    for spec in "--op write --test bw" "--op write_imm --test bw" "--op write --test lat" "--op write_imm --test lat"; do
      port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      tag=$(echo "$spec" | tr -d ' -')
      timeout 300 "$perf" --dev mrc1 --port "$port" >"$work/server_$tag.txt" 2>&1 &
      server=$!
      pids+=($server)
      sleep 0.3
      opts="--iters 50 --qps 2"
      [[ $spec == *lat* ]] && opts="--iters 100"
      # shellcheck disable=SC2086
      timeout 300 "$perf" --dev mrc0 --connect "127.0.0.1:$port" $spec --sweep 1:4M $opts \
        --json "$work/perf_$tag.json" >"$work/client_$tag.txt" 2>&1 || {
        tail -n 20 "$work/client_$tag.txt" "$work/server_$tag.txt" >&2
        fail "mrc-perf $spec"
      }
      wait $server || fail "mrc-perf server ($spec) exited with an error"
      $py - "$work/perf_$tag.json" "$spec" <<'EOF' || fail "mrc-perf $spec results"
import json, sys
j = json.load(open(sys.argv[1]))
sizes = [r["bytes"] for r in j["results"]]
want = [1 << k for k in range(23)]
bad = []
if sizes != want: bad.append(f"sizes {sizes[:3]}..{sizes[-1:]} (want 1 .. 4 MiB)")
if not j["integrity_ok"]: bad.append("integrity_ok is false")
for r in j["results"]:
    if not r.get("integrity_ok", True): bad.append(f"{r['bytes']} B: integrity failed")
big = j["results"][-1]
print(f"{sys.argv[2]}: {len(sizes)} sizes; 4 MiB: " + ", ".join(f"{k}={big[k]}" for k in big if k != "bytes"))
if bad:
    print("; ".join(bad))
    sys.exit(1)
EOF
    done
    ;;
  ctl | ctl-eperm | mrcctl)
    if ! (($(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status | sed 's/^/0x/') >> 12 & 1)); then
      echo "SKIP: $case_name needs CAP_NET_ADMIN (the controller API is privileged); run as root"
      exit 77
    fi
    ;;&
  mrcctl)
    start_nic
    ctl=$build/app/mrcctl
    : >"$work/mrcctl.txt"
    run_ctl() { timeout 60 "$ctl" --prefix "$prefix" "$@" >>"$work/mrcctl.txt" 2>&1 || fail "mrcctl $*"; }
    run_ctl dev show mrc0
    run_ctl fmt add mrc0 21 --mode udp --fields 8,8 --online
    run_ctl ev add mrc0 22 --fmt 21 --mode gen --field 8:0xC0 --field 8:0:0:31:0xFF --min-active 1 \
      --events good,bad --online
    timeout 60 "$ctl" --json ev show mrc0 22 >"$work/ev.json" || fail "mrcctl ev show"
    $py - "$work/ev.json" <<'PY' || fail "mrcctl ev show --json: not the 32 generated EVs"
import json, sys
j = json.load(open(sys.argv[1]))
evs = j.get("evs") or j.get("entries") or []
vals = sorted(int(str(e.get("ev", e.get("value"))), 0) for e in evs)
want = sorted(0xC000 + i for i in range(32))
print(f"ev show: {len(evs)} EVs, first {hex(vals[0]) if vals else None}")
sys.exit(0 if vals == want else 1)
PY
    run_ctl ev deny mrc0 22 0xC005@2
    timeout 60 "$ctl" --json ev show mrc0 22 | grep -q DENIED || fail "the denied EV does not read DENIED"
    run_ctl ev restore mrc0 22 0xC005@2
    run_ctl cc add mrc0 23 --algo uet-1.0-nscc --base-rtt 20000 --online
    run_ctl cc add mrc0 24 --algo dcqcn --online
    run_ctl probe mrc0 --dgid mrc1 --ev 0xC000-0xC003 --count 3
    run_ctl port set mrc0 2 down
    timeout 60 "$ctl" --json dev show mrc0 | $py -c 'import json,sys; p=json.load(sys.stdin)["devices"][0]["ports"]; sys.exit("down" not in str(p[1]["state"]).lower() or "active" not in str(p[0]["state"]).lower())' ||
      fail "a disabled port does not read PORT_DOWN in verbs (mrcctl dev show)"
    timeout 60 "$ctl" --json port show mrc0 | $py -c 'import json,sys; p=json.load(sys.stdin)["ports"]; sys.exit(p[1]["admin"] != "down")' ||
      fail "port 2 does not read admin down"
    run_ctl port set mrc0 2 up
    run_ctl stats planes mrc0
    run_ctl stats counters mrc0
    run_ctl ev del mrc0 22
    run_ctl cc del mrc0 23
    run_ctl fmt del mrc0 21
    grep -E 'ANSWERED|^4915[23] ' "$work/mrcctl.txt" | head -n 5 || true
    ;;
  ctl | ctl-eperm)
    install_sdk
    gcc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$sdk" -o "$work/ctl_test" "$src/test/host/ctl_test.c" \
      -L"$sdk" -Wl,-rpath,"$sdk" "$sdk/lib_mrc.so" -libverbs || fail "ctl_test.c does not build against the installed SDK"
    start_nic
    run=("$work/ctl_test" mrc0 mrc1)
    if [ "$case_name" = ctl-eperm ]; then
      # Same user, so the device socket opens; only the capability is gone.
      run=(setpriv --inh-caps=-all --bounding-set=-net_admin "$work/ctl_test" --expect-eperm mrc0 mrc1)
    fi
    MRC_QUIET=1 timeout 120 "${run[@]}" >"$work/ctl.txt" 2>&1 || {
      grep -v '^ok' "$work/ctl.txt" >&2
      fail "ctl_test ($case_name)"
    }
    tail -1 "$work/ctl.txt"
    ;;
  *)
    fail "unknown case $case_name"
    ;;
esac
echo "PASS: $case_name"
