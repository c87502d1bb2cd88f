#include "workload.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace mrc::nicapp {

using engine::Nanos;

namespace {

// The pattern a message carries: index i of QP q uses pattern (i + q) % K
// with K = depth + 1, so a slot's previous message (i - depth) always
// carried a different pattern and a stale slot is caught.
void fill_pattern(uint8_t* dst, uint64_t len, uint64_t seed, uint32_t pattern) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + pattern + 1;
  for (uint64_t off = 0; off < len; off += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    std::memcpy(dst + off, &s, std::min<uint64_t>(8, len - off));
  }
}

uint8_t* alloc_region(uint64_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<uint64_t>(bytes, 4096)) != 0) return nullptr;
  std::memset(p, 0, bytes);
  return static_cast<uint8_t*>(p);
}

// --- the two-process exchange (a tiny fixed-layout protocol over TCP) ---
constexpr uint32_t kMagic = 0x4D52434E;  // "MRCN"
constexpr uint32_t kVersion = 1;

struct WirePlane {
  uint64_t mac;
  uint8_t ip[16];
};
struct Hello {  // requester -> responder
  uint32_t magic, version, imm, qps, depth, planes;
  uint64_t size;
  WirePlane plane[engine::kMaxPlanes];
};
struct QpWire {
  uint32_t qpn, psn;
};
struct Accept {  // responder -> requester
  uint32_t magic, planes, rkey, pad;
  uint64_t base;
  WirePlane plane[engine::kMaxPlanes];
};
struct DoneMsg {
  uint32_t magic, qps;
};
struct ResultMsg {
  uint32_t magic, integrity_ok, completions_ok, pad;
  uint64_t slots_checked, slots_bad, imm_received;
};

bool send_all(int fd, const void* p, size_t n) {
  auto* c = static_cast<const uint8_t*>(p);
  while (n) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    c += k;
    n -= size_t(k);
  }
  return true;
}
bool recv_all(int fd, void* p, size_t n) {
  auto* c = static_cast<uint8_t*>(p);
  while (n) {
    ssize_t k = ::recv(fd, c, n, 0);
    if (k <= 0) return false;
    c += k;
    n -= size_t(k);
  }
  return true;
}

}  // namespace

struct Flow {  // one requester QP
  dp::Shard* shard = nullptr;
  uint32_t index = 0, qpn = 0;
  uint64_t messages = 0;  // to send (UINT64_MAX: until stopped)
  uint64_t posted = 0, completed = 0;
  // Completed with success: RC completes in order, so these are the first
  // `succeeded` messages, the ones the responder can check.
  uint64_t succeeded = 0;
  uint64_t remote_base = 0;  // this QP's first slot
  bool finished = false;
};

struct Target {  // one responder QP
  dp::Shard* shard = nullptr;
  uint32_t index = 0, qpn = 0;
  uint64_t next_imm = 0;
  uint64_t imm_received = 0;
  bool imm_in_order = true;
  uint64_t slots_checked = 0, slots_bad = 0;
  std::string first_bad;
};

struct Workload::Impl {
  dp::Nic& nic;
  const Options& o;
  const Built& b;
  WorkloadOptions wl;  // a two-process responder takes the requester's
  bool imm;
  uint32_t K;
  dp::Device* from = nullptr;  // requester device here (null: remote)
  dp::Device* to = nullptr;    // responder device here (null: remote)
  uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  uint64_t dst_len = 0;
  uint32_t src_lkey = 0, dst_rkey = 0, dst_lkey = 0;
  uint64_t remote_base = 0;
  uint32_t remote_rkey = 0;
  std::vector<Flow> flows;
  std::vector<Target> targets;
  std::atomic<bool> posting{false};
  std::atomic<uint64_t> errors{0};
  std::string first_error;  // written once, under the error count going 0 -> 1
  int listen_fd = -1, peer_fd = -1;
  bool remote_done = false;
  std::vector<uint64_t> remote_counts;
  Nanos t_start = 0;
  // Kept by the workers, read by the control thread without disturbing them.
  std::atomic<uint32_t> flows_finished{0};

  struct RequesterApp : dp::ShardApp {
    Impl& w;
    std::vector<Flow*> mine;
    // Written by this worker alone, so plain stores: a shared atomic add per
    // completion cost a locked instruction per message and, with several
    // workers, a cache line they all wrote.
    alignas(64) std::atomic<uint64_t> bytes_done{0};
    std::atomic<Nanos> last_completion{0};
    explicit RequesterApp(Impl& i) : w(i) {}
    bool on_poll(dp::Shard& s, Nanos) override {
      if (!w.posting.load(std::memory_order_relaxed)) return false;
      bool posted_any = false;
      for (Flow* f : mine) {
        while (f->posted < f->messages && f->posted - f->completed < w.wl.depth) {
          const uint64_t i = f->posted;
          engine::SendWr wr;
          wr.wr_id = i;
          wr.opcode = w.imm ? engine::WrOpcode::rdma_write_with_imm : engine::WrOpcode::rdma_write;
          wr.local_addr = reinterpret_cast<uintptr_t>(w.src) + ((i + f->index) % w.K) * w.wl.size;
          wr.length = static_cast<uint32_t>(w.wl.size);
          wr.lkey = w.src_lkey;
          wr.remote_addr = f->remote_base + (i % w.wl.depth) * w.wl.size;
          wr.rkey = w.remote_rkey;
          wr.imm = static_cast<uint32_t>(i);
          if (s.engine().post_send(f->qpn, wr) != 0) break;
          ++f->posted;
          posted_any = true;
        }
      }
      return posted_any;
    }
    void on_completion(dp::Shard&, const engine::Completion& c, Nanos now) override {
      for (Flow* f : mine) {
        if (f->qpn != c.qpn) continue;
        if (c.wr_id != f->completed && w.errors.fetch_add(1) == 0)
          w.first_error = fmt::format("QP {} completed WR {} when WR {} was next", c.qpn, c.wr_id, f->completed);
        ++f->completed;
        last_completion.store(now, std::memory_order_relaxed);
        if (c.status == engine::WcStatus::success) {
          ++f->succeeded;
          bytes_done.store(bytes_done.load(std::memory_order_relaxed) + c.byte_len, std::memory_order_relaxed);
        } else {
          if (w.errors.fetch_add(1) == 0)
            w.first_error = fmt::format("QP {} message {}: {}", c.qpn, c.wr_id, engine::wc_status_name(c.status));
          f->messages = f->posted;  // a QP in ERROR flushes the rest
        }
        if (f->completed == f->messages && !f->finished) {
          f->finished = true;
          w.flows_finished.fetch_add(1, std::memory_order_release);
        }
        return;
      }
    }
  };

  struct ResponderApp : dp::ShardApp {
    Impl& w;
    std::vector<Target*> mine;
    explicit ResponderApp(Impl& i) : w(i) {}
    bool on_poll(dp::Shard&, Nanos) override { return false; }
    void on_completion(dp::Shard& s, const engine::Completion& c, Nanos) override {
      for (Target* t : mine) {
        if (t->qpn != c.qpn) continue;
        if (c.status != engine::WcStatus::success || !c.has_imm) {
          if (c.status != engine::WcStatus::success && w.errors.fetch_add(1) == 0)
            w.first_error = fmt::format("responder QP {}: {}", c.qpn, engine::wc_status_name(c.status));
          return;
        }
        // The immediate carries the low 32 bits of the message index.
        const uint64_t i = (t->next_imm & ~0xFFFFFFFFull) | c.imm;
        if (i != t->next_imm) t->imm_in_order = false;
        t->next_imm = i + 1;
        ++t->imm_received;
        w.check_slot(*t, i);
        s.engine().post_recv(c.qpn, engine::RecvWr{i});
        return;
      }
    }
  };
  std::vector<std::unique_ptr<RequesterApp>> req_apps;
  std::vector<std::unique_ptr<ResponderApp>> resp_apps;

  Impl(dp::Nic& n, const Options& opt, const Built& built)
      : nic(n), o(opt), b(built), wl(opt.wl), imm(opt.wl.op == "write_imm"), K(opt.wl.depth + 1) {
    wl.seed = opt.seed;
  }
  ~Impl() {
    if (peer_fd >= 0) ::close(peer_fd);
    if (listen_fd >= 0) ::close(listen_fd);
    std::free(src);
    std::free(dst);
  }

  uint8_t* slot(const Target& t, uint64_t i) const {
    return dst + (uint64_t(t.index) * wl.depth + i % wl.depth) * wl.size;
  }

  void check_slot(Target& t, uint64_t i) {
    const uint32_t pattern = static_cast<uint32_t>((i + t.index) % K);
    ++t.slots_checked;
    const uint8_t* got = slot(t, i);
    if (std::memcmp(got, src_pattern(pattern), wl.size) == 0) return;
    if (t.slots_bad++ == 0) {
      // Say what is there instead: an older message, a mix, or nothing.
      uint64_t first_diff = 0;
      while (got[first_diff] == src_pattern(pattern)[first_diff]) ++first_diff;
      int holds = -1;
      for (uint32_t p = 0; p < K && holds < 0; ++p)
        if (std::memcmp(got, src_pattern(p), wl.size) == 0) holds = int(p);
      std::string chunks;
      for (uint64_t off = 0; off < wl.size; off += 4096) {
        int cp = -1;
        for (uint32_t p = 0; p < K && cp < 0; ++p)
          if (std::memcmp(got + off, src_pattern(p) + off, std::min<uint64_t>(4096, wl.size - off)) == 0) cp = int(p);
        chunks += fmt::format("{} ", cp);
      }
      t.first_bad = fmt::format(
          "QP {} message {} (slot {}): first wrong byte at {}, slot holds {} [{}] next_imm {} recv {}", t.index, i,
          i % wl.depth, first_diff, holds >= 0 ? fmt::format("pattern {} (expected {})", holds, pattern) : "a mix",
          chunks, t.next_imm, t.imm_received);
    }
  }
  // The responder keeps its own copy of the patterns to compare with.
  std::vector<uint8_t> patterns;
  const uint8_t* src_pattern(uint32_t p) const { return patterns.data() + uint64_t(p) * wl.size; }

  void make_patterns() {
    patterns.resize(uint64_t(K) * wl.size);
    for (uint32_t p = 0; p < K; ++p) fill_pattern(patterns.data() + uint64_t(p) * wl.size, wl.size, wl.seed, p);
  }

  std::string setup_requester_side() {
    src = alloc_region(uint64_t(K) * wl.size);
    if (!src) return "workload: out of memory for the source patterns";
    std::memcpy(src, patterns.data(), patterns.size());
    uint32_t rkey = 0;
    if (!from->reg_mr(1, src, reinterpret_cast<uintptr_t>(src), uint64_t(K) * wl.size, engine::kAccessLocalWrite, src_lkey, rkey))
      return "workload: cannot register the source region";
    auto& shards = from->shards();
    for (size_t k = 0; k < shards.size(); ++k) req_apps.push_back(std::make_unique<RequesterApp>(*this));
    // Rounded up without bytes + size - 1, which wraps for sizes near 2^64.
    const uint64_t total = wl.bytes ? wl.bytes / wl.size + (wl.bytes % wl.size != 0) : UINT64_MAX;
    for (uint32_t q = 0; q < wl.qps; ++q) {
      Flow f;
      f.index = q;
      f.shard = shards[q % shards.size()].get();
      f.shard->call([&] { f.qpn = f.shard->engine().create_qp(1, b.qp_caps); });
      if (!f.qpn) return fmt::format("workload: device {} is out of QPs", from->name());
      f.messages = total == UINT64_MAX ? UINT64_MAX : total / wl.qps + (q < total % wl.qps ? 1 : 0);
      // Fewer messages than QPs: a QP with none has no completion to
      // finish it, and done() would wait for it forever.
      if (f.messages == 0) {
        f.finished = true;
        flows_finished.fetch_add(1, std::memory_order_release);
      }
      flows.push_back(f);
    }
    for (auto& f : flows) req_apps[f.shard->index()]->mine.push_back(&f);
    for (auto& s : shards) s->set_app(req_apps[s->index()].get());
    return {};
  }

  std::string setup_responder_side() {
    dst_len = uint64_t(wl.qps) * wl.depth * wl.size;
    dst = alloc_region(dst_len);
    if (!dst) return "workload: out of memory for the responder region";
    if (!to->reg_mr(1, dst, reinterpret_cast<uintptr_t>(dst), dst_len, engine::kAccessLocalWrite | engine::kAccessRemoteWrite, dst_lkey, dst_rkey))
      return "workload: cannot register the responder region";
    auto& shards = to->shards();
    for (size_t k = 0; k < shards.size(); ++k) resp_apps.push_back(std::make_unique<ResponderApp>(*this));
    for (uint32_t q = 0; q < wl.qps; ++q) {
      Target t;
      t.index = q;
      t.shard = shards[q % shards.size()].get();
      t.shard->call([&] { t.qpn = t.shard->engine().create_qp(1, b.qp_caps); });
      if (!t.qpn) return fmt::format("workload: device {} is out of QPs", to->name());
      targets.push_back(t);
    }
    for (auto& t : targets) resp_apps[t.shard->index()]->mine.push_back(&t);
    for (auto& s : shards) s->set_app(resp_apps[s->index()].get());
    return {};
  }

  // INIT -> RTR -> RTS against the peer's addresses.
  std::string connect(dp::Shard& s, uint32_t qpn, uint32_t dest_qpn, uint32_t sq_psn, uint32_t rq_psn,
                      const std::array<engine::PlaneAddr, engine::kMaxPlanes>& remote) {
    engine::QpAttr a = b.qp_attr;
    a.dest_qpn = dest_qpn;
    a.sq_psn = sq_psn;
    a.rq_psn = rq_psn;
    a.remote = remote;
    // A static neighbour entry overrides the MAC the peer announced.
    for (auto& r : a.remote)
      for (auto& n : b.neighbours)
        if (n.ip == r.ip) r.mac = n.mac;
    std::string err;
    s.call([&] {
      const Nanos now = nic.now();
      for (auto st : {engine::QpState::init, engine::QpState::rtr, engine::QpState::rts})
        if (s.engine().modify_qp(qpn, st, a, now) != engine::ModifyError::ok) {
          err = fmt::format("workload: QP {} cannot move to {}", qpn, engine::qp_state_name(st));
          return;
        }
    });
    return err;
  }

  static std::array<engine::PlaneAddr, engine::kMaxPlanes> addrs(dp::Device& d) {
    std::array<engine::PlaneAddr, engine::kMaxPlanes> a{};
    for (uint32_t p = 0; p < d.num_planes(); ++p) a[p] = d.plane_addr(p);
    return a;
  }

  uint32_t psn_for(uint32_t q) const { return static_cast<uint32_t>((wl.seed * 7919 + q * 104729) & 0xFFFFFF); }

  std::string setup_local() {
    from = nic.find_device(wl.from);
    to = nic.find_device(wl.to);
    if (auto e = setup_requester_side(); !e.empty()) return e;
    if (auto e = setup_responder_side(); !e.empty()) return e;
    remote_rkey = dst_rkey;
    for (uint32_t q = 0; q < wl.qps; ++q) {
      Flow& f = flows[q];
      Target& t = targets[q];
      f.remote_base = reinterpret_cast<uintptr_t>(slot(t, 0));
      if (auto e = connect(*f.shard, f.qpn, t.qpn, psn_for(q), 0, addrs(*to)); !e.empty()) return e;
      if (auto e = connect(*t.shard, t.qpn, f.qpn, 0, psn_for(q), addrs(*from)); !e.empty()) return e;
    }
    return {};
  }

  static void put_planes(dp::Device& d, WirePlane* out, uint32_t& n) {
    n = d.num_planes();
    for (uint32_t p = 0; p < n; ++p) {
      out[p].mac = d.plane_addr(p).mac;
      std::memcpy(out[p].ip, d.plane_addr(p).ip.bytes.data(), 16);
    }
  }
  static std::array<engine::PlaneAddr, engine::kMaxPlanes> get_planes(const WirePlane* in, uint32_t n) {
    std::array<engine::PlaneAddr, engine::kMaxPlanes> a{};
    for (uint32_t p = 0; p < n && p < engine::kMaxPlanes; ++p) {
      a[p].mac = in[p].mac;
      std::memcpy(a[p].ip.bytes.data(), in[p].ip, 16);
    }
    return a;
  }

  std::string setup_client() {
    from = nic.devices()[0].get();
    if (!wl.from.empty()) from = nic.find_device(wl.from);
    const auto colon = wl.connect.rfind(':');
    if (colon == std::string::npos) return "--wl-connect: expected HOST:PORT";
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string host = wl.connect.substr(0, colon), port = wl.connect.substr(colon + 1);
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res)
      return fmt::format("--wl-connect: cannot resolve {}", wl.connect);
    // The responder may still be starting: retry for a while.
    for (int attempt = 0; attempt < 200 && peer_fd < 0; ++attempt) {
      int fd = ::socket(res->ai_family, SOCK_STREAM, 0);
      if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        peer_fd = fd;
        break;
      }
      if (fd >= 0) ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    freeaddrinfo(res);
    if (peer_fd < 0) return fmt::format("--wl-connect: no responder at {} after 20 s", wl.connect);
    int one = 1;
    setsockopt(peer_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (auto e = setup_requester_side(); !e.empty()) return e;
    Hello h{kMagic, kVersion, imm, wl.qps, wl.depth, 0, wl.size, {}};
    put_planes(*from, h.plane, h.planes);
    std::vector<QpWire> mine(wl.qps), theirs(wl.qps);
    for (uint32_t q = 0; q < wl.qps; ++q) mine[q] = {flows[q].qpn, psn_for(q)};
    Accept acc{};
    if (!send_all(peer_fd, &h, sizeof h) || !send_all(peer_fd, mine.data(), mine.size() * sizeof(QpWire)) ||
        !recv_all(peer_fd, &acc, sizeof acc) || acc.magic != kMagic ||
        !recv_all(peer_fd, theirs.data(), theirs.size() * sizeof(QpWire)))
      return "workload: the responder closed the connection during setup (do both sides agree on the options?)";
    remote_rkey = acc.rkey;
    remote_base = acc.base;
    const auto remote = get_planes(acc.plane, acc.planes);
    if (acc.planes != from->num_planes())
      return fmt::format("workload: the responder has {} planes, we have {}", acc.planes, from->num_planes());
    for (uint32_t q = 0; q < wl.qps; ++q) {
      flows[q].remote_base = remote_base + uint64_t(q) * wl.depth * wl.size;
      if (auto e = connect(*flows[q].shard, flows[q].qpn, theirs[q].qpn, psn_for(q), 0, remote); !e.empty()) return e;
    }
    return {};
  }

  std::string setup_server() {
    to = nic.devices()[0].get();
    if (!wl.to.empty()) to = nic.find_device(wl.to);
    listen_fd = ::socket(AF_INET6, SOCK_STREAM, 0);
    int one = 1, zero = 0;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(wl.listen);
    sa.sin6_addr = in6addr_any;
    if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(listen_fd, 1) != 0)
      return fmt::format("--wl-listen {}: {}", wl.listen, std::strerror(errno));
    fmt::print(stderr, "mrc-nic: workload responder waiting on TCP port {}\n", wl.listen);
    peer_fd = ::accept(listen_fd, nullptr, nullptr);
    if (peer_fd < 0) return fmt::format("--wl-listen: accept: {}", std::strerror(errno));
    setsockopt(peer_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Hello h{};
    if (!recv_all(peer_fd, &h, sizeof h) || h.magic != kMagic || h.version != kVersion)
      return "workload: bad hello from the requester";
    if (h.qps == 0 || h.qps > 4096 || h.depth == 0 || h.depth > 4096 || h.size == 0 || h.size > (1ull << 30) ||
        h.planes != to->num_planes())
      return fmt::format("workload: requester asks for {} QPs x {} x {} B on {} planes; this side has {} planes", h.qps,
                         h.depth, h.size, h.planes, to->num_planes());
    // The requester's parameters rule.
    wl.qps = h.qps;
    wl.depth = h.depth;
    wl.size = h.size;
    imm = h.imm != 0;
    K = h.depth + 1;
    make_patterns();
    std::vector<QpWire> theirs(h.qps), mine(h.qps);
    if (!recv_all(peer_fd, theirs.data(), theirs.size() * sizeof(QpWire))) return "workload: requester went away";
    if (auto e = setup_responder_side(); !e.empty()) return e;
    const auto remote = get_planes(h.plane, h.planes);
    for (uint32_t q = 0; q < h.qps; ++q) {
      mine[q] = {targets[q].qpn, 0};
      if (auto e = connect(*targets[q].shard, targets[q].qpn, theirs[q].qpn, 0, theirs[q].psn, remote); !e.empty())
        return e;
    }
    Accept acc{kMagic, 0, dst_rkey, 0, reinterpret_cast<uintptr_t>(dst), {}};
    put_planes(*to, acc.plane, acc.planes);
    if (!send_all(peer_fd, &acc, sizeof acc) || !send_all(peer_fd, mine.data(), mine.size() * sizeof(QpWire)))
      return "workload: requester went away";
    return {};
  }

  void post_initial_recvs() {
    if (!imm) return;
    for (auto& t : targets) {
      dp::Shard* s = t.shard;
      s->call([&] {
        for (uint32_t k = 0; k < wl.depth; ++k) s->engine().post_recv(t.qpn, engine::RecvWr{k});
      });
    }
  }

  // Each slot's last message, checked on the lcore that owns the QP.
  void verify_final(const std::vector<uint64_t>& counts) {
    for (auto& t : targets) {
      const uint64_t n = t.index < counts.size() ? counts[t.index] : 0;
      t.shard->call([&] {
        for (uint64_t k = 0; k < wl.depth && k < n; ++k) {
          const uint64_t last = n - 1 - ((n - 1 - k) % wl.depth);
          check_slot(t, last);
        }
      });
    }
  }

  WorkloadResult responder_result(const std::vector<uint64_t>& counts) {
    verify_final(counts);
    WorkloadResult r;
    r.integrity_ok = true;
    r.completions_ok = true;
    for (auto& t : targets) {
      uint64_t checked = 0, bad = 0, got = 0;
      bool in_order = true;
      t.shard->call([&] {
        if (r.first_error.empty()) r.first_error = t.first_bad;
        checked = t.slots_checked;
        bad = t.slots_bad;
        got = t.imm_received;
        in_order = t.imm_in_order;
      });
      r.slots_checked += checked;
      r.slots_bad += bad;
      r.imm_received += got;
      const uint64_t expect = t.index < counts.size() ? counts[t.index] : 0;
      if (imm && (got != expect || !in_order)) r.completions_ok = false;
    }
    r.integrity_ok = r.slots_bad == 0 && r.slots_checked > 0;
    return r;
  }
};

Workload::Workload(dp::Nic& nic, const Options& o, const Built& b) : impl_(std::make_unique<Impl>(nic, o, b)) {}
Workload::~Workload() = default;

std::string Workload::setup() {
  auto& I = *impl_;
  if (I.wl.listen) {
    auto e = I.setup_server();
    if (e.empty()) I.post_initial_recvs();
    return e;
  }
  I.make_patterns();
  auto e = I.wl.connect.empty() ? I.setup_local() : I.setup_client();
  if (e.empty()) I.post_initial_recvs();
  return e;
}

void Workload::begin() {
  auto& I = *impl_;
  I.t_start = I.nic.now();
  if (I.wl.listen) {
    const uint32_t ready = kMagic;
    send_all(I.peer_fd, &ready, sizeof ready);
    return;
  }
  if (!I.wl.connect.empty()) {
    uint32_t ready = 0;
    if (!recv_all(I.peer_fd, &ready, sizeof ready) || ready != kMagic) return;
  }
  I.posting.store(true);
}

bool Workload::done() {
  auto& I = *impl_;
  if (I.wl.listen) {
    if (I.remote_done) return true;
    pollfd p{I.peer_fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    DoneMsg d{};
    I.remote_done = true;
    if (!recv_all(I.peer_fd, &d, sizeof d) || d.magic != kMagic || d.qps != I.targets.size()) return true;
    I.remote_counts.resize(d.qps);
    if (!recv_all(I.peer_fd, I.remote_counts.data(), d.qps * sizeof(uint64_t))) I.remote_counts.clear();
    return true;
  }
  return I.posting.load() && I.flows_finished.load(std::memory_order_acquire) == I.flows.size();
}

void Workload::stop_posting() {
  auto& I = *impl_;
  for (auto& f : I.flows)
    f.shard->call([&] {
      f.messages = f.posted;
      if (f.completed == f.messages && !f.finished) {
        f.finished = true;
        I.flows_finished.fetch_add(1, std::memory_order_release);
      }
    });
}

uint64_t Workload::bytes_completed() const {
  uint64_t bytes = 0;
  // A responder alone completes nothing: what its QPs placed is its goodput
  // (duplicates are not placed twice).
  if (impl_->wl.listen) {
    for (auto& d : impl_->nic.devices()) bytes += d->qp_counter_totals()[engine::QpCtr::rx_data_bytes];
    return bytes;
  }
  for (const auto& app : impl_->req_apps) bytes += app->bytes_done.load(std::memory_order_relaxed);
  return bytes;
}

namespace {
// The responder's side of a result: its verification.
void take_verdict(WorkloadResult& r, const WorkloadResult& v) {
  r.first_error = v.first_error;
  r.integrity_ok = v.integrity_ok;
  r.completions_ok = v.completions_ok;
  r.slots_checked = v.slots_checked;
  r.slots_bad = v.slots_bad;
  r.imm_received = v.imm_received;
}
}  // namespace

WorkloadResult Workload::finish() {
  auto& I = *impl_;
  WorkloadResult r;
  // The requester's clock stops at its last completion, not when the
  // control thread noticed.
  Nanos last = 0;
  for (const auto& app : I.req_apps) last = std::max(last, app->last_completion.load(std::memory_order_relaxed));
  const Nanos t_end = !I.wl.listen && last > I.t_start ? last : I.nic.now();
  r.seconds = double(t_end - I.t_start) / 1e9;
  std::vector<uint64_t> counts;
  for (auto& f : I.flows) {
    uint64_t c = 0;
    f.shard->call([&] { c = f.succeeded; });
    counts.push_back(c);
    r.messages += c;
  }
  r.bytes = bytes_completed();
  if (I.wl.listen) {
    r = I.responder_result(I.remote_counts);
    r.seconds = double(t_end - I.t_start) / 1e9;
    r.messages = 0;
    for (uint64_t c : I.remote_counts) r.messages += c;
    r.bytes = r.messages * I.wl.size;
    ResultMsg m{kMagic, r.integrity_ok, r.completions_ok, 0, r.slots_checked, r.slots_bad, r.imm_received};
    send_all(I.peer_fd, &m, sizeof m);
  } else if (!I.wl.connect.empty()) {
    DoneMsg d{kMagic, static_cast<uint32_t>(counts.size())};
    ResultMsg m{};
    if (send_all(I.peer_fd, &d, sizeof d) && send_all(I.peer_fd, counts.data(), counts.size() * sizeof(uint64_t)) &&
        recv_all(I.peer_fd, &m, sizeof m) && m.magic == kMagic) {
      WorkloadResult v;
      v.integrity_ok = m.integrity_ok;
      v.completions_ok = m.completions_ok;
      v.slots_checked = m.slots_checked;
      v.slots_bad = m.slots_bad;
      v.imm_received = m.imm_received;
      take_verdict(r, v);
    } else {
      r.first_error = "the responder did not report its verification";
    }
  } else {
    take_verdict(r, I.responder_result(counts));
  }
  // Integrity is what the responder checked; failed completions are the
  // completions' verdict (a retry error said "integrity FAILED" with nothing
  // checked).
  r.errors = I.errors.load();
  if (r.errors) r.first_error = I.first_error;
  if (!r.integrity_ok && r.first_error.empty())
    r.first_error = r.slots_checked ? "placed bytes differ from those sent" : "the responder checked nothing";
  if (!I.imm || r.errors) r.completions_ok = r.errors == 0;
  r.size = I.wl.size;
  r.qps = I.wl.qps;
  r.depth = I.wl.depth;
  return r;
}

}  // namespace mrc::nicapp
