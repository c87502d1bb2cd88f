#!/usr/bin/env bash
# Per-core software baseline our NIC is compared against: dpdk-testpmd txonly (memif server)
# -> rxonly (memif client), two processes, one forwarding core each, on different CPUs.
# Prints ONE JSON line on stdout; all diagnostics go to stderr.
# usage: scripts/bench-memif-baseline.sh [--size BYTES] [--seconds N] [--workdir DIR] [--cpus A,B]
set -euo pipefail

size=4096 seconds=6 workdir="" own_workdir=0
cpus="0,$(( $(nproc) > 1 ? 1 : 0 ))"   # 1 CPU: both lcores share it (still runs, just slower)
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --workdir) workdir=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    -h|--help) sed -n '2,5p' "$0" >&2; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[[ $size =~ ^[0-9]+$ ]] && (( size >= 64 && size <= 8192 )) || { echo "--size must be 64..8192" >&2; exit 2; }
[[ $seconds =~ ^[0-9]+$ ]] && (( seconds >= 2 )) || { echo "--seconds must be an integer >= 2" >&2; exit 2; }
[[ $cpus =~ ^[0-9]+,[0-9]+$ ]] || { echo "--cpus must be A,B" >&2; exit 2; }
cpu_a=${cpus%,*} cpu_b=${cpus#*,}
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd not found (apt-get install dpdk)" >&2; exit 1; }
if [ -z "$workdir" ]; then workdir=$(mktemp -d); own_workdir=1; else mkdir -p "$workdir"; fi
workdir=$(cd "$workdir" && pwd)

srv_pid="" cli_pid=""
# Stop = SIGKILL to both process groups at once (each `timeout` leads its own group: it calls
# setpgid). Not SIGTERM: testpmd then closes its memif port, and the peer still polling often
# segfaults (seen in 4 of 8 runs, whichever side stays). Nothing needs a graceful exit: no shared
# config, no telemetry socket, memory is anonymous/memfd, the memif socket is abstract.
stop_all() {
  local p; for p in $srv_pid $cli_pid; do kill -KILL -- "-$p" 2>/dev/null || true; done
  for p in $srv_pid $cli_pid; do wait "$p" 2>/dev/null || true; done
  # testpmd (the child of `timeout`) can outlive it by a moment while its memory is torn down.
  for p in $srv_pid $cli_pid; do for _ in $(seq 100); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done; done
  srv_pid="" cli_pid=""
}
cleanup() {
  local rc=$?
  { stop_all; } 2>/dev/null   # braces: also silences bash's "Killed" job notices
  if (( rc != 0 )); then
    for f in server client; do [ -f "$workdir/$f.log" ] && { echo "--- tail of $f.log" >&2; tail -n 15 "$workdir/$f.log" >&2; }; done
  fi
  (( own_workdir )) && rm -rf "$workdir"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Frames above the 2 KB defaults need bigger memif buffers and mbufs. testpmd applies --txpkts
# against the mbuf size already parsed, so --mbuf-size must come first, else it silently sends 64 B.
memif_opts="" mbuf_opts=()
if (( size > 2048 )); then memif_opts=",bsize=8192"; mbuf_opts=(--mbuf-size=9000); fi
# The memif socket defaults to the abstract namespace: no file, gone when the process dies.
# A path under the (unique) workdir keeps concurrent runs apart.
vdev="net_memif0,socket=$workdir/memif.sock$memif_opts"
# --no-shconf + --no-telemetry: nothing under /var/run/dpdk (no lock clash between the two
# primaries, and no telemetry socket left behind if a process dies on memif disconnect).
# --lcores maps lcore 1 (the forwarding lcore) to CPU B for the server and to CPU A for the client.
eal=(--no-huge -m 1024 --no-pci --no-shconf --no-telemetry --main-lcore 0)
tpmd=(--auto-start --stats-period 1 --total-num-mbufs=32768 "${mbuf_opts[@]}")  # non-interactive needs --stats-period
# Start-up (EAL, ~200 PMD .so, filling the mbuf pool) took 1-20 s here, depending on other load.
cap=$(( seconds + 150 ))   # hard bound on each process's life, whatever happens to this script

stamp() { while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }  # arrival time per line
launch() {  # name, then testpmd args; stdout line-buffered so the arrival timestamps are accurate
  local name=$1; shift
  timeout -k 3 "$cap" stdbuf -oL dpdk-testpmd "$@" </dev/null > >(stamp >"$workdir/$name.log") 2>&1 &
}
# Both CPUs are needed: other load on the machine shows up directly as a lower rate.
idle() { awk '/^cpu /{print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
read -r i0 t0 < <(idle); sleep 0.5; read -r i1 t1 < <(idle)
(( (i1 - i0) * 100 >= (t1 - t0) * 80 )) || echo "warning: CPUs only $(( (i1 - i0) * 100 / (t1 - t0) ))% idle before the run; the rate will be low" >&2
echo "memif baseline: frame=${size}B seconds=$seconds cpus=$cpu_a,$cpu_b workdir=$workdir" >&2
launch server --lcores="0@$cpu_a,1@$cpu_b" "${eal[@]}" --vdev="$vdev,role=server" -- \
  "${tpmd[@]}" --forward-mode=txonly --txpkts="$size"
srv_pid=$!
# The memif client connects once, at its port start, and never retries; a server whose port is
# not started yet (its socket already listens) refuses it. So start the client only once the
# server forwards (its log says so).
for i in $(seq 600); do
  grep -qs 'packet forwarding - ports=' "$workdir/server.log" && break
  (( i < 600 )) && kill -0 "$srv_pid" 2>/dev/null || { echo "memif server did not start" >&2; exit 1; }
  sleep 0.1
done
launch client --lcores="0@$cpu_b,1@$cpu_a" "${eal[@]}" --vdev="$vdev,role=client" -- \
  "${tpmd[@]}" --forward-mode=rxonly
cli_pid=$!

# The client's NIC stats blocks (not testpmd's fwd stats, which are wrong for memif) give
# cumulative RX-packets / RX-bytes once per second. The rate is the RX-packets difference between
# two samples divided by the difference of their arrival times. The first sample with traffic
# is skipped as warm-up; the end sample is the first one >= `seconds` after the base one.
measure() {
  awk -v secs="$seconds" '
    / RX-packets: .*RX-missed: / { t = $1; n = $3; b = $NF
      if (n == 0) next
      if (++seen == 2) { t0 = t; n0 = n; b0 = b; next }
      if (seen > 2 && t - t0 >= secs - 0.25) {
        printf "%.6f %.0f %.0f\n", t - t0, n - n0, b - b0; exit }
    }' "$workdir/client.log"
}
deadline=$(( SECONDS + seconds + 60 ))
result=""
while [ -z "$result" ]; do
  (( SECONDS < deadline )) || { echo "no result within $(( seconds + 60 )) s of the client start" >&2; exit 1; }
  kill -0 "$srv_pid" 2>/dev/null && kill -0 "$cli_pid" 2>/dev/null || { echo "a testpmd process exited early" >&2; exit 1; }
  ! grep -qs 'Fail to start port' "$workdir/client.log" || { echo "client port did not start (memif connect)" >&2; exit 1; }
  sleep 0.25
  result=$(measure)
done
read -r dt pkts bytes <<<"$result"
# RX-bytes / RX-packets must be the requested frame size (guards against testpmd's 64 B fallback).
# Rounded: the two counters are read while the rx core runs, so they can be a few packets apart.
(( pkts > 0 && (bytes + pkts / 2) / pkts == size )) || { echo "frame size mismatch: $bytes bytes / $pkts packets, expected $size B" >&2; exit 1; }
echo "measured $pkts packets in ${dt}s at the client" >&2
# The rate between each two samples (about a second apart) too: on our VMs it swings between ~25
# and ~200 Gb/s from one second to the next as the host moves the two vCPUs
# (build/test/cpu-pair-rtt shows it).
each=$(awk -v dt="$dt" -v sz="$size" '
  / RX-packets: .*RX-missed: / { t = $1; n = $3
    if (n == 0) next
    if (++seen == 2) start = t
    if (seen > 2) { out = out sep sprintf("%.1f", (n - n0) * sz * 8 / 1e9 / (t - t0)); sep = "," }
    if (seen >= 2) { t0 = t; n0 = n }
    if (seen > 2 && t - start >= dt - 0.01) exit }
  END { print out }' "$workdir/client.log")
# Gbps counts frame bytes x 8 as the NIC sees them: no preamble, inter-frame gap or FCS.
awk -v dt="$dt" -v p="$pkts" -v sz="$size" -v s="$seconds" -v each="$each" 'BEGIN {
  pps = p / dt
  printf "{\"tool\":\"testpmd\",\"vdev\":\"net_memif\",\"frame_bytes\":%d,\"seconds\":%d,\"rx_mpps\":%.3f,\"rx_gbps\":%.2f,\"rx_gbps_per_sample\":[%s]}\n",
         sz, s, pps / 1e6, pps * sz * 8 / 1e9, each }'
