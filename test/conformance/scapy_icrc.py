#!/usr/bin/python3
"""Recomputes the ICRC of every frame mrc-craft writes, without our C++ code.

Usage: /usr/bin/python3 scapy_icrc.py --craft PATH_TO_mrc-craft --workdir DIR

Two independent checkers:
  * scapy 2.5's RoCEv2 BTH layer (scapy.contrib.roce), which computes the
    ICRC when a packet is rebuilt with icrc=None. It only knows IPv4.
  * icrc_zlib() below, a direct reading of the RoCEv2 rule (IBTA A17.8):
    CRC-32 over 8 bytes of 0xFF (the masked LRH InfiniBand would carry), the
    IP header with its variant fields set to all ones, the UDP header with
    checksum 0xFFFF, the BTH with byte 4 (FECN/BECN/reserved) 0xFF, then the
    rest of the packet up to the ICRC, which is stored little-endian.
IPv4 frames go through both, which also cross-checks icrc_zlib() against
scapy; IPv6 frames only through icrc_zlib(). Two published vectors pin
icrc_zlib() before anything else runs.

The manifest says what each frame is meant to be: "valid" frames and every
negative kind except bad_icrc carry a correct ICRC; bad_icrc frames must not.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import zlib

from scapy.all import Ether, UDP, rdpcap, raw
from scapy.contrib.roce import BTH

ETH_LEN, VLAN_LEN, IPV4_LEN, IPV6_LEN, UDP_LEN, BTH_LEN, ICRC_LEN = 14, 4, 20, 40, 8, 12, 4

V6 = ["--src-ip", "2001:db8::1", "--dst-ip", "2001:db8::2"]
RUNS = [
    ("all_opcodes", ["--all-opcodes"]),  # IPv4 and IPv6, one frame per opcode
    ("all_opcodes_ts_psnwrap", ["--all-opcodes", "--ts", "--psn", str(0xFFFFF8)]),
    # Masked fields set to non-zero values, so a checker that forgot to mask
    # one would disagree: DSCP/ECN (IPv4 TOS, IPv6 traffic class), flow label.
    ("v4_mrc_masked", ["--dscp", "46", "--ecn-ce", "--size", "1", "2", "3", "4097", "--mtu", "1024",
                       "--op", "write_imm", "--emit", "ack", "sack", "nack", "probe", "ep-req", "ep-rsp"]),
    ("v6_mrc_stev_masked", V6 + ["--ev-format", "stev", "--ev-range", "0x1234ABC0-0x1234ABC7", "--dscp", "10",
                                 "--ecn-ce", "--size", "1", "6", "5000", "--mtu", "1024", "--ts", "--rtx",
                                 "--emit", "ack", "sack", "nack", "probe", "ep-req", "ep-rsp"]),
    ("v4_rocev2_vlan", ["--transport", "rocev2", "--vlan", "0xE07B", "--size", "7", "9000", "--mtu", "4096",
                        "--op", "write_imm", "--emit", "ack"]),
    ("v6_rocev2_vlan", V6 + ["--transport", "rocev2", "--vlan", "100", "--size", "10", "3000", "--mtu", "1024",
                             "--emit", "ack"]),
    ("v4_mrc_negative", ["--size", "64", "--negative", "all"]),
    ("v6_mrc_negative", V6 + ["--size", "64", "--negative", "all"]),
    ("v4_rocev2_negative", ["--transport", "rocev2", "--size", "64", "--negative", "all"]),
    ("v6_rocev2_negative", V6 + ["--transport", "rocev2", "--size", "64", "--negative", "all"]),
]


def icrc_zlib(l3):
    """ICRC of the IP packet l3 (IP header through ICRC) by the RoCEv2 rule."""
    version = l3[0] >> 4
    ip_len = IPV4_LEN if version == 4 else IPV6_LEN
    h = bytearray(l3[:ip_len + UDP_LEN + BTH_LEN])
    if version == 4:
        h[1] = 0xFF  # TOS (DSCP + ECN)
        h[8] = 0xFF  # TTL
        h[10:12] = b"\xff\xff"  # header checksum
    else:
        h[0] |= 0x0F  # traffic class, high nibble
        h[1] = 0xFF  # traffic class low nibble + flow label high nibble
        h[2:4] = b"\xff\xff"  # rest of the flow label
        h[7] = 0xFF  # hop limit
    h[ip_len + 6:ip_len + 8] = b"\xff\xff"  # UDP checksum
    h[ip_len + UDP_LEN + 4] = 0xFF  # BTH FECN, BECN and reserved bits
    return zlib.crc32(b"\xff" * 8 + bytes(h) + l3[len(h):-ICRC_LEN])


def stored_icrc(l3):
    return int.from_bytes(l3[-ICRC_LEN:], "little")


def self_test():
    """icrc_zlib() against two published IPv4 vectors, as IP packets."""
    # scapy's own RoCE test: UC SEND_ONLY, ICRC field 0x78f353f3 (as bytes).
    uc = bytes.fromhex("45010040047840004011" "0000" "c0a80007c0a80007"
                       "c00012b7002c0000" "2460ffff000000d300cf1710") + b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00"
    # A ConnectX-4 Lx CNP captured on the wire; ICRC bytes 82 fd 00 2a.
    cnp = bytes.fromhex("45c2003c718c4000401191610a0011010a001201000012b700280000"
                        "8100ffff4000011800000000") + bytes(16)
    ok = icrc_zlib(uc + b"\0" * 4) == int.from_bytes(bytes.fromhex("78f353f3"), "little")
    ok &= icrc_zlib(cnp + b"\0" * 4) == int.from_bytes(bytes.fromhex("82fd002a"), "little")
    return ok


def locate_l3(frame):
    """Returns (start, end) of the IP packet (ICRC included) and why not."""
    off = ETH_LEN
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == 0x8100:
        ethertype = int.from_bytes(frame[16:18], "big")
        off += VLAN_LEN
    if ethertype == 0x0800:
        end = off + int.from_bytes(frame[off + 2:off + 4], "big")
        ip_len = IPV4_LEN
    elif ethertype == 0x86DD:
        end = off + IPV6_LEN + int.from_bytes(frame[off + 4:off + 6], "big")
        ip_len = IPV6_LEN
    else:
        return None, None, f"ethertype {ethertype:#06x} is not IP"
    if end > len(frame):
        return None, None, f"frame ends {end - len(frame)} bytes before its IP length says"
    if end - off < ip_len + UDP_LEN + BTH_LEN + ICRC_LEN:
        return None, None, "IP packet too short for UDP + BTH + ICRC"
    return off, end, None


def icrc_scapy(frame, l3_end):
    """scapy's ICRC of an IPv4 frame: rebuild a copy with icrc=None."""
    pkt = Ether(frame)
    if BTH not in pkt:
        return None
    copy = pkt.copy()
    copy[BTH].icrc = None
    rebuilt = raw(copy)
    if raw(pkt) != frame or len(rebuilt) != len(frame):
        return None  # scapy did not round-trip the frame, so its ICRC means nothing
    return stored_icrc(rebuilt[:l3_end])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--craft", required=True, help="path to mrc-craft")
    ap.add_argument("--workdir", required=True, help="directory for pcaps and manifests")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    start = time.monotonic()
    failures, checked, skipped = 0, {4: 0, 6: 0}, 0

    def fail(msg):
        nonlocal failures
        print("FAIL " + msg)
        failures += 1

    if not self_test():
        fail("icrc_zlib() disagrees with the published UC SEND_ONLY / CNP vectors")
    print("note: IPv6 frames are checked with the zlib implementation only; "
          "scapy 2.5's BTH computes the ICRC for IPv4 only")

    for name, craft_args in RUNS:
        pcap = os.path.join(args.workdir, name + ".pcap")
        manifest_path = os.path.join(args.workdir, name + ".jsonl")
        res = subprocess.run([args.craft, "--out", pcap, "--manifest", manifest_path] + craft_args,
                             capture_output=True, text=True)
        if res.returncode != 0:
            fail(f"{name}: mrc-craft {' '.join(craft_args)} exited {res.returncode}: {res.stderr.strip()}")
            continue
        with open(manifest_path) as f:
            manifest = [json.loads(line) for line in f]
        frames = [raw(p) for p in rdpcap(pcap)]
        if len(frames) != len(manifest):
            fail(f"{name}: pcap has {len(frames)} frames, manifest {len(manifest)}")
            continue
        for m, frame in zip(manifest, frames):
            where = f"{name} frame {m['index']} ({m['opcode_name']}, kind {m['kind']}, IPv{m['ip_version']})"
            l3_start, l3_end, why = locate_l3(frame)
            if why:
                if m["kind"] == "valid":
                    fail(f"{where}: {why}")
                else:
                    print(f"skip {where}: ICRC not locatable: {why}")
                    skipped += 1
                continue
            l3 = frame[l3_start:l3_end]
            stored, want_match = stored_icrc(l3), m["kind"] != "bad_icrc"
            computed = {"zlib": icrc_zlib(l3)}
            if m["ip_version"] == 4:
                computed["scapy"] = icrc_scapy(frame, l3_end)
                if computed["scapy"] != computed["zlib"]:
                    fail(f"{where}: checkers disagree: scapy {computed['scapy']}, zlib {computed['zlib']:#010x}")
            for checker, crc in computed.items():
                if crc is not None and (crc == stored) != want_match:
                    fail(f"{where}: [{checker}] computed {crc:#010x}, stored {stored:#010x}, "
                         f"expected {'match' if want_match else 'mismatch'}")
            checked[m["ip_version"]] += 1
        print(f"  {name}: {len(frames)} frames")

    total = checked[4] + checked[6]
    if total == 0:
        fail("no frames checked")
    print(f"scapy_icrc: {total} frames checked ({checked[4]} IPv4 by scapy and zlib, {checked[6]} IPv6 by zlib), "
          f"{skipped} skipped, {failures} failures; {time.monotonic() - start:.1f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
