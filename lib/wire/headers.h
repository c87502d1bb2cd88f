// Zero-copy header views. `Bth<const uint8_t>` reads a header in place;
// `Bth<uint8_t>` also writes it. The getters and setters are generated from
// the field tables in spec.h, so a layout fix there reaches every user.
//
// A view does no bounds checking of its own: it is made by the parser after
// the length check, or by a builder over a buffer it sized.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "wire/bytes.h"
#include "wire/spec.h"

namespace mrc::wire {

#define MRC_FIELD_ACCESSORS(name, off, n, shift, mask)                                   \
  using name##_field = BeField<off, n, shift, mask>;                                     \
  constexpr auto name() const { return static_cast<value_t<n>>(name##_field::get(p_)); } \
  constexpr void set_##name(uint64_t v) requires(!std::is_const_v<B>) { name##_field::set(p_, v); }

// The narrowest unsigned type that holds a field of N bytes.
template <unsigned N>
using value_t =
    std::conditional_t<(N <= 1), uint8_t,
                       std::conditional_t<(N <= 2), uint16_t, std::conditional_t<(N <= 4), uint32_t, uint64_t>>>;

#define MRC_DEFINE_HEADER(Name, len, FIELDS) \
  template <class B>                         \
  class Name {                               \
   public:                                   \
    static constexpr unsigned kLen = len;    \
    constexpr explicit Name(B* p) : p_(p) {} \
    constexpr B* data() const { return p_; } \
    FIELDS(MRC_FIELD_ACCESSORS)              \
   private:                                  \
    B* p_;                                   \
  };                                         \
  using Name##View = Name<const uint8_t>;    \
  using Name##Ref = Name<uint8_t>;

MRC_DEFINE_HEADER(Bth, kBthLen, MRC_BTH_FIELDS)
MRC_DEFINE_HEADER(Meth, kMethLen, MRC_METH_FIELDS)
MRC_DEFINE_HEADER(Tseth, kTsethLen, MRC_TSETH_FIELDS)
MRC_DEFINE_HEADER(Reth, kRethLen, MRC_RETH_FIELDS)
MRC_DEFINE_HEADER(ImmDt, kImmDtLen, MRC_IMMDT_FIELDS)
MRC_DEFINE_HEADER(Aeth, kAethLen, MRC_AETH_FIELDS)
MRC_DEFINE_HEADER(Seth, kSethLen, MRC_SETH_FIELDS)
MRC_DEFINE_HEADER(CcState, kCcStateLen, MRC_CC_STATE_FIELDS)
MRC_DEFINE_HEADER(Neth, kNethLen, MRC_NETH_FIELDS)
MRC_DEFINE_HEADER(Peth, kPethLen, MRC_PETH_FIELDS)
MRC_DEFINE_HEADER(Erth, kErthLen, MRC_ERTH_FIELDS)
MRC_DEFINE_HEADER(Eeth, kEethLen, MRC_EETH_FIELDS)

// L2-L4 headers: standard layouts [P], kept here rather than in spec.h
// because they are not MRC's to change.
#define MRC_ETH_FIELDS(X)                \
  X(dst_mac, 0, 6, 0, 0xFFFFFFFFFFFFull) \
  X(src_mac, 6, 6, 0, 0xFFFFFFFFFFFFull) \
  X(ether_type, 12, 2, 0, 0xFFFF)
#define MRC_VLAN_FIELDS(X) \
  X(pcp, 0, 1, 5, 0x7)     \
  X(vid, 0, 2, 0, 0xFFF)   \
  X(inner_type, 2, 2, 0, 0xFFFF)
#define MRC_IPV4_FIELDS(X)      \
  X(version, 0, 1, 4, 0xF)      \
  X(ihl, 0, 1, 0, 0xF)          \
  X(dscp, 1, 1, 2, 0x3F)        \
  X(ecn, 1, 1, 0, 0x3)          \
  X(tos, 1, 1, 0, 0xFF)         \
  X(total_len, 2, 2, 0, 0xFFFF) \
  X(id, 4, 2, 0, 0xFFFF)        \
  X(frag, 6, 2, 0, 0xFFFF)      \
  X(ttl, 8, 1, 0, 0xFF)         \
  X(protocol, 9, 1, 0, 0xFF)    \
  X(checksum, 10, 2, 0, 0xFFFF) \
  X(src, 12, 4, 0, 0xFFFFFFFF)  \
  X(dst, 16, 4, 0, 0xFFFFFFFF)
#define MRC_IPV6_FIELDS(X)        \
  X(version, 0, 1, 4, 0xF)        \
  X(traffic_class, 0, 2, 4, 0xFF) \
  X(dscp, 0, 2, 6, 0x3F)          \
  X(ecn, 0, 2, 4, 0x3)            \
  X(flow_label, 1, 3, 0, 0xFFFFF) \
  X(payload_len, 4, 2, 0, 0xFFFF) \
  X(next_header, 6, 1, 0, 0xFF)   \
  X(hop_limit, 7, 1, 0, 0xFF)
#define MRC_UDP_FIELDS(X)      \
  X(src_port, 0, 2, 0, 0xFFFF) \
  X(dst_port, 2, 2, 0, 0xFFFF) \
  X(length, 4, 2, 0, 0xFFFF)   \
  X(checksum, 6, 2, 0, 0xFFFF)

MRC_DEFINE_HEADER(Eth, kEthLen, MRC_ETH_FIELDS)
MRC_DEFINE_HEADER(Vlan, kVlanTagLen, MRC_VLAN_FIELDS)
MRC_DEFINE_HEADER(Ipv4, kIpv4Len, MRC_IPV4_FIELDS)
MRC_DEFINE_HEADER(Ipv6, kIpv6Len, MRC_IPV6_FIELDS)
MRC_DEFINE_HEADER(Udp, kUdpLen, MRC_UDP_FIELDS)

inline constexpr unsigned kIpv6SrcOffset = 8;
inline constexpr unsigned kIpv6DstOffset = 24;
inline constexpr uint8_t kEcnCe = 0x3;
inline constexpr uint8_t kEcnEct0 = 0x2;

// IPv4 header checksum (RFC 1071) over a header with its checksum field zero;
// over a whole header it is 0 when the header is intact. Every received
// frame is checked, so it sums native 32-bit words and swaps once at the
// end: a one's-complement sum does not depend on byte order (RFC 1071 2(B)).
inline uint16_t ipv4_checksum(const uint8_t* h, unsigned len = kIpv4Len) {
  uint64_t sum = 0;
  unsigned i = 0;
  for (; i + 4 <= len; i += 4) {
    uint32_t w;
    std::memcpy(&w, h + i, 4);
    sum += w;
  }
  for (; i + 2 <= len; i += 2) {
    uint16_t w;
    std::memcpy(&w, h + i, 2);
    sum += w;
  }
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  uint16_t folded = static_cast<uint16_t>(sum);
  if constexpr (std::endian::native == std::endian::little) folded = __builtin_bswap16(folded);
  return static_cast<uint16_t>(~folded);
}

}  // namespace mrc::wire
