#include "sim/event_loop.h"

#include <algorithm>
#include <utility>

namespace mrc::sim {
namespace {

// std::push_heap builds a max-heap; "later" on top of the comparison makes it
// a min-heap on (t, seq).
struct Later {
  template <class E>
  bool operator()(const E& a, const E& b) const {
    return a.t != b.t ? a.t > b.t : a.seq > b.seq;
  }
};

}  // namespace

EventId EventLoop::at(Nanos t, Callback fn) {
  if (t < now_) t = now_;
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  const uint64_t seq = next_seq_++;
  slots_[slot].fn = std::move(fn);
  slots_[slot].seq = seq;
  heap_.push_back({t, seq, slot});
  std::push_heap(heap_.begin(), heap_.end(), Later{});
  ++live_;
  ++stats_.scheduled;
  stats_.max_pending = std::max(stats_.max_pending, live_);
  return {seq, slot};
}

bool EventLoop::cancel(EventId id) {
  if (!id || id.slot >= slots_.size() || slots_[id.slot].seq != id.seq) return false;
  slots_[id.slot].fn = nullptr;
  slots_[id.slot].seq = 0;
  free_slots_.push_back(id.slot);
  --live_;
  ++stats_.cancelled;
  drop_stale();
  return true;
}

void EventLoop::drop_stale() {
  while (!heap_.empty() && !live(heap_.front())) {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    heap_.pop_back();
  }
  // Stale entries deeper in the heap are useless once nothing is live.
  if (live_ == 0) heap_.clear();
}

void EventLoop::run_top() {
  std::pop_heap(heap_.begin(), heap_.end(), Later{});
  const Entry e = heap_.back();
  heap_.pop_back();
  // Move the callback out first: it may schedule events, which can reuse or
  // reallocate the slots.
  Callback fn = std::move(slots_[e.slot].fn);
  slots_[e.slot].fn = nullptr;
  slots_[e.slot].seq = 0;
  free_slots_.push_back(e.slot);
  --live_;
  drop_stale();
  now_ = e.t;
  ++stats_.run;
  fn();
}

bool EventLoop::step() {
  if (heap_.empty()) return false;
  run_top();
  return true;
}

bool EventLoop::run_until(Nanos t) {
  stop_ = false;
  while (!heap_.empty() && heap_.front().t <= t) {
    run_top();
    if (stop_) return false;
  }
  now_ = std::max(now_, t);
  return true;
}

bool EventLoop::run_until_idle(Nanos limit) {
  stop_ = false;
  while (!heap_.empty()) {
    if (heap_.front().t > limit) {
      now_ = std::max(now_, limit);
      return false;
    }
    run_top();
    if (stop_) return false;
  }
  return true;
}

}  // namespace mrc::sim
