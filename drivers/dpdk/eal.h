// EAL bring-up shared by every DPDK binary: our arguments follow the DPDK
// convention `app [EAL args] -- [app args]`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

struct rte_mempool;

namespace mrc::dp {

// Runs rte_eal_init once. On success returns the count of argv entries EAL
// consumed (argv[ret] is then the `--`, usable as argv[0] for CLI11); on
// failure returns -1 and fills `error`.
int eal_init(int argc, char** argv, std::string& error);

// The index of the `--` before the application's arguments when they ask for
// help (-h or --help), else -1. The help needs no EAL, which may not come up
// (no hugepages without --no-huge), so the caller prints it before eal_init.
int app_help_index(int argc, char** argv);

// When the application's arguments ask for help, prints it from `app` (a
// CLI::App; this library does not depend on CLI11, so its ParseError and
// CallForHelp come as parameters) without bringing EAL up, and returns the
// exit code; else -1.
template <class ParseError, class CallForHelp, class App>
int help_without_eal(App& app, int argc, char** argv) {
  const int at = app_help_index(argc, argv);
  if (at < 0) return -1;
  argv[at] = argv[0];  // the program's name, as rte_eal_init leaves it
  try {
    app.parse(argc - at, argv + at);
  } catch (const ParseError& e) {
    return app.exit(e);
  }
  return app.exit(CallForHelp());
}

struct PortInfo {
  uint16_t port_id = 0;
  std::string name;
  std::string driver;
  uint64_t mac = 0;
  bool link_up = false;
  uint32_t link_speed_mbps = 0;
  uint16_t mtu = 0;
  uint16_t max_rx_queues = 0;
  uint16_t max_tx_queues = 0;
};

std::vector<PortInfo> list_ports();

// Configures one RX and one TX queue of about `descriptors` each on `port_id`
// and starts it. Returns an empty string on success, else the failure.
std::string start_port_minimal(uint16_t port_id, rte_mempool* pool, uint16_t descriptors = 256);

// Waits up to `seconds` for every port's link to be up (memif connects from
// EAL's interrupt thread, after the port starts). Returns whether they came up.
bool wait_links_up(const std::vector<uint16_t>& ports, double seconds);

std::string format_mac(uint64_t mac);

// Probes a virtual device after EAL init: "NAME[,ARGS]", as EAL's --vdev.
std::string add_vdev(const std::string& spec);

// Two ethdevs named a and b joined back to back by a pair of rte_rings
// (what a net_ring vdev cannot do: each of those loops back to itself).
std::string create_ring_pair(const std::string& a, const std::string& b);

// Runs f() on EAL's interrupt thread and returns once it has run. PMDs handle
// their control events on that thread, so a port operation that must not
// overlap those handlers runs there. Runs f() here when already on that thread
// or when the thread cannot take the call.
void run_on_interrupt_thread(const std::function<void()>& f);

// Stop and close ports on the interrupt thread. DPDK 22.11's memif disconnects
// a port both in dev_stop/dev_close and in its interrupt handler when the peer
// leaves; called from another thread the two free the same control channel
// ("EAL: Error: Invalid memory", then a corrupt heap) when the peer leaves at
// the same moment, as when both ends of a pair shut down together.
void stop_ports(const std::vector<uint16_t>& ports);
void close_ports(const std::vector<uint16_t>& ports);

// rte_eal_cleanup() for a process about to exit. DPDK 22.11 never stops
// EAL's interrupt thread, which may still be walking its interrupt sources
// (woken by a port's close) while cleanup unmaps EAL's memory: a crash at
// exit (memif-teardown: 3 runs in 20 with both CPUs busy, none without the
// cleanup). The thread is parked first, in a callback that never returns.
void eal_cleanup();

}  // namespace mrc::dp
