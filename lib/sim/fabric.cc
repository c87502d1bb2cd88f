#include "sim/fabric.h"

#include <algorithm>
#include <cassert>
#include <atomic>
#include <exception>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

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

Route route_of_tag(uint64_t tag, uint64_t seed) {
  return {static_cast<uint32_t>(tag >> kTagHostShift) - 1, mix(seed ^ (tag & kTagFlowMask))};
}

// A frame without a tag is read here, at the switch, and leaves with the
// tag so that the switches after it need not read it again.
bool route(const std::vector<uint8_t>& f, uint64_t& tag, uint64_t seed, Route& r) {
  if (!tag) tag = route_tag(f);
  if (!tag) return false;
  r = route_of_tag(tag, seed);
  return true;
}

}  // namespace

// One partition: its loop (the control loop when there is only one), the
// hosts of its leaves, and the frames other partitions sent it.
struct Fabric::Part {
  Part(EventLoop* shared, uint32_t partitions)
      : own(shared ? nullptr : std::make_unique<EventLoop>()), loop(shared ? shared : own.get()), inbox(partitions) {}
  std::unique_ptr<EventLoop> own;
  EventLoop* loop;
  std::vector<Mailbox> inbox;  // [sending partition]
  Stats stats;
  std::unique_ptr<EngineHosts> hosts;
};

// Threads that run partitions side by side, window by window. The calling
// thread is worker 0; worker i runs the partitions k with k % threads == i.
// Windows follow each other within microseconds, so waiting for the next
// one spins; a worker still waiting after that sleeps (through the run's
// setup, its control events and its summary).
class Fabric::Workers {
 public:
  Workers(Fabric& fabric, uint32_t threads) : fabric_(fabric), threads_(threads), errors_(threads) {
    try {
      for (uint32_t i = 1; i < threads; ++i) pool_.emplace_back([this, i] { work(i); });
    } catch (...) {
      quit();
      throw;
    }
  }
  ~Workers() { quit(); }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  uint32_t threads() const { return threads_; }

  void run(Nanos end) {
    end_ = end;
    busy_.store(threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    run_share(0);
    for (uint32_t n = 0; busy_.load(std::memory_order_acquire) != 0; ++n)
      n < kSpins ? pause() : std::this_thread::yield();
    // The first error; the partitions are then left mid-window, and the
    // Fabric cannot run on.
    std::exception_ptr first;
    for (auto& e : errors_)
      if (auto taken = std::exchange(e, nullptr); taken && !first) first = taken;
    if (first) std::rethrow_exception(first);
  }

 private:
  static constexpr uint32_t kSpins = 4096;  // about 100 us
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  void quit() {
    quit_ = true;
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : pool_) t.join();
    pool_.clear();
  }
  void run_share(uint32_t i) {
    try {
      for (size_t k = i; k < fabric_.parts_.size(); k += threads_) fabric_.run_part(*fabric_.parts_[k], end_);
    } catch (...) {
      errors_[i] = std::current_exception();
    }
  }
  void work(uint32_t i) {
    uint64_t seen = 0;
    for (;;) {
      for (uint32_t n = 0; generation_.load(std::memory_order_acquire) == seen; ++n)
        n < kSpins ? pause() : generation_.wait(seen, std::memory_order_acquire);
      seen = generation_.load(std::memory_order_acquire);
      if (quit_) return;
      run_share(i);
      busy_.fetch_sub(1, std::memory_order_release);
    }
  }

  Fabric& fabric_;
  const uint32_t threads_;
  std::vector<std::thread> pool_;
  std::vector<std::exception_ptr> errors_;  // [worker]
  Nanos end_ = 0;                           // written before a generation starts
  bool quit_ = false;                       // likewise
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint32_t> busy_{0};
};

namespace {
// The partition whose event this thread is running, for Fabric::now().
thread_local const void* running_fabric = nullptr;
thread_local const EventLoop* running_loop = nullptr;
}  // namespace

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
  if (cfg_.partitions < 1 || cfg_.partitions > kMaxPartitions)
    throw std::invalid_argument("Fabric: partitions must be 1.." + std::to_string(kMaxPartitions));
  // At most one per leaf: a partition without one would hold nothing to run.
  const uint32_t K = std::min(cfg_.partitions, leaves_);
  if (K > 1 && cfg_.fabric_link.delay_ns < 1)
    throw std::invalid_argument("Fabric: partitions need a fabric link delay of at least 1 ns");
  lookahead_ = cfg_.fabric_link.delay_ns;
  for (uint32_t k = 0; k < K; ++k) {
    parts_.push_back(std::make_unique<Part>(K == 1 ? &loop_ : nullptr, K));
    Stats& st = parts_.back()->stats;
    auto hosts = std::make_unique<EngineHosts>(
        *parts_.back()->loop,
        EngineHosts::Observers{.ev_event =
                                   [&st](uint32_t, const EvEvent& e) {
                                     if (e.from == engine::EvState::good && e.to == engine::EvState::assumed_bad)
                                       ++st.ev_to_bad;
                                     if (e.from == engine::EvState::assumed_bad && e.to == engine::EvState::good)
                                       ++st.ev_to_good;
                                   },
                               .qp_error = [&st](uint32_t, const QpError&) { ++st.qp_errors; }});
    hosts->set_tx_stage_bytes(cfg_.host_tx_stage_bytes);
    if (cfg_.route_tags) hosts->set_tx_tagger(route_tag);
    hosts->set_room_cache(cfg_.room_cache);
    parts_.back()->hosts = std::move(hosts);
  }
  for (uint32_t l = 0; l < leaves_; ++l) leaf_part_.push_back(parts_[partition_of_leaf(l)].get());
  for (uint32_t s = 0; s < spines_; ++s) spine_part_.push_back(parts_[partition_of_spine(s)].get());

  const uint32_t P = cfg_.planes, H = cfg_.hosts;
  for (uint32_t p = 0; p < P; ++p) {
    for (uint32_t h = 0; h < H; ++h) {
      const uint64_t s = derive_seed(derive_seed(cfg_.seed, h), p);
      const uint32_t l = leaf_of(h);
      const uint32_t k = partition_of_leaf(l);
      uplinks_.push_back(make_link(k, k, cfg_.host_link, derive_seed(s, 0),
                                   [this, p, l](std::vector<uint8_t> f, uint64_t tag, uint32_t wire) {
                                     leaf_rx(p, l, std::move(f), tag, wire);
                                   }));
      uplinks_.back()->set_sink_hint({prefetch_leaf_hop, this, p, l});
      EngineHosts* hosts = parts_[k]->hosts.get();
      downlinks_.push_back(make_link(k, k, cfg_.host_link, derive_seed(s, 1),
                                     [hosts, h, p](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
                                       hosts->deliver(h, p, f, wire);
                                       FramePool::give(std::move(f));
                                     }));
      downlinks_.back()->set_sink_hint({EngineHosts::prefetch_rx, hosts, h, p});
    }
    for (uint32_t l = 0; l < leaves_; ++l) {
      leaf_seed_.push_back(derive_seed(derive_seed(cfg_.seed, kSwitchSeedTag), p * 65536ull + l));
      for (uint32_t s = 0; s < spines_; ++s) {
        const uint64_t ls = derive_seed(derive_seed(cfg_.seed, 0x1000000ull + l * 4096ull + s), p);
        const uint32_t kl = partition_of_leaf(l), ks = partition_of_spine(s);
        to_spine_.push_back(make_link(kl, ks, cfg_.fabric_link, derive_seed(ls, 2),
                                      [this, p, s](std::vector<uint8_t> f, uint64_t tag, uint32_t wire) {
                                        spine_rx(p, s, std::move(f), tag, wire);
                                      }));
        to_spine_.back()->set_sink_hint({prefetch_spine_hop, this, p, s});
        to_leaf_.push_back(make_link(ks, kl, cfg_.fabric_link, derive_seed(ls, 3),
                                     [this, p, l](std::vector<uint8_t> f, uint64_t tag, uint32_t wire) {
                                       leaf_rx(p, l, std::move(f), tag, wire);
                                     }));
        to_leaf_.back()->set_sink_hint({prefetch_leaf_hop, this, p, l});
      }
    }
  }

  for (uint32_t h = 0; h < H; ++h) {
    std::vector<Link*> ups;
    for (uint32_t p = 0; p < P; ++p) ups.push_back(&uplink(h, p));
    hosts_of(h).add_as(h, cfg_.engine_template, cfg_.seed, addrs(h), std::move(ups));
  }
  if (K > 1) {
    const uint32_t cpus = std::max(1u, std::thread::hardware_concurrency());
    const uint32_t threads = cfg_.threads ? std::min(cfg_.threads, K) : std::min(K, cpus);
    workers_ = std::make_unique<Workers>(*this, threads);
  }
}

Fabric::~Fabric() = default;

std::unique_ptr<Link> Fabric::make_link(uint32_t from, uint32_t to, const LinkParams& params, uint64_t seed,
                                        Link::Sink sink) {
  auto link = std::make_unique<Link>(*parts_[from]->loop, params, seed, std::move(sink));
  if (from != to) link->set_far_end(*parts_[to]->loop, parts_[to]->inbox[from], lookahead_);
  return link;
}

EngineHosts& Fabric::hosts_of(uint32_t h) {
  if (h >= cfg_.hosts) throw std::out_of_range("Fabric: no host " + std::to_string(h));
  Part& part = *leaf_part_[leaf_of(h)];
  // Inside a partition's event, only that partition's hosts: another's
  // thread may be running them.
  assert(running_fabric != this || part.loop == running_loop);
  return *part.hosts;
}

EventId Fabric::at(Nanos t, Callback fn) {
  assert(running_fabric != this || parts_.size() == 1);  // control events are scheduled between windows
  return loop_.at(t, std::move(fn));
}

engine::Engine& Fabric::engine(uint32_t h) { return hosts_of(h).engine(h); }

uint32_t Fabric::threads() const { return workers_ ? workers_->threads() : 1; }

Nanos Fabric::now() const { return running_fabric == this ? running_loop->now() : loop_.now(); }

void Fabric::set_completion_hook(CompletionHook hook) {
  for (auto& part : parts_) part->hosts->set_completion_hook(hook);
}

void Fabric::set_payload_tokens(EngineHosts::PlacementCheck check) {
  for (auto& part : parts_) part->hosts->set_payload_tokens(check);
}

Fabric::Stats Fabric::stats() const {
  Stats sum;
  for (const auto& part : parts_) {
    sum.unroutable += part->stats.unroutable;
    sum.routed_from_headers += part->stats.routed_from_headers;
    sum.ev_to_bad += part->stats.ev_to_bad;
    sum.ev_to_good += part->stats.ev_to_good;
    sum.qp_errors += part->stats.qp_errors;
  }
  return sum;
}

uint64_t Fabric::events_run() const {
  uint64_t n = loop_.stats().run;
  if (parts_.size() > 1)
    for (const auto& part : parts_) n += part->loop->stats().run;
  return n;
}

void Fabric::stop() {
  stop_ = true;
  // The control loop's own run (with one partition, the whole run's), never
  // from a partition's thread: two may stop at once.
  if (parts_.size() == 1 || running_fabric != this) loop_.stop();
}

bool Fabric::run_until(Nanos t) {
  if (parts_.size() == 1) return loop_.run_until(t);
  return run_partitioned(t, false);
}

bool Fabric::run_until_idle(Nanos limit) {
  if (parts_.size() == 1) return loop_.run_until_idle(limit);
  return run_partitioned(limit, true);
}

void Fabric::run_part(Part& part, Nanos end) {
  running_fabric = this;
  running_loop = part.loop;
  struct Leave {
    ~Leave() {
      running_fabric = nullptr;
      running_loop = nullptr;
    }
  } leave;
  // What crossed in the last window, on this partition's thread: the
  // partitions that sent it now post to a new batch.
  for (Mailbox& m : part.inbox) m.deliver_closed_to(*part.loop);
  part.loop->run_until(end);
}

void Fabric::run_window(Nanos end) {
  if (workers_) {
    workers_->run(end);
  } else {
    for (auto& part : parts_) run_part(*part, end);
  }
}

// Windows: every partition runs from the earliest event due anywhere to a
// lookahead later (less a nanosecond), so that nothing one sends another
// can be due inside the window. What crossed joins its loop at the start of
// the next window, on that partition's thread, in the order of the
// partitions that sent it. Before control events run on this thread, or the
// run returns, it joins them here, in the same order.
bool Fabric::run_partitioned(Nanos limit, bool until_idle) {
  stop_ = false;
  auto deliver_mail = [&] {
    for (auto& part : parts_)
      for (Mailbox& m : part->inbox) m.deliver_to(*part->loop);
  };
  auto close_window = [&] {
    for (auto& part : parts_)
      for (Mailbox& m : part->inbox) m.close_window();
  };
  auto advance_all = [&](Nanos t) {
    if (t == kNever) return;
    for (auto& part : parts_) part->loop->advance(t);
    loop_.advance(t);
  };
  for (;;) {
    Nanos tp = kNever;
    for (const auto& part : parts_) {
      tp = std::min(tp, part->loop->next_time());
      for (const Mailbox& m : part->inbox) tp = std::min(tp, m.earliest());
    }
    const Nanos tc = loop_.next_time();
    if (tc != kNever && tc <= tp && tc <= limit) {
      deliver_mail();
      for (auto& part : parts_) part->loop->advance(tc);
      loop_.run_until(tc);
      deliver_mail();
      if (stop_) return false;
      continue;
    }
    if (tp == kNever && tc == kNever) {
      if (!until_idle) advance_all(limit);
      return true;
    }
    if (tp > limit) {
      deliver_mail();
      advance_all(limit);
      return !until_idle;
    }
    Nanos end = std::min(tp + lookahead_ - 1, limit);
    if (tc != kNever) end = std::min(end, tc - 1);
    run_window(end);
    loop_.advance(end);
    close_window();
    if (stop_) {
      deliver_mail();
      return false;
    }
  }
}

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
  Stats& stats = leaf_part_[l]->stats;
  stats.routed_from_headers += !tag;
  Route r;
  if (!route(frame, tag, leaf_seed_[p * leaves_ + l], r) || r.dst_host >= cfg_.hosts) {
    ++stats.unroutable;
    return;
  }
  leaf_egress(p, l, r.dst_host, r.hash).send(std::move(frame), tag, wire_len);
}

Link& Fabric::leaf_egress(uint32_t p, uint32_t l, uint32_t dst_host, uint64_t hash) const {
  return leaf_of(dst_host) == l ? downlink(dst_host, p) : leaf_to_spine(p, l, static_cast<uint32_t>(hash % spines_));
}

void Fabric::prefetch_leaf_hop(const void* fabric, uint32_t p, uint32_t l, uint64_t tag, std::span<const uint8_t>,
                               unsigned stage) {
  if (stage != 0) return;
  const auto& f = *static_cast<const Fabric*>(fabric);
  const Route r = route_of_tag(tag, f.leaf_seed_[p * f.leaves_ + l]);
  if (tag && r.dst_host < f.cfg_.hosts) f.leaf_egress(p, l, r.dst_host, r.hash).prefetch();
}

void Fabric::prefetch_spine_hop(const void* fabric, uint32_t p, uint32_t s, uint64_t tag, std::span<const uint8_t>,
                                unsigned stage) {
  if (stage != 0) return;
  const auto& f = *static_cast<const Fabric*>(fabric);
  const uint32_t dst = route_of_tag(tag, 0).dst_host;
  if (tag && dst < f.cfg_.hosts) f.spine_egress(p, s, dst).prefetch();
}

void Fabric::spine_rx(uint32_t p, uint32_t s, std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len) {
  Stats& stats = spine_part_[s]->stats;
  stats.routed_from_headers += !tag;
  Route r;
  // A spine has one path to each leaf: no hash needed.
  if (!route(frame, tag, 0, r) || r.dst_host >= cfg_.hosts) {
    ++stats.unroutable;
    return;
  }
  spine_egress(p, s, r.dst_host).send(std::move(frame), tag, wire_len);
}

template <class Fn>
void Fabric::for_each_link(const Target& t, Fn&& fn) {
  const uint32_t p = t.plane;
  if (p >= cfg_.planes) throw std::out_of_range("fabric: no such plane");
  const auto host = [&](uint32_t h) {
    fn(uplink(h, p), cfg_.host_link, true);
    fn(downlink(h, p), cfg_.host_link, false);
  };
  const auto pair = [&](uint32_t index) {
    fn(*to_spine_.at(p * leaves_ * spines_ + index), cfg_.fabric_link, false);
    fn(*to_leaf_.at(p * leaves_ * spines_ + index), cfg_.fabric_link, false);
  };
  const auto leaf = [&](uint32_t l) {
    for (uint32_t h = l * cfg_.hosts_per_leaf; h < std::min(cfg_.hosts, (l + 1) * cfg_.hosts_per_leaf); ++h) host(h);
    for (uint32_t s = 0; s < spines_; ++s) pair(l * spines_ + s);
  };
  switch (t.kind) {
    case Target::Kind::host_link:
      if (t.index >= cfg_.hosts) throw std::out_of_range("fabric: no such host");
      host(t.index);
      break;
    case Target::Kind::fabric_link:
      if (t.index >= leaves_ * spines_) throw std::out_of_range("fabric: no such leaf-spine link");
      pair(t.index);
      break;
    case Target::Kind::leaf:
      if (t.index >= leaves_) throw std::out_of_range("fabric: no such leaf");
      leaf(t.index);
      break;
    case Target::Kind::spine:
      if (t.index >= spines_) throw std::out_of_range("fabric: no such spine");
      for (uint32_t l = 0; l < leaves_; ++l) pair(l * spines_ + t.index);
      break;
    case Target::Kind::plane:
      for (uint32_t l = 0; l < leaves_; ++l) leaf(l);
      break;
  }
}

// The NIC is not told (a port status update is the caller's business), so
// its port stays up and keeps sending at line rate into the dead link: a
// failed plane must not drain faster than a live one, or it looks free.
void Fabric::set_up(const Target& t, bool up) {
  for_each_link(t, [up](Link& link, const LinkParams&, bool host_uplink) {
    if (host_uplink)
      link.set_blackhole(!up);
    else
      link.set_up(up);
  });
}

void Fabric::set_gray_loss(const Target& t, double loss) {
  if (!(loss >= 0 && loss <= 1)) throw std::invalid_argument("fabric: gray loss must be in [0, 1]");
  for_each_link(t, [loss](Link& link, const LinkParams& built, bool) {
    LinkParams lp = link.params();
    lp.loss = loss == 0 ? built.loss : 1 - (1 - built.loss) * (1 - loss);
    link.set_params(lp);
  });
}

Fabric::QpPair Fabric::connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a,
                                       uint32_t pd_b, const engine::QpCaps& caps) {
  const QpPair r = connect_engines(engine(h_a), engine(h_b), base, pd_a, pd_b, caps, now());
  if (r) {
    poll(h_a);
    poll(h_b);
  }
  return r;
}

}  // namespace mrc::sim
