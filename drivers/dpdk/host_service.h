// The host side of mrc-nic devices: host programs (through lib_mrc.so)
// create QPs, CQs and MRs over each device's Unix socket, and the lcores
// serve their queues in shared memory (lib/host/abi.h).
//
// Threads: one control thread accepts clients and runs their requests,
// reaching engines through Shard::call; each shard's lcore runs a HostShard
// that polls the doorbells of the QPs it owns. Objects a HostShard sees are
// added and removed only through that shard's mailbox.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dpdk/nic.h"
#include "wire/packet.h"

namespace mrc::dp {

struct HostOptions {
  std::string run_dir;  // sockets go here (created 0700; sockets 0600)
  engine::QpAttr qp_defaults;  // timeout, retries, MPR, WIMM, EV and CC profile
  engine::QpCaps max_caps;     // the largest SQ/RQ a client may ask for
  uint32_t max_cq_depth = 65536;
  uint32_t max_qps_per_client = 1024;
  // Peers are found by the GID a program names: the same host bits on every
  // plane's subnet, MACs by ARP/ND (or the device's static neighbours).
  uint32_t prefix_len_v4 = 24;
  uint32_t prefix_len_v6 = 64;
  double resolve_timeout_s = 1;  // ARP/ND wait per plane when a QP goes to RTR
};

class HostService {
 public:
  // Binds every device's socket; throws std::runtime_error naming what failed
  // (for example a device another mrc-nic already serves).
  HostService(Nic& nic, HostOptions opts);
  ~HostService();
  HostService(const HostService&) = delete;
  HostService& operator=(const HostService&) = delete;

  // Installs the shard apps and starts the control thread. Call before
  // Nic::start() so lcores find their apps in place.
  void start();
  // Tells clients the device is going away, reclaims everything and joins
  // the control thread (idempotent).
  void stop();

  const HostCounters& counters() const;
  // Socket path of a device.
  std::string socket_path(const std::string& device) const;

  struct Impl;  // shared with the per-lcore half in host_service.cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mrc::dp
