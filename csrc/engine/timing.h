// Per-call GPU timing: matches profiler Coll events to the pending decisions of one (comm, rank)
// context and turns KernelCh start/stop timestamps into one duration per call.
//
// Why it looks like this:
//  * getCollInfo is called once per aggregated batch (nBytes = sum of the batch), but NCCL starts one
//    Coll event per task of the batch. Coll events are matched FIFO per collective, consuming the
//    pending decision's bytes; a batch is complete when all its bytes are matched and every matched
//    Coll's channels have stopped. Duration = max(stop) - min(start) over all channels of all its Colls.
//  * Coll events may be delivered from a CUDA host-callback thread, KernelCh events from the proxy
//    thread; all entry points lock one per-context mutex (never shared between contexts).
//  * Every decision is queued, even while the activation mask is off, so that a task whose Coll event
//    was suppressed leaves a gap in NCCL's per-function seqNumber: on a gap the matcher drops that many
//    unmatched head decisions instead of pairing a later Coll with an earlier call (off-by-one timing).
//    Exact for unaggregated calls; an aggregated batch that straddles a mask switch may still be
//    mismatched, which the forced (algo, proto) check catches whenever the configurations differ.
//  * Handles handed to NCCL stay valid until NCCL is done with them (Coll stopped and all its channels
//    stopped); records come from a per-context pool, so the steady state allocates nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/common.h"

namespace autoccl::engine {

struct Measurement {
  void* cookie = nullptr;   // the caller's task pointer given to pushDecision
  uint64_t callIndex = 0;
  uint64_t bytes = 0;
  Config applied;           // what the decision forced (algo/proto -1 = NCCL's choice)
  double gpuUs = 0;
  uint64_t startNs = 0;     // GPU clock (%globaltimer) of the earliest fresh channel start: gaps between calls
  uint64_t ordinal = 0;     // the decision's position among its communicator's calls (1-based; 0: unknown)
  double periodUs = 0;      // start to the next call's start when that call is ordinal + 1 (0: unknown)
  // > 0: the stream sat idle this long before the next call, longer than a host-bound launch explains (a
  // host pause: a synchronisation, a benchmark pass ending, a step boundary); periodUs is then 0.
  double hostPauseUs = 0;
  double altUs = 0;         // scoring: a second measure of the call (the window when gpuUs holds the period)
  int ncclAlgo = -1;        // what NCCL reported it used (first Coll of the batch)
  int ncclProto = -1;
  int ncclChannels = 0;
  uint32_t colls = 0;       // Coll events in the batch
  uint32_t channels = 0;    // KernelCh events (all Colls of the batch)
  double startSpreadUs = 0; // latest minus earliest channel start, stale ones included (diagnostic)
  uint32_t staleChannels = 0;  // channel starts left out of gpuUs as stale (see timing.cc)
  // ArrivalMerge (online, ranks in several processes): other ranks' windows merged into gpuUs, and
  // whether one of them was shorter than the authority's own (then gpuUs is that rank's).
  uint32_t rankReports = 0;
  bool shorterElsewhere = false;
  bool reportOnly = false;  // timed for a report alone (Decision::report): no sample of the task's
};

struct MatcherCounters {
  uint64_t decisions = 0, matchedColls = 0, unmatchedColls = 0, measurements = 0;
  uint64_t droppedGap = 0, droppedSkip = 0, droppedOverflow = 0, droppedMismatch = 0, collPoolFull = 0;
  uint64_t staleStarts = 0;  // channel starts left out of a duration as stale
};

class TimingMatcher {
 public:
  using Sink = std::function<void(const Measurement&)>;
  // A decision dropped because its call ran untimed (a seqNumber gap: the mask was off when it was
  // enqueued): (cookie, callIndex). Called under the matcher's lock: keep it short, never block.
  using UntimedSink = std::function<void(void* cookie, uint64_t callIndex)>;
  // queueCap: pending decisions kept per collective; maxRecords: Coll records in flight.
  explicit TimingMatcher(Sink sink, size_t queueCap = 1024, size_t maxRecords = 8192, UntimedSink untimed = nullptr);
  ~TimingMatcher();
  TimingMatcher(const TimingMatcher&) = delete;
  TimingMatcher& operator=(const TimingMatcher&) = delete;

  // Tuner side: the k-th call of a task was decided (bytes as getCollInfo saw them).
  void pushDecision(int coll, uint64_t bytes, const Config& applied, void* cookie, uint64_t callIndex,
                    uint64_t ordinal = 0, bool reportOnly = false);

  // Profiler side. collStart returns the handle to give NCCL (nullptr: not ours / not matched).
  // bytes must already be converted to getCollInfo's unit (see collBytes()). nChannels: NCCL's channel
  // count for the Coll; reporting: how many channel stops will come for it (KernelCh: nChannels; the launch
  // clock: 1; 0: none, the call ends untimed; -1: nChannels).
  void* collStart(int coll, uint64_t seq, uint64_t bytes, int nChannels, int algo, int proto, int reporting = -1);
  void* kernelChStart(void* collHandle, uint64_t startNs);
  // Dispatch on a handle from collStart/kernelChStart (both tolerate nullptr).
  static void kernelChStop(void* handle, uint64_t stopNs);
  static void eventStop(void* handle);

  MatcherCounters counters() const;
  size_t pending() const;

  // nBytes as getCollInfo sees it for a Coll event: elemBytes * count, times nRanks for
  // AllGather / ReduceScatter (NCCL's ncclFuncMaxSendRecvCount).
  static uint64_t collBytes(int coll, uint64_t count, int elemBytes, int nRanks);

 private:
  struct Decision;
  struct StartLog;
  struct Record;
  struct Ring;

  Decision* allocDecision();
  void releaseDecision(Decision* d);
  void logStart(Decision* d, uint64_t startNs);
  void dropDecision(Decision* d, uint64_t* counter);
  void maybeComplete(Decision* d);
  void recordStop(Record* r, uint64_t stopNs);
  void maybeRelease(Record* r);

  Sink sink_;
  UntimedSink untimed_;
  mutable std::mutex mu_;
  size_t queueCap_, maxRecords_;
  std::vector<std::unique_ptr<Ring>> queues_;  // per collective
  int64_t lastSeq_[kNumColls];
  int64_t overflowDebt_[kNumColls];  // fresh decisions evicted by overflow: already "dropped" for a gap
  // Free list of T (which has `T* nextFree`): grows by chunks and never shrinks, so that a warm
  // matcher allocates nothing per call. Instantiated in timing.cc, where T is complete.
  template <typename T>
  class FreeList {
   public:
    T* take() {
      if (!free_) {
        chunks_.push_back(std::make_unique<T[]>(kFreeListChunk));
        T* chunk = chunks_.back().get();
        for (size_t i = 0; i < kFreeListChunk; ++i) give(&chunk[i]);
      }
      T* x = free_;
      free_ = x->nextFree;
      return x;
    }
    void give(T* x) {
      x->nextFree = free_;
      free_ = x;
    }

   private:
    static constexpr size_t kFreeListChunk = 64;
    std::vector<std::unique_ptr<T[]>> chunks_;
    T* free_ = nullptr;
  };
  FreeList<Decision> decisions_;
  FreeList<Record> records_;
  // Channel starts of timed decisions, kept apart so that a Decision (one per getCollInfo, timed or not)
  // stays small: the 512-byte log is taken only when a kernel channel of the decision reports.
  FreeList<StartLog> startLogs_;
  size_t recordsLive_ = 0;
  MatcherCounters counters_;
};

}  // namespace autoccl::engine
