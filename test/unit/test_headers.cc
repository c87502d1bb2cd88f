#include <catch2/catch.hpp>

#include <array>

#include "wire/headers.h"

using namespace mrc::wire;

TEST_CASE("BTH fields land on the IBTA bit positions") {
  std::array<uint8_t, kBthLen> b{};
  BthRef h(b.data());
  h.set_opcode(0xC7);
  h.set_solicited(1);
  h.set_pad_count(3);
  h.set_pkey(0xFFFF);
  h.set_dest_qp(0x123456);
  h.set_ack_req(1);
  h.set_psn(0xABCDEF);
  const std::array<uint8_t, kBthLen> want{0xC7, 0xB0, 0xFF, 0xFF, 0x00, 0x12, 0x34, 0x56, 0x80, 0xAB, 0xCD, 0xEF};
  CHECK(b == want);
  h.set_rtx(1);
  h.set_ts_present(1);
  CHECK(b[8] == 0xB0);
  BthView v(b.data());
  CHECK(v.opcode() == 0xC7);
  CHECK(v.pad_count() == 3);
  CHECK(v.solicited() == 1);
  CHECK(v.migreq() == 0);
  CHECK(v.dest_qp() == 0x123456);
  CHECK(v.psn() == 0xABCDEF);
  CHECK(v.ack_req() == 1);
  CHECK(v.rtx() == 1);
  CHECK(v.ts_present() == 1);
}

TEST_CASE("setters only touch their own bits") {
  std::array<uint8_t, kBthLen> b;
  b.fill(0xFF);
  BthRef h(b.data());
  h.set_pad_count(0);
  CHECK(b[1] == 0xCF);
  h.set_psn(0);
  CHECK(b[8] == 0xFF);
  CHECK((b[9] | b[10] | b[11]) == 0);
  h.set_dest_qp(0x1000001);  // wider than the field: truncated, neighbours intact
  CHECK(b[4] == 0xFF);
  CHECK(BthView(b.data()).dest_qp() == 1);
}

TEST_CASE("RETH, METH, ImmDt and AETH round trip") {
  std::array<uint8_t, 64> b{};
  RethRef r(b.data());
  r.set_va(0x0102030405060708ull);
  r.set_rkey(0xCAFEBABE);
  r.set_dma_len(0x10000);
  CHECK(b[0] == 0x01);
  CHECK(b[7] == 0x08);
  CHECK(b[8] == 0xCA);
  CHECK(b[13] == 0x01);
  RethView rv(b.data());
  CHECK(rv.va() == 0x0102030405060708ull);
  CHECK(rv.rkey() == 0xCAFEBABE);
  CHECK(rv.dma_len() == 0x10000);

  b.fill(0);
  MethRef m(b.data());
  m.set_rq_msn(0x1234);
  m.set_msn(0xBEEF);
  CHECK(b[0] == 0x12);
  CHECK(b[3] == 0xEF);
  CHECK(MethView(b.data()).msn() == 0xBEEF);

  b.fill(0);
  AethRef a(b.data());
  a.set_syndrome(kAethNakPsnSeqErr);
  a.set_msn(0x00ABCD);
  CHECK(b[0] == 0x60);
  CHECK(AethView(b.data()).msn() == 0xABCD);

  b.fill(0);
  ImmDtRef i(b.data());
  i.set_imm(0xDEADBEEF);
  CHECK(b[0] == 0xDE);
  CHECK(ImmDtView(b.data()).imm() == 0xDEADBEEF);
}

TEST_CASE("SETH and CC_STATE round trip every field") {
  std::array<uint8_t, kSethLen + kCcStateLen> b{};
  SethRef s(b.data());
  s.set_type(kSethType);
  s.set_next_hdr(0x15);
  s.set_skip_mark(uint8_t(SkipMark::always_skip));
  s.set_probe_reply(1);
  s.set_ack_psn_offset(0xFFFE);
  s.set_entropy(0xC0DE1234);
  s.set_spdcid(0x1111);
  s.set_dpdcid(0x2222);
  s.set_cack_psn(0xFFFFF0);
  s.set_cc_type(kCcTypeNscc);
  s.set_cc_flags(0x5);
  s.set_mpr(8);
  s.set_sack_offset(static_cast<uint16_t>(-3));
  s.set_sack_bitmap(0x8000000000000001ull);
  CcStateRef c(b.data() + kSethLen);
  c.set_tx_timestamp(0xABCD);
  c.set_ooo_count(0x7FFF);
  c.set_restore_cwnd(1);
  c.set_rcv_cwnd_pen(127);
  c.set_rcvd_bytes(0xFFFFFF);

  SethView v(b.data());
  CHECK(v.type() == kSethType);
  CHECK(v.next_hdr() == 0x15);
  CHECK(v.skip_mark() == uint8_t(SkipMark::always_skip));
  CHECK(v.probe_reply() == 1);
  CHECK(static_cast<int16_t>(v.ack_psn_offset()) == -2);
  CHECK(v.entropy() == 0xC0DE1234);
  CHECK(v.spdcid() == 0x1111);
  CHECK(v.dpdcid() == 0x2222);
  CHECK(v.cack_psn() == 0xFFFFF0);
  CHECK(v.cc_flags() == 0x5);
  CHECK(v.mpr() == 8);
  CHECK(static_cast<int16_t>(v.sack_offset()) == -3);
  CHECK(v.sack_bitmap() == 0x8000000000000001ull);
  CHECK(b[12] == 0);  // reserved byte before CACK_PSN stays clear
  CHECK(b[20] == 0x80);
  CHECK(b[27] == 0x01);
  CcStateView cv(b.data() + kSethLen);
  CHECK(cv.tx_timestamp() == 0xABCD);
  CHECK(cv.ooo_count() == 0x7FFF);
  CHECK(cv.restore_cwnd() == 1);
  CHECK(cv.rcv_cwnd_pen() == 127);
  CHECK(cv.rcvd_bytes() == 0xFFFFFF);
}

TEST_CASE("NETH, PETH, ERTH, EETH and TSETH round trip") {
  std::array<uint8_t, 64> b{};
  NethRef n(b.data());
  n.set_type(kNethType);
  n.set_nack_reason(uint8_t(NackReason::psn_oor_window));
  n.set_entropy(0x12345678);
  n.set_nack_psn(0x000102);
  n.set_tx_timestamp(0x4242);
  NethView nv(b.data());
  CHECK(b[2] == 0x0B);
  CHECK(nv.nack_reason() == 0x0B);
  CHECK(nv.entropy() == 0x12345678);
  CHECK(nv.nack_psn() == 0x102);
  CHECK(nv.tx_timestamp() == 0x4242);
  CHECK(nv.type() == kNethType);

  b.fill(0);
  PethRef p(b.data());
  p.set_probe_id(0xBEEF);
  p.set_tx_timestamp(7);
  p.set_format_type(kTsethFormatType);
  CHECK(PethView(b.data()).probe_id() == 0xBEEF);
  CHECK(b[4] == 0xBE);
  CHECK(b[15] == 1);

  b.fill(0);
  ErthRef e(b.data());
  e.set_op(uint8_t(EndpointOp::ev_probe));
  e.set_port_status_mask(0xF0);
  CHECK(ErthView(b.data()).op() == 1);
  CHECK(ErthView(b.data()).port_status_mask() == 0xF0);

  b.fill(0);
  EethRef r(b.data());
  r.set_rx_port(3);
  r.set_adj_svc_time_ns(1500);
  CHECK(EethView(b.data()).rx_port() == 3);
  CHECK(EethView(b.data()).adj_svc_time_ns() == 1500);

  b.fill(0);
  TsethRef t(b.data());
  t.set_tx_timestamp(0x1234);
  t.set_tsr(1);
  t.set_format_type(1);
  CHECK(b[0] == 0x12);
  CHECK(b[2] == 0x80);
  CHECK(b[3] == 0x01);
  CHECK(TsethView(b.data()).tsr() == 1);
}

TEST_CASE("IPv4 checksum matches a known header") {
  // 45 00 00 73 00 00 40 00 40 11 b8 61 c0 a8 00 01 c0 a8 00 c7 (RFC 1071 style example)
  std::array<uint8_t, 20> h{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                            0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  CHECK(ipv4_checksum(h.data()) == 0xb861);
}

TEST_CASE("IPv4 checksum equals the 16-bit big-endian definition on random and carry-heavy headers") {
  auto by_definition = [](const uint8_t* p, unsigned len) {
    uint32_t sum = 0;
    for (unsigned i = 0; i + 1 < len; i += 2) sum += uint32_t(p[i]) << 8 | p[i + 1];
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
  };
  uint64_t x = 0x243F6A8885A308D3ull;
  std::array<uint8_t, 60> h{};
  for (int round = 0; round < 20000; ++round) {
    for (auto& b : h) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = round % 7 == 0 ? 0xFF : static_cast<uint8_t>(x);  // all-ones: every add carries
    }
    const unsigned len = 20 + 4 * (round % 11);
    INFO("round " << round << " len " << len);
    REQUIRE(ipv4_checksum(h.data(), len) == by_definition(h.data(), len));
    REQUIRE(ipv4_checksum(h.data(), len - 2) == by_definition(h.data(), len - 2));
  }
}
