// The authority's Decider backed by the online search: the engine's bridge between the coordinator (which
// agrees on plans and knows nothing of how they are made) and csrc/search, which know nothing of each other.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "autoccl/coord/coord.h"
#include "autoccl/search/search.h"

namespace autoccl::engine {

// A Decider backed by one search::TaskSearch per task. Tasks the authority has not registered yet
// get NCCL's default for a short while (windows of 1, 2, 4, ... up to `window` calls past the call asked);
// registerTask() then starts the search right after what was already published, counting those calls'
// samples as NCCL's baseline (search::Options::defaultTimedBefore). A rank asks for the segment after its last
// when that one begins (OnlineSource::newSegment), so a rank ahead of the authority doubles the window one
// window early.
class SearchDecider : public coord::Decider {
 public:
  static constexpr uint64_t kDefaultWindow = 16;
  // `chargeWaits`: chargeWait() counts waits (AUTOCCL_WAIT_REGRET on); false ignores every wait.
  explicit SearchDecider(uint64_t window = kDefaultWindow, bool chargeWaits = false)
      : window_(window), chargeWaits_(chargeWaits) {}
  // Creates the task's search (if new) starting after the calls already decided for it.
  std::shared_ptr<search::TaskSearch> registerTask(const coord::TaskKey& task, const search::Space& space,
                                                   search::Options opt = search::Options(),
                                                   std::vector<search::Hint> hints = {});
  std::shared_ptr<search::TaskSearch> find(const coord::TaskKey& task);
  std::vector<Segment> decide(const coord::TaskKey& task, uint64_t k, uint64_t coveredUpTo) override;
  // A question leading its rank's plain one by `ahead` calls (TaskSearch::segmentFor's `ahead`).
  std::vector<Segment> decideAhead(const coord::TaskKey& task, uint64_t k, uint64_t coveredUpTo,
                                   uint64_t ahead) override;
  // A rank waited `micros` for its lookup of call k of `task`: charged to the task's search
  // (TaskSearch::chargeWait) as the longest wait of any rank at that call, since the ranks wait for the same plan
  // at the same time, and at most kMaxChargedWaitUs: a longer wait is a stall (a lost frame resent, a reconnect, a
  // descheduled thread), not what exploring costs each time. Waits of a task the authority has not registered, and
  // those the search does not count (TaskSearch::chargeWait), are not recorded.
  static constexpr double kMaxChargedWaitUs = 5000.0;
  void chargeWait(const coord::TaskKey& task, uint64_t k, double micros);
  // What a task runs before the authority registers it, untimed: table mode's answer for it (its search then pins
  // the same, search::Options::pinExactHint), so that every rank applies the table from the task's first call.
  // Unset: NCCL's default, timed (the search's baseline). Set before the board serves.
  void setPreConfig(std::function<Config(const coord::TaskKey&)> preConfig) { preConfig_ = std::move(preConfig); }

 private:
  struct Entry {
    std::vector<Segment> pre;  // NCCL's default, handed out before the task was registered
    std::shared_ptr<search::TaskSearch> search;
    std::map<uint64_t, double> waits;  // the longest wait charged per call, the latest kWaitCallsKept calls
  };
  static constexpr size_t kWaitCallsKept = 64;
  std::mutex mu_;
  std::map<coord::TaskKey, Entry> tasks_;
  uint64_t window_;
  bool chargeWaits_;
  std::function<Config(const coord::TaskKey&)> preConfig_;
};

}  // namespace autoccl::engine
