#include "engine/timing.h"

#include <algorithm>
#include <cstdint>

namespace autoccl::engine {

namespace {
constexpr size_t kMatchWindow = 16;  // how far past the head a Coll may match (bin reordering)
constexpr uint32_t kMaxSkips = 4;    // a fresh head passed over this often is stale
constexpr uint32_t kRecordMagic = 0x41434331;  // "ACC1": sanity tag for handles we gave out
// A kernel's channels start together (its CTAs launch at once). On 4 x H200 (NCCL 2.28, one process per
// GPU) KernelCh events of rank 0 carried starts 20 us-41 ms older than the call's latest channel start
// (up to 50 of 64 channels), with normal stops: stale timestamps, which made a 7 us all_reduce read as
// 8 ms and a 53 us reduce_scatter as 300 us. Legitimate spreads were < 2 us in 98,000 samples (both
// launch kinds), stale ones >= 20 us. Starts more than this before the call's latest
// channel start are left out of the duration.
constexpr uint64_t kStaleStartNs = 10000;
constexpr uint32_t kTrackedStarts = 64;  // NCCL's MAXCHANNELS; beyond it only min/max are kept
}  // namespace

struct TimingMatcher::Decision {
  void* cookie = nullptr;
  uint64_t callIndex = 0, ordinal = 0;
  uint64_t bytes = 0, remaining = 0;
  Config applied;
  uint32_t collsAssigned = 0, collsDone = 0, skips = 0;
  bool inQueue = false, abandoned = false, reportOnly = false;
  uint64_t minStart = UINT64_MAX, maxStop = 0, maxStart = 0;
  uint32_t channels = 0;  // KernelCh events that reported
  uint32_t nStarts = 0;   // channel starts reported (those in `starts`: at most kTrackedStarts)
  StartLog* starts = nullptr;
  int ncclAlgo = -1, ncclProto = -1, ncclChannels = 0;
  Decision* nextFree = nullptr;
};

struct TimingMatcher::StartLog {
  uint64_t v[kTrackedStarts];
  StartLog* nextFree = nullptr;
};

struct alignas(16) TimingMatcher::Record {
  uint32_t magic = 0;
  TimingMatcher* owner = nullptr;
  Decision* decision = nullptr;
  uint32_t nChannels = 0, started = 0, stopped = 0;
  bool collStopped = false, complete = false;
  uint64_t minStart = UINT64_MAX, maxStop = 0, maxStart = 0;
  Record* nextFree = nullptr;
};

// Fixed-capacity FIFO with removal at an index (the match window is small).
struct TimingMatcher::Ring {
  std::vector<Decision*> buf;
  size_t head = 0, size = 0;
  explicit Ring(size_t cap) : buf(cap, nullptr) {}
  Decision* at(size_t i) const { return buf[(head + i) % buf.size()]; }
  void push(Decision* d) { buf[(head + size) % buf.size()] = d; ++size; }
  bool full() const { return size == buf.size(); }
  void eraseAt(size_t i) {
    for (size_t j = i; j + 1 < size; ++j) buf[(head + j) % buf.size()] = buf[(head + j + 1) % buf.size()];
    --size;
  }
  Decision* popFront() {
    Decision* d = buf[head];
    head = (head + 1) % buf.size();
    --size;
    return d;
  }
};

TimingMatcher::TimingMatcher(Sink sink, size_t queueCap, size_t maxRecords, UntimedSink untimed)
    : sink_(std::move(sink)), untimed_(std::move(untimed)), queueCap_(queueCap ? queueCap : 1), maxRecords_(maxRecords) {
  for (int c = 0; c < kNumColls; ++c) {
    queues_.push_back(std::make_unique<Ring>(queueCap_));
    lastSeq_[c] = -1;
    overflowDebt_[c] = 0;
  }
}

TimingMatcher::~TimingMatcher() = default;

TimingMatcher::Decision* TimingMatcher::allocDecision() {
  Decision* d = decisions_.take();
  *d = Decision();
  return d;
}

void TimingMatcher::releaseDecision(Decision* d) {
  if (d->starts) {
    startLogs_.give(d->starts);
    d->starts = nullptr;
  }
  decisions_.give(d);
}

// Out of the queue; freed now unless Coll records still point at it.
void TimingMatcher::dropDecision(Decision* d, uint64_t* counter) {
  if (counter) ++*counter;
  d->inQueue = false;
  if (d->collsDone == d->collsAssigned) {
    releaseDecision(d);
  } else {
    d->abandoned = true;
  }
}

void TimingMatcher::pushDecision(int coll, uint64_t bytes, const Config& applied, void* cookie,
                                 uint64_t callIndex, uint64_t ordinal, bool reportOnly) {
  if (coll < 0 || coll >= kNumColls) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.decisions;
  Ring& q = *queues_[static_cast<size_t>(coll)];
  if (q.full()) {
    Decision* old = q.popFront();
    if (old->collsAssigned == 0) ++overflowDebt_[coll];
    dropDecision(old, &counters_.droppedOverflow);
  }
  Decision* d = allocDecision();
  d->cookie = cookie;
  d->callIndex = callIndex;
  d->ordinal = ordinal;
  d->bytes = d->remaining = bytes;
  d->applied = applied;
  d->reportOnly = reportOnly;
  d->inQueue = true;
  q.push(d);
}

void* TimingMatcher::collStart(int coll, uint64_t seq, uint64_t bytes, int nChannels, int algo, int proto,
                                int reporting) {
  if (coll < 0 || coll >= kNumColls || bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  Ring& q = *queues_[static_cast<size_t>(coll)];

  // Tasks skipped by the profiler (mask was off when they were enqueued) leave a seqNumber gap:
  // their decisions sit at the head and must not absorb this Coll.
  int64_t expected = lastSeq_[coll] + 1;
  int64_t s = static_cast<int64_t>(seq);
  if (s > expected) {
    // Decisions evicted by overflow while no events came were part of this gap already.
    int64_t missed = s - expected;
    int64_t paid = std::min(missed, overflowDebt_[coll]);
    missed -= paid;
    while (missed > 0 && q.size > 0 && q.at(0)->collsAssigned == 0) {
      Decision* d = q.popFront();
      if (untimed_) untimed_(d->cookie, d->callIndex);
      dropDecision(d, &counters_.droppedGap);
      --missed;
    }
  }
  overflowDebt_[coll] = 0;
  if (s > lastSeq_[coll]) lastSeq_[coll] = s;

  size_t found = SIZE_MAX;
  for (size_t i = 0; i < q.size && i < kMatchWindow; ++i) {
    Decision* d = q.at(i);
    bool pairOk = !d->applied.forcesPair() || algo < 0 || proto < 0 ||
                  (algo == d->applied.algo && proto == d->applied.proto);
    if (d->remaining >= bytes && pairOk) {
      found = i;
      break;
    }
  }
  if (found == SIZE_MAX) {
    ++counters_.unmatchedColls;
    // A partly matched head that cannot take this Coll is inconsistent: drop it.
    if (q.size > 0 && q.at(0)->collsAssigned > 0) dropDecision(q.popFront(), &counters_.droppedMismatch);
    return nullptr;
  }
  Decision* d = q.at(found);
  // Heads passed over: a partly matched one is broken; a fresh one ages and is dropped when stale.
  size_t i = 0;
  while (i < found) {
    Decision* h = q.at(i);
    if (h->collsAssigned > 0 || ++h->skips > kMaxSkips) {
      q.eraseAt(i);
      --found;
      dropDecision(h, h->collsAssigned > 0 ? &counters_.droppedMismatch : &counters_.droppedSkip);
    } else {
      ++i;
    }
  }

  if (recordsLive_ >= maxRecords_) {
    ++counters_.collPoolFull;
    return nullptr;  // the decision keeps waiting for its other bytes; this batch will not complete
  }
  Record* r = records_.take();
  *r = Record();
  r->magic = kRecordMagic;
  r->owner = this;
  r->decision = d;
  if (reporting < 0) reporting = nChannels;
  r->nChannels = reporting > 0 ? static_cast<uint32_t>(reporting) : 0;
  ++recordsLive_;
  ++counters_.matchedColls;

  if (d->collsAssigned == 0) {
    d->ncclAlgo = algo;
    d->ncclProto = proto;
    d->ncclChannels = nChannels;
  }
  ++d->collsAssigned;
  d->remaining -= bytes;
  if (d->remaining == 0) {
    q.eraseAt(found);
    d->inQueue = false;
  }
  if (r->nChannels == 0) {  // nothing will ever report: the Coll is complete as far as timing goes
    r->complete = true;
    ++d->collsDone;
    maybeComplete(d);
  }
  return r;
}

void TimingMatcher::maybeComplete(Decision* d) {
  if (d->collsDone != d->collsAssigned) return;
  if (d->abandoned) {
    releaseDecision(d);
    return;
  }
  if (d->inQueue || d->remaining != 0) return;
  // Leave stale channel starts out (see kStaleStartNs); the spread is reported before that.
  uint64_t freshStart = d->minStart;
  uint32_t stale = 0;
  if (d->starts && d->nStarts <= kTrackedStarts && d->maxStart > kStaleStartNs &&
      d->minStart < d->maxStart - kStaleStartNs) {
    freshStart = d->maxStart;
    for (uint32_t i = 0; i < d->nStarts; ++i) {
      if (d->starts->v[i] < d->maxStart - kStaleStartNs) ++stale;
      else freshStart = std::min(freshStart, d->starts->v[i]);
    }
    counters_.staleStarts += stale;
  }
  if (d->maxStop > freshStart) {
    Measurement m;
    m.cookie = d->cookie;
    m.callIndex = d->callIndex;
    m.ordinal = d->ordinal;
    m.bytes = d->bytes;
    m.applied = d->applied;
    m.gpuUs = static_cast<double>(d->maxStop - freshStart) / 1000.0;
    m.startNs = freshStart;
    m.startSpreadUs = d->maxStart > d->minStart ? static_cast<double>(d->maxStart - d->minStart) / 1000.0 : 0.0;
    m.channels = d->channels;
    m.staleChannels = stale;
    m.ncclAlgo = d->ncclAlgo;
    m.ncclProto = d->ncclProto;
    m.ncclChannels = d->ncclChannels;
    m.colls = d->collsAssigned;
    m.reportOnly = d->reportOnly;
    ++counters_.measurements;
    sink_(m);
  } else if (untimed_) {
    untimed_(d->cookie, d->callIndex);  // nothing reported a time for it (an untimed or failed launch)
  }
  releaseDecision(d);
}

void* TimingMatcher::kernelChStart(void* collHandle, uint64_t startNs) {
  auto* r = static_cast<Record*>(collHandle);
  if (!r || r->magic != kRecordMagic || r->owner != this) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (r->complete) return nullptr;
  ++r->started;
  r->minStart = std::min(r->minStart, startNs);
  r->maxStart = std::max(r->maxStart, startNs);
  if (r->decision) logStart(r->decision, startNs);
  // Tag the low bit: the same record, but recognisable as a channel handle in recordEventState.
  return reinterpret_cast<char*>(r) + 1;
}

void TimingMatcher::logStart(Decision* d, uint64_t startNs) {
  if (d->nStarts < kTrackedStarts) {
    if (!d->starts) {
      d->starts = startLogs_.take();
    }
    d->starts->v[d->nStarts] = startNs;
  }
  ++d->nStarts;
}

void TimingMatcher::kernelChStop(void* handle, uint64_t stopNs) {
  auto bits = reinterpret_cast<uintptr_t>(handle);
  if (!handle || !(bits & 1u)) return;
  auto* r = reinterpret_cast<Record*>(bits & ~uintptr_t(1));
  if (r->magic != kRecordMagic || !r->owner) return;
  TimingMatcher* self = r->owner;
  std::lock_guard<std::mutex> lock(self->mu_);
  self->recordStop(r, stopNs);
}

void TimingMatcher::recordStop(Record* r, uint64_t stopNs) {
  if (r->complete) return;
  ++r->stopped;
  r->maxStop = std::max(r->maxStop, stopNs);
  if (r->stopped < r->nChannels) return;
  r->complete = true;
  Decision* d = r->decision;
  d->minStart = std::min(d->minStart, r->minStart);
  d->maxStop = std::max(d->maxStop, r->maxStop);
  d->maxStart = std::max(d->maxStart, r->maxStart);
  d->channels += r->stopped;
  ++d->collsDone;
  maybeComplete(d);
  r->decision = nullptr;
  maybeRelease(r);
}

void TimingMatcher::maybeRelease(Record* r) {
  if (!r->complete || !r->collStopped) return;
  r->magic = 0;
  r->owner = nullptr;
  records_.give(r);
  --recordsLive_;
}

void TimingMatcher::eventStop(void* handle) {
  auto bits = reinterpret_cast<uintptr_t>(handle);
  if (!handle || (bits & 1u)) return;  // channel handles: the stop came with recordEventState
  auto* r = static_cast<Record*>(handle);
  if (r->magic != kRecordMagic || !r->owner) return;
  TimingMatcher* self = r->owner;
  std::lock_guard<std::mutex> lock(self->mu_);
  r->collStopped = true;
  if (r->complete) r->decision = nullptr;
  self->maybeRelease(r);
}

MatcherCounters TimingMatcher::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

size_t TimingMatcher::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& q : queues_) n += q->size;
  return n;
}

uint64_t TimingMatcher::collBytes(int coll, uint64_t count, int elemBytes, int nRanks) {
  uint64_t bytes = static_cast<uint64_t>(elemBytes > 0 ? elemBytes : 1) * count;
  if (coll == 2 || coll == 3) bytes *= static_cast<uint64_t>(nRanks > 0 ? nRanks : 1);  // count is per rank
  return bytes;
}

}  // namespace autoccl::engine
