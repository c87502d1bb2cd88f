// Wire-library benchmark: ICRC throughput on 4 KB packets (against zlib's
// CRC-32 in the same run), and the cost of building and parsing a 4 KB MRC
// WRITE_MIDDLE. Each figure is the best of several timed rounds, because the
// machines are noisy and the best round is the least disturbed one.
#include <zlib.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <vector>

#include "wire/icrc.h"
#include "wire/packet.h"

using namespace mrc::wire;
using Clock = std::chrono::steady_clock;

namespace {

template <class T>
inline void keep(const T& v) {
  asm volatile("" : : "g"(&v) : "memory");
}

// Runs fn() `iters` times per round and returns the best ns per call.
template <class Fn>
double best_ns(unsigned rounds, uint64_t iters, Fn&& fn) {
  double best = 1e30;
  for (unsigned r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (uint64_t i = 0; i < iters; ++i) fn(i);
    double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(iters);
    best = std::min(best, ns);
  }
  return best;
}

void finish_ipv4_checksum(const MutablePacket& b) {
  Ipv4Ref ip(b.base + b.at.l3);
  ip.set_checksum(0);
  ip.set_checksum(ipv4_checksum(b.base + b.at.l3));
}

Addressing bench_addressing() {
  Addressing a;
  a.src_mac = 0x020000000001;
  a.dst_mac = 0x020000000002;
  a.src_ip = IpAddr::from_v4(0x0A000001);
  a.dst_ip = IpAddr::from_v4(0x0A000002);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wire-bench: ICRC, build and parse cost of 4 KB MRC packets"};
  unsigned rounds = 7;
  uint64_t iters = 200000;
  uint32_t payload = 4096;
  bool json = false;
  app.add_option("--rounds", rounds, "timed rounds; the best is reported")->capture_default_str();
  app.add_option("--iters", iters, "calls per round")->capture_default_str();
  app.add_option("--payload", payload, "payload bytes per packet")->capture_default_str()->check(CLI::Range(0u, 9000u));
  app.add_flag("--json", json, "print JSON");
  CLI11_PARSE(app, argc, argv);

  const Addressing addr = bench_addressing();
  const uint8_t opcode = uint8_t(Opcode::mrc_write_middle);
  std::vector<uint8_t> frame(payload + 256);
  MutablePacket m = begin_frame(frame, addr, opcode, false, payload);
  for (size_t i = 0; i < m.at.payload_len; ++i) m.payload()[i] = uint8_t(i * 7);
  finish_frame(m);
  const std::span<const uint8_t> l3{frame.data() + m.at.l3, m.at.size - m.at.l3};

  const double icrc_ns = best_ns(rounds, iters, [&](uint64_t) { keep(icrc_compute(l3)); });
  const double zlib_ns =
      best_ns(rounds, iters / 8 + 1, [&](uint64_t) { keep(crc32(0, l3.data(), static_cast<uInt>(l3.size()))); });

  // Build: everything but the payload bytes and the ICRC, i.e. what the
  // datapath does per packet when the payload is placed by reference: stamp
  // the flow's header template and set the per-packet fields.
  FrameTemplate tmpl;
  tmpl.prepare(addr, opcode, false);
  auto set_packet_fields = [](const MutablePacket& b, uint64_t i) {
    b.bth().set_dest_qp(0x11);
    b.bth().set_psn(static_cast<uint32_t>(i) & kPsnMask);
    b.bth().set_ack_req(i & 1);
    b.meth().set_msn(static_cast<uint16_t>(i));
    b.reth().set_va(0x10000000 + i * 4096);
    b.reth().set_rkey(0x1234);
    b.reth().set_dma_len(1 << 20);
    b.udp().set_src_port(static_cast<uint16_t>(0xC000 + (i & 255)));
  };
  const double build_ns = best_ns(rounds, iters, [&](uint64_t i) {
    MutablePacket b = tmpl.stamp(frame, payload);
    set_packet_fields(b, i);
    keep(b);
  });
  const double build_scratch_ns = best_ns(rounds, iters, [&](uint64_t i) {
    MutablePacket b = begin_frame(frame, addr, opcode, false, payload);
    set_packet_fields(b, i);
    finish_ipv4_checksum(b);
    keep(b);
  });
  const double build_icrc_ns = best_ns(rounds, iters, [&](uint64_t i) {
    MutablePacket b = tmpl.stamp(frame, payload);
    set_packet_fields(b, i);
    icrc_fill({b.base + b.at.l3, b.at.size - b.at.l3});
    keep(b);
  });
  finish_frame(m);  // restore a valid ICRC for the parse runs

  Packet p;
  const double parse_ns = best_ns(rounds, iters, [&](uint64_t) {
    keep(parse_frame({frame.data(), m.at.size}, p, {.verify_icrc = false}));
  });
  const double parse_icrc_ns = best_ns(rounds, iters, [&](uint64_t) {
    keep(parse_frame({frame.data(), m.at.size}, p));
  });
  if (parse_frame({frame.data(), m.at.size}, p) != ParseError::ok) {
    fmt::print(stderr, "wire-bench: benchmark frame does not parse\n");
    return 1;
  }

  const double bytes = double(l3.size());
  const double icrc_gbs = bytes / icrc_ns, zlib_gbs = bytes / zlib_ns;
  if (json) {
    fmt::print(
        "{{\"payload_bytes\":{},\"icrc_bytes\":{},\"icrc_gbps\":{:.2f},\"zlib_crc32_gbps\":{:.2f},"
        "\"icrc_vs_zlib\":{:.2f},\"build_ns\":{:.2f},\"build_from_scratch_ns\":{:.2f},\"build_with_icrc_ns\":{:.2f},"
        "\"parse_ns\":{:.2f},\"parse_with_icrc_ns\":{:.2f}}}\n",
        payload, l3.size(), icrc_gbs, zlib_gbs, icrc_gbs / zlib_gbs, build_ns, build_scratch_ns, build_icrc_ns,
        parse_ns, parse_icrc_ns);
  } else {
    fmt::print("ICRC over {} B (IP..ICRC of a {} B-payload WRITE_MIDDLE)\n", l3.size(), payload);
    fmt::print("  ISA-L ICRC          {:8.2f} GB/s  ({:.1f} ns/packet)\n", icrc_gbs, icrc_ns);
    fmt::print("  zlib crc32 baseline {:8.2f} GB/s  -> ICRC is {:.1f}x zlib\n", zlib_gbs, icrc_gbs / zlib_gbs);
    fmt::print("build from template   {:8.2f} ns/packet (no payload copy, no ICRC)\n", build_ns);
    fmt::print("build from scratch    {:8.2f} ns/packet (begin_frame, no payload copy, no ICRC)\n", build_scratch_ns);
    fmt::print("build + ICRC          {:8.2f} ns/packet\n", build_icrc_ns);
    fmt::print("parse                 {:8.2f} ns/packet (no ICRC check)\n", parse_ns);
    fmt::print("parse + ICRC check    {:8.2f} ns/packet\n", parse_icrc_ns);
  }
  return 0;
}
