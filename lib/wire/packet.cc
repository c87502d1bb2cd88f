#include "wire/packet.h"

#include <arpa/inet.h>

#include <cstring>

#include "wire/icrc.h"

namespace mrc::wire {
namespace {

constexpr std::array<uint16_t, 256> kOpFlagTable = [] {
  std::array<uint16_t, 256> t{};
#define MRC_X(name, value, flags) t[value] = static_cast<uint16_t>(flags);
  MRC_OPCODES(MRC_X)
#undef MRC_X
  return t;
}();

constexpr unsigned pad_for(uint32_t payload_len) { return (4 - (payload_len & 3)) & 3; }

}  // namespace

std::string_view parse_error_name(ParseError e) {
  switch (e) {
    case ParseError::ok: return "ok";
#define MRC_X(name, help) \
  case ParseError::name: return #name;
      MRC_PARSE_ERRORS(MRC_X)
#undef MRC_X
  }
  return "invalid";
}

std::string_view parse_error_help(ParseError e) {
  switch (e) {
    case ParseError::ok: return "accepted";
#define MRC_X(name, help) \
  case ParseError::name: return help;
      MRC_PARSE_ERRORS(MRC_X)
#undef MRC_X
  }
  return "invalid";
}

uint16_t op_flags(uint8_t opcode) { return kOpFlagTable[opcode]; }

uint8_t write_opcode(bool mrc, bool first, bool last, bool imm) {
  if (mrc) {
    if (first && last) return uint8_t(imm ? Opcode::mrc_write_only_imm : Opcode::mrc_write_only);
    if (first) return uint8_t(Opcode::mrc_write_first);
    if (last) return uint8_t(imm ? Opcode::mrc_write_last_imm : Opcode::mrc_write_last);
    return uint8_t(Opcode::mrc_write_middle);
  }
  if (first && last) return uint8_t(imm ? Opcode::rc_write_only_imm : Opcode::rc_write_only);
  if (first) return uint8_t(Opcode::rc_write_first);
  if (last) return uint8_t(imm ? Opcode::rc_write_last_imm : Opcode::rc_write_last);
  return uint8_t(Opcode::rc_write_middle);
}

std::string_view opcode_name(uint8_t opcode) {
  switch (opcode) {
#define MRC_X(name, value, flags) \
  case value: return #name;
    MRC_OPCODES(MRC_X)
#undef MRC_X
  }
  return "unknown";
}

std::optional<uint8_t> opcode_from_name(std::string_view name) {
#define MRC_X(n, value, flags) \
  if (name == #n) return value;
  MRC_OPCODES(MRC_X)
#undef MRC_X
  return std::nullopt;
}

std::string_view nack_reason_name(uint8_t reason) {
  switch (reason) {
#define MRC_X(name, value) \
  case value: return #name;
    MRC_NACK_REASONS(MRC_X)
#undef MRC_X
  }
  return "unknown";
}

std::optional<uint8_t> nack_reason_from_name(std::string_view name) {
#define MRC_X(n, value) \
  if (name == #n) return value;
  MRC_NACK_REASONS(MRC_X)
#undef MRC_X
  return std::nullopt;
}

bool IpAddr::is_v4() const {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  return std::memcmp(bytes.data(), kMapped, 12) == 0;
}

uint32_t IpAddr::v4() const { return load_be32(bytes.data() + 12); }

IpAddr IpAddr::from_v4(uint32_t host_order) {
  IpAddr a;
  a.bytes[10] = a.bytes[11] = 0xFF;
  store_be32(a.bytes.data() + 12, host_order);
  return a;
}

std::optional<IpAddr> IpAddr::parse(std::string_view text) {
  std::string s(text);
  IpAddr a;
  in_addr v4;
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) return from_v4(ntohl(v4.s_addr));
  if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) == 1) return a;
  return std::nullopt;
}

std::string IpAddr::str() const {
  char buf[INET6_ADDRSTRLEN];
  if (is_v4()) {
    in_addr addr{htonl(v4())};
    inet_ntop(AF_INET, &addr, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, bytes.data(), buf, sizeof buf);
  }
  return buf;
}

unsigned ctrl_header_len(uint16_t flags) {
  if (flags & kOpAeth) return kAethLen;
  if (flags & kOpSeth) return kSethLen + kCcStateLen;
  if (flags & kOpNeth) return kNethLen;
  if (flags & kOpPeth) return kPethLen;
  if (flags & kOpErth) return kErthLen;
  if (flags & kOpEeth) return kEethLen;
  if (flags & kOpCnp) return kCnpPadLen;
  return 0;
}

IpAddr Packet::src_ip() const {
  if (at.ip_version == 4) return IpAddr::from_v4(ipv4().src());
  IpAddr a;
  std::memcpy(a.bytes.data(), base + at.l3 + kIpv6SrcOffset, 16);
  return a;
}

IpAddr Packet::dst_ip() const {
  if (at.ip_version == 4) return IpAddr::from_v4(ipv4().dst());
  IpAddr a;
  std::memcpy(a.bytes.data(), base + at.l3 + kIpv6DstOffset, 16);
  return a;
}

uint8_t Packet::ecn() const { return at.ip_version == 4 ? ipv4().ecn() : ipv6().ecn(); }
uint8_t Packet::dscp() const { return at.ip_version == 4 ? ipv4().dscp() : ipv6().dscp(); }
uint32_t Packet::flow_label() const { return at.ip_version == 6 ? ipv6().flow_label() : 0; }

// Places the headers that follow BTH. Shared by the parser and the builder so
// that the two agree by construction. Returns the offset after the last one.
static uint32_t place_ext_headers(Layout& at, bool with_tseth) {
  uint32_t off = at.bth + kBthLen;
  if (at.flags & kOpMeth) {
    at.meth = static_cast<uint16_t>(off);
    off += kMethLen;
  }
  if ((at.flags & kOpMrc) && with_tseth) {
    at.tseth = static_cast<uint16_t>(off);
    off += kTsethLen;
  }
  if (at.flags & kOpReth) {
    at.reth = static_cast<uint16_t>(off);
    off += kRethLen;
  }
  if (at.flags & kOpImm) {
    at.imm = static_cast<uint16_t>(off);
    off += kImmDtLen;
  }
  if (unsigned n = ctrl_header_len(at.flags)) {
    at.ctrl = static_cast<uint16_t>(off);
    off += n;
  }
  return off;
}

ParseError parse_frame(std::span<const uint8_t> frame, Packet& out, ParseOptions opts) {
  out.base = frame.data();
  Layout& at = out.at;
  at = Layout{};
  const uint8_t* p = frame.data();
  const size_t n = frame.size();

  if (n < kEthLen) return ParseError::truncated_eth;
  uint16_t ether_type = load_be16(p + 12);
  uint32_t l3 = kEthLen;
  if (ether_type == kEtherTypeVlan) {
    if (n < kEthLen + kVlanTagLen) return ParseError::truncated_vlan;
    at.has_vlan = true;
    at.vlan_tci = load_be16(p + kEthLen);
    ether_type = load_be16(p + kEthLen + 2);
    l3 += kVlanTagLen;
  }
  at.l3 = static_cast<uint16_t>(l3);

  // `end` bounds the packet by the IP length: short frames carry Ethernet
  // padding after it that is not part of the packet.
  size_t end;
  if (ether_type == kEtherTypeIpv4) {
    if (n < l3 + kIpv4Len) return ParseError::truncated_ip;
    Ipv4View ip(p + l3);
    if (ip.version() != 4) return ParseError::bad_ip_version;
    if (ip.ihl() != kIpv4Len / 4) return ParseError::bad_ip_header_len;
    if (ip.total_len() < kIpv4Len || l3 + ip.total_len() > n) return ParseError::bad_ip_length;
    // A valid header sums to all ones; the ICRC masks TOS, TTL and this
    // checksum, so nothing else would catch a corrupted DSCP or ECN.
    if (ipv4_checksum(p + l3) != 0) return ParseError::bad_ip_checksum;
    if (ip.frag() & 0x3FFF) return ParseError::ip_fragment;
    if (ip.protocol() != kIpProtoUdp) return ParseError::not_udp;
    at.ip_version = 4;
    at.udp = static_cast<uint16_t>(l3 + kIpv4Len);
    end = l3 + ip.total_len();
  } else if (ether_type == kEtherTypeIpv6) {
    if (n < l3 + kIpv6Len) return ParseError::truncated_ip;
    Ipv6View ip(p + l3);
    if (ip.version() != 6) return ParseError::bad_ip_version;
    if (l3 + kIpv6Len + ip.payload_len() > n) return ParseError::bad_ip_length;
    if (ip.next_header() != kIpProtoUdp) return ParseError::not_udp;
    at.ip_version = 6;
    at.udp = static_cast<uint16_t>(l3 + kIpv6Len);
    end = l3 + kIpv6Len + ip.payload_len();
  } else {
    return ParseError::not_ip;
  }

  if (end < at.udp + kUdpLen) return ParseError::truncated_udp;
  UdpView udp(p + at.udp);
  if (udp.length() != end - at.udp) return ParseError::bad_udp_length;
  if (udp.dst_port() != opts.roce_port) return ParseError::not_roce_port;

  at.bth = static_cast<uint16_t>(at.udp + kUdpLen);
  if (end < at.bth + kBthLen) return ParseError::truncated_bth;
  BthView bth(p + at.bth);
  at.opcode = bth.opcode();
  if (bth.tver() != kBthTver) return ParseError::bad_version;
  at.flags = op_flags(at.opcode);
  if (at.flags == 0) return ParseError::unknown_opcode;

  const uint32_t hdr_end = place_ext_headers(at, bth.ts_present());
  if (hdr_end + kIcrcLen > end) return ParseError::truncated_header;
  const uint32_t data = static_cast<uint32_t>(end - kIcrcLen - hdr_end);
  at.pad = bth.pad_count();
  if (at.flags & kOpPayload) {
    if (at.pad > data || (data & 3) != 0) return ParseError::bad_pad_count;
  } else {
    if (at.pad != 0) return ParseError::bad_pad_count;
    if (data != 0) return ParseError::bad_length;
  }
  at.payload = static_cast<uint16_t>(hdr_end);
  at.payload_len = data - at.pad;
  at.size = static_cast<uint32_t>(end);

  if (opts.verify_icrc && !icrc_check(out.l3_span())) return ParseError::bad_icrc;
  return ParseError::ok;
}

Layout plan_layout(const Addressing& addr, uint8_t opcode, bool with_tseth, uint32_t payload_len) {
  Layout at;
  at.opcode = opcode;
  at.flags = op_flags(opcode);
  if (at.flags == 0 || (!(at.flags & kOpPayload) && payload_len != 0)) return at;
  at.has_vlan = addr.vlan_tci.has_value();
  at.vlan_tci = addr.vlan_tci.value_or(0);
  at.l3 = static_cast<uint16_t>(kEthLen + (at.has_vlan ? kVlanTagLen : 0));
  at.ip_version = addr.dst_ip.is_v4() ? 4 : 6;
  at.udp = static_cast<uint16_t>(at.l3 + (at.ip_version == 4 ? kIpv4Len : kIpv6Len));
  at.bth = static_cast<uint16_t>(at.udp + kUdpLen);
  const uint32_t hdr_end = place_ext_headers(at, with_tseth);
  at.pad = static_cast<uint8_t>(pad_for(payload_len));
  const uint64_t size = uint64_t(hdr_end) + payload_len + at.pad + kIcrcLen;
  if (size - at.l3 > 0xFFFF) return at;
  at.payload = static_cast<uint16_t>(hdr_end);
  at.payload_len = payload_len;
  at.size = static_cast<uint32_t>(size);
  return at;
}

MutablePacket begin_frame(std::span<uint8_t> buf, const Addressing& addr, uint8_t opcode, bool with_tseth,
                          uint32_t payload_len) {
  MutablePacket m;
  m.at = plan_layout(addr, opcode, with_tseth, payload_len);
  if (m.at.size == 0 || m.at.size > buf.size()) return m;
  m.base = buf.data();
  uint8_t* p = buf.data();
  const Layout& at = m.at;

  EthRef eth(p);
  eth.set_dst_mac(addr.dst_mac);
  eth.set_src_mac(addr.src_mac);
  const uint16_t l3_type = at.ip_version == 4 ? kEtherTypeIpv4 : kEtherTypeIpv6;
  if (at.has_vlan) {
    eth.set_ether_type(kEtherTypeVlan);
    store_be16(p + kEthLen, at.vlan_tci);
    store_be16(p + kEthLen + 2, l3_type);
  } else {
    eth.set_ether_type(l3_type);
  }

  const uint32_t l3_len = at.size - at.l3;
  if (at.ip_version == 4) {
    std::memset(p + at.l3, 0, kIpv4Len);
    Ipv4Ref ip(p + at.l3);
    ip.set_version(4);
    ip.set_ihl(kIpv4Len / 4);
    ip.set_dscp(addr.dscp);
    ip.set_ecn(addr.ecn);
    ip.set_total_len(l3_len);
    ip.set_frag(0x4000);  // DF: RoCEv2 never fragments
    ip.set_ttl(addr.ttl);
    ip.set_protocol(kIpProtoUdp);
    ip.set_src(addr.src_ip.v4());
    ip.set_dst(addr.dst_ip.v4());
  } else {
    Ipv6Ref ip(p + at.l3);
    store_be32(p + at.l3, 0);
    ip.set_version(6);
    ip.set_dscp(addr.dscp);
    ip.set_ecn(addr.ecn);
    ip.set_flow_label(addr.flow_label);
    ip.set_payload_len(l3_len - kIpv6Len);
    ip.set_next_header(kIpProtoUdp);
    ip.set_hop_limit(addr.ttl);
    std::memcpy(p + at.l3 + kIpv6SrcOffset, addr.src_ip.bytes.data(), 16);
    std::memcpy(p + at.l3 + kIpv6DstOffset, addr.dst_ip.bytes.data(), 16);
  }

  UdpRef udp(p + at.udp);
  udp.set_src_port(addr.udp_src_port);
  udp.set_dst_port(kRoceUdpPort);
  udp.set_length(at.size - at.udp);
  udp.set_checksum(0);  // RoCEv2 sends a zero UDP checksum; the ICRC protects the data

  // Zero BTH and every extension header in one go.
  std::memset(p + at.bth, 0, at.payload - at.bth);
  BthRef bth(p + at.bth);
  bth.set_opcode(opcode);
  bth.set_pad_count(at.pad);
  bth.set_pkey(kDefaultPkey);
  bth.set_ts_present(at.tseth != 0);
  if (at.tseth) TsethRef(p + at.tseth).set_format_type(kTsethFormatType);
  std::memset(p + at.payload + at.payload_len, 0, at.pad);
  return m;
}

bool FrameTemplate::prepare(const Addressing& addr, uint8_t opcode, bool with_tseth) {
  MutablePacket m = begin_frame(hdr_, addr, opcode, with_tseth, 0);
  if (!m.base) return false;
  at_ = m.at;
  if (at_.ip_version == 4) {
    Ipv4Ref ip(hdr_.data() + at_.l3);
    ip.set_total_len(0);
    ip.set_checksum(0);
    ipv4_csum_zero_len_ = ipv4_checksum(hdr_.data() + at_.l3);
  }
  return true;
}

MutablePacket FrameTemplate::stamp(std::span<uint8_t> buf, uint32_t payload_len) const {
  MutablePacket m;
  m.at = at_;
  m.at.pad = static_cast<uint8_t>(pad_for(payload_len));
  m.at.payload_len = payload_len;
  const uint64_t size = uint64_t(at_.payload) + payload_len + m.at.pad + kIcrcLen;
  if (size > buf.size() || size - at_.l3 > 0xFFFF || (!(at_.flags & kOpPayload) && payload_len)) return m;
  if (at_.payload < 16) return m;  // not prepared: a prepared template holds Ethernet to BTH
  m.at.size = static_cast<uint32_t>(size);
  m.base = buf.data();
  uint8_t* p = buf.data();
  // In 16-byte pieces, the last one overlapping, rather than one memcpy
  // call: the caller then edits bit fields of these bytes in place, and a
  // load can be forwarded from a 16-byte store but not from the library
  // memcpy's 32- and 64-byte ones, which stalled every packet.
  const unsigned n = at_.payload;
  for (unsigned off = 0; off + 16 < n; off += 16) std::memcpy(p + off, hdr_.data() + off, 16);
  std::memcpy(p + n - 16, hdr_.data() + n - 16, 16);
  const uint32_t l3_len = m.at.size - at_.l3;
  if (at_.ip_version == 4) {
    Ipv4Ref ip(p + at_.l3);
    ip.set_total_len(l3_len);
    // RFC 1624 incremental update: only the length changed from zero.
    uint32_t sum = uint32_t(uint16_t(~ipv4_csum_zero_len_)) + l3_len;
    sum = (sum & 0xFFFF) + (sum >> 16);
    ip.set_checksum(static_cast<uint16_t>(~sum));
  } else {
    Ipv6Ref(p + at_.l3).set_payload_len(l3_len - kIpv6Len);
  }
  UdpRef(p + at_.udp).set_length(m.at.size - at_.udp);
  BthRef(p + at_.bth).set_pad_count(m.at.pad);
  // Pad and ICRC together are at least 4 bytes: one store zeroes the pad
  // (the ICRC is written last), where memset was a library call.
  constexpr uint32_t zero = 0;
  std::memcpy(p + at_.payload + payload_len, &zero, sizeof zero);
  return m;
}

static void refresh_ipv4_checksum(uint8_t* l3) {
  Ipv4Ref ip(l3);
  ip.set_checksum(0);
  ip.set_checksum(ipv4_checksum(l3));
}

void MutablePacket::set_ecn(uint8_t ecn) const {
  if (at.ip_version == 4) {
    Ipv4Ref(base + at.l3).set_ecn(ecn);
    refresh_ipv4_checksum(base + at.l3);
  } else {
    Ipv6Ref(base + at.l3).set_ecn(ecn);
  }
}

void MutablePacket::set_dscp(uint8_t dscp) const {
  if (at.ip_version == 4) {
    Ipv4Ref(base + at.l3).set_dscp(dscp);
    refresh_ipv4_checksum(base + at.l3);
  } else {
    Ipv6Ref(base + at.l3).set_dscp(dscp);
  }
}

void MutablePacket::set_size(uint32_t size) {
  at.size = size;
  const uint32_t l3_len = size - at.l3;
  if (at.ip_version == 4) {
    Ipv4Ref(base + at.l3).set_total_len(l3_len);
    refresh_ipv4_checksum(base + at.l3);
  } else {
    Ipv6Ref(base + at.l3).set_payload_len(l3_len - kIpv6Len);
  }
  UdpRef(base + at.udp).set_length(size - at.udp);
}

void finish_frame(const MutablePacket& m, bool with_icrc) {
  if (m.at.ip_version == 4) refresh_ipv4_checksum(m.base + m.at.l3);
  if (with_icrc) icrc_fill({m.base + m.at.l3, m.at.size - m.at.l3});
}

}  // namespace mrc::wire
