#!/usr/bin/python3
"""Generates test/unit/golden_vectors.h: RoCEv2 frames built by scapy.

Usage: /usr/bin/python3 test/conformance/gen_golden.py > test/unit/golden_vectors.h

scapy (scapy.contrib.roce, 2.5) is an implementation of the BTH and of the
IPv4 ICRC that we did not write, so frames it builds are golden vectors for
our parser and ICRC code. Two vectors come from outside altogether and pin
scapy itself: the UC SEND_ONLY packet of scapy's own RoCE test suite, and a
CNP captured from a ConnectX-4 Lx NIC; the script stops if scapy does not
reproduce their ICRCs. The rest are RC WRITE/ACK packets (and one MRC WRITE)
whose RETH/ImmDt/AETH/METH bytes are packed here from the IBTA layouts
(big-endian), with the field values written next to each.

scapy 2.5 has no IPv6 ICRC, so all vectors are IPv4.
"""
import struct
import sys

import scapy
from scapy.all import IP, UDP, Dot1Q, Ether, Raw, raw
from scapy.contrib.roce import BTH

ETH_LEN, VLAN_LEN, IPV4_LEN, UDP_LEN, BTH_LEN, ICRC_LEN = 14, 4, 20, 8, 12, 4
MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"


def reth(va, rkey, dma_len):
    return struct.pack("!QII", va, rkey, dma_len)


def pattern(n, seed):
    return bytes((seed + 7 * i) & 0xFF for i in range(n))


def rc_frame(opcode, dqpn, psn, ackreq, body, payload, vlan=None, tos=0, ttl=64, sport=0xC000):
    """Ether/[Dot1Q]/IPv4/UDP/BTH/body/payload/pad, ICRC computed by scapy."""
    pad = (4 - len(payload) % 4) % 4
    l2 = Ether(src=MAC_A, dst=MAC_B)
    if vlan is not None:
        l2 = l2 / Dot1Q(prio=vlan >> 13, vlan=vlan & 0xFFF)  # scapy: "id" is DEI
    pkt = (l2 / IP(src="10.1.0.1", dst="10.1.0.2", flags="DF", id=0x1234, tos=tos, ttl=ttl)
           / UDP(sport=sport, dport=4791, chksum=0)
           / BTH(opcode=opcode, padcount=pad, dqpn=dqpn, psn=psn, ackreq=ackreq)
           / Raw(body + payload + bytes(pad)))
    return raw(pkt)


def vector(name, frame, has_reth=False, va=0, rkey=0, dma_len=0, payload_len=0, expect_icrc=None):
    """Reads the BTH fields back with scapy's own dissector."""
    pkt = Ether(frame)
    bth = pkt[BTH]
    icrc = bth.icrc  # scapy's field: the 4 ICRC bytes read big-endian
    if raw(pkt) != frame or frame[-ICRC_LEN:] != struct.pack("!I", icrc):
        sys.exit(f"{name}: scapy does not round-trip the frame")
    copy = pkt.copy()
    copy[BTH].icrc = None  # rebuild: scapy recomputes the ICRC
    if raw(copy)[-ICRC_LEN:] != frame[-ICRC_LEN:]:
        sys.exit(f"{name}: stored ICRC {icrc:#010x} is not the one scapy computes")
    if expect_icrc is not None and icrc != expect_icrc:
        sys.exit(f"{name}: scapy gives ICRC {icrc:#010x}, the reference says {expect_icrc:#010x}")
    return dict(name=name, frame=frame, opcode=bth.opcode, dest_qp=bth.dqpn, psn=bth.psn, pad=bth.padcount,
                ack_req=bth.ackreq, has_reth=has_reth, va=va, rkey=rkey, dma_len=dma_len,
                icrc_wire_le=int.from_bytes(frame[-ICRC_LEN:], "little"), payload_len=payload_len)


def vectors():
    out = []

    # (a) scapy's test/contrib/roce.uts "RoCE layer" packet. UC SEND_ONLY:
    # migreq=1, pad 2, dqpn 211, psn 13571856, 20 bytes after the BTH of
    # which 2 are pad, so 18 bytes of payload. Reference ICRC 0x78f353f3.
    uc = (Ether(dst="24:8a:07:a8:fa:22", src="24:8a:07:a8:fa:22")
          / IP(tos=0x1, id=1144, flags="DF", ttl=64, src="192.168.0.7", dst="192.168.0.7", len=64)
          / UDP(sport=49152, dport=4791, len=44)
          / BTH(opcode="UC_SEND_ONLY", migreq=1, padcount=2, pkey=0xFFFF, dqpn=211, psn=13571856)
          / Raw(b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00"))
    out.append(vector("scapy_uc_send_only", raw(uc), payload_len=18, expect_icrc=0x78F353F3))

    # (b) CNP captured on a ConnectX-4 Lx (the "RoCE CNP captured" case of the
    # same scapy test): 10.0.17.1 -> 10.0.18.1, UDP sport 0, BECN set,
    # dqpn 0x118, psn 0, 16 reserved bytes (a header, so payload_len 0).
    cnp = bytes.fromhex("e41d2dab2bc27cfe90643b32080045c2003c718c4000401191610a0011010a001201000012b700280000"
                        "8100ffff4000011800000000") + bytes(16) + bytes.fromhex("82fd002a")
    out.append(vector("cx4lx_cnp_capture", cnp, expect_icrc=0x82FD002A))

    # (c) RC packets assembled here, ICRC by scapy.
    # WRITE_FIRST at the top of the PSN space, DSCP 26/ECN CE and TTL 37 to
    # exercise the ICRC masks: dqpn 0xABCDEF, psn 0xFFFFFF, ackreq 0,
    # RETH va 0x0123456789ABCDEF rkey 0xCAFEBABE dma_len 8192, 256 payload bytes.
    payload = pattern(256, 1)
    f = rc_frame(0x06, 0xABCDEF, 0xFFFFFF, 0, reth(0x0123456789ABCDEF, 0xCAFEBABE, 8192), payload, tos=0x6B, ttl=37)
    out.append(vector("rc_write_first", f, True, 0x0123456789ABCDEF, 0xCAFEBABE, 8192, len(payload)))

    # WRITE_ONLY with 13 payload bytes (pad 3), 802.1Q TCI 0xA064 (PCP 5,
    # VID 100): dqpn 0x000012, psn 0, ackreq 1, RETH va 0xFFFF800000001000
    # rkey 0x00001234 dma_len 13.
    payload = pattern(13, 2)
    f = rc_frame(0x0A, 0x12, 0, 1, reth(0xFFFF800000001000, 0x1234, 13), payload, vlan=0xA064, sport=0xFFFF)
    out.append(vector("rc_write_only_vlan_pad3", f, True, 0xFFFF800000001000, 0x1234, 13, len(payload)))

    # WRITE_ONLY_IMM with 6 payload bytes (pad 2): dqpn 0x800001, psn
    # 0x7FFFFF, ackreq 1, RETH va 0x10000000 rkey 0xFFFFFFFF dma_len 6,
    # ImmDt 0xDEADBEEF.
    payload = pattern(6, 3)
    body = reth(0x10000000, 0xFFFFFFFF, 6) + struct.pack("!I", 0xDEADBEEF)
    f = rc_frame(0x0B, 0x800001, 0x7FFFFF, 1, body, payload)
    out.append(vector("rc_write_only_imm_pad2", f, True, 0x10000000, 0xFFFFFFFF, 6, len(payload)))

    # WRITE_ONLY with no payload (a zero-length write): dqpn 0x000001, psn
    # 0x000100, ackreq 1, RETH va 0 rkey 0x00000001 dma_len 0.
    f = rc_frame(0x0A, 0x1, 0x100, 1, reth(0, 1, 0), b"")
    out.append(vector("rc_write_only_zero_len", f, True, 0, 1, 0, 0))

    # ACK: dqpn 0x000011, psn 0x123456, AETH syndrome 0x1F (ACK, unlimited
    # credits) msn 0x000042.
    f = rc_frame(0x11, 0x11, 0x123456, 0, struct.pack("!I", 0x1F << 24 | 0x42), b"")
    out.append(vector("rc_ack", f))

    # NAK PSN sequence error: dqpn 0x000011, psn 0x000010, AETH syndrome
    # 0x60 msn 0x000007.
    f = rc_frame(0x11, 0x11, 0x10, 0, struct.pack("!I", 0x60 << 24 | 0x7), b"")
    out.append(vector("rc_nak_psn_seq_err", f))

    # MRC WRITE_ONLY (0xCA) per lib/wire/spec.h: METH rq_msn 0x0000 msn
    # 0x0005, then RETH va 0x20000000 rkey 0x00005678 dma_len 64, 64 payload
    # bytes; dqpn 0x000012, psn 0xFFFFFE, ackreq 1. The METH layout is [S]
    # in spec.h; scapy only supplies the BTH and the ICRC here.
    payload = pattern(64, 4)
    body = struct.pack("!HH", 0, 5) + reth(0x20000000, 0x5678, 64)
    f = rc_frame(0xCA, 0x12, 0xFFFFFE, 1, body, payload, sport=0xC123)
    out.append(vector("mrc_write_only", f, True, 0x20000000, 0x5678, 64, len(payload)))
    return out


def cxx(vs):
    lines = [
        "// Generated by test/conformance/gen_golden.py with scapy "
        f"{scapy.__version__}; do not hand-edit, re-run:",
        "//   /usr/bin/python3 test/conformance/gen_golden.py > test/unit/golden_vectors.h",
        "// RoCEv2 frames (Ethernet through ICRC) whose BTH and ICRC come from scapy,",
        "// an implementation independent of ours; field values are documented in",
        "// gen_golden.py.",
        "#pragma once",
        "// clang-format off",
        "",
        "#include <cstdint>",
        "#include <string_view>",
        "#include <vector>",
        "",
        "namespace mrc::test {",
        "",
        "struct GoldenVector {",
        "  const char* name;",
        "  std::string_view frame;  // a string literal: brace lists of bytes compile slowly under ASan",
        "  uint8_t opcode;",
        "  uint32_t dest_qp;",
        "  uint32_t psn;",
        "  uint8_t pad;",
        "  bool ack_req;",
        "  bool has_reth;",
        "  uint64_t va;",
        "  uint32_t rkey;",
        "  uint32_t dma_len;",
        "  uint32_t icrc_wire_le;  // ICRC as the LE u32 read from the last 4 bytes",
        "  uint32_t payload_len;",
        "};",
        "",
        "inline const std::vector<GoldenVector> kGoldenVectors = {",
    ]
    for v in vs:
        lines.append(f"    {{\"{v['name']}\",")
        fr = v["frame"]
        chunks = ["\"" + "".join(f"\\x{b:02x}" for b in fr[i:i + 24]) + "\"" for i in range(0, len(fr), 24)]
        lines.append("     std::string_view(" + chunks[0])
        lines += ["                      " + c for c in chunks[1:]]
        lines[-1] += f", {len(fr)}),"
        lines.append(f"     0x{v['opcode']:02x}, 0x{v['dest_qp']:06x}, 0x{v['psn']:06x}, {v['pad']}, "
                     f"{str(bool(v['ack_req'])).lower()}, {str(v['has_reth']).lower()}, "
                     f"0x{v['va']:016x}ull, 0x{v['rkey']:08x}, {v['dma_len']}, 0x{v['icrc_wire_le']:08x}, "
                     f"{v['payload_len']}}},")
    lines += ["};", "", "}  // namespace mrc::test", "// clang-format on", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(cxx(vectors()))
