// Engine behaviours one at a time: error paths, EV health, NACKs and the
// QP state machine.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "engine/engine_impl.h"
#include "sim/fabric.h"
#include "wire/psn.h"
#include "sim/placement_ledger.h"
#include "workload.h"

using namespace mrc;
using namespace mrc::engine;

namespace {

sim::TestNet::Config basic(Transport t = Transport::mrc, uint32_t planes = 4) {
  sim::TestNet::Config cfg;
  cfg.planes = planes;
  cfg.link.rate_gbps = 100;
  cfg.link.delay_ns = 1000;
  cfg.engine_template.transport = t;
  return cfg;
}

struct Pair {
  sim::TestNet net;
  std::vector<uint8_t> src = std::vector<uint8_t>(1 << 20), dst = std::vector<uint8_t>(1 << 20);
  uint32_t lkey = 0, rkey = 0, x = 0;
  sim::TestNet::QpPair qp;

  explicit Pair(const sim::TestNet::Config& cfg, QpAttr attr = {},
                uint32_t dst_access = kAccessLocalWrite | kAccessRemoteWrite)
      : net(cfg) {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13 + 1);
    REQUIRE(net.engine(0).reg_mr(1, src.data(), 0x1000, src.size(), kAccessLocalWrite, lkey, x));
    REQUIRE(net.engine(1).reg_mr(1, dst.data(), 0x900000, dst.size(), dst_access, x, rkey));
    qp = net.connect_qp_pair(0, 1, attr, 1, 1);
    REQUIRE(qp);
  }
  SendWr write(uint64_t id, uint32_t len, uint64_t off = 0) const {
    SendWr w;
    w.wr_id = id;
    w.local_addr = 0x1000 + off;
    w.length = len;
    w.lkey = lkey;
    w.remote_addr = 0x900000 + off;
    w.rkey = rkey;
    return w;
  }
  QpInfo info(uint32_t h) {
    QpInfo qi;
    net.engine(h).qp_info(h == 0 ? qp.qpn_a : qp.qpn_b, qi);
    return qi;
  }
  // Host h's EVs on `plane`: how many, and how many GOOD.
  std::pair<size_t, size_t> good_on_plane(uint32_t plane, uint32_t h = 0) {
    size_t evs = 0, good = 0;
    for (const auto& e : net.engine(h).ev_info(h == 0 ? qp.qpn_a : qp.qpn_b)) {
      if (e.plane != plane) continue;
      ++evs;
      good += e.state == EvState::good;
    }
    return {evs, good};
  }
  // Host 0's port on `plane` goes down or up, its links with it, and it
  // tells its peer.
  void requester_plane_reported(uint32_t plane, bool up) {
    net.set_plane_up(plane, up);
    net.engine(0).set_plane_up(plane, up, net.now());
    net.engine(0).send_port_status(net.now());
    net.poll(0);
  }
};

// A frame from host `from` to host `to` in `buf`, headers stamped for plane
// 0; the caller sets its fields and finishes it.
wire::MutablePacket frame_between(sim::TestNet& net, std::vector<uint8_t>& buf, uint32_t from, uint32_t to,
                                  wire::Opcode opcode, uint32_t payload = 0) {
  wire::Addressing a;
  a.src_ip = net.addr(from, 0).ip;
  a.dst_ip = net.addr(to, 0).ip;
  return wire::begin_frame(buf, a, uint8_t(opcode), false, payload);
}

// Host 0's uplinks lose the first data packet with this PSN (dropped counts
// it); everything else goes straight to host 1, as the switch of a two-host
// net would send it.
void drop_data_packet_once(Pair& p, uint32_t psn, int& dropped) {
  for (uint32_t pl = 0; pl < p.net.config().planes; ++pl) {
    p.net.uplink(0, pl).set_sink([&net = p.net, &dropped, psn, pl](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
      wire::Packet pk;
      if (!dropped && wire::parse_frame(f, pk) == wire::ParseError::ok && pk.at.payload_len && pk.bth().psn() == psn) {
        dropped = 1;
        return;
      }
      net.downlink(1, pl).send(std::move(f), 0, wire);
    });
  }
}

// WRITE 2 of `len` bytes at offset 100, losing the data packet `lost_psn`
// once; returns how long it took to complete.
Nanos write_losing_one(Pair& p, uint32_t len, uint32_t lost_psn, int& dropped) {
  drop_data_packet_once(p, lost_psn, dropped);
  Nanos done = 0;
  p.net.set_completion_hook([&](uint32_t h, const Completion& c) {
    if (h == 0 && c.wr_id == 2) done = p.net.now();
  });
  const Nanos t0 = p.net.now();
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(2, len, 100)) == 0);
  p.net.run_until_idle(t0 + 10'000'000);
  p.net.set_completion_hook({});  // it refers to `done`
  return done - t0;
}

}  // namespace

TEST_CASE("a QP whose retries run out ends in ERROR with every WQE flushed exactly once") {
  QpAttr a;
  a.timeout = 4;  // 16 us
  a.retry_linear = 2;
  a.retry_exp = 2;
  Pair p(basic(), a);
  for (uint32_t pl = 0; pl < 4; ++pl) p.net.set_plane_up(pl, false);  // the peer is unreachable
  for (uint64_t i = 0; i < 5; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 10000, i * 10000)) == 0);
  p.net.run_until_idle(50'000'000);
  const auto& c = p.net.completions(0);
  REQUIRE(c.size() == 5);
  CHECK(c[0].status == WcStatus::retry_exc_err);
  for (size_t i = 0; i < c.size(); ++i) {
    CHECK(c[i].wr_id == i);
    if (i) CHECK(c[i].status == WcStatus::wr_flush_err);
  }
  const QpInfo qi = p.info(0);
  CHECK(qi.state == QpState::error);
  CHECK(qi.ctr[QpCtr::retry_exceeded] == 1);
  CHECK(qi.ctr[QpCtr::rto_fired] == 5);  // 2 linear + 2 exponential retries, then the one that gives up
  REQUIRE(p.net.qp_errors(0).size() == 1);
  CHECK(p.net.qp_errors(0)[0].why == WcStatus::retry_exc_err);
  // A QP in ERROR refuses new work.
  CHECK(p.net.post_send(0, p.qp.qpn_a, p.write(9, 10)) == EINVAL);
}

TEST_CASE("retry budget 25 means retry forever") {
  QpAttr a;
  a.timeout = 4;
  a.retry_linear = 7;
  a.retry_exp = 25;
  Pair p(basic(), a);
  for (uint32_t pl = 0; pl < 4; ++pl) p.net.set_plane_up(pl, false);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 100)) == 0);
  p.net.run_until(200'000'000);
  CHECK(p.net.completions(0).empty());
  CHECK(p.info(0).state == QpState::rts);
  for (uint32_t pl = 0; pl < 4; ++pl) p.net.set_plane_up(pl, true);
  p.net.run_until_idle(p.net.now() + 20'000'000'000ull);
  REQUIRE(p.net.completions(0).size() == 1);
  CHECK(p.net.completions(0)[0].status == WcStatus::success);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 100) == 0);
}

TEST_CASE("the retransmit and probe timers saturate after many back-offs") {
  QpAttr a;
  // The largest timeout, 2^34 ns: doubled 24 times it would be 9 years, and
  // the probe timer's back-off on top of that would overflow 64 bits.
  a.timeout = 24;
  a.retry_linear = 0;
  a.retry_exp = 25;  // forever
  auto cfg = basic();
  cfg.engine_template.probe_interval = Nanos{1} << 40;  // EV probes out of the way
  cfg.engine_template.probe_interval_max = Nanos{1} << 50;
  Pair p(cfg, a);
  for (uint32_t pl = 0; pl < 4; ++pl) p.net.set_plane_up(pl, false);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 100)) == 0);
  constexpr Nanos kMaxRto = Nanos{1} << 45;
  Nanos last_rto = 0;
  // A few timer events per retry; a wrapped timer fires without end and
  // runs out the steps long before 30 retries.
  for (int step = 0; step < 2000 && p.info(0).retries < 30; ++step) {
    p.net.run_until(p.net.engine(0).next_deadline() + 1);
    const QpInfo qi = p.info(0);
    INFO("retries " << qi.retries);
    REQUIRE(qi.rto_ns >= last_rto);
    REQUIRE(qi.rto_ns <= kMaxRto);
    last_rto = qi.rto_ns;
  }
  CHECK(p.info(0).retries >= 30);
  CHECK(last_rto == kMaxRto);
  CHECK(p.info(0).state == QpState::rts);
}

TEST_CASE("a lost tail-loss probe is sent again, well before the retransmit timeout") {
  auto cfg = basic();                             // default timeout: 262 us
  cfg.engine_template.tail_probe_delay = kNever;  // the probe timeout's series alone
  Pair p(cfg);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 100)) == 0);
  p.net.run_until_idle(p.net.now() + 1'000'000);  // an RTT sample
  const QpInfo before = p.info(0);
  REQUIRE(before.srtt_ns > 0);
  // The fabric goes dark for one and a half probe timeouts: the whole next
  // message and the first probe are lost, and only a probe can find out.
  // (One RTT sample: the latest RTT is the smoothed one.)
  const Nanos pto = before.srtt_ns * 3 / 2 + EngineConfig{}.reorder_window;
  const Nanos t0 = p.net.now();
  for (uint32_t pl = 0; pl < 4; ++pl) p.net.set_plane_up(pl, false);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(2, 10000, 100)) == 0);
  p.net.at(t0 + pto + pto / 2, [&net = p.net] {
    for (uint32_t pl = 0; pl < 4; ++pl) net.set_plane_up(pl, true);
  });
  // The first probe goes exactly one probe timeout after the flight began.
  p.net.run_until(t0 + pto - 1);
  CHECK(p.info(0).ctr[QpCtr::tx_probes] == before.ctr[QpCtr::tx_probes]);
  p.net.run_until(t0 + pto);
  CHECK(p.info(0).ctr[QpCtr::tx_probes] == before.ctr[QpCtr::tx_probes] + 1);
  p.net.run_until_idle(t0 + 10'000'000);
  REQUIRE(p.net.completions(0).size() == 2);
  CHECK(p.net.completions(0)[1].status == WcStatus::success);
  const QpInfo after = p.info(0);
  CHECK(after.ctr[QpCtr::tx_probes] - before.ctr[QpCtr::tx_probes] >= 2);
  CHECK(after.ctr[QpCtr::rto_fired] == 0);
  CHECK(p.net.now() - t0 < before.rto_ns / 2);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 10100) == 0);
}

TEST_CASE("a lost packet a SACK cannot yet condemn is resent by the reorder timer, not the probe") {
  Pair p(basic());
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 100)) == 0);
  p.net.run_until_idle(p.net.now() + 1'000'000);  // an RTT sample
  const QpInfo before = p.info(0);
  REQUIRE(before.srtt_ns > 0);
  // The first packet of a two-packet message is lost. The second, sent
  // right after it, is acknowledged at once (AckReq): too soon after the
  // first was sent to call it lost, and no further SACK will come.
  int dropped = 0;
  const Nanos took = write_losing_one(p, 8192, before.snd_nxt, dropped);
  REQUIRE(dropped == 1);
  REQUIRE(p.net.completions(0).size() == 2);
  CHECK(p.net.completions(0)[1].status == WcStatus::success);
  const QpInfo after = p.info(0);
  REQUIRE(after.snd_nxt - before.snd_nxt == 2);
  CHECK(after.ctr[QpCtr::rtx_sack] - before.ctr[QpCtr::rtx_sack] == 1);
  CHECK(after.ctr[QpCtr::rto_fired] == 0);
  // Found a reorder window after the SACK; a probe would have taken its
  // timeout (two RTTs and a reorder window) and a round trip more.
  const Nanos pto = 2 * before.srtt_ns + EngineConfig{}.reorder_window;
  CHECK(took < pto + 2 * before.srtt_ns);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 8292) == 0);
}

TEST_CASE("a lost last packet is found by the probe that follows the flight, sooner than by the probe timeout") {
  // Returns when the message whose last packet was lost completed, after t0.
  auto run = [](Nanos tail_probe_delay, QpInfo& before, QpInfo& after) {
    auto cfg = basic();
    cfg.engine_template.tail_probe_delay = tail_probe_delay;
    Pair p(cfg);
    REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 100)) == 0);
    p.net.run_until_idle(p.net.now() + 1'000'000);  // an RTT sample
    before = p.info(0);
    REQUIRE(before.srtt_ns > 0);
    int dropped = 0;
    const Nanos took = write_losing_one(p, 3 * 4096, before.snd_nxt + 2, dropped);  // the last of three
    REQUIRE(dropped == 1);
    REQUIRE(p.net.completions(0).size() == 2);
    CHECK(p.net.completions(0)[1].status == WcStatus::success);
    CHECK(std::memcmp(p.src.data(), p.dst.data(), 100 + 3 * 4096) == 0);
    after = p.info(0);
    CHECK(after.ctr[QpCtr::rto_fired] == 0);
    CHECK(after.ctr[QpCtr::tx_retransmits] - before.ctr[QpCtr::tx_retransmits] == 1);
    return took;
  };
  QpInfo before, after;
  const Nanos with_tail_probe = run(EngineConfig{}.tail_probe_delay, before, after);
  const uint64_t probes = after.ctr[QpCtr::tx_probes] - before.ctr[QpCtr::tx_probes];
  const Nanos srtt = before.srtt_ns;
  const Nanos by_timeout = run(kNever, before, after);
  // The probe goes 2 us after the tail and is answered a round trip later;
  // the reorder timer then resends the tail, answered a round trip after
  // that. The probe timeout alone first waits 1.5 round trips and a
  // reorder window.
  INFO("srtt " << srtt << " ns; done after " << with_tail_probe << " ns with the tail probe, " << by_timeout
               << " ns without; " << probes << " probes with");
  CHECK(probes >= 1);
  CHECK(with_tail_probe + srtt < by_timeout);
  // The probe follows the tail on its path, so the reply that lacks the
  // tail condemns it at once (no reorder window): the tail probe's wait and
  // two round trips.
  CHECK(with_tail_probe < EngineConfig{}.tail_probe_delay + 2 * srtt + srtt / 2);
}

TEST_CASE("a late reply to an earlier loss probe condemns nothing sent after that probe") {
  // Small WRITEs posted 3 us apart over a 40 us round trip: each ends a
  // flight, and a dozen probes are in the air when a reply comes back.
  auto cfg = basic();
  cfg.link.delay_ns = 20'000;
  Pair p(cfg);
  const QpInfo before = p.info(0);
  for (uint64_t i = 0; i < 200; ++i) {
    REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 64, i * 64)) == 0);
    p.net.run_until(p.net.now() + 3'000);
  }
  p.net.run_until_idle(p.net.now() + 10'000'000);
  REQUIRE(p.net.completions(0).size() == 200);
  const QpInfo after = p.info(0);
  CHECK(after.ctr[QpCtr::tx_tail_probes] - before.ctr[QpCtr::tx_tail_probes] > 50);
  CHECK(after.ctr[QpCtr::tx_retransmits] == before.ctr[QpCtr::tx_retransmits]);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 200 * 64) == 0);
}

TEST_CASE("a late reply to a probe of an earlier timeout series condemns nothing of the next series' flight") {
  // One path and EV, no tail probes: the probe timeout's series alone.
  auto cfg = basic(Transport::mrc, 1);
  cfg.engine_template.tail_probe_delay = kNever;
  QpAttr attr;
  attr.ev.evs = {EvEntry{0xC000, 0}};
  Pair p(cfg, attr);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 100)) == 0);
  p.net.run_until_idle(p.net.now() + 1'000'000);  // an RTT sample
  const QpInfo before = p.info(0);

  // The responder's first probe reply is held until the test lets it go,
  // and so is everything else it sends while `holding`.
  struct Held {
    std::vector<uint8_t> frame;
    uint32_t wire_len;
  };
  std::vector<Held> held;
  std::optional<Held> first_reply;
  bool holding = false;
  auto release = [&p](Held& h) { p.net.downlink(0, 0).send(std::move(h.frame), 0, h.wire_len); };
  p.net.uplink(1, 0).set_sink([&](std::vector<uint8_t> f, uint64_t, uint32_t wire_len) {
    wire::Packet pk;
    const bool reply = wire::parse_frame(f, pk) == wire::ParseError::ok &&
                       pk.at.opcode == uint8_t(wire::Opcode::mrc_sack) && pk.seth().probe_reply();
    Held h{std::move(f), wire_len};
    if (reply && !first_reply) return static_cast<void>(first_reply = std::move(h));
    if (holding) return held.push_back(std::move(h));
    release(h);
  });
  auto probes = [&p] { return p.info(0).ctr[QpCtr::tx_probes]; };

  // Series A: a lost WRITE draws probes; the second one's reply has the
  // packet resent (no RTT sample is taken from it), and its SACK ends the series.
  int dropped = 0;
  drop_data_packet_once(p, before.snd_nxt, dropped);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(2, 64, 0)) == 0);
  p.net.run_until(p.net.now() + 100'000);
  REQUIRE(dropped == 1);
  REQUIRE(first_reply);
  REQUIRE(p.net.completions(0).size() == 2);
  const uint64_t resends = p.info(0).ctr[QpCtr::tx_retransmits] - before.ctr[QpCtr::tx_retransmits];
  REQUIRE(resends == 1);

  // Series B: eight packets reach the responder, their SACKs are held, and
  // the quiet draws a probe.
  holding = true;
  const uint64_t probes_before_b = probes();
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(3, 8 * 4096, 64)) == 0);
  for (int i = 0; i < 1000 && probes() == probes_before_b; ++i) p.net.run_until(p.net.now() + 100);
  REQUIRE(probes() == probes_before_b + 1);
  // Series A's first reply arrives now. The responder sent it before any of
  // the eight arrived, so it says nothing about them.
  release(*first_reply);
  p.net.run_until(p.net.now() + 5'000);
  CHECK(p.info(0).ctr[QpCtr::tx_retransmits] - before.ctr[QpCtr::tx_retransmits] == resends);
  holding = false;
  for (Held& h : held) release(h);
  p.net.run_until_idle(p.net.now() + 10'000'000);
  REQUIRE(p.net.completions(0).size() == 3);
  const QpInfo after = p.info(0);
  CHECK(after.ctr[QpCtr::tx_retransmits] - before.ctr[QpCtr::tx_retransmits] == resends);
  CHECK(after.ctr[QpCtr::rto_fired] == before.ctr[QpCtr::rto_fired]);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 64 + 8 * 4096) == 0);
}

TEST_CASE("data sent in the tail probe's own instant, after it, is not condemned by its reply") {
  // One path, so everything follows the probe on it; a poll services the
  // probe's timer before it transmits the WRITE posted at that instant.
  auto cfg = basic(Transport::mrc, 1);
  QpAttr attr;
  attr.ev.evs = {EvEntry{0xC000, 0}};
  attr.mpr = 1;
  Pair p(cfg, attr);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 100)) == 0);
  p.net.run_until_idle(p.net.now() + 1'000'000);  // an RTT sample
  const QpInfo before = p.info(0);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(2, 64, 0)) == 0);
  const Nanos due = p.net.now() + EngineConfig{}.tail_probe_delay;
  p.net.run_until(due);
  REQUIRE(p.info(0).ctr[QpCtr::tx_tail_probes] - before.ctr[QpCtr::tx_tail_probes] == 1);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(3, 250 * 4096, 4096)) == 0);
  p.net.run_until_idle(p.net.now() + 10'000'000);
  REQUIRE(p.net.completions(0).size() == 3);
  const QpInfo after = p.info(0);
  CHECK(after.ctr[QpCtr::tx_retransmits] == before.ctr[QpCtr::tx_retransmits]);
  CHECK(after.ctr[QpCtr::ev_marked_bad] == before.ctr[QpCtr::ev_marked_bad]);
  CHECK(std::memcmp(p.src.data() + 4096, p.dst.data() + 4096, 250 * 4096) == 0);
}

TEST_CASE("work requests MRC cannot execute complete with an error and send nothing") {
  Pair p(basic());
  SendWr ok = p.write(1, 5000);
  SendWr bad_op = p.write(2, 100);
  bad_op.opcode = GENERATE(WrOpcode::send, WrOpcode::rdma_read, WrOpcode::atomic);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, ok) == 0);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, bad_op) == 0);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(3, 100)) == 0);
  p.net.run_until_idle(10'000'000);
  const auto& c = p.net.completions(0);
  REQUIRE(c.size() == 3);
  CHECK(c[0].status == WcStatus::success);  // the WR before completes normally
  CHECK(c[1].status == WcStatus::loc_qp_op_err);
  CHECK(c[2].status == WcStatus::wr_flush_err);
  const QpInfo qi = p.info(0);
  CHECK(qi.ctr[QpCtr::wqe_bad_opcode] == 1);
  CHECK(qi.ctr[QpCtr::tx_data_pkts] == 2);  // 5000 bytes at 4 KB MTU; nothing of the bad one
  CHECK(qi.state == QpState::error);
}

TEST_CASE("a bad lkey or a local range outside the region fails locally") {
  Pair p(basic());
  SendWr w = p.write(1, 100);
  const bool bad_key = GENERATE(true, false);
  if (bad_key)
    w.lkey ^= 0x100000;
  else
    w.local_addr = 0x1000 + p.src.size() - 50;  // runs 50 bytes past the end
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, w) == 0);
  p.net.run_until_idle(10'000'000);
  REQUIRE(p.net.completions(0).size() == 1);
  CHECK(p.net.completions(0)[0].status == WcStatus::loc_prot_err);
  CHECK(p.info(0).ctr[bad_key ? QpCtr::wqe_bad_lkey : QpCtr::wqe_bad_length] == 1);
  CHECK(p.info(0).ctr[QpCtr::tx_data_pkts] == 0);
}

TEST_CASE("a bad rkey, a region without remote write, or an out-of-bounds address is refused by the responder") {
  const int which = GENERATE(0, 1, 2);
  const auto transport = GENERATE(Transport::mrc, Transport::rocev2);
  INFO("case " << which << (transport == Transport::mrc ? " mrc" : " rocev2"));
  Pair p(basic(transport), {}, which == 1 ? kAccessLocalWrite : kAccessLocalWrite | kAccessRemoteWrite);
  SendWr w = p.write(1, 9000);
  if (which == 0) w.rkey ^= 0x1000;
  if (which == 2) w.remote_addr = 0x900000 + p.dst.size() - 4096;
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, w) == 0);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(2, 100, 500000)) == 0);
  p.net.run_until_idle(10'000'000);
  const auto& c = p.net.completions(0);
  REQUIRE(c.size() == 2);
  if (which == 1) {
    // Both WRs target the closed region: whichever refusal arrives first
    // fails its WR, and the other is flushed.
    CHECK(((c[0].status == WcStatus::rem_access_err) != (c[1].status == WcStatus::rem_access_err)));
    CHECK(((c[0].status == WcStatus::wr_flush_err) != (c[1].status == WcStatus::wr_flush_err)));
  } else {
    CHECK(c[0].status == WcStatus::rem_access_err);
    CHECK(c[1].status == WcStatus::wr_flush_err);
  }
  CHECK(p.info(0).state == QpState::error);
  const QpCtr ctr = which == 0   ? QpCtr::rx_drop_bad_rkey
                    : which == 1 ? QpCtr::rx_drop_no_access
                                 : QpCtr::rx_drop_out_of_bounds;
  CHECK(p.info(1).ctr[ctr] >= 1);
  // Refused packets wrote nothing. (Out of bounds, the packets that fell
  // inside the region were placed: the region is the limit, not the message.)
  if (which != 2) CHECK(std::all_of(p.dst.begin(), p.dst.begin() + 9000, [](uint8_t b) { return b == 0; }));
}

TEST_CASE("a denied EV carries no more traffic, and a restored one does again") {
  QpAttr a;
  for (uint32_t i = 0; i < 8; ++i) a.ev.evs.push_back(EvEntry{0xC000 + i, static_cast<uint8_t>(i % 4)});
  Pair p(basic(), a);
  REQUIRE(p.net.engine(0).set_ev_state(p.qp.qpn_a, 3, EvState::denied, p.net.now()));
  for (uint64_t i = 0; i < 20; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 40000, i * 40000)) == 0);
  p.net.run_until_idle(50'000'000);
  auto evs = p.net.engine(0).ev_info(p.qp.qpn_a);
  CHECK(evs[3].state == EvState::denied);
  CHECK(evs[3].ctr[EvCtr::tx_pkts] == 0);
  CHECK(evs[7].ctr[EvCtr::tx_pkts] > 0);  // the other EV of that plane took its share
  CHECK(p.net.completions(0).size() == 20);
  // The EVs' counters add up to the QP's: every packet sent on one EV, and
  // each SACK credited to the EV of the packet that drew it.
  uint64_t ev_sent = 0, ev_acks = 0;
  for (const auto& e : evs) ev_sent += e.ctr[EvCtr::tx_pkts], ev_acks += e.ctr[EvCtr::acks];
  CHECK(ev_sent == p.info(0).ctr[QpCtr::tx_data_pkts]);
  CHECK(ev_acks > 0);
  CHECK(ev_acks <= p.info(0).ctr[QpCtr::rx_acks]);

  REQUIRE(p.net.engine(0).set_ev_state(p.qp.qpn_a, 3, EvState::good, p.net.now()));
  p.net.poll(0);
  for (uint64_t i = 0; i < 10; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(100 + i, 40000, i * 40000)) == 0);
  p.net.run_until_idle(p.net.now() + 50'000'000);
  CHECK(p.net.engine(0).ev_info(p.qp.qpn_a)[3].ctr[EvCtr::tx_pkts] > 0);
}

TEST_CASE("a silently failed plane's EVs become ASSUMED_BAD with events, and come back when it heals") {
  Pair p(basic());
  p.net.set_plane_up(2, false);
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
  p.net.run_until_idle(20'000'000);
  REQUIRE(p.net.completions(0).size() == 16);
  for (const auto& c : p.net.completions(0)) CHECK(c.status == WcStatus::success);
  auto evs = p.net.engine(0).ev_info(p.qp.qpn_a);
  size_t bad_on_2 = 0, bad_elsewhere = 0;
  for (const auto& e : evs) {
    if (e.state != EvState::assumed_bad) continue;
    (e.plane == 2 ? bad_on_2 : bad_elsewhere)++;
  }
  CHECK(bad_on_2 > 0);
  CHECK(bad_elsewhere == 0);
  CHECK_FALSE(p.net.ev_events(0).empty());
  // Default EVs are 0xC000 + i on plane i % 4. Queueing differences between
  // planes may briefly cost a healthy EV its place (a probe brings it back),
  // but the failed plane's EVs only ever go down.
  size_t plane2_events = 0;
  for (const auto& ev : p.net.ev_events(0)) {
    if ((ev.ev - 0xC000) % 4 != 2) continue;
    ++plane2_events;
    INFO("ev " << std::hex << ev.ev << " at " << std::dec << ev.t);
    CHECK(ev.to == EvState::assumed_bad);
  }
  CHECK(plane2_events > 0);

  p.net.set_plane_up(2, true);
  p.net.run_until(p.net.now() + 10'000'000);  // probes back off to at most 2 ms
  evs = p.net.engine(0).ev_info(p.qp.qpn_a);
  for (const auto& e : evs) CHECK(e.state == EvState::good);
  bool recovered_event = false;
  for (const auto& ev : p.net.ev_events(0)) recovered_event |= ev.to == EvState::good;
  CHECK(recovered_event);
}

TEST_CASE("consecutive losses on one plane take all of its EVs out at once; scattered losses do not") {
  // Silent failure mid-transfer: the plane goes ASSUMED_BAD as a whole after
  // plane_silent_losses losses, long before every EV has lost a packet.
  auto silent = [](uint32_t threshold) {
    auto cfg = basic();
    cfg.engine_template.plane_silent_losses = threshold;
    QpAttr a;  // a small window keeps the sender choosing planes after the failure
    a.cc.algo = CcAlgo::none;
    a.cc.fixed_window_bytes = 64 * 1024;
    auto p = std::make_unique<Pair>(cfg, a);
    for (uint64_t i = 0; i < 16; ++i) REQUIRE(p->net.post_send(0, p->qp.qpn_a, p->write(i, 60000, i * 60000)) == 0);
    p->net.at(p->net.now() + 5'000, [&net = p->net] { net.set_plane_up(1, false); });
    p->net.run_until_idle(20'000'000);
    REQUIRE(p->net.completions(0).size() == 16);
    for (const auto& c : p->net.completions(0)) CHECK(c.status == WcStatus::success);
    CHECK(std::memcmp(p->src.data(), p->dst.data(), 16 * 60000) == 0);
    return p;
  };
  // Packets sent into plane 1, and how many of its EVs end ASSUMED_BAD.
  auto plane1 = [](Pair& p) {
    uint64_t sent = 0;
    size_t bad = 0, evs = 0;
    for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) {
      if (e.plane != 1) continue;
      ++evs;
      bad += e.state == EvState::assumed_bad;
      sent += e.ctr[EvCtr::tx_pkts] + e.ctr[EvCtr::rtx_pkts];
    }
    return std::tuple{sent, bad, evs};
  };
  auto with = silent(8);
  auto without = silent(0);
  CHECK(with->info(0).ctr[QpCtr::plane_silent] >= 1);
  CHECK(without->info(0).ctr[QpCtr::plane_silent] == 0);
  const auto [sent_with, bad_with, evs_with] = plane1(*with);
  const auto [sent_without, bad_without, evs_without] = plane1(*without);
  CHECK(bad_with == evs_with);         // the whole plane, probed back from here
  // A dead plane delivers nothing sent after its failure to prove it late.
  CHECK(with->info(0).ctr[QpCtr::plane_silent_disproved] == 0);
  CHECK(with->info(0).ctr[QpCtr::ev_loss_disproved] == 0);
  CHECK(sent_with < sent_without);     // fewer packets thrown into the dead plane
  CHECK(with->info(0).ctr[QpCtr::tx_retransmits] < without->info(0).ctr[QpCtr::tx_retransmits]);

  // 1 % random loss on every link: losses are spread over planes and
  // acknowledged packets in between reset the count.
  auto cfg = basic();
  cfg.link.loss = 0.01;
  Pair lossy(cfg);
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(lossy.net.post_send(0, lossy.qp.qpn_a, lossy.write(i, 60000, i * 60000)) == 0);
  lossy.net.run_until_idle(50'000'000);
  REQUIRE(lossy.net.completions(0).size() == 16);
  CHECK(lossy.info(0).ctr[QpCtr::tx_retransmits] > 0);
  CHECK(lossy.info(0).ctr[QpCtr::plane_silent] == 0);
}

TEST_CASE("a port status update stops traffic on the peer's downed plane at once") {
  Pair p(basic());
  p.net.engine(1).set_plane_up(3, false, p.net.now());
  p.net.engine(1).send_port_status(p.net.now());
  p.net.poll(1);
  p.net.run_until(p.net.now() + 10'000);
  for (uint64_t i = 0; i < 8; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
  p.net.run_until_idle(p.net.now() + 20'000'000);
  CHECK(p.net.completions(0).size() == 8);
  for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) {
    if (e.plane == 3) {
      CHECK(e.ctr[EvCtr::tx_pkts] == 0);
      CHECK(e.state == EvState::assumed_bad);
    }
  }
  CHECK(p.info(0).ctr[QpCtr::tx_retransmits] == 0);  // nothing was lost finding out
}

TEST_CASE("a plane going down mid-transfer, at the peer or here, resends what was in flight on it at once") {
  for (const bool at_peer : {true, false}) {
    INFO((at_peer ? "the peer's port, told by port status" : "this host's own port"));
    auto cfg = basic();
    // No probe behind the flight: its reply can condemn a resend still queued
    // behind data on another plane (a needless copy, not what this is about).
    cfg.engine_template.tail_probe_delay = kNever;
    Pair p(cfg);
    for (uint64_t i = 0; i < 8; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
    p.net.run_until(p.net.now() + 4'000);
    REQUIRE(p.net.completions(0).size() < 8);
    p.net.set_plane_up(3, false);  // the plane dies with packets on it
    if (at_peer) {
      p.net.engine(1).set_plane_up(3, false, p.net.now());
      p.net.engine(1).send_port_status(p.net.now());
      p.net.poll(1);
    } else {
      p.net.engine(0).set_plane_up(3, false, p.net.now());
      p.net.poll(0);
    }
    p.net.run_until_idle(p.net.now() + 20'000'000);
    REQUIRE(p.net.completions(0).size() == 8);
    CHECK(std::memcmp(p.src.data(), p.dst.data(), 8 * 60000) == 0);
    const QpInfo qi = p.info(0);
    CHECK(qi.ctr[QpCtr::rtx_plane_down] > 0);
    // None of them waited to be found lost by SACKs, the reorder timer or a probe.
    CHECK(qi.ctr[QpCtr::rtx_sack] == 0);
    CHECK(qi.ctr[QpCtr::tx_retransmits] == qi.ctr[QpCtr::rtx_plane_down]);
  }
}

TEST_CASE("a swept plane is probed through one of its EVs, and that EV's answer brings them all back") {
  // Each of a swept plane's EVs probed at once filled a software port's ring
  // with probes, and the data queued behind them, late, set off the next sweep.
  // peer_reports: while the plane is out, its peer also reports it down,
  // then up, which gives every EV of the plane a new cause to be out.
  auto run = [](uint32_t threshold, bool peer_reports = false) {
    auto cfg = basic();
    cfg.engine_template.plane_silent_losses = threshold;
    QpAttr a;
    a.cc.algo = CcAlgo::none;
    a.cc.fixed_window_bytes = 64 * 1024;
    auto p = std::make_unique<Pair>(cfg, a);
    for (uint64_t i = 0; i < 16; ++i) REQUIRE(p->net.post_send(0, p->qp.qpn_a, p->write(i, 60000, i * 60000)) == 0);
    p->net.at(p->net.now() + 5'000, [&net = p->net] { net.set_plane_up(1, false); });
    p->net.run_until(p->net.now() + 3'000'000);
    REQUIRE(p->net.completions(0).size() == 16);
    if (peer_reports) {
      REQUIRE(((p->info(0).swept_planes >> 1) & 1) == 1);
      REQUIRE(p->net.engine(1).send_endpoint_request(0, p->net.addr(0, 0), wire::EvFormat::udp, 0xC000,
                                                     uint8_t(wire::EndpointOp::port_status_update), 1, 1u << 1, 0,
                                                     p->net.now()));
      p->net.poll(1);
      p->net.run_until(p->net.now() + 10'000);
      REQUIRE(p->info(0).ctr[QpCtr::plane_silent] >= 1);
      // The report gave every swept EV a new cause: the sweep holds none of
      // them out, so it no longer blocks their own late packets either.
      CHECK(p->info(0).peer_planes_down == 1u << 1);
      CHECK(p->info(0).swept_planes == 0);
      p->net.engine(1).send_port_status(p->net.now());  // all up
      p->net.poll(1);
      p->net.run_until(p->net.now() + 10'000);
    }
    p->net.set_plane_up(1, true);
    p->net.run_until(p->net.now() + 5'000'000);  // probes back off to at most 2 ms
    size_t evs = 0, probed = 0, good = 0;
    for (const auto& e : p->net.engine(0).ev_info(p->qp.qpn_a)) {
      if (e.plane != 1) continue;
      ++evs;
      probed += e.ctr[EvCtr::probes] > 0;
      good += e.state == EvState::good;
    }
    INFO("threshold " << threshold << (peer_reports ? ", peer reports" : "") << ": " << probed << " of " << evs
                      << " EVs probed");
    CHECK(good == evs);
    return std::tuple{p->info(0), evs, probed};
  };
  const auto [swept, evs, probed_swept] = run(8);
  const auto [one_by_one, evs_too, probed_one_by_one] = run(0);
  REQUIRE(evs > 4);
  CHECK(swept.ctr[QpCtr::plane_silent] >= 1);
  CHECK(swept.ctr[QpCtr::plane_sweep_probed_back] >= 1);
  // One prober for the sweep, plus the EVs out for losses of their own.
  CHECK(probed_swept < evs / 2);
  CHECK(probed_one_by_one == evs_too);  // no sweep: every EV out, every EV probed
  CHECK(swept.ctr[QpCtr::tx_probes] < one_by_one.ctr[QpCtr::tx_probes] / 2);
  // Swept EVs given a new cause are probed on their own again: none is left
  // out for good (the CHECK in run).
  run(8, true);
}

TEST_CASE("a swept plane whose scout's own path stays broken comes back through another EV") {
  auto cfg = basic();
  QpAttr a;
  a.cc.algo = CcAlgo::none;
  a.cc.fixed_window_bytes = 64 * 1024;
  Pair p(cfg, a);
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
  p.net.at(p.net.now() + 5'000, [&net = p.net] { net.set_plane_up(1, false); });
  p.net.run_until(p.net.now() + 3'000'000);
  REQUIRE(p.net.completions(0).size() == 16);
  REQUIRE(p.info(0).ctr[QpCtr::plane_silent] >= 1);
  // The plane comes back, but for the path of the first EV probed from now
  // on (the scout): every frame on that EV is lost.
  p.net.set_plane_up(1, true);
  int blocked = -1;
  p.net.uplink(0, 1).set_sink([&](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
    REQUIRE(f.size() > 42);
    const int port = f[34] << 8 | f[35];
    if (blocked < 0 && f[42] == 0xDE) blocked = port;  // Ethernet, IPv4, UDP, then the BTH opcode
    if (port == blocked) return;
    p.net.downlink(1, 1).send(std::move(f), 0, wire);
  });
  const auto plane_good = [&] { return p.good_on_plane(1); };
  // The scout's next probe goes out on another EV's path, at most the
  // longest probe interval (2 ms) on, and its answer brings the whole plane
  // back. A scout whose probes went unanswered used to give up and probe
  // on its own, so its broken path stayed out.
  const uint64_t back_before = p.info(0).ctr[QpCtr::plane_sweep_probed_back];
  p.net.run_until(p.net.now() + 2'500'000);
  REQUIRE(blocked >= 0);
  CHECK(p.info(0).ctr[QpCtr::plane_sweep_probed_back] == back_before + 1);
  const auto [evs, good] = plane_good();
  INFO(good << " of " << evs << " EVs of the plane back");
  CHECK(good == evs);
  // The broken path came back with its plane; its own losses take it out.
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(16 + i, 60000, i * 60000)) == 0);
  p.net.run_until(p.net.now() + 10'000'000);
  REQUIRE(p.net.completions(0).size() == 32);
  CHECK(plane_good().second == evs - 1);
}

TEST_CASE("a port that goes down and up does not bring back an EV its own losses took out") {
  Pair p(basic());
  // One path of plane 1 is broken: every frame on the first EV data used.
  int blocked = -1;
  p.net.uplink(0, 1).set_sink([&](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
    REQUIRE(f.size() > 42);
    const int port = f[34] << 8 | f[35];
    if (blocked < 0 && f[42] != 0xDE) blocked = port;  // Ethernet, IPv4, UDP, then the BTH opcode
    if (port == blocked) return;
    p.net.downlink(1, 1).send(std::move(f), 0, wire);
  });
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
  p.net.run_until(p.net.now() + 3'000'000);
  REQUIRE(p.net.completions(0).size() == 16);
  REQUIRE(blocked >= 0);
  const auto plane_states = [&] {
    std::map<EvState, size_t> n;
    EvState broken = EvState::denied;
    for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) {
      if (e.plane != 1) continue;
      if (int(e.value) == blocked)
        broken = e.state;
      else
        ++n[e.state];
    }
    return std::pair{broken, n};
  };
  REQUIRE(plane_states().first == EvState::assumed_bad);  // out for its own losses
  // The port flaps: the plane's EVs go out whole and one scout's answer
  // brings them back, but not the broken path, which waits for its own.
  const uint64_t back_before = p.info(0).ctr[QpCtr::plane_sweep_probed_back];
  p.net.engine(0).set_plane_up(1, false, p.net.now());
  p.net.run_until(p.net.now() + 10'000);
  p.net.engine(0).set_plane_up(1, true, p.net.now());
  p.net.poll(0);
  p.net.run_until(p.net.now() + 300'000);
  CHECK(p.info(0).ctr[QpCtr::plane_sweep_probed_back] == back_before + 1);
  const auto [broken, others] = plane_states();
  CHECK(broken == EvState::assumed_bad);
  CHECK(others.size() == 1);
  CHECK(others.count(EvState::good) == 1);
}

TEST_CASE("a dead plane draws only its scout's probes, not those of EVs out for their own losses") {
  Pair p(basic());
  // One path of plane 1 is broken first: the EV data used first goes out
  // for its own losses. Then the whole plane dies, silently.
  int blocked = -1;
  bool dead = false;
  p.net.uplink(0, 1).set_sink([&](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
    REQUIRE(f.size() > 42);
    const int port = f[34] << 8 | f[35];
    if (blocked < 0 && f[42] != 0xDE) blocked = port;  // Ethernet, IPv4, UDP, then the BTH opcode
    if (dead || port == blocked) return;
    p.net.downlink(1, 1).send(std::move(f), 0, wire);
  });
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
  p.net.run_until(p.net.now() + 3'000'000);
  REQUIRE(p.net.completions(0).size() == 16);
  dead = true;
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(16 + i, 60000, i * 60000)) == 0);
  p.net.run_until(p.net.now() + 3'000'000);
  REQUIRE(p.net.completions(0).size() == 32);
  REQUIRE(p.info(0).ctr[QpCtr::plane_silent] >= 1);
  const auto plane_probes = [&] {
    uint64_t n = 0, out_alone = 0;
    for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) {
      if (e.plane != 1) continue;
      n += e.ctr[EvCtr::probes];
      out_alone += int(e.value) == blocked && e.state == EvState::assumed_bad;
    }
    return std::pair{n, out_alone};
  };
  const auto [before, out_alone] = plane_probes();
  REQUIRE(out_alone == 1);
  // 20 ms with the back-off at its 2 ms ceiling: about 10 probes from the
  // scout. The broken path's EV probing too doubled that.
  p.net.run_until(p.net.now() + 20'000'000);
  const uint64_t probes = plane_probes().first - before;
  INFO(probes << " probes on the dead plane in 20 ms");
  CHECK(probes >= 9);
  CHECK(probes <= 12);
}

TEST_CASE("a plane the peer reports back up is probed at once, though an idle QP had parked its probes") {
  Pair p(basic());
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
  p.net.run_until(p.net.now() + 2'000'000);
  REQUIRE(p.net.completions(0).size() == 4);
  // The requester's plane 1 fails and it says so: the responder, which sends
  // no data, takes that plane's EVs out and probes them into silence.
  p.requester_plane_reported(1, false);
  p.net.run_until(p.net.now() + 200'000'000);  // long enough to give up and park
  size_t out = 0;
  for (const auto& e : p.net.engine(1).ev_info(p.qp.qpn_b)) out += e.plane == 1 && e.state == EvState::assumed_bad;
  REQUIRE(out == p.good_on_plane(1, 1).first);
  REQUIRE(p.info(1).ctr[QpCtr::probes_parked] > 0);
  p.requester_plane_reported(1, true);
  p.net.run_until(p.net.now() + 1'000'000);
  const auto [evs, good] = p.good_on_plane(1, 1);
  INFO(good << " of " << evs << " of the responder's plane-1 EVs back");
  CHECK(evs > 0);
  CHECK(good == evs);
}

// An EV out for a cause of its own waits, held back, while its plane's
// scout probes; the scout's answer sets it probing again. An idle QP whose
// probes had parked (the responder, which posts nothing) kept it held back
// for good, though the plane came back and was probed at once.
TEST_CASE("an EV held back behind a dead plane's scout is probed when the plane comes back, though its QP had parked") {
  Pair p(basic());
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
  p.net.run_until(p.net.now() + 2'000'000);
  REQUIRE(p.net.completions(0).size() == 4);
  // The requester's plane 1 fails and it says so: the responder takes the
  // plane out whole. Then its controller takes one of the plane's EVs out
  // for a cause of its own (5: plane 1 of 4).
  p.requester_plane_reported(1, false);
  p.net.run_until(p.net.now() + 100'000);
  REQUIRE(p.net.engine(1).ev_info(p.qp.qpn_b)[5].plane == 1);
  REQUIRE(p.net.engine(1).set_ev_state(p.qp.qpn_b, 5, EvState::assumed_bad, p.net.now()));
  p.net.run_until(p.net.now() + 200'000'000);  // long enough to give up and park
  REQUIRE(p.info(1).ctr[QpCtr::probes_parked] > 0);
  p.requester_plane_reported(1, true);
  p.net.run_until(p.net.now() + 1'000'000);
  const auto [evs, good] = p.good_on_plane(1, 1);
  INFO(good << " of " << evs << " of the responder's plane-1 EVs back; EV 5 "
            << int(p.net.engine(1).ev_info(p.qp.qpn_b)[5].state));
  CHECK(p.info(1).ctr[QpCtr::plane_sweep_probed_back] >= 1);
  CHECK(evs == 16);
  CHECK(good == evs);
  CHECK(p.net.engine(1).bad_evs_probed());
}

TEST_CASE("a plane that comes back up is probed at once, then at the probe interval, not on every poll") {
  Pair p(basic());
  p.net.set_plane_up(2, false);  // its links stay dead, so no probe is answered
  p.net.engine(0).set_plane_up(2, false, p.net.now());
  p.net.run_until(p.net.now() + 10'000);
  p.net.engine(0).set_plane_up(2, true, p.net.now());
  p.net.poll(0);
  const uint64_t events_before = p.net.loop().stats().run;
  p.net.run_until(p.net.now() + 1'000'000);
  size_t evs_on_plane = 0;
  for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) evs_on_plane += e.plane == 2;
  REQUIRE(evs_on_plane > 0);
  // At once, then 50, 150, 350 and 750 us later with the default interval
  // and back-off; a back-off stuck at zero probed on every poll (one per ns).
  // One scout probes for the plane, each probe on the next EV's path.
  REQUIRE(evs_on_plane >= 5);
  size_t evs_probed = 0;
  for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a))
    if (e.plane == 2) evs_probed += e.ctr[EvCtr::probes] == 1;
  CHECK(p.info(0).ctr[QpCtr::tx_probes] == 5);
  CHECK(evs_probed == 5);
  CHECK(p.net.loop().stats().run - events_before < 1000);
}

// The floor on a probe's round trip (half the least one seen) is learnt
// only from answers it lets through. A first answer that waited behind a
// queue set it high, and every later answer on the quiet fabric came
// sooner than the floor: turned away as unmatched, for good, and the plane
// never came back.
TEST_CASE("a probe answered slowly once does not turn away every quicker answer after it") {
  auto cfg = basic();
  cfg.engine_template.probe_confirmations = 2;
  Pair p(cfg);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(0, 1000)) == 0);
  p.net.run_until(p.net.now() + 100'000);
  REQUIRE(p.net.completions(0).size() == 1);
  // The first probe on plane 2 is held 40 us (behind data, say): less than
  // the probe interval, so its answer is the first one counted.
  bool held = false;
  p.net.uplink(0, 2).set_sink([&](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
    if (!held && f[42] == 0xDE) {  // Ethernet, IPv4, UDP, then the BTH opcode: a probe
      held = true;
      p.net.at(p.net.now() + 40'000,
               [&p, f = std::move(f), wire]() mutable { p.net.downlink(1, 2).send(std::move(f), 0, wire); });
      return;
    }
    p.net.downlink(1, 2).send(std::move(f), 0, wire);
  });
  p.net.engine(0).set_plane_up(2, false, p.net.now());
  p.net.run_until(p.net.now() + 10'000);
  p.net.engine(0).set_plane_up(2, true, p.net.now());
  p.net.poll(0);
  for (uint64_t i = 0; i < 8; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1 + i, 60000, i * 60000)) == 0);
  p.net.run_until(p.net.now() + 20'000'000);
  REQUIRE(held);
  const auto [on_plane, good] = p.good_on_plane(2);
  const QpInfo qi = p.info(0);
  INFO(good << " of " << on_plane << " back; " << qi.ctr[QpCtr::rx_probe_replies_unmatched] << " of "
            << qi.ctr[QpCtr::rx_probe_replies] << " answers unmatched");
  CHECK(good == on_plane);
  CHECK(qi.ctr[QpCtr::rx_probe_replies_unmatched] == 0);
}

TEST_CASE("an EV goes back into service only after probe_confirmations answered probes in a row") {
  // Plane 2's EVs are taken out; when the plane comes back, every probe an
  // EV sends is answered, or (lossy) every second one of each EV is lost:
  // answered, lost, answered, ... never two in a row. With dup, every reply
  // also arrives twice, which must not count as two probes answered.
  enum class Path { clean, lossy, lossy_dup };
  const uint32_t idle_limit = EngineConfig{}.idle_probe_limit;
  const std::pair<Path, uint32_t> cases[] = {{Path::clean, 1},
                                             {Path::clean, 2},
                                             {Path::clean, 3},
                                             {Path::lossy, 1},
                                             {Path::lossy, 2},
                                             {Path::lossy, 3},
                                             {Path::lossy_dup, 2},
                                             // More answers than the idle QP's limit of unanswered probes: answered
                                             // probes are not counted against it.
                                             {Path::clean, idle_limit + 1}};
  for (const auto& [path, need] : cases) {
    INFO((path == Path::clean   ? "every probe answered"
          : path == Path::lossy ? "every second probe of each EV lost"
                                : "every second probe lost, every reply twice")
         << ", confirmations " << need);
    auto cfg = basic();
    cfg.engine_template.probe_confirmations = need;
    Pair p(cfg);
    // A write first, for a round-trip time: a reply sooner than half the
    // least one cannot answer the probe just sent.
    REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(0, 1000)) == 0);
    p.net.run_until(p.net.now() + 100'000);
    REQUIRE(p.net.completions(0).size() == 1);
    const uint64_t probes_before = p.info(0).ctr[QpCtr::tx_probes];
    std::map<uint16_t, uint32_t> probes_by_port;
    p.net.uplink(0, 2).set_sink([&](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
      // Ethernet, IPv4 without options, then the UDP source port: the EV.
      REQUIRE(f.size() > 36);
      REQUIRE((f[12] << 8 | f[13]) == 0x0800);
      const uint16_t port = uint16_t(f[34] << 8 | f[35]);
      if (path != Path::clean && ++probes_by_port[port] % 2 == 0) return;
      p.net.downlink(1, 2).send(std::move(f), 0, wire);
    });
    if (path == Path::lossy_dup) {
      p.net.uplink(1, 2).set_sink([&](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
        p.net.downlink(0, 2).send(std::vector<uint8_t>(f), 0, wire);
        p.net.downlink(0, 2).send(std::move(f), 0, wire);
      });
    }
    p.net.engine(0).set_plane_up(2, false, p.net.now());
    p.net.run_until(p.net.now() + 10'000);
    p.net.engine(0).set_plane_up(2, true, p.net.now());
    p.net.poll(0);
    // A few round trips per answer needed: on a lossy path, well inside the
    // 50 us before an unanswered probe is sent again.
    p.net.run_until(p.net.now() + (path == Path::clean ? need * 10'000 : 30'000));
    auto good_on_plane = [&] { return p.good_on_plane(2); };
    const auto [on_plane, good_soon] = good_on_plane();
    REQUIRE(on_plane > 0);
    const bool back = path == Path::clean || need == 1;
    CHECK(good_soon == (back ? on_plane : 0));
    // Long enough for unanswered probes to be resent: a lossy path still
    // never gives two answers in a row.
    p.net.run_until(p.net.now() + 1'000'000);
    CHECK(good_on_plane().second == (back ? on_plane : 0));
    const QpInfo qi = p.info(0);
    // The plane's EVs went out together with its port: one scout probes
    // for them all, and its row of answers brings them back.
    CHECK(qi.ctr[QpCtr::ev_recovered] == (back ? 1 : 0));
    CHECK(qi.ctr[QpCtr::plane_sweep_probed_back] == (back ? 1 : 0));
    CHECK(qi.ctr[QpCtr::probes_parked] == 0);
    if (path == Path::clean) {
      CHECK(qi.ctr[QpCtr::tx_probes] - probes_before == need);
      CHECK(qi.ctr[QpCtr::ev_probe_confirming] == need - 1);
    } else if (need > 1) {
      CHECK(qi.ctr[QpCtr::ev_probe_confirming] >= 2);  // answers that kept being undone
    }
    if (path == Path::lossy_dup) CHECK(qi.ctr[QpCtr::rx_probe_replies_unmatched] >= 2);
  }
}

TEST_CASE("with payload tokens the engines touch no registered memory and each placement is checked") {
  enum Case { clean, corrupt, compact };
  for (const Case c : {clean, corrupt, compact}) {
    INFO((c == corrupt ? "corrupting links, no ICRC" : c == compact ? "no ICRC: compact frames" : "clean links"));
    sim::TestNet::Config cfg = basic();
    // Without ICRCs nothing stops a corrupted frame: its token reaches the ledger.
    cfg.engine_template.icrc_offload = c != clean;
    cfg.link.corrupt = c == corrupt ? 0.3 : 0;
    sim::TestNet net(cfg);
    // Frames of a 4 KB MTU are big enough to go compact, those of 256 B are not.
    const uint32_t kPmtu = c == compact ? 4096 : 256, kSlot = 1 << 20;
    uint32_t compact_frames = 0, other_frames = 0;
    for (uint32_t pl = 0; pl < cfg.planes; ++pl) {
      net.uplink(0, pl).set_sink([&, pl](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
        (wire > f.size() ? compact_frames : other_frames)++;
        net.downlink(1, pl).send(std::move(f), 0, wire);
      });
    }
    sim::PlacementLedger ledger;
    REQUIRE(ledger.reserve(1, 2, kSlot, kPmtu));  // inaccessible: a write there would fault
    std::vector<uint8_t> src(kSlot);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13 + 1);
    uint32_t lkey = 0, rkey = 0, x = 0;
    REQUIRE(net.engine(0).reg_mr(1, src.data(), 0x1000, src.size(), kAccessLocalWrite, lkey, x));
    REQUIRE(net.engine(1).reg_mr(1, ledger.region(0), 0x900000, 2 * kSlot, kAccessLocalWrite | kAccessRemoteWrite, x,
                                 rkey));
    QpAttr attr;
    attr.pmtu = kPmtu;
    const auto qp = net.connect_qp_pair(0, 1, attr, 1, 1);
    REQUIRE(qp);
    net.set_payload_tokens([&](uint32_t h, const sim::EngineHosts::Placement& p) { ledger.place(h, p); });
    // A long message into slot 0 and one too short for a token into slot 1.
    const std::pair<uint32_t, uint32_t> msgs[] = {{0, 100'003}, {1, 5}};
    for (const auto& [slot, len] : msgs) {
      ledger.expect(0, slot, 1, src.data() + 64 * slot, len);
      SendWr w;
      w.wr_id = slot;
      w.local_addr = 0x1000 + 64 * slot;
      w.length = len;
      w.lkey = lkey;
      w.remote_addr = 0x900000 + uint64_t(slot) * kSlot;
      w.rkey = rkey;
      REQUIRE(net.post_send(0, qp.qpn_a, w) == 0);
    }
    net.run_until_idle(net.now() + 50'000'000);
    REQUIRE(net.completions(0).size() == 2);
    if (c == corrupt) {
      CHECK(ledger.misplaced() > 0);
    } else {
      CHECK(ledger.misplaced() == 0);
      CHECK(ledger.take(0, 0));
      CHECK(ledger.take(0, 1));
    }
    // The long message's 25 packets, and none of the short one's.
    CHECK(compact_frames == (c == compact ? 25u : 0u));
    CHECK(other_frames > 0);
  }
}

TEST_CASE("ECN marks turn into SKIP marks and trims into NACKs and quick retransmits") {
  auto cfg = basic();
  cfg.link.queue_bytes = 256 * 1024;
  cfg.link.ecn_min_bytes = 8 * 1024;
  cfg.link.ecn_max_bytes = 32 * 1024;
  cfg.link.trim_bytes = 48 * 1024;
  cfg.link.rate_gbps = 25;  // the receiver's downlinks are the bottleneck
  QpAttr a;
  a.cc.algo = CcAlgo::none;
  a.cc.fixed_window_bytes = 4 << 20;  // overdrive the links on purpose
  Pair p(cfg, a);
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 65536, i * 65536)) == 0);
  p.net.run_until_idle(100'000'000);
  REQUIRE(p.net.completions(0).size() == 16);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 16 * 65536) == 0);
  const QpInfo tx = p.info(0), rx = p.info(1);
  CHECK(rx.ctr[QpCtr::rx_ecn_marked] > 0);
  CHECK(rx.ctr[QpCtr::rx_trimmed] > 0);
  CHECK(rx.ctr[QpCtr::tx_nacks] == rx.ctr[QpCtr::rx_trimmed]);
  CHECK(tx.ctr[QpCtr::rtx_nack] > 0);
  uint64_t ecn_on_evs = 0, trims_on_evs = 0;
  for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) {
    ecn_on_evs += e.ctr[EvCtr::ecn_marks];
    trims_on_evs += e.ctr[EvCtr::trims];
  }
  CHECK(ecn_on_evs > 0);
  CHECK(trims_on_evs == tx.ctr[QpCtr::rtx_nack]);
}

TEST_CASE("the responder NACKs PSNs beyond its window") {
  QpAttr a;
  a.mpr = 8;       // requester may run 1024 PSNs ahead ...
  a.mpr_dest = 1;  // ... but the responder tracks only 128
  a.cc.algo = CcAlgo::none;
  a.cc.fixed_window_bytes = 8 << 20;
  auto cfg = basic();
  cfg.link.loss = 0.01;  // a hole holds the window back
  Pair p(cfg, a);
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 256 * 1024, i * 256 * 1024)) == 0);
  p.net.run_until_idle(200'000'000);
  REQUIRE(p.net.completions(0).size() == 4);
  for (const auto& c : p.net.completions(0)) CHECK(c.status == WcStatus::success);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 1 << 20) == 0);
  CHECK(p.info(1).ctr[QpCtr::rx_drop_psn_oor] > 0);
}

TEST_CASE("WRITE_IMM with no posted receive moves the responder QP to ERROR") {
  Pair p(basic());
  SendWr w = p.write(1, 100);
  w.opcode = WrOpcode::rdma_write_with_imm;
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, w) == 0);
  p.net.run_until_idle(10'000'000);
  CHECK(p.info(1).state == QpState::error);
  CHECK(p.info(1).ctr[QpCtr::rx_drop_no_recv_wqe] == 1);
}

TEST_CASE("QP state machine: only verbs transitions, attributes checked") {
  sim::TestNet net(basic());
  Engine& e = net.engine(0);
  const uint32_t qpn = e.create_qp(1, {});
  REQUIRE(qpn);
  QpAttr a;
  CHECK(e.modify_qp(qpn, QpState::rts, a, 0) == ModifyError::bad_transition);
  CHECK(e.modify_qp(qpn, QpState::init, a, 0) == ModifyError::ok);
  QpAttr bad = a;
  bad.pmtu = 100;
  CHECK(e.modify_qp(qpn, QpState::rtr, bad, 0) == ModifyError::bad_attr);
  a.remote = net.addrs(1);
  CHECK(e.modify_qp(qpn, QpState::rtr, a, 0) == ModifyError::ok);
  bad = a;
  bad.retry_linear = 8;
  CHECK(e.modify_qp(qpn, QpState::rts, bad, 0) == ModifyError::bad_attr);
  bad = a;
  bad.timeout = 25;
  CHECK(e.modify_qp(qpn, QpState::rts, bad, 0) == ModifyError::bad_attr);
  CHECK(e.modify_qp(qpn, QpState::rts, a, 0) == ModifyError::ok);
  CHECK(e.modify_qp(qpn, QpState::error, a, 0) == ModifyError::ok);
  QpInfo qi;
  REQUIRE(e.qp_info(qpn, qi));
  CHECK(qi.state == QpState::error);
  CHECK(e.modify_qp(qpn, QpState::reset, a, 0) == ModifyError::ok);
  REQUIRE(e.qp_info(qpn, qi));
  CHECK(qi.state == QpState::reset);
  CHECK(e.modify_qp(0xFFFFF, QpState::init, a, 0) == ModifyError::no_qp);
  CHECK(ack_timeout_ns(Transport::mrc, 8) == 262144);
  CHECK(ack_timeout_ns(Transport::rocev2, 8) == 1048576);
}

TEST_CASE("prefetching for a frame or a poll reads only inside the engine's state and changes nothing") {
  Pair p(basic());
  // Frames as they travel, for replaying at the engines' prefetch.
  std::vector<std::vector<uint8_t>> seen;
  for (uint32_t pl = 0; pl < p.net.config().planes; ++pl)
    for (uint32_t h : {0u, 1u})
      p.net.uplink(h, pl).set_tap(
          [&seen](std::span<const uint8_t> f, Nanos) { seen.emplace_back(f.begin(), f.end()); });
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 64 * 1024)) == 0);
  p.net.run_until_idle(p.net.now() + 10'000'000);
  REQUIRE(seen.size() > 16);
  for (uint32_t h : {0u, 1u}) {
    Engine& e = p.net.engine(h);
    const Engine::PrefetchMap map = e.prefetch_map();
    const uint32_t qpn = h == 0 ? p.qp.qpn_a : p.qp.qpn_b;
    CHECK(map.impl != nullptr);
    CHECK((qpn >= map.first_qpn && qpn - map.first_qpn < map.qp_count));
    const auto before = e.counters().v;
    QpInfo qi_before, qi_after;
    REQUIRE(e.qp_info(qpn, qi_before));
    // Whole frames, every truncation of the first few, and ones naming
    // every QPN byte pattern (most not this engine's).
    std::vector<std::vector<uint8_t>> frames = seen;
    for (size_t n = 0; n < 80; ++n)
      frames.emplace_back(seen[n % 4].begin(), seen[n % 4].begin() + std::min(n, seen[n % 4].size()));
    for (uint32_t b = 0; b < 256; ++b) {
      std::vector<uint8_t> f = seen[b % seen.size()];
      for (size_t i = 42; i < std::min<size_t>(f.size(), 54); ++i) f[i] = static_cast<uint8_t>(b * 31 + i);
      frames.push_back(std::move(f));
    }
    for (const auto& f : frames)
      for (unsigned stage : {0u, 1u}) Engine::prefetch_rx(map, f, stage);
    for (unsigned stage : {0u, 1u, 2u}) Engine::prefetch_poll(map, stage);
    Engine::prefetch_rx({}, seen.front(), 1);  // no map: nothing to do
    Engine::prefetch_poll({}, 2);
    CHECK(e.counters().v == before);
    REQUIRE(e.qp_info(qpn, qi_after));
    CHECK(qi_after.ctr.v == qi_before.ctr.v);
    CHECK(
        std::tie(qi_after.state, qi_after.snd_una, qi_after.snd_nxt, qi_after.rcv_cack, qi_after.inflight_bytes) ==
        std::tie(qi_before.state, qi_before.snd_una, qi_before.snd_nxt, qi_before.rcv_cack, qi_before.inflight_bytes));
  }
}

TEST_CASE("malformed and foreign frames are counted and dropped") {
  sim::TestNet net(basic());
  Engine& e = net.engine(0);
  std::vector<uint8_t> junk(100, 0xAB);
  e.on_rx(0, junk, 0);
  e.on_rx(9, junk, 0);
  CHECK(e.counters()[DevCtr::rx_drop_not_ip] == 1);
  CHECK(e.counters()[DevCtr::rx_drop_bad_plane] == 1);
  // A well-formed frame to a QP that does not exist.
  std::vector<uint8_t> buf(256);
  auto m = frame_between(net, buf, 1, 0, wire::Opcode::mrc_sack);
  m.bth().set_dest_qp(0x777);
  wire::finish_frame(m);
  e.on_rx(0, {buf.data(), m.at.size}, 0);
  CHECK(e.counters()[DevCtr::rx_drop_unknown_qp] == 1);
  // The same frame to an address that is not ours.
  e.on_rx(1, {buf.data(), m.at.size}, 0);
  CHECK(e.counters()[DevCtr::rx_drop_not_ours] == 1);
  buf[m.at.payload - 1] ^= 1;
  e.on_rx(0, {buf.data(), m.at.size}, 0);
  CHECK(e.counters()[DevCtr::rx_drop_bad_icrc] == 1);
}

TEST_CASE("RoCEv2 with DCQCN: ECN marks become CNPs and the sender slows down") {
  // The same transfer into a 4x slower path, with and without DCQCN: with
  // it, CNPs flow and the queue (hence the marking) stays far lower.
  auto run = [](CcAlgo algo, uint64_t& cnps_sent, uint64_t& cnps_received) {
    auto cfg = basic(Transport::rocev2, 1);
    cfg.link.rate_gbps = 25;
    cfg.link.queue_bytes = 4 << 20;
    cfg.link.ecn_min_bytes = 16 * 1024;
    cfg.link.ecn_max_bytes = 64 * 1024;
    cfg.engine_template.cnp_interval = 5000;
    QpAttr a;
    a.timeout = 10;
    a.mpr = 16;
    a.cc.algo = algo;
    a.cc.fixed_window_bytes = 1 << 30;
    a.cc.dcqcn.line_rate_gbps = 100;
    a.cc.dcqcn.rate_period = 5000;
    a.cc.dcqcn.alpha_period = 5000;
    Pair p(cfg, a);
    for (uint64_t i = 0; i < 8; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 120000, i * 120000)) == 0);
    p.net.run_until_idle(500'000'000);
    REQUIRE(p.net.completions(0).size() == 8);
    for (const auto& c : p.net.completions(0)) CHECK(c.status == WcStatus::success);
    CHECK(std::memcmp(p.src.data(), p.dst.data(), 8 * 120000) == 0);
    cnps_sent = p.info(1).ctr[QpCtr::tx_cnps];
    cnps_received = p.info(0).ctr[QpCtr::rx_cnps];
    return p.info(1).ctr[QpCtr::rx_ecn_marked];
  };
  uint64_t sent = 0, received = 0, sent_none = 0, received_none = 0;
  const uint64_t marked_dcqcn = run(CcAlgo::dcqcn, sent, received);
  const uint64_t marked_none = run(CcAlgo::none, sent_none, received_none);
  CHECK(sent > 0);
  CHECK(received == sent);
  INFO("marked with DCQCN " << marked_dcqcn << ", without " << marked_none);
  CHECK(marked_dcqcn * 2 < marked_none);
  CHECK(marked_none > 100);
}

TEST_CASE("with ICRC offload the engine neither computes nor checks the ICRC") {
  auto cfg = basic();
  cfg.engine_template.icrc_offload = true;
  Pair p(cfg);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 20000)) == 0);
  p.net.run_until_idle(10'000'000);
  REQUIRE(p.net.completions(0).size() == 1);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 20000) == 0);
  // A frame whose ICRC is wrong is the port's business, not the engine's.
  std::vector<uint8_t> buf(256);
  auto m = frame_between(p.net, buf, 1, 0, wire::Opcode::mrc_sack);
  m.bth().set_dest_qp(0x777);
  wire::finish_frame(m, false);
  std::memset(buf.data() + m.at.size - 4, 0xEE, 4);
  p.net.engine(0).on_rx(0, {buf.data(), m.at.size}, p.net.now());
  CHECK(p.net.engine(0).counters()[DevCtr::rx_drop_bad_icrc] == 0);
  CHECK(p.net.engine(0).counters()[DevCtr::rx_drop_unknown_qp] == 1);
}

TEST_CASE("every parse error has the device counter of the same name") {
  for (unsigned i = 1; i < wire::kParseErrorCount; ++i) {
    const auto e = static_cast<wire::ParseError>(i);
    CHECK(kDevCtrNames[size_t(parse_error_counter(e))] == "rx_drop_" + std::string(wire::parse_error_name(e)));
  }
}

TEST_CASE("forged frames with valid ICRCs, aimed at live QPs, never crash the engine") {
  // RoCE has no authentication: a forged in-window SACK can complete a WR
  // early, so integrity is not the property here. Memory safety is (this
  // test also runs under ASan/UBSan), and so are the QPs' own invariants.
  Pair p(basic());
  for (uint64_t i = 0; i < 8; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 50000, i * 50000)) == 0);
  p.net.run_until(p.net.now() + 5'000);  // mid-transfer: windows are open
  const std::vector<uint8_t> opcodes = {
#define MRC_X(name, value, flags) value,
      MRC_OPCODES(MRC_X)
#undef MRC_X
  };
  std::mt19937_64 rng(99);
  std::vector<uint8_t> buf(9000);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t to = rng() & 1;  // host 0 (requester) or 1 (responder)
    const uint32_t plane = rng() % 4;
    wire::Addressing a;
    a.src_ip = p.net.addr(1 - to, plane).ip;
    a.dst_ip = p.net.addr(to, plane).ip;
    a.udp_src_port = static_cast<uint16_t>(rng());
    a.ecn = rng() % 4;
    const uint8_t opc = opcodes[rng() % opcodes.size()];
    const uint32_t len = (wire::op_flags(opc) & wire::kOpPayload) ? rng() % 4097 : 0;
    auto m = wire::begin_frame(buf, a, opc, rng() & 1, len);
    REQUIRE(m.base);
    // Random bytes everywhere after the UDP header, then the fields that
    // decide where a frame goes made plausible.
    for (uint32_t k = m.at.bth; k < m.at.payload; ++k) buf[k] = static_cast<uint8_t>(rng());
    m.bth().set_opcode(opc);
    m.bth().set_tver(0);
    m.bth().set_pad_count(m.at.pad);
    m.bth().set_ts_present(m.at.tseth != 0);
    m.bth().set_dest_qp(rng() % 8 ? (to ? p.qp.qpn_b : p.qp.qpn_a) : static_cast<uint32_t>(rng()) & 0xFFFFFF);
    if (m.at.reth && rng() % 2) m.reth().set_rkey(p.rkey);  // sometimes the real key
    wire::finish_frame(m);
    p.net.engine(to).on_rx(plane, {buf.data(), m.at.size}, p.net.now());
    if (i % 64 == 0) p.net.run_until(p.net.now() + 1'000);
  }
  p.net.run_until_idle(p.net.now() + 100'000'000);
  for (uint32_t h = 0; h < 2; ++h) {
    QpInfo qi;
    REQUIRE(p.net.engine(h).qp_info(h ? p.qp.qpn_b : p.qp.qpn_a, qi));
    INFO("host " << h << " state " << qp_state_name(qi.state) << " bad_state drops " << qi.ctr[QpCtr::rx_drop_bad_state]
                 << " acks " << qi.ctr[QpCtr::rx_acks] << " stale " << qi.ctr[QpCtr::rx_drop_stale_ack]);
    // A forged fatal NAK may legitimately end a QP; nothing may reset it.
    CHECK((qi.state == QpState::rts || qi.state == QpState::error));
    CHECK(qi.inflight_bytes < (1ull << 32));  // no underflow
    CHECK(qi.sq_outstanding <= 8);
  }
  // Every WR completed exactly once, whatever the forgeries did.
  std::set<uint64_t> ids;
  for (const auto& c : p.net.completions(0)) CHECK(ids.insert(c.wr_id).second);
  CHECK(ids.size() == 8);
}

// A requester may reuse a buffer as soon as its WRITE completes (RDMA
// applications do, with their own credits). So when the responder delivers
// a WRITE_IMM, its message's bytes must all be in place and nothing later may
// have reached the same buffer yet. Slots are reused every `depth` messages;
// each message carries a pattern its index implies. Reordering makes RACK
// retransmit spuriously, which is where such a race would hide. The first
// PSN is not zero: a requester that numbered WQEs from zero regardless once
// completed them as soon as they were sent.
TEST_CASE("a WRITE_IMM completion sees its own bytes even when buffers are reused at once") {
  constexpr uint32_t kSize = 64 * 1024, kDepth = 8, kPatterns = kDepth + 1, kMessages = 400;
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u}) {
    auto cfg = basic();
    cfg.seed = seed;
    cfg.link.reorder_prob = 0.3;
    cfg.link.reorder_max_ns = seed > 3 ? 300000 : 30000;  // the later seeds also fire spurious timeouts
    cfg.link.loss = 0.002;
    cfg.link.duplicate = 0.01;
    QpAttr attr;
    attr.sq_psn = (0xFFFFF0u + uint32_t(seed) * 7919u) & 0xFFFFFF;  // non-zero, and wrapping for some seeds
    attr.timeout = seed > 3 ? 6 : 8;
    attr.retry_exp = 25;
    Pair p(cfg, attr);
    REQUIRE(p.src.size() >= kPatterns * kSize);
    REQUIRE(p.dst.size() >= kDepth * kSize);
    for (uint32_t i = 0; i < kPatterns * kSize; ++i) p.src[i] = static_cast<uint8_t>((i / kSize) * 29 + (i % 251));
    uint64_t posted = 0, completed = 0, imms = 0, bad = 0, first_bad = UINT64_MAX;
    auto post = [&] {
      while (posted < kMessages && posted - completed < kDepth) {
        const uint64_t i = posted++;  // post_send may complete others and re-enter
        SendWr w = p.write(i, kSize, 0);
        w.opcode = WrOpcode::rdma_write_with_imm;
        w.local_addr = 0x1000 + (i % kPatterns) * kSize;
        w.remote_addr = 0x900000 + (i % kDepth) * kSize;
        w.imm = static_cast<uint32_t>(i);
        REQUIRE(p.net.post_send(0, p.qp.qpn_a, w) == 0);
      }
    };
    for (uint32_t i = 0; i < 64; ++i) REQUIRE(p.net.engine(1).post_recv(p.qp.qpn_b, RecvWr{i}) == 0);
    p.net.set_completion_hook([&](uint32_t host, const Completion& c) {
      if (host == 0) {
        REQUIRE(c.status == WcStatus::success);
        REQUIRE(c.wr_id == completed);  // in order, once each
        ++completed;
        post();
        return;
      }
      REQUIRE(c.imm == imms);
      REQUIRE(c.has_imm);
      const uint64_t i = c.imm;
      const uint8_t* got = p.dst.data() + (i % kDepth) * kSize;
      if (std::memcmp(got, p.src.data() + (i % kPatterns) * kSize, kSize) != 0 && bad++ == 0) first_bad = i;
      ++imms;
      REQUIRE(p.net.engine(1).post_recv(p.qp.qpn_b, RecvWr{i}) == 0);
    });
    post();
    p.net.run_until_idle(2'000'000'000);
    INFO("seed " << seed << ": first message whose slot was wrong at its completion: " << first_bad);
    CHECK(completed == kMessages);
    CHECK(imms == kMessages);
    CHECK(bad == 0);
  }
}

TEST_CASE("AckReq on every Nth message cuts the ACKs small messages draw, but not the latency of a lone message or a burst's tail") {
  struct Result {
    uint64_t acks = 0;
    size_t burst_done = 0, lone_done = 0;  // completions 25 us after posting
  };
  auto run = [](uint32_t ack_req_every) {
    sim::TestNet::Config cfg = basic(Transport::mrc, 1);  // one plane: packets arrive in order
    cfg.engine_template.ack_req_every = ack_req_every;
    cfg.engine_template.ack_every = 16;
    cfg.engine_template.ack_delay = 50'000;  // far above the RTT, so waiting for it shows
    cfg.engine_template.reorder_window = 100'000;  // as on mrc-nic: no tail-loss probe comes first
    Pair p(cfg);
    Result r;
    // 60 messages posted together, then one poll sends them, as a doorbell with a list of WRs
    // would. 60 is no multiple of 8: only the rule for the last message posted asks for its ACK.
    const Nanos t0 = p.net.now();
    for (uint64_t i = 0; i < 60; ++i) REQUIRE(p.net.engine(0).post_send(p.qp.qpn_a, p.write(i, 64, i * 64)) == 0);
    p.net.poll(0);
    p.net.run_until(t0 + 25'000);
    r.burst_done = p.net.completions(0).size();
    p.net.run_until_idle(t0 + 10'000'000);
    REQUIRE(p.net.completions(0).size() == 60);
    for (const auto& c : p.net.completions(0)) CHECK(c.status == WcStatus::success);
    CHECK(std::memcmp(p.src.data(), p.dst.data(), 60 * 64) == 0);
    r.acks = p.info(1).ctr[QpCtr::tx_acks];
    const Nanos t1 = p.net.now();
    REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(100, 64, 8192)) == 0);
    p.net.run_until(t1 + 25'000);
    r.lone_done = p.net.completions(0).size() - 60;
    return r;
  };
  const Result every = run(1), eighth = run(8);
  INFO("ACKs for 60 messages: " << every.acks << " with AckReq on each, " << eighth.acks << " on every 8th");
  CHECK(every.acks >= 30);
  CHECK(eighth.acks <= 8 + 60 / 8 + 1);  // the first 8 leave with fewer than 8 in flight; the last asks
  // Nothing waited for ack_delay: the burst and the lone message complete within half of it.
  CHECK(every.burst_done == 60);
  CHECK(eighth.burst_done == 60);
  CHECK(eighth.lone_done == 1);
}

TEST_CASE("QPs of one host take turns at its ports: two equal messages posted together finish together") {
  // Returns how far apart the two QPs' completions are.
  auto spread = [](uint32_t tx_burst) {
    sim::TestNet::Config cfg = basic(Transport::mrc, 1);
    cfg.engine_template.tx_burst = tx_burst;
    cfg.engine_template.tx_budget = 64;
    Pair p(cfg);
    const auto second = p.net.connect_qp_pair(0, 1, {}, 1, 1);
    REQUIRE(second);
    SendWr a = p.write(1, 256 * 1024, 0), b = p.write(2, 256 * 1024, 256 * 1024);
    REQUIRE(p.net.engine(0).post_send(p.qp.qpn_a, a) == 0);
    REQUIRE(p.net.engine(0).post_send(second.qpn_a, b) == 0);
    p.net.poll(0);
    std::array<Nanos, 2> done{kNever, kNever};
    for (Nanos t = p.net.now(); t < 5'000'000 && (done[0] == kNever || done[1] == kNever); t += 200) {
      p.net.run_until(t);
      for (const auto& c : p.net.completions(0)) {
        REQUIRE(c.status == WcStatus::success);
        if (done[c.wr_id - 1] == kNever) done[c.wr_id - 1] = t;
      }
    }
    REQUIRE(done[0] != kNever);
    REQUIRE(done[1] != kNever);
    CHECK(std::memcmp(p.src.data(), p.dst.data(), 512 * 1024) == 0);
    return done[0] > done[1] ? done[0] - done[1] : done[1] - done[0];
  };
  const Nanos turns = spread(4), whole_budget = spread(64);
  INFO("completions apart: " << turns << " ns taking turns of 4 packets, " << whole_budget
                             << " ns when each QP may send its whole budget at once");
  CHECK(turns * 2 <= whole_budget);
  CHECK(turns <= 5000);
}

TEST_CASE("the reorder window grows after needless resends, so paths that reorder by more than it stop drawing them") {
  struct Result {
    uint64_t spurious = 0, resent = 0;
  };
  auto run = [](uint32_t growth) {
    auto cfg = basic(Transport::mrc, 4);
    cfg.seed = 7;
    cfg.link.reorder_prob = 0.3;
    cfg.link.reorder_max_ns = 12000;  // well past the 4 us floor this short path's RTT leaves the window at
    cfg.engine_template.reorder_window_growth = growth;
    Pair p(cfg);
    constexpr uint32_t kSize = 16 * 1024, kMessages = 64;
    for (uint32_t round = 0; round < 8; ++round) {
      for (uint32_t i = 0; i < kMessages; ++i)
        REQUIRE(p.net.engine(0).post_send(p.qp.qpn_a, p.write(round * kMessages + i, kSize, i * kSize)) == 0);
      p.net.poll(0);
      p.net.run_until_idle(1'000'000'000);
      REQUIRE(p.net.completions(0).size() == (round + 1) * kMessages);
    }
    for (const auto& c : p.net.completions(0)) REQUIRE(c.status == WcStatus::success);
    CHECK(std::memcmp(p.src.data(), p.dst.data(), kMessages * kSize) == 0);
    const QpInfo qi = p.info(0);
    return Result{qi.ctr[QpCtr::rtx_spurious], qi.ctr[QpCtr::tx_retransmits]};
  };
  const Result fixed = run(1), grown = run(2);
  INFO("needless resends: " << fixed.spurious << " of " << fixed.resent << " with a fixed window, " << grown.spurious
                            << " of " << grown.resent << " when it may double");
  REQUIRE(fixed.spurious >= 10);
  CHECK(grown.spurious * 2 <= fixed.spurious);
  CHECK(grown.resent < fixed.resent);
}

TEST_CASE("under load a needless resend is recognised though the least RTT seen is the idle one") {
  auto cfg = basic(Transport::mrc, 4);
  cfg.seed = 7;
  cfg.link.reorder_prob = 0.3;
  cfg.link.reorder_max_ns = 12000;
  cfg.engine_template.reorder_window_growth = 1;  // the count of recognised ones, not their effect
  QpAttr a;
  a.cc.algo = CcAlgo::none;
  a.cc.fixed_window_bytes = 4 << 20;  // queues of tens of us: the smoothed RTT far above the idle one
  Pair p(cfg, a);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 100)) == 0);
  p.net.run_until_idle(p.net.now() + 1'000'000);  // the idle RTT, the least this QP will see
  constexpr uint32_t kSize = 16 * 1024, kMessages = 64;
  for (uint32_t i = 0; i < kMessages; ++i)
    REQUIRE(p.net.engine(0).post_send(p.qp.qpn_a, p.write(2 + i, kSize, i * kSize)) == 0);
  p.net.poll(0);
  p.net.run_until_idle(1'000'000'000);
  REQUIRE(p.net.completions(0).size() == kMessages + 1);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), kMessages * kSize) == 0);
  const QpInfo qi = p.info(0);
  INFO("srtt " << qi.srtt_ns << " ns; " << qi.ctr[QpCtr::rtx_spurious] << " of " << qi.ctr[QpCtr::tx_retransmits]
               << " resends recognised as needless");
  REQUIRE(qi.ctr[QpCtr::tx_retransmits] >= 10);
  // 44 of 76 here; the least RTT alone recognised 37 (the run is deterministic).
  CHECK(qi.ctr[QpCtr::rtx_spurious] * 2 >= qi.ctr[QpCtr::tx_retransmits]);
}

// The simulated NIC wakes a host whenever one frame of room opens and on
// every received ACK. When each poll moved the scheduler's first QP on by
// one, that rhythm handed some QPs more turns than others: here the first
// finished 13 % before the last (3 % now); in the 128-host permutation one
// QP of a host ran at 350 Gb/s and its seven siblings at 60.
TEST_CASE("QPs of one host share its ports fairly when polls find room for one frame at a time") {
  constexpr uint32_t kQps = 8, kMessages = 8, kSize = 64 * 1024;
  sim::Fabric::Config cfg;
  cfg.hosts = 2;
  cfg.planes = 2;
  cfg.host_link.rate_gbps = 100;
  cfg.host_link.delay_ns = 300;
  cfg.fabric_link = cfg.host_link;
  cfg.host_tx_stage_bytes = 16 * 1024;
  sim::Fabric fab(cfg);
  std::vector<uint8_t> src(kMessages * kSize), dst(kQps * kMessages * kSize);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  uint32_t lkey = 0, rkey = 0, unused = 0;
  REQUIRE(fab.engine(0).reg_mr(1, src.data(), 0x1000, src.size(), kAccessLocalWrite, lkey, unused));
  REQUIRE(
      fab.engine(1).reg_mr(1, dst.data(), 0x900000, dst.size(), kAccessLocalWrite | kAccessRemoteWrite, unused, rkey));
  std::vector<uint32_t> qpns;
  for (uint32_t q = 0; q < kQps; ++q) {
    const auto pair = fab.connect_qp_pair(0, 1, {}, 1, 1);
    REQUIRE(pair);
    qpns.push_back(pair.qpn_a);
  }
  std::vector<Nanos> done(kQps, kNever);
  std::vector<uint32_t> completed(kQps, 0);
  fab.set_completion_hook([&](uint32_t host, const Completion& c) {
    if (host != 0) return;
    REQUIRE(c.status == WcStatus::success);
    const uint32_t q = static_cast<uint32_t>(c.wr_id / kMessages);
    if (++completed[q] == kMessages) done[q] = fab.now();
  });
  for (uint32_t q = 0; q < kQps; ++q) {
    for (uint32_t m = 0; m < kMessages; ++m) {
      SendWr w;
      w.wr_id = q * kMessages + m;
      w.local_addr = 0x1000 + m * kSize;
      w.length = kSize;
      w.lkey = lkey;
      w.remote_addr = 0x900000 + (q * kMessages + m) * kSize;
      w.rkey = rkey;
      REQUIRE(fab.engine(0).post_send(qpns[q], w) == 0);
    }
  }
  fab.poll(0);
  // Both 16 KB stages filled at once; the host sleeps until one drains, and
  // that wakes it: it sends again long before the first ACK can be back
  // (two 300 ns hops and a frame's serialization each way).
  CHECK(fab.engine(0).wants_tx());
  CHECK(fab.engine(0).tx_full_planes() == 0b11);
  const uint64_t sent = fab.uplink(0, 0).counters().sent;
  fab.loop().run_until(fab.now() + 700);
  CHECK(fab.uplink(0, 0).counters().sent > sent);
  fab.loop().run_until_idle(1'000'000'000);
  CHECK(fab.engine(0).tx_full_planes() == 0);
  for (uint32_t q = 0; q < kQps; ++q) {
    REQUIRE(done[q] != kNever);
    CHECK(std::memcmp(dst.data() + q * kMessages * kSize, src.data(), src.size()) == 0);
  }
  const auto [first, last] = std::minmax_element(done.begin(), done.end());
  INFO("first QP done at " << *first << " ns, last at " << *last << " ns");
  CHECK(*last - *first <= *last / 20);
}

// Every host WRITEs `size` bytes to the host three along, one QP each: the
// same transfers, run two ways by the tests below. finish() runs them to the
// end and checks every byte.
class ShiftedWrites {
 public:
  ShiftedWrites(sim::Fabric& fab, uint32_t hosts, uint32_t size)
      : fab_(fab), src_(size), dst_(hosts, std::vector<uint8_t>(size)) {
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = static_cast<uint8_t>(i * 5 + 1);
    fab.set_completion_hook([this](uint32_t, const Completion& c) { done_ += c.status == WcStatus::success; });
    for (uint32_t h = 0; h < hosts; ++h) {
      const uint32_t to = (h + 3) % hosts;
      uint32_t lkey = 0, rkey = 0, unused = 0;
      REQUIRE(fab.engine(h).reg_mr(2, src_.data(), 0x1000, src_.size(), kAccessLocalWrite, lkey, unused));
      REQUIRE(fab.engine(to).reg_mr(1, dst_[to].data(), 0x900000, size, kAccessLocalWrite | kAccessRemoteWrite, unused,
                                    rkey));
      const auto pair = fab.connect_qp_pair(h, to, {}, 2, 1);
      REQUIRE(pair);
      SendWr w;
      w.local_addr = 0x1000;
      w.length = size;
      w.lkey = lkey;
      w.remote_addr = 0x900000;
      w.rkey = rkey;
      REQUIRE(fab.post_send(h, pair.qpn_a, w) == 0);
    }
  }

  void finish() {
    fab_.run_until_idle(1'000'000'000);
    REQUIRE(done_ == dst_.size());
    for (const auto& d : dst_) CHECK(d == src_);
  }

  // The fabric they run on: 8 hosts, 2 per leaf, so that most pairs cross
  // a spine, hashed over 4; 2 planes.
  static sim::Fabric::Config fabric() {
    sim::Fabric::Config cfg;
    cfg.hosts = 8;
    cfg.hosts_per_leaf = 2;
    cfg.spines = 4;
    cfg.planes = 2;
    return cfg;
  }

  // Frames each link delivered: uplinks, downlinks, leaf-spine, spine-leaf.
  static std::vector<uint64_t> deliveries(const sim::Fabric& fab) {
    std::vector<uint64_t> out;
    for (const auto* links : {&fab.uplinks(), &fab.downlinks(), &fab.leaf_to_spine_links(), &fab.spine_to_leaf_links()})
      for (const auto& l : *links) out.push_back(l->counters().delivered);
    return out;
  }

 private:
  sim::Fabric& fab_;
  std::vector<uint8_t> src_;
  std::vector<std::vector<uint8_t>> dst_;
  std::atomic<uint32_t> done_{0};  // partitions may complete at once
};

// Hosts tag each frame with its route so switches need not read it again;
// without tags every switch reads the frame. Both must route every frame
// the same way: the runs match link by link.
TEST_CASE("the fabric routes frames the same with or without the senders' route tags") {
  struct Run {
    std::vector<uint64_t> delivered;  // per link, every kind
    Nanos done = 0;
    uint64_t unroutable = 0;
    uint64_t read = 0;  // frames routed from their headers
  };
  auto run = [](bool tags) {
    sim::Fabric::Config cfg = ShiftedWrites::fabric();
    cfg.route_tags = tags;
    sim::Fabric fab(cfg);
    ShiftedWrites writes(fab, cfg.hosts, 128 * 1024);
    writes.finish();
    Run r;
    r.done = fab.now();
    r.unroutable = fab.stats().unroutable;
    r.read = fab.stats().routed_from_headers;
    r.delivered = ShiftedWrites::deliveries(fab);
    return r;
  };
  const Run tagged = run(true), read = run(false);
  CHECK(tagged.unroutable == 0);
  CHECK(read.unroutable == 0);
  CHECK(tagged.read == 0);
  CHECK(read.read > 0);
  CHECK(tagged.done == read.done);
  CHECK(tagged.delivered == read.delivered);
  // Spraying used every spine link.
  CHECK(std::count(tagged.delivered.begin(), tagged.delivered.end(), 0u) == 0);
}

// Hosts keep when each uplink has room again, refreshed on their own sends
// and on the links' other changes; the reference works it out from the link
// on every check. Staging of 16 KB per port keeps the ports full, and the
// run changes uplinks mid-transfer: the runs must match link by link (fails
// when a host does not refresh after its own send).
TEST_CASE("hosts that keep their uplinks' room run as hosts that work it out on every check") {
  struct Run {
    std::vector<uint64_t> delivered;  // per link
    Nanos done = 0;
    uint64_t sends = 0;
  };
  auto run = [](bool cache) {
    sim::Fabric::Config cfg = ShiftedWrites::fabric();
    cfg.host_tx_stage_bytes = 16 * 1024;
    cfg.room_cache = cache;
    sim::Fabric fab(cfg);
    ShiftedWrites writes(fab, cfg.hosts, 256 * 1024);
    // Host 1 is blocked on both ports when they slow to a crawl (the bytes
    // they hold now count for less: room opens at once); then one goes down
    // (its queue empties: room opens long before the crawl would give it)
    // and both come back. Host 0's port slows while it is not full.
    const sim::LinkParams normal = fab.uplink(0, 0).params();
    sim::LinkParams crawl = normal;
    crawl.rate_gbps /= 50;
    fab.loop().at(3'000, [&] { fab.uplink(0, 0).set_params(crawl); });
    fab.loop().at(4'000, [&] {
      fab.uplink(1, 0).set_params(crawl);
      fab.uplink(1, 1).set_params(crawl);
    });
    fab.loop().at(8'000, [&] { fab.uplink(0, 0).set_params(normal); });
    fab.loop().at(9'000, [&] { fab.uplink(1, 1).set_up(false); });
    fab.loop().at(14'000, [&] {
      fab.uplink(1, 0).set_params(normal);
      fab.uplink(1, 1).set_params(normal);
      fab.uplink(1, 1).set_up(true);
    });
    writes.finish();
    Run r;
    r.done = fab.now();
    r.delivered = ShiftedWrites::deliveries(fab);
    for (const auto& l : fab.uplinks()) r.sends += l->counters().sent;
    return r;
  };
  const Run kept = run(true), worked_out = run(false);
  INFO("done at " << kept.done << " and " << worked_out.done << " ns");
  CHECK(kept.done == worked_out.done);
  CHECK(kept.sends == worked_out.sends);
  CHECK(kept.delivered == worked_out.delivered);
  CHECK(kept.done > 14'000);  // the changes happened mid-transfer
}

// A fabric cut into partitions runs them side by side in windows of the
// fabric links' delay. Here three partitions of uneven shares (leaves 0-1,
// 2 and 3; spines 0-1, 2 and 3), a spine failing and healing mid-transfer
// through control events: one thread or two, the run is the same to the
// link, and every byte arrives.
TEST_CASE("a fabric cut into partitions runs the same on one thread as on two, and delivers every byte") {
  struct Run {
    std::vector<uint64_t> delivered;  // per link
    Nanos done = 0;
    uint64_t events = 0;
    uint64_t crossed = 0;  // from leaf 0 (partition 0) to spine 3 (partition 2), plane 0
    uint64_t lost_to_spine = 0;
  };
  auto run = [](uint32_t threads) {
    sim::Fabric::Config cfg = ShiftedWrites::fabric();
    cfg.host_tx_stage_bytes = 16 * 1024;
    cfg.partitions = 3;
    cfg.threads = threads;
    sim::Fabric fab(cfg);
    REQUIRE(fab.partitions() == 3);
    CHECK(fab.partition_of_host(0) == 0);
    CHECK(fab.partition_of_host(7) == 2);
    ShiftedWrites writes(fab, cfg.hosts, 256 * 1024);
    fab.at(6'000, [&] { fab.set_up({sim::Fabric::Target::Kind::spine, 0, 3}, false); });
    fab.at(12'000, [&] { fab.set_up({sim::Fabric::Target::Kind::spine, 0, 3}, true); });
    writes.finish();
    Run r;
    r.done = fab.now();
    r.events = fab.events_run();
    r.delivered = ShiftedWrites::deliveries(fab);
    r.crossed = fab.leaf_to_spine(0, 0, 3).counters().delivered;
    for (uint32_t l = 0; l < fab.leaves(); ++l) r.lost_to_spine += fab.leaf_to_spine(0, l, 3).counters().dropped_down;
    return r;
  };
  const Run one = run(1), two = run(2);
  INFO("done at " << one.done << " and " << two.done << " ns");
  CHECK(one.done == two.done);
  CHECK(one.events == two.events);
  CHECK(one.delivered == two.delivered);
  CHECK(one.crossed > 0);
  CHECK(one.lost_to_spine > 0);  // the failure hit frames in flight
  CHECK(one.lost_to_spine == two.lost_to_spine);
  CHECK(one.done > 12'000);
}

// Two partitions of two leaves each: leaf 0 -> spine 1 crosses from the
// first to the second, spine 1 -> leaf 2 stays in the second.
namespace {
// Four hosts, a leaf each, in two partitions on two threads; 100 Gb/s
// links, so a 1250-byte frame takes 100 ns.
sim::Fabric::Config two_part_fabric() {
  sim::Fabric::Config cfg;
  cfg.hosts = 4;
  cfg.hosts_per_leaf = 1;
  cfg.spines = 2;
  cfg.host_link.delay_ns = 300;
  cfg.fabric_link.delay_ns = 500;
  cfg.partitions = 2;
  cfg.threads = 2;
  return cfg;
}
}  // namespace

TEST_CASE("a partitioned fabric keeps time: frames cross on time, control events find every clock at theirs") {
  sim::Fabric fab(two_part_fabric());
  REQUIRE(fab.partitions() == 2);
  REQUIRE(fab.partition_of_host(1) == 0);
  REQUIRE(fab.partition_of_host(2) == 1);
  std::vector<std::pair<int, Nanos>> got;  // which link, and when by its receiver's clock
  fab.leaf_to_spine(0, 0, 1).set_sink([&](std::vector<uint8_t>, uint64_t, uint32_t) {
    got.emplace_back(0, fab.now());
    fab.stop();
  });
  fab.spine_to_leaf(0, 2, 1).set_sink(
      [&](std::vector<uint8_t>, uint64_t, uint32_t) { got.emplace_back(1, fab.now()); });
  fab.at(1000, [&] { fab.leaf_to_spine(0, 0, 1).send(std::vector<uint8_t>(1250)); });
  // Sent on the second partition's clock, which must read 2000 too.
  fab.at(2000, [&] {
    CHECK(fab.now() == 2000);
    fab.spine_to_leaf(0, 2, 1).send(std::vector<uint8_t>(1250));
  });
  CHECK(fab.run_until(1500));
  CHECK(fab.now() == 1500);
  CHECK(got.empty());
  CHECK_FALSE(fab.run_until_idle());  // stopped by the first arrival, at its window's end
  REQUIRE(got.size() == 1);
  CHECK(got[0] == std::pair<int, Nanos>{0, 1000 + 100 + 500});
  CHECK(fab.now() < 2000);
  CHECK(fab.run_until_idle());  // and on again
  REQUIRE(got.size() == 2);
  CHECK(got[1] == std::pair<int, Nanos>{1, 2000 + 100 + 500});
  CHECK(fab.events_run() == 4);  // two control events, two arrivals
}

TEST_CASE("a frame that crossed in a window keeps its place ahead of what a control event schedules after it") {
  sim::Fabric fab(two_part_fabric());
  REQUIRE(fab.partition_of_host(0) == 0);
  REQUIRE(fab.partition_of_host(2) == 1);
  std::vector<std::pair<int, Nanos>> got;  // which frame, and when
  // Host 0's frame reaches its leaf at 1400, inside a window of partition 0,
  // and crosses to spine 1 (partition 1), due at 2000.
  fab.uplink(0, 0).set_sink(
      [&](std::vector<uint8_t> f, uint64_t, uint32_t) { fab.leaf_to_spine(0, 0, 1).send(std::move(f)); });
  fab.leaf_to_spine(0, 0, 1).set_sink(
      [&](std::vector<uint8_t>, uint64_t, uint32_t) { got.emplace_back(0, fab.now()); });
  // A control event at 1600, after that window, sends a frame inside
  // partition 1 that is also due at 2000: scheduled later, it runs later.
  fab.uplink(2, 0).set_sink([&](std::vector<uint8_t>, uint64_t, uint32_t) { got.emplace_back(1, fab.now()); });
  fab.at(1000, [&] { fab.uplink(0, 0).send(std::vector<uint8_t>(1250)); });
  fab.at(1600, [&] { fab.uplink(2, 0).send(std::vector<uint8_t>(1250)); });
  CHECK(fab.run_until_idle());
  CHECK(got == std::vector<std::pair<int, Nanos>>{{0, 2000}, {1, 2000}});
}

TEST_CASE("a fabric refuses partitions it cannot run apart") {
  sim::Fabric::Config cfg;
  cfg.hosts = 8;
  cfg.hosts_per_leaf = 2;
  cfg.spines = 4;
  cfg.partitions = 2;
  cfg.fabric_link.delay_ns = 0;  // no lookahead
  CHECK_THROWS_AS(sim::Fabric(cfg), std::invalid_argument);
  cfg.fabric_link.delay_ns = 300;
  cfg.partitions = 0;
  CHECK_THROWS_AS(sim::Fabric(cfg), std::invalid_argument);
  cfg.partitions = sim::Fabric::kMaxPartitions + 1;
  CHECK_THROWS_AS(sim::Fabric(cfg), std::invalid_argument);
  cfg.partitions = 8;  // more than the 4 leaves
  CHECK(sim::Fabric(cfg).partitions() == 4);
  // A crossing link keeps the delay the partitions run apart by.
  cfg.partitions = 2;
  sim::Fabric fab(cfg);
  sim::LinkParams p = fab.leaf_to_spine(0, 0, 3).params();
  p.delay_ns = 299;
  CHECK_THROWS_AS(fab.leaf_to_spine(0, 0, 3).set_params(p), std::invalid_argument);
}

// Two planes and a fixed window: 16 writes of 64 KB posted, the first
// window sent evenly, then plane 1 falls 15 us behind. By default every EV
// is kept in service and no plane is swept, so that only the planes' loads
// steer.
struct LatePlane {
  static constexpr uint32_t kSize = 64 * 1024, kMessages = 16;
  sim::TestNet::Config cfg = basic(Transport::mrc, 2);
  QpAttr attr;
  std::unique_ptr<Pair> pair;
  explicit LatePlane(uint32_t ev_min_active = 32, uint32_t plane_silent_losses = 0) {
    cfg.engine_template.plane_silent_losses = plane_silent_losses;
    cfg.engine_template.reorder_window = 1000;  // late packets declared lost, the window kept
    cfg.engine_template.reorder_window_growth = 1;
    attr.cc.algo = CcAlgo::none;
    attr.cc.fixed_window_bytes = 256 * 1024;
    attr.ev.ev_min_active = ev_min_active;
    pair = std::make_unique<Pair>(cfg, attr);
    Pair& p = *pair;
    for (uint32_t i = 0; i < kMessages; ++i)
      REQUIRE(p.net.engine(0).post_send(p.qp.qpn_a, p.write(i, kSize, i * kSize)) == 0);
    p.net.poll(0);
    sim::LinkParams slow = cfg.link;
    slow.delay_ns = 15'000;
    p.net.uplink(0, 1).set_params(slow);
  }
};

// A plane whose queues fall behind: its late packets are declared lost, yet
// they still sit in its queues. Counted out of its load at once, the late
// plane looked as loaded as the prompt one and drew half the packets (128 of
// 256 here, 59 declared lost; now 116, 42 declared lost).
TEST_CASE("packets declared lost still count against their plane's load until acknowledged") {
  LatePlane lp;
  Pair& p = *lp.pair;
  constexpr uint32_t kSize = LatePlane::kSize, kMessages = LatePlane::kMessages;
  p.net.run_until_idle(1'000'000'000);
  REQUIRE(p.net.completions(0).size() == kMessages);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), kMessages * kSize) == 0);
  uint64_t first[2] = {0, 0};
  for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) first[e.plane] += e.ctr[EvCtr::tx_pkts];
  const QpInfo qi = p.info(0);
  INFO("first transmissions: prompt plane " << first[0] << ", late plane " << first[1] << "; "
                                            << qi.ctr[QpCtr::rtx_sack] << " declared lost");
  REQUIRE(qi.ctr[QpCtr::rtx_sack] > 0);  // the case at hand: late packets were declared lost
  CHECK(first[0] >= first[1] + 12);      // half the gap: a tie at 128 / 128 must not pass
}

// A QP flushed to ERROR while lost packets still count against a
// plane, then reset and reconnected, spreads over both planes again: no stale
// charge is released against (or left in) the new QP's plane loads.
TEST_CASE("plane charges do not survive ERROR, reset and reconnection") {
  LatePlane lp;
  Pair& p = *lp.pair;
  const auto& cfg = lp.cfg;
  const QpAttr& a = lp.attr;
  constexpr uint32_t kSize = LatePlane::kSize, kMessages = LatePlane::kMessages;
  // Run until packets have been declared lost and are still unacknowledged.
  while (p.info(0).ctr[QpCtr::rtx_sack] < 5) REQUIRE(p.net.run_until(p.net.now() + 500));
  REQUIRE(p.info(0).snd_una != p.info(0).snd_nxt);
  REQUIRE(p.net.engine(0).modify_qp(p.qp.qpn_a, QpState::error, a, p.net.now()) == ModifyError::ok);
  p.net.run_until_idle(p.net.now() + 10'000'000);
  REQUIRE(p.net.completions(0).size() == kMessages);  // all flushed
  // Reset both ends and reconnect the same QPs, as connect_qp_pair does.
  p.net.uplink(0, 1).set_params(cfg.link);
  Engine& ea = p.net.engine(0);
  Engine& eb = p.net.engine(1);
  QpAttr aa = a, ab = a;
  aa.dest_qpn = p.qp.qpn_b;
  aa.remote = eb.config().planes;
  ab.dest_qpn = p.qp.qpn_a;
  ab.remote = ea.config().planes;
  REQUIRE(ea.modify_qp(p.qp.qpn_a, QpState::reset, aa, p.net.now()) == ModifyError::ok);
  REQUIRE(eb.modify_qp(p.qp.qpn_b, QpState::error, ab, p.net.now()) == ModifyError::ok);
  REQUIRE(eb.modify_qp(p.qp.qpn_b, QpState::reset, ab, p.net.now()) == ModifyError::ok);
  for (QpState s : {QpState::init, QpState::rtr, QpState::rts}) {
    REQUIRE(ea.modify_qp(p.qp.qpn_a, s, aa, p.net.now()) == ModifyError::ok);
    REQUIRE(eb.modify_qp(p.qp.qpn_b, s, ab, p.net.now()) == ModifyError::ok);
  }
  const size_t before = p.net.completions(0).size();
  for (uint32_t i = 0; i < kMessages; ++i)
    REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(100 + i, kSize, i * kSize)) == 0);
  p.net.run_until_idle(p.net.now() + 1'000'000'000);
  REQUIRE(p.net.completions(0).size() == before + kMessages);
  for (size_t i = before; i < p.net.completions(0).size(); ++i)
    CHECK(p.net.completions(0)[i].status == WcStatus::success);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), kMessages * kSize) == 0);
  uint64_t first[2] = {0, 0};
  for (const auto& e : ea.ev_info(p.qp.qpn_a)) first[e.plane] += e.ctr[EvCtr::tx_pkts];
  INFO("after reconnection: plane 0 " << first[0] << ", plane 1 " << first[1]);
  CHECK(first[0] + first[1] == kMessages * kSize / 4096);
  CHECK(first[0] == first[1]);  // equal planes: a leaked or underflowed charge would tilt this
}

// Once everything is acknowledged no charge is left: with the late
// plane prompt again, the next flight splits evenly.
TEST_CASE("no plane charge outlives its packet") {
  LatePlane lp;
  Pair& p = *lp.pair;
  const auto& cfg = lp.cfg;
  constexpr uint32_t kSize = LatePlane::kSize, kMessages = LatePlane::kMessages;
  p.net.run_until_idle(p.net.now() + 1'000'000'000);
  REQUIRE(p.net.completions(0).size() == kMessages);
  const QpInfo qi = p.info(0);
  REQUIRE(qi.ctr[QpCtr::rtx_sack] > 0);
  INFO("declared lost " << qi.ctr[QpCtr::rtx_sack] << ", spurious " << qi.ctr[QpCtr::rtx_spurious]);
  uint64_t before[2] = {0, 0};
  for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) before[e.plane] += e.ctr[EvCtr::tx_pkts];
  p.net.uplink(0, 1).set_params(cfg.link);
  for (uint32_t i = 0; i < kMessages; ++i)
    REQUIRE(p.net.engine(0).post_send(p.qp.qpn_a, p.write(100 + i, kSize, i * kSize)) == 0);
  p.net.poll(0);
  p.net.run_until_idle(p.net.now() + 1'000'000'000);
  REQUIRE(p.net.completions(0).size() == 2 * kMessages);
  uint64_t after[2] = {0, 0};
  for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) after[e.plane] += e.ctr[EvCtr::tx_pkts];
  INFO("second flight: plane 0 " << after[0] - before[0] << ", plane 1 " << after[1] - before[1]);
  CHECK(after[0] - before[0] == after[1] - before[1]);
}

// PSNs are 24 bits: a send window that spans 0xFFFFFF -> 0 must hold only
// what was sent. Unmasked, it held every PSN: a timeout's walk over the
// window never ended, and an ACK for a PSN never sent was taken.
TEST_CASE("a send window across the PSN wrap holds only what was sent") {
  const uint32_t sq_psn = GENERATE(0x100u, 0xFFFFF8u);
  INFO("sq_psn " << std::hex << sq_psn);
  SECTION("a timeout resends the window and stops") {
    QpAttr a;
    a.sq_psn = sq_psn;
    a.timeout = 4;
    a.retry_linear = 1;
    a.retry_exp = 1;
    Pair p(basic(), a);
    for (uint32_t pl = 0; pl < 4; ++pl)  // every packet lost
      p.net.uplink(0, pl).set_sink([](std::vector<uint8_t>, uint64_t, uint32_t) {});
    REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 16 * 4096)) == 0);
    p.net.run_until_idle(p.net.now() + 50'000'000);
    const QpInfo qi = p.info(0);
    CHECK(qi.ctr[QpCtr::rto_fired] > 0);
    CHECK(qi.ctr[QpCtr::tx_retransmits] <= 16 * qi.ctr[QpCtr::rto_fired]);
    REQUIRE(p.net.completions(0).size() == 1);
    CHECK(p.net.completions(0)[0].status == WcStatus::retry_exc_err);
  }
  SECTION("an ACK for a PSN never sent is dropped as stale") {
    QpAttr a;
    a.sq_psn = sq_psn;
    Pair p(basic(), a);
    for (uint32_t pl = 0; pl < 4; ++pl)  // the responder receives nothing
      p.net.uplink(0, pl).set_sink([](std::vector<uint8_t>, uint64_t, uint32_t) {});
    REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 16 * 4096)) == 0);
    p.net.run_until(p.net.now() + 500);
    QpInfo qi = p.info(0);
    REQUIRE(qi.snd_nxt == wire::psn_add(sq_psn, 16));
    std::vector<uint8_t> buf(512);
    auto m = frame_between(p.net, buf, 1, 0, wire::Opcode::mrc_ack);
    REQUIRE(m.base);
    m.bth().set_dest_qp(p.qp.qpn_a);
    m.bth().set_psn(wire::psn_add(qi.snd_nxt, 4));
    m.aeth().set_syndrome(wire::kAethAck);
    wire::finish_frame(m);
    p.net.engine(0).on_rx(0, {buf.data(), m.at.size}, p.net.now());
    p.net.poll(0);
    qi = p.info(0);
    CHECK(qi.ctr[QpCtr::rx_drop_stale_ack] == 1);
    CHECK(p.net.completions(0).empty());
  }
}

// The SACK carries its offsets in 16 signed bits and MPR travels in a byte:
// a window of kMaxMpr units is the largest, and its far end still decodes.
TEST_CASE("the largest MPR keeps every SACK offset decodable") {
  {
    QpAttr a;
    a.mpr = a.mpr_dest = wire::kMaxMpr + 1;
    sim::TestNet net(basic());
    CHECK(net.connect_qp_pair(0, 1, a, 0, 0).error == ModifyError::bad_attr);
  }
  QpAttr a;
  a.mpr = a.mpr_dest = wire::kMaxMpr;
  Pair p(basic(), a);
  std::vector<std::vector<uint8_t>> acks;
  for (uint32_t pl = 0; pl < 4; ++pl)
    p.net.uplink(1, pl).set_sink([&](std::vector<uint8_t> f, uint64_t, uint32_t) { acks.push_back(std::move(f)); });
  // One packet at the window's far end, behind a hole at its start.
  const uint32_t psn = wire::psn_add(p.info(1).rcv_cack, wire::kMaxMpr * wire::kMprUnitPsns);
  std::vector<uint8_t> buf(512);
  auto m = frame_between(p.net, buf, 0, 1, wire::Opcode::mrc_write_only, 64);
  REQUIRE(m.base);
  m.bth().set_dest_qp(p.qp.qpn_b);
  m.bth().set_psn(psn);
  m.bth().set_ack_req(true);
  m.reth().set_va(0x900000);
  m.reth().set_rkey(p.rkey);
  m.reth().set_dma_len(64);
  wire::finish_frame(m);
  p.net.engine(1).on_rx(0, {buf.data(), m.at.size}, p.net.now());
  p.net.run_until(p.net.now() + 10'000);
  REQUIRE(p.info(1).ctr[QpCtr::rx_data_pkts] == 1);
  REQUIRE(!acks.empty());
  wire::Packet pk;
  REQUIRE(wire::parse_frame(acks.back(), pk) == wire::ParseError::ok);
  REQUIRE(pk.at.opcode == uint8_t(wire::Opcode::mrc_sack));
  const uint64_t bitmap = pk.seth().sack_bitmap();
  REQUIRE(bitmap != 0);
  // As the requester reads it.
  const uint32_t base = wire::psn_add(pk.seth().cack_psn(), static_cast<int16_t>(pk.seth().sack_offset()));
  CHECK(wire::psn_add(base, 63 - std::countl_zero(bitmap)) == psn);
}

// RoCEv2 places a message's packets in order after checking its first: a
// region deregistered mid-message, its slot then reused by a region that
// grants none of those bytes, must refuse the rest.
TEST_CASE("rocev2: a region deregistered mid-message takes no more of it") {
  Pair p(basic(Transport::rocev2, 1));
  std::vector<uint8_t> guard(1 << 20, 0);
  const Nanos t0 = p.net.now();
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 16 * 4096)) == 0);
  while (p.info(1).ctr[QpCtr::rx_data_pkts] == 0 && p.net.now() < t0 + 1'000'000) p.net.run_until(p.net.now() + 10);
  const uint64_t placed_before = p.info(1).ctr[QpCtr::rx_data_pkts];
  REQUIRE(placed_before >= 1);
  REQUIRE(placed_before < 16);
  REQUIRE(p.net.engine(1).dereg_mr(p.x));
  uint32_t l = 0, r = 0;
  REQUIRE(p.net.engine(1).reg_mr(1, guard.data(), 0x900000, 4096, kAccessLocalWrite, l, r));
  p.net.run_until_idle(t0 + 10'000'000);
  size_t touched = 0;
  for (uint8_t b : guard) touched += b != 0;
  CHECK(touched == 0);
  CHECK(p.info(1).ctr[QpCtr::rx_data_pkts] == placed_before);
  CHECK(p.info(1).ctr[QpCtr::rx_drop_bad_rkey] >= 1);
  REQUIRE(p.net.completions(0).size() == 1);
  CHECK(p.net.completions(0)[0].status == WcStatus::rem_access_err);
}

// A WRITE_IMM that finds no receive posted fails the responder's QP; the
// requester must be told so, not see the message acknowledged, while the
// WRITE placed before it still completes.
TEST_CASE("a WRITE_IMM with no receive posted fails on both sides") {
  for (Transport t : {Transport::mrc, Transport::rocev2}) {
    INFO((t == Transport::mrc ? "mrc" : "rocev2"));
    Pair p(basic(t, t == Transport::mrc ? 4 : 1));
    REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 100)) == 0);
    SendWr w = p.write(2, 100, 100);
    w.opcode = WrOpcode::rdma_write_with_imm;
    REQUIRE(p.net.post_send(0, p.qp.qpn_a, w) == 0);
    p.net.run_until_idle(p.net.now() + 100'000'000);
    CHECK(p.info(1).state == QpState::error);
    CHECK(p.info(1).ctr[QpCtr::rx_drop_no_recv_wqe] == 1);
    const auto& c = p.net.completions(0);
    REQUIRE(c.size() == 2);
    CHECK(c[0].wr_id == 1);
    CHECK(c[0].status == WcStatus::success);
    CHECK(c[1].wr_id == 2);
    CHECK(c[1].status == WcStatus::rem_op_err);
    CHECK(p.info(0).state == QpState::error);
  }
}

// Port status is sent once. A peer whose "plane back up" update is lost
// still answers probes on that plane, and that answer puts the plane back
// in use: with one plane, the QP would otherwise never send again.
TEST_CASE("a probe answered on a plane the peer reported down brings it back") {
  Pair p(basic(Transport::mrc, 1));
  // The peer announces plane 0 down while it still carries frames.
  REQUIRE(p.net.engine(1).send_endpoint_request(0, p.net.addr(0, 0), wire::EvFormat::udp, 0xC000,
                                                uint8_t(wire::EndpointOp::port_status_update), 1, 1u, 0, p.net.now()));
  p.net.poll(1);
  p.net.run_until(p.net.now() + 10'000);
  REQUIRE(p.net.engine(0).ev_info(p.qp.qpn_a)[0].state == EvState::assumed_bad);
  // Its "all up" update is lost.
  p.net.uplink(1, 0).set_blackhole(true);
  p.net.engine(1).send_port_status(p.net.now());
  p.net.poll(1);
  p.net.run_until(p.net.now() + 10'000);
  p.net.uplink(1, 0).set_blackhole(false);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 1000)) == 0);
  p.net.run_until(p.net.now() + 100'000'000);
  const QpInfo qi = p.info(0);
  INFO("probes " << qi.ctr[QpCtr::tx_probes] << ", replies " << qi.ctr[QpCtr::rx_probe_replies]);
  REQUIRE(p.net.completions(0).size() == 1);
  CHECK(p.net.completions(0)[0].status == WcStatus::success);
  CHECK(qi.ctr[QpCtr::peer_plane_up_by_probe] == 1);
  CHECK(p.net.engine(0).ev_info(p.qp.qpn_a)[0].state == EvState::good);
}

// RoCEv2 binds a QP to one path and has no EV health: the controller cannot
// deny its EV, and a plane that goes down and up sends no MRC probes.
TEST_CASE("rocev2: no EV states to set and no probes after a plane flap") {
  Pair p(basic(Transport::rocev2, 1));
  CHECK_FALSE(p.net.engine(0).set_ev_state(p.qp.qpn_a, 0, EvState::denied, p.net.now()));
  CHECK(p.net.engine(0).ev_info(p.qp.qpn_a)[0].state == EvState::good);
  p.net.engine(0).set_plane_up(0, false, p.net.now());
  p.net.poll(0);
  p.net.run_until(p.net.now() + 10'000);
  p.net.engine(0).set_plane_up(0, true, p.net.now());
  p.net.poll(0);
  // The peer's port status, down then up, changes nothing either.
  REQUIRE(p.net.engine(1).send_endpoint_request(0, p.net.addr(0, 0), wire::EvFormat::udp, 0xC000,
                                                uint8_t(wire::EndpointOp::port_status_update), 1, 1u, 0, p.net.now()));
  p.net.poll(1);
  p.net.run_until(p.net.now() + 10'000);
  p.net.engine(1).send_port_status(p.net.now());
  p.net.poll(1);
  p.net.run_until(p.net.now() + 10'000);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 10000)) == 0);
  p.net.run_until(p.net.now() + 100'000'000);
  REQUIRE(p.net.completions(0).size() == 1);
  CHECK(p.net.completions(0)[0].status == WcStatus::success);
  CHECK(p.net.engine(0).ev_info(p.qp.qpn_a)[0].state == EvState::good);
  CHECK(p.info(0).ctr[QpCtr::tx_probes] == 0);
  CHECK(p.net.engine(1).counters()[DevCtr::rx_drop_wrong_transport] == 0);
  CHECK(p.net.engine(0).next_deadline() == kNever);
}

TEST_CASE("SKIP's end is found across the pick counter's wrap") {
  // Set two picks before the wrap, ending six after it.
  CHECK(still_skipping(0xFFFFFFFEu, 6));
  CHECK(still_skipping(0, 6));
  CHECK_FALSE(still_skipping(6, 6));
  // Set just before the wrap, ending before it: a count past the wrap is
  // past the end, not 2^32 picks short of it.
  CHECK(still_skipping(0xFFFFFFF0u, 0xFFFFFFF8u));
  CHECK_FALSE(still_skipping(0, 0xFFFFFFF8u));
  CHECK_FALSE(still_skipping(100, 0xFFFFFFF8u));
  // The longest SKIP allowed still ends.
  CHECK(still_skipping(5, 5 + kMaxSkipPicks));
  CHECK_FALSE(still_skipping(5 + kMaxSkipPicks, 5 + kMaxSkipPicks));
}

// A QP left with ASSUMED_BAD EVs and a peer that will never answer again
// (its QP is in ERROR) stops probing once idle, rather than for as long as
// it lives; posting work probes those EVs again.
TEST_CASE("an idle QP stops probing EVs nobody answers and work resumes the probes") {
  Pair p(basic(Transport::mrc, 2));
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(1, 10000)) == 0);
  REQUIRE(p.net.run_until_idle(p.net.now() + 10'000'000));
  REQUIRE(p.net.completions(0).size() == 1);
  REQUIRE(p.net.engine(0).modify_qp(p.qp.qpn_a, QpState::error, {}, p.net.now()) == ModifyError::ok);
  // Host 1's plane 1 flaps: that plane's EVs go ASSUMED_BAD and are probed.
  Engine& e = p.net.engine(1);
  e.set_plane_up(1, false, p.net.now());
  e.set_plane_up(1, true, p.net.now());
  p.net.poll(1);
  uint64_t bad = 0;
  for (const auto& ev : e.ev_info(p.qp.qpn_b)) bad += ev.state == EvState::assumed_bad;
  REQUIRE(bad > 0);
  const Nanos flap = p.net.now();
  // Without the limit the probes never stop and the net is never idle.
  CHECK(p.net.run_until_idle(flap + 1'000'000'000));
  const QpInfo parked = p.info(1);
  // The plane's EVs went out together: one scout probes for them all, and
  // counts the plane's silence, not its own.
  CHECK(parked.ctr[QpCtr::probes_parked] == 1);
  CHECK(parked.ctr[QpCtr::tx_probes] == EngineConfig{}.idle_probe_limit);
  CHECK(parked.ctr[QpCtr::rx_probe_replies] == 0);
  CHECK(e.next_deadline() == kNever);
  // Work to send: the parked EVs are probed again at once.
  SendWr w;
  w.wr_id = 9;
  REQUIRE(p.net.post_send(1, p.qp.qpn_b, w) == 0);
  p.net.run_until(p.net.now() + 1000);
  CHECK(p.info(1).ctr[QpCtr::tx_probes] == parked.ctr[QpCtr::tx_probes] + 1);
}

// Plane 1 of two falls 14 us behind mid-transfer and loses nothing. With a
// 1 us reorder window its packets are declared lost, and each verdict takes
// an EV out of service; the SACKs for those packets show they arrived.
// Without acting on that, each of the 16 EVs marked waited for a probe.
TEST_CASE("a packet declared lost that arrives puts its EV back at once, and its plane if swept") {
  for (const uint32_t silent_losses : {0u, 8u}) {
    INFO("plane_silent_losses " << silent_losses);
    LatePlane lp(1, silent_losses);
    Pair& p = *lp.pair;
    constexpr uint32_t kSize = LatePlane::kSize, kMessages = LatePlane::kMessages;
    p.net.run_until_idle(1'000'000'000);
    REQUIRE(p.net.completions(0).size() == kMessages);
    CHECK(std::memcmp(p.src.data(), p.dst.data(), kMessages * kSize) == 0);
    const QpInfo qi = p.info(0);
    uint64_t probes = 0;
    size_t bad = 0;
    for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) {
      probes += e.ctr[EvCtr::probes];
      bad += e.state == EvState::assumed_bad;
    }
    const uint64_t marked = qi.ctr[QpCtr::ev_marked_bad];
    INFO(marked << " EVs marked bad, " << qi.ctr[QpCtr::ev_loss_disproved] << " put back by their late packet, "
                << qi.ctr[QpCtr::ev_recovered] << " by probes; " << probes << " probes");
    REQUIRE(marked >= 8);  // the case at hand
    CHECK(bad == 0);
    CHECK(qi.ctr[QpCtr::ev_recovered] * 4 <= marked);  // few waited for a probe's answer
    CHECK(probes * 4 <= marked);
    if (silent_losses) {  // the plane is swept, then back whole
      CHECK(qi.ctr[QpCtr::plane_silent] >= 1);
      CHECK(qi.ctr[QpCtr::plane_silent_disproved] == qi.ctr[QpCtr::plane_silent]);
    } else {
      CHECK(qi.ctr[QpCtr::ev_loss_disproved] > 0);
    }
  }
}

// The proof that a packet taken for lost arrived must never bring back a
// path that failed. Each case below once did (found in review): the ACK of a
// resend taken as the dead plane's own delivery (the plane back whole 11
// times in 40 seeds), a SACK for the resend overtaken by one that
// acknowledged it (78 EVs of a dead plane back in 20 seeds), and one EV
// value on two planes (46 in 10). No probe on the dead plane is ever
// answered, so any of its EVs going back to GOOD is one of these.
namespace {
// Verdicts on lateness with nothing else moving: a reorder window of 1 us
// kept as it is, and a fixed send window instead of congestion control.
struct LateVerdicts {
  sim::TestNet::Config cfg;
  QpAttr attr;
  LateVerdicts(uint32_t planes, uint32_t silent_losses, uint32_t window_bytes, uint64_t seed = 1)
      : cfg(basic(Transport::mrc, planes)) {
    cfg.seed = seed;
    cfg.engine_template.plane_silent_losses = silent_losses;
    cfg.engine_template.reorder_window = 1000;
    cfg.engine_template.reorder_window_growth = 1;
    attr.cc.algo = CcAlgo::none;
    attr.cc.fixed_window_bytes = window_bytes;
  }
};

struct DeadPath {
  std::unique_ptr<Pair> p;
  DeadPath(uint32_t planes, uint64_t seed, uint32_t silent_losses, const std::vector<EvEntry>& evs = {}) {
    LateVerdicts v(planes, silent_losses, 64 * 1024, seed);
    v.attr.ev.evs = evs;
    p = std::make_unique<Pair>(v.cfg, v.attr);
  }
  // Posts 16 writes, fails the path 5 us in, runs to the end.
  template <class Fail>
  void run(Fail fail) {
    for (uint64_t i = 0; i < 16; ++i) REQUIRE(p->net.post_send(0, p->qp.qpn_a, p->write(i, 60000, i * 60000)) == 0);
    p->net.at(p->net.now() + 5'000, [&net = p->net, fail] { fail(net); });
    p->net.run_until_idle(50'000'000);
    REQUIRE(p->net.completions(0).size() == 16);
    CHECK(std::memcmp(p->src.data(), p->dst.data(), 16 * 60000) == 0);
  }
  // EVs back to GOOD among those whose value's index (from 0xC000) is
  // `residue` modulo `planes`: the failed plane's, by construction.
  uint64_t back_to_good(uint32_t planes, uint32_t residue) const {
    uint64_t n = 0;
    for (const auto& ev : p->net.ev_events(0)) n += (ev.ev - 0xC000) % planes == residue && ev.to == EvState::good;
    return n;
  }
};
}  // namespace

TEST_CASE("a resend's ACK does not bring back the silent plane it was not sent on") {
  uint64_t disproved = 0, back = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    DeadPath d(2, seed, 8);
    sim::LinkParams reo = d.p->net.uplink(0, 0).params();
    reo.reorder_prob = 0.3;  // plane 0's late packets are resent on plane 1
    reo.reorder_max_ns = 30000;
    d.p->net.uplink(0, 0).set_params(reo);
    d.run([](sim::TestNet& net) { net.set_plane_up(1, false); });
    disproved += d.p->info(0).ctr[QpCtr::plane_silent_disproved];
    back += d.back_to_good(2, 1);
  }
  CHECK(disproved == 0);
  CHECK(back == 0);
}

TEST_CASE("a SACK overtaken on the way back does not bring back a dead path") {
  uint64_t back = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    DeadPath d(3, seed, 0);
    sim::LinkParams slow = d.p->net.uplink(1, 1).params();
    slow.delay_ns = 15'000;  // the responder's SACKs on plane 1 fall behind
    d.p->net.uplink(1, 1).set_params(slow);
    d.run([](sim::TestNet& net) { net.uplink(0, 0).set_up(false); });
    back += d.back_to_good(3, 0);
  }
  CHECK(back == 0);
}

TEST_CASE("an EV value used on two planes does not bring back the dead plane's EV") {
  std::vector<EvEntry> evs;
  for (uint32_t i = 0; i < 4; ++i) evs.push_back(EvEntry{0xC000 + i / 2, static_cast<uint8_t>(i % 2)});
  uint64_t back = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    DeadPath d(2, seed, 0, evs);
    d.run([](sim::TestNet& net) { net.uplink(0, 0).set_up(false); });
    for (const auto& ev : d.p->net.ev_events(0)) back += ev.to == EvState::good;  // plane 0's probes go unanswered
  }
  CHECK(back == 0);
}

// Frames as the tests below watch them on a link.
namespace {
struct Parsed {
  bool ok = false;
  wire::Packet p;
};
Parsed parse(const std::vector<uint8_t>& f) {
  Parsed r;
  r.ok = wire::parse_frame(f, r.p) == wire::ParseError::ok;
  return r;
}
uint32_t ev_of(const wire::Packet& p) { return wire::ev_decode(wire::EvFormat::udp, p); }
}  // namespace

// A SACK naming the resend, sent before a SACK for a duplicate (which places
// no byte, so both carry the same rcvd_bytes), is overtaken by it: the
// requester sees the PSN acknowledged, then the SACK naming the resend, "not
// behind" the newest, and takes it for proof the dead first copy arrived.
TEST_CASE("a SACK overtaken by a duplicate's SACK of equal rcvd_bytes does not bring back a dead EV") {
  LateVerdicts v(2, 0, 32 * 1024);
  Pair p(v.cfg, v.attr);
  sim::TestNet& net = p.net;
  uint32_t dead = 0, x = 0, resend_ev = 0;
  bool have_dead = false, injected = false, held = false;
  std::vector<uint8_t> stash;  // the SACK held back until the next one has passed
  std::vector<uint8_t> dup;    // an early data frame on plane 1, already delivered
  for (uint32_t pl = 0; pl < 2; ++pl) {
    net.uplink(0, pl).set_sink([&, pl](std::vector<uint8_t> f, uint64_t, uint32_t w) {
      Parsed r = parse(f);
      if (r.ok && r.p.at.payload_len && pl == 0 && !have_dead && net.now() > 3000 && !r.p.bth().rtx()) {
        have_dead = true;
        dead = ev_of(r.p);
        x = r.p.bth().psn();
      }
      if (r.ok && have_dead && pl == 0 && ev_of(r.p) == dead) return;  // the dead path: data and probes
      if (r.ok && r.p.at.payload_len && pl == 1 && dup.empty()) dup = f;
      const bool resend_of_x = r.ok && r.p.at.payload_len && have_dead && r.p.bth().psn() == x && r.p.bth().rtx();
      net.downlink(1, pl).send(std::move(f), 0, w);
      if (resend_of_x && !injected && pl == 1 && !dup.empty()) {
        injected = true;
        resend_ev = ev_of(r.p);
        net.downlink(1, pl).send(dup, 0, 0);  // a duplicate right behind it: no byte placed
      }
    });
    net.uplink(1, pl).set_sink([&, pl](std::vector<uint8_t> f, uint64_t, uint32_t w) {
      Parsed r = parse(f);
      if (r.ok && injected && !held && (r.p.at.flags & wire::kOpSeth) && !r.p.seth().probe_reply()) {
        const auto s = r.p.seth();
        const uint32_t trig = wire::psn_add(s.cack_psn(), static_cast<int16_t>(s.ack_psn_offset()));
        if (trig == x && s.entropy() == resend_ev) {  // the SACK naming the resend: held back
          held = true;
          stash = std::move(f);
          return;
        }
      }
      net.downlink(0, pl).send(std::move(f), 0, w);
      if (!stash.empty()) net.downlink(0, pl).send(std::exchange(stash, {}), 0, 0);  // overtaken by one SACK
    });
  }
  for (uint64_t i = 0; i < 64; ++i) REQUIRE(net.post_send(0, p.qp.qpn_a, p.write(i, 1000, i * 1000)) == 0);
  net.run_until_idle(20'000'000);
  REQUIRE(net.completions(0).size() == 64);
  REQUIRE(injected);
  REQUIRE(held);
  uint64_t back = 0;
  for (const auto& e : net.ev_events(0)) back += e.ev == dead && e.to == EvState::good;
  INFO("dead EV " << dead << " x " << x << " disproved " << p.info(0).ctr[QpCtr::ev_loss_disproved]);
  CHECK(back == 0);  // its probes are never answered
}

// The controller takes out EVs the engine has already taken out for a loss
// (set_ev_state ASSUMED_BAD: the same state, so ev_mark returns before
// out_by is reset). A late packet must not undo the controller's decision;
// only a probe may (and probes here are 10 ms apart, past the run).
TEST_CASE("an EV the controller marked ASSUMED_BAD stays out though a late packet of it arrives") {
  LateVerdicts v(2, 0, 256 * 1024);
  auto& cfg = v.cfg;
  cfg.engine_template.probe_interval = 10'000'000;
  cfg.engine_template.probe_interval_max = 10'000'000;
  Pair p(cfg, v.attr);
  sim::TestNet& net = p.net;
  for (uint32_t i = 0; i < 16; ++i)
    REQUIRE(net.engine(0).post_send(p.qp.qpn_a, p.write(i, 64 * 1024, i * 64 * 1024)) == 0);
  net.poll(0);
  sim::LinkParams slow = cfg.link;
  slow.delay_ns = 15'000;
  net.uplink(0, 1).set_params(slow);
  std::map<uint32_t, Nanos> marked;  // EV value -> when the controller marked it
  std::function<void()> controller = [&] {
    const auto evs = net.engine(0).ev_info(p.qp.qpn_a);
    for (uint32_t i = 0; i < evs.size(); ++i) {
      if (evs[i].state != EvState::assumed_bad || marked.count(evs[i].value)) continue;
      REQUIRE(net.engine(0).set_ev_state(p.qp.qpn_a, i, EvState::assumed_bad, net.now()));
      marked[evs[i].value] = net.now();
    }
    net.poll(0);
    if (net.now() < 2'000'000) net.at(net.now() + 200, controller);
  };
  net.at(net.now() + 200, controller);
  net.run_until_idle(5'000'000);
  REQUIRE(net.completions(0).size() == 16);
  REQUIRE(!marked.empty());
  uint64_t back = 0;
  for (const auto& e : net.ev_events(0)) back += e.to == EvState::good && marked.count(e.ev) && e.t > marked[e.ev];
  INFO(marked.size() << " EVs marked by the controller; disproved " << p.info(0).ctr[QpCtr::ev_loss_disproved]);
  CHECK(back == 0);
}

// One EV of plane 1 is dead from the start: its loss takes it out (out_by
// loss) and its probes go unanswered. Later plane 1 as a whole falls 14 us
// behind, is swept, and proves only late: plane_sweep_disproved brings back
// every EV out for a loss, the dead one too, though its loss was no part of
// the streak.
TEST_CASE("a swept plane that comes back does not bring back an EV that failed before the streak") {
  uint64_t back = 0, disproved = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    LateVerdicts v(2, 8, 256 * 1024, seed);
    auto& cfg = v.cfg;
    Pair p(cfg, v.attr);
    sim::TestNet& net = p.net;
    uint32_t dead = 0;
    bool have_dead = false;
    net.uplink(0, 1).set_sink([&](std::vector<uint8_t> f, uint64_t, uint32_t w) {
      Parsed r = parse(f);
      if (r.ok && !have_dead && r.p.at.payload_len) have_dead = true, dead = ev_of(r.p);
      if (r.ok && have_dead && ev_of(r.p) == dead) return;  // a dead path: data and probes
      net.downlink(1, 1).send(std::move(f), 0, w);
    });
    for (uint32_t i = 0; i < 16; ++i)
      REQUIRE(net.engine(0).post_send(p.qp.qpn_a, p.write(i, 64 * 1024, i * 64 * 1024)) == 0);
    net.poll(0);
    net.at(net.now() + 30'000, [&net, &cfg] {  // the dead EV is out by now; then plane 1 falls behind
      sim::LinkParams slow = cfg.link;
      slow.delay_ns = 15'000;
      net.uplink(0, 1).set_params(slow);
    });
    net.run_until_idle(50'000'000);
    REQUIRE(net.completions(0).size() == 16);
    REQUIRE(have_dead);
    for (const auto& e : net.ev_events(0)) back += e.ev == dead && e.to == EvState::good;
    disproved += p.info(0).ctr[QpCtr::plane_silent_disproved];
  }
  INFO(disproved << " sweeps disproved");
  REQUIRE(disproved > 0);
  CHECK(back == 0);
}

// Plane 1 falls behind and marks CE on everything it queues; plane 0 marks
// nothing. Late first copies on plane 1 arrive after their resends on plane
// 0, and the SACKs they trigger carry their CE mark and name their EV. The
// mark (and the skip) belong to that EV: put on the resend's, they steered
// traffic off a plane-0 path that never saw congestion.
TEST_CASE("a SACK's congestion mark goes on the EV it names, a late first copy's, not the resend's") {
  LateVerdicts v(2, 0, 256 * 1024);
  Pair p(v.cfg, v.attr);
  for (uint32_t i = 0; i < 16; ++i)
    REQUIRE(p.net.engine(0).post_send(p.qp.qpn_a, p.write(i, 64 * 1024, i * 64 * 1024)) == 0);
  p.net.poll(0);
  sim::LinkParams late = v.cfg.link;
  late.delay_ns = 15'000;
  late.ecn_min_bytes = 0;
  late.ecn_max_bytes = 1;  // CE on every frame that finds the queue busy
  p.net.uplink(0, 1).set_params(late);
  p.net.run_until_idle(1'000'000'000);
  REQUIRE(p.net.completions(0).size() == 16);
  uint64_t marks[2] = {0, 0};
  for (const auto& e : p.net.engine(0).ev_info(p.qp.qpn_a)) marks[e.plane] += e.ctr[EvCtr::ecn_marks];
  const QpInfo qi = p.info(0);
  INFO("ECN marks on plane 0's EVs " << marks[0] << ", plane 1's " << marks[1] << "; " << qi.ctr[QpCtr::tx_retransmits]
                                     << " resends");
  REQUIRE(qi.ctr[QpCtr::tx_retransmits] > 0);  // late copies were resent on plane 0
  CHECK(marks[1] > 0);
  CHECK(marks[0] == 0);
}

TEST_CASE("A gray failure sets its loss on exactly the links its target covers, and healing gives back their own") {
  using Kind = sim::Fabric::Target::Kind;
  sim::Fabric::Config cfg = ShiftedWrites::fabric();  // 8 hosts, 4 leaves, 4 spines, 2 planes
  cfg.host_link.loss = 0.01;                          // built with: host links only
  sim::Fabric fab(cfg);
  const uint32_t hosts = cfg.hosts, pairs = fab.leaves() * fab.spines();
  struct Seen {
    uint32_t plane;
    double loss;
  };
  // Every link (uplinks, downlinks, leaf-spine, spine-leaf) with its plane.
  auto links = [&] {
    std::vector<Seen> out;
    for (const auto* v : {&fab.uplinks(), &fab.downlinks()})
      for (size_t i = 0; i < v->size(); ++i) out.push_back({uint32_t(i / hosts), (*v)[i]->params().loss});
    for (const auto* v : {&fab.leaf_to_spine_links(), &fab.spine_to_leaf_links()})
      for (size_t i = 0; i < v->size(); ++i) out.push_back({uint32_t(i / pairs), (*v)[i]->params().loss});
    return out;
  };
  const std::vector<Seen> built = links();
  // How many links `t` changed, after checking each changed one is on its
  // plane and has the combined loss.
  auto changed_by = [&](const sim::Fabric::Target& t, double loss) {
    fab.set_gray_loss(t, loss);
    const std::vector<Seen> now = links();
    uint32_t changed = 0;
    for (size_t i = 0; i < now.size(); ++i) {
      if (now[i].loss == built[i].loss) continue;
      ++changed;
      CHECK(now[i].plane == t.plane);
      CHECK(now[i].loss == Approx(1 - (1 - built[i].loss) * (1 - loss)));
    }
    fab.set_gray_loss(t, 0);
    const std::vector<Seen> healed = links();
    for (size_t i = 0; i < healed.size(); ++i) CHECK(healed[i].loss == built[i].loss);
    return changed;
  };
  CHECK(changed_by({Kind::plane, 1, 0}, 0.2) == 2 * hosts + 2 * pairs);
  CHECK(changed_by({Kind::leaf, 0, 1}, 0.2) == 2 * 2 + 2 * fab.spines());  // its 2 hosts, its spine links
  CHECK(changed_by({Kind::spine, 1, 2}, 0.2) == 2 * fab.leaves());
  CHECK(changed_by({Kind::fabric_link, 0, 5}, 1.0) == 2);
  CHECK(changed_by({Kind::host_link, 1, 7}, 0.5) == 2);
  // Out of the fabric, or not a probability: refused, nothing changed.
  CHECK_THROWS_AS(fab.set_gray_loss({Kind::plane, 2, 0}, 0.1), std::out_of_range);
  CHECK_THROWS_AS(fab.set_gray_loss({Kind::host_link, 0, hosts}, 0.1), std::out_of_range);
  CHECK_THROWS_AS(fab.set_gray_loss({Kind::leaf, 0, fab.leaves()}, 0.1), std::out_of_range);
  CHECK_THROWS_AS(fab.set_gray_loss({Kind::spine, 0, fab.spines()}, 0.1), std::out_of_range);
  CHECK_THROWS_AS(fab.set_gray_loss({Kind::fabric_link, 0, pairs}, 0.1), std::out_of_range);
  CHECK_THROWS_AS(fab.set_gray_loss({Kind::plane, 0, 0}, 1.5), std::invalid_argument);
  CHECK_THROWS_AS(fab.set_gray_loss({Kind::plane, 0, 0}, std::nan("")), std::invalid_argument);
  const std::vector<Seen> after = links();
  for (size_t i = 0; i < after.size(); ++i) CHECK(after[i].loss == built[i].loss);
}

TEST_CASE("SACKs and probe replies take the plane's reverse EVs in turn, so paths dead one way stall nothing") {
  // Every EV is dead one way, as through two spines of which one failed:
  // host 0's frames die on EVs with bit 2 set, host 1's on the others. Data
  // on the first arrives, but SACKs and probe replies reflected on the same
  // EV died, so the QP stalled for good. (Each plane holds EVs of both kinds.)
  Pair p(basic());
  auto one_way = [&](uint32_t from, uint32_t to, uint32_t plane, uint32_t dead_parity) {
    p.net.uplink(from, plane).set_sink([&, to, plane, dead_parity](std::vector<uint8_t> f, uint64_t, uint32_t wire) {
      REQUIRE(f.size() > 36);
      const uint32_t sport = f[34] << 8 | f[35];  // Ethernet, IPv4, then UDP
      if (((sport >> 2) & 1) == dead_parity) return;
      p.net.downlink(to, plane).send(std::move(f), 0, wire);
    });
  };
  for (uint32_t plane = 0; plane < 4; ++plane) {
    one_way(0, 1, plane, 1);
    one_way(1, 0, plane, 0);
  }
  for (uint64_t i = 0; i < 8; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
  p.net.run_until(p.net.now() + 200'000'000);
  INFO(p.info(0).ctr[QpCtr::rx_acks] << " SACKs, " << p.info(0).ctr[QpCtr::ev_marked_bad] << " EVs marked bad");
  CHECK(p.net.completions(0).size() == 8);
}

TEST_CASE("a trim NACK for a copy already resent does not send another") {
  // Links that trim and duplicate: every copy of a packet may come back as
  // several trims. Each used to send a resend of its own, each resend was
  // duplicated and trimmed again, and the NACKs multiplied without end.
  auto cfg = basic();
  cfg.link.trim_bytes = 4400;  // one full frame queued and the next is cut
  cfg.link.duplicate = 0.2;
  Pair p(cfg);
  for (uint64_t i = 0; i < 16; ++i) REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(i, 60000, i * 60000)) == 0);
  p.net.run_until(p.net.now() + 20'000'000);
  const QpInfo qi = p.info(0);
  INFO(qi.ctr[QpCtr::rx_nacks] << " NACKs, " << qi.ctr[QpCtr::rtx_nack] << " resends for them, "
                               << qi.ctr[QpCtr::rx_nack_stale] << " stale");
  CHECK(p.net.completions(0).size() == 16);
  CHECK(qi.ctr[QpCtr::rx_nack_stale] > 0);
  // Without the check: 262 NACK resends for 240 packets here, and without
  // end on a busier fabric.
  CHECK(qi.ctr[QpCtr::rtx_nack] <= qi.ctr[QpCtr::tx_data_pkts]);
}

TEST_CASE("probe confirmations take answers that come sooner than half the data's round trip") {
  // On a short, slow fabric a probe returns long before a 4 KB data frame
  // does (10 Gb/s, 100 ns links: about 0.7 us against 7). A floor of half
  // the data's least round trip turned every answer away as a duplicate,
  // and EVs taken out never came back.
  auto cfg = basic();
  cfg.link.rate_gbps = 10;
  cfg.link.delay_ns = 100;
  cfg.engine_template.probe_confirmations = 2;
  Pair p(cfg);
  REQUIRE(p.net.post_send(0, p.qp.qpn_a, p.write(0, 16384)) == 0);
  p.net.run_until(p.net.now() + 1'000'000);
  REQUIRE(p.net.completions(0).size() == 1);
  p.net.engine(0).set_plane_up(2, false, p.net.now());
  p.net.run_until(p.net.now() + 10'000);
  p.net.engine(0).set_plane_up(2, true, p.net.now());
  p.net.poll(0);
  p.net.run_until(p.net.now() + 1'000'000);
  const auto [on_plane, good] = p.good_on_plane(2);
  const QpInfo qi = p.info(0);
  INFO(qi.ctr[QpCtr::rx_probe_replies_unmatched] << " replies turned away");
  REQUIRE(on_plane > 0);
  CHECK(good == on_plane);
  CHECK(qi.ctr[QpCtr::rx_probe_replies_unmatched] == 0);
}
