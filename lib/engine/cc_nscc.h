// UEC NSCC (spec-notes §2.3), configured by the mrc_ctl_cc_nscc_cfg fields.
// Window based: ECN and queueing delay pick one of four reactions per ACK.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/cc.h"
#include "engine/types.h"

namespace mrc::engine {

class Nscc final : public CongestionControl {
 public:
  // line_rate_gbps sizes the BDP behind the max_cwnd default and alpha;
  // fabric_trims, the target delay's default (EngineConfig::fabric_trims).
  Nscc(const NsccConfig& cfg, uint32_t mtu, double line_rate_gbps, bool fabric_trims = true);

  std::string_view name() const override { return "nscc"; }
  uint64_t window_bytes() const override { return static_cast<uint64_t>(cwnd_); }
  void on_send(uint32_t bytes, Nanos now) override;
  void on_ack(const AckSample& s, Nanos now) override;
  void on_nack(bool trimmed, uint32_t bytes, Nanos now) override;
  void on_timeout(Nanos now) override;
  void on_cnp(Nanos) override {}  // NSCC reads ECN from ACKs, not CNPs

  // Introspection for tests and telemetry.
  double cwnd() const { return cwnd_; }
  double max_cwnd() const { return max_cwnd_; }
  double base_rtt_ns() const { return base_rtt_; }
  double target_delay_ns() const { return target_delay_; }
  double qa_threshold_ns() const { return qa_threshold_; }
  double avg_delay_ns() const { return avg_delay_; }
  double alpha() const { return alpha_; }
  uint64_t quick_adapts() const { return quick_adapts_; }
  uint64_t multiplicative_decreases() const { return md_count_; }

 private:
  void start_clock(Nanos now);
  void update_avg_delay(double delay, bool ecn);
  // Runs the quick-adapt state machine for one piece of feedback. True when
  // the feedback must not move the window (QA fired or the bytes are ignored).
  bool quick_adapt(bool congestion_signal, Nanos now);
  void fast_or_proportional_increase(uint32_t acked, double delay);
  void multiplicative_decrease(Nanos now);
  void adjust(Nanos now);
  void clamp();
  uint64_t inflight_estimate() const { return last_inflight_ + sent_since_ack_; }

  // Resolved configuration (bytes, ns).
  const double mtu_;
  double base_rtt_;  // only ever decreases
  const double target_delay_;
  const double qa_threshold_;
  const double max_cwnd_;
  const double fi_bytes_;
  const double eta_bytes_;
  const double fi_scale_;
  const double gamma_;
  const double md_floor_;  // 1 - max_md_jump
  const double alpha_;     // bytes/ns of proportional increase per ns below target
  const uint64_t adjust_bytes_;
  const Nanos adjust_period_ns_;
  const uint64_t qa_gate_bytes_;  // max_cwnd >> qa_gate
  const bool disable_qa_;

  double cwnd_;
  double inc_bytes_ = 0;
  double avg_delay_ = 0;

  bool started_ = false;
  uint64_t received_bytes_ = 0;  // acked since the last adjustment
  Nanos last_adjust_ = 0;
  uint64_t fi_count_ = 0;  // acked bytes while delay stayed near zero
  bool fast_increasing_ = false;
  bool decreased_ = false;
  Nanos last_dec_ = 0;

  // Quick adapt.
  Nanos qa_end_ = 0;
  uint64_t achieved_bytes_ = 0;
  bool trigger_qa_ = false;
  // The least queueing delay any ACK of this QA period saw (-1: none).
  // Packets sprayed over many paths, of which one sits behind a hot queue,
  // report that queue; only when every path is slow is the congestion at
  // the shared last hop, where collapsing the window is the answer.
  double qa_min_delay_ = -1;
  uint64_t bytes_to_ignore_ = 0;
  uint64_t bytes_ignored_ = 0;

  uint64_t last_inflight_ = 0;
  uint64_t sent_since_ack_ = 0;

  uint64_t quick_adapts_ = 0;
  uint64_t md_count_ = 0;
};

}  // namespace mrc::engine
