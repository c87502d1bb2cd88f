// mrc-perf: RDMA WRITE / WRITE_WITH_IMM bandwidth and latency benchmark over
// the OCP MRC verbs API (mrc.h), in the manner of perftest's ib_write_bw and
// ib_write_lat, with end-to-end verification of every byte it wrote.
//
//   server:  mrc-perf --dev mrc1 [--port 18515]
//   client:  mrc-perf --dev mrc0 --connect HOST[:PORT] [--test bw|lat] [--event] ...
//
// The server serves one client and exits. Everything about the test (sizes,
// iterations, QPs, MTU, ...) is decided by the client and sent to the server
// over a TCP control connection, which also carries the QP/buffer exchange
// and each phase's verification verdict.
//
// Control protocol (TCP, every message = 12-byte header {u32 magic "MRCP",
// u16 type, u16 0, u32 payload length} + payload; integers little-endian):
//   C->S HELLO        protocol version and the test configuration
//   S->C SETUP        server GID, active MTU and per QP {qpn, psn, addr, rkey,
//                     capacity} of its destination area
//   C->S SETUP        the same for the client, plus the path MTU both use
//   S->C READY        server QPs are in RTS and its receive queues are
//                     filled: {u32 QPs, per QP u64 receives posted so far}
//   per size:
//   C->S PHASE_BEGIN  size, warmup, iterations (or a duration)
//   S->C PHASE_READY  server zeroed its destination area (and for latency
//                     prepared its first reply)
//   ... RDMA traffic ...
//   S->C CREDIT       bandwidth WRITE_IMM only, any number of times before
//                     PHASE_RESULT: same payload as READY
//   C->S PHASE_END    per QP: the number of WRs issued and completed
//   S->C PHASE_RESULT verification verdict (slots/bytes checked, bad slots,
//                     immediates received/bad, first problem as text)
//   C->S BYE          {u8 overall integrity verdict of the client}
//   either way ABORT  {u8 exit code, text}: the sender gives up
//
// Receive credits. MRC has no RNR: a WRITE_IMM that finds no receive WR
// posted is a fatal error of the responder's QP. The client's send window
// only bounds what the server's NIC has not yet acknowledged, not what the
// server program has not yet seen and re-posted (a server that loses its
// CPU for a few ms falls behind by thousands of messages). So in the
// bandwidth test with WRITE_IMM the client never lets QP q's total of
// WRITE_IMMs (over the whole session) exceed the number of receives the
// server has announced for q: in READY, then in CREDIT messages, which the
// server sends when some QP has re-posted a quarter of its receive queue
// since the last announcement. Announcements lag the truth by less than a
// quarter of the queue, so a server that keeps up never throttles the
// client (window <= 3/4 of the queue).
//
// Data pattern. Both sides fill a "master" buffer from the agreed seed:
// 1 MiB + max size of pseudo-random bytes, whose every 64-byte block starts
// with a non-zero marker that differs between neighbouring blocks. Message
// `i` of QP `q` goes to destination slot i % S (S slots of round_up(size,64)
// bytes per QP) and its payload is the master window starting at block
//   (hash(seed, size, q, direction) + 97 * slot + i / S) mod 16384.
// So the content depends on (size, qp, slot, iteration): two consecutive
// writes to one slot always differ, neighbouring slots differ, and the
// requester posts straight from the master without copying. A slot is not
// reused until the previous write to it has completed (the posting window is
// at most S), so the final content of each slot is well defined: after each
// size the receiver compares every slot with the last message written there
// (computed from the per-QP WR count the client reports), and checks that
// the gaps between slots and the rest of the area are still zero. For
// WRITE_WITH_IMM the immediate is (qp << 24 | iteration mod 2^24) and the
// receiver checks that each QP's immediates arrive in sequence.
//
// Latency test (one QP): ping-pong over two alternating slots. Each message
// is copied into one of two per-side source buffers with its last byte
// replaced by a per-iteration marker 1 + i % 255. WRITE mode spins on that
// byte of the destination slot (like ib_write_lat); WRITE_IMM mode waits for
// the receive completion. A side only reuses a slot after its earlier write
// there completed. Reported latency is half the round trip.
//
// Waiting for completions. By default both sides poll their CQs and call
// sched_yield() after every empty poll, so that mrc-nic's polling lcores get
// the CPU when they share it with us. With --event (like perftest's -e) a
// side that has nothing to do sleeps on a completion channel instead: after
// an empty poll it arms the CQ (mrc_req_notify_cq), polls once more to catch
// a completion that came before the arm, then poll()s the channel's fd
// (non-blocking; events are fetched with mrc_get_cq_event and acked) together
// with the control connection, for at most kEventSliceMs so that the stall
// and peer checks keep running (and the bandwidth client sees the server's
// receive credits at once). This applies to the bandwidth client's send
// CQ, the server's receive CQ (write_imm) and both sides of the write_imm
// latency test; latency WRITE mode detects the reply by polling memory and
// cannot use it. A wait that times out and then finds a completion that did
// not signal the channel is counted as a missed wakeup and reported.
//
// Exit codes: 0 success, 1 usage or setup error, 2 error while running
// (completion error, stall, peer gone), 3 data integrity failure.

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <infiniband/verbs.h>
#include <mrc.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

// mrc_query_device_ex() exists from API 1.0.1 on.
#if defined(MRC_API_VER_USED) && defined(MRC_API_VER)
#if MRC_API_VER_USED >= MRC_API_VER(1, 0, 1)
#define MRCPERF_QUERY_EX 1
#endif
#endif
#ifndef MRCPERF_QUERY_EX
#define MRCPERF_QUERY_EX 0
#endif

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitOk = 0;
constexpr int kExitSetup = 1;
constexpr int kExitRun = 2;
constexpr int kExitIntegrity = 3;

constexpr uint32_t kMagic = 0x5043524d;  // "MRCP" as little-endian bytes
constexpr uint16_t kProtoVersion = 3;
constexpr uint32_t kMaxCtlPayload = 1u << 20;
constexpr uint8_t kPortNum = 1;

constexpr uint64_t kBlock = 64;
constexpr uint64_t kPatternBlocks = 16384;
constexpr uint64_t kPatternSpan = kBlock * kPatternBlocks;
constexpr uint64_t kMaxSize = 1ull << 30;
constexpr uint64_t kDstBudget = 8ull << 20;  // per QP, bandwidth test
constexpr uint32_t kMaxTxDepth = 4096;
constexpr uint64_t kMaxIters = 1ull << 48;   // --iters, --warmup
// The latency test keeps up to this many samples (8 bytes each) for its
// percentiles; --iters may not ask for more.
constexpr uint64_t kMaxLatIters = 1ull << 24;  // 128 MiB
constexpr double kMaxSeconds = 1e6;          // --seconds, --stats-interval: far inside chrono's ns range
constexpr uint32_t kMaxQps = 255;            // QP index lives in 8 imm bits
constexpr uint32_t kPostBatch = 16;
constexpr uint32_t kPollBatch = 32;
constexpr auto kStall = std::chrono::seconds(10);
constexpr auto kPeerCheck = std::chrono::milliseconds(50);
constexpr int kEventSliceMs = 10;  // longest single sleep on a completion channel

FILE* g_out = stdout;  // human-readable output (stderr when JSON goes to stdout)

// ---------------------------------------------------------------- errors

struct Failure : std::runtime_error {
  int code;
  Failure(int c, const std::string& m) : std::runtime_error(m), code(c) {}
};

[[noreturn]] void fail_setup(const std::string& m) { throw Failure(kExitSetup, m); }
[[noreturn]] void fail_run(const std::string& m) { throw Failure(kExitRun, m); }

std::string errno_text(int e) { return fmt::format("errno {} ({})", e, std::strerror(e)); }

// Verbs-style calls return 0 or a positive errno value; MRC calls return 0
// or -1 with errno set. Report whichever carries the reason.
std::string rc_text(int rc, int saved_errno) {
  if (rc > 0) return fmt::format("rc={} ({})", rc, std::strerror(rc));
  return fmt::format("rc={}, {}", rc, errno_text(saved_errno));
}

void check(int rc, const char* what, int code = kExitSetup) {
  if (rc == 0) return;
  const int e = errno;
  throw Failure(code, fmt::format("{} failed: {}", what, rc_text(rc, e)));
}

template <typename T>
T* check_ptr(T* p, const char* what) {
  if (p) return p;
  const int e = errno;
  fail_setup(fmt::format("{} failed: {}", what, errno_text(e)));
}

// ---------------------------------------------------------------- config

enum class Op : uint8_t { Write = 0, WriteImm = 1 };
enum class Test : uint8_t { Bw = 0, Lat = 1 };

// What both sides agree on; the client's values are authoritative.
struct Config {
  Op op = Op::Write;
  Test test = Test::Bw;
  bool verify = true;
  bool event = false;  // sleep on a completion channel instead of polling
  uint32_t mtu = 4096;
  uint32_t gid_idx = 3;
  uint32_t qps = 1;
  uint64_t iters = 1000;
  uint64_t warmup = 0;
  uint32_t tx_depth = 128;
  uint32_t cq_mod = 64;
  uint64_t seconds_ms = 0;  // 0: run `iters`
  uint64_t seed = 0;
  std::vector<uint64_t> sizes;

  uint64_t max_size() const { return *std::max_element(sizes.begin(), sizes.end()); }
  bool imm() const { return op == Op::WriteImm; }
  bool lat() const { return test == Test::Lat; }
};

const char* op_name(Op o) { return o == Op::Write ? "write" : "write_imm"; }
const char* test_name(Test t) { return t == Test::Bw ? "bw" : "lat"; }
const char* wait_name(bool event) { return event ? "event" : "poll"; }

std::optional<ibv_mtu> mtu_enum(uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return std::nullopt;
  }
}

uint32_t mtu_bytes(int m) {
  switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default: return 0;
  }
}

// "65536", "64K", "4M", "1G" (binary multiples).
std::optional<uint64_t> parse_size(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t mult = 1;
  switch (s.back()) {
    case 'k': case 'K': mult = 1ull << 10; break;
    case 'm': case 'M': mult = 1ull << 20; break;
    case 'g': case 'G': mult = 1ull << 30; break;
    default: break;
  }
  if (mult != 1) s.remove_suffix(1);
  if (s.empty() || s.size() > 12) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v > UINT64_MAX / mult) return std::nullopt;  // 17179869185G would wrap to 1G
  return v * mult;
}

bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }
uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string human_size(uint64_t v) {
  if (v >= (1ull << 30) && v % (1ull << 30) == 0) return fmt::format("{}G", v >> 30);
  if (v >= (1ull << 20) && v % (1ull << 20) == 0) return fmt::format("{}M", v >> 20);
  if (v >= (1ull << 10) && v % (1ull << 10) == 0) return fmt::format("{}K", v >> 10);
  return fmt::format("{}", v);
}

std::string gid_text(const ibv_gid& g) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char buf[INET6_ADDRSTRLEN] = {};
  if (std::memcmp(g.raw, mapped, 12) == 0) {
    inet_ntop(AF_INET, g.raw + 12, buf, sizeof buf);
    return fmt::format("::ffff:{}", buf);
  }
  inet_ntop(AF_INET6, g.raw, buf, sizeof buf);
  return buf;
}

// ---------------------------------------------------------------- pattern

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t master_len(uint64_t max_size) { return kPatternSpan + max_size; }

void fill_master(uint8_t* p, uint64_t n, uint64_t seed) {
  uint64_t s = mix64(seed ^ 0x6d72632d70657266ull);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = mix64(s++);
    std::memcpy(p + i, &v, 8);
  }
  if (i < n) {
    const uint64_t v = mix64(s);
    std::memcpy(p + i, &v, n - i);
  }
  // Block markers: never zero; blocks k and k+1 always differ (167 is odd).
  for (uint64_t k = 0; k * kBlock < n; ++k) p[k * kBlock] = uint8_t(((k * 167) & 0xff) | 1);
}

// Geometry of one size's destination area of one QP.
struct Layout {
  uint64_t size = 0;
  uint64_t stride = 0;
  uint32_t slots = 0;
};

Layout layout_for(const Config& c, uint64_t size) {
  Layout l;
  l.size = size;
  l.stride = round_up(size, kBlock);
  if (c.lat()) {
    l.slots = 2;
  } else {
    uint64_t n = kDstBudget / l.stride;
    n = std::min<uint64_t>(n, c.tx_depth);
    n = std::max<uint64_t>(n, std::min<uint64_t>(2, c.tx_depth));
    l.slots = uint32_t(n);
  }
  return l;
}

// Bytes of destination area per QP needed by every size of the run.
uint64_t dst_capacity(const Config& c) {
  uint64_t cap = 0;
  for (uint64_t s : c.sizes) {
    const Layout l = layout_for(c, s);
    cap = std::max(cap, l.stride * l.slots);
  }
  return cap;
}

// Offset into the master of message `iter` (direction 0: client to server).
uint64_t msg_offset(uint64_t seed, uint64_t size, uint32_t qp, uint32_t dir, uint64_t iter,
                    uint32_t slots) {
  const uint64_t slot = iter % slots;
  const uint64_t round = iter / slots;
  const uint64_t h = mix64(seed ^ mix64(size ^ (uint64_t(qp) << 32) ^ (uint64_t(dir) << 62)));
  return ((h % kPatternBlocks + slot * 97 + round) % kPatternBlocks) * kBlock;
}

uint8_t lat_marker(uint64_t iter) { return uint8_t(1 + iter % 255); }

uint32_t make_imm(uint32_t qp, uint64_t iter) { return (qp << 24) | uint32_t(iter & 0xffffff); }

// Compares one QP's destination area with what the last writes of a phase
// left there.
struct Verdict {
  uint64_t slots_checked = 0;
  uint64_t bytes_checked = 0;
  uint64_t bad_slots = 0;
  uint64_t imm_received = 0;
  uint64_t imm_bad = 0;
  std::string first;
  void note(std::string m) {
    if (first.empty()) first = std::move(m);
  }
  bool ok() const { return bad_slots == 0 && imm_bad == 0; }
  void merge(const Verdict& o) {
    slots_checked += o.slots_checked;
    bytes_checked += o.bytes_checked;
    bad_slots += o.bad_slots;
    imm_received += o.imm_received;
    imm_bad += o.imm_bad;
    if (first.empty()) first = o.first;
  }
};

struct Expect {
  const uint8_t* master;
  uint64_t seed;
  uint32_t qp;
  uint32_t dir;
  bool lat;
  const Layout& l;
  // First byte at which `got` differs from message `iter`, or size if none.
  uint64_t diff(const uint8_t* got, uint64_t iter) const {
    const uint8_t* want = master + msg_offset(seed, l.size, qp, dir, iter, l.slots);
    const uint64_t body = lat ? l.size - 1 : l.size;
    if (std::memcmp(got, want, body) != 0) {
      uint64_t k = 0;
      while (got[k] == want[k]) ++k;
      return k;
    }
    if (lat && got[body] != lat_marker(iter)) return body;
    return l.size;
  }
  uint8_t byte(uint64_t iter, uint64_t k) const {
    if (lat && k == l.size - 1) return lat_marker(iter);
    return master[msg_offset(seed, l.size, qp, dir, iter, l.slots) + k];
  }
};

uint64_t first_nonzero(const uint8_t* p, uint64_t n) {
  for (uint64_t k = 0; k < n; ++k)
    if (p[k]) return k;
  return n;
}

void verify_area(const uint8_t* area, uint64_t cap, const Expect& e, uint64_t n, Verdict& v) {
  const Layout& l = e.l;
  std::atomic_thread_fence(std::memory_order_acquire);
  for (uint32_t s = 0; s < l.slots; ++s) {
    const uint8_t* got = area + uint64_t(s) * l.stride;
    ++v.slots_checked;
    v.bytes_checked += l.stride;
    if (s >= n) {  // never written in this phase
      const uint64_t k = first_nonzero(got, l.stride);
      if (k < l.stride) {
        ++v.bad_slots;
        v.note(fmt::format("QP {} slot {} was never written but byte {} is {:#04x}", e.qp, s, k,
                           got[k]));
      }
      continue;
    }
    const uint64_t last = s + (n - 1 - s) / l.slots * l.slots;
    const uint64_t k = e.diff(got, last);
    if (k < l.size) {
      ++v.bad_slots;
      std::string why = fmt::format("got {:#04x} expected {:#04x}", got[k], e.byte(last, k));
      if (last >= l.slots && e.diff(got, last - l.slots) == l.size)
        why = fmt::format("slot holds the previous write (iteration {}): stale", last - l.slots);
      v.note(fmt::format("QP {} size {} slot {} (last write: iteration {}): first wrong byte at "
                         "offset {}: {}",
                         e.qp, l.size, s, last, k, why));
      continue;
    }
    const uint64_t g = first_nonzero(got + l.size, l.stride - l.size);
    if (g < l.stride - l.size) {
      ++v.bad_slots;
      v.note(fmt::format("QP {} size {} slot {}: byte {} past the message end is {:#04x}", e.qp,
                         l.size, s, l.size + g, got[l.size + g]));
    }
  }
  const uint64_t used = l.stride * l.slots;
  if (cap > used) {
    v.bytes_checked += cap - used;
    const uint64_t k = first_nonzero(area + used, cap - used);
    if (k < cap - used) {
      ++v.bad_slots;
      v.note(fmt::format("QP {} size {}: byte {} beyond the last slot is {:#04x} (stray write)",
                         e.qp, l.size, used + k, area[used + k]));
    }
  }
}

// ---------------------------------------------------------------- control channel

enum class Msg : uint16_t {
  Hello = 1,
  Setup = 2,
  Ready = 3,
  PhaseBegin = 4,
  PhaseReady = 5,
  PhaseEnd = 6,
  PhaseResult = 7,
  Bye = 8,
  Abort = 9,
  Credit = 10,
};

const char* msg_name(Msg m) {
  switch (m) {
    case Msg::Hello: return "HELLO";
    case Msg::Setup: return "SETUP";
    case Msg::Ready: return "READY";
    case Msg::PhaseBegin: return "PHASE_BEGIN";
    case Msg::PhaseReady: return "PHASE_READY";
    case Msg::PhaseEnd: return "PHASE_END";
    case Msg::PhaseResult: return "PHASE_RESULT";
    case Msg::Bye: return "BYE";
    case Msg::Abort: return "ABORT";
    case Msg::Credit: return "CREDIT";
  }
  return "?";
}

class Writer {
 public:
  Writer& u8(uint8_t v) { return le(v, 1); }
  Writer& u16(uint16_t v) { return le(v, 2); }
  Writer& u32(uint32_t v) { return le(v, 4); }
  Writer& u64(uint64_t v) { return le(v, 8); }
  Writer& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
    return *this;
  }
  Writer& str(std::string_view s) {
    u32(uint32_t(s.size()));
    return raw(s.data(), s.size());
  }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  Writer& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> b_;
};

class Reader {
 public:
  explicit Reader(std::vector<uint8_t> b = {}) : b_(std::move(b)) {}
  uint8_t u8() { return uint8_t(le(1)); }
  uint16_t u16() { return uint16_t(le(2)); }
  uint32_t u32() { return uint32_t(le(4)); }
  uint64_t u64() { return le(8); }
  void raw(void* p, size_t n) {
    need(n);
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
  }
  std::string str() {
    const uint32_t n = u32();
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  void need(size_t n) const {
    if (b_.size() - pos_ < n) fail_run("control protocol: truncated message");
  }
  uint64_t le(int n) {
    need(size_t(n));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(b_[pos_ + size_t(i)]) << (8 * i);
    pos_ += size_t(n);
    return v;
  }
  std::vector<uint8_t> b_;
  size_t pos_ = 0;
};

class Ctl {
 public:
  explicit Ctl(int fd) : fd_(fd) {}
  Ctl(const Ctl&) = delete;
  Ctl& operator=(const Ctl&) = delete;
  ~Ctl() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

  void send(Msg t, const Writer& w = Writer()) {
    const auto& p = w.bytes();
    Writer h;
    h.u32(kMagic).u16(uint16_t(t)).u16(0).u32(uint32_t(p.size()));
    write_all(h.bytes().data(), h.bytes().size());
    if (!p.empty()) write_all(p.data(), p.size());
  }

  // Blocks until the next message; an ABORT from the peer is thrown.
  Reader recv(Msg expect, int timeout_ms = -1) {
    auto [t, r] = recv_any(timeout_ms);
    if (t != expect)
      fail_run(fmt::format("control protocol: expected {}, got {}", msg_name(expect), msg_name(t)));
    return std::move(r);
  }

  // The next message, whatever it is (blocks; -1: no time limit).
  std::pair<Msg, Reader> next(int timeout_ms = -1) { return recv_any(timeout_ms); }

  // A message, if one is waiting; otherwise nothing. EOF and ABORT throw.
  std::optional<std::pair<Msg, Reader>> poll_msg() {
    pollfd p{fd_, POLLIN, 0};
    const int n = ::poll(&p, 1, 0);
    if (n < 0 && errno != EINTR) fail_run(fmt::format("poll(control) failed: {}", errno_text(errno)));
    if (n <= 0) return std::nullopt;
    return recv_any(10000);
  }

  // Best effort: tell the peer why we stop.
  void abort(int code, std::string_view why) noexcept {
    try {
      Writer w;
      w.u8(uint8_t(code)).str(why);
      send(Msg::Abort, w);
    } catch (...) {
    }
  }

 private:
  std::pair<Msg, Reader> recv_any(int timeout_ms) {
    uint8_t hdr[12];
    read_all(hdr, sizeof hdr, timeout_ms);
    Reader h(std::vector<uint8_t>(hdr, hdr + sizeof hdr));
    const uint32_t magic = h.u32();
    const auto type = Msg(h.u16());
    h.u16();
    const uint32_t len = h.u32();
    if (magic != kMagic) fail_run("control protocol: bad magic (is the peer mrc-perf?)");
    if (len > kMaxCtlPayload) fail_run(fmt::format("control protocol: message of {} bytes", len));
    std::vector<uint8_t> body(len);
    if (len) read_all(body.data(), len, 10000);
    Reader r(std::move(body));
    if (type == Msg::Abort) {
      const int code = r.u8();
      const std::string why = r.str();
      throw Failure(code == kExitSetup ? kExitSetup : kExitRun, fmt::format("peer gave up: {}", why));
    }
    return {type, std::move(r)};
  }

  void write_all(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    while (n) {
      const ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail_run(fmt::format("control connection: send failed: {}", errno_text(errno)));
      c += w;
      n -= size_t(w);
    }
  }

  void read_all(void* p, size_t n, int timeout_ms) {
    auto* c = static_cast<uint8_t*>(p);
    while (n) {
      if (timeout_ms >= 0) {
        pollfd pf{fd_, POLLIN, 0};
        const int pr = ::poll(&pf, 1, timeout_ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) fail_run(fmt::format("poll(control) failed: {}", errno_text(errno)));
        if (pr == 0)
          fail_run(fmt::format("control connection: peer silent for {} ms", timeout_ms));
      }
      const ssize_t r = ::recv(fd_, c, n, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) fail_run("control connection closed by the peer");
      if (r < 0) fail_run(fmt::format("control connection: recv failed: {}", errno_text(errno)));
      c += r;
      n -= size_t(r);
    }
  }

  int fd_;
};

void set_nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    fmt::print(stderr, "warning: TCP_NODELAY: {}\n", errno_text(errno));
}

int tcp_accept(uint16_t port) {
  // Dual-stack if IPv6 is available, plain IPv4 otherwise.
  int s = ::socket(AF_INET6, SOCK_STREAM, 0);
  const bool v6 = s >= 0;
  if (!v6) s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) fail_setup(fmt::format("socket failed: {}", errno_text(errno)));
  int one = 1, zero = 0;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(port);
    rc = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(port);
    rc = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) {
    const int e = errno;
    ::close(s);
    fail_setup(fmt::format("bind to TCP port {} failed: {}", port, errno_text(e)));
  }
  if (::listen(s, 1) != 0) {
    const int e = errno;
    ::close(s);
    fail_setup(fmt::format("listen failed: {}", errno_text(e)));
  }
  fmt::print(g_out, "waiting for a client on TCP port {}\n", port);
  std::fflush(g_out);
  int c;
  do {
    c = ::accept(s, nullptr, nullptr);
  } while (c < 0 && errno == EINTR);
  const int e = errno;
  ::close(s);
  if (c < 0) fail_setup(fmt::format("accept failed: {}", errno_text(e)));
  set_nodelay(c);
  return c;
}

// Connects to HOST:PORT, retrying a refused connection for a few seconds so
// that a server started at the same time has a chance to listen.
int tcp_connect(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string ps = std::to_string(port);
  const int g = ::getaddrinfo(host.c_str(), ps.c_str(), &hints, &res);
  if (g != 0) fail_setup(fmt::format("cannot resolve '{}': {}", host, gai_strerror(g)));
  const auto until = Clock::now() + std::chrono::seconds(5);
  int last = 0;
  for (;;) {
    for (addrinfo* a = res; a; a = a->ai_next) {
      const int s = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (s < 0) {
        last = errno;
        continue;
      }
      if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
        ::freeaddrinfo(res);
        set_nodelay(s);
        return s;
      }
      last = errno;
      ::close(s);
    }
    if (last != ECONNREFUSED || Clock::now() >= until) break;
    ::usleep(100000);
  }
  ::freeaddrinfo(res);
  fail_setup(fmt::format("cannot connect to {}:{}: {}", host, port, errno_text(last)));
}

// ---------------------------------------------------------------- RDMA resources

struct QpInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint64_t addr = 0;  // destination area of this QP
  uint32_t rkey = 0;
  uint64_t cap = 0;   // its length
};

struct PeerInfo {
  ibv_gid gid{};
  uint32_t active_mtu = 0;
  uint32_t path_mtu = 0;  // only meaningful from the client
  std::vector<QpInfo> qps;
};

void put_info(Writer& w, const PeerInfo& p) {
  w.raw(p.gid.raw, 16).u32(p.active_mtu).u32(p.path_mtu).u32(uint32_t(p.qps.size()));
  for (const auto& q : p.qps) w.u32(q.qpn).u32(q.psn).u64(q.addr).u32(q.rkey).u64(q.cap);
}

PeerInfo get_info(Reader& r) {
  PeerInfo p;
  r.raw(p.gid.raw, 16);
  p.active_mtu = r.u32();
  p.path_mtu = r.u32();
  const uint32_t n = r.u32();
  if (n > kMaxQps) fail_run("control protocol: too many QPs in SETUP");
  p.qps.resize(n);
  for (auto& q : p.qps) {
    q.qpn = r.u32();
    q.psn = r.u32();
    q.addr = r.u64();
    q.rkey = r.u32();
    q.cap = r.u64();
  }
  return p;
}

struct Region {
  uint8_t* p = nullptr;
  uint64_t n = 0;
  ibv_mr* mr = nullptr;
};

// Device, context, PD, CQs, QPs and buffers of one side.
class Rdma {
 public:
  Rdma(const std::string& dev, const Config& cfg, bool server) : cfg_(cfg), server_(server) {
    try {
      open(dev);
    } catch (...) {
      close();
      throw;
    }
  }
  ~Rdma() { close(); }
  Rdma(const Rdma&) = delete;
  Rdma& operator=(const Rdma&) = delete;

  PeerInfo local_info() const {
    PeerInfo p;
    p.gid = gid_;
    p.active_mtu = active_mtu_;
    p.qps = local_;
    return p;
  }
  uint32_t active_mtu() const { return active_mtu_; }

  void connect(const PeerInfo& peer, uint32_t path_mtu) {
    if (peer.qps.size() != qp_.size())
      fail_setup(fmt::format("peer has {} QPs, we have {}", peer.qps.size(), qp_.size()));
    remote_ = peer.qps;
    const auto mtu = mtu_enum(path_mtu);
    if (!mtu) fail_setup(fmt::format("bad path MTU {}", path_mtu));
    for (size_t q = 0; q < qp_.size(); ++q) {
      ibv_qp_attr a{};
      mrc_qp_attr m{};
      a.qp_state = IBV_QPS_RTR;
      a.path_mtu = *mtu;
      a.dest_qp_num = remote_[q].qpn;
      a.rq_psn = remote_[q].psn;
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = peer.gid;
      a.ah_attr.grh.sgid_index = uint8_t(cfg_.gid_idx);
      a.ah_attr.grh.hop_limit = 64;
      a.ah_attr.port_num = kPortNum;
      check(mrc_modify_qp(qp_[q], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                          IBV_QP_PATH_MTU,
                          &m, 0),
            "mrc_modify_qp(INIT->RTR)");
      a = ibv_qp_attr{};
      m = mrc_qp_attr{};
      a.qp_state = IBV_QPS_RTS;
      a.sq_psn = local_[q].psn;
      check(mrc_modify_qp(qp_[q], &a, IBV_QP_STATE | IBV_QP_SQ_PSN, &m, 0),
            "mrc_modify_qp(RTR->RTS)");
    }
  }

  // Closes everything; returns how many teardown calls failed.
  int close() {
    int bad = 0;
    auto warn = [&](int rc, const char* what) {
      if (rc == 0) return;
      const int e = errno;
      ++bad;
      fmt::print(stderr, "error: {} failed: {}\n", what, rc_text(rc, e));
    };
    for (auto*& q : qp_) {
      if (q) warn(mrc_destroy_qp(q), "mrc_destroy_qp");
      q = nullptr;
    }
    if (scq_) warn(mrc_destroy_cq(scq_), "mrc_destroy_cq(send)");
    if (rcq_) warn(mrc_destroy_cq(rcq_), "mrc_destroy_cq(recv)");
    scq_ = rcq_ = nullptr;
    if (chan_) warn(mrc_destroy_comp_channel(chan_), "mrc_destroy_comp_channel");
    chan_ = nullptr;
    chan_fd_ = -1;
    for (Region* r : {&master_, &dst_, &latsrc_}) {
      if (r->mr) warn(ibv_dereg_mr(r->mr), "ibv_dereg_mr");
      r->mr = nullptr;
      std::free(r->p);
      r->p = nullptr;
    }
    if (pd_) warn(ibv_dealloc_pd(pd_), "ibv_dealloc_pd");
    pd_ = nullptr;
    if (mctx_) warn(mrc_destroy_context(mctx_), "mrc_destroy_context");
    mctx_ = nullptr;
    if (ctx_) warn(ibv_close_device(ctx_), "ibv_close_device");
    ctx_ = nullptr;
    if (list_) ibv_free_device_list(list_);
    list_ = nullptr;
    return bad;
  }

  // Posts `count` receive WRs without SGEs on QP q (consumed by WRITE_IMM).
  void post_recvs(uint32_t q, uint32_t count) {
    ibv_recv_wr wr[kPostBatch];
    while (count) {
      const uint32_t n = std::min(count, kPostBatch);
      for (uint32_t k = 0; k < n; ++k) {
        wr[k] = ibv_recv_wr{};
        wr[k].wr_id = q;
        wr[k].sg_list = nullptr;
        wr[k].num_sge = 0;
        wr[k].next = k + 1 < n ? &wr[k + 1] : nullptr;
      }
      ibv_recv_wr* bad = nullptr;
      const int rc = mrc_post_recv(qp_[q], wr, &bad);
      if (rc) {
        const int e = errno;
        fail_run(fmt::format("mrc_post_recv(QP {}) failed at WR {}: {}", q,
                             bad ? bad - wr : -1, rc_text(rc, e)));
      }
      count -= n;
      recv_posted_[q] += n;
    }
  }
  // Receive WRs posted on QP q since it was created.
  uint64_t recv_posted(uint32_t q) const { return recv_posted_[q]; }

  uint32_t rq_depth() const { return rq_depth_; }
  uint32_t sq_depth() const { return sq_depth_; }
  mrc_qp* qp(uint32_t q) const { return qp_[q]; }
  mrc_cq* scq() const { return scq_; }
  mrc_cq* rcq() const { return rcq_; }
  const QpInfo& local(uint32_t q) const { return local_[q]; }
  const QpInfo& remote(uint32_t q) const { return remote_[q]; }
  uint32_t nqps() const { return uint32_t(qp_.size()); }
  const Region& master() const { return master_; }
  uint8_t* dst(uint32_t q) const { return dst_.p + uint64_t(q) * dst_cap_; }
  uint64_t dst_cap() const { return dst_cap_; }
  const Region& dst_region() const { return dst_; }
  uint8_t* latsrc(uint32_t slot) const { return latsrc_.p + uint64_t(slot) * latsrc_stride_; }
  uint32_t latsrc_lkey() const { return latsrc_.mr->lkey; }
  const ibv_gid& gid() const { return gid_; }
  bool event() const { return chan_ != nullptr; }
  mrc_comp_channel* channel() const { return chan_; }
  int channel_fd() const { return chan_fd_; }

  // What the completion-channel waits did (event mode).
  struct EventStats {
    uint64_t arms = 0;      // mrc_req_notify_cq calls
    uint64_t sleeps = 0;    // poll() calls on the channel
    uint64_t events = 0;    // CQ events fetched (and acked)
    uint64_t timeouts = 0;  // sleeps that ended without an event or control message
    uint64_t missed = 0;    // timeouts after which a completion was waiting, unsignalled
  };
  EventStats& ev() { return ev_; }
  const EventStats& ev() const { return ev_; }

 private:
  void open(const std::string& dev) {
    int n = 0;
    list_ = ibv_get_device_list(&n);
    if (!list_) fail_setup(fmt::format("ibv_get_device_list failed: {}", errno_text(errno)));
    ibv_device* d = nullptr;
    std::string names;
    for (int i = 0; i < n; ++i) {
      const char* nm = ibv_get_device_name(list_[i]);
      if (!nm) continue;
      names += names.empty() ? nm : fmt::format(", {}", nm);
      if (dev == nm) d = list_[i];
    }
    if (!d)
      fail_setup(fmt::format("device '{}' not found (available: {})", dev,
                             names.empty() ? "none" : names));
    ctx_ = check_ptr(ibv_open_device(d), "ibv_open_device");

    // A port per plane: the QP sprays over whichever are up, so one will do.
    ibv_device_attr dev_attr{};
    check(ibv_query_device(ctx_, &dev_attr), "ibv_query_device");
    ibv_port_attr pa{};
    bool any_active = false;
    for (uint8_t port = 1; port <= dev_attr.phys_port_cnt && !any_active; ++port)
      any_active = ibv_query_port(ctx_, port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE;
    if (!any_active) fail_setup(fmt::format("{}: no port is ACTIVE", dev));
    check(ibv_query_port(ctx_, kPortNum, &pa), "ibv_query_port");
    active_mtu_ = mtu_bytes(pa.active_mtu);
    if (!active_mtu_) fail_setup(fmt::format("{}: unexpected active_mtu {}", dev, int(pa.active_mtu)));
    check(ibv_query_gid(ctx_, kPortNum, int(cfg_.gid_idx), &gid_), "ibv_query_gid");
    static const uint8_t zero[16] = {};
    if (std::memcmp(gid_.raw, zero, 16) == 0)
      fail_setup(fmt::format("{}: GID index {} is empty", dev, cfg_.gid_idx));

    mrc_context_attr ca{};
#ifdef MRC_API_VER_USED
    ca.mrc_api_version_used = MRC_API_VER_USED;
#endif
#ifdef MRC_VENDOR_API_VER_USED
    ca.mrc_vendor_api_version_used = MRC_VENDOR_API_VER_USED;
#endif
    mctx_ = check_ptr(mrc_create_context(ctx_, &ca), "mrc_create_context");

    mrc_device_attr da{};
    int supported = 0;
#if MRCPERF_QUERY_EX
    check(mrc_query_device_ex(ctx_, mctx_, &da, &supported), "mrc_query_device_ex");
#else
    check(mrc_query_device(ctx_, &da, &supported), "mrc_query_device");
#endif
    if (!supported) fail_setup(fmt::format("{}: MRC is not supported on this device", dev));

    pd_ = check_ptr(ibv_alloc_pd(ctx_), "ibv_alloc_pd");

    const uint32_t nq = cfg_.qps;
    const bool bw = !cfg_.lat();
    // Requester of the bandwidth test posts up to tx_depth WRs per QP; the
    // latency test has at most two sends per side outstanding.
    sq_depth_ = bw ? cfg_.tx_depth : 4;
    if (cfg_.imm())
      rq_depth_ = bw ? (server_ ? std::min<uint32_t>(2 * cfg_.tx_depth + 32, 8192) : 1) : 8;
    else
      rq_depth_ = 1;
    if (cfg_.event) {
      // One channel serves both CQs; its fd is non-blocking so that
      // mrc_get_cq_event() only fetches what poll() announced.
      check(mrc_create_comp_channel(mctx_, &chan_), "mrc_create_comp_channel");
      check(mrc_get_comp_channel_fd(chan_, &chan_fd_), "mrc_get_comp_channel_fd");
      const int fl = ::fcntl(chan_fd_, F_GETFL);
      if (fl < 0 || ::fcntl(chan_fd_, F_SETFL, fl | O_NONBLOCK) < 0)
        fail_setup(fmt::format("fcntl(O_NONBLOCK) on the completion channel failed: {}",
                               errno_text(errno)));
    }
    scq_ = check_ptr(mrc_create_cq(mctx_, int(nq * (sq_depth_ + 1) + 16), nullptr, chan_, 0),
                     "mrc_create_cq(send)");
    rcq_ = check_ptr(mrc_create_cq(mctx_, int(nq * (rq_depth_ + 1) + 16), nullptr, chan_, 0),
                     "mrc_create_cq(recv)");

    std::mt19937_64 rng(std::random_device{}());
    for (uint32_t q = 0; q < nq; ++q) {
      mrc_qp_init_attr ia{};
      ia.send_cq = scq_;
      ia.recv_cq = rcq_;
      ia.cap.max_send_wr = sq_depth_;
      ia.cap.max_recv_wr = rq_depth_;
      ia.cap.max_send_sge = 1;
      ia.cap.max_recv_sge = 1;
      ia.sq_sig_all = 0;
      ia.pd = pd_;
      ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
      mrc_qp* qp = mrc_create_qp(mctx_, &ia);
      if (!qp) {
        const int e = errno;
        fail_setup(fmt::format("mrc_create_qp (QP {}, send {} recv {} WRs) failed: {}", q,
                               sq_depth_, rq_depth_, errno_text(e)));
      }
      qp_.push_back(qp);
      recv_posted_.push_back(0);
      if (ia.cap.max_send_wr && ia.cap.max_send_wr < sq_depth_) sq_depth_ = ia.cap.max_send_wr;
      QpInfo info;
      check(mrc_get_qpn(qp, &info.qpn), "mrc_get_qpn");
      info.psn = uint32_t(rng() & 0xffffff);
      local_.push_back(info);

      ibv_qp_attr a{};
      mrc_qp_attr m{};
      a.qp_state = IBV_QPS_INIT;
      a.pkey_index = 0;
      a.port_num = kPortNum;
      a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
      check(mrc_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                          &m, 0),
            "mrc_modify_qp(RESET->INIT)");
    }

    // Buffers. The master is the WR source of the client's bandwidth test
    // and the reference both sides compare against.
    const uint64_t max_size = cfg_.max_size();
    alloc(master_, master_len(max_size));
    fill_master(master_.p, master_.n, cfg_.seed);
    if (!server_ && bw) reg(master_, IBV_ACCESS_LOCAL_WRITE, "ibv_reg_mr(source)");
    const bool receives = server_ || cfg_.lat();
    dst_cap_ = receives ? dst_capacity(cfg_) + kBlock : 0;
    if (receives) {
      alloc(dst_, dst_cap_ * nq);
      reg(dst_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "ibv_reg_mr(destination)");
    }
    if (cfg_.lat()) {
      latsrc_stride_ = round_up(max_size, kBlock);
      alloc(latsrc_, 2 * latsrc_stride_);
      reg(latsrc_, IBV_ACCESS_LOCAL_WRITE, "ibv_reg_mr(latency source)");
    }
    for (uint32_t q = 0; q < nq; ++q) {
      if (!receives) continue;
      local_[q].addr = reinterpret_cast<uintptr_t>(dst(q));
      local_[q].rkey = dst_.mr->rkey;
      local_[q].cap = dst_cap_;
    }
  }

  // Whole pages: the library moves registered pages onto shared memory and
  // refuses a registration that shares a page with another one.
  static void alloc(Region& r, uint64_t n) {
    n = round_up(n, 4096);
    void* p = nullptr;
    const int rc = ::posix_memalign(&p, 4096, n);
    if (rc != 0)
      fail_setup(fmt::format("cannot allocate {} bytes: {}", n, std::strerror(rc)));
    r.p = static_cast<uint8_t*>(p);
    r.n = n;
    std::memset(r.p, 0, n);
  }

  void reg(Region& r, int access, const char* what) {
    r.mr = ibv_reg_mr(pd_, r.p, r.n, access);
    if (!r.mr) {
      const int e = errno;
      fail_setup(fmt::format("{} ({} bytes) failed: {}", what, r.n, errno_text(e)));
    }
  }

  const Config& cfg_;
  bool server_;
  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  mrc_context* mctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  mrc_comp_channel* chan_ = nullptr;
  int chan_fd_ = -1;
  EventStats ev_;
  mrc_cq* scq_ = nullptr;
  mrc_cq* rcq_ = nullptr;
  std::vector<mrc_qp*> qp_;
  std::vector<uint64_t> recv_posted_;
  std::vector<QpInfo> local_, remote_;
  ibv_gid gid_{};
  uint32_t active_mtu_ = 0;
  uint32_t sq_depth_ = 0, rq_depth_ = 0;
  Region master_, dst_, latsrc_;
  uint64_t dst_cap_ = 0;
  uint64_t latsrc_stride_ = 0;
};

// ---------------------------------------------------------------- shared helpers

std::string wc_error(const ibv_wc& wc) {
  return fmt::format("{} (status {}, vendor_err {:#x})", ibv_wc_status_str(wc.status),
                     int(wc.status), wc.vendor_err);
}

// What a side does after polling one CQ: in poll mode, yield the CPU when
// the CQ was empty; in event mode, arm the CQ after an empty poll (the
// caller then polls again, which catches a completion that arrived before
// the arm), and sleep on the completion channel after a second empty poll.
// The sleep also ends when `extra_fd` (the control connection) is readable,
// and after `timeout_ms` at the latest.
//
// A CQ is re-armed before every sleep: the channel is shared by both CQs,
// so another waiter may have fetched the event of an earlier arm.
class CqWaiter {
 public:
  CqWaiter(Rdma& r, mrc_cq* cq, int extra_fd = -1) : r_(r), cq_(cq), extra_fd_(extra_fd) {}

  // `n`: what the poll that just happened returned.
  void after_poll(int n, int timeout_ms = kEventSliceMs) {
    extra_ready_ = false;
    if (n > 0) {
      if (timed_out_) check_missed();
      armed_ = timed_out_ = false;
      return;
    }
    if (!r_.event()) {
      std::this_thread::yield();
      return;
    }
    if (!armed_) {
      const int rc = mrc_req_notify_cq(cq_, 0);
      if (rc) {
        const int e = errno;
        fail_run(fmt::format("mrc_req_notify_cq failed: {}", rc_text(rc, e)));
      }
      ++r_.ev().arms;
      armed_ = true;
      timed_out_ = false;
      return;
    }
    pollfd p[2] = {{r_.channel_fd(), POLLIN, 0}, {extra_fd_, POLLIN, 0}};
    const int k = ::poll(p, extra_fd_ >= 0 ? 2 : 1, std::max(timeout_ms, 0));
    armed_ = false;
    if (k < 0) {
      if (errno == EINTR) return;
      fail_run(fmt::format("poll(completion channel) failed: {}", errno_text(errno)));
    }
    ++r_.ev().sleeps;
    if (k == 0) {
      ++r_.ev().timeouts;
      timed_out_ = true;
      return;
    }
    if (p[0].revents) drain();
    if (extra_fd_ >= 0 && p[1].revents) extra_ready_ = true;
  }

  // The last sleep ended because the control connection has something.
  bool extra_ready() const { return extra_ready_; }

 private:
  // Fetches and acks every pending event of the channel (any CQ).
  void drain() {
    for (;;) {
      mrc_cq* cq = nullptr;
      void* ctx = nullptr;
      if (mrc_get_cq_event(r_.channel(), &cq, &ctx) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        fail_run(fmt::format("mrc_get_cq_event failed: {}", errno_text(errno)));
      }
      mrc_ack_cq_events(cq, 1);
      ++r_.ev().events;
    }
  }

  // The sleep timed out although the CQ was armed, and the next poll found
  // completions. If the device signalled them, the fd is (or very soon will
  // be) readable; if it stays silent, the wakeup was lost.
  void check_missed() {
    pollfd p{r_.channel_fd(), POLLIN, 0};
    int k;
    do k = ::poll(&p, 1, 5);
    while (k < 0 && errno == EINTR);
    if (k == 0) {
      ++r_.ev().missed;
      if (r_.ev().missed == 1)
        fmt::print(stderr,
                   "warning: missed wakeup: a completion was waiting after a {} ms sleep on an "
                   "armed CQ, and the channel was never signalled\n",
                   kEventSliceMs);
    } else if (k > 0) {
      drain();
    }
  }

  Rdma& r_;
  mrc_cq* cq_;
  int extra_fd_;
  bool armed_ = false, timed_out_ = false, extra_ready_ = false;
};

std::string event_summary(const Rdma::EventStats& e) {
  return fmt::format("event waits: {} arms, {} sleeps, {} events, {} timeouts, {} missed wakeups",
                     e.arms, e.sleeps, e.events, e.timeouts, e.missed);
}

std::string event_json(bool event, const Rdma::EventStats& e) {
  if (!event) return "\"wait\": \"poll\"";
  return fmt::format("\"wait\": \"event\", \"event_stats\": {{\"arms\": {}, \"sleeps\": {}, "
                     "\"events\": {}, \"timeouts\": {}, \"missed_wakeups\": {}}}",
                     e.arms, e.sleeps, e.events, e.timeouts, e.missed);
}

// Checks the WRITE_IMM receive completions of each QP.
class ImmTracker {
 public:
  ImmTracker(Rdma& r, uint64_t size) : r_(r), size_(size), next_(r.nqps(), 0), got_(r.nqps(), 0),
                                       repost_(r.nqps(), 0) {}

  // Polls the receive CQ once; returns the number of completions handled.
  int poll() {
    ibv_wc wc[kPollBatch];
    const int n = mrc_poll_cq(r_.rcq(), int(kPollBatch), wc);
    if (n < 0) {
      const int e = errno;
      fail_run(fmt::format("mrc_poll_cq(recv) failed: {}", rc_text(n, e)));
    }
    for (int k = 0; k < n; ++k) handle(wc[k]);
    for (uint32_t q = 0; q < repost_.size(); ++q) {
      if (repost_[q]) r_.post_recvs(q, repost_[q]);
      repost_[q] = 0;
    }
    return n;
  }

  uint64_t received(uint32_t q) const { return got_[q]; }
  Verdict& verdict() { return v_; }

 private:
  void handle(const ibv_wc& wc) {
    if (wc.status != IBV_WC_SUCCESS)
      fail_run(fmt::format("receive completion error (wr_id {}, qp_num {:#x}) after {} receive "
                           "completion(s) in this phase, {} receive WRs posted since the start: {}",
                           wc.wr_id, wc.qp_num, wc.wr_id < got_.size() ? got_[wc.wr_id] : 0,
                           wc.wr_id < got_.size() ? r_.recv_posted(uint32_t(wc.wr_id)) : 0,
                           wc_error(wc)));
    const uint64_t q = wc.wr_id;
    if (q >= got_.size()) fail_run(fmt::format("receive completion with unknown wr_id {}", wc.wr_id));
    ++repost_[q];
    ++got_[q];
    ++v_.imm_received;
    if (wc.qp_num != r_.local(uint32_t(q)).qpn)
      bad(fmt::format("QP {}: receive completion reports qp_num {:#x}, expected {:#x}", q,
                      wc.qp_num, r_.local(uint32_t(q)).qpn));
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM))
      bad(fmt::format("QP {}: receive completion opcode {} flags {:#x}, expected "
                      "RECV_RDMA_WITH_IMM with IBV_WC_WITH_IMM",
                      q, int(wc.opcode), unsigned(wc.wc_flags)));
    if (wc.byte_len != size_)
      bad(fmt::format("QP {}: receive completion byte_len {}, expected {}", q, wc.byte_len, size_));
    const uint32_t imm = ntohl(wc.imm_data);
    const uint32_t want = make_imm(uint32_t(q), next_[q]);
    if (imm != want) {
      bad(fmt::format("QP {}: immediate {:#010x}, expected {:#010x} (message {} of the phase)", q,
                      imm, want, next_[q]));
      if ((imm >> 24) == q) {  // resynchronise on the sequence the peer is at
        const uint64_t base = next_[q] & ~uint64_t(0xffffff);
        next_[q] = base + (imm & 0xffffff);
      }
    }
    ++next_[q];
  }
  void bad(std::string m) {
    ++v_.imm_bad;
    v_.note(std::move(m));
  }

  Rdma& r_;
  uint64_t size_;
  std::vector<uint64_t> next_, got_;
  std::vector<uint32_t> repost_;
  Verdict v_;
};

struct LatStats {
  double min = 0, avg = 0, p50 = 0, p99 = 0, max = 0;
};

// Latency samples: min, max and mean over all of them; percentiles over
// all up to kMaxLatIters, then over a uniform sample of that many
// (reservoir sampling), so a long --seconds run keeps bounded memory.
class LatSamples {
 public:
  explicit LatSamples(uint64_t seed, size_t expect) : rng_(seed) {
    kept_.reserve(std::min<size_t>(expect, kMaxLatIters));
  }
  void add(double us) {
    ++seen_;
    sum_ += us;
    min_ = std::min(min_, us);
    max_ = std::max(max_, us);
    if (kept_.size() < kMaxLatIters) {
      kept_.push_back(us);
    } else if (const uint64_t j = std::uniform_int_distribution<uint64_t>(0, seen_ - 1)(rng_); j < kMaxLatIters) {
      kept_[j] = us;
    }
  }
  uint64_t count() const { return seen_; }
  LatStats stats() {
    LatStats s;
    if (kept_.empty()) return s;
    std::sort(kept_.begin(), kept_.end());
    const size_t n = kept_.size();
    s.min = min_;
    s.max = max_;
    s.avg = sum_ / double(seen_);
    s.p50 = kept_[(n - 1) / 2];
    s.p99 = kept_[std::min(n - 1, size_t(std::ceil(0.99 * double(n))) - 1)];
    return s;
  }

 private:
  std::vector<double> kept_;
  std::mt19937_64 rng_;
  uint64_t seen_ = 0;
  double sum_ = 0, min_ = std::numeric_limits<double>::infinity(), max_ = 0;
};

std::string json_str(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (uint8_t(c) < 0x20)
          o += fmt::format("\\u{:04x}", unsigned(uint8_t(c)));
        else
          o += c;
    }
  }
  return o + "\"";
}

std::string json_num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "null"; }

void write_json(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  if (path == "-") {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    return;
  }
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    fmt::print(stderr, "error: cannot write {}: {}\n", path, errno_text(errno));
    return;
  }
  std::fputs(text.c_str(), f);
  if (std::fclose(f) != 0) fmt::print(stderr, "error: writing {}: {}\n", path, errno_text(errno));
}

struct PhaseBegin {
  uint32_t index = 0;
  uint64_t size = 0;
  uint64_t warmup = 0;
  uint64_t iters = 0;       // 0 with seconds_ms
  uint64_t seconds_ms = 0;
};

// READY and CREDIT: receive WRs posted so far on each QP of the server.
void put_credits(Writer& w, const Rdma& r) {
  w.u32(r.nqps());
  for (uint32_t q = 0; q < r.nqps(); ++q) w.u64(r.recv_posted(q));
}

std::vector<uint64_t> get_credits(Reader& m, uint32_t nq) {
  const uint32_t n = m.u32();
  if (n != nq) fail_run(fmt::format("control protocol: receive credits for {} QPs, expected {}", n, nq));
  std::vector<uint64_t> c(n);
  for (auto& v : c) v = m.u64();
  return c;
}

void put_verdict(Writer& w, bool verified, const Verdict& v) {
  w.u8(verified).u8(v.ok()).u64(v.slots_checked).u64(v.bytes_checked).u64(v.bad_slots)
      .u64(v.imm_received).u64(v.imm_bad).str(v.first);
}

Verdict get_verdict(Reader& r, bool& verified) {
  Verdict v;
  verified = r.u8() != 0;
  r.u8();
  v.slots_checked = r.u64();
  v.bytes_checked = r.u64();
  v.bad_slots = r.u64();
  v.imm_received = r.u64();
  v.imm_bad = r.u64();
  v.first = r.str();
  return v;
}

// ---------------------------------------------------------------- latency engine

// One side of the ping-pong on QP 0. The client pings (direction 0), the
// server pongs (direction 1).
class LatSide {
 public:
  LatSide(Rdma& r, const Config& c, const Layout& l, Ctl& ctl, bool client)
      : r_(r), c_(c), l_(l), ctl_(ctl), client_(client), imm_(r, l.size),
        recv_wait_(r, r.rcq(), ctl.fd()), send_wait_(r, r.scq()) {}

  // Fills source buffer (i % 2) with message i, once the send that used it
  // before (i - 2) has completed.
  void prepare(uint64_t i) {
    if (i >= 2) wait_send(i - 2);
    const uint32_t dir = client_ ? 0 : 1;
    uint8_t* s = r_.latsrc(uint32_t(i % 2));
    std::memcpy(s, r_.master().p + msg_offset(c_.seed, l_.size, 0, dir, i, 2), l_.size);
    s[l_.size - 1] = lat_marker(i);
  }

  void post(uint64_t i) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(r_.latsrc(uint32_t(i % 2)));
    sge.length = uint32_t(l_.size);
    sge.lkey = r_.latsrc_lkey();
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = c_.imm() ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (c_.imm()) wr.imm_data = htonl(make_imm(0, i));
    wr.wr.rdma.remote_addr = r_.remote(0).addr + (i % 2) * l_.stride;
    wr.wr.rdma.rkey = r_.remote(0).rkey;
    ibv_send_wr* bad = nullptr;
    const int rc = mrc_post_send(r_.qp(0), &wr, &bad);
    if (rc) {
      const int e = errno;
      fail_run(fmt::format("mrc_post_send (latency message {}) failed: {}", i, rc_text(rc, e)));
    }
    ++posted_;
  }

  // Waits for the peer's message i. Returns false if, instead, the client
  // ended the phase (server side only; `end_n` then holds its count).
  bool wait_peer(uint64_t i, uint64_t* end_n = nullptr) {
    const auto start = Clock::now();
    auto last_check = start;
    uint32_t spin = 0;
    if (c_.imm()) {
      while (imm_.received(0) <= i) {
        reap_sends();
        const int n = imm_.poll();
        recv_wait_.after_poll(n);
        if (n == 0 && (recv_wait_.extra_ready() || r_.event() || (++spin & 1023) == 0) &&
            !housekeeping(start, last_check, i, end_n, recv_wait_.extra_ready()))
          return false;
      }
    } else {
      const volatile uint8_t* p = r_.dst(0) + (i % 2) * l_.stride + l_.size - 1;
      const uint8_t m = lat_marker(i);
      while (*p != m) {
        if ((++spin & 63) == 0) std::this_thread::yield();
        if ((spin & 4095) == 0) {
          reap_sends();
          if (!housekeeping(start, last_check, i, end_n)) return false;
        }
      }
      std::atomic_thread_fence(std::memory_order_acquire);
    }
    return true;
  }

  int reap_sends() {
    ibv_wc wc[4];
    const int n = mrc_poll_cq(r_.scq(), 4, wc);
    if (n < 0) {
      const int e = errno;
      fail_run(fmt::format("mrc_poll_cq(send) failed: {}", rc_text(n, e)));
    }
    for (int k = 0; k < n; ++k) {
      if (wc[k].status != IBV_WC_SUCCESS)
        fail_run(fmt::format("latency message {}: completion error {}", wc[k].wr_id, wc_error(wc[k])));
      if (wc[k].opcode != IBV_WC_RDMA_WRITE)
        fail_run(fmt::format("latency message {}: completion opcode {}, expected RDMA_WRITE",
                             wc[k].wr_id, int(wc[k].opcode)));
      if (wc[k].wr_id != done_)
        fail_run(fmt::format("send completion for message {} while {} was expected", wc[k].wr_id, done_));
      ++done_;
    }
    return n;
  }

  void wait_send(uint64_t i) {
    const auto start = Clock::now();
    uint32_t spin = 0;
    while (done_ <= i) {
      const int n = reap_sends();
      if (done_ > i) break;
      send_wait_.after_poll(n);
      if (((++spin & 1023) == 0 || r_.event()) && Clock::now() - start > kStall)
        fail_run(fmt::format("no send completion for latency message {} within {} s", i,
                             std::chrono::duration_cast<std::chrono::seconds>(kStall).count()));
    }
  }

  void drain() {
    if (posted_) wait_send(posted_ - 1);
  }
  ImmTracker& imm() { return imm_; }

 private:
  bool housekeeping(Clock::time_point start, Clock::time_point& last_check, uint64_t i,
                    uint64_t* end_n, bool ctl_ready = false) {
    const auto now = Clock::now();
    if (!ctl_ready && now - last_check < kPeerCheck) return true;
    last_check = now;
    if (auto m = ctl_.poll_msg()) {
      if (!client_ && m->first == Msg::PhaseEnd && end_n) {
        const uint32_t nq = m->second.u32();
        *end_n = nq ? m->second.u64() : 0;
        return false;
      }
      fail_run(fmt::format("control protocol: unexpected {} during the latency test",
                           msg_name(m->first)));
    }
    // The server waits for the client as long as the client lives; the
    // client gives up when its peer's reply does not come.
    if (client_ && now - start > kStall)
      fail_run(fmt::format("no reply to latency message {} within {} s", i,
                           std::chrono::duration_cast<std::chrono::seconds>(kStall).count()));
    return true;
  }

  Rdma& r_;
  const Config& c_;
  const Layout& l_;
  Ctl& ctl_;
  bool client_;
  ImmTracker imm_;
  CqWaiter recv_wait_, send_wait_;
  uint64_t posted_ = 0, done_ = 0;
};

// ---------------------------------------------------------------- client

struct Options {
  std::string dev;
  uint16_t port = 18515;
  std::string connect;
  uint32_t gid_idx = 3;
  uint32_t mtu = 4096;
  std::string op = "write";
  std::string test = "bw";
  std::string size;
  std::string sweep;
  uint32_t qps = 1;
  uint64_t iters = 1000;
  int64_t warmup = -1;
  uint32_t tx_depth = 128;
  uint32_t cq_mod = 64;
  double seconds = 0;
  double stats_interval = 0;
  std::string json;
  bool no_verify = false;
  bool event = false;
};

struct PhaseOut {
  uint64_t size = 0;
  uint64_t iters = 0;  // measured per QP
  double secs = 0;
  double gbps = 0;
  double mmsgps = 0;
  std::optional<LatStats> lat;
  bool verified = false;
  Verdict verdict;
};

// Prints a table row every `interval` seconds during a phase.
class Live {
 public:
  Live(double interval, uint64_t size) : interval_(interval), size_(size) {}
  bool on() const { return interval_ > 0; }
  void start(Clock::time_point t) {
    t0_ = last_t_ = t;
    next_ = t + to_dur(interval_);
    last_msgs_ = 0;
    if (on())
      fmt::print(g_out, "  {:>8} {:>10} {:>10} {:>12} {:>7}\n", "time[s]", "Gbit/s", "Mmsg/s",
                 "completions", "errors");
  }
  void tick(Clock::time_point now, uint64_t msgs, uint64_t errors) {
    if (!on() || now < next_) return;
    const double dt = std::chrono::duration<double>(now - last_t_).count();
    const double dm = double(msgs - last_msgs_);
    fmt::print(g_out, "  {:>8.1f} {:>10.3f} {:>10.4f} {:>12} {:>7}\n",
               std::chrono::duration<double>(now - t0_).count(), dm * double(size_) * 8 / dt / 1e9,
               dm / dt / 1e6, msgs, errors);
    std::fflush(g_out);
    last_t_ = now;
    last_msgs_ = msgs;
    while (next_ <= now) next_ += to_dur(interval_);
  }

 private:
  static Clock::duration to_dur(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  double interval_;
  uint64_t size_;
  Clock::time_point t0_, last_t_, next_;
  uint64_t last_msgs_ = 0;
};

class Client {
 public:
  Client(const Options& o, Config cfg) : o_(o), cfg_(std::move(cfg)) {}

  int run() {
    auto [host, port] = split_host();
    ctl_.emplace(tcp_connect(host, port));
    try {
      rdma_.emplace(o_.dev, cfg_, false);
      return session(host, port);
    } catch (const Failure& f) {
      ctl_->abort(f.code, f.what());
      error_ = f.what();
      emit_json();
      throw;
    }
  }

  int close_rdma() { return rdma_ ? rdma_->close() : 0; }

 private:
  std::pair<std::string, uint16_t> split_host() const {
    std::string h = o_.connect;
    uint16_t port = o_.port;
    std::string ps;
    if (!h.empty() && h.front() == '[') {  // [v6]:port
      const auto e = h.find(']');
      if (e == std::string::npos) fail_setup(fmt::format("bad --connect '{}'", o_.connect));
      if (e + 1 < h.size() && h[e + 1] == ':') ps = h.substr(e + 2);
      h = h.substr(1, e - 1);
    } else if (std::count(h.begin(), h.end(), ':') == 1) {
      const auto c = h.find(':');
      ps = h.substr(c + 1);
      h = h.substr(0, c);
    }
    if (!ps.empty()) {
      const auto v = parse_size(ps);
      if (!v || *v == 0 || *v > 65535 || ps.find_first_not_of("0123456789") != std::string::npos)
        fail_setup(fmt::format("bad port in --connect '{}'", o_.connect));
      port = uint16_t(*v);
    }
    if (h.empty()) fail_setup(fmt::format("bad --connect '{}'", o_.connect));
    return {h, port};
  }

  int session(const std::string& host, uint16_t port) {
    Rdma& r = *rdma_;
    Ctl& ctl = *ctl_;
    Writer hello;
    hello.u16(kProtoVersion).u8(uint8_t(cfg_.op)).u8(uint8_t(cfg_.test)).u8(cfg_.verify)
        .u8(cfg_.event).u32(cfg_.mtu).u32(cfg_.gid_idx).u32(cfg_.qps).u64(cfg_.iters).u64(cfg_.warmup)
        .u32(cfg_.tx_depth).u32(cfg_.cq_mod).u64(cfg_.seconds_ms).u64(cfg_.seed)
        .u32(uint32_t(cfg_.sizes.size()));
    for (uint64_t s : cfg_.sizes) hello.u64(s);
    ctl.send(Msg::Hello, hello);

    Reader sr = ctl.recv(Msg::Setup, 60000);
    const PeerInfo srv = get_info(sr);
    path_mtu_ = std::min({cfg_.mtu, r.active_mtu(), srv.active_mtu});
    if (path_mtu_ != cfg_.mtu)
      fmt::print(g_out, "note: path MTU {} (requested {}, local active {}, server active {})\n",
                 path_mtu_, cfg_.mtu, r.active_mtu(), srv.active_mtu);
    PeerInfo me = r.local_info();
    me.path_mtu = path_mtu_;
    Writer w;
    put_info(w, me);
    ctl.send(Msg::Setup, w);
    r.connect(srv, path_mtu_);
    if (cfg_.imm() && cfg_.lat()) r.post_recvs(0, r.rq_depth());
    Reader ready = ctl.recv(Msg::Ready, 60000);
    credit_ = get_credits(ready, cfg_.qps);
    sent_base_.assign(cfg_.qps, 0);

    fmt::print(g_out,
               "mrc-perf client: {} -> {}:{}  test={} op={} qps={} mtu={} tx-depth={} cq-mod={} "
               "{} warmup={} verify={} wait={} seed={:#x}\n",
               o_.dev, host, port, test_name(cfg_.test), op_name(cfg_.op), cfg_.qps, path_mtu_,
               cfg_.tx_depth, cfg_.cq_mod,
               cfg_.seconds_ms ? fmt::format("seconds={}", double(cfg_.seconds_ms) / 1000)
                               : fmt::format("iters={}", cfg_.iters),
               cfg_.warmup, cfg_.verify ? "on" : "off", wait_name(cfg_.event), cfg_.seed);
    for (uint32_t q = 0; q < cfg_.qps; ++q)
      fmt::print(g_out, "  QP {}: local qpn {:#08x} psn {:#08x} gid {}  remote qpn {:#08x} psn {:#08x} "
                 "gid {} addr {:#x} rkey {:#x}\n",
                 q, r.local(q).qpn, r.local(q).psn, gid_text(r.gid()), srv.qps[q].qpn,
                 srv.qps[q].psn, gid_text(srv.gid), srv.qps[q].addr, srv.qps[q].rkey);
    print_header();

    for (uint32_t k = 0; k < cfg_.sizes.size(); ++k) {
      PhaseOut out = cfg_.lat() ? lat_phase(k) : bw_phase(k);
      print_row(out);
      phases_.push_back(std::move(out));
    }
    bool all_ok = true, any_verified = false;
    for (const auto& p : phases_) {
      any_verified |= p.verified;
      if (p.verified && !p.verdict.ok()) all_ok = false;
    }
    Writer bye;
    bye.u8(all_ok);
    ctl.send(Msg::Bye, bye);
    if (any_verified)
      fmt::print(g_out, "integrity: {}\n", all_ok ? "ok (every size verified)" : "FAILED");
    if (cfg_.event) fmt::print(g_out, "{}\n", event_summary(r.ev()));
    if (credit_waits_)
      fmt::print(g_out, "receive credits: the client waited {} time(s) for the server to re-post "
                 "receives\n", credit_waits_);
    emit_json();
    return all_ok ? kExitOk : kExitIntegrity;
  }

  void print_header() {
    if (cfg_.lat())
      fmt::print(g_out, "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  {}\n", "#bytes", "#iters",
                 "t_min[us]", "t_avg[us]", "t_p50[us]", "t_p99[us]", "t_max[us]", "integrity");
    else
      fmt::print(g_out, "{:>10} {:>10} {:>4} {:>10} {:>10}  {}\n", "#bytes", "#iters", "qps",
                 "Gbit/s", "Mmsg/s", "integrity");
    std::fflush(g_out);
  }

  void print_row(const PhaseOut& p) {
    const std::string integ = !p.verified ? "-" : p.verdict.ok() ? "ok" : "FAIL";
    if (p.lat)
      fmt::print(g_out, "{:>10} {:>10} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}  {}\n", p.size,
                 p.iters, p.lat->min, p.lat->avg, p.lat->p50, p.lat->p99, p.lat->max, integ);
    else
      fmt::print(g_out, "{:>10} {:>10} {:>4} {:>10.3f} {:>10.4f}  {}\n", p.size, p.iters, cfg_.qps,
                 p.gbps, p.mmsgps, integ);
    if (p.verified && !p.verdict.ok())
      fmt::print(g_out, "  integrity failure: {} bad slot(s), {} bad immediate(s); first: {}\n",
                 p.verdict.bad_slots, p.verdict.imm_bad, p.verdict.first);
    std::fflush(g_out);
  }

  void apply_credits(Reader& m) {
    const auto c = get_credits(m, cfg_.qps);
    for (uint32_t q = 0; q < cfg_.qps; ++q) credit_[q] = std::max(credit_[q], c[q]);
  }

  // The next control message, which must be `expect`; receive credits that
  // come first are taken.
  Reader recv_ctl(Msg expect, int timeout_ms) {
    for (;;) {
      auto [t, r] = ctl_->next(timeout_ms);
      if (t == Msg::Credit) {
        apply_credits(r);
        continue;
      }
      if (t != expect)
        fail_run(fmt::format("control protocol: expected {}, got {}", msg_name(expect), msg_name(t)));
      return std::move(r);
    }
  }

  // Takes whatever the server sent during a phase: receive credits only.
  // Returns whether there were any.
  bool take_ctl() {
    bool got = false;
    while (auto m = ctl_->poll_msg()) {
      if (m->first != Msg::Credit)
        fail_run(fmt::format("control protocol: unexpected {} during the test", msg_name(m->first)));
      apply_credits(m->second);
      got = true;
    }
    return got;
  }

  void begin_phase(uint32_t k, uint64_t size) {
    Writer w;
    w.u32(k).u64(size).u64(cfg_.warmup).u64(cfg_.seconds_ms ? 0 : cfg_.iters).u64(cfg_.seconds_ms);
    ctl_->send(Msg::PhaseBegin, w);
    recv_ctl(Msg::PhaseReady, 120000);
  }

  Verdict end_phase(const std::vector<uint64_t>& totals, bool& verified) {
    Writer w;
    w.u32(uint32_t(totals.size()));
    for (uint64_t t : totals) w.u64(t);
    ctl_->send(Msg::PhaseEnd, w);
    Reader rr = recv_ctl(Msg::PhaseResult, 120000);
    return get_verdict(rr, verified);
  }

  // ---- bandwidth

  struct QpRun {
    uint64_t posted = 0, completed = 0, target = 0;
  };

  PhaseOut bw_phase(uint32_t k) {
    Rdma& r = *rdma_;
    const uint64_t size = cfg_.sizes[k];
    const Layout l = layout_for(cfg_, size);
    const uint32_t window = std::max<uint32_t>(1, std::min(l.slots, r.sq_depth()));
    const uint32_t cq_mod = std::clamp<uint32_t>(cfg_.cq_mod, 1, std::max<uint32_t>(1, window / 2));
    begin_phase(k, size);

    std::vector<QpRun> st(cfg_.qps);
    Live live(o_.stats_interval, size);
    if (cfg_.warmup) bw_segment(l, window, cq_mod, st, cfg_.warmup, std::nullopt, nullptr);
    const auto t0 = Clock::now();
    std::optional<Clock::time_point> deadline;
    if (cfg_.seconds_ms) deadline = t0 + std::chrono::milliseconds(cfg_.seconds_ms);
    live.start(t0);
    bw_segment(l, window, cq_mod, st, cfg_.warmup + (cfg_.seconds_ms ? 0 : cfg_.iters), deadline,
               &live);
    const double secs = std::chrono::duration<double>(last_completion_ - t0).count();

    PhaseOut out;
    out.size = size;
    uint64_t msgs = 0;
    std::vector<uint64_t> totals;
    for (const auto& s : st) {
      msgs += s.completed - cfg_.warmup;
      totals.push_back(s.completed);
    }
    out.iters = msgs / cfg_.qps;
    out.secs = secs;
    out.gbps = secs > 0 ? double(msgs) * double(size) * 8 / secs / 1e9 : 0;
    out.mmsgps = secs > 0 ? double(msgs) / secs / 1e6 : 0;
    for (uint32_t q = 0; q < cfg_.qps; ++q) sent_base_[q] += st[q].posted;
    out.verdict = end_phase(totals, out.verified);
    return out;
  }

  // Posts and completes messages [posted, target) on every QP. With a
  // deadline, runs until then and stops at the next signaled message.
  void bw_segment(const Layout& l, uint32_t window, uint32_t cq_mod, std::vector<QpRun>& st,
                  uint64_t target, std::optional<Clock::time_point> deadline, Live* live) {
    Rdma& r = *rdma_;
    const uint32_t nq = cfg_.qps;
    const bool timed = deadline.has_value();
    for (auto& s : st) s.target = timed ? std::numeric_limits<uint64_t>::max() : target;
    const uint64_t base_msgs = [&] {
      uint64_t m = 0;
      for (const auto& s : st) m += s.completed;
      return m;
    }();
    uint64_t done_msgs = base_msgs;
    const auto start = Clock::now();
    auto last_progress = start, last_peer = start;
    bool progressed = false, stopped = false;
    uint32_t spin = 0;

    ibv_send_wr wr[kPostBatch];
    ibv_sge sge[kPostBatch];
    ibv_wc wc[kPollBatch];
    const uint8_t* master = r.master().p;
    const uint32_t lkey = r.master().mr->lkey;
    const auto opcode = cfg_.imm() ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    CqWaiter waiter(r, r.scq(), ctl_->fd());
    const bool event = r.event();
    const bool credits = cfg_.imm();  // see "Receive credits" at the top
    bool was_starved = false;

    for (;;) {
      bool busy = false, starved = false;
      for (uint32_t q = 0; q < nq; ++q) {
        QpRun& s = st[q];
        // WRITE_IMMs QP q may still issue before the server re-posts.
        const uint64_t allowed =
            !credits ? std::numeric_limits<uint64_t>::max()
            : credit_[q] > sent_base_[q] + s.posted ? credit_[q] - sent_base_[q] - s.posted
                                                    : 0;
        uint32_t n = 0;
        while (n < kPostBatch && n < allowed && s.posted < s.target &&
               s.posted - s.completed < window) {
          const uint64_t i = s.posted;
          sge[n].addr = reinterpret_cast<uintptr_t>(master) +
                        msg_offset(cfg_.seed, l.size, q, 0, i, l.slots);
          sge[n].length = uint32_t(l.size);
          sge[n].lkey = lkey;
          wr[n] = ibv_send_wr{};
          wr[n].wr_id = (uint64_t(q) << 48) | i;
          wr[n].sg_list = &sge[n];
          wr[n].num_sge = 1;
          wr[n].opcode = opcode;
          wr[n].send_flags = ((i + 1) % cq_mod == 0 || i + 1 == s.target) ? IBV_SEND_SIGNALED : 0;
          if (cfg_.imm()) wr[n].imm_data = htonl(make_imm(q, i));
          wr[n].wr.rdma.remote_addr = r.remote(q).addr + (i % l.slots) * l.stride;
          wr[n].wr.rdma.rkey = r.remote(q).rkey;
          if (n) wr[n - 1].next = &wr[n];
          ++s.posted;
          ++n;
        }
        if (n) {
          ibv_send_wr* bad = nullptr;
          const int rc = mrc_post_send(r.qp(q), wr, &bad);
          if (rc) {
            const int e = errno;
            fail_run(fmt::format("mrc_post_send (QP {}, {} WRs from message {}) failed at WR {}: {}",
                                 q, n, s.posted - n, bad ? bad - wr : -1, rc_text(rc, e)));
          }
        }
        if (s.posted < s.target || s.completed < s.posted) busy = true;
        if (n == allowed && s.posted < s.target && s.posted - s.completed < window) starved = true;
      }
      if (!busy) break;
      if (starved && !was_starved) ++credit_waits_;
      was_starved = starved;

      const int n = mrc_poll_cq(r.scq(), int(kPollBatch), wc);
      if (n < 0) {
        const int e = errno;
        fail_run(fmt::format("mrc_poll_cq(send) failed: {}", rc_text(n, e)));
      }
      for (int j = 0; j < n; ++j) {
        const uint64_t q = wc[j].wr_id >> 48;
        const uint64_t i = wc[j].wr_id & ((uint64_t(1) << 48) - 1);
        if (wc[j].status != IBV_WC_SUCCESS) {
          ++errors_;
          fail_run(fmt::format("QP {} message {} (size {}): completion error {}", q, i, l.size,
                               wc_error(wc[j])));
        }
        if (q >= nq) fail_run(fmt::format("send completion with unknown wr_id {:#x}", wc[j].wr_id));
        if (wc[j].opcode != IBV_WC_RDMA_WRITE)
          fail_run(fmt::format("QP {} message {}: completion opcode {}, expected RDMA_WRITE", q, i,
                               int(wc[j].opcode)));
        QpRun& s = st[q];
        if (i < s.completed || i >= s.posted)
          fail_run(fmt::format("QP {}: completion for message {} out of order (completed {}, posted {})",
                               q, i, s.completed, s.posted));
        done_msgs += i + 1 - s.completed;
        s.completed = i + 1;
        progressed = true;
      }

      // Out of receive credits: look for the server's CREDIT at once.
      if (starved && n == 0 && take_ctl()) continue;
      // Empty CQ: let the NIC's workers run if they share our CPU (poll
      // mode), or sleep until the next completion (event mode). Each QP
      // here either has its window in flight (a signaled WR among it) or
      // waits for receive credits, which wake the sleep as control
      // messages, so the wait cannot deadlock.
      waiter.after_poll(n);
      if (n > 0 || event || (++spin & 255) == 0) {
        const auto now = Clock::now();
        if (n > 0) last_completion_ = now;
        if (progressed) {
          last_progress = now;
          progressed = false;
        }
        if (timed && !stopped && now >= *deadline) {
          stopped = true;
          for (auto& s : st)  // the last message must be signaled
            s.target = (s.posted == 0 || s.posted % cq_mod == 0) ? s.posted : s.posted + 1;
        }
        if (live) live->tick(now, done_msgs - base_msgs, errors_);
        if (now - last_progress > kStall) {
          std::string where;
          for (uint32_t q = 0; q < nq; ++q) {
            where += fmt::format(" QP{}: posted {} completed {}", q, st[q].posted, st[q].completed);
            if (credits)
              where += fmt::format(" receive credit {}", credit_[q] - sent_base_[q]);
            where += ";";
          }
          fail_run(fmt::format("no completion for {} s (size {}):{}",
                               std::chrono::duration_cast<std::chrono::seconds>(kStall).count(),
                               l.size, where));
        }
        if (now - last_peer > kPeerCheck || waiter.extra_ready()) {
          last_peer = now;
          take_ctl();
        }
      }
    }
    last_completion_ = std::max(last_completion_, start);
  }

  // ---- latency

  PhaseOut lat_phase(uint32_t k) {
    Rdma& r = *rdma_;
    const uint64_t size = cfg_.sizes[k];
    const Layout l = layout_for(cfg_, size);
    std::memset(r.dst(0), 0, r.dst_cap());
    LatSide side(r, cfg_, l, *ctl_, true);
    begin_phase(k, size);

    const uint64_t total = cfg_.seconds_ms ? std::numeric_limits<uint64_t>::max()
                                           : cfg_.warmup + cfg_.iters;
    LatSamples us(cfg_.seed, cfg_.seconds_ms ? 1u << 16 : size_t(cfg_.iters));
    Live live(o_.stats_interval, size);
    Clock::time_point t_start{}, deadline{};
    uint64_t i = 0;
    side.prepare(0);
    for (; i < total; ++i) {
      if (i == cfg_.warmup) {
        t_start = Clock::now();
        deadline = t_start + std::chrono::milliseconds(cfg_.seconds_ms);
        live.start(t_start);
      }
      if (cfg_.seconds_ms && i > cfg_.warmup && Clock::now() >= deadline) break;
      const auto t0 = Clock::now();
      side.post(i);
      side.wait_peer(i);
      const auto t1 = Clock::now();
      if (i >= cfg_.warmup) {
        us.add(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
        live.tick(t1, i + 1 - cfg_.warmup, 0);
      }
      if (i + 1 < total) side.prepare(i + 1);
    }
    side.drain();
    const auto t_end = Clock::now();
    const uint64_t n = i;

    PhaseOut out;
    out.size = size;
    out.iters = us.count();
    out.secs = n > cfg_.warmup ? std::chrono::duration<double>(t_end - t_start).count() : 0;
    out.gbps = out.secs > 0 ? double(out.iters) * double(size) * 8 / out.secs / 1e9 : 0;
    out.mmsgps = out.secs > 0 ? double(out.iters) / out.secs / 1e6 : 0;
    out.lat = us.stats();

    // Our side: the server's replies; its side comes back in PHASE_RESULT.
    Verdict mine;
    if (cfg_.verify) {
      const Expect e{r.master().p, cfg_.seed, 0, 1, true, l};
      verify_area(r.dst(0), r.dst_cap(), e, n, mine);
      if (cfg_.imm()) mine.merge(side.imm().verdict());
    }
    out.verdict = end_phase({n}, out.verified);
    out.verdict.merge(mine);
    return out;
  }

  void emit_json() {
    if (o_.json.empty()) return;
    std::string s = "{\n";
    s += fmt::format("  \"tool\": \"mrc-perf\", \"role\": \"client\", \"dev\": {}, \"server\": {},\n",
                     json_str(o_.dev), json_str(o_.connect));
    s += fmt::format("  \"test\": \"{}\", \"op\": \"{}\", \"qps\": {}, \"mtu\": {}, \"tx_depth\": {}, "
                     "\"cq_mod\": {}, \"warmup\": {}, \"seconds\": {}, \"verify\": {}, \"seed\": \"{:#x}\",\n",
                     test_name(cfg_.test), op_name(cfg_.op), cfg_.qps, path_mtu_, cfg_.tx_depth,
                     cfg_.cq_mod, cfg_.warmup, json_num(double(cfg_.seconds_ms) / 1000),
                     cfg_.verify, cfg_.seed);
    s += fmt::format("  {}, \"credit_waits\": {},\n",
                     event_json(cfg_.event, rdma_ ? rdma_->ev() : Rdma::EventStats{}), credit_waits_);
    s += "  \"results\": [";
    bool all_ok = true, any = false;
    for (size_t k = 0; k < phases_.size(); ++k) {
      const PhaseOut& p = phases_[k];
      s += k ? ",\n    {" : "\n    {";
      s += fmt::format("\"bytes\": {}, \"iters\": {}, \"qps\": {}, \"seconds\": {}, \"gbps\": {}, "
                       "\"mmsgps\": {}",
                       p.size, p.iters, cfg_.qps, json_num(p.secs), json_num(p.gbps),
                       json_num(p.mmsgps));
      if (p.lat)
        s += fmt::format(", \"lat_us\": {{\"min\": {}, \"avg\": {}, \"p50\": {}, \"p99\": {}, \"max\": {}}}",
                         json_num(p.lat->min), json_num(p.lat->avg), json_num(p.lat->p50),
                         json_num(p.lat->p99), json_num(p.lat->max));
      if (p.verified) {
        any = true;
        all_ok &= p.verdict.ok();
        s += fmt::format(", \"integrity_ok\": {}, \"slots_checked\": {}, \"bytes_checked\": {}, "
                         "\"bad_slots\": {}, \"imm_received\": {}, \"imm_bad\": {}",
                         p.verdict.ok(), p.verdict.slots_checked, p.verdict.bytes_checked,
                         p.verdict.bad_slots, p.verdict.imm_received, p.verdict.imm_bad);
        if (!p.verdict.first.empty()) s += fmt::format(", \"first_problem\": {}", json_str(p.verdict.first));
      } else {
        s += ", \"integrity_ok\": null";
      }
      s += "}";
    }
    s += phases_.empty() ? "],\n" : "\n  ],\n";
    s += fmt::format("  \"integrity_ok\": {},\n", any ? (all_ok ? "true" : "false") : "null");
    s += fmt::format("  \"ok\": {}, \"error\": {}\n}}\n", error_.empty() && all_ok,
                     error_.empty() ? "null" : json_str(error_));
    write_json(o_.json, s);
  }

  const Options& o_;
  Config cfg_;
  std::optional<Rdma> rdma_;
  std::optional<Ctl> ctl_;
  uint32_t path_mtu_ = 0;
  uint64_t errors_ = 0;
  // Receive credits (bandwidth WRITE_IMM): receives the server announced
  // per QP, and the WRITE_IMMs of earlier phases.
  std::vector<uint64_t> credit_, sent_base_;
  uint64_t credit_waits_ = 0;
  Clock::time_point last_completion_{};
  std::vector<PhaseOut> phases_;
  std::string error_;
};

// ---------------------------------------------------------------- server

struct ServerPhase {
  uint64_t size = 0;
  std::vector<uint64_t> totals;
  bool verified = false;
  Verdict verdict;
};

class Server {
 public:
  explicit Server(const Options& o) : o_(o) {}

  int run() {
    ctl_.emplace(tcp_accept(o_.port));
    try {
      return session();
    } catch (const Failure& f) {
      ctl_->abort(f.code, f.what());
      error_ = f.what();
      emit_json();
      throw;
    }
  }
  int close_rdma() { return rdma_ ? rdma_->close() : 0; }

 private:
  int session() {
    Ctl& ctl = *ctl_;
    Reader h = ctl.recv(Msg::Hello, 60000);
    const uint16_t ver = h.u16();
    if (ver != kProtoVersion)
      fail_setup(fmt::format("client speaks protocol {}, this server {}", ver, kProtoVersion));
    cfg_.op = Op(h.u8());
    cfg_.test = Test(h.u8());
    cfg_.verify = h.u8() != 0;
    const uint8_t event = h.u8();
    cfg_.event = event == 1;
    cfg_.mtu = h.u32();
    cfg_.gid_idx = h.u32();
    cfg_.qps = h.u32();
    cfg_.iters = h.u64();
    cfg_.warmup = h.u64();
    cfg_.tx_depth = h.u32();
    cfg_.cq_mod = h.u32();
    cfg_.seconds_ms = h.u64();
    cfg_.seed = h.u64();
    const uint32_t ns = h.u32();
    if (ns == 0 || ns > 64) fail_setup("client sent no sizes");
    for (uint32_t k = 0; k < ns; ++k) cfg_.sizes.push_back(h.u64());
    // The bounds the client's options enforce, checked again: a client that
    // skips them must not make this side wrap warmup + iters into a short
    // run, truncate a GID index or run for ever.
    if (uint8_t(cfg_.op) > 1 || uint8_t(cfg_.test) > 1 || cfg_.qps == 0 || cfg_.qps > kMaxQps || cfg_.tx_depth == 0 ||
        cfg_.tx_depth > kMaxTxDepth || !mtu_enum(cfg_.mtu) || (cfg_.lat() && cfg_.qps != 1) || event > 1 ||
        (cfg_.event && cfg_.lat() && !cfg_.imm()) || cfg_.gid_idx > 255 || cfg_.iters == 0 || cfg_.iters > kMaxIters ||
        cfg_.warmup > kMaxIters || cfg_.cq_mod == 0 || cfg_.cq_mod > kMaxTxDepth ||
        cfg_.seconds_ms > uint64_t(kMaxSeconds * 1000))
      fail_setup("client sent an invalid configuration");
    for (uint64_t s : cfg_.sizes)
      if (s == 0 || s > kMaxSize) fail_setup(fmt::format("client sent invalid size {}", s));

    fmt::print(g_out, "mrc-perf server: {}  test={} op={} qps={} sizes={}..{} verify={} wait={} "
               "(client's settings)\n",
               o_.dev, test_name(cfg_.test), op_name(cfg_.op), cfg_.qps,
               human_size(cfg_.sizes.front()), human_size(cfg_.sizes.back()),
               cfg_.verify ? "on" : "off", wait_name(cfg_.event));
    if (o_.event && !cfg_.event)
      fmt::print(g_out, "note: --event ignored: the client's settings apply (it polls)\n");
    std::fflush(g_out);
    rdma_.emplace(o_.dev, cfg_, true);
    Rdma& r = *rdma_;
    Writer w;
    put_info(w, r.local_info());
    ctl.send(Msg::Setup, w);
    Reader cr = ctl.recv(Msg::Setup, 60000);
    const PeerInfo cli = get_info(cr);
    path_mtu_ = cli.path_mtu;
    r.connect(cli, cli.path_mtu);
    if (cfg_.imm())
      for (uint32_t q = 0; q < cfg_.qps; ++q) r.post_recvs(q, r.rq_depth());
    Writer ready;
    put_credits(ready, r);
    ctl.send(Msg::Ready, ready);
    announced_.clear();
    for (uint32_t q = 0; q < cfg_.qps; ++q) announced_.push_back(r.recv_posted(q));
    for (uint32_t q = 0; q < cfg_.qps; ++q)
      fmt::print(g_out, "  QP {}: local qpn {:#08x} gid {}  remote qpn {:#08x} gid {}  mtu {}\n", q,
                 r.local(q).qpn, gid_text(r.gid()), cli.qps[q].qpn, gid_text(cli.gid), path_mtu_);

    for (;;) {
      Reader m;
      {
        // Wait for the next phase or the end, as long as the client takes.
        auto got = next_msg();
        if (got.first == Msg::Bye) {
          // The client's verdict covers what it checked itself (latency
          // replies), so a failure there fails the server run too.
          client_ok_ = got.second.u8() != 0;
          break;
        }
        if (got.first != Msg::PhaseBegin)
          fail_run(fmt::format("control protocol: unexpected {}", msg_name(got.first)));
        m = std::move(got.second);
      }
      PhaseBegin pb;
      pb.index = m.u32();
      pb.size = m.u64();
      pb.warmup = m.u64();
      pb.iters = m.u64();
      pb.seconds_ms = m.u64();
      if (std::find(cfg_.sizes.begin(), cfg_.sizes.end(), pb.size) == cfg_.sizes.end())
        fail_run(fmt::format("client started a phase with unannounced size {}", pb.size));
      if (pb.warmup != cfg_.warmup || pb.seconds_ms != cfg_.seconds_ms ||
          pb.iters != (cfg_.seconds_ms ? 0 : cfg_.iters))
        fail_run("client started a phase with iterations or seconds it did not announce");
      ServerPhase p = cfg_.lat() ? lat_phase(pb) : bw_phase(pb);
      Writer res;
      put_verdict(res, p.verified, p.verdict);
      ctl.send(Msg::PhaseResult, res);
      uint64_t total = 0, lo = std::numeric_limits<uint64_t>::max(), hi = 0;
      for (uint64_t t : p.totals) {
        total += t;
        lo = std::min(lo, t);
        hi = std::max(hi, t);
      }
      const std::string count =
          cfg_.qps == 1 ? fmt::format("{} message(s)", total)
                        : fmt::format("{} message(s) on {} QPs ({}..{} per QP)", total, cfg_.qps,
                                      lo, hi);
      fmt::print(g_out, "size {:>10}: {}, {}\n", p.size, count,
                 !p.verified ? "not verified"
                 : p.verdict.ok()
                     ? fmt::format("verified ok ({} slots, {} bytes{})", p.verdict.slots_checked,
                                   p.verdict.bytes_checked,
                                   cfg_.imm() ? fmt::format(", {} immediates in order",
                                                            p.verdict.imm_received)
                                              : "")
                     : fmt::format("INTEGRITY FAILURE: {} bad slot(s), {} bad immediate(s); first: {}",
                                   p.verdict.bad_slots, p.verdict.imm_bad, p.verdict.first));
      std::fflush(g_out);
      phases_.push_back(std::move(p));
    }
    if (cfg_.event) fmt::print(g_out, "{}\n", event_summary(r.ev()));
    emit_json();
    for (const auto& p : phases_)
      if (p.verified && !p.verdict.ok()) return kExitIntegrity;
    if (!client_ok_) {
      fmt::print(g_out, "the client reports an integrity failure\n");
      return kExitIntegrity;
    }
    return kExitOk;
  }

  // Waits for the client as long as it takes (it has its own time limits).
  std::pair<Msg, Reader> next_msg() { return ctl_->next(); }

  std::vector<uint64_t> read_totals(Reader& m) {
    const uint32_t n = m.u32();
    if (n != cfg_.qps) fail_run(fmt::format("PHASE_END for {} QPs, expected {}", n, cfg_.qps));
    std::vector<uint64_t> t(n);
    for (auto& v : t) v = m.u64();
    return t;
  }

  // Announces the receives re-posted since the last announcement once some
  // QP has re-posted a quarter of its receive queue (bandwidth WRITE_IMM).
  void maybe_credit() {
    Rdma& r = *rdma_;
    const uint64_t step = std::max<uint32_t>(1, r.rq_depth() / 4);
    bool due = false;
    for (uint32_t q = 0; q < cfg_.qps && !due; ++q) due = r.recv_posted(q) - announced_[q] >= step;
    if (!due) return;
    Writer w;
    put_credits(w, r);
    ctl_->send(Msg::Credit, w);
    for (uint32_t q = 0; q < cfg_.qps; ++q) announced_[q] = r.recv_posted(q);
  }

  void zero_dst() {
    Rdma& r = *rdma_;
    std::memset(r.dst(0), 0, r.dst_cap() * cfg_.qps);
  }

  ServerPhase bw_phase(const PhaseBegin& pb) {
    Rdma& r = *rdma_;
    const Layout l = layout_for(cfg_, pb.size);
    zero_dst();
    ImmTracker imm(r, pb.size);
    ctl_->send(Msg::PhaseReady);

    ServerPhase p;
    p.size = pb.size;
    if (!cfg_.imm()) {
      auto got = next_msg();
      if (got.first != Msg::PhaseEnd)
        fail_run(fmt::format("control protocol: unexpected {}", msg_name(got.first)));
      p.totals = read_totals(got.second);
    } else {
      // Receive completions until the client's PHASE_END; in event mode the
      // wait also ends when the control connection has something.
      CqWaiter waiter(r, r.rcq(), ctl_->fd());
      uint32_t idle = 0;
      for (;;) {
        const int n = imm.poll();
        if (n > 0) maybe_credit();
        waiter.after_poll(n);
        if (n != 0) continue;
        if (waiter.extra_ready() || (++idle & 255) == 0) {
          if (auto m = ctl_->poll_msg()) {
            if (m->first != Msg::PhaseEnd)
              fail_run(fmt::format("control protocol: unexpected {}", msg_name(m->first)));
            p.totals = read_totals(m->second);
            break;
          }
        }
      }
      // Every message the client saw complete must have produced a receive
      // completion here; allow stragglers a moment.
      const auto until = Clock::now() + kStall;
      auto missing = [&] {
        for (uint32_t q = 0; q < cfg_.qps; ++q)
          if (imm.received(q) < p.totals[q]) return true;
        return false;
      };
      while (missing() && Clock::now() < until) waiter.after_poll(imm.poll());
      imm.poll();
      Verdict& iv = imm.verdict();
      for (uint32_t q = 0; q < cfg_.qps; ++q)
        if (imm.received(q) != p.totals[q]) {
          ++iv.imm_bad;
          iv.note(fmt::format("QP {}: {} WRITE_IMM receive completions, client completed {}", q,
                              imm.received(q), p.totals[q]));
        }
      p.verdict.merge(iv);
    }
    if (cfg_.verify) {
      p.verified = true;
      for (uint32_t q = 0; q < cfg_.qps; ++q) {
        const Expect e{r.master().p, cfg_.seed, q, 0, false, l};
        verify_area(r.dst(q), r.dst_cap(), e, p.totals[q], p.verdict);
      }
    } else {
      p.verdict = Verdict{};
    }
    return p;
  }

  ServerPhase lat_phase(const PhaseBegin& pb) {
    Rdma& r = *rdma_;
    const Layout l = layout_for(cfg_, pb.size);
    zero_dst();
    LatSide side(r, cfg_, l, *ctl_, false);
    side.prepare(0);
    ctl_->send(Msg::PhaseReady);

    const uint64_t total = pb.iters ? pb.warmup + pb.iters : std::numeric_limits<uint64_t>::max();
    uint64_t i = 0, end_n = 0;
    bool ended = false;
    for (; i < total; ++i) {
      if (!side.wait_peer(i, &end_n)) {
        ended = true;
        break;
      }
      side.post(i);
      side.prepare(i + 1);
    }
    side.drain();
    if (!ended) {
      auto got = next_msg();
      if (got.first != Msg::PhaseEnd)
        fail_run(fmt::format("control protocol: unexpected {}", msg_name(got.first)));
      const auto t = read_totals(got.second);
      end_n = t[0];
    }
    if (end_n != i)
      fail_run(fmt::format("latency phase: client reports {} messages, server answered {}", end_n, i));

    ServerPhase p;
    p.size = pb.size;
    p.totals = {i};
    if (cfg_.verify) {
      p.verified = true;
      const Expect e{r.master().p, cfg_.seed, 0, 0, true, l};
      verify_area(r.dst(0), r.dst_cap(), e, i, p.verdict);
      if (cfg_.imm()) p.verdict.merge(side.imm().verdict());
    }
    return p;
  }

  void emit_json() {
    if (o_.json.empty()) return;
    std::string s = "{\n";
    s += fmt::format("  \"tool\": \"mrc-perf\", \"role\": \"server\", \"dev\": {},\n", json_str(o_.dev));
    s += fmt::format("  \"test\": \"{}\", \"op\": \"{}\", \"qps\": {}, \"mtu\": {}, \"verify\": {},\n",
                     test_name(cfg_.test), op_name(cfg_.op), cfg_.qps, path_mtu_, cfg_.verify);
    s += fmt::format("  {},\n", event_json(cfg_.event, rdma_ ? rdma_->ev() : Rdma::EventStats{}));
    s += "  \"results\": [";
    bool all_ok = true, any = false;
    for (size_t k = 0; k < phases_.size(); ++k) {
      const ServerPhase& p = phases_[k];
      uint64_t total = 0;
      for (uint64_t t : p.totals) total += t;
      s += k ? ",\n    {" : "\n    {";
      s += fmt::format("\"bytes\": {}, \"messages\": {}, \"qps\": {}", p.size, total, cfg_.qps);
      if (p.verified) {
        any = true;
        all_ok &= p.verdict.ok();
        s += fmt::format(", \"integrity_ok\": {}, \"slots_checked\": {}, \"bytes_checked\": {}, "
                         "\"bad_slots\": {}, \"imm_received\": {}, \"imm_bad\": {}",
                         p.verdict.ok(), p.verdict.slots_checked, p.verdict.bytes_checked,
                         p.verdict.bad_slots, p.verdict.imm_received, p.verdict.imm_bad);
        if (!p.verdict.first.empty()) s += fmt::format(", \"first_problem\": {}", json_str(p.verdict.first));
      } else {
        s += ", \"integrity_ok\": null";
      }
      s += "}";
    }
    s += phases_.empty() ? "],\n" : "\n  ],\n";
    s += fmt::format("  \"integrity_ok\": {}, \"client_integrity_ok\": {},\n",
                     any ? (all_ok ? "true" : "false") : "null", client_ok_);
    s += fmt::format("  \"ok\": {}, \"error\": {}\n}}\n", error_.empty() && all_ok && client_ok_,
                     error_.empty() ? "null" : json_str(error_));
    write_json(o_.json, s);
  }

  const Options& o_;
  Config cfg_;
  std::optional<Ctl> ctl_;
  std::optional<Rdma> rdma_;
  uint32_t path_mtu_ = 0;
  bool client_ok_ = true;
  std::vector<uint64_t> announced_;  // receives announced per QP (READY, CREDIT)
  std::vector<ServerPhase> phases_;
  std::string error_;
};

// ---------------------------------------------------------------- main

Config make_config(const Options& o) {
  Config c;
  c.op = o.op == "write_imm" ? Op::WriteImm : Op::Write;
  c.test = o.test == "lat" ? Test::Lat : Test::Bw;
  c.verify = !o.no_verify;
  c.event = o.event;
  c.mtu = o.mtu;
  c.gid_idx = o.gid_idx;
  c.qps = o.qps;
  c.iters = o.iters;
  c.warmup = o.warmup >= 0 ? uint64_t(o.warmup) : (c.lat() ? 100 : 16);
  c.tx_depth = o.tx_depth;
  c.cq_mod = o.cq_mod;
  c.seconds_ms = uint64_t(std::llround(o.seconds * 1000));
  if (o.seconds > 0 && c.seconds_ms == 0) c.seconds_ms = 1;
  c.seed = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);

  if (!mtu_enum(c.mtu)) fail_setup(fmt::format("--mtu {}: must be 256, 512, 1024, 2048 or 4096", c.mtu));
  if (c.lat() && c.qps != 1) fail_setup("--test lat runs on one QP; drop --qps");
  // It reserves them up front: --iters 2^48 was a bare std::bad_alloc once
  // both sides had set up.
  if (c.lat() && c.iters > kMaxLatIters)
    fail_setup(fmt::format("--iters {}: --test lat keeps every sample, at most {}", c.iters, kMaxLatIters));
  if (c.event && c.lat() && !c.imm())
    fail_setup("--event does not apply to --test lat --op write: that test detects each reply by "
               "polling the destination memory, which raises no completion to wait for "
               "(use --op write_imm, or drop --event)");
  if (!o.sweep.empty()) {
    const auto colon = o.sweep.find(':');
    const auto lo = colon == std::string::npos ? std::nullopt : parse_size(o.sweep.substr(0, colon));
    const auto hi = colon == std::string::npos ? std::nullopt : parse_size(o.sweep.substr(colon + 1));
    if (!lo || !hi || *lo == 0 || *hi < *lo || !is_pow2(*lo) || !is_pow2(*hi))
      fail_setup(fmt::format("--sweep '{}': expected MIN:MAX, powers of two up to {} (e.g. 1:4M)", o.sweep,
                             human_size(kMaxSize)));
    if (*hi > kMaxSize)
      fail_setup(fmt::format("--sweep '{}': MAX exceeds the maximum size {}", o.sweep, human_size(kMaxSize)));
    // Stops at MAX rather than testing s <= MAX after doubling, which wraps to 0 past 2^63.
    for (uint64_t s = *lo;; s *= 2) {
      c.sizes.push_back(s);
      if (s >= *hi) break;
    }
  } else if (!o.size.empty()) {
    const auto s = parse_size(o.size);
    if (!s || *s == 0)
      fail_setup(
          fmt::format("--size '{}': expected bytes with optional K/M/G, up to {}", o.size, human_size(kMaxSize)));
    if (*s > kMaxSize)
      fail_setup(fmt::format("--size '{}': exceeds the maximum size {}", o.size, human_size(kMaxSize)));
    c.sizes.push_back(*s);
  } else {
    c.sizes.push_back(c.lat() ? 2 : 65536);
  }
  if (c.lat() && c.sizes.front() < 1) fail_setup("size must be at least 1 byte");
  if (c.max_size() > kMaxSize)
    fail_setup(fmt::format("size {} exceeds the maximum {}", c.max_size(), human_size(kMaxSize)));
  return c;
}

// 0 or a number of seconds in [min, max]. CLI::NonNegativeNumber lets NaN
// and inf through, which llround and the chrono conversions do not survive.
CLI::Validator seconds_in(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v) || !(v == 0 || (v >= min && v <= max)))
          return min == 0 ? fmt::format("'{}': expected seconds from 0 to {:g}", in, max)
                          : fmt::format("'{}': expected 0 (off) or seconds from {:g} to {:g}", in, min, max);
        return {};
      },
      "SECONDS");
}

int real_main(int argc, char** argv) {
  Options o;
  CLI::App app{"mrc-perf: RDMA WRITE / WRITE_WITH_IMM bandwidth and latency benchmark over the "
               "MRC API, with data verification.\n"
               "  server: mrc-perf --dev mrc1 [--port 18515]\n"
               "  client: mrc-perf --dev mrc0 --connect HOST[:PORT] [test options]\n"
               "The test options of the client are used by both sides."};
  app.add_option("--dev", o.dev, "MRC device name (mrc0, mrc1, ...)")->required();
  // Port 0 would make the server listen on a port the kernel picks, while it
  // announces port 0 to the user.
  app.add_option("--port", o.port, "TCP control port (server listens; client's default)")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  app.add_option("--connect", o.connect, "run as client and connect to HOST[:PORT]");
  // ibv_ah_attr's sgid_index is 8 bits: 256 would silently become 0.
  app.add_option("--gid-idx", o.gid_idx, "GID index of port 1")->check(CLI::Range(0u, 255u))->capture_default_str();
  app.add_option("--mtu", o.mtu, "path MTU: 256..4096 (lowered to the ports' active MTU)")
      ->capture_default_str();
  app.add_option("--op", o.op, "write | write_imm")
      ->check(CLI::IsMember({"write", "write_imm"}))
      ->capture_default_str();
  app.add_option("--test", o.test, "bw | lat")->check(CLI::IsMember({"bw", "lat"}))->capture_default_str();
  auto* size = app.add_option("--size", o.size, "message size, K/M/G suffixes (default 64K bw, 2 lat)");
  app.add_option("--sweep", o.sweep, "sweep sizes MIN:MAX in powers of two, e.g. 1:4M")->excludes(size);
  app.add_option("--qps", o.qps, "QPs (bw)")->check(CLI::Range(1u, kMaxQps))->capture_default_str();
  // Capped so warmup + iters cannot wrap around 2^64 into a short run.
  app.add_option("--iters", o.iters, "iterations per size (per QP)")
      ->check(CLI::Range(uint64_t(1), kMaxIters))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "warmup iterations per size (default 16 bw, 100 lat)")
      ->check(CLI::Range(int64_t(0), int64_t(kMaxIters)));
  app.add_option("--tx-depth", o.tx_depth, "outstanding WRs per QP (bw)")
      ->check(CLI::Range(1u, kMaxTxDepth))
      ->capture_default_str();
  app.add_option("--cq-mod", o.cq_mod, "signal every Nth WR (bw; at most half the window)")
      ->check(CLI::Range(1u, kMaxTxDepth))
      ->capture_default_str();
  app.add_option("--seconds", o.seconds, "run each size for S seconds instead of --iters")
      ->check(seconds_in(0, kMaxSeconds));
  // Under a nanosecond the row schedule's step is zero and Live::tick never
  // catches up with the clock: a hang. The floor keeps well clear of that.
  app.add_option("--stats-interval", o.stats_interval, "print a table row every S seconds")
      ->check(seconds_in(1e-6, kMaxSeconds));
  app.add_option("--json", o.json, "write results as JSON to FILE ('-': stdout)");
  app.add_flag("--no-verify", o.no_verify, "skip the data and immediate checks");
  app.add_flag("-e,--event", o.event,
               "sleep on a completion channel instead of polling CQs (bw; lat with write_imm)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitSetup;
  }
  if (o.json == "-") g_out = stderr;
  ::signal(SIGPIPE, SIG_IGN);

  int code = kExitOk;
  int teardown_errors = 0;
  try {
    if (!o.connect.empty()) {
      Client c(o, make_config(o));
      try {
        code = c.run();
      } catch (...) {
        c.close_rdma();
        throw;
      }
      teardown_errors = c.close_rdma();
    } else {
      Server s(o);
      try {
        code = s.run();
      } catch (...) {
        s.close_rdma();
        throw;
      }
      teardown_errors = s.close_rdma();
    }
  } catch (const Failure& f) {
    fmt::print(stderr, "mrc-perf: error: {}\n", f.what());
    return f.code;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mrc-perf: error: {}\n", e.what());
    return kExitRun;
  }
  if (teardown_errors && code == kExitOk) code = kExitRun;
  return code;
}

}  // namespace

int main(int argc, char** argv) { return real_main(argc, argv); }
