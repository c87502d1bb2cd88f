// The engine hosts of a simulated network, shared by TestNet and Fabric:
// each host's Engine, the Env it runs against (a frame sent on plane p goes
// into the host's uplink on p) and the poll timer that drives it. The network
// owns the links and the topology and hands each frame for a host to
// deliver(); what it keeps of the engines' events is up to its Observers.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "sim/event_loop.h"
#include "sim/link.h"

namespace mrc::sim {

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

// Creates a QP on each engine and moves both RESET -> INIT -> RTR -> RTS
// with dest_qpn and the remote's plane addresses. A's sq_psn and rq_psn are
// base's; B's are swapped to match. No memory is registered, nothing polled.
QpPair connect_engines(engine::Engine& a, engine::Engine& b, const engine::QpAttr& base, uint32_t pd_a, uint32_t pd_b,
                       const engine::QpCaps& caps, Nanos now);

class EngineHosts {
 public:
  // Runs after the engine call that produced the completion has returned,
  // so it may post work (post_send) without re-entering the engine.
  using CompletionHook = std::function<void(uint32_t host, const engine::Completion&)>;
  // Engine events as they happen, inside the engine call: for logs and
  // counters only, never for calling into an engine. Any may be empty.
  struct Observers {
    std::function<void(uint32_t host, const engine::Completion&)> complete;
    std::function<void(uint32_t host, const EvEvent&)> ev_event;
    std::function<void(uint32_t host, const QpError&)> qp_error;
  };

  explicit EngineHosts(EventLoop& loop, Observers observers = {});
  ~EngineHosts();
  EngineHosts(const EngineHosts&) = delete;
  EngineHosts& operator=(const EngineHosts&) = delete;

  // Adds host size(), on uplinks.size() planes (uplinks[p] is its uplink on
  // plane p, 1..engine::kMaxPlanes of them), running an engine configured
  // as tmpl but for its planes and a seed derived from net_seed, tmpl.seed
  // and the host index.
  void add(const engine::EngineConfig& tmpl, uint64_t net_seed,
           const std::array<engine::PlaneAddr, engine::kMaxPlanes>& addrs, std::vector<Link*> uplinks);
  // As add(), for host h of a network whose other hosts are run by other
  // EngineHosts (Fabric's partitions): h names it in every call and
  // callback, and this one answers only for the hosts added to it.
  void add_as(uint32_t h, const engine::EngineConfig& tmpl, uint64_t net_seed,
              const std::array<engine::PlaneAddr, engine::kMaxPlanes>& addrs, std::vector<Link*> uplinks);
  uint32_t size() const { return static_cast<uint32_t>(hosts_.size()); }
  // A Link::SinkHint for a host's downlink: loads what deliver() of `frame`
  // to host h will read. `hosts` is this.
  static void prefetch_rx(const void* hosts, uint32_t h, uint32_t p, uint64_t tag, std::span<const uint8_t> frame,
                          unsigned stage);
  engine::Engine& engine(uint32_t h);

  // The most a host keeps queued on each uplink (0: half the queue). A NIC
  // stages a few frames per port and keeps the rest in its send queues,
  // where the QP scheduler and EV choice still have a say; a deep host
  // queue adds its delay to every RTT and to the ACKs queued behind it.
  void set_tx_stage_bytes(uint32_t bytes);
  void set_completion_hook(CompletionHook hook) { hook_ = std::move(hook); }

  // What a responder's engine places: the source the token names (src), or
  // for payloads too short for a token, their bytes.
  struct Placement {
    uint8_t* dst = nullptr;
    const uint8_t* src = nullptr;
    const uint8_t* bytes = nullptr;
    uint32_t len = 0;
  };
  // Payload tokens: a data frame carries, instead of its payload, a token
  // naming where in the requester's memory that payload is, and the
  // responder's engine hands each placement to `check` instead of writing
  // memory. Frames keep their wire length and the run its events; the copies go,
  // and so may the responders' buffers (the responders' registered memory is
  // never touched). A corrupted bit in the bytes a token leaves out is
  // caught only by the ICRC check (mrc-sim turns it on when links corrupt).
  // Where engines compute no ICRC, those bytes do not even travel: data
  // frames go as compact frames (Link's wire_len), which saves their memory
  // and changes no result, but in one case mrc-sim refuses: a link that
  // corrupts frames no ICRC checks then always hits the token.
  // For a caller that knows what every placement must be (mrc-sim).
  using PlacementCheck = std::function<void(uint32_t host, const Placement&)>;
  void set_payload_tokens(PlacementCheck check) { placement_check_ = std::move(check); }
  // Tags each frame a host sends (Link::Sink), while its headers are in cache.
  using TxTagger = uint64_t (*)(std::span<const uint8_t> frame);
  void set_tx_tagger(TxTagger tagger) { tagger_ = tagger; }
  // Hosts keep when each uplink has room again (the default). Off, they
  // work it out from the link on every check, as a reference for tests:
  // the runs must match.
  void set_room_cache(bool on) { room_cache_ = on; }

  // A frame arrives at host h on plane p: on_rx, then a poll. A compact
  // frame (wire_len beyond its size) is first made whole again but for
  // the payload bytes its token stands for.
  void deliver(uint32_t h, uint32_t p, std::span<const uint8_t> frame, uint32_t wire_len = 0);
  // engine(h).post_send, then a poll (which sends it).
  int post_send(uint32_t h, uint32_t qpn, const engine::SendWr& wr);
  // Polls host h now and re-arms its timer; call after driving the engine
  // directly (modify_qp, set_ev_state, set_plane_up, ...).
  void poll(uint32_t h);

  // connect_engines() on hosts h_a and h_b, then polls both.
  QpPair connect_qp_pair(uint32_t h_a, uint32_t h_b, const engine::QpAttr& base, uint32_t pd_a, uint32_t pd_b,
                         const engine::QpCaps& caps);

 private:
  class Host;
  Host& host(uint32_t h);

  Nanos now() const { return loop_.now(); }
  void after_engine_call(Host& host);
  struct PollEvent;
  std::span<const uint8_t> expand(std::span<const uint8_t> compact, uint32_t wire_len);
  void rearm(Host& host);

  EventLoop& loop_;
  Observers observers_;
  uint32_t tx_stage_bytes_ = 0;
  CompletionHook hook_;
  PlacementCheck placement_check_;
  TxTagger tagger_ = nullptr;
  bool room_cache_ = true;
  std::vector<std::unique_ptr<Host>> hosts_;  // [host index]; the engines hold references to them
  // [host index] where each host and its engine keep their state, for
  // prefetch_rx() and the poll timer: hosts_ would be a load away.
  struct PrefetchEntry {
    const Host* host = nullptr;
    const engine::Engine* engine = nullptr;
    engine::Engine::PrefetchMap map;
  };
  std::vector<PrefetchEntry> prefetch_;
  void prefetch_host(const PrefetchEntry& e) const;
  std::vector<uint8_t> rx_frame_;             // compact frames are made whole here
  // Completions waiting for the hook, which must not run inside the engine;
  // shared by all hosts so that a hook's post_send keeps them in order.
  std::vector<std::pair<uint32_t, engine::Completion>> hook_queue_;
  size_t hook_next_ = 0;
};

}  // namespace mrc::sim
