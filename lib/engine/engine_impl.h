// Engine internals, shared by engine.cc (setup, dispatch, timers),
// requester.cc, responder.cc and spray.cc. Not part of the public API.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/cc.h"
#include "engine/engine.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace mrc::engine {

// Probe ids: an EV probe carries its EV's index, a reliability (loss) probe
// its sequence number, 15 bits, above kLossProbeIdBase. The reply echoes the
// id, so a late reply to an earlier probe is not taken for the current
// one's: with a probe behind each flight, such replies condemned packets
// sent after the probe they answered (64 B WRITEs on the NIC: a resend for
// every data packet).
inline constexpr uint16_t kLossProbeIdBase = kMaxEvsPerQp;
inline constexpr uint16_t loss_probe_id(uint16_t seq) { return kLossProbeIdBase | (seq & 0x7FFF); }
// Qp::plane_scout of a plane whose scout is still to be chosen.
inline constexpr uint16_t kNoScout = 0xFFFF;
// An EV probe's send stamp (PETH), which its reply echoes (ev_probe_reply).
inline constexpr uint16_t probe_stamp(Nanos t) { return static_cast<uint16_t>(t / wire::kTsethUnitNs); }
// Round trips without a needless resend after which the reorder window
// falls back to its base (EngineConfig::reorder_window_growth).
inline constexpr Nanos kReoQuietRtts = 16;
// The reorder window grows in steps of its base divided by this.
inline constexpr uint32_t kReoStepsPerBase = 4;

// Memory regions. A key is (random tag << kMrIndexBits) | slot, so lookup is
// one array access plus a comparison, and keys cannot be guessed.
struct Mr {
  uint8_t* ptr = nullptr;
  uint64_t iova = 0;
  uint64_t length = 0;
  uint32_t access = 0;
  uint32_t pd = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  bool valid = false;
  // [addr, addr + len) lies inside the region; written so nothing overflows.
  bool contains(uint64_t addr, uint64_t len) const {
    return addr >= iova && addr - iova <= length && len <= length - (addr - iova);
  }
};
inline constexpr unsigned kMrIndexBits = 12;
static_assert(kMaxMrs == (1u << kMrIndexBits) - 1, "slot 0 is never a region's");

// One outstanding PSN at the requester.
enum TxPktFlags : uint8_t {
  kPktAcked = 1 << 0,
  kPktInFlight = 1 << 1,      // counted in inflight_bytes (sent, not acked, not declared lost)
  kPktQueued = 1 << 2,        // waiting in the retransmit queue
  kPktRackResend = 1 << 3,    // last resent because RACK judged it lost (a needless one widens the window)
  kPktPlaneCharged = 1 << 4,  // a copy declared lost still counts in its plane's plane_inflight
  kPktEvBlamed = 1 << 5,      // the last loss verdict was blamed on EV lost_ev's path
  kPktResendNamed = 1 << 6,   // since that verdict, a SACK has named the EV of the copy sent last
};
struct TxPkt {
  Nanos sent_at = 0;
  uint32_t sq_index = 0;  // monotonic SQ index of its WQE
  uint32_t offset = 0;    // byte offset within the message
  uint16_t len = 0;       // at most kMaxPmtu
  uint16_t ev = 0;        // index into Qp::evs
  uint16_t lost_ev = 0;   // EV of the copy last declared lost
  uint8_t tx_count = 0;
  uint8_t flags = 0;
};
static_assert(sizeof(TxPkt) == 24);

struct SqEntry {
  SendWr wr;
  const uint8_t* src = nullptr;  // resolved local data
  uint32_t first_psn = 0;
  uint32_t npkts = 0;
  uint32_t sent_pkts = 0;  // first transmissions so far
  uint16_t msn = 0;
  WcStatus error = WcStatus::success;  // set for WRs refused at post time
};

// What is read or written of an EV per packet sent and per SACK, 32 bytes:
// two EVs drawn at random per packet from a table of 112-byte entries (28 KB
// at 256 EVs) missed the cache, a tenth of a 128-host simulation's time. The
// rest lives in EvCold, at the same index.
struct Ev {
  uint32_t value = 0;
  uint8_t plane = 0;
  EvState state = EvState::good;
  bool active = false;
  uint32_t skip_until = 0;  // plane pick count at which SKIP ends (see still_skipping)
  uint32_t inflight = 0;    // packets sent on it, neither acknowledged nor declared lost
  uint64_t tx_pkts = 0;     // EvCtr::tx_pkts
  uint64_t acks = 0;        // EvCtr::acks
};
static_assert(sizeof(Ev) == 32);

// A plane's pick count wraps (every 2^32 packets on one plane), so SKIP's end
// is compared in serial-number order. SKIP may last at most 2^31 - 1 picks.
inline bool still_skipping(uint32_t picks, uint32_t skip_until) { return static_cast<int32_t>(skip_until - picks) > 0; }
inline constexpr uint32_t kMaxSkipPicks = 0x7FFFFFFF;
// Pick counts start this close to wrapping, so every QP that sends more than
// this many packets on a plane crosses the wrap early in its life.
inline constexpr uint32_t kPicksStart = 0u - 256u;
struct EvCold {
  Nanos probe_at = kNever;  // next probe, for ASSUMED_BAD EVs
  Nanos probe_backoff = 0;
  uint32_t silent_probes = 0;  // sent since the EV last changed state or its plane came up
  uint32_t probe_answers = 0;  // in a row (EngineConfig::probe_confirmations)
  bool confirming = false;     // the next probe follows an answer, so the row goes on
  bool probe_outstanding = false;  // the last probe sent has had no answer yet
  Nanos probe_sent_at = 0;         // when it left
  uint64_t drops = 0;   // losses since the last GOOD<->ASSUMED_BAD event
  // Why it is ASSUMED_BAD: its own packet's loss, or its whole plane's
  // failure (a streak of losses, plane_silent; a port down here or at the
  // peer), which one scout probes for. Only a loss gives way to a packet
  // that proves it wrong (and a streak to its plane's proof); a SACK's
  // ALWAYS_SKIP waits for a probe.
  enum class OutBy : uint8_t { other, loss, sweep } out_by = OutBy::other;
  Nanos out_at = 0;     // when a loss took it out
  Counters<EvCtr> ctr;  // all but tx_pkts and acks, which are Ev's
};

// A WRITE_IMM that arrived ahead of earlier PSNs, held until all of them have.
struct ImmStash {
  uint32_t psn = 0;
  uint32_t imm = 0;
  uint32_t len = 0;
  bool used = false;
};

struct alignas(64) Qp {
  uint32_t qpn = 0;
  uint32_t pd = 0;
  bool in_use = false;
  bool on_active_list = false;
  uint32_t active_pos = 0;  // its index in active_qps while on the list
  QpState state = QpState::reset;
  QpCaps caps;
  QpAttr attr;
  Counters<QpCtr> ctr;

  // Requester.
  std::vector<SqEntry> sq;
  uint32_t sq_mask = 0;
  uint32_t sq_head = 0;  // oldest WQE not yet completed
  uint32_t sq_send = 0;  // next WQE with packets to send for the first time
  uint32_t sq_tail = 0;  // next free slot
  std::vector<TxPkt> win;
  uint32_t win_mask = 0;
  uint32_t window_psns = 0;  // MPR in PSNs
  uint32_t snd_una = 0;
  uint32_t snd_nxt = 0;
  uint32_t psn_tail = 0;  // next PSN a posted WQE will get
  uint32_t msgs_since_ack_req = 0;
  Nanos srtt = 0;
  Nanos rttvar = 0;
  std::vector<uint32_t> rtx;  // PSNs to resend, FIFO
  uint32_t rtx_head = 0, rtx_tail = 0;
  uint64_t inflight_bytes = 0;
  Nanos rto_base = 0;
  Nanos rto_deadline = kNever;
  uint32_t retries = 0;
  // RACK (RFC 8985): the most recently sent acknowledged packet, its round
  // trip, and the highest PSN any SACK has reported on.
  // Packets up to rack_end sent before rack_sent_at are lost once they are
  // a reorder window later than rack_rtt; rack_timer_at is the earliest
  // moment one of them will be (or was, if it has been acknowledged since).
  Nanos rack_sent_at = 0;
  uint32_t rack_psn = 0;  // that packet, which breaks ties in send time
  Nanos rack_rtt = 0;
  Nanos rack_timer_at = kNever;
  uint32_t rack_end = 0;
  Nanos min_rtt = kNever;
  // The reorder window in force, in kReoStepsPerBase-ths of its base
  // (EngineConfig::reorder_window_growth).
  uint16_t reo_steps = kReoStepsPerBase;
  Nanos reo_grown_at = 0;
  // Tail-loss probe: a reliability probe (PETH) after a quiet spell, whose
  // reply dates every packet sent before it, so tail losses are found
  // without waiting for the retransmit timeout.
  Nanos tlp_at = kNever;
  Nanos tail_probe_at = kNever;
  int32_t tail_ev = -1;  // the EV of the flight's last packet, the tail probe's path
  // The tail probe awaiting its reply (tail_probe_ev >= 0): path, id and time.
  int32_t tail_probe_ev = -1;
  uint16_t tail_probe_id = 0;
  Nanos tail_probe_sent_at = 0;
  Nanos tlp_sent_at = 0;
  bool tlp_outstanding = false;
  uint8_t tlp_backoff = 0;       // probe timer expiries since it was armed (new flight, SACK with news)
  bool tlp_series_sent = false;  // a probe of this series has left: tlp_sent_at is its time
  uint16_t tlp_seq = 0;          // the next loss probe's sequence number
  uint16_t tlp_series_first = 0;  // that of this series' first probe
  uint16_t next_msn = 0;
  uint16_t next_rq_msn = 0;
  uint32_t wimm_inflight = 0;
  bool probes_parked = false;  // some ASSUMED_BAD EV is not probed (idle_probe_limit)
  std::unique_ptr<CongestionControl> cc;
  std::vector<wire::FrameTemplate> tmpl;       // [plane * 2 + with_imm]
  std::vector<wire::FrameTemplate> sack_tmpl;  // [plane], MRC responder

  // EVs.
  std::vector<Ev> evs;
  std::vector<EvCold> ev_cold;
  // What the per-packet EV choice reads, kept together:
  // Engine::prefetch_poll() loads `plane_picks` to `spray_step` as one range.
  std::array<uint32_t, kMaxPlanes> plane_picks = [] {
    std::array<uint32_t, kMaxPlanes> a;
    a.fill(kPicksStart);
    return a;
  }();
  std::array<uint32_t, kMaxPlanes> plane_inflight{};
  uint32_t pick_rotor = 0;
  uint32_t peer_planes_down = 0;  // bit p: the peer reported plane p down
  uint32_t spray_planes = 0;      // bit p: active[p] is not empty
  std::array<uint16_t, kMaxPlanes> spray_count{};  // active[p].size()
  // While active[p] is an arithmetic run (active[p][i] == spray_first[p] +
  // i * spray_step[p]; step 0: it is not), the per-packet choice computes
  // the EV index instead of loading it: one cache miss fewer per draw.
  std::array<uint16_t, kMaxPlanes> spray_first{};
  std::array<uint16_t, kMaxPlanes> spray_step{};
  std::array<std::vector<uint16_t>, kMaxPlanes> active{};   // spray set per plane
  std::array<std::vector<uint16_t>, kMaxPlanes> backups{};  // GOOD spares per plane
  // Losses blamed on each plane's EVs since the plane last had a packet
  // acknowledged (see EngineConfig::plane_silent_losses).
  std::array<uint16_t, kMaxPlanes> plane_losses{};
  // Bit p: plane p's EVs were swept out of service together, the streak of
  // losses ending with a packet sent at sweep_tip_sent_at[p]. An ACK for a
  // packet sent once on p since then shows the plane was only late.
  uint32_t swept_planes = 0;
  // The rcvd_bytes of the newest SACK (24-bit serial order; the responder's
  // count of bytes placed). SACKs overtake one another on the way back: one
  // not ahead of it may be older than what the window already learnt.
  uint32_t sack_rcvd_newest = 0;
  // Per plane, the newest send time among acknowledged packets: a loss of
  // a packet sent before it says nothing against the plane.
  std::array<Nanos, kMaxPlanes> plane_acked_sent_at{};
  std::array<Nanos, kMaxPlanes> sweep_tip_sent_at{};
  std::array<Nanos, kMaxPlanes> plane_streak_at{};  // when plane_losses last left 0
  // Per plane, the one of its swept EVs that probes for them all
  // (send_probes); kNoScout, or an EV no longer swept, until one is chosen.
  std::array<uint16_t, kMaxPlanes> plane_scout{};
  uint32_t active_good = 0;       // EVs in GOOD or SKIP
  Nanos next_probe_at = kNever;
  uint32_t rocev2_sport = 0;
  uint8_t rocev2_plane = 0;

  // Responder, from rcv_cack to cnp_sent: Engine::prefetch_rx() loads them
  // as one range.
  uint32_t rcv_cack = 0;  // last PSN received in order
  uint32_t rcv_window = 0;
  std::vector<uint64_t> rcv_bits;  // bit (psn & mask): received beyond cack
  uint32_t rcv_bits_mask = 0;
  std::vector<ImmStash> stash;
  uint32_t stash_used = 0;
  std::vector<RecvWr> rq;
  uint32_t rq_mask = 0;
  uint32_t rq_head = 0, rq_tail = 0;
  uint64_t rcvd_bytes = 0;
  uint32_t ooo_count = 0;
  uint32_t unacked_pkts = 0;
  Nanos ack_deadline = kNever;
  bool ack_now = false;
  // The highest AckReq'd PSN that arrived ahead of a hole: the requester
  // waits on it, so the SACK that can first cover it cumulatively goes at once.
  bool ack_req_waiting = false;
  uint32_t ack_req_psn = 0;
  uint32_t ack_trigger_psn = 0;
  uint32_t ack_trigger_ev = 0;
  uint8_t ack_trigger_plane = 0;
  uint32_t reverse_rotor = 0;  // the reverse EV the next SACK, NACK or probe reply goes on
  uint16_t ack_trigger_ts = 0;
  bool ack_trigger_ecn = false;
  // RoCEv2 responder: the message being placed in order.
  // The message being placed. Its region is looked up again by key for each
  // packet: one deregistered (or its slot reused) mid-message must refuse
  // the rest, not take them.
  bool rc_in_msg = false;
  uint32_t rc_rkey = 0;
  uint64_t rc_va = 0;
  uint32_t rc_remaining = 0;
  uint32_t rc_msg_len = 0;
  uint32_t rc_msn = 0;
  bool rc_nak_sent = false;
  Nanos last_cnp_at = 0;
  bool cnp_sent = false;
};

// The congestion window admits a packet of `len` bytes; an empty pipe always
// admits one, so a window below one packet cannot stall the QP.
inline bool window_open(const Qp& qp, uint32_t len) {
  return qp.inflight_bytes == 0 || qp.inflight_bytes + len <= qp.cc->window_bytes();
}

// splitmix64: tiny, fast and good enough to spread EV choices; seeded, so a
// simulation replays exactly.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t operator()() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) without a division.
  uint32_t below(uint32_t n) { return static_cast<uint32_t>((((*this)() >> 32) * n) >> 32); }

 private:
  uint64_t s_;
};

struct Engine::Impl {
  Impl(const EngineConfig& c, Env& e);

  EngineConfig cfg;
  Env& env;
  Rng rng;
  Counters<DevCtr> ctr;
  // Counts of QPs destroyed or reset: device totals must not lose them.
  Counters<QpCtr> retired_qp_ctr;
  std::vector<Mr> mrs;
  std::vector<Qp> qps;  // index = qpn - first_qpn; sized once, never moves (Engine::PrefetchMap)
  std::vector<uint32_t> active_qps;
  // What poll(), next_deadline() and wants_tx() ask of each active QP, kept
  // beside active_qps (same index). Whatever works on a QP marks its entry
  // stale, and poll() refreshes stale entries once, before it returns (a
  // NIC's RX burst may bring a QP dozens of frames). Asking every QP on
  // every call (a walk over their structs and congestion-control objects)
  // was a fifth of a large simulation, whose hosts are polled on every frame.
  struct QpSchedule {
    Nanos due = 0;        // earliest timer (ACK, RTO, RACK, TLP, probe)
    Nanos pace = kNever;  // when pacing lets it send, if it wants to
    bool wants_tx = false;
    bool idle = false;  // nothing to send, acknowledge or probe: leaves the list
    bool stale = true;  // the fields above may be out of date
  };
  std::vector<QpSchedule> active_sched;
  // next_deadline() and wants_tx() over all of active_sched, as poll() left
  // it: a host is asked both after every call (a pass over the QPs each).
  // Valid until an entry is marked stale or the list changes.
  struct ScheduleSummary {
    bool valid = false;
    Nanos at = 0;  // last_now it was worked out for: pacing counts only ahead of it
    Nanos deadline = kNever;
    bool wants_tx = false;
  } sched_summary;
  // Marks what a call into the engine worked on stale, on every return
  // path: the QP, or all of them (qp == nullptr).
  class ScheduleRefresh {
   public:
    ScheduleRefresh(Impl& impl, Qp* qp) : impl_(impl), qp_(qp) {}
    ScheduleRefresh(const ScheduleRefresh&) = delete;
    ScheduleRefresh& operator=(const ScheduleRefresh&) = delete;
    ~ScheduleRefresh() { qp_ ? impl_.mark_stale(*qp_) : impl_.mark_all_stale(); }

   private:
    Impl& impl_;
    Qp* qp_;
  };
  std::array<bool, kMaxPlanes> plane_up{};
  uint32_t planes_down_mask = 0;
  uint32_t tx_rotor = 0;      // where the QP whose turn it is sits in active_qps
  uint32_t tx_turn_qpn = 0;   // that QP: the list may have moved under the index
  uint32_t tx_turn_sent = 0;  // packets it has sent in this turn
  // Planes found without TX room in this call into the engine, asked once
  // per call rather than once per packet and QP (with a few frames staged
  // per port, asking was a tenth of a large simulation). Room seldom grows
  // within a call (a NIC may flush a full staging); if it does, the plane
  // just waits for the next call.
  uint32_t full_planes = 0;
  // What the Env said was full when the call began (planes_without_room()):
  // answers has_room() without asking, still counted in full_planes only
  // once asked, as full_planes is what tx_full_planes() reports.
  uint32_t known_full = 0;
  bool known_full_asked = true;  // outside poll() and on_rx(): never asked
  // poll() and on_rx(): full_planes starts empty, and planes_without_room()
  // may be asked once, on the first has_room().
  class RoomCall {
   public:
    explicit RoomCall(Impl& impl) : impl_(impl) {
      impl_.full_planes = 0;
      impl_.known_full_asked = false;
    }
    RoomCall(const RoomCall&) = delete;
    RoomCall& operator=(const RoomCall&) = delete;
    ~RoomCall() {
      impl_.known_full = 0;
      impl_.known_full_asked = true;
    }

   private:
    Impl& impl_;
  };
  bool has_room(uint32_t plane) {
    if ((full_planes >> plane) & 1) return false;
    if (!((planes_known_full() >> plane) & 1) && env.tx_room(plane)) return true;
    full_planes |= 1u << plane;
    return false;
  }
  // Planes found full in this call or said full when it began.
  uint32_t planes_known_full() {
    if (!known_full_asked) {
      known_full = env.planes_without_room();
      known_full_asked = true;
    }
    return full_planes | known_full;
  }
  Nanos last_now = 0;                          // the latest time the engine was called with
  uint32_t first_qpn = kFirstQpn;
  static constexpr uint32_t kFirstQpn = 0x10;  // below: reserved (QPN 2 is the endpoint QP)

  // engine.cc
  void init_qp(Qp& qp, uint32_t pd, const QpCaps& caps);
  Qp* find_qp(uint32_t qpn);
  const Mr* find_lkey(uint32_t lkey, uint32_t pd) const;
  const Mr* find_rkey(uint32_t rkey, uint32_t pd) const;
  void activate(Qp& qp);
  // `culprit`: SQ index of the WR that fails with `cause`; the oldest by default.
  void enter_error(Qp& qp, WcStatus cause, uint32_t culprit);
  void enter_error(Qp& qp, WcStatus cause) { enter_error(qp, cause, qp.sq_head); }
  void complete(Qp& qp, uint64_t wr_id, WcStatus st, WcOpcode op, uint32_t len, uint32_t imm, bool has_imm);
  bool is_local_ip(const wire::IpAddr& ip, uint32_t plane) const;
  // Last step of a frame: a template-stamped one already has its IPv4
  // checksum and needs only the ICRC; a built one needs both.
  void seal(const wire::MutablePacket& m, bool stamped) const {
    if (!stamped)
      wire::finish_frame(m, !cfg.icrc_offload);
    else if (!cfg.icrc_offload)
      wire::icrc_fill({m.base + m.at.l3, m.at.size - m.at.l3});
  }
  void on_endpoint(uint32_t plane, const wire::Packet& p, Nanos now);
  // Builds a control frame to the QP's peer on `plane` and sends it.
  template <class Fill>
  bool send_ctrl(Qp& qp, uint32_t plane, uint8_t opcode, uint32_t ev, uint32_t psn, Fill&& fill);
  // Timers and ACKs of one QP; what it sends is left to poll()'s scheduler.
  void service_qp(Qp& qp, Nanos now);
  void transmit_round_robin(Nanos now);
  Nanos qp_timer_deadline(const Qp& qp) const;
  bool qp_wants_tx(const Qp& qp) const;
  bool qp_idle(const Qp& qp) const;
  bool qp_has_work(const Qp& qp) const;
  void unpark_probes(Qp& qp);
  void probe_planes_now(Qp& qp, uint32_t planes, Nanos now);
  void mark_stale(Qp& qp) {
    if (qp.on_active_list) active_sched[qp.active_pos].stale = true;
    sched_summary.valid = false;
  }
  void mark_all_stale() {
    for (QpSchedule& s : active_sched) s.stale = true;
    sched_summary.valid = false;
  }
  // The schedule of active_qps[i] as it is now: its entry, or computed
  // afresh when stale.
  QpSchedule schedule_at(size_t i) const;
  void refresh_stale_schedules();
  void remove_active(Qp& qp);

  // requester.cc
  int post_send(Qp& qp, const SendWr& wr);
  uint32_t transmit(Qp& qp, Nanos now, uint32_t budget);  // packets sent
  bool send_data(Qp& qp, uint32_t psn, bool retransmit, Nanos now);
  void on_sack(Qp& qp, const wire::Packet& p, Nanos now);
  void on_nack(Qp& qp, const wire::Packet& p, Nanos now);
  void on_aeth(Qp& qp, const wire::Packet& p, Nanos now);
  void on_cnp(Qp& qp, Nanos now);
  void ack_through(Qp& qp, uint32_t cack, AckSample& s, Nanos now);
  void ack_one(Qp& qp, uint32_t psn, AckSample& s, Nanos now);
  void mark_lost(Qp& qp, uint32_t psn, QpCtr why, bool path_failed, Nanos now);
  void queue_retransmit(Qp& qp, uint32_t psn, bool late);
  void take_out_of_flight(Qp& qp, TxPkt& t, bool lost);
  void release_plane_charge(Qp& qp, TxPkt& t);
  void detect_losses(Qp& qp, uint32_t upto_psn, Nanos now, bool blame_path);
  void on_rack_timer(Qp& qp, Nanos now);
  void advance_una(Qp& qp, Nanos now, bool progress);
  void complete_acked_wqes(Qp& qp);
  void on_rto(Qp& qp, Nanos now);
  void arm_tlp(Qp& qp, Nanos now);
  Nanos reorder_window(Qp& qp, Nanos now) const;
  void note_spurious_resend(Qp& qp, bool by_rack, Nanos now);
  void resend_in_flight_on(Qp& qp, uint32_t planes, Nanos now);
  void send_tlp(Qp& qp, Nanos now);
  Nanos tlp_timeout(const Qp& qp) const;
  void note_tail(Qp& qp, uint32_t psn, Nanos now);
  void tail_probe_answered(Qp& qp, uint32_t reach, Nanos now);
  void send_tail_probe(Qp& qp, Nanos now);
  bool answers_this_series(const Qp& qp, uint16_t probe_id) const;
  bool send_reliability_probe(Qp& qp, Nanos now, int ev = -1);
  void go_back_n(Qp& qp, uint32_t from_psn, QpCtr why);
  Nanos rto_for(const Qp& qp) const;
  void flush(Qp& qp, WcStatus cause, uint32_t culprit);

  // responder.cc
  void on_data(Qp& qp, uint32_t plane, const wire::Packet& p, Nanos now);
  void on_data_rocev2(Qp& qp, uint32_t plane, const wire::Packet& p, Nanos now);
  void on_probe(Qp& qp, uint32_t plane, const wire::Packet& p);
  void send_sack(Qp& qp, bool probe_reply, uint16_t probe_id);
  uint32_t reverse_ev(Qp& qp, uint32_t plane, uint32_t answered_ev);
  bool wants_ack_req(Qp& qp, uint32_t sq_index, bool retransmit);
  void send_nack(Qp& qp, uint32_t plane, uint32_t ev, uint32_t psn, wire::NackReason r);
  void send_aeth(Qp& qp, uint32_t plane, uint32_t sport, uint32_t psn, uint8_t syndrome);
  bool deliver_imms(Qp& qp, uint32_t& refused_psn);
  // The region `rkey` names if it takes a remote write of [va, va + len);
  // else nullptr, with the refusal counted and its NAK syndrome in `nak`.
  const Mr* check_remote_write(Qp& qp, uint32_t rkey, uint64_t va, uint64_t len, uint8_t& nak);
  void schedule_ack(Qp& qp, bool immediate, Nanos now);

  // spray.cc
  void build_evs(Qp& qp);
  // need_room: only planes with TX room (data); control frames need none.
  int pick_ev(Qp& qp, int avoid_ev, bool need_room = true);
  // `sent_at`: when the lost packet was sent.
  void ev_lost(Qp& qp, uint16_t ev, Nanos sent_at, Nanos now);
  void ev_loss_disproved(Qp& qp, uint16_t ev, Nanos now);
  void late_copy_evidence(Qp& qp, TxPkt& t, uint32_t reflected_ev, bool newest_sack, Nanos now);
  bool plane_usable_for(const Qp& qp, uint32_t plane) const;
  void plane_sweep_disproved(Qp& qp, uint32_t plane, Nanos now);
  bool return_swept(Qp& qp, uint32_t plane, Nanos now, bool skip);
  void sweep_released(Qp& qp, uint32_t plane);
  bool pass_scout(Qp& qp, uint16_t from, Nanos due);
  void swept_ev_leaves(Qp& qp, uint16_t idx, Nanos due, Nanos now);
  void take_planes_out(Qp& qp, uint32_t planes, Nanos now);
  void ev_mark(Qp& qp, uint16_t ev, EvState to, Nanos now, bool force);
  void ev_skip(Qp& qp, uint16_t ev);
  void ev_probe_reply(Qp& qp, uint16_t ev, bool clean, uint16_t echoed_ts, Nanos now);
  void send_probes(Qp& qp, Nanos now);
  bool plane_usable(const Qp& qp, uint32_t plane) const;
  uint32_t usable_planes(const Qp& qp) const;
  void refresh_spray_planes(Qp& qp);  // after any change to the spray sets
};

template <class Fill>
bool Engine::Impl::send_ctrl(Qp& qp, uint32_t plane, uint8_t opcode, uint32_t ev, uint32_t psn, Fill&& fill) {
  constexpr uint32_t kCtrlFrameMax = 160;
  std::span<uint8_t> out = env.tx_buffer(plane, kCtrlFrameMax);
  if (out.size() < kCtrlFrameMax) {
    qp.ctr.inc(QpCtr::tx_drop_no_buffer);
    ctr.inc(DevCtr::tx_drop_no_buffer);
    return false;
  }
  wire::MutablePacket m;
  const bool stamped = opcode == uint8_t(wire::Opcode::mrc_sack) && plane < qp.sack_tmpl.size();
  if (stamped) {
    m = qp.sack_tmpl[plane].stamp(out, 0);  // the hottest control frame
    wire::ev_apply(qp.attr.ev.format, ev, m);
  } else {
    wire::Addressing a;
    a.src_mac = cfg.planes[plane].mac;
    a.dst_mac = qp.attr.remote[plane].mac;
    a.src_ip = cfg.planes[plane].ip;
    a.dst_ip = qp.attr.remote[plane].ip;
    a.dscp = cfg.dscp_control;
    wire::ev_encode(qp.attr.ev.format, ev, a);
    m = wire::begin_frame(out, a, opcode, false, 0);
  }
  if (!m.base) return false;
  m.bth().set_dest_qp(qp.attr.dest_qpn);
  m.bth().set_psn(psn);
  fill(m);
  seal(m, stamped);  // fill() sets no IP field
  env.tx_send(plane, m.at.size);
  return true;
}

}  // namespace mrc::engine
