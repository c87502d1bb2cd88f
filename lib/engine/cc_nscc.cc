#include "engine/cc_nscc.h"

#include <algorithm>

namespace mrc::engine {

namespace {

constexpr double kDefaultBaseRttNs = 5000;
constexpr double kDefaultLineRateGbps = 100;
// Delay EWMA gain from htsim; small, so one sample never drives a decrease.
constexpr double kDelayEwma = 0.0125;
// Below this much queueing a path is taken to be empty (fast increase).
constexpr double kFastIncreaseDelayNs = 1000;
// alpha is normalised to the network htsim tuned NSCC on: 100 Gb/s, 12 us.
constexpr double kRefRttNs = 12000;
constexpr double kRefBdpBytes = 100.0 * kRefRttNs / 8;

double or_default(double v, double dflt) { return v > 0 ? v : dflt; }

}  // namespace

Nscc::Nscc(const NsccConfig& cfg, uint32_t mtu, double line_rate_gbps, bool fabric_trims)
    : mtu_(std::max<uint32_t>(mtu, 1)),
      base_rtt_(or_default(cfg.base_rtt, kDefaultBaseRttNs)),
      // UEC: 0.75 x base_rtt where the fabric trims, as a trim says more
      // than a deep queue; the whole base_rtt where it does not.
      target_delay_(or_default(cfg.target_delay, (fabric_trims ? 0.75 : 1.0) * base_rtt_)),
      qa_threshold_(or_default(cfg.qa_threshold, 4 * target_delay_)),
      max_cwnd_(std::max(
          mtu_, or_default(cfg.max_cwnd, 1.5 * or_default(line_rate_gbps, kDefaultLineRateGbps) * base_rtt_ / 8))),
      fi_bytes_(cfg.fi * mtu_),
      eta_bytes_(cfg.eta * mtu_),
      fi_scale_(cfg.fi_scale),
      gamma_(cfg.gamma),
      md_floor_(std::max(0.0, 1.0 - cfg.max_md_jump)),
      // htsim: 4 * MTU * scaling_a * scaling_b / target, with scaling_a =
      // BDP / ref BDP and scaling_b = target / ref RTT; target cancels.
      alpha_(4.0 * mtu_ * (or_default(line_rate_gbps, kDefaultLineRateGbps) * base_rtt_ / 8) /
             (kRefBdpBytes * kRefRttNs)),
      adjust_bytes_(cfg.adjust_bytes_threshold ? cfg.adjust_bytes_threshold : 8 * static_cast<uint64_t>(mtu_)),
      adjust_period_ns_(cfg.adjust_period_threshold ? cfg.adjust_period_threshold : static_cast<Nanos>(base_rtt_)),
      qa_gate_bytes_(static_cast<uint64_t>(max_cwnd_) >> std::min<unsigned>(cfg.qa_gate, 63)),
      disable_qa_(cfg.disable_qa),
      cwnd_(max_cwnd_) {}

void Nscc::start_clock(Nanos now) {
  if (started_) return;
  started_ = true;
  last_adjust_ = now;
  qa_end_ = static_cast<double>(now) + base_rtt_ + target_delay_;
}

void Nscc::on_send(uint32_t bytes, Nanos now) {
  start_clock(now);
  sent_since_ack_ += bytes;
}

void Nscc::update_avg_delay(double delay, bool ecn) {
  // Unmarked high delay is most likely another flow's queue on a path we do
  // not share, so it counts as a small delay unless it is extreme.
  double sample = delay;
  if (!ecn && delay > target_delay_ && delay <= 5 * base_rtt_) sample = 0.25 * base_rtt_;
  avg_delay_ = kDelayEwma * sample + (1 - kDelayEwma) * avg_delay_;
}

bool Nscc::quick_adapt(bool congestion_signal, Nanos now) {
  if (disable_qa_) return false;
  bool hold = false;
  if (congestion_signal && bytes_ignored_ < bytes_to_ignore_) {
    // Sent before the last quick adapt: its marks describe the old window.
    hold = true;
  } else if (static_cast<double>(now) > qa_end_) {
    if ((trigger_qa_ || qa_min_delay_ > qa_threshold_) && achieved_bytes_ < qa_gate_bytes_) {
      cwnd_ = std::max(static_cast<double>(achieved_bytes_), mtu_);
      bytes_to_ignore_ = inflight_estimate();
      bytes_ignored_ = 0;
      ++quick_adapts_;
      hold = true;
    }
    // A trim or timeout only speaks for the period it was seen in.
    trigger_qa_ = false;
    qa_min_delay_ = -1;
    achieved_bytes_ = 0;
    qa_end_ = static_cast<double>(now) + base_rtt_ + target_delay_;
  }
  if (hold) {
    inc_bytes_ = 0;
    received_bytes_ = 0;
  }
  return hold;
}

void Nscc::fast_or_proportional_increase(uint32_t acked, double delay) {
  if (delay < kFastIncreaseDelayNs) {
    fi_count_ += acked;
    // A whole window came back with empty queues: grow per ACK, not per
    // adjust period, to fill a path that has gone idle.
    if (fast_increasing_ || static_cast<double>(fi_count_) > cwnd_) {
      fast_increasing_ = true;
      cwnd_ += acked * fi_scale_;
      return;
    }
  } else {
    fi_count_ = 0;
  }
  fast_increasing_ = false;
  inc_bytes_ += alpha_ * acked * (target_delay_ - delay);
}

void Nscc::multiplicative_decrease(Nanos now) {
  fast_increasing_ = false;
  fi_count_ = 0;
  if (avg_delay_ <= target_delay_) return;
  if (decreased_ && static_cast<double>(now - last_dec_) <= base_rtt_) return;
  cwnd_ *= std::max(1 - gamma_ * (avg_delay_ - target_delay_) / avg_delay_, md_floor_);
  decreased_ = true;
  last_dec_ = now;
  ++md_count_;
}

void Nscc::adjust(Nanos now) {
  cwnd_ += inc_bytes_ / cwnd_;
  // eta is a slow time-based probe, so it is paid once per period however
  // often the byte threshold triggers.
  if (now - last_adjust_ >= adjust_period_ns_) {
    cwnd_ += eta_bytes_;
    last_adjust_ = now;
  }
  inc_bytes_ = 0;
  received_bytes_ = 0;
}

void Nscc::clamp() { cwnd_ = std::clamp(cwnd_, mtu_, max_cwnd_); }

void Nscc::on_ack(const AckSample& s, Nanos now) {
  start_clock(now);
  last_inflight_ = s.inflight_bytes;
  sent_since_ack_ = 0;
  achieved_bytes_ += s.bytes_acked;
  received_bytes_ += s.bytes_acked;
  bytes_ignored_ += s.bytes_acked;

  double delay = avg_delay_;  // no sample: fall back to the smoothed delay
  if (s.rtt_ns != 0) {
    base_rtt_ = std::min(base_rtt_, static_cast<double>(s.rtt_ns));
    delay = static_cast<double>(s.rtt_ns) - base_rtt_;
    update_avg_delay(delay, s.ecn);
    qa_min_delay_ = qa_min_delay_ < 0 ? delay : std::min(qa_min_delay_, delay);
  }

  if (quick_adapt(s.ecn, now)) return;

  if (!s.ecn && delay < target_delay_) {
    fast_or_proportional_increase(s.bytes_acked, delay);
  } else {
    fi_count_ = 0;
    fast_increasing_ = false;
    if (!s.ecn) {
      inc_bytes_ += fi_bytes_ * s.bytes_acked;  // fair increase
    } else if (delay >= target_delay_) {
      multiplicative_decrease(now);
    }
    // ECN with low delay: the mark is about the path, which the EV logic
    // steers away from, not about this window.
  }
  clamp();

  if (received_bytes_ > adjust_bytes_ || now - last_adjust_ >= adjust_period_ns_) {
    adjust(now);
    clamp();
  }
}

void Nscc::on_nack(bool trimmed, uint32_t bytes, Nanos now) {
  start_clock(now);
  // Only a trim is a congestion signal; other NACKs (window, sequence) are
  // left to the reliability layer.
  if (!trimmed) return;
  bytes_ignored_ += bytes;
  // A trim means a queue reached its trim threshold: count about one base
  // RTT of queueing, as htsim does.
  update_avg_delay(base_rtt_, true);
  trigger_qa_ = true;
  if (quick_adapt(true, now)) return;
  cwnd_ -= mtu_;
  clamp();
}

void Nscc::on_timeout(Nanos now) {
  start_clock(now);
  fi_count_ = 0;
  fast_increasing_ = false;
  if (disable_qa_) {
    cwnd_ = std::max(cwnd_ / 2, mtu_);
    return;
  }
  trigger_qa_ = true;
  if (quick_adapt(true, now)) return;
  cwnd_ -= mtu_;
  clamp();
}

}  // namespace mrc::engine
