// Merging ranks' times of one call: see merge.h.
#include "engine/merge.h"

#include <algorithm>

namespace autoccl::engine {

// ------------------------------------------------------------------------------ RankMerge

void RankMerge::setSink(Sink sink, UntimedSink untimed) {
  std::lock_guard<std::mutex> lk(mu_);
  sink_ = std::move(sink);
  untimedSink_ = std::move(untimed);
}

void RankMerge::untimed(const TaskKey& task, int rank, uint64_t call) {
  if (rank < 0 || rank >= nRanks_) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (pending_.erase(Key{task, call})) ++dropped_;
  if (untimedSink_) untimedSink_(task, call);
}

void RankMerge::add(const TaskKey& task, int rank, const Measurement& m) {
  if (rank < 0 || rank >= nRanks_) return;
  std::lock_guard<std::mutex> lk(mu_);
  Key key{task, m.callIndex};
  auto [it, fresh] = pending_.try_emplace(key);
  Pending& p = it->second;
  if (fresh) order_.push_back(key);
  const uint64_t bit = uint64_t{1} << rank;
  if (p.ranks & bit) return;
  p.ranks |= bit;
  double longest = std::max(p.count ? p.m.gpuUs : 0.0, m.gpuUs);
  const double authorityAlt = rank == 0 ? m.altUs : p.haveAuthority ? p.m.altUs : 0.0;
  if (p.count == 0 || (rank == 0 && !p.haveAuthority)) p.m = m;  // metadata: rank 0's, else the first
  p.haveAuthority = p.haveAuthority || rank == 0;
  p.m.gpuUs = longest;
  // The second measure (the kernel window, beside the stream period) is the authority's own. NCCL's group
  // launch in one process starts rank 0's kernel last, so its window waits for no peer's launch, which
  // timing lengthens with the channel count (reduce_scatter 16 MiB on 4 x H200, NCCL's 64-channel choice:
  // median windows 53/64/75/89 us on ranks 0-3, ring/simple/20 57 on every rank; of the calls whose windows
  // differed by > 15 %, rank 0's was the shortest in 97 % for all_gather, reduce_scatter and broadcast,
  // benchmarks/results/h200x4/window-vs-period). Another rank's window never counts: a rank does not
  // decide by its own measurements.
  p.m.altUs = authorityAlt;
  if (++p.count == nRanks_) {
    Measurement done = p.m;
    pending_.erase(it);
    ++merged_;
    if (sink_) sink_(task, done);
  }
  while (order_.size() > kMaxPending) {  // bounded: forget the oldest calls still waiting for a rank
    if (pending_.erase(order_.front())) ++dropped_;
    order_.pop_front();
  }
}

uint64_t RankMerge::merged() const {
  std::lock_guard<std::mutex> lk(mu_);
  return merged_;
}

uint64_t RankMerge::dropped() const {
  std::lock_guard<std::mutex> lk(mu_);
  return dropped_;
}

// ------------------------------------------------------------------------------ ArrivalMerge

ArrivalMerge::ArrivalMerge(int nRanks, Clock clock)
    : reporters_(std::max(1, std::min(nRanks, kReportRanks))), clock_(std::move(clock)), startMs_(clock_()) {}

bool ArrivalMerge::completeLocked(const Pending& p, uint64_t now) const {
  if (!p.haveOwn) return false;
  for (int r = 1; r < reporters_; ++r) {
    if (p.ranks & (uint64_t{1} << r)) continue;
    // A rank silent for kSilentMs (a process that does not report: other settings, or gone) is not waited
    // for, so that it cannot hold every call kWaitMs; it counts again from its next report.
    const uint64_t heard = heardMs_[static_cast<size_t>(r)] ? heardMs_[static_cast<size_t>(r)] : startMs_;
    if (now - heard < kSilentMs) return false;
  }
  return true;
}

void ArrivalMerge::setSink(Sink sink, UntimedSink untimed) {
  std::lock_guard<std::mutex> lk(mu_);
  sink_ = std::move(sink);
  untimedSink_ = std::move(untimed);
}

void ArrivalMerge::own(const TaskKey& task, const Measurement& m) {
  std::lock_guard<std::mutex> lk(mu_);
  Key key{task, m.callIndex};
  auto [it, fresh] = pending_.try_emplace(key);
  Pending& p = it->second;
  if (fresh) {
    order_.push_back(key);
    p.firstAtMs = clock_();
  }
  if (p.haveOwn) return;
  p.haveOwn = true;
  p.ownAtMs = clock_();
  p.m = m;
  p.ranks |= 1;
  if (completeLocked(p, p.ownAtMs)) {
    deliverLocked(key, p);
    pending_.erase(it);
  }
  flushLocked();
}

void ArrivalMerge::ownUntimed(const TaskKey& task, uint64_t call) {
  std::lock_guard<std::mutex> lk(mu_);
  pending_.erase(Key{task, call});
}

void ArrivalMerge::other(const TaskKey& task, int rank, uint64_t call, double us) {
  if (rank <= 0 || rank >= reporters_) return;  // rank 0's own time comes through own()
  std::lock_guard<std::mutex> lk(mu_);
  Key key{task, call};
  auto [it, fresh] = pending_.try_emplace(key);
  Pending& p = it->second;
  if (fresh) {
    order_.push_back(key);
    p.firstAtMs = clock_();
  }
  const uint64_t now = clock_();
  heardMs_[static_cast<size_t>(rank)] = std::max<uint64_t>(now, 1);
  const uint64_t bit = uint64_t{1} << rank;
  if (p.ranks & bit) return;
  p.ranks |= bit;
  if (us >= 0) {
    ++p.reports;
    if (p.shortestOther < 0 || us < p.shortestOther) p.shortestOther = us;
  }
  if (completeLocked(p, now)) {
    deliverLocked(key, p);
    pending_.erase(it);
  }
  flushLocked();
}

void ArrivalMerge::flush() {
  std::lock_guard<std::mutex> lk(mu_);
  flushLocked();
}

void ArrivalMerge::deliverLocked(const Key& key, Pending& p) {
  Measurement m = p.m;
  m.rankReports = p.reports;
  // Windows differ by arrival (the wait of early ranks, which is not the collective's cost) and by the
  // algorithm's own asymmetry (which is): tree/simple all_reduce 16 MiB on 2 x H200 in nccl-tests had rank
  // 0's windows at 88 us and rank 1's at 63 us on every call and held the stream 94 us per call against
  // NCCL's ring with 75/73 us windows and 80 us; scored by rank 1's window, with the period lowered alike,
  // tree/simple was pinned and the cell ran 0.85x plain NCCL. The two cannot be told apart per
  // call, so only an excess of the authority's window over the shortest beyond kAsymmetry of the shortest
  // is taken for a wait (the largest asymmetry seen there: 0.65, tree/simple/18 at 8 MiB); inside training
  // rank 0 waited up to 20x the transfer. Capping the excess at kAsymmetry instead (a wait counted up to
  // 1.7x) mixed capped and uncapped samples: 15 of 16 emulator runs with 2-5 ms of skew pinned off the best.
  if (p.shortestOther >= 0 && m.gpuUs - p.shortestOther > kAsymmetry * p.shortestOther) {
    // The authority waited (its window minus the shortest) inside its window, so inside its stream
    // period too: the period the call would have held had the authority arrived last is shorter by that.
    const double waited = m.gpuUs - p.shortestOther;
    if (m.altUs > 0) m.altUs = std::max(m.altUs - waited, p.shortestOther);
    m.gpuUs = p.shortestOther;
    m.shorterElsewhere = true;
  }
  if (sink_) sink_(key.task, m);
}

void ArrivalMerge::flushLocked() {
  // Bounded: beyond kMaxPending calls the oldest go (given up).
  while (order_.size() > kMaxPending) {
    auto it = pending_.find(order_.front());
    if (it != pending_.end()) {
      if (it->second.haveOwn && untimedSink_) untimedSink_(it->first.task, it->first.call);
      pending_.erase(it);
    }
    order_.pop_front();
  }
  const uint64_t now = clock_();
  if (now == lastScanMs_) return;  // one scan per millisecond at most
  lastScanMs_ = now;
  // A call waits at most kWaitMs after the authority's time for the other ranks, then is given up; reports
  // of a call whose own time never came (lost without an untimed notice) are forgotten after kOrphanMs.
  for (auto q = order_.begin(); q != order_.end();) {
    auto it = pending_.find(*q);
    if (it == pending_.end()) {  // delivered when complete
      q = order_.erase(q);
      continue;
    }
    Pending& p = it->second;
    const bool complete = completeLocked(p, now);
    const bool overdue = p.haveOwn ? now - p.ownAtMs >= kWaitMs : now - p.firstAtMs >= kOrphanMs;
    if (!complete && !overdue) {
      ++q;
      continue;
    }
    if (complete) deliverLocked(it->first, p);
    else if (p.haveOwn && untimedSink_) untimedSink_(it->first.task, it->first.call);
    pending_.erase(it);
    q = order_.erase(q);
  }
}

}  // namespace autoccl::engine
