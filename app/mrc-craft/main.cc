// mrc-craft: writes pcap files of MRC and RoCEv2 packets, for replay with
// pktgen or tcpreplay and as test vectors for hardware teams. With
// --manifest it also writes, one JSON object per line, the field values it
// put in each frame, so an independent decoder can be checked against them.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli_checks.h"
#include "pcap/pcap_file.h"
#include "wire/ev.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace {

using namespace mrc::wire;

// Every frame is held in memory until the pcap is written: at an MTU of 256
// a GiB of messages is 1.7 GB of frames.
constexpr uint64_t kMaxTotalBytes = 1ull << 30;

struct Options {
  std::string out;
  std::string manifest;
  std::string src_mac = "02:00:00:00:00:01";
  std::string dst_mac = "02:00:00:00:00:02";
  std::string src_ip = "10.0.0.1";
  std::string dst_ip = "10.0.0.2";
  uint32_t src_qpn = 0x11;
  uint32_t dst_qpn = 0x12;
  int vlan = -1;
  uint32_t mtu = 4096;
  std::vector<uint32_t> sizes{8192};
  std::string op = "write";
  uint32_t imm = 0x12345678;
  std::string transport = "mrc";
  uint32_t psn = 0;
  uint64_t va = 0x10000000;
  uint32_t rkey = 0x1234;
  std::vector<uint32_t> evs;
  std::string ev_range;
  std::string ev_format = "udp";
  uint32_t planes = 1;
  bool tseth = false;
  bool rtx = false;
  bool ecn_ce = false;
  uint32_t dscp = 0;
  std::vector<std::string> emit;
  uint32_t cack_psn = 0;
  int32_t sack_offset = 1;
  std::string sack_bitmap = "0";
  uint64_t sack_bitmap_bits = 0;  // --sack-bitmap, parsed in main()
  std::string skip_mark = "none";
  std::string nack_reason = "trimmed";
  uint8_t nack_reason_code = 0;  // --nack-reason, parsed in main()
  uint32_t nack_psn = 0;
  uint32_t probe_id = 1;
  std::string ep_op = "ev-probe";
  uint32_t port_mask = 0;
  uint32_t req_id = 1;
  std::vector<std::string> negative;
  bool all_opcodes = false;
};

// An unsigned number as strtoul(base 0) reads it (0x hex, leading-0 octal,
// else decimal), but the whole string and at most `max`: stoul reads "-1" as
// ULONG_MAX, ignores trailing junk and fails with just "stoul".
std::optional<uint64_t> parse_uint(std::string_view s, uint64_t max) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  } else if (s.size() > 1 && s[0] == '0') {
    base = 8;
    s.remove_prefix(1);
  }
  uint64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

std::optional<uint64_t> parse_mac(const std::string& s) {
  uint64_t mac = 0;
  unsigned parts = 0;
  const char* p = s.data();
  const char* end = s.data() + s.size();
  while (p < end && parts < 6) {
    unsigned v;
    auto r = std::from_chars(p, end, v, 16);
    if (r.ec != std::errc() || v > 0xFF || r.ptr - p > 2) return std::nullopt;
    mac = (mac << 8) | v;
    ++parts;
    p = r.ptr;
    // Only between bytes: "...:06:" with its trailing colon passed.
    if (parts < 6 && p < end && *p == ':') ++p;
  }
  if (parts != 6 || p != end) return std::nullopt;
  return mac;
}

// Address of plane `plane`: the configured address with `plane` added to its
// last byte, so each plane has its own MAC and IP as on multi-plane NICs.
IpAddr plane_ip(IpAddr a, uint32_t plane) {
  a.bytes[15] = static_cast<uint8_t>(a.bytes[15] + plane);
  return a;
}

class Crafter {
 public:
  Crafter(const Options& o, uint64_t smac, uint64_t dmac, IpAddr sip, IpAddr dip, EvFormat fmt)
      : o_(o), smac_(smac), dmac_(dmac), sip_(sip), dip_(dip), fmt_(fmt) {
    if (!o_.manifest.empty()) {
      manifest_ = std::fopen(o_.manifest.c_str(), "w");
      if (!manifest_) throw std::runtime_error("cannot write " + o_.manifest);
    }
  }
  ~Crafter() {
    if (manifest_) std::fclose(manifest_);
  }
  Crafter(const Crafter&) = delete;
  Crafter& operator=(const Crafter&) = delete;

  void set_endpoints(IpAddr sip, IpAddr dip, EvFormat fmt) {
    sip_ = sip;
    dip_ = dip;
    fmt_ = fmt;
  }

  // Addressing for a packet on `plane` carrying EV `ev`; `reverse` for
  // responder-to-requester packets (ACK, SACK, NACK, endpoint response).
  Addressing addressing(uint32_t plane, uint32_t ev, bool reverse) const {
    Addressing a;
    a.src_mac = (reverse ? dmac_ : smac_) + plane;
    a.dst_mac = (reverse ? smac_ : dmac_) + plane;
    if (o_.vlan >= 0) a.vlan_tci = static_cast<uint16_t>(o_.vlan);
    a.src_ip = plane_ip(reverse ? dip_ : sip_, plane);
    a.dst_ip = plane_ip(reverse ? sip_ : dip_, plane);
    a.dscp = static_cast<uint8_t>(o_.dscp);
    a.ecn = o_.ecn_ce ? kEcnCe : 0;
    ev_encode(fmt_, ev, a);
    return a;
  }

  MutablePacket begin(const Addressing& a, uint8_t opcode, uint32_t payload_len, uint32_t dest_qp, uint32_t psn) {
    buf_.assign(payload_len + 256, 0);
    MutablePacket m = begin_frame(buf_, a, opcode, o_.tseth && (op_flags(opcode) & kOpMrc), payload_len);
    if (!m.base) throw std::runtime_error(fmt::format("cannot lay out opcode {:#x}", opcode));
    m.bth().set_dest_qp(dest_qp);
    m.bth().set_psn(psn & kPsnMask);
    if (m.at.tseth) m.tseth().set_tx_timestamp(static_cast<uint16_t>(time_ns_ / kTsethUnitNs));
    return m;
  }

  // Finishes the frame and records it. `mutate` may damage it afterwards to
  // make a negative vector; `kind` names what the frame is meant to be.
  void commit(const MutablePacket& m, const std::string& kind, uint32_t ev, uint32_t plane, size_t keep_bytes = 0,
              bool flip_icrc = false) {
    finish_frame(m);
    std::vector<uint8_t> frame(m.base, m.base + m.at.size);
    if (flip_icrc) frame.back() ^= 0x5A;
    if (keep_bytes) frame.resize(keep_bytes);
    record(m, frame, kind, ev, plane);
  }

  void record(const MutablePacket& m, const std::vector<uint8_t>& frame, const std::string& kind, uint32_t ev,
              uint32_t plane) {
    frames_.push_back({time_ns_, frame});
    time_ns_ += 1000;
    if (!manifest_) return;
    BthRef bth = m.bth();
    std::string line = fmt::format(
        "{{\"index\":{},\"kind\":\"{}\",\"ip_version\":{},\"opcode\":{},\"opcode_name\":\"{}\",\"dest_qp\":{},"
        "\"psn\":{},\"pad\":{},\"ack_req\":{},\"rtx\":{},\"udp_sport\":{},\"ev\":{},\"plane\":{},\"frame_len\":{},"
        "\"payload_len\":{}",
        frames_.size() - 1, kind, m.at.ip_version, m.at.opcode, opcode_name(m.at.opcode), bth.dest_qp(), bth.psn(),
        bth.pad_count(), bth.ack_req(), bth.rtx(), m.udp().src_port(), ev, plane, frame.size(), m.at.payload_len);
    if (m.at.reth)
      line += fmt::format(",\"va\":{},\"rkey\":{},\"dma_len\":{}", m.reth().va(), m.reth().rkey(), m.reth().dma_len());
    if (m.at.meth) line += fmt::format(",\"msn\":{},\"rq_msn\":{}", m.meth().msn(), m.meth().rq_msn());
    if (m.at.imm) line += fmt::format(",\"imm\":{}", m.imm().imm());
    if (m.at.flags & kOpAeth)
      line += fmt::format(",\"syndrome\":{},\"aeth_msn\":{}", m.aeth().syndrome(), m.aeth().msn());
    if (m.at.flags & kOpSeth)
      line +=
          fmt::format(",\"cack_psn\":{},\"sack_offset\":{},\"sack_bitmap\":{},\"skip_mark\":{}", m.seth().cack_psn(),
                      static_cast<int16_t>(m.seth().sack_offset()), m.seth().sack_bitmap(), m.seth().skip_mark());
    if (m.at.flags & kOpNeth)
      line += fmt::format(",\"nack_reason\":{},\"nack_psn\":{}", m.neth().nack_reason(), m.neth().nack_psn());
    line += "}\n";
    std::fputs(line.c_str(), manifest_);
  }

  bool write(const std::string& path) {
    mrc::pcap::Writer w;
    if (!w.open(path)) return false;
    for (auto& [t, f] : frames_)
      if (!w.write(f, t)) return false;
    return w.close();
  }

  size_t count() const { return frames_.size(); }

 private:
  const Options& o_;
  uint64_t smac_, dmac_;
  IpAddr sip_, dip_;
  EvFormat fmt_;
  std::vector<uint8_t> buf_;
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> frames_;
  uint64_t time_ns_ = 1000000000;
  std::FILE* manifest_ = nullptr;
};

struct WriteState {
  uint32_t psn;
  uint64_t va;
  uint16_t msn = 0;
  size_t ev_index = 0;
};

uint32_t next_ev(const std::vector<uint32_t>& evs, WriteState& st) { return evs[st.ev_index++ % evs.size()]; }

// Fills a payload with a pattern that depends on its VA, so a receiver can
// verify placement without knowing the message boundaries.
void fill_payload(std::span<uint8_t> p, uint64_t va) {
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>((va + i) * 131 >> 3);
}

void craft_message(Crafter& c, const Options& o, const std::vector<uint32_t>& evs, WriteState& st, uint32_t size,
                   bool imm) {
  const bool mrc = o.transport == "mrc";
  // 64-bit: in 32 bits a size within an MTU of 4 GiB rounds up to 0 packets.
  const uint32_t npkts = size == 0 ? 1 : uint32_t((uint64_t(size) + o.mtu - 1) / o.mtu);
  for (uint32_t i = 0; i < npkts; ++i) {
    const bool first = i == 0, last = i + 1 == npkts;
    const uint32_t len = last ? size - i * o.mtu : o.mtu;
    const uint32_t ev = next_ev(evs, st);
    const uint32_t plane = static_cast<uint32_t>((st.ev_index - 1) % o.planes);
    MutablePacket m =
        c.begin(c.addressing(plane, ev, false), write_opcode(mrc, first, last, imm), len, o.dst_qpn, st.psn);
    m.bth().set_ack_req(last);
    m.bth().set_rtx(mrc && o.rtx);
    if (m.at.meth) m.meth().set_msn(st.msn);
    if (m.at.reth) {
      m.reth().set_va(mrc ? st.va + uint64_t(i) * o.mtu : st.va);
      m.reth().set_rkey(o.rkey);
      m.reth().set_dma_len(size);
    }
    if (m.at.imm) m.imm().set_imm(o.imm);
    fill_payload(m.payload(), st.va + uint64_t(i) * o.mtu);
    c.commit(m, "valid", ev, plane);
    st.psn = psn_add(st.psn, 1);
  }
  st.va += size;
  ++st.msn;
}

void craft_control(Crafter& c, const Options& o, const std::string& kind, uint32_t ev) {
  const bool mrc = o.transport == "mrc";
  if (kind == "ack") {
    uint8_t opc = uint8_t(mrc ? Opcode::mrc_ack : Opcode::rc_ack);
    MutablePacket m = c.begin(c.addressing(0, ev, true), opc, 0, o.src_qpn, o.cack_psn);
    m.aeth().set_syndrome(kAethAck);
    m.aeth().set_msn(1);
    c.commit(m, "valid", ev, 0);
  } else if (kind == "sack") {
    MutablePacket m = c.begin(c.addressing(0, ev, true), uint8_t(Opcode::mrc_sack), 0, o.src_qpn, o.cack_psn);
    auto s = m.seth();
    s.set_type(kSethType);
    uint8_t mark = o.skip_mark == "skip_once" ? 1 : o.skip_mark == "always_skip" ? 2 : 0;
    s.set_skip_mark(mark);
    s.set_entropy(ev);
    s.set_spdcid(o.dst_qpn & 0xFFFF);
    s.set_dpdcid(o.src_qpn & 0xFFFF);
    s.set_cack_psn(o.cack_psn);
    s.set_mpr(8);
    s.set_sack_offset(static_cast<uint16_t>(o.sack_offset));
    s.set_sack_bitmap(o.sack_bitmap_bits);
    m.cc_state().set_rcvd_bytes(4096);
    c.commit(m, "valid", ev, 0);
  } else if (kind == "nack") {
    MutablePacket m = c.begin(c.addressing(0, ev, true), uint8_t(Opcode::mrc_nack), 0, o.src_qpn, o.nack_psn);
    auto n = m.neth();
    n.set_type(kNethType);
    n.set_nack_reason(o.nack_reason_code);
    n.set_entropy(ev);
    n.set_spdcid(o.dst_qpn & 0xFFFF);
    n.set_dpdcid(o.src_qpn & 0xFFFF);
    n.set_nack_psn(o.nack_psn);
    c.commit(m, "valid", ev, 0);
  } else if (kind == "probe") {
    MutablePacket m = c.begin(c.addressing(0, ev, false), uint8_t(Opcode::mrc_probe), 0, o.dst_qpn, o.psn);
    auto p = m.peth();
    p.set_type(kPethType);
    p.set_probe_id(o.probe_id);
    p.set_spdcid(o.src_qpn & 0xFFFF);
    p.set_dpdcid(o.dst_qpn & 0xFFFF);
    c.commit(m, "valid", ev, 0);
  } else if (kind == "ep-req" || kind == "ep-rsp") {
    const bool req = kind == "ep-req";
    const uint8_t op = uint8_t(o.ep_op == "port-status" ? EndpointOp::port_status_update : EndpointOp::ev_probe);
    MutablePacket m =
        c.begin(c.addressing(0, ev, !req), uint8_t(req ? Opcode::mrc_endpoint_request : Opcode::mrc_endpoint_response),
                0, kEndpointQpn, o.req_id);
    if (req) {
      m.erth().set_op(op);
      m.erth().set_port_status_mask(o.port_mask);
    } else {
      m.eeth().set_op(op);
      m.eeth().set_rx_port(1);
    }
    c.commit(m, "valid", ev, 0);
  } else {
    throw std::invalid_argument("unknown --emit kind " + kind);
  }
}

// Negative vectors: each damages exactly one thing, and every frame except
// the bad-ICRC one carries a correct ICRC, so a receiver's drop reason
// identifies the intended defect.
void craft_negative(Crafter& c, const Options& o, const std::string& kind, uint32_t ev) {
  const bool mrc = o.transport == "mrc";
  const uint8_t only = write_opcode(mrc, true, true, false);
  auto valid_write = [&](uint32_t len, uint32_t psn) {
    MutablePacket m = c.begin(c.addressing(0, ev, false), only, len, o.dst_qpn, psn);
    m.reth().set_va(o.va);
    m.reth().set_rkey(o.rkey);
    m.reth().set_dma_len(len);
    fill_payload(m.payload(), o.va);
    return m;
  };
  if (kind == "bad-icrc") {
    c.commit(valid_write(256, o.psn), "bad_icrc", ev, 0, 0, true);
  } else if (kind == "truncated") {
    // Cut inside the RETH with the IP and UDP lengths agreeing with the cut,
    // then a frame simply cut short of its IP length.
    MutablePacket m = valid_write(0, o.psn);
    const uint32_t cut = m.at.reth + 6 + kIcrcLen;
    m.at.size = cut;
    m.at.payload_len = 0;
    UdpRef(m.base + m.at.udp).set_length(cut - m.at.udp);
    if (m.at.ip_version == 4)
      Ipv4Ref(m.base + m.at.l3).set_total_len(cut - m.at.l3);
    else
      Ipv6Ref(m.base + m.at.l3).set_payload_len(cut - m.at.l3 - kIpv6Len);
    c.commit(m, "truncated_header", ev, 0);
    MutablePacket m2 = valid_write(256, o.psn);
    c.commit(m2, "bad_ip_length", ev, 0, m2.at.size - 100);
  } else if (kind == "bad-pad") {
    // Five payload bytes need a pad of 3; claim a pad of 0 and send no pad.
    MutablePacket m = valid_write(8, o.psn);
    m.bth().set_pad_count(0);
    m.at.size -= 3;
    m.at.payload_len = 5;
    UdpRef(m.base + m.at.udp).set_length(m.at.size - m.at.udp);
    if (m.at.ip_version == 4)
      Ipv4Ref(m.base + m.at.l3).set_total_len(m.at.size - m.at.l3);
    else
      Ipv6Ref(m.base + m.at.l3).set_payload_len(m.at.size - m.at.l3 - kIpv6Len);
    c.commit(m, "bad_pad_count", ev, 0);
  } else if (kind == "oor-psn") {
    // Well-formed, but half the PSN space away: a responder must NACK it
    // with PSN_OOR_WINDOW rather than place it.
    c.commit(valid_write(256, psn_add(o.psn, kPsnHalfRange - 1)), "oor_psn", ev, 0);
  } else {
    throw std::invalid_argument("unknown --negative kind " + kind);
  }
}

void craft_all_opcodes(Crafter& c, const Options& o, uint32_t ev) {
  uint32_t psn = o.psn;
#define MRC_X(name, value, flags)                                                      \
  {                                                                                    \
    const uint32_t len = ((flags)&kOpPayload) ? 64u : 0u;                              \
    MutablePacket m = c.begin(c.addressing(0, ev, false), value, len, o.dst_qpn, psn); \
    if (m.at.reth) {                                                                   \
      m.reth().set_va(o.va);                                                           \
      m.reth().set_rkey(o.rkey);                                                       \
      m.reth().set_dma_len(len);                                                       \
    }                                                                                  \
    if (m.at.imm) m.imm().set_imm(o.imm);                                              \
    if ((flags)&kOpAeth) m.aeth().set_syndrome(kAethAck);                              \
    if ((flags)&kOpSeth) {                                                             \
      m.seth().set_type(kSethType);                                                    \
      m.seth().set_cack_psn(psn);                                                      \
      m.seth().set_sack_bitmap(0x5);                                                   \
    }                                                                                  \
    if ((flags)&kOpNeth) {                                                             \
      m.neth().set_type(kNethType);                                                    \
      m.neth().set_nack_reason(uint8_t(NackReason::trimmed));                          \
      m.neth().set_nack_psn(psn);                                                      \
    }                                                                                  \
    if ((flags)&kOpPeth) m.peth().set_type(kPethType);                                 \
    if ((flags)&kOpErth) m.erth().set_op(uint8_t(EndpointOp::ev_probe));               \
    if ((flags)&kOpEeth) m.eeth().set_op(uint8_t(EndpointOp::ev_probe));               \
    if ((flags) & (kOpErth | kOpEeth)) m.bth().set_dest_qp(kEndpointQpn);              \
    if ((flags)&kOpPayload) fill_payload(m.payload(), o.va);                           \
    m.bth().set_ack_req(((flags)&kOpLast) != 0);                                       \
    c.commit(m, "valid", ev, 0);                                                       \
    psn = psn_add(psn, 1);                                                             \
  }
  MRC_OPCODES(MRC_X)
#undef MRC_X
}

// EVs wider than the format's field would be cut on the wire while the
// manifest kept the full value: UDP carries 16 bits (kUdpEvMask), STEV 32
// (sport and flow label halves). --all-opcodes always sends UDP EVs.
std::vector<uint32_t> resolve_evs(const Options& o, EvFormat fmt) {
  const bool wide = fmt == EvFormat::stev && !o.all_opcodes;
  const uint64_t max = wide ? UINT32_MAX : kUdpEvMask;
  const std::string width = wide            ? "the 32 bits of an stev EV"
                            : o.all_opcodes ? "the 16 bits of a udp EV (--all-opcodes sends udp EVs)"
                                            : "the 16 bits of a udp EV (--ev-format stev takes 32)";
  std::vector<uint32_t> evs = o.evs;
  for (uint32_t e : evs)
    if (e > max) throw std::invalid_argument(fmt::format("--ev {} ({:#x}): does not fit {}", e, e, width));
  if (!o.ev_range.empty()) {
    const auto dash = o.ev_range.find('-');
    const auto a = dash == std::string::npos ? std::nullopt : parse_uint(o.ev_range.substr(0, dash), UINT64_MAX);
    const auto b = dash == std::string::npos ? std::nullopt : parse_uint(o.ev_range.substr(dash + 1), UINT64_MAX);
    if (!a || !b || *b < *a || *b - *a > 1u << 20)
      throw std::invalid_argument(fmt::format(
          "--ev-range '{}': expected A-B, numbers (decimal, 0x hex or 0 octal) with A <= B at most 2^20 apart",
          o.ev_range));
    if (*b > max)
      throw std::invalid_argument(fmt::format("--ev-range '{}': {:#x} does not fit {}", o.ev_range, *b, width));
    // 64-bit counter: a range ending at 0xFFFFFFFF never ends in 32 bits.
    for (uint64_t e = *a; e <= *b; ++e) evs.push_back(static_cast<uint32_t>(e));
  }
  if (evs.empty()) evs.push_back(0xC000);
  return evs;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"mrc-craft: write pcap files of MRC and RoCEv2 packets (test vectors, replay traffic)"};
  app.set_config("--config", "", "read options from a CLI11 config (TOML/INI) file")->check(mrc::app::config_file());
  // A misspelt key (sizes = 4) was ignored and the defaults were written.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--out,-o", o.out, "pcap file to write")->required();
  app.add_option("--manifest", o.manifest, "also write the fields of each frame as JSON lines");
  app.add_option("--src-mac", o.src_mac, "requester MAC (plane p adds p)")->capture_default_str();
  app.add_option("--dst-mac", o.dst_mac, "responder MAC (plane p adds p)")->capture_default_str();
  app.add_option("--src-ip", o.src_ip, "requester IPv4 or IPv6 address (plane p adds p)")->capture_default_str();
  app.add_option("--dst-ip", o.dst_ip, "responder address, same family as --src-ip")->capture_default_str();
  app.add_option("--src-qpn", o.src_qpn, "requester QPN")->capture_default_str()->check(CLI::Range(0u, kPsnMask));
  app.add_option("--dst-qpn", o.dst_qpn, "responder QPN")->capture_default_str()->check(CLI::Range(0u, kPsnMask));
  app.add_option("--vlan", o.vlan, "802.1Q TCI to tag frames with")->check(CLI::Range(0, 0xFFFF));
  app.add_option("--mtu", o.mtu, "path MTU (payload bytes per packet)")
      ->capture_default_str()
      ->check(CLI::IsMember({256u, 512u, 1024u, 2048u, 4096u, 8192u}));
  app.add_option("--size", o.sizes, "message sizes in bytes (one message each)")->capture_default_str();
  app.add_option("--op", o.op, "write or write_imm")
      ->capture_default_str()
      ->check(CLI::IsMember({"write", "write_imm"}));
  app.add_option("--imm", o.imm, "immediate data for write_imm")->capture_default_str();
  app.add_option("--transport", o.transport, "mrc or rocev2 (plain RC opcodes)")
      ->capture_default_str()
      ->check(CLI::IsMember({"mrc", "rocev2"}));
  app.add_option("--psn", o.psn, "first PSN")->capture_default_str()->check(CLI::Range(0u, kPsnMask));
  app.add_option("--va", o.va, "remote virtual address of the first message")
      ->check(mrc::app::not_negative())
      ->capture_default_str();
  app.add_option("--rkey", o.rkey, "remote key")->capture_default_str();
  app.add_option("--ev", o.evs, "entropy values, used round robin per packet");
  app.add_option("--ev-range", o.ev_range, "entropy values A-B (inclusive), appended to --ev");
  app.add_option("--ev-format", o.ev_format, "udp (EV in the UDP source port) or stev (sport + IPv6 flow label)")
      ->capture_default_str()
      ->check(CLI::IsMember({"udp", "stev"}));
  app.add_option("--planes", o.planes, "planes to spread EVs over, round robin")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u));
  app.add_flag("--ts", o.tseth, "add a TSETH to MRC packets");
  app.add_flag("--rtx", o.rtx, "mark data packets as retransmissions");
  app.add_flag("--ecn-ce", o.ecn_ce, "mark packets ECN congestion experienced");
  app.add_option("--dscp", o.dscp, "DSCP of every packet")->check(CLI::Range(0u, 63u));
  app.add_option("--emit", o.emit, "control packets to add: ack, sack, nack, probe, ep-req, ep-rsp")
      ->check(CLI::IsMember({"ack", "sack", "nack", "probe", "ep-req", "ep-rsp"}));
  app.add_option("--cack-psn", o.cack_psn, "cumulative ACK PSN of ack/sack")->check(CLI::Range(0u, kPsnMask));
  app.add_option("--sack-offset", o.sack_offset, "SACK bitmap base relative to cack_psn")
      ->check(CLI::Range(-32768, 32767));
  app.add_option("--sack-bitmap", o.sack_bitmap, "64-bit SACK bitmap (0x...)");
  app.add_option("--skip-mark", o.skip_mark, "SACK skip mark")
      ->check(CLI::IsMember({"none", "skip_once", "always_skip"}));
  app.add_option("--nack-reason", o.nack_reason, "NACK reason name (trimmed, psn_oor_window, ...) or number");
  app.add_option("--nack-psn", o.nack_psn, "PSN a NACK names")->check(CLI::Range(0u, kPsnMask));
  app.add_option("--probe-id", o.probe_id, "reliability probe id")->check(CLI::Range(0u, 0xFFFFu));
  app.add_option("--ep-op", o.ep_op, "endpoint op")->check(CLI::IsMember({"ev-probe", "port-status"}));
  app.add_option("--port-mask", o.port_mask, "port status mask of a port-status request");
  app.add_option("--req-id", o.req_id, "endpoint request id (carried in the PSN)")->check(CLI::Range(0u, kPsnMask));
  app.add_option("--negative", o.negative, "negative vectors: bad-icrc, truncated, bad-pad, oor-psn, all")
      ->check(CLI::IsMember({"bad-icrc", "truncated", "bad-pad", "oor-psn", "all"}));
  app.add_flag("--all-opcodes", o.all_opcodes,
               "one valid packet of every opcode, over IPv4 and IPv6 (ignores --src-ip/--dst-ip)");
  CLI11_PARSE(app, argc, argv);

  try {
    auto smac = parse_mac(o.src_mac), dmac = parse_mac(o.dst_mac);
    if (!smac || !dmac) throw std::invalid_argument("--src-mac/--dst-mac: expected aa:bb:cc:dd:ee:ff");
    auto sip = IpAddr::parse(o.src_ip), dip = IpAddr::parse(o.dst_ip);
    if (!sip || !dip) throw std::invalid_argument("--src-ip/--dst-ip: not an IPv4 or IPv6 address");
    if (sip->is_v4() != dip->is_v4()) throw std::invalid_argument("--src-ip and --dst-ip differ in family");
    // Plane p adds p to each address's last byte (IP) or to the whole MAC: no
    // plane may wrap into another address.
    const uint32_t last_plane = o.planes ? o.planes - 1 : 0;
    for (const auto& [name, ip] : {std::pair{"--src-ip", *sip}, std::pair{"--dst-ip", *dip}})
      if (ip.bytes[15] + last_plane > 0xFF)
        throw std::invalid_argument(fmt::format("{}: its last byte plus {} planes passes 255", name, o.planes));
    for (const auto& [name, mac] : {std::pair{"--src-mac", *smac}, std::pair{"--dst-mac", *dmac}})
      if (mac + last_plane > 0xFFFFFFFFFFFFull)
        throw std::invalid_argument(fmt::format("{}: plus {} planes passes ff:ff:ff:ff:ff:ff", name, o.planes));
    EvFormat fmt = o.ev_format == "stev" ? EvFormat::stev : EvFormat::udp;
    if (fmt == EvFormat::stev && sip->is_v4())
      throw std::invalid_argument("--ev-format stev needs IPv6 addresses (the flow label)");
    const std::vector<uint32_t> evs = resolve_evs(o, fmt);
    uint64_t total = 0;
    for (uint32_t size : o.sizes) total += size;
    if (total > kMaxTotalBytes)
      throw std::invalid_argument(fmt::format(
          "--size: {} bytes of messages in all, more than {} (the frames are held in memory)", total, kMaxTotalBytes));
    // The messages follow each other from --va: past 2^64 their VAs wrapped to 0.
    if (total > 0 && total - 1 > UINT64_MAX - o.va)
      throw std::invalid_argument(
          fmt::format("--va {:#x}: {} bytes of messages from there run past the 64-bit address space", o.va, total));
    // Parsed here, used or not, so a bad value is an error before anything is written.
    const auto bitmap = parse_uint(o.sack_bitmap, UINT64_MAX);
    if (!bitmap)
      throw std::invalid_argument(
          fmt::format("--sack-bitmap '{}': expected a 64-bit number (decimal, 0x hex or 0 octal)", o.sack_bitmap));
    o.sack_bitmap_bits = *bitmap;
    auto reason = nack_reason_from_name(o.nack_reason);
    if (!reason) {
      const auto v = parse_uint(o.nack_reason, 0xFF);
      if (!v) {
        std::string names;
#define MRC_X(n, value) names += std::string(names.empty() ? "" : ", ") + #n;
        MRC_NACK_REASONS(MRC_X)
#undef MRC_X
        throw std::invalid_argument(
            fmt::format("--nack-reason '{}': expected one of {}, or a number 0..255", o.nack_reason, names));
      }
      reason = static_cast<uint8_t>(*v);
    }
    o.nack_reason_code = *reason;

    Crafter c(o, *smac, *dmac, *sip, *dip, fmt);
    if (o.all_opcodes) {
      c.set_endpoints(*IpAddr::parse("192.0.2.1"), *IpAddr::parse("192.0.2.2"), EvFormat::udp);
      craft_all_opcodes(c, o, evs[0]);
      c.set_endpoints(*IpAddr::parse("2001:db8::1"), *IpAddr::parse("2001:db8::2"), EvFormat::udp);
      craft_all_opcodes(c, o, evs[0]);
      if (!c.write(o.out)) throw std::runtime_error("cannot write " + o.out);
      fmt::print(stderr, "mrc-craft: wrote {} frames to {}\n", c.count(), o.out);
      return 0;
    }

    WriteState st{o.psn, o.va};
    for (uint32_t size : o.sizes) craft_message(c, o, evs, st, size, o.op == "write_imm");
    for (const auto& kind : o.emit) craft_control(c, o, kind, evs[0]);
    std::vector<std::string> neg = o.negative;
    if (std::find(neg.begin(), neg.end(), "all") != neg.end()) neg = {"bad-icrc", "truncated", "bad-pad", "oor-psn"};
    for (const auto& kind : neg) craft_negative(c, o, kind, evs[0]);
    if (!c.write(o.out)) throw std::runtime_error("cannot write " + o.out);
    fmt::print(stderr, "mrc-craft: wrote {} frames to {}\n", c.count(), o.out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "mrc-craft: {}\n", e.what());
    return 1;
  }
  return 0;
}
