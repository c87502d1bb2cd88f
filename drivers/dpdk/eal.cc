// rte_intr_instance_* and rte_intr_{fd,type}_set are still "experimental" in
// 22.11, yet they are the only way to hand EAL's interrupt thread an fd.
#define ALLOW_EXPERIMENTAL_API 1

#include "dpdk/eal.h"

#include <rte_bus_vdev.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_eth_ring.h>
#include <rte_interrupts.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string_view>
#include <thread>

#include <fmt/format.h>

namespace mrc::dp {

namespace {
// EAL that failed to start has nothing to clean up, and its cleanup would
// touch interrupt state that was never made (SIGSEGV).
bool g_eal_up = false;
}  // namespace

int eal_init(int argc, char** argv, std::string& error) {
  int ret = rte_eal_init(argc, argv);
  g_eal_up = ret >= 0;
  if (ret < 0) {
    // Some EAL failures (another primary holding the file prefix) leave rte_errno at 0.
    error =
        fmt::format("EAL initialisation failed: {}", rte_errno ? rte_strerror(rte_errno) : "see EAL's messages above");
    return -1;
  }
  return ret;
}

int app_help_index(int argc, char** argv) {
  int dashes = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (dashes < 0) {
      if (a == "--") dashes = i;
    } else if (a == "-h" || a == "--help") {
      return dashes;
    }
  }
  return -1;
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

std::string start_port_minimal(uint16_t port_id, rte_mempool* pool, uint16_t descriptors) {
  rte_eth_conf conf{};
  int rc = rte_eth_dev_configure(port_id, 1, 1, &conf);
  if (rc < 0) return fmt::format("configure: {}", rte_strerror(-rc));
  uint16_t nb_rx = descriptors, nb_tx = descriptors;
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

bool wait_links_up(const std::vector<uint16_t>& ports, double seconds) {
  const uint64_t deadline = rte_get_timer_cycles() + static_cast<uint64_t>(seconds * double(rte_get_timer_hz()));
  for (;;) {
    bool all_up = true;
    for (uint16_t p : ports) {
      rte_eth_link link{};
      all_up &= rte_eth_link_get_nowait(p, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
    }
    if (all_up) return true;
    if (rte_get_timer_cycles() > deadline) return false;
    rte_delay_us_sleep(100);
  }
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

namespace {

struct InterruptCall {
  const std::function<void()>* f;
  int fd;
  std::atomic<bool> done{false};
};

void run_interrupt_call(void* arg) {
  auto* call = static_cast<InterruptCall*>(arg);
  uint64_t wakeups;
  // Reading the eventfd clears it; epoll would otherwise report it again.
  if (read(call->fd, &wakeups, sizeof wakeups) != sizeof wakeups || call->done.load()) return;
  (*call->f)();
  call->done.store(true, std::memory_order_release);
}

}  // namespace

void run_on_interrupt_thread(const std::function<void()>& f) {
  if (rte_thread_is_intr()) return f();
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  rte_intr_handle* handle = fd >= 0 ? rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE) : nullptr;
  InterruptCall call{&f, fd};
  const bool registered = handle && rte_intr_fd_set(handle, fd) == 0 &&
                          rte_intr_type_set(handle, RTE_INTR_HANDLE_EXT) == 0 &&
                          rte_intr_callback_register(handle, run_interrupt_call, &call) == 0;
  const uint64_t one = 1;
  if (registered && write(fd, &one, sizeof one) == sizeof one) {
    const auto warn_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    bool warned = false;
    while (!call.done.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (!warned && std::chrono::steady_clock::now() > warn_at) {
        fmt::print(stderr, "mrc: still waiting for EAL's interrupt thread to close ports\n");
        warned = true;
      }
    }
  } else {
    f();
  }
  if (registered)  // -EAGAIN while the callback is still returning
    while (rte_intr_callback_unregister(handle, run_interrupt_call, &call) == -EAGAIN)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  if (handle) rte_intr_instance_free(handle);
  if (fd >= 0) close(fd);
}

namespace {

struct Parking {
  int fd = -1;
  std::atomic<bool> parked{false};
};

void park_interrupt_thread(void* arg) {
  auto* parking = static_cast<Parking*>(arg);
  uint64_t wakeups;
  if (read(parking->fd, &wakeups, sizeof wakeups) != sizeof wakeups) return;
  parking->parked.store(true, std::memory_order_release);
  for (;;) pause();  // until the process exits; a signal only comes back here
}

}  // namespace

void eal_cleanup() {
  if (!g_eal_up) return;
  g_eal_up = false;
  if (!rte_thread_is_intr()) {
    // Left registered and never freed: the parked thread holds them. Both
    // are plain heap memory, which the cleanup does not unmap.
    auto* parking = new Parking;
    parking->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    rte_intr_handle* handle = parking->fd >= 0 ? rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE) : nullptr;
    const uint64_t one = 1;
    if (handle && rte_intr_fd_set(handle, parking->fd) == 0 && rte_intr_type_set(handle, RTE_INTR_HANDLE_EXT) == 0 &&
        rte_intr_callback_register(handle, park_interrupt_thread, parking) == 0 &&
        write(parking->fd, &one, sizeof one) == sizeof one) {
      // A thread that never takes the call (none running) is not waited for.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (!parking->parked.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  rte_eal_cleanup();
}

void stop_ports(const std::vector<uint16_t>& ports) {
  run_on_interrupt_thread([&] {
    for (uint16_t p : ports) rte_eth_dev_stop(p);
  });
}

void close_ports(const std::vector<uint16_t>& ports) {
  run_on_interrupt_thread([&] {
    for (uint16_t p : ports) rte_eth_dev_close(p);
  });
}

}  // namespace mrc::dp
