#!/bin/bash
# Two MRC devices moving a workload, checked end to end.
#   pair_test.sh MRC_NIC CASE WORKDIR
# CASE:
#   memif            two processes, 4 memif planes, 256 MiB of WRITEs
#   memif-zc         the same with the responder as a zero-copy memif client
#                    (its RX reads frames in the shared region; the requester
#                    is then the memif server)
#   memif-drop       the same with 1 % egress drop on every plane of both
#   memif-plane-down the same, one plane silently failed mid-transfer; its EVs
#                    must read ASSUMED_BAD in telemetry (dpdk-telemetry.py)
#   memif-tx-fault   the same, with a memory fault forced inside one of the
#                    requester's memif TX bursts: survived and counted
#   memif-peer-dies  the responder is killed mid-transfer: the requester must
#                    not crash; its QPs time out into ERROR and it reports so.
#                    A new responder brings the requester's planes back
#   rings            one process, two devices over rte_eth_from_rings pairs,
#                    WRITE_IMM, each device on its own lcore
#   rings-steer      one process, two lcores per device on single-queue ports:
#                    frames are steered to the QP's lcore through rte_rings
#   rings-odd        one process, workloads of odd shapes: fewer messages
#                    than QPs, a --wl-bytes near 2^64, port names to escape
#   rings-plane-back one process, a plane silently down for a second under
#                    load, then back: every EV of every plane must be back in
#                    service by the end (5 of 256 were left out for good), and
#                    the dead plane drew one probe per QP per back-off
#   rings-many-qps   one process, 700 QPs per device, more than a telemetry
#                    array holds: /mrc/qps says what it left out, pages list
#                    every QP, and so does mrcctl; /mrc/planes,DEV
set -euo pipefail

nic=$1
case_name=$2
work=$3
mkdir -p "$work"
work=$(cd "$work" && pwd)
py=/usr/bin/python3
pids=()
# Each pid is a `timeout`; the NIC is its child.
cleanup() {
  for p in "${pids[@]}"; do
    pkill -KILL -P "$p" 2>/dev/null || true
    kill -KILL "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Checks a JSON summary: the workload moved everything, intact.
check_json() { # file role bytes
  $py - "$@" <<'EOF'
import json, sys
path, role, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
j = json.load(open(path))
w = j["workload"]
bad = []
if not w["integrity_ok"]: bad.append("integrity_ok is false")
if not w["completions_ok"]: bad.append("completions_ok is false")
if w["errors"]: bad.append(f"{w['errors']} error completions ({w.get('first_error')})")
if w["bytes"] != want: bad.append(f"moved {w['bytes']} bytes, expected {want}")
if w["slots_checked"] == 0: bad.append("the responder checked nothing")
# Burst counters count the bursts that moved frames: at least one per plane that moved any, never
# more than its frames, and never fewer than a full burst each could carry (an RX burst asks for
# at most 32 frames, a TX burst hands over at most the 128 a plane may stage).
for dev, d in j["devices"].items():
    for p, c in enumerate(d["planes"]):
        for way, most in (("rx", 32), ("tx", 128)):
            frames, bursts = c[f"{way}_frames"], c[f"{way}_bursts"]
            if not (frames == 0) == (bursts == 0) or bursts > frames or frames > bursts * most:
                bad.append(f"{dev} plane {p}: {bursts} {way} bursts for {frames} frames")
print(f"{role}: {w['bytes']} B in {w['seconds']:.3f} s = {w['goodput_gbps']:.2f} Gb/s, "
      f"slots checked {w['slots_checked']}, retransmits "
      + ", ".join(f"{d}={v['retransmits']}" for d, v in j["devices"].items()))
if bad:
    print(f"{role}: " + "; ".join(bad))
    sys.exit(1)
EOF
}

eal_common=(--no-huge -m 1024 --no-pci --log-level='*:warning')
bytes=$((256 << 20))

free_port() {
  $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The memif roles of the two ends (memif_roles): responder_zc=1 makes the
# responder a zero-copy memif client.
. "$(dirname "$0")/../../scripts/memif-rings.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

# "server" and "client" below are the workload's roles (responder mrc1 and
# requester mrc0).
memif_pair() { # extra client args...
  # Not local: start_server may run again after memif_pair (a new peer).
  port='' prefix='' planes_s=() planes_c=() vdev_s=() vdev_c=()
  port=$(free_port)
  prefix="mrcnic$$"
  memif_roles "$responder_zc"
  for p in 0 1 2 3; do
    local common="id=$p,socket=$work/memif.sock,socket-abstract=no,bsize=8192"
    vdev_s+=(--vdev "net_memif$p,$MEMIF_RESPONDER_ROLE,$common")
    vdev_c+=(--vdev "net_memif$p,$MEMIF_REQUESTER_ROLE,$common")
    planes_s+=(--plane "mrc1 port=net_memif$p ip=10.0.$p.2")
    planes_c+=(--plane "mrc0 port=net_memif$p ip=10.0.$p.1")
  done
  rm -f "$work/memif.sock" "$work/server.json" "$work/client.json"
  # Each worker on its own CPU: the server's lcore 1 on CPU 1, the client's on CPU 0.
  start_server() {
    timeout 120 "$nic" "${eal_common[@]}" "${MEMIF_RESPONDER_EAL[@]}" --file-prefix "${prefix}s" -l 0,1 "${vdev_s[@]}" \
      -- --device mrc1 "${planes_s[@]}" "${server_extra[@]}" --workload write --wl-listen "$port" \
      >"$work/server.json" 2>"$work/server.log" &
    pids+=($!)
    server_pid=$!
  }
  start_client() {
    # Under client_wrap (gdb), its output and the NIC's go to one file.
    local out=$work/client.json
    ((${#client_wrap[@]})) && out=$work/client-gdb.txt
    timeout 120 "${client_wrap[@]}" "$nic" "${eal_common[@]}" --file-prefix "${prefix}c" --lcores '0@1,1@0' \
      "${vdev_c[@]}" -- --device mrc0 "${planes_c[@]}" --workload write --wl-connect "127.0.0.1:$port" \
      --wl-bytes "$bytes" --wl-size 1M --wl-qps 4 "$@" >"$out" 2>"$work/client.log" &
    pids+=($!)
    client_pid=$!
  }
  # The memif server starts first; the requester waits for the responder's
  # workload port either way.
  if ((responder_zc)); then start_client "$@"; else start_server; fi
  for _ in $(seq 1 200); do
    [ -S "$work/memif.sock" ] && break
    sleep 0.05
  done
  if ((responder_zc)); then start_server; else start_client "$@"; fi
  client_prefix="${prefix}c"
}

# Waits up to TENTHS tenths of a second for FILE to fill, or for PID to exit.
wait_for_output() { # file pid tenths
  for _ in $(seq 1 "$3"); do
    [ -s "$1" ] && return
    kill -0 "$2" 2>/dev/null || return
    sleep 0.1
  done
}

wait_ok() { # pid name
  local rc=0
  wait "$1" || rc=$?
  [ $rc -eq 0 ] || { tail -n 20 "$work/$2.log" >&2; fail "$2 exited with $rc"; }
}

server_extra=()
client_wrap=()
responder_zc=0
case $case_name in
  memif | memif-zc)
    [ "$case_name" = memif-zc ] && responder_zc=1
    memif_pair
    wait_ok "$client_pid" client
    wait_ok "$server_pid" server
    check_json "$work/client.json" requester "$bytes"
    check_json "$work/server.json" responder "$bytes"
    ;;
  memif-tx-fault)
    # A memory fault inside memif's TX burst (gdb delivers SIGSEGV there, as
    # when the PMD's peer unmaps the ring mid-burst): the worker survives it,
    # counts the frames it forgets, stops using that plane, and the transfer
    # completes on the other three.
    command -v gdb >/dev/null || fail "gdb is needed (scripts/setup.sh installs it)"
    client_wrap=(gdb -q -batch -ex 'set confirm off' -ex 'set pagination off' -ex 'break eth_memif_tx'
      -ex 'ignore 1 500' -ex run -ex 'delete 1' -ex 'signal SIGSEGV' --args)
    memif_pair
    wait_ok "$client_pid" client
    grep -m1 '^{"tool":"mrc-nic"' "$work/client-gdb.txt" >"$work/client.json" ||
      { tail -n 20 "$work/client-gdb.txt" >&2; fail "no summary from the requester under gdb"; }
    wait_ok "$server_pid" server
    check_json "$work/client.json" requester "$bytes"
    check_json "$work/server.json" responder "$bytes"
    $py - "$work/client.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))["devices"]["mrc0"]["counters"]
faults, lost = c.get("nic_port_faults", 0), c.get("nic_tx_lost_in_fault", 0)
print(f"mrc0: {faults} port fault(s), {lost} frame(s) forgotten in the faulted burst")
if faults != 1 or lost < 1: sys.exit("the injected fault was not survived and counted once")
EOF
    ;;
  memif-drop)
    server_extra=(--fault "* drop=0.01")
    memif_pair --fault "* drop=0.01"
    wait_ok "$client_pid" client
    wait_ok "$server_pid" server
    check_json "$work/client.json" requester "$bytes"
    check_json "$work/server.json" responder "$bytes"
    # The faults really dropped frames, on both sides.
    $py - "$work/client.json" "$work/server.json" <<'EOF'
import json, sys
for path in sys.argv[1:]:
    for dev, d in json.load(open(path))["devices"].items():
        sent = d["counters"].get("nic_tx_frames", 0)
        dropped = d["counters"].get("nic_tx_drop_fault", 0)
        print(f"{dev}: {dropped} of {sent + dropped} frames dropped by injection")
        if not 0.005 < dropped / max(1, sent + dropped) < 0.02:
            sys.exit(f"{dev}: drop ratio outside 0.5-2 %")
EOF
    ;;
  memif-plane-down)
    memif_pair --link-event "mrc0:1 down at-ms=20" --linger 10
    # Once the client has printed its summary it lingers: ask its telemetry.
    wait_for_output "$work/client.json" "$client_pid" 600
    [ -s "$work/client.json" ] || fail "the client printed no summary"
    echo /mrc/planes | timeout 20 $py /usr/bin/dpdk-telemetry.py -f "$client_prefix" >"$work/planes.json" 2>&1 ||
      { cat "$work/planes.json" >&2; fail "dpdk-telemetry.py failed"; }
    pkill -INT -P "$client_pid"
    wait_ok "$client_pid" client
    wait_ok "$server_pid" server
    check_json "$work/client.json" requester "$bytes"
    check_json "$work/server.json" responder "$bytes"
    $py - "$work/planes.json" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
t = json.loads(text[text.index("{"):text.rindex("}") + 1])["/mrc/planes"]
cols = t["columns"]
def col(row, name): return t[row][cols.index(name)]
for p in range(4):
    row = f"mrc0_{p}"
    print(f"plane {p}: link_up={col(row, 'link_up')} GOOD={col(row, 'evs_GOOD')} "
          f"ASSUMED_BAD={col(row, 'evs_ASSUMED_BAD')} tx_frames={col(row, 'tx_frames')}")
bad = []
if col("mrc0_1", "link_up") != 0: bad.append("plane 1 is not down")
if col("mrc0_1", "evs_ASSUMED_BAD") == 0 or col("mrc0_1", "evs_GOOD") != 0:
    bad.append("plane 1's EVs are not all ASSUMED_BAD")
for p in (0, 2, 3):
    if col(f"mrc0_{p}", "evs_GOOD") == 0: bad.append(f"plane {p} has no GOOD EV")
if bad: sys.exit("; ".join(bad))
EOF
    ;;
  memif-peer-dies)
    bytes=0
    memif_pair --wl-seconds 20
    sleep 2
    pkill -KILL -P "$server_pid"
    # With the peer gone, telemetry must not read its planes' links as up
    # (only a --link-event counted).
    sleep 1
    echo /mrc/planes | timeout 20 $py /usr/bin/dpdk-telemetry.py -f "$client_prefix" >"$work/gone.json" 2>&1 ||
      { cat "$work/gone.json" >&2; fail "dpdk-telemetry.py failed"; }
    $py - "$work/gone.json" <<'EOF' || fail "the dead peer's planes read link up"
import json, sys
text = open(sys.argv[1]).read()
t = json.loads(text[text.index("{"):text.rindex("}") + 1])["/mrc/planes"]
up = [t[f"mrc0_{p}"][t["columns"].index("link_up")] for p in range(4)]
print(f"link_up with the peer gone: {up}")
sys.exit(1 if any(up) else 0)
EOF
    # A new peer on the same socket: its QPs are new, so the old ones still
    # time out, but the requester's planes come back.
    rm -f "$work/memif.sock"  # the dead server's, which memif does not reclaim
    start_server
    rc=0
    wait "$client_pid" || rc=$?
    grep -v "EV event" "$work/client.log" | tail -n 5
    # 3: the workload failed (as it must); anything else is a crash or a hang.
    [ $rc -eq 3 ] || fail "the requester exited with $rc, expected 3 (workload failed, no crash)"
    $py - "$work/client.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
w, c = j["workload"], j["devices"]["mrc0"]["counters"]
print(f"requester: {w['bytes']} B before the peer died, {w['errors']} error completions, "
      f"retry_exceeded={c.get('qp_retry_exceeded', 0)}, first error: {w.get('first_error')}, "
      f"planes down {c.get('nic_port_down_events', 0)} and back {c.get('nic_port_up_events', 0)}")
if w["completions_ok"] or w["errors"] == 0 or c.get("qp_retry_exceeded", 0) == 0:
    sys.exit("the QPs did not time out into ERROR")
if c.get("nic_port_down_events", 0) < 4 or c.get("nic_port_up_events", 0) < 4:
    sys.exit("the engine did not hear of all 4 planes going down and coming back with the new peer")
EOF
    ;;
  rings | rings-steer)
    args=(--device mrc0 --device mrc1 --mtu 4096)
    for p in 0 1 2 3; do
      args+=(--ring-pair "a$p:b$p" --plane "mrc0 port=a$p ip=10.0.$p.1" --plane "mrc1 port=b$p ip=10.0.$p.2")
    done
    if [ "$case_name" = rings ]; then
      eal=(--lcores '0@0,1@1,2@0')
      args+=(--lcores mrc0=1 --lcores mrc1=2 --workload write_imm --wl-qps 4 --wl-size 256k)
    else
      bytes=$((16 << 20))
      eal=(--lcores '0@0,1@1,2@0,3@1,4@0')
      args+=(--lcores mrc0=1,2 --lcores mrc1=3,4 --workload write_imm --wl-qps 8 --wl-size 64k)
    fi
    timeout 120 "$nic" "${eal_common[@]}" --no-shconf "${eal[@]}" -- "${args[@]}" \
      --wl-from mrc0 --wl-to mrc1 --wl-bytes "$bytes" >"$work/rings.json" 2>"$work/rings.log" &
    pids+=($!)
    wait_ok $! rings
    check_json "$work/rings.json" "one process" "$bytes"
    $py - "$work/rings.json" "$case_name" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
w = j["workload"]
if w["imm_received"] != w["messages"]:
    sys.exit(f"{w['imm_received']} immediates for {w['messages']} messages")
if sys.argv[2] == "rings-steer":
    # Single-queue ports: lcore 2 of each device only gets frames by steering.
    for dev, d in j["devices"].items():
        c = d["counters"]
        print(f"{dev}: steered out {c.get('nic_rx_steered_out', 0)}, in {c.get('nic_rx_steered_in', 0)}")
        # Frames still queued when the workers stop are never taken in.
        if not 0 < c.get("nic_rx_steered_in", 0) <= c.get("nic_rx_steered_out", 0):
            sys.exit(f"{dev}: steering did not carry frames between lcores")
EOF
    ;;
  rings-plane-back)
    timeout 60 "$nic" "${eal_common[@]}" --no-shconf --lcores '0@0,1@1,2@0' -- --config "$root/config/nic/rings.conf" \
      --workload write --wl-from mrc0 --wl-to mrc1 --wl-seconds 3 \
      --link-event "mrc0:1 down at-ms=500" --link-event "mrc0:1 up at-ms=1500" >"$work/back.json" 2>"$work/back.log" &
    pids+=($!)
    wait_ok $! plane-back
    $py - "$work/back.json" <<'EOF'
import json, sys
j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
w = j["workload"]
if not w["integrity_ok"] or w["errors"]: sys.exit(f"integrity_ok {w['integrity_ok']}, {w['errors']} errors")
marked = j["devices"]["mrc0"]["counters"].get("qp_ev_marked_bad", 0)
print(f"{marked} EVs marked ASSUMED_BAD while plane 1 was down")
if not marked: sys.exit("the plane's failure marked no EV: the test tested nothing")
# One scout per QP probes for the dead plane, its back-off doubling to 2 ms:
# about 500 probes a second per QP. Scouts that gave up and probed on their
# own sent about 120,000 in that second, 12 % of the frames.
ev_probes = j["devices"]["mrc0"]["planes"][1]["ev_probes"]
bound = w["qps"] * 500 * 2
print(f"{ev_probes} EV probes sent on plane 1 (at most {bound})")
if ev_probes > bound: sys.exit(f"{ev_probes} EV probes for one second of a dead plane: more than {bound}")
for dev, d in j["devices"].items():
    for p, plane in enumerate(d["planes"]):
        print(f"{dev} plane {p}: {plane['evs']}")
        if plane["evs"]["ASSUMED_BAD"]: sys.exit(f"{dev} plane {p}: EVs still out 1.5 s after the plane came back")
EOF
    ;;
  rings-odd)
    # Port names with a quote and a backslash: the summary must still be JSON.
    args=(--device mrc0 --device mrc1 --ring-pair 'a"0:b\0' --plane 'mrc0 port=a"0 ip=10.0.0.1'
      --plane 'mrc1 port=b\0 ip=10.0.0.2' --lcores mrc0=1 --lcores mrc1=2 --workload write --wl-from mrc0 --wl-to mrc1)
    eal=(--lcores '0@0,1@1,2@0')
    # One message for four QPs: the three QPs without one must not hold the run open.
    prefix="mrcodd$$"
    rm -f "$work/few.json"
    timeout 15 "$nic" "${eal_common[@]}" --file-prefix "$prefix" "${eal[@]}" -- "${args[@]}" --wl-qps 4 \
      --wl-size 4k --wl-bytes 4096 --linger 10 >"$work/few.json" 2>"$work/few.log" &
    pids+=($!)
    few_pid=$!
    wait_for_output "$work/few.json" "$few_pid" 100
    [ -s "$work/few.json" ] || fail "fewer messages than QPs: no summary within 10 s"
    # While it lingers: telemetry parameters out of range get an error or an empty page.
    printf '%s\n' /mrc/evs,mrc0:16,18446744073709551615 /mrc/evs,mrc0:16,18446744073709551600 /mrc/qp,mrc0:16,x |
      timeout 20 $py /usr/bin/dpdk-telemetry.py -f "$prefix" >"$work/tel.txt" 2>&1 ||
      { cat "$work/tel.txt" >&2; fail "dpdk-telemetry.py failed"; }
    pkill -INT -P "$few_pid"
    wait_ok "$few_pid" few
    check_json "$work/few.json" "fewer messages than QPs" 4096
    $py - "$work/tel.txt" <<'EOF'
import json, sys
replies = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"/mrc/')]
if len(replies) != 3: sys.exit(f"{len(replies)} telemetry replies, expected 3")
if replies[2]["/mrc/qp"] is not None: sys.exit("/mrc/qp,mrc0:16,x answered as if it named QP 16")
for r, first in zip(replies, (2**64 - 1, 2**64 - 16)):
    v = r["/mrc/evs"]
    rows = [k for k in v if k.isdigit()]
    print(f"/mrc/evs from {first}: count {v['count']}, rows {len(rows)}, next {v.get('next')}")
    if rows or v.get("next", first + 1) <= first: sys.exit(f"/mrc/evs from {first}: a page before it")
EOF
    # 16 EiB, cut short by --duration: it must move data, not round down to nothing.
    timeout 15 "$nic" "${eal_common[@]}" --no-shconf "${eal[@]}" -- "${args[@]}" --wl-qps 2 --wl-size 4k \
      --wl-bytes 18446744073709551615 --duration 0.3 >"$work/huge.json" 2>"$work/huge.log" &
    pids+=($!)
    wait_ok $! huge
    $py - "$work/huge.json" <<'EOF'
import json, sys
w = json.load(open(sys.argv[1]))["workload"]
print(f"--wl-bytes 2^64-1: {w['messages']} messages, integrity_ok {w['integrity_ok']}")
if w["messages"] == 0 or not w["integrity_ok"] or w["errors"]:
    sys.exit("a huge --wl-bytes did not run")
EOF
    ;;
  rings-many-qps)
    mrcctl=$(dirname "$nic")/mrcctl
    [ -x "$mrcctl" ] || fail "no mrcctl beside mrc-nic ($mrcctl)"
    qps=700
    args=(--device mrc0 --device mrc1 --ring-pair a0:b0 --plane "mrc0 port=a0 ip=10.0.0.1"
      --plane "mrc1 port=b0 ip=10.0.0.2" --lcores mrc0=1 --lcores mrc1=2 --workload write --wl-from mrc0 --wl-to mrc1)
    eal=(--lcores '0@0,1@1,2@0')
    prefix="mrcmany$$"
    rm -f "$work/many.json"
    timeout 60 "$nic" "${eal_common[@]}" --file-prefix "$prefix" "${eal[@]}" -- "${args[@]}" --wl-qps $qps \
      --wl-size 4k --wl-bytes $((qps * 4096)) --linger 20 >"$work/many.json" 2>"$work/many.log" &
    pids+=($!)
    many_pid=$!
    wait_for_output "$work/many.json" "$many_pid" 300
    [ -s "$work/many.json" ] || fail "$qps QPs: no summary within 30 s"
    # While it lingers: the whole list, pages of one device, planes of one.
    printf '%s\n' /mrc/qps /mrc/qps,mrc0 /mrc/qps,mrc0,512 /mrc/qps,mrc0,700 /mrc/qps,nope /mrc/planes,mrc1 \
      /mrc/planes,nope | timeout 20 $py /usr/bin/dpdk-telemetry.py -f "$prefix" >"$work/tel.txt" 2>&1 ||
      { cat "$work/tel.txt" >&2; fail "dpdk-telemetry.py failed"; }
    timeout 20 "$mrcctl" --prefix "$prefix" --json stats qps mrc1 >"$work/ctl-one.json" 2>"$work/ctl.err" ||
      { cat "$work/ctl.err" >&2; fail "mrcctl stats qps mrc1"; }
    timeout 20 "$mrcctl" --prefix "$prefix" --json stats qps >"$work/ctl-all.json" 2>>"$work/ctl.err" ||
      { cat "$work/ctl.err" >&2; fail "mrcctl stats qps"; }
    pkill -INT -P "$many_pid"
    wait_ok "$many_pid" many
    check_json "$work/many.json" "$qps QPs" $((qps * 4096))
    $py - "$work/tel.txt" "$work/ctl-one.json" "$work/ctl-all.json" $qps <<'EOF'
import json, sys
tel, one, every, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
replies = [json.loads(l) for l in open(tel) if l.startswith('{"/mrc/')]
if len(replies) != 7: sys.exit(f"{len(replies)} telemetry replies, expected 7")
whole, p0, p512, p700, nodev, planes, noplanes = [list(r.values())[0] for r in replies]
bad = []
shown = sum(len(whole[d]) for d in ("mrc0", "mrc1"))
print(f"/mrc/qps: {len(whole['mrc0'])} + {len(whole['mrc1'])} QPNs shown, omitted {whole.get('omitted')}")
if whole.get("omitted") != 2 * n - shown: bad.append(f"/mrc/qps omitted {whole.get('omitted')}, not {2 * n - shown}")
print(f"/mrc/qps,mrc0: count {p0['count']}, {len(p0['qpns'])} QPNs, next {p0.get('next')}")
if p0["count"] != n or len(p0["qpns"]) != 256 or p0.get("next") != 256: bad.append("the first page")
if len(p512["qpns"]) != n - 512 or "next" in p512: bad.append(f"the last page: {p512}")
if p700["qpns"] or "next" in p700: bad.append(f"past the end: {p700}")
if nodev is not None: bad.append("/mrc/qps,nope answered")
if noplanes is not None: bad.append("/mrc/planes,nope answered")
rows = [k for k in planes if k not in ("columns", "rows_omitted")]
if rows != ["mrc1_0"] or len(planes["mrc1_0"]) != len(planes["columns"]):
    bad.append(f"/mrc/planes,mrc1: rows {rows}, {len(planes.get('mrc1_0', []))} values for {len(planes['columns'])} columns")
o = json.load(open(one))
a = json.load(open(every))
print(f"mrcctl stats qps mrc1: {len(o['mrc1'])} QPs; stats qps: " + ", ".join(f"{d} {len(v)}" for d, v in a.items()))
if len(set(o["mrc1"])) != n: bad.append(f"mrcctl stats qps mrc1 lists {len(set(o['mrc1']))} distinct QPs")
if sorted(a) != ["mrc0", "mrc1"] or any(len(set(v)) != n for v in a.values()):
    bad.append("mrcctl stats qps does not list every QP of both devices")
if bad: sys.exit("; ".join(bad))
EOF
    ;;
  *)
    fail "unknown case $case_name"
    ;;
esac
echo "PASS: $case_name"
