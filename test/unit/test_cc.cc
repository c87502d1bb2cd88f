#include <catch2/catch.hpp>

#include <cmath>

#include "engine/cc.h"
#include "engine/cc_dcqcn.h"
#include "engine/cc_nscc.h"

using namespace mrc::engine;

namespace {

// The numbers below assume the NsccConfig defaults at 4 KiB MTU and
// 100 Gb/s: base_rtt 5 us, so BDP = 62500 B, max_cwnd = 93750 B,
// target = 3750 ns, qa_threshold = 15000 ns, QA gate = 93750 >> 3 = 11718 B,
// adjust every 8 MTU (32768 B) or 5 us.
constexpr uint32_t kMtu = 4096;
constexpr double kGbps = 100;
constexpr uint64_t kBase = 5000;

AckSample ack(uint32_t bytes, uint64_t rtt_ns, bool ecn, uint64_t inflight = 0) {
  AckSample s;
  s.bytes_acked = bytes;
  s.rtt_ns = rtt_ns;
  s.ecn = ecn;
  s.inflight_bytes = inflight;
  return s;
}

// Trimmed NACKs with QA off take exactly one MTU each: a way to start a test
// below max_cwnd without a test-only setter.
void shrink_by_mtus(Nscc& cc, int n, Nanos now) {
  for (int i = 0; i < n; ++i) cc.on_nack(true, kMtu, now);
}

NsccConfig no_qa() {
  NsccConfig c;
  c.disable_qa = true;
  return c;
}

}  // namespace

TEST_CASE("factory builds each algorithm with its defaults") {
  CcProfile p;
  p.algo = CcAlgo::none;
  p.fixed_window_bytes = 123456;
  auto none = make_congestion_control(p, kMtu, kGbps);
  REQUIRE(none);
  CHECK(none->name() == "none");
  CHECK(none->window_bytes() == 123456);
  none->on_timeout(1);
  none->on_ack(ack(kMtu, 100000, true), 2);
  CHECK(none->window_bytes() == 123456);
  CHECK(none->next_send_time() == 0);

  p.algo = CcAlgo::nscc;
  auto nscc = make_congestion_control(p, kMtu, kGbps);
  CHECK(nscc->name() == "nscc");
  CHECK(nscc->window_bytes() == 93750);  // starts at max_cwnd = 1.5 BDP
  CHECK(nscc->next_send_time() == 0);

  p.algo = CcAlgo::dcqcn;
  auto dcqcn = make_congestion_control(p, kMtu, kGbps);
  CHECK(dcqcn->name() == "dcqcn");
  CHECK(dcqcn->window_bytes() >= (uint64_t{1} << 30));
}

TEST_CASE("nscc resolves zero fields to the spec defaults") {
  Nscc cc(NsccConfig{}, kMtu, kGbps);
  CHECK(cc.base_rtt_ns() == 5000);
  CHECK(cc.target_delay_ns() == 3750);
  CHECK(cc.qa_threshold_ns() == 15000);
  CHECK(cc.max_cwnd() == 93750);
  CHECK(cc.cwnd() == 93750);

  // The BDP follows the line rate; explicit fields win over defaults.
  NsccConfig c;
  c.base_rtt = 8000;
  c.target_delay = 2000;
  c.qa_threshold = 9000;
  Nscc at400(c, kMtu, 400);
  CHECK(at400.max_cwnd() == 1.5 * 400 * 8000 / 8);
  CHECK(at400.target_delay_ns() == 2000);
  CHECK(at400.qa_threshold_ns() == 9000);
  c.max_cwnd = 50000;
  CHECK(Nscc(c, kMtu, 400).max_cwnd() == 50000);

  // Where nothing trims, the target is the whole base RTT, and the quick
  // adapt threshold follows it; an explicit target still wins.
  Nscc untrimmed(NsccConfig{}, kMtu, kGbps, false);
  CHECK(untrimmed.target_delay_ns() == 5000);
  CHECK(untrimmed.qa_threshold_ns() == 20000);
  CHECK(Nscc(c, kMtu, 400, false).target_delay_ns() == 2000);
  // The engine passes the device's view of its fabric down.
  CcProfile p;
  p.algo = CcAlgo::nscc;
  CHECK(static_cast<Nscc&>(*make_congestion_control(p, kMtu, kGbps, false)).target_delay_ns() == 5000);
}

TEST_CASE("nscc base_rtt only decreases") {
  Nscc cc(no_qa(), kMtu, kGbps);
  cc.on_ack(ack(kMtu, 4000, false), 100);
  CHECK(cc.base_rtt_ns() == 4000);
  cc.on_ack(ack(kMtu, 9000, false), 200);
  CHECK(cc.base_rtt_ns() == 4000);
  cc.on_ack(ack(kMtu, 0, false), 300);  // no sample
  CHECK(cc.base_rtt_ns() == 4000);
}

TEST_CASE("nscc delay EWMA discounts unmarked high delay") {
  SECTION("unmarked, above target, below 5 base_rtt: counts as base_rtt/4") {
    Nscc cc(no_qa(), kMtu, kGbps);
    cc.on_ack(ack(kMtu, kBase + 10000, false), 100);
    CHECK(cc.avg_delay_ns() == Approx(0.0125 * 1250));
  }
  SECTION("marked: the real delay") {
    Nscc cc(no_qa(), kMtu, kGbps);
    cc.on_ack(ack(kMtu, kBase + 10000, true), 100);
    CHECK(cc.avg_delay_ns() == Approx(0.0125 * 10000));
  }
  SECTION("unmarked but beyond 5 base_rtt: the real delay") {
    Nscc cc(no_qa(), kMtu, kGbps);
    cc.on_ack(ack(kMtu, kBase + 30000, false), 100);
    CHECK(cc.avg_delay_ns() == Approx(0.0125 * 30000));
  }
}

TEST_CASE("nscc trimmed NACK takes one MTU, other NACKs nothing") {
  Nscc cc(NsccConfig{}, kMtu, kGbps);  // QA on, but inside its first period
  cc.on_send(kMtu, 0);
  cc.on_nack(true, kMtu, 100);
  CHECK(cc.cwnd() == 93750 - kMtu);
  cc.on_nack(false, kMtu, 200);
  CHECK(cc.cwnd() == 93750 - kMtu);

  Nscc small(no_qa(), kMtu, kGbps);
  shrink_by_mtus(small, 100, 10);
  CHECK(small.cwnd() == kMtu);  // floor is one MTU
}

TEST_CASE("nscc no ECN, delay below target: proportional increase per adjust period") {
  Nscc cc(no_qa(), kMtu, kGbps);
  const Nanos t = 1000;
  shrink_by_mtus(cc, 10, t);
  const double c0 = 93750 - 10.0 * kMtu;
  REQUIRE(cc.cwnd() == c0);

  // delay 2000 ns: above the fast-increase bound, below target. Nothing moves
  // until more than 8 MTU are acked (time stands still, so no eta).
  const uint64_t rtt = kBase + 2000;
  for (int i = 0; i < 8; ++i) {
    cc.on_ack(ack(kMtu, rtt, false), t);
    CHECK(cc.cwnd() == c0);
  }
  cc.on_ack(ack(kMtu, rtt, false), t);
  // cwnd += alpha * acked * (target - delay) / cwnd, alpha = 4 MTU BDP /
  // (150000 B * 12000 ns) = 0.56889 B/ns: about 695 bytes here.
  const double alpha = 4.0 * kMtu * 62500 / (150000.0 * 12000);
  CHECK(cc.alpha() == Approx(alpha));
  CHECK(cc.cwnd() == Approx(c0 + alpha * 9 * kMtu * 1750 / c0));
  CHECK(cc.cwnd() - c0 == Approx(695.2).margin(0.5));

  // A smaller delay earns more.
  Nscc near(no_qa(), kMtu, kGbps);
  shrink_by_mtus(near, 10, t);
  for (int i = 0; i < 9; ++i) near.on_ack(ack(kMtu, kBase + 1500, false), t);
  CHECK(near.cwnd() - c0 > cc.cwnd() - c0);
}

TEST_CASE("nscc fast increase only after a whole cwnd of near-zero delay") {
  Nscc cc(no_qa(), kMtu, kGbps);
  const Nanos t = 1000;
  shrink_by_mtus(cc, 10, t);
  int first_fast = -1;
  uint64_t acked = 0;
  for (int i = 1; i <= 20 && first_fast < 0; ++i) {
    const double before = cc.cwnd();
    cc.on_ack(ack(kMtu, kBase, false), t);
    acked += kMtu;
    if (cc.cwnd() - before == Approx(0.25 * kMtu)) {
      first_fast = i;
      // Fast increase needs more than a window's worth of zero-delay bytes.
      CHECK(static_cast<double>(acked) > before);
    }
  }
  // 52790 B start, one proportional adjustment (+1490 B) at ack 9, so the
  // count first passes cwnd (54280 B) at ack 14.
  CHECK(first_fast == 14);
  // It then continues on every ACK.
  const double before = cc.cwnd();
  cc.on_ack(ack(kMtu, kBase, false), t);
  CHECK(cc.cwnd() == Approx(before + 0.25 * kMtu));
  // One ACK with queueing stops it.
  cc.on_ack(ack(kMtu, kBase + 2000, false), t);
  const double after_queue = cc.cwnd();
  cc.on_ack(ack(kMtu, kBase, false), t);
  CHECK(cc.cwnd() == after_queue);
}

TEST_CASE("nscc low delay grows cwnd to max_cwnd and never beyond") {
  Nscc cc(no_qa(), kMtu, kGbps);
  shrink_by_mtus(cc, 20, 0);
  REQUIRE(cc.cwnd() < 93750);
  double prev = cc.cwnd();
  Nanos now = 0;
  for (int i = 0; i < 500; ++i) {
    now += 300;  // one MTU at 100 Gb/s, roughly
    cc.on_ack(ack(kMtu, kBase + (i % 3) * 400, false), now);
    CHECK(cc.cwnd() >= prev);
    CHECK(cc.cwnd() <= 93750);
    prev = cc.cwnd();
  }
  CHECK(cc.cwnd() == 93750);
  CHECK(cc.window_bytes() == 93750);
}

TEST_CASE("nscc no ECN, delay at or above target: fair increase") {
  Nscc cc(no_qa(), kMtu, kGbps);
  const Nanos t = 1000;
  shrink_by_mtus(cc, 10, t);
  const double c0 = cc.cwnd();
  for (int i = 0; i < 9; ++i) cc.on_ack(ack(kMtu, kBase + 3750, false), t);
  // fi = 5 MTU per acked byte, applied as inc / cwnd.
  CHECK(cc.cwnd() == Approx(c0 + 5.0 * kMtu * 9 * kMtu / c0));
  CHECK(cc.multiplicative_decreases() == 0);
}

TEST_CASE("nscc ECN with low delay leaves cwnd alone") {
  Nscc cc(no_qa(), kMtu, kGbps);
  const Nanos t = 1000;
  shrink_by_mtus(cc, 10, t);
  const double c0 = cc.cwnd();
  for (int i = 0; i < 100; ++i) cc.on_ack(ack(kMtu, kBase + 3000, true), t);
  CHECK(cc.cwnd() == c0);
  CHECK(cc.multiplicative_decreases() == 0);
}

TEST_CASE("nscc ECN with low delay does not cut even when the average delay is high") {
  NsccConfig c = no_qa();
  c.adjust_period_threshold = 4000000000u;  // keep eta out of the picture
  Nscc cc(c, kMtu, kGbps);
  for (int i = 0; i < 50; ++i) cc.on_ack(ack(kMtu, kBase + 40000, true), 1000);
  REQUIRE(cc.multiplicative_decreases() == 1);
  REQUIRE(cc.avg_delay_ns() > 3750);
  const double c0 = cc.cwnd();
  for (Nanos t = 10000; t < 100000; t += 6000) {
    cc.on_ack(ack(kMtu, kBase + 3000, true), t);
    REQUIRE(cc.avg_delay_ns() > 3750);
  }
  CHECK(cc.cwnd() == c0);
  CHECK(cc.multiplicative_decreases() == 1);
  // The same average with a high-delay mark does cut.
  cc.on_ack(ack(kMtu, kBase + 40000, true), 200000);
  CHECK(cc.multiplicative_decreases() == 2);
}

TEST_CASE("nscc ECN with high delay: multiplicative decrease once per base_rtt") {
  Nscc cc(no_qa(), kMtu, kGbps);
  Nanos now = 1000;
  const uint64_t rtt = kBase + 20000;

  // The EWMA must climb past target (17 samples at 20 us) before anything is cut.
  int samples = 0;
  while (cc.multiplicative_decreases() == 0) {
    const double before = cc.cwnd();
    cc.on_ack(ack(kMtu, rtt, true), now);
    ++samples;
    if (cc.multiplicative_decreases() == 0) {
      CHECK(cc.cwnd() == before);
      CHECK(cc.avg_delay_ns() <= 3750);
    } else {
      const double avg = cc.avg_delay_ns();
      CHECK(avg > 3750);
      CHECK(cc.cwnd() == Approx(before * (1 - 0.8 * (avg - 3750) / avg)));
    }
    REQUIRE(samples < 100);
  }
  CHECK(samples == 17);

  // More marks within the same base_rtt do not cut again.
  const double after_first = cc.cwnd();
  for (int i = 0; i < 50; ++i) cc.on_ack(ack(kMtu, rtt, true), now + 4000);
  CHECK(cc.multiplicative_decreases() == 1);
  CHECK(cc.cwnd() == after_first);

  // Once base_rtt has passed, the next mark cuts again.
  const double before = cc.cwnd();
  cc.on_ack(ack(kMtu, rtt, true), now + 5001);
  CHECK(cc.multiplicative_decreases() == 2);
  CHECK(cc.cwnd() < before);
}

TEST_CASE("nscc decrease is floored at 1 - max_md_jump per step and at one MTU") {
  Nscc cc(no_qa(), kMtu, kGbps);
  Nanos now = 1000;
  // Very high marked delay: gamma alone would cut to about 0.2x.
  const uint64_t rtt = kBase + 1000000;
  for (int i = 0; i < 200; ++i) cc.on_ack(ack(kMtu, rtt, true), now);
  REQUIRE(cc.avg_delay_ns() > 100000);
  REQUIRE(cc.multiplicative_decreases() == 1);
  double prev = cc.cwnd();
  for (int step = 0; step < 40; ++step) {
    now += 5001;
    cc.on_ack(ack(kMtu, rtt, true), now);
    const double want = std::max(prev * 0.5, static_cast<double>(kMtu));
    // eta (0.15 MTU) may be paid on the same ACK once an adjust period passes.
    CHECK(cc.cwnd() >= want);
    CHECK(cc.cwnd() <= want + double{0.15f} * kMtu + 1e-6);
    CHECK(cc.cwnd() >= kMtu);
    prev = cc.cwnd();
  }
  CHECK(cc.cwnd() < 2 * kMtu);

  // A gentler max_md_jump floors each cut at 0.9x.
  NsccConfig c = no_qa();
  c.max_md_jump = 0.1f;
  Nscc gentle(c, kMtu, kGbps);
  for (int i = 0; i < 200; ++i) gentle.on_ack(ack(kMtu, rtt, true), 1000);
  CHECK(gentle.cwnd() == Approx(93750 * (1 - 0.1f)));
}

TEST_CASE("nscc quick adapt collapses cwnd to achieved bytes") {
  SECTION("high delay, little achieved") {
    Nscc cc(NsccConfig{}, kMtu, kGbps);
    cc.on_send(kMtu, 0);  // QA period: [0, 8750]
    cc.on_ack(ack(kMtu, kBase + 20000, false, 80000), 100);
    CHECK(cc.cwnd() > 90000);
    // Period over; this ACK's delay is beyond qa_threshold and only 2 MTU
    // (8192 B < 11718 B) were acked in it.
    cc.on_ack(ack(kMtu, kBase + 20000, false, 80000), 9000);
    CHECK(cc.quick_adapts() == 1);
    CHECK(cc.cwnd() == 2 * kMtu);

    // Congestion feedback for the 80000 B that were in flight is stale.
    cc.on_nack(true, kMtu, 9100);
    CHECK(cc.cwnd() == 2 * kMtu);
    for (int i = 0; i < 18; ++i) cc.on_ack(ack(kMtu, kBase + 20000, true), 9200);
    CHECK(cc.cwnd() == 2 * kMtu);
    CHECK(cc.multiplicative_decreases() == 0);
    // 4096 + 18 * 4096 = 77824 B seen; two more MTU pass the ignore budget.
    cc.on_ack(ack(kMtu, kBase, false), 9300);
    cc.on_ack(ack(kMtu, kBase, false), 9300);
    const double before = cc.cwnd();
    cc.on_nack(true, kMtu, 9400);
    CHECK(cc.cwnd() == std::max(before - kMtu, double{kMtu}));
  }
  SECTION("high delay but plenty achieved: no collapse") {
    Nscc cc(NsccConfig{}, kMtu, kGbps);
    cc.on_send(kMtu, 0);
    for (int i = 0; i < 3; ++i) cc.on_ack(ack(kMtu, kBase + 20000, false), 100);
    cc.on_ack(ack(kMtu, kBase + 20000, false), 9000);  // 16384 B >= 11718 B
    CHECK(cc.quick_adapts() == 0);
    CHECK(cc.cwnd() > 90000);
  }
  SECTION("one ACK of the period came back over an empty path: no collapse") {
    // Sprayed packets report each path's queue: one slow path is for EV
    // steering, and only when every ACK of the period is late is the
    // queue one all paths share.
    Nscc cc(NsccConfig{}, kMtu, kGbps);
    cc.on_send(kMtu, 0);
    cc.on_ack(ack(kMtu, kBase, false), 100);
    cc.on_ack(ack(kMtu, kBase + 20000, false), 9000);  // 8192 B < 11718 B, as above
    CHECK(cc.quick_adapts() == 0);
    CHECK(cc.cwnd() > 90000);
    // The next period's ACKs are all late: now it fires.
    cc.on_ack(ack(kMtu, kBase + 20000, false), 12000);
    cc.on_ack(ack(kMtu, kBase + 20000, false), 18000);
    CHECK(cc.quick_adapts() == 1);
  }
  SECTION("delay below qa_threshold and no trim: no collapse") {
    Nscc cc(NsccConfig{}, kMtu, kGbps);
    cc.on_send(kMtu, 0);
    cc.on_ack(ack(kMtu, kBase + 14000, false), 9000);
    CHECK(cc.quick_adapts() == 0);
  }
  SECTION("a trim in the period triggers it at the next check") {
    Nscc cc(NsccConfig{}, kMtu, kGbps);
    cc.on_send(kMtu, 0);
    cc.on_nack(true, kMtu, 100);
    CHECK(cc.cwnd() == 93750 - kMtu);  // only one MTU until the period ends
    cc.on_ack(ack(2 * kMtu, kBase, false), 9000);
    CHECK(cc.quick_adapts() == 1);
    CHECK(cc.cwnd() == 2 * kMtu);
    // The trigger was consumed with its period: a quiet period does nothing.
    cc.on_ack(ack(kMtu, kBase, false), 30000);
    CHECK(cc.quick_adapts() == 1);
  }
  SECTION("a timeout triggers it, never below one MTU") {
    Nscc cc(NsccConfig{}, kMtu, kGbps);
    cc.on_send(kMtu, 0);
    cc.on_timeout(9000);  // period over, nothing achieved
    CHECK(cc.quick_adapts() == 1);
    CHECK(cc.cwnd() == kMtu);
  }
  SECTION("disabled: high delay never collapses, a timeout halves") {
    Nscc cc(no_qa(), kMtu, kGbps);
    cc.on_send(kMtu, 0);
    cc.on_ack(ack(kMtu, kBase + 20000, false), 9000);
    cc.on_ack(ack(kMtu, kBase + 20000, false), 20000);
    CHECK(cc.quick_adapts() == 0);
    CHECK(cc.cwnd() > 90000);
    const double before = cc.cwnd();
    cc.on_timeout(21000);
    CHECK(cc.cwnd() == Approx(before / 2));
  }
}

TEST_CASE("dcqcn paces at the current rate") {
  Dcqcn cc(DcqcnConfig{}, kGbps);
  CHECK(cc.rate_gbps() == 100);
  CHECK(cc.next_send_time() == 0);
  cc.on_send(4096, 0);
  CHECK(cc.next_send_time() == 328);  // 4096 * 8 / 100 = 327.68 ns, rounded up
  // A caller that sends exactly on time keeps the fractional remainder.
  Nanos now = cc.next_send_time();
  for (int i = 1; i < 1000; ++i) {
    cc.on_send(4096, now);
    now = cc.next_send_time();
  }
  CHECK(static_cast<double>(now) == Approx(1000 * 327.68).margin(1));
  // A late caller does not earn a burst.
  cc.on_send(4096, now + 10000);
  CHECK(cc.next_send_time() == static_cast<Nanos>(std::ceil(now + 10000 + 327.68)));

  cc.on_cnp(now + 20000);
  cc.on_send(4096, now + 30000);
  CHECK(cc.next_send_time() == static_cast<Nanos>(std::ceil(now + 30000 + 655.36)));
}

TEST_CASE("dcqcn CNP cuts the rate and raises alpha") {
  DcqcnConfig c;
  Dcqcn cc(c, kGbps);
  cc.on_cnp(1000);
  CHECK(cc.cnps() == 1);
  CHECK(cc.rate_gbps() == 50);  // alpha starts at 1
  CHECK(cc.target_rate_gbps() == 100);
  CHECK(cc.alpha() == Approx(1.0));
  cc.on_cnp(2000);
  CHECK(cc.rate_gbps() == 25);
  CHECK(cc.target_rate_gbps() == 50);

  // Without CNPs alpha decays by (1 - g) per alpha_period.
  cc.on_ack(AckSample{}, 2000 + 10 * 55000);
  const double decayed = std::pow(1 - 1.0 / 256, 10);
  CHECK(cc.alpha() == Approx(decayed));
  // The next cut uses that alpha, and alpha steps up by g.
  const double r = cc.rate_gbps();
  cc.on_cnp(2000 + 10 * 55000);
  CHECK(cc.rate_gbps() == Approx(r * (1 - decayed / 2)));
  CHECK(cc.alpha() == Approx((1 - 1.0 / 256) * decayed + 1.0 / 256));
}

TEST_CASE("dcqcn recovers: fast recovery, then additive, then hyper") {
  DcqcnConfig c;
  c.byte_counter = 0;  // timer only, for exact numbers
  Dcqcn cc(c, kGbps);
  cc.on_cnp(0);
  cc.on_cnp(0);
  REQUIRE(cc.rate_gbps() == 25);
  REQUIRE(cc.target_rate_gbps() == 50);

  // Nothing before the first timer period ends.
  cc.on_ack(AckSample{}, 54999);
  CHECK(cc.rate_gbps() == 25);
  // Five fast-recovery rounds halve the gap to the target each time.
  cc.on_ack(AckSample{}, 5 * 55000);
  CHECK(cc.timer_rounds() == 5);
  CHECK(cc.target_rate_gbps() == 50);
  CHECK(cc.rate_gbps() == Approx(50 - 25.0 / 32));
  // Then the target grows by rai per round.
  cc.on_ack(AckSample{}, 6 * 55000);
  CHECK(cc.target_rate_gbps() == Approx(50.04));
  CHECK(cc.rate_gbps() == Approx((50.04 + 50 - 25.0 / 32) / 2));

  // With the byte counter also past F rounds, hyper increase adds i * rhai.
  DcqcnConfig h;
  h.byte_counter = 1000;
  h.rate_period = 1000000;
  Dcqcn hy(h, kGbps);
  hy.on_cnp(0);
  hy.on_cnp(0);
  hy.on_send(6 * 1000, 1);  // six byte rounds: 5 recovery, then additive
  CHECK(hy.byte_rounds() == 6);
  CHECK(hy.target_rate_gbps() == Approx(50.04));
  hy.on_ack(AckSample{}, 6 * 1000000);  // six timer rounds: both past F
  CHECK(hy.timer_rounds() == 6);
  CHECK(hy.target_rate_gbps() == Approx(50.04 + 5 * 0.04 + 0.2));
  // i = min(rounds) - F: it grows only as both counters advance.
  const double t6 = hy.target_rate_gbps();
  hy.on_send(1000, 6 * 1000000 + 1);  // byte round 7, timer still at 6: i = 1
  CHECK(hy.target_rate_gbps() == Approx(t6 + 0.2));
  hy.on_ack(AckSample{}, 7 * 1000000);  // timer round 7: i = 2
  CHECK(hy.target_rate_gbps() == Approx(t6 + 0.2 + 2 * 0.2));
}

TEST_CASE("dcqcn returns to line rate over time and respects min_rate") {
  Dcqcn cc(DcqcnConfig{}, kGbps);
  for (int i = 0; i < 5; ++i) cc.on_cnp(0);
  const double low = cc.rate_gbps();
  CHECK(low == Approx(100.0 / 32));
  double prev = low;
  for (Nanos t = 55000; t <= 5000000; t += 55000) {
    cc.on_send(4096, t);
    CHECK(cc.rate_gbps() >= prev);
    CHECK(cc.rate_gbps() <= 100);
    prev = cc.rate_gbps();
  }
  CHECK(prev > 100.0 / 16);  // past the rate before the last cut
  // A long quiet spell is replayed in one call and ends at line rate.
  cc.on_ack(AckSample{}, 2000000000);
  CHECK(cc.rate_gbps() == Approx(100).epsilon(1e-9));
  CHECK(cc.target_rate_gbps() == 100);

  DcqcnConfig c;
  c.min_rate_gbps = 1;
  Dcqcn floor(c, kGbps);
  for (int i = 0; i < 100; ++i) floor.on_cnp(i);
  CHECK(floor.rate_gbps() == 1);
}

TEST_CASE("dcqcn config line rate overrides the NIC rate") {
  DcqcnConfig c;
  c.line_rate_gbps = 25;
  Dcqcn cc(c, 400);
  CHECK(cc.rate_gbps() == 25);
  c.line_rate_gbps = 0;
  CHECK(Dcqcn(c, 400).rate_gbps() == 400);
}
