// lib_mrc.so's objects: what sits behind the verbs and mrc handles a
// program holds for an mrc-nic device.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "host/abi.h"
#include "mrc.h"

#define MRC_EXPORT extern "C" __attribute__((visibility("default")))

struct mrc_context;
struct mrc_comp_channel;
struct mrc_cq;

namespace mrc::lib {

namespace abi = host::abi;

// Holds a CQ's or queue's spin lock (an atomic_flag) for a scope.
struct SpinGuard {
  std::atomic_flag& f;
  explicit SpinGuard(std::atomic_flag& flag) : f(flag) {
    while (f.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinGuard() { f.clear(std::memory_order_release); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;
};

// Sets errno and returns the value verbs-style calls return on failure.
int fail(int err);
// Prints why a call failed (MRC_QUIET=1 silences it).
void complain(const std::string& what);
// How long a control call waits without a reply or a sign of life from the
// device: MRC_CMD_TIMEOUT_MS, 60 s by default; 0 waits for ever.
uint64_t command_timeout_ms();

struct Device {
  ibv_device dev{};  // first: programs hold &dev
  std::string socket_path;  // under the device list's lock: a new listing may move it
};

// Devices by name, created once and kept for the process's life (verbs
// programs may hold device pointers after freeing the list).
Device* find_or_add_device(const std::string& name, const std::string& socket_path);
Device* as_device(ibv_device* d);
// A copy of d's socket path, taken under the lock find_or_add_device
// rewrites it under.
std::string socket_path_of(const Device* d);

class Context;

struct Pd {
  ibv_pd pd{};  // first
  uint32_t handle = 0;
};

struct Mr {
  ibv_mr mr{};  // first
  uint32_t handle = 0;
  uint32_t segment = 0;
};

// A page-aligned stretch of the program's memory now backed by a memfd the
// NICs map too (registration remaps it in place); one per stretch in the
// process, however many contexts register it (device.cc).
struct Backing;

// A Backing as one context's NIC knows it: the id it maps it under.
struct Segment {
  Backing* backing = nullptr;
  uint32_t id = 0;
  uint32_t refs = 0;  // this context's MRs over it
};

// What a program's ibv_context points into: libibverbs' inline wrappers
// find the extended ops in front of it.
struct ContextShell {
  verbs_context vctx;
  Context* self;
};

// A verbs context on one mrc-nic device: the control connection and every
// object created through it.
class Context {
 public:
  ContextShell* shell = nullptr;  // programs hold &shell->vctx.context
  ibv_context* verbs() { return &shell->vctx.context; }
  Device* device = nullptr;
  abi::DeviceInfo info{};
  int fd = -1;         // control socket
  int events_fd = -1;  // async events
  // The program called mrc_ctl_query_device_ex(): it is a control API 1.0.1
  // program, whose EV events are 56 bytes with a state; otherwise they may be
  // 48 (ctl.cc, mrc_ctl_poll_ev_event).
  std::atomic<bool> ctl_v101{false};

  static Context* from(ibv_context* c);  // null when not ours
  // Verbs ports are the planes, as the control API numbers them: port n is
  // plane n - 1. They share one GID table, and a QP sprays over all of them
  // whichever it names.
  bool is_port(uint8_t port) const { return port >= 1 && port <= info.num_planes; }
  static Context* open(Device* d);
  ~Context();

  // One request and its response; returns 0 or an errno value (and says why).
  int call(abi::Request& rq, abi::Response& rs, const int* fds = nullptr, int nfds = 0,
           std::span<const uint8_t> payload = {}, std::vector<uint8_t>* reply = nullptr);
  // For destroy requests: 0 also when the device has gone away, since a
  // dead NIC holds nothing of ours and the program must still free its
  // side of the object.
  int release(abi::Request& rq);
  std::atomic<bool> gone{false};  // the control connection broke, or the device stopped answering
  // The open ibv_context, its PDs and its mrc_contexts each hold one: the
  // last to go frees the context. ibv_close_device with PDs still
  // allocated succeeds, as in verbs, and they stay usable until freed.
  std::atomic<uint32_t> users{1};
  std::atomic<bool> closed{false};
  void unref() {
    if (users.fetch_sub(1) == 1) delete this;
  }

  // Waits for the reply to rq while the NIC shows signs of life; past the
  // command timeout without one, fails the device: ETIMEDOUT (EIO for an
  // endpoint batch, whose ETIMEDOUT means something else).
  int await_reply(const abi::Request& rq);
  uint64_t alive_stamp() const;  // the NIC's last sign of life, abi::monotonic_ms(); 0: none
  int alive_fd = -1;

  ibv_mr* reg_mr(Pd* pd, void* addr, size_t length, uint64_t iova, unsigned access);
  int dereg_mr(Mr* mr);

  std::mutex mu;                  // control calls
  std::vector<uint8_t> rx;        // response buffer (under mu)
  std::vector<Segment> segments;  // under the process's registration lock (device.cc)
  uint32_t next_segment = 1;
  std::map<uint32_t, mrc_qp*> qps;  // by handle, for async events
  std::mutex qpn_mu;                     // held briefly: create, destroy, a CQ's cache miss
  std::map<uint32_t, mrc_qp*> qp_by_qpn;  // for polled send completions
  std::map<uint32_t, mrc_cq*> cqs;
  alignas(8) unsigned char nscc_out[64];  // what mrc_ctl_query_cc_profile points cc_config at
};

// A CQ whose ring the NIC writes (ev_events: mrc_ctl EV events); registered
// with the device and the channel. Null with errno on failure.
mrc_cq* open_ring_cq(mrc_context* m, uint32_t depth, bool ev_events, void* cq_context, mrc_comp_channel* channel);

// Maps a fresh memfd of `bytes`, sealed so it can neither shrink nor grow;
// returns the fd (or -1, errno set) and the mapping in `p`.
int make_shared_memory(const char* name, size_t bytes, void*& p);

}  // namespace mrc::lib

// The mrc.h handles.
struct mrc_context {
  mrc::lib::Context* ctx;
  uint32_t api_version;
  uint32_t vendor_api_version;
  // Channels, CQs, QPs and hints created through it: each points back at
  // it, so it outlives them.
  std::atomic<uint32_t> users{0};
};

struct mrc_comp_channel {
  mrc_context* mctx;
  int efd;      // ours: readable while an event waits
  int nic_end;  // the socketpair's other end, handed to the NIC with each CQ
  std::mutex mu;
  std::vector<mrc_cq*> cqs;
};

struct mrc_cq {
  mrc_context* mctx;
  uint32_t handle;
  uint32_t depth;
  void* mem;
  size_t mem_bytes;
  mrc::host::abi::QueueHeader* hdr;
  mrc::host::abi::Cqe* ring;
  uint32_t cons;
  uint32_t arm_sn;
  uint32_t seen_fired;
  void* cq_context;
  mrc_comp_channel* channel;
  std::atomic<uint32_t> events_delivered;
  std::atomic<uint32_t> events_acked;
  std::mutex ack_mu;  // with ack_cv: mrc_destroy_cq waits for acks
  std::condition_variable ack_cv;
  std::atomic_flag lock = ATOMIC_FLAG_INIT;
  bool ev_events = false;  // an mrc_ctl EV event CQ
  mrc_qp* last_qp = nullptr;  // the QP of the last send completion (most CQs serve one)
};

struct mrc_qp_hint {
  mrc_context* mctx;
  mrc_qp_hint_attr attr;
  std::atomic<uint32_t> users;
};

struct mrc_qp {
  mrc_context* mctx;
  uint32_t handle;
  uint32_t qpn;
  mrc_qp_init_attr init;
  void* mem;
  size_t mem_bytes;
  mrc::host::abi::QueueHeader* sq_hdr;
  mrc::host::abi::Sqe* sq;
  uint32_t sq_depth, sq_prod;
  std::atomic<uint32_t> sq_done;  // SQ slots before this are free (completions polled)
  // The send CQ's producer index at creation: entries before it are an
  // earlier QP's that had this QPN, and retire nothing of ours.
  uint32_t scq_start;
  mrc::host::abi::QueueHeader* rq_hdr;
  mrc::host::abi::Rqe* rq;
  uint32_t rq_depth, rq_prod;
  std::atomic<uint32_t> state;  // enum ibv_qp_state, as last set through us
  std::atomic_flag sq_lock = ATOMIC_FLAG_INIT;
  std::atomic_flag rq_lock = ATOMIC_FLAG_INIT;
  mrc_qp_hint* hint;
  mrc_qp_attr mrc_attr;  // what was last set (for query)
};
