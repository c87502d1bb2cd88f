#include "sim/link.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "sim/frame_pool.h"
#include "wire/packet.h"

namespace mrc::sim {
namespace {

constexpr uint64_t kPsPerNs = 1000;

constexpr Nanos ps_to_ns_ceil(uint64_t ps) { return (ps + kPsPerNs - 1) / kPsPerNs; }

bool parse_headers(const std::vector<uint8_t>& frame, wire::Packet& pkt) {
  wire::ParseOptions opts;
  opts.verify_icrc = false;
  return wire::parse_frame(frame, pkt, opts) == wire::ParseError::ok;
}

}  // namespace

uint64_t derive_seed(uint64_t seed, uint64_t tag) {
  uint64_t x = seed ^ (tag * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Link::Link(EventLoop& loop, const LinkParams& params, uint64_t seed, Sink sink)
    : loop_(loop), rx_loop_(&loop), params_(params), rng_state_(seed), sink_(std::move(sink)) {}

// Built from raw generator output rather than std::uniform_real_distribution,
// whose algorithm differs between standard libraries.
double Link::uniform() { return static_cast<double>(next_random() >> 11) * 0x1.0p-53; }

uint64_t Link::wire_ps(uint64_t bytes) const {
  return params_.rate_gbps > 0
             ? static_cast<uint64_t>(std::llround(static_cast<double>(bytes) * 8000.0 / params_.rate_gbps))
             : 0;
}

void Link::set_up(bool up) {
  if (watcher_) ++*watcher_;
  if (params_.up && !up) {
    ++epoch_;
    busy_until_ps_ = 0;
  }
  params_.up = up;
}

void Link::set_blackhole(bool on) {
  if (on && !blackhole_) ++epoch_;
  blackhole_ = on;
}

void Link::set_far_end(EventLoop& rx_loop, Mailbox& mail, Nanos min_delay) {
  if (params_.delay_ns < min_delay) throw std::invalid_argument("Link: a far end needs the delay it is run apart by");
  rx_loop_ = &rx_loop;
  mail_ = &mail;
  min_delay_ = min_delay;
}

void Link::set_params(const LinkParams& params) {
  if (params.delay_ns < min_delay_)
    throw std::invalid_argument("Link: delay " + std::to_string(params.delay_ns) + " ns is below the " +
                                std::to_string(min_delay_) + " ns its partitions run apart by");
  const bool was_up = params_.up;
  if (watcher_) ++*watcher_;
  params_ = params;
  params_.up = was_up;  // so set_up() sees the transition
  set_up(params.up);
}

uint64_t Link::queued_bytes_at(Nanos t) const {
  const uint64_t now_ps = t * kPsPerNs;
  if (busy_until_ps_ <= now_ps || params_.rate_gbps <= 0) return 0;
  // + 0.5 and truncation round the positive value to nearest (std::llround is a libm call).
  return static_cast<uint64_t>(static_cast<double>(busy_until_ps_ - now_ps) * params_.rate_gbps / 8000.0 + 0.5);
}

Nanos Link::drain_time() const { return std::max(loop_.now(), ps_to_ns_ceil(busy_until_ps_)); }

Nanos Link::time_queued_at_most(uint64_t bytes) const {
  const uint64_t now_ps = loop_.now() * kPsPerNs;
  // Rounded down, so that queued_bytes() is at most `bytes` from then on.
  const uint64_t keep_ps =
      params_.rate_gbps > 0 ? static_cast<uint64_t>(static_cast<double>(bytes) * 8000.0 / params_.rate_gbps) : 0;
  if (busy_until_ps_ <= now_ps + keep_ps) return loop_.now();
  return ps_to_ns_ceil(busy_until_ps_ - keep_ps);
}

void Link::send(std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len) {
  uint32_t wire = std::max(wire_len, static_cast<uint32_t>(frame.size()));
  ++ctr_.sent;
  ctr_.sent_bytes += wire;
  if (!params_.up) {
    ++ctr_.dropped_down;
    FramePool::give(std::move(frame));
    return;
  }
  const uint64_t queued = queued_bytes();
  const bool trimmed = params_.trim_bytes && queued + wire > params_.trim_bytes && trim(frame);
  if (trimmed) wire = static_cast<uint32_t>(frame.size());
  if (queued + wire > params_.queue_bytes) {
    ++ctr_.dropped_queue;
    FramePool::give(std::move(frame));
    return;
  }
  if (trimmed) ++ctr_.trimmed;
  if (params_.ecn_max_bytes && mark_ecn(frame, queued)) ++ctr_.ecn_marked;

  busy_until_ps_ = std::max(busy_until_ps_, loop_.now() * kPsPerNs) + wire_ps(wire);
  ctr_.serialized_bytes += wire;
  Nanos arrive = ps_to_ns_ceil(busy_until_ps_) + params_.delay_ns;
  if (blackhole_) {
    ++ctr_.dropped_down;
    FramePool::give(std::move(frame));
    return;
  }

  // Wire impairments happen after the queue: a lost frame still used the link.
  if (params_.loss > 0 && uniform() < params_.loss) {
    ++ctr_.dropped_loss;
    FramePool::give(std::move(frame));
    return;
  }
  if (params_.corrupt > 0 && uniform() < params_.corrupt && flip_bit(frame)) ++ctr_.corrupted;
  if (params_.reorder_prob > 0 && params_.reorder_max_ns > 0 && uniform() < params_.reorder_prob) {
    arrive += 1 + next_random() % params_.reorder_max_ns;
    ++ctr_.reordered;
  }
  if (params_.duplicate > 0 && uniform() < params_.duplicate) {
    ++ctr_.duplicated;
    deliver_at(arrive, frame, tag, wire);
  }
  deliver_at(arrive, std::move(frame), tag, wire);
}

// A frame hop: run at arrival time on the far end's loop.
struct Link::Delivery {
  Link* link;
  uint32_t epoch;
  uint32_t wire;
  uint64_t tag;
  std::vector<uint8_t> frame;

  void operator()() {
    if (epoch != link->epoch_ || !link->params_.up) {
      ++link->lost_in_flight_;
      FramePool::give(std::move(frame));
      return;
    }
    ++link->ctr_.delivered;
    link->ctr_.delivered_bytes += wire;
    if (link->tap_) link->tap_(frame, link->rx_loop_->now());
    if (link->sink_) link->sink_(std::move(frame), tag, wire);
  }
  void prefetch(unsigned stage) const {
    if (stage == 0) {
      link->prefetch();
      __builtin_prefetch(frame.data());
    } else if (const SinkHint& h = link->sink_hint_; h.fn) {
      h.fn(h.ctx, h.a, h.b, tag, frame, stage - 1);
    }
  }
};

void Link::deliver_at(Nanos t, std::vector<uint8_t> frame, uint64_t tag, uint32_t wire) {
  Delivery deliver{this, epoch_, wire, tag, std::move(frame)};
  static_assert(sizeof(deliver) <= Callback::kInline, "a frame hop must not allocate");
  if (mail_)
    mail_->post(t, std::move(deliver));
  else
    loop_.at(t, std::move(deliver));
}

bool Link::mark_ecn(std::vector<uint8_t>& frame, uint64_t queued) {
  const uint64_t lo = params_.ecn_min_bytes;
  const uint64_t hi = std::max<uint64_t>(params_.ecn_max_bytes, lo);
  if (queued < hi) {
    if (queued <= lo) return false;
    if (uniform() >= static_cast<double>(queued - lo) / static_cast<double>(hi - lo)) return false;
  }
  wire::Packet pkt;
  if (!parse_headers(frame, pkt)) return false;
  const uint8_t ecn = pkt.ecn();
  if (ecn == wire::kEcnCe || (ecn == 0 && !params_.ecn_mark_not_ect)) return false;
  wire::MutablePacket{frame.data(), pkt.at}.set_ecn(wire::kEcnCe);
  return true;
}

// Keeps everything up to the payload (Ethernet, IP, UDP, BTH and the MRC
// extension headers) so the receiver can still NACK the exact PSN, and fixes
// the lengths so the frame parses. The old ICRC is carried over unchanged:
// receivers skip the ICRC of frames marked trimmed.
bool Link::trim(std::vector<uint8_t>& frame) {
  wire::Packet pkt;
  if (!parse_headers(frame, pkt)) return false;
  const wire::Layout at = pkt.at;
  const uint32_t new_size = at.payload + wire::kIcrcLen;
  if (!(at.flags & wire::kOpPayload) || new_size >= at.size) return false;

  std::array<uint8_t, wire::kIcrcLen> icrc;
  std::memcpy(icrc.data(), frame.data() + at.size - wire::kIcrcLen, wire::kIcrcLen);
  frame.resize(new_size);
  std::memcpy(frame.data() + at.payload, icrc.data(), wire::kIcrcLen);

  wire::MutablePacket m{frame.data(), at};
  m.set_size(new_size);
  m.bth().set_pad_count(0);
  m.at.payload_len = 0;
  m.at.pad = 0;
  m.set_dscp(params_.trimmed_dscp);
  return true;
}

// Flips a bit the ICRC covers: in the payload when there is one, else in the
// ICRC itself (headers are avoided so the frame still parses up to the ICRC
// check, as a real bit error in a packet usually would).
bool Link::flip_bit(std::vector<uint8_t>& frame) {
  size_t lo, hi;
  wire::Packet pkt;
  if (parse_headers(frame, pkt)) {
    lo = pkt.at.payload_len ? pkt.at.payload : pkt.at.size - wire::kIcrcLen;
    hi = pkt.at.payload_len ? lo + pkt.at.payload_len : pkt.at.size;
  } else {
    lo = std::min<size_t>(wire::kEthLen, frame.size());
    hi = frame.size();
  }
  if (lo >= hi) return false;
  const uint64_t bit = next_random() % ((hi - lo) * 8);
  frame[lo + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  return true;
}

}  // namespace mrc::sim
