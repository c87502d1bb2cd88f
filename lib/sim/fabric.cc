#include "sim/fabric.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>

#include "sim/frame_pool.h"
#include "wire/bytes.h"
#include "wire/spec.h"

namespace mrc::sim {
namespace {

constexpr uint64_t kSwitchSeedTag = 0x737769746368;  // "switch"

// What a switch needs from a frame: the destination host (from the low bits
// of the destination address) and the ECMP hash of the 5-tuple.
struct Route {
  uint32_t dst_host = 0;
  uint64_t hash = 0;
};

// A frame's tag (Link::Sink): the 16 address bits that name the destination
// host (host + 1) above 48 bits of a digest of the 5-tuple, which each leaf
// hashes with its own seed.
constexpr unsigned kTagHostShift = 48;
constexpr uint64_t kTagFlowMask = (uint64_t(1) << kTagHostShift) - 1;

inline uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Parses Ethernet, an optional VLAN tag, IPv4 or IPv6 and UDP in place; no
// allocation. Only the address scheme of Fabric::addr is understood. 0 for a
// frame that is not IP.
uint64_t route_tag(std::span<const uint8_t> f) {
  const uint8_t* d = f.data();
  const size_t n = f.size();
  if (n < wire::kEthLen) return 0;
  uint16_t type = wire::load_be16(d + 12);
  size_t l3 = wire::kEthLen;
  if (type == wire::kEtherTypeVlan) {
    if (n < l3 + wire::kVlanTagLen) return 0;
    type = wire::load_be16(d + l3 + 2);
    l3 += wire::kVlanTagLen;
  }
  uint64_t src_ip, dst_ip, dst_host;
  uint8_t proto;
  size_t l4;
  if (type == wire::kEtherTypeIpv4) {
    if (n < l3 + wire::kIpv4Len) return 0;
    proto = d[l3 + 9];
    src_ip = wire::load_be32(d + l3 + 12);
    dst_ip = wire::load_be32(d + l3 + 16);
    l4 = l3 + (d[l3] & 0x0F) * 4u;
    dst_host = dst_ip & 0xFFFF;
  } else if (type == wire::kEtherTypeIpv6) {
    if (n < l3 + wire::kIpv6Len) return 0;
    proto = d[l3 + 6];
    src_ip = wire::load_be<8>(d + l3 + 16) ^ wire::load_be<8>(d + l3 + 8);
    dst_ip = wire::load_be<8>(d + l3 + 32) ^ wire::load_be<8>(d + l3 + 24);
    l4 = l3 + wire::kIpv6Len;
    dst_host = wire::load_be16(d + l3 + 38);
  } else {
    return 0;
  }
  uint32_t ports = 0;
  if (proto == wire::kIpProtoUdp && n >= l4 + wire::kUdpLen) ports = wire::load_be32(d + l4);
  const uint64_t flow = mix(src_ip * 0x9E3779B97F4A7C15ull ^ dst_ip) ^ (uint64_t(proto) << 32 | ports);
  return dst_host << kTagHostShift | (flow & kTagFlowMask);
}

// A frame without a tag is read here, at the switch, and leaves with the
// tag so that the switches after it need not read it again.
bool route(const std::vector<uint8_t>& f, uint64_t& tag, uint64_t seed, Route& r) {
  if (!tag) tag = route_tag(f);
  if (!tag) return false;
  r.dst_host = static_cast<uint32_t>(tag >> kTagHostShift) - 1;
  r.hash = mix(seed ^ (tag & kTagFlowMask));
  return true;
}

}  // namespace

Fabric::Fabric(const Config& cfg)
    : cfg_(cfg),
      hosts_(loop_, {.ev_event =
                         [this](uint32_t, const EvEvent& e) {
                           if (e.from == engine::EvState::good && e.to == engine::EvState::assumed_bad)
                             ++stats_.ev_to_bad;
                           if (e.from == engine::EvState::assumed_bad && e.to == engine::EvState::good)
                             ++stats_.ev_to_good;
                         },
                     .qp_error = [this](uint32_t, const QpError&) { ++stats_.qp_errors; }}) {
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
                                                [this, p, l](std::vector<uint8_t> f, uint64_t tag, uint32_t wire) {
                                                  leaf_rx(p, l, std::move(f), tag, wire);
                                                }));
      downlinks_.push_back(std::make_unique<Link>(loop_, cfg_.host_link, derive_seed(s, 1),
                                                  [this, h, p](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
                                                    hosts_.deliver(h, p, f, wire);
                                                    FramePool::give(std::move(f));
                                                  }));
    }
    for (uint32_t l = 0; l < leaves_; ++l) {
      leaf_seed_.push_back(derive_seed(derive_seed(cfg_.seed, kSwitchSeedTag), p * 65536ull + l));
      for (uint32_t s = 0; s < spines_; ++s) {
        const uint64_t ls = derive_seed(derive_seed(cfg_.seed, 0x1000000ull + l * 4096ull + s), p);
        to_spine_.push_back(std::make_unique<Link>(loop_, cfg_.fabric_link, derive_seed(ls, 2),
                                                   [this, p, s](std::vector<uint8_t> f, uint64_t tag, uint32_t wire) {
                                                     spine_rx(p, s, std::move(f), tag, wire);
                                                   }));
        to_leaf_.push_back(std::make_unique<Link>(loop_, cfg_.fabric_link, derive_seed(ls, 3),
                                                  [this, p, l](std::vector<uint8_t> f, uint64_t tag, uint32_t wire) {
                                                    leaf_rx(p, l, std::move(f), tag, wire);
                                                  }));
      }
    }
  }

  hosts_.set_tx_stage_bytes(cfg_.host_tx_stage_bytes);
  if (cfg_.route_tags) hosts_.set_tx_tagger(route_tag);
  hosts_.set_room_cache(cfg_.room_cache);
  for (uint32_t h = 0; h < H; ++h) {
    std::vector<Link*> ups;
    for (uint32_t p = 0; p < P; ++p) ups.push_back(&uplink(h, p));
    hosts_.add(cfg_.engine_template, cfg_.seed, addrs(h), std::move(ups));
  }
}

Fabric::~Fabric() = default;

engine::Engine& Fabric::engine(uint32_t h) { return hosts_.engine(h); }

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

void Fabric::leaf_rx(uint32_t p, uint32_t l, std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len) {
  stats_.routed_from_headers += !tag;
  Route r;
  if (!route(frame, tag, leaf_seed_[p * leaves_ + l], r) || r.dst_host >= cfg_.hosts) {
    ++stats_.unroutable;
    return;
  }
  if (leaf_of(r.dst_host) == l) {
    downlink(r.dst_host, p).send(std::move(frame), tag, wire_len);
    return;
  }
  leaf_to_spine(p, l, static_cast<uint32_t>(r.hash % spines_)).send(std::move(frame), tag, wire_len);
}

void Fabric::spine_rx(uint32_t p, uint32_t s, std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len) {
  stats_.routed_from_headers += !tag;
  Route r;
  // A spine has one path to each leaf: no hash needed.
  if (!route(frame, tag, 0, r) || r.dst_host >= cfg_.hosts) {
    ++stats_.unroutable;
    return;
  }
  spine_to_leaf(p, leaf_of(r.dst_host), s).send(std::move(frame), tag, wire_len);
}

// The NIC is not told (a port status update is the caller's business), so
// its port stays up and keeps sending at line rate into the dead link: a
// failed plane must not drain faster than a live one, or it looks free.
void Fabric::set_host_link_up(uint32_t h, uint32_t p, bool up) {
  uplink(h, p).set_blackhole(!up);
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

Fabric::QpPair Fabric::connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a,
                                       uint32_t pd_b, const engine::QpCaps& caps) {
  return hosts_.connect_qp_pair(h_a, h_b, base, pd_a, pd_b, caps);
}

}  // namespace mrc::sim
