#include "config.h"

#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "cli_checks.h"

namespace mrc::nicapp {

void add_options(CLI::App& app, Options& o) {
  app.set_config("--config", "", "read options from a CLI11 config (TOML/INI) file; every flag is also a key")
      ->check(mrc::app::config_file());
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key must not pass silently
  app.add_option("--device", o.devices, "device names, e.g. mrc0 mrc1")->capture_default_str();
  app.add_option("--plane", o.planes,
                 "one plane of a device, in plane order: \"DEV port=PORT ip=ADDR [mac=MAC]\" "
                 "(PORT is a DPDK port name or id, ADDR IPv4 or IPv6)");
  app.add_option("--lcores", o.lcores, "worker lcores of a device: \"DEV=L1[,L2...]\" (default: the first worker)");
  app.add_option("--neighbour", o.neighbours, "static neighbour entry \"IP MAC\"");
  app.add_option("--add-vdev", o.vdevs,
                 "create a virtual port as EAL's --vdev does (so a config file can carry its ports): NAME[,ARGS]");
  app.add_option("--ring-pair", o.ring_pairs, "create ports A and B joined back to back by rte_rings: \"A:B\"");
  app.add_option("--transport", o.transport)->check(CLI::IsMember({"mrc", "rocev2"}))->capture_default_str();
  // Checked as words: CLI11's IsMember answered "4096.0" with the value alone.
  app.add_option("--mtu", o.mtu)
      ->check(CLI::Validator(
          [](std::string& in) -> std::string {
            for (const char* w : {"256", "512", "1024", "2048", "4096"})
              if (in == w) return "";
            return in + " is not one of 256, 512, 1024, 2048, 4096";
          },
          "256|512|1024|2048|4096"))
      ->capture_default_str();
  app.add_option("--timeout", o.timeout, "ACK timeout exponent: 1.024 us x 2^t (MRC), 4.096 us x 2^t (RoCEv2)")
      ->check(CLI::Range(0, 24))
      ->capture_default_str();
  app.add_option("--retry-linear", o.retry_linear)->check(CLI::Range(0, 7))->capture_default_str();
  app.add_option("--retry-exp", o.retry_exp, "exponential retries after the linear ones; 25 = infinite")
      ->check(CLI::Range(0, 25))
      ->capture_default_str();
  app.add_option("--mpr", o.mpr, "requester and responder window, units of 128 PSNs")
      ->check(CLI::Range(1u, wire::kMaxMpr))
      ->capture_default_str();
  app.add_option("--max-wimm", o.max_wimm, "WRITE_IMM in flight per QP")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--max-qps", o.max_qps, "QPs per device")->check(CLI::Range(1u, 65536u))->capture_default_str();
  app.add_option("--sq-depth", o.sq_depth)->check(CLI::Range(1u, 65536u))->capture_default_str();
  app.add_option("--rq-depth", o.rq_depth)->check(CLI::Range(1u, 65536u))->capture_default_str();
  app.add_option("--ev-format", o.ev_format)->check(CLI::IsMember({"udp", "stev"}))->capture_default_str();
  app.add_option("--ev-values", o.ev_values,
                 "EVs: UDP source ports (udp) or 32-bit values (stev), as single values or ranges A-B; "
                 "dealt to planes in turn")
      ->capture_default_str();
  app.add_option("--ev-active-per-plane", o.ev_active_per_plane, "0: every EV sprays; else the rest are backups")
      ->capture_default_str();
  app.add_option("--ev-min-active", o.ev_min_active)->capture_default_str();
  app.add_option("--cc", o.cc)->check(CLI::IsMember({"nscc", "dcqcn", "none"}))->capture_default_str();
  app.add_option("--nscc-base-rtt-ns", o.nscc_base_rtt_ns)->capture_default_str();
  app.add_option("--nscc-target-delay-ns", o.nscc_target_delay_ns, "0: base RTT (0.75 x with --fabric-trims)")
      ->capture_default_str();
  app.add_flag("--fabric-trims", o.fabric_trims,
               "the switches trim payloads they would drop (UEC); NSCC then targets 0.75 x base RTT")
      ->check(mrc::app::boolean_word());
  app.add_option("--nscc-max-cwnd", o.nscc_max_cwnd, "bytes; 0: 1.5 x BDP")->capture_default_str();
  app.add_flag("--nscc-disable-qa", o.nscc_disable_qa, "no quick adapt")->check(mrc::app::boolean_word());
  app.add_option("--fixed-window", o.fixed_window, "bytes in flight with --cc none")->capture_default_str();
  // NSCC sizes its window from rate x RTT and casts it to an integer: 1e300
  // overflowed that cast, 1e-300 left a window of one MTU.
  app.add_option("--plane-rate-gbps", o.plane_rate_gbps, "rate CC assumes per plane")
      ->check(mrc::app::finite_range(1e-3, 1e6))
      ->capture_default_str();
  app.add_option("--lcore-rate-gbps", o.lcore_rate_gbps,
                 "rate CC assumes at most for all planes of a device together, per worker lcore (0: no cap)")
      ->check(mrc::app::finite_range(0, 1e6))
      ->capture_default_str();
  app.add_option("--ack-every", o.ack_every)->check(CLI::Range(1u, 1024u))->capture_default_str();
  app.add_option("--ack-delay-ns", o.ack_delay_ns)->capture_default_str();
  app.add_option("--ack-req-every", o.ack_req_every,
                 "AckReq on every Nth message, on the last one posted, and whenever fewer than N packets are in flight")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--reorder-window-ns", o.reorder_window_ns)->capture_default_str();
  o.recovery.add_to(app);
  app.add_option("--fault", o.faults, "egress fault injection: \"DEV[:PLANE]|* [drop=P] [corrupt=P] [delay-us=N]\"");
  app.add_option("--link-event", o.link_events,
                 "\"DEV:PLANE down|up|flap at-ms=T [period-ms=P] [until-ms=U]\": a silent link failure");
  app.add_flag("--port-status", o.port_status, "link events also tell the engine, which tells its peers")
      ->check(mrc::app::boolean_word());
  app.add_option("--capture", o.capture, "write every plane's RX and TX to DIR/DEV-planeN-{rx,tx}.pcap");
  app.add_option("--stats-interval", o.stats_interval, "seconds between table rows (0: none)")->capture_default_str();
  app.add_option("--duration", o.duration, "seconds to run (0: until the workload ends or a signal)")
      ->capture_default_str();
  app.add_option("--link-wait", o.link_wait, "seconds to wait for every port's link before starting")
      ->capture_default_str();
  app.add_option("--linger", o.linger, "seconds to keep serving telemetry after the workload ends")
      ->capture_default_str();
  app.add_option("--telemetry", o.telemetry, "register the /mrc/* telemetry commands")
      ->check(mrc::app::boolean_word())
      ->capture_default_str();
  app.add_option("--host", o.host, "serve host programs through lib_mrc.so (off while --workload runs)")
      ->check(mrc::app::boolean_word())
      ->capture_default_str();
  app.add_option("--run-dir", o.run_dir, "directory of the devices' sockets (default $MRC_RUN_DIR, else /tmp/mrcnic-UID)");
  app.add_option("--host-prefix-len", o.host_prefix_len,
                 "IPv4 prefix length of every plane's subnet: a peer named by one GID has the same host bits on "
                 "every plane")
      ->capture_default_str()
      ->check(CLI::Range(8, 30));
  app.add_option("--resolve-timeout", o.resolve_timeout, "seconds a QP's move to RTR waits for ARP/ND per plane")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60.0));
  app.add_option("--seed", o.seed)->check(mrc::app::not_negative())->capture_default_str();
  app.add_option("--workload", o.wl.op, "drive writes between two devices: write | write_imm")
      ->check(CLI::IsMember({"write", "write_imm"}));
  app.add_option("--wl-size", o.wl.size, "message bytes")
      ->check(mrc::app::not_negative())
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--wl-qps", o.wl.qps)->check(CLI::Range(1u, 4096u))->capture_default_str();
  app.add_option("--wl-depth", o.wl.depth, "messages in flight per QP")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  // -1 was 2^64 - 1 bytes: a run that never ended.
  app.add_option("--wl-bytes", o.wl.bytes,
                 "bytes to write in all, rounded up to whole --wl-size messages (0: use --wl-seconds)")
      ->check(mrc::app::not_negative())
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--wl-seconds", o.wl.seconds)->capture_default_str();
  app.add_option("--wl-from", o.wl.from, "requester device (this process)");
  app.add_option("--wl-to", o.wl.to, "responder device (this process)");
  app.add_option("--wl-listen", o.wl.listen, "be the responder of a two-process workload on this TCP port");
  app.add_option("--wl-connect", o.wl.connect, "be the requester of a two-process workload: HOST:PORT");
}

bool parse_mac(std::string_view s, uint64_t& mac) {
  unsigned b[6];
  char tail;
  if (std::sscanf(std::string(s).c_str(), "%x:%x:%x:%x:%x:%x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) != 6)
    return false;
  mac = 0;
  for (unsigned v : b) {
    if (v > 0xFF) return false;
    mac = (mac << 8) | v;
  }
  return true;
}

namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

template <class T>
bool parse_num(std::string_view s, T& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_double(const std::string& s, double& v) {
  try {
    size_t used = 0;
    v = std::stod(s, &used);
    return used == s.size() && std::isfinite(v);  // stod takes "nan" and "inf"
  } catch (...) {
    return false;
  }
}

// "key=value" tokens after the first word.
bool key_values(const std::vector<std::string>& w, std::map<std::string, std::string>& kv, std::string& bad) {
  for (size_t i = 1; i < w.size(); ++i) {
    auto eq = w[i].find('=');
    if (eq == std::string::npos || eq == 0) {
      bad = w[i];
      return false;
    }
    // A key given twice: which one was meant? (the last silently won)
    if (!kv.emplace(w[i].substr(0, eq), w[i].substr(eq + 1)).second) {
      bad = w[i] + " (given twice)";
      return false;
    }
  }
  return true;
}

std::string resolve_port(const std::string& name, uint16_t& id) {
  if (parse_num(name, id)) {
    if (!rte_eth_dev_is_valid_port(id)) return fmt::format("no DPDK port {}", id);
    return {};
  }
  // Ports made by --ring-pair carry the ring PMD's prefix.
  if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0 &&
      rte_eth_dev_get_port_by_name(("net_ring_" + name).c_str(), &id) != 0) {
    std::string known;
    uint16_t p;
    RTE_ETH_FOREACH_DEV(p) {
      char n[RTE_ETH_NAME_MAX_LEN] = {};
      rte_eth_dev_get_name_by_port(p, n);
      known += fmt::format("{}{} ({})", known.empty() ? "" : ", ", n, p);
    }
    return fmt::format("no DPDK port named {} (ports: {})", name, known.empty() ? "none; add --vdev" : known);
  }
  return {};
}

std::string parse_ev_values(const Options& o, std::vector<uint32_t>& out) {
  const uint64_t limit = o.ev_format == "udp" ? 0xFFFF : 0xFFFFFFFFull;
  std::set<uint32_t> seen;
  for (const auto& item : o.ev_values) {
    uint64_t a = 0, b = 0;
    auto dash = item.find('-');
    bool ok = dash == std::string::npos ? parse_num(item, a) && (b = a, true)
                                        : parse_num(std::string_view(item).substr(0, dash), a) &&
                                              parse_num(std::string_view(item).substr(dash + 1), b);
    if (!ok || a > b || b > limit)
      return fmt::format("--ev-values: '{}' is not a value or range A-B within 0..{}", item, limit);
    if (b - a > 65535) return fmt::format("--ev-values: range '{}' is larger than 65536 EVs", item);
    for (uint64_t v = a; v <= b; ++v)
      if (seen.insert(static_cast<uint32_t>(v)).second) out.push_back(static_cast<uint32_t>(v));
  }
  if (out.empty()) return "--ev-values: no EVs";
  if (out.size() > engine::kMaxEvsPerQp)
    return fmt::format("--ev-values: {} EVs; a QP has at most {}", out.size(), engine::kMaxEvsPerQp);
  return {};
}

}  // namespace

std::string build(const Options& o, Built& out) {
  if (o.devices.empty()) return "--device: at least one device is needed";
  for (const auto& n : o.devices)
    if (n.empty() || n.size() > 32 ||
        n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string::npos)
      return fmt::format("--device '{}': names are 1-32 letters, digits or '_' (they key telemetry)", n);
  // /mrc/devices and /mrc/qps key each device's row by its name, beside these.
  for (const auto& n : o.devices)
    if (n == "devices" || n == "columns" || n == "omitted")
      return fmt::format("--device '{}': a key of telemetry's /mrc/devices or /mrc/qps, not a device name", n);
  std::set<std::string> names(o.devices.begin(), o.devices.end());
  if (names.size() != o.devices.size()) return "--device: a device name appears twice";
  // CLI11 reads "nan" and "inf" as numbers, and NaN passes every range check.
  for (const auto& [name, v] : {std::pair{"--wl-seconds", o.wl.seconds},
                                {"--plane-rate-gbps", o.plane_rate_gbps},
                                {"--lcore-rate-gbps", o.lcore_rate_gbps},
                                {"--stats-interval", o.stats_interval},
                                {"--duration", o.duration},
                                {"--linger", o.linger},
                                {"--link-wait", o.link_wait},
                                {"--resolve-timeout", o.resolve_timeout}})
    if (!std::isfinite(v) || v < 0) return fmt::format("{}: a finite number, 0 or more", name);

  engine::EngineConfig ec;
  ec.transport = o.transport == "mrc" ? engine::Transport::mrc : engine::Transport::rocev2;
  ec.plane_rate_gbps = o.plane_rate_gbps;
  ec.max_qps = o.max_qps;
  ec.ack_every = o.ack_every;
  ec.ack_delay = o.ack_delay_ns;
  ec.ack_req_every = o.ack_req_every;
  ec.reorder_window = o.reorder_window_ns;
  o.recovery.apply(ec);
  if (auto e = o.recovery.check(); !e.empty()) return e;
  ec.seed = o.seed;
  ec.fabric_trims = o.fabric_trims;
  if (o.plane_rate_gbps <= 0) return "--plane-rate-gbps: must be positive";
  if (o.lcore_rate_gbps < 0) return "--lcore-rate-gbps: must not be negative";

  std::map<std::string, dp::DeviceSpec> devs;
  for (const auto& n : o.devices) {
    devs[n].name = n;
    devs[n].engine = ec;
  }
  std::set<uint16_t> used_ports;
  for (const auto& spec : o.planes) {
    auto w = words(spec);
    std::map<std::string, std::string> kv;
    std::string bad;
    if (w.empty() || !key_values(w, kv, bad))
      return fmt::format("--plane '{}': expected \"DEV port=PORT ip=ADDR [mac=MAC]\"{}", spec,
                         bad.empty() ? "" : fmt::format(" (bad token '{}')", bad));
    auto it = devs.find(w[0]);
    if (it == devs.end()) return fmt::format("--plane '{}': no device named {} (see --device)", spec, w[0]);
    for (auto& [k, v] : kv)
      if (k != "port" && k != "ip" && k != "mac") return fmt::format("--plane '{}': unknown key '{}'", spec, k);
    if (!kv.count("port") || !kv.count("ip")) return fmt::format("--plane '{}': port= and ip= are required", spec);
    dp::PlaneSpec ps;
    ps.port = kv["port"];
    if (auto e = resolve_port(ps.port, ps.port_id); !e.empty()) return fmt::format("--plane '{}': {}", spec, e);
    if (!used_ports.insert(ps.port_id).second)
      return fmt::format("--plane '{}': port {} already carries another plane", spec, ps.port);
    auto ip = wire::IpAddr::parse(kv["ip"]);
    if (!ip) return fmt::format("--plane '{}': '{}' is not an IPv4 or IPv6 address", spec, kv["ip"]);
    ps.addr.ip = *ip;
    if (kv.count("mac") && !parse_mac(kv["mac"], ps.addr.mac))
      return fmt::format("--plane '{}': '{}' is not a MAC address", spec, kv["mac"]);
    if (it->second.planes.size() == engine::kMaxPlanes)
      return fmt::format("--plane '{}': a device has at most {} planes", spec, engine::kMaxPlanes);
    it->second.planes.push_back(ps);
  }

  for (const auto& spec : o.lcores) {
    auto eq = spec.find('=');
    if (eq == std::string::npos) return fmt::format("--lcores '{}': expected DEV=L1[,L2...]", spec);
    auto it = devs.find(spec.substr(0, eq));
    if (it == devs.end()) return fmt::format("--lcores '{}': no device named {}", spec, spec.substr(0, eq));
    std::istringstream in(spec.substr(eq + 1));
    for (std::string t; std::getline(in, t, ',');) {
      unsigned l = 0;
      if (!parse_num(t, l) || l >= RTE_MAX_LCORE || !rte_lcore_is_enabled(l))
        return fmt::format("--lcores '{}': lcore {} is not enabled (EAL -l)", spec, t);
      if (l == rte_get_main_lcore())
        return fmt::format("--lcores '{}': lcore {} is the main lcore, which runs control and telemetry", spec, l);
      // Twice: two shards on one lcore, steering frames between them.
      if (std::find(it->second.lcores.begin(), it->second.lcores.end(), l) != it->second.lcores.end())
        return fmt::format("--lcores '{}': lcore {} given twice", spec, l);
      it->second.lcores.push_back(l);
    }
  }
  const unsigned first_worker = rte_get_next_lcore(rte_get_main_lcore(), 1, 0);
  for (auto& [n, d] : devs) {
    if (d.planes.empty()) return fmt::format("--plane: device {} has no planes", n);
    if (d.lcores.empty()) {
      if (first_worker >= RTE_MAX_LCORE)
        return "--lcores: no worker lcore; give EAL two lcores or more (-l 0,1): the main lcore runs control";
      d.lcores.push_back(first_worker);
    }
    if (d.lcores.size() > o.max_qps) return fmt::format("--lcores: device {} has more lcores than --max-qps", n);
    // Each engine (one per lcore) drives every plane from one CPU, so more
    // planes add no capacity beyond that CPU's. NSCC sizes its window and
    // gain from planes x plane rate: uncapped, 4 planes quadrupled them, which
    // only lengthened the queues in front of that CPU and cost goodput.
    if (o.lcore_rate_gbps > 0)
      d.engine.plane_rate_gbps = std::min(o.plane_rate_gbps, o.lcore_rate_gbps / double(d.planes.size()));
    if (d.engine.plane_rate_gbps < 1e-3)  // the floor of --plane-rate-gbps
      return fmt::format("--lcore-rate-gbps: {} leaves each of device {}'s {} planes less than 0.001 Gb/s",
                         o.lcore_rate_gbps, n, d.planes.size());
    // All planes of a device share one address family (one GID type).
    for (auto& p : d.planes)
      if (p.addr.ip.is_v4() != d.planes[0].addr.ip.is_v4())
        return fmt::format("--plane: device {} mixes IPv4 and IPv6 planes", n);
  }

  // QP attributes.
  engine::QpAttr& a = out.qp_attr;
  a.pmtu = o.mtu;
  a.timeout = static_cast<uint8_t>(o.timeout);
  a.retry_linear = static_cast<uint8_t>(o.retry_linear);
  a.retry_exp = static_cast<uint8_t>(o.retry_exp);
  a.mpr = a.mpr_dest = o.mpr;
  a.max_wimm = a.max_wimm_dest = o.max_wimm;
  out.qp_caps.max_send_wr = o.sq_depth;
  out.qp_caps.max_recv_wr = o.rq_depth;
  std::vector<uint32_t> evs;
  if (auto e = parse_ev_values(o, evs); !e.empty()) return e;
  a.ev.format = o.ev_format == "udp" ? wire::EvFormat::udp : wire::EvFormat::stev;
  a.ev.active_per_plane = o.ev_active_per_plane;
  a.ev.ev_min_active = o.ev_min_active;
  // EVs are dealt to planes in turn; a device with fewer planes uses fewer.
  size_t max_planes = 0;
  for (auto& [n, d] : devs) max_planes = std::max(max_planes, d.planes.size());
  if (evs.size() < max_planes) return fmt::format("--ev-values: {} EVs cannot cover {} planes", evs.size(), max_planes);
  // More than a plane has would make every EV spray: the same as 0, said otherwise.
  if (o.ev_active_per_plane > evs.size() / max_planes)
    return fmt::format("--ev-active-per-plane: {} is more than the {} EVs a plane has ({} EVs over {} planes)",
                       o.ev_active_per_plane, evs.size() / max_planes, evs.size(), max_planes);
  for (size_t i = 0; i < evs.size(); ++i)
    a.ev.evs.push_back(engine::EvEntry{evs[i], static_cast<uint8_t>(i % max_planes)});
  if (o.ev_min_active > evs.size()) return "--ev-min-active: larger than the number of EVs";
  if (o.cc == "nscc") {
    a.cc.algo = engine::CcAlgo::nscc;
    a.cc.nscc.base_rtt = o.nscc_base_rtt_ns;
    a.cc.nscc.target_delay = o.nscc_target_delay_ns;
    a.cc.nscc.max_cwnd = o.nscc_max_cwnd;
    a.cc.nscc.disable_qa = o.nscc_disable_qa;
    if (!o.nscc_base_rtt_ns) return "--nscc-base-rtt-ns: must be positive";
  } else if (o.cc == "dcqcn") {
    a.cc.algo = engine::CcAlgo::dcqcn;
    a.cc.dcqcn.line_rate_gbps = o.plane_rate_gbps;
  } else {
    a.cc.algo = engine::CcAlgo::none;
    if (!o.fixed_window) return "--fixed-window: must be positive";
    a.cc.fixed_window_bytes = o.fixed_window;
  }

  // Faults.
  for (const auto& spec : o.faults) {
    auto w = words(spec);
    std::map<std::string, std::string> kv;
    std::string bad;
    if (w.empty() || !key_values(w, kv, bad))
      return fmt::format("--fault '{}': expected \"DEV[:PLANE]|* [drop=P] [corrupt=P] [delay-us=N]\"{}", spec,
                         bad.empty() ? "" : fmt::format(" (bad token '{}')", bad));
    dp::FaultSpec f;
    for (auto& [k, v] : kv) {
      double x = 0;
      if (!parse_double(v, x) || x < 0) return fmt::format("--fault '{}': {}='{}' is not a number >= 0", spec, k, v);
      if (k == "drop")
        f.drop = x;
      else if (k == "corrupt")
        f.corrupt = x;
      else if (k == "delay-us" && x > 1e6)
        return fmt::format("--fault '{}': delay-us is at most 1000000 (1 s)", spec);
      else if (k == "delay-us")
        f.delay_ns = static_cast<uint64_t>(x * 1000);
      else
        return fmt::format("--fault '{}': unknown key '{}'", spec, k);
      if ((k == "drop" || k == "corrupt") && x > 1) return fmt::format("--fault '{}': {} is a probability", spec, k);
    }
    std::string dev = w[0];
    int plane = -1;
    if (auto c = dev.find(':'); c != std::string::npos) {
      unsigned p = 0;
      if (!parse_num(std::string_view(dev).substr(c + 1), p)) return fmt::format("--fault '{}': bad plane", spec);
      plane = static_cast<int>(p);
      dev = dev.substr(0, c);
    }
    bool matched = false;
    for (auto& [n, d] : devs) {
      if (dev != "*" && dev != n) continue;
      for (size_t p = 0; p < d.planes.size(); ++p)
        if (plane < 0 || size_t(plane) == p) {
          d.planes[p].fault = f;
          matched = true;
        }
    }
    if (!matched) return fmt::format("--fault '{}': no such device or plane", spec);
  }

  for (const auto& spec : o.link_events) {
    auto w = words(spec);
    std::map<std::string, std::string> kv;
    std::string bad;
    const std::string usage = "expected \"DEV:PLANE down|up|flap at-ms=T [period-ms=P] [until-ms=U]\"";
    if (w.size() < 2) return fmt::format("--link-event '{}': {}", spec, usage);
    LinkEvent ev;
    auto c = w[0].find(':');
    if (c == std::string::npos || !parse_num(std::string_view(w[0]).substr(c + 1), ev.plane))
      return fmt::format("--link-event '{}': {}", spec, usage);
    ev.device = w[0].substr(0, c);
    auto it = devs.find(ev.device);
    if (it == devs.end() || ev.plane >= it->second.planes.size())
      return fmt::format("--link-event '{}': no such device or plane", spec);
    if (w[1] == "down")
      ev.kind = LinkEvent::down;
    else if (w[1] == "up")
      ev.kind = LinkEvent::up;
    else if (w[1] == "flap")
      ev.kind = LinkEvent::flap;
    else
      return fmt::format("--link-event '{}': {}", spec, usage);
    std::vector<std::string> rest(w.begin() + 1, w.end());
    if (!key_values(rest, kv, bad)) return fmt::format("--link-event '{}': bad token '{}'", spec, bad);
    for (auto& [k, v] : kv) {
      double x = 0;
      if (!parse_double(v, x) || x < 0) return fmt::format("--link-event '{}': {}='{}' is not a number", spec, k, v);
      if (k == "at-ms")
        ev.at_s = x / 1000;
      else if (k == "period-ms")
        ev.period_s = x / 1000;
      else if (k == "until-ms")
        ev.until_s = x / 1000;
      else
        return fmt::format("--link-event '{}': unknown key '{}'", spec, k);
    }
    if (!kv.count("at-ms")) return fmt::format("--link-event '{}': at-ms is required", spec);
    if (ev.kind == LinkEvent::flap && ev.period_s <= 0)
      return fmt::format("--link-event '{}': flap needs period-ms", spec);
    if (ev.kind != LinkEvent::flap && (kv.count("period-ms") || kv.count("until-ms")))
      return fmt::format("--link-event '{}': period-ms and until-ms belong to flap", spec);
    if (kv.count("until-ms") && ev.until_s <= ev.at_s)
      return fmt::format("--link-event '{}': until-ms must come after at-ms", spec);
    out.link_events.push_back(ev);
  }

  for (const auto& spec : o.neighbours) {
    auto w = words(spec);
    Neighbour n;
    std::optional<wire::IpAddr> ip;
    if (w.size() != 2 || !(ip = wire::IpAddr::parse(w[0])) || !parse_mac(w[1], n.mac))
      return fmt::format("--neighbour '{}': expected \"IP MAC\"", spec);
    n.ip = *ip;
    out.neighbours.push_back(n);
  }

  if (!o.wl.op.empty()) {
    const auto& wl = o.wl;
    const bool local = !wl.from.empty() || !wl.to.empty();
    const int modes = int(local) + int(wl.listen != 0) + int(!wl.connect.empty());
    if (modes != 1)
      return "--workload: give exactly one of --wl-from/--wl-to (one process), --wl-listen or --wl-connect";
    if (local && (!devs.count(wl.from) || !devs.count(wl.to) || wl.from == wl.to))
      return "--wl-from/--wl-to: two different devices of this process";
    if (wl.size == 0 || wl.size > (1ull << 30)) return "--wl-size: 1 byte to 1 GiB";
    // Two copies of depth + 1 patterns, and the responder's slots.
    const double need = (2.0 * (wl.depth + 1) + double(wl.qps) * wl.depth) * double(wl.size);
    const double have = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (have > 0 && need > have)
      return fmt::format(
          "--wl-size x --wl-depth x --wl-qps: the workload needs {:.1f} GiB, more than this machine's {:.1f}",
          need / double(1ull << 30), have / double(1ull << 30));
    if (wl.bytes == 0 && wl.seconds <= 0 && wl.listen == 0) return "--workload: give --wl-bytes or --wl-seconds";
    if (wl.depth > o.sq_depth) return "--wl-depth: larger than --sq-depth";
    if (wl.op == "write_imm" && wl.depth > o.rq_depth) return "--wl-depth: larger than --rq-depth";
  }
  if (o.stats_interval < 0 || o.duration < 0) return "--stats-interval/--duration: must not be negative";
  // Rows come from the main loop, which wakes every 10 ms: a shorter period
  // would print a row on every pass and never catch up with the clock.
  if (o.stats_interval > 0 && o.stats_interval < 0.01) return "--stats-interval: 0 (no table) or at least 0.01 s";

  if (!o.capture.empty()) {
    // Made if missing, as a capture tool would; anything else is named.
    struct stat st {};
    if (mkdir(o.capture.c_str(), 0755) != 0 && errno != EEXIST)
      return fmt::format("--capture: cannot create {}: {}", o.capture, std::strerror(errno));
    if (stat(o.capture.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return fmt::format("--capture: {} is not a directory", o.capture);
    if (access(o.capture.c_str(), W_OK | X_OK) != 0)
      return fmt::format("--capture: cannot write under {}: {}", o.capture, std::strerror(errno));
  }
  out.nic.mtu = o.mtu;
  out.nic.capture_dir = o.capture;
  out.nic.seed = o.seed;
  for (const auto& n : o.devices) out.nic.devices.push_back(devs[n]);
  return {};
}

}  // namespace mrc::nicapp
