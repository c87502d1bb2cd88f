// Expected EVs come from the OCP repository's examples/ev_expansion program
// (commit 662a150) run on the same field definitions, and from the worked
// examples in its mrc_ctl_gen_ev.md.
#include <catch2/catch.hpp>

#include <vector>

#include "wire/ev.h"

using namespace mrc::wire;

namespace {

uint32_t first32(const EvBytes& ev) { return ev_value(ev, 32); }

EvGenProfile profile(std::vector<uint8_t> widths, std::vector<EvField> fields) {
  EvGenProfile p{std::move(widths), std::move(fields)};
  INFO(ev_profile_check(p));
  REQUIRE(ev_profile_check(p).empty());
  return p;
}

}  // namespace

TEST_CASE("expansion of compact EVs matches the OCP reference program") {
  SECTION("STEV with fixed init bits (stev_gen_with_fixed)") {
    auto p = profile({16, 16}, {{16, 0x100, 1, 0xF, 0xF}, {16, 0x200, 1, 0xF, 0xF}});
    const uint8_t compact[] = {0xA4};
    CHECK(first32(ev_expand(p, compact)) == 0x010A0204);
  }
  SECTION("non-contiguous masks fill from the highest mask bit down") {
    auto p = profile({16, 16}, {{16, 0x1000, 1, 0xFF, 0x0F0F}, {16, 0x2000, 1, 0xFF, 0x0F0F}});
    const uint8_t a[] = {0x33, 0x12};
    const uint8_t b[] = {0xE3, 0x3E};
    CHECK(first32(ev_expand(p, a)) == 0x13032102);
    CHECK(first32(ev_expand(p, b)) == 0x1E03230E);
  }
}

TEST_CASE("GEN enumeration: last field fastest") {
  SECTION("mrc_ctl_gen_ev.md STEV 8/4/4") {
    auto p = profile({8, 4, 4}, {{8, 0, 0, 255, 0xFF}, {4, 0, 0, 15, 0xF}, {4, 0, 0, 15, 0xF}});
    REQUIRE(ev_gen_count(p) == 65536);
    for (uint32_t i = 0; i < 8; ++i) CHECK(first32(ev_generate(p, i)) == (i << 16));
    CHECK(first32(ev_generate(p, 65534)) == 0xFFFE0000);
    CHECK(first32(ev_generate(p, 65535)) == 0xFFFF0000);
    CHECK(ev_value(ev_generate(p, 0x1234), ev_format_bits(p)) == 0x1234);
  }
  SECTION("fixed init bits with min 1") {
    auto p = profile({16, 16}, {{16, 0x100, 1, 0xF, 0xF}, {16, 0x200, 1, 0xF, 0xF}});
    REQUIRE(ev_gen_count(p) == 225);
    for (uint32_t i = 0; i < 8; ++i) CHECK(first32(ev_generate(p, i)) == 0x01010201 + i);
    CHECK(first32(ev_generate(p, 223)) == 0x010F020E);
    CHECK(first32(ev_generate(p, 224)) == 0x010F020F);
  }
  SECTION("non-contiguous masks") {
    auto p = profile({16, 16}, {{16, 0x1000, 1, 0xFF, 0x0F0F}, {16, 0x2000, 1, 0xFF, 0x0F0F}});
    REQUIRE(ev_gen_count(p) == 65025);
    for (uint32_t i = 0; i < 8; ++i) CHECK(first32(ev_generate(p, i)) == 0x10012001 + i);
    CHECK(first32(ev_generate(p, 65024)) == 0x1F0F2F0F);
  }
  SECTION("three STEV fields, one fixed, partial ranges") {
    auto p = profile({12, 12, 8}, {{12, 0xABC, 0, 0, 0}, {10, 0x200, 0, 179, 0xFF}, {8, 0x50, 1, 3, 0x0C}});
    REQUIRE(ev_gen_count(p) == 540);
    const uint32_t want[] = {0xABC20054, 0xABC20058, 0xABC2005C, 0xABC20154,
                             0xABC20158, 0xABC2015C, 0xABC20254, 0xABC20258};
    for (uint32_t i = 0; i < 8; ++i) CHECK(first32(ev_generate(p, i)) == want[i]);
    CHECK(first32(ev_generate(p, 538)) == 0xABC2B358);
    CHECK(first32(ev_generate(p, 539)) == 0xABC2B35C);
  }
  SECTION("16-bit UDP format") {
    auto p = profile({8, 8}, {{8, 0xC0, 0, 7, 0x0E}, {8, 0, 0, 179, 0xFF}});
    REQUIRE(ev_gen_count(p) == 1440);
    for (uint32_t i = 0; i < 8; ++i) CHECK(ev_value(ev_generate(p, i), 16) == 0xC000 + i);
    CHECK(ev_value(ev_generate(p, 1438), 16) == 0xCEB2);
    CHECK(ev_value(ev_generate(p, 1439), 16) == 0xCEB3);
  }
}

TEST_CASE("invalid GEN profiles are refused with a reason") {
  auto bad = [](std::vector<uint8_t> w, std::vector<EvField> f) {
    return ev_profile_check(EvGenProfile{std::move(w), std::move(f)});
  };
  CHECK_FALSE(bad({8}, {}).empty());
  CHECK_FALSE(bad({8}, {{8, 0, 0, 1, 1}, {8, 0, 0, 1, 1}}).empty());  // more fields than format
  CHECK_FALSE(bad({8}, {{9, 0, 0, 1, 1}}).empty());                   // wider than format
  CHECK_FALSE(bad({8}, {{8, 0x100, 0, 1, 1}}).empty());               // init exceeds width
  CHECK_FALSE(bad({8}, {{8, 0, 0, 1, 0x100}}).empty());               // mask exceeds width
  CHECK_FALSE(bad({8}, {{8, 0, 0, 4, 0x3}}).empty());                 // max needs 3 bits, mask has 2
  CHECK_FALSE(bad({8}, {{8, 0, 3, 2, 0x3}}).empty());                 // min > max
  CHECK_FALSE(bad({8}, {{8, 0, 1, 0, 0}}).empty());                   // fixed with a range
  CHECK_FALSE(bad({8}, {{33, 0, 0, 0, 0}}).empty());
  CHECK(bad({32}, {{32, 0xFFFFFFFF, 0, 0, 0}}).empty());  // full-width fixed field is fine
}

TEST_CASE("EV encodings in the packet") {
  Addressing a;
  a.src_ip = *IpAddr::parse("2001:db8::1");
  a.dst_ip = *IpAddr::parse("2001:db8::2");
  a.flow_label = 0xF0000;  // bits above the STEV share are kept

  ev_encode(EvFormat::udp, 0x1C0DE, a);
  CHECK(a.udp_src_port == 0xC0DE);
  CHECK(a.flow_label == 0xF0000);

  ev_encode(EvFormat::stev, 0xABCD1234, a);
  CHECK(a.udp_src_port == 0xABCD);
  CHECK(a.flow_label == 0xF1234);

  std::vector<uint8_t> buf(256);
  MutablePacket m = begin_frame(buf, a, uint8_t(Opcode::mrc_probe), false, 0);
  REQUIRE(m.base);
  finish_frame(m);
  Packet p;
  REQUIRE(parse_frame(std::span(buf.data(), m.at.size), p) == ParseError::ok);
  CHECK(ev_decode(EvFormat::stev, p) == 0xABCD1234);
  CHECK(ev_decode(EvFormat::udp, p) == 0xABCD);
}
