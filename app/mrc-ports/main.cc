// mrc-ports: shows which DPDK ports this build can probe and start. It is the
// first thing to run on a new machine: it proves the linked drivers work with
// the given EAL arguments, before mrc-nic is pointed at them.
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dpdk/eal.h"

int main(int argc, char** argv) {
  CLI::App app{
      "mrc-ports: probe, start and list the DPDK ports given by EAL arguments.\n"
      "usage: mrc-ports [EAL args, e.g. --no-huge --no-pci --vdev=net_ring0] -- [options]"};
  bool json = false;
  bool start = true;
  app.add_flag("--json", json, "print JSON instead of a table");
  app.add_flag("!--no-start", start, "only probe, do not configure and start the ports");
  if (const int rc = mrc::dp::help_without_eal<CLI::ParseError, CLI::CallForHelp>(app, argc, argv); rc >= 0) return rc;

  std::string error;
  int consumed = mrc::dp::eal_init(argc, argv, error);
  if (consumed < 0) {
    fmt::print(stderr, "mrc-ports: {}\n", error);
    return 1;
  }
  argc -= consumed;
  argv += consumed;

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    mrc::dp::eal_cleanup();
    return rc;
  }

  rte_mempool* pool = nullptr;
  if (start && rte_eth_dev_count_avail() > 0) {
    pool = rte_pktmbuf_pool_create("mrc_ports_pool", 4096, 128, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                   static_cast<int>(rte_socket_id()));
    if (!pool) {
      fmt::print(stderr, "mrc-ports: cannot create the mbuf pool (try more memory with -m)\n");
      mrc::dp::eal_cleanup();
      return 1;
    }
  }

  int failures = 0;
  std::vector<std::string> start_result;
  for (const auto& p : mrc::dp::list_ports()) {
    std::string r = start ? mrc::dp::start_port_minimal(p.port_id, pool) : std::string("not started");
    if (start && !r.empty()) ++failures;
    start_result.push_back(r.empty() ? "started" : r);
  }
  auto ports = mrc::dp::list_ports();  // again: link state is known only after start
  if (json) {
    fmt::print("{{\"ports\":[");
    for (size_t i = 0; i < ports.size(); ++i) {
      const auto& p = ports[i];
      fmt::print(
          "{}{{\"port\":{},\"name\":\"{}\",\"driver\":\"{}\",\"mac\":\"{}\",\"link_up\":{},"
          "\"speed_mbps\":{},\"mtu\":{},\"max_rx_queues\":{},\"max_tx_queues\":{},\"state\":\"{}\"}}",
          i ? "," : "", p.port_id, p.name, p.driver, mrc::dp::format_mac(p.mac), p.link_up, p.link_speed_mbps, p.mtu,
          p.max_rx_queues, p.max_tx_queues, start_result[i]);
    }
    fmt::print("]}}\n");
  } else {
    fmt::print("{:<5} {:<24} {:<16} {:<18} {:<5} {:>8} {:>6} {:>5} {:>5}  {}\n", "port", "name", "driver", "mac",
               "link", "Mb/s", "mtu", "rxq", "txq", "state");
    for (size_t i = 0; i < ports.size(); ++i) {
      const auto& p = ports[i];
      fmt::print("{:<5} {:<24} {:<16} {:<18} {:<5} {:>8} {:>6} {:>5} {:>5}  {}\n", p.port_id, p.name, p.driver,
                 mrc::dp::format_mac(p.mac), p.link_up ? "up" : "down", p.link_speed_mbps, p.mtu, p.max_rx_queues,
                 p.max_tx_queues, start_result[i]);
    }
    if (ports.empty()) fmt::print("no ports: pass --vdev=... or PCI devices to EAL\n");
  }
  std::vector<uint16_t> port_ids;
  for (const auto& p : ports) port_ids.push_back(p.port_id);
  if (start) mrc::dp::stop_ports(port_ids);
  mrc::dp::close_ports(port_ids);
  mrc::dp::eal_cleanup();
  return failures ? 2 : 0;
}
