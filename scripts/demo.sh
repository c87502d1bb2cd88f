#!/usr/bin/env bash
# The main job, for now: build everything, write a pcap of MRC traffic with
# mrc-craft (a 64 KiB WRITE_IMM sprayed over 16 entropy values on 4 planes,
# then the SACK, NACK, probe and endpoint packets of the protocol), and decode
# it with tshark, an implementation we did not write.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null

out=out/demo
mkdir -p "$out"
build/app/mrc-craft --out "$out/mrc-v4.pcap" --manifest "$out/mrc-v4.jsonl" \
  --src-ip 10.0.0.1 --dst-ip 10.0.1.1 --planes 4 --ev-range 0xC000-0xC00F \
  --op write_imm --size 65536 --mtu 4096 --psn 0xFFFFF8 --ts \
  --emit sack nack probe ep-req ep-rsp --cack-psn 0x000007 --sack-offset 1 --sack-bitmap 0x6D \
  --nack-reason trimmed --nack-psn 0x000005
build/app/mrc-craft --out "$out/mrc-v6-stev.pcap" --src-ip 2001:db8::1 --dst-ip 2001:db8:1::1 \
  --ev-format stev --ev-range 0xABCD0000-0xABCD0003 --size 16384 --mtu 4096

echo
echo "== tshark: IPv4, UDP EVs, 4 planes (frame, plane source IP, EV = UDP source port, opcode, QP, PSN, AckReq)"
tshark -r "$out/mrc-v4.pcap" -T fields -E header=y 2>/dev/null \
  -e frame.number -e ip.src -e udp.srcport -e infiniband.bth.opcode -e infiniband.bth.destqp \
  -e infiniband.bth.psn -e infiniband.bth.a -e frame.len | column -t
echo
echo "== tshark summary lines (MRC opcodes are vendor-specific to Wireshark, so it names only the RoCEv2 ones)"
tshark -r "$out/mrc-v4.pcap" 2>/dev/null | head -n 5
echo
echo "== tshark: IPv6 with STEV EVs (flow label low 16 bits + UDP source port)"
tshark -r "$out/mrc-v6-stev.pcap" 2>/dev/null -T fields -E header=y -e frame.number -e ipv6.flow -e udp.srcport \
  -e infiniband.bth.opcode -e infiniband.bth.psn | column -t
echo
echo "opcodes: 198 WRITE_FIRST 199 WRITE_MIDDLE 200 WRITE_LAST 201 WRITE_LAST_IMM 216/217 endpoint request/response 220 SACK 221 NACK 222 probe"
echo "data packets per plane (source IP): $(tshark -r "$out/mrc-v4.pcap" -Y 'infiniband.bth.opcode < 200 || infiniband.bth.opcode == 201' \
  -T fields -e ip.src 2>/dev/null | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')"
echo "pcaps and the manifest of every field written are in $out/"

echo
echo "== the same protocol engine in mrc-sim: 16 hosts, 4 planes, plane 1 fails silently at 60 us"
for t in mrc rocev2; do
  build/app/mrc-sim --config config/scenarios/plane_failure.conf --transport "$t" 2>/dev/null > "$out/sim-$t.json"
  /usr/bin/python3 - "$out/sim-$t.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
done = (f"all flows done by {d['fct_us']['max']:.0f} us" if not d['flows_incomplete']
        else f"{d['flows_incomplete']} flows never finished ({d['errors']['qp_errors']} QPs failed)")
print(f"{d['transport']:>7}: goodput {d['goodput_gbps']:6.0f} Gb/s ({100 * d['goodput_fraction']:.0f}% of ideal), "
      f"stalled {d['recovery_us']:.0f} us after the failure, {done}, integrity {'ok' if d['integrity_ok'] else 'BROKEN'}")
PY
done
