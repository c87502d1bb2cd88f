#include "sim/testnet.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "wire/bytes.h"
#include "wire/spec.h"

namespace mrc::sim {
namespace {

constexpr uint32_t kScratchBytes = 16 * 1024;
// TX room is counted in frames of this size (a 4 KiB MTU plus headers), so
// smaller frames only make the estimate conservative.
constexpr uint32_t kRoomFrameBytes = 4096 + 128;
constexpr uint64_t kEngineSeedTag = 0x656E67696E65;  // "engine"

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

// One engine host: the engine plus the Env it runs against.
class TestNet::Host final : public engine::Env {
 public:
  Host(TestNet& net, uint32_t h) : net_(net), h_(h), scratch_(net.cfg_.planes) {
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
    net_.uplink(h_, plane).send(std::vector<uint8_t>(p, p + len));
  }

  void complete(const engine::Completion& c) override {
    completions_.push_back(c);
    if (net_.hook_) net_.hook_queue_.emplace_back(h_, c);
  }

  void ev_event(uint32_t qpn, uint32_t ev, engine::EvState from, engine::EvState to, uint64_t drops) override {
    ev_events_.push_back({net_.now(), qpn, ev, from, to, drops});
  }

  void qp_error(uint32_t qpn, engine::WcStatus why) override { qp_errors_.push_back({net_.now(), qpn, why}); }

  TestNet& net_;
  const uint32_t h_;
  std::vector<std::vector<uint8_t>> scratch_;  // one TX buffer per plane
  std::unique_ptr<engine::Engine> engine_;
  std::vector<engine::Completion> completions_;
  std::vector<EvEvent> ev_events_;
  std::vector<QpError> qp_errors_;
  // At most one pending poll; an earlier need cancels and replaces it.
  EventId poll_event_;
  Nanos poll_at_ = kNever;
};

TestNet::TestNet(const Config& cfg) : cfg_(cfg) {
  if (cfg_.hosts < 1 || cfg_.hosts > 254) throw std::invalid_argument("TestNet: hosts must be 1..254");
  if (cfg_.planes < 1 || cfg_.planes > engine::kMaxPlanes)
    throw std::invalid_argument("TestNet: planes must be 1.." + std::to_string(engine::kMaxPlanes));

  const uint32_t n = cfg_.hosts * cfg_.planes;
  uplinks_.reserve(n);
  downlinks_.reserve(n);
  for (uint32_t h = 0; h < cfg_.hosts; ++h) {
    for (uint32_t p = 0; p < cfg_.planes; ++p) {
      const uint64_t s = derive_seed(derive_seed(cfg_.seed, h), p);
      uplinks_.push_back(std::make_unique<Link>(loop_, cfg_.link, derive_seed(s, 0),
                                                [this, p](std::vector<uint8_t> f) { forward(p, std::move(f)); }));
      downlinks_.push_back(std::make_unique<Link>(
          loop_, cfg_.link, derive_seed(s, 1), [this, h, p](std::vector<uint8_t> f) { deliver(h, p, std::move(f)); }));
    }
  }

  for (uint32_t h = 0; h < cfg_.hosts; ++h) {
    auto host = std::make_unique<Host>(*this, h);
    engine::EngineConfig ec = cfg_.engine_template;
    ec.num_planes = cfg_.planes;
    ec.planes = addrs(h);
    ec.seed = derive_seed(derive_seed(derive_seed(cfg_.seed, kEngineSeedTag), cfg_.engine_template.seed), h);
    host->engine_ = std::make_unique<engine::Engine>(ec, *host);
    hosts_.push_back(std::move(host));
  }
}

TestNet::~TestNet() = default;

engine::Engine& TestNet::engine(uint32_t h) { return *hosts_.at(h)->engine_; }

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

const std::vector<engine::Completion>& TestNet::completions(uint32_t h) const { return hosts_.at(h)->completions_; }
const std::vector<TestNet::EvEvent>& TestNet::ev_events(uint32_t h) const { return hosts_.at(h)->ev_events_; }
const std::vector<TestNet::QpError>& TestNet::qp_errors(uint32_t h) const { return hosts_.at(h)->qp_errors_; }

// The uplink takes frames until its queue is half full, leaving the other
// half to absorb a burst the engine commits to before it sees the room shrink.
// An empty queue always takes one frame, or a small queue would stall the host.
uint64_t TestNet::room_threshold(uint32_t h, uint32_t p) const {
  const uint64_t half = uplinks_[h * cfg_.planes + p]->params().queue_bytes / 2;
  return half > kRoomFrameBytes ? half - kRoomFrameBytes : 0;
}

uint32_t TestNet::tx_room(uint32_t h, uint32_t p) const {
  const Link& up = *uplinks_[h * cfg_.planes + p];
  const uint64_t half = up.params().queue_bytes / 2;
  const uint64_t queued = up.queued_bytes();
  if (queued == 0) return static_cast<uint32_t>(std::max<uint64_t>(1, half / kRoomFrameBytes));
  return queued < half ? static_cast<uint32_t>((half - queued) / kRoomFrameBytes) : 0;
}

void TestNet::forward(uint32_t p, std::vector<uint8_t> frame) {
  wire::IpAddr ip;
  uint32_t h;
  if (!dst_ip(frame, ip) || !find_host(p, ip, h)) {
    ++unroutable_;
    return;
  }
  downlink(h, p).send(std::move(frame));
}

void TestNet::deliver(uint32_t h, uint32_t p, std::vector<uint8_t> frame) {
  engine::Engine& e = *hosts_[h]->engine_;
  e.on_rx(p, frame, now());
  e.poll(now());
  after_engine_call(h);
}

int TestNet::post_send(uint32_t h, uint32_t qpn, const engine::SendWr& wr) {
  engine::Engine& e = engine(h);
  const int rc = e.post_send(qpn, wr, now());
  e.poll(now());
  after_engine_call(h);
  return rc;
}

void TestNet::poll(uint32_t h) {
  engine(h).poll(now());
  after_engine_call(h);
}

void TestNet::after_engine_call(uint32_t h) {
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

void TestNet::rearm(Host& host) {
  const engine::Engine& e = *host.engine_;
  Nanos t = e.next_deadline();
  // Blocked on a full uplink: wake when one has room again. If the engine
  // wanted another plane, it is window- or pace-bound and its deadline covers it.
  if (e.wants_tx()) {
    for (uint32_t p = 0; p < cfg_.planes; ++p) {
      if (tx_room(host.h_, p) == 0) t = std::min(t, uplink(host.h_, p).time_queued_at_most(room_threshold(host.h_, p)));
    }
  }
  if (t == kNever) return;
  // The engine was just polled at now; a deadline not in the future must not
  // spin the loop at one instant.
  t = std::max(t, now() + 1);
  if (host.poll_at_ <= t) return;  // an earlier poll re-arms when it runs
  loop_.cancel(host.poll_event_);
  host.poll_at_ = t;
  Host* hp = &host;
  host.poll_event_ = loop_.at(t, [this, hp] {
    hp->poll_at_ = kNever;
    hp->poll_event_ = {};
    poll(hp->h_);
  });
}

TestNet::QpPair TestNet::connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a,
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
