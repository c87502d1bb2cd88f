// The data work that any software RDMA NIC must do per packet, and nothing
// else, over memif: the sender copies each payload out of a source buffer
// into an mbuf behind the same headers mrc-nic sends (a WRITE with RETH),
// computes the ICRC and transmits; the receiver checks the ICRC and copies
// the payload into a destination buffer. No protocol: no QPs, ACKs, EVs,
// windows or timers. testpmd's txonly -> rxonly (the baseline) never
// reads a payload; this is the rate a NIC that places data is bounded by on
// the same vdev and CPUs, so mrc-nic's distance from it is protocol cost.
//   memif-floor [EAL args with two memif vdevs joined to each other] --
//               [--seconds N] [--payload B] [--src-bytes B] [--dst-bytes B]
//               [--no-copy] [--no-icrc]
// The worker lcore sends on the first port; the main lcore receives on the
// second and prints one JSON line. Payloads cycle through source and
// destination buffers the sizes of the mrc-nic workload's (5 and 16 MiB for
// 4 QPs x 4 x 1 MiB), so they come from and go to memory as they do there.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dpdk/eal.h"
#include "engine/prefetch.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace {

using namespace mrc;

constexpr uint16_t kBurst = 32;
constexpr uint16_t kDesc = 512;  // what mrc-nic gives each queue

struct Setup {
  uint16_t tx_port = 0, rx_port = 1;
  uint32_t payload = 4096;
  uint64_t src_bytes = 5ull << 20, dst_bytes = 16ull << 20;
  double seconds = 3;
  // One pool per side, as in two processes: with one, mbufs the receiver
  // wrote would be refilled by the sender from the other core's cache.
  rte_mempool* tx_pool = nullptr;
  rte_mempool* rx_pool = nullptr;
  std::vector<uint8_t> src, dst;
  wire::FrameTemplate tmpl;
  // Either part of the work can be left out, to see what each costs.
  bool copy = true, icrc = true;
  std::atomic<bool> stop{false};
  uint64_t tx_frames = 0;
};

uint64_t src_offset(const Setup& s, uint64_t seq) { return seq * s.payload % (s.src_bytes - s.src_bytes % s.payload); }
uint64_t dst_offset(const Setup& s, uint64_t seq) { return seq * s.payload % (s.dst_bytes - s.dst_bytes % s.payload); }

// Frames that tx_burst did not take are kept and offered again, so every
// sequence number arrives and the receiver's placement check holds.
int sender(void* arg) {
  Setup& s = *static_cast<Setup*>(arg);
  rte_mbuf* held[kBurst];
  uint16_t n_held = 0;
  uint64_t seq = 0;
  while (!s.stop.load(std::memory_order_relaxed)) {
    if (n_held == 0) {
      if (rte_pktmbuf_alloc_bulk(s.tx_pool, held, kBurst) != 0) continue;
      for (uint16_t i = 0; i < kBurst; ++i, ++seq) {
        rte_mbuf* m = held[i];
        const wire::MutablePacket p = s.tmpl.stamp({rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_tailroom(m)}, s.payload);
        if (!p.base) {  // mbufs are sized for this frame: only a bug gets here
          rte_pktmbuf_free_bulk(held, kBurst);
          s.stop = true;
          return 1;
        }
        p.bth().set_psn(static_cast<uint32_t>(seq & 0xFFFFFF));
        p.reth().set_va(seq);
        p.reth().set_dma_len(s.payload);
        if (s.copy) {
          engine::prefetch_bytes(s.src.data() + src_offset(s, seq + 1), s.payload);  // as mrc-nic does
          std::memcpy(p.payload().data(), s.src.data() + src_offset(s, seq), s.payload);
        }
        if (s.icrc) wire::icrc_fill({p.base + p.at.l3, p.at.size - p.at.l3});  // stamp() set the IPv4 checksum
        m->data_len = m->pkt_len = p.at.size;
      }
      n_held = kBurst;
    }
    const uint16_t sent = rte_eth_tx_burst(s.tx_port, 0, held + (kBurst - n_held), n_held);
    n_held -= sent;
    s.tx_frames += sent;
  }
  if (n_held) rte_pktmbuf_free_bulk(held + (kBurst - n_held), n_held);
  return 0;
}

struct RxResult {
  uint64_t frames = 0, payload_bytes = 0, frame_bytes = 0, icrc_bad = 0, short_frames = 0;
  double seconds = 0;
  uint64_t last_seq = 0;
  bool any = false;
};

// Receives for warm-up (half a second from the first frame), then measures
// for s.seconds. Placement continues through the warm-up: it is the work.
RxResult receiver(Setup& s) {
  RxResult r;
  const wire::Layout& at = s.tmpl.layout();
  const uint64_t hz = rte_get_tsc_hz();
  uint64_t t_first = 0, t_start = 0, t_end = ~0ull, deadline = rte_get_tsc_cycles() + 10 * hz;
  RxResult at_start;
  rte_mbuf* m[kBurst];
  for (;;) {
    const uint64_t now = rte_get_tsc_cycles();
    if (!r.any && now > deadline) break;  // a sender that never starts must not hang the run
    if (t_start && now >= t_end) break;
    if (r.any && !t_start && now - t_first >= hz / 2) {
      t_start = now;
      t_end = now + static_cast<uint64_t>(s.seconds * double(hz));
      at_start = r;
    }
    const uint16_t n = rte_eth_rx_burst(s.rx_port, 0, m, kBurst);
    for (uint16_t i = 0; i < n; ++i) {
      const uint8_t* f = rte_pktmbuf_mtod(m[i], const uint8_t*);
      const uint32_t len = rte_pktmbuf_data_len(m[i]);
      if (len != at.size + s.payload) {
        ++r.short_frames;
        continue;
      }
      if (s.icrc && !wire::icrc_check({f + at.l3, len - at.l3})) {
        ++r.icrc_bad;
        continue;
      }
      const uint64_t seq = wire::RethView(f + at.reth).va();
      if (s.copy) std::memcpy(s.dst.data() + dst_offset(s, seq), f + at.payload, s.payload);
      r.last_seq = seq;
      ++r.frames;
      r.payload_bytes += s.payload;
      r.frame_bytes += len;
    }
    if (n) {
      rte_pktmbuf_free_bulk(m, n);
      if (!r.any) t_first = now;
      r.any = true;
    }
  }
  const uint64_t t_stop = rte_get_tsc_cycles();
  r.seconds = t_start ? double(t_stop - t_start) / double(hz) : 0;
  r.frames -= at_start.frames;
  r.payload_bytes -= at_start.payload_bytes;
  r.frame_bytes -= at_start.frame_bytes;
  return r;
}

// Each destination slot written in the last pass must hold what the sender
// copied for that sequence number.
uint64_t misplaced(const Setup& s, uint64_t last_seq) {
  const uint64_t slots = s.dst_bytes / s.payload;
  uint64_t bad = 0;
  for (uint64_t k = 0; k < slots && k <= last_seq; ++k) {
    const uint64_t seq = last_seq - k;
    bad += std::memcmp(s.dst.data() + dst_offset(s, seq), s.src.data() + src_offset(s, seq), s.payload) != 0;
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  const int consumed = dp::eal_init(argc, argv, error);
  if (consumed < 0) {
    fmt::print(stderr, "memif-floor: {}\n", error);
    return 1;
  }
  Setup s;
  CLI::App app{"the per-packet data work of a software RDMA NIC over memif, without protocol"};
  app.add_option("--seconds", s.seconds, "measured time, after half a second of warm-up")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  app.add_option("--payload", s.payload, "payload bytes per frame, a multiple of 4 (no pad bytes)")
      ->check(CLI::Range(64u, 8192u))
      ->capture_default_str();
  app.add_option("--src-bytes", s.src_bytes, "source buffer the payloads are read from")->capture_default_str();
  app.add_option("--dst-bytes", s.dst_bytes, "destination buffer the payloads are placed in")->capture_default_str();
  app.add_flag("!--no-copy", s.copy, "no payload copies: frames carry whatever their mbuf held");
  app.add_flag("!--no-icrc", s.icrc, "no ICRC computed or checked");
  app.add_option("--tx-port", s.tx_port, "DPDK port the worker sends on")->capture_default_str();
  app.add_option("--rx-port", s.rx_port, "DPDK port the main lcore receives on")->capture_default_str();
  try {
    app.parse(argc - consumed, argv + consumed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (s.payload % 4) {
    fmt::print(stderr, "memif-floor: --payload must be a multiple of 4\n");
    return 2;
  }
  if (s.src_bytes < s.payload || s.dst_bytes < s.payload) {
    fmt::print(stderr, "memif-floor: --src-bytes and --dst-bytes must hold at least one payload\n");
    return 2;
  }
  if (rte_lcore_count() < 2 || rte_eth_dev_count_avail() < 2) {
    fmt::print(stderr, "memif-floor: needs two lcores (-l A,B) and two joined ports (--vdev x2)\n");
    return 2;
  }
  s.src.resize(s.src_bytes);
  s.dst.assign(s.dst_bytes, 0);
  // No two payload-sized slots alike, so a misplaced payload cannot pass the check.
  for (uint64_t i = 0; i < s.src_bytes; ++i) {
    uint64_t z = (i / 8 + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    s.src[i] = static_cast<uint8_t>((z ^ (z >> 27)) >> (8 * (i % 8)));
  }

  wire::Addressing addr;
  addr.src_mac = 0x020000000001;
  addr.dst_mac = 0x020000000002;
  addr.src_ip = wire::IpAddr::from_v4(0x0A000001);
  addr.dst_ip = wire::IpAddr::from_v4(0x0A000002);
  if (!s.tmpl.prepare(addr, wire::write_opcode(true, false, false, false), false) || !s.tmpl.layout().reth) {
    fmt::print(stderr, "memif-floor: no frame template with a RETH\n");
    return 1;
  }
  const uint32_t frame = s.tmpl.layout().size + s.payload;
  for (rte_mempool** pool : {&s.tx_pool, &s.rx_pool}) {
    *pool =
        rte_pktmbuf_pool_create(pool == &s.tx_pool ? "floor_tx" : "floor_rx", 4095, 256, 0,
                                static_cast<uint16_t>(frame + RTE_PKTMBUF_HEADROOM), static_cast<int>(rte_socket_id()));
    if (!*pool) {
      fmt::print(stderr, "memif-floor: mbuf pool: {}\n", rte_strerror(rte_errno));
      return 1;
    }
  }
  for (uint16_t port : {s.tx_port, s.rx_port}) {
    if (const std::string e = dp::start_port_minimal(port, port == s.tx_port ? s.tx_pool : s.rx_pool, kDesc);
        !e.empty()) {
      fmt::print(stderr, "memif-floor: {}\n", e);
      return 1;
    }
  }
  if (!dp::wait_links_up({s.tx_port, s.rx_port}, 10.0)) {
    fmt::print(stderr, "memif-floor: ports {} and {} did not come up within 10 s\n", s.tx_port, s.rx_port);
    return 1;
  }
  const unsigned worker = rte_get_next_lcore(-1, 1, 0);
  rte_eal_remote_launch(sender, &s, worker);
  const RxResult r = receiver(s);
  s.stop = true;
  rte_eal_wait_lcore(worker);
  const uint64_t bad_slots = r.any && s.copy ? misplaced(s, r.last_seq) : 0;
  const bool ok = r.frames > 0 && r.icrc_bad == 0 && r.short_frames == 0 && bad_slots == 0;
  const double secs = r.seconds > 0 ? r.seconds : 1;
  fmt::print(
      "{{\"tool\":\"memif-floor\",\"payload_bytes\":{},\"frame_bytes\":{},\"src_bytes\":{},\"dst_bytes\":{},"
      "\"seconds\":{:.3f},\"mpps\":{:.3f},\"goodput_gbps\":{:.2f},\"frame_gbps\":{:.2f},\"tx_frames_whole_run\":{},"
      "\"copy\":{},\"icrc\":{},\"icrc_bad\":{},\"short_frames\":{},\"misplaced_slots\":{},\"ok\":{}}}\n",
      s.payload, frame, s.src_bytes, s.dst_bytes, r.seconds, double(r.frames) / secs / 1e6,
      double(r.payload_bytes) * 8 / secs / 1e9, double(r.frame_bytes) * 8 / secs / 1e9, s.tx_frames, s.copy, s.icrc,
      r.icrc_bad, r.short_frames, bad_slots, ok);
  dp::stop_ports({s.tx_port, s.rx_port});
  dp::close_ports({s.tx_port, s.rx_port});
  dp::eal_cleanup();
  return ok ? 0 : 1;
}
