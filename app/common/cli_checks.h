// CLI11 validators the tools share, for what CLI11 2.1.2's own checks let
// through.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <sys/stat.h>

#include <cctype>
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

// CLI11 reads any number as a boolean ("--host 7", "nscc-disable-qa = 2"
// meant true): a switch takes a yes or a no.
inline CLI::Validator boolean_word() {
  return CLI::Validator(
      [](std::string& in) -> std::string {
        std::string w;
        for (char c : in) w += char(std::tolower(static_cast<unsigned char>(c)));
        for (const char* ok : {"true", "false", "1", "0", "yes", "no", "on", "off"})
          if (w == ok) return "";
        return "Value " + in + " is not true/false (1/0, yes/no, on/off)";
      },
      "");
}

// For set_config's option: CLI11 reads any path that is not a directory to
// its end, so /dev/zero never ends, a FIFO without a writer blocks, and a
// huge file is read whole. A config is a small regular file. Runs before
// the file is opened (CLI11 validates the path when it asks for it).
inline constexpr off_t kMaxConfigBytes = 1 << 20;
inline CLI::Validator config_file() {
  return CLI::Validator(
      [](std::string& in) -> std::string {
        struct stat st {};
        if (in.empty()) return "";
        if (::stat(in.c_str(), &st) != 0) return "File does not exist: " + in;
        if (!S_ISREG(st.st_mode)) return in + " is not a regular file";
        if (st.st_size > kMaxConfigBytes)
          return fmt::format("{} has {} bytes; a config file has at most {}", in, st.st_size, kMaxConfigBytes);
        return "";
      },
      "FILE");
}

}  // namespace mrc::app
