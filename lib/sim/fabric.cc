#include "sim/fabric.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "wire/bytes.h"
#include "wire/spec.h"

namespace mrc::sim {
namespace {

constexpr uint32_t kScratchBytes = 16 * 1024;
// TX room is counted in frames of this size (a 4 KiB MTU plus headers).
constexpr uint32_t kRoomFrameBytes = 4096 + 128;
constexpr uint64_t kEngineSeedTag = 0x656E67696E65;  // "engine"
constexpr uint64_t kSwitchSeedTag = 0x737769746368;  // "switch"

// What a switch needs from a frame: the destination host (from the low bits
// of the destination address) and the ECMP hash of the 5-tuple.
struct Route {
  uint32_t dst_host = 0;
  uint64_t hash = 0;
};

inline uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Parses Ethernet, an optional VLAN tag, IPv4 or IPv6 and UDP in place; no
// allocation. Only the address scheme of Fabric::addr is understood.
bool parse_route(const std::vector<uint8_t>& f, uint64_t seed, Route& r) {
  const uint8_t* d = f.data();
  const size_t n = f.size();
  if (n < wire::kEthLen) return false;
  uint16_t type = wire::load_be16(d + 12);
  size_t l3 = wire::kEthLen;
  if (type == wire::kEtherTypeVlan) {
    if (n < l3 + wire::kVlanTagLen) return false;
    type = wire::load_be16(d + l3 + 2);
    l3 += wire::kVlanTagLen;
  }
  uint64_t src_ip, dst_ip;
  uint8_t proto;
  size_t l4;
  if (type == wire::kEtherTypeIpv4) {
    if (n < l3 + wire::kIpv4Len) return false;
    proto = d[l3 + 9];
    src_ip = wire::load_be32(d + l3 + 12);
    dst_ip = wire::load_be32(d + l3 + 16);
    l4 = l3 + (d[l3] & 0x0F) * 4u;
    r.dst_host = (static_cast<uint32_t>(dst_ip) & 0xFFFF) - 1;
  } else if (type == wire::kEtherTypeIpv6) {
    if (n < l3 + wire::kIpv6Len) return false;
    proto = d[l3 + 6];
    src_ip = wire::load_be<8>(d + l3 + 16) ^ wire::load_be<8>(d + l3 + 8);
    dst_ip = wire::load_be<8>(d + l3 + 32) ^ wire::load_be<8>(d + l3 + 24);
    l4 = l3 + wire::kIpv6Len;
    r.dst_host = wire::load_be16(d + l3 + 38) - 1u;
  } else {
    return false;
  }
  uint32_t ports = 0;
  if (proto == wire::kIpProtoUdp && n >= l4 + wire::kUdpLen) ports = wire::load_be32(d + l4);
  r.hash = mix(seed ^ mix(src_ip * 0x9E3779B97F4A7C15ull ^ dst_ip) ^ (uint64_t(proto) << 32 | ports));
  return true;
}

}  // namespace

// One engine host: the engine plus the Env it runs against (as TestNet's).
class Fabric::Host final : public engine::Env {
 public:
  Host(Fabric& net, uint32_t h) : net_(net), h_(h), scratch_(net.cfg_.planes) {
    for (auto& s : scratch_) s.resize(kScratchBytes);
  }

  uint32_t tx_room(uint32_t plane) override { return plane < scratch_.size() ? net_.tx_room(h_, plane) : 0; }

  std::span<uint8_t> tx_buffer(uint32_t plane, uint32_t len) override {
    if (plane >= scratch_.size() || len > kScratchBytes) return {};
    return {scratch_[plane].data(), len};
  }

  void tx_send(uint32_t plane, uint32_t len) override {
    if (plane >= scratch_.size() || len > kScratchBytes) return;
    const uint8_t* p = scratch_[plane].data();
    if (net_.tap_) net_.tap_(h_, plane, {p, len}, net_.now());
    net_.uplink(h_, plane).send(std::vector<uint8_t>(p, p + len));
  }

  void complete(const engine::Completion& c) override {
    if (net_.hook_) net_.hook_queue_.emplace_back(h_, c);
  }

  void ev_event(uint32_t, uint32_t, engine::EvState from, engine::EvState to, uint64_t) override {
    if (from == engine::EvState::good && to == engine::EvState::assumed_bad) ++net_.stats_.ev_to_bad;
    if (from == engine::EvState::assumed_bad && to == engine::EvState::good) ++net_.stats_.ev_to_good;
  }

  void qp_error(uint32_t, engine::WcStatus) override { ++net_.stats_.qp_errors; }

  Fabric& net_;
  const uint32_t h_;
  std::vector<std::vector<uint8_t>> scratch_;  // one TX buffer per plane
  std::unique_ptr<engine::Engine> engine_;
  // At most one pending poll; an earlier need cancels and replaces it.
  EventId poll_event_;
  Nanos poll_at_ = kNever;
};

Fabric::Fabric(const Config& cfg) : cfg_(cfg) {
  if (cfg_.hosts < 2 || cfg_.hosts > 65534) throw std::invalid_argument("Fabric: hosts must be 2..65534");
  if (cfg_.planes < 1 || cfg_.planes > engine::kMaxPlanes)
    throw std::invalid_argument("Fabric: planes must be 1.." + std::to_string(engine::kMaxPlanes));
  if (cfg_.hosts_per_leaf < 1) throw std::invalid_argument("Fabric: hosts_per_leaf must be >= 1");
  leaves_ = (cfg_.hosts + cfg_.hosts_per_leaf - 1) / cfg_.hosts_per_leaf;
  spines_ = cfg_.spines;
  if (spines_ == 0) {
    const double os = cfg_.oversubscription > 0 ? cfg_.oversubscription : 1.0;
    spines_ = std::max<uint32_t>(1, static_cast<uint32_t>(std::floor(cfg_.hosts_per_leaf / os)));
  }

  const uint32_t P = cfg_.planes, H = cfg_.hosts;
  for (uint32_t p = 0; p < P; ++p) {
    for (uint32_t h = 0; h < H; ++h) {
      const uint64_t s = derive_seed(derive_seed(cfg_.seed, h), p);
      const uint32_t l = leaf_of(h);
      uplinks_.push_back(std::make_unique<Link>(loop_, cfg_.host_link, derive_seed(s, 0),
                                                [this, p, l](std::vector<uint8_t> f) { leaf_rx(p, l, std::move(f)); }));
      downlinks_.push_back(
          std::make_unique<Link>(loop_, cfg_.host_link, derive_seed(s, 1),
                                 [this, h, p](std::vector<uint8_t> f) { deliver(h, p, std::move(f)); }));
    }
    for (uint32_t l = 0; l < leaves_; ++l) {
      leaf_seed_.push_back(derive_seed(derive_seed(cfg_.seed, kSwitchSeedTag), p * 65536ull + l));
      for (uint32_t s = 0; s < spines_; ++s) {
        const uint64_t ls = derive_seed(derive_seed(cfg_.seed, 0x1000000ull + l * 4096ull + s), p);
        to_spine_.push_back(
            std::make_unique<Link>(loop_, cfg_.fabric_link, derive_seed(ls, 2),
                                   [this, p, s](std::vector<uint8_t> f) { spine_rx(p, s, std::move(f)); }));
        to_leaf_.push_back(
            std::make_unique<Link>(loop_, cfg_.fabric_link, derive_seed(ls, 3),
                                   [this, p, l](std::vector<uint8_t> f) { leaf_rx(p, l, std::move(f)); }));
      }
    }
  }

  for (uint32_t h = 0; h < H; ++h) {
    auto host = std::make_unique<Host>(*this, h);
    engine::EngineConfig ec = cfg_.engine_template;
    ec.num_planes = P;
    ec.planes = addrs(h);
    ec.seed = derive_seed(derive_seed(derive_seed(cfg_.seed, kEngineSeedTag), cfg_.engine_template.seed), h);
    host->engine_ = std::make_unique<engine::Engine>(ec, *host);
    hosts_.push_back(std::move(host));
  }
}

Fabric::~Fabric() = default;

engine::Engine& Fabric::engine(uint32_t h) { return *hosts_.at(h)->engine_; }

engine::PlaneAddr Fabric::addr(uint32_t h, uint32_t p) const {
  engine::PlaneAddr a;
  a.mac = 0x020000000000ull | (uint64_t(h & 0xFFFF) << 8) | (p & 0xFF);
  a.ip = wire::IpAddr::from_v4((10u << 24) | (p << 16) | ((h + 1) & 0xFFFF));
  return a;
}

std::array<engine::PlaneAddr, engine::kMaxPlanes> Fabric::addrs(uint32_t h) const {
  std::array<engine::PlaneAddr, engine::kMaxPlanes> a{};
  for (uint32_t p = 0; p < cfg_.planes; ++p) a[p] = addr(h, p);
  return a;
}

void Fabric::leaf_rx(uint32_t p, uint32_t l, std::vector<uint8_t> frame) {
  Route r;
  if (!parse_route(frame, leaf_seed_[p * leaves_ + l], r) || r.dst_host >= cfg_.hosts) {
    ++stats_.unroutable;
    return;
  }
  if (leaf_of(r.dst_host) == l) {
    downlink(r.dst_host, p).send(std::move(frame));
    return;
  }
  leaf_to_spine(p, l, static_cast<uint32_t>(r.hash % spines_)).send(std::move(frame));
}

void Fabric::spine_rx(uint32_t p, uint32_t s, std::vector<uint8_t> frame) {
  Route r;
  // A spine has one path to each leaf: no hash needed.
  if (!parse_route(frame, 0, r) || r.dst_host >= cfg_.hosts) {
    ++stats_.unroutable;
    return;
  }
  spine_to_leaf(p, leaf_of(r.dst_host), s).send(std::move(frame));
}

void Fabric::set_host_link_up(uint32_t h, uint32_t p, bool up) {
  uplink(h, p).set_up(up);
  downlink(h, p).set_up(up);
}

void Fabric::set_fabric_link_up(uint32_t p, uint32_t index, bool up) {
  to_spine_.at(p * leaves_ * spines_ + index)->set_up(up);
  to_leaf_.at(p * leaves_ * spines_ + index)->set_up(up);
}

void Fabric::set_leaf_up(uint32_t p, uint32_t l, bool up) {
  for (uint32_t h = l * cfg_.hosts_per_leaf; h < std::min(cfg_.hosts, (l + 1) * cfg_.hosts_per_leaf); ++h)
    set_host_link_up(h, p, up);
  for (uint32_t s = 0; s < spines_; ++s) set_fabric_link_up(p, l * spines_ + s, up);
}

void Fabric::set_spine_up(uint32_t p, uint32_t s, bool up) {
  for (uint32_t l = 0; l < leaves_; ++l) set_fabric_link_up(p, l * spines_ + s, up);
}

void Fabric::set_plane_up(uint32_t p, bool up) {
  for (uint32_t l = 0; l < leaves_; ++l) set_leaf_up(p, l, up);
}

// The uplink takes frames until its queue is half full (see TestNet).
uint64_t Fabric::room_threshold(uint32_t h, uint32_t p) const {
  const uint64_t half = uplinks_[p * cfg_.hosts + h]->params().queue_bytes / 2;
  return half > kRoomFrameBytes ? half - kRoomFrameBytes : 0;
}

uint32_t Fabric::tx_room(uint32_t h, uint32_t p) const {
  const Link& up = *uplinks_[p * cfg_.hosts + h];
  const uint64_t half = up.params().queue_bytes / 2;
  const uint64_t queued = up.queued_bytes();
  if (queued == 0) return static_cast<uint32_t>(std::max<uint64_t>(1, half / kRoomFrameBytes));
  return queued < half ? static_cast<uint32_t>((half - queued) / kRoomFrameBytes) : 0;
}

void Fabric::deliver(uint32_t h, uint32_t p, std::vector<uint8_t> frame) {
  engine::Engine& e = *hosts_[h]->engine_;
  e.on_rx(p, frame, now());
  e.poll(now());
  after_engine_call(h);
}

int Fabric::post_send(uint32_t h, uint32_t qpn, const engine::SendWr& wr) {
  engine::Engine& e = engine(h);
  const int rc = e.post_send(qpn, wr, now());
  e.poll(now());
  after_engine_call(h);
  return rc;
}

void Fabric::poll(uint32_t h) {
  engine(h).poll(now());
  after_engine_call(h);
}

void Fabric::after_engine_call(uint32_t h) {
  rearm(*hosts_[h]);
  // A hook may post_send, which lands back here; the shared index makes the
  // nested call drain what is left, in order.
  while (hook_next_ < hook_queue_.size()) {
    const auto [host, c] = hook_queue_[hook_next_++];
    if (hook_) hook_(host, c);
  }
  hook_queue_.clear();
  hook_next_ = 0;
}

void Fabric::rearm(Host& host) {
  const engine::Engine& e = *host.engine_;
  Nanos t = e.next_deadline();
  // Blocked on a full uplink: wake when one has room again.
  if (e.wants_tx()) {
    for (uint32_t p = 0; p < cfg_.planes; ++p) {
      if (tx_room(host.h_, p) == 0) t = std::min(t, uplink(host.h_, p).time_queued_at_most(room_threshold(host.h_, p)));
    }
  }
  if (t == kNever) return;
  t = std::max(t, now() + 1);  // never spin the loop at one instant
  if (host.poll_at_ <= t) return;
  loop_.cancel(host.poll_event_);
  host.poll_at_ = t;
  Host* hp = &host;
  host.poll_event_ = loop_.at(t, [this, hp] {
    hp->poll_at_ = kNever;
    hp->poll_event_ = {};
    poll(hp->h_);
  });
}

Fabric::QpPair Fabric::connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a,
                                       uint32_t pd_b, const engine::QpCaps& caps) {
  QpPair r;
  engine::Engine& a = engine(h_a);
  engine::Engine& b = engine(h_b);
  r.qpn_a = a.create_qp(pd_a, caps);
  r.qpn_b = b.create_qp(pd_b, caps);
  if (!r.qpn_a || !r.qpn_b) return r;

  engine::QpAttr attr_a = base;
  attr_a.dest_qpn = r.qpn_b;
  attr_a.remote = addrs(h_b);
  engine::QpAttr attr_b = base;
  attr_b.dest_qpn = r.qpn_a;
  attr_b.remote = addrs(h_a);
  attr_b.sq_psn = base.rq_psn;
  attr_b.rq_psn = base.sq_psn;

  for (engine::QpState s : {engine::QpState::init, engine::QpState::rtr, engine::QpState::rts}) {
    r.error = a.modify_qp(r.qpn_a, s, attr_a, now());
    if (r.error != engine::ModifyError::ok) return r;
    r.error = b.modify_qp(r.qpn_b, s, attr_b, now());
    if (r.error != engine::ModifyError::ok) return r;
  }
  poll(h_a);
  poll(h_b);
  return r;
}

}  // namespace mrc::sim
