// The link-layer chores a plane does itself, with no kernel stack behind the
// port: ARP (RFC 826) for IPv4 and Neighbour Discovery (RFC 4861) for IPv6.
// It answers peers resolving its addresses, and resolves theirs (builds the
// queries, learns from the answers). Everything else is sorted into "RoCEv2
// for the engine" or "not ours". DPDK-free: it works on byte spans.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace mrc::nic {

// The addresses a plane answers for. A plane without an IPv4 (IPv6) address
// neither answers ARP (NS) nor accepts RoCEv2 over IPv4 (IPv6).
struct PlaneIdentity {
  uint64_t mac = 0;              // low 48 bits, first octet most significant
  std::optional<uint32_t> ipv4;  // host order
  std::optional<std::array<uint8_t, 16>> ipv6;
};

enum class LinkVerdict : uint8_t {
  roce,       // IPv4/IPv6 UDP to the RoCEv2 port, our MAC and our IP: hand to the engine
  replied,    // ARP request or Neighbour Solicitation for us: `reply` holds the answer
  not_ours,   // well formed, but not addressed to us or not a protocol we answer
  malformed,  // claims to be ARP/IP for us but is cut short or breaks its RFC's rules
};

// The largest frame classify() or the builders below write (an 86-byte
// Neighbour Advertisement or Solicitation), rounded up; `reply` must be at
// least this big.
inline constexpr size_t kLinkReplyCapacity = 128;

// Classifies one received Ethernet frame (no FCS) for a plane. On `replied`,
// the reply frame is in reply[0, reply_len); otherwise reply_len is 0 and
// `reply` is untouched. Never reads outside `frame`. 802.1Q-tagged frames are
// not_ours. RoCEv2 frames are only screened (addresses, UDP port), not
// validated: the engine's parser does that and counts what it drops.
LinkVerdict classify(const PlaneIdentity& me, std::span<const uint8_t> frame, std::span<uint8_t> reply,
                     size_t& reply_len);

// Resolving a peer. The builders write one complete frame (Ethernet header
// on, FCS off) into out[0, n) and return n, or return 0 and leave `out`
// untouched when `out` is too small or the query cannot be made; an `out` of
// kLinkReplyCapacity bytes is always big enough.

// A broadcast ARP request "who has target_ipv4 (host order)?" from me, padded
// to the Ethernet minimum (60 bytes). 0 if me has no IPv4 address.
size_t build_arp_request(const PlaneIdentity& me, uint32_t target_ipv4, std::span<uint8_t> out);

// A Neighbour Solicitation for `target`, sent from my IPv6 address to the
// target's solicited-node group at its mapped MAC, hop limit 255, with my
// source link-layer address option (86 bytes). 0 if me has no IPv6 address
// or the target is multicast or unspecified (it has no solicited-node group).
size_t build_neighbour_solicitation(const PlaneIdentity& me, const std::array<uint8_t, 16>& target,
                                    std::span<uint8_t> out);

// An announcement of my own binding, for peers that cached an older one
// (we restarted with another MAC): a broadcast ARP announcement, sender and
// target both my IPv4 (RFC 5227 2.3), or else an unsolicited Neighbour
// Advertisement of my IPv6 address to all nodes with the override flag
// (RFC 4861 7.2.6). 0 if me has neither address.
size_t build_announcement(const PlaneIdentity& me, std::span<uint8_t> out);

// One binding learned from the link: exactly one of ipv4/ipv6 is set.
struct NeighbourFact {
  std::optional<uint32_t> ipv4;  // host order
  std::optional<std::array<uint8_t, 16>> ipv6;
  uint64_t mac = 0;  // a station address: non-zero, group bit clear
  // From an announcement (gratuitous ARP, unsolicited NA): it may only
  // update a binding already cached, never add one (RFC 4861 7.2.5; Linux's
  // arp_accept=0), so a flood of them cannot fill the cache.
  bool refresh_only = false;
  bool operator==(const NeighbourFact&) const = default;
};

// The (IP, MAC) binding a received Ethernet frame (no FCS) tells me about its
// sender, or nullopt if it tells me none. Learned from:
//  - an ARP reply or request whose target protocol address is my IPv4, sent
//    to my MAC or broadcast (RFC 826 merges the requester's binding too);
//  - a Neighbour Advertisement sent to my IPv6 address and MAC: its target
//    at its target link-layer address option, or failing that at the
//    Ethernet source;
//  - a Neighbour Solicitation for my IPv6 address (unicast, or to my
//    solicited-node group) carrying a source link-layer address option: its
//    IPv6 source at that address;
//  - refresh_only: a broadcast ARP announcement (sender and target protocol
//    addresses equal), and a Neighbour Advertisement to all nodes with the
//    override flag and a target link-layer address option.
// Anything malformed (short, wrong types or lengths, ND hop limit not 255, ND
// code not 0, bad ICMPv6 checksum or options) is nullopt, as is a binding to
// a zero or group MAC or to an IP that is zero/unspecified, multicast,
// broadcast or my own. Never reads outside `frame`. The caller decides what
// to cache; nothing here tracks which queries are outstanding.
std::optional<NeighbourFact> learn_neighbour(const PlaneIdentity& me, std::span<const uint8_t> frame);

}  // namespace mrc::nic
