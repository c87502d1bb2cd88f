// The OCP MRC application API (mrc.h) on mrc-nic devices. Setup goes over
// the device's control socket; posting and polling only touch the rings in
// shared memory (no system call on the fast path).
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include "internal.h"

using namespace mrc::lib;

namespace {

uint32_t pow2_at_least(uint32_t v) { return std::bit_ceil(v < 1 ? 1u : v); }

uint32_t mtu_bytes(ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0; }

ibv_mtu mtu_enum(uint32_t bytes) {
  return bytes >= 4096 ? IBV_MTU_4096 : bytes >= 2048 ? IBV_MTU_2048 : bytes >= 1024 ? IBV_MTU_1024
                                    : bytes >= 512    ? IBV_MTU_512
                                                      : IBV_MTU_256;
}

constexpr uint32_t kSupportedProtocols = MRC_PROTOCOL_VERSION_1;

void fill_device_attr(const Context& c, mrc_device_attr* a) {
  std::memset(a, 0, sizeof *a);
  a->mrc_protocol_version = kSupportedProtocols;
  a->wimm_attr.max_wimm = c.info.max_wimm;
  a->wimm_attr.max_wimm_dest = c.info.max_wimm_dest;
  a->mpr_attr.max_mpr = c.info.max_mpr;
  a->mpr_attr.mpr_resolution = c.info.mpr_resolution;
  a->qp_attr.max_qp_hint = 1024;
  a->cap = 0;  // no trim NACKs, dynamic MPR or service time
}

void unmap(void* p, size_t n) {
  if (p) munmap(p, n);
}

}  // namespace

MRC_EXPORT void mrc_query_version(uint32_t* current_version, uint32_t* last_supported_version,
                                  uint32_t* vendor_version, uint32_t* last_supported_vendor_version) {
  if (current_version) *current_version = MRC_API_CURRENT_VERSION;
  if (last_supported_version) *last_supported_version = MRC_API_VER(1, 0, 0);
  if (vendor_version) *vendor_version = MRC_VENDOR_API_CURRENT_VERSION;
  if (last_supported_vendor_version) *last_supported_vendor_version = MRC_VENDOR_API_CURRENT_VERSION;
}

MRC_EXPORT int mrc_query_device(ibv_context* context, mrc_device_attr* attr, int* supported) {
  if (!context || !attr || !supported) return errno = EINVAL, -1;
  Context* c = Context::from(context);
  *supported = c != nullptr;
  if (c)
    fill_device_attr(*c, attr);
  else
    std::memset(attr, 0, sizeof *attr);
  return 0;
}

MRC_EXPORT int mrc_query_device_ex(ibv_context* context, mrc_context* mcontext, mrc_device_attr* attr,
                                   int* supported) {
  if (mcontext && mcontext->ctx != Context::from(context)) return errno = EINVAL, -1;
  return mrc_query_device(context, attr, supported);
}

MRC_EXPORT mrc_context* mrc_create_context(ibv_context* vcontext, mrc_context_attr* attr) {
  Context* c = Context::from(vcontext);
  if (!c) {
    errno = vcontext ? EOPNOTSUPP : EINVAL;  // a real device without an MRC provider
    return nullptr;
  }
  uint32_t ver = attr ? attr->mrc_api_version_used : 0;
  uint32_t vendor = attr ? attr->mrc_vendor_api_version_used : 0;
  constexpr uint32_t kLatest = uint32_t(MRC_API_VER_LATEST);
  if (ver == 0 || ver == kLatest) ver = MRC_API_CURRENT_VERSION;
  if (vendor == 0 || vendor == kLatest) vendor = MRC_VENDOR_API_CURRENT_VERSION;
  if (ver > MRC_API_CURRENT_VERSION || ver < MRC_API_VER(1, 0, 0) || vendor > MRC_VENDOR_API_CURRENT_VERSION) {
    complain("the program asks for an MRC API version this library does not implement");
    errno = ENOTSUP;
    return nullptr;
  }
  auto* m = new (std::nothrow) mrc_context{c, ver, vendor};
  if (!m)
    errno = ENOMEM;
  else
    c->users.fetch_add(1);
  return m;
}

MRC_EXPORT int mrc_destroy_context(mrc_context* m) {
  if (!m) return errno = EINVAL, -1;
  if (m->users.load()) {
    complain("destroy context: its channels, CQs, QPs and QP hints must be destroyed first");
    return errno = EBUSY, -1;
  }
  Context* c = m->ctx;
  delete m;
  c->unref();
  return 0;
}

// ---------------------------------------------------------------------------
// Completion channels and CQs

MRC_EXPORT int mrc_create_comp_channel(mrc_context* m, mrc_comp_channel** channel) {
  if (!m || !channel) return errno = EINVAL, -1;
  // One datagram per signalled CQ: poll() on our end is readable exactly
  // while an event is waiting, and the NIC's end never blocks it.
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  auto* ch = new (std::nothrow) mrc_comp_channel;
  if (!ch) {
    close(sv[0]);
    close(sv[1]);
    return errno = ENOMEM, -1;
  }
  ch->mctx = m;
  ch->efd = sv[0];
  ch->nic_end = sv[1];
  m->users.fetch_add(1);
  *channel = ch;
  return 0;
}

MRC_EXPORT int mrc_get_comp_channel_fd(mrc_comp_channel* channel, int* fd) {
  if (!channel || !fd) return errno = EINVAL, -1;
  *fd = channel->efd;
  return 0;
}

MRC_EXPORT int mrc_destroy_comp_channel(mrc_comp_channel* ch) {
  if (!ch) return errno = EINVAL, -1;
  {
    std::lock_guard<std::mutex> g(ch->mu);
    if (!ch->cqs.empty()) return errno = EBUSY, -1;
  }
  close(ch->efd);
  close(ch->nic_end);
  ch->mctx->users.fetch_sub(1);
  delete ch;
  return 0;
}

// A CQ whose ring the NIC writes: work completions, or (ev_events) the
// controller's EV events. One place for both, since only the entry differs.
mrc_cq* mrc::lib::open_ring_cq(mrc_context* m, uint32_t depth, bool ev_events, void* cq_context,
                               mrc_comp_channel* channel) {
  Context& c = *m->ctx;
  auto* cq = new (std::nothrow) mrc_cq;
  if (!cq) {
    errno = ENOMEM;
    return nullptr;
  }
  cq->mctx = m;
  cq->depth = depth;
  cq->ev_events = ev_events;
  cq->mem_bytes = ev_events ? abi::queue_bytes(depth, sizeof(abi::CtlEvent)) : abi::cq_bytes(depth);
  cq->mem = nullptr;
  const int fd = make_shared_memory(ev_events ? "mrc-ev-cq" : "mrc-cq", cq->mem_bytes, cq->mem);
  if (fd < 0) {
    delete cq;
    return nullptr;
  }
  cq->hdr = static_cast<abi::QueueHeader*>(cq->mem);
  cq->ring = ev_events ? nullptr : abi::entries<abi::Cqe>(cq->mem);
  cq->cons = cq->arm_sn = cq->seen_fired = 0;
  cq->cq_context = cq_context;
  cq->channel = channel;
  cq->events_delivered = 0;
  cq->events_acked = 0;
  abi::Request rq{};
  rq.op = ev_events ? abi::Op::ctl_event_cq : abi::Op::create_cq;
  if (ev_events)
    rq.ctl_event_cq = {depth, channel != nullptr};
  else
    rq.create_cq = {depth, channel != nullptr};
  int fds[2] = {fd, channel ? channel->nic_end : -1};
  abi::Response rs{};
  const int e = c.call(rq, rs, fds, channel ? 2 : 1);
  close(fd);
  if (e) {
    unmap(cq->mem, cq->mem_bytes);
    delete cq;
    errno = e;
    return nullptr;
  }
  cq->handle = rs.handle;
  if (channel) {
    std::lock_guard<std::mutex> g(channel->mu);
    channel->cqs.push_back(cq);
  }
  m->users.fetch_add(1);
  std::lock_guard<std::mutex> g(c.mu);
  c.cqs[cq->handle] = cq;
  return cq;
}

MRC_EXPORT mrc_cq* mrc_create_cq(mrc_context* m, int cqe, void* cq_context, mrc_comp_channel* channel,
                                 int comp_vector) {
  if (!m || cqe < 1 || comp_vector < 0 || (channel && channel->mctx->ctx != m->ctx)) {
    errno = EINVAL;
    return nullptr;
  }
  Context& c = *m->ctx;
  if (uint32_t(cqe) > c.info.max_cq_depth) {
    complain("CQ of " + std::to_string(cqe) + " entries; the device allows " + std::to_string(c.info.max_cq_depth));
    errno = EINVAL;
    return nullptr;
  }
  return open_ring_cq(m, pow2_at_least(uint32_t(cqe)), false, cq_context, channel);
}

// A polled send completion (at ring position pos) frees its SQ slot and
// every earlier one.
static void retire_sq(mrc_cq& cq, uint32_t qpn, uint32_t wqe_index, uint32_t pos) {
  mrc_qp* q = cq.last_qp;
  if (!q || q->qpn != qpn) {
    Context& c = *cq.mctx->ctx;
    std::lock_guard<std::mutex> g(c.qpn_mu);
    auto it = c.qp_by_qpn.find(qpn);
    q = cq.last_qp = it == c.qp_by_qpn.end() ? nullptr : it->second;
  }
  // QPNs are reused at once: a destroyed QP's completions left in the CQ
  // must not free a new QP's slots.
  if (!q || q->init.send_cq != &cq || int32_t(pos - q->scq_start) < 0) return;
  const uint32_t done = q->sq_done.load(std::memory_order_relaxed);
  const uint32_t next = wqe_index + 1;
  if (next - done <= q->sq_depth) q->sq_done.store(next, std::memory_order_release);
}

MRC_EXPORT int mrc_poll_cq(mrc_cq* cq, int num_entries, ibv_wc* wc) {
  if (!cq || cq->ev_events || num_entries < 0 || (num_entries && !wc)) return errno = EINVAL, -1;
  SpinGuard g(cq->lock);
  const uint32_t prod = abi::load_acquire(cq->hdr->prod);
  uint32_t n = prod - cq->cons;
  if (n > cq->depth) return errno = EIO, -1;  // cannot happen unless the device is broken
  if (n > uint32_t(num_entries)) n = uint32_t(num_entries);
  for (uint32_t i = 0; i < n; ++i) {
    const abi::Cqe& e = cq->ring[(cq->cons + i) & (cq->depth - 1)];
    ibv_wc& w = wc[i];
    std::memset(&w, 0, sizeof w);
    w.wr_id = e.wr_id;
    w.status = ibv_wc_status(e.status);
    w.opcode = e.opcode == abi::kCqeRecvWriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RDMA_WRITE;
    w.vendor_err = e.vendor_err;
    w.byte_len = e.byte_len;
    w.imm_data = e.imm;
    w.qp_num = e.qp_num;
    w.wc_flags = (e.flags & abi::kCqeWithImm) ? IBV_WC_WITH_IMM : 0;
    w.pkey_index = 0;
    if (e.opcode == abi::kCqeWrite) retire_sq(*cq, e.qp_num, e.wqe_index, cq->cons + i);
  }
  if (n) {
    cq->cons += n;
    abi::store_release(cq->hdr->cons, cq->cons);
  } else if (abi::load_acquire(cq->hdr->error)) {
    return errno = EOVERFLOW, -1;  // overrun: the device reported IBV_EVENT_CQ_ERR too
  }
  return int(n);
}

MRC_EXPORT int mrc_destroy_cq(mrc_cq* cq) {
  if (!cq) return errno = EINVAL, -1;
  Context& c = *cq->mctx->ctx;
  {
    // As mrc.h and verbs promise: an event handed out may still be acked
    // by another thread, which must not touch a freed CQ.
    std::unique_lock<std::mutex> g(cq->ack_mu);
    cq->ack_cv.wait(g, [cq] { return int32_t(cq->events_delivered.load() - cq->events_acked.load()) <= 0; });
  }
  abi::Request rq{};
  rq.op = abi::Op::destroy_cq;
  rq.handle = cq->handle;
  if (int e = c.release(rq); e) return errno = e, -1;
  if (cq->channel) {
    std::lock_guard<std::mutex> g(cq->channel->mu);
    std::erase(cq->channel->cqs, cq);
  }
  {
    std::lock_guard<std::mutex> g(c.mu);
    c.cqs.erase(cq->handle);
  }
  unmap(cq->mem, cq->mem_bytes);
  cq->mctx->users.fetch_sub(1);
  delete cq;
  return 0;
}

MRC_EXPORT int mrc_req_notify_cq(mrc_cq* cq, int solicited_only) {
  if (!cq || !cq->channel) return errno = EINVAL, EINVAL;
  SpinGuard g(cq->lock);
  abi::store_release(cq->hdr->arm_solicited, solicited_only ? 1 : 0);
  abi::store_release(cq->hdr->arm_sn, ++cq->arm_sn);
  // The caller polls next: arm_sn must be visible before that load of prod.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return 0;
}

MRC_EXPORT int mrc_get_cq_event(mrc_comp_channel* ch, mrc_cq** cq_out, void** cq_context) {
  if (!ch || !cq_out || !cq_context) return errno = EINVAL, -1;
  const int ctl_fd = ch->mctx->ctx->fd;
  for (;;) {
    char v;
    if (recv(ch->efd, &v, 1, MSG_DONTWAIT) < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return -1;
      // Nothing waiting. Our own end of the channel's socket keeps it open
      // forever, so a NIC that died would never wake a blocking read: wait
      // on the control connection's hang-up too. O_NONBLOCK on the
      // channel's fd is honoured (EAGAIN), as verbs channels do.
      const int flags = fcntl(ch->efd, F_GETFL);
      pollfd p[2] = {{ch->efd, POLLIN, 0}, {ctl_fd, 0, 0}};
      if (poll(p, 2, flags >= 0 && (flags & O_NONBLOCK) ? 0 : -1) < 0) {
        if (errno == EINTR) continue;
        return -1;
      }
      if (p[0].revents) continue;
      if (p[1].revents & (POLLHUP | POLLERR)) {
        complain("get CQ event: the device went away");
        return errno = EIO, -1;
      }
      return errno = EAGAIN, -1;
    }
    std::lock_guard<std::mutex> g(ch->mu);
    for (mrc_cq* cq : ch->cqs) {
      const uint32_t fired = abi::load_acquire(cq->hdr->fired_sn);
      if (fired == cq->seen_fired) continue;
      cq->seen_fired = fired;
      cq->events_delivered.fetch_add(1, std::memory_order_relaxed);
      *cq_out = cq;
      *cq_context = cq->cq_context;
      return 0;
    }
    // A count with no CQ behind it (a CQ re-armed and fired twice): wait on.
  }
}

MRC_EXPORT void mrc_ack_cq_events(mrc_cq* cq, unsigned int nevents) {
  if (!cq) return;
  std::lock_guard<std::mutex> g(cq->ack_mu);
  cq->events_acked.fetch_add(nevents, std::memory_order_relaxed);
  cq->ack_cv.notify_all();
}

// ---------------------------------------------------------------------------
// QP hints: advice the device may use to place QPs; kept with the context.

namespace {

// Counts are of QPs and peers: a negative one is the caller's error, at
// creation (every field counts) as at modify (the fields in `mask`).
bool hint_counts_ok(const mrc_qp_hint_attr& a, int mask) {
  if (((mask & MRC_QP_HINT_NUM_QPS_PER_PEER) && a.num_qps_per_peer < 0) ||
      ((mask & MRC_QP_HINT_NUM_SEND_PEERS) && a.num_send_peers < 0) ||
      ((mask & MRC_QP_HINT_NUM_REMOTE_RECV_PEERS) && a.num_remote_recv_peers < 0)) {
    complain("QP hint: num_qps_per_peer, num_send_peers and num_remote_recv_peers must not be negative");
    return false;
  }
  return true;
}

constexpr int kHintCounts =
    MRC_QP_HINT_NUM_QPS_PER_PEER | MRC_QP_HINT_NUM_SEND_PEERS | MRC_QP_HINT_NUM_REMOTE_RECV_PEERS;

}  // namespace

MRC_EXPORT mrc_qp_hint* mrc_create_qp_hint(mrc_context* m, mrc_qp_hint_init_attr* init) {
  if (!m || !init || !hint_counts_ok(init->attr, kHintCounts)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* h = new (std::nothrow) mrc_qp_hint;
  if (!h) {
    errno = ENOMEM;
    return nullptr;
  }
  h->mctx = m;
  h->attr = init->attr;
  h->users = 0;
  m->users.fetch_add(1);
  return h;
}

MRC_EXPORT int mrc_destroy_qp_hint(mrc_qp_hint* h) {
  if (!h) return errno = EINVAL, -1;
  if (h->users.load()) return errno = EBUSY, -1;
  h->mctx->users.fetch_sub(1);
  delete h;
  return 0;
}

MRC_EXPORT int mrc_query_qp_hint(mrc_qp_hint* h, mrc_qp_hint_attr* attr, int mask) {
  if (!h || !attr) return errno = EINVAL, -1;
  if (mask & MRC_QP_HINT_NUM_QPS_PER_PEER) attr->num_qps_per_peer = h->attr.num_qps_per_peer;
  if (mask & MRC_QP_HINT_NUM_SEND_PEERS) attr->num_send_peers = h->attr.num_send_peers;
  if (mask & MRC_QP_HINT_NUM_REMOTE_RECV_PEERS) attr->num_remote_recv_peers = h->attr.num_remote_recv_peers;
  if (mask & MRC_QP_HINT_VENDOR_CFG) std::memcpy(attr->vendor_cfg, h->attr.vendor_cfg, sizeof attr->vendor_cfg);
  return 0;
}

MRC_EXPORT int mrc_modify_qp_hint(mrc_qp_hint* h, mrc_qp_hint_attr* attr, int mask) {
  if (!h || !attr || !hint_counts_ok(*attr, mask)) return errno = EINVAL, -1;
  if (mask & MRC_QP_HINT_NUM_QPS_PER_PEER) h->attr.num_qps_per_peer = attr->num_qps_per_peer;
  if (mask & MRC_QP_HINT_NUM_SEND_PEERS) h->attr.num_send_peers = attr->num_send_peers;
  if (mask & MRC_QP_HINT_NUM_REMOTE_RECV_PEERS) h->attr.num_remote_recv_peers = attr->num_remote_recv_peers;
  if (mask & MRC_QP_HINT_VENDOR_CFG) std::memcpy(h->attr.vendor_cfg, attr->vendor_cfg, sizeof attr->vendor_cfg);
  return 0;
}

// ---------------------------------------------------------------------------
// QPs

MRC_EXPORT mrc_qp* mrc_create_qp(mrc_context* m, mrc_qp_init_attr* ia) {
  if (!m || !ia || !ia->send_cq || !ia->recv_cq || !ia->pd || ia->send_cq->mctx->ctx != m->ctx ||
      ia->recv_cq->mctx->ctx != m->ctx || Context::from(ia->pd->context) != m->ctx) {
    errno = EINVAL;
    return nullptr;
  }
  Context& c = *m->ctx;
  const ibv_qp_cap& cap = ia->cap;
  std::string why;
  if (cap.max_send_sge > 1 || cap.max_recv_sge > 1)
    why = "one SGE per WR is supported (max_send_sge/max_recv_sge <= 1)";
  else if (cap.max_inline_data > 0)
    why = "inline data is not supported (max_inline_data must be 0)";
  else if (cap.max_send_wr > c.info.max_sq_depth || cap.max_recv_wr > c.info.max_rq_depth)
    why = "queue too deep: the device allows " + std::to_string(c.info.max_sq_depth) + " send and " +
          std::to_string(c.info.max_rq_depth) + " receive WRs";
  else if (const uint32_t pv = uint32_t(ia->protocol_version);
           pv != MRC_PROTOCOL_VERSION_0 && (!std::has_single_bit(pv) || !(pv & kSupportedProtocols)))
    // mrc.h: a QP asks for exactly one version bit (or 0); a set of them
    // would leave the version spoken undefined.
    why = "unsupported MRC protocol version (give one supported version bit, or 0)";
  if (!why.empty()) {
    complain("create QP: " + why);
    errno = EINVAL;
    return nullptr;
  }
  auto* q = new (std::nothrow) mrc_qp;
  if (!q) {
    errno = ENOMEM;
    return nullptr;
  }
  q->mctx = m;
  q->init = *ia;
  q->sq_depth = std::min(pow2_at_least(cap.max_send_wr), c.info.max_sq_depth);
  q->rq_depth = std::min(pow2_at_least(cap.max_recv_wr), c.info.max_rq_depth);
  q->mem_bytes = abi::qp_bytes(q->sq_depth, q->rq_depth);
  q->mem = nullptr;
  const int fd = make_shared_memory("mrc-qp", q->mem_bytes, q->mem);
  if (fd < 0) {
    delete q;
    return nullptr;
  }
  auto* base = static_cast<uint8_t*>(q->mem);
  q->sq_hdr = reinterpret_cast<abi::QueueHeader*>(base);
  q->sq = abi::entries<abi::Sqe>(base);
  q->rq_hdr = reinterpret_cast<abi::QueueHeader*>(base + abi::qp_sq_bytes(q->sq_depth));
  q->rq = abi::entries<abi::Rqe>(q->rq_hdr);
  q->sq_prod = q->rq_prod = 0;
  q->sq_done = 0;
  q->state = IBV_QPS_RESET;
  q->hint = nullptr;
  std::memset(&q->mrc_attr, 0, sizeof q->mrc_attr);
  abi::Request rq{};
  rq.op = abi::Op::create_qp;
  rq.create_qp = {reinterpret_cast<Pd*>(ia->pd)->handle, ia->send_cq->handle, ia->recv_cq->handle,
                  q->sq_depth, q->rq_depth, uint32_t(ia->sq_sig_all != 0)};
  abi::Response rs{};
  const int e = c.call(rq, rs, &fd, 1);
  close(fd);
  if (e) {
    unmap(q->mem, q->mem_bytes);
    delete q;
    errno = e;
    return nullptr;
  }
  q->handle = rs.qp.handle;
  q->qpn = rs.qp.qpn;
  q->scq_start = abi::load_acquire(ia->send_cq->hdr->prod);
  // Report what was granted, as ibv_create_qp does.
  ia->cap.max_send_wr = q->sq_depth;
  ia->cap.max_recv_wr = q->rq_depth;
  ia->cap.max_send_sge = ia->cap.max_recv_sge = 1;
  ia->cap.max_inline_data = 0;
  q->init.cap = ia->cap;
  {
    std::lock_guard<std::mutex> g(c.qpn_mu);
    c.qp_by_qpn[q->qpn] = q;
  }
  m->users.fetch_add(1);
  std::lock_guard<std::mutex> g(c.mu);
  c.qps[q->handle] = q;
  return q;
}

MRC_EXPORT int mrc_destroy_qp(mrc_qp* q) {
  if (!q) return errno = EINVAL, EINVAL;
  Context& c = *q->mctx->ctx;
  abi::Request rq{};
  rq.op = abi::Op::destroy_qp;
  rq.handle = q->handle;
  if (int e = c.release(rq); e) return errno = e, e;
  {
    std::lock_guard<std::mutex> g(c.mu);
    c.qps.erase(q->handle);
  }
  {
    std::lock_guard<std::mutex> g(c.qpn_mu);
    c.qp_by_qpn.erase(q->qpn);
  }
  for (mrc_cq* cq : {q->init.send_cq, q->init.recv_cq}) {
    SpinGuard g(cq->lock);
    if (cq->last_qp == q) cq->last_qp = nullptr;
  }
  if (q->hint) q->hint->users.fetch_sub(1);
  unmap(q->mem, q->mem_bytes);
  q->mctx->users.fetch_sub(1);
  delete q;
  return 0;
}

MRC_EXPORT int mrc_get_qpn(mrc_qp* q, uint32_t* qpn) {
  if (!q || !qpn) return errno = EINVAL, -1;
  *qpn = q->qpn;
  return 0;
}

MRC_EXPORT int mrc_modify_qp(mrc_qp* q, ibv_qp_attr* va, int vmask, mrc_qp_attr* ma, int mmask) {
  if (!q || (vmask && !va) || (mmask && !ma)) return errno = EINVAL, EINVAL;
  Context& c = *q->mctx->ctx;
  // What the published API says is not supported, or has an MRC
  // replacement. IBV_QP_TIMEOUT/RETRY_CNT/RNR_RETRY and the RD atomics are
  // accepted and ignored so programs written for RC verbs run unchanged.
  constexpr int kRefused = IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_QKEY | IBV_QP_CAP |
                           IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_RATE_LIMIT;
  if (vmask & kRefused) {
    complain("modify QP: alternate paths, path migration, Q_Key, capability changes, SQD notify and rate limits "
             "are not supported");
    return errno = EINVAL, EINVAL;
  }
  abi::Request rq{};
  rq.op = abi::Op::modify_qp;
  rq.handle = q->handle;
  abi::QpAttrs& a = rq.modify_qp;
  if (vmask & IBV_QP_STATE) {
    a.mask |= abi::kModState;
    a.state = va->qp_state;
  }
  if (vmask & IBV_QP_CUR_STATE) {
    a.mask |= abi::kModCurState;
    a.cur_state = va->cur_qp_state;
  }
  if (vmask & IBV_QP_PORT && !c.is_port(va->port_num))
    return complain("modify QP: port " + std::to_string(va->port_num) + " is not one of the device's ports (1.." +
                    std::to_string(c.info.num_planes) + ")"),
           errno = EINVAL, EINVAL;
  if (vmask & IBV_QP_PKEY_INDEX && va->pkey_index != 0) return complain("modify QP: P_Key index must be 0"), errno = EINVAL, EINVAL;
  if (vmask & IBV_QP_ACCESS_FLAGS) {
    a.mask |= abi::kModAccess;
    a.access = va->qp_access_flags;
  }
  if (vmask & IBV_QP_PATH_MTU) {
    a.mask |= abi::kModPmtu;
    a.pmtu = mtu_bytes(va->path_mtu);
  }
  if (vmask & IBV_QP_SQ_PSN) a.mask |= abi::kModSqPsn, a.sq_psn = va->sq_psn;
  if (vmask & IBV_QP_RQ_PSN) a.mask |= abi::kModRqPsn, a.rq_psn = va->rq_psn;
  if (vmask & IBV_QP_DEST_QPN) a.mask |= abi::kModDestQpn, a.dest_qpn = va->dest_qp_num;
  if (vmask & IBV_QP_AV) {
    if (!va->ah_attr.is_global) {
      complain("modify QP: RoCE needs a global route (ah_attr.is_global = 1 with grh.dgid)");
      return errno = EINVAL, EINVAL;
    }
    if (va->ah_attr.grh.sgid_index >= c.info.gid_count) {
      complain("modify QP: source GID index " + std::to_string(va->ah_attr.grh.sgid_index) + " is not in the table");
      return errno = EINVAL, EINVAL;
    }
    if (va->ah_attr.port_num && !c.is_port(va->ah_attr.port_num)) {
      complain("modify QP: address port " + std::to_string(va->ah_attr.port_num) + " is not one of the device's ports");
      return errno = EINVAL, EINVAL;
    }
    a.mask |= abi::kModDgid;
    std::memcpy(a.dgid, va->ah_attr.grh.dgid.raw, 16);
    a.sgid_index = va->ah_attr.grh.sgid_index;
  }
  if (mmask & ~(MRC_QP_MAX_WIMM | MRC_QP_MAX_WIMM_DEST | MRC_QP_MPR | MRC_QP_MPR_DEST | MRC_QP_TIMEOUT |
                MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID | MRC_QP_HINT | MRC_QP_RETRY_CNT | MRC_QP_CAP |
                MRC_QP_VENDOR_CFG)) {
    complain("modify QP: unknown MRC attribute bits");
    return errno = EINVAL, EINVAL;
  }
  if (mmask & MRC_QP_MAX_WIMM) a.mask |= abi::kModWimm, a.max_wimm = ma->wimm.max_wimm;
  if (mmask & MRC_QP_MAX_WIMM_DEST) a.mask |= abi::kModWimmDest, a.max_wimm_dest = ma->wimm.max_wimm_dest;
  if (mmask & MRC_QP_MPR) a.mask |= abi::kModMpr, a.mpr = ma->mpr.mpr;
  if (mmask & MRC_QP_MPR_DEST) a.mask |= abi::kModMprDest, a.mpr_dest = ma->mpr.mpr_dest;
  if (mmask & MRC_QP_TIMEOUT) a.mask |= abi::kModTimeout, a.timeout = ma->timeout;
  if (mmask & MRC_QP_RETRY_CNT) {
    a.mask |= abi::kModRetry;
    a.retry_linear = ma->retry.linear_cnt;
    a.retry_exp = ma->retry.exp_cnt;
  }
  if (mmask & MRC_QP_EV_PROFILE_ID) a.mask |= abi::kModEvProfile, a.ev_profile = ma->profile.ev_profile_id;
  if (mmask & MRC_QP_CC_PROFILE_ID) a.mask |= abi::kModCcProfile, a.cc_profile = ma->profile.cc_profile_id;
  if ((mmask & MRC_QP_CAP) && (ma->cap & MRC_QP_CAP_DYNAMIC_MPR)) {
    complain("modify QP: the device does not support dynamic MPR");
    return errno = EINVAL, EINVAL;
  }
  abi::Response rs{};
  if (int e = c.call(rq, rs); e) return errno = e, e;
  if (vmask & IBV_QP_STATE) q->state.store(va->qp_state, std::memory_order_release);
  if ((vmask & IBV_QP_STATE) && va->qp_state == IBV_QPS_RESET) {
    // The NIC emptied the queues without completions: every SQ slot is free.
    SpinGuard g(q->sq_lock);
    q->sq_done.store(q->sq_prod, std::memory_order_release);
  }
  if (mmask & MRC_QP_HINT) {
    if (q->hint) q->hint->users.fetch_sub(1);
    q->hint = ma->qp_hint;
    if (q->hint) q->hint->users.fetch_add(1);
  }
  if (mmask & MRC_QP_CAP) q->mrc_attr.cap = ma->cap;
  if (mmask & MRC_QP_VENDOR_CFG) std::memcpy(q->mrc_attr.vendor_cfg, ma->vendor_cfg, sizeof ma->vendor_cfg);
  if (mmask & MRC_QP_EV_PROFILE_ID) q->mrc_attr.profile.ev_profile_id = ma->profile.ev_profile_id;
  if (mmask & MRC_QP_CC_PROFILE_ID) q->mrc_attr.profile.cc_profile_id = ma->profile.cc_profile_id;
  return 0;
}

MRC_EXPORT int mrc_query_qp(mrc_qp* q, ibv_qp_attr* va, int vmask, mrc_qp_attr* ma, int mmask,
                            mrc_qp_init_attr* init) {
  if (!q || (vmask && !va) || (mmask && !ma)) return errno = EINVAL, EINVAL;
  abi::Request rq{};
  rq.op = abi::Op::query_qp;
  rq.handle = q->handle;
  abi::Response rs{};
  if (int e = q->mctx->ctx->call(rq, rs); e) return errno = e, e;
  const abi::QpAttrs& a = rs.qp_attrs;
  q->state.store(a.state, std::memory_order_release);
  if (va) {
    std::memset(va, 0, sizeof *va);
    va->qp_state = ibv_qp_state(a.state);
    va->cur_qp_state = ibv_qp_state(a.cur_state);
    va->path_mtu = mtu_enum(a.pmtu);
    va->path_mig_state = IBV_MIG_MIGRATED;
    va->qp_access_flags = a.access;
    va->sq_psn = a.sq_psn;
    va->rq_psn = a.rq_psn;
    va->dest_qp_num = a.dest_qpn;
    va->cap = q->init.cap;
    va->ah_attr.is_global = 1;
    std::memcpy(va->ah_attr.grh.dgid.raw, a.dgid, 16);
    va->ah_attr.grh.sgid_index = uint8_t(a.sgid_index);
    va->ah_attr.grh.hop_limit = 64;
    va->ah_attr.port_num = 1;
    va->port_num = 1;
    va->timeout = a.timeout;  // MRC units (1.024 us * 2^t)
    va->retry_cnt = a.retry_linear;
    va->sq_draining = 0;
  }
  if (ma) {
    ma->mpr.mpr = a.mpr;
    ma->mpr.mpr_dest = a.mpr_dest;
    ma->wimm.max_wimm = a.max_wimm;
    ma->wimm.max_wimm_dest = a.max_wimm_dest;
    ma->timeout = a.timeout;
    ma->retry.linear_cnt = a.retry_linear;
    ma->retry.exp_cnt = a.retry_exp;
    ma->profile = q->mrc_attr.profile;
    ma->qp_hint = q->hint;
    ma->cap = q->mrc_attr.cap;
    std::memcpy(ma->vendor_cfg, q->mrc_attr.vendor_cfg, sizeof ma->vendor_cfg);
  }
  if (init) *init = q->init;
  return 0;
}

// ---------------------------------------------------------------------------
// The fast path: WQEs into the rings, producer index published with release
// ordering (the doorbell the device's lcore polls).

MRC_EXPORT int mrc_post_send(mrc_qp* q, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  if (!q) return EINVAL;
  const uint32_t state = q->state.load(std::memory_order_acquire);
  if (state != IBV_QPS_RTS && state != IBV_QPS_ERR && state != IBV_QPS_SQD) {
    if (bad_wr) *bad_wr = wr;
    return errno = EINVAL, EINVAL;
  }
  SpinGuard g(q->sq_lock);
  // A slot is free once its completion (or a later one) has been polled,
  // so a CQ sized for the SQ cannot overrun.
  const uint32_t done = q->sq_done.load(std::memory_order_acquire);
  int rc = 0;
  for (; wr; wr = wr->next) {
    if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
      rc = EINVAL;  // MRC carries RDMA WRITE and WRITE with immediate only
      break;
    }
    if (wr->num_sge < 0 || wr->num_sge > 1 || (wr->num_sge == 1 && !wr->sg_list) ||
        (wr->send_flags & IBV_SEND_INLINE)) {
      rc = EINVAL;
      break;
    }
    if (q->sq_prod - done >= q->sq_depth) {
      rc = ENOMEM;
      break;
    }
    abi::Sqe& e = q->sq[q->sq_prod & (q->sq_depth - 1)];
    e.wr_id = wr->wr_id;
    e.local_addr = wr->num_sge ? wr->sg_list[0].addr : 0;
    e.length = wr->num_sge ? wr->sg_list[0].length : 0;
    e.lkey = wr->num_sge ? wr->sg_list[0].lkey : 0;
    e.remote_addr = wr->wr.rdma.remote_addr;
    e.rkey = wr->wr.rdma.rkey;
    e.imm = wr->imm_data;
    e.opcode = wr->opcode == IBV_WR_RDMA_WRITE ? abi::kSqeWrite : abi::kSqeWriteImm;
    e.flags = (wr->send_flags & IBV_SEND_SIGNALED) ? abi::kSqeSignaled : 0;
    ++q->sq_prod;
  }
  abi::store_release(q->sq_hdr->prod, q->sq_prod);
  if (rc) {
    errno = rc;
    if (bad_wr) *bad_wr = wr;
  }
  return rc;
}

MRC_EXPORT int mrc_post_recv(mrc_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  if (!q) return EINVAL;
  if (q->state.load(std::memory_order_acquire) == IBV_QPS_RESET) {
    if (bad_wr) *bad_wr = wr;
    return errno = EINVAL, EINVAL;
  }
  SpinGuard g(q->rq_lock);
  const uint32_t cons = abi::load_acquire(q->rq_hdr->cons);
  int rc = 0;
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || wr->num_sge > 1 || (wr->num_sge == 1 && !wr->sg_list)) {
      rc = EINVAL;
      break;
    }
    if (q->rq_prod - cons >= q->rq_depth) {
      rc = ENOMEM;
      break;
    }
    // A WRITE with immediate consumes the WR; its data went to the rkey's
    // region, so the scatter list is not kept.
    q->rq[q->rq_prod & (q->rq_depth - 1)] = {wr->wr_id, 0};
    ++q->rq_prod;
  }
  abi::store_release(q->rq_hdr->prod, q->rq_prod);
  if (rc) {
    errno = rc;
    if (bad_wr) *bad_wr = wr;
  }
  return rc;
}

// ---------------------------------------------------------------------------
// Async events

MRC_EXPORT int mrc_get_async_event(mrc_context* m, mrc_async_event* event) {
  if (!m || !event) return errno = EINVAL, -1;
  Context& c = *m->ctx;
  if (c.events_fd < 0) return errno = ENODEV, -1;
  for (;;) {
    abi::Event e{};
    const ssize_t n = recv(c.events_fd, &e, sizeof e, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;  // EAGAIN on a non-blocking fd
    std::memset(event, 0, sizeof *event);
    if (n == 0) {  // the device went away
      event->event_type = IBV_EVENT_DEVICE_FATAL;
      return 0;
    }
    if (n != ssize_t(sizeof e)) continue;
    event->event_type = ibv_event_type(e.type);
    std::lock_guard<std::mutex> g(c.mu);
    if (e.kind == 0) {
      auto it = c.qps.find(e.handle);
      if (it == c.qps.end()) continue;  // destroyed meanwhile
      event->element.qp = it->second;
    } else if (e.kind == 1) {
      auto it = c.cqs.find(e.handle);
      if (it == c.cqs.end()) continue;
      event->element.cq = it->second;
    } else if (e.kind == 2) {
      event->element.port_num = int(e.handle);  // the plane's port
    }
    return 0;
  }
}

MRC_EXPORT void mrc_ack_async_event(mrc_async_event*) {}
