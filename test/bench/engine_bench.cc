// Engine benchmark: the protocol engine's own cost per data packet on one
// core, and the state a QP needs. Two engines exchange frames through
// memory (no network model), so the time measured is theirs: segmenting,
// spraying, building, parsing, placing, SACKing and acknowledging.
//
// The issue asks for the cost without the ICRC and the payload copies. The
// ICRC is left out the way a NIC with ICRC offload leaves it out
// (EngineConfig::icrc_offload). The copies grow with the payload and the
// engine's work does not, so the same transfer runs at two MTUs and the
// per-packet time is extrapolated to a zero-byte payload; the fixed cost of
// a memcpy call stays in, so the figure errs high. A third run with the
// ICRC on shows what the ICRC adds.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <deque>
#include <vector>

#include "engine/engine.h"

using namespace mrc::engine;
using Clock = std::chrono::steady_clock;

// From alloc_counter.cc: heap allocations so far, to prove the fast path
// makes none.
uint64_t heap_allocations();

namespace {

// Frames go into a pool of fixed buffers and are handed over in order once
// per loop round: no allocation while measuring, and no division or other
// work of the harness's own in the per-frame calls, which are timed with
// the engine. Every round reuses the pool from its first buffer, as a DPDK
// mempool's per-core cache hands back the mbufs just freed: the buffers stay
// in cache, as a NIC's do.
class MemEnv : public Env {
 public:
  static constexpr uint32_t kFrameMax = 9216;
  explicit MemEnv(uint32_t slots) : slots_(slots), bufs_(size_t(slots) * kFrameMax), lens_(slots) {}
  uint32_t tx_room(uint32_t) override { return slots_ - queued_; }
  std::span<uint8_t> tx_buffer(uint32_t, uint32_t len) override {
    if (queued_ == slots_ || len > kFrameMax) return {};
    return {bufs_.data() + size_t(queued_) * kFrameMax, kFrameMax};
  }
  void tx_send(uint32_t plane, uint32_t len) override { lens_[queued_++] = {plane, len}; }
  void complete(const Completion& c) override {
    ++completions;
    if (c.status != WcStatus::success) ++errors;
  }
  // Hands every queued frame to `to` (whose own frames go to its own env).
  void drain_into(Engine& to, Nanos now) {
    for (uint32_t i = 0; i < queued_; ++i)
      to.on_rx(lens_[i].first, {bufs_.data() + size_t(i) * kFrameMax, lens_[i].second}, now);
    queued_ = 0;
  }
  uint64_t completions = 0, errors = 0;

 private:
  uint32_t slots_;
  std::vector<uint8_t> bufs_;
  std::vector<std::pair<uint32_t, uint32_t>> lens_;
  uint32_t queued_ = 0;
};

// The core's speed at the moment, in G iterations per second of a loop that
// runs one iteration per cycle on an idle x86 core: on the shared VMs this
// runs on it moves between about 1.2 and 2.5 from minute to minute, which
// explains most of the spread between rounds. 0 where not measured.
double core_speed_probe() {
#if defined(__x86_64__)
  uint64_t n = 20'000'000;
  const auto t = Clock::now();
  asm volatile("1: dec %0\n\tjnz 1b" : "+r"(n));
  return 20'000'000 / std::chrono::duration<double, std::nano>(Clock::now() - t).count();
#else
  return 0;
#endif
}

struct Result {
  uint64_t data_pkts = 0;
  uint64_t acks = 0;
  double total_ns = 0, req_ns = 0, resp_ns = 0;  // per data packet
  uint64_t allocations = 0;
  uint64_t rounds = 0;
  double wall_ns = 0;
  bool ok = false;
};

Result transfer(uint32_t mtu, uint64_t packets, uint32_t planes, bool icrc) {
  Result r;
  EngineConfig ca, cb;
  ca.num_planes = cb.num_planes = planes;
  ca.icrc_offload = cb.icrc_offload = !icrc;
  for (uint32_t p = 0; p < planes; ++p) {
    ca.planes[p] = {0x020000000100ull + p, mrc::wire::IpAddr::from_v4(0x0A000001 + (p << 8))};
    cb.planes[p] = {0x020000000200ull + p, mrc::wire::IpAddr::from_v4(0x0A000002 + (p << 8))};
  }
  MemEnv ea(1024), eb(1024);
  Engine a(ca, ea), b(cb, eb);
  const size_t region = 1 << 20;  // stays in cache: the copies are not a memory benchmark
  std::vector<uint8_t> src(region, 0x5A), dst(region, 0);
  uint32_t lkey = 0, rkey = 0, unused = 0;
  a.reg_mr(1, src.data(), 0x10000000, region, kAccessLocalWrite, lkey, unused);
  b.reg_mr(1, dst.data(), 0x20000000, region, kAccessLocalWrite | kAccessRemoteWrite, unused, rkey);
  QpAttr attr;
  attr.pmtu = mtu;
  attr.cc.algo = CcAlgo::none;  // the network here has no queues to react to
  attr.cc.fixed_window_bytes = 1 << 30;
  for (uint32_t i = 0; i < 256; ++i) attr.ev.evs.push_back({0xC000 + i, static_cast<uint8_t>(i % planes)});
  const uint32_t qa = a.create_qp(1, {}), qb = b.create_qp(1, {});
  QpAttr ta = attr, tb = attr;
  ta.dest_qpn = qb;
  ta.remote = cb.planes;
  tb.dest_qpn = qa;
  tb.remote = ca.planes;
  for (QpState s : {QpState::init, QpState::rtr, QpState::rts}) {
    if (a.modify_qp(qa, s, ta, 0) != ModifyError::ok || b.modify_qp(qb, s, tb, 0) != ModifyError::ok) return r;
  }

  const uint32_t msg = 256 << 10;
  const uint32_t slots = region / msg;
  const uint64_t messages = (packets * mtu + msg - 1) / msg;
  uint64_t posted = 0;
  Nanos now = 0;
  auto post = [&] {
    SendWr w;
    w.wr_id = posted;
    w.local_addr = 0x10000000 + (posted % slots) * msg;
    w.remote_addr = 0x20000000 + (posted % slots) * msg;
    w.length = msg;
    w.lkey = lkey;
    w.rkey = rkey;
    ++posted;
    return a.post_send(qa, w) == 0;
  };
  for (uint32_t i = 0; i < slots && posted < messages; ++i) post();
  // Each side is timed on its own: A runs the requester, B the responder.
  double req_ns = 0, resp_ns = 0;
  auto timed = [](double& acc, auto&& fn) {
    const auto t = Clock::now();
    fn();
    acc += std::chrono::duration<double, std::nano>(Clock::now() - t).count();
  };
  const uint64_t allocations_before = heap_allocations();
  uint64_t rounds = 0;
  const auto wall0 = Clock::now();
  while (ea.completions < messages && now < 100'000'000'000ull) {
    now += 50;
    ++rounds;
    timed(req_ns, [&] { a.poll(now); });
    timed(resp_ns, [&] {
      ea.drain_into(b, now);
      b.poll(now);
    });
    timed(req_ns, [&] {
      eb.drain_into(a, now);
      while (posted < messages && posted - ea.completions < slots) post();  // the next a.poll sends them
    });
  }
  r.allocations = heap_allocations() - allocations_before;
  r.rounds = rounds;
  r.wall_ns = std::chrono::duration<double, std::nano>(Clock::now() - wall0).count();
  QpInfo ia, ib;
  a.qp_info(qa, ia);
  b.qp_info(qb, ib);
  r.data_pkts = ia.ctr[QpCtr::tx_data_pkts];
  r.acks = ib.ctr[QpCtr::tx_acks];
  r.req_ns = req_ns / double(r.data_pkts);
  r.resp_ns = resp_ns / double(r.data_pkts);
  r.total_ns = r.req_ns + r.resp_ns;
  r.ok = !ea.errors && ea.completions == messages && ib.ctr[QpCtr::rx_data_pkts] == r.data_pkts &&
         std::memcmp(src.data(), dst.data(), std::min<uint64_t>(region, messages * msg)) == 0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"engine-bench: protocol engine cost per data packet and per-QP state"};
  uint32_t mtu = 4096;
  uint32_t small_mtu = 256;
  uint64_t packets = 400000;
  uint32_t planes = 4;
  bool json = false;
  app.add_option("--mtu", mtu, "path MTU of the main run")->capture_default_str();
  app.add_option("--small-mtu", small_mtu, "path MTU of the second run, for the extrapolation")->capture_default_str();
  app.add_option("--packets", packets, "data packets per run")->capture_default_str();
  app.add_option("--planes", planes, "planes")->capture_default_str()->check(CLI::Range(1u, kMaxPlanes));
  uint32_t rounds = 9;
  app.add_option("--rounds", rounds, "rounds of both MTUs; the median and best rounds are reported")
      ->capture_default_str()
      ->check(CLI::Range(1u, 99u));
  app.add_flag("--json", json, "print JSON");
  CLI11_PARSE(app, argc, argv);
  if (small_mtu >= mtu) {
    fmt::print(stderr, "engine-bench: --small-mtu must be below --mtu\n");
    return 2;
  }

  // The VM this runs on is noisy (its speed changes twofold from one second
  // to the next): the two MTUs run back to back in each of several rounds,
  // and each round gives its own extrapolation.
  struct Round {
    Result big, small;
    double engine_ns, req_ns, resp_ns;
    double speed;  // core_speed_probe(), before and after, averaged
  };
  // t(L) = engine + per_byte * L, through the two runs, evaluated at L = 0.
  auto at_zero = [&](double t_big, double t_small) {
    const double per_byte = (t_big - t_small) / double(mtu - small_mtu);
    return t_small - per_byte * small_mtu;
  };
  auto check = [](const Result& r) {
    if (!r.ok) {
      fmt::print(stderr, "engine-bench: transfer did not complete cleanly\n");
      std::exit(1);
    }
    if (r.allocations) {
      fmt::print(stderr, "engine-bench: the fast path allocated {} times\n", r.allocations);
      std::exit(1);
    }
  };
  std::vector<Round> all;
  for (uint32_t i = 0; i < rounds; ++i) {
    Round r;
    r.speed = core_speed_probe();
    r.big = transfer(mtu, packets, planes, false);
    r.small = transfer(small_mtu, packets, planes, false);
    r.speed = (r.speed + core_speed_probe()) / 2;
    check(r.big);
    check(r.small);
    r.engine_ns = at_zero(r.big.total_ns, r.small.total_ns);
    r.req_ns = at_zero(r.big.req_ns, r.small.req_ns);
    r.resp_ns = at_zero(r.big.resp_ns, r.small.resp_ns);
    all.push_back(r);
  }
  const Result with_icrc = transfer(mtu, packets, planes, true);
  check(with_icrc);
  // The median round stands for the machine as it is; the best round for
  // the engine on an undisturbed core, since noise only ever adds time.
  std::sort(all.begin(), all.end(), [](const Round& x, const Round& y) { return x.engine_ns < y.engine_ns; });
  const Round& med = all[all.size() / 2];
  const Round& best = all.front();
  const Result& big = med.big;
  const Result& small = med.small;
  auto spread = [&](double Round::*f) {
    double lo = all[0].*f, hi = lo;
    for (const Round& r : all) lo = std::min(lo, r.*f), hi = std::max(hi, r.*f);
    return std::pair{lo, hi};
  };
  const auto [req_lo, req_hi] = spread(&Round::req_ns);
  const auto [resp_lo, resp_hi] = spread(&Round::resp_ns);
  const size_t qp_bytes = Engine::qp_state_bytes(QpCaps{}, [] {
    QpAttr a;
    for (uint32_t i = 0; i < 256; ++i) a.ev.evs.push_back({0xC000 + i, static_cast<uint8_t>(i % 8)});
    return a;
  }());
  const double qps_per_gib = double(1ull << 30) / double(qp_bytes);
  if (json) {
    fmt::print(
        "{{\"mtu\":{},\"small_mtu\":{},\"data_packets\":{},\"sacks\":{},\"total_ns_per_packet\":{:.1f},"
        "\"small_mtu_total_ns_per_packet\":{:.1f},\"engine_ns_per_packet\":{:.1f},\"requester_ns\":{:.1f},"
        "\"responder_ns\":{:.1f},\"core_speed_probe\":{:.2f},\"best_round\":{{\"engine_ns_per_packet\":{:.1f},"
        "\"requester_ns\":{:.1f},\"responder_ns\":{:.1f},\"core_speed_probe\":{:.2f}}},\"requester_ns_range\":[{:.1f},{:.1f}],\"responder_ns_range\":[{:.1f},{:.1f}],"
        "\"rounds\":{},\"with_icrc_ns_per_packet\":{:.1f},\"fast_path_allocations\":0,"
        "\"qp_state_bytes\":{},\"qps_per_gib\":{:.0f}}}\n",
        mtu, small_mtu, big.data_pkts, big.acks, big.total_ns, small.total_ns, med.engine_ns, med.req_ns, med.resp_ns,
        med.speed, best.engine_ns, best.req_ns, best.resp_ns, best.speed, req_lo, req_hi, resp_lo, resp_hi, rounds, with_icrc.total_ns, qp_bytes, qps_per_gib);
    return 0;
  }
  fmt::print("{} data packets per run, one SACK per {:.1f} packets, both engines on one core, ICRC offloaded\n",
             big.data_pkts, double(big.data_pkts) / double(big.acks));
  fmt::print("  per data packet at {:>4} B MTU   {:8.1f} ns  (requester {:.1f}, responder {:.1f})\n", mtu, big.total_ns,
             big.req_ns, big.resp_ns);
  fmt::print("  per data packet at {:>4} B MTU   {:8.1f} ns  (requester {:.1f}, responder {:.1f})\n", small_mtu,
             small.total_ns, small.req_ns, small.resp_ns);
  fmt::print(
      "  engine's own cost, at 0 B        {:8.1f} ns  (requester {:.1f}, responder {:.1f})  median of {} rounds, "
      "core speed probe {:.2f}\n",
      med.engine_ns, med.req_ns, med.resp_ns, rounds, med.speed);
  fmt::print("  engine's own cost, best round    {:8.1f} ns  (requester {:.1f}, responder {:.1f})  core speed probe {:.2f}\n",
             best.engine_ns, best.req_ns, best.resp_ns, best.speed);
  fmt::print("    all rounds: requester {:.1f}..{:.1f}, responder {:.1f}..{:.1f}\n", req_lo, req_hi, resp_lo, resp_hi);
  fmt::print("  with the ICRC in software, {} B  {:8.1f} ns  (requester {:.1f}, responder {:.1f})\n", mtu,
             with_icrc.total_ns, with_icrc.req_ns, with_icrc.resp_ns);
  fmt::print("  loop rounds per data packet      {:8.2f}     (three clock reads each)\n",
             double(big.rounds) / double(big.data_pkts));
  fmt::print("heap allocations while transferring: 0\n");
  fmt::print("QP state with mpr 8, 256 EVs over 8 planes, 256 SQ/RQ entries: {} B -> {:.0f} QPs per GiB per core\n",
             qp_bytes, qps_per_gib);
  return 0;
}
