// Frame buffers for the simulated network. Every frame is born at a host's
// uplink and dies at a host or in a drop, at the same rate, so buffers are
// recycled instead of freed: a 4 KB malloc and free per packet was a tenth
// of a large run's time. A buffer never returned is simply freed as usual.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mrc::sim {

class FramePool {
 public:
  // A buffer of `len` bytes (contents unspecified), reusing a returned one.
  static std::vector<uint8_t> take(size_t len) {
    auto& free = list();
    if (free.empty()) return std::vector<uint8_t>(len);
    std::vector<uint8_t> f = std::move(free.back());
    free.pop_back();
    f.resize(len);
    return f;
  }
  static void give(std::vector<uint8_t>&& f) {
    auto& free = list();
    if (free.size() < kMaxKept && f.capacity()) free.push_back(std::move(f));
  }

 private:
  // Bounds what an idle pool holds after a burst (4096 x ~4 KB).
  static constexpr size_t kMaxKept = 4096;
  // Per thread: a simulation runs on one thread, tests may run several.
  static std::vector<std::vector<uint8_t>>& list() {
    thread_local std::vector<std::vector<uint8_t>> free;
    return free;
  }
};

}  // namespace mrc::sim
