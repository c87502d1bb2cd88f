// Cache prefetching, for code that knows what it will touch a little later:
// a simulation runs thousands of engines and mostly waits on loads of their
// state (sim::EventLoop, Engine::prefetch_rx).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mrc::engine {

// Starts loading every cache line of [p, p + bytes). Never faults, whatever
// the address.
inline void prefetch_bytes(const void* p, size_t bytes) {
  constexpr uintptr_t kLine = 64;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(kLine - 1); a < end; a += kLine)
    __builtin_prefetch(reinterpret_cast<const void*>(a));
}

}  // namespace mrc::engine
