// Per-packet EV choice and EV health: GOOD, SKIP (one rotation), ASSUMED_BAD
// (probed until it answers) and DENIED (controller only). Failed EVs are
// replaced from the same plane's backups so plane load stays equal.
#include <algorithm>

#include "engine/engine_impl.h"
#include "engine/prefetch.h"

namespace mrc::engine {

using namespace wire;

// The EV table of a QP. Without a configured profile an MRC QP gets 16 UDP
// EVs per plane from 0xC000 up; a RoCEv2 QP gets one source port and one
// plane, as a RoCEv2 NIC binds a QP to one port.
void Engine::Impl::build_evs(Qp& qp) {
  qp.evs.clear();
  qp.ev_cold.clear();
  for (auto& v : qp.active) v.clear();
  for (auto& v : qp.backups) v.clear();
  qp.active_good = 0;
  qp.next_probe_at = kNever;
  qp.plane_losses.fill(0);
  qp.plane_acked_sent_at.fill(0);
  qp.swept_planes = 0;
  qp.plane_scout.fill(kNoScout);
  qp.sack_rcvd_newest = 0;
  const uint32_t planes = cfg.num_planes;
  std::vector<EvEntry> entries = qp.attr.ev.evs;
  if (cfg.transport == Transport::rocev2) {
    const uint32_t sport = entries.empty() ? 0xC000 | (qp.qpn & 0x3FFF) : entries[0].value;
    const uint8_t plane = entries.empty() ? static_cast<uint8_t>(qp.qpn % planes) : entries[0].plane;
    entries = {EvEntry{sport, plane}};
    qp.rocev2_sport = sport;
    qp.rocev2_plane = plane;
  } else if (entries.empty()) {
    for (uint32_t i = 0; i < 16 * planes; ++i) entries.push_back(EvEntry{0xC000 + i, static_cast<uint8_t>(i % planes)});
  }
  const uint32_t per_plane = qp.attr.ev.active_per_plane;
  // EVs move between a plane's spray set and its spares on the fast path:
  // give both room for all of the plane's EVs now so that never allocates.
  std::array<uint32_t, kMaxPlanes> on_plane{};
  for (const EvEntry& e : entries) ++on_plane[e.plane];
  for (uint32_t p = 0; p < kMaxPlanes; ++p) {
    qp.active[p].reserve(on_plane[p]);
    qp.backups[p].reserve(on_plane[p]);
  }
  qp.evs.reserve(entries.size());
  std::array<uint32_t, kMaxPlanes> seen{};
  for (const EvEntry& e : entries) {
    Ev ev;
    ev.value = e.value;
    ev.plane = e.plane;
    const uint16_t idx = static_cast<uint16_t>(qp.evs.size());
    ev.active = per_plane == 0 || seen[e.plane]++ < per_plane;
    (ev.active ? qp.active[e.plane] : qp.backups[e.plane]).push_back(idx);
    qp.active_good += ev.active;
    qp.evs.push_back(ev);
  }
  qp.ev_cold.assign(qp.evs.size(), EvCold{});
  refresh_spray_planes(qp);
}

bool Engine::Impl::plane_usable(const Qp& qp, uint32_t plane) const {
  return (usable_planes(qp) >> plane) & 1;
}

// Planes that are up here, not reported down by the peer, and have EVs to
// spray on; one mask so the per-packet choice tests a bit per plane.
uint32_t Engine::Impl::usable_planes(const Qp& qp) const {
  return qp.spray_planes & ~planes_down_mask & ~qp.peer_planes_down;
}

void Engine::Impl::refresh_spray_planes(Qp& qp) {
  qp.spray_planes = 0;
  for (uint32_t p = 0; p < cfg.num_planes; ++p) {
    const auto& set = qp.active[p];
    if (!set.empty()) qp.spray_planes |= 1u << p;
    const int step = set.size() < 2 ? 1 : set[1] - set[0];
    bool arithmetic = !set.empty() && step > 0;
    for (size_t i = 1; arithmetic && i < set.size(); ++i) arithmetic = set[i] - set[i - 1] == step;
    qp.spray_count[p] = static_cast<uint16_t>(set.size());
    qp.spray_first[p] = set.empty() ? 0 : set[0];
    qp.spray_step[p] = arithmetic ? static_cast<uint16_t>(step) : 0;
  }
}

// A plane with TX room and the fewest packets in flight, then a
// pseudo-random EV of its spray set that is not skipping (the less loaded of
// two with ev_two_choices). Choosing at send time, not enqueue time, keeps
// packets off planes that cannot take them. A resend (avoid_ev >= 0) avoids
// its last EV's plane when it can.
int Engine::Impl::pick_ev(Qp& qp, int avoid_ev, bool need_room) {
  if (cfg.transport == Transport::rocev2) {
    const uint32_t p = qp.rocev2_plane;
    return plane_up[p] && (!need_room || has_room(p)) ? 0 : -1;
  }
  // The least-loaded usable plane; only the winner is asked for TX room,
  // and the others only if it has none.
  const uint32_t planes = cfg.num_planes;
  uint32_t usable = usable_planes(qp);
  // A resend goes on another plane when there is one: the one that lost it
  // may have failed, and the same plane again risks the same fate (a tail
  // packet lost twice on a dead plane waits for the timeout). It waits for
  // room there rather than fall back to its own plane: a dead plane drains
  // at line rate and always has room (silent plane failure, 0.83 -> 0.74 of
  // ideal with that fallback). A port that stays full loses what it holds,
  // and its EVs go out of use.
  if (avoid_ev >= 0) {
    const uint32_t other = usable & ~(1u << qp.evs[avoid_ev].plane);
    if (other) usable = other;
  }
  if (++qp.pick_rotor >= planes) qp.pick_rotor = 0;  // rotates ties between planes
  // Every plane it may use is full: what the search below would find, and
  // the planes it would have asked noted as full. Nearly every poll of a
  // busy simulated host ends here, its ports having filled.
  if (need_room && usable && !(usable & ~planes_known_full())) {
    full_planes |= usable;
    return -1;
  }
  int best = -1;
  uint32_t best_load = ~0u;
  for (uint32_t k = 0, p = qp.pick_rotor; k < planes; ++k, p = p + 1 == planes ? 0 : p + 1) {
    if (((usable >> p) & 1) && qp.plane_inflight[p] < best_load) {
      best = static_cast<int>(p);
      best_load = qp.plane_inflight[p];
    }
  }
  if (best >= 0 && need_room && !has_room(best)) {
    best = -1;
    best_load = ~0u;
    for (uint32_t p = 0; p < planes; ++p) {
      if (((usable >> p) & 1) && qp.plane_inflight[p] < best_load && has_room(p)) {
        best = static_cast<int>(p);
        best_load = qp.plane_inflight[p];
      }
    }
  }
  if (best < 0) return -1;
  // The send that follows stamps this plane's frame template (the one
  // without an immediate, as all but a WRITE_IMM's last packet use): load it
  // while the EV draws below wait on theirs.
  if (size_t(best) * 2 < qp.tmpl.size()) prefetch_bytes(qp.tmpl.data() + best * 2, sizeof(wire::FrameTemplate));
  const auto& set = qp.active[best];
  const uint32_t picks = ++qp.plane_picks[best];
  const uint32_t n = qp.spray_count[best];
  const uint32_t first = qp.spray_first[best];
  const uint32_t step = qp.spray_step[best];
  auto member = [&](uint32_t i) -> int { return step ? static_cast<int>(first + i * step) : set[i]; };
  // The first EV from a random start that is not skipping (nor avoided).
  auto scan = [&](uint32_t i) {
    int fallback = -1;
    for (uint32_t k = 0; k < n; ++k, i = i + 1 == n ? 0 : i + 1) {
      const int idx = member(i);
      Ev& ev = qp.evs[idx];
      if (ev.state == EvState::skip) {
        if (still_skipping(picks, ev.skip_until)) {
          if (fallback < 0) fallback = idx;
          continue;
        }
        ev.state = EvState::good;  // one rotation has passed
      }
      if (idx == avoid_ev && n > 1) {
        fallback = idx;
        continue;
      }
      return idx;
    }
    return fallback;  // every EV of the plane is skipping: use one anyway
  };
  const int a = scan(rng.below(n));
  if (!cfg.ev_two_choices || a < 0 || n < 2) return a;
  // Two random choices, the one with fewer packets in flight: a path whose
  // queues hold packets longer keeps more of them out, so it is chosen less.
  const int b = scan(rng.below(n));
  return b >= 0 && qp.evs[b].inflight < qp.evs[a].inflight ? b : a;
}

void Engine::Impl::ev_skip(Qp& qp, uint16_t idx) {
  Ev& ev = qp.evs[idx];
  if (ev.state != EvState::good) return;
  ev.state = EvState::skip;
  const uint32_t rotation =
      cfg.skip_picks ? std::min(cfg.skip_picks, kMaxSkipPicks) : static_cast<uint32_t>(qp.active[ev.plane].size());
  ev.skip_until = qp.plane_picks[ev.plane] + rotation;
  qp.ev_cold[idx].ctr.inc(EvCtr::state_changes);
}

// A packet sent on this EV was lost without a trim: MRC takes silence as a
// path failure and stops using the EV at once.
void Engine::Impl::ev_lost(Qp& qp, uint16_t idx, Nanos sent_at, Nanos now) {
  Ev& ev = qp.evs[idx];
  qp.ev_cold[idx].ctr.inc(EvCtr::losses);
  ++qp.ev_cold[idx].drops;
  if (cfg.transport != Transport::mrc) return;
  if (ev.state == EvState::good || ev.state == EvState::skip) {
    ev_mark(qp, idx, EvState::assumed_bad, now, false);
    if (ev.state == EvState::assumed_bad) {
      qp.ev_cold[idx].out_by = EvCold::OutBy::loss;
      qp.ev_cold[idx].out_at = now;
    }
  }
  // Losses in a row on one plane, each of a packet sent after the plane's
  // newest acknowledged one while another plane has delivered a later one:
  // this plane has gone silent, not the peer (a stalled peer answers on no
  // plane). Never the last plane with EVs to spray on.
  const uint32_t plane = ev.plane;
  if (!cfg.plane_silent_losses || sent_at <= qp.plane_acked_sent_at[plane]) return;
  bool others_deliver = false;
  for (uint32_t p = 0; p < cfg.num_planes; ++p) others_deliver |= p != plane && qp.plane_acked_sent_at[p] > sent_at;
  if (!others_deliver) return;
  if (++qp.plane_losses[plane] == 1) qp.plane_streak_at[plane] = now;
  if (qp.plane_losses[plane] < cfg.plane_silent_losses) return;
  qp.plane_losses[plane] = 0;
  if (!(usable_planes(qp) & ~(1u << plane))) return;
  bool marked = false;
  for (uint16_t i = 0; i < qp.evs.size(); ++i) {
    const EvState st = qp.evs[i].state;
    if (qp.evs[i].plane != plane) continue;
    EvCold& c = qp.ev_cold[i];
    if (st == EvState::assumed_bad && c.out_by == EvCold::OutBy::loss && c.out_at >= qp.plane_streak_at[plane])
      c.out_by = EvCold::OutBy::sweep;  // the streak's own first losses
    if (st != EvState::good && st != EvState::skip) continue;
    ev_mark(qp, i, EvState::assumed_bad, now, false);
    const bool out = qp.evs[i].state == EvState::assumed_bad;
    if (out) qp.ev_cold[i].out_by = EvCold::OutBy::sweep;
    marked |= out;
  }
  if (!marked) return;
  qp.ctr.inc(QpCtr::plane_silent);
  qp.swept_planes |= 1u << plane;
  qp.sweep_tip_sent_at[plane] = sent_at;
}

// A packet declared lost on this EV has arrived: it was late, and the path
// was delivering. Silence is the only evidence MRC takes against a path
// (spec 1.6), so an EV a loss took out goes back as a probe answered with
// SKIP_ONCE would put it: it sits out one rotation, its queue being the deep
// one. Without this, two CPUs' scheduling delays kept dozens of a memif
// plane's EVs waiting for probes. Any of its packets proven late will do,
// not only the one that took it out: requiring that one did worse under
// 0.1 % random loss (0.826 of ideal against 0.840, twenty seeds). So a path
// that failed after the packet was sent comes back too, once per such
// packet, and is taken out again by its next loss. A swept plane waits for
// its own proof (plane_sweep_disproved): when a whole plane fails, many of
// its packets sent before the failure may arrive late.
void Engine::Impl::ev_loss_disproved(Qp& qp, uint16_t idx, Nanos now) {
  const Ev& ev = qp.evs[idx];
  if (ev.state != EvState::assumed_bad || qp.ev_cold[idx].out_by != EvCold::OutBy::loss) return;
  if (!plane_usable_for(qp, ev.plane) || ((qp.swept_planes >> ev.plane) & 1)) return;
  qp.ctr.inc(QpCtr::ev_loss_disproved);
  ev_mark(qp, idx, EvState::good, now, true);
  ev_skip(qp, idx);
}

// A packet sent only on this swept plane, no earlier than the last loss of
// its streak, was acknowledged: the plane was behind, not silent. A plane
// that failed delivers nothing sent after its failure, so this does not
// fire for one; a plane that loses most packets, not all, may swing in and
// out, each swing costing a streak of losses. The EVs the streak took out
// come back with the plane: those it swept and those its own losses took
// out (relabelled at the sweep); not those out for a loss before it.
void Engine::Impl::plane_sweep_disproved(Qp& qp, uint32_t plane, Nanos now) {
  if (return_swept(qp, plane, now, false)) qp.ctr.inc(QpCtr::plane_silent_disproved);
}

// The EVs a sweep of this plane took out go back into service (SKIP for a
// rotation with `skip`); false if there were none or the plane is unusable.
bool Engine::Impl::return_swept(Qp& qp, uint32_t plane, Nanos now, bool skip) {
  qp.swept_planes &= ~(1u << plane);
  if (!plane_usable_for(qp, plane)) return false;
  bool restored = false;
  for (uint16_t i = 0; i < qp.evs.size(); ++i) {
    if (qp.evs[i].plane != plane || qp.evs[i].state != EvState::assumed_bad ||
        qp.ev_cold[i].out_by != EvCold::OutBy::sweep)
      continue;
    ev_mark(qp, i, EvState::good, now, true);
    if (skip) ev_skip(qp, i);
    restored = true;
  }
  return restored;
}

// A swept EV was given another cause, came back or gave up scouting. Once
// none of the plane's EVs is out for its sweep, the sweep no longer stands in
// the way of late packets bringing back EVs out for losses of their own
// (ev_loss_disproved); left set, it held them out until an ACK on the plane.
void Engine::Impl::sweep_released(Qp& qp, uint32_t plane) {
  if (!((qp.swept_planes >> plane) & 1)) return;
  for (uint16_t i = 0; i < qp.evs.size(); ++i)
    if (qp.evs[i].plane == plane && qp.evs[i].state == EvState::assumed_bad &&
        qp.ev_cold[i].out_by == EvCold::OutBy::sweep)
      return;
  qp.swept_planes &= ~(1u << plane);
}

// Up here and not reported down by the peer: EVs on a plane the peer
// reported down stay ASSUMED_BAD, as their probes' answers are how the plane's
// return is learnt if the peer's "up" is lost.
bool Engine::Impl::plane_usable_for(const Qp& qp, uint32_t plane) const {
  return plane_up[plane] && !((qp.peer_planes_down >> plane) & 1);
}

void Engine::Impl::ev_mark(Qp& qp, uint16_t idx, EvState to, Nanos now, bool force) {
  Ev& ev = qp.evs[idx];
  const EvState from = ev.state;
  if (from == to || (from == EvState::denied && to == EvState::assumed_bad)) {
    if (from == EvState::assumed_bad && to == from) {  // a new cause: its row of answers starts again
      EvCold& c = qp.ev_cold[idx];
      const bool was_swept = c.out_by == EvCold::OutBy::sweep;
      // A swept EV the scout was probing for is probed on its own again
      // (once its plane has no scout left: send_probes).
      if (was_swept && c.probe_at == kNever && !qp.probes_parked) {
        c.probe_backoff = cfg.probe_interval;
        c.probe_at = now + c.probe_backoff;
        qp.next_probe_at = std::min(qp.next_probe_at, c.probe_at);
        activate(qp);
      }
      if (was_swept) swept_ev_leaves(qp, idx, c.probe_at, now);
      c.out_by = EvCold::OutBy::other;
      c.probe_answers = 0;
      c.confirming = c.probe_outstanding = false;
      if (was_swept) sweep_released(qp, ev.plane);
    }
    return;
  }
  const bool leaving_service = to == EvState::assumed_bad || to == EvState::denied;
  auto& set = qp.active[ev.plane];
  auto& spare = qp.backups[ev.plane];
  if (leaving_service && ev.active) {
    // A backup of the same plane takes its place; without one the QP loses
    // an active EV, which ev_min_active bounds unless the cause is certain.
    if (spare.empty() && !force && qp.active_good <= qp.attr.ev.ev_min_active) {
      qp.ctr.inc(QpCtr::ev_min_active_kept);
      return;
    }
    std::erase(set, idx);
    ev.active = false;
    if (!spare.empty()) {
      const uint16_t b = spare.front();
      spare.erase(spare.begin());
      qp.evs[b].active = true;
      set.push_back(b);
    } else {
      --qp.active_good;
    }
  } else if (leaving_service) {
    std::erase(spare, idx);
  }
  ev.state = to;
  EvCold& cold = qp.ev_cold[idx];
  if (cold.out_by == EvCold::OutBy::sweep) swept_ev_leaves(qp, idx, cold.probe_at, now);
  cold.ctr.inc(EvCtr::state_changes);
  cold.silent_probes = 0;
  cold.probe_answers = 0;
  cold.confirming = cold.probe_outstanding = false;
  const bool was_swept = cold.out_by == EvCold::OutBy::sweep;
  cold.out_by = EvCold::OutBy::other;
  if (was_swept) sweep_released(qp, ev.plane);
  if (to == EvState::assumed_bad) {
    qp.ctr.inc(QpCtr::ev_marked_bad);
    cold.probe_backoff = cfg.probe_interval;
    cold.probe_at = now + cold.probe_backoff;
    qp.next_probe_at = std::min(qp.next_probe_at, cold.probe_at);
    activate(qp);
  } else {
    cold.probe_at = kNever;
  }
  if (to == EvState::good && !ev.active) {
    // Back in service: refill the plane's spray set first, else keep as a spare.
    const uint32_t target = qp.attr.ev.active_per_plane;
    if (target == 0 || set.size() < target) {
      ev.active = true;
      set.push_back(idx);
      ++qp.active_good;
    } else {
      spare.push_back(idx);
    }
  }
  refresh_spray_planes(qp);
  // SKIP is invisible to the controller: for events it counts as GOOD.
  const bool was_good = from == EvState::good || from == EvState::skip;
  if ((was_good && to == EvState::assumed_bad) || (from == EvState::assumed_bad && to == EvState::good)) {
    env.ev_event(qp.qpn, idx, ev.value, was_good ? EvState::good : from, to, cold.drops);
    cold.drops = 0;
  }
}

void Engine::Impl::ev_probe_reply(Qp& qp, uint16_t idx, bool clean, uint16_t echoed_ts, Nanos now) {
  Ev& ev = qp.evs[idx];
  qp.ev_cold[idx].ctr.inc(EvCtr::probe_replies);
  qp.ctr.inc(QpCtr::rx_probe_replies);
  if (ev.state != EvState::assumed_bad) return;
  if (!plane_up[ev.plane]) return;
  // The peer answers only on planes it has up: an answer on a plane it
  // reported down says that plane is back, though its port status saying
  // so was lost (sent once, never resent), which would leave the plane out
  // of use for good, and a QP with no other plane stalled.
  if ((qp.peer_planes_down >> ev.plane) & 1) {
    qp.peer_planes_down &= ~(1u << ev.plane);
    qp.ctr.inc(QpCtr::peer_plane_up_by_probe);
  }
  EvCold& cold = qp.ev_cold[idx];
  if (cfg.probe_confirmations > 1) {
    // One answer per probe, to the last one sent: a reply the fabric
    // duplicated, a second answer to the same probe, or a late answer to an
    // earlier probe is not another probe answered. The reply echoes the
    // probe's send stamp. A floor of half the least probe round trip instead,
    // learnt only from the answers it let through, once set by an answer that
    // waited behind a queue turned away every quicker one after it, for good.
    if (!cold.probe_outstanding || echoed_ts != probe_stamp(cold.probe_sent_at))
      return qp.ctr.inc(QpCtr::rx_probe_replies_unmatched);
    cold.probe_outstanding = false;
    if (++cold.probe_answers < cfg.probe_confirmations) {
      qp.ctr.inc(QpCtr::ev_probe_confirming);
      // An answered path carries on the plane's row of answers.
      if (cold.out_by == EvCold::OutBy::sweep) qp.plane_scout[ev.plane] = idx;
      cold.confirming = true;
      cold.silent_probes = 0;  // answered: not a probe idle_probe_limit counts
      cold.probe_at = now;
      qp.next_probe_at = now;
      activate(qp);
      return;
    }
  }
  qp.ctr.inc(QpCtr::ev_recovered);
  const bool scout = cold.out_by == EvCold::OutBy::sweep;
  ev_mark(qp, idx, EvState::good, now, true);
  if (!clean) ev_skip(qp, idx);
  // The swept plane answers: its other swept EVs come back with this one.
  if (scout) {
    return_swept(qp, ev.plane, now, !clean);
    qp.ctr.inc(QpCtr::plane_sweep_probed_back);
  }
}

// The next of the plane's swept EVs after `from`, in turn, scouts for the
// plane from now on, its first probe due at `due`, where `from`'s back-off
// left off; false if there is no other.
bool Engine::Impl::pass_scout(Qp& qp, uint16_t from, Nanos due) {
  const uint32_t plane = qp.evs[from].plane;
  const size_t n = qp.evs.size();
  for (size_t k = 1; k < n; ++k) {
    const uint16_t j = static_cast<uint16_t>((from + k) % n);
    EvCold& next = qp.ev_cold[j];
    if (qp.evs[j].plane != plane || qp.evs[j].state != EvState::assumed_bad || next.out_by != EvCold::OutBy::sweep)
      continue;
    const EvCold& was = qp.ev_cold[from];
    next.probe_at = due;
    next.probe_backoff = was.probe_backoff;
    next.silent_probes = was.silent_probes;  // the plane's silence, for idle_probe_limit
    next.probe_answers = 0;
    next.confirming = false;
    qp.plane_scout[plane] = j;
    qp.next_probe_at = std::min(qp.next_probe_at, due);
    if (due != kNever) activate(qp);
    return true;
  }
  return false;
}

// A swept EV leaves its plane's sweep (back in service, or another cause).
// If it was the scout, the next swept EV scouts on its schedule; once none
// is left, the plane's other ASSUMED_BAD EVs, held back behind the scout
// (send_probes), are probed again.
void Engine::Impl::swept_ev_leaves(Qp& qp, uint16_t idx, Nanos due, Nanos now) {
  const uint32_t plane = qp.evs[idx].plane;
  if (qp.plane_scout[plane] == idx && pass_scout(qp, idx, due)) return;
  for (uint16_t i = 0; i < qp.evs.size(); ++i)
    if (i != idx && qp.evs[i].plane == plane && qp.evs[i].state == EvState::assumed_bad &&
        qp.ev_cold[i].out_by == EvCold::OutBy::sweep)
      return;
  qp.next_probe_at = std::min(qp.next_probe_at, now);
  activate(qp);
}

// The ports of these planes went down (here, or the peer says so): their
// EVs go out, and those in service (or swept) are probed for through one
// scout per plane, as a swept plane's are, instead of each on its own (a
// probe per EV per back-off for as long as the plane stays down). EVs out
// for causes of their own keep them, as a sweep leaves them (ev_lost): one
// answer for the plane does not vouch for their paths. The port's state
// replaces any sweep's wait for proof by data.
void Engine::Impl::take_planes_out(Qp& qp, uint32_t planes, Nanos now) {
  for (uint16_t i = 0; i < qp.evs.size(); ++i) {
    if (!((planes >> qp.evs[i].plane) & 1)) continue;
    const EvState was = qp.evs[i].state;
    const bool whole = was == EvState::good || was == EvState::skip || qp.ev_cold[i].out_by == EvCold::OutBy::sweep;
    ev_mark(qp, i, EvState::assumed_bad, now, true);
    if (whole && qp.evs[i].state == EvState::assumed_bad) qp.ev_cold[i].out_by = EvCold::OutBy::sweep;
  }
  qp.swept_planes &= ~planes;
}

// Probes every ASSUMED_BAD EV that is due, doubling its interval each time
// it stays silent, and works out when the next probe is due. A probe is a
// control frame and, like a SACK, does not wait for TX room behind data:
// waiting kept EVs that a late packet had taken out of service out for
// another probe interval (seed 1: permutation 0.862 -> 0.878 of ideal,
// 1 % loss 66 -> 74 Tb/s).
void Engine::Impl::send_probes(Qp& qp, Nanos now) {
  Nanos next = kNever;
  // Planes out whole. Their scout probes for them alone: the plane's EVs out
  // for causes of their own wait until it answers (swept_ev_leaves), so a
  // dead plane costs one probe per back-off, not one per such EV as well.
  uint32_t swept = 0;
  for (uint16_t i = 0; i < qp.evs.size(); ++i)
    if (qp.evs[i].state == EvState::assumed_bad && qp.ev_cold[i].out_by == EvCold::OutBy::sweep)
      swept |= 1u << qp.evs[i].plane;
  for (uint16_t i = 0; i < qp.evs.size(); ++i) {
    const Ev& ev = qp.evs[i];
    if (ev.state != EvState::assumed_bad) continue;
    EvCold& cold = qp.ev_cold[i];
    if (cold.out_by != EvCold::OutBy::sweep) {
      if ((swept >> ev.plane) & 1) {
        // Held back, due at once when its plane's scout answers. Not kNever,
        // which is a parked probe: a QP whose probes had parked then kept
        // it out for good, though its plane came back (probe_planes_now)
        // and the scout's answer brought the rest back.
        if (cold.probe_at != kNever) cold.probe_at = now;
        continue;
      }
      if (cold.probe_at == kNever && !qp.probes_parked) cold.probe_at = now;  // none due: no EV goes unprobed
    }
    // A swept plane is probed through one of its swept EVs at a time, its
    // scout, whose answer brings them all back (ev_probe_reply): a probe
    // for each of a plane's EVs at once, answered, swept again, filled a
    // software port's ring with probes, and the data behind them, late,
    // set off the next sweep.
    const bool scout = cold.out_by == EvCold::OutBy::sweep;
    if (scout) {
      uint16_t& s = qp.plane_scout[ev.plane];
      if (s >= qp.evs.size() || qp.evs[s].plane != ev.plane || qp.evs[s].state != EvState::assumed_bad ||
          qp.ev_cold[s].out_by != EvCold::OutBy::sweep)
        s = i;
      if (s != i) {
        cold.probe_at = kNever;
        continue;
      }
      if (cold.probe_at == kNever && !qp.probes_parked) cold.probe_at = now;  // a new scout
    }
    if (cold.probe_at <= now && plane_up[ev.plane]) {
      if (cfg.idle_probe_limit && cold.silent_probes >= cfg.idle_probe_limit && !qp_has_work(qp)) {
        cold.probe_at = kNever;
        qp.probes_parked = true;
        qp.ctr.inc(QpCtr::probes_parked);
        continue;
      }
      ++cold.silent_probes;
      const bool answered_last = cold.confirming;
      if (!cold.confirming) cold.probe_answers = 0;  // the last probe went unanswered
      cold.confirming = false;
      const bool sent =
          send_ctrl(qp, ev.plane, uint8_t(Opcode::mrc_probe), ev.value, qp.snd_nxt, [&](const MutablePacket& m) {
            m.peth().set_type(kPethType);
            m.peth().set_tx_timestamp(probe_stamp(now));
            m.peth().set_probe_id(i);
            m.peth().set_spdcid(qp.qpn & 0xFFFF);
            m.peth().set_dpdcid(qp.attr.dest_qpn & 0xFFFF);
          });
      if (sent) {
        cold.ctr.inc(EvCtr::probes);
        qp.ctr.inc(QpCtr::tx_probes);
        cold.probe_outstanding = true;
        cold.probe_sent_at = now;
      }
      // From 0 (probed at once when its plane came back up) to one interval.
      // Probes that follow an answer double it too: a path that keeps
      // breaking its row of answers is probed less and less often.
      cold.probe_backoff = std::clamp(cold.probe_backoff * 2, cfg.probe_interval, cfg.probe_interval_max);
      cold.probe_at = now + cold.probe_backoff;
      // The scout's next probe goes out on the next swept EV's path, one
      // back-off on, unless this one is confirming a row of answers: a path
      // of the plane still broken holds up no other, and a plane that stays
      // silent costs one probe per back-off, not one per EV (scouts that
      // gave up and probed on their own sent 12 % of a ring port's frames).
      if (scout && !answered_last && pass_scout(qp, i, cold.probe_at)) {
        next = std::min(next, cold.probe_at);
        cold.probe_at = kNever;
        continue;
      }
    } else if (cold.probe_at <= now) {
      cold.probe_at = now + cfg.probe_interval;  // plane down: try again later
    }
    next = std::min(next, cold.probe_at);
  }
  qp.next_probe_at = next;
}

// The planes are back (here, or the peer says so): their ASSUMED_BAD EVs
// are probed at once, from a fresh back-off, parked or not.
void Engine::Impl::probe_planes_now(Qp& qp, uint32_t planes, Nanos now) {
  for (size_t i = 0; i < qp.evs.size(); ++i) {
    if (!((planes >> qp.evs[i].plane) & 1) || qp.evs[i].state != EvState::assumed_bad) continue;
    EvCold& cold = qp.ev_cold[i];
    cold.probe_at = now, cold.probe_backoff = 0, cold.silent_probes = 0, cold.probe_answers = 0;
  }
  qp.next_probe_at = now;
  activate(qp);
}

void Engine::Impl::unpark_probes(Qp& qp) {
  qp.probes_parked = false;
  for (uint16_t i = 0; i < qp.evs.size(); ++i) {
    EvCold& cold = qp.ev_cold[i];
    if (qp.evs[i].state != EvState::assumed_bad || cold.probe_at != kNever) continue;
    cold.probe_at = 0;  // due at the next poll, whatever its time
    cold.probe_backoff = 0;
    cold.silent_probes = 0;
    cold.probe_answers = 0;
    qp.next_probe_at = 0;
  }
}

}  // namespace mrc::engine
