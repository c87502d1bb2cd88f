// Congestion control behind one interface, so algorithms can be added
// without touching the requester. An instance belongs to one QP and is
// driven only by the engine's calls: it reads no clock of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "engine/types.h"

namespace mrc::engine {

// What one piece of feedback (SACK/ACK) says about the network.
struct AckSample {
  uint32_t bytes_acked = 0;     // newly acknowledged payload bytes
  uint64_t rtt_ns = 0;          // 0 when the feedback carried no usable sample
  bool ecn = false;             // the acknowledged packet was ECN-marked on its way
  uint64_t inflight_bytes = 0;  // after this feedback was applied
};

class CongestionControl {
 public:
  virtual ~CongestionControl() = default;
  virtual std::string_view name() const = 0;
  // Bytes this QP may have in flight now.
  virtual uint64_t window_bytes() const = 0;
  // Earliest time the next packet may leave; rate-based algorithms pace
  // with it, window-based ones return 0.
  virtual Nanos next_send_time() const { return 0; }
  virtual void on_send(uint32_t bytes, Nanos now) = 0;
  virtual void on_ack(const AckSample& s, Nanos now) = 0;
  // A NACK for one packet: trimmed (switch cut its payload) or another reason.
  virtual void on_nack(bool trimmed, uint32_t bytes, Nanos now) = 0;
  virtual void on_timeout(Nanos now) = 0;
  // A RoCEv2 congestion notification packet reached the sender.
  virtual void on_cnp(Nanos now) = 0;
};

// mtu: the QP's path MTU in bytes; line_rate_gbps: the NIC's aggregate rate,
// used for defaults that scale with the bandwidth-delay product;
// fabric_trims: EngineConfig::fabric_trims.
std::unique_ptr<CongestionControl> make_congestion_control(const CcProfile& p, uint32_t mtu, double line_rate_gbps,
                                                           bool fabric_trims = true);

}  // namespace mrc::engine
