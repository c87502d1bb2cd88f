// The MRC protocol engine: one NIC device with P planes and its QPs.
//
// It does no I/O of its own. Time arrives as `now` on every call, frames
// leave through Env::tx_*, completions through Env::complete, and received
// frames are handed to on_rx(). The same code runs inside the DPDK datapath,
// the simulator and the tests. After setup (QP creation and modification)
// the fast path — post_send, on_rx, poll — allocates nothing.
//
// Single-threaded by design: one engine belongs to one lcore.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "engine/counters.h"
#include "engine/types.h"

namespace mrc::engine {

// What the engine needs from whoever runs it. Its calls come from inside
// engine calls and must not call back into the engine (queue instead): the
// engine is walking its QPs then.
class Env {
 public:
  virtual ~Env() = default;
  // Frames of up to one MTU the plane can take right now without dropping;
  // 0 when full.
  virtual uint32_t tx_room(uint32_t plane) = 0;
  // Bit p: plane p has no room now (tx_room(p) would be 0). Asked once per
  // call into the engine, so that a host whose ports are full is not asked
  // plane by plane on every poll; 0, the default, leaves every plane to
  // tx_room().
  virtual uint32_t planes_without_room() { return 0; }
  // A buffer for one frame of at most `len` bytes on `plane`, valid until
  // tx_send() for that plane; empty when none is available.
  virtual std::span<uint8_t> tx_buffer(uint32_t plane, uint32_t len) = 0;
  // Sends the first `len` bytes of the buffer tx_buffer() last gave for `plane`.
  virtual void tx_send(uint32_t plane, uint32_t len) = 0;
  // Payload between registered memory and frames: a NIC's DMA. The default
  // copies; the simulator may carry a token naming the source instead and
  // check each placement rather than make it.
  virtual void payload_to_frame(uint8_t* frame, const uint8_t* host, uint32_t len) { std::memcpy(frame, host, len); }
  virtual void payload_to_host(uint8_t* host, const uint8_t* frame, uint32_t len) { std::memcpy(host, frame, len); }
  // What the next packet of a message will carry, told while this one is
  // finished and sent, for an environment whose host memory is slow to reach.
  virtual void payload_ahead(const uint8_t* /*host*/, uint32_t /*len*/) {}
  virtual void complete(const Completion& c) = 0;
  // An EV of a QP changed between GOOD and ASSUMED_BAD (the mrc_ctl EV event):
  // its index in the QP's EV profile and its value.
  virtual void ev_event(uint32_t /*qpn*/, uint32_t /*ev_index*/, uint32_t /*ev*/, EvState /*from*/, EvState /*to*/,
                        uint64_t /*drops*/) {}
  // A QP entered ERROR on its own (retry exhausted, remote error, fatal).
  virtual void qp_error(uint32_t /*qpn*/, WcStatus /*why*/) {}
  // An endpoint response to send_endpoint_request() arrived: `id` as sent,
  // `rx_port` where the peer received the request (1-based).
  virtual void endpoint_response(uint32_t /*plane*/, uint32_t /*id*/, uint8_t /*op*/, uint32_t /*rx_port*/,
                                 Nanos /*now*/) {}
};

struct EngineConfig {
  Transport transport = Transport::mrc;
  uint32_t num_planes = 1;
  std::array<PlaneAddr, kMaxPlanes> planes{};  // this device's address on each plane
  double plane_rate_gbps = 100.0;
  uint64_t seed = 1;
  uint32_t max_qps = 1024;
  // QPNs are first_qpn .. first_qpn + max_qps - 1, so engines sharing one
  // device (one per lcore) own disjoint ranges. Below 0x10 is reserved.
  uint32_t first_qpn = 0x10;
  // Responder ACK policy: a SACK at least every ack_every data packets, or
  // ack_delay after the first unacknowledged one, and at once on AckReq,
  // ECN, duplicates and probes.
  uint32_t ack_every = 4;
  Nanos ack_delay = 2000;
  // Requester: AckReq on the last packet of only every ack_req_every-th
  // message, of the last message posted, and whenever fewer than that many
  // packets are in flight (so a lone message or a burst's tail is
  // acknowledged at once). With many small messages in flight, an ACK per
  // message costs the requester a received frame per message; the
  // responder's ack_every and ack_delay cover the others.
  uint32_t ack_req_every = 1;
  // EV choice within a plane: the less loaded of two random EVs (by
  // packets in flight) rather than one random EV.
  bool ev_two_choices = true;
  // QP scheduler: QPs that can send take turns of tx_burst packets (a turn
  // the ports cut short goes on at the next poll); each poll ends when none
  // can send or each has sent tx_budget.
  uint32_t tx_burst = 4;
  uint32_t tx_budget = 64;
  // Lost-packet detection: a packet is lost once one sent this much later
  // has been acknowledged (RACK-style; spraying reorders).
  Nanos reorder_window = 4000;
  // The window grows by a quarter of its base per round trip in which a
  // resend proved needless (answered too soon for the resend: the first
  // copy was late, not lost), up to this many base windows, and falls back
  // after 16 round trips without one (RFC 8985 §6.2 step 4). 1 keeps it
  // fixed. Each real loss waits the window out, so it widens only as far as
  // the reordering needs. mrc-sim, 128 hosts, seeds 1-20, permutation /
  // 0.1 % loss against loss-free: 1: 0.902 / 0.945; 1.25 in quarters:
  // 0.905 / 0.929; 2 in one step: 0.908 / 0.897.
  double reorder_window_growth = 1.25;
  // A flight's end (every posted packet sent, none waiting to be resent) is
  // followed this long after by a loss probe, instead of a probe timeout's
  // round trips later: a lost tail packet is otherwise found only by that
  // timeout. The wait lets a host posting back to back add work first, so
  // probes go where flights really end. kNever: no tail probes.
  Nanos tail_probe_delay = 2000;
  // How often an ASSUMED_BAD EV is probed (doubling per silent probe up to
  // probe_interval_max).
  Nanos probe_interval = 50000;
  Nanos probe_interval_max = 2000000;
  // An ASSUMED_BAD EV goes back into service after this many probes in a
  // row are answered, each sent as soon as the last is answered; once one
  // goes unanswered, the count starts again. One answer counts per probe.
  // A single answer returns a path that loses most packets, not all, and
  // every return costs it a loss or more (mrc-sim, a plane losing 59 % per
  // path: 3 gave +2.2 points of ideal; BENCHMARKS.md, session 25).
  uint32_t probe_confirmations = 1;
  // A QP with nothing to send, in flight or to acknowledge stops probing an
  // EV after this many probes went unanswered (its peer may be gone for
  // good, and probes would keep it busy for as long as it lives); posting
  // work probes such EVs again at once. 0: probe for ever.
  uint32_t idle_probe_limit = 16;
  // SKIP lasts for this many picks on the EV's plane ("one rotation" is the
  // plane's active EV count, used when this is 0; at most 2^31 - 1).
  uint32_t skip_picks = 0;
  // A plane on which this many packets of a QP in a row were lost, each
  // sent after the plane's newest acknowledged packet while another plane
  // delivered a later one, has failed silently: all its EVs go
  // ASSUMED_BAD at once and are probed back, instead of being found one
  // loss at a time while the plane, emptied by the losses, looks the least
  // loaded and draws more traffic. Random loss almost never strings so many
  // together on one plane. 0 turns this off (EVs then fail one by one).
  uint32_t plane_silent_losses = 8;
  // Packets whose DSCP equals dscp_trimmed are trimmed headers.
  uint8_t dscp_data = 0;
  uint8_t dscp_control = 0;
  uint8_t dscp_trimmed = 0x3F;
  // The port computes the ICRC on transmit and checks it on receive, as
  // NICs with RoCE offload do; the engine then does neither.
  bool icrc_offload = false;
  // The network trims payloads of frames it would drop. NSCC's default
  // target delay is then 0.75 x base_rtt, else the whole base_rtt (UEC).
  bool fabric_trims = true;
  // RoCEv2 DCQCN notification point: at most one CNP per QP per interval.
  Nanos cnp_interval = 50000;
};

struct QpCaps {
  uint32_t max_send_wr = 256;
  uint32_t max_recv_wr = 256;
};

// The attributes of ibv_qp_attr and mrc_qp_attr that the engine uses,
// in their API units.
struct QpAttr {
  uint32_t pmtu = 4096;  // bytes
  uint32_t sq_psn = 0;
  uint32_t rq_psn = 0;
  uint32_t dest_qpn = 0;
  std::array<PlaneAddr, kMaxPlanes> remote{};  // the peer's address on each plane
  uint8_t timeout = 8;                         // MRC: 1.024 us * 2^t; RoCEv2: 4.096 us * 2^t
  uint8_t retry_linear = 7;                    // fixed-interval retries (<= 7)
  uint8_t retry_exp = 25;                      // then exponential back-off retries (<= 25, 25 = infinite)
  uint32_t mpr = 8;                            // requester window, units of 128 PSNs
  uint32_t mpr_dest = 8;                       // responder window, units of 128 PSNs
  uint32_t max_wimm = 128;
  uint32_t max_wimm_dest = 128;
  EvProfile ev;
  CcProfile cc;
  // qp_access_flags (IBV_ACCESS_* bits), set at INIT: without remote write
  // the responder refuses every WRITE, whatever the MR allows.
  uint32_t access = kAccessLocalWrite | kAccessRemoteWrite;
};

enum class ModifyError : int { ok = 0, bad_transition, bad_attr, no_qp };

struct QpInfo {
  uint32_t qpn = 0;
  QpState state = QpState::reset;
  uint32_t dest_qpn = 0;
  uint32_t snd_una = 0, snd_nxt = 0;  // requester PSNs
  uint32_t rcv_cack = 0;              // responder: last in-order PSN
  uint64_t inflight_bytes = 0;
  uint64_t cwnd_bytes = 0;
  Nanos srtt_ns = 0, rttvar_ns = 0;  // requester's smoothed RTT (0: no sample yet)
  Nanos rto_ns = 0;                  // the retransmit timeout now in force
  uint32_t sq_outstanding = 0;
  uint32_t sq_posted = 0;  // WRs posted since the QP left RESET (wraps): the newest is sq_posted - 1
  uint32_t rq_posted = 0;
  uint32_t retries = 0;
  uint32_t swept_planes = 0;      // bit p: plane p's EVs are out together (plane_silent), awaiting its proof
  uint32_t peer_planes_down = 0;  // bit p: the peer reported plane p down
  Counters<QpCtr> ctr;
};

struct EvInfo {
  uint32_t value = 0;
  uint8_t plane = 0;
  EvState state = EvState::good;
  bool active = false;  // in the spray set (not a backup)
  Counters<EvCtr> ctr;
};

// Memory regions one engine (and so one device: every lcore's engine holds
// the device's regions) can hold at once.
inline constexpr uint32_t kMaxMrs = 4095;
// A region of `length` bytes at `iova` is not empty and does not wrap: it may
// end exactly at 2^64.
inline bool region_valid(uint64_t iova, uint64_t length) { return length != 0 && iova + (length - 1) >= iova; }

class Engine {
 public:
  Engine(const EngineConfig& cfg, Env& env);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineConfig& config() const;

  // Memory regions. `host_ptr` is where the engine reads and writes the
  // region's bytes; `iova` is the address peers and WRs name. Keys are
  // unpredictable, and valid only for their protection domain.
  bool reg_mr(uint32_t pd, void* host_ptr, uint64_t iova, uint64_t length, uint32_t access, uint32_t& lkey,
              uint32_t& rkey);
  bool dereg_mr(uint32_t lkey);
  // Registers a region under keys another engine of the same device chose
  // (so one device's keys are valid on every lcore). Fails if the keys' slot
  // is taken here.
  bool import_mr(uint32_t pd, void* host_ptr, uint64_t iova, uint64_t length, uint32_t access, uint32_t lkey,
                 uint32_t rkey);

  // QPs. create_qp returns the QPN, 0 when out of QPs.
  uint32_t create_qp(uint32_t pd, const QpCaps& caps);
  ModifyError modify_qp(uint32_t qpn, QpState to, const QpAttr& attr, Nanos now);
  bool destroy_qp(uint32_t qpn);

  // Fast path. post_send returns 0, or ENOMEM when the SQ is full, or
  // EINVAL for an unknown QP or one in the wrong state. A WR the engine
  // cannot execute (bad opcode, key or length) is accepted and completes
  // with an error status; nothing is sent for it. The WR is queued: the
  // next poll() sends it, so WRs posted together leave together.
  int post_send(uint32_t qpn, const SendWr& wr);
  int post_recv(uint32_t qpn, const RecvWr& wr);
  void on_rx(uint32_t plane, std::span<const uint8_t> frame, Nanos now);
  // Runs timers (ACK delay, RTO, probes) and sends what the windows allow.
  void poll(Nanos now);
  // The earliest time poll() has timer work; UINT64_MAX when idle.
  Nanos next_deadline() const;
  // True while some QP has packets it would send given TX room.
  bool wants_tx() const;
  // Bit p: the last on_rx() or poll() found plane p without TX room, so a
  // caller that wants_tx() has it wait for room there and nowhere else.
  uint32_t tx_full_planes() const;

  // Planes and EVs (the controller's levers).
  void set_plane_up(uint32_t plane, bool up, Nanos now);
  bool plane_up(uint32_t plane) const;
  // Sends a port status update about this device's planes to every peer of
  // every connected QP, so they stop using downed planes at once.
  void send_port_status(Nanos now);
  bool set_ev_state(uint32_t qpn, uint32_t ev_index, EvState s, Nanos now);
  // A controller's endpoint request (mrc_ctl_ep_batch_send_wait): an EV probe
  // or a port status update (op: wire::EndpointOp) to `dst` on `plane`,
  // carried by `ev` in `format`. The answer comes to Env::endpoint_response
  // with the same 24-bit `id`.
  bool send_endpoint_request(uint32_t plane, const PlaneAddr& dst, wire::EvFormat format, uint32_t ev, uint8_t op,
                             uint32_t id, uint32_t port_status, uint8_t dscp, Nanos now);

  // A simulation runs thousands of engines and mostly waits on loads of
  // their state. A caller that knows which frame an engine gets next may
  // start those loads early, while other work runs: prefetch_rx(map, frame,
  // 0) the engine's fields and the QP the frame names, then, once those have
  // arrived, prefetch_rx(map, frame, 1) that QP's state at the frame's PSN.
  // The map holds for the engine's life (its QP table never moves).
  // Neither call changes anything.
  struct PrefetchMap {
    const void* impl = nullptr;
    const void* qps = nullptr;
    uint32_t first_qpn = 0;
    uint32_t qp_count = 0;
  };
  PrefetchMap prefetch_map() const;
  static void prefetch_rx(const PrefetchMap& map, std::span<const uint8_t> frame, unsigned stage);
  // Likewise for what poll() reads first, in three stages: the engine's
  // fields, then the QP whose turn it is to send, then what that leads to.
  static void prefetch_poll(const PrefetchMap& map, unsigned stage);

  // Introspection.
  const Counters<DevCtr>& counters() const;
  // The QP counters of every QP destroyed or reset so far, summed.
  const Counters<QpCtr>& retired_qp_counters() const;
  bool qp_info(uint32_t qpn, QpInfo& out) const;
  std::vector<uint32_t> qpns() const;
  std::vector<EvInfo> ev_info(uint32_t qpn) const;
  // Bytes of engine state per QP with the given attributes (for sizing).
  static size_t qp_state_bytes(const QpCaps& caps, const QpAttr& attr);
  // Whether what the scheduler keeps of each active QP (timers, wish to
  // send, pace), where not marked for refreshing, matches the QP itself,
  // and what poll() summed up of it still holds; for tests, after any call.
  bool schedule_consistent() const;
  // Whether each QP's per-plane spray set has the size it is known by, and
  // is known as an arithmetic run exactly when it is one, with the start and
  // step pick_ev() computes its members from; for tests, after any call.
  bool spray_sets_consistent() const;
  // Every ASSUMED_BAD EV of a QP in RTS will be probed: it has a probe due,
  // or its plane is out whole and waits on the plane's scout, which has one
  // (or the QP's probes are parked until it has work).
  bool bad_evs_probed() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Timeout encoding: MRC 1.024 us * 2^t, IBTA 4.096 us * 2^t.
constexpr Nanos ack_timeout_ns(Transport t, uint8_t timeout) {
  const Nanos base = t == Transport::mrc ? 1024 : 4096;
  return base << (timeout > 31 ? 31 : timeout);
}

}  // namespace mrc::engine
