#include "dpdk/host_service.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "host/abi.h"
#include "wire/ev.h"

namespace mrc::dp {

namespace abi = host::abi;
using engine::Nanos;

namespace {

// ibv_wc_status / ibv_qp_state / ibv_event_type values (the ABI carries
// verbs numbers; the NIC does not include verbs headers).
constexpr uint8_t kWcLocQpOpErr = 2, kWcWrFlushErr = 5;
constexpr uint32_t kEvCqErr = 0, kEvQpFatal = 1, kEvPortActive = 9, kEvPortErr = 10, kEvDeviceFatal = 8;
constexpr uint32_t kIbvReset = 0, kIbvInit = 1, kIbvRtr = 2, kIbvRts = 3, kIbvErr = 6;
// IBV_ACCESS_* bits the device accepts (the rest are optional hints or
// features a write-only transport ignores).
constexpr uint32_t kAccessKnown = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800 |
                                  0x100000;
constexpr uint32_t kSqBudget = 64;  // WQEs per QP per poll, so one QP cannot starve the rest

struct Mapping {
  void* p = nullptr;
  size_t bytes = 0;
  void unmap() {
    if (p) munmap(p, bytes);
    p = nullptr;
  }
};

// Maps a client's memfd after checking it cannot shrink under us (a mapping
// past a shrunk file would fault on an lcore). The seal is checked before
// the size: the client still holds the file, and could shrink it and then
// seal it between a size check and a seal check.
std::string map_memfd(int fd, size_t bytes, Mapping& out) {
  struct stat st {};
  if (fd < 0) return "no memory file came with the request";
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "not a memory file";
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) return "memory file is not sealed against shrinking";
  if (fstat(fd, &st) != 0) return "not a memory file";
  if (bytes == 0 || uint64_t(st.st_size) < bytes)
    return fmt::format("memory file holds {} bytes, {} needed", st.st_size, bytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fmt::format("mmap: {}", std::strerror(errno));
  out = {p, bytes};
  return {};
}

bool is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

// A completion channel is the client's end of a socketpair; the NIC holds
// the other. A send with MSG_DONTWAIT cannot block or raise SIGPIPE whatever
// the client does with its end (a full buffer only drops a wake-up it
// already has pending), so an lcore may signal it.
bool is_socket(int fd) {
  int type = 0;
  socklen_t len = sizeof type;
  return fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0;
}
void signal_channel(int fd) {
  const char one = 1;
  [[maybe_unused]] ssize_t r = send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

engine::QpState to_engine_state(uint32_t ibv) {
  switch (ibv) {
    case kIbvReset: return engine::QpState::reset;
    case kIbvInit: return engine::QpState::init;
    case kIbvRtr: return engine::QpState::rtr;
    case kIbvRts: return engine::QpState::rts;
    default: return engine::QpState::error;
  }
}

uint32_t to_ibv_state(engine::QpState s) {
  switch (s) {
    case engine::QpState::reset: return kIbvReset;
    case engine::QpState::init: return kIbvInit;
    case engine::QpState::rtr: return kIbvRtr;
    case engine::QpState::rts: return kIbvRts;
    case engine::QpState::error: return kIbvErr;
  }
  return kIbvErr;
}

uint64_t eui64(uint64_t mac) {
  // Modified EUI-64: ff:fe in the middle, universal/local bit flipped.
  const uint64_t hi = (mac >> 24) & 0xFFFFFF, lo = mac & 0xFFFFFF;
  return ((hi << 40) | (uint64_t(0xFFFE) << 24) | lo) ^ (uint64_t(0x02) << 56);
}

struct Client;

struct HostCq {
  uint32_t handle = 0;
  uint32_t depth = 0;
  abi::QueueHeader* hdr = nullptr;
  abi::Cqe* ring = nullptr;
  uint32_t prod = 0;
  uint32_t fired = 0;  // our copy of the last arm_sn signalled
  int eventfd = -1;
  bool failed = false;
  int shard = -1;  // every QP using this CQ runs on one lcore, its only writer
  uint32_t qp_refs = 0;
  uint64_t client = 0;
  Mapping map;
};

struct HostQp {
  uint32_t handle = 0;
  uint32_t qpn = 0;
  uint32_t pd = 0;
  Shard* shard = nullptr;
  HostCq* scq = nullptr;
  HostCq* rcq = nullptr;
  abi::QueueHeader* sq_hdr = nullptr;
  abi::Sqe* sq = nullptr;
  uint32_t sq_depth = 0, sq_cons = 0;
  std::vector<uint64_t> wr_ids;  // the client's wr_id by SQ position (the engine carries the position)
  abi::QueueHeader* rq_hdr = nullptr;
  abi::Rqe* rq = nullptr;
  uint32_t rq_depth = 0, rq_cons = 0;
  bool sig_all = false;
  bool failed = false;  // the client corrupted its rings: no longer polled
  uint64_t client = 0;
  engine::QpAttr attr;
  std::array<uint8_t, 16> dgid{};
  uint32_t sgid_index = 0, access = 0;
  uint64_t ev_profile = 0, cc_profile = 0;  // controller profiles the QP uses (0: the device's own)
  Mapping map;
  uint32_t resets = 0;  // moves to RESET: each drops the engine's WRs and restarts its SQ count
  std::vector<uint8_t> ev_bad;  // by EV index: this QP sees it ASSUMED_BAD (control thread)
};

// A client's released memory that WRs posted before the release may still
// read (the engine holds raw pointers into regions for its WRs in flight):
// unmapped once every QP that had WRs outstanding has completed them.
struct Retired {
  Mapping map;
  struct Wait {
    uint32_t qp_handle, resets, sq_posted;
  };
  std::vector<Wait> waits;
};

// Controller state of one device (mrc_ctl.h): profiles outlive the
// controller that made them; QPs attach to them by id.
constexpr uint32_t kCtlGood = 1u << 0, kCtlAssumedBad = 1u << 1, kCtlDenied = 1u << 2;
constexpr uint32_t kFmtStev = 1u << 0, kFmtUdp = 1u << 2;
constexpr uint32_t kEvModeExp = 1u << 1, kEvModeGen = 1u << 2;
constexpr uint32_t kStateInit = 0, kStateOffline = 1, kStateOnline = 2;
constexpr uint32_t kOptEvEvent = 1u << 2, kOptPreciseDrops = 1u << 4, kOptEpProbe = 1u << 5;
constexpr uint32_t kMaxFmtProfiles = 16, kMaxEvProfiles = 64, kMaxCcProfiles = 64, kMaxEvsTotal = 65536;
const char* const kCcAlgorithms[] = {"uet-1.0-nscc", "dcqcn"};

struct EvRec {
  abi::CtlEv e{};
  std::vector<abi::CtlEvEntry> entries;
  std::vector<std::pair<uint64_t, uint32_t>> qps;  // (client, QP handle)
  // Per entry: how many of those QPs see it ASSUMED_BAD. Events are the
  // profile's EVs changing, as queries show them: ASSUMED_BAD when the first
  // QP marks one, GOOD when the last lets it go (deliver_ev_events).
  std::vector<uint32_t> bad_qps;
};

struct CcRec {
  abi::CtlCc c{};
  uint32_t qp_refs = 0;
};

struct EventSink {
  uint64_t client = 0;
  uint32_t handle = 0;
  uint32_t depth = 0;
  abi::QueueHeader* hdr = nullptr;
  abi::CtlEvent* ring = nullptr;
  uint32_t prod = 0, fired = 0, dropped = 0;
  int eventfd = -1;
  Mapping map;
};

struct CtlState {
  std::map<uint64_t, abi::CtlFmt> fmts;
  std::map<uint64_t, EvRec> evs;
  std::map<uint64_t, CcRec> ccs;
  std::vector<EventSink> sinks;
  uint32_t generation = 0;            // of the last profile write, device-wide: a profile made again never repeats one
  std::vector<uint32_t> own_bad_qps;  // EvRec::bad_qps for the device's own EVs (profile 0)

  uint32_t next_generation() {
    if (++generation == 0) ++generation;  // 0 means "did not exist"
    return generation;
  }
};

// A profile write names the generation it read; another write since means
// the caller's whole-profile copy is stale (abi::CtlFmt).
std::string stale_write(const char* kind, uint64_t id, uint32_t read, uint32_t now, abi::Response& rs) {
  if (read == now) return {};
  rs.err = ESTALE;
  return fmt::format("{} profile {} changed since it was read", kind, id);
}

uint32_t fmt_bits(const abi::CtlFmt& f) {
  uint32_t b = 0;
  for (uint32_t i = 0; i < f.nfields; ++i) b += f.widths[i];
  return b;
}

wire::EvFormat wire_format(uint32_t mode) { return mode == kFmtStev ? wire::EvFormat::stev : wire::EvFormat::udp; }

bool legal_transition(uint32_t from, uint32_t to) {
  return to <= kStateOnline && (to == from || (from == kStateInit && to == kStateOffline) ||
                                (from == kStateOffline && (to == kStateOnline || to == kStateInit)) ||
                                (from == kStateOnline && to == kStateOffline));
}

std::string state_name(uint32_t s) { return s == kStateInit ? "INIT" : s == kStateOffline ? "OFFLINE" : "ONLINE"; }


struct Segment {
  Mapping map;
  uint32_t refs = 0;
};

struct Client {
  uint64_t id = 0;
  uint64_t token = 0;
  int fd = -1;
  int events_fd = -1;
  Device* dev = nullptr;
  uint32_t pid = 0;
  bool admin = false;  // CAP_NET_ADMIN: may use the controller API
  uint32_t next_handle = 1;  // HostService::Impl::new_handle()
  std::map<uint32_t, Segment> segments;
  std::vector<Retired> retired;  // released segments a requester may still read
  std::set<uint32_t> pds;
  struct Mr {
    uint32_t lkey, rkey, pd, segment;
  };
  std::map<uint32_t, Mr> mrs;
  std::map<uint32_t, std::unique_ptr<HostCq>> cqs;
  std::map<uint32_t, std::unique_ptr<HostQp>> qps;
};

// RESET empties a QP's queues, as in verbs: what the client posted and
// the engine had not taken goes too, with no completion, or its slots
// would stay taken for good. `in_engine`: what the engine dropped.
void empty_rings(Shard& s, HostQp& q, uint32_t in_engine) {
  const uint32_t sq = abi::load_acquire(q.sq_hdr->prod), rq = abi::load_acquire(q.rq_hdr->prod);
  const uint32_t sq_left = sq - q.sq_cons <= q.sq_depth ? sq - q.sq_cons : 0;
  const uint32_t rq_left = rq - q.rq_cons <= q.rq_depth ? rq - q.rq_cons : 0;
  s.count(ShardCtr::host_wqe_reset, in_engine + sq_left + rq_left);
  q.sq_cons = sq;
  q.rq_cons = rq;
  abi::store_release(q.sq_hdr->cons, q.sq_cons);
  abi::store_release(q.rq_hdr->cons, q.rq_cons);
}

}  // namespace

// ---------------------------------------------------------------------------

class HostShard;

struct HostService::Impl {
  Nic& nic;
  HostOptions o;
  std::vector<int> listen_fds;  // per device
  std::vector<std::string> paths;  // sockets and alive pages, unlinked at the end
  std::vector<void*> alive_pages;
  std::vector<std::vector<std::unique_ptr<HostShard>>> apps;  // [device][shard]
  std::vector<uint32_t> next_shard;                           // per device, round robin
  std::vector<uint32_t> planes_up;                            // per device, last seen
  std::map<int, Device*> pending;  // accepted, first message not read yet
  std::map<int, std::chrono::steady_clock::time_point> pending_since;  // silent ones are dropped
  std::map<uint64_t, std::unique_ptr<Client>> clients;
  uint64_t next_client = 1;
  uint32_t next_pd = 16;
  std::mt19937_64 rng{std::random_device{}()};
  int wake = -1;
  // Held back so that a connection can still be answered when every other
  // descriptor is taken (accept_on).
  int spare_fd = -1;
  std::mutex ev_mu;
  std::vector<std::pair<uint64_t, abi::Event>> ev_queue;  // from lcores
  std::atomic<bool> stopping{false};
  std::thread thread;
  bool started = false;
  HostCounters ctr;
  std::vector<CtlState> ctl;  // per device
  // From lcores: EV events and endpoint responses, by device index.
  std::mutex ctl_mu;
  std::vector<std::pair<uint32_t, EvEventRecord>> ev_events;
  std::vector<std::pair<uint32_t, EndpointResponse>> ep_responses;
  static constexpr size_t kMaxEpResponses = 4096;

  void post_ev_event(uint32_t dev, const EvEventRecord& e) {
    {
      std::lock_guard<std::mutex> g(ctl_mu);
      ev_events.emplace_back(dev, e);
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = write(wake, &one, sizeof one);
  }
  // Kept only while an ep_send waits: unsolicited responses from the
  // network must not pile up.
  std::atomic<bool> ep_waiting{false};
  void post_ep_response(uint32_t dev, const EndpointResponse& r) {
    if (!ep_waiting.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> g(ctl_mu);
    if (ep_responses.size() < kMaxEpResponses)
      ep_responses.emplace_back(dev, r);
    else
      ctr.inc(HostCtr::ep_responses_dropped);
  }

  // Controller requests.
  std::string ctl_handle(Client& c, const abi::Request& rq, std::span<const uint8_t> payload, int ring_fd, int event_fd,
                         abi::Response& rs, std::vector<uint8_t>& out);
  std::string put_fmt(Client& c, const abi::CtlFmt& f, abi::Response& rs);
  std::string put_ev(Client& c, const abi::CtlEv& e, std::span<const abi::CtlEvEntry> entries, abi::Response& rs);
  std::string put_cc(Client& c, const abi::CtlCc& cc, abi::Response& rs);
  void get_ev(Client& c, uint64_t id, abi::Response& rs, std::vector<uint8_t>& out);
  std::string ep_send(Client& c, const abi::CtlEpBatch& b, std::span<const abi::CtlEpReq> reqs, abi::Response& rs,
                      std::vector<uint8_t>& out);
  void deliver_ev_events();
  bool note_ev_view(CtlState& st, HostQp& q, uint32_t ev_index, bool bad);
  void emit_ev_event(CtlState& st, const HostQp& q, uint32_t ev_index, uint32_t wire_ev, bool bad);
  void release_ev_views(CtlState& st, HostQp& q);
  HostQp* find_qp(uint32_t dev, uint32_t qpn);
  HostQp* qp_of(const std::pair<uint64_t, uint32_t>& ref);  // (client, QP handle)
  void apply_denials(Client& c, HostQp& q);
  void detach(Client& c, HostQp& q);

  Impl(Nic& n, HostOptions opts) : nic(n), o(std::move(opts)) {}

  void post_event(uint64_t client, const abi::Event& e) {
    {
      std::lock_guard<std::mutex> g(ev_mu);
      ev_queue.emplace_back(client, e);
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = write(wake, &one, sizeof one);
  }

  void loop();
  void accept_on(size_t dev_index);
  void first_message(int fd, Device* dev);
  bool serve(Client& c);
  void handle(Client& c, const abi::Request& rq, std::span<const uint8_t> payload, int fds[2], int nfds,
              abi::Response& rs, std::vector<uint8_t>& out);
  std::vector<uint8_t> rx_buf;
  void reclaim(Client& c);
  void send_event(Client& c, const abi::Event& e);
  uint32_t new_handle(Client& c);
  void check_links();

  // Requests.
  std::string hello(Client& c, abi::Response& rs);
  std::string reg_mr(Client& c, const abi::RegMr& r, int fd, abi::Response& rs);
  std::string dereg_mr(Client& c, uint32_t handle);
  std::string create_cq(Client& c, const abi::CreateCq& r, int ring_fd, int event_fd, abi::Response& rs);
  std::string destroy_cq(Client& c, uint32_t handle);
  std::string create_qp(Client& c, const abi::CreateQp& r, int fd, abi::Response& rs);
  std::string modify_qp(Client& c, HostQp& q, const abi::QpAttrs& a);
  std::string query_qp(Client& c, HostQp& q, abi::Response& rs);
  std::string destroy_qp(Client& c, uint32_t handle);
  void release_retired(Client& c);
};

// The per-lcore half: polls doorbells, moves WQEs into the engine and
// completions into CQs.
class HostShard final : public ShardApp {
 public:
  HostShard(HostService::Impl& svc, Shard& s)
      : svc_(svc), dev_(s.device().index()), first_qpn_(s.engine().config().first_qpn) {
    by_qpn_.assign(s.engine().config().max_qps, nullptr);
  }

  // Mailbox only.
  void add(HostQp* q) {
    qps_.push_back(q);
    by_qpn_[q->qpn - first_qpn_] = q;
  }
  void remove(HostQp* q) {
    std::erase(qps_, q);
    by_qpn_[q->qpn - first_qpn_] = nullptr;
  }

  bool on_poll(Shard& s, Nanos now) override {
    bool gave = false;
    for (HostQp* q : qps_) {
      if (q->failed) continue;
      // As in verbs, a CQ overrun takes the QPs that complete to it to
      // ERROR: their lost completions would otherwise hold SQ slots for good
      // while they went on sending. Here, not in write_cqe: that runs inside
      // the engine's calls.
      if (q->scq->failed || q->rcq->failed) {
        fail_qp(s, *q, ShardCtr::host_qp_cq_failed, now);
        gave = true;
        continue;
      }
      gave |= poll_sq(s, *q, now);
      gave |= poll_rq(s, *q);
    }
    return gave;
  }

  void on_completion(Shard& s, const engine::Completion& c, Nanos) override {
    HostQp* q = lookup(c.qpn);
    if (!q) return;
    abi::Cqe e{};
    const bool recv = c.opcode == engine::WcOpcode::recv_rdma_with_imm;
    if (recv) {
      e.wr_id = c.wr_id;
    } else {
      e.wqe_index = uint32_t(c.wr_id);
      e.wr_id = q->wr_ids[e.wqe_index & (q->sq_depth - 1)];
    }
    e.qp_num = c.qpn;
    e.byte_len = c.byte_len;
    e.imm = c.imm;
    e.status = static_cast<uint8_t>(c.status);
    e.opcode = recv ? abi::kCqeRecvWriteImm : abi::kCqeWrite;
    e.flags = c.has_imm ? abi::kCqeWithImm : 0;
    write_cqe(s, recv ? *q->rcq : *q->scq, e, recv || c.status != engine::WcStatus::success);
  }

  void on_ev_event(Shard&, const EvEventRecord& e) override { svc_.post_ev_event(dev_, e); }
  // A QP that fails on its own for a reason its completions cannot carry
  // (a WRITE_IMM with no receive posted) raises QP_FATAL, as verbs does.
  void on_qp_error(Shard&, uint32_t qpn, engine::WcStatus why) override {
    if (why != engine::WcStatus::fatal_err) return;
    if (HostQp* q = lookup(qpn)) svc_.post_event(q->client, {kEvQpFatal, 0, q->handle, 0});
  }
  void on_endpoint_response(Shard&, const EndpointResponse& r) override { svc_.post_ep_response(dev_, r); }

 private:
  HostService::Impl& svc_;
  uint32_t dev_;
  uint32_t first_qpn_;
  std::vector<HostQp*> qps_;
  std::vector<HostQp*> by_qpn_;

  HostQp* lookup(uint32_t qpn) const {
    const uint32_t i = qpn - first_qpn_;
    return i < by_qpn_.size() ? by_qpn_[i] : nullptr;
  }

  void fail_qp(Shard& s, HostQp& q, ShardCtr why, Nanos now) {
    s.count(why);
    q.failed = true;
    abi::store_release(q.sq_hdr->error, 1);
    // The error transition reads no attributes; q.attr belongs to the control thread.
    static const engine::QpAttr kNoAttr{};
    s.engine().modify_qp(q.qpn, engine::QpState::error, kNoAttr, now);
    svc_.post_event(q.client, {kEvQpFatal, 0, q.handle, 0});
  }

  void fail_cq(Shard& s, HostCq& cq, ShardCtr why) {
    s.count(why);
    cq.failed = true;
    abi::store_release(cq.hdr->error, 1);
    svc_.post_event(cq.client, {kEvCqErr, 1, cq.handle, 0});
  }

  // Completes a WQE the engine never took (posted to a QP not in RTS).
  void complete_unposted(Shard& s, HostQp& q, uint64_t wr_id, bool recv, uint32_t wqe_index = 0) {
    engine::QpInfo info;
    const bool in_error = s.engine().qp_info(q.qpn, info) && info.state == engine::QpState::error;
    abi::Cqe e{};
    e.wr_id = wr_id;
    e.qp_num = q.qpn;
    e.status = in_error ? kWcWrFlushErr : kWcLocQpOpErr;
    e.opcode = recv ? abi::kCqeRecvWriteImm : abi::kCqeWrite;
    e.wqe_index = wqe_index;
    s.count(ShardCtr::host_sq_flushed);
    write_cqe(s, recv ? *q.rcq : *q.scq, e, true);
  }

  bool poll_sq(Shard& s, HostQp& q, Nanos now) {
    const uint32_t prod = abi::load_acquire(q.sq_hdr->prod);
    uint32_t n = prod - q.sq_cons;
    if (!n) return false;
    if (n > q.sq_depth) {
      fail_qp(s, q, ShardCtr::host_bad_sq_index, now);
      return true;
    }
    n = std::min(n, kSqBudget);
    uint32_t taken = 0;
    for (; taken < n; ++taken) {
      abi::Sqe e;
      // A copy first: the client may rewrite the slot while we look at it.
      std::memcpy(&e, &q.sq[(q.sq_cons + taken) & (q.sq_depth - 1)], sizeof e);
      const uint32_t pos = q.sq_cons + taken;
      q.wr_ids[pos & (q.sq_depth - 1)] = e.wr_id;
      engine::SendWr wr;
      wr.wr_id = pos;
      wr.opcode = e.opcode == abi::kSqeWrite      ? engine::WrOpcode::rdma_write
                  : e.opcode == abi::kSqeWriteImm ? engine::WrOpcode::rdma_write_with_imm
                                                  : engine::WrOpcode::send;  // completes as a bad opcode
      wr.signaled = (e.flags & abi::kSqeSignaled) || q.sig_all;
      wr.local_addr = e.local_addr;
      wr.length = e.length;
      wr.lkey = e.lkey;
      wr.remote_addr = e.remote_addr;
      wr.rkey = e.rkey;
      wr.imm = e.imm;
      const int rc = s.engine().post_send(q.qpn, wr);
      if (rc == ENOMEM) break;
      if (rc != 0) complete_unposted(s, q, e.wr_id, false, pos);
    }
    if (!taken) return false;
    q.sq_cons += taken;
    abi::store_release(q.sq_hdr->cons, q.sq_cons);
    s.count(ShardCtr::host_sqe, taken);
    return true;
  }

  bool poll_rq(Shard& s, HostQp& q) {
    const uint32_t prod = abi::load_acquire(q.rq_hdr->prod);
    uint32_t n = prod - q.rq_cons;
    if (!n) return false;
    if (n > q.rq_depth) {
      fail_qp(s, q, ShardCtr::host_bad_rq_index, 0);
      return true;
    }
    // No budget: receives are cheap, and a WRITE_IMM that finds none fails the QP.
    uint32_t taken = 0;
    for (; taken < n; ++taken) {
      const uint64_t wr_id = q.rq[(q.rq_cons + taken) & (q.rq_depth - 1)].wr_id;
      const int rc = s.engine().post_recv(q.qpn, {wr_id});
      if (rc == ENOMEM) break;
      if (rc != 0) complete_unposted(s, q, wr_id, true);
    }
    if (!taken) return false;
    q.rq_cons += taken;
    abi::store_release(q.rq_hdr->cons, q.rq_cons);
    s.count(ShardCtr::host_rqe, taken);
    return true;
  }

  void write_cqe(Shard& s, HostCq& cq, const abi::Cqe& e, bool solicited) {
    if (cq.failed) {
      s.count(ShardCtr::host_cqe_dropped);
      return;
    }
    const uint32_t used = cq.prod - abi::load_acquire(cq.hdr->cons);
    if (used > cq.depth) return fail_cq(s, cq, ShardCtr::host_bad_cq_index);
    if (used == cq.depth) return fail_cq(s, cq, ShardCtr::host_cq_overflow);
    std::memcpy(&cq.ring[cq.prod & (cq.depth - 1)], &e, sizeof e);
    abi::store_release(cq.hdr->prod, ++cq.prod);
    s.count(ShardCtr::host_cqe);
    if (cq.eventfd < 0) return;
    // Publish prod before reading arm_sn (the client arms, then re-polls):
    // a store then a load needs a full fence, or both sides miss.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint32_t arm = abi::load_acquire(cq.hdr->arm_sn);
    if (arm == cq.fired) return;
    // Solicited-only waits wake on receives and errors (the WRITE_IMM's
    // solicited bit is not carried).
    if (abi::load_acquire(cq.hdr->arm_solicited) && !solicited) return;
    cq.fired = arm;
    abi::store_release(cq.hdr->fired_sn, arm);
    // An interrupt's worth: one syscall per armed wait, not per completion.
    signal_channel(cq.eventfd);
    s.count(ShardCtr::host_channel_signals);
  }
};

// ---------------------------------------------------------------------------
// Control thread.

namespace {

bool send_msg(int fd, const void* p, size_t n) { return send(fd, p, n, MSG_NOSIGNAL) == ssize_t(n); }

// One request (and its payload) with up to two descriptors; returns bytes,
// 0 on hang-up, -1 on error. `fds_lost`: the request came whole, but not all
// its descriptors (we are out of them, or it sent more than two).
ssize_t recv_request(int fd, std::vector<uint8_t>& buf, int fds[2], int& nfds, bool* fds_lost = nullptr) {
  nfds = 0;
  if (fds_lost) *fds_lost = false;
  buf.resize(sizeof(abi::Request) + abi::kMaxPayload);
  alignas(cmsghdr) char ctl[CMSG_SPACE(2 * sizeof(int))];
  iovec iov{buf.data(), buf.size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  const ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n <= 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (nfds < 2)
        fds[nfds++] = f;
      else
        close(f);
    }
  }
  if ((m.msg_flags & MSG_CTRUNC) && !(m.msg_flags & MSG_TRUNC) && fds_lost) {
    *fds_lost = true;
    return n;
  }
  if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    errno = EMSGSIZE;  // the caller closes the descriptors and the connection
    return -1;
  }
  return n;
}

bool send_response(int fd, const abi::Response& rs, const std::vector<uint8_t>& payload) {
  iovec iov[2] = {{const_cast<abi::Response*>(&rs), sizeof rs},
                  {const_cast<uint8_t*>(payload.data()), payload.size()}};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = payload.empty() ? 1 : 2;
  return sendmsg(fd, &m, MSG_NOSIGNAL) == ssize_t(sizeof rs + payload.size());
}

// Whether a client process holds CAP_NET_ADMIN (what a controller needs).
bool peer_is_admin(int fd) {
  ucred cr{};
  socklen_t len = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) return false;
  FILE* f = std::fopen(fmt::format("/proc/{}/status", cr.pid).c_str(), "r");
  if (!f) return false;
  char line[256];
  bool admin = false;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "CapEff:", 7) == 0) admin = (std::strtoull(line + 7, nullptr, 16) >> 12) & 1;
  std::fclose(f);
  return admin;
}

}  // namespace

void HostService::Impl::loop() {
  std::vector<pollfd> pfds;
  while (!stopping.load(std::memory_order_acquire)) {
    pfds.clear();
    pfds.push_back({wake, POLLIN, 0});
    for (int fd : listen_fds) pfds.push_back({fd, POLLIN, 0});
    for (auto& [fd, d] : pending) pfds.push_back({fd, POLLIN, 0});
    for (auto& [id, c] : clients) {
      pfds.push_back({c->fd, POLLIN, 0});
      if (c->events_fd >= 0) pfds.push_back({c->events_fd, POLLIN, 0});
    }
    bool holding = false;  // released memory that waits on WRs (release_retired)
    for (auto& [id, c] : clients) holding |= !c->retired.empty();
    if (poll(pfds.data(), pfds.size(), holding ? 10 : 100) < 0 && errno != EINTR) break;
    nic.tick_control();
    check_links();
    size_t i = 0;
    if (pfds[i++].revents) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = read(wake, &v, sizeof v);
      std::vector<std::pair<uint64_t, abi::Event>> evs;
      {
        std::lock_guard<std::mutex> g(ev_mu);
        evs.swap(ev_queue);
      }
      for (auto& [id, e] : evs)
        if (auto it = clients.find(id); it != clients.end()) send_event(*it->second, e);
      deliver_ev_events();
    }
    std::vector<size_t> accepting;  // after the loops below: they index pfds by `pending`
    for (size_t d = 0; d < listen_fds.size(); ++d)
      if (pfds[i++].revents & POLLIN) accepting.push_back(d);
    std::vector<std::pair<int, Device*>> ready;
    for (auto& [fd, dev] : pending)
      if (pfds[i++].revents) ready.emplace_back(fd, dev);
    std::vector<uint64_t> gone;
    for (auto& [id, c] : clients) {
      const short rev = pfds[i++].revents;
      if (c->events_fd >= 0 && (pfds[i++].revents & (POLLHUP | POLLERR | POLLIN))) {
        close(c->events_fd);  // the client closed its event stream (it never sends on it)
        c->events_fd = -1;
      }
      if (rev && !serve(*c)) gone.push_back(id);
    }
    for (auto& [fd, dev] : ready) {
      pending.erase(fd);
      pending_since.erase(fd);
      first_message(fd, dev);
    }
    // A connection that says nothing for 5 s only holds a descriptor.
    const auto now = std::chrono::steady_clock::now();
    for (auto it = pending_since.begin(); it != pending_since.end();)
      if (now - it->second > std::chrono::seconds(5)) {
        close(it->first);
        pending.erase(it->first);
        it = pending_since.erase(it);
        ctr.inc(HostCtr::bad_requests);
      } else {
        ++it;
      }
    for (uint64_t id : gone) {
      reclaim(*clients[id]);
      clients.erase(id);
    }
    if (holding)
      for (auto& [id, c] : clients) release_retired(*c);
    for (size_t d : accepting) accept_on(d);
  }
}

void HostService::Impl::accept_on(size_t d) {
  int fd = accept4(listen_fds[d], nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
    // Out of descriptors: the spare takes the connection just long enough to
    // say so. Left in the backlog it kept the listening socket readable, so
    // this thread spun, and its client waited for ever.
    close(spare_fd);
    fd = accept4(listen_fds[d], nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      pollfd hello{fd, POLLIN, 0};
      poll(&hello, 1, 100);  // its first request, so that the answer is read as the reply to it
      std::vector<uint8_t> buf;
      int fds[2], nfds = 0;
      recv_request(fd, buf, fds, nfds);
      for (int k = 0; k < nfds; ++k) close(fds[k]);
      abi::Response rs{};
      rs.err = EMFILE;
      fmt::format_to_n(rs.message, sizeof rs.message - 1, "mrc-nic is out of file descriptors; try again later");
      send_response(fd, rs, {});
      close(fd);
      ctr.inc(HostCtr::clients_refused_fds);
    }
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return;
  }
  if (fd < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      ctr.inc(HostCtr::accepts_failed);
    return;
  }
  pending[fd] = nic.devices()[d].get();
  pending_since[fd] = std::chrono::steady_clock::now();
}

void HostService::Impl::first_message(int fd, Device* dev) {
  std::vector<uint8_t> buf;
  int fds[2], nfds = 0;
  const ssize_t n = recv_request(fd, buf, fds, nfds);
  for (int k = 0; k < nfds; ++k) close(fds[k]);
  abi::Request rq{};
  if (n == ssize_t(sizeof rq)) std::memcpy(&rq, buf.data(), sizeof rq);
  if (n != ssize_t(sizeof rq)) {
    if (n != 0) ctr.inc(HostCtr::bad_requests);
    close(fd);
    return;
  }
  if (rq.op == abi::Op::events) {
    for (auto& [id, c] : clients)
      if (c->token == rq.events_token && c->dev == dev && c->events_fd < 0) {
        c->events_fd = fd;
        return;
      }
    ctr.inc(HostCtr::bad_requests);
    close(fd);
    return;
  }
  abi::Response rs{};
  if (rq.op != abi::Op::hello || rq.hello.abi_version != abi::kAbiVersion) {
    rs.err = EPROTO;
    fmt::format_to_n(rs.message, sizeof rs.message - 1, "device speaks host ABI {}; the library {}",
                     abi::kAbiVersion, rq.hello.abi_version);
    ctr.inc(HostCtr::bad_requests);
    send_response(fd, rs, {});
    close(fd);
    return;
  }
  auto c = std::make_unique<Client>();
  c->admin = peer_is_admin(fd);
  c->id = next_client++;
  c->token = rng() | 1;
  c->fd = fd;
  c->dev = dev;
  c->pid = rq.hello.pid;
  hello(*c, rs);
  if (!send_response(fd, rs, {})) {
    close(fd);
    return;
  }
  ctr.inc(HostCtr::clients_connected);
  clients[c->id] = std::move(c);
}

std::string HostService::Impl::hello(Client& c, abi::Response& rs) {
  abi::DeviceInfo& d = rs.device;
  Device& dev = *c.dev;
  d.abi_version = abi::kAbiVersion;
  fmt::format_to_n(d.name, sizeof d.name - 1, "{}", dev.name());
  const uint64_t mac0 = dev.plane_addr(0).mac;
  d.node_guid = eui64(mac0);
  d.num_planes = dev.num_planes();
  d.mtu = nic.spec().mtu;
  // 0/1: link-local (RoCE v1, v2); then each plane's address, v1 and v2.
  uint8_t ll[16] = {0xfe, 0x80};
  for (int k = 0; k < 8; ++k) ll[8 + k] = uint8_t(d.node_guid >> (56 - 8 * k));
  std::memcpy(d.gids[0], ll, 16);
  std::memcpy(d.gids[1], ll, 16);
  d.gid_count = 2;
  for (uint32_t p = 0; p < dev.num_planes() && d.gid_count + 2 <= abi::kGidTableLen; ++p) {
    std::memcpy(d.gids[d.gid_count++], dev.plane_addr(p).ip.bytes.data(), 16);
    std::memcpy(d.gids[d.gid_count++], dev.plane_addr(p).ip.bytes.data(), 16);
  }
  d.max_qp = std::min<uint32_t>(o.max_qps_per_client, dev.spec().engine.max_qps * uint32_t(dev.shards().size()));
  d.max_cq = 4096;
  d.max_mr = engine::kMaxMrs;
  d.max_pd = 1024;
  d.max_sq_depth = o.max_caps.max_send_wr;
  d.max_rq_depth = o.max_caps.max_recv_wr;
  d.max_cq_depth = o.max_cq_depth;
  d.max_mr_size = uint64_t(1) << 40;
  d.max_wimm = 1024;
  d.max_wimm_dest = 1024;
  d.max_mpr = wire::kMaxMpr;
  d.mpr_resolution = 1;
  d.transport = dev.spec().engine.transport == engine::Transport::mrc ? 0 : 1;
  d.events_token = c.token;
  return {};
}

bool HostService::Impl::serve(Client& c) {
  int fds[2] = {-1, -1}, nfds = 0;
  bool fds_lost = false;
  const ssize_t n = recv_request(c.fd, rx_buf, fds, nfds, &fds_lost);
  if (n <= 0)
    for (int k = 0; k < nfds; ++k) close(fds[k]);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n <= 0) return false;
  abi::Response rs{};
  std::vector<uint8_t> out;
  abi::Request rq{};
  if (size_t(n) >= sizeof rq) std::memcpy(&rq, rx_buf.data(), sizeof rq);
  if (size_t(n) < sizeof rq || size_t(n) != sizeof rq + rq.payload_len) {
    ctr.inc(HostCtr::bad_requests);
    rs.err = EPROTO;
    fmt::format_to_n(rs.message, sizeof rs.message - 1, "request of {} bytes, expected {} and its payload", n,
                     sizeof rq);
  } else if (fds_lost) {
    // Most likely we are out of descriptors: the client is not to blame,
    // and keeps its connection and everything it made.
    ctr.inc(HostCtr::requests_fds_lost);
    rs.err = EMFILE;
    fmt::format_to_n(rs.message, sizeof rs.message - 1,
                     "the request's descriptors could not be taken (mrc-nic is out of them, or more than 2 "
                     "were sent)");
  } else {
    handle(c, rq, {rx_buf.data() + sizeof rq, rq.payload_len}, fds, nfds, rs, out);
  }
  for (int k = 0; k < nfds; ++k)
    if (fds[k] >= 0) close(fds[k]);
  if (rs.err) ctr.inc(HostCtr::requests_failed);
  rs.payload_len = uint32_t(out.size());
  return send_response(c.fd, rs, out);
}

void HostService::Impl::handle(Client& c, const abi::Request& rq, std::span<const uint8_t> payload, int fds[2],
                               int nfds, abi::Response& rs, std::vector<uint8_t>& out) {
  std::string err;
  auto fd_at = [&](int k) {
    if (k >= nfds) return -1;
    const int f = fds[k];
    fds[k] = -1;  // ours now
    return f;
  };
  switch (rq.op) {
    case abi::Op::query_port: {
      uint32_t up = 0;
      for (uint32_t p = 0; p < c.dev->num_planes(); ++p)
        if (c.dev->link_reads_up(p)) up |= 1u << p;
      rs.port = {up != 0, nic.spec().mtu, up};
      break;
    }
    case abi::Op::alloc_pd:
      if (c.pds.size() >= 1024) {
        err = "too many protection domains";
        rs.err = ENOMEM;
        break;
      }
      // PD ids are device-wide: never hand out one another client holds.
      for (bool taken = true; taken;) {
        rs.handle = next_pd++;
        taken = rs.handle == 0;
        for (auto& [id, other] : clients) taken |= other->pds.count(rs.handle) > 0;
      }
      c.pds.insert(rs.handle);
      break;
    case abi::Op::dealloc_pd: {
      if (!c.pds.count(rq.handle)) {
        rs.err = EINVAL;
        err = "no such protection domain";
        break;
      }
      bool busy = false;
      for (auto& [h, m] : c.mrs) busy |= m.pd == rq.handle;
      for (auto& [h, q] : c.qps) busy |= q->pd == rq.handle;
      if (busy) {
        rs.err = EBUSY;
        err = "protection domain still has MRs or QPs";
        break;
      }
      c.pds.erase(rq.handle);
      break;
    }
    case abi::Op::reg_mr: {
      const int fd = fd_at(0);
      err = reg_mr(c, rq.reg_mr, fd, rs);
      if (fd >= 0) close(fd);
      if (!err.empty() && !rs.err) rs.err = EINVAL;
      break;
    }
    case abi::Op::dereg_mr:
      err = dereg_mr(c, rq.handle);
      if (!err.empty()) rs.err = EINVAL;
      break;
    case abi::Op::create_cq: {
      const int ring = fd_at(0), ev = fd_at(1);
      err = create_cq(c, rq.create_cq, ring, ev, rs);
      if (ring >= 0) close(ring);
      // The CQ keeps the channel's socket only when it was asked for one.
      if (ev >= 0 && (!err.empty() || !rq.create_cq.with_channel)) close(ev);
      if (!err.empty() && !rs.err) rs.err = EINVAL;
      break;
    }
    case abi::Op::destroy_cq:
      err = destroy_cq(c, rq.handle);
      if (!err.empty()) rs.err = err.find("busy") != std::string::npos ? EBUSY : EINVAL;
      break;
    case abi::Op::create_qp: {
      const int fd = fd_at(0);
      err = create_qp(c, rq.create_qp, fd, rs);
      if (fd >= 0) close(fd);
      if (!err.empty() && !rs.err) rs.err = EINVAL;
      break;
    }
    case abi::Op::modify_qp:
    case abi::Op::query_qp: {
      auto it = c.qps.find(rq.handle);
      if (it == c.qps.end()) {
        rs.err = EINVAL;
        err = "no such QP";
        break;
      }
      err = rq.op == abi::Op::modify_qp ? modify_qp(c, *it->second, rq.modify_qp) : query_qp(c, *it->second, rs);
      if (!err.empty()) rs.err = EINVAL;
      break;
    }
    case abi::Op::destroy_qp:
      err = destroy_qp(c, rq.handle);
      if (!err.empty()) rs.err = EINVAL;
      break;
    case abi::Op::ctl_query:
    case abi::Op::ctl_port:
    case abi::Op::ctl_get_fmt:
    case abi::Op::ctl_put_fmt:
    case abi::Op::ctl_get_ev:
    case abi::Op::ctl_put_ev:
    case abi::Op::ctl_get_cc:
    case abi::Op::ctl_put_cc:
    case abi::Op::ctl_event_cq:
    case abi::Op::ctl_ep_send: {
      const int ring = fd_at(0), ev = fd_at(1);
      err = ctl_handle(c, rq, payload, ring, ev, rs, out);
      if (ring >= 0) close(ring);
      const bool kept = err.empty() && rq.op == abi::Op::ctl_event_cq && rq.ctl_event_cq.with_channel;
      if (ev >= 0 && !kept) close(ev);
      if (!err.empty() && !rs.err) rs.err = EINVAL;
      break;
    }
    default:
      ctr.inc(HostCtr::bad_requests);
      rs.err = EPROTO;
      err = fmt::format("unknown request {}", uint32_t(rq.op));
  }
  if (!err.empty()) fmt::format_to_n(rs.message, sizeof rs.message - 1, "{}", err);
}

std::string HostService::Impl::reg_mr(Client& c, const abi::RegMr& r, int fd, abi::Response& rs) {
  if (!c.pds.count(r.pd)) return "no such protection domain";
  if (r.access & ~kAccessKnown) return fmt::format("unknown access flags {:#x}", r.access & ~kAccessKnown);
  // Verbs: remote write needs local write.
  if ((r.access & 0x2) && !(r.access & 0x1)) return "IBV_ACCESS_REMOTE_WRITE requires IBV_ACCESS_LOCAL_WRITE";
  if (!engine::region_valid(r.iova, r.length)) return "empty or wrapping region";
  if (c.mrs.size() >= engine::kMaxMrs) {
    ctr.inc(HostCtr::mr_table_full);
    rs.err = ENOMEM;
    return fmt::format("the device holds at most {} memory regions", engine::kMaxMrs);
  }
  auto seg = c.segments.find(r.segment);
  if (r.new_segment_bytes) {
    if (seg != c.segments.end()) return "segment id in use";
    Segment s;
    if (auto e = map_memfd(fd, r.new_segment_bytes, s.map); !e.empty()) {
      ctr.inc(HostCtr::bad_memfds);
      return "memory: " + e;
    }
    seg = c.segments.emplace(r.segment, std::move(s)).first;
  } else if (seg == c.segments.end()) {
    return "no such segment";
  }
  Segment& s = seg->second;
  if (r.offset > s.map.bytes || r.length > s.map.bytes - r.offset) {
    if (!s.refs) {
      s.map.unmap();
      c.segments.erase(seg);
    }
    return "region lies outside its memory segment";
  }
  uint32_t lkey = 0, rkey = 0;
  const uint32_t access = r.access & (engine::kAccessLocalWrite | engine::kAccessRemoteWrite | engine::kAccessRemoteRead);
  if (!c.dev->reg_mr(r.pd, static_cast<uint8_t*>(s.map.p) + r.offset, r.iova, r.length, access, lkey, rkey)) {
    if (!s.refs) {
      s.map.unmap();
      c.segments.erase(seg);
    }
    ctr.inc(HostCtr::mr_table_full);
    rs.err = ENOMEM;
    return fmt::format("the device's region table is full ({} regions, all clients)", engine::kMaxMrs);
  }
  ++s.refs;
  const uint32_t h = new_handle(c);
  c.mrs[h] = {lkey, rkey, r.pd, r.segment};
  rs.mr = {h, lkey, rkey};
  ctr.inc(HostCtr::mrs_registered);
  return {};
}

std::string HostService::Impl::dereg_mr(Client& c, uint32_t handle) {
  auto it = c.mrs.find(handle);
  if (it == c.mrs.end()) return "no such memory region";
  c.dev->dereg_mr(it->second.lkey);
  auto seg = c.segments.find(it->second.segment);
  if (seg != c.segments.end() && --seg->second.refs == 0) {
    Retired r{seg->second.map, {}};
    for (auto& [h, q] : c.qps) {
      engine::QpInfo info;
      bool busy = false;
      q->shard->call([&] { busy = q->shard->engine().qp_info(q->qpn, info) && info.sq_outstanding > 0; });
      if (busy) r.waits.push_back({h, q->resets, info.sq_posted});
    }
    c.retired.push_back(std::move(r));
    c.segments.erase(seg);
  }
  c.mrs.erase(it);
  release_retired(c);
  return {};
}

// Unmaps released memory whose QPs have completed every WR posted before
// the release; the control loop asks again while any is held. Waiting for
// every QP to be idle at once held it for as long as another QP streamed.
void HostService::Impl::release_retired(Client& c) {
  for (Retired& r : c.retired) {
    std::erase_if(r.waits, [&](const Retired::Wait& w) {
      auto it = c.qps.find(w.qp_handle);
      if (it == c.qps.end() || it->second->resets != w.resets) return true;
      HostQp& q = *it->second;
      engine::QpInfo info;
      bool found = false;
      q.shard->call([&] { found = q.shard->engine().qp_info(q.qpn, info); });
      const uint32_t completed = info.sq_posted - info.sq_outstanding;
      return !found || int32_t(completed - w.sq_posted) >= 0;
    });
    if (r.waits.empty()) r.map.unmap();
  }
  std::erase_if(c.retired, [](const Retired& r) { return r.waits.empty(); });
}

std::string HostService::Impl::create_cq(Client& c, const abi::CreateCq& r, int ring_fd, int event_fd,
                                         abi::Response& rs) {
  if (!is_pow2(r.depth) || r.depth > o.max_cq_depth) return fmt::format("CQ depth {} (power of two up to {})", r.depth, o.max_cq_depth);
  if (r.with_channel && !is_socket(event_fd)) return "completion channel without its socket";
  if (c.cqs.size() >= 4096) {
    rs.err = ENOMEM;
    return "too many CQs";
  }
  auto cq = std::make_unique<HostCq>();
  if (auto e = map_memfd(ring_fd, abi::cq_bytes(r.depth), cq->map); !e.empty()) {
    ctr.inc(HostCtr::bad_memfds);
    return "CQ memory: " + e;
  }
  cq->handle = new_handle(c);
  cq->depth = r.depth;
  cq->hdr = static_cast<abi::QueueHeader*>(cq->map.p);
  cq->ring = abi::entries<abi::Cqe>(cq->map.p);
  cq->eventfd = r.with_channel ? event_fd : -1;
  cq->client = c.id;
  rs.handle = cq->handle;
  c.cqs[cq->handle] = std::move(cq);
  return {};
}

std::string HostService::Impl::destroy_cq(Client& c, uint32_t handle) {
  auto it = c.cqs.find(handle);
  if (it == c.cqs.end()) {  // an EV event CQ?
    auto& sinks = ctl[c.dev->index()].sinks;
    for (auto sk = sinks.begin(); sk != sinks.end(); ++sk)
      if (sk->client == c.id && sk->handle == handle) {
        sk->map.unmap();
        if (sk->eventfd >= 0) close(sk->eventfd);
        sinks.erase(sk);
        return {};
      }
    return "no such CQ";
  }
  if (it->second->qp_refs) return "CQ busy: QPs still use it";
  it->second->map.unmap();
  if (it->second->eventfd >= 0) close(it->second->eventfd);
  c.cqs.erase(it);
  return {};
}

std::string HostService::Impl::create_qp(Client& c, const abi::CreateQp& r, int fd, abi::Response& rs) {
  if (!c.pds.count(r.pd)) return "no such protection domain";
  auto sit = c.cqs.find(r.send_cq), rit = c.cqs.find(r.recv_cq);
  if (sit == c.cqs.end() || rit == c.cqs.end()) return "no such CQ";
  if (!is_pow2(r.sq_depth) || r.sq_depth > o.max_caps.max_send_wr || !is_pow2(r.rq_depth) ||
      r.rq_depth > o.max_caps.max_recv_wr)
    return fmt::format("queue depths {}/{} (powers of two up to {}/{})", r.sq_depth, r.rq_depth,
                       o.max_caps.max_send_wr, o.max_caps.max_recv_wr);
  if (c.qps.size() >= o.max_qps_per_client) {
    rs.err = ENOMEM;
    return "too many QPs for one client";
  }
  HostCq& scq = *sit->second;
  HostCq& rcq = *rit->second;
  const uint32_t di = c.dev->index();
  int shard = scq.shard >= 0 ? scq.shard : rcq.shard;
  if (scq.shard >= 0 && rcq.shard >= 0 && scq.shard != rcq.shard)
    return "the send and receive CQs already serve QPs on different lcores";
  if (shard < 0) shard = int(next_shard[di]++ % c.dev->shards().size());
  auto q = std::make_unique<HostQp>();
  if (auto e = map_memfd(fd, abi::qp_bytes(r.sq_depth, r.rq_depth), q->map); !e.empty()) {
    ctr.inc(HostCtr::bad_memfds);
    return "QP memory: " + e;
  }
  auto* base = static_cast<uint8_t*>(q->map.p);
  q->sq_hdr = reinterpret_cast<abi::QueueHeader*>(base);
  q->sq = abi::entries<abi::Sqe>(base);
  q->rq_hdr = reinterpret_cast<abi::QueueHeader*>(base + abi::qp_sq_bytes(r.sq_depth));
  q->rq = abi::entries<abi::Rqe>(q->rq_hdr);
  q->sq_depth = r.sq_depth;
  q->wr_ids.assign(r.sq_depth, 0);
  q->rq_depth = r.rq_depth;
  q->sig_all = r.sq_sig_all != 0;
  q->pd = r.pd;
  q->scq = &scq;
  q->rcq = &rcq;
  q->client = c.id;
  q->attr = o.qp_defaults;
  q->shard = c.dev->shards()[shard].get();
  HostShard* app = apps[di][shard].get();
  HostQp* qp = q.get();
  q->handle = new_handle(c);  // before the lcore can see the QP (its events name it)
  uint32_t qpn = 0;
  q->shard->call([&] {
    qpn = qp->shard->engine().create_qp(r.pd, {r.sq_depth, r.rq_depth});
    if (qpn) {
      qp->qpn = qpn;
      app->add(qp);
    }
  });
  if (!qpn) {
    q->map.unmap();
    rs.err = ENOMEM;
    return "the device is out of QPs";
  }
  scq.shard = rcq.shard = shard;
  ++scq.qp_refs;
  ++rcq.qp_refs;
  rs.qp = {q->handle, qpn};
  c.qps[q->handle] = std::move(q);
  ctr.inc(HostCtr::qps_created);
  return {};
}

std::string HostService::Impl::modify_qp(Client& c, HostQp& q, const abi::QpAttrs& a) {
  engine::QpAttr attr = q.attr;
  Device& dev = *c.dev;
  if (a.mask & abi::kModPmtu) {
    if (a.pmtu < 256 || a.pmtu > 4096 || !is_pow2(a.pmtu)) return fmt::format("path MTU {}", a.pmtu);
    if (a.pmtu > nic.spec().mtu) return fmt::format("path MTU {} exceeds the device MTU {}", a.pmtu, nic.spec().mtu);
    attr.pmtu = a.pmtu;
  }
  if (a.mask & abi::kModSqPsn) attr.sq_psn = a.sq_psn & 0xFFFFFF;
  if (a.mask & abi::kModRqPsn) attr.rq_psn = a.rq_psn & 0xFFFFFF;
  if (a.mask & abi::kModDestQpn) attr.dest_qpn = a.dest_qpn & 0xFFFFFF;
  if (a.mask & abi::kModTimeout) {
    if (a.timeout > 24) return fmt::format("timeout {} (at most 24)", a.timeout);
    attr.timeout = a.timeout;
  }
  if (a.mask & abi::kModRetry) {
    if (a.retry_linear > 7 || a.retry_exp > 25)
      return fmt::format("retry counts {}/{} (linear at most 7, exponential at most 25)", a.retry_linear, a.retry_exp);
    attr.retry_linear = a.retry_linear;
    attr.retry_exp = a.retry_exp;
  }
  if (a.mask & abi::kModMpr) {
    if (!a.mpr) return "MPR 0";
    attr.mpr = a.mpr;
  }
  if (a.mask & abi::kModMprDest) {
    if (!a.mpr_dest) return "destination MPR 0";
    attr.mpr_dest = a.mpr_dest;
  }
  if (a.mask & abi::kModWimm) {
    if (!a.max_wimm || a.max_wimm > 1024) return fmt::format("max WIMM {} (1..1024)", a.max_wimm);
    attr.max_wimm = a.max_wimm;
  }
  if (a.mask & abi::kModWimmDest) {
    if (!a.max_wimm_dest || a.max_wimm_dest > 1024) return fmt::format("max WIMM dest {} (1..1024)", a.max_wimm_dest);
    attr.max_wimm_dest = a.max_wimm_dest;
  }
  // Profiles are programmed by a controller (mrc_ctl); 0 is the device's own.
  // The engine takes a QP's EVs and CC at INIT, so that is when they attach.
  CtlState& st = ctl[dev.index()];
  if ((a.mask & (abi::kModEvProfile | abi::kModCcProfile)) && !((a.mask & abi::kModState) && a.state == kIbvInit))
    return "EV and CC profiles are set on the move to INIT";
  const EvRec* ev_rec = nullptr;
  const CcRec* cc_rec = nullptr;
  if ((a.mask & abi::kModEvProfile) && a.ev_profile) {
    auto it = st.evs.find(a.ev_profile);
    if (it == st.evs.end() || it->second.e.state != kStateOnline)
      return fmt::format("EV profile {} is not ONLINE", a.ev_profile);
    ev_rec = &it->second;
    const abi::CtlFmt& fm = st.fmts[ev_rec->e.fmt_id];
    attr.ev.format = wire_format(fm.mode);
    attr.ev.evs.clear();
    for (const auto& en : ev_rec->entries) {
      wire::EvBytes v{};
      std::memcpy(v.data(), en.val, 32);
      attr.ev.evs.push_back({wire::ev_value(v, fmt_bits(fm)), uint8_t(en.port - 1)});
    }
    attr.ev.ev_min_active = std::max<uint32_t>(1, ev_rec->e.min_active);
    attr.ev.active_per_plane = 0;
  } else if ((a.mask & abi::kModEvProfile) && !a.ev_profile) {
    attr.ev = o.qp_defaults.ev;
  }
  if ((a.mask & abi::kModCcProfile) && a.cc_profile) {
    auto it = st.ccs.find(a.cc_profile);
    if (it == st.ccs.end() || it->second.c.state != kStateOnline)
      return fmt::format("CC profile {} is not ONLINE", a.cc_profile);
    cc_rec = &it->second;
    const std::string algo(cc_rec->c.algorithm, strnlen(cc_rec->c.algorithm, sizeof cc_rec->c.algorithm));
    attr.cc = o.qp_defaults.cc;
    attr.cc.algo = algo == kCcAlgorithms[0] ? engine::CcAlgo::nscc
                   : algo == kCcAlgorithms[1] ? engine::CcAlgo::dcqcn
                                               : engine::CcAlgo::none;
    if (attr.cc.algo == engine::CcAlgo::nscc && cc_rec->c.has_config) {
      const auto& n = cc_rec->c.nscc;
      auto& x = attr.cc.nscc;
      x.disable_qa = n.disable_qa != 0;
      x.adjust_bytes_threshold = n.adjust_bytes_threshold;
      x.adjust_period_threshold = n.adjust_period_threshold;
      x.base_rtt = n.base_rtt;
      x.eta = n.eta;
      x.fi = n.fi;
      x.fi_scale = n.fi_scale;
      x.gamma = n.gamma;
      x.max_md_jump = n.max_md_jump;
      x.max_cwnd = n.max_cwnd;
      x.qa_gate = uint8_t(n.qa_gate);
      x.qa_threshold = n.qa_threshold;
      x.target_delay = n.target_delay;
    }
  } else if ((a.mask & abi::kModCcProfile) && !a.cc_profile) {
    attr.cc = o.qp_defaults.cc;
  }
  // qp_access_flags take effect at INIT (verbs' default is none); any later
  // move, RTS->RTS too, may change them.
  if ((a.mask & abi::kModState) && a.state == kIbvInit)
    attr.access = (a.mask & abi::kModAccess) ? a.access : q.access;
  else if (a.mask & abi::kModAccess)
    attr.access = a.access;
  if (a.mask & abi::kModDgid) {
    wire::IpAddr dst;
    std::memcpy(dst.bytes.data(), a.dgid, 16);
    // The plane whose subnet holds the GID gives the host part; the peer
    // has the same host part on every plane.
    const auto net_bits = [&](const wire::IpAddr& ip) { return ip.is_v4() ? 96 + o.prefix_len_v4 : o.prefix_len_v6; };
    const auto same_net = [&](const wire::IpAddr& x, const wire::IpAddr& y, uint32_t bits) {
      for (uint32_t b = 0; b < bits; ++b)
        if (((x.bytes[b / 8] ^ y.bytes[b / 8]) >> (7 - b % 8)) & 1) return false;
      return true;
    };
    bool found = false;
    for (uint32_t p = 0; p < dev.num_planes() && !found; ++p)
      found = dev.plane_addr(p).ip.is_v4() == dst.is_v4() && same_net(dev.plane_addr(p).ip, dst, net_bits(dst));
    if (!found) return fmt::format("destination GID {} is on none of {}'s plane subnets", dst.str(), dev.name());
    for (uint32_t p = 0; p < dev.num_planes(); ++p) {
      wire::IpAddr r = dev.plane_addr(p).ip;
      const uint32_t bits = net_bits(r);
      for (uint32_t b = bits; b < 128; ++b) {
        const uint8_t bit = uint8_t(0x80 >> (b % 8));
        r.bytes[b / 8] = uint8_t((r.bytes[b / 8] & ~bit) | (dst.bytes[b / 8] & bit));
      }
      // Blocks this control thread up to the timeout for a silent peer.
      const auto mac = dev.resolve(p, r, o.resolve_timeout_s);
      if (!mac)
        return fmt::format("no answer to ARP/ND for {} (the peer on plane {}) within {} s; a neighbour entry "
                           "names it statically",
                           r.str(), p, o.resolve_timeout_s);
      attr.remote[p] = {*mac, r};
    }
  }
  std::string err;
  Shard& s = *q.shard;
  s.call([&] {
    engine::QpInfo info;
    if (!s.engine().qp_info(q.qpn, info)) {
      err = "QP vanished";
      return;
    }
    if ((a.mask & abi::kModCurState) && to_ibv_state(info.state) != a.cur_state) {
      err = fmt::format("QP is {}, not the asserted current state", engine::qp_state_name(info.state));
      return;
    }
    const engine::QpState to = (a.mask & abi::kModState) ? to_engine_state(a.state) : info.state;
    if (!(a.mask & abi::kModState) && to != engine::QpState::rts && to != engine::QpState::init) return;
    // The engine takes each attribute on the move that needs it (INIT->RTR,
    // RTR->RTS); one given after that move would be reported by query and
    // never used, so it is refused, as verbs refuses it.
    constexpr uint32_t kRtrAttrs =
        abi::kModPmtu | abi::kModRqPsn | abi::kModDestQpn | abi::kModMprDest | abi::kModWimmDest | abi::kModDgid;
    constexpr uint32_t kRtsAttrs = abi::kModSqPsn | abi::kModTimeout | abi::kModRetry | abi::kModMpr | abi::kModWimm;
    const uint32_t taken = info.state == engine::QpState::rts   ? kRtrAttrs | kRtsAttrs
                           : info.state == engine::QpState::rtr ? kRtrAttrs
                                                                : 0;
    if (to == engine::QpState::rts && (a.mask & taken)) {
      err = fmt::format(
          "path, PSN, timeout, retry, MPR and WIMM attributes cannot change once the QP is {} "
          "(only access flags can)",
          engine::qp_state_name(info.state));
      return;
    }
    if ((a.mask & abi::kModState) && a.state != kIbvReset && a.state != kIbvInit && a.state != kIbvRtr &&
        a.state != kIbvRts && a.state != kIbvErr) {
      err = fmt::format("QP state {} is not supported", a.state);
      return;
    }
    const auto rc = s.engine().modify_qp(q.qpn, to, attr, nic.now());
    if (rc == engine::ModifyError::ok && to == engine::QpState::reset) {
      empty_rings(s, q, info.sq_outstanding + info.rq_posted);
      ++q.resets;
    }
    if (rc == engine::ModifyError::bad_transition)
      err = fmt::format("no transition from {} to {}", engine::qp_state_name(info.state), engine::qp_state_name(to));
    else if (rc != engine::ModifyError::ok)
      err = fmt::format("attributes refused for {}", engine::qp_state_name(to));
  });
  if (!err.empty()) return err;
  if ((a.mask & abi::kModState) && (a.state == kIbvReset || a.state == kIbvInit)) release_ev_views(st, q);
  q.attr = attr;
  if (a.mask & abi::kModDgid) {
    std::memcpy(q.dgid.data(), a.dgid, 16);
    q.sgid_index = a.sgid_index;
  }
  if (a.mask & abi::kModAccess) q.access = a.access;
  if (a.mask & abi::kModEvProfile) {
    if (q.ev_profile)
      if (auto it = st.evs.find(q.ev_profile); it != st.evs.end()) std::erase(it->second.qps, std::make_pair(c.id, q.handle));
    q.ev_profile = a.ev_profile;
    if (ev_rec) st.evs[a.ev_profile].qps.emplace_back(c.id, q.handle);
  }
  if (a.mask & abi::kModCcProfile) {
    if (q.cc_profile)
      if (auto it = st.ccs.find(q.cc_profile); it != st.ccs.end() && it->second.qp_refs) --it->second.qp_refs;
    q.cc_profile = a.cc_profile;
    if (cc_rec) ++st.ccs[a.cc_profile].qp_refs;
  }
  // The engine builds a QP's EVs at RTR: denied ones are applied then.
  if ((a.mask & abi::kModState) && a.state == kIbvRtr) apply_denials(c, q);
  return {};
}

std::string HostService::Impl::query_qp(Client&, HostQp& q, abi::Response& rs) {
  engine::QpInfo info;
  bool ok = false;
  q.shard->call([&] { ok = q.shard->engine().qp_info(q.qpn, info); });
  if (!ok) return "QP vanished";
  abi::QpAttrs& a = rs.qp_attrs;
  a.state = a.cur_state = to_ibv_state(info.state);
  a.pmtu = q.attr.pmtu;
  a.sq_psn = q.attr.sq_psn;
  a.rq_psn = q.attr.rq_psn;
  a.dest_qpn = q.attr.dest_qpn;
  std::memcpy(a.dgid, q.dgid.data(), 16);
  a.sgid_index = q.sgid_index;
  a.access = q.access;
  a.timeout = q.attr.timeout;
  a.retry_linear = q.attr.retry_linear;
  a.retry_exp = q.attr.retry_exp;
  a.mpr = uint8_t(std::min<uint32_t>(q.attr.mpr, 255));
  a.mpr_dest = uint8_t(std::min<uint32_t>(q.attr.mpr_dest, 255));
  a.max_wimm = uint16_t(q.attr.max_wimm);
  a.max_wimm_dest = uint16_t(q.attr.max_wimm_dest);
  return {};
}

std::string HostService::Impl::destroy_qp(Client& c, uint32_t handle) {
  auto it = c.qps.find(handle);
  if (it == c.qps.end()) return "no such QP";
  HostQp* q = it->second.get();
  HostShard* app = nullptr;
  for (size_t k = 0; k < c.dev->shards().size(); ++k)
    if (c.dev->shards()[k].get() == q->shard) app = apps[c.dev->index()][k].get();
  detach(c, *q);
  q->shard->call([&] {
    app->remove(q);
    q->shard->engine().destroy_qp(q->qpn);
  });
  q->map.unmap();
  --q->scq->qp_refs;
  --q->rcq->qp_refs;
  c.qps.erase(it);
  release_retired(c);
  return {};
}

void HostService::Impl::send_event(Client& c, const abi::Event& e) {
  if (c.events_fd >= 0 && send_msg(c.events_fd, &e, sizeof e))
    ctr.inc(HostCtr::async_events);
  else  // no events connection, or its buffer is full: the client reads too slowly
    ctr.inc(HostCtr::async_events_dropped);
}

// Handles name a client's MRs, CQs, QPs and event CQs. A client that
// allocates 2^32 of them wraps the counter: a handle still in use is passed
// over, never given twice.
uint32_t HostService::Impl::new_handle(Client& c) {
  const auto& sinks = ctl[c.dev->index()].sinks;
  auto taken = [&](uint32_t h) {
    if (h == 0 || c.mrs.count(h) || c.cqs.count(h) || c.qps.count(h)) return true;
    return std::any_of(sinks.begin(), sinks.end(),
                       [&](const EventSink& k) { return k.client == c.id && k.handle == h; });
  };
  uint32_t h = c.next_handle++;
  while (taken(h)) h = c.next_handle++;
  return h;
}

void HostService::Impl::check_links() {
  for (auto& dp : nic.devices()) {
    Device& d = *dp;
    uint32_t up = 0;
    for (uint32_t p = 0; p < d.num_planes(); ++p)
      if (d.link_reads_up(p)) up |= 1u << p;
    const uint32_t before = planes_up[d.index()];
    planes_up[d.index()] = up;
    // Verbs ports are the planes (port p + 1), as the control API has them.
    for (uint32_t changed = before ^ up; changed; changed &= changed - 1) {
      const uint32_t p = uint32_t(std::countr_zero(changed));
      const abi::Event e{(up >> p) & 1 ? kEvPortActive : kEvPortErr, 2, p + 1, 0};
      for (auto& [id, c] : clients)
        if (c->dev == &d) send_event(*c, e);
    }
  }
}

void HostService::Impl::reclaim(Client& c) {
  while (!c.qps.empty()) destroy_qp(c, c.qps.begin()->first);
  for (auto& [h, m] : c.mrs) c.dev->dereg_mr(m.lkey);
  c.mrs.clear();
  for (auto& [id, s] : c.segments) s.map.unmap();
  c.segments.clear();
  release_retired(c);
  for (auto& [h, cq] : c.cqs) {
    cq->map.unmap();
    if (cq->eventfd >= 0) close(cq->eventfd);
  }
  c.cqs.clear();
  auto& sinks = ctl[c.dev->index()].sinks;
  for (auto& sk : sinks)
    if (sk.client == c.id) {
      sk.map.unmap();
      if (sk.eventfd >= 0) close(sk.eventfd);
    }
  std::erase_if(sinks, [&](const EventSink& sk) { return sk.client == c.id; });
  if (c.events_fd >= 0) close(c.events_fd);
  close(c.fd);
  c.fd = c.events_fd = -1;
  ctr.inc(HostCtr::clients_reclaimed);
}


// ---------------------------------------------------------------------------
// Controller (mrc_ctl.h)

std::string HostService::Impl::ctl_handle(Client& c, const abi::Request& rq, std::span<const uint8_t> payload,
                                          int ring_fd, int event_fd, abi::Response& rs, std::vector<uint8_t>& out) {
  Device& dev = *c.dev;
  CtlState& st = ctl[dev.index()];
  if (rq.op == abi::Op::ctl_query) {
    abi::CtlDevice& d = rs.ctl_device;
    d.num_planes = dev.num_planes();
    d.ev_max_fmt_profiles = kMaxFmtProfiles;
    d.ev_max_profiles = kMaxEvProfiles;
    d.ev_max_count = kMaxEvsTotal;
    uint32_t used = 0;
    for (auto& [id, r] : st.evs) used += r.e.count;
    d.ev_free_count = kMaxEvsTotal - std::min(used, kMaxEvsTotal);
    d.ev_max_count_profile = abi::kCtlMaxEvs;
    d.ev_count_align = 1;
    d.ev_max_width_udp = 16;
    d.ev_max_width_stev = 32;
    d.ev_fmt_mode_mask = kFmtUdp | kFmtStev;
    d.ev_mode_mask = kEvModeExp | kEvModeGen;
    d.cc_max_profiles = kMaxCcProfiles;
    d.opt_attr = kOptEvEvent | kOptPreciseDrops | kOptEpProbe;
    d.privileged = c.admin;
    return {};
  }
  if (!c.admin) {
    rs.err = EPERM;
    return "controller calls need CAP_NET_ADMIN";
  }
  switch (rq.op) {
    case abi::Op::ctl_port: {
      const abi::CtlPort& p = rq.ctl_port;
      if (p.port < 1 || p.port > dev.num_planes()) return fmt::format("port {} (1..{})", p.port, dev.num_planes());
      if (p.set) dev.set_link(p.port - 1, p.enabled != 0, false);
      rs.ctl_port = {p.port, p.set, dev.link_up(p.port - 1)};
      return {};
    }
    case abi::Op::ctl_get_fmt: {
      auto it = st.fmts.find(rq.profile_id);
      rs.ctl_fmt = it != st.fmts.end() ? it->second : abi::CtlFmt{rq.profile_id, kStateInit, 0, 0, {}};
      return {};
    }
    case abi::Op::ctl_put_fmt: return put_fmt(c, rq.ctl_fmt, rs);
    case abi::Op::ctl_get_ev: get_ev(c, rq.profile_id, rs, out); return {};
    case abi::Op::ctl_put_ev: {
      if (payload.size() != size_t(rq.ctl_ev.nentries) * sizeof(abi::CtlEvEntry) || rq.ctl_ev.nentries > abi::kCtlMaxEvs)
        return "EV entries do not match their count";
      std::vector<abi::CtlEvEntry> entries(rq.ctl_ev.nentries);
      if (!entries.empty()) std::memcpy(entries.data(), payload.data(), payload.size());
      return put_ev(c, rq.ctl_ev, entries, rs);
    }
    case abi::Op::ctl_get_cc: {
      auto it = st.ccs.find(rq.profile_id);
      abi::CtlCc cc{};
      cc.id = rq.profile_id;
      rs.ctl_cc = it != st.ccs.end() ? it->second.c : cc;
      return {};
    }
    case abi::Op::ctl_put_cc: return put_cc(c, rq.ctl_cc, rs);
    case abi::Op::ctl_event_cq: {
      const abi::CtlEventCq& r = rq.ctl_event_cq;
      if (!is_pow2(r.depth) || r.depth > 65536) return fmt::format("event CQ depth {} (power of two up to 65536)", r.depth);
      if (r.with_channel && !is_socket(event_fd)) return "completion channel without its socket";
      EventSink sink;
      if (auto e = map_memfd(ring_fd, abi::queue_bytes(r.depth, sizeof(abi::CtlEvent)), sink.map); !e.empty()) {
        ctr.inc(HostCtr::bad_memfds);
        return "event CQ memory: " + e;
      }
      sink.client = c.id;
      sink.handle = new_handle(c);
      sink.depth = r.depth;
      sink.hdr = static_cast<abi::QueueHeader*>(sink.map.p);
      sink.ring = abi::entries<abi::CtlEvent>(sink.map.p);
      sink.eventfd = r.with_channel ? event_fd : -1;
      rs.handle = sink.handle;
      st.sinks.push_back(sink);
      return {};
    }
    case abi::Op::ctl_ep_send: {
      if (payload.size() != size_t(rq.ctl_ep.count) * sizeof(abi::CtlEpReq) || rq.ctl_ep.count > 256)
        return "endpoint requests do not match their count (at most 256)";
      std::vector<abi::CtlEpReq> reqs(rq.ctl_ep.count);
      if (!reqs.empty()) std::memcpy(reqs.data(), payload.data(), payload.size());
      return ep_send(c, rq.ctl_ep, reqs, rs, out);
    }
    default: return "not a controller request";
  }
}

std::string HostService::Impl::put_fmt(Client& c, const abi::CtlFmt& f, abi::Response& rs) {
  CtlState& st = ctl[c.dev->index()];
  auto it = st.fmts.find(f.id);
  const abi::CtlFmt old = it != st.fmts.end() ? it->second : abi::CtlFmt{f.id, kStateInit, 0, 0, {}, 0};
  if (auto e = stale_write("EV format", f.id, f.generation, old.generation, rs); !e.empty()) return e;
  if (!legal_transition(old.state, f.state))
    return fmt::format("EV format profile {}: no transition {} -> {}", f.id, state_name(old.state), state_name(f.state));
  bool in_use = false;
  for (auto& [id, r] : st.evs) in_use |= r.e.fmt_id == f.id && r.e.state != kStateInit;
  if (old.state == kStateOnline) {
    if (f.mode != old.mode || f.nfields != old.nfields || std::memcmp(f.widths, old.widths, sizeof f.widths)) {
      rs.err = EBUSY;
      return fmt::format("EV format profile {} is ONLINE: take it OFFLINE to change it", f.id);
    }
    if (f.state == kStateOffline && in_use) {
      rs.err = EBUSY;
      return fmt::format("EV format profile {}: EV profiles still use it", f.id);
    }
  }
  if (f.state == kStateInit) {
    if (in_use) {
      rs.err = EBUSY;
      return fmt::format("EV format profile {}: EV profiles still use it", f.id);
    }
    if (it != st.fmts.end()) st.fmts.erase(it);
    rs.ctl_fmt = {f.id, kStateInit, 0, 0, {}};
    return {};
  }
  if (f.mode != kFmtUdp && f.mode != kFmtStev) {
    rs.err = ENOTSUP;
    return "EV format mode: UDP or STEV (SRv6 is not supported)";
  }
  const uint32_t max_bits = f.mode == kFmtUdp ? 16 : 32;
  // OFFLINE needs the mode only; the fields may come later, before ONLINE.
  if (f.nfields > abi::kCtlMaxFields || (f.nfields == 0 && f.state == kStateOnline))
    return "EV format fields: 1 to 16 (ONLINE needs them)";
  for (uint32_t i = 0; i < f.nfields; ++i)
    if (f.widths[i] == 0) return fmt::format("EV format field {} has width 0", i);
  if (fmt_bits(f) > max_bits) {
    rs.err = E2BIG;
    return fmt::format("EV format fields total {} bits; the mode carries {}", fmt_bits(f), max_bits);
  }
  if (it == st.fmts.end() && st.fmts.size() >= kMaxFmtProfiles) {
    rs.err = ENOSPC;
    return "too many EV format profiles";
  }
  abi::CtlFmt& rec = st.fmts[f.id] = f;
  rec.generation = st.next_generation();
  rs.ctl_fmt = rec;
  return {};
}

std::string HostService::Impl::put_ev(Client& c, const abi::CtlEv& e, std::span<const abi::CtlEvEntry> entries,
                                      abi::Response& rs) {
  Device& dev = *c.dev;
  CtlState& st = ctl[dev.index()];
  auto it = st.evs.find(e.id);
  EvRec old;
  old.e.id = e.id;
  if (it != st.evs.end()) old = it->second;
  if (auto err = stale_write("EV", e.id, e.generation, old.e.generation, rs); !err.empty()) return err;
  if (e.id == 0) return "EV profile 0 is the device's own configuration";
  if (!legal_transition(old.e.state, e.state))
    return fmt::format("EV profile {}: no transition {} -> {}", e.id, state_name(old.e.state), state_name(e.state));
  if (e.state == kStateInit) {
    if (!old.qps.empty()) {
      rs.err = EBUSY;
      return fmt::format("EV profile {}: QPs still use it", e.id);
    }
    if (it != st.evs.end()) st.evs.erase(it);
    rs.ctl_ev = e;
    rs.ctl_ev.nentries = 0;
    return {};
  }
  EvRec rec = old;
  // Only EV states (deny/restore) change on an ONLINE profile.
  const bool online_before = old.e.state == kStateOnline;
  if (online_before) {
    abi::CtlEv a = e, b = old.e;
    a.state = b.state = 0;
    a.nentries = b.nentries = 0;
    a.generation = b.generation = 0;
    bool same = std::memcmp(&a, &b, sizeof a) == 0 && entries.size() == old.entries.size();
    for (size_t i = 0; same && i < entries.size(); ++i)
      same = std::memcmp(entries[i].val, old.entries[i].val, sizeof entries[i].val) == 0 &&
             entries[i].port == old.entries[i].port;
    if (!same) {
      rs.err = EBUSY;
      return fmt::format("EV profile {} is ONLINE: only EV states may change (take it OFFLINE first)", e.id);
    }
    if (e.state == kStateOffline && !old.qps.empty()) {
      rs.err = EBUSY;
      return fmt::format("EV profile {}: QPs still use it", e.id);
    }
  } else {
    if (e.mode != kEvModeExp && e.mode != kEvModeGen) {
      rs.err = ENOTSUP;
      return "EV mode: EXP or GEN (AUTO is not supported)";
    }
    auto f = st.fmts.find(e.fmt_id);
    if (f == st.fmts.end() || f->second.state != kStateOnline)
      return fmt::format("EV format profile {} is not ONLINE", e.fmt_id);
    if (e.count == 0 || e.count > abi::kCtlMaxEvs) {
      rs.err = E2BIG;
      return fmt::format("EV count {} (1..{})", e.count, abi::kCtlMaxEvs);
    }
    uint32_t used = 0;
    for (auto& [id, r] : st.evs)
      if (id != e.id) used += r.e.count;
    if (used + e.count > kMaxEvsTotal) {
      rs.err = ENOSPC;
      return "the device's EVs are all allocated";
    }
    if (it == st.evs.end() && st.evs.size() >= kMaxEvProfiles) {
      rs.err = ENOSPC;
      return "too many EV profiles";
    }
    rec.e = e;
    const abi::CtlFmt& fm = f->second;
    if (e.mode == kEvModeGen) {
      wire::EvGenProfile gp;
      gp.fmt_widths.assign(fm.widths, fm.widths + fm.nfields);
      if (e.nfields == 0 || e.nfields > fm.nfields) return "GEN EV profile: 1 field per format field at most";
      for (uint32_t i = 0; i < e.nfields; ++i)
        gp.fields.push_back({e.fields[i].width, e.fields[i].init_val, e.fields[i].min_val, e.fields[i].max_val,
                             e.fields[i].mask});
      if (auto why = wire::ev_profile_check(gp); !why.empty()) return "GEN EV profile: " + why;
      if (wire::ev_gen_count(gp) < e.count) {
        rs.err = E2BIG;
        return fmt::format("GEN EV profile generates {} EVs, {} asked", wire::ev_gen_count(gp), e.count);
      }
      // Regenerate only when the rules changed, so EV states survive.
      if (old.e.mode != e.mode || old.e.count != e.count || old.e.nfields != e.nfields ||
          std::memcmp(old.e.fields, e.fields, sizeof e.fields) || old.e.fmt_id != e.fmt_id) {
        rec.entries.assign(e.count, abi::CtlEvEntry{});
        for (uint32_t i = 0; i < e.count; ++i) {
          const wire::EvBytes v = wire::ev_generate(gp, i);
          std::memcpy(rec.entries[i].val, v.data(), 32);
          rec.entries[i].port = uint8_t(1 + i % dev.num_planes());
          rec.entries[i].state = kCtlGood;
        }
      }
    } else {
      rec.entries.assign(entries.begin(), entries.end());
      rec.entries.resize(e.count);
    }
    for (auto& en : rec.entries) {
      if (en.port > dev.num_planes()) return fmt::format("EV port {} (1..{})", en.port, dev.num_planes());
      // Bits past the format's width must be zero.
      wire::EvBytes v{};
      std::memcpy(v.data(), en.val, 32);
      const uint32_t bits = fmt_bits(fm);
      for (uint32_t b = bits; b < 256; ++b)
        if ((v[b / 8] >> (7 - b % 8)) & 1) return fmt::format("an EV has bits beyond the format's {} bits", bits);
    }
    if (e.min_active > e.count) return "ev_min_active exceeds ev_count";
    if (e.state == kStateOnline) {
      for (auto& en : rec.entries)
        if (en.port == 0) return "EXP EV profile: every EV must be set before it goes ONLINE";
    }
  }
  // EV states: DENIED or not; live QPs follow.
  std::vector<uint32_t> changed;
  for (size_t i = 0; i < rec.entries.size() && i < entries.size(); ++i) {
    const bool deny = entries[i].state == kCtlDenied;
    const bool was = rec.entries[i].state == kCtlDenied;
    rec.entries[i].state = deny ? kCtlDenied : kCtlGood;
    if (deny != was) changed.push_back(uint32_t(i));
  }
  rec.e.state = e.state;
  rec.e.nentries = uint32_t(rec.entries.size());
  rec.e.generation = st.next_generation();
  st.evs[e.id] = rec;
  // A denial or restore supersedes what the QPs had seen of the EV (the
  // engine reports no event for moves to and from DENIED).
  for (uint32_t i : changed)
    if (i < st.evs[e.id].bad_qps.size()) st.evs[e.id].bad_qps[i] = 0;
  for (const auto& ref : rec.qps) {
    HostQp* qp = qp_of(ref);
    if (!qp) continue;
    HostQp& q = *qp;
    for (uint32_t i : changed)
      if (i < q.ev_bad.size()) q.ev_bad[i] = 0;
    q.shard->call([&] {
      for (uint32_t i : changed)
        q.shard->engine().set_ev_state(q.qpn, i,
                                       rec.entries[i].state == kCtlDenied ? engine::EvState::denied
                                                                          : engine::EvState::good,
                                       nic.now());
    });
  }
  rs.ctl_ev = rec.e;
  return {};
}

void HostService::Impl::get_ev(Client& c, uint64_t id, abi::Response& rs, std::vector<uint8_t>& out) {
  CtlState& st = ctl[c.dev->index()];
  auto it = st.evs.find(id);
  if (it == st.evs.end()) {
    rs.ctl_ev = {};
    rs.ctl_ev.id = id;
    return;
  }
  EvRec& r = it->second;
  std::vector<abi::CtlEvEntry> entries = r.entries;
  // ASSUMED_BAD when some QP of the profile sees the EV so.
  for (const auto& ref : r.qps) {
    HostQp* qp = qp_of(ref);
    if (!qp) continue;
    HostQp& q = *qp;
    std::vector<engine::EvInfo> evs;
    q.shard->call([&] { evs = q.shard->engine().ev_info(q.qpn); });
    for (size_t i = 0; i < evs.size() && i < entries.size(); ++i)
      if (evs[i].state == engine::EvState::assumed_bad && entries[i].state != kCtlDenied)
        entries[i].state = kCtlAssumedBad;
  }
  rs.ctl_ev = r.e;
  rs.ctl_ev.nentries = uint32_t(entries.size());
  out.resize(entries.size() * sizeof(abi::CtlEvEntry));
  if (!out.empty()) std::memcpy(out.data(), entries.data(), out.size());
}

std::string HostService::Impl::put_cc(Client& c, const abi::CtlCc& cc, abi::Response& rs) {
  CtlState& st = ctl[c.dev->index()];
  auto it = st.ccs.find(cc.id);
  CcRec old;
  old.c.id = cc.id;
  if (it != st.ccs.end()) old = it->second;
  if (auto e = stale_write("CC", cc.id, cc.generation, old.c.generation, rs); !e.empty()) return e;
  if (cc.id == 0) return "CC profile 0 is the device's own configuration";
  if (!legal_transition(old.c.state, cc.state))
    return fmt::format("CC profile {}: no transition {} -> {}", cc.id, state_name(old.c.state), state_name(cc.state));
  if (old.c.state == kStateOnline) {
    abi::CtlCc a = cc, b = old.c;
    a.state = b.state = 0;
    a.generation = b.generation = 0;
    if (std::memcmp(&a, &b, sizeof a) != 0) {
      rs.err = EBUSY;
      return fmt::format("CC profile {} is ONLINE: take it OFFLINE to change it", cc.id);
    }
  }
  if ((cc.state == kStateOffline || cc.state == kStateInit) && old.c.state == kStateOnline && old.qp_refs) {
    rs.err = EBUSY;
    return fmt::format("CC profile {}: QPs still use it", cc.id);
  }
  if (cc.state == kStateInit) {
    if (it != st.ccs.end()) st.ccs.erase(it);
    rs.ctl_cc = cc;
    return {};
  }
  const std::string algo(cc.algorithm, strnlen(cc.algorithm, sizeof cc.algorithm));
  if (!algo.empty() && algo != kCcAlgorithms[0] && algo != kCcAlgorithms[1]) {
    rs.err = ENOTSUP;
    return fmt::format("CC algorithm '{}' (uet-1.0-nscc, dcqcn, or none)", algo);
  }
  if (cc.state == kStateOnline && !cc.has_config) return fmt::format("CC profile {}: ONLINE needs CONFIG", cc.id);
  if (cc.has_config && algo == kCcAlgorithms[0]) {
    const auto& n = cc.nscc;
    // Written as "!(in range)" so that NaN fails; NaN or inf would reach the
    // engine's window arithmetic from any program, not only mrcctl.
    const auto finite_from = [](float v, float lo, bool open) { return std::isfinite(v) && (open ? v > lo : v >= lo); };
    if (n.base_rtt == 0 || !finite_from(n.eta, 0, true) || !finite_from(n.fi, 0, false) ||
        !finite_from(n.fi_scale, 0, false) || !(n.gamma > 0 && n.gamma <= 1) ||
        !(n.max_md_jump > 0 && n.max_md_jump <= 1))
      return "NSCC config: base_rtt > 0, eta > 0, fi >= 0, fi_scale >= 0 (all finite), 0 < gamma <= 1, "
             "0 < max_md_jump <= 1";
  }
  if (it == st.ccs.end() && st.ccs.size() >= kMaxCcProfiles) {
    rs.err = ENOSPC;
    return "too many CC profiles";
  }
  CcRec rec = old;
  rec.c = cc;
  rec.c.generation = st.next_generation();
  st.ccs[cc.id] = rec;
  rs.ctl_cc = rec.c;
  return {};
}

std::string HostService::Impl::ep_send(Client& c, const abi::CtlEpBatch& b, std::span<const abi::CtlEpReq> reqs,
                                       abi::Response& rs, std::vector<uint8_t>& out) {
  Device& dev = *c.dev;
  if (b.op > 1) return "endpoint op: EV probe or port status update";
  struct Sent {
    uint32_t req_id, wire_id;
    engine::Nanos t;
  };
  std::vector<Sent> sent;
  static uint32_t next_id = 1;
  ep_waiting.store(true, std::memory_order_release);
  struct Done {
    std::atomic<bool>& w;
    ~Done() { w.store(false, std::memory_order_release); }
  } done{ep_waiting};
  {
    std::lock_guard<std::mutex> g(ctl_mu);
    std::erase_if(ep_responses, [&](const auto& r) { return r.first == dev.index(); });  // late answers
  }
  for (const auto& r : reqs) {
    if (r.port < 1 || r.port > dev.num_planes()) return fmt::format("request {}: port {} (1..{})", r.req_id, r.port, dev.num_planes());
    wire::IpAddr dst;
    std::memcpy(dst.bytes.data(), r.dgid, 16);
    const uint32_t plane = r.port - 1;
    const auto mac = dev.resolve(plane, dst, o.resolve_timeout_s);
    if (!mac) {
      rs.err = EHOSTUNREACH;
      return fmt::format("request {}: no answer to ARP/ND for {} on plane {}", r.req_id, dst.str(), plane);
    }
    wire::EvBytes v{};
    std::memcpy(v.data(), r.ev, 32);
    const wire::EvFormat f = wire_format(r.fmt_mode);
    const uint32_t ev = wire::ev_value(v, f == wire::EvFormat::udp ? 16 : 32);
    const uint32_t id = (next_id++) & 0xFFFFFF;
    bool ok = false;
    Shard& s = *dev.shards()[0];
    const engine::Nanos t = nic.now();
    s.call([&] {
      const uint8_t op = b.op == 0 ? uint8_t(wire::EndpointOp::ev_probe) : uint8_t(wire::EndpointOp::port_status_update);
      ok = s.engine().send_endpoint_request(plane, {*mac, dst}, f, ev, op, id, r.port_status, uint8_t(b.tc & 0x3F), t);
    });
    if (!ok) {
      rs.err = EAGAIN;
      return fmt::format("request {}: the device could not send it now (plane {} down or no buffer)", r.req_id, plane);
    }
    sent.push_back({r.req_id, id, t});
  }
  std::vector<abi::CtlEpRsp> got;
  // Port status updates are not answered.
  const bool answered = b.op == 0;
  const engine::Nanos deadline = nic.now() + b.timeout_ns;
  while (answered && got.size() < sent.size() && nic.now() < deadline) {
    std::vector<std::pair<uint32_t, EndpointResponse>> mine;
    {
      std::lock_guard<std::mutex> g(ctl_mu);
      for (auto it = ep_responses.begin(); it != ep_responses.end();)
        if (it->first == dev.index()) {
          mine.push_back(*it);
          it = ep_responses.erase(it);
        } else {
          ++it;
        }
    }
    for (auto& [d, r] : mine)
      for (auto& sn : sent)
        if (sn.wire_id == r.id) got.push_back({sn.req_id, r.plane + 1, uint32_t(std::min<engine::Nanos>(r.t - sn.t, UINT32_MAX))});
    if (got.size() < sent.size()) std::this_thread::sleep_for(std::chrono::microseconds(20));
    nic.tick_control();
  }
  out.resize(got.size() * sizeof(abi::CtlEpRsp));
  if (!out.empty()) std::memcpy(out.data(), got.data(), out.size());
  if (answered && got.size() < sent.size()) {
    rs.err = ETIMEDOUT;
    return fmt::format("{} of {} requests answered in time", got.size(), sent.size());
  }
  return {};
}

HostQp* HostService::Impl::qp_of(const std::pair<uint64_t, uint32_t>& ref) {
  auto c = clients.find(ref.first);
  if (c == clients.end()) return nullptr;
  auto q = c->second->qps.find(ref.second);
  return q == c->second->qps.end() ? nullptr : q->second.get();
}

HostQp* HostService::Impl::find_qp(uint32_t dev, uint32_t qpn) {
  for (auto& [id, c] : clients)
    if (c->dev->index() == dev)
      for (auto& [h, q] : c->qps)
        if (q->qpn == qpn) return q.get();
  return nullptr;
}

// One QP's view of an EV changed; returns whether the profile's did (the
// first QP to see it bad, or the last to let it go).
bool HostService::Impl::note_ev_view(CtlState& st, HostQp& q, uint32_t ev_index, bool bad) {
  auto it = q.ev_profile ? st.evs.find(q.ev_profile) : st.evs.end();
  if (q.ev_profile && it == st.evs.end()) return false;
  std::vector<uint32_t>& counts = q.ev_profile ? it->second.bad_qps : st.own_bad_qps;
  if (q.ev_bad.size() <= ev_index) q.ev_bad.resize(ev_index + 1, 0);
  if (counts.size() <= ev_index) counts.resize(ev_index + 1, 0);
  if (q.ev_bad[ev_index] == uint8_t(bad)) return false;
  q.ev_bad[ev_index] = bad;
  return bad ? counts[ev_index]++ == 0 : counts[ev_index] && --counts[ev_index] == 0;
}

void HostService::Impl::deliver_ev_events() {
  std::vector<std::pair<uint32_t, EvEventRecord>> evs;
  {
    std::lock_guard<std::mutex> g(ctl_mu);
    evs.swap(ev_events);
  }
  for (auto& [d, e] : evs) {
    CtlState& st = ctl[d];
    HostQp* q = find_qp(d, e.qpn);
    if (!q) continue;
    const bool bad = e.to == engine::EvState::assumed_bad;
    if (!note_ev_view(st, *q, e.ev_index, bad)) continue;
    emit_ev_event(st, *q, e.ev_index, e.ev, bad);
  }
}

void HostService::Impl::emit_ev_event(CtlState& st, const HostQp& q, uint32_t ev_index, uint32_t wire_ev, bool bad) {
  if (st.sinks.empty()) return;
  const uint32_t state = bad ? kCtlAssumedBad : kCtlGood;
  abi::CtlEvent out{};
  out.profile_id = q.ev_profile;
  out.state = state;
  if (q.ev_profile) {
    auto it = st.evs.find(q.ev_profile);
    if (it == st.evs.end() || ev_index >= it->second.entries.size()) return;
    if (!(uint32_t(it->second.e.event_mask) & state)) return;
    std::memcpy(out.val, it->second.entries[ev_index].val, 32);
    out.port = it->second.entries[ev_index].port;
  } else {
    // The device's own EVs: the value as the wire carries it.
    out.val[0] = uint8_t(wire_ev >> 8);
    out.val[1] = uint8_t(wire_ev);
    out.port = uint8_t(1 + (q.attr.ev.evs.size() > ev_index ? q.attr.ev.evs[ev_index].plane : 0));
  }
  for (auto& sk : st.sinks) {
    const uint32_t used = sk.prod - abi::load_acquire(sk.hdr->cons);
    if (used >= sk.depth) {  // full (or garbage): counted into the next event that fits
      ++sk.dropped;
      continue;
    }
    out.drop_count = sk.dropped;
    sk.dropped = 0;
    std::memcpy(&sk.ring[sk.prod & (sk.depth - 1)], &out, sizeof out);
    abi::store_release(sk.hdr->prod, ++sk.prod);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // as in write_cqe
    const uint32_t arm = abi::load_acquire(sk.hdr->arm_sn);
    if (sk.eventfd >= 0 && arm != sk.fired) {
      sk.fired = arm;
      abi::store_release(sk.hdr->fired_sn, arm);
      signal_channel(sk.eventfd);
    }
  }
}

void HostService::Impl::apply_denials(Client& c, HostQp& q) {
  if (!q.ev_profile) return;
  auto it = ctl[c.dev->index()].evs.find(q.ev_profile);
  if (it == ctl[c.dev->index()].evs.end()) return;
  const auto& entries = it->second.entries;
  q.shard->call([&] {
    for (uint32_t i = 0; i < entries.size(); ++i)
      if (entries[i].state == kCtlDenied) q.shard->engine().set_ev_state(q.qpn, i, engine::EvState::denied, nic.now());
  });
}

// The QP's EVs start over (RESET, INIT) or go: what only it saw bad is no
// longer bad for its profile.
void HostService::Impl::release_ev_views(CtlState& st, HostQp& q) {
  for (uint32_t i = 0; i < q.ev_bad.size(); ++i)
    if (q.ev_bad[i] && note_ev_view(st, q, i, false)) {
      const auto& own = q.attr.ev.evs;
      emit_ev_event(st, q, i, i < own.size() ? own[i].value : 0, false);
    }
  q.ev_bad.clear();
}

void HostService::Impl::detach(Client& c, HostQp& q) {
  CtlState& st = ctl[c.dev->index()];
  release_ev_views(st, q);
  if (q.ev_profile)
    if (auto it = st.evs.find(q.ev_profile); it != st.evs.end())
      std::erase(it->second.qps, std::make_pair(c.id, q.handle));
  if (q.cc_profile)
    if (auto it = st.ccs.find(q.cc_profile); it != st.ccs.end() && it->second.qp_refs) --it->second.qp_refs;
  q.ev_profile = q.cc_profile = 0;
}

// ---------------------------------------------------------------------------

HostService::HostService(Nic& nic, HostOptions opts) : impl_(std::make_unique<Impl>(nic, std::move(opts))) {
  Impl& I = *impl_;
  if (mkdir(I.o.run_dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("host: cannot create {}: {}", I.o.run_dir, std::strerror(errno)));
  struct stat st {};
  if (stat(I.o.run_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
    throw std::runtime_error(fmt::format("host: {} is not a directory we own", I.o.run_dir));
  I.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  I.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (auto& dp : nic.devices()) {
    const std::string path = socket_path(dp->name());
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path) throw std::runtime_error(fmt::format("host: socket path too long: {}", path));
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    // A socket someone still answers on is a live mrc-nic; a dead one is stale.
    const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const bool live = connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    close(probe);
    if (live) throw std::runtime_error(fmt::format("host: device {} is already served at {}", dp->name(), path));
    unlink(path.c_str());
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const mode_t old = umask(0177);
    const int rc = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    umask(old);
    if (rc != 0 || listen(fd, 64) != 0) {
      const int e = errno;
      close(fd);
      throw std::runtime_error(fmt::format("host: cannot listen on {}: {}", path, std::strerror(e)));
    }
    I.listen_fds.push_back(fd);
    I.paths.push_back(path);
    const std::string alive = I.o.run_dir + "/" + dp->name() + abi::kAliveSuffix;
    const int afd = open(alive.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    void* page = MAP_FAILED;
    if (afd >= 0 && ftruncate(afd, sizeof(uint64_t)) == 0)
      page = mmap(nullptr, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, afd, 0);
    if (afd >= 0) close(afd);
    if (page == MAP_FAILED)
      throw std::runtime_error(fmt::format("host: cannot create {}: {}", alive, std::strerror(errno)));
    I.alive_pages.push_back(page);
    I.paths.push_back(alive);
    dp->set_alive_page(static_cast<std::atomic<uint64_t>*>(page));
    nic.tick_control();
    auto& v = I.apps.emplace_back();
    for (auto& s : dp->shards()) v.push_back(std::make_unique<HostShard>(I, *s));
    I.next_shard.push_back(0);
    I.planes_up.push_back(0);
    I.ctl.emplace_back();
  }
}

HostService::~HostService() {
  stop();
  for (auto& dp : impl_->nic.devices()) dp->set_alive_page(nullptr);
  for (void* page : impl_->alive_pages) munmap(page, sizeof(uint64_t));
  for (auto& p : impl_->paths) unlink(p.c_str());
  for (int fd : impl_->listen_fds) close(fd);
  if (impl_->wake >= 0) close(impl_->wake);
  if (impl_->spare_fd >= 0) close(impl_->spare_fd);
}

void HostService::start() {
  Impl& I = *impl_;
  for (auto& dp : I.nic.devices())
    for (size_t k = 0; k < dp->shards().size(); ++k) dp->shards()[k]->set_app(I.apps[dp->index()][k].get());
  for (auto& dp : I.nic.devices()) {
    uint32_t up = 0;
    for (uint32_t p = 0; p < dp->num_planes(); ++p)
      if (dp->link_reads_up(p)) up |= 1u << p;
    I.planes_up[dp->index()] = up;
  }
  I.started = true;
  I.thread = std::thread([&I] { I.loop(); });
}

void HostService::stop() {
  Impl& I = *impl_;
  if (!I.started) return;
  I.stopping.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = write(I.wake, &one, sizeof one);
  I.thread.join();
  I.started = false;
  for (auto& [id, c] : I.clients) {
    I.send_event(*c, {kEvDeviceFatal, 3, 0, 0});
    I.reclaim(*c);
  }
  I.clients.clear();
  for (auto& [fd, d] : I.pending) close(fd);
  I.pending.clear();
  I.pending_since.clear();
}

const HostCounters& HostService::counters() const { return impl_->ctr; }

std::string HostService::socket_path(const std::string& device) const {
  return impl_->o.run_dir + "/" + device + ".sock";
}

}  // namespace mrc::dp
