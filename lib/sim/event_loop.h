// A deterministic discrete-event loop: a clock that only moves when the next
// event runs. Events are ordered by (time, insertion sequence), so two runs
// that schedule the same events in the same order execute identically.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/types.h"

namespace mrc::sim {

using Nanos = engine::Nanos;
using engine::kNever;

// A move-only void() callable that keeps small captures inline: a frame
// delivery (a link, an epoch, a tag and the frame: 48 bytes) is scheduled for every
// hop of every packet, and std::function allocated for each one. Bigger
// callables go to the heap.
class Callback {
 public:
  Callback() = default;
  Callback(std::nullptr_t) {}
  template <class F, class D = std::decay_t<F>>
    requires(!std::is_same_v<D, Callback> && !std::is_same_v<D, std::nullptr_t> && std::is_invocable_v<D&>)
  Callback(F&& f) {  // NOLINT: implicit, like std::function
    if constexpr (sizeof(D) <= kInline && alignof(D) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      ops_ = &kInlineOps<D>;
    } else {
      *reinterpret_cast<D**>(buf_) = new D(std::forward<F>(f));
      ops_ = &kHeapOps<D>;
    }
  }
  Callback(Callback&& o) noexcept { take(o); }
  Callback& operator=(Callback&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  Callback& operator=(std::nullptr_t) {
    reset();
    return *this;
  }
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;
  ~Callback() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  void operator()() { ops_->call(buf_); }
  // Starts loading what the call will touch, for a callable that says (a
  // `prefetch(unsigned stage) const` member): stage 0 its own state, then
  // stages 1 and 2 what that leads to, each of which may read what the
  // stage before loaded. The loop asks this of the events after the one it
  // runs, whose state other events have usually evicted.
  void prefetch(unsigned stage) const {
    if (ops_ && ops_->prefetch) ops_->prefetch(buf_, stage);
  }

  // Captures up to this size are kept inline.
  static constexpr size_t kInline = 48;

 private:
  struct Ops {
    void (*call)(void*);
    void (*move)(void* from, void* to);  // move-constructs `to`, destroys `from`
    void (*destroy)(void*);
    void (*prefetch)(const void*, unsigned stage);  // may be null
  };
  template <class D>
  static constexpr void (*prefetch_op())(const void*, unsigned) {
    if constexpr (requires(const D& d) { d.prefetch(0u); })
      return [](const void* p, unsigned stage) { static_cast<const D*>(p)->prefetch(stage); };
    else
      return nullptr;
  }
  template <class D>
  static constexpr Ops kInlineOps = {[](void* p) { (*static_cast<D*>(p))(); },
                                     [](void* from, void* to) {
                                       ::new (to) D(std::move(*static_cast<D*>(from)));
                                       static_cast<D*>(from)->~D();
                                     },
                                     [](void* p) { static_cast<D*>(p)->~D(); }, prefetch_op<D>()};
  template <class D>
  static constexpr Ops kHeapOps = {[](void* p) { (**static_cast<D**>(p))(); },
                                   [](void* from, void* to) { *static_cast<D**>(to) = *static_cast<D**>(from); },
                                   [](void* p) { delete *static_cast<D**>(p); }, nullptr};

  void take(Callback& o) {
    if (!o.ops_) return;
    o.ops_->move(o.buf_, buf_);
    ops_ = o.ops_;
    o.ops_ = nullptr;
  }
  void reset() {
    if (ops_) ops_->destroy(buf_);
    ops_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char buf_[kInline];
  const Ops* ops_ = nullptr;
};

// Names one scheduled event for cancel(). seq 0 names nothing.
struct EventId {
  uint64_t seq = 0;
  uint32_t slot = 0;
  explicit operator bool() const { return seq != 0; }
};

struct EventLoopStats {
  uint64_t scheduled = 0;
  uint64_t run = 0;
  uint64_t cancelled = 0;
  size_t max_pending = 0;
};

class EventLoop {
 public:
  EventLoop() = default;
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  Nanos now() const { return now_; }

  // Schedules fn at t. A time in the past means now: the event runs after
  // those already queued for now, never before the clock. fn may schedule
  // and cancel events, but must not destroy the loop.
  EventId at(Nanos t, Callback fn);
  EventId after(Nanos delay, Callback fn) { return at(now_ + delay, std::move(fn)); }
  // Returns false when the event already ran or was cancelled.
  bool cancel(EventId id);

  // Runs every event due at or before t, then sets the clock to t. Returns
  // false when stop() cut the run short.
  bool run_until(Nanos t);
  // Runs events until none is left or the next is after limit. Returns true
  // when the loop went idle (the clock stays at the last event); false when
  // events remain past limit (the clock is then at limit) or on stop().
  bool run_until_idle(Nanos limit = kNever);
  // Runs the next event, if any.
  bool step();
  // Makes the running run_until*() return after the current event.
  void stop() { stop_ = true; }
  // Moves the clock to t without running anything; nothing may be due
  // before t. Loops run side by side meet at a common time this way.
  void advance(Nanos t);

  size_t pending() const { return live_; }
  Nanos next_time() const;
  const EventLoopStats& stats() const { return stats_; }

 private:
  // A calendar of one-nanosecond buckets covers [now, now + kWheel): most
  // events (frame arrivals, a hop or a queue ahead) land there, and taking
  // or adding one is O(1). A binary heap of a million pending events cost a
  // cache miss per level and was most of a large run's time. Later events
  // wait in a heap and move into the calendar as the clock comes within
  // kWheel of them, before anything scheduled at the new time runs, so each
  // bucket stays in insertion (seq) order.
  static constexpr unsigned kWheelBits = 17;  // 131 us: a 1 MB queue at 100 Gb/s is 84 us
  static constexpr Nanos kWheel = Nanos(1) << kWheelBits;
  static constexpr uint32_t kNone = ~0u;

  struct Entry {  // a far event, in the heap
    Nanos t;
    uint64_t seq;
    uint32_t slot;
  };
  // Callbacks live in reusable slots; a calendar event is a node of its
  // bucket's doubly linked list, so cancel() unlinks it in O(1). A far event
  // cancelled leaves a stale heap entry (its seq no longer matches the
  // slot's) that is skipped.
  struct Slot {
    Callback fn;
    Nanos t = 0;
    uint64_t seq = 0;
    uint32_t prev = kNone, next = kNone;
    bool in_calendar = false;
  };
  struct Bucket {
    uint32_t head = kNone, tail = kNone;
  };

  // Slots live in fixed chunks so they never move: an event runs in its slot,
  // and whatever it schedules cannot relocate it (moving every callback out
  // before the call was an indirect call and a copy per event).
  static constexpr unsigned kChunkBits = 12;
  Slot& slot_at(uint32_t slot) { return chunks_[slot >> kChunkBits][slot & ((1u << kChunkBits) - 1)]; }
  const Slot& slot_at(uint32_t slot) const { return chunks_[slot >> kChunkBits][slot & ((1u << kChunkBits) - 1)]; }
  uint32_t alloc_slot();
  void free_slot(uint32_t slot);
  void link(uint32_t slot);  // appends to the bucket of slot_at(slot).t
  void unlink(uint32_t slot);
  // The earliest non-empty bucket's time, or kNever.
  Nanos first_in_calendar() const;
  // After now_ moved: far events now within kWheel join the calendar.
  void pull_far();
  void drop_stale_far();
  // How many events ahead of the one running prefetch() stage i is asked
  // of, and a slot is loaded. An event may take only a few dozen
  // nanoseconds, less than a load from memory, so the stages are spaced.
  static constexpr std::array<unsigned, 3> kStageDistance = {4, 2, 1};
  static constexpr unsigned kSlotDistance = 6;
  void prefetch_after(uint32_t next) const;
  uint32_t head_after(Nanos t) const;
  // Runs the earliest event if it is due at or before limit.
  bool run_next(Nanos limit);

  Nanos now_ = 0;
  uint64_t next_seq_ = 1;
  size_t live_ = 0;
  bool stop_ = false;
  std::vector<Bucket> buckets_ = std::vector<Bucket>(kWheel);
  std::vector<uint64_t> occupied_ = std::vector<uint64_t>(kWheel / 64);  // bit per non-empty bucket
  size_t in_calendar_ = 0;
  std::vector<Entry> far_;  // min-heap on (t, seq); invariant: empty or the top is live
  std::vector<std::unique_ptr<Slot[]>> chunks_;
  uint32_t slot_count_ = 0;  // slots ever made
  std::vector<uint32_t> free_slots_;
  EventLoopStats stats_;
};

// Events for a loop that another thread runs: kept here by the thread that
// posts them until the two meet, then scheduled there in the order posted.
// Posts go to the open batch. Between windows, close_window() seals it, so
// that in the next window the receiving thread may take the sealed batch
// (deliver_closed_to) while the sender posts to a new one.
class Mailbox {
 public:
  void post(Nanos t, Callback fn) {
    Batch& b = batch_[open_];
    b.earliest = std::min(b.earliest, t);
    b.items.emplace_back(t, std::move(fn));
  }
  // Everything not yet delivered.
  Nanos earliest() const { return std::min(batch_[0].earliest, batch_[1].earliest); }
  // The sealed batch must have been delivered.
  void close_window();
  // Schedules every event not yet delivered, in the order posted; each must
  // be due no sooner than the loop's clock.
  void deliver_to(EventLoop& loop);
  // Only the sealed batch, which no thread is posting to.
  void deliver_closed_to(EventLoop& loop) { deliver(batch_[open_ ^ 1], loop); }

 private:
  struct Batch {
    std::vector<std::pair<Nanos, Callback>> items;
    Nanos earliest = kNever;
  };
  static void deliver(Batch& b, EventLoop& loop);
  Batch batch_[2];
  unsigned open_ = 0;
};

}  // namespace mrc::sim
