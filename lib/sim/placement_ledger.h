// Checks the placements of a run with payload tokens (see
// EngineHosts::set_payload_tokens) instead of making them. The responders'
// buffers are then address space only: regions of slots, each slot holding
// one message at a time. Every placement must be one whole packet of the
// message its slot holds, at an MTU boundary, from the very bytes of the
// requester's memory that belong there; a message is whole when each of its
// packets was placed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/engine_host.h"

namespace mrc::sim {

class PlacementLedger {
 public:
  PlacementLedger() = default;
  ~PlacementLedger();
  PlacementLedger(const PlacementLedger&) = delete;
  PlacementLedger& operator=(const PlacementLedger&) = delete;

  // `regions` regions of `slots` slots of `slot_bytes`, for packets of
  // `mtu`. False when the address space cannot be had. The memory is
  // inaccessible: an engine that touched it would fault, not corrupt.
  bool reserve(size_t regions, uint32_t slots, uint32_t slot_bytes, uint32_t mtu);
  uint8_t* region(size_t r) const { return base_ + r * region_bytes(); }
  size_t region_bytes() const { return size_t(slots_) * slot_bytes_; }

  // The slot now holds a message of `len` bytes from `src`, placed by `host`.
  void expect(size_t r, uint32_t slot, uint32_t host, const uint8_t* src, uint32_t len);
  // One placement at `host`; false (and counted) when it is not what belongs there.
  bool place(uint32_t host, const EngineHosts::Placement& p);
  // Whether every packet of the slot's message was placed; empties the slot.
  bool take(size_t r, uint32_t slot);
  uint64_t misplaced() const { return misplaced_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    const uint8_t* src = nullptr;  // nullptr: no message expected
    uint32_t len = 0;
    uint32_t host = 0;
  };
  size_t words() const { return ((slot_bytes_ + mtu_ - 1) / mtu_ + 63) / 64; }

  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  uint32_t slots_ = 0, slot_bytes_ = 0, mtu_ = 1;
  std::vector<Slot> slot_;      // [region * slots + slot]
  std::vector<uint64_t> bits_;  // per slot, a bit per packet placed
  // Hosts of different partitions may place at once (Fabric's parallel
  // runs). A slot is placed into by its responder's thread and expected and
  // taken by its requester's, never at once: the ACK between them crosses
  // a window's end. The count is everyone's.
  std::atomic<uint64_t> misplaced_{0};
};

}  // namespace mrc::sim
