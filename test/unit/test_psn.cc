#include <catch2/catch.hpp>

#include "wire/psn.h"

using namespace mrc::wire;

TEST_CASE("psn_add wraps at 24 bits") {
  CHECK(psn_add(0xFFFFFF, 1) == 0);
  CHECK(psn_add(0xFFFFF0, 0x20) == 0x10);
  CHECK(psn_add(5, -6) == 0xFFFFFF);
  CHECK(psn_add(0, -(1 << 24)) == 0);
}

TEST_CASE("psn_diff is signed and modular") {
  CHECK(psn_diff(10, 5) == 5);
  CHECK(psn_diff(5, 10) == -5);
  CHECK(psn_diff(2, 0xFFFFFE) == 4);
  CHECK(psn_diff(0xFFFFFE, 2) == -4);
  // Exactly half the space away is "behind", as in IBTA.
  CHECK(psn_diff(kPsnHalfRange, 0) == -static_cast<int32_t>(kPsnHalfRange));
  CHECK(psn_diff(kPsnHalfRange - 1, 0) == static_cast<int32_t>(kPsnHalfRange - 1));
}

TEST_CASE("psn comparisons across the wrap") {
  CHECK(psn_lt(0xFFFFFF, 0));
  CHECK(psn_gt(0, 0xFFFFFF));
  CHECK(psn_le(7, 7));
  CHECK(psn_ge(7, 7));
  CHECK_FALSE(psn_lt(7, 7));
  CHECK(psn_lt(0x7FFFFF, 0xFFFFFE));
  CHECK_FALSE(psn_lt(0, kPsnHalfRange));
}

TEST_CASE("psn_in_window handles the wrap and the edges") {
  CHECK(psn_in_window(0xFFFFFF, 0xFFFFF0, 1024));
  CHECK(psn_in_window(0x10, 0xFFFFF0, 1024));
  CHECK(psn_in_window(0xFFFFF0, 0xFFFFF0, 1));
  CHECK_FALSE(psn_in_window(0xFFFFF0 + 1, 0xFFFFF0, 1));
  CHECK_FALSE(psn_in_window(0xFFFFEF, 0xFFFFF0, 1024));
  CHECK_FALSE(psn_in_window(0x3F0, 0xFFFFF0, 1024));  // base + 1024 exactly
  CHECK(psn_in_window(0x3EF, 0xFFFFF0, 1024));
}
