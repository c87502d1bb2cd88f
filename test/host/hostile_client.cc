// A client that breaks the host ABI on purpose: malformed requests, memory
// the NIC must refuse, and garbage written into its own rings. It checks the
// NIC's answers; the test script then checks that well-behaved clients are
// unaffected and that the NIC counted each refusal.
//
//   hostile-client RUN_DIR DEV_A DEV_B
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "host/abi.h"
#include "tap.h"

namespace abi = mrc::host::abi;

namespace {

int connect_to(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return -1;
  return fd;
}

bool send_raw(int fd, const void* p, size_t n, const int* fds = nullptr, int nfds = 0) {
  iovec iov{const_cast<void*>(p), n};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(2 * sizeof(int))];
  if (nfds) {
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  }
  return sendmsg(fd, &m, MSG_NOSIGNAL) == ssize_t(n);
}

// Sends, then waits up to 5 s for the response; err -1 when none came.
abi::Response call(int fd, const void* p, size_t n, const int* fds = nullptr, int nfds = 0) {
  abi::Response rs{};
  rs.err = -1;
  if (!send_raw(fd, p, n, fds, nfds)) return rs;
  pollfd pf{fd, POLLIN, 0};
  if (poll(&pf, 1, 5000) != 1) return rs;
  if (recv(fd, &rs, sizeof rs, 0) != ssize_t(sizeof rs)) rs.err = -1;
  return rs;
}

abi::Response call(int fd, const abi::Request& rq, const int* fds = nullptr, int nfds = 0) {
  return call(fd, &rq, sizeof rq, fds, nfds);
}

// A memfd of `bytes`, mapped; sealed against shrinking unless told not to.
int memfd(size_t bytes, void*& p, bool seal = true) {
  const int fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (ftruncate(fd, off_t(bytes)) != 0) return -1;
  if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) return -1;
  p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? -1 : fd;
}

struct Session {
  int fd = -1;
  int events = -1;
  abi::DeviceInfo info{};
};

Session open_session(const std::string& path) {
  Session s;
  s.fd = connect_to(path);
  abi::Request rq{};
  rq.op = abi::Op::hello;
  rq.hello = {abi::kAbiVersion, uint32_t(getpid())};
  const abi::Response rs = call(s.fd, rq);
  if (rs.err == 0) s.info = rs.device;
  s.events = connect_to(path);
  abi::Request ev{};
  ev.op = abi::Op::events;
  ev.events_token = s.info.events_token;
  send_raw(s.events, &ev, sizeof ev);
  return s;
}

// Waits for an async event of `type`; false after 5 s.
bool wait_event(int fd, uint32_t type, uint32_t handle) {
  for (;;) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 5000) != 1) return false;
    abi::Event e{};
    if (recv(fd, &e, sizeof e, 0) != ssize_t(sizeof e)) return false;
    if (e.type == type && e.handle == handle) return true;
  }
}

uint32_t alloc_pd(int fd) {
  abi::Request rq{};
  rq.op = abi::Op::alloc_pd;
  return call(fd, rq).handle;
}

struct Cq {
  uint32_t handle = 0;
  void* mem = nullptr;
  abi::QueueHeader* hdr() const { return static_cast<abi::QueueHeader*>(mem); }
};

Cq create_cq(int fd, uint32_t depth) {
  Cq cq;
  const int mfd = memfd(abi::cq_bytes(depth), cq.mem);
  abi::Request rq{};
  rq.op = abi::Op::create_cq;
  rq.create_cq = {depth, 0};
  const abi::Response rs = call(fd, rq, &mfd, 1);
  close(mfd);
  cq.handle = rs.err ? 0 : rs.handle;
  return cq;
}

struct Qp {
  uint32_t handle = 0, qpn = 0;
  void* mem = nullptr;
  uint32_t sq_depth = 0;
  abi::QueueHeader* sq() const { return static_cast<abi::QueueHeader*>(mem); }
  abi::QueueHeader* rq() const {
    return reinterpret_cast<abi::QueueHeader*>(static_cast<uint8_t*>(mem) + abi::qp_sq_bytes(sq_depth));
  }
};

Qp create_qp(int fd, uint32_t pd, const Cq& cq, uint32_t depth) {
  Qp q;
  q.sq_depth = depth;
  const int mfd = memfd(abi::qp_bytes(depth, depth), q.mem);
  abi::Request rq{};
  rq.op = abi::Op::create_qp;
  rq.create_qp = {pd, cq.handle, cq.handle, depth, depth, 1};
  const abi::Response rs = call(fd, rq, &mfd, 1);
  close(mfd);
  if (!rs.err) {
    q.handle = rs.qp.handle;
    q.qpn = rs.qp.qpn;
  }
  return q;
}

int modify(int fd, uint32_t qp, uint32_t state, uint32_t dest_qpn, const uint8_t* dgid) {
  abi::Request rq{};
  rq.op = abi::Op::modify_qp;
  rq.handle = qp;
  abi::QpAttrs& a = rq.modify_qp;
  a.mask = abi::kModState;
  a.state = state;
  if (state == 2) {  // RTR
    a.mask |= abi::kModDestQpn | abi::kModDgid | abi::kModPmtu;
    a.dest_qpn = dest_qpn;
    a.pmtu = 1024;
    std::memcpy(a.dgid, dgid, 16);
  }
  return call(fd, rq).err;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: hostile-client RUN_DIR DEV_A DEV_B\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::string a_path = dir + "/" + argv[2] + ".sock", b_path = dir + "/" + argv[3] + ".sock";

  // Before hello: a wrong ABI version and a short message.
  {
    const int fd = connect_to(a_path);
    abi::Request rq{};
    rq.op = abi::Op::hello;
    rq.hello = {abi::kAbiVersion + 7, 1};
    check(call(fd, rq).err == EPROTO, "hello with a foreign ABI version is refused (EPROTO)");
    close(fd);
    const int fd2 = connect_to(a_path);
    const char junk[5] = {1, 2, 3, 4, 5};
    check(call(fd2, junk, sizeof junk).err == -1, "a 5-byte first message gets the connection closed");
    close(fd2);
    const int fd3 = connect_to(a_path);
    abi::Request ev{};
    ev.op = abi::Op::events;
    ev.events_token = 0x1234567;
    check(call(fd3, ev).err == -1, "an events connection with a made-up token is closed");
    close(fd3);
  }

  Session a = open_session(a_path), b = open_session(b_path);
  check(a.info.abi_version == abi::kAbiVersion && b.info.abi_version == abi::kAbiVersion, "hello on both devices");

  // Malformed and refused requests; the connection must survive each.
  {
    const char junk[17] = {};
    check(call(a.fd, junk, sizeof junk).err == EPROTO, "a short request is refused (EPROTO)");
    abi::Request rq{};
    rq.op = abi::Op(999);
    check(call(a.fd, rq).err == EPROTO, "an unknown operation is refused (EPROTO)");
    rq = {};
    rq.op = abi::Op::dealloc_pd;
    rq.handle = 12345;
    check(call(a.fd, rq).err == EINVAL, "freeing a PD we never had is refused");
  }
  const uint32_t pd = alloc_pd(a.fd);
  check(pd != 0, "alloc_pd");
  {
    void* p = nullptr;
    abi::Request rq{};
    rq.op = abi::Op::reg_mr;
    rq.reg_mr = {pd, 3, 0x10000, 4096, 1, 0, 0, 4096};
    int fd = memfd(4096, p, false);
    check(call(a.fd, rq, &fd, 1).err == EINVAL, "memory not sealed against shrinking is refused");
    close(fd);
    fd = memfd(4096, p);
    rq.reg_mr.new_segment_bytes = 8192;
    check(call(a.fd, rq, &fd, 1).err == EINVAL, "a memfd smaller than announced is refused");
    rq.reg_mr.new_segment_bytes = 4096;
    rq.reg_mr.offset = 1;
    check(call(a.fd, rq, &fd, 1).err == EINVAL, "a region running past its segment is refused");
    rq.reg_mr.offset = 0;
    rq.reg_mr.pd = pd + 1000;
    check(call(a.fd, rq, &fd, 1).err == EINVAL, "a region in another's PD is refused");
    rq.reg_mr.pd = pd;
    rq.reg_mr.access = 2;  // remote write without local write
    check(call(a.fd, rq, &fd, 1).err == EINVAL, "remote write without local write is refused");
    rq.reg_mr.access = 3;
    rq.reg_mr.new_segment_bytes = 0;
    rq.reg_mr.segment = 77;
    check(call(a.fd, rq).err == EINVAL, "a region in a segment never sent is refused");
    close(fd);
    rq = {};
    rq.op = abi::Op::create_cq;
    rq.create_cq = {1000, 0};
    fd = memfd(abi::cq_bytes(1024), p);
    check(call(a.fd, rq, &fd, 1).err == EINVAL, "a CQ depth that is not a power of two is refused");
    rq.create_cq = {1024, 0};
    check(call(a.fd, rq).err == EINVAL, "a CQ without its memory is refused");
    close(fd);
  }

  // Garbage in a ring: an SQ producer index beyond the ring fails that QP
  // alone, with an async event.
  const Cq cqa = create_cq(a.fd, 64);
  check(cqa.handle != 0, "create_cq on A");

  // A ring's memfd shrunk to nothing and then sealed while the NIC looks at
  // it: checked size-then-seal, that passes, and the NIC's next read of the
  // ring faults the whole process. The delay after the send adapts to land
  // between the NIC's two checks: "0 bytes" means too soon, "not sealed"
  // too late. A NIC with the old order died (SIGBUS) within 1,300 to 1,700
  // tries in three runs of four: a probe, not a proof.
  {
    const size_t bytes = abi::qp_bytes(16, 16);
    constexpr long kTries = 8000;
    long delay = 2000, accepted = 0, answered = 0;
    for (long attempt = 0; attempt < kTries && !accepted; ++attempt) {
      const int mfd = memfd_create("racing", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      if (mfd < 0 || ftruncate(mfd, off_t(bytes)) != 0) break;
      abi::Request rq{};
      rq.op = abi::Op::create_qp;
      rq.create_qp = {pd, cqa.handle, cqa.handle, 16, 16, 1};
      if (!send_raw(a.fd, &rq, sizeof rq, &mfd, 1)) break;
      for (long i = 0; i < delay; ++i) asm volatile("");
      if (ftruncate(mfd, 0) != 0 || fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) break;
      abi::Response rs{};
      pollfd pf{a.fd, POLLIN, 0};
      const bool got = poll(&pf, 1, 5000) == 1 && recv(a.fd, &rs, sizeof rs, 0) == ssize_t(sizeof rs);
      close(mfd);
      if (!got) break;
      ++answered;
      if (rs.err == 0)
        ++accepted;
      else if (std::strstr(rs.message, "0 bytes"))
        delay += 1 + delay / 64;
      else if (std::strstr(rs.message, "not sealed"))
        delay = std::max(0L, delay - 1 - delay / 64);
    }
    std::printf("# ring memfd shrunk and sealed mid-check: %ld of %ld tries refused, %ld accepted\n",
                answered - accepted, kTries, accepted);
    check(answered == kTries && accepted == 0, "a ring memfd shrunk and then sealed mid-check is always refused");
  }
  {
    Qp bad = create_qp(a.fd, pd, cqa, 16);
    check(bad.handle != 0, "create_qp on A");
    abi::store_release(bad.sq()->prod, 0x7fff0000);
    check(wait_event(a.events, 1 /* IBV_EVENT_QP_FATAL */, bad.handle),
          "an SQ producer index out of range fails the QP (QP_FATAL event)");
    check(abi::load_acquire(bad.sq()->error) == 1, "the QP's error word is set");
    Qp bad_rq = create_qp(a.fd, pd, cqa, 16);
    abi::store_release(bad_rq.rq()->prod, 0xdead);
    check(wait_event(a.events, 1, bad_rq.handle), "an RQ producer index out of range fails the QP");
  }

  // A client without an events connection: the QP_FATAL it earns has nowhere
  // to go, and the NIC counts it lost (async_events_dropped, checked by the
  // test script) instead of saying nothing.
  {
    const int fd = connect_to(a_path);
    abi::Request rq{};
    rq.op = abi::Op::hello;
    rq.hello = {abi::kAbiVersion, uint32_t(getpid())};
    check(call(fd, rq).err == 0, "hello without an events connection");
    const uint32_t pd2 = alloc_pd(fd);
    const Cq cq = create_cq(fd, 16);
    Qp q = create_qp(fd, pd2, cq, 16);
    check(q.handle != 0, "a QP of a client without events");
    abi::store_release(q.sq()->prod, 0x7fff0000);
    bool failed = false;
    for (int i = 0; i < 500 && !failed; ++i) {
      failed = abi::load_acquire(q.sq()->error) == 1;
      if (!failed) usleep(10000);
    }
    check(failed, "its QP fails all the same (error word set)");
    close(fd);
  }

  // A connected pair A -> B, then a CQ whose consumer index is garbage.
  {
    const uint32_t pdb = alloc_pd(b.fd);
    const Cq cqb = create_cq(b.fd, 64);
    const Cq cq_small = create_cq(a.fd, 4);
    Qp qa = create_qp(a.fd, pd, cq_small, 16);
    Qp qb = create_qp(b.fd, pdb, cqb, 16);
    check(qa.handle && qb.handle, "a QP on each device");
    const uint8_t* gid_a = a.info.gids[3];
    const uint8_t* gid_b = b.info.gids[3];
    const bool up = modify(a.fd, qa.handle, 1, 0, nullptr) == 0 && modify(b.fd, qb.handle, 1, 0, nullptr) == 0 &&
                    modify(a.fd, qa.handle, 2, qb.qpn, gid_b) == 0 && modify(b.fd, qb.handle, 2, qa.qpn, gid_a) == 0 &&
                    modify(a.fd, qa.handle, 3, 0, nullptr) == 0 && modify(b.fd, qb.handle, 3, 0, nullptr) == 0;
    check(up, "the pair reaches RTS");
    // Zero-length writes need no memory region; five of them overflow a
    // 4-entry CQ nobody polls.
    auto* sq = abi::entries<abi::Sqe>(qa.mem);
    for (uint32_t i = 0; i < 5; ++i) {
      sq[i] = {};
      sq[i].wr_id = i;
      sq[i].opcode = abi::kSqeWrite;
      sq[i].flags = abi::kSqeSignaled;
    }
    abi::store_release(qa.sq()->prod, 5);
    check(wait_event(a.events, 0 /* IBV_EVENT_CQ_ERR */, cq_small.handle), "an overflowing CQ fails (CQ_ERR event)");
    check(wait_event(a.events, 1 /* IBV_EVENT_QP_FATAL */, qa.handle), "and takes its QP to ERROR (QP_FATAL event)");
    // Garbage consumer index on a fresh CQ.
    const Cq cq_garbage = create_cq(a.fd, 8);
    Qp qa2 = create_qp(a.fd, pd, cq_garbage, 16);
    Qp qb2 = create_qp(b.fd, pdb, cqb, 16);
    const bool up2 = modify(a.fd, qa2.handle, 1, 0, nullptr) == 0 && modify(b.fd, qb2.handle, 1, 0, nullptr) == 0 &&
                     modify(a.fd, qa2.handle, 2, qb2.qpn, gid_b) == 0 &&
                     modify(b.fd, qb2.handle, 2, qa2.qpn, gid_a) == 0 && modify(a.fd, qa2.handle, 3, 0, nullptr) == 0 &&
                     modify(b.fd, qb2.handle, 3, 0, nullptr) == 0;
    check(up2, "a second pair reaches RTS");
    abi::store_release(cq_garbage.hdr()->cons, 0x80000000u);
    auto* sq2 = abi::entries<abi::Sqe>(qa2.mem);
    sq2[0] = {};
    sq2[0].opcode = abi::kSqeWrite;
    sq2[0].flags = abi::kSqeSignaled;
    // An opcode the device does not know must complete in error, not crash.
    sq2[1] = {};
    sq2[1].opcode = 0xEE;
    abi::store_release(qa2.sq()->prod, 2);
    check(wait_event(a.events, 0, cq_garbage.handle), "a CQ consumer index out of range fails the CQ");
    // A destroy of a CQ still in use is refused.
    abi::Request rq{};
    rq.op = abi::Op::destroy_cq;
    rq.handle = cqb.handle;
    check(call(b.fd, rq).err == EBUSY, "destroying a CQ QPs still use is refused (EBUSY)");
  }
  // Leave everything behind: the NIC reclaims it when we exit.
  std::printf("# %d failed\n", n_fail);
  return n_fail ? 1 : 0;
}
