// Counters of the NIC around the engine (ports, link layer, steering, fault
// injection). One writer each (the owning lcore); any thread may read them,
// so they are relaxed atomics that compile to plain adds.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace mrc::dp {

#define MRC_SHARD_COUNTERS(X)                                                                 \
  X(rx_frames, "frames received from ports")                                                  \
  X(rx_bytes, "bytes received from ports")                                                    \
  X(rx_to_engine, "RoCEv2/MRC frames handed to the engine")                                   \
  X(rx_steered_out, "frames handed to the owning lcore of their QP")                          \
  X(rx_steered_in, "frames received from another lcore")                                      \
  X(rx_drop_steer_full, "frames dropped: the owning lcore's ring was full")                   \
  X(rx_drop_not_ours, "frames dropped: not RoCEv2 to us, not ARP/ND for us")                  \
  X(rx_drop_malformed, "frames dropped: malformed ARP/ND/IP")                                 \
  X(rx_drop_too_big, "frames dropped: chained mbufs that could not be linearised")            \
  X(rx_drop_link_down, "frames dropped: plane link down (fault injection)")                   \
  X(arp_replies, "ARP replies sent")                                                          \
  X(nd_replies, "IPv6 neighbour advertisements sent")                                         \
  X(arp_requests, "ARP requests sent (resolving a peer)")                                     \
  X(nd_solicits, "IPv6 neighbour solicitations sent (resolving a peer)")                      \
  X(neighbours_learned, "ARP/ND frames whose sender binding entered the table")               \
  X(neighbour_static_kept, "ARP/ND frames naming a static neighbour with its configured MAC") \
  X(rx_drop_neighbour_static_conflict, "ARP/ND frames giving a static neighbour another MAC") \
  X(rx_drop_neighbour_table_full, "ARP/ND frames of a new neighbour: the table is full")      \
  X(tx_frames, "frames sent to ports")                                                        \
  X(tx_bytes, "bytes sent to ports")                                                          \
  X(tx_drop_no_mbuf, "frames not sent: mempool empty")                                        \
  X(tx_drop_link_down, "frames dropped: plane link down (fault injection)")                   \
  X(tx_drop_fault, "frames dropped by injected egress loss")                                  \
  X(tx_corrupted, "frames corrupted by fault injection")                                      \
  X(tx_delayed, "frames held back by injected delay")                                         \
  X(tx_drop_delay_full, "frames dropped: injected-delay queue full")                          \
  X(tx_drop_port_full, "frames dropped at shutdown: the port never took them")                \
  X(capture_errors, "frames the capture could not write")                                     \
  X(port_faults, "bursts cut short by a fault: the peer unmapped shared memory")              \
  X(tx_lost_in_fault, "frames forgotten after a TX burst faulted (never freed twice)")        \
  X(port_down_events, "planes the engine was told are down: link lost or port faulted")       \
  X(port_up_events, "planes the engine was told are back")                                    \
  X(link_announcements, "gratuitous ARPs / unsolicited NAs sent as a plane came up")          \
  X(rx_announcements_unused, "peers' announcements of IPs not in the table")                  \
  X(host_sqe, "send WQEs taken from host SQs")                                                \
  X(host_rqe, "receive WQEs taken from host RQs")                                             \
  X(host_cqe, "completions written to host CQs")                                              \
  X(host_sq_flushed, "send WQEs completed as flushed: QP in ERROR")                           \
  X(host_wqe_reset, "WQEs a move to RESET emptied from a QP, with no completion (verbs)")     \
  X(host_bad_sq_index, "host QPs failed: SQ producer index out of range")                     \
  X(host_bad_rq_index, "host QPs failed: RQ producer index out of range")                     \
  X(host_bad_cq_index, "host CQs failed: consumer index out of range")                        \
  X(host_cq_overflow, "host CQs failed: full when a completion arrived")                      \
  X(host_cqe_dropped, "completions dropped: their CQ had failed")                             \
  X(host_qp_cq_failed, "host QPs moved to ERROR: a CQ they complete to failed (verbs)")       \
  X(host_channel_signals, "completion channel events signalled")

// New counters go last: telemetry's /mrc/planes rows list them in this order.
#define MRC_PLANE_COUNTERS(X)                                               \
  X(rx_frames, "frames received")                                           \
  X(rx_bytes, "bytes received")                                             \
  X(tx_frames, "frames sent")                                               \
  X(tx_bytes, "bytes sent")                                                 \
  X(drops, "frames dropped on this plane")                                  \
  X(rx_bursts, "RX bursts that returned frames (frames per burst = ratio)") \
  X(tx_bursts, "TX bursts that sent frames (frames per burst = ratio)")

// Written by the host service's control thread (ep_responses_dropped by the
// workers that hear the responses, under the service's control lock).
#define MRC_HOST_COUNTERS(X)                                                              \
  X(clients_connected, "host clients that connected")                                     \
  X(clients_reclaimed, "host clients gone; their QPs, CQs and MRs reclaimed")             \
  X(clients_refused_fds, "host connections refused (EMFILE): mrc-nic out of descriptors") \
  X(accepts_failed, "host connections lost: accept() failed with no spare descriptor")    \
  X(requests_fds_lost, "requests refused (EMFILE): their descriptors could not be taken") \
  X(bad_requests, "control requests refused as malformed")                                \
  X(requests_failed, "control requests that failed (errno returned)")                     \
  X(bad_memfds, "memory refused: not a sealed memfd of the announced size")               \
  X(mrs_registered, "memory regions registered")                                          \
  X(mr_table_full, "memory regions refused: the device's region table was full")          \
  X(qps_created, "host QPs created")                                                      \
  X(async_events, "async events sent to clients")                                         \
  X(async_events_dropped, "async events lost: no events connection, or its buffer full")  \
  X(ep_responses_dropped, "endpoint responses past the 4,096 kept while an ep_send waits")

#define MRC_X_ENUM(name, ...) name,
enum class ShardCtr : uint16_t { MRC_SHARD_COUNTERS(MRC_X_ENUM) count };
enum class PlaneCtr : uint16_t { MRC_PLANE_COUNTERS(MRC_X_ENUM) count };
enum class HostCtr : uint16_t { MRC_HOST_COUNTERS(MRC_X_ENUM) count };
#undef MRC_X_ENUM
#define MRC_X_NAME(name, ...) #name,
inline constexpr std::array<std::string_view, size_t(ShardCtr::count)> kShardCtrNames = {
    MRC_SHARD_COUNTERS(MRC_X_NAME)};
inline constexpr std::array<std::string_view, size_t(PlaneCtr::count)> kPlaneCtrNames = {
    MRC_PLANE_COUNTERS(MRC_X_NAME)};
inline constexpr std::array<std::string_view, size_t(HostCtr::count)> kHostCtrNames = {MRC_HOST_COUNTERS(MRC_X_NAME)};
#undef MRC_X_NAME

// The port's basic statistics (rte_eth_stats) shown beside a plane's own.
inline constexpr std::array<std::string_view, 6> kPortStatNames = {"port_ipackets", "port_opackets", "port_imissed",
                                                                   "port_ierrors",  "port_oerrors",  "port_rx_nombuf"};
using PortStats = std::array<uint64_t, kPortStatNames.size()>;

template <class E>
struct AtomicCounters {
  std::array<std::atomic<uint64_t>, size_t(E::count)> v{};
  // Single writer: a load and a store, no locked read-modify-write.
  void inc(E c, uint64_t n = 1) {
    auto& a = v[size_t(c)];
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t operator[](E c) const { return v[size_t(c)].load(std::memory_order_relaxed); }
};

using ShardCounters = AtomicCounters<ShardCtr>;
using PlaneCounters = AtomicCounters<PlaneCtr>;
using HostCounters = AtomicCounters<HostCtr>;

}  // namespace mrc::dp
