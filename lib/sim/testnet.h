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
#include "sim/engine_host.h"
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

  using EvEvent = sim::EvEvent;
  using QpError = sim::QpError;
  using QpPair = sim::QpPair;
  // Runs after the engine call that produced the completion has returned,
  // so it may post work (post_send) without re-entering the engine.
  using CompletionHook = EngineHosts::CompletionHook;

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
  EventId at(Nanos t, Callback fn) { return loop_.at(t, std::move(fn)); }
  bool run_until(Nanos t) { return loop_.run_until(t); }
  bool run_until_idle(Nanos limit = kNever) { return loop_.run_until_idle(limit); }

  const std::vector<engine::Completion>& completions(uint32_t h) const;
  const std::vector<EvEvent>& ev_events(uint32_t h) const;
  const std::vector<QpError>& qp_errors(uint32_t h) const;
  void set_completion_hook(CompletionHook hook) { hosts_.set_completion_hook(std::move(hook)); }
  void set_payload_tokens(EngineHosts::PlacementCheck check) { hosts_.set_payload_tokens(std::move(check)); }
  // Frames the switch could not route (destination IP of no host).
  uint64_t unroutable() const { return unroutable_; }

  // engine(h).post_send, then a poll (which sends it).
  int post_send(uint32_t h, uint32_t qpn, const engine::SendWr& wr) { return hosts_.post_send(h, qpn, wr); }
  // Polls host h now and re-arms its timer; call after driving the engine
  // directly (modify_qp, set_ev_state, set_plane_up, ...).
  void poll(uint32_t h) { hosts_.poll(h); }

  // Creates a QP on each host and moves both RESET -> INIT -> RTR -> RTS with
  // dest_qpn and the remote addresses from the topology. A's sq_psn and rq_psn
  // are base's; B's are swapped to match. No memory is registered.
  QpPair connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a = 0, uint32_t pd_b = 0,
                         const engine::QpCaps& caps = {});

 private:
  // What the tests inspect of one host.
  struct Log {
    std::vector<engine::Completion> completions;
    std::vector<EvEvent> ev_events;
    std::vector<QpError> qp_errors;
  };

  void forward(uint32_t p, std::vector<uint8_t> frame, uint32_t wire_len);
  bool find_host(uint32_t p, const wire::IpAddr& ip, uint32_t& h) const;

  Config cfg_;
  EventLoop loop_;                                // first: links and hosts hold references to it
  std::vector<std::unique_ptr<Link>> uplinks_;    // [h * planes + p]
  std::vector<std::unique_ptr<Link>> downlinks_;  // [h * planes + p]
  std::vector<Log> logs_;                         // [h]
  EngineHosts hosts_;                             // after the links and logs it uses
  uint64_t unroutable_ = 0;
};

}  // namespace mrc::sim
