#include "sim/event_loop.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <utility>

#include "engine/prefetch.h"

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

uint32_t EventLoop::alloc_slot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  if ((slot_count_ >> kChunkBits) == chunks_.size())
    chunks_.push_back(std::make_unique<Slot[]>(size_t(1) << kChunkBits));
  return slot_count_++;
}

void EventLoop::free_slot(uint32_t slot) {
  Slot& s = slot_at(slot);
  s.fn = nullptr;
  s.seq = 0;
  s.in_calendar = false;
  free_slots_.push_back(slot);
  --live_;
}

void EventLoop::link(uint32_t slot) {
  Slot& s = slot_at(slot);
  const size_t b = static_cast<size_t>(s.t & (kWheel - 1));
  Bucket& bk = buckets_[b];
  s.in_calendar = true;
  s.next = kNone;
  s.prev = bk.tail;
  if (bk.tail == kNone) {
    bk.head = slot;
    occupied_[b / 64] |= 1ull << (b % 64);
  } else {
    slot_at(bk.tail).next = slot;
  }
  bk.tail = slot;
  ++in_calendar_;
}

void EventLoop::unlink(uint32_t slot) {
  Slot& s = slot_at(slot);
  const size_t b = static_cast<size_t>(s.t & (kWheel - 1));
  Bucket& bk = buckets_[b];
  (s.prev == kNone ? bk.head : slot_at(s.prev).next) = s.next;
  (s.next == kNone ? bk.tail : slot_at(s.next).prev) = s.prev;
  if (bk.head == kNone) occupied_[b / 64] &= ~(1ull << (b % 64));
  s.in_calendar = false;
  --in_calendar_;
}

Nanos EventLoop::first_in_calendar() const {
  if (!in_calendar_) return kNever;
  // Buckets from now_'s onwards, wrapping once: bucket i holds time
  // now_ + ((i - now_) mod kWheel).
  const size_t start = static_cast<size_t>(now_ & (kWheel - 1));
  const size_t words = occupied_.size();
  size_t w = start / 64;
  uint64_t bits = occupied_[w] & (~0ull << (start % 64));
  for (size_t k = 0; k <= words; ++k) {
    if (bits) {
      const size_t b = w * 64 + static_cast<size_t>(std::countr_zero(bits));
      return now_ + static_cast<Nanos>((b - start) & (kWheel - 1));
    }
    w = (w + 1) % words;
    bits = occupied_[w];
    if (k + 1 == words) bits &= (1ull << (start % 64)) - 1;  // back at start's word: only its lower part
  }
  return kNever;
}

void EventLoop::drop_stale_far() {
  while (!far_.empty() && slot_at(far_.front().slot).seq != far_.front().seq) {
    std::pop_heap(far_.begin(), far_.end(), Later{});
    far_.pop_back();
  }
}

void EventLoop::pull_far() {
  while (!far_.empty() && far_.front().t - now_ < kWheel) {  // t >= now_: no overflow near kNever
    std::pop_heap(far_.begin(), far_.end(), Later{});
    const Entry e = far_.back();
    far_.pop_back();
    if (slot_at(e.slot).seq == e.seq) link(e.slot);
  }
  drop_stale_far();
}

EventId EventLoop::at(Nanos t, Callback fn) {
  if (t < now_) t = now_;
  const uint32_t slot = alloc_slot();
  const uint64_t seq = next_seq_++;
  Slot& s = slot_at(slot);
  s.fn = std::move(fn);
  s.seq = seq;
  s.t = t;
  if (t - now_ < kWheel) {
    link(slot);
  } else {
    s.in_calendar = false;
    far_.push_back({t, seq, slot});
    std::push_heap(far_.begin(), far_.end(), Later{});
  }
  ++live_;
  ++stats_.scheduled;
  stats_.max_pending = std::max(stats_.max_pending, live_);
  return {seq, slot};
}

bool EventLoop::cancel(EventId id) {
  if (!id || id.slot >= slot_count_ || slot_at(id.slot).seq != id.seq) return false;
  if (slot_at(id.slot).in_calendar) unlink(id.slot);
  free_slot(id.slot);
  ++stats_.cancelled;
  drop_stale_far();
  return true;
}

Nanos EventLoop::next_time() const {
  const Nanos t = first_in_calendar();
  if (t != kNever) return t;
  return far_.empty() ? kNever : far_.front().t;
}

// A large run's events each touch state the events before them evicted (a
// link, a frame, a host's engine) and mostly wait on those loads. So while
// one runs, the loads of those after it are under way, a stage deeper the
// nearer they are, each stage reading what the one before loaded a few
// events earlier (kStageDistance), and the slots further on. Same-time
// events share a bucket; at its end the walk goes on into the next non-empty
// bucket (a third of a 128-host run's events have fewer than six behind them
// in their own), unless that is far off.
void EventLoop::prefetch_after(uint32_t next) const {
  bool crossed = false;
  for (unsigned d = 1; d <= kSlotDistance; ++d) {
    if (next == kNone) {
      if (crossed || (next = head_after(now_)) == kNone) return;
      crossed = true;
    }
    const Slot& s = slot_at(next);
    if (d == kSlotDistance) return engine::prefetch_bytes(&s, sizeof(Slot));
    for (unsigned stage = 0; stage < kStageDistance.size(); ++stage)
      if (kStageDistance[stage] == d) s.fn.prefetch(stage);
    next = s.next;
  }
}

// The first event of the earliest non-empty bucket after t's, looking at
// the rest of t + 1's bitmap word and the next one (65 to 128 ns on); kNone
// if there is none that close.
uint32_t EventLoop::head_after(Nanos t) const {
  const size_t words = occupied_.size();
  const size_t b = static_cast<size_t>((t + 1) & (kWheel - 1));
  size_t w = b / 64;
  uint64_t bits = occupied_[w] & (~0ull << (b % 64));
  for (int k = 0; k < 2; ++k) {
    if (bits) return buckets_[w * 64 + static_cast<size_t>(std::countr_zero(bits))].head;
    w = (w + 1) % words;
    bits = occupied_[w];
  }
  return kNone;
}

bool EventLoop::run_next(Nanos limit) {
  Nanos t = first_in_calendar();
  if (t == kNever) {
    if (far_.empty() || far_.front().t > limit) return false;
    now_ = far_.front().t;  // nothing sooner: jump the clock and fill the calendar
    pull_far();
    t = now_;
  }
  if (t > limit) return false;
  if (t != now_) {
    now_ = t;
    pull_far();
  }
  Bucket& bk = buckets_[static_cast<size_t>(t & (kWheel - 1))];
  const uint32_t slot = bk.head;
  unlink(slot);
  prefetch_after(bk.head);
  Slot& s = slot_at(slot);
  s.seq = 0;  // cancel() of the running event finds nothing
  --live_;
  ++stats_.run;
  // In place: the slot goes back on the free list only afterwards, so what
  // the callback schedules cannot reuse it (also when it throws, as a
  // test's REQUIRE inside a hook does). A callback must not destroy the loop.
  struct Release {
    EventLoop& loop;
    Slot& s;
    uint32_t slot;
    ~Release() {
      s.fn = nullptr;
      loop.free_slots_.push_back(slot);
    }
  } release{*this, s, slot};
  s.fn();
  return true;
}

bool EventLoop::step() { return run_next(kNever); }

void EventLoop::advance(Nanos t) {
  assert(next_time() >= t);
  if (t <= now_) return;
  now_ = t;
  pull_far();
}

void Mailbox::deliver(Batch& b, EventLoop& loop) {
  for (auto& [t, fn] : b.items) {
    assert(t >= loop.now());
    loop.at(t, std::move(fn));
  }
  b.items.clear();
  b.earliest = kNever;
}

void Mailbox::deliver_to(EventLoop& loop) {
  deliver(batch_[open_ ^ 1], loop);  // the older posts first
  deliver(batch_[open_], loop);
}

void Mailbox::close_window() {
  assert(batch_[open_ ^ 1].items.empty());
  open_ ^= 1;
}

bool EventLoop::run_until(Nanos t) {
  stop_ = false;
  while (run_next(t)) {
    if (stop_) return false;
  }
  if (t > now_) {
    now_ = t;
    pull_far();
  }
  return true;
}

bool EventLoop::run_until_idle(Nanos limit) {
  stop_ = false;
  while (run_next(limit)) {
    if (stop_) return false;
  }
  if (live_ == 0) return true;
  if (limit > now_) {
    now_ = limit;
    pull_far();
  }
  return false;
}

}  // namespace mrc::sim
