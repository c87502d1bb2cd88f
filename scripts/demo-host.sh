#!/usr/bin/env bash
# Host programs on mrc-nic: two devices, mrc0 and mrc1, each served by its own mrc-nic
# process and joined by 4 memif planes (config/nic/memif-*.conf without --workload, so they
# serve lib_mrc.so clients). mrc-perf, an ordinary program on the OCP MRC API, writes 1 MiB
# messages on 4 QPs for 10 s with every byte verified. Partway through, the controller CLI
# (mrcctl, on the OCP mrc_ctl.h API) downs mrc0's port 2 (plane 1) and later restores it,
# while `mrcctl monitor` collects the EV events. Prints mrc-perf's per-second table, mrc0's
# per-plane table (Gb/s, EV states, retransmits), the EV events and a VERDICT line.
# Called by scripts/demo.sh (which builds first); output in out/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."

out=$PWD/out/demo
mkdir -p "$out"
py=/usr/bin/python3
nic=build/app/mrc-nic
perf=build/app/mrc-perf
ctl=build/app/mrcctl
sock=/tmp/mrcnic-demo.sock # the memif socket= of config/nic/memif-*.conf
prefix=mrchost$$
export MRC_RUN_DIR=$out/run # where lib_mrc.so finds the devices
exec 9>>"$out/demo.lock"
flock -n 9 || {
  echo "demo: another demo is running (it owns $sock)" >&2
  exit 1
}

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 60); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  pids=()
  rm -f "$sock"
  for d in /var/run/dpdk "${XDG_RUNTIME_DIR:-/tmp}/dpdk"; do rm -rf "$d/${prefix}r" "$d/${prefix}q"; done
}
trap cleanup EXIT
trap 'echo "demo: interrupted" >&2; exit 130' INT TERM

rm -rf "$MRC_RUN_DIR" "$sock"
# The controller API needs CAP_NET_ADMIN; without it the NIC fails the plane itself.
admin=0
(($(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status | sed 's/^/0x/') >> 12 & 1)) && admin=1
link_events=()
[ $admin -eq 1 ] || link_events=(--link-event "mrc0:1 down at-ms=4500" --link-event "mrc0:1 up at-ms=7500")
rm -f "$out"/host-{mrc0,mrc1}.{out,log} "$out"/host-perf-{client,server}.txt "$out/host-perf.json"
eal=(--no-huge -m 1024 --no-pci --log-level='*:warning')
# Two busy-polling NIC workers and the programs share 2 CPUs: an ACK timeout longer than a
# scheduler slice (2^13 x 1.024 us = 8.4 ms) keeps a descheduled peer from looking lost.
nic_opts=(${DEMO_NIC_OPTS:---timeout 13})

echo
echo "== host programs: mrc-perf over lib_mrc.so on two mrc-nic devices (4 memif planes)"
if [ $admin -eq 1 ]; then
  echo "   1 MiB WRITEs on 4 QPs for 10 s, every byte checked; at 3 s mrcctl downs mrc0's port 2 (plane 1), at 6 s restores it"
else
  echo "   1 MiB WRITEs on 4 QPs for 10 s, every byte checked; mrc0's plane 1 fails ~3 s in, back ~3 s later"
  echo "   (mrcctl needs CAP_NET_ADMIN, which this shell lacks: mrc-nic fails the plane itself)"
fi
# mrc1 owns the memif sockets (server role); its worker on CPU 1, mrc0's on CPU 0.
"$nic" "${eal[@]}" --file-prefix "${prefix}r" -l 0,1 -- --config config/nic/memif-responder.conf \
  --stats-interval 0 "${nic_opts[@]}" >"$out/host-mrc1.out" 2>"$out/host-mrc1.log" &
pids+=($!)
for _ in $(seq 1 200); do
  [ -S "$sock" ] && break
  sleep 0.05
done
"$nic" "${eal[@]}" --file-prefix "${prefix}q" --lcores '0@1,1@0' -- --config config/nic/memif-requester.conf \
  --stats-interval 1 "${nic_opts[@]}" "${link_events[@]}" >"$out/host-mrc0.out" 2>"$out/host-mrc0.log" &
pids+=($!)
for _ in $(seq 1 200); do
  [ -S "$MRC_RUN_DIR/mrc0.sock" ] && [ -S "$MRC_RUN_DIR/mrc1.sock" ] && break
  sleep 0.05
done
if ! [ -S "$MRC_RUN_DIR/mrc0.sock" ] || ! [ -S "$MRC_RUN_DIR/mrc1.sock" ]; then
  tail -n 5 "$out"/host-mrc*.log >&2
  echo "VERDICT: FAIL: the devices did not come up (logs: $out/host-mrc*.log)" | tee "$out/host-summary.txt"
  exit 1
fi
port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
perf_opts=()
"$perf" --help 2>/dev/null | grep -q -- '--event' && perf_opts+=(--event) # block on completions: 2 CPUs
"$perf" --dev mrc1 --port "$port" >"$out/host-perf-server.txt" 2>&1 &
server=$!
pids+=($server)
if [ $admin -eq 1 ]; then
  "$ctl" monitor mrc0 --seconds 14 >"$out/host-ev-events.txt" 2>&1 &
  pids+=($!)
  (
    sleep 3.5
    "$ctl" port set mrc0 2 down
    sleep 3
    "$ctl" port set mrc0 2 up
  ) >"$out/host-mrcctl.txt" 2>&1 &
  pids+=($!)
fi
echo "   mrc0's NIC, once a second: per plane Gb/s and EV health (ok/bad/denied; '!' = link down), retransmits"
set +e
"$perf" --dev mrc0 --connect "127.0.0.1:$port" --size 1M --qps 4 --seconds 10 --stats-interval 1 \
  "${perf_opts[@]}" --json "$out/host-perf.json" >"$out/host-perf-client.txt" 2>&1 &
client=$!
tail -n +1 -f --pid=$client "$out/host-mrc0.out" | grep --line-buffered -E '^ *(time_s|Gb/s|[0-9]+\.[0-9] mrc0)' |
  sed -u 's/^/   /'
wait "$client"
client_rc=$?
wait "$server"
server_rc=$?
set -e
cleanup
echo
echo "   mrc-perf's own view (goodput a second, from its completions):"
grep -E '^ +(time|[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+$)|^integrity' "$out/host-perf-client.txt" | sed 's/^/   /' || true
if [ -s "$out/host-ev-events.txt" ]; then
  echo
  echo "   EV events the controller saw (mrcctl monitor mrc0; all in $out/host-ev-events.txt):"
  sed 's/^/   mrcctl: /' "$out/host-mrcctl.txt"
  $py - "$out/host-ev-events.txt" <<'PY'
import collections, re, sys
ev = [m.groups() for m in (re.match(r"(\S+) profile (\d+) ev (\d+) port (\d+) (\S+) drops (\d+)", l)
                             for l in open(sys.argv[1])) if m]
by = collections.Counter((p, st) for t, prof, e, p, st, d in ev)
for port in sorted({p for p, st in by}, key=int):
    print(f"   port {port}: {by[(port, 'ASSUMED_BAD')]:5} x ASSUMED_BAD, {by[(port, 'GOOD')]:5} x GOOD")
first = next(((t, e) for t, prof, e, p, st, d in ev if p == "2" and st == "ASSUMED_BAD"), None)
if ev:
    print(f"   e.g. {ev[0][0]} EV {ev[0][2]} on port {ev[0][3]} went {ev[0][4]}; every EV is probed back to GOOD once "
          "its path answers (on the healthy ports, mostly packets taken for lost that were only late: 2 CPUs shared by 2 "
          "busy-polling NICs stall them)")
PY
fi

set +e
$py - "$out" "$client_rc" "$server_rc" >"$out/host-summary.txt" <<'PY'
import json, re, sys
out, client_rc, server_rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bad = []
try:
    j = json.load(open(f"{out}/host-perf.json"))
except Exception:
    j = None
    bad.append(f"no JSON from mrc-perf ({out}/host-perf-client.txt)")
if client_rc: bad.append(f"mrc-perf client exited with {client_rc}")
if server_rc: bad.append(f"mrc-perf server exited with {server_rc}")
if j:
    r = j["results"][0]
    print(f"mrc-perf: {r['iters'] * r['qps']} WRITEs of 1 MiB on {r['qps']} QPs in {r['seconds']:.1f} s = "
          f"{r['gbps']:.2f} Gb/s; the server checked {r['slots_checked']} slots ({r['bytes_checked'] / 2**20:.0f} MiB) "
          f"byte for byte, {r['bad_slots']} bad; integrity_ok={str(j['integrity_ok']).lower()}")
    if not j["integrity_ok"]: bad.append("mrc-perf integrity check failed")
    if j.get("error"): bad.append(f"mrc-perf: {j['error']}")
rows = []
for l in open(f"{out}/host-mrc0.out"):
    m = re.match(r"\s*([\d.]+)\s+mrc0\s+\S+\s+(.*)\s(\d+)\s*$", l)
    if m:
        planes = [(float(g), x == "!", int(ok), int(b)) for g, x, ok, b, dn in
                  re.findall(r"([\d.]+)(!?)\s+(\d+)/(\d+)/(\d+)", m.group(2))]
        rows.append((float(m.group(1)), planes, int(m.group(3))))
down = [r for r in rows if r[1] and r[1][1][1]]
if not down:
    bad.append("the NIC's table shows no failed plane")
else:
    worst = max(r[1][1][3] for r in down)
    after = [r for r in rows if r[0] > down[-1][0] + 1 and r[1][1][0] > 0]
    print(f"plane 1: link down for {len(down)} table rows, up to {worst} of its EVs ASSUMED_BAD; "
          + (f"carrying {after[0][1][1][0]:.2f} Gb/s again at {after[0][0]:.0f} s" if after else "no traffic after it came back"))
    if worst == 0: bad.append("plane 1's EVs never went ASSUMED_BAD")
    if not after: bad.append("plane 1 carried no traffic after its link came back")
log = open(f"{out}/host-mrc0.log").read()
m = re.search(r"host_clients_reclaimed\s+(\d+)", log)
print(f"mrc0's NIC reclaimed {m.group(1) if m else 0} client(s) at exit; final counters in {out}/host-mrc0.log")
if bad:
    print("VERDICT: FAIL: " + "; ".join(bad))
    sys.exit(1)
print("VERDICT: PASS: a host program on the OCP MRC API moved its data through lib_mrc.so intact, across a plane "
      "failure and its recovery")
PY
rc=$?
set -e
sed 's/^/   /' "$out/host-summary.txt" | grep -v VERDICT
grep '^VERDICT' "$out/host-summary.txt"
exit $rc
