// The host interface ABI between lib_mrc.so (the client) and mrc-nic (the
// device): control messages over a Unix SOCK_SEQPACKET socket, and queues in
// client memory that the NIC's lcores poll.
//
// Bootstrap: the client connects to <run dir>/<device>.sock and sends Hello.
// Every later object (CQ, QP, memory segment) arrives as a request carrying
// its memfd via SCM_RIGHTS. Memfds must be sealed against shrinking, so the
// NIC's mappings can never fault. The NIC copies every entry out of client
// memory before using it and never trusts a value it reads there: indices
// are bounded by the depth fixed at creation.
//
// Bump kAbiVersion on any change to a layout here.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <time.h>

namespace mrc::host::abi {

inline constexpr uint32_t kAbiVersion = 5;
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kPage = 4096;
inline constexpr uint32_t kMaxPlanes = 16;
inline constexpr uint32_t kDeviceNameLen = 32;
// Two GIDs (RoCE v1 and v2) per address, after the two link-local ones: the
// layout of common RoCE NICs, so index 3 is plane 0's RoCEv2 IPv4 GID.
inline constexpr uint32_t kGidTableLen = 2 + 2 * kMaxPlanes;

// Producer and consumer indices live on their own cache lines; they count
// entries forever (wrapping at 2^32) and index the ring modulo its depth.
struct QueueHeader {
  alignas(kCacheLine) uint32_t prod;
  // SQs: the NIC's intake; the client frees slots only as completions are
  // polled (Cqe::wqe_index).
  alignas(kCacheLine) uint32_t cons;
  // CQs: the client bumps arm_sn to ask for one event (req_notify_cq); the
  // NIC copies it into fired_sn when it signals the channel.
  alignas(kCacheLine) uint32_t arm_sn;
  uint32_t arm_solicited;
  alignas(kCacheLine) uint32_t fired_sn;
  // Set by the NIC (never read back): a CQ overflowed, or a QP went to ERROR.
  alignas(kCacheLine) uint32_t error;
};
static_assert(sizeof(QueueHeader) == 5 * kCacheLine);
inline constexpr size_t kQueueHeaderBytes = sizeof(QueueHeader);

enum SqeOpcode : uint8_t { kSqeWrite = 0, kSqeWriteImm = 1 };
enum SqeFlags : uint8_t { kSqeSignaled = 1 };

struct Sqe {
  uint64_t wr_id;
  uint64_t local_addr;
  uint64_t remote_addr;
  uint32_t length;
  uint32_t lkey;
  uint32_t rkey;
  uint32_t imm;  // as the application gave it (network order by convention)
  uint8_t opcode;
  uint8_t flags;
  uint8_t reserved[22];
};
static_assert(sizeof(Sqe) == 64);

struct Rqe {
  uint64_t wr_id;
  uint64_t reserved;
};
static_assert(sizeof(Rqe) == 16);

enum CqeOpcode : uint8_t { kCqeWrite = 0, kCqeRecvWriteImm = 1 };
enum CqeFlags : uint8_t { kCqeWithImm = 1 };

struct Cqe {
  uint64_t wr_id;
  uint32_t qp_num;
  uint32_t byte_len;
  uint32_t imm;
  uint8_t status;  // enum ibv_wc_status values
  uint8_t opcode;
  uint8_t flags;
  uint8_t reserved;
  uint32_t vendor_err;
  // Send completions: the SQ position of the WR (Sqe number, counting from 0).
  // Polling it frees that slot and every earlier one, as verbs providers do.
  uint32_t wqe_index;
};
static_assert(sizeof(Cqe) == 32);

// Byte sizes of queue memory. A QP's memfd holds its SQ, then its RQ at the
// next page.
constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
constexpr size_t queue_bytes(uint32_t depth, size_t entry) {
  return round_up(kQueueHeaderBytes + size_t(depth) * entry, kPage);
}
constexpr size_t cq_bytes(uint32_t depth) { return queue_bytes(depth, sizeof(Cqe)); }
constexpr size_t qp_sq_bytes(uint32_t sq_depth) { return queue_bytes(sq_depth, sizeof(Sqe)); }
constexpr size_t qp_bytes(uint32_t sq_depth, uint32_t rq_depth) {
  return qp_sq_bytes(sq_depth) + queue_bytes(rq_depth, sizeof(Rqe));
}
template <typename Entry>
Entry* entries(void* queue) {
  return reinterpret_cast<Entry*>(static_cast<uint8_t*>(queue) + kQueueHeaderBytes);
}

// Shared-memory index access: acquire when reading the other side's index,
// release when publishing ours.
inline uint32_t load_acquire(const uint32_t& v) {
  return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(v)).load(std::memory_order_acquire);
}
inline void store_release(uint32_t& v, uint32_t x) {
  std::atomic_ref<uint32_t>(v).store(x, std::memory_order_release);
}

// ---------------------------------------------------------------------------
// Control messages (fixed size; one request, one response).

enum class Op : uint32_t {
  hello = 1,
  query_port,
  alloc_pd,
  dealloc_pd,
  reg_mr,  // + the segment's memfd when new_segment_bytes != 0
  dereg_mr,
  create_cq,  // + the ring memfd, + an eventfd when with_channel
  destroy_cq,
  create_qp,  // + the ring memfd
  modify_qp,
  query_qp,
  destroy_qp,
  events,  // on a second connection: makes it this client's async event stream
  // Controller (mrc_ctl.h) requests: refused with EPERM unless the client
  // process holds CAP_NET_ADMIN.
  ctl_query,      // -> CtlDevice (anyone)
  ctl_port,       // CtlPort
  ctl_get_fmt,    // handle = profile id (low 32 bits) -> CtlFmt
  ctl_put_fmt,    // CtlFmt
  ctl_get_ev,     // -> CtlEv + CtlEvEntry[] as payload
  ctl_put_ev,     // CtlEv + CtlEvEntry[] as payload
  ctl_get_cc,     // -> CtlCc
  ctl_put_cc,     // CtlCc
  ctl_event_cq,   // + ring memfd (CtlEvent entries) + eventfd when with_channel
  ctl_ep_send,    // CtlEpBatch + CtlEpReq[] -> CtlEpRsp[] as payload
};

struct Hello {
  uint32_t abi_version;
  uint32_t pid;
};

struct DeviceInfo {
  uint32_t abi_version;
  char name[kDeviceNameLen];
  uint64_t node_guid;
  uint32_t num_planes;
  uint32_t mtu;  // bytes
  uint32_t gid_count;
  uint8_t gids[kGidTableLen][16];
  uint32_t max_qp, max_cq, max_mr, max_pd;
  uint32_t max_sq_depth, max_rq_depth, max_cq_depth;
  uint64_t max_mr_size;
  uint16_t max_wimm, max_wimm_dest;
  uint8_t max_mpr, mpr_resolution;
  uint8_t transport;  // 0 mrc, 1 roce
  uint8_t reserved;
  uint64_t events_token;  // proves the events connection belongs to this client
};

// Beside each device's socket, <device>.alive: 8 bytes the NIC's control
// thread keeps stamping with monotonic_ms() while it works (every 100 ms
// when idle, and inside its long waits: ARP/ND, endpoint answers). A client
// whose request goes unanswered fails the device only once the stamp has
// stood still for its whole command timeout: a NIC busy with other clients'
// requests is not mistaken for a stopped or wedged one.
inline constexpr const char* kAliveSuffix = ".alive";
inline uint64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

struct PortInfo {
  uint32_t active;  // some plane's link is up
  uint32_t mtu;
  uint32_t planes_up;  // bitmap
};

struct RegMr {
  uint32_t pd;
  uint32_t access;  // IBV_ACCESS_* bits
  uint64_t iova;
  uint64_t length;
  uint32_t segment;  // client's id for the memfd mapping
  uint32_t reserved;
  uint64_t offset;             // of the region's first byte within the segment
  uint64_t new_segment_bytes;  // non-zero: the memfd comes with this request
};

struct MrKeys {
  uint32_t handle;
  uint32_t lkey;
  uint32_t rkey;
};

struct CreateCq {
  uint32_t depth;  // a power of two
  uint32_t with_channel;
};

struct CreateQp {
  uint32_t pd;
  uint32_t send_cq, recv_cq;
  uint32_t sq_depth, rq_depth;  // powers of two
  uint32_t sq_sig_all;
};

struct QpCreated {
  uint32_t handle;
  uint32_t qpn;
};

// The subset of ibv_qp_attr / mrc_qp_attr the device understands, with
// which fields are present.
enum ModifyMask : uint32_t {
  kModState = 1 << 0,
  kModCurState = 1 << 1,
  kModPmtu = 1 << 2,
  kModSqPsn = 1 << 3,
  kModRqPsn = 1 << 4,
  kModDestQpn = 1 << 5,
  kModDgid = 1 << 6,
  kModTimeout = 1 << 7,
  kModRetry = 1 << 8,
  kModMpr = 1 << 9,
  kModMprDest = 1 << 10,
  kModWimm = 1 << 11,
  kModWimmDest = 1 << 12,
  kModEvProfile = 1 << 13,
  kModCcProfile = 1 << 14,
  kModAccess = 1 << 15,
};

// QP states use enum ibv_qp_state values.
struct QpAttrs {
  uint32_t mask;
  uint32_t state, cur_state;
  uint32_t pmtu;  // bytes
  uint32_t sq_psn, rq_psn, dest_qpn;
  uint8_t dgid[16];
  uint32_t sgid_index;
  uint32_t access;
  uint8_t timeout, retry_linear, retry_exp, mpr, mpr_dest, reserved[3];
  uint16_t max_wimm, max_wimm_dest;
  uint64_t ev_profile, cc_profile;
};

// --- controller records. Profile states, modes and EV states use the
// mrc_ctl.h enum values.

struct CtlDevice {
  uint32_t num_planes;
  uint32_t ev_max_fmt_profiles, ev_max_profiles, ev_max_count, ev_free_count, ev_max_count_profile;
  uint32_t ev_count_align, ev_max_width_udp, ev_max_width_stev, ev_fmt_mode_mask, ev_mode_mask;
  uint32_t cc_max_profiles;
  uint32_t opt_attr;
  uint32_t privileged;  // whether this client may call the mutating ones
};

struct CtlPort {
  uint32_t port;  // 1-based: plane port - 1
  uint32_t set;   // 0: query
  uint32_t enabled;
};

inline constexpr uint32_t kCtlMaxFields = 16;

// Profiles are read, changed by the library and written back whole. Each
// carries the generation it was read at (0: it did not exist); the NIC takes
// a write only at the profile's current generation and answers ESTALE
// otherwise (the library reads again and retries), so two controllers'
// changes cannot overwrite each other.
struct CtlFmt {
  uint64_t id;
  uint32_t state, mode, nfields;
  uint8_t widths[kCtlMaxFields];
  uint32_t generation;
};

struct CtlField {
  uint32_t width, init_val, min_val, max_val, mask;
};

struct CtlEv {
  uint64_t id;
  uint32_t state, mode;
  uint64_t fmt_id;
  uint32_t count, min_active;
  int32_t event_mask;
  uint32_t nfields;
  CtlField fields[kCtlMaxFields];
  uint32_t nentries;  // CtlEvEntry records follow the request/response
  uint32_t generation;
};

struct CtlEvEntry {
  uint8_t val[32];
  uint8_t port;  // 0: unpopulated
  uint8_t reserved[3];
  uint32_t state;  // MRC_CTL_EV_GOOD / ASSUMED_BAD / DENIED
};

struct CtlNscc {
  uint32_t disable_qa, adjust_bytes_threshold, adjust_period_threshold, base_rtt;
  float eta, fi, fi_scale, gamma, max_md_jump;
  uint32_t max_cwnd, qa_gate, qa_threshold, target_delay;
};

struct CtlCc {
  uint64_t id;
  uint32_t state;
  char algorithm[32];  // empty: none
  uint32_t has_config;
  CtlNscc nscc;
  uint32_t generation;
};

struct CtlEventCq {
  uint32_t depth;
  uint32_t with_channel;
};

// An EV event as the ring carries it.
struct CtlEvent {
  uint64_t profile_id;
  uint8_t val[32];
  uint8_t port;
  uint8_t reserved[3];
  uint32_t drop_count;
  uint32_t state;
  uint32_t reserved2;
};
static_assert(sizeof(CtlEvent) == 56);

struct CtlEpBatch {
  uint32_t op;  // wire::EndpointOp
  uint32_t count;
  uint32_t timeout_ns;
  uint32_t tc;
};

struct CtlEpReq {
  uint32_t req_id;
  uint8_t dgid[16];
  uint8_t ev[32];
  uint32_t port;  // 1-based
  uint32_t fmt_mode;
  uint32_t port_status;
};

struct CtlEpRsp {
  uint32_t req_id;
  uint32_t port;
  uint32_t rtt_ns;
};

inline constexpr uint32_t kCtlMaxEvs = 4096;
inline constexpr size_t kMaxPayload = kCtlMaxEvs * sizeof(CtlEvEntry);

struct Request {
  Op op;
  uint32_t handle;  // the object a destroy/modify/query names
  union {
    Hello hello;
    RegMr reg_mr;
    CreateCq create_cq;
    CreateQp create_qp;
    QpAttrs modify_qp;
    uint64_t events_token;
    CtlPort ctl_port;
    CtlFmt ctl_fmt;
    CtlEv ctl_ev;
    CtlCc ctl_cc;
    CtlEventCq ctl_event_cq;
    CtlEpBatch ctl_ep;
    uint64_t profile_id;
  };
  uint32_t payload_len;  // bytes after this struct in the same message
  uint32_t reserved;
};

struct Response {
  int32_t err;  // 0 or an errno value
  uint32_t reserved;
  union {
    DeviceInfo device;
    PortInfo port;
    uint32_t handle;
    MrKeys mr;
    QpCreated qp;
    QpAttrs qp_attrs;
    CtlDevice ctl_device;
    CtlPort ctl_port;
    CtlFmt ctl_fmt;
    CtlEv ctl_ev;
    CtlCc ctl_cc;
  };
  char message[160];  // why err, for the client to print
  uint32_t payload_len;  // bytes after this struct in the same message
  uint32_t reserved_tail;
};

// Async events pushed on the events connection; types are enum
// ibv_event_type values.
struct Event {
  uint32_t type;
  uint32_t kind;  // 0 QP (handle), 1 CQ (handle), 2 port, 3 device
  uint32_t handle;
  uint32_t reserved;
};

// Where devices' sockets live: $MRC_RUN_DIR, else /tmp/mrcnic-<uid>.
inline std::string run_dir(uint32_t uid) {
  if (const char* d = std::getenv("MRC_RUN_DIR"); d && *d) return d;
  return "/tmp/mrcnic-" + std::to_string(uid);
}

}  // namespace mrc::host::abi
