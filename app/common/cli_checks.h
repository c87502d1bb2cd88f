// CLI11 validators the tools share, for what CLI11 2.1.2's own checks let
// through.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <string>

namespace mrc::app {

// CLI11 reads "nan" and "inf" as numbers and its Range lets NaN through
// (every comparison with NaN is false), so every floating-point option is
// checked with this: finite and in [lo, hi].
inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return "Value " + in + " is not a number";
        if (!std::isfinite(v) || v < lo || v > hi) return fmt::format("Value {} not in range {} to {}", in, lo, hi);
        return "";
      },
      fmt::format("FLOAT in [{} - {}]", lo, hi));
}

// CLI11 reads an unsigned integer with strtoull, which takes "-1" for
// 2^64 - 1: a 64-bit option (narrower ones fail the round trip) would use
// that silently. Goes before any transform (AsSizeValue reads "-1" the same).
inline CLI::Validator not_negative() {
  return CLI::Validator(
      [](std::string& in) -> std::string {
        const auto first = in.find_first_not_of(" \t");
        if (first != std::string::npos && in[first] == '-') return "Value " + in + " is negative";
        return "";
      },
      "");
}

}  // namespace mrc::app
