// N engine hosts joined by P planes, each plane one switch: every host has an
// uplink (host -> switch) and a downlink (switch -> host) Link per plane, and
// the switch forwards by destination IP. For engine-vs-engine property tests;
// deterministic given Config::seed.
//
// Host h on plane p is MAC 02:00:00:00:hh:pp and IP 10.p.0.(h+1), or
// fd00::p:h with ipv6.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "sim/event_loop.h"
#include "sim/link.h"

namespace mrc::sim {

class TestNet {
 public:
  struct Config {
    uint32_t hosts = 2;   // 1..254
    uint32_t planes = 4;  // 1..engine::kMaxPlanes
    LinkParams link;      // every link, both directions
    bool ipv6 = false;
    uint64_t seed = 1;
    // num_planes and planes are filled in per host; seed is derived from
    // Config::seed, this seed and the host index.
    engine::EngineConfig engine_template;
  };

  struct EvEvent {
    Nanos t = 0;
    uint32_t qpn = 0;
    uint32_t ev = 0;
    engine::EvState from = engine::EvState::good;
    engine::EvState to = engine::EvState::good;
    uint64_t drops = 0;
  };
  struct QpError {
    Nanos t = 0;
    uint32_t qpn = 0;
    engine::WcStatus why = engine::WcStatus::success;
  };
  struct QpPair {
    uint32_t qpn_a = 0;
    uint32_t qpn_b = 0;
    engine::ModifyError error = engine::ModifyError::ok;
    explicit operator bool() const { return qpn_a && qpn_b && error == engine::ModifyError::ok; }
  };
  // Runs after the engine call that produced the completion has returned,
  // so it may post work (post_send) without re-entering the engine.
  using CompletionHook = std::function<void(uint32_t host, const engine::Completion&)>;

  // Throws std::invalid_argument when hosts or planes is out of range.
  explicit TestNet(const Config& cfg);
  ~TestNet();
  TestNet(const TestNet&) = delete;
  TestNet& operator=(const TestNet&) = delete;

  const Config& config() const { return cfg_; }
  engine::Engine& engine(uint32_t h);
  engine::PlaneAddr addr(uint32_t h, uint32_t p) const;
  std::array<engine::PlaneAddr, engine::kMaxPlanes> addrs(uint32_t h) const;
  Link& uplink(uint32_t h, uint32_t p) { return *uplinks_[h * cfg_.planes + p]; }
  Link& downlink(uint32_t h, uint32_t p) { return *downlinks_[h * cfg_.planes + p]; }
  // Every link of plane p. The engines are not told: that is the test's
  // choice (engine(h).set_plane_up) or the EV logic's to discover.
  void set_plane_up(uint32_t p, bool up);

  EventLoop& loop() { return loop_; }
  Nanos now() const { return loop_.now(); }
  EventId at(Nanos t, std::function<void()> fn) { return loop_.at(t, std::move(fn)); }
  bool run_until(Nanos t) { return loop_.run_until(t); }
  bool run_until_idle(Nanos limit = kNever) { return loop_.run_until_idle(limit); }

  const std::vector<engine::Completion>& completions(uint32_t h) const;
  const std::vector<EvEvent>& ev_events(uint32_t h) const;
  const std::vector<QpError>& qp_errors(uint32_t h) const;
  void set_completion_hook(CompletionHook hook) { hook_ = std::move(hook); }
  // Frames the switch could not route (destination IP of no host).
  uint64_t unroutable() const { return unroutable_; }

  // engine(h).post_send at now, then a poll.
  int post_send(uint32_t h, uint32_t qpn, const engine::SendWr& wr);
  // Polls host h now and re-arms its timer; call after driving the engine
  // directly (modify_qp, set_ev_state, set_plane_up, ...).
  void poll(uint32_t h);

  // Creates a QP on each host and moves both RESET -> INIT -> RTR -> RTS with
  // dest_qpn and the remote addresses from the topology. A's sq_psn and rq_psn
  // are base's; B's are swapped to match. No memory is registered.
  QpPair connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a = 0, uint32_t pd_b = 0,
                         const engine::QpCaps& caps = {});

 private:
  class Host;

  void forward(uint32_t p, std::vector<uint8_t> frame);
  void deliver(uint32_t h, uint32_t p, std::vector<uint8_t> frame);
  void after_engine_call(uint32_t h);
  void rearm(Host& host);
  uint32_t tx_room(uint32_t h, uint32_t p) const;
  uint64_t room_threshold(uint32_t h, uint32_t p) const;
  bool find_host(uint32_t p, const wire::IpAddr& ip, uint32_t& h) const;

  Config cfg_;
  EventLoop loop_;                                // first: links and hosts hold references to it
  std::vector<std::unique_ptr<Link>> uplinks_;    // [h * planes + p]
  std::vector<std::unique_ptr<Link>> downlinks_;  // [h * planes + p]
  std::vector<std::unique_ptr<Host>> hosts_;
  CompletionHook hook_;
  // Completions waiting for the hook, which must not run inside the engine.
  std::vector<std::pair<uint32_t, engine::Completion>> hook_queue_;
  size_t hook_next_ = 0;
  uint64_t unroutable_ = 0;
};

}  // namespace mrc::sim
