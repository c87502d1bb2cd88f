#include "nic/linklayer.h"

#include <algorithm>
#include <cstring>

#include "wire/bytes.h"
#include "wire/headers.h"
#include "wire/spec.h"

namespace mrc::nic {
namespace {

using wire::load_be16;
using wire::load_be32;
using wire::store_be16;
using wire::store_be32;
using Ip6 = std::array<uint8_t, 16>;

// Ethernet [IEEE 802.3]. A frame shorter than 60 bytes (64 with FCS) is a
// runt; not every PMD pads on transmit, so replies pad themselves.
constexpr size_t kMinFrameLen = 60;
constexpr uint64_t kBroadcastMac = 0xFFFFFFFFFFFFull;
constexpr uint64_t kMacGroupBit = 1ull << 40;  // I/G bit: LSB of the first octet
constexpr unsigned kMacLen = 6;

// ARP for IPv4 over Ethernet [RFC 826].
constexpr unsigned kArpLen = 28;
constexpr uint16_t kArpHtypeEthernet = 1;
constexpr uint8_t kArpIpv4Len = 4;
constexpr uint16_t kArpOpRequest = 1;
constexpr uint16_t kArpOpReply = 2;
constexpr unsigned kArpOpOffset = 6;
constexpr unsigned kArpShaOffset = 8;
constexpr unsigned kArpSpaOffset = 14;
constexpr unsigned kArpThaOffset = 18;
constexpr unsigned kArpTpaOffset = 24;

// IPv4 [RFC 791]: RoCEv2 sets DF, so a fragment is never ours; we do not
// reassemble.
constexpr uint16_t kIpv4MoreFragments = 0x2000;
constexpr uint16_t kIpv4FragOffsetMask = 0x1FFF;
constexpr unsigned kIpv4MinIhl = 5;

// ICMPv6 [RFC 4443] and Neighbour Discovery [RFC 4861].
constexpr uint8_t kIpProtoIcmpv6 = 58;
constexpr uint8_t kIcmpv6NeighbourSolicit = 135;
constexpr uint8_t kIcmpv6NeighbourAdvert = 136;
constexpr uint8_t kNdHopLimit = 255;  // proves the sender is on-link (RFC 4861 7.1.1)
constexpr unsigned kNdMsgLen = 24;    // type, code, checksum, reserved/flags, target
constexpr unsigned kNdChecksumOffset = 2;
constexpr unsigned kNdFlagsOffset = 4;
constexpr unsigned kNdTargetOffset = 8;
constexpr uint32_t kNaFlagSolicited = 0x40000000;
constexpr uint32_t kNaFlagOverride = 0x20000000;
constexpr unsigned kNdOptUnit = 8;  // option lengths count 8-byte units
constexpr uint8_t kNdOptSourceLinkAddr = 1;
constexpr uint8_t kNdOptTargetLinkAddr = 2;
constexpr unsigned kNdLlaOptLen = 2 + kMacLen;       // type, length, address
constexpr unsigned kNdLen = kNdMsgLen + kNdOptUnit;  // NS or NA + one link-layer address option
constexpr size_t kNdFrameLen = wire::kEthLen + wire::kIpv6Len + kNdLen;

// IPv6 addresses [RFC 4291]. The solicited-node group of an address is
// ff02::1:ff00:0/104 plus its low 24 bits; multicast maps to 33:33 plus the
// group's low 32 bits on Ethernet [RFC 2464].
constexpr Ip6 kAllNodes{0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
constexpr Ip6 kSolicitedNodePrefix{0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xFF, 0, 0, 0};
constexpr unsigned kSolicitedNodePrefixLen = 13;
constexpr uint64_t kIpv6MulticastMacPrefix = 0x333300000000ull;
constexpr uint8_t kIpv6MulticastFirstOctet = 0xFF;

// IPv4 senders we never bind: 0.0.0.0 (an RFC 5227 probe), and 224/4 and
// 240/4 (multicast, reserved, limited broadcast).
constexpr unsigned kIpv4ClassShift = 28;
constexpr uint32_t kIpv4FirstNonUnicastClass = 0xE;

static_assert(kNdFrameLen <= kLinkReplyCapacity);
static_assert(kMinFrameLen <= kLinkReplyCapacity);

uint64_t load_mac(const uint8_t* p) { return wire::load_be<kMacLen>(p); }
void store_mac(uint8_t* p, uint64_t mac) { wire::store_be<kMacLen>(p, mac); }
bool is_group_mac(uint64_t mac) { return (mac & kMacGroupBit) != 0; }
// An address one station owns: frames to it reach one port. Broadcast is a group.
bool is_station_mac(uint64_t mac) { return mac != 0 && !is_group_mac(mac); }
bool is_unicast_ipv4(uint32_t a) { return a != 0 && (a >> kIpv4ClassShift) < kIpv4FirstNonUnicastClass; }

Ip6 load_ip6(const uint8_t* p) {
  Ip6 a;
  std::memcpy(a.data(), p, a.size());
  return a;
}

bool is_unspecified(const Ip6& a) {
  return std::all_of(a.begin(), a.end(), [](uint8_t b) { return b == 0; });
}
bool is_multicast(const Ip6& a) { return a[0] == kIpv6MulticastFirstOctet; }

Ip6 solicited_node(const Ip6& a) {
  Ip6 g = kSolicitedNodePrefix;
  std::copy(a.begin() + kSolicitedNodePrefixLen, a.end(), g.begin() + kSolicitedNodePrefixLen);
  return g;
}

uint64_t multicast_mac(const Ip6& group) { return kIpv6MulticastMacPrefix | load_be32(group.data() + 12); }

// RFC 1071 one's-complement sum, folded to 16 bits but not inverted; an odd
// tail byte is padded with zero on the right.
uint32_t sum16(const uint8_t* p, size_t n, uint32_t acc = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) acc += load_be16(p + i);
  if (n & 1) acc += uint32_t(p[n - 1]) << 8;
  while (acc >> 16) acc = (acc & 0xFFFF) + (acc >> 16);
  return acc;
}

// The ICMPv6 checksum covers a pseudo-header of source, destination, upper
// layer length and next header [RFC 8200 8.1]. Over a message whose checksum
// field holds the right value the result is 0.
uint16_t icmpv6_checksum(const Ip6& src, const Ip6& dst, const uint8_t* msg, uint32_t len) {
  uint8_t tail[8] = {};
  store_be32(tail, len);
  tail[7] = kIpProtoIcmpv6;
  uint32_t acc = sum16(src.data(), src.size());
  acc = sum16(dst.data(), dst.size(), acc);
  acc = sum16(tail, sizeof tail, acc);
  acc = sum16(msg, len, acc);
  return static_cast<uint16_t>(~acc);
}

void write_eth(uint8_t* p, uint64_t dst, uint64_t src, uint16_t type) {
  wire::EthRef eth(p);
  eth.set_dst_mac(dst);
  eth.set_src_mac(src);
  eth.set_ether_type(type);
}

// The ARP fields that vary; the Ethernet source is always the sender's.
struct ArpMsg {
  uint16_t op;
  uint64_t sha;
  uint32_t spa;
  uint64_t tha;
  uint32_t tpa;
};

// Writes a padded ARP frame into out[0, kMinFrameLen); the caller checked the size.
void write_arp(uint8_t* out, uint64_t eth_dst, const ArpMsg& m) {
  std::memset(out, 0, kMinFrameLen);
  write_eth(out, eth_dst, m.sha, wire::kEtherTypeArp);
  uint8_t* r = out + wire::kEthLen;
  store_be16(r, kArpHtypeEthernet);
  store_be16(r + 2, wire::kEtherTypeIpv4);
  r[4] = kMacLen;
  r[5] = kArpIpv4Len;
  store_be16(r + kArpOpOffset, m.op);
  store_mac(r + kArpShaOffset, m.sha);
  store_be32(r + kArpSpaOffset, m.spa);
  store_mac(r + kArpThaOffset, m.tha);
  store_be32(r + kArpTpaOffset, m.tpa);
}

// ARP for other hardware or protocol types is none of ours.
bool is_ethernet_ipv4_arp(const uint8_t* arp) {
  return load_be16(arp) == kArpHtypeEthernet && load_be16(arp + 2) == wire::kEtherTypeIpv4 && arp[4] == kMacLen &&
         arp[5] == kArpIpv4Len;
}

// The fields of an NS or NA with one link-layer address option (holding the
// Ethernet source): the only ND messages a plane sends.
struct NdMsg {
  uint64_t dst_mac;
  uint64_t src_mac;
  Ip6 src;
  Ip6 dst;
  uint8_t type;
  uint32_t flags;
  Ip6 target;
  uint8_t option;
};

// Writes the frame into out[0, kNdFrameLen); the caller checked the size.
void write_nd(uint8_t* out, const NdMsg& m) {
  std::memset(out, 0, kNdFrameLen);
  write_eth(out, m.dst_mac, m.src_mac, wire::kEtherTypeIpv6);
  uint8_t* l3 = out + wire::kEthLen;
  wire::Ipv6Ref ip(l3);
  ip.set_version(6);
  ip.set_payload_len(kNdLen);
  ip.set_next_header(kIpProtoIcmpv6);
  ip.set_hop_limit(kNdHopLimit);
  std::memcpy(l3 + wire::kIpv6SrcOffset, m.src.data(), m.src.size());
  std::memcpy(l3 + wire::kIpv6DstOffset, m.dst.data(), m.dst.size());
  uint8_t* nd = l3 + wire::kIpv6Len;
  nd[0] = m.type;
  store_be32(nd + kNdFlagsOffset, m.flags);
  std::memcpy(nd + kNdTargetOffset, m.target.data(), m.target.size());
  nd[kNdMsgLen] = m.option;
  nd[kNdMsgLen + 1] = 1;  // one 8-byte unit
  store_mac(nd + kNdMsgLen + 2, m.src_mac);
  store_be16(nd + kNdChecksumOffset, icmpv6_checksum(m.src, m.dst, nd, kNdLen));
}

// The checks every NS and NA must pass before anything in it is believed
// (RFC 4861 7.1.1, 7.1.2): hop limit 255, code 0, a good checksum. `icmp` is
// the whole message, at least its fixed part.
bool nd_checks_pass(std::span<const uint8_t> frame, std::span<const uint8_t> icmp) {
  const uint8_t* l3 = frame.data() + wire::kEthLen;
  if (wire::Ipv6View(l3).hop_limit() != kNdHopLimit || icmp[1] != 0) return false;
  return icmpv6_checksum(load_ip6(l3 + wire::kIpv6SrcOffset), load_ip6(l3 + wire::kIpv6DstOffset), icmp.data(),
                         static_cast<uint32_t>(icmp.size())) == 0;
}

// Walks the options after an NS/NA's fixed part; false if one is empty or
// runs past the message (RFC 4861 4.6). `lla` gets the address in the last
// link-layer address option of type `want`.
bool scan_nd_options(std::span<const uint8_t> icmp, uint8_t want, std::optional<uint64_t>& lla) {
  for (size_t off = kNdMsgLen; off < icmp.size();) {
    if (icmp.size() - off < 2) return false;
    const size_t len = size_t(icmp[off + 1]) * kNdOptUnit;
    if (len == 0 || len > icmp.size() - off) return false;
    if (icmp[off] == want && len >= kNdLlaOptLen) lla = load_mac(&icmp[off + 2]);
    off += len;
  }
  return true;
}

// Solicitations for `ours` come to it or, when the asker has no cache entry,
// to its solicited-node group at the group's mapped MAC.
bool solicitation_reaches(const PlaneIdentity& me, const Ip6& ours, const Ip6& dst, uint64_t dst_mac) {
  return (dst == ours && dst_mac == me.mac) || (dst == solicited_node(ours) && dst_mac == multicast_mac(dst));
}

LinkVerdict on_arp(const PlaneIdentity& me, std::span<const uint8_t> frame, uint64_t dst_mac, std::span<uint8_t> reply,
                   size_t& reply_len) {
  if (frame.size() < wire::kEthLen + kArpLen) return LinkVerdict::malformed;
  const uint8_t* arp = frame.data() + wire::kEthLen;
  // ARP replies are learned from (learn_neighbour), not answered.
  if (!is_ethernet_ipv4_arp(arp) || load_be16(arp + kArpOpOffset) != kArpOpRequest) return LinkVerdict::not_ours;
  if (dst_mac != kBroadcastMac && dst_mac != me.mac) return LinkVerdict::not_ours;
  if (!me.ipv4 || load_be32(arp + kArpTpaOffset) != *me.ipv4) return LinkVerdict::not_ours;
  const uint64_t sha = load_mac(arp + kArpShaOffset);
  // The reply goes to the sender's hardware address, so it must be a station.
  if (!is_station_mac(sha)) return LinkVerdict::malformed;
  if (reply.size() < kMinFrameLen) return LinkVerdict::not_ours;  // caller broke the capacity contract

  write_arp(reply.data(), sha,
            {.op = kArpOpReply, .sha = me.mac, .spa = *me.ipv4, .tha = sha, .tpa = load_be32(arp + kArpSpaOffset)});
  reply_len = kMinFrameLen;
  return LinkVerdict::replied;
}

LinkVerdict on_ipv4(const PlaneIdentity& me, std::span<const uint8_t> frame, uint64_t dst_mac) {
  if (frame.size() < wire::kEthLen + wire::kIpv4Len) return LinkVerdict::malformed;
  wire::Ipv4View ip(frame.data() + wire::kEthLen);
  if (ip.version() != 4 || ip.ihl() < kIpv4MinIhl) return LinkVerdict::malformed;
  if (dst_mac != me.mac || !me.ipv4 || ip.dst() != *me.ipv4) return LinkVerdict::not_ours;
  if (ip.protocol() != wire::kIpProtoUdp) return LinkVerdict::not_ours;
  if (ip.frag() & (kIpv4MoreFragments | kIpv4FragOffsetMask)) return LinkVerdict::not_ours;
  const size_t udp = wire::kEthLen + ip.ihl() * 4u;
  if (frame.size() < udp + wire::kUdpLen) return LinkVerdict::malformed;
  if (wire::UdpView(frame.data() + udp).dst_port() != wire::kRoceUdpPort) return LinkVerdict::not_ours;
  return LinkVerdict::roce;
}

// Answers a Neighbour Solicitation for our address; `icmp` is the whole
// ICMPv6 message (the IPv6 payload, Ethernet padding excluded).
LinkVerdict on_solicit(const PlaneIdentity& me, const Ip6& our_ip, std::span<const uint8_t> frame,
                       std::span<const uint8_t> icmp, std::span<uint8_t> reply, size_t& reply_len) {
  if (icmp.size() < kNdMsgLen) return LinkVerdict::malformed;
  if (load_ip6(icmp.data() + kNdTargetOffset) != our_ip) return LinkVerdict::not_ours;

  // Validation per RFC 4861 7.1.1: a solicitation failing any check is dropped.
  if (!nd_checks_pass(frame, icmp)) return LinkVerdict::malformed;
  const Ip6 src = load_ip6(frame.data() + wire::kEthLen + wire::kIpv6SrcOffset);
  const Ip6 dst = load_ip6(frame.data() + wire::kEthLen + wire::kIpv6DstOffset);
  if (is_multicast(src)) return LinkVerdict::malformed;
  const bool dad = is_unspecified(src);  // Duplicate Address Detection probe
  if (dad && dst != solicited_node(our_ip)) return LinkVerdict::malformed;
  std::optional<uint64_t> source_lla;
  if (!scan_nd_options(icmp, kNdOptSourceLinkAddr, source_lla)) return LinkVerdict::malformed;
  if (dad && source_lla) return LinkVerdict::malformed;
  if (reply.size() < kNdFrameLen) return LinkVerdict::not_ours;  // capacity contract

  // A DAD probe has no address to answer, so the defence goes to all nodes
  // and is unsolicited (RFC 4861 7.2.4). Otherwise reply to the asker, at the
  // link address it advertised, or failing that the one it sent from.
  const Ip6 reply_dst = dad ? kAllNodes : src;
  const uint64_t reply_mac =
      dad ? multicast_mac(kAllNodes) : source_lla.value_or(wire::EthView(frame.data()).src_mac());
  if (!dad && !is_station_mac(reply_mac)) return LinkVerdict::malformed;  // no reply to a group or zero MAC

  write_nd(reply.data(), {.dst_mac = reply_mac,
                          .src_mac = me.mac,
                          .src = our_ip,
                          .dst = reply_dst,
                          .type = kIcmpv6NeighbourAdvert,
                          // Override: we own this address, so our answer replaces any cached one.
                          .flags = kNaFlagOverride | (dad ? 0 : kNaFlagSolicited),
                          .target = our_ip,
                          .option = kNdOptTargetLinkAddr});
  reply_len = kNdFrameLen;
  return LinkVerdict::replied;
}

LinkVerdict on_ipv6(const PlaneIdentity& me, std::span<const uint8_t> frame, uint64_t dst_mac, std::span<uint8_t> reply,
                    size_t& reply_len) {
  constexpr size_t l4 = wire::kEthLen + wire::kIpv6Len;
  if (frame.size() < l4) return LinkVerdict::malformed;
  wire::Ipv6View ip(frame.data() + wire::kEthLen);
  if (ip.version() != 6) return LinkVerdict::malformed;
  if (!me.ipv6) return LinkVerdict::not_ours;
  const Ip6& ours = *me.ipv6;
  const Ip6 dst = load_ip6(frame.data() + wire::kEthLen + wire::kIpv6DstOffset);
  // Extension headers are not followed: RoCEv2 and ND never need them.
  switch (ip.next_header()) {
    case wire::kIpProtoUdp: {
      if (dst_mac != me.mac || dst != ours) return LinkVerdict::not_ours;
      if (frame.size() < l4 + wire::kUdpLen) return LinkVerdict::malformed;
      if (wire::UdpView(frame.data() + l4).dst_port() != wire::kRoceUdpPort) return LinkVerdict::not_ours;
      return LinkVerdict::roce;
    }
    case kIpProtoIcmpv6: {
      if (!solicitation_reaches(me, ours, dst, dst_mac)) return LinkVerdict::not_ours;
      if (frame.size() < l4 + ip.payload_len()) return LinkVerdict::malformed;
      const auto icmp = frame.subspan(l4, ip.payload_len());  // drops Ethernet padding
      if (icmp.empty()) return LinkVerdict::malformed;
      if (icmp[0] != kIcmpv6NeighbourSolicit) return LinkVerdict::not_ours;
      return on_solicit(me, ours, frame, icmp, reply, reply_len);
    }
    default: return LinkVerdict::not_ours;
  }
}

std::optional<NeighbourFact> learn_arp(const PlaneIdentity& me, std::span<const uint8_t> frame, uint64_t dst_mac) {
  if (frame.size() < wire::kEthLen + kArpLen || !me.ipv4) return std::nullopt;
  const uint8_t* arp = frame.data() + wire::kEthLen;
  if (!is_ethernet_ipv4_arp(arp)) return std::nullopt;
  const uint16_t op = load_be16(arp + kArpOpOffset);
  if (op != kArpOpRequest && op != kArpOpReply) return std::nullopt;
  // Only exchanges we are party to: a request for us or the answer to ours.
  // Replies may be broadcast (RFC 5227 announcements), so both MACs pass.
  if (dst_mac != kBroadcastMac && dst_mac != me.mac) return std::nullopt;
  const uint64_t sha = load_mac(arp + kArpShaOffset);
  const uint32_t spa = load_be32(arp + kArpSpaOffset);
  const uint32_t tpa = load_be32(arp + kArpTpaOffset);
  // A broadcast announcement of the sender's own binding (RFC 5227 2.3).
  const bool announcement = tpa == spa && dst_mac == kBroadcastMac;
  if (tpa != *me.ipv4 && !announcement) return std::nullopt;
  // A sender claiming our address is a conflict, not a neighbour.
  if (!is_station_mac(sha) || !is_unicast_ipv4(spa) || spa == *me.ipv4) return std::nullopt;
  return NeighbourFact{.ipv4 = spa, .ipv6 = std::nullopt, .mac = sha, .refresh_only = announcement};
}

std::optional<NeighbourFact> learn_nd(const PlaneIdentity& me, std::span<const uint8_t> frame, uint64_t dst_mac) {
  constexpr size_t l4 = wire::kEthLen + wire::kIpv6Len;
  if (frame.size() < l4 || !me.ipv6) return std::nullopt;
  wire::Ipv6View ip(frame.data() + wire::kEthLen);
  // Extension headers are not followed: ND never needs them.
  if (ip.version() != 6 || ip.next_header() != kIpProtoIcmpv6) return std::nullopt;
  if (frame.size() - l4 < ip.payload_len()) return std::nullopt;
  const auto icmp = frame.subspan(l4, ip.payload_len());  // drops Ethernet padding
  if (icmp.size() < kNdMsgLen || !nd_checks_pass(frame, icmp)) return std::nullopt;
  const Ip6& ours = *me.ipv6;
  const Ip6 src = load_ip6(frame.data() + wire::kEthLen + wire::kIpv6SrcOffset);
  const Ip6 dst = load_ip6(frame.data() + wire::kEthLen + wire::kIpv6DstOffset);
  const Ip6 target = load_ip6(icmp.data() + kNdTargetOffset);

  Ip6 ip6{};
  std::optional<uint64_t> lla;
  bool refresh_only = false;
  switch (icmp[0]) {
    case kIcmpv6NeighbourAdvert:
      // The answer to our solicitation comes unicast. An unsolicited one to
      // all nodes may only refresh an existing entry, and replaces its
      // address only with the override flag and an address option (RFC 4861
      // 7.2.5).
      if (dst == kAllNodes && dst_mac == multicast_mac(kAllNodes)) {
        // A solicited advertisement to a group is invalid (RFC 4861 7.1.2).
        const uint32_t flags = load_be32(icmp.data() + kNdFlagsOffset);
        if ((flags & kNaFlagSolicited) || !(flags & kNaFlagOverride)) return std::nullopt;
        if (!scan_nd_options(icmp, kNdOptTargetLinkAddr, lla) || !lla) return std::nullopt;
        refresh_only = true;
      } else {
        if (dst != ours || dst_mac != me.mac) return std::nullopt;
        if (!scan_nd_options(icmp, kNdOptTargetLinkAddr, lla)) return std::nullopt;
        if (!lla) lla = wire::EthView(frame.data()).src_mac();
      }
      ip6 = target;
      break;
    case kIcmpv6NeighbourSolicit:
      // Only a solicitation naming its link address binds its source
      // (RFC 4861 7.2.3); a DAD probe (unspecified source) binds nothing.
      if (target != ours || !solicitation_reaches(me, ours, dst, dst_mac)) return std::nullopt;
      if (!scan_nd_options(icmp, kNdOptSourceLinkAddr, lla) || !lla) return std::nullopt;
      ip6 = src;
      break;
    default: return std::nullopt;
  }
  if (is_unspecified(ip6) || is_multicast(ip6) || ip6 == ours || !is_station_mac(*lla)) return std::nullopt;
  return NeighbourFact{.ipv4 = std::nullopt, .ipv6 = ip6, .mac = *lla, .refresh_only = refresh_only};
}

}  // namespace

LinkVerdict classify(const PlaneIdentity& me, std::span<const uint8_t> frame, std::span<uint8_t> reply,
                     size_t& reply_len) {
  reply_len = 0;
  if (frame.size() < wire::kEthLen) return LinkVerdict::malformed;
  wire::EthView eth(frame.data());
  const uint64_t dst_mac = eth.dst_mac();
  switch (eth.ether_type()) {
    case wire::kEtherTypeArp: return on_arp(me, frame, dst_mac, reply, reply_len);
    case wire::kEtherTypeIpv4: return on_ipv4(me, frame, dst_mac);
    case wire::kEtherTypeIpv6: return on_ipv6(me, frame, dst_mac, reply, reply_len);
    default: return LinkVerdict::not_ours;  // includes 802.1Q: planes run untagged
  }
}

size_t build_arp_request(const PlaneIdentity& me, uint32_t target_ipv4, std::span<uint8_t> out) {
  if (!me.ipv4 || out.size() < kMinFrameLen) return 0;
  // The target's hardware address is what we ask for: zero, as is customary.
  write_arp(out.data(), kBroadcastMac,
            {.op = kArpOpRequest, .sha = me.mac, .spa = *me.ipv4, .tha = 0, .tpa = target_ipv4});
  return kMinFrameLen;
}

size_t build_announcement(const PlaneIdentity& me, std::span<uint8_t> out) {
  if (me.ipv4) {
    if (out.size() < kMinFrameLen) return 0;
    write_arp(out.data(), kBroadcastMac,
              {.op = kArpOpRequest, .sha = me.mac, .spa = *me.ipv4, .tha = 0, .tpa = *me.ipv4});
    return kMinFrameLen;
  }
  if (!me.ipv6 || out.size() < kNdFrameLen) return 0;
  write_nd(out.data(), {.dst_mac = multicast_mac(kAllNodes),
                        .src_mac = me.mac,
                        .src = *me.ipv6,
                        .dst = kAllNodes,
                        .type = kIcmpv6NeighbourAdvert,
                        .flags = kNaFlagOverride,
                        .target = *me.ipv6,
                        .option = kNdOptTargetLinkAddr});
  return kNdFrameLen;
}

size_t build_neighbour_solicitation(const PlaneIdentity& me, const Ip6& target, std::span<uint8_t> out) {
  if (!me.ipv6 || is_multicast(target) || is_unspecified(target) || out.size() < kNdFrameLen) return 0;
  // To the group, not the target: we do not know its MAC yet (RFC 4861 7.2.2).
  const Ip6 group = solicited_node(target);
  write_nd(out.data(), {.dst_mac = multicast_mac(group),
                        .src_mac = me.mac,
                        .src = *me.ipv6,
                        .dst = group,
                        .type = kIcmpv6NeighbourSolicit,
                        .flags = 0,
                        .target = target,
                        .option = kNdOptSourceLinkAddr});
  return kNdFrameLen;
}

std::optional<NeighbourFact> learn_neighbour(const PlaneIdentity& me, std::span<const uint8_t> frame) {
  if (frame.size() < wire::kEthLen) return std::nullopt;
  wire::EthView eth(frame.data());
  switch (eth.ether_type()) {
    case wire::kEtherTypeArp: return learn_arp(me, frame, eth.dst_mac());
    case wire::kEtherTypeIpv6: return learn_nd(me, frame, eth.dst_mac());
    default: return std::nullopt;
  }
}

}  // namespace mrc::nic
