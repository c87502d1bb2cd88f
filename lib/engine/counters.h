// Every event and drop reason the engine counts, one table per scope. The
// tables generate the enums and the name lists, so telemetry, the CLI and
// tests can never disagree on a counter's name.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "wire/packet.h"

namespace mrc::engine {

// Device-wide: frames that never reached a QP.
#define MRC_DEV_COUNTERS(X)                                                   \
  X(rx_frames, "frames handed to the engine")                                 \
  X(rx_drop_not_ours, "IP destination is not one of this device's addresses") \
  X(rx_drop_bad_plane, "frame arrived on a plane index the device lacks")     \
  X(rx_drop_unknown_qp, "destination QP does not exist")                      \
  X(rx_drop_wrong_transport, "opcode of the other transport (MRC vs RoCEv2)") \
  X(rx_trimmed, "trimmed frames (payload cut by a switch)")                   \
  X(rx_endpoint_requests, "endpoint requests (probes, port status) received") \
  X(rx_drop_bad_endpoint_op, "endpoint request with an unknown op")           \
  X(tx_endpoint_responses, "endpoint responses sent")                         \
  X(tx_port_status, "port status updates sent")                               \
  X(tx_drop_no_buffer, "frames not sent because the host gave no buffer")

// Per QP.
#define MRC_QP_COUNTERS(X)                                                                \
  X(tx_data_pkts, "data packets sent, first transmissions")                               \
  X(tx_data_bytes, "payload bytes sent, first transmissions")                             \
  X(tx_retransmits, "data packets sent again")                                            \
  X(rtx_sack, "retransmissions caused by SACK holes")                                     \
  X(rtx_nack, "retransmissions caused by NACKs")                                          \
  X(rtx_rto, "retransmissions caused by the retransmit timeout")                          \
  X(rtx_go_back_n, "RoCEv2 go-back-N retransmissions")                                    \
  X(tx_tail_probes, "loss probes after a flight's last packet")                           \
  X(rtx_spurious, "resends answered for the first copy (late, not lost)")                 \
  X(rtx_plane_down, "resends of packets in flight on a plane that went down")             \
  X(rto_fired, "retransmit timeouts")                                                     \
  X(tx_acks, "ACK/SACK packets sent")                                                     \
  X(tx_nacks, "NACK packets sent")                                                        \
  X(tx_probes, "probes sent: EV and loss probes")                                         \
  X(tx_cnps, "congestion notification packets sent")                                      \
  X(tx_blocked_no_room, "sends deferred because no plane had TX room")                    \
  X(tx_drop_no_buffer, "packets not sent because the host gave no buffer")                \
  X(rx_data_pkts, "data packets received and placed")                                     \
  X(rx_data_bytes, "payload bytes placed")                                                \
  X(rx_dup_pkts, "duplicate data packets (not placed again)")                             \
  X(rx_ooo_pkts, "data packets received out of order")                                    \
  X(rx_ecn_marked, "data packets received with ECN CE")                                   \
  X(rx_trimmed, "trimmed data packets received (NACKed)")                                 \
  X(rx_acks, "ACK/SACK packets received")                                                 \
  X(rx_nacks, "NACK packets received")                                                    \
  X(rx_probes, "reliability probes received")                                             \
  X(rx_probe_replies, "probe replies received")                                           \
  X(rx_cnps, "congestion notification packets received")                                  \
  X(rx_drop_psn_oor, "data packets outside the responder window (NACKed)")                \
  X(rx_drop_seq_err, "RoCEv2 data packets out of sequence (NAKed)")                       \
  X(rx_drop_bad_rkey, "data packets naming an unknown rkey")                              \
  X(rx_drop_no_access, "data packets to a region without remote write access")            \
  X(rx_drop_out_of_bounds, "data packets outside the region or the message")              \
  X(rx_drop_wimm_overflow, "WRITE_IMM beyond max_wimm_dest in flight")                    \
  X(rx_drop_no_recv_wqe, "WRITE_IMM with no posted receive")                              \
  X(rx_drop_bad_state, "packets for a QP not in a state to take them")                    \
  X(rx_drop_stale_ack, "ACKs naming PSNs not outstanding")                                \
  X(rx_nack_stale, "trim NACKs for a copy already resent or queued to be")                \
  X(rx_drop_bad_msg, "data packets inconsistent with their message")                      \
  X(wqe_bad_opcode, "work requests of an opcode MRC does not support")                    \
  X(wqe_bad_lkey, "work requests naming an unknown lkey or one of another PD")            \
  X(wqe_bad_length, "work requests reaching outside their local region")                  \
  X(wqe_sq_full, "work requests refused because the send queue was full")                 \
  X(completions, "completions delivered")                                                 \
  X(completions_error, "completions with an error status")                                \
  X(imm_delivered, "WRITE_IMM completions delivered at the responder")                    \
  X(retry_exceeded, "QP moved to ERROR after its retry budget ran out")                   \
  X(remote_errors, "QP moved to ERROR by a NAK from the responder")                       \
  X(ev_marked_bad, "EVs moved to ASSUMED_BAD")                                            \
  X(ev_recovered, "EVs moved back to GOOD by a probe")                                    \
  X(ev_probe_confirming, "probe answers that left an EV out, awaiting more in a row")     \
  X(rx_probe_replies_unmatched, "probe replies beyond one per probe (confirmations > 1)") \
  X(ev_loss_disproved, "EVs back to GOOD: a packet of theirs declared lost arrived")      \
  X(peer_plane_up_by_probe, "planes the peer reported down, answering probes again")      \
  X(probes_parked, "EVs no longer probed by an idle QP (EngineConfig::idle_probe_limit)") \
  X(ev_min_active_kept, "EV failures ignored to keep ev_min_active EVs")                  \
  X(plane_silent, "planes taken out of spraying after consecutive losses")                \
  X(plane_silent_disproved, "swept planes back: a packet sent after the losses arrived")  \
  X(plane_sweep_probed_back, "swept planes back: one of their EVs answered its probes")

// Per EV of a QP.
#define MRC_EV_COUNTERS(X)                           \
  X(tx_pkts, "data packets sent on this EV")         \
  X(rtx_pkts, "retransmissions sent on this EV")     \
  X(acks, "SACKs that reflected this EV")            \
  X(ecn_marks, "SACKs reporting ECN on this EV")     \
  X(trims, "trim NACKs for packets sent on this EV") \
  X(losses, "packets sent on this EV declared lost") \
  X(probes, "probes sent on this EV")                \
  X(probe_replies, "probe replies for this EV")      \
  X(state_changes, "state transitions of this EV")

// Every parse error (wire::MRC_PARSE_ERRORS) is also a device counter,
// named rx_drop_<reason>, generated from the same table.
#define MRC_X_ENUM(name, ...) name,
#define MRC_X_PARSE_ENUM(name, help) rx_drop_##name,
enum class DevCtr : uint16_t { MRC_DEV_COUNTERS(MRC_X_ENUM) MRC_PARSE_ERRORS(MRC_X_PARSE_ENUM) count };
#undef MRC_X_PARSE_ENUM
enum class QpCtr : uint16_t { MRC_QP_COUNTERS(MRC_X_ENUM) count };
enum class EvCtr : uint16_t { MRC_EV_COUNTERS(MRC_X_ENUM) count };
#undef MRC_X_ENUM

#define MRC_X_NAME(name, ...) #name,
#define MRC_X_PARSE_NAME(name, help) "rx_drop_" #name,
inline constexpr std::array<std::string_view, size_t(DevCtr::count)> kDevCtrNames = {
    MRC_DEV_COUNTERS(MRC_X_NAME) MRC_PARSE_ERRORS(MRC_X_PARSE_NAME)};
#undef MRC_X_PARSE_NAME
inline constexpr std::array<std::string_view, size_t(QpCtr::count)> kQpCtrNames = {MRC_QP_COUNTERS(MRC_X_NAME)};
inline constexpr std::array<std::string_view, size_t(EvCtr::count)> kEvCtrNames = {MRC_EV_COUNTERS(MRC_X_NAME)};
#undef MRC_X_NAME

// parse_error_counter relies on the parse counters closing the enum in
// MRC_PARSE_ERRORS order, right after ParseError::ok.
static_assert(size_t(DevCtr::count) - size_t(DevCtr::rx_drop_truncated_eth) == wire::kParseErrorCount - 1);

inline DevCtr parse_error_counter(wire::ParseError e) {
  return static_cast<DevCtr>(size_t(DevCtr::rx_drop_truncated_eth) + size_t(e) - 1);
}

template <class E>
struct Counters {
  std::array<uint64_t, size_t(E::count)> v{};
  void inc(E c, uint64_t n = 1) { v[size_t(c)] += n; }
  uint64_t operator[](E c) const { return v[size_t(c)]; }
  Counters& operator+=(const Counters& o) {
    for (size_t i = 0; i < v.size(); ++i) v[i] += o.v[i];
    return *this;
  }
};

}  // namespace mrc::engine
