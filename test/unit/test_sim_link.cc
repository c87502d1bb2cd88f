#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "sim/event_loop.h"
#include "sim/link.h"
#include "wire/packet.h"

using namespace mrc;
using sim::EventId;
using sim::EventLoop;
using sim::Link;
using sim::LinkParams;
using sim::Nanos;

namespace {

constexpr uint32_t kPayload = 1172;  // makes an IPv4 MRC WRITE_ONLY frame 1250 B: 100 ns at 100 Gb/s
constexpr uint32_t kFrameBytes = 1250;

std::vector<uint8_t> make_frame(uint32_t psn, uint32_t payload_len = kPayload, bool v6 = false, uint8_t ecn = 0,
                                uint8_t opcode = uint8_t(wire::Opcode::mrc_write_only)) {
  wire::Addressing a;
  a.src_mac = 0x020000000001;
  a.dst_mac = 0x020000000002;
  a.src_ip = *wire::IpAddr::parse(v6 ? "fd00::1" : "10.0.0.1");
  a.dst_ip = *wire::IpAddr::parse(v6 ? "fd00::2" : "10.0.0.2");
  a.ecn = ecn;
  std::vector<uint8_t> buf(payload_len + 256);
  wire::MutablePacket m = wire::begin_frame(buf, a, opcode, false, payload_len);
  REQUIRE(m.base != nullptr);
  m.bth().set_dest_qp(0x42);
  m.bth().set_psn(psn);
  if (m.at.reth) {
    m.reth().set_va(0x10000 + uint64_t(psn) * payload_len);
    m.reth().set_rkey(0xABCD);
    m.reth().set_dma_len(payload_len);
  }
  for (uint32_t i = 0; i < m.at.payload_len; ++i) m.payload()[i] = static_cast<uint8_t>(psn + i);
  wire::finish_frame(m);
  buf.resize(m.at.size);
  return buf;
}

wire::ParseError parse(const std::vector<uint8_t>& f, wire::Packet& pkt, bool verify_icrc) {
  wire::ParseOptions o;
  o.verify_icrc = verify_icrc;
  return wire::parse_frame(f, pkt, o);
}

uint32_t psn_of(const std::vector<uint8_t>& f) {
  wire::Packet pkt;
  REQUIRE(parse(f, pkt, false) == wire::ParseError::ok);
  return pkt.bth().psn();
}

bool ipv4_checksum_ok(const std::vector<uint8_t>& f) { return wire::ipv4_checksum(f.data() + wire::kEthLen) == 0; }

struct Arrival {
  Nanos t;
  std::vector<uint8_t> frame;
  uint32_t wire_len = 0;
  bool operator==(const Arrival&) const = default;
};

// A link whose sink records what arrives and when.
struct Bench {
  EventLoop loop;
  std::vector<Arrival> got;
  Link link;
  Bench(const LinkParams& p, uint64_t seed)
      : link(loop, p, seed, [this](std::vector<uint8_t> f, uint64_t, uint32_t wire_len) {
          got.push_back({loop.now(), std::move(f), wire_len});
        }) {}
};

LinkParams clean(uint32_t queue_bytes = 1u << 30) {
  LinkParams p;
  p.rate_gbps = 100;
  p.delay_ns = 500;
  p.queue_bytes = queue_bytes;
  return p;
}

}  // namespace

TEST_CASE("EventLoop runs events by time, then insertion order") {
  EventLoop loop;
  std::vector<int> order;
  loop.at(20, [&] { order.push_back(3); });
  loop.at(10, [&] { order.push_back(1); });
  loop.at(10, [&] { order.push_back(2); });
  loop.at(30, [&] {
    order.push_back(4);
    loop.at(30, [&] { order.push_back(6); });  // same time: after those already queued
    loop.at(5, [&] { order.push_back(7); });   // the past means now
  });
  loop.at(30, [&] { order.push_back(5); });
  CHECK(loop.pending() == 5);
  CHECK(loop.run_until_idle());
  CHECK(order == std::vector<int>{1, 2, 3, 4, 5, 6, 7});
  CHECK(loop.now() == 30);
  CHECK(loop.stats().scheduled == 7);
  CHECK(loop.stats().run == 7);
}

TEST_CASE("EventLoop run_until stops at the bound and advances the clock") {
  EventLoop loop;
  int ran = 0;
  loop.at(100, [&] { ++ran; });
  loop.at(101, [&] { ++ran; });
  CHECK(loop.run_until(100));
  CHECK(ran == 1);
  CHECK(loop.now() == 100);
  CHECK(loop.next_time() == 101);
  CHECK(loop.run_until(50));  // never goes back
  CHECK(loop.now() == 100);
  CHECK_FALSE(loop.run_until_idle(100));
  CHECK(loop.run_until(1000));
  CHECK(ran == 2);
  CHECK(loop.now() == 1000);
  CHECK(loop.pending() == 0);
}

TEST_CASE("EventLoop callbacks own their captures, inline or on the heap, through moves and cancels") {
  EventLoop loop;
  auto alive = std::make_shared<int>(0);
  std::vector<uint64_t> seen;
  std::array<uint64_t, 16> big{};  // 128 bytes: too big to keep inline
  big[15] = 7;
  {
    std::vector<uint8_t> frame(4096, 0xAB);
    loop.at(5, [&seen, alive, f = std::move(frame)] { seen.push_back(f.size() + *alive); });
    loop.at(6, [&seen, alive, big] { seen.push_back(big[15]); });
    auto dropped = loop.at(7, [&seen, alive, big] { seen.push_back(99); });
    loop.at(8, [&seen, alive] { seen.push_back(1); });
    CHECK(alive.use_count() == 5);
    CHECK(loop.cancel(dropped));
    CHECK(alive.use_count() == 4);  // a cancelled callback is destroyed at once
  }
  CHECK(loop.run_until_idle());
  CHECK(seen == std::vector<uint64_t>{4096, 7, 1});
  CHECK(alive.use_count() == 1);  // and every callback that ran is gone
  sim::Callback a = [&seen] { seen.push_back(2); };
  sim::Callback b = std::move(a);
  CHECK_FALSE(a);
  b();
  CHECK(seen.back() == 2);
  b = nullptr;
  CHECK_FALSE(b);
}

// An event that records when the loop asks it to prefetch, and when it runs.
struct Traced {
  std::vector<std::pair<int, int>>* log;  // (id, stage), stage -1 for the run
  int id;
  void operator()() { log->emplace_back(id, -1); }
  void prefetch(unsigned stage) const { log->emplace_back(id, static_cast<int>(stage)); }
};

TEST_CASE("EventLoop asks the events after the running one to prefetch, the nearer ones stages deeper") {
  EventLoop loop;
  std::vector<std::pair<int, int>> log;
  for (int id = 1; id <= 6; ++id) loop.at(10, Traced{&log, id});
  loop.at(11, Traced{&log, 7});   // the next bucket: looked ahead to once its own runs out
  loop.at(400, Traced{&log, 8});  // too far on: not looked ahead to
  sim::Callback plain = [] {};
  plain.prefetch(0);  // a callable without prefetch(): nothing to do
  // Stage 2 one event ahead, stage 1 two, stage 0 four (EventLoop::kStageDistance).
  CHECK(loop.step());
  CHECK(log == std::vector<std::pair<int, int>>{{2, 2}, {3, 1}, {5, 0}, {1, -1}});
  log.clear();
  CHECK(loop.step());
  CHECK(log == std::vector<std::pair<int, int>>{{3, 2}, {4, 1}, {6, 0}, {2, -1}});
  log.clear();
  CHECK(loop.run_until_idle());
  CHECK(log == std::vector<std::pair<int, int>>{{4, 2},
                                                {5, 1},
                                                {7, 0},
                                                {3, -1},
                                                {5, 2},
                                                {6, 1},
                                                {4, -1},
                                                {6, 2},
                                                {7, 1},
                                                {5, -1},
                                                {7, 2},
                                                {6, -1},
                                                {7, -1},
                                                {8, -1}});
}

TEST_CASE("EventLoop looks ahead at most two bitmap words on, across the calendar's end") {
  // Buckets are bits in 64-bit words: from the bucket after the running
  // event's, the rest of its word and one more are looked at.
  auto first_step = [](Nanos running, Nanos next) {
    EventLoop loop;
    std::vector<std::pair<int, int>> log;
    if (running > 1000) {  // move the clock there first, so that `next` is in the calendar
      loop.at(running - 1000, [] {});
      loop.step();
    }
    loop.at(running, Traced{&log, 1});
    loop.at(next, Traced{&log, 2});
    loop.step();
    return log;
  };
  using Log = std::vector<std::pair<int, int>>;
  CHECK(first_step(10, 127) == Log{{2, 2}, {1, -1}});  // the next word's last bucket
  CHECK(first_step(10, 128) == Log{{1, -1}});          // a word further
  // 131,072 ns is the calendar's span (EventLoop's kWheel): bucket 131,070,
  // then past the end to bucket 3.
  constexpr Nanos kSpan = Nanos(1) << 17;
  CHECK(first_step(kSpan - 2, kSpan + 3) == Log{{2, 2}, {1, -1}});
  CHECK(first_step(kSpan - 2, kSpan + 64) == Log{{1, -1}});
}

TEST_CASE("EventLoop runs near and far events, cancels and nested schedules in (time, insertion) order") {
  // Against a reference: delays below and far above the calendar's span,
  // events scheduling events, random cancels (slots get reused), and
  // run_until steps that cross the span.
  struct Ref {
    Nanos t;
    uint64_t seq;
    bool operator<(const Ref& o) const { return t != o.t ? t < o.t : seq < o.seq; }
  };
  for (uint64_t seed : {1u, 2u, 3u}) {
    EventLoop loop;
    std::vector<Ref> expected;  // every event that should run, with its order key
    std::vector<Ref> ran;
    std::vector<std::pair<EventId, Ref>> cancellable;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull, seq = 0;
    auto next = [&x] {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return x;
    };
    std::function<void(int)> schedule = [&](int depth) {
      const uint64_t r = next();
      const Nanos delay = r % 4 == 0 ? 200'000 + r % 3'000'000 : r % 1'000;  // far or near
      const Ref ref{loop.now() + delay, ++seq};
      EventId id = loop.at(ref.t, [&, ref, depth] {
        CHECK(loop.now() == ref.t);
        ran.push_back(ref);
        if (depth < 3)
          for (uint64_t k = next() % 3; k > 0; --k) schedule(depth + 1);
      });
      expected.push_back(ref);
      if (next() % 5 == 0) cancellable.emplace_back(id, ref);
    };
    for (int i = 0; i < 300; ++i) schedule(0);
    for (auto& [id, ref] : cancellable) {
      if (next() % 2 && loop.cancel(id)) std::erase_if(expected, [&](const Ref& e) { return e.seq == ref.seq; });
    }
    for (Nanos step = 150'000; loop.pending(); step += 150'000) loop.run_until(step);
    // Events scheduled while running joined `expected` too; each ran exactly
    // once, in key order (times never decrease; equal times by insertion).
    CHECK(ran.size() == expected.size());
    CHECK(std::is_sorted(ran.begin(), ran.end()));
    std::sort(expected.begin(), expected.end());
    CHECK(ran.size() == expected.size());
    if (ran.size() == expected.size())
      for (size_t i = 0; i < ran.size(); ++i) REQUIRE(ran[i].seq == expected[i].seq);
  }
}

TEST_CASE("EventLoop cancel and stop") {
  EventLoop loop;
  std::vector<int> order;
  auto a = loop.at(10, [&] { order.push_back(1); });
  loop.at(10, [&] { order.push_back(2); });
  auto c = loop.at(20, [&] { order.push_back(3); });
  CHECK(loop.cancel(a));
  CHECK_FALSE(loop.cancel(a));
  CHECK(loop.pending() == 2);
  loop.at(15, [&] {
    order.push_back(4);
    loop.stop();
  });
  CHECK_FALSE(loop.run_until(100));
  CHECK(loop.now() == 15);
  CHECK(loop.cancel(c));
  CHECK(loop.run_until_idle());
  CHECK(order == std::vector<int>{2, 4});
  CHECK(loop.stats().cancelled == 2);
  // A slot reused after a cancel must not revive the cancelled event.
  auto d = loop.at(30, [&] { order.push_back(5); });
  CHECK_FALSE(loop.cancel(c));
  CHECK(loop.run_until_idle());
  CHECK(order == std::vector<int>{2, 4, 5});
  CHECK_FALSE(loop.cancel(d));
}

TEST_CASE("EventLoop runs an event in place while it schedules thousands more and cancels itself") {
  EventLoop loop;
  std::vector<uint32_t> ran;
  EventId self;
  const std::vector<uint32_t> payload(64, 7);  // a heap capture that must stay valid throughout
  self = loop.at(5, [&, payload] {
    CHECK_FALSE(loop.cancel(self));  // already running
    for (uint32_t i = 0; i < 10'000; ++i) loop.at(10 + i % 3, [&ran, i] { ran.push_back(i); });
    CHECK(loop.pending() == 10'000);
    CHECK(payload == std::vector<uint32_t>(64, 7));
    ran.push_back(~0u);
  });
  CHECK(loop.run_until_idle());
  REQUIRE(ran.size() == 10'001);
  CHECK(ran[0] == ~0u);
  // Time first, then insertion order.
  CHECK(ran[1] == 0);
  CHECK(ran[2] == 3);
  CHECK(ran.back() == 9'998);
  CHECK(loop.stats().run == 10'001);
}

TEST_CASE("EventLoop advance moves the clock and runs nothing") {
  EventLoop loop;
  std::vector<Nanos> ran;
  loop.at(100, [&] { ran.push_back(loop.now()); });
  loop.advance(60);
  CHECK(loop.now() == 60);
  CHECK(ran.empty());
  loop.advance(40);  // never backwards
  CHECK(loop.now() == 60);
  loop.advance(100);  // up to the next event, not past it
  CHECK(ran.empty());
  CHECK(loop.run_until_idle());
  CHECK(ran == std::vector<Nanos>{100});
  // Far events (beyond the calendar) come into reach as the clock moves.
  loop.at(100 + (Nanos(1) << 20), [&] { ran.push_back(loop.now()); });
  loop.advance(100 + (Nanos(1) << 19));
  CHECK(loop.next_time() == 100 + (Nanos(1) << 20));
  CHECK(loop.run_until_idle());
  CHECK(ran.back() == 100 + (Nanos(1) << 20));
}

TEST_CASE("A mailbox hands its events to a loop in the order posted, each at its time") {
  EventLoop loop;
  sim::Mailbox mail;
  std::vector<int> ran;
  CHECK(mail.earliest() == sim::kNever);
  loop.at(20, [&] { ran.push_back(0); });
  mail.post(30, [&] { ran.push_back(1); });
  mail.post(20, [&] { ran.push_back(2); });
  mail.post(30, [&] { ran.push_back(3); });
  CHECK(mail.earliest() == 20);
  CHECK(loop.pending() == 1);
  mail.deliver_to(loop);
  CHECK(mail.earliest() == sim::kNever);
  CHECK(loop.pending() == 4);
  CHECK(loop.run_until_idle());
  // Time first; at one time, what the loop had before the mail came.
  CHECK(ran == std::vector<int>{0, 2, 1, 3});
}

TEST_CASE("A mailbox seals a window's posts, hands over only those, and keeps what came after") {
  EventLoop loop;
  sim::Mailbox mail;
  std::vector<int> ran;
  mail.post(40, [&] { ran.push_back(1); });
  mail.close_window();                       // window 1 ends: its posts are sealed
  mail.post(40, [&] { ran.push_back(2); });  // window 2 posts while they are taken
  CHECK(mail.earliest() == 40);
  mail.deliver_closed_to(loop);
  CHECK(loop.pending() == 1);
  CHECK(mail.earliest() == 40);
  mail.close_window();
  mail.post(40, [&] { ran.push_back(3); });
  mail.deliver_to(loop);  // everything: the sealed batch, then the open one
  CHECK(mail.earliest() == sim::kNever);
  CHECK(loop.pending() == 3);
  CHECK(loop.run_until_idle());
  CHECK(ran == std::vector<int>{1, 2, 3});  // at one time, in the order posted
}

TEST_CASE("A link whose far end is another loop's posts its deliveries there") {
  EventLoop tx_loop, rx_loop;
  sim::Mailbox mail;
  std::vector<Arrival> got;
  Link link(tx_loop, clean(), 1, [&](std::vector<uint8_t> f, uint64_t, uint32_t wire_len) {
    got.push_back({rx_loop.now(), std::move(f), wire_len});
  });
  std::vector<Nanos> tapped;
  link.set_tap([&](std::span<const uint8_t>, Nanos t) { tapped.push_back(t); });
  CHECK_THROWS_AS(link.set_far_end(rx_loop, mail, 501), std::invalid_argument);  // frames would be due too soon
  link.set_far_end(rx_loop, mail, 500);
  LinkParams shorter = clean();
  shorter.delay_ns = 499;
  CHECK_THROWS_AS(link.set_params(shorter), std::invalid_argument);
  CHECK(link.params().delay_ns == 500);
  tx_loop.at(50, [&] { link.send(make_frame(1)); });
  CHECK(tx_loop.run_until_idle());
  CHECK(tx_loop.pending() == 0);  // nothing for the sender's loop
  CHECK(mail.earliest() == 50 + 100 + 500);
  CHECK(got.empty());
  mail.deliver_to(rx_loop);
  CHECK(rx_loop.run_until_idle());
  REQUIRE(got.size() == 1);
  CHECK(got[0].t == 650);
  CHECK(tapped == std::vector<Nanos>{650});  // the receiving loop's clock
  CHECK(link.counters().delivered == 1);
}

TEST_CASE("Link serializes at line rate, then adds the delay") {
  Bench b(clean(), 1);
  const auto f = make_frame(0);
  REQUIRE(f.size() == kFrameBytes);
  for (int i = 0; i < 5; ++i) b.link.send(f);
  CHECK(b.link.queued_bytes() == 5 * kFrameBytes);
  CHECK(b.link.drain_time() == 500);
  CHECK(b.link.time_queued_at_most(2 * kFrameBytes) == 300);
  b.loop.run_until(250);
  CHECK(b.link.queued_bytes() == 2 * kFrameBytes + kFrameBytes / 2);  // half of the third is out
  CHECK(b.link.time_queued_at_most(kFrameBytes) == 400);
  // Idle from 500: a frame sent at 1000 starts at once.
  b.loop.at(1000, [&] { b.link.send(f); });
  CHECK(b.loop.run_until_idle());
  REQUIRE(b.got.size() == 6);
  for (int i = 0; i < 5; ++i) CHECK(b.got[i].t == Nanos(100 * (i + 1) + 500));
  CHECK(b.got[5].t == 1000 + 100 + 500);
  CHECK(b.link.counters().delivered == 6);
  CHECK(b.link.counters().delivered_bytes == 6 * kFrameBytes);
  CHECK(b.link.queued_bytes() == 0);

  SECTION("fractional serialization times do not drift") {
    LinkParams p = clean();
    p.rate_gbps = 3;  // 1250 B = 3333.33 ns
    Bench s(p, 1);
    for (int i = 0; i < 3; ++i) s.link.send(f);
    s.loop.run_until_idle();
    REQUIRE(s.got.size() == 3);
    CHECK(s.got[0].t == 3334 + 500);
    CHECK(s.got[1].t == 6667 + 500);
    CHECK(s.got[2].t == 10000 + 500);
  }
}

TEST_CASE("Link tells its watcher of every change to its queue's future but a send") {
  // A host keeps when its uplink has room again: it sees its own sends, and
  // the link counts the rest for it.
  Bench b(clean(), 1);
  const auto f = make_frame(0);
  uint32_t changes = 0;
  b.link.set_watcher(&changes);
  b.link.send(f);
  CHECK(changes == 0);
  CHECK(b.link.queued_bytes_at(50) == kFrameBytes / 2);  // later times, as seen now
  LinkParams slower = clean();
  slower.rate_gbps /= 2;
  b.link.set_params(slower);
  CHECK(changes > 0);
  uint32_t seen = changes;
  b.link.set_up(false);
  CHECK(changes > seen);
  CHECK(b.link.queued_bytes_at(10) == 0);
  seen = changes;
  b.link.set_up(true);
  CHECK(changes > seen);
}

TEST_CASE("A frame shorter than its wire length takes the wire length's time, room and counts") {
  Bench b(clean(3 * kFrameBytes), 1);
  const auto head = make_frame(0, 8);
  REQUIRE(head.size() < kFrameBytes);
  for (int i = 0; i < 4; ++i) b.link.send(head, 0, kFrameBytes);
  CHECK(b.link.queued_bytes() == 3 * kFrameBytes);
  CHECK(b.link.counters().dropped_queue == 1);
  b.link.send(make_frame(1), 0, 10);
  CHECK(b.link.counters().dropped_queue == 2);
  CHECK(b.loop.run_until_idle());
  REQUIRE(b.got.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(b.got[i].t == Nanos(100 * (i + 1) + 500));
    CHECK(b.got[i].frame == head);
    CHECK(b.got[i].wire_len == kFrameBytes);
  }
  CHECK(b.link.counters().sent_bytes == 4 * kFrameBytes + make_frame(1).size());
  CHECK(b.link.counters().delivered_bytes == 3 * kFrameBytes);

  SECTION("a wire length below the size counts as the size") {
    Bench e(clean(), 1);
    e.link.send(make_frame(1), 0, 10);
    CHECK(e.link.queued_bytes() == kFrameBytes);
    e.loop.run_until_idle();
    REQUIRE(e.got.size() == 1);
    CHECK(e.got[0].wire_len == kFrameBytes);
  }

  SECTION("trimmed, it is its headers on the wire") {
    LinkParams p = clean();
    p.trim_bytes = kFrameBytes;
    Bench t(p, 1);
    t.link.send(head, 0, kFrameBytes);
    t.link.send(head, 0, kFrameBytes);
    t.loop.run_until_idle();
    REQUIRE(t.got.size() == 2);
    CHECK(t.got[0].wire_len == kFrameBytes);
    wire::Packet pkt;
    REQUIRE(parse(t.got[1].frame, pkt, false) == wire::ParseError::ok);
    CHECK(t.got[1].wire_len == pkt.at.payload + wire::kIcrcLen);
    CHECK(t.got[1].frame.size() == t.got[1].wire_len);
  }
}

TEST_CASE("A black-holed link still serializes at line rate but delivers nothing, until it heals") {
  Bench b(clean(), 1);
  const auto f = make_frame(0);
  b.link.send(f);
  b.link.send(f);
  b.link.set_blackhole(true);  // the two in flight are lost as well
  for (int i = 0; i < 3; ++i) b.link.send(f);
  CHECK(b.link.up());                                // the port itself does not know
  CHECK(b.link.queued_bytes() == 5 * kFrameBytes);  // and drains no faster than a live one
  CHECK(b.link.drain_time() == 500);
  b.loop.run_until(1000);
  CHECK(b.got.empty());
  CHECK(b.link.counters().dropped_down == 5);
  b.link.set_blackhole(false);
  b.link.send(f);
  CHECK(b.loop.run_until_idle());
  REQUIRE(b.got.size() == 1);
  CHECK(b.got[0].t == 1000 + 100 + 500);
}

TEST_CASE("Link tail-drops what does not fit the queue") {
  Bench b(clean(10 * kFrameBytes), 1);
  const auto f = make_frame(0);
  for (int i = 0; i < 25; ++i) b.link.send(f);
  CHECK(b.link.counters().dropped_queue == 15);
  b.loop.run_until(150);  // one frame has left: room for one more
  b.link.send(f);
  b.link.send(f);
  CHECK(b.link.counters().dropped_queue == 16);
  b.loop.run_until_idle();
  CHECK(b.got.size() == 11);
  CHECK(b.link.counters().sent == 27);
}

TEST_CASE("Link loss ratio matches its probability") {
  const uint64_t seed = GENERATE(1, 2, 3);
  INFO("seed " << seed);
  LinkParams p = clean();
  p.loss = 0.1;
  Bench b(p, seed);
  const auto f = make_frame(0, 64);
  constexpr int kFrames = 100000;
  for (int i = 0; i < kFrames; ++i) {
    b.link.send(f);
    if (i % 1000 == 999) {
      b.loop.run_until_idle();
      b.got.clear();
    }
  }
  const auto& c = b.link.counters();
  CHECK(c.dropped_loss + c.delivered == kFrames);
  // sigma = sqrt(0.09 / 1e5) ~ 0.00095; allow 5 sigma.
  CHECK(double(c.dropped_loss) / kFrames == Approx(0.1).margin(0.005));
}

TEST_CASE("Link duplicates frames back to back") {
  LinkParams p = clean();
  p.duplicate = 0.2;
  Bench b(p, 7);
  for (uint32_t i = 0; i < 10000; ++i) b.link.send(make_frame(i, 16));
  b.loop.run_until_idle();
  const auto& c = b.link.counters();
  CHECK(c.delivered == 10000 + c.duplicated);
  CHECK(double(c.duplicated) / 10000 == Approx(0.2).margin(0.02));
  uint32_t next = 0, dups = 0;
  for (size_t i = 0; i < b.got.size(); ++i) {
    const uint32_t psn = psn_of(b.got[i].frame);
    if (psn == next) {
      ++next;
    } else {
      REQUIRE(i > 0);
      CHECK(b.got[i] == b.got[i - 1]);  // same bytes, same time
      ++dups;
    }
  }
  CHECK(next == 10000);
  CHECK(dups == c.duplicated);
}

TEST_CASE("Link reordering holds frames back") {
  LinkParams p = clean();
  p.reorder_prob = 0.3;
  p.reorder_max_ns = 5000;
  Bench b(p, 11);
  for (uint32_t i = 0; i < 1000; ++i) b.link.send(make_frame(i, 64));
  b.loop.run_until_idle();
  REQUIRE(b.got.size() == 1000);
  std::vector<uint32_t> psns;
  for (const auto& a : b.got) psns.push_back(psn_of(a.frame));
  CHECK_FALSE(std::is_sorted(psns.begin(), psns.end()));
  std::vector<uint32_t> sorted = psns;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 1000; ++i) REQUIRE(sorted[i] == i);
  CHECK(double(b.link.counters().reordered) / 1000 == Approx(0.3).margin(0.06));
  // A frame is held back by at most reorder_max_ns, never sped up. Each
  // 142-byte frame takes 11.36 ns at 100 Gb/s.
  REQUIRE(make_frame(0, 64).size() == 142);
  for (const auto& a : b.got) {
    const uint32_t i = psn_of(a.frame);
    const Nanos nominal = ((i + 1) * 11360 + 999) / 1000 + 500;
    REQUIRE(a.t >= nominal);
    REQUIRE(a.t <= nominal + 5000);
  }

  SECTION("without reordering the order is kept") {
    Bench s(clean(), 11);
    for (uint32_t i = 0; i < 1000; ++i) s.link.send(make_frame(i, 64));
    s.loop.run_until_idle();
    for (uint32_t i = 0; i < 1000; ++i) REQUIRE(psn_of(s.got[i].frame) == i);
  }
}

TEST_CASE("Link marks CE only from ecn_min_bytes, always from ecn_max_bytes") {
  const bool v6 = GENERATE(false, true);
  INFO("ipv6 " << v6);
  const uint32_t size = uint32_t(make_frame(0, kPayload, v6).size());
  LinkParams p = clean();
  p.ecn_min_bytes = 5 * size;
  p.ecn_max_bytes = 10 * size;
  constexpr int kBurst = 14, kTrials = 200;
  std::vector<int> marks(kBurst, 0);
  for (int trial = 0; trial < kTrials; ++trial) {
    Bench b(p, 100 + trial);
    // Frame i finds i frames queued ahead of it.
    for (uint32_t i = 0; i < kBurst; ++i) b.link.send(make_frame(i, kPayload, v6, /*ECT(0)*/ 2));
    b.loop.run_until_idle();
    REQUIRE(b.got.size() == size_t(kBurst));
    for (const auto& a : b.got) {
      wire::Packet pkt;
      REQUIRE(parse(a.frame, pkt, true) == wire::ParseError::ok);  // ECN is masked in the ICRC
      if (!v6) REQUIRE(ipv4_checksum_ok(a.frame));
      if (pkt.ecn() == wire::kEcnCe) ++marks[pkt.bth().psn()];
    }
  }
  for (int i = 0; i <= 5; ++i) CHECK(marks[i] == 0);
  for (int i = 6; i < 10; ++i) {
    INFO("position " << i);
    CHECK(marks[i] > 0);
    CHECK(marks[i] < kTrials);
  }
  for (int i = 10; i < kBurst; ++i) CHECK(marks[i] == kTrials);

  SECTION("Not-ECT frames are left alone unless asked") {
    LinkParams q = p;
    q.ecn_min_bytes = q.ecn_max_bytes = size;
    Bench b(q, 1);
    for (uint32_t i = 0; i < 4; ++i) b.link.send(make_frame(i, kPayload, v6, 0));
    q.ecn_mark_not_ect = true;
    b.link.set_params(q);
    for (uint32_t i = 4; i < 8; ++i) b.link.send(make_frame(i, kPayload, v6, 0));
    b.loop.run_until_idle();
    CHECK(b.link.counters().ecn_marked == 4);
    for (const auto& a : b.got) {
      wire::Packet pkt;
      REQUIRE(parse(a.frame, pkt, true) == wire::ParseError::ok);
      CHECK((pkt.ecn() == wire::kEcnCe) == (pkt.bth().psn() >= 4));
    }
  }
}

TEST_CASE("Link trims data frames past trim_bytes to parseable headers") {
  const bool v6 = GENERATE(false, true);
  INFO("ipv6 " << v6);
  const auto full = make_frame(0, kPayload, v6);
  LinkParams p = clean();
  p.trim_bytes = 3 * uint32_t(full.size());
  p.trimmed_dscp = 0x2E;
  Bench b(p, 1);
  for (uint32_t i = 0; i < 8; ++i) b.link.send(make_frame(i, kPayload, v6));
  // Control frames carry no payload: never trimmed.
  b.link.send(make_frame(100, 0, v6, 0, uint8_t(wire::Opcode::mrc_sack)));
  b.loop.run_until_idle();
  REQUIRE(b.got.size() == 9);
  CHECK(b.link.counters().trimmed == 5);

  wire::Packet orig;
  REQUIRE(parse(full, orig, true) == wire::ParseError::ok);
  for (uint32_t i = 0; i < 8; ++i) {
    INFO("frame " << i);
    const auto& f = b.got[i].frame;
    wire::Packet pkt;
    REQUIRE(parse(f, pkt, false) == wire::ParseError::ok);
    CHECK(pkt.bth().psn() == i);
    if (!v6) CHECK(ipv4_checksum_ok(f));
    if (i < 3) {
      CHECK(f.size() == full.size());
      CHECK(pkt.dscp() == 0);
      continue;
    }
    CHECK(pkt.dscp() == 0x2E);
    CHECK(pkt.at.payload_len == 0);
    CHECK(f.size() == size_t(orig.at.payload) + wire::kIcrcLen);
    CHECK(pkt.at.opcode == uint8_t(wire::Opcode::mrc_write_only));
    CHECK(pkt.reth().rkey() == 0xABCD);
    CHECK(pkt.reth().dma_len() == kPayload);
    CHECK(pkt.at.meth == orig.at.meth);
    // The ICRC is stale: receivers must skip it for trimmed frames.
    CHECK(parse(f, pkt, true) == wire::ParseError::bad_icrc);
  }
  wire::Packet sack;
  REQUIRE(parse(b.got[8].frame, sack, true) == wire::ParseError::ok);
  CHECK(sack.dscp() == 0);

  SECTION("trimmed frames still count against the queue limit") {
    LinkParams q = p;
    q.queue_bytes = p.trim_bytes + 2 * 100;
    Bench t(q, 1);
    for (uint32_t i = 0; i < 10; ++i) t.link.send(make_frame(i, kPayload, v6));
    const auto& c = t.link.counters();
    const uint64_t fit = 200 / (orig.at.payload + wire::kIcrcLen);
    CHECK(c.trimmed == fit);
    CHECK(c.dropped_queue == 10 - 3 - fit);
  }
}

TEST_CASE("Link corruption breaks the ICRC and nothing else") {
  LinkParams p = clean();
  p.corrupt = 1.0;
  Bench b(p, 5);
  for (uint32_t i = 0; i < 200; ++i)
    b.link.send(make_frame(i, i % 2 ? 0 : 1 + i, i % 3 == 0, 0,
                           uint8_t(i % 2 ? wire::Opcode::mrc_ack : wire::Opcode::mrc_write_only)));
  b.loop.run_until_idle();
  REQUIRE(b.got.size() == 200);
  CHECK(b.link.counters().corrupted == 200);
  for (const auto& a : b.got) {
    wire::Packet pkt;
    CHECK(parse(a.frame, pkt, true) == wire::ParseError::bad_icrc);
    CHECK(parse(a.frame, pkt, false) == wire::ParseError::ok);
  }
}

TEST_CASE("A down link drops everything, in flight included") {
  LinkParams p = clean();
  p.up = false;
  Bench b(p, 1);
  for (uint32_t i = 0; i < 10; ++i) b.link.send(make_frame(i));
  b.loop.run_until_idle();
  CHECK(b.got.empty());
  CHECK(b.link.counters().dropped_down == 10);

  b.link.set_up(true);
  for (uint32_t i = 0; i < 5; ++i) b.link.send(make_frame(i));
  b.loop.at(b.loop.now() + 250, [&] { b.link.set_up(false); });  // two have left the queue, none arrived
  b.loop.at(b.loop.now() + 260, [&] {
    CHECK(b.link.queued_bytes() == 0);
    b.link.set_up(true);
    b.link.send(make_frame(99));
  });
  b.loop.run_until_idle();
  REQUIRE(b.got.size() == 1);
  CHECK(psn_of(b.got[0].frame) == 99);
  CHECK(b.link.counters().dropped_down == 15);
}

TEST_CASE("Link is deterministic for a seed") {
  LinkParams p = clean(40 * kFrameBytes);
  p.loss = 0.05;
  p.corrupt = 0.05;
  p.duplicate = 0.05;
  p.reorder_prob = 0.2;
  p.reorder_max_ns = 3000;
  p.ecn_min_bytes = 5 * kFrameBytes;
  p.ecn_max_bytes = 30 * kFrameBytes;
  p.trim_bytes = 20 * kFrameBytes;
  auto run = [&](uint64_t seed) {
    Bench b(p, seed);
    for (uint32_t i = 0; i < 2000; ++i) b.loop.at(i * 60, [&b, i] { b.link.send(make_frame(i, kPayload, false, 1)); });
    b.loop.run_until_idle();
    return b.got;
  };
  const auto a = run(42);
  CHECK(a.size() > 1000);
  CHECK(a == run(42));
  CHECK_FALSE(a == run(43));
}
