// The OCP MRC controller API (mrc_ctl.h) on mrc-nic devices. Profiles live
// in the NIC (they outlive the controller); each call reads the profile,
// applies the attribute mask and operation here, and hands the whole new
// profile to the NIC, which checks the life cycle and limits and applies
// EV state changes to the QPs using it. The NIC takes it only if nothing
// wrote the profile since the read; otherwise the call starts again.
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "internal.h"
#include "mrc_ctl.h"

using namespace mrc::lib;

namespace {

const char* g_algorithms[] = {"uet-1.0-nscc", "dcqcn", nullptr};

int ctl_fail(int e) {
  errno = e;
  return -1;
}

Context* ctx_of(mrc_context* m) { return m ? m->ctx : nullptr; }

int query_ctl(Context& c, abi::CtlDevice& d) {
  abi::Request rq{};
  rq.op = abi::Op::ctl_query;
  abi::Response rs{};
  if (int e = c.call(rq, rs); e) return e;
  d = rs.ctl_device;
  return 0;
}

bool same_ev(const abi::CtlEvEntry& en, const mrc_ctl_ev& ev) {
  return en.port == ev.port && std::memcmp(en.val, ev.val, sizeof en.val) == 0;
}

uint32_t to_wire_state(enum mrc_ctl_ev_state s) { return s == MRC_CTL_EV_DENIED ? MRC_CTL_EV_DENIED : MRC_CTL_EV_GOOD; }

struct EvProfile {
  abi::CtlEv e{};
  std::vector<abi::CtlEvEntry> entries;
};

int get_ev(Context& c, uint64_t id, EvProfile& p) {
  abi::Request rq{};
  rq.op = abi::Op::ctl_get_ev;
  rq.profile_id = id;
  abi::Response rs{};
  std::vector<uint8_t> out;
  if (int e = c.call(rq, rs, nullptr, 0, {}, &out); e) return e;
  p.e = rs.ctl_ev;
  p.e.id = id;
  p.entries.resize(out.size() / sizeof(abi::CtlEvEntry));
  if (!p.entries.empty()) std::memcpy(p.entries.data(), out.data(), p.entries.size() * sizeof(abi::CtlEvEntry));
  return 0;
}

int put_ev(Context& c, EvProfile& p) {
  abi::Request rq{};
  rq.op = abi::Op::ctl_put_ev;
  rq.ctl_ev = p.e;
  rq.ctl_ev.nentries = uint32_t(p.entries.size());
  abi::Response rs{};
  return c.call(rq, rs, nullptr, 0,
                {reinterpret_cast<const uint8_t*>(p.entries.data()), p.entries.size() * sizeof(abi::CtlEvEntry)});
}

// Profiles are read, changed here and written back whole; the NIC refuses a
// write made from a stale read (ESTALE: another controller changed the
// profile in between), and the change is made again from a fresh read, so
// both land. `attempt` returns 0 or an errno value.
template <class Attempt>
int from_fresh_reads(Attempt&& attempt) {
  constexpr int kTries = 1000;  // each a round trip; contention clears long before
  for (int tries = 1;; ++tries) {
    const int e = attempt();
    if (e != ESTALE) return e;
    if (tries == kTries) return EBUSY;
  }
}

}  // namespace

MRC_EXPORT void mrc_ctl_query_version(uint32_t* current_version, uint32_t* last_supported_version,
                                      uint32_t* vendor_version, uint32_t* last_supported_vendor_version) {
  if (current_version) *current_version = MRC_CTL_API_CURRENT_VERSION;
  if (last_supported_version) *last_supported_version = MRC_CTL_API_VER(1, 0, 0);
  if (vendor_version) *vendor_version = MRC_CTL_VENDOR_API_CURRENT_VERSION;
  if (last_supported_vendor_version) *last_supported_vendor_version = MRC_CTL_VENDOR_API_CURRENT_VERSION;
}

MRC_EXPORT int mrc_ctl_query_device(ibv_context* context, mrc_ctl_device_attr* a) {
  Context* c = Context::from(context);
  if (!a) return ctl_fail(EINVAL);
  if (!c) return ctl_fail(ENOTSUP);  // not an mrc-nic device
  abi::CtlDevice d{};
  if (int e = query_ctl(*c, d); e) return ctl_fail(e);
  std::memset(a, 0, sizeof *a);
  a->mrc_ctl_protocol_version = MRC_CTL_PROTOCOL_VERSION_1;
  a->ev.ev_max_fmt_profiles = d.ev_max_fmt_profiles;
  a->ev.ev_max_profiles = d.ev_max_profiles;
  a->ev.ev_max_count = d.ev_max_count;
  a->ev.ev_free_count = d.ev_free_count;
  a->ev.ev_max_count_profile = d.ev_max_count_profile;
  a->ev.ev_count_align = d.ev_count_align;
  a->ev.ev_max_width = d.ev_max_width_stev;
  a->ev.ev_fmt_mode_mask = d.ev_fmt_mode_mask;
  a->ev.ev_mode_mask = d.ev_mode_mask;
  a->ev.ev_op_max_entries = 0;
  a->cc.cc_max_profiles = d.cc_max_profiles;
  a->cc.algorithms = g_algorithms;
  a->phy_port_mask = ((1u << d.num_planes) - 1) << 1;
  a->opt_attr = d.opt_attr;
  return 0;
}

MRC_EXPORT int mrc_ctl_query_device_ex(ibv_context* context, mrc_context* mcontext, mrc_ctl_device_attr* a,
                                       int* supported) {
  if (!supported || (mcontext && ctx_of(mcontext) != Context::from(context))) return ctl_fail(EINVAL);
  Context* c = Context::from(context);
  *supported = c != nullptr;
  if (!*supported) {
    if (a) std::memset(a, 0, sizeof *a);
    return 0;
  }
  c->ctl_v101.store(true, std::memory_order_relaxed);
  return mrc_ctl_query_device(context, a);
}

// ---------------------------------------------------------------------------
// Ports

static int port_call(mrc_context* m, uint8_t port, bool set, bool enabled, mrc_ctl_port_attr* out) {
  Context* c = ctx_of(m);
  if (!c) return ctl_fail(EINVAL);
  abi::Request rq{};
  rq.op = abi::Op::ctl_port;
  rq.ctl_port = {port, set, enabled};
  abi::Response rs{};
  if (int e = c->call(rq, rs); e) return ctl_fail(e);
  if (out) out->port_admin_state = rs.ctl_port.enabled ? MRC_CTL_PORT_ADMIN_ENABLED : MRC_CTL_PORT_ADMIN_DISABLED;
  return 0;
}

MRC_EXPORT int mrc_ctl_query_port(mrc_context* m, uint8_t port_num, mrc_ctl_port_attr* attr, int mask) {
  if (!attr || (mask & ~MRC_CTL_PORT_ADMIN_STATE)) return ctl_fail(EINVAL);
  return port_call(m, port_num, false, false, attr);
}

MRC_EXPORT int mrc_ctl_modify_port(mrc_context* m, uint8_t port_num, mrc_ctl_port_attr* attr, int mask) {
  if (!attr || (mask & ~MRC_CTL_PORT_ADMIN_STATE) || !ctx_of(m) || !ctx_of(m)->is_port(port_num))
    return ctl_fail(EINVAL);
  if (!(mask & MRC_CTL_PORT_ADMIN_STATE)) return 0;
  if (attr->port_admin_state != MRC_CTL_PORT_ADMIN_ENABLED && attr->port_admin_state != MRC_CTL_PORT_ADMIN_DISABLED)
    return ctl_fail(EINVAL);
  return port_call(m, port_num, true, attr->port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED, nullptr);
}

// ---------------------------------------------------------------------------
// EV format profiles

static int get_fmt(Context& c, uint64_t id, abi::CtlFmt& f) {
  abi::Request rq{};
  rq.op = abi::Op::ctl_get_fmt;
  rq.profile_id = id;
  abi::Response rs{};
  if (int e = c.call(rq, rs); e) return e;
  f = rs.ctl_fmt;
  f.id = id;
  return 0;
}

static int put_fmt(Context& c, const abi::CtlFmt& f) {
  abi::Request rq{};
  rq.op = abi::Op::ctl_put_fmt;
  rq.ctl_fmt = f;
  abi::Response rs{};
  return c.call(rq, rs);
}

MRC_EXPORT int mrc_ctl_modify_ev_fmt_profile(mrc_context* m, uint64_t id, mrc_ctl_ev_fmt_profile_attr* attr,
                                             int mask) {
  Context* c = ctx_of(m);
  if (!c || !attr) return ctl_fail(EINVAL);
  const int e = from_fresh_reads([&] {
    abi::CtlFmt f{};
    if (int e = get_fmt(*c, id, f); e) return e;
    if ((mask & MRC_CTL_EV_FMT_PROFILE_CUR_STATE) && uint32_t(attr->cur_profile_state) != f.state) return EINVAL;
    if (mask & MRC_CTL_EV_FMT_PROFILE_STATE) f.state = attr->profile_state;
    if (mask & MRC_CTL_EV_FMT_PROFILE_MODE) f.mode = attr->ev_fmt_mode;
    if (mask & MRC_CTL_EV_FMT_PROFILE_OP) {
      if (attr->ev_fmt_op.op != MRC_CTL_EV_FMT_OP_MODIFY_FIELDS) return EINVAL;
      const int n = attr->ev_fmt_op.fmt_field_count;
      if (n < 0 || (n > 0 && !attr->ev_fmt_op.fmt_fields)) return EINVAL;
      if (n > int(abi::kCtlMaxFields)) return E2BIG;
      f.nfields = uint32_t(n);
      std::memset(f.widths, 0, sizeof f.widths);
      for (int i = 0; i < n; ++i) f.widths[i] = attr->ev_fmt_op.fmt_fields[i].width;
    }
    return put_fmt(*c, f);
  });
  return e ? ctl_fail(e) : 0;
}

MRC_EXPORT int mrc_ctl_query_ev_fmt_profile(mrc_context* m, uint64_t id, mrc_ctl_ev_fmt_profile_attr* attr,
                                            int mask) {
  Context* c = ctx_of(m);
  if (!c || !attr) return ctl_fail(EINVAL);
  abi::CtlFmt f{};
  if (int e = get_fmt(*c, id, f); e) return ctl_fail(e);
  attr->profile_state = attr->cur_profile_state = mrc_ctl_profile_state(f.state);
  attr->ev_fmt_mode = mrc_ctl_ev_fmt_mode(f.mode);
  if (mask & MRC_CTL_EV_FMT_PROFILE_OP) {
    if (attr->ev_fmt_op.op != MRC_CTL_EV_FMT_OP_QUERY_FIELDS) return ctl_fail(EINVAL);
    const int have = attr->ev_fmt_op.fmt_field_count;
    attr->ev_fmt_op.fmt_field_count = int(f.nfields);
    if (have < int(f.nfields) || (f.nfields && !attr->ev_fmt_op.fmt_fields)) return ctl_fail(E2BIG);
    for (uint32_t i = 0; i < f.nfields; ++i) attr->ev_fmt_op.fmt_fields[i].width = f.widths[i];
  }
  return 0;
}

// ---------------------------------------------------------------------------
// EV profiles

MRC_EXPORT int mrc_ctl_modify_ev_profile(mrc_context* m, uint64_t id, mrc_ctl_ev_profile_attr* attr, int mask) {
  Context* c = ctx_of(m);
  if (!c || !attr) return ctl_fail(EINVAL);
  if ((mask & MRC_CTL_EV_PROFILE_EV_OP) && (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP)) return ctl_fail(EINVAL);
  // The query operations are accepted here too (also while ONLINE): they
  // change nothing and answer as mrc_ctl_query_ev_profile would.
  const bool query_op = (mask & MRC_CTL_EV_PROFILE_EV_OP) && (attr->ev_op.op == MRC_CTL_EV_OP_QUERY_EV_STATE ||
                                                              attr->ev_op.op == MRC_CTL_EV_OP_QUERY_EV_ARRAY);
  if (query_op) mask &= ~MRC_CTL_EV_PROFILE_EV_OP;
  int op_err = 0;
  const int e = from_fresh_reads([&] {
    EvProfile p;
    if (int e = get_ev(*c, id, p); e) return e;
    if ((mask & MRC_CTL_EV_PROFILE_CUR_STATE) && uint32_t(attr->cur_profile_state) != p.e.state) return EINVAL;
    if (!(mask & ~MRC_CTL_EV_PROFILE_CUR_STATE)) return 0;  // nothing to write
    if (mask & MRC_CTL_EV_PROFILE_STATE) p.e.state = attr->profile_state;
    if (mask & MRC_CTL_EV_PROFILE_MODE) p.e.mode = attr->ev_mode;
    if (mask & MRC_CTL_EV_PROFILE_FMT_ID) p.e.fmt_id = attr->ev_fmt_profile_id;
    if (mask & MRC_CTL_EV_PROFILE_COUNT) {
      if (attr->ev_count > abi::kCtlMaxEvs) return E2BIG;
      p.e.count = attr->ev_count;
      if (p.e.mode == MRC_CTL_EV_MODE_EXP) p.entries.resize(p.e.count);  // new slots unpopulated
    }
    if (mask & MRC_CTL_EV_PROFILE_MIN_ACTIVE) p.e.min_active = attr->ev_min_active;
    if (mask & MRC_CTL_EV_PROFILE_EVENT_MASK) {
      if (attr->ev_event_mask & ~(MRC_CTL_EV_GOOD | MRC_CTL_EV_ASSUMED_BAD))
        return EINVAL;  // the states that raise events
      p.e.event_mask = attr->ev_event_mask;
    }
    if (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP) {
      if (attr->ev_fields_op.op != MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS) return EINVAL;
      const int n = attr->ev_fields_op.field_count;
      if (n < 0 || (n > 0 && !attr->ev_fields_op.fields)) return EINVAL;
      if (n > int(abi::kCtlMaxFields)) return E2BIG;
      p.e.nfields = uint32_t(n);
      for (int i = 0; i < n; ++i) {
        const mrc_ctl_ev_field& f = attr->ev_fields_op.fields[i];
        p.e.fields[i] = {f.width, f.init_val, f.min_val, f.max_val, f.mask};
      }
    }
    op_err = 0;
    if (mask & MRC_CTL_EV_PROFILE_EV_OP) {
      const auto op = attr->ev_op.op;
      const int n = attr->ev_op.entry_count;
      if (n < 0 || (n > 0 && !attr->ev_op.entries)) return EINVAL;
      if (op != MRC_CTL_EV_OP_REPLACE_EV && op != MRC_CTL_EV_OP_MODIFY_EV_STATE) return EINVAL;
      // GEN profiles compute their array: there is nothing to replace.
      if (op == MRC_CTL_EV_OP_REPLACE_EV && p.e.mode != MRC_CTL_EV_MODE_EXP) return EINVAL;
      for (int i = 0; i < n && !op_err; ++i) {
        const mrc_ctl_ev_op_entry& en = attr->ev_op.entries[i];
        if (en.state != MRC_CTL_EV_GOOD && en.state != MRC_CTL_EV_DENIED) {
          op_err = EINVAL;
          break;
        }
        const bool all = (en.flags & MRC_CTL_EV_OP_F_ALL_COPIES) != 0;
        bool hit = false;
        for (auto& cur : p.entries) {
          if (!same_ev(cur, en.ev)) continue;
          if (op == MRC_CTL_EV_OP_REPLACE_EV) {
            std::memcpy(cur.val, en.ev_new.val, sizeof cur.val);
            cur.port = en.ev_new.port;
          }
          cur.state = to_wire_state(en.state);
          hit = true;
          if (!all) break;
        }
        if (!hit) op_err = ENOENT;
      }
    }
    // Entries before a failing one have taken effect, as the API says.
    return put_ev(*c, p);
  });
  if (e) return ctl_fail(e);
  if (op_err) return ctl_fail(op_err);
  if (!query_op) return 0;
  mrc_ctl_ev_profile_attr q = *attr;  // answers into the caller's entries only
  if (mrc_ctl_query_ev_profile(m, id, &q, MRC_CTL_EV_PROFILE_EV_OP) != 0) {
    attr->ev_op.entry_count = q.ev_op.entry_count;  // E2BIG says how many
    return -1;
  }
  attr->ev_op.entry_count = q.ev_op.entry_count;
  return 0;
}

MRC_EXPORT int mrc_ctl_query_ev_profile(mrc_context* m, uint64_t id, mrc_ctl_ev_profile_attr* attr, int mask) {
  Context* c = ctx_of(m);
  if (!c || !attr) return ctl_fail(EINVAL);
  if ((mask & MRC_CTL_EV_PROFILE_EV_OP) && (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP)) return ctl_fail(EINVAL);
  EvProfile p;
  if (int e = get_ev(*c, id, p); e) return ctl_fail(e);
  attr->profile_state = attr->cur_profile_state = mrc_ctl_profile_state(p.e.state);
  attr->ev_mode = mrc_ctl_ev_mode(p.e.mode);
  attr->ev_fmt_profile_id = p.e.fmt_id;
  attr->ev_count = p.e.count;
  attr->ev_min_active = p.e.min_active;
  attr->ev_event_mask = p.e.event_mask;
  if (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP) {
    if (attr->ev_fields_op.op != MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS) return ctl_fail(EINVAL);
    const int have = attr->ev_fields_op.field_count;
    attr->ev_fields_op.field_count = int(p.e.nfields);
    if (have < int(p.e.nfields) || (p.e.nfields && !attr->ev_fields_op.fields)) return ctl_fail(E2BIG);
    for (uint32_t i = 0; i < p.e.nfields; ++i) {
      const abi::CtlField& f = p.e.fields[i];
      attr->ev_fields_op.fields[i] = {f.width, f.init_val, f.min_val, f.max_val, f.mask};
    }
  }
  if (mask & MRC_CTL_EV_PROFILE_EV_OP) {
    const int n = attr->ev_op.entry_count;
    if (n < 0 || (n > 0 && !attr->ev_op.entries)) return ctl_fail(EINVAL);
    if (attr->ev_op.op == MRC_CTL_EV_OP_QUERY_EV_ARRAY) {
      attr->ev_op.entry_count = int(p.entries.size());
      if (n < int(p.entries.size())) return ctl_fail(E2BIG);
      for (size_t i = 0; i < p.entries.size(); ++i) {
        mrc_ctl_ev_op_entry& out = attr->ev_op.entries[i];
        std::memset(&out, 0, sizeof out);
        std::memcpy(out.ev.val, p.entries[i].val, sizeof out.ev.val);
        out.ev.port = p.entries[i].port;
        out.state = mrc_ctl_ev_state(p.entries[i].state);
      }
    } else if (attr->ev_op.op == MRC_CTL_EV_OP_QUERY_EV_STATE) {
      for (int i = 0; i < n; ++i) {
        mrc_ctl_ev_op_entry& en = attr->ev_op.entries[i];
        const abi::CtlEvEntry* hit = nullptr;
        for (const auto& cur : p.entries)
          if (same_ev(cur, en.ev)) {
            hit = &cur;
            break;
          }
        if (!hit) return ctl_fail(ENOENT);
        en.state = mrc_ctl_ev_state(hit->state);
      }
    } else {
      return ctl_fail(EINVAL);
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------
// CC profiles

static int get_cc(Context& c, uint64_t id, abi::CtlCc& cc) {
  abi::Request rq{};
  rq.op = abi::Op::ctl_get_cc;
  rq.profile_id = id;
  abi::Response rs{};
  if (int e = c.call(rq, rs); e) return e;
  cc = rs.ctl_cc;
  cc.id = id;
  return 0;
}

static int put_cc(Context& c, const abi::CtlCc& cc) {
  abi::Request rq{};
  rq.op = abi::Op::ctl_put_cc;
  rq.ctl_cc = cc;
  abi::Response rs{};
  return c.call(rq, rs);
}

MRC_EXPORT int mrc_ctl_modify_cc_profile(mrc_context* m, uint64_t id, mrc_ctl_cc_profile_attr* attr, int mask) {
  Context* c = ctx_of(m);
  if (!c || !attr) return ctl_fail(EINVAL);
  const int e = from_fresh_reads([&] {
    abi::CtlCc cc{};
    if (int e = get_cc(*c, id, cc); e) return e;
    if ((mask & MRC_CTL_CC_PROFILE_CUR_STATE) && uint32_t(attr->cur_profile_state) != cc.state) return EINVAL;
    if (mask & MRC_CTL_CC_PROFILE_STATE) cc.state = attr->profile_state;
    if (mask & MRC_CTL_CC_PROFILE_ALGORITHM) {
      const char* a = attr->algorithm ? attr->algorithm : "";
      if (std::strlen(a) >= sizeof cc.algorithm) return ENOTSUP;
      std::memset(cc.algorithm, 0, sizeof cc.algorithm);
      std::memcpy(cc.algorithm, a, std::strlen(a));
    }
    if (mask & MRC_CTL_CC_PROFILE_CONFIG) {
      // Only NSCC has a parameter struct; for the others CONFIG takes their
      // defaults, and cc_config may be NULL.
      if (std::strcmp(cc.algorithm, "uet-1.0-nscc") == 0) {
        if (!attr->cc_config) return EINVAL;
        const auto* n = static_cast<const mrc_ctl_cc_nscc_cfg*>(attr->cc_config);
        cc.nscc = {n->disable_qa,
                   n->adjust_bytes_threshold,
                   n->adjust_period_threshold,
                   n->base_rtt,
                   n->eta,
                   n->fi,
                   n->fi_scale,
                   n->gamma,
                   n->max_md_jump,
                   n->max_cwnd,
                   n->qa_gate,
                   n->qa_threshold,
                   n->target_delay};
      }
      cc.has_config = 1;
    }
    return put_cc(*c, cc);
  });
  return e ? ctl_fail(e) : 0;
}

MRC_EXPORT int mrc_ctl_query_cc_profile(mrc_context* m, uint64_t id, mrc_ctl_cc_profile_attr* attr, int /*mask*/) {
  Context* c = ctx_of(m);
  if (!c || !attr) return ctl_fail(EINVAL);
  abi::CtlCc cc{};
  if (int e = get_cc(*c, id, cc); e) return ctl_fail(e);
  attr->profile_state = attr->cur_profile_state = mrc_ctl_profile_state(cc.state);
  attr->algorithm = nullptr;
  for (const char** a = g_algorithms; *a; ++a)
    if (std::strcmp(*a, cc.algorithm) == 0) attr->algorithm = *a;
  attr->cc_config = nullptr;
  if (cc.has_config && attr->algorithm && std::strcmp(attr->algorithm, "uet-1.0-nscc") == 0) {
    // Valid until the next query on this context.
    static_assert(sizeof(c->nscc_out) >= sizeof(mrc_ctl_cc_nscc_cfg));
    auto* n = reinterpret_cast<mrc_ctl_cc_nscc_cfg*>(c->nscc_out);
    const abi::CtlNscc& s = cc.nscc;
    *n = {uint8_t(s.disable_qa), s.adjust_bytes_threshold, s.adjust_period_threshold, s.base_rtt, s.eta, s.fi,
          s.fi_scale, s.gamma, s.max_md_jump, s.max_cwnd, uint8_t(s.qa_gate), s.qa_threshold, s.target_delay};
    attr->cc_config = n;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// EV events

MRC_EXPORT mrc_cq* mrc_ctl_create_ev_event_cq(mrc_context* m, int cqe, void* cq_context, mrc_comp_channel* channel,
                                              int comp_vector) {
  Context* c = ctx_of(m);
  if (!c || cqe < 1 || cqe > 65536 || comp_vector < 0 || (channel && channel->mctx->ctx != c)) {
    errno = EINVAL;
    return nullptr;
  }
  return open_ring_cq(m, std::bit_ceil(uint32_t(cqe)), true, cq_context, channel);
}

MRC_EXPORT int mrc_ctl_poll_ev_event(mrc_cq* cq, int num_entries, mrc_ctl_ev_event* out) {
  if (!cq || !cq->ev_events || num_entries < 0 || (num_entries && !out)) return -EINVAL;
  // As mrc_poll_cq: threads sharing the CQ must not consume an event twice
  // or move cons backwards.
  SpinGuard g(cq->lock);
  const uint32_t prod = abi::load_acquire(cq->hdr->prod);
  uint32_t n = prod - cq->cons;
  if (n > cq->depth) return -EIO;
  // Control API 1.0.0 programs have no `state`: their events are 48 bytes,
  // 1.0.1 ones 56. A program says it is 1.0.1 by calling
  // mrc_ctl_query_device_ex(), as the API asks; until then either may be
  // polling (a stride taken from the mrc.h version overran 1.0.0 arrays). So
  // one event per call, which sits at the same place in both layouts; with
  // room for two 1.0.0 events it is written whole, state too, else its
  // first 48 bytes (1.0.0 semantics).
  static_assert(offsetof(mrc_ctl_ev_event, state) == 48 && sizeof(mrc_ctl_ev_event) == 56);
  constexpr size_t kV100Bytes = offsetof(mrc_ctl_ev_event, state);
  const bool v101 = cq->mctx->ctx->ctl_v101.load(std::memory_order_relaxed);
  if (n > uint32_t(num_entries)) n = uint32_t(num_entries);
  if (!v101) n = std::min(n, 1u);
  const auto* ring = abi::entries<abi::CtlEvent>(cq->mem);
  const size_t stride = v101 || num_entries >= 2 ? sizeof(mrc_ctl_ev_event) : kV100Bytes;
  auto* base = reinterpret_cast<unsigned char*>(out);
  for (uint32_t i = 0; i < n; ++i) {
    const abi::CtlEvent& e = ring[(cq->cons + i) & (cq->depth - 1)];
    mrc_ctl_ev_event o;
    std::memset(&o, 0, sizeof o);
    o.profile_id = e.profile_id;
    std::memcpy(o.ev.val, e.val, sizeof o.ev.val);
    o.ev.port = e.port;
    o.drop_count = e.drop_count;
    o.state = mrc_ctl_ev_state(e.state);
    std::memcpy(base + i * stride, &o, stride);
  }
  if (n) {
    cq->cons += n;
    abi::store_release(cq->hdr->cons, cq->cons);
  }
  return int(n);
}

// ---------------------------------------------------------------------------
// Endpoint requests

MRC_EXPORT int mrc_ctl_ep_batch_send_wait(mrc_context* m, uint8_t req_tc, mrc_ctl_ep_op_type op_type,
                                          mrc_ctl_ep_req* req, int num_req, uint32_t rsp_timeout, mrc_ctl_ep_rsp* rsp,
                                          int* num_rsp) {
  Context* c = ctx_of(m);
  if (!c || num_req < 0 || num_req > 256 || (num_req && (!req || !rsp)) || !num_rsp) return ctl_fail(EINVAL);
  if (op_type != MRC_CTL_EP_OP_EV_PROBE && op_type != MRC_CTL_EP_OP_PORT_STATUS_UPDATE) return ctl_fail(ENOTSUP);
  std::vector<abi::CtlEpReq> reqs(static_cast<size_t>(num_req));
  for (int i = 0; i < num_req; ++i) {
    const mrc_ctl_ep_req& r = req[i];
    if (r.ev_fmt_mode != MRC_CTL_EV_FMT_MODE_UDP && r.ev_fmt_mode != MRC_CTL_EV_FMT_MODE_STEV) return ctl_fail(ENOTSUP);
    reqs[i].req_id = r.req_id;
    std::memcpy(reqs[i].dgid, r.dgid.raw, 16);
    std::memcpy(reqs[i].ev, r.req_ev.val, 32);
    reqs[i].port = r.req_ev.port;
    reqs[i].fmt_mode = r.ev_fmt_mode;
    reqs[i].port_status = r.op.port_status_update.port_status;
  }
  abi::Request rq{};
  rq.op = abi::Op::ctl_ep_send;
  rq.ctl_ep = {op_type == MRC_CTL_EP_OP_EV_PROBE ? 0u : 1u, uint32_t(num_req), rsp_timeout, req_tc};
  abi::Response rs{};
  std::vector<uint8_t> out;
  const int e = c->call(rq, rs, nullptr, 0,
                        {reinterpret_cast<const uint8_t*>(reqs.data()), reqs.size() * sizeof(abi::CtlEpReq)}, &out);
  const size_t got = std::min(out.size() / sizeof(abi::CtlEpRsp), size_t(num_req));
  for (size_t i = 0; i < got; ++i) {
    abi::CtlEpRsp r;
    std::memcpy(&r, out.data() + i * sizeof r, sizeof r);
    rsp[i] = {uint16_t(r.req_id), uint8_t(r.port), r.rtt_ns, 0};
  }
  *num_rsp = int(got);
  return e ? ctl_fail(e) : 0;
}
