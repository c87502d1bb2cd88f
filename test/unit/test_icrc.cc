#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "wire/bytes.h"
#include "wire/icrc.h"
#include "wire/spec.h"

using namespace mrc::wire;

namespace {

// Bit-at-a-time reflected CRC-32, the textbook definition, to check the
// ISA-L kernel against.
uint32_t crc32_reference(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

}  // namespace

TEST_CASE("ISA-L CRC-32 equals the bitwise definition, and chains") {
  std::mt19937 rng(1);
  std::vector<uint8_t> buf(5000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t len : {0, 1, 7, 64, 1000, 4096, 5000}) {
    CHECK(crc32_ieee(0, buf.data(), len) == crc32_reference(0, buf.data(), len));
  }
  uint32_t chained = crc32_ieee(crc32_ieee(0, buf.data(), 68), buf.data() + 68, 4000);
  CHECK(chained == crc32_reference(0, buf.data(), 4068));
  const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  CHECK(crc32_ieee(0, check, 9) == 0xCBF43926);  // the CRC-32 check value
  const uint8_t lrh[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  CHECK(~crc32_ieee(0, lrh, 8) == kIcrcSeed);  // why the seed is what it is
}

TEST_CASE("ICRC refuses spans too short to hold the headers") {
  std::vector<uint8_t> tiny(20, 0x45);
  bool ok = true;
  icrc_compute(tiny, &ok);
  CHECK_FALSE(ok);
  CHECK_FALSE(icrc_check(tiny));
  CHECK_FALSE(icrc_check({}));
}

TEST_CASE("ICRC equals the bitwise CRC of LRH ones and the masked headers, on both size paths") {
  std::mt19937 rng(7);
  for (unsigned ip_len : {kIpv4Len, kIpv6Len}) {
    for (size_t covered = ip_len + kUdpLen + kBthLen; covered <= 4200; covered += covered < 700 ? 1 : 997) {
      std::vector<uint8_t> l3(covered + kIcrcLen);
      for (auto& b : l3) b = static_cast<uint8_t>(rng());
      l3[0] = static_cast<uint8_t>(ip_len == kIpv4Len ? 0x45 : 0x60 | (l3[0] & 0x0F));
      // The variant fields, set to ones as the spec defines the ICRC.
      std::vector<uint8_t> masked(8, 0xFF);
      masked.insert(masked.end(), l3.begin(), l3.begin() + long(covered));
      uint8_t* h = masked.data() + 8;
      if (ip_len == kIpv4Len) {
        h[1] = h[8] = h[10] = h[11] = 0xFF;
      } else {
        h[0] |= 0x0F;
        h[1] = h[2] = h[3] = h[7] = 0xFF;
      }
      h[ip_len + 6] = h[ip_len + 7] = 0xFF;
      h[ip_len + kUdpLen + kBthResv8aOffset] = 0xFF;
      const uint32_t want = crc32_reference(0, masked.data(), masked.size());
      bool ok = false;
      INFO("ip_len " << ip_len << " covered " << covered);
      REQUIRE(icrc_compute(l3, &ok) == want);
      REQUIRE(ok);
      // The sender's path masks in place: same ICRC, every other byte as it was.
      std::vector<uint8_t> filled = l3;
      REQUIRE(icrc_fill(filled));
      REQUIRE(load_le32(filled.data() + covered) == want);
      REQUIRE(std::equal(l3.begin(), l3.begin() + long(covered), filled.begin()));
    }
  }
}
