// Property test: feeds random and mutated frames to the parser. Each frame
// sits in a heap buffer of exactly its size, so under ASan any read past the
// end faults. Accepted frames must satisfy the layout invariants, and frames
// built unmutated must parse back to the values they were built with.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fuzz/frame_invariants.h"
#include "wire/icrc.h"
#include "wire/packet.h"

using namespace mrc::wire;

namespace {

const std::vector<uint8_t> kOpcodes = {
#define MRC_X(name, value, flags) value,
    MRC_OPCODES(MRC_X)
#undef MRC_X
};

struct Built {
  std::vector<uint8_t> frame;
  uint8_t opcode;
  uint32_t dest_qp, psn, payload_len;
};

Built random_valid(std::mt19937_64& rng) {
  Addressing a;
  const bool v6 = rng() & 1;
  a.src_ip = v6 ? *IpAddr::parse("2001:db8::1") : IpAddr::from_v4(static_cast<uint32_t>(rng()));
  a.dst_ip = v6 ? *IpAddr::parse("2001:db8::2") : IpAddr::from_v4(static_cast<uint32_t>(rng()));
  if (rng() % 4 == 0) a.vlan_tci = static_cast<uint16_t>(rng());
  a.udp_src_port = static_cast<uint16_t>(rng());
  a.flow_label = static_cast<uint32_t>(rng()) & 0xFFFFF;
  Built b;
  b.opcode = kOpcodes[rng() % kOpcodes.size()];
  // Mostly short payloads: the headers are what the mutations aim at.
  const uint32_t max_len = rng() % 8 == 0 ? 4200 : 128;
  b.payload_len = (op_flags(b.opcode) & kOpPayload) ? static_cast<uint32_t>(rng() % max_len) : 0;
  b.dest_qp = static_cast<uint32_t>(rng()) & kPsnMask;
  b.psn = static_cast<uint32_t>(rng()) & kPsnMask;
  b.frame.resize(b.payload_len + 160);
  MutablePacket m = begin_frame(b.frame, a, b.opcode, rng() & 1, b.payload_len);
  if (!m.base) {
    std::fprintf(stderr, "begin_frame refused opcode %#x len %u\n", b.opcode, b.payload_len);
    std::exit(1);
  }
  m.bth().set_dest_qp(b.dest_qp);
  m.bth().set_psn(b.psn);
  m.bth().set_ack_req(rng() & 1);
  auto payload = m.payload();
  for (size_t i = 0; i < payload.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(payload.data() + i, &r, std::min<size_t>(8, payload.size() - i));
  }
  finish_frame(m);
  b.frame.resize(m.at.size);
  return b;
}

void mutate(std::mt19937_64& rng, std::vector<uint8_t>& f) {
  switch (rng() % 8) {
    case 0:  // bit flips
      for (int n = 1 + rng() % 8; n-- && !f.empty();) f[rng() % f.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:  // truncation
      f.resize(f.empty() ? 0 : rng() % f.size());
      break;
    case 2:  // trailing bytes
      for (int n = 1 + rng() % 64; n--;) f.push_back(static_cast<uint8_t>(rng()));
      break;
    case 3:  // overwrite a run in the headers
      for (size_t i = rng() % 90, n = 1 + rng() % 16; n-- && i < f.size(); ++i) f[i] = static_cast<uint8_t>(rng());
      break;
    case 4:  // length fields: IPv4 total length, IPv6 payload length or UDP length
      if (f.size() > 60) {
        size_t off = std::array<size_t, 4>{16, 18, 38, 58}[rng() % 4];
        f[off] = static_cast<uint8_t>(rng());
        f[off + 1] = static_cast<uint8_t>(rng());
      }
      break;
    case 5:  // opcode or BTH flags
      if (f.size() > 80) f[42 + (rng() % 2) * (rng() % 20)] = static_cast<uint8_t>(rng());
      break;
    case 7:  // consistent truncation: IP and UDP lengths agree with the cut
      if (f.size() > 42 && load_be16(f.data() + 12) == kEtherTypeIpv4) {
        f.resize(42 + rng() % (f.size() - 42));
        store_be16(f.data() + 16, static_cast<uint16_t>(f.size() - 14));
        store_be16(f.data() + 38, static_cast<uint16_t>(f.size() - 34));
      }
      break;
    case 6:  // pure noise
      f.resize(rng() % 200);
      for (auto& x : f) x = static_cast<uint8_t>(rng());
      break;
  }
}

// Re-seals the ICRC of an untagged frame so mutations reach the checks
// behind it instead of always stopping at bad_icrc.
void reseal(std::vector<uint8_t>& f) {
  if (f.size() < kEthLen + kIpv4Len + kUdpLen + kBthLen + kIcrcLen) return;
  icrc_fill({f.data() + kEthLen, f.size() - kEthLen});
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t iterations = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 1000000;
  uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 0x5EED;
  std::mt19937_64 rng(seed);
  std::array<uint64_t, kParseErrorCount> hits{};
  uint64_t roundtrips = 0;

  for (uint64_t i = 0; i < iterations; ++i) {
    Built b = random_valid(rng);
    std::vector<uint8_t> f = b.frame;
    const bool pristine = rng() % 8 == 0;
    if (!pristine) {
      mutate(rng, f);
      if (rng() & 1) reseal(f);
    }
    // An exact-size copy: ASan reports any read one byte past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[f.size() ? f.size() : 1]);
    std::copy(f.begin(), f.end(), exact.get());
    Packet p;
    ParseError e = parse_frame({exact.get(), f.size()}, p);
    ++hits[static_cast<size_t>(e)];
    if (e == ParseError::ok) {
      if (const char* why = mrc::test::accepted_packet_violation({exact.get(), f.size()}, p)) {
        std::fprintf(stderr, "FAIL seed=%#llx iteration=%llu: %s\n", (unsigned long long)seed, (unsigned long long)i,
                     why);
        return 1;
      }
    }
    if (pristine) {
      if (e != ParseError::ok || p.at.opcode != b.opcode || p.bth().dest_qp() != b.dest_qp || p.bth().psn() != b.psn ||
          p.at.payload_len != b.payload_len) {
        std::fprintf(stderr, "FAIL seed=%#llx iteration=%llu: built frame did not parse back (%s)\n",
                     (unsigned long long)seed, (unsigned long long)i, std::string(parse_error_name(e)).c_str());
        return 1;
      }
      ++roundtrips;
    }
  }

  unsigned distinct = 0;
  std::printf("%llu frames (seed %#llx), %llu unmutated round trips\n", (unsigned long long)iterations,
              (unsigned long long)seed, (unsigned long long)roundtrips);
  for (size_t r = 0; r < hits.size(); ++r) {
    std::printf("  %-18s %llu\n", std::string(parse_error_name(static_cast<ParseError>(r))).c_str(),
                (unsigned long long)hits[r]);
    distinct += hits[r] != 0;
  }
  // The mutations are meant to reach every rejection; if most go unreached
  // the generator has stopped exercising the parser.
  if (iterations >= 100000 && distinct < kParseErrorCount - 2) {
    std::fprintf(stderr, "FAIL: only %u of %u outcomes reached\n", distinct, kParseErrorCount);
    return 1;
  }
  return 0;
}
