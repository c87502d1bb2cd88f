// Replaces the global allocator with one that counts, for benchmarks that
// must show the fast path allocates nothing. Kept in its own file so the
// compiler never pairs an inlined library new with this delete.
#include <cstdint>
#include <cstdlib>
#include <new>

static uint64_t g_allocations = 0;

uint64_t heap_allocations() { return g_allocations; }

void* operator new(size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
