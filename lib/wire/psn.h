// 24-bit modular PSN arithmetic. A PSN a precedes b when b is less than half
// the sequence space (2^23) ahead of a, as in IBTA RC.
#pragma once

#include <cstdint>

#include "wire/spec.h"

namespace mrc::wire {

constexpr uint32_t psn_add(uint32_t psn, int64_t delta) {
  return static_cast<uint32_t>(static_cast<int64_t>(psn) + delta) & kPsnMask;
}

// Signed distance from `from` to `to`, in [-2^23, 2^23).
constexpr int32_t psn_diff(uint32_t to, uint32_t from) {
  uint32_t d = (to - from) & kPsnMask;
  return d >= kPsnHalfRange ? static_cast<int32_t>(d) - static_cast<int32_t>(kPsnMask + 1) : static_cast<int32_t>(d);
}

constexpr bool psn_lt(uint32_t a, uint32_t b) { return psn_diff(b, a) > 0; }
constexpr bool psn_le(uint32_t a, uint32_t b) { return psn_diff(b, a) >= 0; }
constexpr bool psn_gt(uint32_t a, uint32_t b) { return psn_lt(b, a); }
constexpr bool psn_ge(uint32_t a, uint32_t b) { return psn_le(b, a); }

// True when psn lies in the window [base, base + size).
constexpr bool psn_in_window(uint32_t psn, uint32_t base, uint32_t size) { return ((psn - base) & kPsnMask) < size; }

}  // namespace mrc::wire
