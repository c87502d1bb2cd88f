#include <catch2/catch.hpp>

#include <algorithm>

#include <vector>

#include "wire/icrc.h"
#include "wire/packet.h"

using namespace mrc::wire;

namespace {

Addressing addressing(bool v6, bool vlan) {
  Addressing a;
  a.src_mac = 0x020000000001;
  a.dst_mac = 0x020000000002;
  a.src_ip = *IpAddr::parse(v6 ? "2001:db8::1" : "10.0.0.1");
  a.dst_ip = *IpAddr::parse(v6 ? "2001:db8::2" : "10.0.0.2");
  if (vlan) a.vlan_tci = 0x2064;
  a.udp_src_port = 0xC123;
  a.flow_label = v6 ? 0xABCDE : 0;
  a.dscp = 26;
  return a;
}

const std::vector<uint8_t> kAllOpcodes = {
#define MRC_X(name, value, flags) value,
    MRC_OPCODES(MRC_X)
#undef MRC_X
};

// A valid frame of `opcode` with recognisable field values.
std::vector<uint8_t> build(uint8_t opcode, bool v6, bool vlan, uint32_t payload_len, bool tseth = false) {
  std::vector<uint8_t> buf(payload_len + 200, 0xEE);
  MutablePacket m = begin_frame(buf, addressing(v6, vlan), opcode, tseth, payload_len);
  REQUIRE(m.base != nullptr);
  m.bth().set_dest_qp(0x00ABCD);
  m.bth().set_psn(0xFFFFFE);
  m.bth().set_ack_req(1);
  if (m.at.meth) m.meth().set_msn(7);
  if (m.at.tseth) m.tseth().set_tx_timestamp(0x1357);
  if (m.at.reth) {
    m.reth().set_va(0x7F0000001000);
    m.reth().set_rkey(0x55AA);
    m.reth().set_dma_len(payload_len);
  }
  if (m.at.imm) m.imm().set_imm(0xFEEDF00D);
  if (op_flags(opcode) & kOpSeth) m.seth().set_sack_bitmap(0xF0F0);
  for (size_t i = 0; i < m.at.payload_len; ++i) m.payload()[i] = static_cast<uint8_t>(i);
  finish_frame(m);
  buf.resize(m.at.size);
  return buf;
}

}  // namespace

TEST_CASE("every opcode builds and parses back, IPv4 and IPv6, with and without VLAN") {
  for (bool v6 : {false, true}) {
    for (bool vlan : {false, true}) {
      for (uint8_t opc : kAllOpcodes) {
        const bool payload = op_flags(opc) & kOpPayload;
        for (uint32_t len : payload ? std::vector<uint32_t>{0, 1, 2, 3, 4, 1023, 4096} : std::vector<uint32_t>{0}) {
          INFO("opcode " << int(opc) << " v6 " << v6 << " vlan " << vlan << " len " << len);
          auto f = build(opc, v6, vlan, len, true);
          Packet p;
          REQUIRE(parse_frame(f, p) == ParseError::ok);
          CHECK(p.at.opcode == opc);
          CHECK(p.at.ip_version == (v6 ? 6 : 4));
          CHECK(p.at.has_vlan == vlan);
          CHECK(p.bth().dest_qp() == 0x00ABCD);
          CHECK(p.bth().psn() == 0xFFFFFE);
          CHECK(p.bth().ack_req() == 1);
          CHECK(p.at.payload_len == len);
          CHECK(p.at.pad == (4 - len % 4) % 4);
          CHECK(p.udp().src_port() == 0xC123);
          CHECK(p.udp().dst_port() == kRoceUdpPort);
          CHECK(p.dscp() == 26);
          CHECK(p.src_ip() == addressing(v6, vlan).src_ip);
          CHECK(p.dst_ip() == addressing(v6, vlan).dst_ip);
          if (v6) CHECK(p.flow_label() == 0xABCDE);
          if (p.at.reth) {
            CHECK(p.reth().va() == 0x7F0000001000);
            CHECK(p.reth().rkey() == 0x55AA);
          }
          if (p.at.meth) CHECK(p.meth().msn() == 7);
          if (op_flags(opc) & kOpMrc) CHECK((p.at.tseth != 0) == true);
          if (p.at.tseth) CHECK(p.tseth().tx_timestamp() == 0x1357);
          if (p.at.imm) CHECK(p.imm().imm() == 0xFEEDF00D);
          if (op_flags(opc) & kOpSeth) CHECK(p.seth().sack_bitmap() == 0xF0F0);
          for (size_t i = 0; i < p.at.payload_len; ++i) REQUIRE(p.payload()[i] == static_cast<uint8_t>(i));
        }
      }
    }
  }
}

TEST_CASE("MRC write header stack: METH then RETH on every packet") {
  auto f = build(uint8_t(Opcode::mrc_write_middle), false, false, 4096);
  Packet p;
  REQUIRE(parse_frame(f, p) == ParseError::ok);
  CHECK(p.at.bth == 14 + 20 + 8);
  CHECK(p.at.meth == p.at.bth + kBthLen);
  CHECK(p.at.tseth == 0);
  CHECK(p.at.reth == p.at.meth + kMethLen);
  CHECK(p.at.payload == p.at.reth + kRethLen);
  CHECK(f.size() == 14 + 20 + 8 + 12 + 4 + 16 + 4096 + 4);
}

TEST_CASE("Ethernet padding after the IP packet is ignored") {
  auto f = build(uint8_t(Opcode::mrc_ack), false, false, 0);
  f.resize(f.size() + 10, 0);  // a switch pads short frames to 60 bytes
  Packet p;
  CHECK(parse_frame(f, p) == ParseError::ok);
}

TEST_CASE("each rejection has its own reason") {
  Packet p;
  const uint8_t wo = uint8_t(Opcode::mrc_write_only);
  auto base = build(wo, false, false, 64);
  // Re-seals an untagged IPv4 frame after an edit, so that only the intended
  // defect remains.
  auto reseal_ip = [](std::vector<uint8_t>& f) {
    Ipv4Ref ip(f.data() + kEthLen);
    ip.set_checksum(0);
    ip.set_checksum(ipv4_checksum(f.data() + kEthLen));
  };
  auto refresh = [&](std::vector<uint8_t>& f) {
    reseal_ip(f);
    icrc_fill({f.data() + kEthLen, f.size() - kEthLen});
  };

  CHECK(parse_frame(std::span(base.data(), 10), p) == ParseError::truncated_eth);
  {
    auto f = build(wo, false, true, 64);
    CHECK(parse_frame(std::span(f.data(), 16), p) == ParseError::truncated_vlan);
  }
  {
    auto f = base;
    f[12] = 0x08, f[13] = 0x06;
    CHECK(parse_frame(f, p) == ParseError::not_ip);
  }
  CHECK(parse_frame(std::span(base.data(), 30), p) == ParseError::truncated_ip);
  {
    auto f = base;
    f[14] = 0x65;
    CHECK(parse_frame(f, p) == ParseError::bad_ip_version);
  }
  {
    auto f = base;
    f[14] = 0x46;
    CHECK(parse_frame(f, p) == ParseError::bad_ip_header_len);
  }
  CHECK(parse_frame(std::span(base.data(), base.size() - 1), p) == ParseError::bad_ip_length);
  {
    auto f = base;
    f[14 + 8] ^= 0x01;  // TTL: masked by the ICRC, so only the checksum notices
    CHECK(parse_frame(f, p) == ParseError::bad_ip_checksum);
    reseal_ip(f);
    CHECK(parse_frame(f, p) == ParseError::ok);
  }
  {
    auto f = base;
    f[14 + 6] |= 0x20;  // more fragments
    reseal_ip(f);
    CHECK(parse_frame(f, p) == ParseError::ip_fragment);
  }
  {
    auto f = base;
    f[14 + 9] = 6;
    reseal_ip(f);
    CHECK(parse_frame(f, p) == ParseError::not_udp);
  }
  {
    auto f = base;
    f[14 + 2] = 0, f[14 + 3] = 24;  // IP length leaves 4 bytes of UDP
    reseal_ip(f);
    CHECK(parse_frame(f, p) == ParseError::truncated_udp);
  }
  {
    auto f = base;
    f[34 + 5] ^= 1;
    CHECK(parse_frame(f, p) == ParseError::bad_udp_length);
  }
  {
    auto f = base;
    f[34 + 3] = 0xB8;  // 4792
    CHECK(parse_frame(f, p) == ParseError::not_roce_port);
  }
  {
    auto f = base;
    f.resize(42 + 8);
    Ipv4Ref(f.data() + 14).set_total_len(36);
    UdpRef(f.data() + 34).set_length(16);
    reseal_ip(f);
    CHECK(parse_frame(f, p) == ParseError::truncated_bth);
  }
  {
    auto f = base;
    f[42 + 1] |= 0x01;  // tver 1
    refresh(f);
    CHECK(parse_frame(f, p) == ParseError::bad_version);
  }
  {
    auto f = base;
    f[42] = 0x04;  // RC SEND_ONLY: not ours
    refresh(f);
    CHECK(parse_frame(f, p) == ParseError::unknown_opcode);
  }
  {
    auto f = base;
    f[42] = uint8_t(Opcode::mrc_sack);  // needs 36 header bytes; 84 are there, so make it short
    f.resize(42 + 12 + 20 + 4);
    Ipv4Ref(f.data() + 14).set_total_len(static_cast<uint16_t>(f.size() - 14));
    UdpRef(f.data() + 34).set_length(static_cast<uint16_t>(f.size() - 34));
    BthRef(f.data() + 42).set_pad_count(0);
    refresh(f);
    CHECK(parse_frame(f, p) == ParseError::truncated_header);
  }
  {
    // Five data bytes with no pad: payload plus pad must be a multiple of 4.
    auto f = build(wo, false, false, 8);
    f.erase(f.end() - 7, f.end() - 4);
    Ipv4Ref(f.data() + 14).set_total_len(static_cast<uint16_t>(f.size() - 14));
    UdpRef(f.data() + 34).set_length(static_cast<uint16_t>(f.size() - 34));
    refresh(f);
    CHECK(parse_frame(f, p) == ParseError::bad_pad_count);
  }
  {
    auto f = build(wo, false, false, 0);  // pad larger than the data
    BthRef(f.data() + 42).set_pad_count(3);
    refresh(f);
    CHECK(parse_frame(f, p) == ParseError::bad_pad_count);
  }
  {
    auto f = build(uint8_t(Opcode::mrc_ack), false, false, 0);
    BthRef(f.data() + 42).set_pad_count(1);
    refresh(f);
    CHECK(parse_frame(f, p) == ParseError::bad_pad_count);
  }
  {
    auto f = build(uint8_t(Opcode::mrc_ack), false, false, 0);
    f.insert(f.end() - 4, {0, 0, 0, 0});
    Ipv4Ref(f.data() + 14).set_total_len(static_cast<uint16_t>(f.size() - 14));
    UdpRef(f.data() + 34).set_length(static_cast<uint16_t>(f.size() - 34));
    refresh(f);
    CHECK(parse_frame(f, p) == ParseError::bad_length);
  }
  {
    auto f = base;
    f[f.size() - 10] ^= 0x01;  // payload bit flip
    CHECK(parse_frame(f, p) == ParseError::bad_icrc);
    CHECK(parse_frame(f, p, {.verify_icrc = false}) == ParseError::ok);
  }
}

TEST_CASE("variant fields do not affect the ICRC, invariant ones do") {
  auto f = build(uint8_t(Opcode::mrc_write_first), true, false, 256);
  Packet p;
  REQUIRE(parse_frame(f, p) == ParseError::ok);
  auto mutated = [&](size_t off, uint8_t x) {
    auto g = f;
    g[off] ^= x;
    return icrc_check({g.data() + p.at.l3, p.at.size - p.at.l3});
  };
  CHECK(mutated(p.at.l3 + 0, 0x0F));          // traffic class high nibble
  CHECK(mutated(p.at.l3 + 1, 0xFF));          // traffic class low nibble + flow label
  CHECK(mutated(p.at.l3 + 7, 0xFF));          // hop limit
  CHECK(mutated(p.at.udp + 6, 0xFF));         // UDP checksum
  CHECK(mutated(p.at.bth + 4, 0xC0));         // FECN/BECN
  CHECK_FALSE(mutated(p.at.udp + 0, 0x01));   // source port: the EV is covered
  CHECK_FALSE(mutated(p.at.bth + 11, 0x01));  // PSN
  CHECK_FALSE(mutated(p.at.l3 + 8, 0x01));    // source address
  CHECK_FALSE(mutated(p.at.payload + 100, 0x80));

  auto g = build(uint8_t(Opcode::mrc_write_first), false, false, 256);
  REQUIRE(parse_frame(g, p) == ParseError::ok);
  MutablePacket m{g.data(), p.at};
  m.set_ecn(kEcnCe);
  m.set_dscp(46);
  CHECK(parse_frame(g, p) == ParseError::ok);  // ICRC still valid
  CHECK(p.ecn() == kEcnCe);
  CHECK(ipv4_checksum(g.data() + p.at.l3) == 0);  // checksum updated with it
}

TEST_CASE("layout planning refuses impossible frames") {
  Addressing a = addressing(false, false);
  CHECK(plan_layout(a, 0x04, false, 0).size == 0);                      // unknown opcode
  CHECK(plan_layout(a, uint8_t(Opcode::mrc_ack), false, 4).size == 0);  // ACK with payload
  CHECK(plan_layout(a, uint8_t(Opcode::mrc_write_only), false, 70000).size == 0);
  std::vector<uint8_t> small(50);
  CHECK(begin_frame(small, a, uint8_t(Opcode::mrc_write_only), false, 64).base == nullptr);
}

TEST_CASE("IpAddr parses, prints and maps IPv4") {
  auto a = IpAddr::parse("192.0.2.7");
  REQUIRE(a);
  CHECK(a->is_v4());
  CHECK(a->v4() == 0xC0000207);
  CHECK(a->str() == "192.0.2.7");
  CHECK(a->bytes[10] == 0xFF);
  auto b = IpAddr::parse("fe80::1");
  REQUIRE(b);
  CHECK_FALSE(b->is_v4());
  CHECK(b->str() == "fe80::1");
  CHECK_FALSE(IpAddr::parse("10.0.0.256"));
  CHECK_FALSE(IpAddr::parse("nonsense"));
}

TEST_CASE("names of opcodes, reasons and errors") {
  CHECK(opcode_name(0xDC) == "mrc_sack");
  CHECK(opcode_from_name("mrc_nack") == 0xDD);
  CHECK_FALSE(opcode_from_name("rc_send_only"));
  CHECK(nack_reason_name(0x0B) == "psn_oor_window");
  CHECK(nack_reason_from_name("trimmed_lasthop") == 0x02);
  CHECK(parse_error_name(ParseError::bad_icrc) == "bad_icrc");
  CHECK(kParseErrorCount == 21);
}

TEST_CASE("An unprepared FrameTemplate stamps nothing and writes nothing") {
  FrameTemplate t;
  std::vector<uint8_t> buf(256, 0x5A);
  CHECK(t.stamp({buf.data() + 32, 128}, 0).base == nullptr);
  CHECK(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0x5A; }));
}

TEST_CASE("FrameTemplate stamps the same bytes as begin_frame") {
  for (bool v6 : {false, true}) {
    for (bool vlan : {false, true}) {
      for (uint8_t opc : kAllOpcodes) {
        const bool payload = op_flags(opc) & kOpPayload;
        Addressing a = addressing(v6, vlan);
        FrameTemplate t;
        REQUIRE(t.prepare(a, opc, true));
        for (uint32_t len : payload ? std::vector<uint32_t>{0, 1, 3, 4096, 9000} : std::vector<uint32_t>{0}) {
          INFO("opcode " << int(opc) << " v6 " << v6 << " vlan " << vlan << " len " << len);
          std::vector<uint8_t> x(len + 200, 0x11), y(len + 200, 0x11);
          MutablePacket a1 = begin_frame(x, a, opc, true, len);
          MutablePacket a2 = t.stamp(y, len);
          REQUIRE(a1.base);
          REQUIRE(a2.base);
          CHECK(a2.at.size == a1.at.size);
          finish_frame(a1);
          finish_frame(a2);
          CHECK(x == y);
        }
        std::vector<uint8_t> small(20);
        CHECK(t.stamp(small, 0).base == nullptr);
        if (!payload) {
          std::vector<uint8_t> big(300);
          CHECK(t.stamp(big, 4).base == nullptr);
        }
      }
    }
  }
  FrameTemplate bad;
  CHECK_FALSE(bad.prepare(addressing(false, false), 0x04, false));
}
