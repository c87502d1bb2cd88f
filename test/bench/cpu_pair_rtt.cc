// How far apart two CPUs are, as one cache line's round trip between them.
// On our 2-vCPU VMs the host moves the vCPUs: the round trip flips between
// about 60 ns and about 310 ns from one second to the next, and so does the
// rate of the memif baseline (scripts/bench-memif-baseline.sh reports it per
// second), between ~25 and ~200 Gb/s. Run it a few times before trusting a
// ratio between two benchmark runs. Prints one JSON line.
#include <pthread.h>
#include <sched.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

bool pin(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// Spins until the ball reads `want`; yields after a while, so that the two
// ends may share one CPU (the smoke test) without waiting out timeslices.
constexpr uint64_t kBatch = 1000;

void await(const std::atomic<uint64_t>& ball, uint64_t want) {
  for (uint32_t spins = 0; ball.load(std::memory_order_acquire) != want;)
    if (++spins % 4096 == 0) sched_yield();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cache-line round trip between two CPUs"};
  // By default the first two CPUs this process may use (the first twice
  // when it may use one).
  unsigned cpu_a = 0, cpu_b = 0;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    std::vector<unsigned> cpus;
    for (unsigned c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    if (!cpus.empty()) cpu_a = cpu_b = cpus[0];
    if (cpus.size() > 1) cpu_b = cpus[1];
  }
  uint32_t trips = 100'000;
  app.add_option("--cpus", cpu_a, "first CPU")->capture_default_str();
  app.add_option("--peer", cpu_b, "second CPU")->capture_default_str();
  app.add_option("--trips", trips, "round trips timed")->check(CLI::Range(1000u, 100'000'000u))->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  alignas(64) std::atomic<uint64_t> ball{0};
  bool peer_pinned = false;
  std::thread peer([&] {
    peer_pinned = pin(cpu_b);
    for (uint64_t i = 0; i < trips; ++i) {
      await(ball, 2 * i + 1);
      ball.store(2 * i + 2, std::memory_order_release);
    }
  });
  const bool pinned = pin(cpu_a);
  // The median of batches: a batch in which either thread was descheduled
  // (the host's doing, or the other thread's CPU being busy) says nothing.
  std::vector<double> batch_ns;
  for (uint64_t i = 0; i < trips;) {
    const uint64_t end = std::min<uint64_t>(trips, i + kBatch);
    const auto t0 = std::chrono::steady_clock::now();
    for (; i < end; ++i) {
      ball.store(2 * i + 1, std::memory_order_release);
      await(ball, 2 * i + 2);
    }
    batch_ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
  }
  peer.join();
  if (!pinned || !peer_pinned) {
    fmt::print(stderr, "cpu-pair-rtt: cannot pin to CPUs {} and {}\n", cpu_a, cpu_b);
    return 1;
  }
  // Only whole batches are compared (the last may be short).
  if (batch_ns.size() > 1 && trips % kBatch) batch_ns.pop_back();
  std::sort(batch_ns.begin(), batch_ns.end());
  const double median = batch_ns[batch_ns.size() / 2] / std::min<uint64_t>(trips, kBatch);
  fmt::print("{{\"tool\":\"cpu-pair-rtt\",\"cpus\":[{},{}],\"rtt_ns\":{:.1f}}}\n", cpu_a, cpu_b, median);
  return 0;
}
