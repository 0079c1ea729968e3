// Which calls run timed (engine/timing_holds.h): the start's hold, the tasks' holds, and when an idle holder
// lets go.
#include <cstdint>

#include <gtest/gtest.h>

#include "engine/timing_holds.h"

namespace {

using autoccl::engine::TimingHolds;
using Activity = TimingHolds::Activity;

struct Holds {
  int changes = 0;
  TimingHolds h{[this] { ++changes; }};
};

// `n` calls of task `t`, back to back.
void calls(TimingHolds& h, TimingHolds::Task* t, int n) {
  for (int i = 0; i < n; ++i) h.countCall(t);
}

// Calls of other tasks until `t` lets go; how many that took (capped at `limit`).
int callsUntilReleased(TimingHolds& h, TimingHolds::Task* t, Activity what, int limit = 1000) {
  TimingHolds::Task other;
  for (int i = 1; i <= limit; ++i) {
    h.countCall(&other);
    h.releaseIdle(&other, [&](const TimingHolds::Task& x) { return &x == t ? what : Activity::kSettled; });
    if (!t->needing.load()) return i;
  }
  return limit + 1;
}

TEST(engine, timing_holds_start_goes_with_the_first_settled_task) {
  Holds s;
  s.h.holdFromStart();
  EXPECT_TRUE(s.h.needed());
  TimingHolds::Task a;
  s.h.countCall(&a);
  s.h.settled(&a);  // settled at its first call, holding nothing: the start is the only hold left
  EXPECT_FALSE(s.h.needed());
  EXPECT_EQ(s.changes, 1);
}

TEST(engine, timing_holds_start_stays_while_a_task_holds) {
  Holds s;
  s.h.holdFromStart();
  TimingHolds::Task a, b;
  s.h.want(&a, true);
  s.h.settled(&b);  // a still holds: the start's hold stays too
  EXPECT_TRUE(s.h.needed());
  s.h.want(&a, false);  // the last task's hold goes, and the start's with it
  EXPECT_FALSE(s.h.needed());
  EXPECT_EQ(s.changes, 1);  // never off before, so the one switch is to off
  s.h.want(&b, true);
  EXPECT_TRUE(s.h.needed());
  EXPECT_EQ(s.changes, 2);
}

TEST(engine, timing_holds_release_start_is_unconditional) {
  Holds s;
  s.h.holdFromStart();
  TimingHolds::Task a;
  s.h.want(&a, true);
  s.h.releaseStart();
  EXPECT_TRUE(s.h.needed());  // a's hold
  s.h.want(&a, false);
  EXPECT_FALSE(s.h.needed());
  s.h.releaseStart();  // twice: nothing left to release
  EXPECT_FALSE(s.h.needed());
}

TEST(engine, timing_holds_idle_release_rule) {
  {  // called back to back (nccl-tests' loop), then the next size: lets go after 4 calls
    Holds s;
    TimingHolds::Task t;
    calls(s.h, &t, 10);
    s.h.want(&t, true);
    EXPECT_EQ(callsUntilReleased(s.h, &t, Activity::kSettled), 4);
  }
  {  // the same while searching with its samples in hand: still 4
    Holds s;
    TimingHolds::Task t;
    calls(s.h, &t, 10);
    s.h.want(&t, true);
    EXPECT_EQ(callsUntilReleased(s.h, &t, Activity::kSearching), 4);
  }
  {  // a sample in flight: holds for 256
    Holds s;
    TimingHolds::Task t;
    calls(s.h, &t, 10);
    s.h.want(&t, true);
    EXPECT_EQ(callsUntilReleased(s.h, &t, Activity::kSampling), 256);
  }
  {  // a pinned task called every 74 calls (a training step): lets go after 16
    Holds s;
    TimingHolds::Task t, other;
    s.h.countCall(&t);
    for (int i = 0; i < 74; ++i) s.h.countCall(&other);
    s.h.countCall(&t);
    EXPECT_EQ(t.lastGap, 74u);
    s.h.want(&t, true);
    EXPECT_EQ(callsUntilReleased(s.h, &t, Activity::kSettled), 16);
  }
  {  // the same task searching: waits out one gap and the patience (74 + 16)
    Holds s;
    TimingHolds::Task t, other;
    s.h.countCall(&t);
    for (int i = 0; i < 74; ++i) s.h.countCall(&other);
    s.h.countCall(&t);
    s.h.want(&t, true);
    EXPECT_EQ(callsUntilReleased(s.h, &t, Activity::kSearching), 90);
  }
  {  // first seen once (no gap yet): 16
    Holds s;
    TimingHolds::Task t;
    s.h.countCall(&t);
    EXPECT_EQ(t.lastGap, TimingHolds::kNoGap);
    s.h.want(&t, true);
    EXPECT_EQ(callsUntilReleased(s.h, &t, Activity::kSearching), 16);
  }
}

TEST(engine, timing_holds_current_task_keeps_its_hold) {
  Holds s;
  TimingHolds::Task t, other;
  calls(s.h, &t, 3);
  s.h.want(&t, true);
  for (int i = 0; i < 300; ++i) s.h.countOther();
  s.h.releaseIdle(&t, [](const TimingHolds::Task&) { return Activity::kSettled; });
  EXPECT_TRUE(t.needing.load());  // the call being decided is its own
  s.h.releaseIdle(&other, [](const TimingHolds::Task&) { return Activity::kSettled; });
  EXPECT_FALSE(t.needing.load());
  EXPECT_FALSE(s.h.hasHolders());
  EXPECT_EQ(s.h.callsSince(t), 300u);
}

}  // namespace
