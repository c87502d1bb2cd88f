#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <thread>

#include "nic/fault_guard.h"

using mrc::nic::guarded;

namespace {

// A page nothing may touch: what a burst meets once a peer's memory is unmapped.
struct DeadPage {
  volatile uint8_t* p;
  DeadPage() {
    void* m = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    p = static_cast<volatile uint8_t*>(m);
  }
  ~DeadPage() { munmap(const_cast<uint8_t*>(p), 4096); }
};

}  // namespace

TEST_CASE("a fault inside a guarded call returns false, repeatedly, on any thread") {
  mrc::nic::install_fault_guard();
  DeadPage dead;
  int ran = 0;
  CHECK(guarded([&] { ++ran; }));
  CHECK(ran == 1);
  for (int i = 0; i < 3; ++i) {  // the handler keeps working after a jump
    uint8_t got = 0;
    CHECK_FALSE(guarded([&] { got = dead.p[0]; }));
    CHECK_FALSE(guarded([&] { dead.p[100] = 1; }));
  }
  CHECK(guarded([&] { ++ran; }));  // and a clean call after faults still runs
  CHECK(ran == 2);
  bool other = true;
  std::thread t([&] { other = guarded([&] { (void)dead.p[7]; }); });
  t.join();
  CHECK_FALSE(other);
}
