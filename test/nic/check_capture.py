#!/usr/bin/python3
"""Checks what mrc-nic puts on the wire, from its own --capture pcaps.

Usage: /usr/bin/python3 check_capture.py --nic PATH_TO_mrc-nic --workdir DIR

One mrc-nic process runs devices mrc0 and mrc1 joined by four rte_ring
pairs (four planes each) and writes 64 MiB from mrc0 to mrc1 with --capture.
Then, with code that is not mrc-nic's:
  (a) every RoCEv2 frame of every *-tx.pcap carries a correct ICRC, by
      icrc_zlib() of test/conformance/scapy_icrc.py (pinned by its self_test),
      and the only other frames are the plane's one or two ARP announcements
      of its own address;
  (b) tshark decodes every other frame as UDP/4791 InfiniBand, with no
      malformed packet and no expert error;
  (c) every RoCEv2 frame leaves on the plane the configured EV profile deals
      its UDP source port to (EV index i -> plane i % P), no port is outside
      the profile, and mrc0's data packets use most of the profile;
  (d) per plane, what one device captured on TX the other captured on RX,
      frame for frame (the rings lose nothing), and the RX captures hold as
      many frames as the NIC counted.
Self-checks first show each check can fail: a flipped byte must break the
ICRC, a foreign or misplaced EV must be reported, a truncated frame must
make tshark complain.
"""
import argparse
import glob
import hashlib
import json
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conformance"))
from scapy_icrc import icrc_zlib, locate_l3, self_test, stored_icrc  # noqa: E402

ROCE_PORT = 4791
PLANES = 4
# Two ranges whose lengths are not multiples of PLANES, so the dealing must
# run on across the range boundary (index 63 -> plane 3, 61000 is index 63).
# Not the default profile: the engine's built-in fallback (0xC000 + i) would
# pass a check against the default by accident.
EV_VALUES = ["50000-50062", "61000-61064"]
MIN_EV_FRACTION = 0.5  # of the profile that mrc0's data packets must use
DATA_OPCODES = range(0xC6, 0xCC)  # MRC WRITE first/middle/last/only(+imm), spec.h
EXPERT_ERROR = 0x00800000  # PI_ERROR in epan/proto.h; warnings are below


def ev_profile(items, planes):
    """EV value -> plane, by the rule documented for --ev-values: values in the
    order given (duplicates dropped), EV index i dealt to plane i % planes."""
    evs = []
    for item in items:
        a, _, b = item.partition("-")
        for v in range(int(a), int(b or a) + 1):
            if v not in evs:
                evs.append(v)
    return {v: i % planes for i, v in enumerate(evs)}


def read_pcap(path):
    """Frames of a classic pcap file (either byte order, µs or ns stamps)."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    endian = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",
              b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}.get(magic)
    if endian is None:
        raise ValueError(f"{path}: not a classic pcap file")
    frames, off = [], 24
    while off + 16 <= len(data):
        caplen, origlen = struct.unpack_from(endian + "II", data, off + 8)
        if caplen != origlen:
            raise ValueError(f"{path}: frame {len(frames) + 1} truncated by the capture")
        frames.append(data[off + 16:off + 16 + caplen])
        off += 16 + caplen
    if off != len(data):
        raise ValueError(f"{path}: {len(data) - off} trailing bytes")
    return frames


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", i, 0, len(fr), len(fr)) + fr)


def roce(frame):
    """(l3, sport, opcode) of an untagged RoCEv2 frame, else None."""
    start, end, why = locate_l3(frame)
    if why:
        return None
    ip_len = 20 if frame[start] >> 4 == 4 else 40
    proto = frame[start + 9] if ip_len == 20 else frame[start + 6]
    udp = start + ip_len
    if proto != 17 or int.from_bytes(frame[udp + 2:udp + 4], "big") != ROCE_PORT:
        return None
    return frame[start:end], int.from_bytes(frame[udp:udp + 2], "big"), frame[udp + 8]


def announcement(frame, ip):
    """True for a broadcast ARP announcement of `ip` (RFC 5227: sender and target both ip)."""
    return (len(frame) >= 42 and frame[0:6] == b"\xff" * 6 and frame[12:14] == b"\x08\x06"
            and frame[20:22] == b"\x00\x01" and frame[28:32] == ip and frame[38:42] == ip)


def icrc_ok(l3):
    return icrc_zlib(l3) == stored_icrc(l3)


def ev_problem(profile, sport, plane):
    """Why a frame with this source port may not leave on this plane, or None."""
    if sport not in profile:
        return f"source port {sport} is not in the EV profile"
    if profile[sport] != plane:
        return f"EV {sport} belongs to plane {profile[sport]}"
    return None


def tshark_problems(pcap, arp_ok=()):
    """Frames tshark does not decode as clean UDP/4791 InfiniBand, but for ARP frames numbered in arp_ok."""
    fields = ["frame.number", "frame.protocols", "udp.dstport", "_ws.malformed", "_ws.expert.severity"]
    cmd = ["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a",
           "-E", "aggregator=,"]
    for f in fields:
        cmd += ["-e", f]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    bad, rows = [], 0
    for line in res.stdout.splitlines():
        num, protos, dport, malformed, severity = (line.split("\t") + [""] * 5)[:5]
        rows += 1
        sev = max((int(s, 0) for s in severity.split(",") if s), default=0)
        if protos == "eth:ethertype:arp" and int(num) in arp_ok:
            continue
        if ":udp:infiniband" not in protos or dport != str(ROCE_PORT) or malformed or sev >= EXPERT_ERROR:
            bad.append(f"frame {num}: protocols {protos}, dport {dport}, malformed {malformed!r}, "
                       f"expert severity {sev:#x}")
    return rows, bad


def run_nic(nic, capdir):
    args = [nic, "--no-huge", "-m", "1024", "--no-pci", "--no-shconf", "-l", "0,1", "--log-level=*:warning", "--",
            "--device", "mrc0", "--device", "mrc1", "--ev-values", *EV_VALUES, "--capture", capdir,
            "--workload", "write", "--wl-from", "mrc0", "--wl-to", "mrc1", "--wl-size", "64k",
            "--wl-qps", "2", "--wl-bytes", "64M"]
    for p in range(PLANES):
        args += ["--ring-pair", f"ra{p}:rb{p}",
                 "--plane", f"mrc0 port=ra{p} ip=10.0.{p}.1 mac=02:00:00:00:0{p}:01",
                 "--plane", f"mrc1 port=rb{p} ip=10.0.{p}.2 mac=02:00:00:00:0{p}:02"]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nic", required=True, help="path to mrc-nic")
    ap.add_argument("--workdir", required=True, help="directory for captures")
    args = ap.parse_args()
    start = time.monotonic()
    failures = []

    def check(ok, msg):
        print(("ok   " if ok else "FAIL ") + msg)
        if not ok:
            failures.append(msg)
        return ok

    profile = ev_profile(EV_VALUES, PLANES)
    capdir = os.path.join(args.workdir, "cap")
    os.makedirs(capdir, exist_ok=True)  # mrc-nic does not create it
    for old in glob.glob(os.path.join(capdir, "*.pcap")):
        os.remove(old)

    res = run_nic(args.nic, capdir)
    if not check(res.returncode == 0, f"mrc-nic exited {res.returncode}"):
        print(res.stderr[-3000:])
        return 1
    summary = json.loads(res.stdout)
    wl = summary["workload"]
    check(wl["integrity_ok"] and wl["errors"] == 0, f"workload integrity_ok={wl['integrity_ok']} errors={wl['errors']}")

    caps = {}
    for dev in ("mrc0", "mrc1"):
        for p in range(PLANES):
            for d in ("rx", "tx"):
                caps[dev, p, d] = read_pcap(os.path.join(capdir, f"{dev}-plane{p}-{d}.pcap"))

    # Self-checks on a real data frame: each check must be able to fail.
    check(self_test(), "self-check: icrc_zlib() matches the published vectors")
    sample = next(f for f in caps["mrc0", 0, "tx"] if (r := roce(f)) and r[2] in DATA_OPCODES)
    l3_start = len(sample) - len(roce(sample)[0])
    check(icrc_ok(roce(sample)[0]), "self-check: the sample data frame's ICRC verifies")
    flipped = bytearray(sample)
    flipped[l3_start + 20 + 8 + 12 + 40] ^= 0x01  # a byte of the payload
    check(not icrc_ok(roce(bytes(flipped))[0]), "self-check: one flipped payload byte breaks the ICRC")
    masked = bytearray(sample)
    masked[l3_start + 8] ^= 0xFF  # IPv4 TTL: masked out of the ICRC
    check(icrc_ok(roce(bytes(masked))[0]), "self-check: a changed TTL (masked field) keeps the ICRC")
    outside = max(profile) + 1
    check(ev_problem(profile, outside, 0) is not None, f"self-check: EV {outside} outside the profile is reported")
    check(ev_problem(profile, 61000, 0) is not None and ev_problem(profile, 61000, 3) is None,
          "self-check: EV 61000 (index 63) is plane 3's, and reported on plane 0")
    bad_pcap = os.path.join(args.workdir, "selfcheck-truncated.pcap")
    write_pcap(bad_pcap, [sample, sample[:14 + 20 + 8 + 6]])  # second one cut inside the BTH
    _, bad = tshark_problems(bad_pcap)
    check(len(bad) == 1 and bad[0].startswith("frame 2:"), "self-check: tshark flags a frame cut inside its BTH")

    # (a) ICRC and (c) EVs of every RoCEv2 frame sent; (b) tshark per file.
    used = {"mrc0": set(), "mrc1": set()}
    for dev in ("mrc0", "mrc1"):
        for p in range(PLANES):
            name = f"{dev}-plane{p}-tx.pcap"
            frames = caps[dev, p, "tx"]
            not_roce, bad_icrc, bad_ev, announced = 0, [], [], []
            my_ip = bytes([10, 0, p, 1 if dev == "mrc0" else 2])
            for i, fr in enumerate(frames, 1):
                r = roce(fr)
                if not r:
                    if announcement(fr, my_ip):
                        announced.append(i)
                    else:
                        not_roce += 1
                    continue
                l3, sport, opcode = r
                if not icrc_ok(l3):
                    bad_icrc.append(i)
                why = ev_problem(profile, sport, p)
                if l3[12:16] != bytes([10, 0, p, 1 if dev == "mrc0" else 2]):
                    why = f"source IP {'.'.join(map(str, l3[12:16]))} is not {dev}'s plane-{p} address"
                if why:
                    bad_ev.append(f"frame {i} opcode {opcode:#x}: {why}")
                elif opcode in DATA_OPCODES:
                    used[dev].add(sport)
            # The plane announces its address as its link comes up, twice 2 s apart.
            check(not_roce == 0 and not bad_icrc and 1 <= len(announced) <= 2,
                  f"(a) {name}: {len(frames)} frames, {len(announced)} ARP announcement(s) of {dev}'s address, "
                  f"{not_roce} other not RoCEv2, {len(bad_icrc)} bad ICRC"
                  + (f" (frames {bad_icrc[:5]})" if bad_icrc else ""))
            check(not bad_ev, f"(c) {name}: sent from {dev}'s plane-{p} IP, every source port an EV of plane {p}"
                  + (f"; {len(bad_ev)} are not, e.g. {bad_ev[:3]}" if bad_ev else ""))
            rows, bad = tshark_problems(os.path.join(capdir, name), set(announced))
            check(rows == len(frames) and not bad,
                  f"(b) {name}: tshark decoded {rows} frames, {len(bad)} not clean UDP/4791 InfiniBand"
                  + (f", e.g. {bad[:3]}" if bad else ""))
    n = len(used["mrc0"])
    check(n >= MIN_EV_FRACTION * len(profile),
          f"(c) mrc0's data packets used {n} of the {len(profile)} EVs of the profile "
          f"(at least {MIN_EV_FRACTION:.0%} required)")
    check(not used["mrc1"], f"(c) mrc1 (the responder) sent no data packets ({len(used['mrc1'])} EVs used)")

    # (d) Ring pairs are lossless and FIFO: TX of one side is RX of the other.
    def digest(frames):
        h = hashlib.sha256()
        for fr in frames:
            h.update(len(fr).to_bytes(4, "little") + fr)
        return h.hexdigest()

    for src, dst in (("mrc0", "mrc1"), ("mrc1", "mrc0")):
        for p in range(PLANES):
            tx, rx = caps[src, p, "tx"], caps[dst, p, "rx"]
            check(len(tx) == len(rx) and digest(tx) == digest(rx),
                  f"(d) plane {p}: {src} sent {len(tx)} frames, {dst} received {len(rx)}"
                  + ("" if len(tx) != len(rx) else ", identical" if digest(tx) == digest(rx) else ", DIFFERENT bytes"))
            counted = summary["devices"][dst]["planes"][p]["rx_frames"]
            check(counted == len(rx), f"(d) plane {p}: {dst} counted {counted} RX frames, captured {len(rx)}")

    print(f"check_capture: {'PASS' if not failures else 'FAIL'}: {len(failures)} failures; "
          f"{time.monotonic() - start:.1f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
