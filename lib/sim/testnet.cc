#include "sim/testnet.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "sim/frame_pool.h"
#include "wire/bytes.h"
#include "wire/spec.h"

namespace mrc::sim {
namespace {

// Destination IP from L2/L3 only: a switch does not need a valid BTH.
bool dst_ip(std::span<const uint8_t> f, wire::IpAddr& ip) {
  if (f.size() < wire::kEthLen) return false;
  uint16_t type = wire::load_be16(f.data() + 12);
  size_t l3 = wire::kEthLen;
  if (type == wire::kEtherTypeVlan) {
    if (f.size() < wire::kEthLen + wire::kVlanTagLen) return false;
    type = wire::load_be16(f.data() + wire::kEthLen + 2);
    l3 += wire::kVlanTagLen;
  }
  if (type == wire::kEtherTypeIpv4 && f.size() >= l3 + wire::kIpv4Len) {
    ip = wire::IpAddr::from_v4(wire::load_be32(f.data() + l3 + 16));
    return true;
  }
  if (type == wire::kEtherTypeIpv6 && f.size() >= l3 + wire::kIpv6Len) {
    std::copy_n(f.data() + l3 + wire::kIpv6DstOffset, 16, ip.bytes.begin());
    return true;
  }
  return false;
}

}  // namespace

TestNet::TestNet(const Config& cfg)
    : cfg_(cfg),
      hosts_(loop_, {.complete = [this](uint32_t h, const engine::Completion& c) { logs_[h].completions.push_back(c); },
                     .ev_event = [this](uint32_t h, const EvEvent& e) { logs_[h].ev_events.push_back(e); },
                     .qp_error = [this](uint32_t h, const QpError& e) { logs_[h].qp_errors.push_back(e); }}) {
  if (cfg_.hosts < 1 || cfg_.hosts > 254) throw std::invalid_argument("TestNet: hosts must be 1..254");
  if (cfg_.planes < 1 || cfg_.planes > engine::kMaxPlanes)
    throw std::invalid_argument("TestNet: planes must be 1.." + std::to_string(engine::kMaxPlanes));

  const uint32_t n = cfg_.hosts * cfg_.planes;
  uplinks_.reserve(n);
  downlinks_.reserve(n);
  for (uint32_t h = 0; h < cfg_.hosts; ++h) {
    for (uint32_t p = 0; p < cfg_.planes; ++p) {
      const uint64_t s = derive_seed(derive_seed(cfg_.seed, h), p);
      uplinks_.push_back(std::make_unique<Link>(
          loop_, cfg_.link, derive_seed(s, 0),
          [this, p](std::vector<uint8_t> f, uint64_t, uint32_t wire) { forward(p, std::move(f), wire); }));
      downlinks_.push_back(std::make_unique<Link>(loop_, cfg_.link, derive_seed(s, 1),
                                                  [this, h, p](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
                                                    hosts_.deliver(h, p, f, wire);
                                                    FramePool::give(std::move(f));
                                                  }));
    }
  }

  logs_.resize(cfg_.hosts);
  for (uint32_t h = 0; h < cfg_.hosts; ++h) {
    std::vector<Link*> ups;
    for (uint32_t p = 0; p < cfg_.planes; ++p) ups.push_back(&uplink(h, p));
    hosts_.add(cfg_.engine_template, cfg_.seed, addrs(h), std::move(ups));
  }
}

TestNet::~TestNet() = default;

engine::Engine& TestNet::engine(uint32_t h) { return hosts_.engine(h); }

engine::PlaneAddr TestNet::addr(uint32_t h, uint32_t p) const {
  engine::PlaneAddr a;
  a.mac = 0x020000000000ull | (uint64_t(h & 0xFF) << 8) | (p & 0xFF);
  if (cfg_.ipv6) {
    a.ip.bytes[0] = 0xFD;
    wire::store_be16(a.ip.bytes.data() + 12, static_cast<uint16_t>(p));
    wire::store_be16(a.ip.bytes.data() + 14, static_cast<uint16_t>(h));
  } else {
    a.ip = wire::IpAddr::from_v4((10u << 24) | (p << 16) | (h + 1));
  }
  return a;
}

std::array<engine::PlaneAddr, engine::kMaxPlanes> TestNet::addrs(uint32_t h) const {
  std::array<engine::PlaneAddr, engine::kMaxPlanes> a{};
  for (uint32_t p = 0; p < cfg_.planes; ++p) a[p] = addr(h, p);
  return a;
}

bool TestNet::find_host(uint32_t p, const wire::IpAddr& ip, uint32_t& h) const {
  // The address scheme puts the host index in the low bits; check the rest.
  const uint32_t guess = cfg_.ipv6 ? wire::load_be16(ip.bytes.data() + 14) : ((ip.bytes[15] - 1u) & 0xFF);
  if (guess >= cfg_.hosts || addr(guess, p).ip != ip) return false;
  h = guess;
  return true;
}

void TestNet::set_plane_up(uint32_t p, bool up) {
  for (uint32_t h = 0; h < cfg_.hosts; ++h) {
    uplink(h, p).set_up(up);
    downlink(h, p).set_up(up);
  }
}

const std::vector<engine::Completion>& TestNet::completions(uint32_t h) const { return logs_.at(h).completions; }
const std::vector<TestNet::EvEvent>& TestNet::ev_events(uint32_t h) const { return logs_.at(h).ev_events; }
const std::vector<TestNet::QpError>& TestNet::qp_errors(uint32_t h) const { return logs_.at(h).qp_errors; }

void TestNet::forward(uint32_t p, std::vector<uint8_t> frame, uint32_t wire_len) {
  wire::IpAddr ip;
  uint32_t h;
  if (!dst_ip(frame, ip) || !find_host(p, ip, h)) {
    ++unroutable_;
    return;
  }
  downlink(h, p).send(std::move(frame), 0, wire_len);
}

TestNet::QpPair TestNet::connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a,
                                         uint32_t pd_b, const engine::QpCaps& caps) {
  return hosts_.connect_qp_pair(h_a, h_b, base, pd_a, pd_b, caps);
}

}  // namespace mrc::sim
