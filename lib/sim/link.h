// A one-directional link: an output queue drained at line rate, then a wire
// with propagation delay and seeded impairments. The queue is FIFO with tail
// drop, optional RED-style ECN marking and optional payload trimming, so the
// same Link serves as a host uplink and as a switch egress port. Its depth
// is the bytes not yet serialized, the frame on the wire counting for what
// is left of it, as a switch that frees buffer cells as they drain; so the
// queue is one time, when it will be empty, and needs no list of frames.
#pragma once

#include <cassert>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/prefetch.h"
#include "sim/event_loop.h"

namespace mrc::sim {

struct LinkParams {
  double rate_gbps = 100.0;        // <= 0: no serialization delay
  Nanos delay_ns = 1000;           // propagation, last bit out to last bit in
  uint32_t queue_bytes = 1 << 20;  // tail-drop limit on bytes not yet serialized
  double loss = 0.0;               // per-frame probabilities
  double corrupt = 0.0;
  double duplicate = 0.0;
  double reorder_prob = 0.0;
  Nanos reorder_max_ns = 0;  // a reordered frame is held back 1..reorder_max_ns more
  // CE marking by queue depth at enqueue: none up to ecn_min_bytes, linear
  // probability in between, always from ecn_max_bytes. ecn_max_bytes == 0
  // disables marking.
  uint32_t ecn_min_bytes = 0;
  uint32_t ecn_max_bytes = 0;
  // RFC 3168 switches mark only ECN-capable packets; this marks Not-ECT too.
  bool ecn_mark_not_ect = false;
  // A data frame that would take the queue past trim_bytes is cut to its
  // headers and re-marked trimmed_dscp instead (0 disables).
  uint32_t trim_bytes = 0;
  uint8_t trimmed_dscp = 0x3F;
  bool up = true;
};

#define MRC_LINK_COUNTERS(X)                                              \
  X(sent, "frames offered to the link")                                   \
  X(sent_bytes, "wire bytes offered to the link")                         \
  X(delivered, "frames handed to the sink, duplicates included")          \
  X(delivered_bytes, "wire bytes handed to the sink")                     \
  X(serialized_bytes, "wire bytes that took the wire's time")             \
  X(dropped_queue, "frames tail-dropped: the queue was full")             \
  X(dropped_loss, "frames lost on the wire")                              \
  X(dropped_down, "frames sent into, or in flight on, a link going down") \
  X(corrupted, "frames with one bit flipped")                             \
  X(duplicated, "extra copies delivered")                                 \
  X(reordered, "frames held back to arrive out of order")                 \
  X(ecn_marked, "frames marked CE")                                       \
  X(trimmed, "frames cut to their headers and queued")

struct LinkCounters {
#define MRC_X(name, help) uint64_t name = 0;
  MRC_LINK_COUNTERS(MRC_X)
#undef MRC_X

  // Calls fn(name, help, value) for every counter, in table order.
  template <class Fn>
  void for_each(Fn&& fn) const {
#define MRC_X(name, help) fn(std::string_view(#name), std::string_view(help), name);
    MRC_LINK_COUNTERS(MRC_X)
#undef MRC_X
  }
};

// Mixes `tag` into `seed` (splitmix64), for deriving independent per-link
// and per-host seeds from one run seed.
uint64_t derive_seed(uint64_t seed, uint64_t tag);

class Link {
 public:
  // A frame travels with a tag: what the network worked out from its
  // headers where they were last in cache (the sending host), so that
  // switches route without reading the frame again. Links pass it on
  // untouched; 0 means none.
  // A frame's bytes may stop short of its length on the wire, `wire_len`:
  // a data frame whose payload stayed behind (EngineHosts' compact frames)
  // still takes its full length's time and queue room.
  using Sink = std::function<void(std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len)>;

  Link(EventLoop& loop, const LinkParams& params, uint64_t seed, Sink sink = {});
  // Scheduled deliveries point at this link.
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // A new sink drops the old one's hint (set_sink_hint).
  void set_sink(Sink sink) {
    sink_ = std::move(sink);
    sink_hint_ = {};
  }
  // What the sink will first touch for a frame (the next hop's link, the
  // host's engine), for the event loop to load while the events before the
  // delivery run: fn(ctx, a, b, tag, frame, stage), stage 0 first, then 1,
  // which may read what 0 loaded. Optional.
  struct SinkHint {
    void (*fn)(const void* ctx, uint32_t a, uint32_t b, uint64_t tag, std::span<const uint8_t> frame,
               unsigned stage) = nullptr;
    const void* ctx = nullptr;
    uint32_t a = 0, b = 0;
  };
  void set_sink_hint(const SinkHint& hint) { sink_hint_ = hint; }
  // Starts loading the link's state (what send() and a delivery read).
  void prefetch() const { engine::prefetch_bytes(this, sizeof(Link)); }
  // Sees every frame the link delivers, as it arrives (a capture at its far
  // end): the bytes that travel, which for a compact frame stop short.
  using Tap = std::function<void(std::span<const uint8_t> frame, Nanos t)>;
  void set_tap(Tap tap) { tap_ = std::move(tap); }
  // Queues a frame at loop.now(); the sink gets it (or not) at arrival time.
  // Its length on the wire is the larger of wire_len and its size.
  void send(std::vector<uint8_t> frame, uint64_t tag = 0, uint32_t wire_len = 0);

  // Taking a link down empties its queue and loses every frame in flight.
  void set_up(bool up);
  bool up() const { return params_.up; }
  // A black hole: frames are still queued and serialized at line rate but
  // never arrive, as behind a port whose own link stays up while the switch
  // beyond has died. Frames in flight when it starts are lost too.
  void set_blackhole(bool on);
  bool blackhole() const { return blackhole_; }
  const LinkParams& params() const { return params_; }
  // New parameters apply to frames sent from now on; `up` goes through
  // set_up(). Frames queued before a new rate leave when they were due, but
  // queued_bytes() counts what is left of them at the new rate.
  void set_params(const LinkParams& params);

  LinkCounters counters() const {
    LinkCounters c = ctr_;
    c.dropped_down += lost_in_flight_;
    return c;
  }
  // Bytes accepted and not yet serialized (to the nearest byte), now or at
  // a later time `t` given no new sends.
  uint64_t queued_bytes() const { return queued_bytes_at(loop_.now()); }
  uint64_t queued_bytes_at(Nanos t) const;
  // Bumped on every change to what queued_bytes_at() answers other than a
  // send: a new rate or queue, going down or up. The one sender on a host's
  // uplink keeps what it worked out from them, and sees its own sends.
  // One watcher per link (a host's uplink has one sender).
  void set_watcher(uint32_t* changes) {
    assert(!watcher_ || watcher_ == changes);
    watcher_ = changes;
  }
  // A link whose far end runs on another loop, which another thread may be
  // running (Fabric's partitions): its deliveries wait in `mail` until the
  // two loops meet, then run on `rx_loop`. The loops run apart for up to
  // `min_delay`, so no frame may arrive sooner: this and set_params() refuse
  // a shorter delay (std::invalid_argument).
  void set_far_end(EventLoop& rx_loop, Mailbox& mail, Nanos min_delay);
  // When the queue will be empty (now when it is).
  Nanos drain_time() const;
  // The earliest time at which queued_bytes() <= bytes, given no new sends.
  Nanos time_queued_at_most(uint64_t bytes) const;

 private:
  double uniform();
  // Serialization time in picoseconds of `bytes` at the link's rate.
  uint64_t wire_ps(uint64_t bytes) const;
  bool trim(std::vector<uint8_t>& frame);
  bool mark_ecn(std::vector<uint8_t>& frame, uint64_t queued);
  bool flip_bit(std::vector<uint8_t>& frame);
  struct Delivery;
  void deliver_at(Nanos t, std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len);

  // splitmix64: a fabric has thousands of links and mt19937_64 kept 2.5 KB
  // of state in each, which cost a cache miss per frame and hop.
  uint64_t next_random() {
    uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  EventLoop& loop_;          // the sender's: the queue's clock
  EventLoop* rx_loop_;       // where deliveries run
  Mailbox* mail_ = nullptr;  // set when rx_loop_ is another thread's
  Nanos min_delay_ = 0;
  // dropped_down's share counted where deliveries run: ctr_ is the
  // sender's thread's.
  uint64_t lost_in_flight_ = 0;
  // Times are kept in picoseconds so back-to-back frames do not accumulate
  // rounding; events fire at the next whole nanosecond.
  uint64_t busy_until_ps_ = 0;  // when the last bit queued leaves
  LinkParams params_;
  uint64_t rng_state_;
  Sink sink_;
  SinkHint sink_hint_;
  Tap tap_;
  uint32_t* watcher_ = nullptr;
  uint32_t epoch_ = 0;  // bumped on going down or black-holed: deliveries of older epochs are lost
  bool blackhole_ = false;
  LinkCounters ctr_;
};

}  // namespace mrc::sim
