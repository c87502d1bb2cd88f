#include "sim/placement_ledger.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace mrc::sim {

PlacementLedger::~PlacementLedger() {
  if (base_) munmap(base_, bytes_);
}

bool PlacementLedger::reserve(size_t regions, uint32_t slots, uint32_t slot_bytes, uint32_t mtu) {
  if (base_ || regions == 0 || slots == 0 || slot_bytes == 0 || mtu == 0) return false;
  slots_ = slots;
  slot_bytes_ = slot_bytes;
  mtu_ = mtu;
  bytes_ = regions * region_bytes();
  void* p = mmap(nullptr, bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  base_ = static_cast<uint8_t*>(p);
  slot_.assign(regions * slots, Slot{});
  bits_.assign(regions * slots * words(), 0);
  return true;
}

void PlacementLedger::expect(size_t r, uint32_t slot, uint32_t host, const uint8_t* src, uint32_t len) {
  const size_t s = r * slots_ + slot;
  slot_[s] = Slot{src, std::min(len, slot_bytes_), host};
  std::fill_n(bits_.begin() + s * words(), words(), 0);
}

bool PlacementLedger::place(uint32_t host, const EngineHosts::Placement& p) {
  auto misplaced = [&] {
    ++misplaced_;
    return false;
  };
  // As integers: the engine's pointer may lie anywhere.
  const uintptr_t at = reinterpret_cast<uintptr_t>(p.dst), base = reinterpret_cast<uintptr_t>(base_);
  if (at < base || at - base >= bytes_) return misplaced();
  const size_t rel = at - base;
  const size_t s = rel / slot_bytes_;
  const uint32_t off = static_cast<uint32_t>(rel % slot_bytes_);
  const Slot& e = slot_[s];
  if (!e.src || host != e.host || off % mtu_ || off >= e.len || p.len != std::min(mtu_, e.len - off))
    return misplaced();
  const uint8_t* want = e.src + off;
  if (p.src ? p.src != want : !p.bytes || std::memcmp(p.bytes, want, p.len) != 0) return misplaced();
  const uint32_t k = off / mtu_;
  bits_[s * words() + k / 64] |= uint64_t(1) << (k % 64);
  return true;
}

bool PlacementLedger::take(size_t r, uint32_t slot) {
  const size_t s = r * slots_ + slot;
  const uint64_t* bits = bits_.data() + s * words();
  const uint32_t packets = (slot_[s].len + mtu_ - 1) / mtu_;
  bool all = slot_[s].src != nullptr;
  for (uint32_t k = 0; all && k < packets; ++k) all = (bits[k / 64] >> (k % 64)) & 1;
  expect(r, slot, 0, nullptr, 0);
  return all;
}

}  // namespace mrc::sim
