#!/usr/bin/env python3
"""mrcctl stats against a stand-in for DPDK telemetry that answers oddly.

  mrcctl_replies.py MRCCTL WORKDIR

Each case serves one connection on a SOCK_SEQPACKET socket the way DPDK
22.11 does (a greeting, then one JSON object per command) but replies with
something mrc-nic would not send. mrcctl must end with status 0 or 1 and,
when it fails, say so in a line naming telemetry; never die on a signal.
"""
import json
import os
import socket
import subprocess
import sys
import threading

mrcctl, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
path = os.path.join(work, "telemetry.sock")


def serve(listener, reply, max_output_len):
    conn, _ = listener.accept()
    with conn:
        conn.send(json.dumps({"version": "DPDK 22.11", "pid": 1, "max_output_len": max_output_len}).encode())
        while True:
            try:
                cmd = conn.recv(1024).decode()
            except OSError:
                return
            if not cmd:
                return
            conn.send(json.dumps({cmd.split(",")[0]: reply(cmd)}).encode())


# (name, mrcctl arguments, the value answered for each command, status wanted[,
# the greeting's max_output_len])
cases = [
    # A /mrc/planes reply cut short before its column names.
    ("planes-json-no-columns", ["--json", "stats", "planes"], lambda c: {"mrc0_0": [1, 2]}, {0, 1}),
    # Values of another JSON type than mrc-nic sends: a clear error, not std::get's.
    ("planes-not-object", ["stats", "planes"], lambda c: [1, 2], {1}),
    ("qps-not-object", ["stats", "qps"], lambda c: "mrc0", {1}),
    ("devices-list-not-array", ["stats", "devices"], lambda c: {"devices": 7, "columns": []}, {1}),
    ("evs-row-not-array", ["stats", "evs", "16"],
     lambda c: {"count": 1, "columns": ["ev"], "states": ["GOOD"], "0": 5}, {1}),
    # Device a must not show plane 0 of device a_1 (row a_1_0) as its own.
    ("planes-of-device", ["--json", "stats", "planes", "a"],
     lambda c: {"a_0": [1], "a_1": [2], "a_1_0": [3], "columns": ["link_up"]}, {0}),
    # /mrc/host is null where mrc-nic runs --workload: said so, not "bad parameters".
    ("host-null", ["stats", "host"], lambda c: None, {1}),
    # A greeting announcing 1 TiB replies: no buffer that size, the reply read as usual.
    ("huge-max-output-len", ["stats", "counters"], lambda c: {"device": "mrc0"}, {0}, 1 << 40),
]

bad = []
for name, args, reply, want, *greeting in cases:
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(1)
    t = threading.Thread(target=serve, args=(listener, reply, greeting[0] if greeting else 16384), daemon=True)
    t.start()
    p = subprocess.run([mrcctl, "--telemetry-socket", path] + args, capture_output=True, text=True, timeout=30)
    listener.close()
    err = p.stderr.strip()
    print(f"{name}: status {p.returncode}: {err or p.stdout.strip()[:100]}")
    if p.returncode not in want:
        bad.append(f"{name}: status {p.returncode}, wanted one of {sorted(want)}")
    elif name == "planes-of-device" and sorted(json.loads(p.stdout)) != ["a_0", "a_1", "columns"]:
        bad.append(f"{name}: rows {sorted(json.loads(p.stdout))}, wanted a_0 and a_1 only")
    elif name == "host-null" and "no host programs" not in err:
        bad.append(f"{name}: not the no-host-service error: {err!r}")
    elif p.returncode != 0 and ("telemetry" not in err or "std::" in err):
        bad.append(f"{name}: not a clear error: {err!r}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad))
print("PASS")
