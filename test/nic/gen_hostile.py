#!/usr/bin/python3
"""Writes a pcap of hostile traffic for one IPv4 plane of an mrc-nic device.

Usage: /usr/bin/python3 gen_hostile.py --craft PATH_TO_mrc-craft --out FILE.pcap
           --expect FILE.json [--vectors-out FILE.pcap] [--seed N]
           [--mac M --ip A --peer-mac M --peer-ip A --qpn Q --psn P]

The frames, in a seed-determined order (same seed, same bytes):
  * every `mrc-craft --negative all` vector (and the valid write mrc-craft
    puts before them), --transport mrc and rocev2, to our MAC/IP/QPN, plus
    the same over IPv6 to our MAC (the plane has no IPv6 address);
  * single-bit flips of those valid writes;
  * Ethernet/IPv4/UDP-4791 headers to us, correct up to the UDP header,
    followed by a random BTH and rest;
  * random garbage (lengths 0..2000, half of it to our MAC);
  * ARP requests for our IP (padded and one 42-byte runt), for other IPs,
    from a multicast sender; replies and announcements for the peer, which
    the receiver has as a static neighbour (its own MAC and another), and an
    announcement of an unknown IP; IPv6 Neighbour Solicitations;
  * runts: 0..13 bytes, and IPv4 frames cut inside the IP or UDP header.
--expect gets the frame count, the mrc-craft manifests' kinds and what the
receiving plane must make of the rest (ARP replies, lower bounds of
not-ours and malformed drops), for malformed.sh to assert against mrc-nic's
counters. --vectors-out also writes the mrc-craft vectors alone, so that a
run on them can attribute every counter exactly. Standard library only,
apart from running mrc-craft.
"""
import argparse
import collections
import ipaddress
import json
import os
import random
import struct
import subprocess
import tempfile

BROADCAST = b"\xff" * 6


def mac(s):
    return bytes.fromhex(s.replace(":", ""))


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(src, dst, payload, proto=17):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, 64, proto, 0,
                    ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload


def arp(op, sha, spa, tpa, tha=b"\0" * 6):
    return struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, op, sha, ipaddress.IPv4Address(spa).packed, tha,
                       ipaddress.IPv4Address(tpa).packed)


def pad60(frame):
    return frame + b"\0" * max(0, 60 - len(frame))


def neighbour_solicit(src_mac, src_ip, target):
    """A well-formed RFC 4861 NS to target's solicited-node group."""
    t = ipaddress.IPv6Address(target).packed
    group = ipaddress.IPv6Address("ff02::1:ff00:0").packed[:13] + t[13:]
    src = ipaddress.IPv6Address(src_ip).packed
    body = struct.pack("!BBHI", 135, 0, 0, 0) + t + bytes([1, 1]) + src_mac
    pseudo = src + group + struct.pack("!I3xB", len(body), 58)
    body = body[:2] + struct.pack("!H", csum(pseudo + body)) + body[4:]
    ip6 = struct.pack("!IHBB", 6 << 28, len(body), 58, 255) + src + group
    return b"\x33\x33" + group[12:] + src_mac + b"\x86\xdd" + ip6 + body


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", 1, i, len(fr), len(fr)) + fr)


def craft(tool, workdir, transport, dst_mac, src_mac, dst_ip, src_ip, qpn, psn):
    """mrc-craft's negative vectors (and one valid 64-byte write) with their manifest."""
    name = os.path.join(workdir, f"{transport}-{ipaddress.ip_address(dst_ip).version}")
    subprocess.run([tool, "--out", name + ".pcap", "--manifest", name + ".jsonl", "--transport", transport,
                    "--negative", "all", "--size", "64", "--dst-mac", dst_mac, "--src-mac", src_mac,
                    "--dst-ip", dst_ip, "--src-ip", src_ip, "--dst-qpn", str(qpn), "--psn", str(psn)],
                   check=True, capture_output=True)
    with open(name + ".jsonl") as f:
        kinds = [json.loads(line)["kind"] for line in f]
    with open(name + ".pcap", "rb") as f:
        data = f.read()
    frames, off = [], 24  # mrc-craft writes little-endian classic pcap
    while off < len(data):
        n = struct.unpack_from("<I", data, off + 8)[0]
        frames.append(data[off + 16:off + 16 + n])
        off += 16 + n
    assert len(frames) == len(kinds), f"{name}: {len(frames)} frames, {len(kinds)} manifest lines"
    return list(zip(kinds, frames))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--craft", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--expect", required=True)
    ap.add_argument("--vectors-out", help="also write the mrc-craft vectors alone here")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mac", default="02:00:00:00:02:02")
    ap.add_argument("--ip", default="10.0.2.2")
    ap.add_argument("--peer-mac", default="02:00:00:00:02:01")
    ap.add_argument("--peer-ip", default="10.0.2.1")
    ap.add_argument("--qpn", type=int, default=16)
    ap.add_argument("--psn", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    ours, peer = mac(a.mac), mac(a.peer_mac)
    frames = []  # (category, bytes)
    # What the receiving plane must count, beyond the mrc-craft kinds.
    expect = collections.Counter()

    with tempfile.TemporaryDirectory() as tmp:
        crafted = {}
        for transport in ("mrc", "rocev2"):
            crafted[transport, 4] = craft(a.craft, tmp, transport, a.mac, a.peer_mac, a.ip, a.peer_ip, a.qpn, a.psn)
            crafted[transport, 6] = craft(a.craft, tmp, transport, a.mac, a.peer_mac, "2001:db8::2",
                                          "2001:db8::1", a.qpn, a.psn)
    kinds = {f"{t}-ipv{v}": dict(collections.Counter(k for k, _ in c)) for (t, v), c in crafted.items()}
    for (t, v), c in crafted.items():
        frames += [(f"craft-{t}-ipv{v}-{k}", f) for k, f in c]
        if v == 6:
            expect["not_ours_min"] += len(c)  # IPv6 to an IPv4-only plane

    # Single-bit flips of valid writes: the ICRC, the NIC or the PSN window
    # must stop each one; none may change what the workload reads back.
    valid = [f for c in crafted.values() for k, f in c if k == "valid" and f[12:14] == b"\x08\x00"]
    for _ in range(200):
        f = bytearray(rng.choice(valid))
        bit = rng.randrange(len(f) * 8)
        f[bit // 8] ^= 1 << (bit % 8)
        frames.append(("bitflip", bytes(f)))

    # Headers a NIC accepts, then nonsense for the engine's parser. Half keep
    # tver 0 and a real opcode so the parser gets past the BTH.
    opcodes = [0x06, 0x0A, 0x11, 0x81, 0xC6, 0xCA, 0xCB, 0xD1, 0xD8, 0xDC, 0xDD, 0xDE]
    for i in range(200):
        rest = bytearray(rng.randbytes(rng.randrange(0, 300)))
        if i % 2 and len(rest) >= 12:
            rest[0] = rng.choice(opcodes)
            rest[1] &= 0xF0
        udp = struct.pack("!HHHH", rng.randrange(49152, 65536), 4791, 8 + len(rest), 0) + rest
        frames.append(("random-bth", ours + peer + b"\x08\x00" + ipv4(a.peer_ip, a.ip, udp)))

    # Garbage. Random MACs and EtherTypes are (almost surely) not ours; with
    # our MAC, the EtherType decides.
    for i in range(200):
        n = rng.randrange(0, 21) if i < 40 else rng.randrange(0, 2001)
        f = rng.randbytes(n)
        if i % 2 and n >= 6:
            f = ours + f[6:]
        frames.append(("garbage", f))

    # Link layer. A request for our IP is answered however short the frame
    # (a PMD need not pad); anything else is someone else's business.
    for _ in range(5):
        frames.append(("arp-for-us", pad60(BROADCAST + peer + b"\x08\x06" + arp(1, peer, a.peer_ip, a.ip))))
    frames.append(("arp-for-us", ours + peer + b"\x08\x06" + arp(1, peer, a.peer_ip, a.ip)))  # 42-byte runt
    expect["arp_replies"] = 6
    for i in range(5):
        frames.append(("arp-other", pad60(BROADCAST + peer + b"\x08\x06" + arp(1, peer, a.peer_ip, f"10.9.9.{i}"))))
    expect["not_ours_min"] += 5
    # The peer is a static neighbour of the receiver: its own binding is
    # kept, another MAC for its IP is refused, by reply or announcement;
    # an announcement of an IP not in the table changes nothing.
    frames.append(("arp-static-same", pad60(ours + peer + b"\x08\x06" + arp(2, peer, a.peer_ip, a.ip, ours))))
    impostor = bytes.fromhex("020000000999")
    frames.append(("arp-static-other",
                   pad60(ours + impostor + b"\x08\x06" + arp(2, impostor, a.peer_ip, a.ip, ours))))
    frames.append(("arp-static-other",
                   pad60(BROADCAST + impostor + b"\x08\x06" + arp(1, impostor, a.peer_ip, a.peer_ip))))
    frames.append(("arp-announce-unknown",
                   pad60(BROADCAST + impostor + b"\x08\x06" + arp(1, impostor, "10.0.2.77", "10.0.2.77"))))
    expect["static_kept"], expect["static_conflicts"], expect["announcements_unused"] = 1, 2, 1
    frames.append(("arp-bad-sender", pad60(BROADCAST + peer + b"\x08\x06" + arp(1, BROADCAST, a.peer_ip, a.ip))))
    frames.append(("arp-cut", BROADCAST + peer + b"\x08\x06" + arp(1, peer, a.peer_ip, a.ip)[:20]))
    expect["malformed_min"] += 2
    for target in ("2001:db8::2", "fe80::2"):
        frames.append(("ipv6-ns", neighbour_solicit(peer, "2001:db8::1", target)))
    expect["not_ours_min"] += 2  # IPv4-only plane: no ND
    expect["nd_replies"] = 0

    # Runts: too short for Ethernet, or for the IPv4 / UDP header they announce.
    for n in range(14):
        frames.append(("runt", rng.randbytes(n)))
    good = ours + peer + b"\x08\x00" + ipv4(a.peer_ip, a.ip, struct.pack("!HHHH", 49152, 4791, 8, 0))
    for n in (14, 20, 33, 34 + 4):
        frames.append(("runt", good[:n]))
    expect["malformed_min"] += 14 + 4

    if a.vectors_out:
        write_pcap(a.vectors_out, [f for c, f in frames if c.startswith("craft-")])
    rng.shuffle(frames)
    write_pcap(a.out, [f for _, f in frames])
    expect["frames"] = len(frames)
    with open(a.expect, "w") as f:
        json.dump({"seed": a.seed, "categories": dict(collections.Counter(c for c, _ in frames)),
                   "craft_kinds": kinds, **expect}, f, indent=1)
    print(f"gen_hostile: {len(frames)} frames to {a.out}")


if __name__ == "__main__":
    main()
