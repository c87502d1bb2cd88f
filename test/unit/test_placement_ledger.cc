// The ledger that checks placements in runs with payload tokens: each kind
// of wrong placement must be refused and counted, and a message is whole
// only when every packet of it was placed.
#include <catch2/catch.hpp>

#include <vector>

#include "sim/placement_ledger.h"

using mrc::sim::EngineHosts;
using mrc::sim::PlacementLedger;

namespace {

constexpr uint32_t kMtu = 1024;

struct Fixture {
  PlacementLedger ledger;
  std::vector<uint8_t> src = std::vector<uint8_t>(8 * kMtu);
  Fixture() {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
    REQUIRE(ledger.reserve(3, 2, 4 * kMtu, kMtu));
    ledger.expect(1, 1, 5, src.data(), 3 * kMtu + 10);  // region 1, slot 1, host 5: 4 packets
  }
  uint8_t* slot(size_t r, uint32_t s) { return ledger.region(r) + s * 4 * kMtu; }
  EngineHosts::Placement token(uint8_t* dst, const uint8_t* from, uint32_t len) { return {dst, from, nullptr, len}; }
  bool place_all(uint32_t skip = ~0u) {
    bool ok = true;
    for (uint32_t k = 0; k < 4; ++k)
      if (k != skip) ok &= ledger.place(5, token(slot(1, 1) + k * kMtu, src.data() + k * kMtu, k < 3 ? kMtu : 10));
    return ok;
  }
};

}  // namespace

TEST_CASE("a message placed packet by packet from the right bytes is whole") {
  Fixture f;
  CHECK(f.place_all());
  CHECK(f.ledger.misplaced() == 0);
  CHECK(f.ledger.take(1, 1));
  CHECK_FALSE(f.ledger.take(1, 1));  // taken: the slot holds no message now
}

TEST_CASE("a message with a packet never placed is not whole") {
  Fixture f;
  CHECK(f.place_all(2));
  CHECK_FALSE(f.ledger.take(1, 1));
}

TEST_CASE("every kind of wrong placement is refused and counted") {
  Fixture f;
  uint8_t* s = f.slot(1, 1);
  const uint8_t* src = f.src.data();
  CHECK_FALSE(f.ledger.place(5, f.token(s + kMtu, src, kMtu)));                // another packet's bytes
  CHECK_FALSE(f.ledger.place(5, f.token(s + 100, src + 100, kMtu)));           // not at a packet boundary
  CHECK_FALSE(f.ledger.place(5, f.token(s, src, kMtu - 1)));                   // short of a packet
  CHECK_FALSE(f.ledger.place(5, f.token(s + 3 * kMtu, src + 3 * kMtu, 11)));   // past the message's end
  CHECK_FALSE(f.ledger.place(4, f.token(s, src, kMtu)));                       // at the wrong host
  CHECK_FALSE(f.ledger.place(5, f.token(f.slot(1, 0), src, kMtu)));            // a slot with no message
  CHECK_FALSE(f.ledger.place(5, f.token(f.ledger.region(0) - 1, src, kMtu)));  // outside every region
  CHECK(f.ledger.misplaced() == 7);
  CHECK_FALSE(f.ledger.take(1, 1));
}

TEST_CASE("a late packet of a slot's previous message is refused") {
  Fixture f;
  CHECK(f.place_all());
  CHECK(f.ledger.take(1, 1));
  f.ledger.expect(1, 1, 5, f.src.data() + 64, kMtu);  // the slot's next message, from elsewhere
  CHECK_FALSE(f.ledger.place(5, f.token(f.slot(1, 1), f.src.data(), kMtu)));
  CHECK(f.ledger.place(5, f.token(f.slot(1, 1), f.src.data() + 64, kMtu)));
  CHECK(f.ledger.take(1, 1));
}

TEST_CASE("payloads too short for a token are compared byte for byte") {
  PlacementLedger ledger;
  REQUIRE(ledger.reserve(1, 1, kMtu, kMtu));
  const std::vector<uint8_t> src{1, 2, 3, 4, 5};
  std::vector<uint8_t> wire = src;
  ledger.expect(0, 0, 0, src.data(), 5);
  CHECK(ledger.place(0, {ledger.region(0), nullptr, wire.data(), 5}));
  wire[4] ^= 1;
  CHECK_FALSE(ledger.place(0, {ledger.region(0), nullptr, wire.data(), 5}));
  CHECK(ledger.misplaced() == 1);
}
