// Whole-frame parsing and building for RoCEv2 and MRC. Both sides share one
// Layout (byte offsets of each header), so the parser and the builder can
// never disagree on where a header sits.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "wire/headers.h"
#include "wire/spec.h"

namespace mrc::wire {

// Every reason the parser rejects a frame. The engine and the NIC turn each
// into a drop counter of the same name.
#define MRC_PARSE_ERRORS(X)                                               \
  X(truncated_eth, "frame shorter than an Ethernet header")               \
  X(truncated_vlan, "802.1Q tag cut short")                               \
  X(not_ip, "EtherType is neither IPv4 nor IPv6")                         \
  X(truncated_ip, "IP header cut short")                                  \
  X(bad_ip_version, "IP version does not match the EtherType")            \
  X(bad_ip_header_len, "IPv4 header with options or a bad IHL")           \
  X(bad_ip_length, "IP length disagrees with the frame")                  \
  X(bad_ip_checksum, "IPv4 header checksum is wrong (the ICRC skips it)") \
  X(ip_fragment, "fragmented IPv4 packet")                                \
  X(not_udp, "IP protocol is not UDP")                                    \
  X(truncated_udp, "UDP header cut short")                                \
  X(bad_udp_length, "UDP length disagrees with the IP length")            \
  X(not_roce_port, "UDP destination port is not RoCEv2")                  \
  X(truncated_bth, "BTH cut short")                                       \
  X(bad_version, "BTH transport version is not 0")                        \
  X(unknown_opcode, "opcode is not an MRC or RoCEv2 RC WRITE/ACK opcode") \
  X(truncated_header, "an extension header runs past the packet")         \
  X(bad_pad_count, "pad count exceeds the payload or is set without one") \
  X(bad_length, "packet length does not fit the opcode")                  \
  X(bad_icrc, "ICRC mismatch")

enum class ParseError : uint8_t {
  ok = 0,
#define MRC_X(name, help) name,
  MRC_PARSE_ERRORS(MRC_X)
#undef MRC_X
};
inline constexpr unsigned kParseErrorCount = 1 + [] {
  unsigned n = 0;
#define MRC_X(name, help) ++n;
  MRC_PARSE_ERRORS(MRC_X)
#undef MRC_X
  return n;
}();

std::string_view parse_error_name(ParseError e);
std::string_view parse_error_help(ParseError e);

// The WRITE opcode for a packet's place in its message: MRC or plain RC,
// first/last (both: ONLY), with or without immediate data on the last.
uint8_t write_opcode(bool mrc, bool first, bool last, bool imm);

// Opcode table lookups. op_flags() returns 0 for an opcode we do not speak.
uint16_t op_flags(uint8_t opcode);
std::string_view opcode_name(uint8_t opcode);
std::optional<uint8_t> opcode_from_name(std::string_view name);
std::string_view nack_reason_name(uint8_t reason);
std::optional<uint8_t> nack_reason_from_name(std::string_view name);

// An IP address in its IPv6 form; IPv4 is held IPv4-mapped (::ffff:a.b.c.d),
// which is also how a RoCEv2 GID names it.
struct IpAddr {
  std::array<uint8_t, 16> bytes{};
  bool is_v4() const;
  uint32_t v4() const;  // host order; only meaningful when is_v4()
  static IpAddr from_v4(uint32_t host_order);
  static std::optional<IpAddr> parse(std::string_view text);
  std::string str() const;
  bool operator==(const IpAddr&) const = default;
};

// Byte offsets from the start of the frame. A zero offset means the header is
// absent (no header can start at byte 0 but the Ethernet header).
struct Layout {
  uint16_t l3 = 0;
  uint16_t udp = 0;
  uint16_t bth = 0;
  uint16_t meth = 0;
  uint16_t tseth = 0;
  uint16_t reth = 0;
  uint16_t imm = 0;
  uint16_t ctrl = 0;  // AETH, SETH (+CC_STATE), NETH, PETH, ERTH, EETH or CNP pad
  uint16_t payload = 0;
  uint32_t payload_len = 0;  // data bytes, excluding the pad
  uint32_t size = 0;         // L2 through ICRC; Ethernet padding excluded
  uint8_t ip_version = 0;
  uint8_t pad = 0;
  uint8_t opcode = 0;
  uint16_t flags = 0;  // OpFlags of the opcode
  uint16_t vlan_tci = 0;
  bool has_vlan = false;
};

// Length of the control header that follows BTH for an opcode's flags.
unsigned ctrl_header_len(uint16_t flags);

// A parsed frame: the layout plus typed views. The frame must outlive it.
struct Packet {
  const uint8_t* base = nullptr;
  Layout at;

  EthView eth() const { return EthView(base); }
  BthView bth() const { return BthView(base + at.bth); }
  MethView meth() const { return MethView(base + at.meth); }
  TsethView tseth() const { return TsethView(base + at.tseth); }
  RethView reth() const { return RethView(base + at.reth); }
  ImmDtView imm() const { return ImmDtView(base + at.imm); }
  AethView aeth() const { return AethView(base + at.ctrl); }
  SethView seth() const { return SethView(base + at.ctrl); }
  CcStateView cc_state() const { return CcStateView(base + at.ctrl + kSethLen); }
  NethView neth() const { return NethView(base + at.ctrl); }
  PethView peth() const { return PethView(base + at.ctrl); }
  ErthView erth() const { return ErthView(base + at.ctrl); }
  EethView eeth() const { return EethView(base + at.ctrl); }
  UdpView udp() const { return UdpView(base + at.udp); }
  Ipv4View ipv4() const { return Ipv4View(base + at.l3); }
  Ipv6View ipv6() const { return Ipv6View(base + at.l3); }
  std::span<const uint8_t> payload() const { return {base + at.payload, at.payload_len}; }
  std::span<const uint8_t> l3_span() const { return {base + at.l3, at.size - at.l3}; }
  IpAddr src_ip() const;
  IpAddr dst_ip() const;
  uint8_t ecn() const;
  uint8_t dscp() const;
  uint32_t flow_label() const;  // 0 for IPv4
};

struct ParseOptions {
  bool verify_icrc = true;
  uint16_t roce_port = kRoceUdpPort;
};

// Bounds-checked: never reads outside `frame`. On error `out` is partially
// filled (enough to attribute the drop to a QP where the BTH was reached).
ParseError parse_frame(std::span<const uint8_t> frame, Packet& out, ParseOptions opts = {});

// Everything below BTH that a frame needs.
struct Addressing {
  uint64_t src_mac = 0;
  uint64_t dst_mac = 0;
  std::optional<uint16_t> vlan_tci;
  IpAddr src_ip;
  IpAddr dst_ip;
  uint8_t dscp = 0;
  uint8_t ecn = 0;
  uint8_t ttl = kDefaultTtl;
  uint32_t flow_label = 0;  // IPv6 only
  uint16_t udp_src_port = 0xC000;
};

// A frame under construction: typed mutable views into the caller's buffer.
struct MutablePacket {
  uint8_t* base = nullptr;
  Layout at;

  BthRef bth() const { return BthRef(base + at.bth); }
  MethRef meth() const { return MethRef(base + at.meth); }
  TsethRef tseth() const { return TsethRef(base + at.tseth); }
  RethRef reth() const { return RethRef(base + at.reth); }
  ImmDtRef imm() const { return ImmDtRef(base + at.imm); }
  AethRef aeth() const { return AethRef(base + at.ctrl); }
  SethRef seth() const { return SethRef(base + at.ctrl); }
  CcStateRef cc_state() const { return CcStateRef(base + at.ctrl + kSethLen); }
  NethRef neth() const { return NethRef(base + at.ctrl); }
  PethRef peth() const { return PethRef(base + at.ctrl); }
  ErthRef erth() const { return ErthRef(base + at.ctrl); }
  EethRef eeth() const { return EethRef(base + at.ctrl); }
  UdpRef udp() const { return UdpRef(base + at.udp); }
  std::span<uint8_t> payload() const { return {base + at.payload, at.payload_len}; }
  std::span<uint8_t> frame() const { return {base, at.size}; }
  // Sets ECN/DSCP after the fact (switch marking, trimming); keeps the IPv4
  // checksum valid. The ICRC masks these bits, so it stays valid too.
  void set_ecn(uint8_t ecn) const;
  void set_dscp(uint8_t dscp) const;
  // Makes the IP and UDP lengths those of a frame of `size` bytes (keeping
  // the IPv4 checksum valid) and sets at.size; the bytes are the caller's.
  void set_size(uint32_t size);
};

// Computes where every header goes. Returns a layout with size 0 when the
// opcode is unknown or the result would exceed 64 KiB.
Layout plan_layout(const Addressing& addr, uint8_t opcode, bool with_tseth, uint32_t payload_len);

// Writes Ethernet, IP, UDP and BTH (opcode, pad count, tver, P_Key) and zeroes
// the extension headers. The payload area is left as it is, so a caller that
// placed data there first does not pay for a copy. Returns a packet with
// base == nullptr when `buf` is too small.
MutablePacket begin_frame(std::span<uint8_t> buf, const Addressing& addr, uint8_t opcode, bool with_tseth,
                          uint32_t payload_len);

// The headers of one (addressing, opcode) pair, laid out once. stamp() copies
// them and fixes the lengths, which is all that changes between packets of a
// flow besides the per-packet fields the caller then sets (PSN, EV, VA...).
// This is the datapath's builder; begin_frame() is the general one.
class FrameTemplate {
 public:
  // Returns false when the opcode is unknown.
  bool prepare(const Addressing& addr, uint8_t opcode, bool with_tseth);
  // Same bytes as begin_frame() with the same arguments, IPv4 checksum
  // included (the fields callers set afterwards are outside the IP header).
  // Returns a packet with base == nullptr when `buf` is too small or the
  // length too large.
  MutablePacket stamp(std::span<uint8_t> buf, uint32_t payload_len) const;
  const Layout& layout() const { return at_; }

 private:
  static constexpr unsigned kMaxHeaderLen = 128;  // Eth+VLAN+IPv6+UDP+BTH+METH+TSETH+RETH+ImmDt fit
  std::array<uint8_t, kMaxHeaderLen> hdr_{};
  Layout at_;
  uint16_t ipv4_csum_zero_len_ = 0;  // IPv4 checksum with total length 0
};

// Computes the IPv4 checksum (if any) and, unless the port offloads it, the
// ICRC. Call after the last field is set.
void finish_frame(const MutablePacket& p, bool with_icrc = true);

}  // namespace mrc::wire
