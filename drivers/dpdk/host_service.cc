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

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "host/abi.h"

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
// past a shrunk file would fault on an lcore).
std::string map_memfd(int fd, size_t bytes, Mapping& out) {
  struct stat st {};
  if (fd < 0) return "no memory file came with the request";
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "not a memory file";
  if (bytes == 0 || uint64_t(st.st_size) < bytes) return fmt::format("memory file holds {} bytes, {} needed", st.st_size, bytes);
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) return "memory file is not sealed against shrinking";
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fmt::format("mmap: {}", std::strerror(errno));
  out = {p, bytes};
  return {};
}

bool is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

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
  abi::QueueHeader* rq_hdr = nullptr;
  abi::Rqe* rq = nullptr;
  uint32_t rq_depth = 0, rq_cons = 0;
  bool sig_all = false;
  bool failed = false;  // the client corrupted its rings: no longer polled
  uint64_t client = 0;
  engine::QpAttr attr;
  std::array<uint8_t, 16> dgid{};
  uint32_t sgid_index = 0, access = 0;
  Mapping map;
};

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
  uint32_t next_handle = 1;
  std::map<uint32_t, Segment> segments;
  std::vector<Mapping> retired;  // released segments a requester may still read
  std::set<uint32_t> pds;
  struct Mr {
    uint32_t lkey, rkey, pd, segment;
  };
  std::map<uint32_t, Mr> mrs;
  std::map<uint32_t, std::unique_ptr<HostCq>> cqs;
  std::map<uint32_t, std::unique_ptr<HostQp>> qps;
};

}  // namespace

// ---------------------------------------------------------------------------

class HostShard;

struct HostService::Impl {
  Nic& nic;
  HostOptions o;
  std::vector<int> listen_fds;  // per device
  std::vector<std::string> paths;
  std::vector<std::vector<std::unique_ptr<HostShard>>> apps;  // [device][shard]
  std::vector<uint32_t> next_shard;                           // per device, round robin
  std::vector<uint32_t> planes_up;                            // per device, last seen
  std::map<int, Device*> pending;  // accepted, first message not read yet
  std::map<uint64_t, std::unique_ptr<Client>> clients;
  uint64_t next_client = 1;
  uint32_t next_pd = 16;
  std::mt19937_64 rng{std::random_device{}()};
  int wake = -1;
  std::mutex ev_mu;
  std::vector<std::pair<uint64_t, abi::Event>> ev_queue;  // from lcores
  std::atomic<bool> stopping{false};
  std::thread thread;
  bool started = false;
  HostCounters ctr;

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
  void handle(Client& c, const abi::Request& rq, int fds[2], int nfds, abi::Response& rs);
  void reclaim(Client& c);
  void send_event(Client& c, const abi::Event& e);
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
  HostShard(HostService::Impl& svc, Shard& s) : svc_(svc), first_qpn_(s.engine().config().first_qpn) {
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
      gave |= poll_sq(s, *q, now);
      gave |= poll_rq(s, *q);
    }
    return gave;
  }

  void on_completion(Shard& s, const engine::Completion& c, Nanos) override {
    HostQp* q = lookup(c.qpn);
    if (!q) return;
    abi::Cqe e{};
    e.wr_id = c.wr_id;
    e.qp_num = c.qpn;
    e.byte_len = c.byte_len;
    e.imm = c.imm;
    e.status = static_cast<uint8_t>(c.status);
    const bool recv = c.opcode == engine::WcOpcode::recv_rdma_with_imm;
    e.opcode = recv ? abi::kCqeRecvWriteImm : abi::kCqeWrite;
    e.flags = c.has_imm ? abi::kCqeWithImm : 0;
    write_cqe(s, recv ? *q->rcq : *q->scq, e, recv || c.status != engine::WcStatus::success);
  }

 private:
  HostService::Impl& svc_;
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
    s.engine().modify_qp(q.qpn, engine::QpState::error, q.attr, now);
    svc_.post_event(q.client, {kEvQpFatal, 0, q.handle, 0});
  }

  void fail_cq(Shard& s, HostCq& cq, ShardCtr why) {
    s.count(why);
    cq.failed = true;
    abi::store_release(cq.hdr->error, 1);
    svc_.post_event(cq.client, {kEvCqErr, 1, cq.handle, 0});
  }

  // Completes a WQE the engine never took (posted to a QP not in RTS).
  void complete_unposted(Shard& s, HostQp& q, uint64_t wr_id, bool recv) {
    engine::QpInfo info;
    const bool in_error = s.engine().qp_info(q.qpn, info) && info.state == engine::QpState::error;
    abi::Cqe e{};
    e.wr_id = wr_id;
    e.qp_num = q.qpn;
    e.status = in_error ? kWcWrFlushErr : kWcLocQpOpErr;
    e.opcode = recv ? abi::kCqeRecvWriteImm : abi::kCqeWrite;
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
      engine::SendWr wr;
      wr.wr_id = e.wr_id;
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
      const int rc = s.engine().post_send(q.qpn, wr, now);
      if (rc == ENOMEM) break;
      if (rc != 0) complete_unposted(s, q, e.wr_id, false);
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
    n = std::min(n, kSqBudget);
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
    const uint32_t arm = abi::load_acquire(cq.hdr->arm_sn);
    if (arm == cq.fired) return;
    // Solicited-only waits wake on receives and errors (the WRITE_IMM's
    // solicited bit is not carried).
    if (abi::load_acquire(cq.hdr->arm_solicited) && !solicited) return;
    cq.fired = arm;
    abi::store_release(cq.hdr->fired_sn, arm);
    const uint64_t one = 1;
    // An interrupt's worth: one syscall per armed wait, not per completion.
    [[maybe_unused]] ssize_t r = write(cq.eventfd, &one, sizeof one);
    s.count(ShardCtr::host_channel_signals);
  }
};

// ---------------------------------------------------------------------------
// Control thread.

namespace {

bool send_msg(int fd, const void* p, size_t n) { return send(fd, p, n, MSG_NOSIGNAL) == ssize_t(n); }

// One request with up to two descriptors; returns bytes, 0 on hang-up, -1
// on error.
ssize_t recv_request(int fd, abi::Request& rq, int fds[2], int& nfds) {
  nfds = 0;
  alignas(cmsghdr) char ctl[CMSG_SPACE(2 * sizeof(int))];
  iovec iov{&rq, sizeof rq};
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
  if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return -1;
  return n;
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
    if (poll(pfds.data(), pfds.size(), 100) < 0 && errno != EINTR) break;
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
      first_message(fd, dev);
    }
    for (uint64_t id : gone) {
      reclaim(*clients[id]);
      clients.erase(id);
    }
    for (size_t d : accepting) accept_on(d);
  }
}

void HostService::Impl::accept_on(size_t d) {
  const int fd = accept4(listen_fds[d], nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  pending[fd] = nic.devices()[d].get();
}

void HostService::Impl::first_message(int fd, Device* dev) {
  abi::Request rq{};
  int fds[2], nfds = 0;
  const ssize_t n = recv_request(fd, rq, fds, nfds);
  for (int k = 0; k < nfds; ++k) close(fds[k]);
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
    send_msg(fd, &rs, sizeof rs);
    close(fd);
    return;
  }
  auto c = std::make_unique<Client>();
  c->id = next_client++;
  c->token = rng() | 1;
  c->fd = fd;
  c->dev = dev;
  c->pid = rq.hello.pid;
  hello(*c, rs);
  if (!send_msg(fd, &rs, sizeof rs)) {
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
  d.max_mr = 1u << 16;
  d.max_pd = 1024;
  d.max_sq_depth = o.max_caps.max_send_wr;
  d.max_rq_depth = o.max_caps.max_recv_wr;
  d.max_cq_depth = o.max_cq_depth;
  d.max_mr_size = uint64_t(1) << 40;
  d.max_wimm = 1024;
  d.max_wimm_dest = 1024;
  d.max_mpr = 255;  // the API's field is 8 bits; the engine takes up to 1024
  d.mpr_resolution = 1;
  d.transport = dev.spec().engine.transport == engine::Transport::mrc ? 0 : 1;
  d.events_token = c.token;
  return {};
}

bool HostService::Impl::serve(Client& c) {
  abi::Request rq{};
  int fds[2] = {-1, -1}, nfds = 0;
  const ssize_t n = recv_request(c.fd, rq, fds, nfds);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n <= 0) return false;
  abi::Response rs{};
  if (n != ssize_t(sizeof rq)) {
    ctr.inc(HostCtr::bad_requests);
    rs.err = EPROTO;
    fmt::format_to_n(rs.message, sizeof rs.message - 1, "request of {} bytes, expected {}", n, sizeof rq);
  } else {
    handle(c, rq, fds, nfds, rs);
  }
  for (int k = 0; k < nfds; ++k)
    if (fds[k] >= 0) close(fds[k]);
  if (rs.err) ctr.inc(HostCtr::requests_failed);
  return send_msg(c.fd, &rs, sizeof rs);
}

void HostService::Impl::handle(Client& c, const abi::Request& rq, int fds[2], int nfds, abi::Response& rs) {
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
        if (c.dev->link_up(p)) up |= 1u << p;
      rs.port = {up != 0, nic.spec().mtu, up};
      break;
    }
    case abi::Op::alloc_pd:
      if (c.pds.size() >= 1024) {
        err = "too many protection domains";
        rs.err = ENOMEM;
        break;
      }
      rs.handle = next_pd++;
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
      if (!err.empty() && ev >= 0) close(ev);  // on success the CQ keeps it
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
  if (r.length == 0 || r.iova + r.length < r.iova) return "empty or wrapping region";
  if (c.mrs.size() >= (1u << 16)) {
    rs.err = ENOMEM;
    return "too many memory regions";
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
    rs.err = ENOMEM;
    return "the device's region table is full";
  }
  ++s.refs;
  const uint32_t h = c.next_handle++;
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
    // A requester may still hold pointers into it for WRs in flight; unmap
    // once the client has no QPs.
    c.retired.push_back(seg->second.map);
    c.segments.erase(seg);
  }
  c.mrs.erase(it);
  release_retired(c);
  return {};
}

void HostService::Impl::release_retired(Client& c) {
  if (!c.qps.empty()) return;
  for (auto& m : c.retired) m.unmap();
  c.retired.clear();
}

std::string HostService::Impl::create_cq(Client& c, const abi::CreateCq& r, int ring_fd, int event_fd,
                                         abi::Response& rs) {
  if (!is_pow2(r.depth) || r.depth > o.max_cq_depth) return fmt::format("CQ depth {} (power of two up to {})", r.depth, o.max_cq_depth);
  if (r.with_channel && event_fd < 0) return "completion channel without its eventfd";
  if (c.cqs.size() >= 4096) {
    rs.err = ENOMEM;
    return "too many CQs";
  }
  auto cq = std::make_unique<HostCq>();
  if (auto e = map_memfd(ring_fd, abi::cq_bytes(r.depth), cq->map); !e.empty()) {
    ctr.inc(HostCtr::bad_memfds);
    return "CQ memory: " + e;
  }
  cq->handle = c.next_handle++;
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
  if (it == c.cqs.end()) return "no such CQ";
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
  q->handle = c.next_handle++;
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
  if ((a.mask & abi::kModEvProfile) && a.ev_profile) return fmt::format("unknown EV profile {}", a.ev_profile);
  if ((a.mask & abi::kModCcProfile) && a.cc_profile) return fmt::format("unknown CC profile {}", a.cc_profile);
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
    std::memcpy(q.dgid.data(), a.dgid, 16);
    q.sgid_index = a.sgid_index;
  }
  if (a.mask & abi::kModAccess) q.access = a.access;
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
    if ((a.mask & abi::kModState) && a.state != kIbvReset && a.state != kIbvInit && a.state != kIbvRtr &&
        a.state != kIbvRts && a.state != kIbvErr) {
      err = fmt::format("QP state {} is not supported", a.state);
      return;
    }
    const auto rc = s.engine().modify_qp(q.qpn, to, attr, nic.now());
    if (rc == engine::ModifyError::bad_transition)
      err = fmt::format("no transition from {} to {}", engine::qp_state_name(info.state), engine::qp_state_name(to));
    else if (rc != engine::ModifyError::ok)
      err = fmt::format("attributes refused for {}", engine::qp_state_name(to));
  });
  if (err.empty()) q.attr = attr;
  return err;
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
  if (c.events_fd < 0) return;
  if (send_msg(c.events_fd, &e, sizeof e)) ctr.inc(HostCtr::async_events);
}

void HostService::Impl::check_links() {
  for (auto& dp : nic.devices()) {
    Device& d = *dp;
    uint32_t up = 0;
    for (uint32_t p = 0; p < d.num_planes(); ++p)
      if (d.link_up(p)) up |= 1u << p;
    const uint32_t before = planes_up[d.index()];
    planes_up[d.index()] = up;
    if ((before != 0) == (up != 0)) continue;
    const abi::Event e{up ? kEvPortActive : kEvPortErr, 2, 1, 0};
    for (auto& [id, c] : clients)
      if (c->dev == &d) send_event(*c, e);
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
  if (c.events_fd >= 0) close(c.events_fd);
  close(c.fd);
  c.fd = c.events_fd = -1;
  ctr.inc(HostCtr::clients_reclaimed);
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
    auto& v = I.apps.emplace_back();
    for (auto& s : dp->shards()) v.push_back(std::make_unique<HostShard>(I, *s));
    I.next_shard.push_back(0);
    I.planes_up.push_back(0);
  }
}

HostService::~HostService() {
  stop();
  for (auto& p : impl_->paths) unlink(p.c_str());
  for (int fd : impl_->listen_fds) close(fd);
  if (impl_->wake >= 0) close(impl_->wake);
}

void HostService::start() {
  Impl& I = *impl_;
  for (auto& dp : I.nic.devices())
    for (size_t k = 0; k < dp->shards().size(); ++k) dp->shards()[k]->set_app(I.apps[dp->index()][k].get());
  for (auto& dp : I.nic.devices()) {
    uint32_t up = 0;
    for (uint32_t p = 0; p < dp->num_planes(); ++p)
      if (dp->link_up(p)) up |= 1u << p;
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
}

const HostCounters& HostService::counters() const { return impl_->ctr; }

std::string HostService::socket_path(const std::string& device) const {
  return impl_->o.run_dir + "/" + device + ".sock";
}

}  // namespace mrc::dp
