#include "engine/search_decider.h"

#include <algorithm>

namespace autoccl::engine {

std::shared_ptr<search::TaskSearch> SearchDecider::registerTask(const coord::TaskKey& task, const search::Space& space,
                                                                search::Options opt, std::vector<search::Hint> hints) {
  std::lock_guard<std::mutex> lk(mu_);
  Entry& e = tasks_[task];
  if (!e.search) {
    opt.firstCall = e.pre.empty() ? 0 : e.pre.back().end;
    opt.defaultTimedBefore = !e.pre.empty() && !preConfig_;  // pre segments: NCCL's default in kTuning (timed)
    e.search = std::make_shared<search::TaskSearch>(space, std::move(opt), std::move(hints));
  }
  return e.search;
}

std::shared_ptr<search::TaskSearch> SearchDecider::find(const coord::TaskKey& task) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = tasks_.find(task);
  return it == tasks_.end() ? nullptr : it->second.search;
}

void SearchDecider::chargeWait(const coord::TaskKey& task, uint64_t k, double micros) {
  if (!chargeWaits_ || !(micros > 0)) return;
  micros = std::min(micros, kMaxChargedWaitUs);
  std::lock_guard<std::mutex> lk(mu_);  // then the search's: nothing holds a search's lock and asks for this one
  auto it = tasks_.find(task);
  if (it == tasks_.end() || !it->second.search) return;
  Entry& e = it->second;
  auto w = e.waits.find(k);
  const double charged = w == e.waits.end() ? 0.0 : w->second;
  if (micros <= charged) return;
  if (w == e.waits.end() && e.waits.size() >= kWaitCallsKept && k < e.waits.begin()->first)
    return;  // older than every call kept: already charged, or too late to tell
  if (!e.search->chargeWait(micros - charged)) return;  // not counted (not exploring): not recorded either
  e.waits[k] = micros;
  if (e.waits.size() > kWaitCallsKept) e.waits.erase(e.waits.begin());
}

std::vector<Segment> SearchDecider::decide(const coord::TaskKey& task, uint64_t k, uint64_t coveredUpTo) {
  return decideAhead(task, k, coveredUpTo, 0);
}

std::vector<Segment> SearchDecider::decideAhead(const coord::TaskKey& task, uint64_t k, uint64_t coveredUpTo,
                                                uint64_t ahead) {
  std::shared_ptr<search::TaskSearch> s;
  std::vector<Segment> out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Entry& e = tasks_[task];
    uint64_t preEnd = e.pre.empty() ? 0 : e.pre.back().end;
    if (!e.search && preEnd <= k) {  // the authority has not seen this task yet: NCCL's default for a while
      // A while that doubles from 1 call up to window_: the authority usually comes within a few calls (a
      // rank a little ahead of rank 0), and the search starts only after them (with 16 calls from the start,
      // the demo's searches began at call 17 and some pinned only at call 158).
      const uint64_t w = std::min<uint64_t>(window_, uint64_t{1} << std::min<size_t>(e.pre.size(), 32));
      if (preConfig_)
        e.pre.push_back(Segment{preEnd, k + 1 + w, preConfig_(task), Phase::kPinned});
      else
        e.pre.push_back(Segment{preEnd, k + 1 + w, Config(), Phase::kTuning});
    }
    for (const Segment& g : e.pre)
      if (g.end > coveredUpTo) out.push_back(g);
    s = e.search;
  }
  if (!s) return out;
  s->segmentFor(k, ahead);  // extends the plan (k + lead) if needed
  for (const Segment& g : s->planAfter(coveredUpTo)) out.push_back(g);
  return out;
}

}  // namespace autoccl::coord
