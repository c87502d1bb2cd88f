// Engine setup, the receive dispatch, timers and introspection. The
// requester, responder and EV spraying live in their own files.
#include "engine/engine.h"

#include <algorithm>
#include <bit>

#include "engine/engine_impl.h"
#include "engine/prefetch.h"
#include "wire/icrc.h"
#include "wire/psn.h"

namespace mrc::engine {

using namespace wire;

std::string_view qp_state_name(QpState s) {
  switch (s) {
    case QpState::reset: return "RESET";
    case QpState::init: return "INIT";
    case QpState::rtr: return "RTR";
    case QpState::rts: return "RTS";
    case QpState::error: return "ERROR";
  }
  return "?";
}

std::string_view ev_state_name(EvState s) {
  switch (s) {
    case EvState::good: return "GOOD";
    case EvState::skip: return "SKIP";
    case EvState::assumed_bad: return "ASSUMED_BAD";
    case EvState::denied: return "DENIED";
  }
  return "?";
}

std::string_view wc_status_name(WcStatus s) {
  switch (s) {
    case WcStatus::success: return "success";
    case WcStatus::loc_len_err: return "local length error";
    case WcStatus::loc_qp_op_err: return "local QP operation error";
    case WcStatus::loc_prot_err: return "local protection error";
    case WcStatus::wr_flush_err: return "WR flushed";
    case WcStatus::bad_resp_err: return "bad response error";
    case WcStatus::loc_access_err: return "local access error";
    case WcStatus::rem_inv_req_err: return "remote invalid request error";
    case WcStatus::rem_access_err: return "remote access error";
    case WcStatus::rem_op_err: return "remote operation error";
    case WcStatus::retry_exc_err: return "transport retry counter exceeded";
    case WcStatus::fatal_err: return "fatal error";
  }
  return "?";
}

Engine::Impl::Impl(const EngineConfig& c, Env& e) : cfg(c), env(e), rng(c.seed) {
  cfg.num_planes = std::clamp<uint32_t>(cfg.num_planes, 1, kMaxPlanes);
  // Not below 1 (NaN included), and within Qp::reo_steps.
  cfg.reorder_window_growth = cfg.reorder_window_growth >= 1.0 ? std::min(cfg.reorder_window_growth, 64.0) : 1.0;
  cfg.tail_probe_delay = std::max<Nanos>(cfg.tail_probe_delay, 1);  // see tail_probe_answered
  // A zero interval would probe an ASSUMED_BAD EV on every poll.
  cfg.probe_interval = std::max<Nanos>(cfg.probe_interval, 1000);
  cfg.probe_interval_max = std::max(cfg.probe_interval_max, cfg.probe_interval);
  mrs.resize(1u << kMrIndexBits);
  qps.resize(cfg.max_qps);
  first_qpn = std::max(cfg.first_qpn, kFirstQpn);
  for (uint32_t i = 0; i < qps.size(); ++i) qps[i].qpn = first_qpn + i;
  plane_up.fill(true);
  active_qps.reserve(cfg.max_qps);
  active_sched.reserve(cfg.max_qps);
}

Engine::Engine(const EngineConfig& cfg, Env& env) : impl_(std::make_unique<Impl>(cfg, env)) {}
Engine::~Engine() = default;
const EngineConfig& Engine::config() const { return impl_->cfg; }
const Counters<DevCtr>& Engine::counters() const { return impl_->ctr; }
const Counters<QpCtr>& Engine::retired_qp_counters() const { return impl_->retired_qp_ctr; }

// ---------------------------------------------------------------------------
// Memory regions

bool Engine::reg_mr(uint32_t pd, void* host_ptr, uint64_t iova, uint64_t length, uint32_t access, uint32_t& lkey,
                    uint32_t& rkey) {
  auto& I = *impl_;
  if (!host_ptr || !region_valid(iova, length)) return false;
  for (uint32_t slot = 1; slot < I.mrs.size(); ++slot) {  // slot 0 unused: key 0 is never valid
    Mr& m = I.mrs[slot];
    if (m.valid) continue;
    auto key = [&] {
      uint32_t tag = static_cast<uint32_t>(I.rng()) >> kMrIndexBits;
      return (tag << kMrIndexBits) | slot;
    };
    m = Mr{static_cast<uint8_t*>(host_ptr), iova, length, access, pd, key(), key(), true};
    lkey = m.lkey;
    rkey = m.rkey;
    return true;
  }
  return false;
}

bool Engine::import_mr(uint32_t pd, void* host_ptr, uint64_t iova, uint64_t length, uint32_t access, uint32_t lkey,
                        uint32_t rkey) {
  auto& I = *impl_;
  const uint32_t slot = lkey & ((1u << kMrIndexBits) - 1);
  if (!host_ptr || !region_valid(iova, length) || slot == 0 || slot != (rkey & ((1u << kMrIndexBits) - 1)))
    return false;
  Mr& m = I.mrs[slot];
  if (m.valid) return false;
  m = Mr{static_cast<uint8_t*>(host_ptr), iova, length, access, pd, lkey, rkey, true};
  return true;
}

bool Engine::dereg_mr(uint32_t lkey) {
  auto& I = *impl_;
  Mr& m = I.mrs[lkey & ((1u << kMrIndexBits) - 1)];
  if (!m.valid || m.lkey != lkey) return false;
  m = Mr{};
  return true;
}

const Mr* Engine::Impl::find_lkey(uint32_t lkey, uint32_t pd) const {
  const Mr& m = mrs[lkey & ((1u << kMrIndexBits) - 1)];
  return m.valid && m.lkey == lkey && m.pd == pd ? &m : nullptr;
}

const Mr* Engine::Impl::find_rkey(uint32_t rkey, uint32_t pd) const {
  const Mr& m = mrs[rkey & ((1u << kMrIndexBits) - 1)];
  return m.valid && m.rkey == rkey && m.pd == pd ? &m : nullptr;
}

// ---------------------------------------------------------------------------
// QP lifecycle

Qp* Engine::Impl::find_qp(uint32_t qpn) {
  if (qpn < first_qpn || qpn - first_qpn >= qps.size()) return nullptr;
  Qp& qp = qps[qpn - first_qpn];
  return qp.in_use ? &qp : nullptr;
}

void Engine::Impl::init_qp(Qp& qp, uint32_t pd, const QpCaps& caps) {
  const uint32_t qpn = qp.qpn;
  retired_qp_ctr += qp.ctr;
  qp = Qp{};
  qp.qpn = qpn;
  qp.pd = pd;
  qp.in_use = true;
  qp.caps = caps;
  const uint32_t sq = std::bit_ceil(std::clamp<uint32_t>(caps.max_send_wr, 1, 1u << 16));
  const uint32_t rq = std::bit_ceil(std::clamp<uint32_t>(caps.max_recv_wr, 1, 1u << 16));
  qp.sq.resize(sq);
  qp.sq_mask = sq - 1;
  qp.rq.resize(rq);
  qp.rq_mask = rq - 1;
}

uint32_t Engine::create_qp(uint32_t pd, const QpCaps& caps) {
  auto& I = *impl_;
  for (Qp& qp : I.qps) {
    if (qp.in_use) continue;
    I.init_qp(qp, pd, caps);
    return qp.qpn;
  }
  return 0;
}

bool Engine::destroy_qp(uint32_t qpn) {
  auto& I = *impl_;
  Qp* qp = I.find_qp(qpn);
  if (!qp) return false;
  I.remove_active(*qp);
  I.retired_qp_ctr += qp->ctr;
  *qp = Qp{};
  qp->qpn = qpn;
  return true;
}

ModifyError Engine::modify_qp(uint32_t qpn, QpState to, const QpAttr& a, Nanos /*now*/) {
  auto& I = *impl_;
  Qp* qpp = I.find_qp(qpn);
  if (!qpp) return ModifyError::no_qp;
  Qp& qp = *qpp;
  const Impl::ScheduleRefresh refresh(I, &qp);
  const QpState from = qp.state;
  if (to == QpState::error) {
    I.enter_error(qp, WcStatus::wr_flush_err);
    return ModifyError::ok;
  }
  if (to == QpState::reset) {
    I.remove_active(qp);
    I.init_qp(qp, qp.pd, QpCaps(qp.caps));
    return ModifyError::ok;
  }
  const bool ok_transition = (from == QpState::reset && to == QpState::init) ||
                             (from == QpState::init && (to == QpState::init || to == QpState::rtr)) ||
                             (from == QpState::rtr && to == QpState::rts) ||
                             (from == QpState::rts && to == QpState::rts);
  if (!ok_transition) return ModifyError::bad_transition;

  if (to == QpState::init) {
    if (a.ev.evs.size() > kMaxEvsPerQp) return ModifyError::bad_attr;
    for (const EvEntry& e : a.ev.evs)
      if (e.plane >= I.cfg.num_planes) return ModifyError::bad_attr;
    qp.attr.ev = a.ev;
    qp.attr.cc = a.cc;
    qp.attr.access = a.access;
    qp.state = QpState::init;
    return ModifyError::ok;
  }
  if (to == QpState::rtr) {
    if (a.pmtu < kMinPmtu || a.pmtu > kMaxPmtu || a.mpr_dest == 0 || a.mpr_dest > kMaxMpr || a.max_wimm_dest == 0 ||
        (a.pmtu & 3))
      return ModifyError::bad_attr;
    qp.attr.access = a.access;
    qp.attr.pmtu = a.pmtu;
    qp.attr.rq_psn = a.rq_psn & kPsnMask;
    qp.attr.dest_qpn = a.dest_qpn & kPsnMask;
    qp.attr.remote = a.remote;
    qp.attr.mpr_dest = a.mpr_dest;
    qp.attr.max_wimm_dest = a.max_wimm_dest;
    qp.rcv_cack = psn_add(qp.attr.rq_psn, -1);
    qp.rcv_window = a.mpr_dest * kMprUnitPsns;
    const uint32_t bits = std::bit_ceil(std::max<uint32_t>(qp.rcv_window, 128));
    qp.rcv_bits.assign(bits / 64, 0);
    qp.rcv_bits_mask = bits - 1;
    qp.stash.assign(a.max_wimm_dest, ImmStash{});
    qp.rc_msn = 0;
    qp.sack_tmpl.assign(I.cfg.num_planes, FrameTemplate{});
    for (uint32_t p = 0; p < I.cfg.num_planes; ++p) {
      Addressing addr;
      addr.src_mac = I.cfg.planes[p].mac;
      addr.dst_mac = a.remote[p].mac;
      addr.src_ip = I.cfg.planes[p].ip;
      addr.dst_ip = a.remote[p].ip;
      addr.dscp = I.cfg.dscp_control;
      if (addr.src_ip.is_v4() != addr.dst_ip.is_v4()) return ModifyError::bad_attr;
      qp.sack_tmpl[p].prepare(addr, uint8_t(Opcode::mrc_sack), false);
    }
    I.build_evs(qp);
    qp.state = QpState::rtr;
    return ModifyError::ok;
  }
  // RTS; RTS->RTS changes the access flags alone.
  if (from == QpState::rtr) {
    if (a.timeout > 24 || a.retry_linear > 7 || a.retry_exp > 25 || a.mpr == 0 || a.mpr > kMaxMpr || a.max_wimm == 0)
      return ModifyError::bad_attr;
    qp.attr.sq_psn = a.sq_psn & kPsnMask;
    qp.attr.timeout = a.timeout;
    qp.attr.retry_linear = a.retry_linear;
    qp.attr.retry_exp = a.retry_exp;
    qp.attr.mpr = a.mpr;
    qp.attr.max_wimm = a.max_wimm;
    qp.snd_una = qp.snd_nxt = qp.psn_tail = qp.attr.sq_psn;
    qp.window_psns = a.mpr * kMprUnitPsns;
    const uint32_t slots = std::bit_ceil(qp.window_psns);
    qp.win.assign(slots, TxPkt{});
    qp.win_mask = slots - 1;
    qp.rtx.assign(slots, 0);
    qp.rto_base = ack_timeout_ns(I.cfg.transport, a.timeout);
    qp.cc =
        make_congestion_control(qp.attr.cc, qp.attr.pmtu, I.cfg.plane_rate_gbps * I.cfg.num_planes, I.cfg.fabric_trims);
    qp.tmpl.assign(I.cfg.num_planes * 2, FrameTemplate{});
    for (uint32_t p = 0; p < I.cfg.num_planes; ++p) {
      Addressing addr;
      addr.src_mac = I.cfg.planes[p].mac;
      addr.dst_mac = qp.attr.remote[p].mac;
      addr.src_ip = I.cfg.planes[p].ip;
      addr.dst_ip = qp.attr.remote[p].ip;
      addr.dscp = I.cfg.dscp_data;
      addr.ecn = kEcnEct0;  // ECN-capable, so switches mark rather than drop
      if (addr.src_ip.is_v4() != addr.dst_ip.is_v4()) return ModifyError::bad_attr;
      const bool mrc = I.cfg.transport == Transport::mrc;
      qp.tmpl[p * 2].prepare(addr, uint8_t(mrc ? Opcode::mrc_write_middle : Opcode::rc_write_middle), false);
      qp.tmpl[p * 2 + 1].prepare(addr, uint8_t(mrc ? Opcode::mrc_write_last_imm : Opcode::rc_write_last_imm), false);
    }
  }
  qp.attr.access = a.access;
  qp.state = QpState::rts;
  return ModifyError::ok;
}

size_t Engine::qp_state_bytes(const QpCaps& caps, const QpAttr& a) {
  const size_t win = std::bit_ceil(a.mpr * kMprUnitPsns);
  const size_t planes = kMaxPlanes;
  return sizeof(Qp) + std::bit_ceil(std::max<uint32_t>(caps.max_send_wr, 1)) * sizeof(SqEntry) +
         std::bit_ceil(std::max<uint32_t>(caps.max_recv_wr, 1)) * sizeof(RecvWr) + win * (sizeof(TxPkt) + 4) +
         std::bit_ceil(a.mpr_dest * kMprUnitPsns) / 8 + a.max_wimm_dest * sizeof(ImmStash) +
         std::max<size_t>(a.ev.evs.size(), 1) * (sizeof(Ev) + sizeof(EvCold) + 2) +
         planes * 2 * sizeof(wire::FrameTemplate) + 512 /* congestion control state */;
}

void Engine::Impl::complete(Qp& qp, uint64_t wr_id, WcStatus st, WcOpcode op, uint32_t len, uint32_t imm,
                            bool has_imm) {
  Completion c;
  c.wr_id = wr_id;
  c.qpn = qp.qpn;
  c.status = st;
  c.opcode = op;
  c.byte_len = len;
  c.imm = imm;
  c.has_imm = has_imm;
  qp.ctr.inc(QpCtr::completions);
  if (st != WcStatus::success) qp.ctr.inc(QpCtr::completions_error);
  env.complete(c);
}

void Engine::Impl::enter_error(Qp& qp, WcStatus cause, uint32_t culprit) {
  if (qp.state == QpState::error) return;
  const bool was_active = qp.state == QpState::rts || qp.state == QpState::rtr;
  qp.state = QpState::error;
  flush(qp, cause, culprit);
  if (was_active && cause != WcStatus::wr_flush_err) env.qp_error(qp.qpn, cause);
}

void Engine::Impl::activate(Qp& qp) {
  if (qp.on_active_list) return;
  qp.on_active_list = true;
  qp.active_pos = static_cast<uint32_t>(active_qps.size());
  active_qps.push_back(qp.qpn);
  // Stale, so a QP activated inside poll() is serviced there.
  active_sched.push_back(QpSchedule{});
  sched_summary.valid = false;
}

void Engine::Impl::remove_active(Qp& qp) {
  if (!qp.on_active_list) return;
  // In order: the scheduler's turns follow the list (rare: destroy, reset).
  const uint32_t i = qp.active_pos;
  qp.on_active_list = false;
  active_qps.erase(active_qps.begin() + i);
  active_sched.erase(active_sched.begin() + i);
  sched_summary.valid = false;
  for (uint32_t k = i; k < active_qps.size(); ++k) qps[active_qps[k] - first_qpn].active_pos = k;
}

Engine::Impl::QpSchedule Engine::Impl::schedule_at(size_t i) const {
  if (!active_sched[i].stale) return active_sched[i];
  const Qp& qp = qps[active_qps[i] - first_qpn];
  QpSchedule s;
  s.due = qp_timer_deadline(qp);
  s.wants_tx = qp_wants_tx(qp);
  s.pace = s.wants_tx ? qp.cc->next_send_time() : kNever;
  s.idle = qp_idle(qp);
  s.stale = false;
  return s;
}

void Engine::Impl::refresh_stale_schedules() {
  for (size_t i = 0; i < active_sched.size(); ++i)
    if (active_sched[i].stale) active_sched[i] = schedule_at(i);
}

bool Engine::Impl::is_local_ip(const IpAddr& ip, uint32_t plane) const { return cfg.planes[plane].ip == ip; }

// ---------------------------------------------------------------------------
// Receive dispatch

void Engine::on_rx(uint32_t plane, std::span<const uint8_t> frame, Nanos now) {
  auto& I = *impl_;
  I.last_now = now;
  const Impl::RoomCall room_call(I);
  I.ctr.inc(DevCtr::rx_frames);
  if (plane >= I.cfg.num_planes) return I.ctr.inc(DevCtr::rx_drop_bad_plane);
  Packet p;
  // Trimmed packets lost their payload, so their ICRC cannot match: they
  // are recognised by DSCP and parsed without the check.
  ParseError e = parse_frame(frame, p, {.verify_icrc = false});
  if (e != ParseError::ok) return I.ctr.inc(parse_error_counter(e));
  const bool trimmed = p.dscp() == I.cfg.dscp_trimmed && (p.at.flags & kOpPayload);
  if (trimmed) {
    I.ctr.inc(DevCtr::rx_trimmed);
  } else if (!I.cfg.icrc_offload && !icrc_check(p.l3_span())) {
    return I.ctr.inc(DevCtr::rx_drop_bad_icrc);
  }
  if (!I.is_local_ip(p.dst_ip(), plane)) return I.ctr.inc(DevCtr::rx_drop_not_ours);
  const bool mrc_op = p.at.flags & kOpMrc;
  const bool mrc = I.cfg.transport == Transport::mrc;
  if (p.at.opcode == uint8_t(Opcode::mrc_endpoint_request) || p.at.opcode == uint8_t(Opcode::mrc_endpoint_response))
    return I.on_endpoint(plane, p, now);
  if (mrc_op != mrc && p.at.opcode != uint8_t(Opcode::cnp)) return I.ctr.inc(DevCtr::rx_drop_wrong_transport);
  Qp* qp = I.find_qp(p.bth().dest_qp());
  if (!qp) return I.ctr.inc(DevCtr::rx_drop_unknown_qp);
  const Impl::ScheduleRefresh refresh(I, qp);

  if (p.at.flags & kOpPayload) {
    if (qp->state != QpState::rtr && qp->state != QpState::rts) return qp->ctr.inc(QpCtr::rx_drop_bad_state);
    if (trimmed) {
      qp->ctr.inc(QpCtr::rx_trimmed);
      I.send_nack(*qp, plane, ev_decode(qp->attr.ev.format, p), p.bth().psn(), NackReason::trimmed);
      return;
    }
    if (mrc)
      I.on_data(*qp, plane, p, now);
    else
      I.on_data_rocev2(*qp, plane, p, now);
  } else if (qp->state != QpState::rts) {
    // Feedback and probes only mean something to a connected QP.
    qp->ctr.inc(QpCtr::rx_drop_bad_state);
  } else if (p.at.flags & kOpSeth) {
    I.on_sack(*qp, p, now);
  } else if (p.at.flags & kOpNeth) {
    I.on_nack(*qp, p, now);
  } else if (p.at.flags & kOpAeth) {
    I.on_aeth(*qp, p, now);
  } else if (p.at.flags & kOpPeth) {
    I.on_probe(*qp, plane, p);
  } else if (p.at.flags & kOpCnp) {
    I.on_cnp(*qp, now);
  }
  // Its timers and ACKs now; what it may send waits for poll(), whose
  // scheduler shares the ports between QPs (NAK and timeout resends, which
  // go at once, excepted).
  I.service_qp(*qp, now);
}

// Endpoint requests are connectionless: a port status update names the
// sender's planes that are down; an EV probe is answered with a response.
void Engine::Impl::on_endpoint(uint32_t plane, const Packet& p, Nanos now) {
  if (p.at.opcode == uint8_t(Opcode::mrc_endpoint_response)) {  // the controller's business
    env.endpoint_response(plane, p.bth().psn(), uint8_t(p.eeth().op()), p.eeth().rx_port(), now);
    return;
  }
  ctr.inc(DevCtr::rx_endpoint_requests);
  const uint8_t op = p.erth().op();
  if (op == uint8_t(EndpointOp::port_status_update)) {
    const uint32_t down = p.erth().port_status_mask();
    const IpAddr src = p.src_ip();
    for (Qp& qp : qps) {
      if (!qp.in_use || qp.state != QpState::rts || qp.attr.remote[plane].ip != src) continue;
      const uint32_t newly_down = down & ~qp.peer_planes_down;
      const uint32_t newly_up = qp.peer_planes_down & ~down;
      qp.peer_planes_down = down & ((1u << cfg.num_planes) - 1);
      if (cfg.transport != Transport::mrc) continue;  // one path, no EV health: it waits for its timeout
      if (newly_down) take_planes_out(qp, newly_down, now);
      if (newly_down) resend_in_flight_on(qp, newly_down, now);
      // Back at the peer: probed at once, as a plane back here is. An idle
      // QP had parked those probes while the plane was down, and its EVs
      // stayed out until it had work (a responder's, for good).
      if (newly_up) probe_planes_now(qp, newly_up, now);
    }
    mark_all_stale();
    return;
  }
  if (op != uint8_t(EndpointOp::ev_probe)) return ctr.inc(DevCtr::rx_drop_bad_endpoint_op);
  // Answer on the plane it came in on, to its sender, echoing id and stamp.
  Addressing a;
  a.src_mac = cfg.planes[plane].mac;
  a.dst_mac = p.eth().src_mac();
  a.src_ip = cfg.planes[plane].ip;
  a.dst_ip = p.src_ip();
  a.udp_src_port = p.udp().src_port();
  a.flow_label = p.flow_label();
  a.dscp = cfg.dscp_control;
  std::span<uint8_t> out = env.tx_buffer(plane, 256);
  if (out.size() < 128) return ctr.inc(DevCtr::tx_drop_no_buffer);
  MutablePacket m = begin_frame(out, a, uint8_t(Opcode::mrc_endpoint_response), false, 0);
  m.bth().set_dest_qp(kEndpointQpn);
  m.bth().set_psn(p.bth().psn());
  m.eeth().set_op(op);
  m.eeth().set_rx_port(plane + 1);
  m.eeth().set_tx_timestamp(p.erth().tx_timestamp());
  finish_frame(m, !cfg.icrc_offload);
  env.tx_send(plane, m.at.size);
  ctr.inc(DevCtr::tx_endpoint_responses);
}

// ---------------------------------------------------------------------------
// Timers and transmit

void Engine::Impl::service_qp(Qp& qp, Nanos now) {
  if (qp.ack_now || (qp.unacked_pkts && now >= qp.ack_deadline)) send_sack(qp, false, 0);
  if (qp.state != QpState::rts) return;
  if (qp.snd_una != qp.snd_nxt && now >= qp.rto_deadline) on_rto(qp, now);
  if (qp.state != QpState::rts) return;
  if (qp.snd_una != qp.snd_nxt && now >= qp.rack_timer_at) on_rack_timer(qp, now);
  if (qp.snd_una != qp.snd_nxt && now >= qp.tlp_at) send_tlp(qp, now);
  if (qp.snd_una != qp.snd_nxt && now >= qp.tail_probe_at) send_tail_probe(qp, now);
  if (now >= qp.next_probe_at) send_probes(qp, now);
}

// The QP scheduler: QPs with data and window take turns of tx_burst
// packets, until none can send or each has had tx_budget. QPs of one host
// compete for its ports' TX room; serving them in list order let the first
// ones take it all, so a flow's QPs finished up to 200 us apart and its last
// QPs, alone, could not fill the ports.
void Engine::Impl::transmit_round_robin(Nanos now) {
  const size_t n = active_qps.size();
  if (n == 0) return;
  const uint32_t burst = std::max<uint32_t>(1, cfg.tx_burst);
  const uint32_t budget = std::max(burst, cfg.tx_budget);  // 0 would never send
  // Deficit round robin with a quantum of tx_burst packets: a QP keeps its
  // turn across polls until it has sent tx_burst or cannot send, so a poll
  // with room for one frame does not hand the turn on. The turn moves only
  // when used up: stepping it per poll, polls that send nothing (no room,
  // RX only) fell into a rhythm that gave most turns to one QP
  // (permutation: one of a host's 8 QPs ran at 350 Gb/s, the rest at 60).
  const uint32_t all = (1u << cfg.num_planes) - 1;
  const uint64_t turns = uint64_t((budget + burst - 1) / burst) * n;  // so no QP sends more than tx_budget
  size_t at = tx_rotor % n;
  if (active_qps[at] != tx_turn_qpn) tx_turn_sent = 0;  // a new turn, not what is left of another QP's
  for (uint64_t turn = 0, idle = 0; turn < turns && idle < n; ++turn) {
    tx_turn_qpn = active_qps[at];
    const uint32_t want = burst - std::min(burst - 1, tx_turn_sent);
    // A QP that does not want to send would send nothing and change nothing.
    uint32_t sent = 0;
    if (active_sched[at].wants_tx || active_sched[at].stale) {
      Qp& qp = qps[tx_turn_qpn - first_qpn];
      const uint32_t rtx_head = qp.rtx_head;
      sent = transmit(qp, now, want);
      // Nothing sent and no resend skipped: its timers and wishes are as
      // they were (a host with full ports tries on every poll).
      if (sent || qp.rtx_head != rtx_head) active_sched[at].stale = true;
    }
    tx_turn_sent += sent;
    if (sent < want && ((full_planes | planes_down_mask) & all) == all) break;  // ports full: the turn goes on
    idle = sent ? 0 : idle + 1;
    at = at + 1 == n ? 0 : at + 1;
    tx_turn_sent = 0;
  }
  tx_rotor = static_cast<uint32_t>(at);
}

void Engine::poll(Nanos now) {
  auto& I = *impl_;
  I.last_now = now;
  const Impl::RoomCall room_call(I);
  // Index loop: servicing may activate QPs (appended, stale). A stale QP is
  // serviced: that does nothing unless a timer is due.
  for (size_t i = 0; i < I.active_qps.size(); ++i) {
    if (!I.active_sched[i].stale && I.active_sched[i].due > now) continue;
    I.service_qp(I.qps[I.active_qps[i] - I.first_qpn], now);
    I.active_sched[i].stale = true;
  }
  I.transmit_round_robin(now);
  I.refresh_stale_schedules();
  Impl::ScheduleSummary sum{.valid = true, .at = now};
  for (size_t i = 0; i < I.active_qps.size();) {
    const Impl::QpSchedule& s = I.active_sched[i];
    if (!s.idle) {
      sum.deadline = std::min(sum.deadline, s.due);
      if (s.pace > now) sum.deadline = std::min(sum.deadline, s.pace);
      sum.wants_tx |= s.wants_tx;
      ++i;
      continue;
    }
    I.qps[I.active_qps[i] - I.first_qpn].on_active_list = false;
    I.active_qps[i] = I.active_qps.back();
    I.active_sched[i] = I.active_sched.back();
    I.active_qps.pop_back();
    I.active_sched.pop_back();
    if (i < I.active_qps.size()) I.qps[I.active_qps[i] - I.first_qpn].active_pos = static_cast<uint32_t>(i);
  }
  I.sched_summary = sum;
}

bool Engine::Impl::qp_has_work(const Qp& qp) const {
  return qp.snd_una != qp.snd_nxt || qp.rtx_head != qp.rtx_tail || qp.sq_send != qp.sq_tail ||
         qp.sq_head != qp.sq_tail || qp.unacked_pkts;
}

bool Engine::Impl::qp_idle(const Qp& qp) const {
  if (qp.state != QpState::rts && qp.state != QpState::rtr) return true;
  return !qp_has_work(qp) && qp.next_probe_at == kNever;
}

Nanos Engine::Impl::qp_timer_deadline(const Qp& qp) const {
  if (qp.ack_now) return 0;
  Nanos t = kNever;
  if (qp.unacked_pkts) t = std::min(t, qp.ack_deadline);
  if (qp.state != QpState::rts) return t;
  if (qp.snd_una != qp.snd_nxt) t = std::min({t, qp.rto_deadline, qp.tlp_at, qp.tail_probe_at, qp.rack_timer_at});
  return std::min(t, qp.next_probe_at);
}

bool Engine::Impl::qp_wants_tx(const Qp& qp) const {
  if (qp.state != QpState::rts) return false;
  if (qp.rtx_head != qp.rtx_tail) return true;
  if (qp.sq_send == qp.sq_tail) return false;
  const SqEntry& e = qp.sq[qp.sq_send & qp.sq_mask];
  if (e.error != WcStatus::success) return false;
  const uint32_t offset = e.sent_pkts * qp.attr.pmtu;
  const uint32_t len = std::min(qp.attr.pmtu, e.wr.length - std::min(e.wr.length, offset));
  return psn_diff(qp.snd_nxt, qp.snd_una) < int32_t(qp.window_psns) && window_open(qp, len);
}

Nanos Engine::next_deadline() const {
  auto& I = *impl_;
  if (I.sched_summary.valid && I.sched_summary.at == I.last_now) return I.sched_summary.deadline;
  Nanos t = kNever;
  for (size_t i = 0; i < I.active_qps.size(); ++i) {
    const Impl::QpSchedule s = I.schedule_at(i);
    t = std::min(t, s.due);
    // Pacing is a timer only while the pace, not the window, holds packets back.
    if (s.pace > I.last_now) t = std::min(t, s.pace);
  }
  return t;
}

bool Engine::wants_tx() const {
  auto& I = *impl_;
  if (I.sched_summary.valid) return I.sched_summary.wants_tx;
  for (size_t i = 0; i < I.active_qps.size(); ++i)
    if (I.schedule_at(i).wants_tx) return true;
  return false;
}

uint32_t Engine::tx_full_planes() const { return impl_->full_planes; }

int Engine::post_send(uint32_t qpn, const SendWr& wr) {
  auto& I = *impl_;
  Qp* qp = I.find_qp(qpn);
  if (!qp || qp->state != QpState::rts) return EINVAL;
  const Impl::ScheduleRefresh refresh(I, qp);
  return I.post_send(*qp, wr);
}

int Engine::post_recv(uint32_t qpn, const RecvWr& wr) {
  auto& I = *impl_;
  Qp* qp = I.find_qp(qpn);
  if (!qp || qp->state == QpState::reset || qp->state == QpState::error) return EINVAL;
  if (qp->rq_tail - qp->rq_head > qp->rq_mask) return ENOMEM;
  qp->rq[qp->rq_tail++ & qp->rq_mask] = wr;
  return 0;
}

// ---------------------------------------------------------------------------
// Planes and EVs

void Engine::set_plane_up(uint32_t plane, bool up, Nanos now) {
  auto& I = *impl_;
  if (plane >= I.cfg.num_planes || I.plane_up[plane] == up) return;
  const Impl::ScheduleRefresh refresh(I, nullptr);
  I.plane_up[plane] = up;
  I.planes_down_mask = up ? I.planes_down_mask & ~(1u << plane) : I.planes_down_mask | (1u << plane);
  for (uint32_t qpn : qpns()) {
    Qp& qp = I.qps[qpn - I.first_qpn];
    if (qp.state != QpState::rts) continue;
    if (I.cfg.transport != Transport::mrc) continue;  // one path, no EV health: it waits for its timeout
    if (!up) I.take_planes_out(qp, 1u << plane, now);
    if (!up) I.resend_in_flight_on(qp, 1u << plane, now);
    if (up) I.probe_planes_now(qp, 1u << plane, now);
  }
}

bool Engine::plane_up(uint32_t plane) const { return plane < kMaxPlanes && impl_->plane_up[plane]; }

void Engine::send_port_status(Nanos /*now*/) {
  auto& I = *impl_;
  // One update per peer address and plane, however many QPs lead there.
  std::vector<std::pair<uint32_t, IpAddr>> told;
  for (uint32_t qpn : qpns()) {
    Qp& qp = I.qps[qpn - I.first_qpn];
    if (qp.state != QpState::rts) continue;
    for (uint32_t p = 0; p < I.cfg.num_planes; ++p) {
      if (!I.plane_up[p]) continue;
      const std::pair<uint32_t, IpAddr> peer{p, qp.attr.remote[p].ip};
      if (std::find(told.begin(), told.end(), peer) != told.end()) continue;
      told.push_back(peer);
      I.send_ctrl(qp, p, uint8_t(Opcode::mrc_endpoint_request), 0xC000, 0, [&](const MutablePacket& m) {
        m.bth().set_dest_qp(kEndpointQpn);
        m.erth().set_op(uint8_t(EndpointOp::port_status_update));
        m.erth().set_port_status_mask(I.planes_down_mask);
      });
      I.ctr.inc(DevCtr::tx_port_status);
    }
  }
}

bool Engine::send_endpoint_request(uint32_t plane, const PlaneAddr& dst, wire::EvFormat format, uint32_t ev,
                                   uint8_t op, uint32_t id, uint32_t port_status, uint8_t dscp, Nanos /*now*/) {
  auto& I = *impl_;
  if (plane >= I.cfg.num_planes || !I.plane_up[plane]) return false;
  if (dst.ip.is_v4() != I.cfg.planes[plane].ip.is_v4()) return false;
  Addressing a;
  a.src_mac = I.cfg.planes[plane].mac;
  a.dst_mac = dst.mac;
  a.src_ip = I.cfg.planes[plane].ip;
  a.dst_ip = dst.ip;
  a.dscp = dscp;
  wire::ev_encode(format, ev, a);
  std::span<uint8_t> out = I.env.tx_buffer(plane, 256);
  if (out.size() < 128) {
    I.ctr.inc(DevCtr::tx_drop_no_buffer);
    return false;
  }
  MutablePacket m = wire::begin_frame(out, a, uint8_t(Opcode::mrc_endpoint_request), false, 0);
  if (!m.base) return false;
  m.bth().set_dest_qp(kEndpointQpn);
  m.bth().set_psn(id & kPsnMask);
  m.erth().set_op(op);
  m.erth().set_port_status_mask(port_status);
  wire::finish_frame(m, !I.cfg.icrc_offload);
  I.env.tx_send(plane, m.at.size);
  if (op == uint8_t(EndpointOp::port_status_update)) I.ctr.inc(DevCtr::tx_port_status);
  return true;
}

bool Engine::set_ev_state(uint32_t qpn, uint32_t ev_index, EvState s, Nanos now) {
  auto& I = *impl_;
  Qp* qp = I.find_qp(qpn);
  if (!qp || ev_index >= qp->evs.size() || s == EvState::skip) return false;
  if (I.cfg.transport != Transport::mrc) return false;  // RoCEv2 has one path and no EV health
  const Impl::ScheduleRefresh refresh(I, qp);
  I.ev_mark(*qp, static_cast<uint16_t>(ev_index), s, now, true);
  return true;
}

// ---------------------------------------------------------------------------
// Introspection

bool Engine::qp_info(uint32_t qpn, QpInfo& out) const {
  auto& I = *impl_;
  Qp* qp = I.find_qp(qpn);
  if (!qp) return false;
  out.qpn = qpn;
  out.state = qp->state;
  out.dest_qpn = qp->attr.dest_qpn;
  out.snd_una = qp->snd_una;
  out.snd_nxt = qp->snd_nxt;
  out.rcv_cack = qp->rcv_cack;
  out.inflight_bytes = qp->inflight_bytes;
  out.cwnd_bytes = qp->cc ? qp->cc->window_bytes() : 0;
  out.srtt_ns = qp->srtt;
  out.rttvar_ns = qp->rttvar;
  out.rto_ns = I.rto_for(*qp);
  out.sq_outstanding = qp->sq_tail - qp->sq_head;
  out.sq_posted = qp->sq_tail;
  out.rq_posted = qp->rq_tail - qp->rq_head;
  out.retries = qp->retries;
  out.swept_planes = qp->swept_planes;
  out.peer_planes_down = qp->peer_planes_down;
  out.ctr = qp->ctr;
  return true;
}

// ---------------------------------------------------------------------------
// Prefetching for a simulator's many engines

namespace {

// Where a frame's BTH would start, without parse_frame()'s checks: a
// prefetch needs only a good guess. 0 when it is not a RoCEv2 frame.
size_t guess_bth(std::span<const uint8_t> f) {
  if (f.size() < kEthLen + kVlanTagLen) return 0;
  size_t l3 = kEthLen;
  uint16_t type = load_be16(f.data() + 12);
  if (type == kEtherTypeVlan) {
    type = load_be16(f.data() + l3 + 2);
    l3 += kVlanTagLen;
  }
  const size_t bth = type == kEtherTypeIpv4   ? l3 + kIpv4Len + kUdpLen
                     : type == kEtherTypeIpv6 ? l3 + kIpv6Len + kUdpLen
                                              : 0;
  return bth && f.size() >= bth + kBthLen ? bth : 0;
}

// What a QP's congestion control reads per ACK and per packet sent lies in
// its first two lines.
constexpr size_t kCcBytes = 128;

}  // namespace

// Impl and its QP table are made once, in the constructor.
Engine::PrefetchMap Engine::prefetch_map() const {
  return {impl_.get(), impl_->qps.data(), impl_->first_qpn, static_cast<uint32_t>(impl_->qps.size())};
}

// What on_rx() reads first: the device's fields and the QP's, then, for
// data, the receive bitmap word of its PSN, for feedback, the oldest
// packet in flight (where a SACK's walk starts), and the QP's schedule.
void Engine::prefetch_rx(const PrefetchMap& m, std::span<const uint8_t> frame, unsigned stage) {
  const size_t at = m.impl ? guess_bth(frame) : 0;
  if (!at) return;
  const Bth<const uint8_t> bth(frame.data() + at);
  const uint32_t i = bth.dest_qp() - m.first_qpn;
  if (i >= m.qp_count) return;
  const Impl& I = *static_cast<const Impl*>(m.impl);
  const Qp& qp = static_cast<const Qp*>(m.qps)[i];
  const bool data = op_flags(bth.opcode()) & kOpPayload;
  if (stage == 0) {
    for (const void* p : {static_cast<const void*>(&I.ctr), static_cast<const void*>(&I.qps),
                          static_cast<const void*>(&I.last_now), static_cast<const void*>(&qp),
                          static_cast<const void*>(&qp.attr.ev), static_cast<const void*>(&qp.attr.pmtu)})
      __builtin_prefetch(p);
    if (data) {
      __builtin_prefetch(&qp.ctr.v[size_t(QpCtr::rx_data_pkts)]);
      prefetch_bytes(&qp.rcv_cack,
                     reinterpret_cast<const char*>(&qp.cnp_sent + 1) - reinterpret_cast<const char*>(&qp.rcv_cack));
    } else {
      for (const void* p : {static_cast<const void*>(&qp.win), static_cast<const void*>(&qp.srtt),
                            static_cast<const void*>(&qp.rack_sent_at), static_cast<const void*>(&qp.tlp_at),
                            static_cast<const void*>(&qp.cc), static_cast<const void*>(&qp.evs),
                            static_cast<const void*>(&qp.plane_inflight)})
        __builtin_prefetch(p);
    }
    return;
  }
  if (qp.on_active_list && qp.active_pos < I.active_sched.size()) __builtin_prefetch(&I.active_sched[qp.active_pos]);
  if (!data && qp.cc) prefetch_bytes(qp.cc.get(), kCcBytes);
  if (data) {
    const uint32_t bit = bth.psn() & qp.rcv_bits_mask;
    if ((bit >> 6) < qp.rcv_bits.size()) __builtin_prefetch(&qp.rcv_bits[bit >> 6]);
  } else if (!qp.win.empty()) {
    __builtin_prefetch(&qp.win[qp.snd_una & qp.win_mask]);
  }
}

// poll() walks the schedule, then the QP whose turn it is sends: its
// window, congestion control and spray sets.
void Engine::prefetch_poll(const PrefetchMap& m, unsigned stage) {
  if (!m.impl) return;
  const Impl& I = *static_cast<const Impl*>(m.impl);
  if (stage == 0) {
    for (const void* p : {static_cast<const void*>(&I.last_now), static_cast<const void*>(&I.active_qps),
                          static_cast<const void*>(&I.tx_turn_qpn), static_cast<const void*>(&I.sched_summary)})
      __builtin_prefetch(p);
    return;
  }
  const uint32_t i = I.tx_turn_qpn - m.first_qpn;
  const Qp* qp = i < m.qp_count ? static_cast<const Qp*>(m.qps) + i : nullptr;
  if (stage == 1) {
    if (!I.active_sched.empty())
      prefetch_bytes(I.active_sched.data(), std::min<size_t>(I.active_sched.size(), 8) * sizeof(Impl::QpSchedule));
    if (qp) {
      for (const void* p :
           {static_cast<const void*>(qp), static_cast<const void*>(&qp->sq), static_cast<const void*>(&qp->snd_nxt),
            static_cast<const void*>(&qp->cc), static_cast<const void*>(&qp->evs)})
        __builtin_prefetch(p);
      prefetch_bytes(&qp->plane_picks, reinterpret_cast<const char*>(&qp->spray_step + 1) -
                                           reinterpret_cast<const char*>(&qp->plane_picks));
    }
    return;
  }
  if (qp && qp->cc) prefetch_bytes(qp->cc.get(), kCcBytes);
  if (qp && !qp->sq.empty()) __builtin_prefetch(&qp->sq[qp->sq_send & qp->sq_mask]);
}

bool Engine::schedule_consistent() const {
  const auto& I = *impl_;
  if (I.active_sched.size() != I.active_qps.size()) return false;
  size_t on_list = 0;
  for (const Qp& qp : I.qps) on_list += qp.on_active_list;
  if (on_list != I.active_qps.size()) return false;
  for (size_t i = 0; i < I.active_qps.size(); ++i) {
    const Qp& qp = I.qps[I.active_qps[i] - I.first_qpn];
    const Impl::QpSchedule& s = I.active_sched[i];
    if (!qp.on_active_list || qp.active_pos != i) return false;
    if (s.stale) continue;  // marked for refreshing: not yet relied on
    const bool wants = I.qp_wants_tx(qp);
    if (s.due != I.qp_timer_deadline(qp) || s.wants_tx != wants ||
        s.pace != (wants ? qp.cc->next_send_time() : kNever) || s.idle != I.qp_idle(qp))
      return false;
  }
  // A summary still valid must be what the entries, all fresh, add up to.
  const Impl::ScheduleSummary& sum = I.sched_summary;
  if (!sum.valid) return true;
  Nanos deadline = kNever;
  bool wants_tx = false;
  for (const Impl::QpSchedule& s : I.active_sched) {
    if (s.stale) return false;
    deadline = std::min(deadline, s.due);
    if (s.pace > sum.at) deadline = std::min(deadline, s.pace);
    wants_tx |= s.wants_tx;
  }
  return deadline == sum.deadline && wants_tx == sum.wants_tx;
}

bool Engine::spray_sets_consistent() const {
  for (const Qp& qp : impl_->qps) {
    for (uint32_t p = 0; p < kMaxPlanes; ++p) {
      // A run must be known as one (else picks pay the load it saves), and
      // only a run.
      const auto& set = qp.active[p];
      if (qp.spray_count[p] != set.size()) return false;
      bool run = !set.empty() && (set.size() < 2 || set[1] > set[0]);
      for (size_t i = 2; run && i < set.size(); ++i) run = set[i] - set[i - 1] == set[1] - set[0];
      if (run != (qp.spray_step[p] != 0)) return false;
      for (size_t i = 0; run && i < set.size(); ++i)
        if (set[i] != qp.spray_first[p] + i * qp.spray_step[p]) return false;
    }
  }
  return true;
}

bool Engine::bad_evs_probed() const {
  for (const Qp& qp : impl_->qps) {
    if (!qp.in_use || qp.state != QpState::rts || qp.probes_parked) continue;
    uint32_t scouting = 0;  // planes with a swept EV whose probe is due
    for (size_t i = 0; i < qp.evs.size(); ++i)
      if (qp.evs[i].state == EvState::assumed_bad && qp.ev_cold[i].out_by == EvCold::OutBy::sweep &&
          qp.ev_cold[i].probe_at != kNever)
        scouting |= 1u << qp.evs[i].plane;
    for (size_t i = 0; i < qp.evs.size(); ++i) {
      if (qp.evs[i].state != EvState::assumed_bad || qp.ev_cold[i].probe_at != kNever) continue;
      const bool waits_for_scout = (scouting >> qp.evs[i].plane) & 1;
      if (!waits_for_scout) return false;
    }
  }
  return true;
}

std::vector<uint32_t> Engine::qpns() const {
  std::vector<uint32_t> out;
  for (const Qp& qp : impl_->qps)
    if (qp.in_use) out.push_back(qp.qpn);
  return out;
}

std::vector<EvInfo> Engine::ev_info(uint32_t qpn) const {
  std::vector<EvInfo> out;
  Qp* qp = impl_->find_qp(qpn);
  if (!qp) return out;
  for (size_t i = 0; i < qp->evs.size(); ++i) {
    const Ev& e = qp->evs[i];
    Counters<EvCtr> ctr = qp->ev_cold[i].ctr;
    ctr.v[size_t(EvCtr::tx_pkts)] = e.tx_pkts;
    ctr.v[size_t(EvCtr::acks)] = e.acks;
    out.push_back(EvInfo{e.value, e.plane, e.state, e.active, ctr});
  }
  return out;
}

}  // namespace mrc::engine
