// A multi-plane two-tier leaf-spine fabric of engine hosts, for mrc-sim.
//
// Per plane: leaves = ceil(hosts / hosts_per_leaf) and `spines` spines.
// Every host has an uplink to its leaf and a downlink from it; every leaf has
// a link to and from every spine. A leaf sends traffic for one of its own
// hosts straight down, and anything else to a spine chosen by hashing the
// 5-tuple with a per-switch seed (ECMP), so the UDP source port — the EV —
// chooses the path. The spine forwards to the destination's leaf.
//
// Host h on plane p is MAC 02:00:00:hh:hh:pp (16-bit h) and IP
// 10.p.((h+1)>>8).((h+1)&255), so up to 65534 hosts. Deterministic given
// Config::seed.
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

class Fabric {
 public:
  struct Config {
    uint32_t hosts = 2;
    uint32_t planes = 1;  // 1..engine::kMaxPlanes
    uint32_t hosts_per_leaf = 16;
    uint32_t spines = 0;  // 0: hosts_per_leaf / oversubscription, at least 1
    double oversubscription = 1.0;
    LinkParams host_link;    // host <-> leaf, both directions
    LinkParams fabric_link;  // leaf <-> spine, both directions
    uint32_t host_tx_stage_bytes = 0;  // EngineHosts::set_tx_stage_bytes
    // Hosts tag frames with their route (Link::Sink); without, every switch
    // reads each frame's headers. The same routes either way.
    bool route_tags = true;
    bool room_cache = true;  // EngineHosts::set_room_cache
    uint64_t seed = 1;
    // num_planes, planes and seed are filled in per host.
    engine::EngineConfig engine_template;
  };

  struct Stats {
    uint64_t unroutable = 0;
    uint64_t routed_from_headers = 0;  // frames a switch had to read (no route tag)
    uint64_t ev_to_bad = 0;   // GOOD -> ASSUMED_BAD
    uint64_t ev_to_good = 0;  // ASSUMED_BAD -> GOOD
    uint64_t qp_errors = 0;
  };

  // Runs after the engine call that produced the completion has returned,
  // so it may post work without re-entering the engine.
  using CompletionHook = EngineHosts::CompletionHook;

  // Throws std::invalid_argument when the shape is out of range.
  explicit Fabric(const Config& cfg);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  const Config& config() const { return cfg_; }
  uint32_t leaves() const { return leaves_; }
  uint32_t spines() const { return spines_; }
  uint32_t leaf_of(uint32_t h) const { return h / cfg_.hosts_per_leaf; }

  engine::Engine& engine(uint32_t h);
  engine::PlaneAddr addr(uint32_t h, uint32_t p) const;
  std::array<engine::PlaneAddr, engine::kMaxPlanes> addrs(uint32_t h) const;

  Link& uplink(uint32_t h, uint32_t p) { return *uplinks_[p * cfg_.hosts + h]; }
  Link& downlink(uint32_t h, uint32_t p) { return *downlinks_[p * cfg_.hosts + h]; }
  // Leaf-spine links of a plane, indexed l * spines + s.
  Link& leaf_to_spine(uint32_t p, uint32_t l, uint32_t s) { return *to_spine_[(p * leaves_ + l) * spines_ + s]; }
  Link& spine_to_leaf(uint32_t p, uint32_t l, uint32_t s) { return *to_leaf_[(p * leaves_ + l) * spines_ + s]; }
  // Every leaf-spine link (both directions), for utilization.
  const std::vector<std::unique_ptr<Link>>& leaf_to_spine_links() const { return to_spine_; }
  const std::vector<std::unique_ptr<Link>>& spine_to_leaf_links() const { return to_leaf_; }
  const std::vector<std::unique_ptr<Link>>& uplinks() const { return uplinks_; }
  const std::vector<std::unique_ptr<Link>>& downlinks() const { return downlinks_; }

  // Failures, silent: the engines are not told.
  void set_host_link_up(uint32_t h, uint32_t p, bool up);
  void set_fabric_link_up(uint32_t p, uint32_t index, bool up);  // index = l * spines + s
  void set_leaf_up(uint32_t p, uint32_t l, bool up);
  void set_spine_up(uint32_t p, uint32_t s, bool up);
  void set_plane_up(uint32_t p, bool up);

  EventLoop& loop() { return loop_; }
  Nanos now() const { return loop_.now(); }
  EventId at(Nanos t, Callback fn) { return loop_.at(t, std::move(fn)); }

  void set_completion_hook(CompletionHook hook) { hosts_.set_completion_hook(std::move(hook)); }
  void set_payload_tokens(EngineHosts::PlacementCheck check) { hosts_.set_payload_tokens(std::move(check)); }
  const Stats& stats() const { return stats_; }

  // engine(h).post_send, then a poll (which sends it).
  int post_send(uint32_t h, uint32_t qpn, const engine::SendWr& wr) { return hosts_.post_send(h, qpn, wr); }
  // Polls host h now and re-arms its timer; call after driving the engine
  // directly (modify_qp, set_plane_up, send_port_status, ...).
  void poll(uint32_t h) { hosts_.poll(h); }

  using QpPair = sim::QpPair;
  // As TestNet::connect_qp_pair: a QP on each host, RESET -> RTS.
  QpPair connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a = 0, uint32_t pd_b = 0,
                         const engine::QpCaps& caps = {});

 private:
  void leaf_rx(uint32_t p, uint32_t l, std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len);
  void spine_rx(uint32_t p, uint32_t s, std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len);

  Config cfg_;
  uint32_t leaves_ = 0;
  uint32_t spines_ = 0;
  EventLoop loop_;                                // first: links and hosts hold references to it
  std::vector<std::unique_ptr<Link>> uplinks_;    // [p * hosts + h]
  std::vector<std::unique_ptr<Link>> downlinks_;  // [p * hosts + h]
  std::vector<std::unique_ptr<Link>> to_spine_;   // [(p * leaves + l) * spines + s]
  std::vector<std::unique_ptr<Link>> to_leaf_;    // [(p * leaves + l) * spines + s]
  std::vector<uint64_t> leaf_seed_;               // [p * leaves + l]
  Stats stats_;
  EngineHosts hosts_;  // after the links and stats_ it uses
};

}  // namespace mrc::sim
