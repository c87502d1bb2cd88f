#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "nic/linklayer.h"

using namespace mrc::nic;
using Bytes = std::vector<uint8_t>;
using Ip6 = std::array<uint8_t, 16>;

namespace {

// Frames are built byte by byte here, not with lib/wire, so a layout slip in
// the code under test cannot hide behind the same slip in the fixture.
constexpr uint64_t kOurMac = 0x02AABBCCDDEEull;
constexpr uint64_t kPeerMac = 0x02112233445Full;
constexpr uint32_t kOurIp4 = 0x0A000102;   // 10.0.1.2
constexpr uint32_t kPeerIp4 = 0x0A000101;  // 10.0.1.1
constexpr Ip6 kOurIp6{0xFD, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0x00, 0xAB, 0xCD, 0xEF};
constexpr Ip6 kPeerIp6{0xFD, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0x00, 0x12, 0x34, 0x56};
constexpr Ip6 kOurSolicitedNode{0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xFF, 0xAB, 0xCD, 0xEF};
constexpr Ip6 kAllNodes{0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
constexpr Ip6 kUnspecified{};
constexpr uint64_t kOurSolicitedMac = 0x3333FFABCDEFull;

PlaneIdentity me() { return PlaneIdentity{kOurMac, kOurIp4, kOurIp6}; }

void put(Bytes& b, uint64_t v, unsigned n) {
  for (unsigned i = n; i-- > 0;) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put(Bytes& b, const Ip6& a) { b.insert(b.end(), a.begin(), a.end()); }
uint64_t get(const Bytes& b, size_t off, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; ++i) v = (v << 8) | b.at(off + i);
  return v;
}
Ip6 get6(const Bytes& b, size_t off) {
  Ip6 a;
  for (size_t i = 0; i < 16; ++i) a[i] = b.at(off + i);
  return a;
}

void eth(Bytes& b, uint64_t dst, uint64_t src, uint16_t type) {
  put(b, dst, 6);
  put(b, src, 6);
  put(b, type, 2);
}

Bytes arp(uint16_t op, uint32_t target_ip, uint64_t dst_mac = 0xFFFFFFFFFFFFull) {
  Bytes b;
  eth(b, dst_mac, kPeerMac, 0x0806);
  put(b, 1, 2);       // Ethernet
  put(b, 0x0800, 2);  // IPv4
  put(b, 6, 1);
  put(b, 4, 1);
  put(b, op, 2);
  put(b, kPeerMac, 6);
  put(b, kPeerIp4, 4);
  put(b, 0, 6);
  put(b, target_ip, 4);
  return b;
}

// Independent RFC 1071 sum: explicit pseudo-header buffer, byte pairs.
uint16_t ref_icmpv6_checksum(const Ip6& src, const Ip6& dst, const uint8_t* msg, size_t len) {
  Bytes ph;
  put(ph, src);
  put(ph, dst);
  put(ph, len, 4);
  put(ph, 58, 4);
  ph.insert(ph.end(), msg, msg + len);
  if (ph.size() % 2) ph.push_back(0);
  uint64_t sum = 0;
  for (size_t i = 0; i < ph.size(); i += 2) sum += (uint32_t(ph[i]) << 8) | ph[i + 1];
  while (sum > 0xFFFF) sum = (sum >> 16) + (sum & 0xFFFF);
  return static_cast<uint16_t>(~sum & 0xFFFF);
}

struct NsOpts {
  Ip6 src = kPeerIp6;
  Ip6 dst = kOurSolicitedNode;
  uint64_t dst_mac = kOurSolicitedMac;
  Ip6 target = kOurIp6;
  uint8_t hop_limit = 255;
  uint8_t code = 0;
  bool slla = true;
  uint8_t slla_units = 1;
  bool corrupt_checksum = false;
  unsigned eth_pad = 0;
};

Bytes ns(const NsOpts& o = {}) {
  Bytes icmp;
  put(icmp, 135, 1);
  put(icmp, o.code, 1);
  put(icmp, 0, 2);  // checksum, filled below
  put(icmp, 0, 4);
  put(icmp, o.target);
  if (o.slla) {
    put(icmp, 1, 1);
    put(icmp, o.slla_units, 1);
    put(icmp, kPeerMac, 6);
  }
  uint16_t ck = ref_icmpv6_checksum(o.src, o.dst, icmp.data(), icmp.size());
  if (o.corrupt_checksum) ck ^= 0x0100;
  icmp[2] = uint8_t(ck >> 8);
  icmp[3] = uint8_t(ck);

  Bytes b;
  eth(b, o.dst_mac, kPeerMac, 0x86DD);
  put(b, 0x60000000, 4);
  put(b, icmp.size(), 2);
  put(b, 58, 1);
  put(b, o.hop_limit, 1);
  put(b, o.src);
  put(b, o.dst);
  b.insert(b.end(), icmp.begin(), icmp.end());
  b.insert(b.end(), o.eth_pad, 0xA5);
  return b;
}

Bytes udp4(uint16_t dport, uint32_t dst_ip = kOurIp4, uint64_t dst_mac = kOurMac, uint16_t frag = 0x4000) {
  Bytes b;
  eth(b, dst_mac, kPeerMac, 0x0800);
  put(b, 0x45, 1);
  put(b, 0, 1);
  put(b, 20 + 8 + 16, 2);
  put(b, 0, 2);
  put(b, frag, 2);
  put(b, 64, 1);
  put(b, 17, 1);
  put(b, 0, 2);
  put(b, kPeerIp4, 4);
  put(b, dst_ip, 4);
  put(b, 0xC000, 2);
  put(b, dport, 2);
  put(b, 8 + 16, 2);
  put(b, 0, 2);
  b.insert(b.end(), 16, 0x11);
  return b;
}

Bytes udp6(uint16_t dport, const Ip6& dst_ip = kOurIp6) {
  Bytes b;
  eth(b, kOurMac, kPeerMac, 0x86DD);
  put(b, 0x60000000, 4);
  put(b, 8 + 16, 2);
  put(b, 17, 1);
  put(b, 64, 1);
  put(b, kPeerIp6);
  put(b, dst_ip);
  put(b, 0xC000, 2);
  put(b, dport, 2);
  put(b, 8 + 16, 2);
  put(b, 0, 2);
  b.insert(b.end(), 16, 0x11);
  return b;
}

struct Result {
  LinkVerdict verdict;
  Bytes reply;
};

Result run(const Bytes& frame, const PlaneIdentity& id = me(), size_t reply_cap = kLinkReplyCapacity) {
  // An exactly-sized heap copy, so that ASan flags any read past the end.
  std::unique_ptr<uint8_t[]> f(new uint8_t[frame.size() ? frame.size() : 1]);
  std::copy(frame.begin(), frame.end(), f.get());
  Bytes reply(reply_cap, 0xEE);
  size_t len = 999;
  LinkVerdict v = classify(id, {f.get(), frame.size()}, reply, len);
  if (v != LinkVerdict::replied) {
    CHECK(len == 0);
    CHECK(std::all_of(reply.begin(), reply.end(), [](uint8_t x) { return x == 0xEE; }));
  }
  REQUIRE(len <= reply.size());
  reply.resize(len);
  return {v, reply};
}

void check_na(const Bytes& r, uint64_t dst_mac, const Ip6& dst_ip, bool solicited) {
  REQUIRE(r.size() == 14 + 40 + 32);
  CHECK(get(r, 0, 6) == dst_mac);
  CHECK(get(r, 6, 6) == kOurMac);
  CHECK(get(r, 12, 2) == 0x86DD);
  CHECK(get(r, 14, 4) == 0x60000000);  // version 6, TC 0, flow 0
  CHECK(get(r, 18, 2) == 32);
  CHECK(r[20] == 58);
  CHECK(r[21] == 255);
  CHECK(get6(r, 22) == kOurIp6);
  CHECK(get6(r, 38) == dst_ip);
  const size_t na = 54;
  CHECK(r[na] == 136);
  CHECK(r[na + 1] == 0);
  CHECK(r[na + 4] == (solicited ? 0x60 : 0x20));  // R=0, S, O=1
  CHECK(get(r, na + 5, 3) == 0);
  CHECK(get6(r, na + 8) == kOurIp6);
  CHECK(r[na + 24] == 2);  // target link-layer address
  CHECK(r[na + 25] == 1);
  CHECK(get(r, na + 26, 6) == kOurMac);
  // The independent routine over the message with its checksum zeroed must
  // reproduce the checksum field.
  Bytes msg(r.begin() + na, r.end());
  const uint16_t got = uint16_t(get(msg, 2, 2));
  msg[2] = msg[3] = 0;
  CHECK(ref_icmpv6_checksum(kOurIp6, dst_ip, msg.data(), msg.size()) == got);
}

}  // namespace

TEST_CASE("ARP request for our IPv4 gets an exact reply") {
  auto [v, r] = run(arp(1, kOurIp4));
  REQUIRE(v == LinkVerdict::replied);
  REQUIRE(r.size() == 60);  // padded to the Ethernet minimum
  Bytes want;
  eth(want, kPeerMac, kOurMac, 0x0806);
  put(want, 1, 2);
  put(want, 0x0800, 2);
  put(want, 6, 1);
  put(want, 4, 1);
  put(want, 2, 2);  // reply
  put(want, kOurMac, 6);
  put(want, kOurIp4, 4);
  put(want, kPeerMac, 6);
  put(want, kPeerIp4, 4);
  want.resize(60, 0);
  CHECK(r == want);

  // A unicast refresh to our MAC is answered too.
  CHECK(run(arp(1, kOurIp4, kOurMac)).verdict == LinkVerdict::replied);
}

TEST_CASE("ARP that is not a request for us is not ours") {
  CHECK(run(arp(1, kPeerIp4)).verdict == LinkVerdict::not_ours);
  CHECK(run(arp(2, kOurIp4)).verdict == LinkVerdict::not_ours);  // a reply
  CHECK(run(arp(1, kOurIp4, 0x02FFFFFFFFFFull)).verdict == LinkVerdict::not_ours);
  PlaneIdentity v6only = me();
  v6only.ipv4.reset();
  CHECK(run(arp(1, kOurIp4), v6only).verdict == LinkVerdict::not_ours);
  Bytes bad_plen = arp(1, kOurIp4);
  bad_plen[19] = 16;
  CHECK(run(bad_plen).verdict == LinkVerdict::not_ours);
  Bytes group_sender = arp(1, kOurIp4);
  group_sender[22] |= 0x01;  // sender hardware address with the group bit
  CHECK(run(group_sender).verdict == LinkVerdict::malformed);
}

TEST_CASE("Neighbour Solicitation to our solicited-node group gets a solicited NA") {
  auto [v, r] = run(ns());
  REQUIRE(v == LinkVerdict::replied);
  check_na(r, kPeerMac, kPeerIp6, true);
}

TEST_CASE("unicast Neighbour Solicitation with Ethernet padding gets an NA") {
  NsOpts o;
  o.dst = kOurIp6;
  o.dst_mac = kOurMac;
  o.slla = false;  // then the reply goes to the Ethernet source
  o.eth_pad = 6;   // padding must not enter the checksum
  auto [v, r] = run(ns(o));
  REQUIRE(v == LinkVerdict::replied);
  check_na(r, kPeerMac, kPeerIp6, true);
}

TEST_CASE("a DAD probe for our address is defended to all nodes") {
  NsOpts o;
  o.src = kUnspecified;
  o.slla = false;
  auto [v, r] = run(ns(o));
  REQUIRE(v == LinkVerdict::replied);
  check_na(r, 0x333300000001ull, kAllNodes, false);
}

TEST_CASE("invalid or foreign Neighbour Solicitations are dropped") {
  auto verdict = [](NsOpts o) { return run(ns(o)).verdict; };
  NsOpts o;
  o.hop_limit = 254;
  CHECK(verdict(o) == LinkVerdict::malformed);
  o = {};
  o.hop_limit = 64;
  CHECK(verdict(o) == LinkVerdict::malformed);
  o = {};
  o.code = 1;
  CHECK(verdict(o) == LinkVerdict::malformed);
  o = {};
  o.corrupt_checksum = true;
  CHECK(verdict(o) == LinkVerdict::malformed);
  o = {};
  o.slla_units = 0;  // zero-length option
  CHECK(verdict(o) == LinkVerdict::malformed);
  o = {};
  o.slla_units = 2;  // runs past the message
  CHECK(verdict(o) == LinkVerdict::malformed);
  o = {};
  o.src = kAllNodes;  // a multicast source is never valid
  CHECK(verdict(o) == LinkVerdict::malformed);
  o = {};
  o.src = kUnspecified;  // DAD must not carry a source link-layer option
  CHECK(verdict(o) == LinkVerdict::malformed);
  o = {};
  o.src = kUnspecified;
  o.slla = false;
  o.dst = kOurIp6;  // DAD must go to the solicited-node group
  o.dst_mac = kOurMac;
  CHECK(verdict(o) == LinkVerdict::malformed);

  o = {};
  o.target = kPeerIp6;
  o.dst = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xFF, 0x12, 0x34, 0x56};
  o.dst_mac = 0x3333FF123456ull;
  CHECK(verdict(o) == LinkVerdict::not_ours);
  o = {};
  o.dst_mac = kOurMac;  // group address at a MAC that is not its mapping
  CHECK(verdict(o) == LinkVerdict::not_ours);
  o = {};
  o.target = {0xFD, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0x00, 0xAB, 0xCD, 0xEF};  // same group, other host
  CHECK(verdict(o) == LinkVerdict::not_ours);

  PlaneIdentity v4only = me();
  v4only.ipv6.reset();
  CHECK(run(ns(), v4only).verdict == LinkVerdict::not_ours);

  Bytes echo = ns();
  echo[54] = 128;  // echo request: not answered here
  CHECK(run(echo).verdict == LinkVerdict::not_ours);
}

TEST_CASE("RoCEv2 to our addresses goes to the engine") {
  CHECK(run(udp4(4791)).verdict == LinkVerdict::roce);
  CHECK(run(udp6(4791)).verdict == LinkVerdict::roce);
}

TEST_CASE("other UDP, other addresses and other ethertypes are not ours") {
  CHECK(run(udp4(4792)).verdict == LinkVerdict::not_ours);
  CHECK(run(udp4(53)).verdict == LinkVerdict::not_ours);
  CHECK(run(udp4(4791, kPeerIp4)).verdict == LinkVerdict::not_ours);
  CHECK(run(udp4(4791, kOurIp4, kPeerMac)).verdict == LinkVerdict::not_ours);
  CHECK(run(udp4(4791, kOurIp4, 0xFFFFFFFFFFFFull)).verdict == LinkVerdict::not_ours);
  CHECK(run(udp4(4791, kOurIp4, kOurMac, 0x2000)).verdict == LinkVerdict::not_ours);  // first fragment
  CHECK(run(udp4(4791, kOurIp4, kOurMac, 0x0010)).verdict == LinkVerdict::not_ours);  // later fragment
  CHECK(run(udp6(4792)).verdict == LinkVerdict::not_ours);
  CHECK(run(udp6(4791, kPeerIp6)).verdict == LinkVerdict::not_ours);
  PlaneIdentity v6only = me();
  v6only.ipv4.reset();
  CHECK(run(udp4(4791), v6only).verdict == LinkVerdict::not_ours);

  Bytes tagged;
  eth(tagged, kOurMac, kPeerMac, 0x8100);
  put(tagged, 0x0064, 2);
  put(tagged, 0x0800, 2);
  Bytes inner = udp4(4791);
  tagged.insert(tagged.end(), inner.begin() + 14, inner.end());
  CHECK(run(tagged).verdict == LinkVerdict::not_ours);

  Bytes lldp;
  eth(lldp, 0x0180C200000Eull, kPeerMac, 0x88CC);
  lldp.resize(60, 0);
  CHECK(run(lldp).verdict == LinkVerdict::not_ours);

  // IPv4 options move the UDP header; the port is read where IHL says.
  Bytes opts = udp4(4792);
  opts[14] = 0x46;
  opts.insert(opts.begin() + 34, {0x01, 0x01, 0x12, 0xB7});  // NOPs, then bytes that read as port 4791
  CHECK(run(opts).verdict == LinkVerdict::not_ours);
  opts[40] = 0x12;
  opts[41] = 0xB7;
  CHECK(run(opts).verdict == LinkVerdict::roce);

  Bytes v4_bad_version = udp4(4791);
  v4_bad_version[14] = 0x65;
  CHECK(run(v4_bad_version).verdict == LinkVerdict::malformed);
}

TEST_CASE("truncated frames are malformed up to their minimum and never overread") {
  struct Case {
    const char* name;
    Bytes frame;
    size_t min_len;  // shortest prefix that still carries every byte the verdict needs
    LinkVerdict full;
  };
  NsOpts padded;
  padded.eth_pad = 10;
  const Bytes ns_frame = ns();
  const Case cases[] = {
      {"arp", arp(1, kOurIp4), 42, LinkVerdict::replied},
      {"ns", ns_frame, ns_frame.size(), LinkVerdict::replied},
      {"ns padded", ns(padded), ns_frame.size(), LinkVerdict::replied},
      {"udp4", udp4(4791), 14 + 20 + 8, LinkVerdict::roce},
      {"udp6", udp6(4791), 14 + 40 + 8, LinkVerdict::roce},
  };
  for (const Case& c : cases) {
    for (size_t n = 0; n <= c.frame.size(); ++n) {
      INFO(c.name << " truncated to " << n);
      const Bytes cut(c.frame.begin(), c.frame.begin() + n);
      const auto [v, r] = run(cut);
      CHECK(v == (n < c.min_len ? LinkVerdict::malformed : c.full));
    }
  }
}

TEST_CASE("a reply buffer below capacity is never written") {
  CHECK(run(arp(1, kOurIp4), me(), 59).verdict == LinkVerdict::not_ours);
  CHECK(run(ns(), me(), 85).verdict == LinkVerdict::not_ours);
  CHECK(run(ns(), me(), 86).verdict == LinkVerdict::replied);
}
