// Big-endian loads and stores of 1..8 bytes. Wire structs are never cast onto
// buffers: every access goes through these, so alignment and byte order are
// handled in one place.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace mrc::wire {

template <unsigned N>
constexpr uint64_t load_be(const uint8_t* p) {
  static_assert(N >= 1 && N <= 8);
  if (!std::is_constant_evaluated()) {
    // Whole-word loads: the compiler turns these into one mov + bswap.
    if constexpr (N == 2) {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return __builtin_bswap16(v);
    }
    if constexpr (N == 4) {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return __builtin_bswap32(v);
    }
    if constexpr (N == 8) {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return __builtin_bswap64(v);
    }
  }
  uint64_t v = 0;
  for (unsigned i = 0; i < N; ++i) v = (v << 8) | p[i];
  return v;
}

template <unsigned N>
constexpr void store_be(uint8_t* p, uint64_t v) {
  static_assert(N >= 1 && N <= 8);
  if (!std::is_constant_evaluated()) {
    if constexpr (N == 2) {
      uint16_t w = __builtin_bswap16(static_cast<uint16_t>(v));
      std::memcpy(p, &w, 2);
      return;
    }
    if constexpr (N == 4) {
      uint32_t w = __builtin_bswap32(static_cast<uint32_t>(v));
      std::memcpy(p, &w, 4);
      return;
    }
    if constexpr (N == 8) {
      uint64_t w = __builtin_bswap64(v);
      std::memcpy(p, &w, 8);
      return;
    }
  }
  for (unsigned i = 0; i < N; ++i) p[N - 1 - i] = static_cast<uint8_t>(v >> (8 * i));
}

inline uint16_t load_be16(const uint8_t* p) { return static_cast<uint16_t>(load_be<2>(p)); }
inline uint32_t load_be32(const uint8_t* p) { return static_cast<uint32_t>(load_be<4>(p)); }
inline void store_be16(uint8_t* p, uint16_t v) { store_be<2>(p, v); }
inline void store_be32(uint8_t* p, uint32_t v) { store_be<4>(p, v); }

inline uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline void store_le32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}

// A bit field inside a big-endian span of N bytes at byte offset Off.
template <unsigned Off, unsigned N, unsigned Shift, uint64_t Mask>
struct BeField {
  static constexpr uint64_t get(const uint8_t* h) { return (load_be<N>(h + Off) >> Shift) & Mask; }
  static constexpr void set(uint8_t* h, uint64_t v) {
    constexpr uint64_t span_mask = N == 8 ? ~0ull : ((1ull << (8 * N)) - 1);
    constexpr uint64_t placed = (Mask << Shift) & span_mask;
    if constexpr (placed == span_mask) {
      store_be<N>(h + Off, (v << Shift) & span_mask);
    } else {
      uint64_t cur = load_be<N>(h + Off);
      store_be<N>(h + Off, (cur & ~placed) | ((v << Shift) & placed));
    }
  }
};

}  // namespace mrc::wire
