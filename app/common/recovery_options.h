// Loss recovery and EV health options that mrc-nic and mrc-sim share: one
// spelling, one check and one default (the engine's) for both.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "cli_checks.h"
#include "engine/engine.h"

namespace mrc::app {

struct RecoveryOptions {
  int64_t tail_probe_ns = int64_t(engine::EngineConfig{}.tail_probe_delay);  // < 0: none
  double reorder_window_growth = engine::EngineConfig{}.reorder_window_growth;
  uint32_t plane_silent_losses = engine::EngineConfig{}.plane_silent_losses;
  uint64_t probe_interval_ns = uint64_t(engine::EngineConfig{}.probe_interval);
  uint64_t probe_interval_max_ns = uint64_t(engine::EngineConfig{}.probe_interval_max);
  uint32_t probe_confirmations = engine::EngineConfig{}.probe_confirmations;

  void add_to(CLI::App& app) {
    app.add_option("--tail-probe-ns", tail_probe_ns,
                   "a loss probe follows the end of each flight after this long (negative: none, probe timeout only)")
        ->capture_default_str();
    app.add_option("--reorder-window-growth", reorder_window_growth,
                   "the reorder window may grow, a quarter of its base at a time, to this many times its base "
                   "after needless resends (1: fixed)")
        ->check(finite_range(1, 64))
        ->capture_default_str();
    app.add_option("--plane-silent-losses", plane_silent_losses,
                   "losses in a row on one plane that take all its EVs out (0: EVs fail one by one)")
        ->check(CLI::Range(0u, 65535u))
        ->capture_default_str();
    app.add_option("--probe-interval-ns", probe_interval_ns,
                   "an ASSUMED_BAD EV (or a plane out whole) is probed after this long, doubling per unanswered probe")
        ->check(CLI::Range(uint64_t(1000), uint64_t(1000000000)))
        ->capture_default_str();
    app.add_option("--probe-interval-max-ns", probe_interval_max_ns, "the longest probe interval")
        ->check(CLI::Range(uint64_t(1000), uint64_t(10000000000)))
        ->capture_default_str();
    app.add_option("--probe-confirmations", probe_confirmations,
                   "probes in a row an ASSUMED_BAD EV must have answered to go back into service")
        ->check(CLI::Range(1u, 64u))
        ->capture_default_str();
  }

  // What the validators cannot see alone; "" if nothing.
  std::string check() const {
    if (probe_interval_max_ns < probe_interval_ns)
      return "--probe-interval-max-ns: must be at least --probe-interval-ns";
    return "";
  }

  void apply(engine::EngineConfig& ec) const {
    ec.tail_probe_delay = tail_probe_ns < 0 ? engine::kNever : engine::Nanos(tail_probe_ns);
    ec.reorder_window_growth = reorder_window_growth;
    ec.plane_silent_losses = plane_silent_losses;
    ec.probe_interval = engine::Nanos(probe_interval_ns);
    ec.probe_interval_max = engine::Nanos(probe_interval_max_ns);
    ec.probe_confirmations = probe_confirmations;
  }
};

}  // namespace mrc::app
