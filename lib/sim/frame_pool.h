// Frame buffers for the simulated network. Frames are born at hosts' uplinks
// (and as a link's duplicates) and die at hosts or in drops at about the same
// rate, so buffers are recycled instead of freed: a 4 KB malloc and free per
// packet was a tenth of a large run's time. A buffer never returned is simply
// freed as usual.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mrc::sim {

class FramePool {
 public:
  // Buffers of at most this capacity are kept apart (EngineHosts' compact
  // frames), so that a full-size frame is never handed a small one to grow.
  static constexpr size_t kSmallBytes = 512;

  // A returned buffer of the same class, or a new one with room for
  // `capacity` bytes. Its size is whatever it last had, so that resizing it
  // to a frame of about that size zero-fills little.
  static std::vector<uint8_t> take(size_t capacity) {
    auto& free = list(capacity);
    if (free.empty()) {
      std::vector<uint8_t> f;
      f.reserve(capacity);
      return f;
    }
    std::vector<uint8_t> f = std::move(free.back());
    free.pop_back();
    return f;
  }
  static void give(std::vector<uint8_t>&& f) {
    if (!f.capacity()) return;
    auto& free = list(f.capacity());
    if (free.size() < kMaxKept) free.push_back(std::move(f));
  }

 private:
  // Bounds what an idle pool holds after a burst: 4096 x ~4 KB and
  // 4096 x 512 B.
  static constexpr size_t kMaxKept = 4096;
  // Per thread: a simulation runs on one thread, tests may run several.
  static std::vector<std::vector<uint8_t>>& list(size_t capacity) {
    thread_local std::vector<std::vector<uint8_t>> small, large;
    return capacity <= kSmallBytes ? small : large;
  }
};

}  // namespace mrc::sim
