#include "dpdk/eal.h"

#include <rte_bus_vdev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_eth_ring.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <fmt/format.h>

namespace mrc::dp {

int eal_init(int argc, char** argv, std::string& error) {
  int ret = rte_eal_init(argc, argv);
  if (ret < 0) {
    error = fmt::format("EAL initialisation failed: {}", rte_strerror(rte_errno));
    return -1;
  }
  return ret;
}

std::string format_mac(uint64_t mac) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", (mac >> 40) & 0xFF, (mac >> 32) & 0xFF,
                     (mac >> 24) & 0xFF, (mac >> 16) & 0xFF, (mac >> 8) & 0xFF, mac & 0xFF);
}

std::vector<PortInfo> list_ports() {
  std::vector<PortInfo> out;
  uint16_t pid;
  RTE_ETH_FOREACH_DEV(pid) {
    PortInfo p;
    p.port_id = pid;
    char name[RTE_ETH_NAME_MAX_LEN] = {};
    if (rte_eth_dev_get_name_by_port(pid, name) == 0) p.name = name;
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(pid, &info) == 0) {
      p.driver = info.driver_name ? info.driver_name : "";
      p.max_rx_queues = info.max_rx_queues;
      p.max_tx_queues = info.max_tx_queues;
    }
    rte_ether_addr mac{};
    if (rte_eth_macaddr_get(pid, &mac) == 0) {
      for (uint8_t b : mac.addr_bytes) p.mac = (p.mac << 8) | b;
    }
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(pid, &link) == 0) {
      p.link_up = link.link_status == RTE_ETH_LINK_UP;
      p.link_speed_mbps = link.link_speed;
    }
    rte_eth_dev_get_mtu(pid, &p.mtu);
    out.push_back(std::move(p));
  }
  return out;
}

std::string start_port_minimal(uint16_t port_id, rte_mempool* pool) {
  rte_eth_conf conf{};
  int rc = rte_eth_dev_configure(port_id, 1, 1, &conf);
  if (rc < 0) return fmt::format("configure: {}", rte_strerror(-rc));
  uint16_t nb_rx = 256, nb_tx = 256;
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &nb_rx, &nb_tx);
  if (rc < 0) return fmt::format("descriptor counts: {}", rte_strerror(-rc));
  int socket = rte_eth_dev_socket_id(port_id);
  unsigned sock = socket < 0 ? 0u : static_cast<unsigned>(socket);
  rc = rte_eth_rx_queue_setup(port_id, 0, nb_rx, sock, nullptr, pool);
  if (rc < 0) return fmt::format("rx queue: {}", rte_strerror(-rc));
  rc = rte_eth_tx_queue_setup(port_id, 0, nb_tx, sock, nullptr);
  if (rc < 0) return fmt::format("tx queue: {}", rte_strerror(-rc));
  rc = rte_eth_dev_start(port_id);
  if (rc < 0) return fmt::format("start: {}", rte_strerror(-rc));
  return {};
}

std::string add_vdev(const std::string& spec) {
  const auto comma = spec.find(',');
  const std::string name = spec.substr(0, comma);
  const std::string args = comma == std::string::npos ? "" : spec.substr(comma + 1);
  const int rc = rte_vdev_init(name.c_str(), args.c_str());
  if (rc != 0) return fmt::format("cannot create {}: {}", name, rte_strerror(-rc));
  return {};
}

std::string create_ring_pair(const std::string& a, const std::string& b) {
  constexpr unsigned kSlots = 2048;
  const unsigned flags = RING_F_SP_ENQ | RING_F_SC_DEQ;
  rte_ring* a_to_b = rte_ring_create(("r_" + a).c_str(), kSlots, rte_socket_id(), flags);
  rte_ring* b_to_a = rte_ring_create(("r_" + b).c_str(), kSlots, rte_socket_id(), flags);
  if (!a_to_b || !b_to_a) return fmt::format("rings for {}:{}: {}", a, b, rte_strerror(rte_errno));
  if (rte_eth_from_rings(a.c_str(), &b_to_a, 1, &a_to_b, 1, rte_socket_id()) < 0 ||
      rte_eth_from_rings(b.c_str(), &a_to_b, 1, &b_to_a, 1, rte_socket_id()) < 0)
    return fmt::format("ring ports {}:{}: {}", a, b, rte_strerror(rte_errno));
  return {};
}

}  // namespace mrc::dp
