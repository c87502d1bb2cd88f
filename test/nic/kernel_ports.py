#!/usr/bin/python3
"""Helpers of kernel_ports.sh (Debian's scapy, so /usr/bin/python3).

  kernel_ports.py probe IFACE SRC_IP TARGET_IP EXPECT_MAC|none [IFACE SRC TARGET EXPECT ...]
      Sends an ARP who-has (IPv4 TARGET) or a Neighbour Solicitation (IPv6
      TARGET) from IFACE's own MAC and SRC_IP, and sniffs IFACE for the
      answer. EXPECT_MAC: exactly that MAC must answer, in a well-formed
      reply addressed back to us. none: nothing may answer for TARGET.
  kernel_ports.py counters JSON DEV NAME>=N|NAME==N ...
      Checks counters of DEV in an mrc-nic JSON summary (missing = 0).
  kernel_ports.py workload JSON ROLE BYTES
      Checks a two-process workload summary: everything moved, intact.
Exits 1 on any failed check; prints one line per check.
"""
import ipaddress
import json
import re
import sys
import threading
import time

TIMEOUT_POSITIVE = 2.0  # s to wait for an expected reply
TIMEOUT_NEGATIVE = 1.0  # s of silence that proves "no reply" (replies take < 10 ms)

failed = False


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failed = True
    return ok


def probe(iface, src, target, expect):
    from scapy.all import (ARP, AsyncSniffer, Ether, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr,
                           ICMPv6NDOptSrcLLAddr, IPv6, get_if_hwaddr, sendp)
    from scapy.utils6 import in6_getnsma, in6_getnsmac
    from socket import AF_INET6, inet_ntop, inet_pton

    v6 = ipaddress.ip_address(target).version == 6
    me = get_if_hwaddr(iface).lower()
    expect = expect.lower()
    if v6:
        nsma = in6_getnsma(inet_pton(AF_INET6, target))
        req = (Ether(src=me, dst=in6_getnsmac(nsma)) / IPv6(src=src, dst=inet_ntop(AF_INET6, nsma), hlim=255) /
               ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr=me))
        what = f"NS who-has {target} on {iface}"

        def is_reply(p):
            # The plane's own announcements (unsolicited, to all nodes; sent as its link comes up
            # and 2 s later) may fall in the window: they answer nobody.
            if ICMPv6ND_NA not in p or ipaddress.ip_address(p[ICMPv6ND_NA].tgt) != ipaddress.ip_address(target):
                return False
            return p[ICMPv6ND_NA].S or ipaddress.ip_address(p[IPv6].dst) != ipaddress.ip_address("ff02::1")
    else:
        req = Ether(src=me, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=me, psrc=src, hwdst="00:00:00:00:00:00",
                                                            pdst=target)
        what = f"ARP who-has {target} on {iface}"

        def is_reply(p):
            return ARP in p and p[ARP].op == 2 and p[ARP].psrc == target

    replies = []
    got = threading.Event()

    t_reply = []

    def on_frame(p):
        if is_reply(p):
            replies.append(p)
            t_reply.append(time.monotonic())
            got.set()

    ready = threading.Event()
    sniffer = AsyncSniffer(iface=iface, prn=on_frame, store=False, started_callback=ready.set)
    sniffer.start()
    if not ready.wait(5):
        return check(False, f"{what}: the sniffer did not start")
    time.sleep(0.05)
    t0 = time.monotonic()
    sendp(req, iface=iface, verbose=False)
    if expect == "none":
        time.sleep(TIMEOUT_NEGATIVE)
    else:
        got.wait(TIMEOUT_POSITIVE)
        time.sleep(0.2)  # a duplicate or a second, conflicting answer
    sniffer.stop()
    rtt_ms = (t_reply[0] - t0) * 1e3 if t_reply else 0

    if expect == "none":
        return check(not replies, f"{what}: no reply in {TIMEOUT_NEGATIVE:.1f} s"
                     + (f" (got {len(replies)}: {replies[0].summary()} from {replies[0][Ether].src})"
                        if replies else ""))
    if not replies:
        return check(False, f"{what}: no reply in {TIMEOUT_POSITIVE:.1f} s (expected one from {expect})")
    bad = []
    for p in replies:
        e = p[Ether]
        if e.src.lower() != expect: bad.append(f"Ethernet source {e.src}, expected {expect}")
        if e.dst.lower() != me: bad.append(f"Ethernet destination {e.dst}, expected ours {me}")
        if v6:
            ip6, na = p[IPv6], p[ICMPv6ND_NA]
            if ipaddress.ip_address(ip6.src) != ipaddress.ip_address(target):
                bad.append(f"IPv6 source {ip6.src}")
            if ipaddress.ip_address(ip6.dst) != ipaddress.ip_address(src):
                bad.append(f"IPv6 destination {ip6.dst}, expected {src}")
            if ip6.hlim != 255: bad.append(f"hop limit {ip6.hlim} (RFC 4861 wants 255)")
            if not na.S: bad.append("Solicited flag clear")
            if na.R: bad.append("Router flag set")
            opt = p.getlayer(ICMPv6NDOptDstLLAddr)
            if opt is None: bad.append("no Target Link-Layer Address option")
            elif opt.lladdr.lower() != expect: bad.append(f"target link-layer address {opt.lladdr}")
            # ICMPv6 checksum: recompute it from the bytes received.
            raw = p[IPv6].copy()
            del raw[ICMPv6ND_NA].cksum
            want = IPv6(bytes(raw))[ICMPv6ND_NA].cksum
            if na.cksum != want: bad.append(f"ICMPv6 checksum {na.cksum:#06x}, expected {want:#06x}")
        else:
            a = p[ARP]
            if a.hwsrc.lower() != expect: bad.append(f"sender MAC {a.hwsrc}")
            if a.hwdst.lower() != me: bad.append(f"target MAC {a.hwdst}, expected ours {me}")
            if a.pdst != src: bad.append(f"target IP {a.pdst}, expected {src}")
            if a.hwtype != 1 or a.ptype != 0x0800 or a.hwlen != 6 or a.plen != 4:
                bad.append("bad ARP hardware/protocol fields")
    p = replies[0]
    mac = p[ICMPv6NDOptDstLLAddr].lladdr if v6 and p.haslayer(ICMPv6NDOptDstLLAddr) else (
        p[Ether].src if v6 else p[ARP].hwsrc)
    return check(not bad, f"{what}: {len(replies)} reply, {'NA' if v6 else 'is-at'} {mac} "
                 f"(expected {expect}) after {rtt_ms:.0f} ms" + (": " + "; ".join(sorted(set(bad))) if bad else ""))


def counters(path, dev, conds):
    j = json.load(open(path))
    c = j["devices"][dev]["counters"]
    for cond in conds:
        m = re.fullmatch(r"(\w+)(>=|==|<=)(\d+)", cond)
        if not m:
            sys.exit(f"bad condition {cond}")
        name, op, n = m.group(1), m.group(2), int(m.group(3))
        v = c.get(name, 0)
        ok = {">=": v >= n, "==": v == n, "<=": v <= n}[op]
        check(ok, f"{dev} {name} = {v} (want {op} {n})")


def workload(path, role, want):
    j = json.load(open(path))
    w = j["workload"]
    print(f"{role}: {w['bytes']} B in {w['seconds']:.3f} s = {w['goodput_gbps']:.2f} Gb/s, slots checked "
          f"{w['slots_checked']}, retransmits "
          + ", ".join(f"{d}={v['retransmits']}" for d, v in j["devices"].items())
          + ", port oerrors/imissed "
          + ", ".join(f"{p['port_oerrors']}/{p['port_imissed']}" for d in j["devices"].values() for p in d["planes"]))
    check(w["integrity_ok"], f"{role}: integrity_ok is {str(w['integrity_ok']).lower()}")
    check(w["completions_ok"], f"{role}: completions_ok is {str(w['completions_ok']).lower()}")
    check(not w["errors"], f"{role}: {w['errors']} error completions" +
          (f" ({w.get('first_error')})" if w["errors"] else ""))
    check(w["bytes"] == want, f"{role}: moved {w['bytes']} of {want} bytes")
    check(w["slots_checked"] > 0, f"{role}: {w['slots_checked']} slots verified by the responder")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    if cmd == "probe":
        if not args or len(args) % 4:
            sys.exit("probe: IFACE SRC_IP TARGET_IP EXPECT_MAC|none, repeated")
        for i in range(0, len(args), 4):
            probe(*args[i:i + 4])
    elif cmd == "counters":
        counters(args[0], args[1], args[2:])
    elif cmd == "workload":
        workload(args[0], args[1], int(args[2]))
    else:
        sys.exit(f"unknown command {cmd}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
