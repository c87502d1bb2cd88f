// The link-layer chores a plane answers itself, so that peers can resolve its
// addresses without a kernel stack behind the port: ARP (RFC 826) for IPv4
// and Neighbour Discovery (RFC 4861) for IPv6. Everything else is sorted into
// "RoCEv2 for the engine" or "not ours". DPDK-free: it works on byte spans.
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

// The largest reply classify() writes (an 86-byte Neighbour Advertisement),
// rounded up; `reply` must be at least this big.
inline constexpr size_t kLinkReplyCapacity = 128;

// Classifies one received Ethernet frame (no FCS) for a plane. On `replied`,
// the reply frame is in reply[0, reply_len); otherwise reply_len is 0 and
// `reply` is untouched. Never reads outside `frame`. 802.1Q-tagged frames are
// not_ours. RoCEv2 frames are only screened (addresses, UDP port), not
// validated: the engine's parser does that and counts what it drops.
LinkVerdict classify(const PlaneIdentity& me, std::span<const uint8_t> frame, std::span<uint8_t> reply,
                     size_t& reply_len);

}  // namespace mrc::nic
