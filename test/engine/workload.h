// A write workload between two TestNet hosts with the checks every engine
// test wants: bytes placed equal bytes sent, each completion exactly once,
// WRITE_IMMs delivered in order, and no requester completion before its
// data sits in the responder's memory.
#pragma once

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim/testnet.h"

namespace mrc::test {

using namespace mrc::engine;

struct WorkloadSpec {
  uint32_t qps = 2;
  uint32_t messages_per_qp = 24;
  uint32_t max_message = 48 * 1024;
  uint32_t pmtu = 4096;
  double imm_fraction = 0.4;
  uint64_t seed = 1;
  QpAttr attr;  // base attributes (EV and CC profiles, timers)
};

class Workload {
 public:
  Workload(sim::TestNet& net, const WorkloadSpec& spec) : net_(net), spec_(spec), rng_(spec.seed) {
    const size_t bytes = size_t(spec.qps) * spec.messages_per_qp * spec.max_message + 64;
    src_.resize(bytes);
    dst_.assign(bytes, 0);
    for (auto& b : src_) b = static_cast<uint8_t>(rng_());
    ok_ = net.engine(0).reg_mr(1, src_.data(), 0x10000000, src_.size(), kAccessLocalWrite, lkey_, unused_) &&
          net.engine(1).reg_mr(1, dst_.data(), 0x80000000, dst_.size(), kAccessLocalWrite | kAccessRemoteWrite, unused_,
                               rkey_);
    QpAttr a = spec.attr;
    a.pmtu = spec.pmtu;
    for (uint32_t q = 0; q < spec.qps && ok_; ++q) {
      auto pair = net.connect_qp_pair(0, 1, a, 1, 1, QpCaps{1024, 1024});
      ok_ = bool(pair);
      pairs_.push_back(pair);
      for (uint32_t i = 0; i < spec.messages_per_qp; ++i) net.engine(1).post_recv(pair.qpn_b, RecvWr{recv_id(q, i)});
    }
    net.set_completion_hook([this](uint32_t h, const Completion& c) { on_completion(h, c); });
  }

  bool setup_ok() const { return ok_; }

  // Posts every message now; each gets a disjoint slice of the buffers.
  void post_all() {
    uint64_t off = 0;
    for (uint32_t q = 0; q < spec_.qps; ++q) {
      for (uint32_t i = 0; i < spec_.messages_per_qp; ++i) {
        const uint32_t len = static_cast<uint32_t>(rng_() % (spec_.max_message + 1));
        SendWr w;
        w.wr_id = uint64_t(q) << 32 | i;
        const bool imm = std::uniform_real_distribution<double>(0, 1)(rng_) < spec_.imm_fraction;
        w.opcode = imm ? WrOpcode::rdma_write_with_imm : WrOpcode::rdma_write;
        w.signaled = true;
        w.local_addr = 0x10000000 + off;
        w.length = len;
        w.lkey = lkey_;
        w.remote_addr = 0x80000000 + off;
        w.rkey = rkey_;
        w.imm = static_cast<uint32_t>(q << 16 | i);
        posted_[w.wr_id] = Msg{off, len, imm};
        if (imm) expected_imms_[q].push_back(w.imm);
        off += len;
        if (net_.post_send(0, pairs_[q].qpn_a, w) != 0) failures_.push_back("post_send refused");
      }
    }
  }

  // Returns "" when every property holds, else what broke.
  std::string check(bool all_must_succeed) const {
    std::ostringstream why;
    for (const auto& f : failures_) why << f << "; ";
    std::set<uint64_t> done;
    for (const auto& [id, st] : req_status_) {
      if (!posted_.count(id)) why << "completion for unknown wr " << id << "; ";
      if (all_must_succeed && st != WcStatus::success)
        why << "wr " << id << " completed with " << wc_status_name(st) << "; ";
      if (st == WcStatus::success) {
        const Msg& m = posted_.at(id);
        if (std::memcmp(src_.data() + m.off, dst_.data() + m.off, m.len) != 0)
          why << "wr " << id << ": placed bytes differ; ";
      }
    }
    if (req_status_.size() != posted_.size())
      why << req_status_.size() << " of " << posted_.size() << " WRs completed; ";
    for (uint32_t q = 0; q < spec_.qps; ++q) {
      auto got = imms_.count(q) ? imms_.at(q) : std::vector<uint32_t>{};
      auto want = expected_imms_.count(q) ? expected_imms_.at(q) : std::vector<uint32_t>{};
      if (all_must_succeed && got != want) why << "qp " << q << ": immediates out of order or missing; ";
      // Even on failure, whatever was delivered must be a prefix, in order.
      if (got.size() > want.size() || !std::equal(got.begin(), got.end(), want.begin()))
        why << "qp " << q << ": immediates not a prefix of those sent; ";
    }
    return why.str();
  }

  size_t completed() const { return req_status_.size(); }
  size_t posted() const { return posted_.size(); }
  const std::vector<sim::TestNet::QpPair>& pairs() const { return pairs_; }
  uint64_t bytes_posted() const {
    uint64_t n = 0;
    for (const auto& [id, m] : posted_) n += m.len;
    return n;
  }

 private:
  struct Msg {
    uint64_t off;
    uint32_t len;
    bool imm;
  };
  static uint64_t recv_id(uint32_t q, uint32_t i) { return uint64_t(q) << 32 | i | (1ull << 63); }

  void on_completion(uint32_t h, const Completion& c) {
    if (h == 0) {
      if (!req_status_.emplace(c.wr_id, c.status).second) failures_.push_back("duplicate requester completion");
      // Completion means acknowledged: the data must already be in place.
      auto it = posted_.find(c.wr_id);
      if (c.status == WcStatus::success && it != posted_.end() &&
          std::memcmp(src_.data() + it->second.off, dst_.data() + it->second.off, it->second.len) != 0)
        failures_.push_back("completion before the data was placed, wr " + std::to_string(c.wr_id));
      return;
    }
    if (c.status != WcStatus::success) return;  // flushed receives
    if (!recv_seen_.insert(c.wr_id).second) failures_.push_back("duplicate receive completion");
    const uint32_t q = c.imm >> 16;
    imms_[q].push_back(c.imm);
    // The immediate comes after all of its message's bytes.
    const uint64_t id = uint64_t(q) << 32 | (c.imm & 0xFFFF);
    auto it = posted_.find(id);
    if (it == posted_.end() || c.byte_len != it->second.len)
      failures_.push_back("receive completion with wrong length");
    else if (std::memcmp(src_.data() + it->second.off, dst_.data() + it->second.off, it->second.len) != 0)
      failures_.push_back("immediate delivered before its data");
  }

  sim::TestNet& net_;
  WorkloadSpec spec_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> src_, dst_;
  uint32_t lkey_ = 0, rkey_ = 0, unused_ = 0;
  bool ok_ = false;
  std::vector<sim::TestNet::QpPair> pairs_;
  std::map<uint64_t, Msg> posted_;
  std::map<uint64_t, WcStatus> req_status_;
  std::map<uint32_t, std::vector<uint32_t>> imms_, expected_imms_;
  std::set<uint64_t> recv_seen_;
  std::vector<std::string> failures_;
};

}  // namespace mrc::test
