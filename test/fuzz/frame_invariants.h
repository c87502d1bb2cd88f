// What must hold for any frame the parser accepts. Shared by the property
// test and the libFuzzer target so both judge the parser the same way.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <span>

#include "wire/packet.h"

namespace mrc::test {

// Returns nullptr when the accepted packet is consistent, else what is wrong.
inline const char* accepted_packet_violation(std::span<const uint8_t> frame, const wire::Packet& p) {
  using namespace wire;
  const Layout& at = p.at;
  if (at.size > frame.size()) return "packet larger than the frame";
  if (at.size < at.bth + kBthLen + kIcrcLen) return "packet shorter than BTH + ICRC";
  if (uint64_t(at.payload) + at.payload_len + at.pad + kIcrcLen != at.size) return "payload does not end at the ICRC";
  if (at.pad > 3) return "pad count above 3";
  for (uint16_t off : {at.meth, at.tseth, at.reth, at.imm, at.ctrl}) {
    if (off && (off < at.bth + kBthLen || off >= at.payload)) return "extension header outside the header area";
  }
  if (op_flags(at.opcode) == 0) return "accepted an unknown opcode";
  if (!(at.flags & kOpPayload) && at.payload_len) return "payload on an opcode without one";
  return nullptr;
}

}  // namespace mrc::test
