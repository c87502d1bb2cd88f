// mrc-nic's options: every command-line flag is also a key of the CLI11
// config file (--config), and the whole set is validated into a NicSpec
// with one error that names the offending key.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "dpdk/nic.h"
#include "recovery_options.h"

namespace mrc::nicapp {

struct WorkloadOptions {
  std::string op;  // empty: no workload; write | write_imm
  uint64_t size = 65536;
  uint32_t qps = 4;
  uint32_t depth = 8;  // messages in flight per QP
  uint64_t bytes = 0;  // total to write (0: run for `seconds`)
  double seconds = 0;
  std::string from, to;  // devices in this process
  uint16_t listen = 0;   // responder side of a two-process run
  std::string connect;   // requester side: HOST:PORT of the responder
  uint64_t seed = 1;
};

struct Options {
  std::vector<std::string> devices{"mrc0"};
  std::vector<std::string> planes;      // "DEV port=NAME|ID ip=ADDR [mac=MAC]"
  std::vector<std::string> lcores;      // "DEV=L1,L2"
  std::vector<std::string> neighbours;  // "IP MAC"
  std::vector<std::string> vdevs;       // "NAME[,ARGS]", probed after EAL init
  std::vector<std::string> ring_pairs;  // "A:B": two ports joined by rte_rings
  std::string transport = "mrc";
  uint32_t mtu = 4096;
  // 16.8 ms: above the worst queueing the NIC's own rings hold (a 1024-slot
  // memif ring of 4 KB frames drains in ~1.7 ms per plane at ~20 Gb/s) and
  // above millisecond scheduling stalls of shared CPUs; tail losses are
  // recovered by TLP and RACK long before this fires.
  int timeout = 14;
  int retry_linear = 7;
  int retry_exp = 7;
  uint32_t mpr = 8;
  uint32_t max_wimm = 128;
  uint32_t max_qps = 1024;
  uint32_t sq_depth = 512;
  uint32_t rq_depth = 512;
  std::string ev_format = "udp";
  std::vector<std::string> ev_values{"49152-49407"};
  uint32_t ev_active_per_plane = 0;
  uint32_t ev_min_active = 1;
  std::string cc = "nscc";
  uint32_t nscc_base_rtt_ns = 20000;
  uint32_t nscc_target_delay_ns = 0;
  uint32_t nscc_max_cwnd = 0;
  bool nscc_disable_qa = false;
  uint32_t fixed_window = 1u << 20;
  double plane_rate_gbps = 100;
  double lcore_rate_gbps = 100;  // caps planes x plane rate per engine; 0: no cap
  // One ACK per small message costs the requester about as much as sending
  // it (64 B WRITEs: 1.3-1.4 Mops with AckReq on each, 2.2-2.6 with these).
  uint32_t ack_every = 16;
  uint32_t ack_delay_ns = 8000;
  uint32_t ack_req_every = 8;
  uint32_t reorder_window_ns = 100000;   // software ports jitter by tens of microseconds
  app::RecoveryOptions recovery;
  std::vector<std::string> faults;       // "DEV[:PLANE]|* drop=P corrupt=P delay-us=N"
  std::vector<std::string> link_events;  // "DEV:PLANE down|up|flap at-ms=T [period-ms=P] [until-ms=U]"
  bool port_status = false;
  bool fabric_trims = false;  // software ports and the switches they reach do not trim
  std::string capture;
  double stats_interval = 0;
  double duration = 0;
  double linger = 0;
  double link_wait = 10;
  bool telemetry = true;
  bool host = true;      // serve host programs (lib_mrc.so) when no workload runs
  std::string run_dir;   // where device sockets go (default $MRC_RUN_DIR, else /tmp/mrcnic-UID)
  uint32_t host_prefix_len = 24;  // IPv4 plane subnets: the peer keeps its host bits on every plane
  double resolve_timeout = 1;     // seconds to wait for ARP/ND when a QP goes to RTR
  uint64_t seed = 1;
  WorkloadOptions wl;
};

void add_options(CLI::App& app, Options& o);

struct LinkEvent {
  std::string device;
  uint32_t plane = 0;
  enum Kind { down, up, flap } kind = down;
  double at_s = 0, period_s = 0, until_s = 0;
};

struct Neighbour {
  wire::IpAddr ip;
  uint64_t mac = 0;
};

struct Built {
  dp::NicSpec nic;
  engine::QpAttr qp_attr;  // everything but addresses, PSNs and dest_qpn
  engine::QpCaps qp_caps;
  std::vector<LinkEvent> link_events;
  std::vector<Neighbour> neighbours;
};

// Resolves ports and lcores (after EAL init) and checks every value.
// Returns an empty string, or the error naming the key.
std::string build(const Options& o, Built& out);

bool parse_mac(std::string_view s, uint64_t& mac);

}  // namespace mrc::nicapp
