#include "dpdk/telemetry.h"

#include <rte_telemetry.h>

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <span>
#include <mutex>
#include <string>

#include "dpdk/eal.h"

namespace mrc::dp {

namespace {

// All of `s` as a number.
template <class T>
bool parse_whole(std::string_view s, T& v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size();
}

Nic* g_nic = nullptr;  // telemetry callbacks carry no user data
std::mutex g_mu;       // held by every callback, so the Nic cannot vanish under one

// A QP named "N" (searched in every device) or "DEV:N".
Device* find_qp(const char* params, uint32_t& qpn, std::string_view& rest) {
  if (!g_nic || !params) return nullptr;
  std::string_view p(params);
  auto comma = p.find(',');
  rest = comma == std::string_view::npos ? std::string_view{} : p.substr(comma + 1);
  p = p.substr(0, comma);
  std::string_view dev;
  if (auto c = p.find(':'); c != std::string_view::npos) {
    dev = p.substr(0, c);
    p = p.substr(c + 1);
  }
  if (!parse_whole(p, qpn)) return nullptr;
  for (auto& d : g_nic->devices()) {
    if (!dev.empty() && d->name() != dev) continue;
    for (const auto& qi : d->qp_infos())
      if (qi.qpn == qpn) return d.get();
  }
  return nullptr;
}

// DPDK 22.11 telemetry nests only arrays of scalars inside a dict, and a
// key may hold only [A-Za-z0-9_/]. Tables therefore come as a "columns"
// array of names plus one u64 array per row.
rte_tel_data* u64_array(const std::vector<uint64_t>& v) {
  rte_tel_data* a = rte_tel_data_alloc();
  if (!a) return nullptr;
  rte_tel_data_start_array(a, RTE_TEL_U64_VAL);
  for (uint64_t x : v) rte_tel_data_add_array_u64(a, x);
  return a;
}

rte_tel_data* string_array(const std::vector<std::string>& v) {
  rte_tel_data* a = rte_tel_data_alloc();
  if (!a) return nullptr;
  rte_tel_data_start_array(a, RTE_TEL_STRING_VAL);
  for (const auto& x : v) rte_tel_data_add_array_string(a, x.c_str());
  return a;
}

int add_array(rte_tel_data* out, const std::string& key, rte_tel_data* a) {
  if (!a) return -ENOMEM;
  return rte_tel_data_add_dict_container(out, key.c_str(), a, 0);
}

// DPDK 22.11 answers at most 16 KB (MAX_OUTPUT_LEN in lib/telemetry) and
// silently leaves out entries past it, as it does past an array's
// RTE_TEL_MAX_ARRAY_ENTRIES. Replies that can grow that far count their
// JSON as they go and say what they left out.
class ReplyBudget {
 public:
  // Room for the command echoed back and the braces around the dict.
  explicit ReplyBudget(const char* cmd, const char* params)
      : left_(kReplyBytes - 64 - std::strlen(cmd) - std::strlen(params ? params : "")) {}
  // One dict entry of `bytes`; a dict holds RTE_TEL_MAX_DICT_ENTRIES.
  bool take(size_t bytes) {
    if (bytes > left_ || entries_ == RTE_TEL_MAX_DICT_ENTRIES) return false;
    left_ -= bytes;
    ++entries_;
    return true;
  }
  // `"key":[v,...],` of u64 values, and of plain strings.
  static size_t row(std::string_view key, std::span<const uint64_t> v) {
    size_t n = key.size() + 6;
    char digits[24];
    for (uint64_t x : v) n += size_t(std::to_chars(digits, digits + sizeof digits, x).ptr - digits) + 1;
    return n;
  }
  static size_t row(std::string_view key, std::span<const std::string> v) {
    size_t n = key.size() + 6;
    for (const auto& x : v) n += x.size() + 3;
    return n;
  }
  static constexpr size_t kScalar = 64;  // `"key":value,` of a short key

 private:
  static constexpr size_t kReplyBytes = 16 * 1024;
  size_t left_;
  size_t entries_ = 0;
};

Device* find_device(const char* params) {
  if (!params || !*params) return g_nic->devices().empty() ? nullptr : g_nic->devices()[0].get();
  return g_nic->find_device(params);
}

int cmd_devices(const char*, const char*, rte_tel_data* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_nic) return -ENODEV;
  rte_tel_data_start_dict(out);
  std::vector<std::string> names;
  for (auto& d : g_nic->devices()) names.push_back(d->name());
  add_array(out, "devices", string_array(names));
  add_array(out, "columns", string_array({"planes", "lcores", "qps", "max_qps", "mtu", "transport_is_rocev2"}));
  for (auto& d : g_nic->devices())
    add_array(out, d->name(),
              u64_array({d->num_planes(), d->shards().size(), d->qp_infos().size(), d->spec().engine.max_qps,
                         g_nic->spec().mtu, d->spec().engine.transport == engine::Transport::rocev2}));
  return 0;
}

constexpr std::array<engine::EvState, 4> kEvStates = {engine::EvState::good, engine::EvState::skip,
                                                      engine::EvState::assumed_bad, engine::EvState::denied};

// /mrc/planes[,DEV]: one row per plane, "DEV_P", of every device or of one.
// Rows that would pass the reply's size are left out and counted in
// "rows_omitted"; one device's planes always fit.
int cmd_planes(const char* cmd, const char* params, rte_tel_data* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_nic) return -ENODEV;
  Device* only = nullptr;
  if (params && *params && !(only = g_nic->find_device(params))) return -EINVAL;
  rte_tel_data_start_dict(out);
  ReplyBudget budget(cmd, params);
  std::vector<std::string> cols = {"port_id", "link_up", "fault_drop_ppm", "fault_corrupt_ppm", "fault_delay_ns"};
  for (auto n : kPlaneCtrNames) cols.emplace_back(n);
  for (auto s : kEvStates) cols.push_back(fmt::format("evs_{}", engine::ev_state_name(s)));
  cols.emplace_back("ev_probes");
  for (auto n : kPortStatNames) cols.emplace_back(n);
  cols.emplace_back("port_stats_read");
  budget.take(ReplyBudget::row("columns", cols));
  budget.take(ReplyBudget::kScalar);  // rows_omitted, kept for the end
  add_array(out, "columns", string_array(cols));
  uint64_t omitted = 0;
  for (auto& d : g_nic->devices()) {
    if (only && d.get() != only) continue;
    const auto evs = d->evs_per_plane();
    for (uint32_t p = 0; p < d->num_planes(); ++p) {
      const FaultSpec f = d->fault(p);
      std::vector<uint64_t> row = {d->spec().planes[p].port_id, d->link_reads_up(p), uint64_t(f.drop * 1e6),
                                   uint64_t(f.corrupt * 1e6), f.delay_ns};
      for (uint64_t v : d->plane_counters(p)) row.push_back(v);
      for (auto s : kEvStates) row.push_back(evs[p].states[size_t(s)]);
      row.push_back(evs[p].probes);
      // Zeros, flagged, where the port cannot say: every row has every column.
      const auto port = d->port_stats(p);
      for (uint64_t v : port.value_or(PortStats{})) row.push_back(v);
      row.push_back(port.has_value());
      const std::string key = fmt::format("{}_{}", d->name(), p);
      if (!budget.take(ReplyBudget::row(key, row))) {
        ++omitted;
        continue;
      }
      add_array(out, key, u64_array(row));
    }
  }
  if (omitted) rte_tel_data_add_dict_u64(out, "rows_omitted", omitted);
  return 0;
}

// /mrc/plane,DEV:P: one plane with its addresses.
int cmd_plane(const char*, const char* params, rte_tel_data* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_nic) return -ENODEV;
  std::string_view p(params ? params : "");
  const auto colon = p.find(':');
  if (colon == std::string_view::npos) return -EINVAL;
  Device* d = g_nic->find_device(std::string(p.substr(0, colon)));
  uint32_t plane = 0;
  auto num = p.substr(colon + 1);
  if (!d || !parse_whole(num, plane) || plane >= d->num_planes()) return -EINVAL;
  rte_tel_data_start_dict(out);
  rte_tel_data_add_dict_string(out, "device", d->name().c_str());
  rte_tel_data_add_dict_u64(out, "plane", plane);
  rte_tel_data_add_dict_string(out, "port", d->spec().planes[plane].port.c_str());
  rte_tel_data_add_dict_u64(out, "port_id", d->spec().planes[plane].port_id);
  rte_tel_data_add_dict_string(out, "mac", format_mac(d->plane_addr(plane).mac).c_str());
  rte_tel_data_add_dict_string(out, "ip", d->plane_addr(plane).ip.str().c_str());
  rte_tel_data_add_dict_string(out, "link", d->link_reads_up(plane) ? "up" : "down");
  const FaultSpec f = d->fault(plane);
  rte_tel_data_add_dict_u64(out, "fault_drop_ppm", uint64_t(f.drop * 1e6));
  rte_tel_data_add_dict_u64(out, "fault_corrupt_ppm", uint64_t(f.corrupt * 1e6));
  rte_tel_data_add_dict_u64(out, "fault_delay_ns", f.delay_ns);
  const auto pc = d->plane_counters(plane);
  for (size_t i = 0; i < pc.size(); ++i) rte_tel_data_add_dict_u64(out, std::string(kPlaneCtrNames[i]).c_str(), pc[i]);
  if (const auto ps = d->port_stats(plane))
    for (size_t i = 0; i < ps->size(); ++i)
      rte_tel_data_add_dict_u64(out, std::string(kPortStatNames[i]).c_str(), (*ps)[i]);
  const auto evs = d->evs_per_plane()[plane];
  for (auto s : kEvStates)
    rte_tel_data_add_dict_u64(out, fmt::format("evs_{}", engine::ev_state_name(s)).c_str(), evs.states[size_t(s)]);
  rte_tel_data_add_dict_u64(out, "ev_probes", evs.probes);
  return 0;
}

// /mrc/link,DEV:PLANE,up|down: fail or restore a plane's link on command
// (silently, as the --link-event schedule does).
int cmd_link(const char*, const char* params, rte_tel_data* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_nic) return -ENODEV;
  std::string_view p(params ? params : "");
  const auto colon = p.find(':'), comma = p.find(',');
  if (colon == std::string_view::npos || comma == std::string_view::npos || comma < colon) return -EINVAL;
  Device* d = g_nic->find_device(std::string(p.substr(0, colon)));
  const auto num = p.substr(colon + 1, comma - colon - 1), what = p.substr(comma + 1);
  uint32_t plane = 0;
  if (!d || !parse_whole(num, plane) || plane >= d->num_planes() || (what != "up" && what != "down")) return -EINVAL;
  d->set_link(plane, what == "up", false);
  rte_tel_data_start_dict(out);
  rte_tel_data_add_dict_string(out, "device", d->name().c_str());
  rte_tel_data_add_dict_u64(out, "plane", plane);
  rte_tel_data_add_dict_string(out, "link", d->link_reads_up(plane) ? "up" : "down");
  return 0;
}

// /mrc/qps: every device's QPNs, as many as the reply holds ("omitted"
// counts the rest). /mrc/qps,DEV[,FIRST]: a page of one device's QPNs from
// index FIRST, and "next" when more follow.
constexpr size_t kQpsPerPage = 256;

int cmd_qps(const char* cmd, const char* params, rte_tel_data* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_nic) return -ENODEV;
  std::string_view p(params ? params : "");
  rte_tel_data_start_dict(out);
  if (!p.empty()) {
    const auto comma = p.find(',');
    Device* d = g_nic->find_device(std::string(p.substr(0, comma)));
    size_t first = 0;
    if (!d || (comma != std::string_view::npos && !parse_whole(p.substr(comma + 1), first))) return -EINVAL;
    const auto infos = d->qp_infos();
    rte_tel_data_add_dict_string(out, "device", d->name().c_str());
    rte_tel_data_add_dict_u64(out, "count", infos.size());
    const size_t last = first >= infos.size() ? infos.size() : std::min(infos.size(), first + kQpsPerPage);
    if (last < infos.size()) rte_tel_data_add_dict_u64(out, "next", last);
    std::vector<uint64_t> qpns;
    for (size_t i = first; i < last; ++i) qpns.push_back(infos[i].qpn);
    add_array(out, "qpns", u64_array(qpns));
    return 0;
  }
  ReplyBudget budget(cmd, params);
  budget.take(ReplyBudget::kScalar);  // omitted, kept for the end
  uint64_t omitted = 0;
  for (auto& d : g_nic->devices()) {
    std::vector<uint64_t> qpns;
    for (const auto& qi : d->qp_infos()) qpns.push_back(qi.qpn);
    size_t keep = std::min<size_t>(qpns.size(), RTE_TEL_MAX_ARRAY_ENTRIES);
    while (keep && !budget.take(ReplyBudget::row(d->name(), std::span(qpns.data(), keep)))) keep = keep * 3 / 4;
    if (!keep && !budget.take(ReplyBudget::row(d->name(), std::span<const uint64_t>{}))) {
      omitted += qpns.size();
      continue;
    }
    omitted += qpns.size() - keep;
    qpns.resize(keep);
    add_array(out, d->name(), u64_array(qpns));
  }
  if (omitted) rte_tel_data_add_dict_u64(out, "omitted", omitted);
  return 0;
}

int cmd_qp(const char*, const char* params, rte_tel_data* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_nic) return -ENODEV;
  uint32_t qpn = 0;
  std::string_view rest;
  Device* d = find_qp(params, qpn, rest);
  // /mrc/qp takes no more than the QP: "16,x" is a mistake, not QP 16.
  if (!d || !rest.empty()) return -EINVAL;
  for (const auto& qi : d->qp_infos()) {
    if (qi.qpn != qpn) continue;
    rte_tel_data_start_dict(out);
    rte_tel_data_add_dict_string(out, "device", d->name().c_str());
    rte_tel_data_add_dict_u64(out, "qpn", qi.qpn);
    rte_tel_data_add_dict_string(out, "state", std::string(engine::qp_state_name(qi.state)).c_str());
    rte_tel_data_add_dict_u64(out, "dest_qpn", qi.dest_qpn);
    rte_tel_data_add_dict_u64(out, "snd_una", qi.snd_una);
    rte_tel_data_add_dict_u64(out, "snd_nxt", qi.snd_nxt);
    rte_tel_data_add_dict_u64(out, "rcv_cack", qi.rcv_cack);
    rte_tel_data_add_dict_u64(out, "inflight_bytes", qi.inflight_bytes);
    rte_tel_data_add_dict_u64(out, "cwnd_bytes", qi.cwnd_bytes);
    rte_tel_data_add_dict_u64(out, "srtt_ns", qi.srtt_ns);
    rte_tel_data_add_dict_u64(out, "rttvar_ns", qi.rttvar_ns);
    rte_tel_data_add_dict_u64(out, "rto_ns", qi.rto_ns);
    rte_tel_data_add_dict_u64(out, "sq_outstanding", qi.sq_outstanding);
    rte_tel_data_add_dict_u64(out, "rq_posted", qi.rq_posted);
    rte_tel_data_add_dict_u64(out, "retries", qi.retries);
    rte_tel_data_add_dict_u64(out, "swept_planes", qi.swept_planes);
    rte_tel_data_add_dict_u64(out, "peer_planes_down", qi.peer_planes_down);
    for (size_t i = 0; i < qi.ctr.v.size(); ++i)
      rte_tel_data_add_dict_u64(out, std::string(engine::kQpCtrNames[i]).c_str(), qi.ctr.v[i]);
    return 0;
  }
  return -EINVAL;
}

// EVs come in pages: the reply is capped at 16 KB and 256 dict entries.
constexpr size_t kEvsPerPage = 64;

int cmd_evs(const char*, const char* params, rte_tel_data* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_nic) return -ENODEV;
  uint32_t qpn = 0;
  std::string_view rest;
  Device* d = find_qp(params, qpn, rest);
  if (!d) return -EINVAL;
  size_t first = 0;
  if (!rest.empty() && !parse_whole(rest, first)) return -EINVAL;
  std::vector<engine::EvInfo> evs;
  if (!d->ev_info(qpn, evs)) return -EINVAL;
  rte_tel_data_start_dict(out);
  rte_tel_data_add_dict_string(out, "device", d->name().c_str());
  rte_tel_data_add_dict_u64(out, "qpn", qpn);
  rte_tel_data_add_dict_u64(out, "count", evs.size());
  // first + kEvsPerPage wraps for a FIRST near 2^64 and named an earlier page.
  const size_t last = first >= evs.size() ? evs.size() : std::min(evs.size(), first + kEvsPerPage);
  if (last < evs.size()) rte_tel_data_add_dict_u64(out, "next", last);
  std::vector<std::string> cols = {"ev", "plane", "state", "active"};
  for (auto n : engine::kEvCtrNames) cols.emplace_back(n);
  add_array(out, "columns", string_array(cols));
  std::vector<std::string> states;
  for (auto s : kEvStates) states.emplace_back(engine::ev_state_name(s));
  add_array(out, "states", string_array(states));
  for (size_t i = first; i < last; ++i) {
    const auto& e = evs[i];
    std::vector<uint64_t> row = {e.value, e.plane, uint64_t(e.state), e.active};
    for (uint64_t v : e.ctr.v) row.push_back(v);
    add_array(out, std::to_string(i), u64_array(row));
  }
  return 0;
}

// /mrc/counters[,DEV]: the engine's device counters, the NIC's (nic_*) and
// the sum over the device's QPs, live and destroyed (qp_*).
int cmd_counters(const char*, const char* params, rte_tel_data* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_nic) return -ENODEV;
  Device* d = find_device(params);
  if (!d) return -EINVAL;
  rte_tel_data_start_dict(out);
  rte_tel_data_add_dict_string(out, "device", d->name().c_str());
  const auto ec = d->engine_counters();
  for (size_t i = 0; i < ec.v.size(); ++i)
    rte_tel_data_add_dict_u64(out, std::string(engine::kDevCtrNames[i]).c_str(), ec.v[i]);
  const auto sc = d->shard_counters();
  for (size_t i = 0; i < sc.size(); ++i)
    rte_tel_data_add_dict_u64(out, fmt::format("nic_{}", kShardCtrNames[i]).c_str(), sc[i]);
  const auto q = d->qp_counter_totals();
  for (size_t i = 0; i < q.v.size(); ++i)
    rte_tel_data_add_dict_u64(out, fmt::format("qp_{}", engine::kQpCtrNames[i]).c_str(), q.v[i]);
  return 0;
}

// /mrc/host: the host service's control counters (clients, refused
// requests, reclaimed resources). The lcores' host_* counters are nic_host_*
// in /mrc/counters.
const HostCounters* g_host = nullptr;
int cmd_host(const char*, const char*, rte_tel_data* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_host) return -ENODEV;
  rte_tel_data_start_dict(out);
  for (size_t i = 0; i < size_t(HostCtr::count); ++i)
    rte_tel_data_add_dict_u64(out, std::string(kHostCtrNames[i]).c_str(), (*g_host)[HostCtr(i)]);
  return 0;
}

}  // namespace

void set_telemetry_host(const HostCounters* counters) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_host = counters;
}

std::string register_telemetry(Nic& nic) {
  g_nic = &nic;
  struct Cmd {
    const char* name;
    telemetry_cb fn;
    const char* help;
  };
  const Cmd cmds[] = {
      {"/mrc/devices", cmd_devices, "MRC devices. No parameters"},
      {"/mrc/planes", cmd_planes,
       "Planes (rows DEV_P): link, faults, counters, EV states, port stats. Parameters: [DEV]"},
      {"/mrc/plane", cmd_plane, "One plane with its port and addresses. Parameters: DEV:PLANE"},
      {"/mrc/link", cmd_link, "Fail or restore a plane's link. Parameters: DEV:PLANE,up|down"},
      {"/mrc/qps", cmd_qps, "QPNs per device, or 256 per page of one. Parameters: [DEV[,FIRST]]"},
      {"/mrc/qp", cmd_qp, "One QP's state and counters. Parameters: QPN or DEV:QPN"},
      {"/mrc/evs", cmd_evs, "A QP's EVs, 64 per page. Parameters: QPN[,FIRST] or DEV:QPN[,FIRST]"},
      {"/mrc/counters", cmd_counters, "Engine, NIC (nic_*) and summed QP (qp_*) counters. Parameters: [DEV]"},
      {"/mrc/host", cmd_host, "Host service counters (clients, refused requests, reclaims). No parameters"},
  };
  for (const auto& c : cmds) {
    const int rc = rte_telemetry_register_cmd(c.name, c.fn, c.help);
    if (rc != 0) return fmt::format("telemetry command {}: error {}", c.name, rc);
  }
  return {};
}

void unregister_telemetry() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_nic = nullptr;
  g_host = nullptr;
}

}  // namespace mrc::dp
