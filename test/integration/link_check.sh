#!/usr/bin/env bash
# Checks the IPsec-MB-free link of every shipped binary, and that each DPDK
# binary probes and starts every vdev we link.
# usage: link_check.sh --all BIN... --dpdk BIN... --vdevs "net_ring net_null ..."
set -u
all=() dpdk=() vdevs=()
mode=
for a in "$@"; do
  case "$a" in
    --all|--dpdk|--vdevs) mode=$a ;;
    *) case "$mode" in --all) all+=("$a") ;; --dpdk) dpdk+=("$a") ;; --vdevs) vdevs+=($a) ;; esac ;;
  esac
done
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

for bin in "${all[@]}"; do
  libs=$(ldd "$bin" 2>&1)
  if grep -qi 'ipsec' <<<"$libs"; then bad "$(basename "$bin"): links IPsec-MB: $(grep -i ipsec <<<"$libs")"
  else ok "$(basename "$bin"): no IPsec-MB in ldd"; fi
  if grep -q 'librte_' <<<"$libs"; then bad "$(basename "$bin"): links shared DPDK libraries"
  else ok "$(basename "$bin"): no shared DPDK libraries"; fi
done

tmp=$(mktemp -d)
ns=mrcl$$
cleanup() { ip netns del "$ns" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
netns_ok=0
if ip netns add "$ns" 2>"$tmp/ns.err" && ip -n "$ns" link add va type veth peer name vb 2>>"$tmp/ns.err" &&
   ip -n "$ns" link set va up && ip -n "$ns" link set vb up; then
  netns_ok=1
else
  echo "note: no network namespace ($(cat "$tmp/ns.err")); af_packet falls back to lo and af_xdp is not probed"
fi

vdev_arg() {
  case "$1" in
    net_memif) echo "--vdev=net_memif0,role=server,socket=$tmp/memif.sock" ;;
    net_tap) echo "--vdev=net_tap0,iface=mrctap$$" ;;
    net_pcap) echo "--vdev=net_pcap0,tx_pcap=$tmp/tx.pcap" ;;
    net_af_packet) if [ $netns_ok = 1 ]; then echo "--vdev=net_af_packet0,iface=vb"; else echo "--vdev=net_af_packet0,iface=lo"; fi ;;
    net_af_xdp) echo "--vdev=net_af_xdp0,iface=va,start_queue=0,queue_count=1" ;;
    *) echo "--vdev=${1}0" ;;
  esac
}

for bin in "${dpdk[@]}"; do
  name=$(basename "$bin")
  for v in "${vdevs[@]}"; do
    if [ "$v" = net_af_xdp ] && [ $netns_ok = 0 ]; then
      echo "skip $name $v: needs a veth in a network namespace, which could not be created"; continue
    fi
    run=()
    if [ "$v" = net_af_xdp ] || { [ "$v" = net_af_packet ] && [ $netns_ok = 1 ]; }; then run=(ip netns exec "$ns"); fi
    # mrc-ports lists and starts the ports; mrc-nic runs a device on the port for a moment.
    if [ "$name" = mrc-nic ]; then
      # MTU 1024: AF_XDP's umem frames are at most a page.
      eal_extra=(-l 0,1) app_args=(--device mrc0 --plane "mrc0 port=0 ip=10.0.0.1" --mtu 1024 --duration 0.3
                                   --link-wait 0 --telemetry false)
    else
      eal_extra=() app_args=(--json)
    fi
    out=$(timeout 30 "${run[@]}" "$bin" --no-huge -m 256 --no-shconf --no-pci --log-level=lib.eal:debug \
          "${eal_extra[@]}" "$(vdev_arg "$v")" -- "${app_args[@]}" 2>"$tmp/err"); rc=$?
    if [ $rc -ne 0 ]; then bad "$name $v: exit $rc: $(tail -n 3 "$tmp/err" | tr '\n' ' ')"; continue; fi
    if ! grep -q 'Detected static linkage of DPDK' "$tmp/err"; then bad "$name $v: EAL did not report static linkage"; continue; fi
    if grep -q 'pmds-23' "$tmp/err"; then bad "$name $v: EAL scanned the plugin directory"; continue; fi
    if [ "$name" = mrc-nic ]; then
      if ! grep -q '"mrc0":{"planes":\[{"port":"0"' <<<"$out"; then bad "$name $v: no device on the port: $out"; continue; fi
    elif ! grep -q "\"driver\":\"$v\"" <<<"$out" || ! grep -q '"state":"started"' <<<"$out"; then
      bad "$name $v: port not probed and started: $out"; continue
    fi
    ok "$name $v: probed and started"
  done
done
echo "link check: $pass passed, $fail failed"
[ $fail -eq 0 ]
