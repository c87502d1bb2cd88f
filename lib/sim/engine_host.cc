#include "sim/engine_host.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "sim/frame_pool.h"
#include "wire/packet.h"

namespace mrc::sim {
namespace {

constexpr uint32_t kMaxFrameBytes = 16 * 1024;
// New buffers are made big enough for any frame of a 4 KiB MTU; larger MTUs
// grow theirs once.
constexpr uint32_t kFrameBufferBytes = 4096 + 256;
// TX room is counted in frames of this size (a 4 KiB MTU plus headers), so
// smaller frames only make the estimate conservative.
constexpr uint32_t kRoomFrameBytes = 4096 + 128;
constexpr uint64_t kEngineSeedTag = 0x656E67696E65;  // "engine"
// Frames from this size up are worth cutting to a compact frame.
constexpr uint32_t kCompactFromBytes = 512;

// How much a host may have queued on its uplink: `stage` bytes (the NIC's
// egress staging per port), never more than half the queue, leaving the
// other half to absorb a burst the engine commits to before it sees the room
// shrink. An empty queue always takes one frame, or a small limit would
// stall the host.
uint64_t tx_limit(const Link& up, uint32_t stage) {
  const uint64_t half = up.params().queue_bytes / 2;
  return stage ? std::min<uint64_t>(stage, half) : half;
}

// A host blocked on a full uplink wakes when one frame fits. Waking when two
// fit polls half as often (10 % faster) but, ten seeds each, cost the 0.1 %
// loss run 1-2 points of its loss-free goodput (sessions 6 and 9).
uint64_t room_threshold(const Link& up, uint32_t stage) {
  const uint64_t limit = tx_limit(up, stage);
  return limit > kRoomFrameBytes ? limit - kRoomFrameBytes : 0;
}

// What travels of a frame when payloads are tokens and there is no ICRC:
// for a data frame, a compact frame: its headers and the token (and the
// payload's odd bytes, as payload and pad fill whole words), then its pad
// and ICRC bytes, with the lengths of that size so that it parses wherever
// the network reads it (ECN marks, trimming); a small frame whole. Empty for
// anything else (none such is sent today).
std::vector<uint8_t> travelling_copy(std::span<const uint8_t> frame) {
  wire::Packet pkt;
  const bool compact = frame.size() >= kCompactFromBytes &&
                       wire::parse_frame(frame, pkt, {.verify_icrc = false}) == wire::ParseError::ok &&
                       (pkt.at.flags & wire::kOpPayload) && pkt.at.payload_len >= sizeof(uintptr_t);
  if (!compact && frame.size() > FramePool::kSmallBytes) return {};
  std::vector<uint8_t> c = FramePool::take(FramePool::kSmallBytes);
  if (!compact) {
    c.assign(frame.begin(), frame.end());
    return c;
  }
  const uint32_t head = pkt.at.payload + sizeof(uintptr_t) + pkt.at.payload_len % 4;
  const uint32_t tail = pkt.at.pad + wire::kIcrcLen;
  c.resize(head + tail);
  std::memcpy(c.data(), frame.data(), head);
  std::memcpy(c.data() + head, frame.data() + frame.size() - tail, tail);
  wire::MutablePacket{c.data(), pkt.at}.set_size(head + tail);
  return c;
}

uint32_t uplink_room_at(const Link& up, uint32_t stage, Nanos t) {
  const uint64_t limit = tx_limit(up, stage);
  const uint64_t queued = up.queued_bytes_at(t);
  if (queued == 0) return static_cast<uint32_t>(std::max<uint64_t>(1, limit / kRoomFrameBytes));
  return queued < limit ? static_cast<uint32_t>((limit - queued) / kRoomFrameBytes) : 0;
}

// What a host keeps of one uplink between its sends, so that the engine's
// room checks (a dozen per frame sent while the ports are full) compare a
// time instead of redoing the queue's arithmetic on a link out of cache.
struct UplinkRoom {
  uint32_t changes = ~0u;  // the host's count of its uplinks' changes, when worked out
  Nanos room_from = 0;     // uplink_room_at() is nonzero from then on
  Nanos wake_at = 0;       // when a host blocked on it polls again

  void refresh(const Link& up, uint32_t stage, Nanos now, uint32_t changes_now) {
    changes = changes_now;
    wake_at = up.time_queued_at_most(room_threshold(up, stage));
    if (uplink_room_at(up, stage, now)) {  // also a link without a rate, whose queue counts as empty
      room_from = now;
      return;
    }
    // The wake-up is when a frame surely fits; room may open a nanosecond
    // or so sooner, as the queue is counted to the nearest byte.
    Nanos t = std::max(now, wake_at);
    while (t > now && uplink_room_at(up, stage, t - 1)) --t;
    while (!uplink_room_at(up, stage, t)) ++t;
    room_from = t;
  }
};

}  // namespace

// One engine host: the engine plus the Env it runs against.
class EngineHosts::Host final : public engine::Env {
 public:
  Host(EngineHosts& hosts, uint32_t index, std::vector<Link*> uplinks, bool computes_icrc)
      : hosts_(hosts),
        index_(index),
        uplinks_(std::move(uplinks)),
        computes_icrc_(computes_icrc),
        pending_(uplinks_.size()),
        room_(uplinks_.size()) {
    for (auto& f : pending_) f = FramePool::take(kFrameBufferBytes);
    for (Link* up : uplinks_) up->set_watcher(&uplink_changes_);
  }

  uint32_t tx_room(uint32_t plane) override {
    if (plane >= uplinks_.size()) return 0;
    const Nanos now = hosts_.now();
    if (hosts_.room_cache_ && now < room(plane).room_from) return 0;
    return uplink_room_at(*uplinks_[plane], hosts_.tx_stage_bytes_, now);
  }

  uint32_t planes_without_room() override {
    if (!hosts_.room_cache_) return 0;
    const Nanos now = hosts_.now();
    uint32_t full = 0;
    for (uint32_t p = 0; p < uplinks_.size(); ++p)
      if (now < room(p).room_from) full |= 1u << p;
    return full;
  }

  void forget_room() { ++uplink_changes_; }

  // Valid without touching the link: the host sees its own sends (the only
  // ones on its uplinks) and the links count every other change for it.
  const UplinkRoom& room(uint32_t plane) {
    UplinkRoom& r = room_[plane];
    if (r.changes != uplink_changes_) refresh_room(plane);
    return r;
  }
  void refresh_room(uint32_t plane) {
    room_[plane].refresh(*uplinks_[plane], hosts_.tx_stage_bytes_, hosts_.now(), uplink_changes_);
  }

  // The engine writes each frame straight into the buffer that travels (or
  // whose copy does). It only grows: zero-filling 4 KB per frame showed.
  std::span<uint8_t> tx_buffer(uint32_t plane, uint32_t len) override {
    if (plane >= pending_.size() || len > kMaxFrameBytes) return {};
    std::vector<uint8_t>& f = pending_[plane];
    if (f.size() < len) f.resize(len);
    return {f.data(), len};
  }

  void tx_send(uint32_t plane, uint32_t len) override {
    if (plane >= pending_.size() || len > pending_[plane].size()) return;
    std::vector<uint8_t>& f = pending_[plane];
    const uint64_t tag = hosts_.tagger_ ? hosts_.tagger_({f.data(), len}) : 0;
    // With tokens and no ICRC nothing reads the payload's bytes past the
    // token, so they need not travel: a run's frames in flight then take a
    // few hundred bytes each instead of 4 KB.
    std::vector<uint8_t> c;
    if (hosts_.placement_check_ && !computes_icrc_) c = travelling_copy({f.data(), len});
    if (!c.empty()) {
      uplinks_[plane]->send(std::move(c), tag, len);  // f stays for the next frame
    } else {
      f.resize(len);
      uplinks_[plane]->send(std::move(f), tag);
      f = FramePool::take(kFrameBufferBytes);
    }
    refresh_room(plane);  // while the link is in cache
  }

  void payload_to_frame(uint8_t* frame, const uint8_t* host, uint32_t len) override {
    if (!hosts_.placement_check_ || len < sizeof(uintptr_t)) return static_cast<void>(std::memcpy(frame, host, len));
    const auto token = reinterpret_cast<uintptr_t>(host);
    std::memcpy(frame, &token, sizeof token);
  }

  void payload_to_host(uint8_t* host, const uint8_t* frame, uint32_t len) override {
    if (!hosts_.placement_check_) return static_cast<void>(std::memcpy(host, frame, len));
    Placement p{host, nullptr, nullptr, len};
    if (len < sizeof(uintptr_t)) {
      p.bytes = frame;
    } else {
      uintptr_t token;
      std::memcpy(&token, frame, sizeof token);
      p.src = reinterpret_cast<const uint8_t*>(token);  // only compared, never read
    }
    hosts_.placement_check_(index_, p);
  }

  void complete(const engine::Completion& c) override {
    if (hosts_.observers_.complete) hosts_.observers_.complete(index_, c);
    if (hosts_.hook_) hosts_.hook_queue_.emplace_back(index_, c);
  }

  void ev_event(uint32_t qpn, uint32_t /*ev_index*/, uint32_t ev, engine::EvState from, engine::EvState to, uint64_t drops) override {
    if (hosts_.observers_.ev_event) hosts_.observers_.ev_event(index_, {hosts_.now(), qpn, ev, from, to, drops});
  }

  void qp_error(uint32_t qpn, engine::WcStatus why) override {
    if (hosts_.observers_.qp_error) hosts_.observers_.qp_error(index_, {hosts_.now(), qpn, why});
  }

  EngineHosts& hosts_;
  const uint32_t index_;
  const std::vector<Link*> uplinks_;           // [plane]
  const bool computes_icrc_;
  std::vector<std::vector<uint8_t>> pending_;  // [plane] the buffer tx_buffer hands out next
  std::vector<UplinkRoom> room_;               // [plane]
  uint32_t uplink_changes_ = 0;                // bumped by the uplinks: Link::set_watcher()
  std::unique_ptr<engine::Engine> engine_;
  // At most one pending poll; an earlier need cancels and replaces it.
  EventId poll_event_;
  Nanos poll_at_ = kNever;
};

EngineHosts::EngineHosts(EventLoop& loop, Observers observers)
    : loop_(loop), observers_(std::move(observers)), rx_frame_(kMaxFrameBytes) {}

EngineHosts::~EngineHosts() = default;

void EngineHosts::add(const engine::EngineConfig& tmpl, uint64_t net_seed,
                      const std::array<engine::PlaneAddr, engine::kMaxPlanes>& addrs, std::vector<Link*> uplinks) {
  add_as(size(), tmpl, net_seed, addrs, std::move(uplinks));
}

void EngineHosts::add_as(uint32_t h, const engine::EngineConfig& tmpl, uint64_t net_seed,
                         const std::array<engine::PlaneAddr, engine::kMaxPlanes>& addrs, std::vector<Link*> uplinks) {
  if (h >= hosts_.size()) hosts_.resize(size_t(h) + 1);
  if (hosts_[h]) throw std::invalid_argument("EngineHosts: host " + std::to_string(h) + " added twice");
  auto host = std::make_unique<Host>(*this, h, std::move(uplinks), !tmpl.icrc_offload);
  engine::EngineConfig ec = tmpl;
  ec.num_planes = static_cast<uint32_t>(host->uplinks_.size());
  ec.planes = addrs;
  ec.seed = derive_seed(derive_seed(derive_seed(net_seed, kEngineSeedTag), tmpl.seed), h);
  host->engine_ = std::make_unique<engine::Engine>(ec, *host);
  hosts_[h] = std::move(host);
  if (h >= prefetch_.size()) prefetch_.resize(size_t(h) + 1);
  prefetch_[h] = {hosts_[h].get(), hosts_[h]->engine_.get(), hosts_[h]->engine_->prefetch_map()};
}

void EngineHosts::prefetch_rx(const void* hosts, uint32_t h, uint32_t, uint64_t, std::span<const uint8_t> frame,
                              unsigned stage) {
  const auto& self = *static_cast<const EngineHosts*>(hosts);
  if (h >= self.prefetch_.size()) return;
  const PrefetchEntry& e = self.prefetch_[h];
  if (stage == 0) self.prefetch_host(e);
  engine::Engine::prefetch_rx(e.map, frame, stage);
  engine::Engine::prefetch_poll(e.map, stage);  // on_rx() ends with a poll()
}

void EngineHosts::prefetch_host(const PrefetchEntry& e) const {
  __builtin_prefetch(e.host);
  __builtin_prefetch(&e.host->engine_);
  __builtin_prefetch(&e.host->poll_at_);
  __builtin_prefetch(e.engine);
}

EngineHosts::Host& EngineHosts::host(uint32_t h) {
  if (h >= hosts_.size() || !hosts_[h]) throw std::out_of_range("EngineHosts: no host " + std::to_string(h) + " here");
  return *hosts_[h];
}

void EngineHosts::set_tx_stage_bytes(uint32_t bytes) {
  tx_stage_bytes_ = bytes;
  for (auto& host : hosts_)
    if (host) host->forget_room();
}

engine::Engine& EngineHosts::engine(uint32_t h) { return *host(h).engine_; }

std::span<const uint8_t> EngineHosts::expand(std::span<const uint8_t> compact, uint32_t wire_len) {
  wire::Packet pkt;
  if (wire_len > rx_frame_.size() || wire::parse_frame(compact, pkt, {.verify_icrc = false}) != wire::ParseError::ok)
    return compact;
  const uint32_t tail = pkt.at.pad + wire::kIcrcLen;
  uint8_t* f = rx_frame_.data();
  std::memcpy(f, compact.data(), compact.size() - tail);
  std::memcpy(f + wire_len - tail, compact.data() + compact.size() - tail, tail);
  wire::MutablePacket{f, pkt.at}.set_size(wire_len);
  return {f, wire_len};
}

void EngineHosts::deliver(uint32_t h, uint32_t p, std::span<const uint8_t> frame, uint32_t wire_len) {
  Host& host = *hosts_[h];
  if (wire_len > frame.size()) frame = expand(frame, wire_len);
  host.engine_->on_rx(p, frame, now());
  host.engine_->poll(now());
  after_engine_call(host);
}

int EngineHosts::post_send(uint32_t h, uint32_t qpn, const engine::SendWr& wr) {
  Host& host = this->host(h);
  const int rc = host.engine_->post_send(qpn, wr);
  host.engine_->poll(now());
  after_engine_call(host);
  return rc;
}

void EngineHosts::poll(uint32_t h) {
  Host& host = this->host(h);
  host.engine_->poll(now());
  after_engine_call(host);
}

void EngineHosts::after_engine_call(Host& host) {
  rearm(host);
  // A hook may post_send, which lands back here; the shared index makes the
  // nested call drain what is left, in order.
  while (hook_next_ < hook_queue_.size()) {
    const auto [h, c] = hook_queue_[hook_next_++];
    if (hook_) hook_(h, c);
  }
  hook_queue_.clear();
  hook_next_ = 0;
}

// A host's poll timer.
struct EngineHosts::PollEvent {
  EngineHosts* hosts;
  Host* host;
  uint32_t h;  // host's index, known without loading host
  void operator()() const {
    host->poll_at_ = kNever;
    host->poll_event_ = {};
    hosts->poll(h);
  }
  void prefetch(unsigned stage) const {
    const PrefetchEntry& e = hosts->prefetch_[h];
    if (stage == 0) hosts->prefetch_host(e);
    engine::Engine::prefetch_poll(e.map, stage);
  }
};

void EngineHosts::rearm(Host& host) {
  const engine::Engine& e = *host.engine_;
  Nanos t = e.next_deadline();
  // Blocked on a full uplink: wake when one has room again. Only the planes
  // the engine found full are looked at (their links are already in cache);
  // if it wanted another plane, it is window- or pace-bound and its deadline
  // covers it.
  if (e.wants_tx()) {
    for (uint32_t full = e.tx_full_planes(); full; full &= full - 1) {
      const uint32_t p = std::countr_zero(full);
      if (room_cache_) {
        const UplinkRoom& r = host.room(p);
        if (now() < r.room_from) t = std::min(t, r.wake_at);
      } else if (const Link& up = *host.uplinks_[p]; !uplink_room_at(up, tx_stage_bytes_, now())) {
        t = std::min(t, up.time_queued_at_most(room_threshold(up, tx_stage_bytes_)));
      }
    }
  }
  if (t == kNever) return;
  // The engine was just polled at now; a deadline not in the future must not
  // spin the loop at one instant.
  t = std::max(t, now() + 1);
  if (host.poll_at_ <= t) return;  // an earlier poll re-arms when it runs
  loop_.cancel(host.poll_event_);
  host.poll_at_ = t;
  host.poll_event_ = loop_.at(t, PollEvent{this, &host, host.index_});
}

QpPair connect_engines(engine::Engine& a, engine::Engine& b, const engine::QpAttr& base, uint32_t pd_a, uint32_t pd_b,
                       const engine::QpCaps& caps, Nanos now) {
  QpPair r;
  r.qpn_a = a.create_qp(pd_a, caps);
  r.qpn_b = b.create_qp(pd_b, caps);
  if (!r.qpn_a || !r.qpn_b) return r;

  engine::QpAttr attr_a = base;
  attr_a.dest_qpn = r.qpn_b;
  attr_a.remote = b.config().planes;
  engine::QpAttr attr_b = base;
  attr_b.dest_qpn = r.qpn_a;
  attr_b.remote = a.config().planes;
  attr_b.sq_psn = base.rq_psn;
  attr_b.rq_psn = base.sq_psn;

  for (engine::QpState s : {engine::QpState::init, engine::QpState::rtr, engine::QpState::rts}) {
    r.error = a.modify_qp(r.qpn_a, s, attr_a, now);
    if (r.error != engine::ModifyError::ok) return r;
    r.error = b.modify_qp(r.qpn_b, s, attr_b, now);
    if (r.error != engine::ModifyError::ok) return r;
  }
  return r;
}

QpPair EngineHosts::connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a,
                                    uint32_t pd_b, const engine::QpCaps& caps) {
  const QpPair r = connect_engines(engine(h_a), engine(h_b), base, pd_a, pd_b, caps, now());
  if (r) {
    poll(h_a);
    poll(h_b);
  }
  return r;
}

}  // namespace mrc::sim
