// Entropy values: how an EV rides in a packet (UDP and STEV formats), and how
// a GEN EV profile expands into EVs, following the algorithm documented in
// the OCP mrc_ctl.h header.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "wire/packet.h"

namespace mrc::wire {

// Values of enum mrc_ctl_ev_fmt_mode [P].
enum class EvFormat : uint8_t { stev = 1, srv6 = 2, udp = 4 };

// Puts a 32-bit EV into the addressing of a frame: the UDP source port, and
// for STEV also the IPv6 flow label. SRv6 is not encoded here (it rewrites
// the destination address) and leaves `addr` unchanged.
void ev_encode(EvFormat fmt, uint32_t ev, Addressing& addr);

// Writes an EV into a built frame: the UDP source port, and for STEV over
// IPv6 also the flow label.
void ev_apply(EvFormat fmt, uint32_t ev, const MutablePacket& m);

// Recovers the EV from a received packet (the responder reflects it in SACKs).
uint32_t ev_decode(EvFormat fmt, const Packet& pkt);

// An EV as mrc_ctl holds it: up to 32 bytes, most significant bit first.
using EvBytes = std::array<uint8_t, 32>;

// struct mrc_ctl_ev_field [P]: for a generated field, `mask` says which bits
// of the field the generated value fills (its most significant bit into the
// highest mask bit), `init_val` supplies the other bits, and the generated
// value runs from min_val to max_val. A fixed field has mask == 0.
struct EvField {
  uint32_t width = 0;
  uint32_t init_val = 0;
  uint32_t min_val = 0;
  uint32_t max_val = 0;
  uint32_t mask = 0;
};

struct EvGenProfile {
  std::vector<uint8_t> fmt_widths;  // the EV format profile, in bits per field
  std::vector<EvField> fields;
};

// Returns an empty string when the profile is valid, else why it is not.
std::string ev_profile_check(const EvGenProfile& prof);

// Number of EVs the profile generates: the product of (max - min + 1) over
// generated fields.
uint64_t ev_gen_count(const EvGenProfile& prof);

// Expands a compact EV (the generated values of each masked field, packed
// MSB-first in field order) into the full EV. Field i occupies fmt_widths[i]
// bits, fields concatenated from the most significant end of byte 0.
EvBytes ev_expand(const EvGenProfile& prof, std::span<const uint8_t> compact);

// The index-th EV of a GEN profile, index in [0, ev_gen_count). The last
// field varies fastest, so with full ranges the compact EV counts up as a
// big-endian integer.
EvBytes ev_generate(const EvGenProfile& prof, uint64_t index);

// The low `bits` bits of an EV read as an integer: a 16-bit UDP EV or a
// 32-bit STEV EV, right-aligned.
uint32_t ev_value(const EvBytes& ev, unsigned bits);

unsigned ev_format_bits(const EvGenProfile& prof);

}  // namespace mrc::wire
