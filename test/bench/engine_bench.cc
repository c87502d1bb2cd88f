// Engine benchmark: the protocol engine's own cost per data packet on one
// core, and the state a QP needs. Two engines exchange frames through
// memory (no network model), so the time measured is theirs: segmenting,
// spraying, building, parsing, placing, SACKing and acknowledging. The ICRC
// and the payload copies are measured separately in the same run and taken
// out, as the issue asks for the engine's cost excluding them.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <deque>
#include <vector>

#include "engine/engine.h"
#include "wire/icrc.h"

using namespace mrc::engine;
using Clock = std::chrono::steady_clock;

// From alloc_counter.cc: heap allocations so far, to prove the fast path
// makes none.
uint64_t heap_allocations();

namespace {

// Frames go into a pool of fixed buffers and out through a FIFO: no
// allocation while measuring.
class MemEnv : public Env {
 public:
  explicit MemEnv(size_t slots) : bufs_(slots, std::vector<uint8_t>(9216)) {}
  uint32_t tx_room(uint32_t) override { return static_cast<uint32_t>(bufs_.size() - queued_); }
  std::span<uint8_t> tx_buffer(uint32_t, uint32_t len) override {
    if (queued_ == bufs_.size() || len > 9216) return {};
    return bufs_[(head_ + queued_) % bufs_.size()];
  }
  void tx_send(uint32_t plane, uint32_t len) override {
    lens_[(head_ + queued_) % bufs_.size()] = {plane, len};
    ++queued_;
  }
  void complete(const Completion& c) override {
    ++completions;
    if (c.status != WcStatus::success) ++errors;
  }
  // Hands every queued frame to `to`.
  void drain_into(Engine& to, Nanos now) {
    while (queued_) {
      auto [plane, len] = lens_[head_];
      to.on_rx(plane, {bufs_[head_].data(), len}, now);
      head_ = (head_ + 1) % bufs_.size();
      --queued_;
    }
  }
  uint64_t completions = 0, errors = 0;

 private:
  std::vector<std::vector<uint8_t>> bufs_;
  std::vector<std::pair<uint32_t, uint32_t>> lens_ = std::vector<std::pair<uint32_t, uint32_t>>(4096);
  size_t head_ = 0, queued_ = 0;
};

template <class T>
inline void keep(const T& v) {
  asm volatile("" : : "g"(&v) : "memory");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"engine-bench: protocol engine cost per data packet and per-QP state"};
  uint32_t mtu = 4096;
  uint64_t packets = 400000;
  uint32_t planes = 4;
  bool json = false;
  app.add_option("--mtu", mtu, "path MTU and payload per packet")->capture_default_str();
  app.add_option("--packets", packets, "data packets to send")->capture_default_str();
  app.add_option("--planes", planes, "planes")->capture_default_str()->check(CLI::Range(1u, kMaxPlanes));
  app.add_flag("--json", json, "print JSON");
  CLI11_PARSE(app, argc, argv);

  EngineConfig ca, cb;
  ca.num_planes = cb.num_planes = planes;
  for (uint32_t p = 0; p < planes; ++p) {
    ca.planes[p] = {0x020000000100ull + p, mrc::wire::IpAddr::from_v4(0x0A000001 + (p << 8))};
    cb.planes[p] = {0x020000000200ull + p, mrc::wire::IpAddr::from_v4(0x0A000002 + (p << 8))};
  }
  MemEnv ea(1024), eb(1024);
  Engine a(ca, ea), b(cb, eb);
  // Small enough to stay in cache, so the payload copies cost what the
  // stand-alone measurement below says they cost.
  const size_t region = 1 << 20;
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
    if (a.modify_qp(qa, s, ta, 0) != ModifyError::ok || b.modify_qp(qb, s, tb, 0) != ModifyError::ok) {
      fmt::print(stderr, "engine-bench: QP setup failed\n");
      return 1;
    }
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
    return a.post_send(qa, w, now) == 0;
  };
  for (uint32_t i = 0; i < slots && posted < messages; ++i) post();
  const uint64_t allocations_before = heap_allocations();
  const auto t0 = Clock::now();
  while (ea.completions < messages) {
    now += 50;
    a.poll(now);
    ea.drain_into(b, now);
    b.poll(now);
    eb.drain_into(a, now);
    while (posted < messages && posted - ea.completions < slots) post();
    if (now > 100'000'000'000ull) break;
  }
  const double total_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  const uint64_t fast_path_allocations = heap_allocations() - allocations_before;
  QpInfo ia, ib;
  a.qp_info(qa, ia);
  b.qp_info(qb, ib);
  const uint64_t data_pkts = ia.ctr[QpCtr::tx_data_pkts];
  if (fast_path_allocations) {
    fmt::print(stderr, "engine-bench: the fast path allocated {} times\n", fast_path_allocations);
    return 1;
  }
  if (ea.errors || ib.ctr[QpCtr::rx_data_pkts] != data_pkts || std::memcmp(src.data(), dst.data(), region)) {
    fmt::print(stderr, "engine-bench: transfer did not complete cleanly\n");
    return 1;
  }

  // What the measured loop did besides the engine's own work: per data
  // packet, one ICRC computed, one verified, and two payload copies, over
  // the same kind of buffers (a pool of frames, a 1 MiB region).
  std::vector<std::vector<uint8_t>> frames(1024, std::vector<uint8_t>(9216, 0x33));
  for (auto& f : frames) f[0] = 0x45;
  const int reps = 200000;
  auto t1 = Clock::now();
  for (int i = 0; i < reps; ++i) keep(mrc::wire::icrc_compute({frames[i & 1023].data(), mtu + 60}));
  const double icrc_ns = std::chrono::duration<double, std::nano>(Clock::now() - t1).count() / reps;
  t1 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    std::memcpy(frames[i & 1023].data() + 74, src.data() + (uint64_t(i) * mtu) % region, mtu);
    keep(frames[i & 1023]);
  }
  const double copy_ns = std::chrono::duration<double, std::nano>(Clock::now() - t1).count() / reps;

  const double per_pkt = total_ns / double(data_pkts);
  const double engine_ns = per_pkt - 2 * icrc_ns - 2 * copy_ns;
  const uint64_t acks = ib.ctr[QpCtr::tx_acks];
  QpAttr sized = attr;
  const size_t qp_bytes = Engine::qp_state_bytes(QpCaps{}, sized);
  const double qps_per_gib = double(1ull << 30) / double(qp_bytes);
  if (json) {
    fmt::print(
        "{{\"mtu\":{},\"data_packets\":{},\"acks\":{},\"total_ns_per_packet\":{:.1f},\"icrc_ns\":{:.1f},"
        "\"copy_ns\":{:.1f},\"engine_ns_per_packet\":{:.1f},\"qp_state_bytes\":{},\"qps_per_gib\":{:.0f}}}\n",
        mtu, data_pkts, acks, per_pkt, icrc_ns, copy_ns, engine_ns, qp_bytes, qps_per_gib);
  } else {
    fmt::print("{} data packets of {} B, {} SACKs, both engines on one core\n", data_pkts, mtu, acks);
    fmt::print("  total per data packet            {:8.1f} ns\n", per_pkt);
    fmt::print("  of which ICRC (tx + rx check)    {:8.1f} ns  (2 x {:.1f})\n", 2 * icrc_ns, icrc_ns);
    fmt::print("  of which payload copies (tx, rx) {:8.1f} ns  (2 x {:.1f})\n", 2 * copy_ns, copy_ns);
    fmt::print("  engine's own cost per packet     {:8.1f} ns  (requester + responder + SACKs)\n", engine_ns);
    fmt::print("heap allocations while transferring: 0\n");
    fmt::print("QP state with mpr 8, 256 EVs, 256 SQ/RQ entries: {} B -> {:.0f} QPs per GiB per core\n", qp_bytes,
               qps_per_gib);
  }
  return 0;
}
