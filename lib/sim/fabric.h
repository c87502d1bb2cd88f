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
// Config::seed and Config::partitions.
//
// Partitions (a conservative parallel run): the fabric is cut into
// `partitions` parts, each with its own event loop: consecutive leaves with
// their hosts, and in every plane a share of the spines. Only leaf-spine
// links cross between parts, and none delivers sooner than its delay, so the
// parts run side by side in windows of that delay and exchange the frames
// that crossed when they meet. Frames that cross join their loop at the
// window's end rather than when sent, so runs with different partition
// counts differ as runs with different seeds do; how many threads run the
// parts changes nothing.
#pragma once

#include <array>
#include <atomic>
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
    uint32_t partitions = 1;  // > 1 needs fabric_link.delay_ns >= 1
    uint32_t threads = 0;     // that run them; 0: one per partition, at most one per CPU
    // num_planes, planes and seed are filled in per host.
    engine::EngineConfig engine_template;
  };

  static constexpr uint32_t kMaxPartitions = 256;

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

  // The links are the Fabric's but not part of its value: const only keeps
  // the topology fixed (the prefetch hints route on a const Fabric).
  Link& uplink(uint32_t h, uint32_t p) const { return *uplinks_[p * cfg_.hosts + h]; }
  Link& downlink(uint32_t h, uint32_t p) const { return *downlinks_[p * cfg_.hosts + h]; }
  // Leaf-spine links of a plane, indexed l * spines + s.
  Link& leaf_to_spine(uint32_t p, uint32_t l, uint32_t s) const { return *to_spine_[(p * leaves_ + l) * spines_ + s]; }
  Link& spine_to_leaf(uint32_t p, uint32_t l, uint32_t s) const { return *to_leaf_[(p * leaves_ + l) * spines_ + s]; }
  // Every leaf-spine link (both directions), for utilization.
  const std::vector<std::unique_ptr<Link>>& leaf_to_spine_links() const { return to_spine_; }
  const std::vector<std::unique_ptr<Link>>& spine_to_leaf_links() const { return to_leaf_; }
  const std::vector<std::unique_ptr<Link>>& uplinks() const { return uplinks_; }
  const std::vector<std::unique_ptr<Link>>& downlinks() const { return downlinks_; }

  // What a failure strikes: a host's link to its leaf (index = host), a
  // leaf-spine link (index = l * spines + s), a leaf, a spine, or a whole
  // plane (index unused); both directions of every link it covers.
  struct Target {
    enum class Kind : uint8_t { host_link, fabric_link, leaf, spine, plane };
    Kind kind = Kind::plane;
    uint32_t plane = 0;
    uint32_t index = 0;
  };
  // Failures, silent: the engines are not told. A host link's uplink turns
  // into a black hole rather than going down: the host's port stays up.
  // Throws std::out_of_range for a target the fabric does not have.
  void set_up(const Target& t, bool up);
  void set_plane_up(uint32_t p, bool up) { set_up({Target::Kind::plane, p, 0}, up); }
  // A gray failure: the target's links stay up and lose `loss` of their
  // frames, a chance independent of the loss they were built with; 0 gives
  // them back that loss alone. Applies to frames sent from now on.
  void set_gray_loss(const Target& t, double loss);

  // The control loop: events scheduled with at(). With one partition it
  // also runs the network; with more, run through run_until*() below.
  EventLoop& loop() { return loop_; }
  // Inside a partition's event, that partition's clock; else the control
  // loop's (between windows every clock reads the same).
  Nanos now() const;
  // Control events (failures, samples) run between windows, before anything
  // else due at their time; they may call into any host. With partitions,
  // schedule them from outside the partitions' events.
  EventId at(Nanos t, Callback fn);
  // As EventLoop's, over every partition.
  bool run_until(Nanos t);
  bool run_until_idle(Nanos limit = kNever);
  // From any event: with partitions, the run stops when the current window
  // ends. A partition's event must not run a loop, nor call into another
  // partition's hosts.
  void stop();
  uint64_t events_run() const;

  // Set before the run: with partitions, the hooks run on the partitions'
  // threads, each for the hosts of its own partition.
  void set_completion_hook(CompletionHook hook);
  void set_payload_tokens(EngineHosts::PlacementCheck check);
  Stats stats() const;

  // engine(h).post_send, then a poll (which sends it).
  int post_send(uint32_t h, uint32_t qpn, const engine::SendWr& wr) { return hosts_of(h).post_send(h, qpn, wr); }
  // Polls host h now and re-arms its timer; call after driving the engine
  // directly (modify_qp, set_plane_up, send_port_status, ...).
  void poll(uint32_t h) { hosts_of(h).poll(h); }
  // Config::partitions, but at most one per leaf.
  uint32_t partitions() const { return static_cast<uint32_t>(parts_.size()); }
  uint32_t threads() const;
  Nanos lookahead() const { return lookahead_; }
  uint32_t partition_of_host(uint32_t h) const { return partition_of_leaf(leaf_of(h)); }

  using QpPair = sim::QpPair;
  // As TestNet::connect_qp_pair: a QP on each host, RESET -> RTS.
  QpPair connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a = 0, uint32_t pd_b = 0,
                         const engine::QpCaps& caps = {});

 private:
  struct Part;
  class Workers;

  void leaf_rx(uint32_t p, uint32_t l, std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len);
  void spine_rx(uint32_t p, uint32_t s, std::vector<uint8_t> frame, uint64_t tag, uint32_t wire_len);
  // The link a frame for dst_host with ECMP hash `hash` leaves leaf l or
  // spine s by.
  Link& leaf_egress(uint32_t p, uint32_t l, uint32_t dst_host, uint64_t hash) const;
  Link& spine_egress(uint32_t p, uint32_t s, uint32_t dst_host) const { return spine_to_leaf(p, leaf_of(dst_host), s); }
  // Calls fn(link, params it was built with, is_host_uplink) for every link t covers.
  template <class Fn>
  void for_each_link(const Target& t, Fn&& fn);
  // Link::SinkHint functions: load the next hop of a tagged frame.
  static void prefetch_leaf_hop(const void* fabric, uint32_t p, uint32_t l, uint64_t tag, std::span<const uint8_t>,
                                unsigned stage);
  static void prefetch_spine_hop(const void* fabric, uint32_t p, uint32_t s, uint64_t tag, std::span<const uint8_t>,
                                 unsigned stage);
  uint32_t partition_of_leaf(uint32_t l) const { return static_cast<uint32_t>(uint64_t(l) * parts_.size() / leaves_); }
  uint32_t partition_of_spine(uint32_t s) const { return static_cast<uint32_t>(uint64_t(s) * parts_.size() / spines_); }
  EngineHosts& hosts_of(uint32_t h);
  // A link sent on from partition `from` and delivering in `to`.
  std::unique_ptr<Link> make_link(uint32_t from, uint32_t to, const LinkParams& params, uint64_t seed, Link::Sink sink);
  // Runs every partition's events up to `end`, side by side.
  void run_window(Nanos end);
  void run_part(Part& part, Nanos end);
  bool run_partitioned(Nanos limit, bool until_idle);

  Config cfg_;
  uint32_t leaves_ = 0;
  uint32_t spines_ = 0;
  EventLoop loop_;  // first: links and hosts hold references to it
  std::vector<std::unique_ptr<Part>> parts_;
  std::vector<Part*> leaf_part_;   // [l]
  std::vector<Part*> spine_part_;  // [s], the same in every plane
  Nanos lookahead_ = 0;            // how long the partitions may run apart
  std::atomic<bool> stop_{false};
  std::unique_ptr<Workers> workers_;
  std::vector<std::unique_ptr<Link>> uplinks_;    // [p * hosts + h]
  std::vector<std::unique_ptr<Link>> downlinks_;  // [p * hosts + h]
  std::vector<std::unique_ptr<Link>> to_spine_;   // [(p * leaves + l) * spines + s]
  std::vector<std::unique_ptr<Link>> to_leaf_;    // [(p * leaves + l) * spines + s]
  std::vector<uint64_t> leaf_seed_;               // [p * leaves + l]
};

}  // namespace mrc::sim
