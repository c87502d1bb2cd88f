// Known-good RoCEv2 frames from an independent implementation (scapy) and a
// real ConnectX-4 Lx capture: our ICRC and parser must agree with them.
#include <catch2/catch.hpp>

#include "golden_vectors.h"
#include "wire/bytes.h"
#include "wire/icrc.h"
#include "wire/packet.h"

using namespace mrc::wire;

TEST_CASE("golden vectors: ICRC and parse results") {
  REQUIRE(mrc::test::kGoldenVectors.size() >= 3);
  for (const auto& g : mrc::test::kGoldenVectors) {
    INFO(g.name);
    const std::vector<uint8_t> f(g.frame.begin(), g.frame.end());
    const unsigned l3 = load_be16(f.data() + 12) == kEtherTypeVlan ? kEthLen + kVlanTagLen : kEthLen;
    std::span<const uint8_t> l3_span(f.data() + l3, f.size() - l3);
    CHECK(load_le32(f.data() + f.size() - 4) == g.icrc_wire_le);
    CHECK(icrc_compute(l3_span) == g.icrc_wire_le);
    CHECK(icrc_check(l3_span));

    Packet p;
    const ParseError e = parse_frame(f, p);
    if (op_flags(g.opcode) == 0) {
      // Not an opcode we speak (UC SEND_ONLY): refused by name, not by ICRC.
      CHECK(e == ParseError::unknown_opcode);
      continue;
    }
    REQUIRE(e == ParseError::ok);
    CHECK(p.at.opcode == g.opcode);
    CHECK(p.bth().dest_qp() == g.dest_qp);
    CHECK(p.bth().psn() == g.psn);
    CHECK(p.bth().pad_count() == g.pad);
    CHECK(p.bth().ack_req() == g.ack_req);
    CHECK(p.at.payload_len == g.payload_len);
    CHECK((p.at.reth != 0) == g.has_reth);
    if (g.has_reth) {
      CHECK(p.reth().va() == g.va);
      CHECK(p.reth().rkey() == g.rkey);
      CHECK(p.reth().dma_len() == g.dma_len);
    }
    // Any single-bit flip in covered bytes must break the ICRC.
    std::vector<uint8_t> bad = f;
    bad[p.at.bth + 11] ^= 0x01;
    CHECK_FALSE(icrc_check({bad.data() + l3, bad.size() - l3}));
  }
}
