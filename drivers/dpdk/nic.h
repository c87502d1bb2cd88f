// The mrc-nic runtime: MRC devices on DPDK ports, one engine per (device,
// worker lcore). Each worker owns its shards outright; other threads reach a
// shard only through its mailbox, which the worker serves between bursts, so
// the fast path takes no lock.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dpdk/nic_counters.h"
#include "engine/engine.h"

struct rte_mempool;
struct rte_ring;
struct rte_mbuf;

namespace mrc::dp {

struct FaultSpec {
  double drop = 0;        // egress drop probability
  double corrupt = 0;     // egress probability of flipping one byte
  uint64_t delay_ns = 0;  // added egress delay
};

struct PlaneSpec {
  std::string port;  // DPDK port name (e.g. net_memif0) or id
  uint16_t port_id = 0;
  engine::PlaneAddr addr;  // mac 0: the port's own
  FaultSpec fault;
};

struct DeviceSpec {
  std::string name;
  std::vector<PlaneSpec> planes;
  std::vector<unsigned> lcores;  // shard k runs on lcores[k]
  engine::EngineConfig engine;   // planes/num_planes/first_qpn are filled in per shard
};

struct NicSpec {
  std::vector<DeviceSpec> devices;
  uint32_t mtu = 4096;
  std::string capture_dir;  // empty: no capture
  uint64_t seed = 1;
};

class Shard;

struct EvEventRecord {
  engine::Nanos t = 0;
  uint32_t qpn = 0, ev = 0;
  engine::EvState from{}, to{};
  uint64_t drops = 0;
  uint32_t ev_index = 0;  // in the QP's EV profile
};

struct EndpointResponse {
  uint32_t plane = 0;
  uint32_t id = 0;
  uint8_t op = 0;
  uint32_t rx_port = 0;
  engine::Nanos t = 0;
};

// What runs on top of a shard (the workload driver, later the host
// interface). Called on the shard's lcore only, never inside an engine call,
// so it may call the engine.
class ShardApp {
 public:
  virtual ~ShardApp() = default;
  virtual void on_completion(Shard& s, const engine::Completion& c, engine::Nanos now) = 0;
  // Returns true if it gave the engine work: the shard then polls the engine,
  // which is what sends what was posted.
  virtual bool on_poll(Shard& s, engine::Nanos now) = 0;
  // A QP entered ERROR on its own (retries exhausted, remote error).
  virtual void on_qp_error(Shard& /*s*/, uint32_t /*qpn*/, engine::WcStatus /*why*/) {}
  // An EV of a QP moved between GOOD and ASSUMED_BAD.
  virtual void on_ev_event(Shard& /*s*/, const EvEventRecord& /*e*/) {}
  // The answer to an endpoint request this shard's engine sent.
  virtual void on_endpoint_response(Shard& /*s*/, const EndpointResponse& /*r*/) {}
};

class Device;

class Shard {
 public:
  Shard(Device& dev, uint32_t index, unsigned lcore);
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  Device& device() { return dev_; }
  uint32_t index() const { return index_; }
  unsigned lcore() const { return lcore_; }
  engine::Engine& engine() { return *eng_; }
  // Through call(): a call's direct path reads app_ on the caller's thread.
  void set_app(ShardApp* app);

  // Runs `fn` on this shard's lcore (at once when workers are not running)
  // and waits for it. For control and telemetry, never the fast path. Every
  // engine access from another thread goes through here, even before
  // start(): telemetry may call at any time.
  void call(const std::function<void()>& fn);

  // The lcore loop's body for this shard; returns the work done (frames).
  unsigned run_once(engine::Nanos now);
  // Drains staged and delayed TX (at shutdown).
  void flush_all(engine::Nanos now);

  const ShardCounters& counters() const { return ctr_; }
  // For the app running on this shard's lcore (the counters' one writer).
  void count(ShardCtr c, uint64_t n = 1) { ctr_.inc(c, n); }
  const PlaneCounters& plane_counters(uint32_t plane) const { return plane_ctr_[plane]; }
  // EV events seen so far, newest last (bounded); `total` gets how many
  // there were in all.
  std::vector<EvEventRecord> ev_events(uint64_t* total = nullptr) const;

 private:
  friend class Device;
  friend class Nic;
  struct Impl;
  Device& dev_;
  uint32_t index_;
  unsigned lcore_;
  ShardApp* app_ = nullptr;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<engine::Engine> eng_;
  ShardCounters ctr_;
  std::array<PlaneCounters, engine::kMaxPlanes> plane_ctr_{};
  std::atomic<const std::function<void()>*> mailbox_{nullptr};
  std::mutex mailbox_callers_;
  void serve_mailbox();
};

class Nic;

class Device {
 public:
  Device(Nic& nic, const DeviceSpec& spec, uint32_t index);
  ~Device();
  const std::string& name() const { return spec_.name; }
  const DeviceSpec& spec() const { return spec_; }
  uint32_t index() const { return index_; }
  uint32_t num_planes() const { return static_cast<uint32_t>(spec_.planes.size()); }
  const engine::PlaneAddr& plane_addr(uint32_t p) const { return spec_.engine.planes[p]; }
  std::vector<std::unique_ptr<Shard>>& shards() { return shards_; }
  // The shard that owns a QPN (shard 0 for QPNs no shard owns, so the engine
  // counts them).
  uint32_t shard_of_qpn(uint32_t qpn) const;
  // Where Nic::tick_control() stamps this device's alive page (the host
  // service maps it; null without one).
  void set_alive_page(std::atomic<uint64_t>* page) { alive_ = page; }

  // Link failure injection: a down plane silently drops both directions.
  // With port_status, the engine is told as well and tells its peers.
  void set_link(uint32_t plane, bool up, bool port_status);
  bool link_up(uint32_t plane) const { return link_up_[plane].load(std::memory_order_relaxed); }
  // What a user sees of the plane: not held down (set_link) and its port's
  // own link up (a memif peer gone reads down).
  bool link_reads_up(uint32_t plane) const;
  void set_fault(uint32_t plane, const FaultSpec& f);
  FaultSpec fault(uint32_t plane) const;

  // Snapshots taken on the owning lcores (for telemetry and the CLI).
  engine::Counters<engine::DevCtr> engine_counters();
  std::vector<engine::QpInfo> qp_infos();
  // Every QP counter summed over the device's QPs, destroyed ones included.
  engine::Counters<engine::QpCtr> qp_counter_totals();
  bool ev_info(uint32_t qpn, std::vector<engine::EvInfo>& out);
  // Every QP's EVs on each plane: how many are in each state (engine::EvState
  // order), and the EV probes sent on them (which plane draws the probes).
  struct PlaneEvs {
    std::array<uint64_t, 4> states{};
    uint64_t probes = 0;
  };
  std::array<PlaneEvs, engine::kMaxPlanes> evs_per_plane();
  // The shards' EV events, oldest first; `total` gets how many there were
  // in all (the shards keep only their newest).
  std::vector<EvEventRecord> ev_events(uint64_t* total = nullptr);
  // The sum over shards of a plane's counters.
  std::array<uint64_t, size_t(PlaneCtr::count)> plane_counters(uint32_t plane) const;
  std::array<uint64_t, size_t(ShardCtr::count)> shard_counters() const;
  // The port's own statistics (what the PMD counted, e.g. RX drops when the
  // pool ran dry), in kPortStatNames' order; none when the port cannot say.
  std::optional<PortStats> port_stats(uint32_t plane) const;

  // Registers memory in every shard under one set of keys; `iova` is the
  // address WRs and peers name it by.
  bool reg_mr(uint32_t pd, void* ptr, uint64_t iova, uint64_t len, uint32_t access, uint32_t& lkey, uint32_t& rkey);
  // Removes it from every shard; once this returns no lcore touches it.
  void dereg_mr(uint32_t lkey);

  // The neighbour table: peers' MACs by IP, for addressing host QPs by IP
  // only. One table per device (an address names one peer whatever the
  // plane). Entries come from static configuration and from ARP/ND the
  // lcores receive (replies to resolve() and peers' own requests); learned
  // entries follow the latest frame, static ones never change by learning.
  //
  // Sets a static entry for `ip`, replacing any entry it had.
  void add_static_neighbour(const wire::IpAddr& ip, uint64_t mac);
  // The MAC known for `ip`, if any. Any thread.
  std::optional<uint64_t> neighbour(const wire::IpAddr& ip) const;
  // The MAC of `ip` as seen from `plane`: the known one at once; otherwise
  // sends an ARP request (IPv4) or Neighbour Solicitation (IPv6) out of the
  // plane, repeated every 100 ms, and waits for an answer up to `timeout_s`
  // seconds. nullopt on timeout, when the plane has no address of the
  // target's family, or when the workers are not running (nothing could
  // answer). Control threads only: from an lcore it returns the known MAC
  // or nullopt without asking (waiting there would stall the shards).
  std::optional<uint64_t> resolve(uint32_t plane, const wire::IpAddr& ip, double timeout_s);

 private:
  friend class Shard;
  friend class Nic;
  Nic& nic_;
  DeviceSpec spec_;
  uint32_t index_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::array<std::atomic<bool>, engine::kMaxPlanes> link_up_{};
  // Fault parameters change from the control thread; workers read them.
  std::array<std::atomic<uint64_t>, engine::kMaxPlanes> drop_ppb_{}, corrupt_ppb_{}, delay_ns_{};
  std::atomic<uint64_t>* alive_ = nullptr;
  // What a binding an lcore learned from an ARP/ND frame did to the table.
  // A static entry is never changed: the config outranks the wire.
  enum class NeighbourUpdate : uint8_t {
    entered,          // a new dynamic entry, or a dynamic entry refreshed
    static_kept,      // a static entry with this very MAC
    static_conflict,  // a static entry with another MAC
    not_cached,       // an announcement (refresh_only) for an IP not in the table
    table_full,       // a new IP, and no room for it
  };
  NeighbourUpdate learn_neighbour(const wire::IpAddr& ip, uint64_t mac, bool refresh_only = false);
  // Written by lcores (only for ARP/ND frames that teach a binding, never on
  // the RoCEv2 path) and the control thread; read by control and telemetry.
  struct NeighbourEntry {
    uint64_t mac = 0;
    bool is_static = false;
  };
  mutable std::mutex neigh_mu_;
  std::map<std::array<uint8_t, 16>, NeighbourEntry> neigh_;  // by IpAddr::bytes
};

class Nic {
 public:
  // Sets up ports, mempool, devices and shards. Throws std::runtime_error
  // with a message naming what failed.
  explicit Nic(const NicSpec& spec);
  ~Nic();

  std::vector<std::unique_ptr<Device>>& devices() { return devices_; }
  Device* find_device(const std::string& name);
  const NicSpec& spec() const { return spec_; }

  // Waits up to `seconds` for every plane's port link; returns the ports
  // still down.
  std::vector<std::string> wait_for_links(double seconds);
  // Launches the worker loops on their lcores (the main lcore runs none).
  void start();
  // Stops and joins the workers (idempotent).
  void stop();
  bool running() const { return running_.load(std::memory_order_acquire); }
  engine::Nanos now() const;
  // Stamps every device's alive page (abi::kAliveSuffix): called by the
  // control thread as it works, so clients can tell it busy from stopped.
  void tick_control();

  // memif's client connects only when its port starts, so a server that
  // left and came back would never be found again. Called every few ms
  // from the control thread while the workers run: a memif client port
  // whose link has read down for a second is restarted, and again every
  // second until it connects. Workers leave a memif port alone while its
  // link reads down (see Shard::Impl::usable).
  void redial_memif_clients();

 private:
  friend class Shard;
  friend class Device;
  NicSpec spec_;
  rte_mempool* pool_ = nullptr;
  std::vector<std::unique_ptr<Device>> devices_;
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_{false};
  std::vector<unsigned> worker_lcores_;
  struct Redial {
    uint16_t port;
    std::string name;
    std::chrono::steady_clock::time_point next_try;
    bool down = false;
    uint32_t tries = 0;
  };
  std::vector<Redial> redial_;  // memif client ports
  static void restart_port(void* port_id);  // an EAL alarm callback
  static int worker_main(void* arg);
  void worker_loop(unsigned lcore);
};

}  // namespace mrc::dp
