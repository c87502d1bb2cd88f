// memif pairs torn down the way two mrc-nic processes shut down together: one
// end stops while its peer's interrupt thread may still be handling the
// disconnect, as stop_ports/close_ports do it for mrc-nic and mrc-ports.
// Fails if EAL logs a bad free (DPDK 22.11's memif frees a port's control
// channel twice when the two paths overlap) or the process dies.
//   memif-teardown [--pairs N] [--on-this-thread]
// --on-this-thread stops and closes from the main thread instead, to show the
// hazard the helpers avoid (this machine: a bad free every ten or so pairs).
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_mbuf.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dpdk/eal.h"

namespace {

bool port_by_name(const std::string& name, uint16_t& port) {
  return rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0;
}

size_t count(const std::string& text, const char* what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int pairs = 300;
  bool on_this_thread = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--pairs") && i + 1 < argc) {
      pairs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--on-this-thread")) {
      on_this_thread = true;
    } else {
      fmt::print(stderr, "usage: memif-teardown [--pairs N] [--on-this-thread]\n");
      return 2;
    }
  }
  const std::string prefix = fmt::format("memif-teardown-{}", getpid());
  std::vector<std::string> eal_args = {"memif-teardown", "--no-huge",   "-m",          "256",
                                       "--no-pci",       "--no-shconf", "-l",          "0",
                                       "--file-prefix",  prefix,        "--log-level", "*:error"};
  std::vector<char*> eal_argv;
  for (auto& a : eal_args) eal_argv.push_back(a.data());
  std::string error;
  if (mrc::dp::eal_init(int(eal_argv.size()), eal_argv.data(), error) < 0) {
    fmt::print(stderr, "memif-teardown: {}\n", error);
    return 1;
  }
  rte_mempool* pool = rte_pktmbuf_pool_create("teardown", 4095, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
  if (!pool) {
    fmt::print(stderr, "memif-teardown: no mbuf pool\n");
    return 1;
  }
  // EAL's own error log is the witness: a bad rte_free prints "Invalid memory".
  char* log_text = nullptr;
  size_t log_len = 0;
  FILE* log = open_memstream(&log_text, &log_len);
  rte_openlog_stream(log);

  const std::string sock = fmt::format("/tmp/{}.sock", prefix);
  int failures = 0;
  for (int i = 0; i < pairs && !failures; ++i) {
    const std::string server = fmt::format("net_memif_s{}", i), client = fmt::format("net_memif_c{}", i);
    const std::string args = fmt::format(",id=0,socket={},socket-abstract=no", sock);
    uint16_t s = 0, c = 0;
    std::string err = mrc::dp::add_vdev(server + ",role=server" + args);
    if (err.empty()) err = mrc::dp::add_vdev(client + ",role=client" + args);
    if (err.empty() && !(port_by_name(server, s) && port_by_name(client, c))) err = "ports not found";
    if (err.empty()) err = mrc::dp::start_port_minimal(s, pool);
    if (err.empty()) err = mrc::dp::start_port_minimal(c, pool);
    if (err.empty() && !mrc::dp::wait_links_up({s, c}, 2.0)) err = "the pair never came up";
    if (!err.empty()) {
      fmt::print(stderr, "memif-teardown: pair {}: {}\n", i, err);
      ++failures;
      break;
    }
    // Either end may leave first, and its peer a few microseconds later.
    const uint16_t first = i % 2 ? s : c, second = i % 2 ? c : s;
    const unsigned gap_us = unsigned(i % 60);
    if (on_this_thread) {
      rte_eth_dev_stop(first);
      rte_delay_us_block(gap_us);
      rte_eth_dev_stop(second);
      rte_eth_dev_close(first);
      rte_eth_dev_close(second);
    } else {
      mrc::dp::stop_ports({first});
      rte_delay_us_block(gap_us);
      mrc::dp::stop_ports({second});
      mrc::dp::close_ports({first});
      mrc::dp::close_ports({second});
    }
  }
  rte_openlog_stream(nullptr);
  std::fclose(log);
  const std::string text(log_text, log_len);
  std::free(log_text);
  unlink(sock.c_str());
  const size_t bad_frees = count(text, "Invalid memory");
  fmt::print("memif-teardown: {} pairs{}, {} bad frees logged by EAL\n", pairs,
             on_this_thread ? " (closed from the main thread)" : "", bad_frees);
  if (!text.empty()) fmt::print("EAL said:\n{}", text.substr(0, 2000));
  rte_mempool_free(pool);
  mrc::dp::eal_cleanup();
  return failures || bad_frees ? 1 : 0;
}
