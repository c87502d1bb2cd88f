// DCQCN reaction point (Zhu et al., SIGCOMM'15; spec-notes §2.9): the rate
// based CC of the RoCEv2 baseline. Its timers run on the `now` of the calls
// that reach it; elapsed periods are replayed when the next call arrives.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/cc.h"
#include "engine/types.h"

namespace mrc::engine {

class Dcqcn final : public CongestionControl {
 public:
  // nic_line_rate_gbps is used when the config leaves line_rate_gbps at 0.
  Dcqcn(const DcqcnConfig& cfg, double nic_line_rate_gbps);

  std::string_view name() const override { return "dcqcn"; }
  // Rate based: the window only guards against runaway bookkeeping.
  uint64_t window_bytes() const override { return kWindowBytes; }
  Nanos next_send_time() const override;
  void on_send(uint32_t bytes, Nanos now) override;
  void on_ack(const AckSample&, Nanos now) override { advance(now); }
  void on_nack(bool, uint32_t, Nanos now) override { advance(now); }
  void on_timeout(Nanos now) override { advance(now); }
  void on_cnp(Nanos now) override;

  // Introspection for tests and telemetry.
  double rate_gbps() const { return rate_; }
  double target_rate_gbps() const { return target_; }
  double alpha() const { return alpha_; }
  uint32_t timer_rounds() const { return timer_rounds_; }
  uint32_t byte_rounds() const { return byte_rounds_; }
  uint64_t cnps() const { return cnps_; }

  static constexpr uint64_t kWindowBytes = uint64_t{1} << 32;

 private:
  // Replays the alpha and rate timers that expired up to `now`.
  void advance(Nanos now);
  void rate_increase();

  const double line_rate_;
  const double min_rate_;
  const double g_;
  const double rai_;
  const double rhai_;
  const Nanos alpha_period_;
  const Nanos rate_period_;
  const uint64_t byte_counter_;
  const uint32_t fast_recovery_rounds_;

  double rate_;    // R_C, Gb/s
  double target_;  // R_T, Gb/s
  double alpha_ = 1.0;
  // Timers start with the first CNP: until then the QP runs at line rate.
  bool active_ = false;
  Nanos next_alpha_ = 0;
  Nanos next_rate_ = 0;
  uint64_t bytes_since_ = 0;
  uint32_t timer_rounds_ = 0;
  uint32_t byte_rounds_ = 0;
  double next_send_ = 0;  // ns; fractional so pacing does not drift
  uint64_t cnps_ = 0;
};

}  // namespace mrc::engine
