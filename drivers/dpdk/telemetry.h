// The /mrc/* rte_telemetry commands (read them with dpdk-telemetry.py or
// mrcctl). Every answer is gathered on the owning lcores through their
// mailboxes, so the fast path shares nothing with the telemetry thread.
#pragma once

#include <string>

#include "dpdk/nic.h"

namespace mrc::dp {

// Returns an empty string, or what failed. Once per process: telemetry
// cannot unregister commands, so they stay pointed at `nic`.
std::string register_telemetry(Nic& nic);
// Points /mrc/host at the host service's counters (null: none).
void set_telemetry_host(const HostCounters* counters);
// Makes the commands answer "no device" (call before destroying the Nic).
void unregister_telemetry();

}  // namespace mrc::dp
