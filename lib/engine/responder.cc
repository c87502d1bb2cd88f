// Responder: places each packet directly by its RETH after checking the
// key, bounds and access; keeps a SACK bitmap behind a cumulative ACK;
// delivers WRITE_IMM completions exactly once and in PSN (hence MSN) order;
// NACKs out-of-window and trimmed packets. RoCEv2 mode accepts only the next
// PSN and NAKs gaps, as RC does.
#include <algorithm>

#include "engine/engine_impl.h"
#include "wire/psn.h"

namespace mrc::engine {

using namespace wire;

namespace {

bool bit_get(const Qp& qp, uint32_t psn) {
  const uint32_t i = psn & qp.rcv_bits_mask;
  return (qp.rcv_bits[i >> 6] >> (i & 63)) & 1;
}
void bit_set(Qp& qp, uint32_t psn) {
  const uint32_t i = psn & qp.rcv_bits_mask;
  qp.rcv_bits[i >> 6] |= 1ull << (i & 63);
}
void bit_clear(Qp& qp, uint32_t psn) {
  const uint32_t i = psn & qp.rcv_bits_mask;
  qp.rcv_bits[i >> 6] &= ~(1ull << (i & 63));
}

// The 64 receive bits from `base` on, as SACK bitmap bit 0 up; PSNs beyond
// the window (cack + 1 to cack + rcv_window) read as zero: their ring slots
// belong to older PSNs.
uint64_t bits_from(const Qp& qp, uint32_t base) {
  const int32_t off = psn_diff(base, qp.rcv_cack);
  const int32_t valid = int32_t(qp.rcv_window) - off + 1;
  if (off <= 0 || valid <= 0) return 0;
  const uint32_t i = base & qp.rcv_bits_mask;
  const uint32_t words_mask = static_cast<uint32_t>(qp.rcv_bits.size() - 1);
  const uint32_t w = i >> 6, sh = i & 63;
  uint64_t v = qp.rcv_bits[w] >> sh;
  if (sh) v |= qp.rcv_bits[(w + 1) & words_mask] << (64 - sh);
  return valid >= 64 ? v : v & ((1ull << valid) - 1);
}

}  // namespace

const Mr* Engine::Impl::check_remote_write(Qp& qp, uint32_t rkey, uint64_t va, uint64_t len, uint8_t& nak) {
  // A zero-length WRITE touches no memory, and its R_Key and VA need not be
  // valid (IBTA C9-88): only the QP's own permission is checked.
  static const Mr kNoBytes{};
  const Mr* mr = len ? find_rkey(rkey, qp.pd) : &kNoBytes;
  QpCtr refused;
  if (!len && (qp.attr.access & kAccessRemoteWrite)) return mr;
  if (!mr)
    refused = QpCtr::rx_drop_bad_rkey;
  else if (!(mr->access & kAccessRemoteWrite) || !(qp.attr.access & kAccessRemoteWrite))
    refused = QpCtr::rx_drop_no_access;
  else if (!mr->contains(va, len))
    refused = QpCtr::rx_drop_out_of_bounds;
  else
    return mr;
  qp.ctr.inc(refused);
  nak = kAethNakRemoteAccess;
  return nullptr;
}

void Engine::Impl::schedule_ack(Qp& qp, bool immediate, Nanos now) {
  ++qp.unacked_pkts;
  if (immediate || qp.unacked_pkts >= cfg.ack_every) qp.ack_now = true;
  if (qp.unacked_pkts == 1) qp.ack_deadline = now + cfg.ack_delay;
  activate(qp);
}

void Engine::Impl::on_data(Qp& qp, uint32_t plane, const Packet& p, Nanos now) {
  const uint32_t psn = p.bth().psn();
  const uint32_t ev = ev_decode(qp.attr.ev.format, p);
  const int32_t d = psn_diff(psn, psn_add(qp.rcv_cack, 1));
  const bool ecn = p.ecn() == kEcnCe;
  auto trigger = [&] {
    qp.ack_trigger_psn = psn;
    qp.ack_trigger_ev = ev;
    qp.ack_trigger_plane = static_cast<uint8_t>(plane);
    qp.ack_trigger_ts = p.at.tseth ? p.tseth().tx_timestamp() : 0;
    qp.ack_trigger_ecn = ecn;
  };
  if (d < 0 || (d < int32_t(qp.rcv_window) && bit_get(qp, psn))) {
    // Already placed: tell the sender again, at once, in case it lost our ACK.
    qp.ctr.inc(QpCtr::rx_dup_pkts);
    trigger();
    return schedule_ack(qp, true, now);
  }
  if (d >= int32_t(qp.rcv_window)) {
    qp.ctr.inc(QpCtr::rx_drop_psn_oor);
    return send_nack(qp, plane, ev, psn, NackReason::psn_oor_window);
  }

  // Direct placement by RETH: the key must be ours, in this PD, open for
  // remote writes, and the bytes must fall inside both region and message.
  const RethView reth = p.reth();
  const uint32_t len = p.at.payload_len;
  uint8_t nak = 0;
  const Mr* mr = check_remote_write(qp, reth.rkey(), reth.va(), len, nak);
  if (mr && (len > reth.dma_len() || len > qp.attr.pmtu || (!(p.at.flags & kOpLast) && len != qp.attr.pmtu))) {
    qp.ctr.inc(QpCtr::rx_drop_bad_msg);
    nak = kAethNakInvalidReq;
  }
  const bool has_imm = p.at.imm != 0;
  if (!nak && has_imm && qp.stash_used >= qp.stash.size()) {
    qp.ctr.inc(QpCtr::rx_drop_wimm_overflow);
    nak = kAethNakInvalidReq;
  }
  if (nak) return send_aeth(qp, plane, ev, psn, nak);

  if (len) env.payload_to_host(mr->ptr + (reth.va() - mr->iova), p.payload().data(), len);
  qp.ctr.inc(QpCtr::rx_data_pkts);
  qp.ctr.inc(QpCtr::rx_data_bytes, len);
  qp.rcvd_bytes += len;
  if (ecn) qp.ctr.inc(QpCtr::rx_ecn_marked);
  if (has_imm) {
    for (ImmStash& s : qp.stash) {
      if (s.used) continue;
      s = ImmStash{psn, p.imm().imm(), reth.dma_len(), true};
      ++qp.stash_used;
      break;
    }
  }
  bool ack_at_once = p.bth().ack_req() || ecn;
  if (d == 0) {
    qp.rcv_cack = psn;
    for (uint32_t next = psn_add(psn, 1); bit_get(qp, next); next = psn_add(next, 1)) {
      bit_clear(qp, next);
      qp.rcv_cack = next;
    }
    uint32_t refused_psn = 0;
    // A WRITE_IMM that found no receive posted put the QP in ERROR: the
    // requester must hear that, not see the message acknowledged.
    if (qp.stash_used && !deliver_imms(qp, refused_psn)) {
      // Everything before it was placed, and MRC's NAK acknowledges nothing
      // (RC's does): say so first, or the requester flushes those WRs too.
      send_aeth(qp, plane, ev, psn_add(refused_psn, -1), kAethAck);
      return send_aeth(qp, plane, ev, refused_psn, kAethNakRemoteOp);
    }
    if (qp.ack_req_waiting && psn_le(qp.ack_req_psn, qp.rcv_cack)) {
      qp.ack_req_waiting = false;
      ack_at_once = true;
    }
  } else {
    bit_set(qp, psn);
    ++qp.ooo_count;
    qp.ctr.inc(QpCtr::rx_ooo_pkts);
    if (p.bth().ack_req() && (!qp.ack_req_waiting || psn_lt(qp.ack_req_psn, psn))) {
      qp.ack_req_waiting = true;
      qp.ack_req_psn = psn;
    }
  }
  trigger();
  schedule_ack(qp, ack_at_once, now);
}

// Every WRITE_IMM at or below the cumulative ACK has all earlier packets of
// all earlier messages placed: deliver them, lowest PSN first. False when
// one finds no receive posted (MRC has no RNR: the application must have
// posted its receives); the QP is then in ERROR and refused_psn names it.
bool Engine::Impl::deliver_imms(Qp& qp, uint32_t& refused_psn) {
  for (;;) {
    ImmStash* next = nullptr;
    for (ImmStash& s : qp.stash) {
      if (s.used && psn_le(s.psn, qp.rcv_cack) && (!next || psn_lt(s.psn, next->psn))) next = &s;
    }
    if (!next) return true;
    next->used = false;
    --qp.stash_used;
    if (qp.rq_head == qp.rq_tail) {
      qp.ctr.inc(QpCtr::rx_drop_no_recv_wqe);
      refused_psn = next->psn;
      enter_error(qp, WcStatus::fatal_err);
      return false;
    }
    const RecvWr& r = qp.rq[qp.rq_head++ & qp.rq_mask];
    qp.ctr.inc(QpCtr::imm_delivered);
    complete(qp, r.wr_id, WcStatus::success, WcOpcode::recv_rdma_with_imm, next->len, next->imm, true);
  }
}

// The EV a SACK, NACK or probe reply takes back on `plane`: the plane's
// EVs in turn (a reverse EV set), not the one it answers (named in the
// header instead). A path may be dead one way only (one spine of two
// failed): answers that always took the reverse of the EV they answered
// died with it, so an EV whose forward path worked never came back, and a
// QP whose every EV was dead one way or the other stalled for good.
// The member is computed from the spray set's run where it is one, as
// pick_ev does: on a responder the set's vector is cold.
uint32_t Engine::Impl::reverse_ev(Qp& qp, uint32_t plane, uint32_t answered_ev) {
  if (cfg.transport != Transport::mrc || plane >= kMaxPlanes) return answered_ev;
  const uint32_t n = qp.spray_count[plane];
  if (!n) return answered_ev;
  const uint32_t i = qp.reverse_rotor++ % n;
  const uint32_t step = qp.spray_step[plane];
  return qp.evs[step ? qp.spray_first[plane] + i * step : qp.active[plane][i]].value;
}

void Engine::Impl::send_sack(Qp& qp, bool probe_reply, uint16_t probe_id) {
  const bool mrc = cfg.transport == Transport::mrc;
  const uint32_t plane = qp.ack_trigger_plane;
  const uint32_t cack = qp.rcv_cack;
  qp.unacked_pkts = 0;
  qp.ack_now = false;
  qp.ack_deadline = kNever;
  if (!plane_up[plane]) return;
  bool sent;
  if (!mrc) {
    sent = send_ctrl(qp, plane, uint8_t(Opcode::rc_ack), qp.ack_trigger_ev, cack, [&](const MutablePacket& m) {
      m.aeth().set_syndrome(kAethAck);
      m.aeth().set_msn(qp.rc_msn);
    });
  } else {
    // The bitmap starts right after cack unless the triggering PSN lies
    // beyond its reach; then it ends at that PSN so the sender learns of it.
    uint32_t base = psn_add(cack, 1);
    const int32_t reach = psn_diff(qp.ack_trigger_psn, base);
    if (!probe_reply && reach >= int32_t(kSackBitmapBits)) base = psn_add(qp.ack_trigger_psn, -63);
    const uint64_t bitmap = bits_from(qp, base);
    const int32_t trig_off = psn_diff(qp.ack_trigger_psn, cack);
    const uint32_t back = reverse_ev(qp, plane, qp.ack_trigger_ev);
    sent = send_ctrl(qp, plane, uint8_t(Opcode::mrc_sack), back, cack, [&](const MutablePacket& m) {
      SethRef s = m.seth();
      s.set_type(kSethType);
      s.set_skip_mark(uint8_t(qp.ack_trigger_ecn ? SkipMark::skip_once : SkipMark::none));
      s.set_probe_reply(probe_reply);
      s.set_ack_psn_offset(probe_reply ? probe_id : static_cast<uint16_t>(std::clamp(trig_off, -32768, 32767)));
      s.set_entropy(qp.ack_trigger_ev);
      s.set_spdcid(qp.qpn & 0xFFFF);
      s.set_dpdcid(qp.attr.dest_qpn & 0xFFFF);
      s.set_cack_psn(cack);
      s.set_cc_type(kCcTypeNscc);
      s.set_mpr(static_cast<uint8_t>(std::min<uint32_t>(qp.attr.mpr_dest, 0xFF)));
      s.set_sack_offset(static_cast<uint16_t>(psn_diff(base, cack)));
      s.set_sack_bitmap(bitmap);
      CcStateRef c = m.cc_state();
      c.set_tx_timestamp(qp.ack_trigger_ts);
      c.set_ooo_count(std::min<uint32_t>(qp.ooo_count, 0x7FFF));
      c.set_rcvd_bytes(qp.rcvd_bytes & 0xFFFFFF);
    });
  }
  qp.ack_trigger_ecn = false;
  if (sent) qp.ctr.inc(QpCtr::tx_acks);
}

void Engine::Impl::send_nack(Qp& qp, uint32_t plane, uint32_t ev, uint32_t psn, NackReason r) {
  if (cfg.transport == Transport::rocev2) return;  // RC has only the AETH NAK
  const uint32_t back = reverse_ev(qp, plane, ev);
  const bool sent = send_ctrl(qp, plane, uint8_t(Opcode::mrc_nack), back, psn, [&](const MutablePacket& m) {
    NethRef n = m.neth();
    n.set_type(kNethType);
    n.set_nack_reason(uint8_t(r));
    n.set_entropy(ev);
    n.set_spdcid(qp.qpn & 0xFFFF);
    n.set_dpdcid(qp.attr.dest_qpn & 0xFFFF);
    n.set_nack_psn(psn);
  });
  if (sent) qp.ctr.inc(QpCtr::tx_nacks);
}

void Engine::Impl::send_aeth(Qp& qp, uint32_t plane, uint32_t ev, uint32_t psn, uint8_t syndrome) {
  const uint8_t opcode = uint8_t(cfg.transport == Transport::mrc ? Opcode::mrc_ack : Opcode::rc_ack);
  const bool sent = send_ctrl(qp, plane, opcode, ev, psn, [&](const MutablePacket& m) {
    m.aeth().set_syndrome(syndrome);
    m.aeth().set_msn(qp.rc_msn);
  });
  if (sent) qp.ctr.inc(syndrome == kAethAck ? QpCtr::tx_acks : QpCtr::tx_nacks);
}

void Engine::Impl::on_probe(Qp& qp, uint32_t plane, const Packet& p) {
  qp.ctr.inc(QpCtr::rx_probes);
  // The reply names the probed EV and carries the probe id, the current
  // bitmap and CC state: a probe is also a reliability query. Like every
  // SACK it goes back on a reverse EV (reverse_ev): a probe tests its
  // forward path only.
  qp.ack_trigger_plane = static_cast<uint8_t>(plane);
  qp.ack_trigger_ev = ev_decode(qp.attr.ev.format, p);
  qp.ack_trigger_psn = psn_add(qp.rcv_cack, 1);
  qp.ack_trigger_ecn = p.ecn() == kEcnCe;
  qp.ack_trigger_ts = p.peth().tx_timestamp();
  send_sack(qp, true, p.peth().probe_id());
}

void Engine::Impl::on_data_rocev2(Qp& qp, uint32_t plane, const Packet& p, Nanos now) {
  const uint32_t psn = p.bth().psn();
  const uint32_t sport = p.udp().src_port();
  const int32_t d = psn_diff(psn, psn_add(qp.rcv_cack, 1));
  const bool ecn = p.ecn() == kEcnCe;
  qp.ack_trigger_plane = static_cast<uint8_t>(plane);
  qp.ack_trigger_ev = sport;
  if (ecn) {
    qp.ctr.inc(QpCtr::rx_ecn_marked);
    // DCQCN notification point: at most one CNP per QP per interval.
    if (!qp.cnp_sent || now - qp.last_cnp_at >= cfg.cnp_interval) {
      qp.cnp_sent = true;
      qp.last_cnp_at = now;
      if (send_ctrl(qp, plane, uint8_t(Opcode::cnp), sport, 0, [](const MutablePacket& m) { m.bth().set_becn(1); }))
        qp.ctr.inc(QpCtr::tx_cnps);
    }
  }
  if (d < 0) {
    qp.ctr.inc(QpCtr::rx_dup_pkts);
    return schedule_ack(qp, true, now);
  }
  if (d > 0) {
    // Out of sequence: one NAK per gap, then silence until the gap fills.
    qp.ctr.inc(QpCtr::rx_drop_seq_err);
    if (!qp.rc_nak_sent) {
      qp.rc_nak_sent = true;
      send_aeth(qp, plane, sport, psn_add(qp.rcv_cack, 1), kAethNakPsnSeqErr);
    }
    return;
  }
  const uint8_t opc = p.at.opcode;
  const bool first = op_flags(opc) & kOpFirst;
  const uint32_t len = p.at.payload_len;
  uint8_t nak = 0;
  const Mr* mr = nullptr;
  if (first) {
    const RethView reth = p.reth();
    // RC checks the whole message on its first packet, and each later
    // packet's bytes again below.
    if ((mr = check_remote_write(qp, reth.rkey(), reth.va(), reth.dma_len(), nak))) {
      qp.rc_in_msg = true;
      qp.rc_rkey = reth.rkey();
      qp.rc_va = reth.va();
      qp.rc_remaining = reth.dma_len();
      qp.rc_msg_len = reth.dma_len();
    }
  } else if (!qp.rc_in_msg) {
    qp.ctr.inc(QpCtr::rx_drop_bad_msg);
    nak = kAethNakInvalidReq;
  }
  if (!nak && (len > qp.rc_remaining || len > qp.attr.pmtu || (!(p.at.flags & kOpLast) && len != qp.attr.pmtu) ||
               ((p.at.flags & kOpLast) && len != qp.rc_remaining))) {
    qp.ctr.inc(QpCtr::rx_drop_bad_msg);
    nak = kAethNakInvalidReq;
  }
  if (!nak && !first) mr = check_remote_write(qp, qp.rc_rkey, qp.rc_va, len, nak);
  if (nak) {
    qp.rc_in_msg = false;
    return send_aeth(qp, plane, sport, psn, nak);
  }
  if (len) env.payload_to_host(mr->ptr + (qp.rc_va - mr->iova), p.payload().data(), len);
  qp.rc_va += len;
  qp.rc_remaining -= len;
  qp.rcv_cack = psn;
  qp.rc_nak_sent = false;
  qp.ctr.inc(QpCtr::rx_data_pkts);
  qp.ctr.inc(QpCtr::rx_data_bytes, len);
  if (p.at.flags & kOpLast) {
    ++qp.rc_msn;
    if (p.at.imm) {
      if (qp.rq_head == qp.rq_tail) {  // no RNR here either: the requester fails at once
        qp.ctr.inc(QpCtr::rx_drop_no_recv_wqe);
        enter_error(qp, WcStatus::fatal_err);
        return send_aeth(qp, plane, sport, psn, kAethNakRemoteOp);
      }
      const RecvWr& r = qp.rq[qp.rq_head++ & qp.rq_mask];
      qp.ctr.inc(QpCtr::imm_delivered);
      complete(qp, r.wr_id, WcStatus::success, WcOpcode::recv_rdma_with_imm, qp.rc_msg_len, p.imm().imm(), true);
    }
    qp.rc_in_msg = false;
  }
  schedule_ack(qp, p.bth().ack_req(), now);
}

}  // namespace mrc::engine
