#include "engine/timing_holds.h"

#include <algorithm>

namespace autoccl::engine {

void TimingHolds::want(Task* t, bool on) {
  if (on && std::find(holders_.begin(), holders_.end(), t) == holders_.end()) holders_.push_back(t);
  if (on == t->needing.load(std::memory_order_relaxed)) return;
  set(t, on);
}

void TimingHolds::settled(Task* t) {
  if (t->needing.load(std::memory_order_relaxed)) {
    set(t, false);
    return;
  }
  bool changed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    changed = dropStartLocked(true);  // only the start holds timing
  }
  notify(changed);
}

void TimingHolds::releaseStart() {
  bool changed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    changed = dropStartLocked(false);
  }
  notify(changed);
}

void TimingHolds::set(Task* t, bool on) {
  bool changed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (on == t->needing.load(std::memory_order_relaxed)) return;
    t->needing.store(on, std::memory_order_relaxed);
    changed = on ? needing_.fetch_add(1) == 0 : needing_.fetch_sub(1) == 1;
    if (!on) changed = dropStartLocked(true) || changed;  // only the start is left: release it
  }
  notify(changed);
}

bool TimingHolds::dropStartLocked(bool onlyIfLast) {
  if (!start_ || (onlyIfLast && needing_.load() != 1)) return false;
  start_ = false;
  return needing_.fetch_sub(1) == 1;
}

// A task that needs timing (tuning, a check, the calls just before one) and then is not called for a while
// would keep every call of the process timed until its next call: nccl-tests times all other sizes in between,
// a training step all other tasks, and a size seen only in a warm-up may never come back (nccl-tests -f 4 warms
// up sizes it never times: one process for 4 GPUs then ran every call of every pass timed, all_reduce 4 MiB at
// 88-129 us per call against plain NCCL's 43). Once kIdleCalls calls of other tasks have passed, it lets go;
// its next call asks again (that call may go untimed: NCCL reads the mask when a group starts; the search gives
// such a sample up after reorderSlack calls).
// - A task still searching with samples in flight holds on longer (kIdleCallsHard): its next call is likely a
//   sample too (the emulator's warm start lost a verification sample and took 72 calls instead of 36 when it
//   let go at once).
// - So does a searching task that comes back every few calls (a training step's collectives), for one such
//   gap: FSDP2 on 2 x H200 called its 420 MB reduce_scatter once per step, 74 calls apart; let go after 16 with
//   its sample delivered, rank 0 lost the next sample every time, 62 of 132. nccl-tests calls one size back to
//   back (gap 0), so there nothing changes.
// - A pinned task lets go after kIdleCalls: its check's events come anyway.
// - A task last called back to back (gap 0) with its samples in hand lets go after kIdleCallsAfterRun: that is
//   nccl-tests moving to the next size, whose loop the 16 calls timed (15 of the 40 timed calls of every 1 MiB
//   loop on 2 x H200 with -w 200, one process per GPU: 0.78-0.80x).
bool TimingHolds::keeps(const Task& h, Activity what) const {
  const uint64_t idle = calls_ - h.lastCallSeen;
  const uint64_t patience = h.lastGap == 0 ? kIdleCallsAfterRun : kIdleCalls;
  if (idle < patience) return true;
  if (what == Activity::kSampling && idle < kIdleCallsHard) return true;
  const bool searching = what != Activity::kSettled;
  return searching && h.lastGap < kIdleCallsHard && idle < h.lastGap + patience;  // periodic
}

}  // namespace autoccl::engine
