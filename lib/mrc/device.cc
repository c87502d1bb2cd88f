// Contexts on mrc-nic devices: the control connection, and memory
// registration by remapping the program's pages onto shared memory.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "internal.h"

namespace mrc::lib {

int fail(int err) {
  errno = err;
  return err;
}

void complain(const std::string& what) {
  static const bool quiet = [] {
    const char* q = std::getenv("MRC_QUIET");
    return q && *q && *q != '0';
  }();
  if (!quiet) std::fprintf(stderr, "lib_mrc: %s\n", what.c_str());
}

uint64_t command_timeout_ms() {
  static const uint64_t ms = [] {
    constexpr uint64_t kDefault = 60000;  // a kernel driver's firmware command timeout (mlx5's)
    const char* v = std::getenv("MRC_CMD_TIMEOUT_MS");
    if (!v || !*v) return kDefault;
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (errno || *end || *v == '-' || n > uint64_t(INT32_MAX)) {
      complain(std::string("MRC_CMD_TIMEOUT_MS=") + v + " is not a count of milliseconds up to 2147483647; using " +
               std::to_string(kDefault));
      return kDefault;
    }
    return uint64_t(n);
  }();
  return ms;
}

namespace {

std::mutex g_devices_mu;
std::vector<Device*> g_devices;  // never freed: programs may keep device pointers

int connect_to(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) return -1;
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  // Non-blocking: a NIC too stopped to accept (its backlog full) would
  // block a plain connect for ever. Retried up to the command timeout.
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  const uint64_t limit_ms = command_timeout_ms();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  while (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    int e = errno;
    if (e == EAGAIN && (!limit_ms || std::chrono::steady_clock::now() < until)) {
      usleep(1000);
      continue;
    }
    if (e == EAGAIN) e = ETIMEDOUT;
    close(fd);
    errno = e;
    return -1;
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

bool send_request(int fd, const abi::Request& rq, const int* fds, int nfds, std::span<const uint8_t> payload = {}) {
  iovec iov[2] = {{const_cast<abi::Request*>(&rq), sizeof rq},
                  {const_cast<uint8_t*>(payload.data()), payload.size()}};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = payload.empty() ? 1 : 2;
  alignas(cmsghdr) char ctl[CMSG_SPACE(2 * sizeof(int))];
  if (nfds > 0) {
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  }
  ssize_t n;
  do n = sendmsg(fd, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == ssize_t(sizeof rq + payload.size());
}

// The program's mappings over [start, end), clipped to it, with their
// protections; empty when some page in it is not mapped.
struct Span {
  uintptr_t lo, hi;
  int prot;
  bool ours;                  // a registration's memfd
  unsigned long ino;          // the mapped file's inode
  unsigned long long offset;  // the file offset of page lo
};
std::vector<Span> mappings(uintptr_t start, uintptr_t end) {
  std::vector<Span> out;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) return out;
  char* line = nullptr;
  size_t cap = 0;
  uintptr_t at = start;
  while (at < end && getline(&line, &cap, f) > 0) {
    unsigned long lo, hi, ino;
    unsigned long long off;
    char perms[5];
    if (std::sscanf(line, "%lx-%lx %4s %llx %*s %lu", &lo, &hi, perms, &off, &ino) != 5) continue;
    if (hi <= at) continue;
    if (lo > at) break;  // a hole
    const int prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                     (perms[2] == 'x' ? PROT_EXEC : 0);
    out.push_back(
        {at, std::min<uintptr_t>(hi, end), prot, std::strstr(line, "/memfd:mrc-mr ") != nullptr, ino, off + (at - lo)});
    at = hi;
  }
  std::free(line);
  std::fclose(f);
  if (at < end) out.clear();
  return out;
}

}  // namespace

// The memory under registrations, for the whole process: one memfd per
// stretch of pages, shared by every context that registers them (a
// multi-rail program registers a buffer on each NIC). A second memfd mapped
// over the same pages left the first NIC placing WRITEs where the program
// no longer looked, and reading stale bytes for its sends.
struct Backing {
  uintptr_t start = 0, end = 0;
  unsigned long ino = 0;
  int fd = -1;        // handed to the next context's NIC; -1 when not kept (kept_fd_budget)
  uint32_t refs = 0;  // MRs over it, in every context
};

namespace {

std::mutex g_reg_mu;  // held across a whole registration or deregistration
std::vector<std::unique_ptr<Backing>> g_backings;
uint32_t g_kept_fds = 0;

// Descriptors kept for sharing stretches with further contexts: at most a
// quarter of the program's limit, so a program registering many buffers
// through one context does not run out.
uint32_t kept_fd_budget() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 1024;
  return uint32_t(std::min<rlim_t>(r.rlim_cur / 4, UINT32_MAX));
}

// Every page of `spans` is still b's memfd, at its own offset: not unmapped
// and replaced since (verbs would keep the old pages for the old MR and give
// the new registration new ones).
bool backs(const Backing& b, const std::vector<Span>& spans) {
  if (spans.empty()) return false;
  for (const Span& sp : spans)
    if (!sp.ours || sp.ino != b.ino || sp.offset != sp.lo - b.start) return false;
  return true;
}

// After the last deregistration over them, puts the program's private
// pages back under b's stretch, contents and protections kept: the memfd
// is MADV_DONTFORK (a forked child would fault on them) and MAP_SHARED (no
// child may share them either). Left alone unless every page is still b's
// memfd and readable.
void restore_private(const Backing& b) {
  const uintptr_t start = b.start, end = b.end;
  const std::vector<Span> spans = mappings(start, end);
  if (!backs(b, spans)) return;
  for (const Span& sp : spans)
    if (!(sp.prot & PROT_READ)) return;
  const size_t len = end - start;
  void* tmp = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (tmp == MAP_FAILED) return;  // the memfd pages stay: correct, only not forkable
  std::memcpy(tmp, reinterpret_cast<void*>(start), len);
  // One step, so no thread of the program ever finds the range unmapped;
  // protections after it (older kernels move only a single mapping).
  if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(start)) == MAP_FAILED) {
    munmap(tmp, len);
    return;
  }
  for (const Span& sp : spans)
    if (sp.prot != (PROT_READ | PROT_WRITE)) mprotect(reinterpret_cast<void*>(sp.lo), sp.hi - sp.lo, sp.prot);
}

}  // namespace

Device* find_or_add_device(const std::string& name, const std::string& socket_path) {
  std::lock_guard<std::mutex> g(g_devices_mu);
  for (Device* d : g_devices)
    if (name == d->dev.name) {
      d->socket_path = socket_path;
      return d;
    }
  auto* d = new (std::nothrow) Device;
  if (!d) return nullptr;
  d->dev.node_type = IBV_NODE_CA;
  d->dev.transport_type = IBV_TRANSPORT_IB;  // what RoCE devices report
  std::snprintf(d->dev.name, sizeof d->dev.name, "%s", name.c_str());
  std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "%s", name.c_str());
  std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "%s", socket_path.c_str());
  std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "%s", socket_path.c_str());
  d->socket_path = socket_path;
  g_devices.push_back(d);
  return d;
}

std::string socket_path_of(const Device* d) {
  std::lock_guard<std::mutex> g(g_devices_mu);
  return d->socket_path;
}

Device* as_device(ibv_device* dev) {
  std::lock_guard<std::mutex> g(g_devices_mu);
  for (Device* d : g_devices)
    if (&d->dev == dev) return d;
  return nullptr;
}

Context* Context::from(ibv_context* c) {
  if (!c || !as_device(c->device)) return nullptr;
  auto* shell = reinterpret_cast<ContextShell*>(reinterpret_cast<char*>(c) - offsetof(ContextShell, vctx) -
                                                offsetof(verbs_context, context));
  return shell->self;
}

Context* Context::open(Device* d) {
  auto* c = new (std::nothrow) Context;
  if (!c) {
    errno = ENOMEM;
    return nullptr;
  }
  c->shell = new (std::nothrow) ContextShell{};
  if (!c->shell) {
    delete c;
    errno = ENOMEM;
    return nullptr;
  }
  c->shell->self = c;
  c->device = d;
  // Another thread listing devices may rewrite d->socket_path meanwhile.
  const std::string path = socket_path_of(d);
  c->fd = connect_to(path);
  if (c->fd < 0) {
    const int e = errno;
    complain(std::string("cannot reach device ") + d->dev.name + " at " + path + ": " + std::strerror(e) +
             " (is its mrc-nic running?)");
    delete c;
    errno = ENODEV;
    return nullptr;
  }
  // The NIC's alive stamp sits beside its socket (abi::kAliveSuffix); the
  // hello may already queue behind other clients' requests.
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".sock") == 0)
    c->alive_fd = ::open((path.substr(0, path.size() - 5) + abi::kAliveSuffix).c_str(), O_RDONLY | O_CLOEXEC);
  abi::Request rq{};
  rq.op = abi::Op::hello;
  rq.hello = {abi::kAbiVersion, uint32_t(getpid())};
  abi::Response rs{};
  if (int e = c->call(rq, rs); e) {
    delete c;
    errno = e;
    return nullptr;
  }
  c->info = rs.device;
  // Every GID lookup indexes info.gids by gid_count: a NIC reporting more
  // than the table holds must not make us read past it.
  if (c->info.gid_count > abi::kGidTableLen) {
    complain(std::string("device ") + d->dev.name + " reports " + std::to_string(c->info.gid_count) +
             " GIDs; using the first " + std::to_string(abi::kGidTableLen));
    c->info.gid_count = abi::kGidTableLen;
  }
  // Rings are powers of two, so a device limit of, say, 1000 WRs allows 512:
  // reported and checked as such, a request within it is always granted.
  c->info.max_sq_depth = std::bit_floor(c->info.max_sq_depth);
  c->info.max_rq_depth = std::bit_floor(c->info.max_rq_depth);
  c->info.max_cq_depth = std::bit_floor(c->info.max_cq_depth);
  // The second connection carries async events; the token ties it to us.
  c->events_fd = connect_to(path);
  if (c->events_fd >= 0) {
    abi::Request ev{};
    ev.op = abi::Op::events;
    ev.events_token = c->info.events_token;
    if (!send_request(c->events_fd, ev, nullptr, 0)) {
      close(c->events_fd);
      c->events_fd = -1;
    }
  }
  ibv_context& vc = *c->verbs();
  vc.device = &d->dev;
  vc.cmd_fd = c->fd;
  vc.async_fd = c->events_fd;
  vc.num_comp_vectors = 1;
  pthread_mutex_init(&vc.mutex, nullptr);
  vc.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c->shell->vctx.sz = sizeof(verbs_context);
  return c;
}

Context::~Context() {
  delete shell;
  if (alive_fd >= 0) close(alive_fd);
  if (events_fd >= 0) close(events_fd);
  if (fd >= 0) close(fd);
}

int Context::call(abi::Request& rq, abi::Response& rs, const int* fds, int nfds, std::span<const uint8_t> payload,
                  std::vector<uint8_t>* reply) {
  std::lock_guard<std::mutex> g(mu);
  if (gone) return EIO;
  rq.payload_len = uint32_t(payload.size());
  if (!send_request(fd, rq, fds, nfds, payload)) {
    complain(std::string("device ") + device->dev.name + " went away");
    gone = true;
    return EIO;
  }
  if (const int e = await_reply(rq); e) return e;
  rx.resize(sizeof rs + abi::kMaxPayload);
  ssize_t n;
  do n = recv(fd, rx.data(), rx.size(), 0);
  while (n < 0 && errno == EINTR);
  if (n < ssize_t(sizeof rs)) {
    complain(std::string("device ") + device->dev.name + " went away");
    gone = true;
    return EIO;
  }
  std::memcpy(&rs, rx.data(), sizeof rs);
  if (size_t(n) != sizeof rs + rs.payload_len) return EPROTO;
  if (reply) reply->assign(rx.begin() + long(sizeof rs), rx.begin() + n);
  // A stale profile write is retried by the caller (ctl.cc), not an error yet.
  if (rs.err && rs.err != ESTALE) {
    rs.message[sizeof rs.message - 1] = 0;
    complain(std::string(device->dev.name) + ": " + rs.message);
  }
  return rs.err;
}

int Context::await_reply(const abi::Request& rq) {
  const uint64_t limit_ms = command_timeout_ms();
  if (!limit_ms) return 0;
  const uint64_t started = abi::monotonic_ms();
  for (;;) {
    // Fails once neither the reply nor a sign of life (the NIC's alive
    // stamp, re-read each second) came for limit_ms: a NIC busy with other
    // clients' requests keeps stamping, a stopped or wedged one does not.
    const uint64_t last_sign = std::max(started, alive_stamp());
    const int64_t left = int64_t(last_sign + limit_ms) - int64_t(abi::monotonic_ms());
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, int(std::clamp<int64_t>(left, 0, 1000)));
    if (r > 0) return 0;  // a reply, or a hang-up that recv reports
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && left > 0) continue;
    // A stopped or wedged NIC (or a poll that failed). Its late reply would
    // answer the next request, so the device is failed from here on, as a
    // kernel driver does after a firmware command timeout. Shutting our
    // ends down wakes every waiter (CQ events see the hang-up, async events
    // DEVICE_FATAL), and the NIC reclaims our objects when it reads it.
    complain(std::string("device ") + device->dev.name + " showed no sign of life for " + std::to_string(limit_ms) +
             " ms (MRC_CMD_TIMEOUT_MS); treating it as failed");
    gone = true;
    shutdown(fd, SHUT_RDWR);
    if (events_fd >= 0) shutdown(events_fd, SHUT_RDWR);
    // An endpoint batch's ETIMEDOUT means "not every request answered",
    // which a controller may retry: a failed device must read otherwise.
    return r < 0 || rq.op == abi::Op::ctl_ep_send ? EIO : ETIMEDOUT;
  }
}

uint64_t Context::alive_stamp() const {
  uint64_t v = 0;
  // Read, not mapped: a NIC that truncated the file would raise SIGBUS here.
  if (alive_fd < 0 || pread(alive_fd, &v, sizeof v, 0) != ssize_t(sizeof v)) return 0;
  return v;
}

int Context::release(abi::Request& rq) {
  abi::Response rs{};
  const int e = call(rq, rs);
  return e && gone ? 0 : e;
}

int make_shared_memory(const char* name, size_t bytes, void*& p) {
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, off_t(bytes)) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

ibv_mr* Context::reg_mr(Pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (!addr || !length) {
    errno = EINVAL;
    return nullptr;
  }
  // Checked before any arithmetic or allocation sized by it: a wrapping
  // range or one the device can never hold is the caller's error.
  if (length > info.max_mr_size) {
    complain("cannot register " + std::to_string(length) + " bytes; the device allows " +
             std::to_string(info.max_mr_size));
    errno = EINVAL;
    return nullptr;
  }
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t start = a & ~(page - 1);
  uintptr_t last;
  if (__builtin_add_overflow(a, length - 1, &last) || last > UINTPTR_MAX - page) {
    complain("cannot register a region that wraps the end of the address space");
    errno = EINVAL;
    return nullptr;
  }
  const uintptr_t end = (last + page) & ~(page - 1);
  auto* m = new (std::nothrow) Mr;
  if (!m) {
    errno = ENOMEM;
    return nullptr;
  }
  // One registration at a time in the process: two threads remapping the
  // same page would leave a NIC on a memfd the program no longer maps.
  std::lock_guard<std::mutex> one_at_a_time(g_reg_mu);
  // As verbs' page pinning would: memory the program cannot read, or
  // cannot write when writes are asked for, is refused (copying it below
  // would fault, or remapping it would make it writable).
  const std::vector<Span> spans = mappings(start, end);
  if (spans.empty()) {
    complain("cannot register memory that is not mapped");
    delete m;
    errno = EFAULT;
    return nullptr;
  }
  const bool writes = access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  for (const Span& sp : spans)
    if (!(sp.prot & PROT_READ) || (writes && !(sp.prot & PROT_WRITE))) {
      complain(!(sp.prot & PROT_READ) ? "cannot register memory the program cannot read"
                                      : "cannot register read-only memory for local or remote writes");
      delete m;
      errno = EFAULT;
      return nullptr;
    }
  Backing* b = nullptr;
  for (auto& x : g_backings)
    if (x->start <= start && end <= x->end && backs(*x, spans)) b = x.get();
  if (!b)
    for (const Span& sp : spans)
      if (sp.ours) {
        complain(
            "cannot register a region that partly overlaps an earlier registration's pages; "
            "register the union once instead");
        delete m;
        errno = EINVAL;
        return nullptr;
      }
  Segment* seg = nullptr;
  if (b)
    for (Segment& sg : segments)
      if (sg.backing == b) seg = &sg;
  if (b && !seg && b->fd < 0) {
    complain(
        "these pages are registered through another context, and the descriptor that would share them "
        "was not kept (registrations already hold a quarter of RLIMIT_NOFILE); raise the limit");
    delete m;
    errno = EMFILE;
    return nullptr;
  }
  std::unique_ptr<Backing> fresh;
  if (!b) {
    // The NIC must see the program's own pages with no copy per packet:
    // move them onto a memfd both sides map, at the same address here.
    void* shadow = nullptr;
    const int fd = make_shared_memory("mrc-mr", end - start, shadow);
    if (fd < 0) {
      delete m;
      return nullptr;
    }
    std::memcpy(shadow, reinterpret_cast<void*>(start), end - start);
    munmap(shadow, end - start);
    struct stat st {};
    if (fstat(fd, &st) != 0 || mmap(reinterpret_cast<void*>(start), end - start, PROT_READ | PROT_WRITE,
                                    MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
      const int e = errno;
      close(fd);
      delete m;
      errno = e;
      return nullptr;
    }
    // The program keeps the protections it had (read-only, executable).
    for (const Span& sp : spans)
      if (sp.prot != (PROT_READ | PROT_WRITE)) mprotect(reinterpret_cast<void*>(sp.lo), sp.hi - sp.lo, sp.prot);
    // As ibv_fork_init would: a child must not share the NIC's view of
    // these pages (MAP_SHARED would otherwise pass them on).
    madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTFORK);
    fresh = std::make_unique<Backing>();
    fresh->start = start;
    fresh->end = end;
    fresh->ino = static_cast<unsigned long>(st.st_ino);
    fresh->fd = fd;
    b = fresh.get();
  }
  const uint32_t seg_id = seg ? seg->id : next_segment++;
  abi::Request rq{};
  rq.op = abi::Op::reg_mr;
  rq.reg_mr.pd = pd->handle;
  rq.reg_mr.access = access;
  rq.reg_mr.iova = iova;
  rq.reg_mr.length = length;
  rq.reg_mr.segment = seg_id;
  rq.reg_mr.offset = a - b->start;
  rq.reg_mr.new_segment_bytes = seg ? 0 : b->end - b->start;
  abi::Response rs{};
  const int err = call(rq, rs, seg ? nullptr : &b->fd, seg ? 0 : 1);
  if (err) {
    if (fresh) {  // as if never registered
      restore_private(*fresh);
      close(fresh->fd);
    }
    delete m;
    errno = err;
    return nullptr;
  }
  if (fresh) {
    if (g_kept_fds < kept_fd_budget()) {
      ++g_kept_fds;
    } else {
      close(fresh->fd);
      fresh->fd = -1;
    }
    g_backings.push_back(std::move(fresh));
  }
  if (!seg) {
    segments.push_back(Segment{b, seg_id, 0});
    seg = &segments.back();
  }
  ++seg->refs;
  ++b->refs;
  m->handle = rs.mr.handle;
  m->segment = seg->id;
  m->mr.context = verbs();
  m->mr.pd = &pd->pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.handle = rs.mr.handle;
  m->mr.lkey = rs.mr.lkey;
  m->mr.rkey = rs.mr.rkey;
  return &m->mr;
}

int Context::dereg_mr(Mr* m) {
  std::lock_guard<std::mutex> one_at_a_time(g_reg_mu);
  abi::Request rq{};
  rq.op = abi::Op::dereg_mr;
  rq.handle = m->handle;
  if (int e = release(rq); e) return fail(e);
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].id != m->segment) continue;
    Backing* b = segments[i].backing;
    if (--segments[i].refs == 0) segments.erase(segments.begin() + long(i));
    if (--b->refs == 0) {
      restore_private(*b);
      if (b->fd >= 0) {
        close(b->fd);
        --g_kept_fds;
      }
      std::erase_if(g_backings, [b](const std::unique_ptr<Backing>& x) { return x.get() == b; });
    }
    break;
  }
  delete m;
  return 0;
}

}  // namespace mrc::lib
