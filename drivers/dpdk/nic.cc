#include "dpdk/nic.h"

#include "dpdk/eal.h"

#include <rte_alarm.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <rte_ring.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "engine/prefetch.h"
#include "host/abi.h"
#include "nic/fault_guard.h"
#include "nic/linklayer.h"
#include "pcap/pcap_file.h"
#include "wire/bytes.h"
#include "wire/spec.h"

namespace mrc::dp {

using engine::Nanos;

namespace {

constexpr uint16_t kRxBurst = 32;
constexpr uint16_t kTxBurst = 32;
constexpr uint32_t kTxStage = 128;       // frames a plane may have staged for the port
constexpr uint32_t kDelayFrames = 1024;  // frames the injected delay may hold per plane
constexpr uint32_t kSteerRing = 4096;
constexpr uint32_t kHandoffRing = 1024;
constexpr uint16_t kRxDesc = 512;
constexpr uint16_t kTxDesc = 512;
constexpr Nanos kTxDrainNs = 10'000;  // staged frames wait at most this long for company
constexpr size_t kEvLogSize = 1024;
constexpr size_t kMaxNeighbours = 4096;  // learning stops adding IPs here (a flood cannot grow it further)
constexpr auto kResolveRetry = std::chrono::milliseconds(100);
constexpr auto kResolvePoll = std::chrono::milliseconds(1);

// TSC to nanoseconds since the NIC started (a double keeps ns exact for
// months of uptime).
struct Clock {
  uint64_t t0 = 0;
  double ns_per_cycle = 0;
  void init() {
    t0 = rte_get_tsc_cycles();
    ns_per_cycle = 1e9 / double(rte_get_tsc_hz());
  }
  Nanos now() const { return static_cast<Nanos>(double(rte_get_tsc_cycles() - t0) * ns_per_cycle); }
};
Clock g_clock;

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kPpb = 1'000'000'000;
uint64_t to_ppb(double p) { return static_cast<uint64_t>(std::clamp(p, 0.0, 1.0) * kPpb); }

nic::PlaneIdentity identity_of(const engine::PlaneAddr& a) {
  nic::PlaneIdentity id;
  id.mac = a.mac;
  if (a.ip.is_v4())
    id.ipv4 = a.ip.v4();
  else
    id.ipv6 = a.ip.bytes;
  return id;
}

// The destination QPN of a frame classify() called RoCEv2 (IPv4 without
// options is not guaranteed, so the IHL is honoured).
uint32_t dest_qpn_of(std::span<const uint8_t> f) {
  constexpr size_t kEth = 14;
  if (f.size() < kEth + 1) return 0;
  const size_t l3 = f[kEth] >> 4 == 4 ? size_t(f[kEth] & 0x0F) * 4 : 40;
  const size_t bth = kEth + l3 + 8;
  if (f.size() < bth + 8) return 0;
  return static_cast<uint32_t>(wire::load_be<4>(&f[bth + 4])) & wire::kPsnMask;
}

}  // namespace

// ---------------------------------------------------------------------------
// Shard internals

struct Shard::Impl final : engine::Env {
  Shard& s;
  Device& dev;
  rte_mempool* pool;
  uint64_t rng;
  Nanos now = 0;
  Nanos deadline = 0;
  uint32_t frame_cap = 0;

  struct TxPath {
    uint16_t port = 0;
    int queue = -1;               // the port queue this shard owns, or -1: hand off
    rte_ring* handoff = nullptr;  // to the queue owner when queue < 0
    std::array<rte_mbuf*, kTxStage> staged{};
    uint32_t n = 0;
    Nanos last_flush = 0;
    rte_mbuf* pending = nullptr;                     // from tx_buffer, until tx_send
    std::vector<std::pair<rte_mbuf*, Nanos>> delay;  // FIFO ring
    uint32_t delay_head = 0, delay_len = 0;
    pcap::Writer cap_rx, cap_tx;
  };
  std::array<TxPath, engine::kMaxPlanes> tx;
  struct RxQueue {
    uint32_t plane;
    uint16_t port, queue;
  };
  // Ports whose PMD unmaps its rings from another thread when the peer goes
  // away (memif): touched only while their link reads up.
  std::array<bool, engine::kMaxPlanes> gate_on_link{};
  // Refreshed at most every kLinkCheckNs, before the bursts: a read per
  // plane per iteration was a few percent of a small-message run, and the
  // fault guard covers a peer that leaves between two reads.
  static constexpr Nanos kLinkCheckNs = 10'000;
  std::array<bool, engine::kMaxPlanes> usable{};
  Nanos links_read_at = 0;
  bool links_read = false;
  void refresh_usable(uint32_t planes, Nanos at) {
    if (links_read && at - links_read_at < kLinkCheckNs) return;
    links_read = true;
    links_read_at = at;
    for (uint32_t p = 0; p < planes; ++p) {
      rte_eth_link link;
      const bool up =
          !gate_on_link[p] || (rte_eth_link_get_nowait(tx[p].port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP);
      if (!up) faulted[p] = false;
      usable[p] = up && !faulted[p];
      tell_engine(p, at);
      announce(p, at);
    }
  }
  // Each time a plane's port comes up (the first time too), two
  // announcements of our address, kAnnounceInterval apart (RFC 5227 2.3):
  // a peer that cached the MAC we had before a restart learns the new one,
  // and the second reaches a peer whose own side came up a little later.
  static constexpr Nanos kAnnounceInterval = 2'000'000'000;
  std::array<bool, engine::kMaxPlanes> announced_up{};
  std::array<uint8_t, engine::kMaxPlanes> announcements_due{};
  std::array<Nanos, engine::kMaxPlanes> announce_at{};
  void announce(uint32_t plane, Nanos at) {
    // One shard speaks for the device; a plane a --link-event holds down
    // would drop the frame, and announces when it comes back.
    const bool up = usable[plane] && s.index_ == 0 && dev.link_up(plane);
    if (up && !announced_up[plane]) {
      announcements_due[plane] = 2;
      announce_at[plane] = at;
    }
    announced_up[plane] = up;
    if (!up || !announcements_due[plane] || at < announce_at[plane]) return;
    std::array<uint8_t, nic::kLinkReplyCapacity> frame;
    if (const size_t n = nic::build_announcement(ident[plane], frame)) {
      send_raw(plane, std::span<const uint8_t>(frame.data(), n));
      s.ctr_.inc(ShardCtr::link_announcements);
    }
    --announcements_due[plane];
    announce_at[plane] = at + kAnnounceInterval;
  }
  // The engine hears at once when its own port goes down, faults or comes
  // back, as a NIC's transport hears of its PHY: it resends what was in
  // flight there and stops choosing the plane, rather than waiting for
  // losses to condemn its EVs. Its plane is up when the port is usable and
  // no port-status event (Device::set_link) holds it down: two sources, one
  // decision, so neither undoes the other.
  std::array<bool, engine::kMaxPlanes> told_usable = all_true();
  std::array<bool, engine::kMaxPlanes> status_up = all_true();
  static std::array<bool, engine::kMaxPlanes> all_true() {
    std::array<bool, engine::kMaxPlanes> a;
    a.fill(true);  // as the engine starts
    return a;
  }
  void tell_engine(uint32_t plane, Nanos at) {
    if (usable[plane] != told_usable[plane]) {
      told_usable[plane] = usable[plane];
      s.ctr_.inc(usable[plane] ? ShardCtr::port_up_events : ShardCtr::port_down_events);
    }
    apply_plane(plane, at);
  }
  void apply_plane(uint32_t plane, Nanos at) {
    const bool up = told_usable[plane] && status_up[plane];
    if (s.engine().plane_up(plane) != up) s.engine().set_plane_up(plane, up, at);
  }
  bool port_usable(uint32_t plane) const { return usable[plane]; }
  // A burst on a gated port (see nic/fault_guard.h); a fault inside it takes
  // the port out of use until its link has gone down and come back.
  template <class Burst>
  uint16_t guarded_burst(uint32_t plane, Burst&& burst) {
    if (!gate_on_link[plane]) return burst();
    uint16_t n = 0;
    if (nic::guarded([&] { n = burst(); })) return n;
    s.ctr_.inc(ShardCtr::port_faults);
    usable[plane] = false;
    faulted[plane] = true;
    links_read = false;  // the engine hears of it before the next poll, not from inside one
    return 0;
  }
  std::array<bool, engine::kMaxPlanes> faulted{};
  std::vector<RxQueue> rxq;
  size_t rx_first = 0;  // the queue polled first in the next iteration
  struct Handoff {
    uint32_t plane;
    rte_ring* ring;
  };
  std::vector<Handoff> handoffs_in;  // other shards' TX for queues this shard owns
  rte_ring* steer = nullptr;         // frames for this shard's QPs from other lcores
  std::array<nic::PlaneIdentity, engine::kMaxPlanes> ident{};
  std::vector<engine::Completion> completions;
  std::vector<std::pair<uint32_t, engine::WcStatus>> qp_errors;
  std::vector<EvEventRecord> ev_pending;  // for the app, after the engine call
  std::vector<EndpointResponse> endpoint_responses;
  std::vector<EvEventRecord> ev_log;  // ring of kEvLogSize
  size_t ev_log_next = 0;
  uint64_t ev_log_total = 0;
  uint64_t capture_t0_ns = 0;  // wall clock at the NIC's time 0, for pcap timestamps

  Impl(Shard& sh, Device& d, rte_mempool* p, uint64_t seed) : s(sh), dev(d), pool(p), rng(seed) {
    completions.reserve(4096);
    ev_log.reserve(kEvLogSize);
    for (auto& t : tx) t.delay.resize(kDelayFrames);
  }
  ~Impl() override {
    for (auto& t : tx) {
      if (t.pending) rte_pktmbuf_free(t.pending);
      rte_pktmbuf_free_bulk(t.staged.data(), t.n);
      for (uint32_t i = 0; i < t.delay_len; ++i) rte_pktmbuf_free(t.delay[(t.delay_head + i) % kDelayFrames].first);
    }
    if (steer) {
      rte_mbuf* m;
      while (rte_ring_sc_dequeue(steer, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
      rte_ring_free(steer);
    }
    for (auto& h : handoffs_in) {
      rte_mbuf* m;
      while (rte_ring_sc_dequeue(h.ring, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
      rte_ring_free(h.ring);
    }
  }

  // engine::Env
  uint32_t tx_room(uint32_t plane) override { return kTxStage - tx[plane].n; }
  std::span<uint8_t> tx_buffer(uint32_t plane, uint32_t len) override {
    TxPath& t = tx[plane];
    if (len > frame_cap) return {};
    if (!t.pending) t.pending = rte_pktmbuf_alloc(pool);
    if (!t.pending) {
      s.ctr_.inc(ShardCtr::tx_drop_no_mbuf);
      return {};
    }
    return {rte_pktmbuf_mtod(t.pending, uint8_t*), len};
  }
  void tx_send(uint32_t plane, uint32_t len) override {
    TxPath& t = tx[plane];
    rte_mbuf* m = t.pending;
    t.pending = nullptr;
    if (!m) return;
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = len;
    transmit(plane, m);
  }
  // Registered memory is mostly cold here, and with 4 KB pages the
  // hardware's stream prefetch starts over at every packet.
  void payload_ahead(const uint8_t* host, uint32_t len) override { engine::prefetch_bytes(host, len); }
  void complete(const engine::Completion& c) override { completions.push_back(c); }
  void qp_error(uint32_t qpn, engine::WcStatus why) override { qp_errors.emplace_back(qpn, why); }
  void endpoint_response(uint32_t plane, uint32_t id, uint8_t op, uint32_t rx_port, engine::Nanos t) override {
    endpoint_responses.push_back({plane, id, op, rx_port, t});
  }
  void ev_event(uint32_t qpn, uint32_t ev_index, uint32_t ev, engine::EvState from, engine::EvState to,
                uint64_t drops) override {
    EvEventRecord r{now, qpn, ev, from, to, drops, ev_index};
    ev_pending.push_back(r);
    if (ev_log.size() < kEvLogSize)
      ev_log.push_back(r);
    else
      ev_log[ev_log_next] = r;
    ev_log_next = (ev_log_next + 1) % kEvLogSize;
    ++ev_log_total;
  }

  void count_drop(uint32_t plane, ShardCtr why) {
    s.ctr_.inc(why);
    s.plane_ctr_[plane].inc(PlaneCtr::drops);
  }

  void capture(pcap::Writer& w, rte_mbuf* m) {
    if (!w.write({rte_pktmbuf_mtod(m, const uint8_t*), m->data_len}, capture_t0_ns + now))
      s.ctr_.inc(ShardCtr::capture_errors);
  }

  // Egress, after the engine or the link layer produced a frame: fault
  // injection, capture, then the port (possibly after a delay).
  void transmit(uint32_t plane, rte_mbuf* m) {
    TxPath& t = tx[plane];
    if (!dev.link_up(plane)) {
      count_drop(plane, ShardCtr::tx_drop_link_down);
      rte_pktmbuf_free(m);
      return;
    }
    const uint64_t drop = dev.drop_ppb_[plane].load(std::memory_order_relaxed);
    if (drop && splitmix(rng) % kPpb < drop) {
      count_drop(plane, ShardCtr::tx_drop_fault);
      rte_pktmbuf_free(m);
      return;
    }
    const uint64_t corrupt = dev.corrupt_ppb_[plane].load(std::memory_order_relaxed);
    if (corrupt && m->data_len > 14 && splitmix(rng) % kPpb < corrupt) {
      const uint64_t r = splitmix(rng);
      uint8_t* p = rte_pktmbuf_mtod(m, uint8_t*);
      p[14 + r % (m->data_len - 14u)] ^= static_cast<uint8_t>(1u << ((r >> 32) % 8));
      s.ctr_.inc(ShardCtr::tx_corrupted);
    }
    if (!dev.nic_.spec_.capture_dir.empty()) capture(t.cap_tx, m);
    const uint64_t delay = dev.delay_ns_[plane].load(std::memory_order_relaxed);
    if (delay || t.delay_len) {  // keep order while a delay drains
      if (t.delay_len == kDelayFrames) {
        count_drop(plane, ShardCtr::tx_drop_delay_full);
        rte_pktmbuf_free(m);
        return;
      }
      t.delay[(t.delay_head + t.delay_len++) % kDelayFrames] = {m, now + delay};
      s.ctr_.inc(ShardCtr::tx_delayed);
      return;
    }
    stage(plane, m);
  }

  void stage(uint32_t plane, rte_mbuf* m) {
    TxPath& t = tx[plane];
    if (t.n == kTxStage) flush(plane);
    if (t.n == kTxStage) {  // the port is stuck; the engine was told there was no room
      count_drop(plane, ShardCtr::tx_drop_port_full);
      rte_pktmbuf_free(m);
      return;
    }
    t.staged[t.n++] = m;
    if (t.n >= kTxBurst) flush(plane);
  }

  void flush(uint32_t plane) {
    TxPath& t = tx[plane];
    if (!t.n) return;
    std::array<uint32_t, kTxStage> len;
    for (uint32_t i = 0; i < t.n; ++i) len[i] = t.staged[i]->pkt_len;
    if (t.queue >= 0 && !port_usable(plane)) return;
    const uint32_t sent =
        t.queue >= 0
            ? guarded_burst(plane,
                            [&] {
                              return rte_eth_tx_burst(t.port, static_cast<uint16_t>(t.queue), t.staged.data(),
                                                      static_cast<uint16_t>(t.n));
                            })
            : rte_ring_sp_enqueue_burst(t.handoff, reinterpret_cast<void* const*>(t.staged.data()), t.n, nullptr);
    if (t.queue >= 0 && faulted[plane]) {
      // The PMD stopped mid-burst, and may already have freed some of the
      // frames it copied: none is sent again or freed here. Up to a burst of
      // mbufs leaks per fault, against a double free.
      s.ctr_.inc(ShardCtr::tx_lost_in_fault, t.n);
      s.plane_ctr_[plane].inc(PlaneCtr::drops, t.n);
      t.n = 0;
      return;
    }
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < sent; ++i) bytes += len[i];
    if (t.queue >= 0) {
      s.ctr_.inc(ShardCtr::tx_frames, sent);
      s.ctr_.inc(ShardCtr::tx_bytes, bytes);
      s.plane_ctr_[plane].inc(PlaneCtr::tx_frames, sent);
      if (sent) s.plane_ctr_[plane].inc(PlaneCtr::tx_bursts);
      s.plane_ctr_[plane].inc(PlaneCtr::tx_bytes, bytes);
    }
    if (sent < t.n) std::memmove(t.staged.data(), t.staged.data() + sent, (t.n - sent) * sizeof(rte_mbuf*));
    t.n -= sent;
    t.last_flush = now;
  }

  void release_delayed(uint32_t plane) {
    TxPath& t = tx[plane];
    while (t.delay_len && t.delay[t.delay_head].second <= now && t.n < kTxStage) {
      stage(plane, t.delay[t.delay_head].first);
      t.delay_head = (t.delay_head + 1) % kDelayFrames;
      --t.delay_len;
    }
  }

  void drain_completions() {
    if (!s.app_) {
      completions.clear();
      qp_errors.clear();
      ev_pending.clear();
      endpoint_responses.clear();
      return;
    }
    // The app may post work whose errors complete at once: index, not iterators.
    for (size_t i = 0; i < completions.size(); ++i) {
      const engine::Completion c = completions[i];
      s.app_->on_completion(s, c, now);
    }
    completions.clear();
    for (size_t i = 0; i < qp_errors.size(); ++i) {
      const auto [qpn, why] = qp_errors[i];
      s.app_->on_qp_error(s, qpn, why);
    }
    qp_errors.clear();
    for (const auto& e : ev_pending) s.app_->on_ev_event(s, e);
    ev_pending.clear();
    for (const auto& r : endpoint_responses) s.app_->on_endpoint_response(s, r);
    endpoint_responses.clear();
  }

  // One received frame, already known to belong to this shard's device.
  void receive(uint32_t plane, rte_mbuf* m, bool steered) {
    if (!steered) {
      s.ctr_.inc(ShardCtr::rx_frames);
      s.ctr_.inc(ShardCtr::rx_bytes, m->pkt_len);
      s.plane_ctr_[plane].inc(PlaneCtr::rx_frames);
      s.plane_ctr_[plane].inc(PlaneCtr::rx_bytes, m->pkt_len);
      if (!dev.link_up(plane)) {
        count_drop(plane, ShardCtr::rx_drop_link_down);
        rte_pktmbuf_free(m);
        return;
      }
      if (m->nb_segs > 1 && rte_pktmbuf_linearize(m) != 0) {
        count_drop(plane, ShardCtr::rx_drop_too_big);
        rte_pktmbuf_free(m);
        return;
      }
      if (!dev.nic_.spec_.capture_dir.empty()) capture(tx[plane].cap_rx, m);
      std::span<const uint8_t> frame{rte_pktmbuf_mtod(m, const uint8_t*), m->data_len};
      std::array<uint8_t, nic::kLinkReplyCapacity> reply;
      size_t reply_len = 0;
      switch (nic::classify(ident[plane], frame, reply, reply_len)) {
        case nic::LinkVerdict::roce: break;
        case nic::LinkVerdict::replied: {
          // A request for us also tells us the asker's binding (RFC 826's
          // merge, RFC 4861 7.2.3); the frame is counted as the reply.
          learn_from(plane, frame);
          s.ctr_.inc(wire::load_be<2>(&reply[12]) == 0x0806 ? ShardCtr::arp_replies : ShardCtr::nd_replies);
          rte_pktmbuf_free(m);
          send_raw(plane, std::span<const uint8_t>(reply.data(), reply_len));
          return;
        }
        case nic::LinkVerdict::not_ours:
          // ARP replies, Neighbour Advertisements and peers' announcements
          // land here: used, or dropped under the reason they cannot be.
          if (const auto update = learn_from(plane, frame)) {
            switch (*update) {
              using U = Device::NeighbourUpdate;
              case U::entered: s.ctr_.inc(ShardCtr::neighbours_learned); break;
              case U::static_kept: s.ctr_.inc(ShardCtr::neighbour_static_kept); break;
              case U::static_conflict: count_drop(plane, ShardCtr::rx_drop_neighbour_static_conflict); break;
              case U::not_cached: s.ctr_.inc(ShardCtr::rx_announcements_unused); break;
              case U::table_full: count_drop(plane, ShardCtr::rx_drop_neighbour_table_full); break;
            }
          } else {
            count_drop(plane, ShardCtr::rx_drop_not_ours);
          }
          rte_pktmbuf_free(m);
          return;
        case nic::LinkVerdict::malformed:
          count_drop(plane, ShardCtr::rx_drop_malformed);
          rte_pktmbuf_free(m);
          return;
      }
      if (dev.shards_.size() > 1) {
        const uint32_t owner = dev.shard_of_qpn(dest_qpn_of(frame));
        if (owner != s.index_) {
          m->hash.usr = plane;
          if (rte_ring_mp_enqueue(dev.shards_[owner]->impl_->steer, m) != 0) {
            count_drop(plane, ShardCtr::rx_drop_steer_full);
            rte_pktmbuf_free(m);
          } else {
            s.ctr_.inc(ShardCtr::rx_steered_out);
          }
          return;
        }
      }
    } else {
      s.ctr_.inc(ShardCtr::rx_steered_in);
    }
    s.ctr_.inc(ShardCtr::rx_to_engine);
    s.eng_->on_rx(plane, {rte_pktmbuf_mtod(m, const uint8_t*), m->data_len}, now);
    rte_pktmbuf_free(m);
    // The app sees a completion before any later frame can touch the same
    // memory (a peer may reuse a buffer as soon as it is acknowledged).
    if (!completions.empty() || !qp_errors.empty() || !ev_pending.empty() || !endpoint_responses.empty())
      drain_completions();
  }

  // Records the binding an ARP/ND frame tells us of, if any; nullopt: it
  // tells of none.
  std::optional<Device::NeighbourUpdate> learn_from(uint32_t plane, std::span<const uint8_t> frame) {
    const auto fact = nic::learn_neighbour(ident[plane], frame);
    if (!fact) return std::nullopt;
    wire::IpAddr ip;
    if (fact->ipv4)
      ip = wire::IpAddr::from_v4(*fact->ipv4);
    else if (fact->ipv6)
      ip.bytes = *fact->ipv6;
    else
      return std::nullopt;
    return dev.learn_neighbour(ip, fact->mac, fact->refresh_only);
  }

  void send_raw(uint32_t plane, std::span<const uint8_t> frame) {
    auto buf = tx_buffer(plane, static_cast<uint32_t>(frame.size()));
    if (buf.empty()) return;
    std::memcpy(buf.data(), frame.data(), frame.size());
    tx_send(plane, static_cast<uint32_t>(frame.size()));
  }
};

Shard::Shard(Device& dev, uint32_t index, unsigned lcore) : dev_(dev), index_(index), lcore_(lcore) {
  const NicSpec& ns = dev.nic_.spec_;
  impl_ = std::make_unique<Impl>(*this, dev, dev.nic_.pool_,
                                 ns.seed ^ (uint64_t(dev.index_) << 40) ^ (uint64_t(index) << 32) ^ 0x5eed);
  engine::EngineConfig ec = dev.spec_.engine;
  const uint32_t per_shard = std::max<uint32_t>(1, ec.max_qps / static_cast<uint32_t>(dev.spec_.lcores.size()));
  ec.max_qps = per_shard;
  ec.first_qpn = 0x10 + index * per_shard;
  ec.seed = ec.seed ^ (uint64_t(index) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(dev.index_) << 48);
  impl_->frame_cap = rte_pktmbuf_data_room_size(dev.nic_.pool_) - RTE_PKTMBUF_HEADROOM;
  for (uint32_t p = 0; p < dev.num_planes(); ++p) impl_->ident[p] = identity_of(ec.planes[p]);
  eng_ = std::make_unique<engine::Engine>(ec, *impl_);
}

Shard::~Shard() = default;

void Shard::serve_mailbox() {
  if (const auto* fn = mailbox_.load(std::memory_order_acquire)) {
    impl_->now = g_clock.now();
    (*fn)();
    impl_->drain_completions();
    impl_->deadline = 0;  // control may have changed the engine's timers
    mailbox_.store(nullptr, std::memory_order_release);
  }
}

void Shard::call(const std::function<void()>& fn) {
  std::lock_guard<std::mutex> g(mailbox_callers_);
  if (!dev_.nic_.running()) {
    impl_->now = g_clock.now();
    fn();
    impl_->drain_completions();
    impl_->deadline = 0;
    return;
  }
  mailbox_.store(&fn, std::memory_order_release);
  for (;;) {
    if (mailbox_.load(std::memory_order_acquire) == nullptr) return;
    // The workers stopped before serving us: take the request back.
    const std::function<void()>* mine = &fn;
    if (!dev_.nic_.running() && mailbox_.compare_exchange_strong(mine, nullptr)) {
      impl_->now = g_clock.now();
      fn();
      impl_->drain_completions();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void Shard::set_app(ShardApp* app) {
  call([&] { app_ = app; });
}

std::vector<EvEventRecord> Shard::ev_events(uint64_t* total) const {
  const auto& log = impl_->ev_log;
  if (total) *total = impl_->ev_log_total;
  std::vector<EvEventRecord> out;
  if (log.size() < kEvLogSize) return log;
  for (size_t i = 0; i < kEvLogSize; ++i) out.push_back(log[(impl_->ev_log_next + i) % kEvLogSize]);
  return out;
}

unsigned Shard::run_once(Nanos now) {
  Impl& I = *impl_;
  I.now = now;
  serve_mailbox();
  I.now = now;
  I.refresh_usable(dev_.num_planes(), now);
  // The app first: receives a host posted before its peer sent must be in
  // the engine before that peer's WRITE_IMM is processed.
  if (app_ && app_->on_poll(*this, now)) I.deadline = 0;
  unsigned work = 0;
  std::array<rte_mbuf*, kRxBurst> burst;
  if (I.steer) {
    const unsigned n = rte_ring_sc_dequeue_burst(I.steer, reinterpret_cast<void**>(burst.data()), kRxBurst, nullptr);
    for (unsigned i = 0; i < n; ++i) I.receive(burst[i]->hash.usr, burst[i], true);
    work += n;
  }
  // One burst per iteration across all queues, not one per queue: the
  // engine ACKs and sends only after this phase, so a burst from every
  // plane held each ACK behind all planes' frames. With 4 planes a
  // responder took in the requester's whole window before acknowledging any
  // of it, and the two sides took turns instead of overlapping (half the
  // goodput of 1 plane). The first queue rotates so every plane is served.
  uint16_t budget = kRxBurst;
  const size_t nq = I.rxq.size();
  for (size_t k = 0; k < nq && budget; ++k) {
    const auto& q = I.rxq[(I.rx_first + k) % nq];
    if (!I.port_usable(q.plane)) continue;
    const uint16_t n =
        I.guarded_burst(q.plane, [&] { return rte_eth_rx_burst(q.port, q.queue, burst.data(), budget); });
    if (n) plane_ctr_[q.plane].inc(PlaneCtr::rx_bursts);
    for (uint16_t i = 0; i < n; ++i) I.receive(q.plane, burst[i], false);
    work += n;
    budget = static_cast<uint16_t>(budget - n);
  }
  if (nq) I.rx_first = (I.rx_first + 1) % nq;
  for (const auto& h : I.handoffs_in) {
    const unsigned n = rte_ring_sc_dequeue_burst(h.ring, reinterpret_cast<void**>(burst.data()), kRxBurst, nullptr);
    for (unsigned i = 0; i < n; ++i) I.stage(h.plane, burst[i]);
    work += n;
  }
  if (work || now >= I.deadline || eng_->wants_tx()) {
    eng_->poll(now);
    I.deadline = eng_->next_deadline();
    I.drain_completions();
  }
  const uint32_t planes = dev_.num_planes();
  for (uint32_t p = 0; p < planes; ++p) {
    auto& t = I.tx[p];
    if (t.delay_len) I.release_delayed(p);
    if (t.n && (work < kRxBurst || now - t.last_flush >= kTxDrainNs)) I.flush(p);
  }
  return work;
}

void Shard::flush_all(Nanos now) {
  Impl& I = *impl_;
  I.now = now;
  I.links_read = false;  // a final flush reads the links afresh
  I.refresh_usable(dev_.num_planes(), now);
  for (uint32_t p = 0; p < dev_.num_planes(); ++p) {
    auto& t = I.tx[p];
    while (t.delay_len) {
      I.stage(p, t.delay[t.delay_head].first);
      t.delay_head = (t.delay_head + 1) % kDelayFrames;
      --t.delay_len;
    }
    I.flush(p);
  }
}

// ---------------------------------------------------------------------------
// Device

Device::Device(Nic& nic, const DeviceSpec& spec, uint32_t index) : nic_(nic), spec_(spec), index_(index) {
  for (auto& l : link_up_) l.store(true);
  spec_.engine.num_planes = num_planes();
  for (uint32_t p = 0; p < num_planes(); ++p) {
    spec_.engine.planes[p] = spec_.planes[p].addr;
    set_fault(p, spec_.planes[p].fault);
  }
}

Device::~Device() = default;

uint32_t Device::shard_of_qpn(uint32_t qpn) const {
  const uint32_t per_shard =
      std::max<uint32_t>(1, spec_.engine.max_qps / static_cast<uint32_t>(std::max<size_t>(1, shards_.size())));
  if (qpn < 0x10) return 0;
  const uint32_t s = (qpn - 0x10) / per_shard;
  return s < shards_.size() ? s : 0;
}

void Device::set_link(uint32_t plane, bool up, bool port_status) {
  if (plane >= num_planes()) return;
  link_up_[plane].store(up, std::memory_order_relaxed);
  if (!port_status) return;
  for (auto& sh : shards_) {
    Shard* s = sh.get();
    s->call([s, plane, up] {
      s->impl_->status_up[plane] = up;
      s->impl_->apply_plane(plane, s->impl_->now);
      s->engine().send_port_status(s->impl_->now);
    });
  }
}

void Device::set_fault(uint32_t plane, const FaultSpec& f) {
  drop_ppb_[plane].store(to_ppb(f.drop));
  corrupt_ppb_[plane].store(to_ppb(f.corrupt));
  delay_ns_[plane].store(f.delay_ns);
}

FaultSpec Device::fault(uint32_t plane) const {
  return FaultSpec{double(drop_ppb_[plane].load()) / kPpb, double(corrupt_ppb_[plane].load()) / kPpb,
                   delay_ns_[plane].load()};
}

engine::Counters<engine::DevCtr> Device::engine_counters() {
  engine::Counters<engine::DevCtr> sum;
  for (auto& sh : shards_) {
    Shard* s = sh.get();
    s->call([&] { sum += s->engine().counters(); });
  }
  return sum;
}

bool Device::link_reads_up(uint32_t plane) const {
  if (plane >= num_planes() || !link_up(plane)) return false;
  rte_eth_link link{};
  return rte_eth_link_get_nowait(spec_.planes[plane].port_id, &link) != 0 || link.link_status == RTE_ETH_LINK_UP;
}

std::array<Device::PlaneEvs, engine::kMaxPlanes> Device::evs_per_plane() {
  std::array<PlaneEvs, engine::kMaxPlanes> planes{};
  for (const auto& qi : qp_infos()) {
    std::vector<engine::EvInfo> evs;
    if (!ev_info(qi.qpn, evs)) continue;
    for (const auto& e : evs) {
      if (e.plane >= engine::kMaxPlanes) continue;
      ++planes[e.plane].states[size_t(e.state)];
      planes[e.plane].probes += e.ctr[engine::EvCtr::probes];
    }
  }
  return planes;
}

std::vector<engine::QpInfo> Device::qp_infos() {
  std::vector<engine::QpInfo> out;
  for (auto& sh : shards_) {
    Shard* s = sh.get();
    s->call([&] {
      for (uint32_t qpn : s->engine().qpns()) {
        engine::QpInfo qi;
        if (s->engine().qp_info(qpn, qi)) out.push_back(qi);
      }
    });
  }
  return out;
}

// Live QPs and those gone (a host client's reclaimed QPs), so that totals
// never fall and no drop a QP counted is lost with it.
engine::Counters<engine::QpCtr> Device::qp_counter_totals() {
  engine::Counters<engine::QpCtr> sum;
  for (auto& sh : shards_) {
    Shard* s = sh.get();
    s->call([&] {
      sum += s->engine().retired_qp_counters();
      for (uint32_t qpn : s->engine().qpns()) {
        engine::QpInfo qi;
        if (s->engine().qp_info(qpn, qi)) sum += qi.ctr;
      }
    });
  }
  return sum;
}

bool Device::ev_info(uint32_t qpn, std::vector<engine::EvInfo>& out) {
  Shard* s = shards_[shard_of_qpn(qpn)].get();
  bool found = false;
  s->call([&] {
    engine::QpInfo qi;
    found = s->engine().qp_info(qpn, qi);
    if (found) out = s->engine().ev_info(qpn);
  });
  return found;
}

std::vector<EvEventRecord> Device::ev_events(uint64_t* total) {
  std::vector<EvEventRecord> out;
  if (total) *total = 0;
  for (auto& sh : shards_) {
    Shard* s = sh.get();
    s->call([&] {
      uint64_t n = 0;
      auto e = s->ev_events(&n);
      out.insert(out.end(), e.begin(), e.end());
      if (total) *total += n;
    });
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.t < b.t; });
  return out;
}

std::array<uint64_t, size_t(PlaneCtr::count)> Device::plane_counters(uint32_t plane) const {
  std::array<uint64_t, size_t(PlaneCtr::count)> out{};
  for (auto& s : shards_)
    for (size_t i = 0; i < out.size(); ++i) out[i] += s->plane_counters(plane)[static_cast<PlaneCtr>(i)];
  return out;
}

std::array<uint64_t, size_t(ShardCtr::count)> Device::shard_counters() const {
  std::array<uint64_t, size_t(ShardCtr::count)> out{};
  for (auto& s : shards_)
    for (size_t i = 0; i < out.size(); ++i) out[i] += s->counters()[static_cast<ShardCtr>(i)];
  return out;
}

std::optional<PortStats> Device::port_stats(uint32_t plane) const {
  rte_eth_stats st{};
  if (rte_eth_stats_get(spec_.planes[plane].port_id, &st) != 0) return std::nullopt;
  return PortStats{st.ipackets, st.opackets, st.imissed, st.ierrors, st.oerrors, st.rx_nombuf};
}

bool Device::reg_mr(uint32_t pd, void* ptr, uint64_t iova, uint64_t len, uint32_t access, uint32_t& lkey,
                    uint32_t& rkey) {
  bool ok = false;
  shards_[0]->call([&] { ok = shards_[0]->engine().reg_mr(pd, ptr, iova, len, access, lkey, rkey); });
  if (!ok) return false;
  for (size_t k = 1; ok && k < shards_.size(); ++k) {
    Shard* s = shards_[k].get();
    s->call([&] { ok = s->engine().import_mr(pd, ptr, iova, len, access, lkey, rkey); });
  }
  if (!ok) dereg_mr(lkey);
  return ok;
}

void Device::dereg_mr(uint32_t lkey) {
  for (auto& sp : shards_) {
    Shard* s = sp.get();
    s->call([&] { s->engine().dereg_mr(lkey); });
  }
}

void Device::add_static_neighbour(const wire::IpAddr& ip, uint64_t mac) {
  std::lock_guard<std::mutex> g(neigh_mu_);
  neigh_[ip.bytes] = NeighbourEntry{mac, true};
}

Device::NeighbourUpdate Device::learn_neighbour(const wire::IpAddr& ip, uint64_t mac, bool refresh_only) {
  std::lock_guard<std::mutex> g(neigh_mu_);
  auto it = neigh_.find(ip.bytes);
  if (it != neigh_.end()) {
    if (it->second.is_static)
      return it->second.mac == mac ? NeighbourUpdate::static_kept : NeighbourUpdate::static_conflict;
    it->second.mac = mac;
    return NeighbourUpdate::entered;
  }
  if (refresh_only) return NeighbourUpdate::not_cached;
  if (neigh_.size() >= kMaxNeighbours) return NeighbourUpdate::table_full;
  neigh_.emplace(ip.bytes, NeighbourEntry{mac, false});
  return NeighbourUpdate::entered;
}

std::optional<uint64_t> Device::neighbour(const wire::IpAddr& ip) const {
  std::lock_guard<std::mutex> g(neigh_mu_);
  auto it = neigh_.find(ip.bytes);
  if (it == neigh_.end()) return std::nullopt;
  return it->second.mac;
}

std::optional<uint64_t> Device::resolve(uint32_t plane, const wire::IpAddr& ip, double timeout_s) {
  if (auto mac = neighbour(ip)) return mac;
  if (plane >= num_planes() || shards_.empty() || !(timeout_s > 0) || !nic_.running()) return std::nullopt;
  // A worker waiting here would never serve its own mailbox, nor receive
  // the answer.
  const unsigned self = rte_lcore_id();
  if (std::find(nic_.worker_lcores_.begin(), nic_.worker_lcores_.end(), self) != nic_.worker_lcores_.end())
    return std::nullopt;
  const nic::PlaneIdentity me = identity_of(plane_addr(plane));
  std::array<uint8_t, nic::kLinkReplyCapacity> query;
  const bool v4 = ip.is_v4();
  const size_t len =
      v4 ? nic::build_arp_request(me, ip.v4(), query) : nic::build_neighbour_solicitation(me, ip.bytes, query);
  if (!len) return std::nullopt;
  // Shard 0 owns TX queue 0 of every plane, so its frames go straight to
  // the port, the way its ARP replies do.
  Shard* s = shards_[0].get();
  const std::function<void()> ask = [&] {
    s->impl_->send_raw(plane, std::span<const uint8_t>(query.data(), len));
    s->ctr_.inc(v4 ? ShardCtr::arp_requests : ShardCtr::nd_solicits);
  };
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto until =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(timeout_s, 3600.0)));
  auto next_ask = start;
  for (;;) {
    nic_.tick_control();  // waiting here is work: clients queued behind it must not give up
    if (!nic_.running()) return neighbour(ip);
    if (Clock::now() >= next_ask) {
      s->call(ask);
      next_ask = Clock::now() + kResolveRetry;
    }
    std::this_thread::sleep_for(kResolvePoll);
    if (auto mac = neighbour(ip)) return mac;
    if (Clock::now() >= until) return std::nullopt;
  }
}

// ---------------------------------------------------------------------------
// Nic

namespace {

std::string port_setup(uint16_t port, uint16_t queues, uint32_t frame_bytes, rte_mempool* pool, uint64_t& mac) {
  rte_eth_dev_info info{};
  int rc = rte_eth_dev_info_get(port, &info);
  if (rc) return fmt::format("device info: {}", rte_strerror(-rc));
  rte_eth_conf conf{};
  if (queues > 1) {
    // Spread by the UDP source port (the EV) as well as the addresses; the
    // lcore that gets a frame steers it to its QP's owner.
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf = (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP) & info.flow_type_rss_offloads;
    if (!conf.rx_adv_conf.rss_conf.rss_hf) conf.rxmode.mq_mode = RTE_ETH_MQ_RX_NONE;
  }
  const uint32_t l3_mtu = frame_bytes - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN;
  conf.rxmode.mtu = l3_mtu;
  rc = rte_eth_dev_configure(port, queues, queues, &conf);
  if (rc == -EINVAL && info.max_rx_pktlen < frame_bytes) {
    // Some vdevs (memif) report Ethernet's 1518 bytes yet carry any frame
    // their buffers hold; a real NIC that enforces its limit fails here.
    fmt::print(stderr, "mrc-nic: port {} ({}) reports a {} B frame limit; keeping its default MTU\n", port,
               info.driver_name, info.max_rx_pktlen);
    conf.rxmode.mtu = 0;
    rc = rte_eth_dev_configure(port, queues, queues, &conf);
  }
  if (rc < 0) return fmt::format("configure: {}", rte_strerror(-rc));
  uint16_t nb_rx = kRxDesc, nb_tx = kTxDesc;
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nb_rx, &nb_tx);
  if (rc < 0) return fmt::format("descriptor counts: {}", rte_strerror(-rc));
  const int socket = rte_eth_dev_socket_id(port);
  const unsigned sock = socket < 0 ? 0u : static_cast<unsigned>(socket);
  for (uint16_t q = 0; q < queues; ++q) {
    rc = rte_eth_rx_queue_setup(port, q, nb_rx, sock, nullptr, pool);
    if (rc < 0)
      return fmt::format(
          "rx queue {}: {}{}", q, rte_strerror(-rc),
          info.max_rx_pktlen < frame_bytes
              ? fmt::format(" (the port takes frames of at most {} B: try a smaller --mtu)", info.max_rx_pktlen)
              : "");
    rc = rte_eth_tx_queue_setup(port, q, nb_tx, sock, nullptr);
    if (rc < 0) return fmt::format("tx queue {}: {}", q, rte_strerror(-rc));
  }
  if (mac) {
    rte_ether_addr a;
    for (int i = 0; i < 6; ++i) a.addr_bytes[i] = static_cast<uint8_t>(mac >> (40 - 8 * i));
    rte_eth_dev_default_mac_addr_set(port, &a);  // best effort: vdevs without MAC filters need no change
  } else {
    rte_ether_addr a{};
    rc = rte_eth_macaddr_get(port, &a);
    if (rc) return fmt::format("MAC address: {}", rte_strerror(-rc));
    for (uint8_t b : a.addr_bytes) mac = (mac << 8) | b;
    if (mac == 0) {
      // Ring ports have none: a locally administered one, unique per process.
      mac = 0x020000000000ull | (uint64_t(getpid() & 0xFFFF) << 16) | port;
      for (int i = 0; i < 6; ++i) a.addr_bytes[i] = static_cast<uint8_t>(mac >> (40 - 8 * i));
      rte_eth_dev_default_mac_addr_set(port, &a);
    }
  }
  rc = rte_eth_dev_start(port);
  if (rc < 0) return fmt::format("start: {}", rte_strerror(-rc));
  rte_eth_allmulticast_enable(port);  // IPv6 ND solicitations go to a multicast group
  return {};
}

}  // namespace

Nic::Nic(const NicSpec& spec) : spec_(spec) {
  g_clock.init();
  nic::install_fault_guard();
  // Every frame fits one mbuf, so the engine always sees contiguous bytes;
  // never below DPDK's default, which af_packet's and af_xdp's frames assume.
  const uint32_t frame_bytes = std::max<uint32_t>(RTE_ALIGN_CEIL(spec_.mtu + 256, 64), RTE_MBUF_DEFAULT_DATAROOM);
  uint32_t shards = 0, ports = 0;
  for (auto& d : spec_.devices) {
    shards += static_cast<uint32_t>(d.lcores.size());
    ports += static_cast<uint32_t>(d.planes.size());
  }
  const uint32_t per_port = static_cast<uint32_t>(kRxDesc + kTxDesc) * std::max<uint32_t>(1, shards);
  const uint32_t per_shard = engine::kMaxPlanes * (kTxStage + kDelayFrames + kHandoffRing) + kSteerRing;
  const uint32_t mbufs = ports * per_port + shards * per_shard / 4 + 8192;
  pool_ = rte_pktmbuf_pool_create("mrc_pool", mbufs, 256, 0, static_cast<uint16_t>(frame_bytes + RTE_PKTMBUF_HEADROOM),
                                  rte_socket_id());
  if (!pool_)
    throw std::runtime_error(
        fmt::format("mbuf pool of {} x {} B: {} (try a larger -m)", mbufs, frame_bytes, rte_strerror(rte_errno)));

  const uint64_t wall0 = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  for (uint32_t di = 0; di < spec_.devices.size(); ++di) {
    DeviceSpec& ds = spec_.devices[di];
    std::array<uint16_t, engine::kMaxPlanes> queues{};
    for (uint32_t p = 0; p < ds.planes.size(); ++p) {
      PlaneSpec& ps = ds.planes[p];
      rte_eth_dev_info info{};
      rte_eth_dev_info_get(ps.port_id, &info);
      queues[p] = static_cast<uint16_t>(std::max<size_t>(
          1, std::min<size_t>({ds.lcores.size(), size_t(info.max_rx_queues), size_t(info.max_tx_queues)})));
      // A zero-copy client restarted in DPDK 22.11 has its regions refused by
      // the server, then retries until the interrupt thread panics: not
      // restarted (its plane stays down until mrc-nic restarts).
      if (info.driver_name && std::string_view(info.driver_name) == "net_memif" && info.device)
        if (const rte_devargs* da = rte_dev_devargs(info.device);
            da && da->args && std::strstr(da->args, "role=client") && !std::strstr(da->args, "zero-copy=yes"))
          redial_.push_back({ps.port_id, ps.port});
      uint64_t mac = ps.addr.mac;
      std::string err = port_setup(ps.port_id, queues[p], frame_bytes, pool_, mac);
      if (!err.empty())
        throw std::runtime_error(fmt::format("device {} plane {} (port {}): {}", ds.name, p, ps.port, err));
      ps.addr.mac = mac;
    }
    auto dev = std::make_unique<Device>(*this, ds, di);
    for (uint32_t k = 0; k < ds.lcores.size(); ++k)
      dev->shards_.push_back(std::make_unique<Shard>(*dev, k, ds.lcores[k]));
    // Queues, steering and hand-off rings.
    for (uint32_t k = 0; k < dev->shards_.size(); ++k) {
      Shard::Impl& I = *dev->shards_[k]->impl_;
      I.capture_t0_ns = wall0;
      if (dev->shards_.size() > 1) {
        I.steer = rte_ring_create(fmt::format("st_{}_{}", di, k).c_str(), kSteerRing, rte_socket_id(), RING_F_SC_DEQ);
        if (!I.steer) throw std::runtime_error(fmt::format("steering ring: {}", rte_strerror(rte_errno)));
      }
      for (uint32_t p = 0; p < ds.planes.size(); ++p) {
        auto& t = I.tx[p];
        t.port = ds.planes[p].port_id;
        rte_eth_dev_info info{};
        I.gate_on_link[p] = rte_eth_dev_info_get(t.port, &info) == 0 && info.driver_name &&
                            std::string_view(info.driver_name) == "net_memif";
        if (k < queues[p]) {
          t.queue = static_cast<int>(k);
          I.rxq.push_back({p, t.port, static_cast<uint16_t>(k)});
        } else {
          Shard::Impl& owner = *dev->shards_[k % queues[p]]->impl_;
          t.handoff = rte_ring_create(fmt::format("tx_{}_{}_{}", di, p, k).c_str(), kHandoffRing, rte_socket_id(),
                                      RING_F_SP_ENQ | RING_F_SC_DEQ);
          if (!t.handoff) throw std::runtime_error(fmt::format("hand-off ring: {}", rte_strerror(rte_errno)));
          owner.handoffs_in.push_back({p, t.handoff});
        }
        if (!spec_.capture_dir.empty()) {
          const std::string base = dev->shards_.size() > 1
                                       ? fmt::format("{}/{}-plane{}-s{}", spec_.capture_dir, ds.name, p, k)
                                       : fmt::format("{}/{}-plane{}", spec_.capture_dir, ds.name, p);
          if (!t.cap_rx.open(base + "-rx.pcap") || !t.cap_tx.open(base + "-tx.pcap"))
            throw std::runtime_error(fmt::format("cannot write captures under {}", spec_.capture_dir));
        }
      }
    }
    devices_.push_back(std::move(dev));
  }
  for (auto& d : devices_)
    for (auto& s : d->shards_)
      if (std::find(worker_lcores_.begin(), worker_lcores_.end(), s->lcore()) == worker_lcores_.end())
        worker_lcores_.push_back(s->lcore());
}

Nic::~Nic() {
  stop();
  std::vector<uint16_t> started, all;
  for (auto& d : devices_)
    for (auto& ps : d->spec_.planes) started.push_back(ps.port_id);
  for (auto& d : spec_.devices)
    for (auto& ps : d.planes) all.push_back(ps.port_id);
  stop_ports(started);
  devices_.clear();
  close_ports(all);
  rte_mempool_free(pool_);
}

Device* Nic::find_device(const std::string& name) {
  for (auto& d : devices_)
    if (d->name() == name) return d.get();
  return nullptr;
}

Nanos Nic::now() const { return g_clock.now(); }

std::vector<std::string> Nic::wait_for_links(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    std::vector<std::string> down;
    for (auto& d : devices_)
      for (const auto& ps : d->spec_.planes) {
        rte_eth_link link{};
        if (rte_eth_link_get_nowait(ps.port_id, &link) != 0 || link.link_status != RTE_ETH_LINK_UP)
          down.push_back(fmt::format("{} ({})", ps.port, d->name()));
      }
    if (down.empty() || std::chrono::steady_clock::now() >= until) return down;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

namespace {
struct LaunchArg {
  Nic* nic;
  unsigned lcore;
};
std::vector<LaunchArg> g_launch(RTE_MAX_LCORE);
}  // namespace

int Nic::worker_main(void* arg) {
  auto* a = static_cast<LaunchArg*>(arg);
  a->nic->worker_loop(a->lcore);
  return 0;
}

void Nic::worker_loop(unsigned lcore) {
  std::vector<Shard*> mine;
  for (auto& d : devices_)
    for (auto& s : d->shards_)
      if (s->lcore() == lcore) mine.push_back(s.get());
  while (!stop_.load(std::memory_order_relaxed)) {
    const Nanos now = g_clock.now();
    for (Shard* s : mine) s->run_once(now);
  }
  const Nanos now = g_clock.now();
  for (Shard* s : mine) s->flush_all(now);
}

void Nic::start() {
  if (running_.load()) return;
  // Shard::call runs on the caller's thread while the workers are not
  // running: with every shard's caller lock held, none is inside such a
  // call when a worker starts, and later calls see running_ and use the
  // mailbox.
  std::vector<std::unique_lock<std::mutex>> callers;
  for (auto& d : devices_)
    for (auto& s : d->shards_) callers.emplace_back(s->mailbox_callers_);
  stop_.store(false);
  running_.store(true, std::memory_order_release);
  for (unsigned l : worker_lcores_) {
    g_launch[l] = {this, l};
    const int rc = rte_eal_remote_launch(worker_main, &g_launch[l], l);
    if (rc != 0) {
      stop();
      throw std::runtime_error(fmt::format("cannot launch a worker on lcore {}: {}", l, rte_strerror(-rc)));
    }
  }
}

void Nic::tick_control() {
  const uint64_t now = host::abi::monotonic_ms();
  for (auto& d : devices_)
    if (d->alive_) d->alive_->store(now, std::memory_order_relaxed);
}

void Nic::redial_memif_clients() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kEvery = std::chrono::seconds(1);
  const auto t = Clock::now();
  for (Redial& r : redial_) {
    rte_eth_link link{};
    const bool up = rte_eth_link_get_nowait(r.port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
    if (up) {
      if (r.down && r.tries)
        fmt::print(stderr, "mrc-nic: port {} (memif client) connected again after {} restart(s)\n", r.name, r.tries);
      r.down = false;
      continue;
    }
    if (!r.down) {
      r.down = true;
      r.tries = 0;
      r.next_try = t + kEvery;
      continue;
    }
    if (!running() || t < r.next_try) continue;
    if (!r.tries)
      fmt::print(stderr, "mrc-nic: port {} (memif client) lost its server; restarting it every second to find one\n",
                 r.name);
    ++r.tries;
    r.next_try = t + kEvery;
    // On the EAL's interrupt thread, where memif runs its own connect and
    // disconnect handlers: from this thread the restart raced them, and the
    // interrupt thread panicked on a closed socket in its epoll set.
    rte_eal_alarm_set(1, restart_port, reinterpret_cast<void*>(uintptr_t(r.port)));
  }
}

void Nic::restart_port(void* port_id) {
  const auto port = static_cast<uint16_t>(reinterpret_cast<uintptr_t>(port_id));
  // The last restart's handshake may have finished since the control thread
  // looked; memif's handlers run on this thread, so this look cannot race.
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP) return;
  // A failed start (no server yet) leaves the port stopped, its link down.
  rte_eth_dev_stop(port);
  rte_eth_dev_start(port);
}

void Nic::stop() {
  if (!running_.load()) return;
  stop_.store(true);
  rte_eal_alarm_cancel(restart_port, reinterpret_cast<void*>(-1));  // every port's
  for (unsigned l : worker_lcores_) rte_eal_wait_lcore(l);
  running_.store(false, std::memory_order_release);
}

}  // namespace mrc::dp
