#include "engine/cc_dcqcn.h"

#include <algorithm>
#include <cmath>

namespace mrc::engine {

namespace {

constexpr double kDefaultLineRateGbps = 100;
// Caps the round counters so a QP idle for days cannot wrap them.
constexpr uint32_t kMaxRounds = 1u << 30;

double pick_line_rate(const DcqcnConfig& cfg, double nic_line_rate_gbps) {
  if (cfg.line_rate_gbps > 0) return cfg.line_rate_gbps;
  return nic_line_rate_gbps > 0 ? nic_line_rate_gbps : kDefaultLineRateGbps;
}

}  // namespace

Dcqcn::Dcqcn(const DcqcnConfig& cfg, double nic_line_rate_gbps)
    : line_rate_(pick_line_rate(cfg, nic_line_rate_gbps)),
      min_rate_(std::clamp(cfg.min_rate_gbps, 1e-6, line_rate_)),
      g_(std::clamp(cfg.g, 0.0, 1.0)),
      rai_(cfg.rai_gbps),
      rhai_(cfg.rhai_gbps),
      alpha_period_(std::max<Nanos>(cfg.alpha_period, 1)),
      rate_period_(std::max<Nanos>(cfg.rate_period, 1)),
      byte_counter_(cfg.byte_counter),
      fast_recovery_rounds_(cfg.fast_recovery_rounds),
      rate_(line_rate_),
      target_(line_rate_) {}

Nanos Dcqcn::next_send_time() const { return static_cast<Nanos>(std::ceil(next_send_)); }

void Dcqcn::rate_increase() {
  const uint32_t f = fast_recovery_rounds_;
  const uint32_t hi = std::max(timer_rounds_, byte_rounds_);
  const uint32_t lo = std::min(timer_rounds_, byte_rounds_);
  if (hi <= f) {
    // Fast recovery: close half the gap to the rate before the last cut.
  } else if (lo <= f) {
    target_ += rai_;
  } else {
    target_ += (lo - f) * rhai_;
  }
  target_ = std::clamp(target_, min_rate_, line_rate_);
  rate_ = std::clamp((target_ + rate_) / 2, min_rate_, line_rate_);
}

void Dcqcn::advance(Nanos now) {
  if (!active_) return;
  if (now >= next_alpha_) {
    const Nanos n = (now - next_alpha_) / alpha_period_ + 1;
    alpha_ *= std::pow(1 - g_, static_cast<double>(n));
    next_alpha_ += n * alpha_period_;
  }
  while (now >= next_rate_) {
    const double rate_before = rate_;
    const double target_before = target_;
    timer_rounds_ = std::min(timer_rounds_ + 1, kMaxRounds);
    rate_increase();
    next_rate_ += rate_period_;
    // Past fast recovery an event that changed nothing (line rate reached,
    // or zero increments) will not change anything later in this replay
    // either, so skip the rest of a long idle gap in one step.
    if (rate_ == rate_before && target_ == target_before && timer_rounds_ > fast_recovery_rounds_ &&
        now >= next_rate_) {
      const Nanos n = (now - next_rate_) / rate_period_ + 1;
      timer_rounds_ = static_cast<uint32_t>(std::min<Nanos>(timer_rounds_ + n, kMaxRounds));
      next_rate_ += n * rate_period_;
    }
  }
}

void Dcqcn::on_send(uint32_t bytes, Nanos now) {
  advance(now);
  // Resume from the scheduled slot when the caller is on time (or early),
  // so rounding the returned time up to whole ns does not slow the QP down.
  const double base = static_cast<double>(now) <= std::ceil(next_send_) ? next_send_ : static_cast<double>(now);
  next_send_ = base + bytes * 8.0 / rate_;
  if (!active_ || byte_counter_ == 0) return;
  bytes_since_ += bytes;
  while (bytes_since_ >= byte_counter_) {
    bytes_since_ -= byte_counter_;
    byte_rounds_ = std::min(byte_rounds_ + 1, kMaxRounds);
    rate_increase();
  }
}

void Dcqcn::on_cnp(Nanos now) {
  advance(now);
  ++cnps_;
  target_ = rate_;
  rate_ = std::max(rate_ * (1 - alpha_ / 2), min_rate_);
  alpha_ = (1 - g_) * alpha_ + g_;
  // A CNP restarts the whole increase schedule.
  active_ = true;
  next_alpha_ = now + alpha_period_;
  next_rate_ = now + rate_period_;
  bytes_since_ = 0;
  timer_rounds_ = 0;
  byte_rounds_ = 0;
}

}  // namespace mrc::engine
