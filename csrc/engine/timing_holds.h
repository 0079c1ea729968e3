// Which calls of a communicator run timed: the count of holds that the profiler's activation mask follows (on
// while any task, or the start, holds timing), and when a task that stopped being called lets go.
//
// NCCL reads the mask when a group starts, so timing must be on before the call that needs it, and every call
// of the process runs timed while it is on: a timed call costs the caller 20-45 % at 1-4 MiB
// (benchmarks/results/h100x2/plugin-overhead). Holds are therefore taken for as few calls as the search needs
// and given back by counting the calls of other tasks (releaseIdle).
//
// Threads: the enqueue thread takes, gives back and counts; `needed()` is read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace autoccl::engine {

class TimingHolds {
 public:
  static constexpr uint64_t kNoGap = ~uint64_t{0};
  // Calls of other tasks after which an idle holder lets go: a pinned task (its check's events come anyway),
  // a task last called back to back (nccl-tests moving to the next size), a task with a sample in flight.
  static constexpr uint64_t kIdleCalls = 16, kIdleCallsAfterRun = 4, kIdleCallsHard = 256;

  // A task's part (owned by the caller's task state).
  struct Task {
    std::atomic<bool> needing{false};  // changed under the holds' mutex only
    uint64_t lastCallSeen = 0;         // the call count at this task's latest call
    uint64_t lastGap = kNoGap;         // calls of other tasks between its last two calls
  };

  // What a holder is doing, as the release rule needs it (releaseIdle's `classify`).
  enum class Activity {
    kSettled,    // not searching (pinned, a check, NCCL's choice)
    kSearching,  // searching, no sample in flight
    kSampling,   // searching, a planned sample not delivered yet
  };

  // `changed`: called (outside the lock) when the need switches between none and some.
  explicit TimingHolds(std::function<void()> changed) : changed_(std::move(changed)) {}

  // Timing on from the start, before any task asks (no notification: the mask is read at init).
  void holdFromStart() {
    std::lock_guard<std::mutex> lk(mu_);
    if (start_) return;
    start_ = true;
    needing_.fetch_add(1);
  }

  bool needed() const { return needing_.load(std::memory_order_relaxed) > 0; }
  bool hasHolders() const { return !holders_.empty(); }

  // A call of task `t`; `countOther`: a call of a task that holds nothing and is not tracked (a settled one).
  void countCall(Task* t) {
    ++calls_;
    t->lastGap = t->lastCallSeen ? calls_ - t->lastCallSeen - 1 : kNoGap;
    t->lastCallSeen = calls_;
  }
  void countOther() { ++calls_; }
  // Calls of all tasks since `t`'s latest.
  uint64_t callsSince(const Task& t) const { return calls_ - t.lastCallSeen; }

  // Task `t` wants timing on (or no longer does) from its next call.
  void want(Task* t, bool on);
  // `t` settled for good: its hold goes; with none, the start's hold goes if it is the only one left.
  void settled(Task* t);
  // The start's hold goes, whatever else holds.
  void releaseStart();

  // Holders other than `current` that have been idle long enough let go. `classify(const Task&)` says what
  // each holder is doing (Activity).
  template <class Classify>
  void releaseIdle(const Task* current, Classify&& classify) {
    for (size_t i = 0; i < holders_.size();) {
      Task* h = holders_[i];
      if (h->needing.load(std::memory_order_relaxed)) {  // still holding
        if (h == current || keeps(*h, classify(static_cast<const Task&>(*h)))) {
          ++i;
          continue;
        }
        set(h, false);
      }
      holders_[i] = holders_.back();
      holders_.pop_back();
    }
  }

  // The release rule alone: whether idle holder `h` doing `what` keeps its hold now.
  bool keeps(const Task& h, Activity what) const;

 private:
  void set(Task* t, bool on);
  // Under mu_: the start's hold goes (if `onlyIfLast`, only when it is the last hold left); whether the need
  // fell to none.
  bool dropStartLocked(bool onlyIfLast);
  void notify(bool changed) {
    if (changed && changed_) changed_();
  }

  std::function<void()> changed_;
  std::mutex mu_;  // transitions (rare): Task::needing, needing_, start_
  std::atomic<int> needing_{0};
  bool start_ = false;           // the start's hold (guarded by mu_)
  uint64_t calls_ = 0;           // enqueue thread: calls of all tasks so far
  std::vector<Task*> holders_;   // enqueue thread: tasks that asked for timing
};

}  // namespace autoccl::engine
