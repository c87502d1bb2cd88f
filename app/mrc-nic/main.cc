// mrc-nic: MRC devices on DPDK ports.
//   mrc-nic [EAL args] -- [--config FILE] [options]
// The main lcore runs control (link events, the per-second table, telemetry
// answers arrive through the workers' mailboxes); worker lcores run the
// devices' RX/TX loops.
#include <rte_eal.h>

#include <fmt/format.h>

#include <chrono>
#include <unistd.h>

#include <csignal>
#include <map>
#include <optional>
#include <memory>
#include <thread>

#include "config.h"
#include "dpdk/eal.h"
#include "dpdk/nic.h"
#include "dpdk/host_service.h"
#include "dpdk/telemetry.h"
#include "host/abi.h"
#include "workload.h"

namespace {

using namespace mrc;
using nicapp::LinkEvent;

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

std::string ev_state_counts(const std::array<uint64_t, 4>& s) {
  return fmt::format("{}/{}/{}", s[size_t(engine::EvState::good)] + s[size_t(engine::EvState::skip)],
                     s[size_t(engine::EvState::assumed_bad)], s[size_t(engine::EvState::denied)]);
}

// The per-interval table: goodput, each plane's wire rate and EV health,
// retransmits.
class StatsTable {
 public:
  explicit StatsTable(dp::Nic& nic) : nic_(nic) {}
  void header() {
    std::string h = fmt::format("{:>7} {:<6} {:>9}", "time_s", "device", "goodput");
    for (uint32_t p = 0; p < max_planes(); ++p) h += fmt::format(" {:>17}", fmt::format("plane{} TX Gb/s", p));
    h += fmt::format(" {:>9}", "rtx");
    fmt::print("{}\n", h);
    fmt::print("{:>7} {:<6} {:>9}", "", "", "Gb/s");
    for (uint32_t p = 0; p < max_planes(); ++p) fmt::print(" {:>17}", "EVs ok/bad/denied");
    fmt::print("\n");
  }
  // goodput_bytes: the workload's completed bytes; none for host programs
  // (their own tools report goodput).
  void row(double t, std::optional<uint64_t> goodput_bytes) {
    const double dt = t - last_t_;
    if (dt <= 0) return;
    for (auto& d : nic_.devices()) {
      const uint32_t di = d->index();
      if (prev_.size() <= di) prev_.resize(di + 1);
      auto& pv = prev_[di];
      const auto evs = d->evs_per_plane();
      // Per QP, so QPs that come and go (host programs) count only their own.
      uint64_t rtx = 0;
      std::map<uint32_t, uint64_t> rtx_now;
      for (const auto& qi : d->qp_infos()) {
        const uint64_t r = qi.ctr[engine::QpCtr::tx_retransmits];
        const auto it = pv.rtx.find(qi.qpn);
        rtx += it != pv.rtx.end() && it->second <= r ? r - it->second : r;
        rtx_now[qi.qpn] = r;
      }
      std::string line = fmt::format("{:>7.1f} {:<6}", t, d->name());
      line += di == 0 && goodput_bytes ? fmt::format(" {:>9.2f}", double(*goodput_bytes - last_goodput_) * 8 / dt / 1e9)
                                       : fmt::format(" {:>9}", di == 0 ? "-" : "");
      for (uint32_t p = 0; p < d->num_planes(); ++p) {
        const uint64_t tx = d->plane_counters(p)[size_t(dp::PlaneCtr::tx_bytes)];
        const double gbps = double(tx - pv.tx[p]) * 8 / dt / 1e9;
        pv.tx[p] = tx;
        line += fmt::format(" {:>6.2f}{} {:>9}", gbps, d->link_reads_up(p) ? ' ' : '!', ev_state_counts(evs[p].states));
      }
      for (uint32_t p = d->num_planes(); p < max_planes(); ++p) line += fmt::format(" {:>17}", "");
      line += fmt::format(" {:>9}", rtx);
      pv.rtx = std::move(rtx_now);
      fmt::print("{}\n", line);
    }
    std::fflush(stdout);
    last_t_ = t;
    if (goodput_bytes) last_goodput_ = *goodput_bytes;
  }

 private:
  uint32_t max_planes() {
    uint32_t m = 0;
    for (auto& d : nic_.devices()) m = std::max(m, d->num_planes());
    return m;
  }
  struct Prev {
    std::array<uint64_t, engine::kMaxPlanes> tx{};
    std::map<uint32_t, uint64_t> rtx;  // by QPN
  };
  dp::Nic& nic_;
  std::vector<Prev> prev_;
  double last_t_ = 0;
  uint64_t last_goodput_ = 0;
};

// Link failures on a schedule: down/up once, or a flap toggling every half
// period until `until` (then up).
class LinkSchedule {
 public:
  LinkSchedule(dp::Nic& nic, std::vector<LinkEvent> evs, bool port_status)
      : nic_(nic), evs_(std::move(evs)), port_status_(port_status), next_(evs_.size()) {
    for (size_t i = 0; i < evs_.size(); ++i) next_[i] = evs_[i].at_s;
  }
  void run(double t) {
    for (size_t i = 0; i < evs_.size(); ++i) {
      auto& e = evs_[i];
      if (next_[i] < 0 || t < next_[i]) continue;
      dp::Device* d = nic_.find_device(e.device);
      if (!d) continue;
      bool up = e.kind == LinkEvent::up;
      if (e.kind == LinkEvent::flap) {
        up = !d->link_up(e.plane);
        next_[i] += e.period_s / 2;
        if (e.until_s > 0 && next_[i] >= e.until_s) {
          if (t >= e.until_s) {
            up = true;
            next_[i] = -1;
          }
        }
      } else {
        next_[i] = -1;
      }
      const bool was_up = d->link_up(e.plane);
      d->set_link(e.plane, up, port_status_);
      // A flap's end finds the link up half the time: nothing happened then.
      if (was_up != up)
        fmt::print(stderr, "mrc-nic: t={:.3f}s {} plane {} link {}\n", t, e.device, e.plane, up ? "up" : "DOWN");
    }
  }

 private:
  dp::Nic& nic_;
  std::vector<LinkEvent> evs_;
  bool port_status_;
  std::vector<double> next_;
};

void print_final_counters(dp::Nic& nic) {
  for (auto& d : nic.devices()) {
    fmt::print(stderr, "mrc-nic: final counters of {} (non-zero)\n", d->name());
    const auto ec = d->engine_counters();
    for (size_t i = 0; i < ec.v.size(); ++i)
      if (ec.v[i]) fmt::print(stderr, "  {:<32} {}\n", engine::kDevCtrNames[i], ec.v[i]);
    const auto sc = d->shard_counters();
    for (size_t i = 0; i < sc.size(); ++i)
      if (sc[i]) fmt::print(stderr, "  nic_{:<28} {}\n", dp::kShardCtrNames[i], sc[i]);
    const auto q = d->qp_counter_totals();
    for (size_t i = 0; i < q.v.size(); ++i)
      if (q.v[i]) fmt::print(stderr, "  qp_{:<29} {}\n", engine::kQpCtrNames[i], q.v[i]);
    for (uint32_t p = 0; p < d->num_planes(); ++p) {
      const dp::PortStats ps = d->port_stats(p).value_or(dp::PortStats{});
      for (size_t i = 0; i < ps.size(); ++i)
        if (ps[i] && dp::kPortStatNames[i] != "port_ipackets" && dp::kPortStatNames[i] != "port_opackets")
          fmt::print(stderr, "  plane{}_{:<25} {}\n", p, dp::kPortStatNames[i], ps[i]);
    }
  }
}

// A JSON string's body: port names come from the command line (a ring pair
// may be named anything) and errors quote what went wrong.
std::string json_escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += {'\\', char(c)};
    else if (c < 0x20)
      out += fmt::format("\\u{:04x}", c);
    else
      out += char(c);
  }
  return out;
}

std::string json_summary(dp::Nic& nic, const nicapp::Options& o, const nicapp::WorkloadResult* r, double seconds) {
  std::string j = "{";
  j += fmt::format("\"tool\":\"mrc-nic\",\"seconds\":{:.3f}", seconds);
  if (r) {
    const double gbps = r->seconds > 0 ? double(r->bytes) * 8 / r->seconds / 1e9 : 0;
    const double mops = r->seconds > 0 ? double(r->messages) / r->seconds / 1e6 : 0;
    j += fmt::format(
        ",\"workload\":{{\"op\":\"{}\",\"role\":\"{}\",\"size\":{},\"qps\":{},\"depth\":{},\"messages\":{},"
        "\"bytes\":{},\"seconds\":{:.4f},\"goodput_gbps\":{:.3f},\"mops\":{:.4f},\"errors\":{},"
        "\"slots_checked\":{},\"slots_bad\":{},\"imm_received\":{},\"integrity_ok\":{},\"completions_ok\":{}",
        o.wl.op,
        o.wl.listen             ? "responder"
        : !o.wl.connect.empty() ? "requester"
                                : "both",
        r->size, r->qps, r->depth, r->messages, r->bytes, r->seconds, gbps, mops, r->errors, r->slots_checked,
        r->slots_bad, r->imm_received, r->integrity_ok, r->completions_ok);
    if (!r->first_error.empty()) j += fmt::format(",\"first_error\":\"{}\"", json_escape(r->first_error));
    j += "}";
  }
  j += ",\"devices\":{";
  bool first_dev = true;
  for (auto& d : nic.devices()) {
    const auto ec = d->engine_counters();
    const auto q = d->qp_counter_totals();
    j += fmt::format("{}\"{}\":{{\"planes\":[", first_dev ? "" : ",", d->name());
    first_dev = false;
    const auto evs = d->evs_per_plane();
    for (uint32_t p = 0; p < d->num_planes(); ++p) {
      const auto pc = d->plane_counters(p);
      j += fmt::format("{}{{\"port\":\"{}\",\"link\":\"{}\"", p ? "," : "", json_escape(d->spec().planes[p].port),
                       d->link_reads_up(p) ? "up" : "down");
      j += ",\"evs\":{";
      for (size_t s = 0; s < evs[p].states.size(); ++s)
        j += fmt::format("{}\"{}\":{}", s ? "," : "", engine::ev_state_name(engine::EvState(s)), evs[p].states[s]);
      j += fmt::format("}},\"ev_probes\":{}", evs[p].probes);
      for (size_t i = 0; i < pc.size(); ++i) j += fmt::format(",\"{}\":{}", dp::kPlaneCtrNames[i], pc[i]);
      if (const auto ps = d->port_stats(p))
        for (size_t i = 0; i < ps->size(); ++i) j += fmt::format(",\"{}\":{}", dp::kPortStatNames[i], (*ps)[i]);
      j += "}";
    }
    j += "],\"packets_tx\":" + std::to_string(d->shard_counters()[size_t(dp::ShardCtr::tx_frames)]);
    j += ",\"packets_rx\":" + std::to_string(d->shard_counters()[size_t(dp::ShardCtr::rx_frames)]);
    j += ",\"retransmits\":" + std::to_string(q[engine::QpCtr::tx_retransmits]);
    j += ",\"counters\":{";
    bool first = true;
    auto add = [&](std::string_view prefix, std::string_view name, uint64_t v) {
      if (!v) return;
      j += fmt::format("{}\"{}{}\":{}", first ? "" : ",", prefix, name, v);
      first = false;
    };
    for (size_t i = 0; i < ec.v.size(); ++i) add("", engine::kDevCtrNames[i], ec.v[i]);
    const auto sc = d->shard_counters();
    for (size_t i = 0; i < sc.size(); ++i) add("nic_", dp::kShardCtrNames[i], sc[i]);
    for (size_t i = 0; i < q.v.size(); ++i) add("qp_", engine::kQpCtrNames[i], q.v[i]);
    j += "}}";
  }
  j += "}}";
  return j;
}

int run(int argc, char** argv) {
  nicapp::Options o;
  CLI::App app{"mrc-nic: MRC devices on DPDK ports. Usage: mrc-nic [EAL args] -- [options]"};
  nicapp::add_options(app, o);
  if (const int rc = dp::help_without_eal<CLI::ParseError, CLI::CallForHelp>(app, argc, argv); rc >= 0) return rc;
  std::string err;
  const int consumed = dp::eal_init(argc, argv, err);
  if (consumed < 0) {
    fmt::print(stderr, "mrc-nic: {}\n", err);
    return 1;
  }
  try {
    app.parse(argc - consumed, argv + consumed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const auto& v : o.vdevs) {
    if (err = dp::add_vdev(v); !err.empty()) {
      fmt::print(stderr, "mrc-nic: config error: --add-vdev '{}': {}\n", v, err);
      return 2;
    }
  }
  for (const auto& pair : o.ring_pairs) {
    const auto colon = pair.find(':');
    err = colon == std::string::npos ? "expected A:B"
                                     : dp::create_ring_pair(pair.substr(0, colon), pair.substr(colon + 1));
    if (!err.empty()) {
      fmt::print(stderr, "mrc-nic: config error: --ring-pair '{}': {}\n", pair, err);
      return 2;
    }
  }
  nicapp::Built b;
  if (err = nicapp::build(o, b); !err.empty()) {
    fmt::print(stderr, "mrc-nic: config error: {}\n", err);
    return 2;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // A peer that hangs up (a host client, a telemetry reader) is an error
  // return, not a reason to die.
  std::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<dp::Nic> nic;
  try {
    nic = std::make_unique<dp::Nic>(b.nic);
  } catch (const std::exception& e) {
    fmt::print(stderr, "mrc-nic: {}\n", e.what());
    return 1;
  }
  std::unique_ptr<nicapp::Workload> wl;
  std::unique_ptr<dp::HostService> host;
  // However run() ends, an exception included: telemetry lets go of the
  // Nic and the workers stop before host and wl (the apps the workers call)
  // and the Nic are destroyed.
  struct Teardown {
    dp::Nic& nic;
    ~Teardown() {
      dp::unregister_telemetry();
      nic.stop();
    }
  } teardown{*nic};
  for (auto& d : nic->devices())
    for (uint32_t p = 0; p < d->num_planes(); ++p)
      fmt::print(stderr, "mrc-nic: {} plane {}: port {} mac {} ip {} lcores {}\n", d->name(), p,
                 d->spec().planes[p].port, dp::format_mac(d->plane_addr(p).mac), d->plane_addr(p).ip.str(),
                 fmt::join(d->spec().lcores, ","));
  if (o.telemetry) {
    if (err = dp::register_telemetry(*nic); !err.empty()) fmt::print(stderr, "mrc-nic: {}\n", err);
  }
  if (o.link_wait > 0) {
    const auto down = nic->wait_for_links(o.link_wait);
    if (!down.empty())
      fmt::print(stderr, "mrc-nic: after {} s these ports are still down: {}\n", o.link_wait, fmt::join(down, ", "));
  }
  if (!o.wl.op.empty()) {
    wl = std::make_unique<nicapp::Workload>(*nic, o, b);
    if (err = wl->setup(); !err.empty()) {
      fmt::print(stderr, "mrc-nic: {}\n", err);
      return 1;
    }
  }
  for (auto& d : nic->devices())
    for (const auto& n : b.neighbours) d->add_static_neighbour(n.ip, n.mac);
  if (!wl && o.host) {
    dp::HostOptions ho;
    ho.run_dir = o.run_dir.empty() ? host::abi::run_dir(getuid()) : o.run_dir;
    ho.qp_defaults = b.qp_attr;
    ho.max_caps = b.qp_caps;
    ho.prefix_len_v4 = o.host_prefix_len;
    ho.resolve_timeout_s = o.resolve_timeout;
    try {
      host = std::make_unique<dp::HostService>(*nic, ho);
    } catch (const std::exception& e) {
      fmt::print(stderr, "mrc-nic: {}\n", e.what());
      return 1;
    }
    host->start();
    dp::set_telemetry_host(&host->counters());
    for (auto& d : nic->devices())
      fmt::print(stderr, "mrc-nic: serving {} to host programs at {}\n", d->name(), host->socket_path(d->name()));
  }
  nic->start();
  if (wl) wl->begin();

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  StatsTable table(*nic);
  LinkSchedule links(*nic, b.link_events, o.port_status);
  if (o.stats_interval > 0) table.header();
  double next_row = o.stats_interval;
  const double wl_limit = wl && o.wl.bytes == 0 ? o.wl.seconds : 0;
  bool stopped_posting = false;
  double drain_deadline = 0;
  for (;;) {
    // The control thread may share a CPU with a worker (2-CPU machines), so
    // it wakes seldom and reads only what the workers publish.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double t = elapsed();
    links.run(t);
    nic->redial_memif_clients();
    if (o.stats_interval > 0 && t >= next_row) {
      table.row(t, wl ? std::optional<uint64_t>(wl->bytes_completed()) : std::nullopt);
      next_row += o.stats_interval;
    }
    const bool time_up = (o.duration > 0 && t >= o.duration) || (wl_limit > 0 && t >= wl_limit);
    if (wl && wl->done()) break;
    if (g_signal || time_up) {
      if (!wl) break;
      if (!stopped_posting) {
        if (g_signal) fmt::print(stderr, "mrc-nic: signal {}: draining\n", int(g_signal));
        wl->stop_posting();
        stopped_posting = true;
        drain_deadline = t + 5;
      } else if (t >= drain_deadline) {
        fmt::print(stderr, "mrc-nic: work still in flight after 5 s of draining\n");
        break;
      }
    }
  }
  std::optional<nicapp::WorkloadResult> result;
  if (wl) result = wl->finish();
  const double seconds = elapsed();
  if (host) host->stop();
  // Final figures come from a quiet datapath, so they agree with each other.
  nic->stop();
  // A closing row only when it covers enough time to be a rate.
  if (o.stats_interval > 0 && seconds >= next_row - o.stats_interval / 2)
    table.row(seconds, wl ? std::optional<uint64_t>(wl->bytes_completed()) : std::nullopt);
  print_final_counters(*nic);
  if (host)
    for (size_t i = 0; i < size_t(dp::HostCtr::count); ++i)
      if (const uint64_t v = host->counters()[dp::HostCtr(i)])
        fmt::print(stderr, "  host_{:<27} {}\n", dp::kHostCtrNames[i], v);
  for (auto& d : nic->devices()) {
    uint64_t total = 0;
    const auto events = d->ev_events(&total);
    if (total > events.size())
      fmt::print(stderr, "mrc-nic: {} saw {} EV state changes; the newest {} follow\n", d->name(), total,
                 events.size());
    for (const auto& e : events)
      fmt::print(stderr, "mrc-nic: EV event {} t={:.6f}s qp {} ev {} {} -> {} drops {}\n", d->name(), double(e.t) / 1e9,
                 e.qpn, e.ev, engine::ev_state_name(e.from), engine::ev_state_name(e.to), e.drops);
  }
  if (result) {
    const std::string why = result->first_error.empty() ? "" : " (" + result->first_error + ")";
    fmt::print(stderr, "mrc-nic: integrity {}, completions {}{}\n",
               result->integrity_ok         ? "OK"
               : result->slots_checked == 0 ? "NOT CHECKED"
                                            : fmt::format("FAILED ({} slots bad)", result->slots_bad),
               result->completions_ok ? "OK" : fmt::format("FAILED ({} errors)", result->errors), why);
  }
  fmt::print("{}\n", json_summary(*nic, o, result ? &*result : nullptr, seconds));
  std::fflush(stdout);
  // Telemetry keeps answering (from the stopped datapath's state).
  for (const double until = elapsed() + o.linger; !g_signal && elapsed() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return result && !(result->integrity_ok && result->completions_ok) ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::bad_alloc&) {  // sizes are checked up front; this is what they missed
    fmt::print(stderr, "mrc-nic: out of memory\n");
  } catch (const std::exception& e) {  // e.g. Nic::start() could not launch a worker
    fmt::print(stderr, "mrc-nic: {}\n", e.what());
  }
  dp::eal_cleanup();
  return rc;
}
