// Types shared by the protocol engine, its hosts (the DPDK NIC, the
// simulator, tests) and the host interface. No I/O and no clock here: time is
// a number the caller passes in.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "wire/ev.h"
#include "wire/packet.h"

namespace mrc::engine {

using Nanos = uint64_t;  // nanoseconds on the caller's clock
inline constexpr Nanos kNever = ~Nanos(0);

inline constexpr unsigned kMaxPlanes = 8;
// Path MTU bounds (QpAttr::pmtu); a packet's length is kept in 16 bits.
inline constexpr uint32_t kMinPmtu = 256, kMaxPmtu = 9000;
static_assert(kMaxPmtu <= UINT16_MAX);
// EVs a QP may have: probe ids above are loss probes' (engine_impl.h).
inline constexpr size_t kMaxEvsPerQp = 0x8000;

enum class Transport : uint8_t { mrc, rocev2 };

// QP states as in verbs.
enum class QpState : uint8_t { reset, init, rtr, rts, error };
std::string_view qp_state_name(QpState s);

// Work request opcodes a QP may be handed. Only the two WRITEs are MRC
// operations; the others exist so a bad request is refused by name.
enum class WrOpcode : uint8_t { rdma_write, rdma_write_with_imm, send, rdma_read, atomic };

// Completion status, numbered as ibv_wc_status where it matters.
enum class WcStatus : uint8_t {
  success = 0,
  loc_len_err = 1,
  loc_qp_op_err = 2,
  loc_prot_err = 4,
  wr_flush_err = 5,
  bad_resp_err = 7,
  loc_access_err = 8,
  rem_inv_req_err = 9,
  rem_access_err = 10,
  rem_op_err = 11,
  retry_exc_err = 12,
  fatal_err = 19,
};
std::string_view wc_status_name(WcStatus s);

enum class WcOpcode : uint8_t { rdma_write, recv_rdma_with_imm };

// Memory access flags, as the IBV_ACCESS_* bits.
enum Access : uint32_t {
  kAccessLocalWrite = 1 << 0,
  kAccessRemoteWrite = 1 << 1,
  kAccessRemoteRead = 1 << 2,
};

struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::rdma_write;
  bool signaled = true;
  uint64_t local_addr = 0;  // host virtual address inside the lkey's region
  uint32_t length = 0;
  uint32_t lkey = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;  // network order is the host's business; the engine carries 32 bits
};

struct RecvWr {
  uint64_t wr_id = 0;
};

struct Completion {
  uint64_t wr_id = 0;
  uint32_t qpn = 0;
  WcStatus status = WcStatus::success;
  WcOpcode opcode = WcOpcode::rdma_write;
  uint32_t byte_len = 0;
  uint32_t imm = 0;
  bool has_imm = false;
};

// Where a plane's packets come from and go to.
struct PlaneAddr {
  uint64_t mac = 0;
  wire::IpAddr ip;
};

// EV health. GOOD/ASSUMED_BAD/DENIED are the mrc_ctl states; SKIP is the
// datapath-only state for one rotation after a congestion mark.
enum class EvState : uint8_t { good, skip, assumed_bad, denied };
std::string_view ev_state_name(EvState s);

struct EvEntry {
  uint32_t value = 0;  // the 32-bit EV as it goes on the wire (UDP: low 16 bits)
  uint8_t plane = 0;
};

// An EV profile: the EVs a QP sprays over, each bound to a plane. The first
// `active_per_plane` EVs of each plane are used; the rest are backups that
// replace failed ones on the same plane.
struct EvProfile {
  wire::EvFormat format = wire::EvFormat::udp;
  std::vector<EvEntry> evs;
  uint32_t active_per_plane = 0;  // 0: all EVs are active
  uint32_t ev_min_active = 1;
};

// struct mrc_ctl_cc_nscc_cfg, same fields and units.
struct NsccConfig {
  bool disable_qa = false;
  uint32_t adjust_bytes_threshold = 8 * 4096;
  uint32_t adjust_period_threshold = 5000;  // ns
  uint32_t base_rtt = 5000;                 // ns
  float eta = 0.15f;                        // in MTUs
  float fi = 5.0f;                          // in MTUs
  float fi_scale = 0.25f;
  float gamma = 0.8f;
  float max_md_jump = 0.5f;
  uint32_t max_cwnd = 0;  // bytes; 0: 1.5 x BDP, the NIC rate (all planes) x base_rtt
  uint8_t qa_gate = 3;
  uint32_t qa_threshold = 0;  // ns; 0: 4 x target_delay
  uint32_t target_delay = 0;  // ns; 0: 0.75 x base_rtt, or base_rtt (EngineConfig::fabric_trims)
};

// DCQCN parameters for the RoCEv2 baseline (rate based, ns and Gb/s).
struct DcqcnConfig {
  double line_rate_gbps = 100.0;
  double min_rate_gbps = 0.1;
  double g = 1.0 / 256;
  double rai_gbps = 0.04;  // additive increase
  double rhai_gbps = 0.2;  // hyper increase
  Nanos alpha_period = 55000;
  Nanos rate_period = 55000;
  uint64_t byte_counter = 10 * 1024 * 1024;
  uint32_t fast_recovery_rounds = 5;
  Nanos cnp_interval = 50000;  // receiver: at most one CNP per QP per interval
};

enum class CcAlgo : uint8_t { none, nscc, dcqcn };

struct CcProfile {
  CcAlgo algo = CcAlgo::nscc;
  NsccConfig nscc;
  DcqcnConfig dcqcn;
  uint32_t fixed_window_bytes = 1 << 20;  // for CcAlgo::none
};

}  // namespace mrc::engine
