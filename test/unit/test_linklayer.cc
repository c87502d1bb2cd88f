#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
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
  uint64_t slla_mac = kPeerMac;
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
    put(icmp, o.slla_mac, 6);
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

TEST_CASE("ARP request for our IPv4 gets an exact reply", "[linklayer]") {
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

TEST_CASE("ARP that is not a request for us is not ours", "[linklayer]") {
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

TEST_CASE("Neighbour Solicitation to our solicited-node group gets a solicited NA", "[linklayer]") {
  auto [v, r] = run(ns());
  REQUIRE(v == LinkVerdict::replied);
  check_na(r, kPeerMac, kPeerIp6, true);
}

TEST_CASE("unicast Neighbour Solicitation with Ethernet padding gets an NA", "[linklayer]") {
  NsOpts o;
  o.dst = kOurIp6;
  o.dst_mac = kOurMac;
  o.slla = false;  // then the reply goes to the Ethernet source
  o.eth_pad = 6;   // padding must not enter the checksum
  auto [v, r] = run(ns(o));
  REQUIRE(v == LinkVerdict::replied);
  check_na(r, kPeerMac, kPeerIp6, true);
}

TEST_CASE("a DAD probe for our address is defended to all nodes", "[linklayer]") {
  NsOpts o;
  o.src = kUnspecified;
  o.slla = false;
  auto [v, r] = run(ns(o));
  REQUIRE(v == LinkVerdict::replied);
  check_na(r, 0x333300000001ull, kAllNodes, false);
}

TEST_CASE("invalid or foreign Neighbour Solicitations are dropped", "[linklayer]") {
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
  o.slla_mac = 0;  // an all-zero link address: nowhere to answer (ARP refuses it too)
  CHECK(verdict(o) == LinkVerdict::malformed);
  o = {};
  o.slla_mac = 0x010203040506ull;  // a group link address
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

TEST_CASE("RoCEv2 to our addresses goes to the engine", "[linklayer]") {
  CHECK(run(udp4(4791)).verdict == LinkVerdict::roce);
  CHECK(run(udp6(4791)).verdict == LinkVerdict::roce);
}

TEST_CASE("other UDP, other addresses and other ethertypes are not ours", "[linklayer]") {
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

TEST_CASE("truncated frames are malformed up to their minimum and never overread", "[linklayer]") {
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

TEST_CASE("a reply buffer below capacity is never written", "[linklayer]") {
  CHECK(run(arp(1, kOurIp4), me(), 59).verdict == LinkVerdict::not_ours);
  CHECK(run(ns(), me(), 85).verdict == LinkVerdict::not_ours);
  CHECK(run(ns(), me(), 86).verdict == LinkVerdict::replied);
}

namespace {

// --- Resolving peers: builders and learn_neighbour ---

constexpr uint64_t kOtherMac = 0x02CAFEF00D01ull;
constexpr uint32_t kOtherIp4 = 0x0A000103;  // 10.0.1.3
constexpr Ip6 kOtherIp6{0xFD, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0x00, 0x99, 0x88, 0x77};

PlaneIdentity peer() { return PlaneIdentity{kPeerMac, kPeerIp4, kPeerIp6}; }

// Overwrites n big-endian bytes at off.
void set(Bytes& b, size_t off, uint64_t v, unsigned n) {
  for (unsigned i = 0; i < n; ++i) b.at(off + i) = static_cast<uint8_t>(v >> (8 * (n - 1 - i)));
}

std::optional<NeighbourFact> learn(const Bytes& frame, const PlaneIdentity& id = me()) {
  // An exactly-sized heap copy, so that ASan flags any read past the end.
  std::unique_ptr<uint8_t[]> f(new uint8_t[frame.size() ? frame.size() : 1]);
  std::copy(frame.begin(), frame.end(), f.get());
  return learn_neighbour(id, {f.get(), frame.size()});
}

NeighbourFact fact4(uint32_t ip, uint64_t mac) { return NeighbourFact{ip, std::nullopt, mac}; }
NeighbourFact fact6(const Ip6& ip, uint64_t mac) { return NeighbourFact{std::nullopt, ip, mac}; }

// Runs a builder over a buffer of `cap` bytes and checks it wrote nothing
// past the length it returned (and nothing at all when it returned 0).
template <class Build>
Bytes built(Build build, size_t cap = kLinkReplyCapacity) {
  Bytes out(cap, 0xEE);
  const size_t n = build(std::span<uint8_t>(out));
  REQUIRE(n <= cap);
  CHECK(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(n), out.end(), [](uint8_t x) { return x == 0xEE; }));
  out.resize(n);
  return out;
}

Bytes arp_request_from(const PlaneIdentity& id, uint32_t target, size_t cap = kLinkReplyCapacity) {
  return built([&](std::span<uint8_t> out) { return build_arp_request(id, target, out); }, cap);
}
Bytes ns_from(const PlaneIdentity& id, const Ip6& target, size_t cap = kLinkReplyCapacity) {
  return built([&](std::span<uint8_t> out) { return build_neighbour_solicitation(id, target, out); }, cap);
}

// ARP offsets in an untagged frame: sender MAC, sender IP, target IP.
constexpr size_t kSha = 22, kSpa = 28, kTpa = 38;

// A Neighbour Advertisement as the peer would send it to us.
struct NaOpts {
  uint64_t eth_src = kPeerMac;
  uint64_t dst_mac = kOurMac;
  Ip6 src = kPeerIp6;
  Ip6 dst = kOurIp6;
  Ip6 target = kPeerIp6;
  uint8_t hop_limit = 255;
  uint8_t code = 0;
  uint32_t flags = 0x60000000;  // solicited, override
  bool tlla = true;
  uint64_t tlla_mac = kPeerMac;
  uint8_t tlla_units = 1;
  bool corrupt_checksum = false;
  unsigned eth_pad = 0;
};

Bytes na(const NaOpts& o = {}) {
  Bytes icmp;
  put(icmp, 136, 1);
  put(icmp, o.code, 1);
  put(icmp, 0, 2);  // checksum, filled below
  put(icmp, o.flags, 4);
  put(icmp, o.target);
  if (o.tlla) {
    put(icmp, 2, 1);
    put(icmp, o.tlla_units, 1);
    put(icmp, o.tlla_mac, 6);
  }
  uint16_t ck = ref_icmpv6_checksum(o.src, o.dst, icmp.data(), icmp.size());
  if (o.corrupt_checksum) ck ^= 0x0001;
  icmp[2] = uint8_t(ck >> 8);
  icmp[3] = uint8_t(ck);

  Bytes b;
  eth(b, o.dst_mac, o.eth_src, 0x86DD);
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

}  // namespace

TEST_CASE("build_arp_request writes an exact broadcast who-has", "[linklayer]") {
  const Bytes r = arp_request_from(me(), kPeerIp4);
  Bytes want;
  eth(want, 0xFFFFFFFFFFFFull, kOurMac, 0x0806);
  put(want, 1, 2);
  put(want, 0x0800, 2);
  put(want, 6, 1);
  put(want, 4, 1);
  put(want, 1, 2);  // request
  put(want, kOurMac, 6);
  put(want, kOurIp4, 4);
  put(want, 0, 6);  // the unknown being asked for
  put(want, kPeerIp4, 4);
  want.resize(60, 0);  // padded to the Ethernet minimum
  CHECK(r == want);

  CHECK(arp_request_from(me(), kPeerIp4, 60).size() == 60);
  CHECK(arp_request_from(me(), kPeerIp4, 59).empty());
  PlaneIdentity v6only = me();
  v6only.ipv4.reset();
  CHECK(arp_request_from(v6only, kPeerIp4).empty());
}

TEST_CASE("ARP round trip: our request is answered and the answer learned", "[linklayer]") {
  // The peer asks for us; we answer; the peer learns us from the answer.
  const Bytes request = arp_request_from(peer(), kOurIp4);
  REQUIRE(request.size() == 60);
  auto [v, reply] = run(request);
  REQUIRE(v == LinkVerdict::replied);
  const auto learned = learn(reply, peer());
  REQUIRE(learned);
  CHECK(*learned == fact4(kOurIp4, kOurMac));

  // RFC 826: the responder merges the requester's binding from the request.
  const auto merged = learn(request);
  REQUIRE(merged);
  CHECK(*merged == fact4(kPeerIp4, kPeerMac));

  // Nobody else learns from the exchange, nor does the asker from its own request.
  const PlaneIdentity other{kOtherMac, kOtherIp4, kOtherIp6};
  CHECK_FALSE(learn(request, other));
  CHECK_FALSE(learn(reply, other));
  CHECK_FALSE(learn(reply));  // the reply we sent, looped back to us
  CHECK_FALSE(learn(request, peer()));
}

TEST_CASE("ARP replies and requests are learned at our MAC or broadcast only", "[linklayer]") {
  CHECK(learn(arp(2, kOurIp4, kOurMac)) == fact4(kPeerIp4, kPeerMac));
  CHECK(learn(arp(2, kOurIp4)) == fact4(kPeerIp4, kPeerMac));  // broadcast announcement to us
  CHECK(learn(arp(1, kOurIp4, kOurMac)) == fact4(kPeerIp4, kPeerMac));
  CHECK_FALSE(learn(arp(2, kOurIp4, kOtherMac)));
  CHECK_FALSE(learn(arp(1, kOurIp4, kOtherMac)));
}

TEST_CASE("ARP that binds nothing for us is not learned", "[linklayer]") {
  CHECK_FALSE(learn(arp(2, kOtherIp4, kOurMac)));  // a reply for another IP
  CHECK_FALSE(learn(arp(1, kOtherIp4)));           // someone else's request
  CHECK_FALSE(learn(arp(3, kOurIp4)));             // RARP request
  PlaneIdentity v6only = me();
  v6only.ipv4.reset();
  CHECK_FALSE(learn(arp(2, kOurIp4, kOurMac), v6only));

  const Bytes good = arp(2, kOurIp4, kOurMac);
  auto with = [&](size_t off, uint64_t v, unsigned n) {
    Bytes b = good;
    set(b, off, v, n);
    return learn(b);
  };
  CHECK_FALSE(with(kSha, 0xFFFFFFFFFFFFull, 6));  // broadcast sender MAC
  CHECK_FALSE(with(kSha, 0x01005E000001ull, 6));  // multicast sender MAC
  CHECK_FALSE(with(kSha, 0, 6));
  CHECK_FALSE(with(kSpa, 0, 4));           // an RFC 5227 probe binds nothing
  CHECK_FALSE(with(kSpa, 0xE0000001, 4));  // 224.0.0.1
  CHECK_FALSE(with(kSpa, 0xFFFFFFFF, 4));
  CHECK_FALSE(with(kSpa, kOurIp4, 4));                            // someone claiming our address
  CHECK_FALSE(with(14, 6, 2));                                    // hardware type IEEE 802
  CHECK_FALSE(with(16, 0x86DD, 2));                               // protocol type
  CHECK_FALSE(with(18, 8, 1));                                    // hardware length
  CHECK_FALSE(with(19, 16, 1));                                   // protocol length
  CHECK_FALSE(with(12, 0x8100, 2));                               // not ARP at all
  CHECK(with(kSha, kOtherMac, 6) == fact4(kPeerIp4, kOtherMac));  // the ARP field, not the Ethernet source

  // Ethernet padding is ignored; every shorter prefix is rejected.
  Bytes padded = good;
  padded.resize(60, 0xA5);
  CHECK(learn(padded) == fact4(kPeerIp4, kPeerMac));
  for (size_t n = 0; n < good.size(); ++n) {
    INFO("truncated to " << n);
    CHECK_FALSE(learn(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n))));
  }
}

TEST_CASE("build_neighbour_solicitation writes an exact NS to the solicited-node group", "[linklayer]") {
  // The fixture's NS (built byte by byte, independent checksum) is what a
  // peer resolving our address must send.
  const Bytes r = ns_from(peer(), kOurIp6);
  REQUIRE(r.size() == 86);
  CHECK(r == ns());
  CHECK(get(r, 0, 6) == kOurSolicitedMac);
  CHECK(get6(r, 38) == kOurSolicitedNode);
  CHECK(r[21] == 255);

  CHECK(ns_from(peer(), kOurIp6, 86).size() == 86);
  CHECK(ns_from(peer(), kOurIp6, 85).empty());
  PlaneIdentity v4only = peer();
  v4only.ipv6.reset();
  CHECK(ns_from(v4only, kOurIp6).empty());
  CHECK(ns_from(peer(), kAllNodes).empty());
  CHECK(ns_from(peer(), kUnspecified).empty());
}

TEST_CASE("ND round trip: our solicitation is answered and the advertisement learned", "[linklayer]") {
  const Bytes solicit = ns_from(peer(), kOurIp6);
  auto [v, advert] = run(solicit);
  REQUIRE(v == LinkVerdict::replied);
  const auto learned = learn(advert, peer());
  REQUIRE(learned);
  CHECK(*learned == fact6(kOurIp6, kOurMac));

  // RFC 4861 7.2.3: a solicitation with a source link-layer option binds its sender.
  const auto merged = learn(solicit);
  REQUIRE(merged);
  CHECK(*merged == fact6(kPeerIp6, kPeerMac));

  const PlaneIdentity other{kOtherMac, kOtherIp4, kOtherIp6};
  CHECK_FALSE(learn(solicit, other));
  CHECK_FALSE(learn(advert, other));
  CHECK_FALSE(learn(advert));  // our own advertisement, looped back
  CHECK_FALSE(learn(solicit, peer()));
}

TEST_CASE("Neighbour Advertisements are learned from their options or the Ethernet source", "[linklayer]") {
  CHECK(learn(na()) == fact6(kPeerIp6, kPeerMac));
  NaOpts o;
  o.tlla_mac = kOtherMac;  // the option wins over the Ethernet source
  CHECK(learn(na(o)) == fact6(kPeerIp6, kOtherMac));
  o = {};
  o.tlla = false;
  o.eth_pad = 10;  // padding must not enter the checksum
  CHECK(learn(na(o)) == fact6(kPeerIp6, kPeerMac));
  o = {};
  o.flags = 0;  // neither solicited nor override: still the target's binding
  CHECK(learn(na(o)) == fact6(kPeerIp6, kPeerMac));
}

TEST_CASE("invalid or foreign Neighbour Advertisements are not learned", "[linklayer]") {
  auto learned = [](NaOpts o) { return learn(na(o)); };
  NaOpts o;
  o.corrupt_checksum = true;
  CHECK_FALSE(learned(o));
  o = {};
  o.hop_limit = 254;  // could be from off-link
  CHECK_FALSE(learned(o));
  o = {};
  o.code = 1;
  CHECK_FALSE(learned(o));
  o = {};
  o.tlla_mac = 0xFFFFFFFFFFFFull;
  CHECK_FALSE(learned(o));
  o = {};
  o.tlla_mac = 0x333300000001ull;
  CHECK_FALSE(learned(o));
  o = {};
  o.tlla = false;
  o.eth_src = 0x333300000001ull;  // no option, and the Ethernet source is a group
  CHECK_FALSE(learned(o));
  o = {};
  o.tlla_units = 0;
  CHECK_FALSE(learned(o));
  o = {};
  o.tlla_units = 2;  // runs past the message
  CHECK_FALSE(learned(o));
  o = {};
  o.target = kAllNodes;
  CHECK_FALSE(learned(o));
  o = {};
  o.target = kUnspecified;
  CHECK_FALSE(learned(o));
  o = {};
  o.target = kOurIp6;  // someone claiming our address
  CHECK_FALSE(learned(o));
  o = {};
  o.dst = kOtherIp6;  // to someone else
  CHECK_FALSE(learned(o));
  o = {};
  o.dst_mac = kOtherMac;
  CHECK_FALSE(learned(o));
  o = {};
  o.dst = kAllNodes;  // unsolicited without override: may not replace a cached address
  o.dst_mac = 0x333300000001ull;
  o.flags = 0;
  CHECK_FALSE(learned(o));
  o.flags = 0x20000000;
  o.tlla = false;  // nor without saying which address
  CHECK_FALSE(learned(o));
  o.tlla = true;
  o.dst_mac = kOurMac;  // all nodes' address at another MAC
  CHECK_FALSE(learned(o));
  o.dst_mac = 0x333300000001ull;
  o.flags = 0x60000000;  // solicited, to a group: invalid (RFC 4861 7.1.2)
  CHECK_FALSE(learned(o));

  PlaneIdentity v4only = me();
  v4only.ipv6.reset();
  CHECK_FALSE(learn(na(), v4only));
  Bytes echo_reply = na();
  echo_reply[54] = 129;
  CHECK_FALSE(learn(echo_reply));
  Bytes v5 = na();
  v5[14] = 0x50;
  CHECK_FALSE(learn(v5));
  CHECK_FALSE(learn(udp6(4791)));
  CHECK_FALSE(learn(udp4(4791)));
}

TEST_CASE("Neighbour Solicitations bind their sender only with a link-layer option", "[linklayer]") {
  auto learned = [](NsOpts o) { return learn(ns(o)); };
  NsOpts o;
  CHECK(learned(o) == fact6(kPeerIp6, kPeerMac));
  o.dst = kOurIp6;  // unicast refresh
  o.dst_mac = kOurMac;
  CHECK(learned(o) == fact6(kPeerIp6, kPeerMac));
  o = {};
  o.slla = false;  // answerable, but names no link address to learn
  CHECK(run(ns(o)).verdict == LinkVerdict::replied);
  CHECK_FALSE(learned(o));
  o = {};
  o.src = kUnspecified;  // a DAD probe binds nothing
  o.slla = false;
  CHECK_FALSE(learned(o));
  o = {};
  o.src = kOurIp6;  // someone claiming our address
  CHECK_FALSE(learned(o));
  o = {};
  o.src = kAllNodes;
  CHECK_FALSE(learned(o));
  o = {};
  o.corrupt_checksum = true;
  CHECK_FALSE(learned(o));
  o = {};
  o.hop_limit = 64;
  CHECK_FALSE(learned(o));
  o = {};
  o.slla_units = 0;
  CHECK_FALSE(learned(o));
  o = {};
  o.target = kOtherIp6;  // for someone else
  o.dst = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xFF, 0x99, 0x88, 0x77};
  o.dst_mac = 0x3333FF998877ull;
  CHECK_FALSE(learned(o));
  o = {};
  o.dst_mac = kOurMac;  // our group at a MAC that is not its mapping
  CHECK_FALSE(learned(o));
  o = {};
  o.slla_mac = 0xFFFFFFFFFFFFull;
  CHECK_FALSE(learned(o));
  o = {};
  o.slla_mac = 0;
  CHECK_FALSE(learned(o));
}

TEST_CASE("truncated ND frames are never learned from and never overread", "[linklayer]") {
  NsOpts padded_ns;
  padded_ns.eth_pad = 10;
  NaOpts padded_na;
  padded_na.eth_pad = 10;
  const Bytes frames[] = {ns(), ns(padded_ns), na(), na(padded_na)};
  for (const Bytes& f : frames) {
    const size_t full = 14 + 40 + get(f, 18, 2);  // the rest is Ethernet padding
    REQUIRE(learn(f));
    for (size_t n = 0; n < f.size(); ++n) {
      INFO("frame of " << f.size() << " truncated to " << n);
      CHECK(learn(Bytes(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n))).has_value() == (n >= full));
    }
  }
}

NeighbourFact refresh(NeighbourFact f) {
  f.refresh_only = true;
  return f;
}

TEST_CASE("build_announcement writes an RFC 5227 ARP announcement, or an unsolicited NA", "[linklayer]") {
  const Bytes a = built([](std::span<uint8_t> out) { return build_announcement(me(), out); });
  Bytes want;
  eth(want, 0xFFFFFFFFFFFFull, kOurMac, 0x0806);
  put(want, 1, 2);
  put(want, 0x0800, 2);
  put(want, 6, 1);
  put(want, 4, 1);
  put(want, 1, 2);  // a request
  put(want, kOurMac, 6);
  put(want, kOurIp4, 4);
  put(want, 0, 6);
  put(want, kOurIp4, 4);  // asking for itself: an announcement
  want.resize(60, 0);
  CHECK(a == want);
  CHECK(built([](std::span<uint8_t> out) { return build_announcement(me(), out); }, 59).empty());

  PlaneIdentity v6only = me();
  v6only.ipv4.reset();
  const Bytes na6 = built([&](std::span<uint8_t> out) { return build_announcement(v6only, out); });
  check_na(na6, 0x333300000001ull, kAllNodes, false);  // override, not solicited
  CHECK(built([&](std::span<uint8_t> out) { return build_announcement(v6only, out); }, 85).empty());
  PlaneIdentity none = me();
  none.ipv4.reset();
  none.ipv6.reset();
  CHECK(built([&](std::span<uint8_t> out) { return build_announcement(none, out); }).empty());
}

TEST_CASE("announcements refresh a binding and never add one", "[linklayer]") {
  // The peer announces itself; we learn a refresh-only binding.
  const Bytes garp = built([](std::span<uint8_t> out) { return build_announcement(peer(), out); });
  CHECK(learn(garp) == refresh(fact4(kPeerIp4, kPeerMac)));
  Bytes as_reply = garp;  // RFC 5227 allows a reply too
  set(as_reply, 20, 2, 2);
  CHECK(learn(as_reply) == refresh(fact4(kPeerIp4, kPeerMac)));
  Bytes unicast = garp;  // an announcement is broadcast
  set(unicast, 0, kOurMac, 6);
  CHECK_FALSE(learn(unicast));
  Bytes ours = garp;  // a peer announcing our address is a conflict
  set(ours, kSpa, kOurIp4, 4);
  set(ours, kTpa, kOurIp4, 4);
  CHECK_FALSE(learn(ours));
  Bytes probe = garp;  // an RFC 5227 probe (sender 0.0.0.0) binds nothing
  set(probe, kSpa, 0, 4);
  CHECK_FALSE(learn(probe));
  PlaneIdentity v6only = me();
  v6only.ipv4.reset();
  CHECK_FALSE(learn(garp, v6only));

  PlaneIdentity peer6 = peer();
  peer6.ipv4.reset();
  const Bytes una = built([&](std::span<uint8_t> out) { return build_announcement(peer6, out); });
  CHECK(learn(una) == refresh(fact6(kPeerIp6, kPeerMac)));
  NaOpts o;
  o.dst = kAllNodes;
  o.dst_mac = 0x333300000001ull;
  o.flags = 0x20000000;
  CHECK(learn(na(o)) == refresh(fact6(kPeerIp6, kPeerMac)));
  // Our own, looped back, teaches us nothing.
  CHECK_FALSE(learn(built([](std::span<uint8_t> out) { return build_announcement(me(), out); })));
  CHECK_FALSE(learn(built([&](std::span<uint8_t> out) { return build_announcement(v6only, out); })));
}
