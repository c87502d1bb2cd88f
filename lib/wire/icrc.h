// RoCEv2 invariant CRC (IBTA Annex A17): CRC-32 over 8 x 0xFF (the masked LRH),
// the IP and UDP headers with their variant fields set to all ones, the BTH
// with resv8a set to all ones, and everything after the BTH up to the ICRC.
// A frame that may not be written is masked in a copy (small frames) or by a
// table walk over its headers (large ones); one that may is masked in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace mrc::wire {

// `l3` spans the IP header to the end of the frame, ICRC included (the last
// kIcrcLen bytes). Returns the ICRC value, as stored little-endian on the wire.
// Returns 0 and sets *ok=false if the span is too short to hold the headers.
uint32_t icrc_compute(std::span<const uint8_t> l3, bool* ok = nullptr);

// Writes the ICRC into the last kIcrcLen bytes of `l3`. The variant fields
// are briefly set to ones in place and restored: no other thread may read
// the frame meanwhile.
bool icrc_fill(std::span<uint8_t> l3);

bool icrc_check(std::span<const uint8_t> l3);

// Raw CRC-32 (IEEE, reflected) continuing from `crc`, exposed for tests and
// benchmarks that compare implementations.
uint32_t crc32_ieee(uint32_t crc, const uint8_t* data, size_t len);

}  // namespace mrc::wire
