// Every MRC/RoCEv2 wire constant lives in this file, so that a correction
// from the OCP MRC 1.0 PDF is a one-line change here and nowhere else.
//
// Provenance tags follow ../shared/mrc/spec-notes.md:
//   [P] primary (IBTA via Linux rxe, OCP API headers)
//   [S] secondary reconstruction of the MRC spec tables; verify against the PDF
//   [R] our own choice where no source gives a layout
#pragma once

#include <cstdint>

namespace mrc::wire {

// ---------------------------------------------------------------------------
// Encapsulation [P]
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86DD;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint16_t kRoceUdpPort = 4791;
inline constexpr uint16_t kDefaultPkey = 0xFFFF;
inline constexpr uint8_t kDefaultTtl = 64;

inline constexpr unsigned kEthLen = 14;
inline constexpr unsigned kVlanTagLen = 4;
inline constexpr unsigned kIpv4Len = 20;  // no options: RoCEv2 never sends them
inline constexpr unsigned kIpv6Len = 40;
inline constexpr unsigned kUdpLen = 8;
inline constexpr unsigned kIcrcLen = 4;

// The ICRC seed is the CRC register after the 8-byte masked LRH of
// InfiniBand (all ones), which RoCEv2 frames do not carry. [P rxe_icrc.c]
inline constexpr uint32_t kIcrcSeed = 0xDEBB20E3;

// ---------------------------------------------------------------------------
// Field tables. Each header is a list of X(name, byte_offset, byte_count,
// shift, mask): value = (big-endian load of byte_count bytes >> shift) & mask.
// headers.h turns each table into a zero-copy view with getters and setters.

// BTH, 12 B. IBTA layout [P]; MRC's RTX and TS flags sit in byte 8's
// reserved bits [S: bit 5 RTX, bit 4 TS].
#define MRC_BTH_FIELDS(X)       \
  X(opcode, 0, 1, 0, 0xFF)      \
  X(solicited, 1, 1, 7, 0x1)    \
  X(migreq, 1, 1, 6, 0x1)       \
  X(pad_count, 1, 1, 4, 0x3)    \
  X(tver, 1, 1, 0, 0xF)         \
  X(pkey, 2, 2, 0, 0xFFFF)      \
  X(resv8a, 4, 1, 0, 0xFF)      \
  X(fecn, 4, 1, 7, 0x1)         \
  X(becn, 4, 1, 6, 0x1)         \
  X(dest_qp, 5, 3, 0, 0xFFFFFF) \
  X(ack_req, 8, 1, 7, 0x1)      \
  X(rtx, 8, 1, 5, 0x1)          \
  X(ts_present, 8, 1, 4, 0x1)   \
  X(psn, 9, 3, 0, 0xFFFFFF)
inline constexpr unsigned kBthLen = 12;
inline constexpr unsigned kBthResv8aOffset = 4;  // masked (0xFF) in the ICRC
inline constexpr uint8_t kBthTver = 0;

// METH, 4 B [S]: responder MSN of WRITE_IMMs and the message sequence number.
#define MRC_METH_FIELDS(X)   \
  X(rq_msn, 0, 2, 0, 0xFFFF) \
  X(msn, 2, 2, 0, 0xFFFF)
inline constexpr unsigned kMethLen = 4;

// TSETH, 4 B [S]: 16-bit send timestamp in kTsethUnitNs units.
#define MRC_TSETH_FIELDS(X)        \
  X(tx_timestamp, 0, 2, 0, 0xFFFF) \
  X(tsr, 2, 2, 15, 0x1)            \
  X(format_type, 2, 2, 0, 0xF)
inline constexpr unsigned kTsethLen = 4;
inline constexpr uint8_t kTsethFormatType = 1;
inline constexpr unsigned kTsethUnitNs = 128;  // [S ns-3 model; UEC rounds base_rtt to 128 ns]

// RETH, 16 B [P].
#define MRC_RETH_FIELDS(X)              \
  X(va, 0, 8, 0, 0xFFFFFFFFFFFFFFFFull) \
  X(rkey, 8, 4, 0, 0xFFFFFFFF)          \
  X(dma_len, 12, 4, 0, 0xFFFFFFFF)
inline constexpr unsigned kRethLen = 16;

// ImmDt, 4 B [P].
#define MRC_IMMDT_FIELDS(X) X(imm, 0, 4, 0, 0xFFFFFFFF)
inline constexpr unsigned kImmDtLen = 4;

// AETH, 4 B [P]: syndrome[7] rsvd, [6:5] type, [4:0] credit/timer/NAK code.
#define MRC_AETH_FIELDS(X)   \
  X(syndrome, 0, 1, 0, 0xFF) \
  X(msn, 1, 3, 0, 0xFFFFFF)
inline constexpr unsigned kAethLen = 4;
inline constexpr uint8_t kAethAck = 0x1F;           // ACK, unlimited credits
inline constexpr uint8_t kAethNakPsnSeqErr = 0x60;  // [P rxe_hdr.h]
inline constexpr uint8_t kAethNakInvalidReq = 0x61;
inline constexpr uint8_t kAethNakRemoteAccess = 0x62;
inline constexpr uint8_t kAethNakRemoteOp = 0x63;
inline constexpr uint8_t kAethTypeMask = 0x60;
inline constexpr uint8_t kAethTypeNak = 0x60;
inline constexpr uint8_t kAethTypeRnr = 0x20;

// CNP payload: 16 reserved bytes [P IBTA A17].
inline constexpr unsigned kCnpPadLen = 16;

// SETH, 28 B, followed by CC_STATE, 8 B [S]. UEC ACK_CC layout with 24-bit
// PSNs, the reflected EV and the reflected TSETH timestamp.
#define MRC_SETH_FIELDS(X)           \
  X(type, 0, 1, 4, 0xF)              \
  X(next_hdr, 0, 2, 7, 0x1F)         \
  X(skip_mark, 1, 1, 5, 0x3)         \
  X(probe_reply, 1, 1, 1, 0x1)       \
  X(ack_psn_offset, 2, 2, 0, 0xFFFF) \
  X(entropy, 4, 4, 0, 0xFFFFFFFF)    \
  X(spdcid, 8, 2, 0, 0xFFFF)         \
  X(dpdcid, 10, 2, 0, 0xFFFF)        \
  X(cack_psn, 13, 3, 0, 0xFFFFFF)    \
  X(cc_type, 16, 1, 4, 0xF)          \
  X(cc_flags, 16, 1, 0, 0xF)         \
  X(mpr, 17, 1, 0, 0xFF)             \
  X(sack_offset, 18, 2, 0, 0xFFFF)   \
  X(sack_bitmap, 20, 8, 0, 0xFFFFFFFFFFFFFFFFull)
inline constexpr unsigned kSethLen = 28;
#define MRC_CC_STATE_FIELDS(X)     \
  X(tx_timestamp, 0, 2, 0, 0xFFFF) \
  X(ooo_count, 2, 2, 0, 0x7FFF)    \
  X(restore_cwnd, 4, 1, 7, 0x1)    \
  X(rcv_cwnd_pen, 4, 1, 0, 0x7F)   \
  X(rcvd_bytes, 5, 3, 0, 0xFFFFFF)
inline constexpr unsigned kCcStateLen = 8;
inline constexpr unsigned kSackBitmapBits = 64;

// SETH.skip_mark values [S].
enum class SkipMark : uint8_t { none = 0, skip_once = 1, always_skip = 2 };

// NETH, 20 B [S].
#define MRC_NETH_FIELDS(X)        \
  X(type, 0, 1, 4, 0xF)           \
  X(next_hdr, 0, 2, 7, 0x1F)      \
  X(nack_reason, 2, 1, 0, 0xFF)   \
  X(vendor_info, 3, 1, 0, 0xFF)   \
  X(entropy, 4, 4, 0, 0xFFFFFFFF) \
  X(spdcid, 8, 2, 0, 0xFFFF)      \
  X(dpdcid, 10, 2, 0, 0xFFFF)     \
  X(nack_psn, 13, 3, 0, 0xFFFFFF) \
  X(cc_type, 16, 1, 4, 0xF)       \
  X(cc_flags, 16, 1, 0, 0xF)      \
  X(tx_timestamp, 18, 2, 0, 0xFFFF)
inline constexpr unsigned kNethLen = 20;

// PETH, 16 B [S]. A probe consumes no PSN and elicits a SACK.
#define MRC_PETH_FIELDS(X)          \
  X(type, 0, 1, 4, 0xF)             \
  X(next_hdr, 0, 2, 7, 0x1F)        \
  X(vendor_info, 3, 1, 0, 0xFF)     \
  X(probe_id, 4, 2, 0, 0xFFFF)      \
  X(spdcid, 8, 2, 0, 0xFFFF)        \
  X(dpdcid, 10, 2, 0, 0xFFFF)       \
  X(tx_timestamp, 12, 2, 0, 0xFFFF) \
  X(tsr, 14, 2, 15, 0x1)            \
  X(format_type, 14, 2, 0, 0xF)
inline constexpr unsigned kPethLen = 16;

// ERTH, 16 B [S]: endpoint request to QPN kEndpointQpn; BTH.psn is the req_id.
#define MRC_ERTH_FIELDS(X)                 \
  X(op, 1, 1, 0, 0x3)                      \
  X(vendor_info, 3, 1, 0, 0xFF)            \
  X(port_status_mask, 4, 4, 0, 0xFFFFFFFF) \
  X(tx_timestamp, 12, 2, 0, 0xFFFF)        \
  X(tsr, 14, 2, 15, 0x1)                   \
  X(format_type, 14, 2, 0, 0xF)
inline constexpr unsigned kErthLen = 16;

// EETH, 36 B. [S] gives only its size and "op, reserved words, timestamp
// echo"; the positions of rx_port and adj_svc_time are [R], chosen to carry
// what mrc_ctl_ep_rsp reports.
#define MRC_EETH_FIELDS(X)                \
  X(op, 1, 1, 0, 0x3)                     \
  X(vendor_info, 3, 1, 0, 0xFF)           \
  X(rx_port, 4, 4, 0, 0xFFFFFFFF)         \
  X(adj_svc_time_ns, 8, 4, 0, 0xFFFFFFFF) \
  X(tx_timestamp, 12, 2, 0, 0xFFFF)       \
  X(tsr, 14, 2, 15, 0x1)                  \
  X(format_type, 14, 2, 0, 0xF)
inline constexpr unsigned kEethLen = 36;

enum class EndpointOp : uint8_t { port_status_update = 0, ev_probe = 1 };
inline constexpr uint32_t kEndpointQpn = 0x2;  // [S]

// Type codes in the first nibble of SETH/NETH/PETH [R: the UEC PDS type
// numbers ACK_CC, NACK and CONTROL, truncated to the 4-bit field of [S]].
inline constexpr uint8_t kSethType = 8;
inline constexpr uint8_t kNethType = 10;
inline constexpr uint8_t kPethType = 11;
inline constexpr uint8_t kCcTypeNscc = 0;  // [S UEC cc_type 0 = NSCC]

// ---------------------------------------------------------------------------
// Opcodes. X(name, value, flags) where flags say which headers follow BTH,
// in wire order: METH, [TSETH if BTH.ts_present], RETH, ImmDt, then the
// control header, then payload. RC rows are IBTA [P]; MRC rows [S].
enum OpFlags : uint16_t {
  kOpMeth = 1 << 0,
  kOpReth = 1 << 1,
  kOpImm = 1 << 2,
  kOpAeth = 1 << 3,
  kOpSeth = 1 << 4,  // SETH + CC_STATE
  kOpNeth = 1 << 5,
  kOpPeth = 1 << 6,
  kOpErth = 1 << 7,
  kOpEeth = 1 << 8,
  kOpCnp = 1 << 9,       // 16 reserved bytes
  kOpPayload = 1 << 10,  // carries data
  kOpMrc = 1 << 11,      // MRC opcode (TS flag allowed, RETH on every packet)
  kOpFirst = 1 << 12,
  kOpLast = 1 << 13,  // ends a message (also set on ONLY)
};

#define MRC_OPCODES(X)                                                                               \
  X(rc_write_first, 0x06, kOpReth | kOpPayload | kOpFirst)                                           \
  X(rc_write_middle, 0x07, kOpPayload)                                                               \
  X(rc_write_last, 0x08, kOpPayload | kOpLast)                                                       \
  X(rc_write_last_imm, 0x09, kOpImm | kOpPayload | kOpLast)                                          \
  X(rc_write_only, 0x0A, kOpReth | kOpPayload | kOpFirst | kOpLast)                                  \
  X(rc_write_only_imm, 0x0B, kOpReth | kOpImm | kOpPayload | kOpFirst | kOpLast)                     \
  X(rc_ack, 0x11, kOpAeth)                                                                           \
  X(cnp, 0x81, kOpCnp)                                                                               \
  X(mrc_write_first, 0xC6, kOpMrc | kOpMeth | kOpReth | kOpPayload | kOpFirst)                       \
  X(mrc_write_middle, 0xC7, kOpMrc | kOpMeth | kOpReth | kOpPayload)                                 \
  X(mrc_write_last, 0xC8, kOpMrc | kOpMeth | kOpReth | kOpPayload | kOpLast)                         \
  X(mrc_write_last_imm, 0xC9, kOpMrc | kOpMeth | kOpReth | kOpImm | kOpPayload | kOpLast)            \
  X(mrc_write_only, 0xCA, kOpMrc | kOpMeth | kOpReth | kOpPayload | kOpFirst | kOpLast)              \
  X(mrc_write_only_imm, 0xCB, kOpMrc | kOpMeth | kOpReth | kOpImm | kOpPayload | kOpFirst | kOpLast) \
  X(mrc_ack, 0xD1, kOpMrc | kOpAeth)                                                                 \
  X(mrc_endpoint_request, 0xD8, kOpMrc | kOpErth)                                                    \
  X(mrc_endpoint_response, 0xD9, kOpMrc | kOpEeth)                                                   \
  X(mrc_sack, 0xDC, kOpMrc | kOpSeth)                                                                \
  X(mrc_nack, 0xDD, kOpMrc | kOpNeth)                                                                \
  X(mrc_probe, 0xDE, kOpMrc | kOpPeth)

enum class Opcode : uint8_t {
#define MRC_X(name, value, flags) name = value,
  MRC_OPCODES(MRC_X)
#undef MRC_X
};

// NACK reasons: the UEC 1.0 PDS codes that MRC uses [S].
#define MRC_NACK_REASONS(X) \
  X(trimmed, 0x01)          \
  X(trimmed_lasthop, 0x02)  \
  X(no_bitmap, 0x06)        \
  X(no_pkt_buffer, 0x07)    \
  X(no_resource, 0x0A)      \
  X(psn_oor_window, 0x0B)   \
  X(unexp_event, 0x19)

enum class NackReason : uint8_t {
#define MRC_X(name, value) name = value,
  MRC_NACK_REASONS(MRC_X)
#undef MRC_X
};

// ---------------------------------------------------------------------------
// Entropy value encodings [P mrc_ctl.h mode names; bit split S].
// STEV: the 32-bit EV's high half rides in the UDP source port and its low
// half in the low bits of the IPv6 flow label.
inline constexpr unsigned kStevSportShift = 16;
inline constexpr uint32_t kStevSportMask = 0xFFFF;
inline constexpr unsigned kStevFlowLabelShift = 0;
inline constexpr uint32_t kStevFlowLabelMask = 0xFFFF;
inline constexpr uint32_t kUdpEvMask = 0xFFFF;

// PSNs are 24 bits [P].
inline constexpr uint32_t kPsnMask = 0xFFFFFF;
inline constexpr uint32_t kPsnHalfRange = 1u << 23;
inline constexpr unsigned kMprUnitPsns = 128;  // [P mrc.h: MPR in units of 128 PSNs]
// MPR is one byte [P mrc.h: max_mpr], and the SACK's offsets are 16-bit
// signed: a window of at most 255 x 128 PSNs keeps every offset within it.
inline constexpr unsigned kMaxMpr = 255;
static_assert(kMaxMpr * kMprUnitPsns <= 32768);

}  // namespace mrc::wire
