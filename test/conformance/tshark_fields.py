#!/usr/bin/python3
"""Checks mrc-craft's frames against Wireshark's RoCEv2 dissector.

Usage: /usr/bin/python3 tshark_fields.py --craft PATH_TO_mrc-craft --workdir DIR

mrc-craft writes a manifest of the field values it meant to put in each frame.
tshark is an implementation we did not write, so if it decodes the same values
from the pcap, our header layouts and byte orders agree with the IBTA ones.

tshark 4.0 decodes the BTH of every opcode, and RETH/ImmDt/AETH of the plain
RC opcodes. MRC opcodes (0xC6-0xDE) are unknown to it: it shows everything
after the BTH as one "vendor" byte string. For those we decode that string
here, from the layouts in lib/wire/spec.h re-typed by hand below, so the
C++ field tables are not trusted to check themselves.

Before exiting the script re-runs its comparison on manifests with one value
changed, once for every (field, source) pair it compared, and fails if any
change goes unnoticed: a checker that cannot fail proves nothing.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROCE_PORT = 4791

# name, mrc-craft arguments, and per-run expectations the manifest cannot give.
V6 = ["--src-ip", "2001:db8::1", "--dst-ip", "2001:db8::2"]
SIZES = ["--size", "1", "4096", "10000", "65536"]
WRAP = ["--psn", str(0xFFFFF0)]  # 16 PSNs before the 24-bit wrap
RUNS = [
    ("v4_mrc_write_mtu1024", SIZES + WRAP + ["--mtu", "1024"], {}),
    ("v4_rocev2_write_mtu4096", SIZES + WRAP + ["--mtu", "4096", "--transport", "rocev2"], {}),
    ("v4_rocev2_write_imm_mtu1024", SIZES + WRAP + ["--mtu", "1024", "--transport", "rocev2", "--op", "write_imm"], {}),
    ("v6_mrc_write_imm_mtu4096", V6 + SIZES + WRAP + ["--op", "write_imm", "--imm", "0xA1B2C3D4"], {}),
    ("v6_rocev2_write_mtu1024", V6 + SIZES + WRAP + ["--mtu", "1024", "--transport", "rocev2"], {}),
    ("v6_mrc_write_mtu1024", V6 + SIZES + ["--mtu", "1024", "--psn", str(0xFFFFFE), "--va", "0xFFFFFFFFFFFE0000",
                                           "--rkey", "0xDEADBEEF"], {}),
    # The TS and RTX flags live in BTH bits tshark calls "reserved7".
    ("v4_vlan_ts_rtx", ["--vlan", str(0x6123), "--ts", "--rtx", "--size", "3", "5000", "--mtu", "2048"]
     + ["--emit", "ack", "sack", "nack", "probe"], {"vlan": 0x6123, "ts": True}),
    ("v4_ev_range_planes", ["--ev-range", "0xFFE8-0xFFFF", "--planes", "4", "--size", "20000", "--mtu", "1024"], {}),
    ("v6_stev_ev_range", V6 + ["--ev-format", "stev", "--ev-range", "0xABCD1230-0xABCD123F", "--size", "9000",
                               "--mtu", "512"], {"ev_format": "stev"}),
    ("all_opcodes", ["--all-opcodes", "--psn", str(0xFFFFF8)], {}),
    ("all_opcodes_ts", ["--all-opcodes", "--ts"], {"ts": True}),
    ("v4_mrc_control", ["--size", "0", "--emit", "ack", "sack", "nack", "probe", "ep-req", "ep-rsp",
                        "--cack-psn", "0xABCDEF", "--sack-offset", "-5", "--sack-bitmap", "0x8000000000000001",
                        "--skip-mark", "always_skip", "--nack-reason", "psn_oor_window", "--nack-psn", "0xFEDCBA",
                        "--req-id", "0x123456"], {}),
    ("v6_mrc_control", V6 + ["--size", "0", "--emit", "ack", "sack", "nack", "probe", "ep-req", "ep-rsp",
                             "--cack-psn", "0xFFFFFF", "--sack-bitmap", "0xFEDCBA9876543210",
                             "--skip-mark", "skip_once", "--nack-reason", "0x19"], {}),
    ("v4_rocev2_ack", ["--transport", "rocev2", "--size", "100", "--emit", "ack", "--cack-psn", "0x800000"], {}),
]

# Headers after the BTH per opcode, in wire order, from MRC_OPCODES in
# spec.h: meth, reth, imm, then one control header. A TSETH follows the METH
# (or the BTH) of MRC opcodes whose BTH TS flag is set.
OPCODES = {
    0x06: ["reth"], 0x07: [], 0x08: [], 0x09: ["imm"], 0x0A: ["reth"], 0x0B: ["reth", "imm"],
    0x11: ["aeth"], 0x81: ["cnp"],
    0xC6: ["meth", "reth"], 0xC7: ["meth", "reth"], 0xC8: ["meth", "reth"], 0xC9: ["meth", "reth", "imm"],
    0xCA: ["meth", "reth"], 0xCB: ["meth", "reth", "imm"],
    0xD1: ["aeth"], 0xD8: ["erth"], 0xD9: ["eeth"], 0xDC: ["seth"], 0xDD: ["neth"], 0xDE: ["peth"],
}
HDR_LEN = {"meth": 4, "tseth": 4, "reth": 16, "imm": 4, "aeth": 4, "cnp": 16, "erth": 16, "eeth": 36,
           "seth": 28 + 8, "neth": 20, "peth": 16}
ICRC_LEN = 4


def is_mrc(opcode):
    return opcode >= 0xC0


def be(b, off, n):
    return int.from_bytes(b[off:off + n], "big")


def decode_after_bth(opcode, ts, raw):
    """Decodes the bytes tshark shows after the BTH (ICRC included)."""
    out, off = {}, 0
    hdrs = OPCODES.get(opcode, [])
    if ts:  # TSETH sits after the METH, before everything else
        hdrs = hdrs[:1] + ["tseth"] + hdrs[1:] if hdrs[:1] == ["meth"] else ["tseth"] + hdrs
    for h in hdrs:
        b = raw[off:off + HDR_LEN[h]]
        if h == "meth":
            out["rq_msn"], out["msn"] = be(b, 0, 2), be(b, 2, 2)
        elif h == "reth":
            out["va"], out["rkey"], out["dma_len"] = be(b, 0, 8), be(b, 8, 4), be(b, 12, 4)
        elif h == "imm":
            out["imm"] = be(b, 0, 4)
        elif h == "aeth":
            out["syndrome"], out["aeth_msn"] = b[0], be(b, 1, 3)
        elif h == "seth":
            out["skip_mark"] = (b[1] >> 5) & 3
            out["cack_psn"] = be(b, 13, 3)
            out["sack_offset"] = int.from_bytes(b[18:20], "big", signed=True)
            out["sack_bitmap"] = be(b, 20, 8)
        elif h == "neth":
            out["nack_reason"], out["nack_psn"] = b[2], be(b, 13, 3)
        off += HDR_LEN[h]
    out["hdr_len"] = off
    return out


TSHARK_FIELDS = [
    "frame.number", "frame.len", "ip.version", "ipv6.version", "ipv6.flow", "vlan.id", "vlan.priority",
    "udp.srcport", "udp.dstport",
    "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.padcnt",
    "infiniband.bth.a", "infiniband.bth.reserved7",
    "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen", "infiniband.immdt",
    "infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.vendor", "data.data",
]


def tshark(pcap):
    cmd = ["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a",
           "-E", "aggregator=,"]
    for f in TSHARK_FIELDS:
        cmd += ["-e", f]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    rows = []
    for line in res.stdout.splitlines():
        vals = line.split("\t")
        row = {}
        for f, v in zip(TSHARK_FIELDS, vals):
            occ = set(v.split(",")) - {""}
            # Some items repeat inside their own subtree (ImmDt shows up
            # twice); identical copies are one value. The vendor string is
            # kept whole for the caller to pick from.
            if occ:
                row[f] = occ.pop() if len(occ) == 1 else v
        rows.append(row)
    return rows


def num(s):
    """tshark prints integers in decimal or 0x-hex, booleans as 0/1 or True/False."""
    if s in ("True", "False"):
        return int(s == "True")
    return int(s, 0)


def compare(m, t, run):
    """Returns (field, source, expected, got) for every value compared."""
    out = []

    def cmp(field, source, got, *expected):
        out.append((field, source, expected[0] if expected else m.get(field), got))

    def tsh(field, key, conv=num):
        try:
            got = conv(t[key]) if key in t else None
        except ValueError:  # e.g. two differing occurrences: report, don't crash
            got = t[key]
        cmp(field, "tshark", got)

    tsh("frame_len", "frame.len")
    tsh("ip_version", "ip.version" if "ip.version" in t else "ipv6.version")
    tsh("udp_sport", "udp.srcport")
    cmp("udp_dport", "tshark", num(t.get("udp.dstport", "-1")), ROCE_PORT)
    tsh("opcode", "infiniband.bth.opcode")
    tsh("dest_qp", "infiniband.bth.destqp")
    tsh("psn", "infiniband.bth.psn")
    tsh("pad", "infiniband.bth.padcnt")
    tsh("ack_req", "infiniband.bth.a")
    resv7 = num(t.get("infiniband.bth.reserved7", "0"))
    cmp("rtx", "tshark", (resv7 >> 5) & 1)
    ts = (resv7 >> 4) & 1
    cmp("ts_flag", "tshark", ts, int(bool(run.get("ts")) and is_mrc(m["opcode"])))
    if "vlan" in run:
        cmp("vlan_id", "tshark", num(t.get("vlan.id", "-1")), run["vlan"] & 0xFFF)
        cmp("vlan_pcp", "tshark", num(t.get("vlan.priority", "-1")), run["vlan"] >> 13)
    # EV encoding (spec.h kStev*/kUdpEvMask): the UDP source port carries the
    # 16-bit EV, or with STEV its high half, the low half going in the IPv6
    # flow label. The manifest's EV must be the whole of what is on the wire.
    if run.get("ev_format") == "stev":
        cmp("ev", "tshark", (num(t["udp.srcport"]) << 16) | (num(t["ipv6.flow"]) & 0xFFFF))
    else:
        cmp("ev", "tshark", num(t["udp.srcport"]))

    # Lay out what follows the BTH by the opcode on the wire, not the one the
    # manifest claims, so the decode does not lean on the manifest.
    opcode = num(t.get("infiniband.bth.opcode", "-1"))
    if not is_mrc(opcode):
        # tshark decodes these itself.
        if "va" in m:
            tsh("va", "infiniband.reth.va")
            tsh("rkey", "infiniband.reth.r_key")
            tsh("dma_len", "infiniband.reth.dmalen")
        if "imm" in m:
            tsh("imm", "infiniband.immdt", lambda s: int(s, 16))
        if "syndrome" in m:
            tsh("syndrome", "infiniband.aeth.syndrome")
            tsh("aeth_msn", "infiniband.aeth.msn")
        if opcode in (0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B):
            data = bytes.fromhex(t.get("data.data", ""))
            cmp("payload_len", "tshark", len(data) - num(t["infiniband.bth.padcnt"]))
        return out

    # MRC: tshark nests the whole post-BTH byte string inside a 4-byte
    # "vendor" item; the longest occurrence is the full one.
    vendor = max(t.get("infiniband.vendor", "").split(","), key=len)
    raw = bytes.fromhex(vendor)
    d = decode_after_bth(opcode, ts, raw)
    cmp("payload_len", "raw", len(raw) - d["hdr_len"] - num(t["infiniband.bth.padcnt"]) - ICRC_LEN)
    for field in ("va", "rkey", "dma_len", "msn", "rq_msn", "imm", "syndrome", "aeth_msn", "cack_psn",
                  "sack_offset", "sack_bitmap", "skip_mark", "nack_reason", "nack_psn"):
        if field in m or field in d:
            cmp(field, "raw", d.get(field), m.get(field))
    return out


def craft(args, name, craft_args):
    pcap = os.path.join(args.workdir, name + ".pcap")
    manifest = os.path.join(args.workdir, name + ".jsonl")
    res = subprocess.run([args.craft, "--out", pcap, "--manifest", manifest] + craft_args,
                         capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"FAIL {name}: mrc-craft {' '.join(craft_args)} exited {res.returncode}: {res.stderr.strip()}")
    with open(manifest) as f:
        return pcap, [json.loads(line) for line in f]


# Arguments mrc-craft must refuse, and the option its one error must name.
REJECTS = [
    (["--ev", "70000"], "--ev"),  # wider than a udp EV: it wrote sport 4464 and "ev":70000
    (["--ev", "0x10000", "--all-opcodes"], "--ev"),
    (["--ev-range", "0xFFF0-0x10007"], "--ev-range"),
    (["--ev-format", "stev"] + V6 + ["--ev-range", "0x1FFFFFFFF-0x1FFFFFFFF"], "--ev-range"),
    # Ends at 0xFFFFFFFF: a 32-bit loop counter wrapped and never stopped.
    (["--ev-format", "stev"] + V6 + ["--ev-range", "0xFFFFFFFE-0xFFFFFFFF", "--ev", "0x10000", "--size", "0"],
     None),
    (["--ev-range", "x-y"], "--ev-range"),
    (["--ev-range", "1--5"], "--ev-range"),
    (["--ev-range", "5"], "--ev-range"),
    (["--nack-reason", "bogus", "--emit", "nack"], "--nack-reason"),
    (["--nack-reason", "256", "--emit", "nack"], "--nack-reason"),
    (["--nack-reason", "bogus"], "--nack-reason"),  # refused even with no NACK to carry it
    (["--sack-bitmap", "zz", "--emit", "sack"], "--sack-bitmap"),
    (["--sack-bitmap", "0x10000000000000000", "--emit", "sack"], "--sack-bitmap"),
    (["--sack-bitmap", "-1", "--emit", "sack"], "--sack-bitmap"),
]


def check_rejections(args):
    """Runs REJECTS; an entry naming no option is valid and must succeed
    (quickly). Returns the number of failures."""
    failures = 0
    for i, (craft_args, option) in enumerate(REJECTS):
        pcap = os.path.join(args.workdir, f"reject{i}.pcap")
        manifest = os.path.join(args.workdir, f"reject{i}.jsonl")
        for f in (pcap, manifest):
            if os.path.exists(f):
                os.remove(f)
        what = f"mrc-craft {' '.join(craft_args)}"
        try:
            res = subprocess.run([args.craft, "--out", pcap, "--manifest", manifest] + craft_args,
                                 capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            print(f"FAIL {what}: still running after 10 s")
            failures += 1
            continue
        err = res.stderr.strip()
        first = err.splitlines()[0] if err else ""
        if option is None:
            if res.returncode != 0:
                print(f"FAIL {what}: exited {res.returncode}: {err}")
                failures += 1
        elif res.returncode <= 0 or option not in first:
            print(f"FAIL {what}: want a non-zero exit and an error naming {option}; "
                  f"got exit {res.returncode}: {err!r}")
            failures += 1
        elif os.path.exists(pcap) or os.path.exists(manifest):
            print(f"FAIL {what}: refused, yet wrote {pcap if os.path.exists(pcap) else manifest}")
            failures += 1
    print(f"  rejections: {len(REJECTS)} argument sets, {failures} failures")
    return failures


def mismatches(cmps):
    return [c for c in cmps if c[2] != c[3]]


def self_check(cases):
    """Changes one manifest value per compared (field, source) pair and
    returns the pairs whose change compare() did not report."""
    seen = {}
    for m, t, run in cases:
        for field, source, _, _ in compare(m, t, run):
            if field in m:
                seen.setdefault((field, source), (m, t, run))
    missed = []
    for (field, source), (m, t, run) in sorted(seen.items()):
        bad = dict(m)
        bad[field] = m[field] ^ 1
        if not any(c[0] == field and c[1] == source for c in mismatches(compare(bad, t, run))):
            missed.append((field, source))
    return len(seen), missed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--craft", required=True, help="path to mrc-craft")
    ap.add_argument("--workdir", required=True, help="directory for pcaps and manifests")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    start = time.monotonic()

    failures, frames, values, cases = check_rejections(args), 0, 0, []
    for name, craft_args, run in RUNS:
        pcap, manifest = craft(args, name, craft_args)
        rows = tshark(pcap)
        if len(rows) != len(manifest):
            print(f"FAIL {name}: tshark read {len(rows)} frames, manifest has {len(manifest)}")
            failures += 1
            continue
        for m, t in zip(manifest, rows):
            if m["kind"] != "valid":
                continue
            try:
                cmps = compare(m, t, run)
            except (KeyError, ValueError) as e:  # tshark did not decode a layer we need
                print(f"FAIL {name} frame {m['index']} ({m['opcode_name']}): tshark gave no usable {e}")
                failures += 1
                continue
            for field, source, expected, got in mismatches(cmps):
                print(f"FAIL {name} frame {m['index']} ({m['opcode_name']}) {field} [{source}]: "
                      f"manifest {expected!r}, decoded {got!r}")
                failures += 1
            frames += 1
            values += len(cmps)
            cases.append((m, t, run))
        print(f"  {name}: {len(manifest)} frames")

    pairs, missed = self_check(cases)
    for field, source in missed:
        print(f"FAIL self-check: a wrong manifest {field} [{source}] went unnoticed")
    failures += len(missed)
    if frames == 0:
        print("FAIL: no frames checked")
        failures += 1
    print(f"tshark_fields: {frames} frames, {values} values compared, {failures} failures; "
          f"self-check caught {pairs - len(missed)}/{pairs} planted errors; {time.monotonic() - start:.1f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
