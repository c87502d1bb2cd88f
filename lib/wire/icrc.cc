#include "wire/icrc.h"

#include <isa-l/crc.h>

#include <cstring>

#include "wire/bytes.h"
#include "wire/headers.h"

namespace mrc::wire {

uint32_t crc32_ieee(uint32_t crc, const uint8_t* data, size_t len) {
  // ISA-L's gzip CRC applies the 0xFFFFFFFF pre- and post-inversion itself,
  // so it chains exactly like zlib's crc32().
  return crc32_gzip_refl(crc, data, len);
}

uint32_t icrc_compute(std::span<const uint8_t> l3, bool* ok) {
  if (ok) *ok = false;
  if (l3.empty()) return 0;
  const unsigned version = l3[0] >> 4;
  const unsigned ip_len = version == 4 ? kIpv4Len : version == 6 ? kIpv6Len : 0;
  const size_t masked_len = ip_len + kUdpLen + kBthLen;
  if (ip_len == 0 || l3.size() < masked_len + kIcrcLen) return 0;

  uint8_t ip[kIpv6Len + kUdpLen + kBthLen];
  std::memcpy(ip, l3.data(), masked_len);
  if (version == 4) {
    Ipv4Ref h(ip);
    h.set_tos(0xFF);
    h.set_ttl(0xFF);
    h.set_checksum(0xFFFF);
  } else {
    Ipv6Ref h(ip);
    h.set_traffic_class(0xFF);
    h.set_flow_label(0xFFFFF);
    h.set_hop_limit(0xFF);
  }
  UdpRef(ip + ip_len).set_checksum(0xFFFF);
  BthRef(ip + ip_len + kUdpLen).set_resv8a(0xFF);

  // Starting from ~seed is the same as first running the CRC over the 8 bytes
  // of the masked LRH.
  uint32_t crc = crc32_ieee(~kIcrcSeed, ip, masked_len);
  crc = crc32_ieee(crc, l3.data() + masked_len, l3.size() - masked_len - kIcrcLen);
  if (ok) *ok = true;
  return crc;
}

bool icrc_fill(std::span<uint8_t> l3) {
  bool ok;
  uint32_t crc = icrc_compute(l3, &ok);
  if (ok) store_le32(l3.data() + l3.size() - kIcrcLen, crc);
  return ok;
}

bool icrc_check(std::span<const uint8_t> l3) {
  bool ok;
  uint32_t crc = icrc_compute(l3, &ok);
  return ok && crc == load_le32(l3.data() + l3.size() - kIcrcLen);
}

}  // namespace mrc::wire
