// mrc-sim: runs the real protocol engine on a simulated multi-plane
// leaf-spine fabric and prints one JSON summary. Deterministic: the same
// config and seed give byte-identical stdout (wall time goes to stderr).
#include <CLI/CLI.hpp>
#include <malloc.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "cli_checks.h"
#include "recovery_options.h"
#include "engine/engine.h"
#include "pcap/pcap_file.h"
#include "sim/fabric.h"
#include "sim/placement_ledger.h"

using namespace mrc;
using namespace mrc::engine;
using mrc::app::finite_range;

namespace {

struct Options {
  std::string scenario = "custom";
  std::string transport = "mrc";
  uint64_t seed = 1;
  // Fabric.
  uint32_t hosts = 2;
  uint32_t planes = 1;
  uint32_t hosts_per_leaf = 16;
  uint32_t spines = 0;
  double oversubscription = 1.0;
  double host_rate_gbps = 100, fabric_rate_gbps = 100;
  double host_delay_ns = 500, fabric_delay_ns = 500;
  uint32_t host_queue_bytes = 1 << 20, fabric_queue_bytes = 1 << 20;
  // What a NIC stages per port ahead of the wire: 3 frames of a 4 KB MTU.
  uint32_t host_tx_bytes = 16384;
  uint32_t ecn_min_bytes = 0, ecn_max_bytes = 0;
  uint32_t trim_bytes = 0;
  double loss = 0, corrupt = 0, duplicate = 0;
  bool host_link_impairments = true;  // loss etc. on host links too, not only fabric links
  // Workload.
  std::string workload = "single";
  std::vector<uint32_t> message_bytes{1 << 20};
  uint32_t messages = 8;  // per QP
  uint32_t qps_per_pair = 1;
  uint32_t outstanding = 4;  // messages in flight per QP
  uint32_t imm_every = 4;    // every n-th message (and the last) is a WRITE_IMM
  uint32_t incast_degree = 4;
  bool victim = false;
  // Engine.
  uint32_t evs = 16;  // per QP, spread over planes
  uint32_t ev_active_per_plane = 0;
  uint32_t mtu = 4096;
  uint32_t base_rtt_ns = 5000;
  uint32_t target_delay_ns = 0;
  bool nscc_disable_qa = false;
  int timeout = -1;  // -1: ~131 us for either transport
  int retry_exp = -1;
  uint32_t mpr = 8;
  app::RecoveryOptions recovery;
  // Failures.
  int fail_plane = -1;
  std::string fail_link;    // host:PLANE:HOST or fabric:PLANE:INDEX
  std::string fail_switch;  // leaf:PLANE:INDEX or spine:PLANE:INDEX
  double fail_at_us = -1, restore_at_us = -1, flap_period_us = 0;
  double fail_loss = 0;  // > 0: a gray failure, the target's links lose this share instead of going down
  bool port_status = false;
  // Run and output.
  double duration_us = 1e6;
  double sample_us = 1;
  double recovery_window_us = 5;
  std::string timeline;
  double timeline_interval_us = 10;
  std::string pcap;
  std::string pcap_link = "up:0:0";
  // The engines compute and check ICRCs only where they matter: with
  // corruption on some link (the check is what catches it) or a capture.
  // Otherwise the port "offloads" them, as a RoCE NIC does.
  std::string icrc = "auto";
  // Data frames carry a token naming their payload's source instead of its
  // bytes, and each placement is checked instead of written (see
  // EngineHosts::set_payload_tokens); auto = tokens unless a pcap is written.
  std::string payload = "auto";
  bool report_wall = false;
  bool qp_counters = false;
  // A parallel run: the fabric cut into this many parts (Fabric::Config),
  // run by this many threads (0: one per part, at most one per CPU).
  uint32_t partitions = 1;
  uint32_t threads = 0;
};

// Bounds on the shape and the workload, so that a mistyped number is an
// error rather than gigabytes allocated or a run that never ends.
constexpr uint32_t kMaxSpines = 4096;             // per plane
constexpr uint64_t kMaxFabricLinks = 1u << 21;    // leaf-spine links each way, all planes (~350 B each)
constexpr uint64_t kMaxQps = 1u << 20;            // in all
constexpr uint32_t kMaxMessageBytes = 1u << 30;   // 1 GiB
constexpr uint32_t kMaxMessages = 1u << 24;       // per QP: setup counts its WRITE_IMMs one by one
constexpr uint64_t kMaxSlotBytes = 32ull << 30;   // responders' slots, with payload bytes
constexpr uint64_t kMaxLedgerBytes = 1ull << 30;  // with tokens: the ledger's bit per packet
constexpr double kMaxUs = 1e12;                   // any time in us: ~11 days, far from Nanos overflow
constexpr uint64_t kMaxFlaps = 1000000;           // scheduled up front, one event each
constexpr uint64_t kMaxSamples = 100000000;       // duration / sample period: 16 bytes each
// --timeline keeps a per-plane array beside each sample as well: 5x the
// memory, and past 4 GB at kMaxSamples.
constexpr uint64_t kTimelineSampleBytes = 16 + 8 * kMaxPlanes;
// Headers around an MTU of payload (Eth+VLAN+IPv6+UDP+BTH+extension headers
// fit in 128 bytes, as in FrameTemplate) and the ICRC: a queue smaller than
// that drops every full frame and the run silently completes nothing.
constexpr uint32_t kMaxFrameOverhead = 128 + wire::kIcrcLen;

// KIND:PLANE:INDEX, as --fail-link and --fail-switch name their target.
struct FailTarget {
  std::string kind;
  uint32_t plane = 0, index = 0;
};

// Strict: sscanf read "garbage" as a target at plane 0, index 0 and failed
// fabric link 0 (spine 0 for --fail-switch), and ignored trailing junk.
// Returns an error, or "" with `t` filled in.
std::string parse_fail_target(const std::string& spec, FailTarget& t) {
  const size_t a = spec.find(':');
  const size_t b = a == std::string::npos ? a : spec.find(':', a + 1);
  if (b == std::string::npos) return "expected KIND:PLANE:INDEX";
  t.kind = spec.substr(0, a);
  const auto number = [](std::string_view f, uint32_t& v) {
    const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    return !f.empty() && ec == std::errc() && end == f.data() + f.size();
  };
  const std::string_view rest(spec);
  if (!number(rest.substr(a + 1, b - a - 1), t.plane) || !number(rest.substr(b + 1), t.index))
    return "PLANE and INDEX must be numbers";
  return "";
}

inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One QP of a flow. Messages rotate through `outstanding` destination slots;
// a slot is checked and cleared when its message completes, before reuse.
struct QpRun {
  uint32_t flow = 0;
  uint32_t src = 0, dst = 0;
  uint32_t qpn_req = 0, qpn_resp = 0;
  const uint8_t* src_data = nullptr;  // this QP's window of Sim::pattern_
  std::vector<uint8_t> dst_buf;       // with payload bytes: the slots
  uint8_t* dst_mem = nullptr;         // the slots' registered address
  uint32_t lkey = 0, rkey = 0;
  uint32_t posted = 0, completed = 0;
  uint32_t recv_posted = 0, imm_total = 0, imm_seen = 0;
  bool failed = false;
};

struct FlowRun {
  uint32_t src = 0, dst = 0;
  bool victim = false;
  uint64_t bytes_done = 0;
  Nanos last_done = 0;
  uint32_t qps_done = 0;
  Nanos first_qp_done = kNever;  // when its first QP completed its last message
};

constexpr uint64_t kSrcIova = 0x100000000ull;
constexpr uint64_t kDstIova = 0x800000000ull;
constexpr uint32_t kSrcShift = 64;  // message i reads from offset (i % 64) * 64
// QP g reads its window of one shared pattern from g * kQpStride: more than
// the 63 shifts a window's messages use, so no two QPs' messages start at
// the same byte and a misplaced message cannot match by accident.
constexpr uint32_t kQpStride = 65 * kSrcShift;
constexpr uint32_t kRecvWindow = 32;
// Every time the JSON and the timeline print counts from here.
constexpr Nanos kStart = 1000;

class Sim {
 public:
  explicit Sim(const Options& o) : o_(o) {}

  int run();

 private:
  uint32_t msg_len(uint32_t i) const { return o_.message_bytes[i % o_.message_bytes.size()]; }
  uint32_t max_msg() const { return *std::max_element(o_.message_bytes.begin(), o_.message_bytes.end()); }
  bool is_imm(uint32_t i) const {
    return (o_.imm_every && i % o_.imm_every == o_.imm_every - 1) || i + 1 == o_.messages;
  }
  Transport transport() const { return o_.transport == "rocev2" ? Transport::rocev2 : Transport::mrc; }

  bool build_flows(std::string& err);
  bool setup_qp(QpRun& q, uint32_t global_index);
  void post_next(uint32_t qi);
  void on_completion(uint32_t h, const Completion& c);
  uint32_t slots() const { return std::max(o_.outstanding, 1u); }
  void sample();
  void schedule_failures();
  sim::Fabric::Target fail_target(std::vector<uint32_t>& ports) const;
  void apply_failure(bool up);
  std::optional<double> recovery_us() const;
  double ideal_goodput_gbps(bool all_complete) const;
  void warn_timing() const;
  uint8_t timeout_exponent() const;
  sim::Link* captured_link(std::string& err);

  Options o_;
  std::unique_ptr<sim::Fabric> net_;
  std::vector<FlowRun> flows_;
  // Source bytes of every QP: a buffer per QP was a third of a 1,024-host
  // run's memory, and one window shared by all stays in cache.
  std::vector<uint8_t> pattern_;
  std::vector<QpRun> qps_;
  std::map<uint64_t, uint32_t> req_index_, resp_index_;  // host << 32 | qpn -> qps_ index
  // Completions of different partitions may count at once; everything
  // else a completion changes belongs to its QP's or flow's own host.
  std::atomic<uint32_t> qps_terminal_{0};
  std::atomic<uint64_t> integrity_failures_{0}, order_failures_{0}, error_completions_{0};
  // Samples of cumulative placed bytes (responder rx_data_bytes) every sample_us.
  std::vector<uint64_t> placed_;
  std::vector<uint64_t> retx_;
  std::vector<std::array<uint64_t, kMaxPlanes>> plane_bytes_;
  Nanos fail_ns_ = kNever;
  pcap::Writer pcap_;
  // With payload tokens the responders' slots are address space only and
  // the ledger checks each placement: at 1,024 hosts the slots were 4 GB of
  // zeroed memory, written and compared for every packet.
  bool tokens_ = false;
  sim::PlacementLedger ledger_;
};

// --pcap-link, plane first as in --fail-link: up:P:H (host H's uplink on
// plane P), down:P:H (its downlink), leaf-spine:P:L:S or spine-leaf:P:L:S
// (between leaf L and spine S on plane P).
sim::Link* Sim::captured_link(std::string& err) {
  const auto colon = o_.pcap_link.find(':');
  const std::string kind = o_.pcap_link.substr(0, colon);
  const bool host_link = kind == "up" || kind == "down";
  if (!host_link && kind != "leaf-spine" && kind != "spine-leaf") {
    err = "expected up:PLANE:HOST, down:PLANE:HOST, leaf-spine:PLANE:LEAF:SPINE or spine-leaf:PLANE:LEAF:SPINE";
    return nullptr;
  }
  std::vector<uint32_t> ix;
  for (size_t at = colon; at != std::string::npos;) {
    const size_t next = o_.pcap_link.find(':', at + 1);
    const std::string field = o_.pcap_link.substr(at + 1, next == std::string::npos ? next : next - at - 1);
    uint32_t v = 0;
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
    if (ec == std::errc::result_out_of_range) {
      err = field + " is out of range";
      return nullptr;
    }
    if (field.empty() || ec != std::errc() || end != field.data() + field.size()) {
      err = "\"" + field + "\" is not an index";
      return nullptr;
    }
    ix.push_back(v);
    at = next;
  }
  if (ix.size() != (host_link ? 2u : 3u)) {
    err = host_link ? "expected " + kind + ":PLANE:HOST" : "expected " + kind + ":PLANE:LEAF:SPINE";
    return nullptr;
  }
  sim::Fabric& n = *net_;
  const auto out_of_range = [&](const char* what, uint32_t v, uint32_t count) {
    err = fmt::format("{} {} out of range (0..{})", what, v, count - 1);
    return nullptr;
  };
  if (host_link) {
    if (ix[0] >= o_.planes) return out_of_range("plane", ix[0], o_.planes);
    if (ix[1] >= o_.hosts) return out_of_range("host", ix[1], o_.hosts);
    return kind == "up" ? &n.uplink(ix[1], ix[0]) : &n.downlink(ix[1], ix[0]);
  }
  if (ix[0] >= o_.planes) return out_of_range("plane", ix[0], o_.planes);
  if (ix[1] >= n.leaves()) return out_of_range("leaf", ix[1], n.leaves());
  if (ix[2] >= n.spines()) return out_of_range("spine", ix[2], n.spines());
  return kind == "leaf-spine" ? &n.leaf_to_spine(ix[0], ix[1], ix[2]) : &n.spine_to_leaf(ix[0], ix[1], ix[2]);
}

bool Sim::build_flows(std::string& err) {
  const uint32_t H = o_.hosts;
  auto add = [&](uint32_t s, uint32_t d, bool victim) { flows_.push_back({s, d, victim, 0, 0, 0}); };
  if (o_.workload == "single") {
    // Across leaves when there is more than one, so the flow crosses spines.
    add(0, H > o_.hosts_per_leaf ? o_.hosts_per_leaf : 1, false);
  } else if (o_.workload == "permutation") {
    // A random cyclic order: every host sends to the next, none to itself.
    std::vector<uint32_t> order(H);
    for (uint32_t i = 0; i < H; ++i) order[i] = i;
    uint64_t r = mix(o_.seed ^ 0x7065726Dull);
    for (uint32_t i = H - 1; i > 0; --i) {
      r = mix(r);
      std::swap(order[i], order[r % (i + 1)]);
    }
    for (uint32_t i = 0; i < H; ++i) add(order[i], order[(i + 1) % H], false);
  } else if (o_.workload == "incast") {
    // Receiver host 0; senders from the next leaf on, so incast crosses the
    // spines into host 0's leaf. The victim goes from the last host to host 1,
    // sharing those spine-to-leaf links but not host 0's downlink.
    const uint32_t first = H > o_.hosts_per_leaf ? o_.hosts_per_leaf : 1;
    if (first + o_.incast_degree + (o_.victim ? 1 : 0) > H) {
      err = "incast: not enough hosts for the degree (and victim)";
      return false;
    }
    for (uint32_t i = 0; i < o_.incast_degree; ++i) add(first + i, 0, false);
    if (o_.victim) {
      if (first < 2) {
        err = "incast victim needs hosts_per_leaf >= 2 and more than one leaf";
        return false;
      }
      add(H - 1, 1, true);
    }
  } else if (o_.workload == "alltoall") {
    for (uint32_t s = 0; s < H; ++s)
      for (uint32_t k = 1; k < H; ++k) add(s, (s + k) % H, false);
  } else {
    err = "unknown workload " + o_.workload;
    return false;
  }
  return true;
}

uint8_t Sim::timeout_exponent() const {
  return static_cast<uint8_t>(o_.timeout >= 0 ? o_.timeout : (transport() == Transport::mrc ? 7 : 5));
}

bool Sim::setup_qp(QpRun& q, uint32_t gi) {
  QpAttr a;
  a.pmtu = o_.mtu;
  const Transport t = transport();
  a.timeout = timeout_exponent();
  a.retry_linear = 7;
  a.retry_exp = static_cast<uint8_t>(o_.retry_exp >= 0 ? o_.retry_exp : (t == Transport::mrc ? 25 : 0));
  a.mpr = a.mpr_dest = o_.mpr;
  // EVs spread equally over planes; the rotation binds RoCEv2 QPs (which use
  // only the first EV) to planes round-robin.
  const uint32_t rot = gi % o_.planes;
  for (uint32_t i = 0; i < o_.evs; ++i)
    a.ev.evs.push_back(EvEntry{0xC000u | ((gi * 977u + i) & 0x3FFF), static_cast<uint8_t>((i + rot) % o_.planes)});
  a.ev.active_per_plane = o_.ev_active_per_plane;
  if (t == Transport::mrc) {
    a.cc.algo = CcAlgo::nscc;
    a.cc.nscc.base_rtt = o_.base_rtt_ns;
    a.cc.nscc.target_delay = o_.target_delay_ns;
    a.cc.nscc.disable_qa = o_.nscc_disable_qa;
  } else {
    a.cc.algo = CcAlgo::dcqcn;
    a.cc.dcqcn.line_rate_gbps = o_.host_rate_gbps;  // one plane per QP
  }
  const uint32_t imm_total = [&] {
    uint32_t n = 0;
    for (uint32_t i = 0; i < o_.messages; ++i) n += is_imm(i);
    return n;
  }();
  auto pair = net_->connect_qp_pair(q.src, q.dst, a, 1, 1, QpCaps{std::max(o_.outstanding, 1u) + 4, kRecvWindow + 4});
  if (!pair) return false;
  q.qpn_req = pair.qpn_a;
  q.qpn_resp = pair.qpn_b;
  q.imm_total = imm_total;

  // Message i starts at a different offset of the QP's window.
  const uint32_t m = max_msg();
  const size_t window = size_t(m) + kSrcShift * 64;
  if (pattern_.empty()) {
    pattern_.resize(window + qps_.size() * kQpStride);
    uint64_t r = mix(o_.seed);
    for (size_t i = 0; i < pattern_.size(); i += 8) {
      r = mix(r);
      std::memcpy(pattern_.data() + i, &r, std::min<size_t>(8, pattern_.size() - i));
    }
  }
  q.src_data = pattern_.data() + size_t(gi) * kQpStride;
  const size_t dst_bytes = size_t(m) * slots();
  if (tokens_) {
    q.dst_mem = ledger_.region(gi);
  } else {
    q.dst_buf.assign(dst_bytes, 0);
    q.dst_mem = q.dst_buf.data();
  }
  uint32_t unused = 0;
  if (!net_->engine(q.src).reg_mr(1, const_cast<uint8_t*>(q.src_data), kSrcIova + (uint64_t(gi) << 32 >> 4), window,
                                  kAccessLocalWrite, q.lkey, unused))
    return false;
  if (!net_->engine(q.dst).reg_mr(1, q.dst_mem, kDstIova + (uint64_t(gi) << 32 >> 4), dst_bytes,
                                  kAccessLocalWrite | kAccessRemoteWrite, unused, q.rkey))
    return false;
  for (; q.recv_posted < std::min(imm_total, kRecvWindow); ++q.recv_posted)
    net_->engine(q.dst).post_recv(q.qpn_resp, RecvWr{q.recv_posted});
  return true;
}

void Sim::post_next(uint32_t qi) {
  QpRun& q = qps_[qi];
  if (q.failed || q.posted >= o_.messages) return;
  const uint32_t i = q.posted++;
  const uint32_t gi = qi;
  const uint32_t slot = i % slots();
  if (tokens_) ledger_.expect(qi, slot, q.dst, q.src_data + (i % 64) * kSrcShift, msg_len(i));
  SendWr w;
  w.wr_id = i;
  w.opcode = is_imm(i) ? WrOpcode::rdma_write_with_imm : WrOpcode::rdma_write;
  w.signaled = true;
  w.local_addr = kSrcIova + (uint64_t(gi) << 32 >> 4) + (i % 64) * kSrcShift;
  w.length = msg_len(i);
  w.lkey = q.lkey;
  w.remote_addr = kDstIova + (uint64_t(gi) << 32 >> 4) + uint64_t(slot) * max_msg();
  w.rkey = q.rkey;
  w.imm = i;
  if (net_->post_send(q.src, q.qpn_req, w) != 0) {
    ++error_completions_;
    q.failed = true;
    ++qps_terminal_;
  }
}

void Sim::on_completion(uint32_t h, const Completion& c) {
  const uint64_t key = uint64_t(h) << 32 | c.qpn;
  if (auto it = req_index_.find(key); it != req_index_.end()) {
    const uint32_t qi = it->second;
    QpRun& q = qps_[qi];
    if (c.status != WcStatus::success) {
      ++error_completions_;
      if (!q.failed) {
        q.failed = true;
        if (q.completed < o_.messages) ++qps_terminal_;
      }
    } else if (c.wr_id != q.completed || q.failed) {
      ++order_failures_;  // duplicate, skipped or out of order
    } else {
      const uint32_t i = q.completed++;
      const uint32_t slot = i % slots();
      const uint32_t len = msg_len(i);
      if (tokens_) {
        if (!ledger_.take(qi, slot)) ++integrity_failures_;
      } else {
        uint8_t* d = q.dst_mem + size_t(slot) * max_msg();
        if (std::memcmp(d, q.src_data + (i % 64) * kSrcShift, len) != 0) ++integrity_failures_;
        std::memset(d, 0, len);  // so a message that reuses the slot is checked afresh
      }
      FlowRun& f = flows_[q.flow];
      f.bytes_done += len;
      f.last_done = net_->now();
      if (q.completed == o_.messages) {
        if (!f.qps_done) f.first_qp_done = net_->now();
        ++f.qps_done;
        ++qps_terminal_;
      }
      post_next(qi);
    }
  } else if (auto jt = resp_index_.find(key); jt != resp_index_.end()) {
    QpRun& q = qps_[jt->second];
    if (c.status != WcStatus::success) return;  // flushed receives
    if (c.imm >= o_.messages || !is_imm(c.imm) || c.byte_len != msg_len(c.imm)) {
      ++order_failures_;
      return;
    }
    // The n-th immediate must be the n-th WRITE_IMM message.
    uint32_t n = 0;
    for (uint32_t i = 0; i < c.imm; ++i) n += is_imm(i);
    if (n != q.imm_seen) ++order_failures_;
    ++q.imm_seen;
    if (q.recv_posted < q.imm_total) net_->engine(q.dst).post_recv(q.qpn_resp, RecvWr{q.recv_posted++});
  } else {
    ++order_failures_;
  }
  if (qps_terminal_ == qps_.size()) net_->stop();
}

void Sim::sample() {
  uint64_t placed = 0, retx = 0;
  QpInfo qi;
  for (const QpRun& q : qps_) {
    if (net_->engine(q.dst).qp_info(q.qpn_resp, qi)) placed += qi.ctr[QpCtr::rx_data_bytes];
    // Retransmits only feed the timeline; qp_info is the sampler's main cost.
    if (!o_.timeline.empty() && net_->engine(q.src).qp_info(q.qpn_req, qi)) retx += qi.ctr[QpCtr::tx_retransmits];
  }
  placed_.push_back(placed);
  retx_.push_back(retx);
  if (!o_.timeline.empty()) {
    std::array<uint64_t, kMaxPlanes> pb{};
    for (uint32_t p = 0; p < o_.planes; ++p)
      for (uint32_t h = 0; h < o_.hosts; ++h) pb[p] += net_->downlink(h, p).counters().delivered_bytes;
    plane_bytes_.push_back(pb);
  }
  const Nanos step = static_cast<Nanos>(o_.sample_us * 1000);
  net_->at(net_->now() + step, [this] { sample(); });
}

// The options' failure target, and the hosts whose own port it takes down.
sim::Fabric::Target Sim::fail_target(std::vector<uint32_t>& ports) const {
  using Kind = sim::Fabric::Target::Kind;
  if (o_.fail_plane >= 0) {
    for (uint32_t h = 0; h < o_.hosts; ++h) ports.push_back(h);
    return {Kind::plane, uint32_t(o_.fail_plane), 0};
  }
  FailTarget t;
  parse_fail_target(o_.fail_link.empty() ? o_.fail_switch : o_.fail_link, t);  // checked in main()
  if (t.kind == "host") {
    ports.push_back(t.index);
    return {Kind::host_link, t.plane, t.index};
  }
  if (t.kind == "leaf") {
    for (uint32_t h = t.index * o_.hosts_per_leaf; h < std::min(o_.hosts, (t.index + 1) * o_.hosts_per_leaf); ++h)
      ports.push_back(h);
    return {Kind::leaf, t.plane, t.index};
  }
  return {t.kind == "fabric" ? Kind::fabric_link : Kind::spine, t.plane, t.index};
}

void Sim::apply_failure(bool up) {
  const Nanos now = net_->now();
  std::vector<uint32_t> ports;
  const sim::Fabric::Target target = fail_target(ports);
  if (o_.fail_loss > 0) {
    // Gray: every port stays up, so nothing is told (main() refuses --port-status).
    net_->set_gray_loss(target, up ? 0 : o_.fail_loss);
    return;
  }
  net_->set_up(target, up);
  if (!o_.port_status) return;
  // The NICs whose port went down (or up) learn it at once and tell their peers.
  for (uint32_t h : ports) {
    net_->engine(h).set_plane_up(target.plane, up, now);
    net_->engine(h).send_port_status(now);
    net_->poll(h);
  }
}

void Sim::schedule_failures() {
  if (o_.fail_at_us < 0 || (o_.fail_plane < 0 && o_.fail_link.empty() && o_.fail_switch.empty())) return;
  fail_ns_ = kStart + static_cast<Nanos>(o_.fail_at_us * 1000);
  const Nanos end = o_.restore_at_us >= 0 ? kStart + static_cast<Nanos>(o_.restore_at_us * 1000) : kNever;
  net_->at(fail_ns_, [this] { apply_failure(false); });
  if (o_.flap_period_us > 0) {
    // Down for half a period, up for half, until the restore time (or the cap).
    const Nanos half = std::max<Nanos>(1, static_cast<Nanos>(o_.flap_period_us * 500));
    const Nanos cap = std::min(end, kStart + static_cast<Nanos>(o_.duration_us * 1000));
    bool up = true;
    for (Nanos t = fail_ns_ + half; t < cap; t += half, up = !up) net_->at(t, [this, up] { apply_failure(up); });
  }
  if (end != kNever) net_->at(end, [this] { apply_failure(true); });
}

// How long a failure held the workload back: the time from the failure to
// the end of the last window whose placed-byte rate fell below 85 % of the
// pre-failure rate scaled to the surviving planes. The first windows after a
// silent failure still look healthy (the other planes' packets keep landing)
// so the first good window would say nothing; the last bad one does.
// Windows are looked at until 90 % of all bytes are placed, so the drain at
// the end of the workload is not taken for a stall. 0: no window fell below.
// Timers and NSCC set below the fabric's own round trip turn a healthy run
// into a crawl that looks like a protocol failure, so say so. NSCC reads
// whatever a round trip takes beyond base_rtt as queueing, so a base well
// under it holds every window near the floor (a 3 us fabric with
// --base-rtt-ns 500 moved 0.6 % of ideal); an ACK timeout under it resends
// every packet before its ACK can arrive.
void Sim::warn_timing() const {
  if (flows_.empty()) return;
  auto ser_ns = [](double bytes, double gbps) { return bytes * 8 / gbps; };
  double least = std::numeric_limits<double>::infinity();
  for (const FlowRun& f : flows_) {
    // A full frame out, a header-sized ACK back, nothing queued.
    double rtt = 4 * o_.host_delay_ns + 2 * ser_ns(o_.mtu, o_.host_rate_gbps) + 2 * ser_ns(64, o_.host_rate_gbps);
    if (net_->leaf_of(f.src) != net_->leaf_of(f.dst))
      rtt += 4 * o_.fabric_delay_ns + 2 * ser_ns(o_.mtu, o_.fabric_rate_gbps) + 2 * ser_ns(64, o_.fabric_rate_gbps);
    least = std::min(least, rtt);
  }
  if (o_.transport == "mrc" && o_.base_rtt_ns < least / 2)
    fmt::print(stderr,
               "mrc-sim: warning: --base-rtt-ns {} is under half this fabric's least unloaded round trip (about {:.0f} "
               "ns): NSCC will take every packet for queued and keep its windows near the floor\n",
               o_.base_rtt_ns, least);
  const Nanos ack_timeout = engine::ack_timeout_ns(transport(), timeout_exponent());
  if (double(ack_timeout) < least)
    fmt::print(stderr,
               "mrc-sim: warning: the ACK timeout ({} ns, --timeout {}) is under this fabric's least unloaded round "
               "trip (about {:.0f} ns): packets will be resent before their ACKs can arrive\n",
               ack_timeout, timeout_exponent(), least);
}

// A bound on the goodput the links allow. For a run whose flows all complete:
// the run's bytes over the least time in which the busiest host port, or the
// busiest leaf's spine links either way, carry their share (flows carry equal
// bytes, so the time is counted in flows; leaf-local flows need no spine).
// A run cut short may have completed only the flows that finish first, so
// there the bound is what the sending or the receiving hosts' ports could
// take in all.
double Sim::ideal_goodput_gbps(bool all_complete) const {
  const double host_gbps = o_.host_rate_gbps * o_.planes;
  const double leaf_spine_gbps = double(net_->spines()) * o_.fabric_rate_gbps * o_.planes;
  std::vector<uint32_t> out(o_.hosts), in(o_.hosts), up(net_->leaves()), down(net_->leaves());
  if (!all_complete) {
    for (const FlowRun& f : flows_) out[f.src] = in[f.dst] = 1;
    const auto senders = std::count(out.begin(), out.end(), 1u), receivers = std::count(in.begin(), in.end(), 1u);
    return double(std::min(senders, receivers)) * host_gbps;
  }
  for (const FlowRun& f : flows_) {
    ++out[f.src];
    ++in[f.dst];
    if (net_->leaf_of(f.src) == net_->leaf_of(f.dst)) continue;
    ++up[net_->leaf_of(f.src)];
    ++down[net_->leaf_of(f.dst)];
  }
  double flow_times = 0;  // in units of one flow's bytes over one Gb/s
  for (uint32_t h = 0; h < o_.hosts; ++h) flow_times = std::max({flow_times, out[h] / host_gbps, in[h] / host_gbps});
  for (uint32_t l = 0; l < net_->leaves(); ++l)
    flow_times = std::max({flow_times, up[l] / leaf_spine_gbps, down[l] / leaf_spine_gbps});
  return flow_times > 0 ? double(flows_.size()) / flow_times : 0;
}

std::optional<double> Sim::recovery_us() const {
  if (fail_ns_ == kNever || placed_.empty()) return std::nullopt;
  const Nanos step = static_cast<Nanos>(o_.sample_us * 1000);
  auto at = [&](Nanos t) -> uint64_t {  // cumulative placed bytes at time t (sample k is at kStart + k*step)
    if (t < kStart) return 0;
    const size_t k = std::min<size_t>((t - kStart) / step, placed_.size() - 1);
    return placed_[k];
  };
  const Nanos w = std::max<Nanos>(step, static_cast<Nanos>(o_.recovery_window_us * 1000));
  const Nanos pre_w = std::min<Nanos>(std::max<Nanos>(4 * w, 20000), fail_ns_ - kStart);
  if (pre_w == 0) return std::nullopt;
  const double pre_rate = double(at(fail_ns_) - at(fail_ns_ - pre_w)) / double(pre_w);
  const double target = 0.85 * pre_rate * (o_.planes - 1) / std::max(1u, o_.planes);
  const uint64_t total = placed_.back();
  // Up to the first QP's last completion at most: from then on the offered
  // load falls as QPs finish, and a lower rate says nothing of the failure.
  Nanos last = kStart + (placed_.size() - 1) * step;
  for (const FlowRun& f : flows_) last = std::min(last, f.first_qp_done);
  Nanos stalled_until = fail_ns_;
  for (Nanos t = fail_ns_ + w; t <= last && at(t) < total / 10 * 9; t += step) {
    if (double(at(t) - at(t - w)) / double(w) < target) stalled_until = t;
  }
  return double(stalled_until - fail_ns_) / 1000.0;
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt::format("{:.3f}", v);
}

// Of none, NaN: json_num prints null, as 0 would read as instant.
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * v.size())) - 1;
  return v[std::min(i, v.size() - 1)];
}

int Sim::run() {
  const auto wall0 = std::chrono::steady_clock::now();
  sim::Fabric::Config fc;
  fc.hosts = o_.hosts;
  fc.planes = o_.planes;
  fc.hosts_per_leaf = o_.hosts_per_leaf;
  fc.spines = o_.spines;
  fc.oversubscription = o_.oversubscription;
  fc.seed = o_.seed;
  auto link = [&](double rate, double delay, uint32_t queue, bool impair) {
    sim::LinkParams lp;
    lp.rate_gbps = rate;
    lp.delay_ns = static_cast<Nanos>(delay);
    lp.queue_bytes = queue;
    lp.ecn_min_bytes = o_.ecn_min_bytes;
    lp.ecn_max_bytes = o_.ecn_max_bytes;
    lp.trim_bytes = o_.trim_bytes;
    if (impair) {
      lp.loss = o_.loss;
      lp.corrupt = o_.corrupt;
      lp.duplicate = o_.duplicate;
    }
    return lp;
  };
  fc.host_link = link(o_.host_rate_gbps, o_.host_delay_ns, o_.host_queue_bytes, o_.host_link_impairments);
  fc.fabric_link = link(o_.fabric_rate_gbps, o_.fabric_delay_ns, o_.fabric_queue_bytes, true);
  fc.host_tx_stage_bytes = o_.host_tx_bytes;
  fc.partitions = o_.partitions;
  fc.threads = o_.threads;
  fc.engine_template.transport = transport();
  fc.engine_template.plane_rate_gbps = o_.host_rate_gbps;
  o_.recovery.apply(fc.engine_template);
  fc.engine_template.fabric_trims = o_.trim_bytes > 0;
  fc.engine_template.icrc_offload =
      o_.icrc == "off" || (o_.icrc == "auto" && o_.corrupt <= 0 && o_.pcap.empty());
  std::string err;
  if (!build_flows(err)) {
    fmt::print(stderr, "mrc-sim: {}\n", err);
    return 2;
  }
  // Each engine gets room for the QPs its host takes part in, no more: an
  // unused QP slot still costs memory, which decides how many hosts fit.
  std::vector<uint32_t> qps_at(o_.hosts, 0);
  for (const FlowRun& f : flows_) {
    qps_at[f.src] += o_.qps_per_pair;
    qps_at[f.dst] += o_.qps_per_pair;
  }
  fc.engine_template.max_qps = std::max<uint32_t>(1, *std::max_element(qps_at.begin(), qps_at.end()));
  try {
    net_ = std::make_unique<sim::Fabric>(fc);
  } catch (const std::bad_alloc&) {
    // Was "mrc-sim: std::bad_alloc": say which options sized it.
    fmt::print(stderr,
               "mrc-sim: --hosts: not enough memory for {} hosts on {} planes, each NIC with room for {} QPs "
               "(--workload {}, --qps-per-pair {})\n",
               o_.hosts, o_.planes, fc.engine_template.max_qps, o_.workload, o_.qps_per_pair);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mrc-sim: {}\n", e.what());
    return 2;
  }
  if (o_.partitions > 1) {
    fmt::print(stderr, "mrc-sim: {} partitions{}, {} threads, windows of {} ns\n", net_->partitions(),
               net_->partitions() < o_.partitions ? " (at most one per leaf)" : "", net_->threads(), net_->lookahead());
  }
  if (!o_.pcap.empty()) {
    std::string err;
    sim::Link* link = captured_link(err);
    if (!link) {
      fmt::print(stderr, "mrc-sim: --pcap-link {}: {}\n", o_.pcap_link, err);
      return 2;
    }
    if (!pcap_.open(o_.pcap)) {
      fmt::print(stderr, "mrc-sim: cannot write {}\n", o_.pcap);
      return 2;
    }
    link->set_tap([this](std::span<const uint8_t> f, Nanos t) { pcap_.write(f, t); });
  }
  for (uint32_t fi = 0; fi < flows_.size(); ++fi) {
    for (uint32_t k = 0; k < o_.qps_per_pair; ++k) {
      QpRun q;
      q.flow = fi;
      q.src = flows_[fi].src;
      q.dst = flows_[fi].dst;
      qps_.push_back(std::move(q));
    }
  }
  warn_timing();
  tokens_ = o_.payload == "tokens" || (o_.payload == "auto" && o_.pcap.empty());
  // Every QP's responder holds `outstanding` slots of the largest message:
  // written memory with payload bytes, a bit per packet with tokens.
  const uint64_t slot_bytes = uint64_t(qps_.size()) * slots() * max_msg();
  if (tokens_ ? slot_bytes / o_.mtu / 8 > kMaxLedgerBytes : slot_bytes > kMaxSlotBytes) {
    fmt::print(stderr,
               "mrc-sim: --message-bytes: {} QPs x {} slots (--outstanding) x {} bytes is too much for the "
               "responders' slots{}\n",
               qps_.size(), slots(), max_msg(), tokens_ ? "" : " with payload bytes");
    return 2;
  }
  if (tokens_) {
    if (!ledger_.reserve(qps_.size(), slots(), max_msg(), o_.mtu)) {
      fmt::print(stderr,
                 "mrc-sim: --message-bytes: cannot reserve address space for the responders' slots ({} QPs x {} slots "
                 "x {} bytes)\n",
                 qps_.size(), slots(), max_msg());
      return 2;
    }
    net_->set_payload_tokens([this](uint32_t h, const sim::EngineHosts::Placement& p) { ledger_.place(h, p); });
  }
  // The bounds above leave room for runs bigger than this machine's memory
  // (payload bytes up to kMaxSlotBytes): running out was std::terminate.
  try {
    for (uint32_t i = 0; i < qps_.size(); ++i) {
      if (!setup_qp(qps_[i], i)) {
        fmt::print(stderr, "mrc-sim: QP setup failed (qp {})\n", i);
        return 2;
      }
      req_index_[uint64_t(qps_[i].src) << 32 | qps_[i].qpn_req] = i;
      resp_index_[uint64_t(qps_[i].dst) << 32 | qps_[i].qpn_resp] = i;
    }
  } catch (const std::bad_alloc&) {
    if (tokens_)
      fmt::print(stderr,
                 "mrc-sim: --hosts: not enough memory for {} QPs of {} EVs (--workload {}, --qps-per-pair {}, --evs)\n",
                 qps_.size(), o_.evs, o_.workload, o_.qps_per_pair);
    else
      fmt::print(stderr,
                 "mrc-sim: --message-bytes: not enough memory for the responders' slots with payload bytes ({} QPs x "
                 "{} slots (--outstanding) x {} bytes; --payload tokens needs none)\n",
                 qps_.size(), slots(), max_msg());
    return 2;
  }
  net_->set_completion_hook([this](uint32_t h, const Completion& c) { on_completion(h, c); });
  net_->at(kStart, [this] {
    sample();
    for (uint32_t i = 0; i < qps_.size(); ++i)
      for (uint32_t k = 0; k < std::max(o_.outstanding, 1u); ++k) post_next(i);
  });
  schedule_failures();
  const Nanos cap = kStart + static_cast<Nanos>(o_.duration_us * 1000);
  const auto run0 = std::chrono::steady_clock::now();
  net_->run_until_idle(cap);
  const double run_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - run0).count();
  const Nanos end = net_->now();
  if (!o_.pcap.empty()) pcap_.close();

  // Summary.
  uint64_t retx = 0, data = 0, completed_msgs = 0;
  uint64_t rtx_sack = 0, rtx_nack = 0, rtx_rto = 0, rtx_gbn = 0, rtx_plane_down = 0, rtx_spurious = 0, probes = 0;
  QpInfo qi;
  Counters<QpCtr> qp_totals;  // both ends of every QP
  for (const QpRun& q : qps_) {
    if (o_.qp_counters && net_->engine(q.dst).qp_info(q.qpn_resp, qi)) qp_totals += qi.ctr;
    if (net_->engine(q.src).qp_info(q.qpn_req, qi)) {
      qp_totals += qi.ctr;
      retx += qi.ctr[QpCtr::tx_retransmits];
      data += qi.ctr[QpCtr::tx_data_pkts];
      rtx_sack += qi.ctr[QpCtr::rtx_sack];
      rtx_nack += qi.ctr[QpCtr::rtx_nack];
      rtx_rto += qi.ctr[QpCtr::rtx_rto];
      rtx_gbn += qi.ctr[QpCtr::rtx_go_back_n];
      rtx_plane_down += qi.ctr[QpCtr::rtx_plane_down];
      rtx_spurious += qi.ctr[QpCtr::rtx_spurious];
      probes += qi.ctr[QpCtr::tx_probes];
    }
    completed_msgs += q.completed;
  }
  bool all_done = true;
  uint64_t imm_missing = 0;
  for (const QpRun& q : qps_) {
    all_done &= q.completed == o_.messages;
    if (q.completed == o_.messages && q.imm_seen != q.imm_total) imm_missing += q.imm_total - q.imm_seen;
  }
  const bool completions_ok = all_done && order_failures_ == 0 && error_completions_ == 0 && imm_missing == 0;
  const bool integrity_ok = integrity_failures_ == 0 && ledger_.misplaced() == 0 && completed_msgs > 0;

  Nanos last_done = 0;
  uint64_t bytes_done = 0;
  for (const FlowRun& f : flows_) {
    last_done = std::max(last_done, f.last_done);
    bytes_done += f.bytes_done;
  }
  const double T = last_done > kStart ? double(last_done - kStart) : 0;
  const double goodput = T > 0 ? bytes_done * 8.0 / T : 0;
  const double R = o_.host_rate_gbps, P = o_.planes;
  const uint32_t spines = net_->spines();
  std::vector<double> fct;
  uint32_t flows_incomplete = 0;
  for (const FlowRun& f : flows_) {
    if (f.qps_done == o_.qps_per_pair)
      fct.push_back(double(f.last_done - kStart) / 1000.0);
    else
      ++flows_incomplete;
  }
  // Over the whole run, which ends at the last completion unless the cap cut
  // it short; a link's share is the time its wire was busy, so copies made
  // past it (duplication) count once.
  const double T_run = end > kStart ? double(end - kStart) : 0;
  auto utilization = [&](const sim::Link& l) {
    const uint64_t carried = l.counters().serialized_bytes - l.queued_bytes();
    return T_run > 0 ? double(carried) * 8.0 / (l.params().rate_gbps * T_run) : 0.0;
  };
  const double ideal = ideal_goodput_gbps(flows_incomplete == 0);
  double util_sum = 0, util_max = 0;
  size_t nlinks = 0;
  for (const auto* v : {&net_->leaf_to_spine_links(), &net_->spine_to_leaf_links()}) {
    // With one leaf nothing crosses a spine: there is no fabric to report.
    if (net_->leaves() < 2) break;
    for (const auto& l : *v) {
      const double u = utilization(*l);
      util_sum += u;
      util_max = std::max(util_max, u);
      ++nlinks;
    }
  }
  double up_sum = 0;
  for (const auto& l : net_->uplinks()) up_sum += utilization(*l);
  const auto rec = recovery_us();
  const auto& st = net_->stats();

  std::string out = "{";
  auto kv = [&](std::string_view k, const std::string& v) {
    out += fmt::format("{}\"{}\":{}", out.size() > 1 ? "," : "", k, v);
  };
  kv("transport", fmt::format("\"{}\"", o_.transport));
  kv("seed", std::to_string(o_.seed));
  kv("scenario", fmt::format("\"{}\"", o_.scenario));
  kv("workload", fmt::format("\"{}\"", o_.workload));
  kv("hosts", std::to_string(o_.hosts));
  kv("planes", std::to_string(o_.planes));
  kv("leaves", std::to_string(net_->leaves()));
  kv("spines", std::to_string(spines));
  kv("flows", std::to_string(flows_.size()));
  kv("qps", std::to_string(qps_.size()));
  kv("bytes_completed", std::to_string(bytes_done));
  kv("sim_time_us", json_num(T_run / 1000.0));
  kv("last_completion_us", last_done > kStart ? json_num(T / 1000.0) : "null");
  kv("goodput_gbps", json_num(goodput));
  kv("ideal_goodput_gbps", json_num(ideal));
  kv("goodput_fraction", json_num(ideal > 0 ? goodput / ideal : 0));
  kv("link_utilization",
     fmt::format("{{\"fabric_mean\":{},\"fabric_max\":{},\"fabric_links\":{},\"host_uplink_mean\":{}}}",
                 json_num(nlinks ? util_sum / nlinks : 0), json_num(util_max), nlinks,
                 json_num(net_->uplinks().empty() ? 0 : up_sum / net_->uplinks().size())));
  kv("fct_us", fmt::format("{{\"p50\":{},\"p99\":{},\"max\":{}}}", json_num(percentile(fct, 0.5)),
                           json_num(percentile(fct, 0.99)), json_num(percentile(fct, 1))));
  kv("flows_incomplete", std::to_string(flows_incomplete));
  for (const FlowRun& f : flows_) {
    if (!f.victim) continue;
    const double v = f.last_done > kStart ? f.bytes_done * 8.0 / double(f.last_done - kStart) : 0;
    kv("victim",
       fmt::format("{{\"goodput_gbps\":{},\"fair_share_gbps\":{},\"fraction\":{},\"complete\":{}}}", json_num(v),
                   json_num(P * R), json_num(v / (P * R)), f.qps_done == o_.qps_per_pair ? "true" : "false"));
  }
  kv("retransmitted_packets", std::to_string(retx));
  kv("data_packets", std::to_string(data));
  // The causes count packets queued for a resend, not copies sent: one
  // acknowledged before its turn (its late first copy arrived), queued again
  // by a go-back-N, flushed by an error or still queued at the end is never
  // sent. Each queueing sends at most one copy and every copy sent had one,
  // so the causes exceed retransmitted_packets by exactly not_resent.
  const uint64_t queued = rtx_sack + rtx_nack + rtx_rto + rtx_gbn + rtx_plane_down;
  kv("retransmit_causes",
     fmt::format("{{\"sack\":{},\"nack\":{},\"rto\":{},\"go_back_n\":{},\"plane_down\":{},\"not_resent\":{},"
                 "\"probes_sent\":{},\"needless\":{}}}",
                 rtx_sack, rtx_nack, rtx_rto, rtx_gbn, rtx_plane_down, int64_t(queued - retx), probes, rtx_spurious));
  mrc::sim::LinkCounters net_ctr;
  for (const auto* v :
       {&net_->uplinks(), &net_->downlinks(), &net_->leaf_to_spine_links(), &net_->spine_to_leaf_links()}) {
    for (const auto& l : *v) {
      const mrc::sim::LinkCounters& c = l->counters();
      net_ctr.dropped_queue += c.dropped_queue;
      net_ctr.dropped_loss += c.dropped_loss;
      net_ctr.dropped_down += c.dropped_down;
      net_ctr.corrupted += c.corrupted;
      net_ctr.trimmed += c.trimmed;
      net_ctr.ecn_marked += c.ecn_marked;
    }
  }
  kv("network", fmt::format("{{\"dropped_queue\":{},\"dropped_loss\":{},\"dropped_down\":{},\"corrupted\":{},"
                            "\"trimmed\":{},\"ecn_marked\":{}}}",
                            net_ctr.dropped_queue, net_ctr.dropped_loss, net_ctr.dropped_down, net_ctr.corrupted,
                            net_ctr.trimmed, net_ctr.ecn_marked));
  kv("integrity_ok", integrity_ok ? "true" : "false");
  kv("payload", tokens_ ? "\"tokens\"" : "\"bytes\"");
  kv("completions_ok", completions_ok ? "true" : "false");
  kv("errors",
     fmt::format("{{\"error_completions\":{},\"qp_errors\":{},\"order_failures\":{},\"integrity_failures\":{},"
                 "\"misplaced\":{},\"imm_missing\":{},\"messages_completed\":{},\"messages_posted\":{}}}",
                 error_completions_, st.qp_errors, order_failures_, integrity_failures_, ledger_.misplaced(),
                 imm_missing, completed_msgs, uint64_t(qps_.size()) * o_.messages));
  kv("failure_at_us", fail_ns_ == kNever ? "null" : json_num(double(fail_ns_ - kStart) / 1000.0));
  // A gray failure's loss per link of its target; null when the target went down.
  kv("failure_loss", fail_ns_ != kNever && o_.fail_loss > 0 ? fmt::format("{}", o_.fail_loss) : "null");
  kv("recovery_us", rec ? json_num(*rec) : "null");
  kv("ev_transitions",
     fmt::format("{{\"good_to_assumed_bad\":{},\"assumed_bad_to_good\":{}}}", st.ev_to_bad, st.ev_to_good));
  kv("unroutable", std::to_string(st.unroutable));
  if (o_.qp_counters) {
    std::string obj = "{";
    for (size_t i = 0; i < qp_totals.v.size(); ++i)
      obj += fmt::format("{}\"{}\":{}", i ? "," : "", kQpCtrNames[i], qp_totals.v[i]);
    kv("qp_counters", obj + "}");
  }
  const uint64_t events = net_->events_run();
  kv("sim_events", std::to_string(events));
  // Of them, frames delivered at the end of a link; the rest are the
  // hosts' polls and timers, the control events and the few arrivals on a
  // link gone down.
  uint64_t frame_events = 0;
  for (const auto* v :
       {&net_->uplinks(), &net_->downlinks(), &net_->leaf_to_spine_links(), &net_->spine_to_leaf_links()})
    for (const auto& l : *v) frame_events += l->counters().delivered;
  kv("sim_frame_events", std::to_string(frame_events));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  if (o_.report_wall) kv("wall_seconds", json_num(wall));
  out += "}";
  fmt::print("{}\n", out);
  fmt::print(stderr,
             "mrc-sim: {} {} wall {:.2f} s, {} events ({:.2f} M/s); the run alone {:.2f} s ({:.2f} M/s, {:.2f} M "
             "frame events/s)\n",
             o_.scenario, o_.transport, wall, events, events / std::max(wall, 1e-9) / 1e6, run_wall,
             events / std::max(run_wall, 1e-9) / 1e6, frame_events / std::max(run_wall, 1e-9) / 1e6);

  if (!o_.timeline.empty()) {
    std::FILE* f = std::fopen(o_.timeline.c_str(), "w");
    if (!f) {
      fmt::print(stderr, "mrc-sim: cannot write {}\n", o_.timeline);
      return 2;
    }
    const size_t every = std::max<size_t>(1, static_cast<size_t>(std::llround(o_.timeline_interval_us / o_.sample_us)));
    const double dt_ns = every * o_.sample_us * 1000;
    std::string hdr = "t_us,goodput_gbps";
    for (uint32_t p = 0; p < o_.planes; ++p) hdr += fmt::format(",plane{}_rx_gbps", p);
    hdr += ",retransmits\n";
    std::fputs(hdr.c_str(), f);
    for (size_t k = every; k < placed_.size(); k += every) {
      std::string line =
          fmt::format("{:.3f},{:.3f}", k * o_.sample_us, (placed_[k] - placed_[k - every]) * 8.0 / dt_ns);
      for (uint32_t p = 0; p < o_.planes; ++p)
        line += fmt::format(",{:.3f}", (plane_bytes_[k][p] - plane_bytes_[k - every][p]) * 8.0 / dt_ns);
      line += fmt::format(",{}\n", retx_[k] - retx_[k - every]);
      std::fputs(line.c_str(), f);
    }
    std::fclose(f);
  }
  return 0;
}

// What the validators cannot see alone: options against each other and
// against the fabric's shape. Returns the error, naming the option, or "".
std::string check_options(const Options& o) {
  if (o.message_bytes.empty()) return "--message-bytes: needs at least one size";
  if (o.evs < o.planes) return fmt::format("--evs: {} EVs cannot cover {} planes", o.evs, o.planes);
  if (o.ev_active_per_plane > o.evs / o.planes)
    return fmt::format("--ev-active-per-plane: {} is more than the {} EVs a plane has ({} EVs over {} planes)",
                       o.ev_active_per_plane, o.evs / o.planes, o.evs, o.planes);
  if (auto e = o.recovery.check(); !e.empty()) return e;
  // A queue must hold one full frame, or every one is dropped.
  const uint32_t frame = o.mtu + kMaxFrameOverhead;
  if (o.host_queue_bytes < frame)
    return fmt::format("--host-queue-bytes: {} cannot hold one frame of MTU {} (at least {})", o.host_queue_bytes,
                       o.mtu, frame);
  if (o.fabric_queue_bytes < frame)
    return fmt::format("--fabric-queue-bytes: {} cannot hold one frame of MTU {} (at least {})", o.fabric_queue_bytes,
                       o.mtu, frame);
  // A data frame that would take a queue past --trim-bytes is cut to its
  // headers: below one frame every one is, on an empty queue too, and the
  // run completes nothing (exit 0 after burning --duration-us).
  if (o.trim_bytes && o.trim_bytes < frame)
    return fmt::format("--trim-bytes: {} would trim every frame of MTU {} (at least {}, or 0: no trimming)",
                       o.trim_bytes, o.mtu, frame);

  // The links mark from the larger of the two: a smaller max quietly became the min.
  if (o.ecn_max_bytes && o.ecn_max_bytes < o.ecn_min_bytes)
    return fmt::format("--ecn-max-bytes: {} is below --ecn-min-bytes {} (0: no ECN marking)", o.ecn_max_bytes,
                       o.ecn_min_bytes);

  // The shape as sim::Fabric derives it (its own checks come after the
  // allocations these bounds prevent).
  const uint32_t leaves = (o.hosts + o.hosts_per_leaf - 1) / o.hosts_per_leaf;
  uint32_t spines = o.spines;
  const char* spines_from = "--spines";
  if (spines == 0) {
    const double derived = std::floor(o.hosts_per_leaf / o.oversubscription);
    if (derived > kMaxSpines)
      return fmt::format("--oversubscription: {} gives {} spines per plane (--hosts-per-leaf {} / it), more than {}",
                         o.oversubscription, derived, o.hosts_per_leaf, kMaxSpines);
    spines = std::max<uint32_t>(1, static_cast<uint32_t>(derived));
    spines_from = "--oversubscription";
  }
  if (uint64_t(o.planes) * leaves * spines > kMaxFabricLinks)
    return fmt::format("{}: {} planes x {} leaves x {} spines is more than {} leaf-spine links", spines_from, o.planes,
                       leaves, spines, kMaxFabricLinks);

  uint64_t flows = 1;
  if (o.workload == "permutation") flows = o.hosts;
  if (o.workload == "incast") flows = o.incast_degree + o.victim;
  if (o.workload == "alltoall") flows = uint64_t(o.hosts) * (o.hosts - 1);
  if (flows * o.qps_per_pair > kMaxQps)
    return fmt::format("--hosts: {} hosts with --workload {} and --qps-per-pair {} make {} QPs, more than {}", o.hosts,
                       o.workload, o.qps_per_pair, flows * o.qps_per_pair, kMaxQps);

  const uint64_t max_samples = o.timeline.empty() ? kMaxSamples : kMaxSamples * 16 / kTimelineSampleBytes;
  if (o.duration_us / o.sample_us > double(max_samples))
    return fmt::format("--sample-us: {} us over --duration-us {} is more than {} samples{}", o.sample_us, o.duration_us,
                       max_samples, o.timeline.empty() ? "" : " with --timeline");

  // Failures: one target, inside the fabric, at a time the run can reach.
  const int targets = (o.fail_plane >= 0) + !o.fail_link.empty() + !o.fail_switch.empty();
  const bool failing = o.fail_at_us >= 0;
  if (targets > 1) return "--fail-plane, --fail-link and --fail-switch: give at most one";
  if (o.fail_plane >= 0 && uint32_t(o.fail_plane) >= o.planes)
    return fmt::format("--fail-plane: plane {} out of range (0..{})", o.fail_plane, o.planes - 1);
  const auto check_target = [&](const char* opt, const std::string& spec, const char* kind_a, uint32_t count_a,
                                const char* kind_b, uint32_t count_b) -> std::string {
    FailTarget t;
    std::string err = parse_fail_target(spec, t);
    if (err.empty() && t.kind != kind_a && t.kind != kind_b) err = fmt::format("KIND must be {} or {}", kind_a, kind_b);
    if (!err.empty())
      return fmt::format("{} {}: {} ({}:PLANE:INDEX or {}:PLANE:INDEX)", opt, spec, err, kind_a, kind_b);
    if (t.plane >= o.planes)
      return fmt::format("{} {}: plane {} out of range (0..{})", opt, spec, t.plane, o.planes - 1);
    const uint32_t count = t.kind == kind_a ? count_a : count_b;
    if (t.index >= count)
      return fmt::format("{} {}: {} {} out of range (0..{})", opt, spec,
                         t.kind == "fabric" ? "fabric link" : t.kind.c_str(), t.index, count - 1);
    return "";
  };
  if (!o.fail_link.empty())
    if (std::string err = check_target("--fail-link", o.fail_link, "host", o.hosts, "fabric", leaves * spines);
        !err.empty())
      return err;
  if (!o.fail_switch.empty())
    if (std::string err = check_target("--fail-switch", o.fail_switch, "leaf", leaves, "spine", spines); !err.empty())
      return err;
  if (targets == 1 && !failing) return "--fail-at-us: needed with --fail-plane, --fail-link or --fail-switch";
  if (targets == 0 && failing) return "--fail-at-us: needs --fail-plane, --fail-link or --fail-switch";
  if (targets == 0 && (o.restore_at_us >= 0 || o.flap_period_us > 0 || o.fail_loss > 0))
    return "--restore-at-us, --flap-period-us, --fail-loss: need a failure (--fail-at-us and a target)";
  if (o.fail_loss > 0 && o.port_status)
    return "--port-status: a gray failure (--fail-loss) takes no port down, so there is no status to send";
  if (!failing) return "";
  if (o.fail_at_us >= o.duration_us)
    return fmt::format("--fail-at-us: {} is not before --duration-us {}: the failure would never happen", o.fail_at_us,
                       o.duration_us);
  if (o.restore_at_us >= 0 && o.restore_at_us <= o.fail_at_us)
    return fmt::format("--restore-at-us: {} is not after --fail-at-us {}", o.restore_at_us, o.fail_at_us);
  if (o.restore_at_us > o.duration_us)
    return fmt::format("--restore-at-us: {} is after --duration-us {}: the restore would never happen", o.restore_at_us,
                       o.duration_us);
  if (o.flap_period_us > 0) {
    // As schedule_failures() counts them.
    const double half_ns = std::max(1.0, std::floor(o.flap_period_us * 500));
    const double until_us = o.restore_at_us >= 0 ? o.restore_at_us : o.duration_us;
    const double flaps = (until_us - o.fail_at_us) * 1000 / half_ns;
    if (flaps > double(kMaxFlaps))
      return fmt::format("--flap-period-us: {} us makes {:.0f} toggles before {}, more than {}", o.flap_period_us,
                         flaps, o.restore_at_us >= 0 ? "--restore-at-us" : "--duration-us", kMaxFlaps);
  }
  return "";
}

}  // namespace

// The run is bound by cache and TLB misses over gigabytes of per-QP, per-link
// and frame state; transparent huge pages under malloc make it 1.4x (128
// hosts) to 1.85x (1,024 hosts) faster with the same output. glibc reads its
// tunables only at start-up, hence the restart. A GLIBC_TUNABLES that already
// names glibc.malloc.hugetlb (=0 turns this off) is left as it is.
static void restart_with_huge_pages(char** argv) {
  // Our own marker ends the restarts even where GLIBC_TUNABLES does not
  // survive exec (secure-execution mode drops it).
  if (std::getenv("MRC_SIM_RESTARTED")) return;
  const char* cur = std::getenv("GLIBC_TUNABLES");
  if (cur && std::strstr(cur, "glibc.malloc.hugetlb")) return;
  if (setenv("MRC_SIM_RESTARTED", "1", 1) != 0) return;
  const std::string tunables =
      cur && *cur ? std::string(cur) + ":glibc.malloc.hugetlb=1" : std::string("glibc.malloc.hugetlb=1");
  if (setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: run on without
}

int main(int argc, char** argv) {
  restart_with_huge_pages(argv);
  Options o;
  CLI::App app{"mrc-sim: the MRC engine on a simulated multi-plane leaf-spine fabric; prints a JSON summary"};
  app.set_config("--config", "", "read options from a CLI11 config (TOML/INI) file")->check(mrc::app::config_file());
  // A misspelt key (hostz = 64) or a section ([sim]) was ignored and the
  // run went ahead on the defaults, as if the file had been read.
  app.allow_config_extras(CLI::config_extras_mode::error);
  // The name goes into the JSON summary as it is: a quote made it invalid.
  app.add_option("--scenario", o.scenario, "scenario name for the summary")
      ->check(CLI::Validator(
          [](std::string& in) -> std::string {
            for (const unsigned char c : in)
              if (c == '"' || c == '\\' || c < 0x20) return "no quotes, backslashes or control characters";
            return "";
          },
          "NAME"));
  app.add_option("--transport", o.transport)->check(CLI::IsMember({"mrc", "rocev2"}))->capture_default_str();
  app.add_option("--seed", o.seed)->check(mrc::app::not_negative())->capture_default_str();
  app.add_option("--hosts", o.hosts)->check(CLI::Range(2u, 65534u))->capture_default_str();
  app.add_option("--partitions", o.partitions,
                 "cut the fabric into this many parts that run side by side (a parallel run; results differ from "
                 "other partition counts as from other seeds)")
      ->check(CLI::Range(1u, sim::Fabric::kMaxPartitions))
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "threads that run the parts (0: one per part, at most one per CPU); "
                 "never changes the results")
      ->capture_default_str();
  app.add_option("--planes", o.planes)->check(CLI::Range(1u, kMaxPlanes))->capture_default_str();
  app.add_option("--hosts-per-leaf", o.hosts_per_leaf)->check(CLI::Range(1u, 65534u))->capture_default_str();
  app.add_option("--spines", o.spines, "spines per plane (0: from oversubscription)")
      ->check(CLI::Range(0u, kMaxSpines))
      ->capture_default_str();
  app.add_option("--oversubscription", o.oversubscription)->check(finite_range(1e-3, 1e6))->capture_default_str();
  app.add_option("--host-rate-gbps", o.host_rate_gbps)->check(finite_range(1e-3, 1e6))->capture_default_str();
  app.add_option("--fabric-rate-gbps", o.fabric_rate_gbps)->check(finite_range(1e-3, 1e6))->capture_default_str();
  app.add_option("--host-delay-ns", o.host_delay_ns)->check(finite_range(0, 1e12))->capture_default_str();
  app.add_option("--fabric-delay-ns", o.fabric_delay_ns)->check(finite_range(0, 1e12))->capture_default_str();
  app.add_option("--host-queue-bytes", o.host_queue_bytes)->capture_default_str();
  app.add_option("--fabric-queue-bytes", o.fabric_queue_bytes)->capture_default_str();
  app.add_option("--host-tx-bytes", o.host_tx_bytes,
                 "most a NIC keeps queued on each port, the rest waiting in its send queues (0: half the host queue)")
      ->capture_default_str();
  app.add_option("--ecn-min-bytes", o.ecn_min_bytes)->capture_default_str();
  app.add_option("--ecn-max-bytes", o.ecn_max_bytes, "0 disables ECN marking")->capture_default_str();
  app.add_option("--trim-bytes", o.trim_bytes, "0 disables trimming")->capture_default_str();
  app.add_option("--loss", o.loss, "per-frame loss probability on every link")
      ->check(finite_range(0, 1))
      ->capture_default_str();
  app.add_option("--corrupt", o.corrupt)->check(finite_range(0, 1))->capture_default_str();
  app.add_option("--duplicate", o.duplicate)->check(finite_range(0, 1))->capture_default_str();
  app.add_option("--host-link-impairments", o.host_link_impairments, "apply loss/corrupt/duplicate to host links too")
      ->capture_default_str()
      ->check(mrc::app::boolean_word());
  app.add_option("--workload", o.workload)
      ->check(CLI::IsMember({"single", "incast", "permutation", "alltoall"}))
      ->capture_default_str();
  app.add_option("--message-bytes", o.message_bytes, "message size(s), used round-robin")
      ->check(CLI::Range(1u, kMaxMessageBytes))
      ->capture_default_str();
  app.add_option("--messages", o.messages, "messages per QP")
      ->check(CLI::Range(1u, kMaxMessages))
      ->capture_default_str();
  app.add_option("--qps-per-pair", o.qps_per_pair)->check(CLI::Range(1u, 64u))->capture_default_str();
  app.add_option("--outstanding", o.outstanding, "messages in flight per QP")
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  app.add_option("--imm-every", o.imm_every, "every n-th message is a WRITE_IMM (0: only the last)")
      ->capture_default_str();
  app.add_option("--incast-degree", o.incast_degree)->check(CLI::Range(1u, 65533u))->capture_default_str();
  app.add_option("--victim", o.victim, "incast: add a victim flow through the receiver's leaf")
      ->check(mrc::app::boolean_word())
      ->capture_default_str();
  // 0 was taken and ran with one EV.
  app.add_option("--evs", o.evs, "EVs per QP, spread equally over planes")
      ->check(CLI::Range(1u, uint32_t(engine::kMaxEvsPerQp)))
      ->capture_default_str();
  app.add_option("--ev-active-per-plane", o.ev_active_per_plane)->capture_default_str();
  app.add_option("--mtu", o.mtu)->check(CLI::IsMember({256u, 512u, 1024u, 2048u, 4096u, 8192u}))->capture_default_str();
  app.add_option("--base-rtt-ns", o.base_rtt_ns, "NSCC base_rtt")->capture_default_str();
  app.add_flag("--nscc-disable-qa", o.nscc_disable_qa, "NSCC without quick adapt")->check(mrc::app::boolean_word());
  app.add_option("--target-delay-ns", o.target_delay_ns,
                 "NSCC target delay (0: base_rtt, 0.75 x base_rtt with --trim-bytes)")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout, "ACK timeout exponent (-1: ~131 us for either transport)")
      ->check(CLI::Range(-1, 24))  // the engine's limit (modify_qp)
      ->capture_default_str();
  app.add_option("--retry-exp", o.retry_exp, "exponential retries (-1: 25 for mrc, 0 for rocev2)")
      ->check(CLI::Range(-1, 25))
      ->capture_default_str();
  app.add_option("--mpr", o.mpr, "requester and responder window, units of 128 PSNs")
      ->check(CLI::Range(1u, wire::kMaxMpr))
      ->capture_default_str();
  o.recovery.add_to(app);
  app.add_option("--fail-plane", o.fail_plane, "fail this plane (needs --fail-at-us)")
      ->check(CLI::Range(0, int(kMaxPlanes) - 1));
  app.add_option("--fail-link", o.fail_link,
                 "host:PLANE:HOST or fabric:PLANE:INDEX (INDEX = leaf * spines + spine; needs --fail-at-us)");
  app.add_option("--fail-switch", o.fail_switch, "leaf:PLANE:INDEX or spine:PLANE:INDEX (needs --fail-at-us)");
  app.add_option("--fail-at-us", o.fail_at_us, "failure time after the start")->check(finite_range(0, kMaxUs));
  app.add_option("--restore-at-us", o.restore_at_us, "restore time after the start")->check(finite_range(0, kMaxUs));
  app.add_option("--flap-period-us", o.flap_period_us, "toggle every half period from the failure on (0: no flapping)")
      ->check(finite_range(0, kMaxUs))
      ->capture_default_str();
  app.add_option("--fail-loss", o.fail_loss,
                 "a gray failure: the target's links stay up and lose this share of frames (0: they go down)")
      ->check(finite_range(0, 1))
      ->capture_default_str();
  app.add_option("--port-status", o.port_status, "affected NICs see the port change and send port status")
      ->capture_default_str()
      ->check(mrc::app::boolean_word());
  app.add_option("--duration-us", o.duration_us, "simulated time cap")
      ->check(finite_range(1e-3, kMaxUs))
      ->capture_default_str();
  // Below 1 ns the sampler's step rounds to 0 and it runs forever at one instant.
  app.add_option("--sample-us", o.sample_us, "goodput sampling period")
      ->check(finite_range(1e-3, kMaxUs))
      ->capture_default_str();
  app.add_option("--recovery-window-us", o.recovery_window_us, "window over which recovery compares goodput")
      ->check(finite_range(0, kMaxUs))
      ->capture_default_str();
  app.add_option("--timeline", o.timeline, "write a per-interval CSV");
  app.add_option("--timeline-interval-us", o.timeline_interval_us,
                 "CSV row period, a whole number of --sample-us periods (rounded, at least one)")
      ->check(finite_range(1e-3, kMaxUs))
      ->capture_default_str();
  auto* pcap_opt = app.add_option("--pcap", o.pcap, "capture one link (--pcap-link) to this file");
  app.add_option("--pcap-link", o.pcap_link,
                 "the link --pcap captures, as its far end receives it: up:PLANE:HOST, down:PLANE:HOST, "
                 "leaf-spine:PLANE:LEAF:SPINE or spine-leaf:PLANE:LEAF:SPINE")
      ->needs(pcap_opt)
      ->capture_default_str();
  app.add_option("--icrc", o.icrc, "engines compute ICRCs: auto = only with --corrupt or --pcap")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--payload", o.payload,
                 "data frames carry their payload's bytes, or a token naming its source with each placement "
                 "checked (same run, less memory and copying); auto = tokens unless --pcap")
      ->check(CLI::IsMember({"auto", "tokens", "bytes"}))
      ->capture_default_str();
  app.add_flag("--report-wall", o.report_wall, "include wall_seconds in the JSON (breaks byte-identity)");
  app.add_flag("--qp-counters", o.qp_counters, "include every engine QP counter, summed over both ends of all QPs");
  CLI11_PARSE(app, argc, argv);
  if (const std::string err = check_options(o); !err.empty()) {
    fmt::print(stderr, "mrc-sim: {}\n", err);
    return 2;
  }
  if (o.icrc == "off" && o.corrupt > 0) {
    fmt::print(stderr, "mrc-sim: --icrc off with --corrupt: nothing would catch the corrupted frames\n");
    return 2;
  }
  if (o.payload == "tokens" && !o.pcap.empty()) {
    fmt::print(stderr, "mrc-sim: --payload tokens with --pcap: the capture would hold tokens, not payloads\n");
    return 2;
  }
  if (o.icrc == "off" && !o.pcap.empty()) {
    fmt::print(stderr, "mrc-sim: --icrc off with --pcap: the capture's ICRCs would be meaningless\n");
    return 2;
  }
  // Frames are heap vectors born and freed by the million: without these
  // glibc hands freed memory back to the kernel and faults it in again
  // (7 % of a 128-host run went to page faults).
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  Sim sim(o);
  return sim.run();
}
