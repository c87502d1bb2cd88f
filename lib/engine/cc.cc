#include "engine/cc.h"

#include "engine/cc_dcqcn.h"
#include "engine/cc_nscc.h"

namespace mrc::engine {

namespace {

// CcAlgo::none: a constant window, for tests and for measuring the transport
// without CC in the way.
class FixedWindow final : public CongestionControl {
 public:
  explicit FixedWindow(uint64_t window_bytes) : window_bytes_(window_bytes) {}
  std::string_view name() const override { return "none"; }
  uint64_t window_bytes() const override { return window_bytes_; }
  void on_send(uint32_t, Nanos) override {}
  void on_ack(const AckSample&, Nanos) override {}
  void on_nack(bool, uint32_t, Nanos) override {}
  void on_timeout(Nanos) override {}
  void on_cnp(Nanos) override {}

 private:
  const uint64_t window_bytes_;
};

}  // namespace

std::unique_ptr<CongestionControl> make_congestion_control(const CcProfile& p, uint32_t mtu, double line_rate_gbps,
                                                           bool fabric_trims) {
  switch (p.algo) {
    case CcAlgo::none: return std::make_unique<FixedWindow>(p.fixed_window_bytes);
    case CcAlgo::nscc: return std::make_unique<Nscc>(p.nscc, mtu, line_rate_gbps, fabric_trims);
    case CcAlgo::dcqcn: return std::make_unique<Dcqcn>(p.dcqcn, line_rate_gbps);
  }
  // An out-of-range algo (a bad cast upstream) gets the spec's default
  // rather than a null QP controller.
  return std::make_unique<Nscc>(p.nscc, mtu, line_rate_gbps, fabric_trims);
}

}  // namespace mrc::engine
