// How the authority scores a call from several ranks' times: every rank in this process (RankMerge), or
// ranks in several processes reporting over the coordinator (ArrivalMerge).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/common.h"
#include "engine/timing.h"

namespace autoccl::engine {

// Every rank of a communicator in this process (nccl-tests -g N, single-process multi-GPU): one host
// thread launches the GPUs one after another, so one rank's kernel time is not the collective's (on
// 4 x H200 a 1 MiB reduce took 3.8 us on rank 0 and 30 us on rank 3 in the same call, and scoring
// rank 0's alone picked configurations that lengthened the collective). The authority scores call k by
// the longest kernel among the ranks, known once each rank's time for k has arrived; its second measure
// (Measurement::altUs, the window beside the stream period) is rank 0's own (RankMerge::add says why).
// Calls some rank never timed (the mask switched between ranks' launches) are dropped after kMaxPending
// newer calls.
class RankMerge {
 public:
  using Sink = std::function<void(const TaskKey&, const Measurement&)>;
  using UntimedSink = std::function<void(const TaskKey&, uint64_t call)>;
  static constexpr size_t kMaxPending = 4096;
  explicit RankMerge(int nRanks) : nRanks_(nRanks) {}
  // The authority's handler of merged measurements (nullptr: none; samples are then dropped). It is
  // called under this object's lock, so it is never running once setSink(nullptr) has returned.
  void setSink(Sink sink, UntimedSink untimed = nullptr);
  // Rank `rank`'s GPU time of call m.callIndex of `task`. A duplicate from one rank is ignored.
  void add(const TaskKey& task, int rank, const Measurement& m);
  // Rank `rank` ran call `call` of `task` untimed: that call can never be merged. Its waiting times are
  // dropped and the untimed sink is told at once (the search would otherwise wait for it).
  void untimed(const TaskKey& task, int rank, uint64_t call);
  uint64_t merged() const;   // calls delivered to the sink
  uint64_t dropped() const;  // calls evicted incomplete

 private:
  using Key = CallKey;
  using KeyHash = CallKeyHash;
  struct Pending {
    uint64_t ranks = 0;  // bit r: rank r's time is in
    int count = 0;
    bool haveAuthority = false;
    Measurement m;       // rank 0's report (metadata) with the longest GPU time so far
  };
  mutable std::mutex mu_;
  int nRanks_;
  Sink sink_;
  UntimedSink untimedSink_;
  std::unordered_map<Key, Pending, KeyHash> pending_;
  std::deque<Key> order_;  // arrival order of pending_ keys (may hold keys already merged)
  uint64_t merged_ = 0, dropped_ = 0;
};

// A communicator whose ranks are in several processes (TCP board, AUTOCCL_XPROC_SCORE=shortest): the
// authority scores call k by the shortest kernel window among the first kReportRanks ranks. A rank's
// window runs from its own arrival to the collective's end, so an early rank's includes its wait for the
// others and only the last to arrive measures the collective alone. Inside training that wait dominates:
// rank 0's window of a 25 MB all_gather (FSDP2, 2 x H200) had a median of 1.2-1.5 ms against a 60 us
// transfer, and the search compared waits (benchmarks/results/h200x2/fsdp2-training).
// The other ranks' windows come over the board (Board::report -> Decider::observe). A call is delivered
// once every reporting rank has answered; one still missing a report kWaitMs after the authority's own
// time is given up as untimed (scored by fewer ranks it could carry the wait of the rank that was lost:
// in an emulator run with 2 ms rank skew and 5 % of frames dropped, such calls made 1 run in 3 pin a
// configuration 4 % off the best). A rank silent for kSilentMs is not waited for until it reports again.
// Only scores change; decisions are still the authority's alone.
class ArrivalMerge {
 public:
  using Sink = std::function<void(const TaskKey&, const Measurement&)>;
  using UntimedSink = std::function<void(const TaskKey&, uint64_t call)>;
  static constexpr int kReportRanks = 16;  // ranks 0..15 report: bounds the authority's inbound traffic
  static constexpr uint64_t kWaitMs = 50;
  static constexpr uint64_t kOrphanMs = 1000;
  static constexpr uint64_t kSilentMs = 2000;
  static constexpr double kAsymmetry = 0.7;  // see deliverLocked
  static constexpr size_t kMaxPending = 4096;
  using Clock = std::function<uint64_t()>;  // milliseconds, monotonic (tests pass their own)
  ArrivalMerge(int nRanks, Clock clock);
  // The authority's handlers of scored calls and of calls given up (nullptr: none). Called under this
  // object's lock, so never running once setSink(nullptr) has returned.
  void setSink(Sink sink, UntimedSink untimed = nullptr);
  // The authority's own timed call (gpuUs: its window).
  void own(const TaskKey& task, const Measurement& m);
  // The authority's call ran untimed: nothing to score it by (its metadata is missing; the caller gives
  // the sample up itself).
  void ownUntimed(const TaskKey& task, uint64_t call);
  // Rank `rank`'s window of call `call` (us < 0: it ran untimed there). Duplicates are ignored.
  void other(const TaskKey& task, int rank, uint64_t call, double us);
  // Delivers calls whose wait is over (also done by own() and other()).
  void flush();
  int reporters() const { return reporters_; }

 private:
  using Key = CallKey;
  using KeyHash = CallKeyHash;
  struct Pending {
    uint64_t ranks = 0;  // bit r: rank r answered
    bool haveOwn = false;
    uint64_t ownAtMs = 0;
    uint64_t firstAtMs = 0;
    double shortestOther = -1;  // shortest window reported by another rank (-1: none)
    uint32_t reports = 0;       // other ranks' windows received
    Measurement m;
  };
  bool completeLocked(const Pending& p, uint64_t now) const;
  void deliverLocked(const Key& key, Pending& p);
  void flushLocked();
  std::mutex mu_;
  int reporters_;
  Clock clock_;
  uint64_t startMs_;
  uint64_t heardMs_[kReportRanks] = {};  // last report per rank (0: none yet)
  Sink sink_;
  UntimedSink untimedSink_;
  std::unordered_map<Key, Pending, KeyHash> pending_;
  std::list<Key> order_;  // first-seen order of pending_ keys (may hold keys already delivered)
  uint64_t lastScanMs_ = ~0ULL;
};

}  // namespace autoccl::engine
