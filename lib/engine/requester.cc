// Requester: segments WRITEs into MTU packets with a RETH on each (MRC),
// keeps the MPR and congestion windows, sprays packets over EVs, and
// retransmits selectively on SACK holes, NACKs and timeouts. In RoCEv2 mode
// the same code runs go-back-N on a single EV.
#include <algorithm>
#include <cmath>

#include "engine/engine_impl.h"
#include "wire/psn.h"

namespace mrc::engine {

using namespace wire;

namespace {

constexpr uint32_t kMaxMessageBytes = 1u << 31;

// PSNs are 24 bits: the window's size is masked too, or one that spans the
// wrap (snd_nxt numerically below snd_una) would hold every PSN.
bool in_flight_range(const Qp& qp, uint32_t psn) {
  return psn_in_window(psn, qp.snd_una, (qp.snd_nxt - qp.snd_una) & kPsnMask);
}

// A PSN's record while its slot has not been reused: in flight, or
// acknowledged within the last window of sends.
TxPkt* sent_record(Qp& qp, uint32_t psn) {
  const uint32_t slots = qp.win_mask + 1;
  if (!psn_in_window(psn, psn_add(qp.snd_nxt, -int64_t{slots}), slots)) return nullptr;
  return &qp.win[psn & qp.win_mask];
}

// Packets leave in bursts with one timestamp, in PSN order (resent ones
// first, and they have the lowest PSNs): the PSN breaks the tie.
bool sent_before(Nanos a_at, uint32_t a_psn, Nanos b_at, uint32_t b_psn) {
  return a_at < b_at || (a_at == b_at && psn_lt(a_psn, b_psn));
}

// RFC 6298 smoothing. The variance matters more than the mean here: paths
// of one QP differ by their queues, and that spread is what reordering is.
void update_rtt(Qp& qp, Nanos sample) {
  qp.min_rtt = std::min(qp.min_rtt, sample);
  if (!qp.srtt) {
    qp.srtt = sample;
    qp.rttvar = sample / 2;
    return;
  }
  const Nanos err = sample > qp.srtt ? sample - qp.srtt : qp.srtt - sample;
  qp.rttvar = (3 * qp.rttvar + err) / 4;
  qp.srtt = (7 * qp.srtt + sample) / 8;
}

// Fields of an aggregate, counted by aggregate initialisation: a field
// added into padding changes no size but does change this.
struct AnyField {
  template <class U>
  constexpr operator U() const;
};
template <class T, class... A>
consteval size_t field_count() {
  if constexpr (requires { T{A{}..., AnyField{}}; })
    return field_count<T, A..., AnyField>();
  else
    return sizeof...(A);
}

}  // namespace

// post_send copies these field by field: a new field must be added there.
static_assert(field_count<SendWr>() == 9 && field_count<SqEntry>() == 7);

int Engine::Impl::post_send(Qp& qp, const SendWr& wr) {
  if (qp.sq_tail - qp.sq_head > qp.sq_mask) {
    qp.ctr.inc(QpCtr::wqe_sq_full);
    return ENOMEM;
  }
  // Filled in place, field by field: callers build their WR field by field
  // just before, and copying whole structs (theirs, then a local one) with
  // wide loads stalled on store forwarding, a tenth of the requester's time
  // at 64 B.
  SqEntry& e = qp.sq[qp.sq_tail & qp.sq_mask];
  e.wr.wr_id = wr.wr_id;
  e.wr.opcode = wr.opcode;
  e.wr.signaled = wr.signaled;
  e.wr.local_addr = wr.local_addr;
  e.wr.length = wr.length;
  e.wr.lkey = wr.lkey;
  e.wr.remote_addr = wr.remote_addr;
  e.wr.rkey = wr.rkey;
  e.wr.imm = wr.imm;
  e.src = nullptr;
  e.first_psn = 0;
  e.npkts = 0;
  e.sent_pkts = 0;
  e.msn = 0;
  e.error = WcStatus::success;
  // A WR we cannot execute is queued like any other and completes with its
  // error once every earlier WR has completed, so completions stay in order.
  if (wr.opcode != WrOpcode::rdma_write && wr.opcode != WrOpcode::rdma_write_with_imm) {
    qp.ctr.inc(QpCtr::wqe_bad_opcode);
    e.error = WcStatus::loc_qp_op_err;
  } else if (wr.length > kMaxMessageBytes) {
    qp.ctr.inc(QpCtr::wqe_bad_length);
    e.error = WcStatus::loc_len_err;
  } else if (wr.length > 0) {
    const Mr* mr = find_lkey(wr.lkey, qp.pd);
    if (!mr) {
      qp.ctr.inc(QpCtr::wqe_bad_lkey);
      e.error = WcStatus::loc_prot_err;
    } else if (!mr->contains(wr.local_addr, wr.length)) {
      qp.ctr.inc(QpCtr::wqe_bad_length);
      e.error = WcStatus::loc_prot_err;
    } else {
      e.src = mr->ptr + (wr.local_addr - mr->iova);
    }
  }
  if (e.error == WcStatus::success) {
    e.npkts = wr.length == 0 ? 1 : (wr.length + qp.attr.pmtu - 1) / qp.attr.pmtu;
    e.first_psn = qp.psn_tail;
    qp.psn_tail = psn_add(qp.psn_tail, e.npkts);
    e.msn = qp.next_msn++;
  }
  ++qp.sq_tail;
  if (qp.probes_parked) unpark_probes(qp);
  activate(qp);
  if (e.error != WcStatus::success) complete_acked_wqes(qp);
  // Sending waits for poll(), as a NIC's scheduler runs after doorbells:
  // WRs posted together leave together.
  return 0;
}

Nanos Engine::Impl::rto_for(const Qp& qp) const {
  // Linear retries keep the base timeout; exponential ones double it.
  // Back-off stops at 2^45 ns, about 10 hours (IBTA's largest timeout is 2.4
  // hours), rather than doubling the largest timeout to 9 years.
  constexpr Nanos kMaxRto = Nanos{1} << 45;
  const uint32_t extra = qp.retries > qp.attr.retry_linear ? qp.retries - qp.attr.retry_linear : 0;
  const uint32_t shift = std::min<uint32_t>(extra, 24);
  return qp.rto_base > (kMaxRto >> shift) ? kMaxRto : qp.rto_base << shift;
}

// The probe behind a flight's last packet (EngineConfig::tail_probe_delay).
// Its reply tells in one round trip whether the tail arrived, where the
// probe timeout waits 1.5 round trips plus the reorder window first. 0.1 %
// loss, 128 hosts, ten seeds: 0.883 -> 0.903 of the loss-free goodput; 1 %
// loss, seeds 1-3: 67.9 / 63.5 / 61.1 -> 67.1 / 70.9 / 67.0 Tb/s. The
// permutation sends 7,692 probes in all instead of 3,583 (1 M data packets).
void Engine::Impl::note_tail(Qp& qp, uint32_t psn, Nanos now) {
  if (cfg.tail_probe_delay == kNever || cfg.transport != Transport::mrc || qp.sq_send != qp.sq_tail ||
      qp.rtx_head != qp.rtx_tail)
    return;
  qp.tail_probe_at = now + cfg.tail_probe_delay;
  qp.tail_ev = qp.win[psn & qp.win_mask].ev;
}

uint32_t Engine::Impl::transmit(Qp& qp, Nanos now, uint32_t budget) {
  if (qp.state != QpState::rts) return 0;
  uint32_t sent = 0;
  while (budget--) {
    if (qp.cc->next_send_time() > now) return sent;
    if (qp.rtx_head != qp.rtx_tail) {
      const uint32_t psn = qp.rtx[qp.rtx_head & qp.win_mask];
      TxPkt& t = qp.win[psn & qp.win_mask];
      if (!in_flight_range(qp, psn) || (t.flags & kPktAcked) || !(t.flags & kPktQueued)) {
        if (in_flight_range(qp, psn)) t.flags &= ~kPktQueued;
        ++qp.rtx_head;
        continue;
      }
      if (!window_open(qp, t.len) || !send_data(qp, psn, true, now)) return sent;
      ++qp.rtx_head;
      ++sent;
      note_tail(qp, psn, now);
      continue;
    }
    if (qp.sq_send == qp.sq_tail) return sent;
    SqEntry& e = qp.sq[qp.sq_send & qp.sq_mask];
    if (e.error != WcStatus::success) return sent;  // waits for complete_acked_wqes
    if (psn_diff(qp.snd_nxt, qp.snd_una) >= int32_t(qp.window_psns)) return sent;
    const uint32_t offset = e.sent_pkts * qp.attr.pmtu;
    const uint32_t len = std::min(qp.attr.pmtu, e.wr.length - std::min(e.wr.length, offset));
    if (!window_open(qp, len)) return sent;
    const bool imm = e.wr.opcode == WrOpcode::rdma_write_with_imm;
    if (imm && e.sent_pkts == 0 && qp.wimm_inflight >= qp.attr.max_wimm) return sent;
    TxPkt& t = qp.win[qp.snd_nxt & qp.win_mask];
    t = TxPkt{};
    t.sq_index = qp.sq_send;
    t.offset = offset;
    t.len = static_cast<uint16_t>(len);
    if (!send_data(qp, qp.snd_nxt, false, now)) return sent;
    ++sent;
    qp.tail_probe_at = kNever;
    if (imm && e.sent_pkts == 0) ++qp.wimm_inflight;
    const bool was_idle = qp.snd_una == qp.snd_nxt;
    const uint32_t psn = qp.snd_nxt;
    qp.snd_nxt = psn_add(qp.snd_nxt, 1);
    if (was_idle) {  // a new flight: both timers start (the probe's only once a packet is out)
      qp.rto_deadline = now + rto_for(qp);
      arm_tlp(qp, now);
    }
    if (++e.sent_pkts == e.npkts) ++qp.sq_send;
    note_tail(qp, psn, now);
  }
  return sent;
}

bool Engine::Impl::wants_ack_req(Qp& qp, uint32_t sq_index, bool retransmit) {
  const bool last_posted = sq_index + 1 == qp.sq_tail;  // the tail of a burst waits for no ack_delay
  if (retransmit || last_posted || ++qp.msgs_since_ack_req >= cfg.ack_req_every ||
      psn_diff(qp.snd_nxt, qp.snd_una) < int32_t(cfg.ack_req_every)) {
    qp.msgs_since_ack_req = 0;
    return true;
  }
  return false;
}

bool Engine::Impl::send_data(Qp& qp, uint32_t psn, bool retransmit, Nanos now) {
  TxPkt& t = qp.win[psn & qp.win_mask];
  const SqEntry& e = qp.sq[t.sq_index & qp.sq_mask];
  const int ev = pick_ev(qp, retransmit ? t.ev : -1);
  if (ev < 0) {
    qp.ctr.inc(QpCtr::tx_blocked_no_room);
    return false;
  }
  const bool mrc = cfg.transport == Transport::mrc;
  const uint32_t plane = qp.evs[ev].plane;
  const bool first = t.offset == 0;
  const bool last = t.offset + t.len >= e.wr.length;
  const bool imm = last && e.wr.opcode == WrOpcode::rdma_write_with_imm;
  const uint8_t opcode = write_opcode(mrc, first, last, imm);
  const FrameTemplate& tp = qp.tmpl[plane * 2 + imm];
  const bool rc_has_reth = !mrc && first;
  const uint32_t need = tp.layout().payload + kRethLen + t.len + 8;
  std::span<uint8_t> buf = env.tx_buffer(plane, need);
  if (buf.size() < need) {
    qp.ctr.inc(QpCtr::tx_drop_no_buffer);
    ctr.inc(DevCtr::tx_drop_no_buffer);
    return false;
  }
  MutablePacket m;
  if (rc_has_reth) {  // RoCEv2 FIRST/ONLY carry a RETH the template lacks
    Addressing a;
    a.src_mac = cfg.planes[plane].mac;
    a.dst_mac = qp.attr.remote[plane].mac;
    a.src_ip = cfg.planes[plane].ip;
    a.dst_ip = qp.attr.remote[plane].ip;
    a.dscp = cfg.dscp_data;
    a.ecn = kEcnEct0;
    m = begin_frame(buf, a, opcode, false, t.len);
  } else {
    m = tp.stamp(buf, t.len);
    m.bth().set_opcode(opcode);
  }
  if (!m.base) return false;
  BthRef bth = m.bth();
  bth.set_dest_qp(qp.attr.dest_qpn);
  bth.set_psn(psn);
  bth.set_ack_req(last && wants_ack_req(qp, t.sq_index, retransmit));
  if (mrc) {
    bth.set_rtx(retransmit);
    m.meth().set_msn(e.msn);
    m.meth().set_rq_msn(qp.next_rq_msn);
  }
  if (m.at.reth) {
    m.reth().set_va(e.wr.remote_addr + (mrc ? t.offset : 0));
    m.reth().set_rkey(e.wr.rkey);
    m.reth().set_dma_len(e.wr.length);
  }
  if (m.at.imm) m.imm().set_imm(e.wr.imm);
  // The template holds the addressing; the EV is the per-packet part of it.
  ev_apply(qp.attr.ev.format, qp.evs[ev].value, m);
  if (t.len) env.payload_to_frame(m.payload().data(), e.src + t.offset, t.len);
  if (!retransmit && !last) {  // first sends go in order: the next packet's payload follows this one's
    const uint32_t next = t.offset + t.len;
    env.payload_ahead(e.src + next, std::min(qp.attr.pmtu, e.wr.length - next));
  }
  seal(m, !rc_has_reth);
  env.tx_send(plane, m.at.size);

  t.sent_at = now;
  t.ev = static_cast<uint16_t>(ev);
  // Saturates: only "sent once" matters (Karn), and a PSN resent 256 times
  // under infinite retries must not read as sent once again.
  if (t.tx_count < UINT8_MAX) ++t.tx_count;
  t.flags = static_cast<uint8_t>((t.flags & ~kPktQueued) | kPktInFlight);
  qp.inflight_bytes += t.len;
  ++qp.plane_inflight[plane];
  Ev& evr = qp.evs[ev];
  ++evr.inflight;
  if (retransmit) {
    qp.ev_cold[ev].ctr.inc(EvCtr::rtx_pkts);
    qp.ctr.inc(QpCtr::tx_retransmits);
  } else {
    ++evr.tx_pkts;
    qp.ctr.inc(QpCtr::tx_data_pkts);
    qp.ctr.inc(QpCtr::tx_data_bytes, t.len);
  }
  qp.cc->on_send(t.len, now);
  return true;
}

// ---------------------------------------------------------------------------
// Acknowledgements

void Engine::Impl::ack_one(Qp& qp, uint32_t psn, AckSample& s, Nanos now) {
  TxPkt& t = qp.win[psn & qp.win_mask];
  if (t.flags & kPktAcked) return;
  const uint32_t plane = qp.evs[t.ev].plane;  // the plane carries traffic
  qp.plane_losses[plane] = 0;
  qp.plane_acked_sent_at[plane] = std::max(qp.plane_acked_sent_at[plane], t.sent_at);
  // Only a packet sent once says which plane delivered it: a resend's ACK
  // may be for its first copy, on another plane.
  if (((qp.swept_planes >> plane) & 1) && t.tx_count == 1 && t.sent_at >= qp.sweep_tip_sent_at[plane])
    plane_sweep_disproved(qp, plane, now);
  // Declared lost, still waiting to be resent, and sent only once: that one
  // copy has arrived after all.
  if ((t.flags & (kPktEvBlamed | kPktQueued)) == (kPktEvBlamed | kPktQueued) && t.tx_count == 1) {
    t.flags &= ~kPktEvBlamed;
    ev_loss_disproved(qp, t.lost_ev, now);
  }
  take_out_of_flight(qp, t, false);
  release_plane_charge(qp, t);
  t.flags |= kPktAcked;
  s.bytes_acked += t.len;
  // A resent packet acknowledged sooner than any round trip was answered
  // for its first copy: it dates nothing (RFC 8985 §6.2 step 2), and the
  // reorder window was too short for this QP's paths. "Sooner" is also
  // within a third of the smoothed RTT: under load the least RTT seen is
  // the idle one, and a resend queued behind the same traffic as its first
  // copy is not answered that fast. Four memif planes drained in turn, no
  // loss at all: 1.0-1.4 resends per 1,000 packets and no timeouts, against
  // 1.2-10.6 and up to 32 timeouts in 10 s with the least RTT alone; mrc-sim's
  // targets unchanged (a half instead of a third: 0.1 % loss 0.903 -> 0.898).
  const Nanos rtt = now - t.sent_at;
  if (t.tx_count > 1 && qp.min_rtt != kNever && rtt < std::max(qp.min_rtt, qp.srtt / 3))
    note_spurious_resend(qp, (t.flags & kPktRackResend) != 0, now);
  if (sent_before(qp.rack_sent_at, qp.rack_psn, t.sent_at, psn) && (t.tx_count == 1 || rtt >= qp.min_rtt)) {
    qp.rack_sent_at = t.sent_at;
    qp.rack_psn = psn;
    qp.rack_rtt = rtt;
  }
}

void Engine::Impl::ack_through(Qp& qp, uint32_t cack, AckSample& s, Nanos now) {
  for (uint32_t psn = qp.snd_una; in_flight_range(qp, psn) && psn_le(psn, cack); psn = psn_add(psn, 1))
    ack_one(qp, psn, s, now);
}

void Engine::Impl::advance_una(Qp& qp, Nanos now, bool progress) {
  const uint32_t before = qp.snd_una;
  while (qp.snd_una != qp.snd_nxt && (qp.win[qp.snd_una & qp.win_mask].flags & kPktAcked))
    qp.snd_una = psn_add(qp.snd_una, 1);
  if (qp.snd_una != before || progress) {
    qp.retries = 0;
    qp.rto_deadline = qp.snd_una == qp.snd_nxt ? kNever : now + rto_for(qp);
  }
  complete_acked_wqes(qp);
}

void Engine::Impl::mark_lost(Qp& qp, uint32_t psn, QpCtr why, bool path_failed, Nanos now) {
  TxPkt& t = qp.win[psn & qp.win_mask];
  if ((t.flags & kPktAcked) || (t.flags & kPktQueued)) return;
  t.flags = why == QpCtr::rtx_sack ? t.flags | kPktRackResend : t.flags & ~kPktRackResend;
  queue_retransmit(qp, psn, why == QpCtr::rtx_sack);
  qp.ctr.inc(why);
  t.lost_ev = t.ev;
  t.flags &= ~(kPktEvBlamed | kPktResendNamed);
  if (!path_failed) return;
  if (cfg.transport == Transport::mrc) t.flags |= kPktEvBlamed;
  ev_lost(qp, t.ev, t.sent_at, now);
}

// A plane that went down, here or at the peer (port status), lost what was
// in flight on it: resend that now instead of waiting for RACK, whose
// window may have grown past it (port status, 128 hosts: goodput back in
// 0 us instead of 50 us).
void Engine::Impl::resend_in_flight_on(Qp& qp, uint32_t planes, Nanos now) {
  if (cfg.transport != Transport::mrc) return;  // RoCEv2 goes back N on its own timeout
  for (uint32_t psn = qp.snd_una; in_flight_range(qp, psn); psn = psn_add(psn, 1)) {
    const TxPkt& t = qp.win[psn & qp.win_mask];
    if ((t.flags & kPktInFlight) && ((planes >> qp.evs[t.ev].plane) & 1))
      mark_lost(qp, psn, QpCtr::rtx_plane_down, false, now);
  }
  if (qp.rtx_head != qp.rtx_tail) activate(qp);
}

// `late`: judged lost for lateness (RACK, a loss probe's reply), so the
// copy may still be in its plane's queues; a trim, a NAK, a plane down or a
// timeout leaves nothing there to count.
void Engine::Impl::queue_retransmit(Qp& qp, uint32_t psn, bool late) {
  TxPkt& t = qp.win[psn & qp.win_mask];
  take_out_of_flight(qp, t, late);
  t.flags |= kPktQueued;
  qp.rtx[qp.rtx_tail++ & qp.win_mask] = psn;
}

// The packet no longer counts against the windows: acknowledged, or lost.
// A lost copy still counts against its plane's load until the packet is
// acknowledged: declared lost is not gone, and a copy that was only late
// sits in that plane's queues. Released at once, the deepest plane looked
// the emptiest and drew the next packets, which were then late too.
void Engine::Impl::take_out_of_flight(Qp& qp, TxPkt& t, bool lost) {
  if (!(t.flags & kPktInFlight)) return;
  qp.inflight_bytes -= t.len;
  const uint8_t plane = qp.evs[t.ev].plane;
  --qp.evs[t.ev].inflight;
  t.flags &= ~kPktInFlight;
  release_plane_charge(qp, t);  // an earlier lost copy gives way to this one
  if (lost) {
    t.flags |= kPktPlaneCharged;
    t.lost_ev = t.ev;
  } else {
    --qp.plane_inflight[plane];
  }
}

void Engine::Impl::release_plane_charge(Qp& qp, TxPkt& t) {
  if (!(t.flags & kPktPlaneCharged)) return;
  --qp.plane_inflight[qp.evs[t.lost_ev].plane];
  t.flags &= ~kPktPlaneCharged;
}

// A SACK's trigger names the EV it came on. For a packet whose loss was
// blamed on its EV, that proves the lost copy arrived when the EV named is
// the lost copy's (perhaps as a duplicate after its resend was
// acknowledged: the responder answers a duplicate at once). When it is the
// resend's, the copy before got there first if the PSN was already
// acknowledged and no SACK had named the resend, provided this SACK is
// ahead of every SACK seen (newest_sack): else the SACK that acknowledged
// the PSN may have been a later one, for the resend itself. One EV value on
// two planes names neither copy.
void Engine::Impl::late_copy_evidence(Qp& qp, TxPkt& t, uint32_t reflected_ev, bool newest_sack, Nanos now) {
  const uint32_t lost_value = qp.evs[t.lost_ev].value, resend_value = qp.evs[t.ev].value;
  if (t.lost_ev != t.ev && lost_value == resend_value) return;
  bool arrived = false;
  if (reflected_ev == lost_value)
    arrived = t.lost_ev != t.ev || t.tx_count == 1;
  else if (reflected_ev == resend_value && t.tx_count == 2 && !(t.flags & kPktResendNamed))
    arrived = (t.flags & kPktAcked) && newest_sack;
  if (reflected_ev == resend_value) t.flags |= kPktResendNamed;
  if (!arrived) return;
  t.flags &= ~kPktEvBlamed;
  ev_loss_disproved(qp, t.lost_ev, now);
}

// RACK: a packet is lost once a packet sent after it has been acknowledged
// and it has been outstanding a reorder window longer than that packet's
// round trip. Spraying reorders by design, so a hole alone proves nothing;
// timing does.
Nanos Engine::Impl::reorder_window(Qp& qp, Nanos now) const {
  if (qp.reo_steps > kReoStepsPerBase && now - qp.reo_grown_at > kReoQuietRtts * std::max<Nanos>(qp.srtt, 1))
    qp.reo_steps = kReoStepsPerBase;
  return qp.reo_steps * std::max(cfg.reorder_window, qp.srtt / 2 + 2 * qp.rttvar) / kReoStepsPerBase;
}

// Spraying over paths whose queues differ by more than the window makes
// RACK resend packets that were only late (permutation, 128 hosts: 18,000
// needless resends, 5 % of the slowest hosts' uplinks). Only RACK's own
// mistakes widen it: a plane-down or timeout resend that proves needless
// says nothing about reordering.
void Engine::Impl::note_spurious_resend(Qp& qp, bool by_rack, Nanos now) {
  qp.ctr.inc(QpCtr::rtx_spurious);
  if (!by_rack || now - qp.reo_grown_at < qp.srtt) return;  // one step per round trip
  const auto most = static_cast<uint32_t>(std::lround(cfg.reorder_window_growth * kReoStepsPerBase));
  qp.reo_steps = static_cast<uint16_t>(std::min<uint32_t>(qp.reo_steps + 1u, most));
  qp.reo_grown_at = now;
}

// Checked on each SACK and again by the reorder timer (RFC 8985 §6.2): a
// packet still short of its deadline when the SACKs stop coming, as at the
// end of a flight, would otherwise wait for the probe. The range is every
// PSN SACKs have reported on; PSNs beyond may yet be reported received.
void Engine::Impl::detect_losses(Qp& qp, uint32_t upto_psn, Nanos now, bool blame_path) {
  if (!in_flight_range(qp, qp.rack_end) || psn_gt(upto_psn, qp.rack_end)) qp.rack_end = upto_psn;
  const Nanos wait = qp.rack_rtt + reorder_window(qp, now);
  qp.rack_timer_at = kNever;
  for (uint32_t psn = qp.snd_una; in_flight_range(qp, psn) && psn_le(psn, qp.rack_end); psn = psn_add(psn, 1)) {
    const TxPkt& t = qp.win[psn & qp.win_mask];
    if (!(t.flags & kPktInFlight) || !sent_before(t.sent_at, psn, qp.rack_sent_at, qp.rack_psn)) continue;
    if (now - t.sent_at >= wait)
      mark_lost(qp, psn, QpCtr::rtx_sack, blame_path, now);
    else
      qp.rack_timer_at = std::min(qp.rack_timer_at, t.sent_at + wait);
  }
}

void Engine::Impl::on_rack_timer(Qp& qp, Nanos now) {
  const uint32_t queued = qp.rtx_tail;
  detect_losses(qp, qp.rack_end, now, true);
  if (qp.rtx_tail == queued) return;
  arm_tlp(qp, now);  // the probe now also covers the resent packets; poll() sends them next
}

void Engine::Impl::on_sack(Qp& qp, const Packet& p, Nanos now) {
  qp.ctr.inc(QpCtr::rx_acks);
  const SethView s = p.seth();
  const uint32_t cack = s.cack_psn();
  const SkipMark mark = static_cast<SkipMark>(s.skip_mark());
  if (s.probe_reply()) {
    const uint16_t ev = s.ack_psn_offset();  // carries the probe id
    if (ev < qp.evs.size()) ev_probe_reply(qp, ev, mark == SkipMark::none, p.cc_state().tx_timestamp(), now);
  }
  // cack may trail snd_una (an old SACK) but must not name unsent PSNs.
  if (psn_ge(cack, qp.snd_nxt) && qp.snd_una != qp.snd_nxt) return qp.ctr.inc(QpCtr::rx_drop_stale_ack);
  // Ahead of every SACK seen, by the responder's byte count. A tie proves
  // no order: a duplicate's SACK repeats the count.
  const uint32_t rcvd = p.cc_state().rcvd_bytes();
  const bool newest_sack = rcvd != qp.sack_rcvd_newest && ((rcvd - qp.sack_rcvd_newest) & 0x800000) == 0;
  if (newest_sack) qp.sack_rcvd_newest = rcvd;
  const uint32_t trigger = psn_add(cack, static_cast<int16_t>(s.ack_psn_offset()));
  // Before the empty-window return: the duplicate that proves a first copy
  // arrived often comes after the last ACK of a flight.
  if (!s.probe_reply()) {
    if (TxPkt* rec = sent_record(qp, trigger); rec && (rec->flags & kPktEvBlamed))
      late_copy_evidence(qp, *rec, s.entropy(), newest_sack, now);
  }
  if (qp.snd_una == qp.snd_nxt) return;

  AckSample smp;
  uint32_t high = cack;
  const bool tlp_reply = s.probe_reply() && qp.tlp_outstanding && answers_this_series(qp, s.ack_psn_offset());
  if (!s.probe_reply()) {
    if (in_flight_range(qp, trigger)) {
      const TxPkt& t = qp.win[trigger & qp.win_mask];
      // The marks are for the path the trigger came on: a late first copy's
      // when the SACK names its EV, not the resend's.
      const uint16_t via = t.tx_count > 1 && s.entropy() != qp.evs[t.ev].value && s.entropy() == qp.evs[t.lost_ev].value
                               ? t.lost_ev
                               : t.ev;
      Ev& ev = qp.evs[via];
      ++ev.acks;
      if (!(t.flags & kPktAcked) && t.tx_count == 1) {  // Karn: no samples from retransmissions
        smp.rtt_ns = now - t.sent_at;
        update_rtt(qp, smp.rtt_ns);
      }
      if (mark != SkipMark::none) {
        qp.ev_cold[via].ctr.inc(EvCtr::ecn_marks);
        smp.ecn = true;
        if (mark == SkipMark::always_skip)
          ev_mark(qp, via, EvState::assumed_bad, now, false);
        else
          ev_skip(qp, via);
      }
    }
  }
  ack_through(qp, cack, smp, now);
  const uint32_t base = psn_add(cack, static_cast<int16_t>(s.sack_offset()));
  const uint32_t reach = psn_add(base, kSackBitmapBits - 1);
  for (uint64_t bits = s.sack_bitmap(); bits; bits &= bits - 1) {
    const uint32_t psn = psn_add(base, std::countr_zero(bits));
    if (!in_flight_range(qp, psn)) continue;
    ack_one(qp, psn, smp, now);
    if (psn_gt(psn, high)) high = psn;
  }
  detect_losses(qp, high, now, true);
  if (tlp_reply) {
    // Data sent before the probe has had its chance to arrive, as far as
    // the bitmap tells (PSNs beyond it may have arrived too). A probe is
    // small and may overtake queued data, so what this finds is resent but
    // not blamed on its path.
    qp.tlp_outstanding = false;
    if (qp.tlp_sent_at > qp.rack_sent_at) {  // data sent with the probe went after it
      qp.rack_sent_at = qp.tlp_sent_at;
      qp.rack_psn = psn_add(qp.snd_una, -1);
      qp.rack_rtt = now - qp.tlp_sent_at;
    }
    const uint32_t last = psn_add(qp.snd_nxt, -1);
    detect_losses(qp, psn_lt(reach, last) ? reach : last, now, false);
  }
  if (s.probe_reply() && qp.tail_probe_ev >= 0 && s.ack_psn_offset() == qp.tail_probe_id) {
    const uint32_t last = psn_add(qp.snd_nxt, -1);
    tail_probe_answered(qp, psn_lt(reach, last) ? reach : last, now);
  }
  const uint32_t una_before = qp.snd_una;
  advance_una(qp, now, false);
  // The probe waits for a quiet spell after news (data delivered, a probe
  // answered, losses to resend); a SACK repeating what is known would only
  // keep pushing it back.
  const bool news = smp.bytes_acked || qp.snd_una != una_before || tlp_reply || qp.rtx_head != qp.rtx_tail;
  if (news) arm_tlp(qp, now);
  smp.inflight_bytes = qp.inflight_bytes;
  if (smp.bytes_acked || smp.ecn) qp.cc->on_ack(smp, now);
}

// One and a half round trips plus the reorder window, a quarter timeout
// until an RTT has been measured, doubled for each probe left unanswered;
// never more than half the timeout, which stays the failure detector. The
// round trip is RACK's (that of the newest packet acknowledged) when it is
// shorter than the smoothed one, and never below the least seen: a tail is
// probed once the queues that inflated SRTT have drained, and the ACKs it
// waits for are not delayed (the last message posted asks for one).
// The floor matters after a late reply to an earlier probe series, taken
// for this series' answer, has made RACK's RTT tiny. 0.1 % loss, 128 hosts,
// ten seeds: 0.882 of the loss-free goodput with 2 x SRTT, 0.883 with this;
// the loss-free runs are unchanged byte for byte.
Nanos Engine::Impl::tlp_timeout(const Qp& qp) const {
  const Nanos rto = rto_for(qp);
  const Nanos least = qp.min_rtt == kNever ? 0 : qp.min_rtt;
  const Nanos rtt = std::max(qp.rack_rtt ? std::min(qp.srtt, qp.rack_rtt) : qp.srtt, least);
  const Nanos pto = qp.srtt ? rtt + rtt / 2 + cfg.reorder_window : rto / 4;
  const Nanos cap = rto / 2;
  return pto > (cap >> qp.tlp_backoff) ? cap : pto << qp.tlp_backoff;
}

bool Engine::Impl::answers_this_series(const Qp& qp, uint16_t probe_id) const {
  if (probe_id < kLossProbeIdBase || !qp.tlp_series_sent) return false;
  const uint16_t since_first = (probe_id - qp.tlp_series_first) & 0x7FFF;
  const uint16_t sent = (qp.tlp_seq - qp.tlp_series_first) & 0x7FFF;
  return since_first < sent;
}

void Engine::Impl::arm_tlp(Qp& qp, Nanos now) {
  qp.tlp_backoff = 0;
  qp.tlp_series_sent = false;
  qp.tlp_at = cfg.transport != Transport::mrc || qp.snd_una == qp.snd_nxt ? kNever : now + tlp_timeout(qp);
}

void Engine::Impl::send_tlp(Qp& qp, Nanos now) {
  // A probe or its reply can be lost like any packet (about one in a hundred
  // at 0.1 % loss per link), so the probe re-arms itself until a SACK with
  // news comes: otherwise that tail waits out the whole timeout.
  qp.tail_probe_at = kNever;  // this probe covers the tail too
  if (qp.tlp_backoff < 16) ++qp.tlp_backoff;
  qp.tlp_at = now + tlp_timeout(qp);
  send_reliability_probe(qp, now);
}

// Outside the probe timeout's series: its timer and back-off stay as they are.
// It follows the tail on the tail's own path when that is still in use: a
// path delivers in order, so what its reply lacks of the packets sent on
// that path before it is lost (tail_probe_answered), without waiting out
// the reorder window that guards packets on other paths.
void Engine::Impl::send_tail_probe(Qp& qp, Nanos now) {
  qp.tail_probe_at = kNever;
  const int ev = qp.tail_ev >= 0 && size_t(qp.tail_ev) < qp.evs.size() && plane_usable(qp, qp.evs[qp.tail_ev].plane) &&
                         (qp.evs[qp.tail_ev].state == EvState::good || qp.evs[qp.tail_ev].state == EvState::skip)
                     ? qp.tail_ev
                     : -1;
  const uint16_t id = loss_probe_id(qp.tlp_seq);  // the probe about to leave
  if (!send_reliability_probe(qp, now, ev)) return;
  qp.ctr.inc(QpCtr::tx_tail_probes);
  qp.tail_probe_ev = ev;
  qp.tail_probe_id = id;
  qp.tail_probe_sent_at = now;
}

// Not while this QP's reorder window is grown: its paths have shown they
// reorder, and then the window decides. A verdict that proves needless
// counts as RACK's (rtx_sack) and grows the window; it blames no path.
// Packets sent in the probe's own nanosecond went after it (a poll
// services timers before it transmits), and the probe never leaves in its
// tail's (EngineConfig::tail_probe_delay >= 1).
void Engine::Impl::tail_probe_answered(Qp& qp, uint32_t reach, Nanos now) {
  const int32_t ev = qp.tail_probe_ev;
  qp.tail_probe_ev = -1;
  reorder_window(qp, now);  // a window quiet long enough falls back first
  if (qp.reo_steps > kReoStepsPerBase) return;
  for (uint32_t psn = qp.snd_una; in_flight_range(qp, psn) && psn_le(psn, reach); psn = psn_add(psn, 1)) {
    const TxPkt& t = qp.win[psn & qp.win_mask];
    if ((t.flags & kPktInFlight) && t.ev == ev && t.sent_at < qp.tail_probe_sent_at)
      mark_lost(qp, psn, QpCtr::rtx_sack, false, now);
  }
}

bool Engine::Impl::send_reliability_probe(Qp& qp, Nanos now, int ev) {
  // A probe is a control frame, like the SACKs that need no TX room: if
  // it waited for room behind data, a QP with a full pipe could back its
  // probe off until the timeout fired.
  if (ev < 0) ev = pick_ev(qp, -1, false);
  if (ev < 0) return false;
  const bool sent = send_ctrl(qp, qp.evs[ev].plane, uint8_t(Opcode::mrc_probe), qp.evs[ev].value, qp.snd_nxt,
                              [&](const MutablePacket& m) {
                                m.peth().set_type(kPethType);
                                m.peth().set_probe_id(loss_probe_id(qp.tlp_seq));
                                m.peth().set_spdcid(qp.qpn & 0xFFFF);
                                m.peth().set_dpdcid(qp.attr.dest_qpn & 0xFFFF);
                              });
  if (sent) {
    // Whichever probe of the series the reply answers, data sent before the
    // first one sent had its chance to arrive.
    if (!qp.tlp_series_sent) qp.tlp_sent_at = now, qp.tlp_series_first = qp.tlp_seq;
    qp.tlp_series_sent = true;
    ++qp.tlp_seq;
    qp.tlp_outstanding = true;
    qp.ctr.inc(QpCtr::tx_probes);
  }
  return sent;
}

void Engine::Impl::on_nack(Qp& qp, const Packet& p, Nanos now) {
  qp.ctr.inc(QpCtr::rx_nacks);
  const NethView n = p.neth();
  const uint32_t psn = n.nack_psn();
  if (!in_flight_range(qp, psn)) return qp.ctr.inc(QpCtr::rx_drop_stale_ack);
  const TxPkt& t = qp.win[psn & qp.win_mask];
  switch (static_cast<NackReason>(n.nack_reason())) {
    case NackReason::trimmed:
    case NackReason::trimmed_lasthop:
      // A trim of an earlier copy (one the fabric duplicated, or one resent
      // since) asks for nothing: its resend is queued or gone. Resending
      // for each such NACK, with duplication on the path, multiplied the
      // copies without end (1.6 M resends of 435 packets).
      if (!(t.flags & kPktInFlight) || n.entropy() != qp.evs[t.ev].value) return qp.ctr.inc(QpCtr::rx_nack_stale);
      qp.ev_cold[t.ev].ctr.inc(EvCtr::trims);
      // A trim is congestion, not failure: skip the EV for a rotation (a
      // last-hop trim says nothing about the path) and resend at once.
      if (n.nack_reason() == uint8_t(NackReason::trimmed)) ev_skip(qp, t.ev);
      qp.cc->on_nack(true, t.len, now);
      mark_lost(qp, psn, QpCtr::rtx_nack, false, now);
      break;
    case NackReason::unexp_event: enter_error(qp, WcStatus::rem_op_err); return;
    default:  // out of window or out of resources: resend later
      qp.cc->on_nack(false, t.len, now);
      mark_lost(qp, psn, QpCtr::rtx_nack, false, now);
      break;
  }
  transmit(qp, now, 64);
}

// AETH: the RoCEv2 ACK/NAK, also MRC's plain ACK opcode and its carrier for
// fatal NAKs (remote access or operation errors).
void Engine::Impl::on_aeth(Qp& qp, const Packet& p, Nanos now) {
  qp.ctr.inc(QpCtr::rx_acks);
  const uint8_t syn = p.aeth().syndrome();
  const uint32_t psn = p.bth().psn();
  AckSample smp;
  if ((syn & kAethTypeMask) == 0) {  // ACK through psn
    if (!in_flight_range(qp, psn)) return qp.ctr.inc(QpCtr::rx_drop_stale_ack);
    const TxPkt& t = qp.win[psn & qp.win_mask];
    if (!(t.flags & kPktAcked) && t.tx_count == 1) smp.rtt_ns = now - t.sent_at;
    ack_through(qp, psn, smp, now);
    advance_una(qp, now, false);
    smp.inflight_bytes = qp.inflight_bytes;
    if (smp.bytes_acked) qp.cc->on_ack(smp, now);
    return;
  }
  if ((syn & kAethTypeMask) != kAethTypeNak) return;  // RNR NAK: MRC has no RNR
  if (!in_flight_range(qp, psn) && psn != qp.snd_nxt) return qp.ctr.inc(QpCtr::rx_drop_stale_ack);
  // In RC a NAK acknowledges every PSN before the one it names; MRC places
  // out of order, so there it says nothing about earlier PSNs.
  if (cfg.transport == Transport::rocev2) {
    ack_through(qp, psn_add(psn, -1), smp, now);
    advance_una(qp, now, smp.bytes_acked != 0);
    if (qp.state != QpState::rts) return;
  }
  if (syn == kAethNakPsnSeqErr) {
    go_back_n(qp, psn, QpCtr::rtx_go_back_n);
    transmit(qp, now, 64);
    return;
  }
  qp.ctr.inc(QpCtr::remote_errors);
  const WcStatus why = syn == kAethNakInvalidReq     ? WcStatus::rem_inv_req_err
                       : syn == kAethNakRemoteAccess ? WcStatus::rem_access_err
                                                     : WcStatus::rem_op_err;
  // The WR that owns the refused PSN fails; every other one is flushed.
  const uint32_t culprit = in_flight_range(qp, psn) ? qp.win[psn & qp.win_mask].sq_index : qp.sq_head;
  enter_error(qp, why, culprit);
}

void Engine::Impl::on_cnp(Qp& qp, Nanos now) {
  qp.ctr.inc(QpCtr::rx_cnps);
  qp.cc->on_cnp(now);
}

// Go-back-N: everything from `from` on is resent, in order.
void Engine::Impl::go_back_n(Qp& qp, uint32_t from, QpCtr why) {
  for (uint32_t i = qp.rtx_head; i != qp.rtx_tail; ++i) {
    const uint32_t psn = qp.rtx[i & qp.win_mask];
    if (in_flight_range(qp, psn)) qp.win[psn & qp.win_mask].flags &= ~kPktQueued;
  }
  qp.rtx_head = qp.rtx_tail = 0;
  for (uint32_t psn = from; in_flight_range(qp, psn); psn = psn_add(psn, 1)) {
    if (qp.win[psn & qp.win_mask].flags & kPktAcked) continue;
    queue_retransmit(qp, psn, false);
    qp.ctr.inc(why);
  }
}

void Engine::Impl::on_rto(Qp& qp, Nanos now) {
  qp.ctr.inc(QpCtr::rto_fired);
  ++qp.retries;
  const bool infinite = qp.attr.retry_exp >= 25;
  if (!infinite && qp.retries > uint32_t(qp.attr.retry_linear) + qp.attr.retry_exp) {
    qp.ctr.inc(QpCtr::retry_exceeded);
    return enter_error(qp, WcStatus::retry_exc_err);
  }
  qp.cc->on_timeout(now);
  if (cfg.transport == Transport::rocev2) {
    go_back_n(qp, qp.snd_una, QpCtr::rtx_rto);
  } else {
    // Silence: every packet outstanding for a whole timeout is lost, and
    // so is the path it took.
    const Nanos rto = rto_for(qp);
    bool any = false;
    for (uint32_t psn = qp.snd_una; in_flight_range(qp, psn); psn = psn_add(psn, 1)) {
      const TxPkt& t = qp.win[psn & qp.win_mask];
      if ((t.flags & kPktInFlight) && now - t.sent_at >= rto / 2) {
        mark_lost(qp, psn, QpCtr::rtx_rto, now - t.sent_at >= rto, now);
        any = true;
      }
    }
    if (!any) mark_lost(qp, qp.snd_una, QpCtr::rtx_rto, false, now);
  }
  qp.rto_deadline = now + rto_for(qp);
  transmit(qp, now, 64);
}

// ---------------------------------------------------------------------------
// Completions

void Engine::Impl::complete_acked_wqes(Qp& qp) {
  while (qp.sq_head != qp.sq_tail) {
    SqEntry& e = qp.sq[qp.sq_head & qp.sq_mask];
    if (e.error != WcStatus::success) {
      // Every earlier WR has completed: now this one fails, and the QP with it.
      return enter_error(qp, e.error);
    }
    if (qp.sq_head == qp.sq_send) return;  // not fully sent
    const uint32_t last = psn_add(e.first_psn, e.npkts - 1);
    if (!psn_lt(last, qp.snd_una)) return;
    if (e.wr.opcode == WrOpcode::rdma_write_with_imm) {
      --qp.wimm_inflight;
      ++qp.next_rq_msn;
    }
    if (e.wr.signaled) complete(qp, e.wr.wr_id, WcStatus::success, WcOpcode::rdma_write, e.wr.length, 0, false);
    ++qp.sq_head;
  }
}

// On entering ERROR every outstanding WR completes: the culprit with the
// cause, the rest flushed, as verbs does.
void Engine::Impl::flush(Qp& qp, WcStatus cause, uint32_t culprit) {
  while (qp.sq_head != qp.sq_tail) {
    const uint32_t index = qp.sq_head++;
    const SqEntry& e = qp.sq[index & qp.sq_mask];
    const WcStatus st = e.error != WcStatus::success ? e.error : index == culprit ? cause : WcStatus::wr_flush_err;
    complete(qp, e.wr.wr_id, st, WcOpcode::rdma_write, 0, 0, false);
  }
  qp.sq_send = qp.sq_tail;
  while (qp.rq_head != qp.rq_tail) {
    const RecvWr& r = qp.rq[qp.rq_head++ & qp.rq_mask];
    complete(qp, r.wr_id, WcStatus::wr_flush_err, WcOpcode::recv_rdma_with_imm, 0, 0, false);
  }
  qp.snd_una = qp.snd_nxt;
  qp.rtx_head = qp.rtx_tail = 0;
  qp.inflight_bytes = 0;
  qp.plane_inflight.fill(0);
  for (Ev& ev : qp.evs) ev.inflight = 0;
  qp.wimm_inflight = 0;
  qp.unacked_pkts = 0;
  qp.ack_now = false;
  qp.rto_deadline = kNever;
  qp.rack_timer_at = kNever;
  qp.next_probe_at = kNever;
}

}  // namespace mrc::engine
