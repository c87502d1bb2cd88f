// Workload mode: RDMA WRITEs between two devices with no host program, to
// exercise and measure the datapath alone. The requester sends messages from
// a set of pre-filled patterns into slots of the responder's region; the
// responder checks each slot against the pattern its message index implies.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "dpdk/nic.h"

namespace mrc::nicapp {

struct WorkloadResult {
  uint64_t size = 0;  // as run (a two-process responder takes the requester's)
  uint32_t qps = 0, depth = 0;
  uint64_t messages = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  uint64_t errors = 0;  // completions with an error status
  std::string first_error;
  bool integrity_ok = false;
  bool completions_ok = false;  // WRITE_IMM: each exactly once, in order
  uint64_t slots_checked = 0, slots_bad = 0;
  uint64_t imm_received = 0;
};

class Workload {
 public:
  Workload(dp::Nic& nic, const Options& o, const Built& b);
  ~Workload();

  // Creates and connects the QPs (exchanging QP data over TCP in the
  // two-process modes). Call before Nic::start(). Returns an error string.
  std::string setup();
  // After Nic::start(): the requester starts posting (a two-process
  // responder tells its requester it is ready).
  void begin();
  // Requester: all messages completed. Two-process responder: the requester
  // reported its counts (or went away).
  bool done();
  // On a signal or --duration: post nothing more, finish what is in flight.
  void stop_posting();
  // For the per-second table: bytes completed, or for a responder alone
  // (--wl-listen) bytes placed.
  uint64_t bytes_completed() const;
  // Verifies what was placed and returns the result; the two-process sides
  // exchange counts and the verdict. Call once, after done() or stop_posting().
  WorkloadResult finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mrc::nicapp
