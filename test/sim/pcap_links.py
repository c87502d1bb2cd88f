#!/usr/bin/python3
"""mrc-sim --pcap-link captures the chosen link, and only it, with valid frames.

Usage: /usr/bin/python3 pcap_links.py MRC_SIM SCENARIO_DIR WORKDIR

single_flow.conf (host 0 on leaf 0 writes to host 4 on leaf 1) with two spines.
Each capture must hold frames, each a RoCEv2 frame (UDP 4791) whose ICRC the
independent zlib checker of test/conformance/scapy_icrc.py accepts, in time
order, and every frame must belong on that link: its plane (the second byte of
its addresses) and its source or destination host must be the link's. The
leaf-spine links are named with leaf != spine, so that swapped indices show.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conformance"))
from scapy_icrc import icrc_zlib, locate_l3, stored_icrc  # noqa: E402
from scapy.all import PcapReader, raw  # noqa: E402

HOSTS_PER_LEAF = 4


def host_of(ip):
    """Fabric::addr: 10.PLANE.(host + 1) as 16 bits."""
    return int.from_bytes(ip[2:4], "big") - 1


# link spec -> (description, plane, which frames belong: f(src_host, dst_host))
LINKS = {
    "up:0:0": ("host 0's uplink on plane 0", 0, lambda s, d: s == 0),
    "down:3:4": ("host 4's downlink on plane 3", 3, lambda s, d: d == 4),
    "up:2:4": ("host 4's uplink on plane 2 (its ACKs)", 2, lambda s, d: s == 4 and d == 0),
    "leaf-spine:1:0:1": ("leaf 0 to spine 1 on plane 1", 1,
                         lambda s, d: s // HOSTS_PER_LEAF == 0 and d // HOSTS_PER_LEAF != 0),
    "spine-leaf:1:0:1": ("spine 1 to leaf 0 on plane 1", 1, lambda s, d: d // HOSTS_PER_LEAF == 0),
}


def main():
    sim, scenarios, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    failures = 0

    def fail(msg):
        nonlocal failures
        print("FAIL " + msg)
        failures += 1

    # A malformed or out-of-range link is refused with the option named.
    for bad in ("up:0:99", "leaf-spine:0:0", "sideways:0:0", "down:x:1"):
        r = subprocess.run([sim, "--config", os.path.join(scenarios, "single_flow.conf"), "--spines", "2",
                            "--pcap", os.path.join(work, "bad.pcap"), "--pcap-link", bad],
                           capture_output=True, text=True)
        if r.returncode == 0 or "--pcap-link" not in r.stderr:
            fail(f"--pcap-link {bad}: exit {r.returncode}, stderr {r.stderr.strip()!r}")

    for spec, (what, plane, belongs) in LINKS.items():
        pcap = os.path.join(work, spec.replace(":", "_") + ".pcap")
        r = subprocess.run([sim, "--config", os.path.join(scenarios, "single_flow.conf"), "--spines", "2",
                            "--pcap", pcap, "--pcap-link", spec], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{spec}: mrc-sim exited {r.returncode}: {r.stderr.strip()}")
            continue
        n, data, last_t = 0, 0, 0.0
        for pkt in PcapReader(pcap):
            frame, t = raw(pkt), float(pkt.time)
            where = f"{spec} frame {n}"
            n += 1
            if t < last_t:
                fail(f"{where}: time goes back ({t} after {last_t})")
            last_t = t
            l3_start, l3_end, why = locate_l3(frame)
            if why:
                fail(f"{where}: {why}")
                continue
            l3 = frame[l3_start:l3_end]
            if l3[0] >> 4 != 4 or int.from_bytes(l3[22:24], "big") != 4791:
                fail(f"{where}: not IPv4 UDP to 4791")
                continue
            if icrc_zlib(l3) != stored_icrc(l3):
                fail(f"{where}: ICRC {stored_icrc(l3):#010x}, zlib computes {icrc_zlib(l3):#010x}")
            src, dst = host_of(l3[12:16]), host_of(l3[16:20])
            if l3[13] != plane or l3[17] != plane:
                fail(f"{where}: addresses {l3[12:16].hex()} -> {l3[16:20].hex()} are not on plane {plane}")
            if not belongs(src, dst):
                fail(f"{where}: host {src} -> host {dst} does not cross {what}")
            data += len(frame) > 1000
        if n == 0:
            fail(f"{spec}: no frames captured on {what}")
        print(f"  {spec} ({what}): {n} frames, {data} of them data")
    print(f"pcap_links: {len(LINKS)} links, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
