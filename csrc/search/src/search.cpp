// Online search for one task: see search.h and docs/online-search.md.
#include "autoccl/search/search.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <tuple>

#include "autoccl/common/stats.h"

namespace autoccl::search {

Space::Space() {
  for (auto& row : cost)
    for (float& c : row) c = -1.0f;
}

Objective collectiveTime() {
  return [](const Config&, int, double us) { return us; };
}
Objective channelPenalty(double microsPerChannel) {
  return [microsPerChannel](const Config&, int ch, double us) { return us + microsPerChannel * ch; };
}

int RegretLedger::join() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!free_.empty()) {
    const int slot = free_.back();
    free_.pop_back();
    slots_[static_cast<size_t>(slot)] = Slot{0, 0, 0, true};
    return slot;
  }
  slots_.push_back(Slot{0, 0, 0, true});
  return static_cast<int>(slots_.size() - 1);
}
void RegretLedger::report(int slot, double regretMicros, double calls, double ncclMicros) {
  std::lock_guard<std::mutex> lk(mu_);
  if (slot < 0 || static_cast<size_t>(slot) >= slots_.size() || !slots_[static_cast<size_t>(slot)].used) return;
  slots_[static_cast<size_t>(slot)] = Slot{regretMicros, calls * ncclMicros, ncclMicros, true};
}
void RegretLedger::leave(int slot) {
  std::lock_guard<std::mutex> lk(mu_);
  if (slot < 0 || static_cast<size_t>(slot) >= slots_.size() || !slots_[static_cast<size_t>(slot)].used) return;
  Slot& x = slots_[static_cast<size_t>(slot)];
  goneRegret_ += x.regret;
  goneBase_ += x.base;
  goneSlowest_ = std::max(goneSlowest_, x.nccl);
  x = Slot();
  free_.push_back(slot);
}
RegretLedger::Slot RegretLedger::totalLocked() const {
  Slot t{goneRegret_, goneBase_, goneSlowest_, true};
  for (const Slot& x : slots_) {
    t.regret += x.regret;
    t.base += x.base;
    t.nccl = std::max(t.nccl, x.nccl);
  }
  return t;
}
bool RegretLedger::allows() const {
  std::lock_guard<std::mutex> lk(mu_);
  const Slot t = totalLocked();
  return t.regret <= share_ * t.base + allowanceCalls_ * t.nccl;
}
double RegretLedger::regretMicros() const {
  std::lock_guard<std::mutex> lk(mu_);
  return totalLocked().regret;
}
size_t RegretLedger::slots() const {
  std::lock_guard<std::mutex> lk(mu_);
  return slots_.size() - free_.size();
}

namespace {

// One point of the space: pair -1 = NCCL's default; ch = channels; ck = halvings of NCCL's chunk size
// (0: NCCL's chunk, always where the pair's chunk is not tuned).
using PointKey = std::tuple<int, int, int>;

// Robust relative noise of samples: the MAD as a normal sigma over the median (0 under three samples).
double relNoiseOf(const std::vector<double>& v) {
  if (v.size() < 3) return 0.0;
  const double m = median(v);
  return m > 0 ? 1.4826 * mad(v) / m : 0.0;
}

struct Eval {
  Config cfg;
  std::vector<double> samples;
  std::vector<double> alt;  // second measure of the same calls, where given (addSample's altMicros)
  int inflight = 0;
  int want = 0;
  int lostRounds = 0;
  bool lostThisRound = false;
  bool dead = false;  // never measurable: treated as infinitely slow
  bool shortProbe = false;  // planned shorter than its block (Options::probeFirst, stepFirst), not yet judged
  bool leftShort = false;   // ... judged too far behind for the rest of its block: no speculation around it

  int n() const { return static_cast<int>(samples.size()); }
  bool finished() const { return dead || (inflight == 0 && n() >= want); }
  double med() const { return dead || samples.empty() ? HUGE_VAL : median(samples); }
  // What the samples say, for the statistics (0: none): med() ranks a dead candidate last, and one that
  // samples reached after it was given up put an infinite median in the task's trace record.
  double measured() const { return samples.empty() ? 0.0 : median(samples); }
  double relNoise() const { return relNoiseOf(samples); }
};

enum class SubState { kProbe, kDescend, kDone, kDropped };

struct Sub {
  int pair = 0;
  int ch = 0, ck = 0;
  int xEval = -1;
  SubState state = SubState::kProbe;
  int dim = 0;
  double step[2] = {1.0, 1.0};
  int lastDir[2] = {0, 0};
  int steps = 0;
  int iter = 0;  // descent iterations completed
  bool unitTried = false;  // the neighbours just evaluated were at unit distance
  bool revived = false;    // dropped (halving, probeKeep), descended later with the budget left (reviveDropped)
  std::vector<std::pair<PointKey, int>> nbrs;  // pending neighbour evaluations
};

}  // namespace

struct TaskSearch::Impl {
  Space sp;
  Options o;
  std::vector<Hint> hints;
  int defaultPair = -1;             // min-cost supported pair
  // NCCL's own configuration for this task (TaskSearch::ncclChoice); -1 / 0 while not known.
  int ncclAlgo = -1, ncclProto = -1, ncclChannels = 0;
  // The channels each (pair, channels asked) ran on last (channelsRan): NCCL runs a request on fewer channels where
  // the data divides so, so what a configuration ran on, where known, is what is compared with NCCL's own count.
  std::map<std::pair<int, int>, int> ranOn;
  bool isNcclOwn(const Config& c) const {
    if (!c.forcesPair() || c.algo != ncclAlgo || c.proto != ncclProto || ncclChannels <= 0 || c.setsChunk() ||
        c.channels <= 0)
      return false;
    auto it = ranOn.find({c.algo * kNumProtos + c.proto, c.channels});
    // Within a cap (retuneWithin) NCCL's own configuration runs at most the cap's channels
    const int own = capChannels > 0 ? std::min(ncclChannels, capChannels) : ncclChannels;
    return (it != ranOn.end() ? it->second : c.channels) == own;
  }
  int capChannels = 0;  // retuneWithin's cap (0: none)
  int origMax = 0;      // the space's channels without a cap
  int startChWhole = 1; // the first probes' channels without a cap
  // Per pair, the channels channelsRan found NCCL runs it on at most (pairMax without a cap)
  int pairCeil[kNumAlgos * kNumProtos] = {};
  uint64_t pinnedAt = 0;  // the call the current pin began at (Options::pinnedSegmentMax)
  int startCh = 1;
  // Channels NCCL runs each (algorithm, protocol) pair on at most for this task (channelsRan): NCCL
  // spreads a small task over fewer channels by a per-pair minimum of traffic per channel, so one pair's
  // cap says nothing of another's (2 x H200, all_reduce 4 MiB: tree/ll128 asked 30 ran 29; taken as the
  // task's ceiling, it merged ring/ll128/64, the best point, into /29). pairRan: the most channels a pair
  // has run on.
  int pairMax[kNumAlgos * kNumProtos] = {};
  int pairRan[kNumAlgos * kNumProtos] = {};

  std::vector<Segment> segs;
  uint64_t planned = 0;

  enum class Mode { kVerify, kTuning, kDuel, kPinned, kFinal } mode = Mode::kTuning;
  std::vector<Eval> evals;
  std::map<PointKey, int> evalAt;
  struct PendingCall {
    int id = -1;
    bool filler = false;
    uint64_t plannedMs = 0;  // Options::clockMs when it was planned
    bool prior = false;      // a call before Options::firstCall (Options::defaultTimedBefore)
  };
  std::map<uint64_t, PendingCall> pending;  // call index -> what its sample is for
  std::map<uint64_t, int> givenUp;         // recently expired calls -> eval (a late sample still counts)
  bool anyDelivered = false;
  uint64_t maxDelivered = 0;                // highest call index whose sample arrived
  std::deque<int> queue;
  std::vector<Sub> subs;
  bool pruned = false;
  bool driftRetune = false;  // the task re-tunes after drift: what earlier jobs measured may no longer hold
  int inc = -1;    // incumbent eval
  int dflt = -1;   // NCCL default eval
  int hintEval = -1;
  uint64_t tuningStart = 0;
  uint64_t tuningCallsThisRound = 0;  // exploring calls (and waiting calls beyond maxWaitCalls)
  int ledgerSlot = -1;                // this task's slot in Options::jobRegret
  uint64_t callsSeen = 0;  // the highest call index asked (segmentFor) + 1: the task's calls, up to a segment ahead
                           // (a rank asks for the segment after the last it holds when that one begins)
  uint64_t waitCallsThisRound = 0;
  uint64_t plainAsked = 0;  // the furthest call a plain question named (segmentFor: k less its `ahead`)
  uint64_t questionAhead = 0;  // the lead of the question the plan is being extended for (segmentFor's `ahead`)
  uint64_t waitRun = 0;        // waiting calls planned since the last call that explores

  // pinned state
  Config pinnedCfg;
  double pinnedRef = 0;
  bool refSteady = false;  // pinnedRef comes from a check (steady state), not from the tuning phase
  double pinnedNoise = 0;
  uint64_t interval = 0;
  uint64_t nextCheckAt = 0;  // first call of the next drift check
  uint64_t nextCheckMs = 0;  // ... and not before this clock time (Options::recheckMinMs)
  uint64_t timeWaitLen = 0;  // length of the next segment waiting for nextCheckMs (0: interval/4)
  uint64_t checkEnd = 0;     // end of the last check segment
  int checkEval = -1;
  int driftCount = 0;
  bool verifyNextDefault = true;
  // duel (Options::duelSamples): fresh, interleaved samples of NCCL's default and the incumbent
  int duelDefault = -1, duelInc = -1;
  bool duelNextDefault = true;
  int duelWarmups = 0;  // untimed calls still to run before the duel's first sample
  double duelNoise = 0;
  // The second block was asked for ahead, on calls that would otherwise wait for the first block's samples.
  bool duelAhead = false;
  int duelBlock = 0;  // samples a side the duel's next decision waits for
  int duelExtensionsTaken = 0;  // further blocks of samples the duel took (Options::duelExtensions)
  bool duelExtended() const { return duelExtensionsTaken > 0; }

  Stats st;

  Impl(const Space& s, Options opt, std::vector<Hint> h) : sp(s), o(std::move(opt)), hints(std::move(h)) {
    if (!o.objective) o.objective = collectiveTime();
    st.regretAllowance = o.regretAllowance;
    sp.maxChannels = std::max(1, sp.maxChannels);
    if (sp.ncclChannels > sp.maxChannels) sp.ncclChannels = 0;  // cannot reproduce it explicitly
    float best = 0;
    for (int a = 0; a < kNumAlgos; ++a)
      for (int p = 0; p < kNumProtos; ++p)
        if (sp.cost[a][p] >= 0 && (defaultPair < 0 || sp.cost[a][p] < best)) {
          best = sp.cost[a][p];
          defaultPair = a * kNumProtos + p;
        }
    if (defaultPair >= 0) st.modelDefault = best;
    for (int& halvings : sp.maxChunkHalvings) halvings = std::clamp(halvings, 0, kMaxChunkHalvings);
    startCh = sp.ncclChannels > 0 ? sp.ncclChannels : sp.maxChannels;
    if (sp.startChannels > 0) startCh = std::min(sp.startChannels, sp.maxChannels);
    for (int& m : pairMax) m = sp.maxChannels;
    for (int& m : pairCeil) m = sp.maxChannels;
    origMax = sp.maxChannels;
    startChWhole = startCh;
    planned = o.firstCall;
    if (o.jobRegret) ledgerSlot = o.jobRegret->join();
    begin(false);
    if (o.defaultTimedBefore && mode == Mode::kTuning && dflt >= 0) {
      // Verification (a table's exact entry) is left alone: it alternates the two sides call by call.
      const uint64_t n = std::min<uint64_t>(o.firstCall, 2 * static_cast<uint64_t>(std::max(o.baselineSamples, 0)));
      const uint64_t now = o.clockMs ? o.clockMs() : 0;
      for (uint64_t k = o.firstCall - n; k < o.firstCall; ++k) {
        pending[k] = PendingCall{dflt, false, now, true};
        evals[static_cast<size_t>(dflt)].inflight++;
      }
      // Those calls were the search's baseline: they count against its budget, so that the task is pinned
      // within the budget of its first call, not of the search's (up to a quarter of it: a task the authority
      // saw very late is still searched).
      tuningCallsThisRound = std::min(o.firstCall, o.maxTuningCalls / 4);
    }
  }

  // ---- points and evaluations -------------------------------------------------------------
  bool isSupported(int algo, int proto) const {
    return algo >= 0 && algo < kNumAlgos && proto >= 0 && proto < kNumProtos && sp.cost[algo][proto] >= 0;
  }
  PointKey normalize(int pair, int ch, int ck) const {
    if (pair < 0) return {-1, 0, 0};
    if (pair == defaultPair && sp.ncclChannels > 0 && ch == sp.ncclChannels && ck == 0) return {-1, 0, 0};
    return {pair, ch, ck};
  }
  Config configOf(const PointKey& k) const {
    Config c;
    auto [pair, ch, ck] = k;
    if (pair < 0) return c;
    c.algo = pair / kNumProtos;
    c.proto = pair % kNumProtos;
    c.channels = ch;
    c.chunkHalvings = ck;
    return c;
  }
  int eval(const PointKey& key0) {
    PointKey key = normalize(std::get<0>(key0), std::get<1>(key0), std::get<2>(key0));
    auto it = evalAt.find(key);
    if (it != evalAt.end()) return it->second;
    Eval e;
    e.cfg = configOf(key);
    e.cfg.measure = true;
    evals.push_back(e);
    int id = static_cast<int>(evals.size()) - 1;
    evalAt.emplace(key, id);
    st.candidates++;
    return id;
  }
  void request(int id, int want, bool front = false) {
    Eval& e = evals[static_cast<size_t>(id)];
    if (e.dead || e.want >= want) return;
    e.want = want;
    if (front) queue.push_front(id);
    else queue.push_back(id);
  }
  // Relative standard error of an eval's median (pooled with the default's noise).
  double relSE(const Eval& e) const {
    double rn = e.relNoise();
    if (dflt >= 0) rn = std::max(rn, evals[static_cast<size_t>(dflt)].relNoise());
    if (e.n() == 0) return HUGE_VAL;
    return 1.2533 * rn / std::sqrt(static_cast<double>(e.n()));
  }
  // a beats b by more than the measured noise
  bool beats(const Eval& a, const Eval& b, double z) const {
    if (a.dead || a.samples.empty()) return false;
    if (b.dead || b.samples.empty()) return true;
    double margin = std::max(o.minMargin, z * std::hypot(relSE(a), relSE(b)));
    return a.med() < b.med() * (1.0 - margin);
  }

  // ---- modes ------------------------------------------------------------------------------
  void clearTuning() {
    evals.clear();
    evalAt.clear();
    givenUp.clear();  // a late sample of an earlier round's call must not reach this round's evals
    pending.clear();
    queue.clear();
    subs.clear();
    pruned = false;
    barrier = 1;
    keepOverride = 0;
    inc = dflt = hintEval = checkEval = -1;
    tuningCallsThisRound = 0;
    waitCallsThisRound = 0;
    waitRun = 0;
  }

  void begin(bool retune) {
    clearTuning();
    tuningStart = planned;
    st.ncclOwnIncumbent = false;  // of this tuning round's end
    Hint exact;
    bool haveExact = false;
    for (const Hint& h : hints)
      if (h.distance == 0 && validHint(h.cfg)) {
        exact = h;
        haveExact = true;
        break;
      }
    dflt = eval({-1, 0, 0});
    inc = dflt;
    if (defaultPair < 0) {  // nothing supported?! leave NCCL alone
      toFinal(Config());
      return;
    }
    if (o.pinExactHint && !retune) {
      // Trusted: its pair where NCCL supports it (the channel count within the pair's range), else NCCL's choice.
      if (!haveExact) {
        for (const Hint& h : hints)
          if (h.distance == 0 && !h.cfg.isDefault() && isSupported(h.cfg.algo, h.cfg.proto)) {
            exact = h;
            exact.cfg.channels = std::clamp(h.cfg.channels, 0, pairMax[h.cfg.algo * kNumProtos + h.cfg.proto]);
            haveExact = true;
            break;
          }
      }
      // NCCL's choice: no entry, or NCCL's pair at its count with no chunk of its own (pointOf reads chunk halvings
      // only; a table's chunk in bytes is the entry's too)
      if (!haveExact || (std::get<0>(pointOf(exact.cfg)) < 0 && exact.cfg.chunk == 0)) {
        st.tableDefault = haveExact;
        toFinal(Config());
      } else {
        pinTrusted(exact.cfg);
      }
      return;
    }
    if (haveExact && !retune && std::get<0>(pointOf(exact.cfg)) < 0) {
      // The table says NCCL's own choice won here: nothing to verify it against, so no timed call and no
      // further plan step (over TCP each step can wait for a round trip: verifying such entries cost one
      // process per GPU on 2 x H100 0.4-1.4 ms of lookups per task and launch, 16-64 MiB cells 0.87-0.95x).
      st.tableDefault = true;
      toFinal(Config());
      return;
    }
    if (haveExact && !retune) {
      mode = Mode::kVerify;
      hintEval = eval(pointOf(exact.cfg));
      const int verify = o.verifySamples > 0 ? o.verifySamples : o.baselineSamples;
      evals[static_cast<size_t>(dflt)].want = verify;
      evals[static_cast<size_t>(hintEval)].want = verify;
      verifyNextDefault = true;
      return;
    }
    // NCCL's own estimate of its choice far below the minimum: small without a sample. Over TCP each
    // baseline segment's lookup can wait a round trip to the authority until the samples that prove a task
    // small arrive (a 1 MiB all_reduce in the emulator: call 6-84; 4 x H200, one process per GPU, cold
    // pass: 0.44-0.47x at 1 MiB). The margin leaves the samples to judge where the model could be wrong.
    if (!retune && o.minTaskMicros > 0 && o.modelSmallShare > 0 && st.modelDefault >= 0 &&
        st.modelDefault < o.modelSmallShare * o.minTaskMicros) {
      st.smallTask = st.smallByModel = true;
      toFinal(Config());
      return;
    }
    mode = Mode::kTuning;
    request(dflt, o.baselineSamples);
    // hinted points first (warm start), then one probe per supported pair, cheapest cost first
    // Pairs NCCL's own model puts far behind its choice are not worth a probe: each probe of, say, LL
    // for a 64 MiB task costs several slow calls of the real job, and that model ranks such far-off
    // pairs correctly. A hinted pair is always probed.
    const float minCost = sp.cost[defaultPair / kNumProtos][defaultPair % kNumProtos];
    auto hinted = [&](int pair) {
      for (const Hint& h : hints)
        if (validHint(h.cfg) && !h.cfg.isDefault() && h.cfg.algo * kNumProtos + h.cfg.proto == pair) return true;
      return false;
    };
    // Nor are pairs an earlier job of this task measured far behind NCCL's choice (the table's pair records):
    // over sockets on one H200 every warm pass probed ring/LL again at 3.7x NCCL's time where the cold pass's
    // search had ended without a lead. Also when the table's entry lost its verification (the entry lost to
    // NCCL's choice, which says nothing for the pairs far behind both); not after drift, when the machine
    // changed. NCCL's own pair is always probed.
    auto measuredBehind = [&](int a, int p) {
      return !driftRetune && o.skipBehind > 0 && sp.measuredRatio[a][p] > o.skipBehind &&
             a * kNumProtos + p != defaultPair;
    };
    std::vector<std::pair<float, int>> pairs;
    for (int a = 0; a < kNumAlgos; ++a)
      for (int p = 0; p < kNumProtos; ++p) {
        if (sp.cost[a][p] < 0) continue;
        const bool hint = hinted(a * kNumProtos + p);
        if (o.maxCostRatio > 0 && minCost > 0 && sp.cost[a][p] > o.maxCostRatio * minCost && !hint) continue;
        if (measuredBehind(a, p) && !hint) {
          ++st.skippedBehind;
          continue;
        }
        pairs.push_back({sp.cost[a][p], a * kNumProtos + p});
      }
    std::sort(pairs.begin(), pairs.end());
    bool warm = false;
    for (auto& pr : pairs) {
      Sub s;
      s.pair = pr.second;
      s.ch = std::min(startCh, pairMax[s.pair]);
      const int widest = s.ch;
      // The pair's best point in an earlier job of this task, within what the communicator granted so far (a wider
      // request would be capped as the widest probe is); 0: none.
      int fromRecord = 0;
      const int recorded = sp.measuredChannels[s.pair / kNumProtos][s.pair % kNumProtos];
      if (o.recordedStart && !driftRetune && recorded > 0) {
        fromRecord = std::min(recorded, pairMax[s.pair]);
        if (sp.startChannels > 0) fromRecord = std::min(fromRecord, startCh);
        s.ch = fromRecord;
      }
      s.ck = 0;
      s.step[0] = s.step[1] = o.initStep;
      for (const Hint& h : hints)
        if (validHint(h.cfg) && h.cfg.algo * kNumProtos + h.cfg.proto == s.pair) {
          PointKey pk = pointOf(h.cfg);
          // A hint's own channel count rules; one without (a neighbour where NCCL's choice won) leaves the record's.
          if (std::get<0>(pk) >= 0) {
            if (h.cfg.channels > 0 || fromRecord == 0) s.ch = std::get<1>(pk);
            s.ck = std::get<2>(pk);
          } else if (fromRecord == 0 && sp.ncclChannels > 0) {  // the neighbour kept NCCL's choice: NCCL's count
            s.ch = sp.ncclChannels;
          }
          s.step[0] = s.step[1] = o.warmStep;
          warm = true;
          break;
        }
      if (fromRecord > 0 && s.ch == fromRecord && fromRecord != widest) ++st.recordedStarts;
      if (o.recordedStep > 0 && fromRecord > 0 && s.ch == fromRecord) s.step[0] = s.step[1] = o.recordedStep;
      s.xEval = eval({s.pair, s.ch, s.ck});
      subs.push_back(s);
    }
    // hinted subspaces are probed first
    std::stable_sort(subs.begin(), subs.end(),
                     [&](const Sub& a, const Sub& b) { return a.step[0] < b.step[0] && !(b.step[0] < a.step[0]); });
    for (Sub& s : subs) {
      request(s.xEval, probeBlock());
      evals[static_cast<size_t>(s.xEval)].shortProbe = probeBlock() < o.samplesFirst;
    }
    if (warm && !retune) keepOverride = 2;  // neighbours' tuned configs are trusted to narrow the search
  }
  int keepOverride = 0;
  int probeBlock() const { return o.probeFirst > 0 ? std::min(o.probeFirst, o.samplesFirst) : o.samplesFirst; }
  int stepBlock() const { return o.stepFirst > 0 ? std::min(o.stepFirst, o.samplesFirst) : o.samplesFirst; }
  // A point planned shorter than its block whose first samples are back: the rest of the block when they are
  // within abandonAbove of the incumbent, else it stays at its first calls (like an abandoned candidate).
  void judgeShort(int id) {
    Eval& x = evals[static_cast<size_t>(id)];
    if (!x.shortProbe || x.dead || x.n() == 0 || x.inflight > 0) return;
    const Eval& ref = abandonRef();
    if (ref.samples.empty()) return;  // nothing to judge it by yet
    x.shortProbe = false;
    if (o.abandonAbove > 0 && x.med() > ref.med() * (1.0 + o.abandonAbove)) {
      x.leftShort = true;
      return;
    }
    request(id, o.samplesFirst);
  }
  // What a first sample is judged against (Options::abandonAbove): the incumbent once measured, else NCCL's choice.
  const Eval& abandonRef() const {
    const bool incMeasured = inc >= 0 && !evals[static_cast<size_t>(inc)].samples.empty();
    return evals[static_cast<size_t>(incMeasured ? inc : dflt)];
  }

  bool validHint(const Config& c) const {
    if (c.isDefault()) return true;
    return isSupported(c.algo, c.proto) && c.channels >= 0 && c.channels <= pairMax[c.algo * kNumProtos + c.proto];
  }
  PointKey pointOf(const Config& c) const {
    if (c.isDefault()) return {-1, 0, 0};
    // NCCL's pair with its own channel count and chunk is NCCL's choice (a table entry where NCCL won
    // without a known channel count), not that pair on the widest channel count
    if (c.channels == 0 && c.chunkHalvings == 0 && c.algo * kNumProtos + c.proto == defaultPair) return {-1, 0, 0};
    const int pair = c.algo * kNumProtos + c.proto;
    int ch = c.channels > 0 ? c.channels : std::min(startCh, pairMax[pair]);
    return {pair, ch, std::clamp(c.chunkHalvings, 0, maxCk(pair))};
  }

  void pin(const Config& c, double ref, double noise) {
    mode = Mode::kPinned;
    pinnedAt = planned;
    pinnedCfg = c;
    pinnedCfg.measure = false;
    pinnedRef = ref;
    refSteady = false;
    pinnedNoise = noise;
    interval = o.recheckFirst;
    nextCheckAt = planned + interval;
    nextCheckMs = checkTimeAfterNow();
    timeWaitLen = 0;
    driftCount = 0;
    checkEval = -1;
    pending.clear();
    queue.clear();
    if (st.convergedAt == kForever) st.convergedAt = planned;
    st.bestMedian = ref;
    if (!o.drift) toFinal(pinnedCfg);
  }
  // The end of a pinned segment that would end at `end`: within Options::pinnedSegmentMax of `planned`, or a quarter of
  // the calls since the pin.
  uint64_t pinnedEnd(uint64_t end) const {
    if (o.pinnedSegmentMax == 0 || nextCheckAt == kForever) return end;  // a pin on trust: to the end
    const uint64_t piece = std::max<uint64_t>(o.pinnedSegmentMax, (planned - std::min(planned, pinnedAt)) / 4);
    return end - planned > piece ? planned + piece : end;
  }
  std::vector<TaskSearch::PairMeasure> measuredPairs() const {
    std::vector<TaskSearch::PairMeasure> out;
    if (dflt < 0 || evals[static_cast<size_t>(dflt)].samples.empty()) return out;
    const double d = median(evals[static_cast<size_t>(dflt)].samples);
    for (const auto& e : evals) {
      if (e.samples.empty() || e.cfg.algo < 0 || e.cfg.proto < 0) continue;
      auto it = std::find_if(out.begin(), out.end(), [&](const TaskSearch::PairMeasure& x) {
        return x.algo == e.cfg.algo && x.proto == e.cfg.proto;
      });
      const double med = median(e.samples);  // an abandoned point's too (med() is infinite for it)
      if (it == out.end()) {
        out.push_back(
            TaskSearch::PairMeasure{e.cfg.algo, e.cfg.proto, med, d, static_cast<uint64_t>(e.n()), e.cfg.channels});
      } else {
        if (med < it->micros) {
          it->micros = med;
          it->channels = e.cfg.channels;
        }
        it->samples += static_cast<uint64_t>(e.n());
      }
    }
    return out;
  }
  Config best() const {
    if (mode == Mode::kPinned || mode == Mode::kFinal) return pinnedCfg;
    if (inc < 0) return Config();
    Config c = evals[static_cast<size_t>(inc)].cfg;
    c.measure = false;
    return c;
  }
  bool retuneWithin(int cap, const Config* warmFrom, TaskSearch::Standing* before) {
    // a table's pin on trust (Options::pinExactHint) is never searched
    if (planned >= kForever || mode == Mode::kFinal || o.pinExactHint) return false;
    if (before && mode != Mode::kPinned) return false;
    const int want = cap > 0 ? std::min(cap, origMax) : 0;
    if (want == capChannels) return false;
    if (want > 0 && capChannels == 0 && mode == Mode::kPinned) {
      // A first cap the pin runs within: the best point of the whole space is within the cap, nothing to find
      int runs = 0;
      if (pinnedCfg.isDefault()) {
        runs = ncclChannels;
      } else if (pinnedCfg.forcesPair() && pinnedCfg.channels > 0) {
        auto it = ranOn.find({pinnedCfg.algo * kNumProtos + pinnedCfg.proto, pinnedCfg.channels});
        runs = it != ranOn.end() ? it->second : pinnedCfg.channels;
      }
      if (runs > 0 && runs <= want) return false;
    }
    if (before) {
      before->best = best();
      before->stats = st;
      before->pairs = measuredPairs();
      before->ncclOwn = isNcclOwn(before->best);
    }
    Config warm = warmFrom ? *warmFrom : best();
    capChannels = want;
    st.channelCap = want;
    sp.maxChannels = want > 0 ? want : origMax;
    for (int p = 0; p < kNumAlgos * kNumProtos; ++p) pairMax[p] = want > 0 ? std::min(pairCeil[p], want) : pairCeil[p];
    // NCCL's pair at the cap is what its choice runs now: that point is NCCL's choice (normalize)
    const bool ncclKnown = ncclAlgo >= 0 && ncclProto >= 0 && ncclAlgo * kNumProtos + ncclProto == defaultPair;
    sp.ncclChannels = want > 0 && ncclKnown && ncclChannels >= want ? want : 0;
    startCh = want > 0 ? std::min(startChWhole, want) : startChWhole;
    hints.clear();
    if (warm.forcesPair() && isSupported(warm.algo, warm.proto)) {
      const int room = pairMax[warm.algo * kNumProtos + warm.proto];
      warm.channels = warm.channels > 0 ? std::min(warm.channels, room) : room;
      warm.measure = false;
      hints.push_back(Hint{warm, 0, 0.5});
    }
    driftRetune = true;  // an earlier job's records were measured without this cap
    st.retunes++;
    st.capRetunes++;
    st.convergedAt = kForever;
    st.defaultMedian = st.bestMedian = 0;
    begin(true);
    return true;
  }
  // A configuration pinned on trust (Options::pinExactHint): one untimed segment to the end, never checked. Not
  // kFinal, which the engine caches for good: the step guard must still reach the task's calls to run NCCL's
  // choices in its rounds.
  void pinTrusted(const Config& c) {
    pin(c, 0, 0);
    mode = Mode::kPinned;  // pin() ends in kFinal without drift
    nextCheckAt = kForever;
    nextCheckMs = 0;
  }
  // Options::recheckMinMs scaled by how far the call interval has grown from recheckFirst.
  uint64_t checkTimeAfterNow() const {
    if (!o.clockMs || o.recheckMinMs == 0) return 0;
    const double scale = static_cast<double>(interval) / static_cast<double>(std::max<uint64_t>(o.recheckFirst, 1));
    return o.clockMs() + static_cast<uint64_t>(static_cast<double>(o.recheckMinMs) * scale);
  }
  void toFinal(const Config& c) {
    mode = Mode::kFinal;
    pinnedCfg = c;
    pinnedCfg.measure = false;
    if (st.convergedAt == kForever) st.convergedAt = planned;
  }

  // One line of the search's diagnostics to Options::debug (none when it is empty).
  __attribute__((format(printf, 2, 3))) void debugf(const char* fmt, ...) const {
    if (!o.debug) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o.debug(line);
  }

  void finishTuning() {
    if (o.debug) {  // why this pin: every candidate's evidence
      debugf("autoccl search: tuning ends at call %llu (incumbent %d)", static_cast<unsigned long long>(planned), inc);
      for (size_t i = 0; i < evals.size(); ++i)
        debugf("autoccl search:   %zu %s n=%d in-flight=%d median=%.2f%s", i, evals[i].cfg.str().c_str(),
               evals[i].n(), evals[i].inflight, evals[i].med(), evals[i].dead ? " dead" : "");
    }
    const Eval& d = evals[static_cast<size_t>(dflt)];
    if (dflt >= 0 && !d.samples.empty()) {
      st.defaultMedian = d.measured();
      st.noise = d.relNoise();
    }
    // The budget can run out while a candidate that clearly beats the incumbent waits for its extra
    // samples (long host run-ahead): with its first block it may still win, by twice the usual margin.
    for (size_t k = 0; k < evals.size(); ++k) {
      const Eval& e = evals[k];
      if (static_cast<int>(k) == inc || e.dead || e.n() < o.samplesFirst || e.n() >= o.minSamplesIncumbent) continue;
      if (beats(e, evals[static_cast<size_t>(inc)], 2 * o.z)) inc = static_cast<int>(k);
    }
    const Eval& i = evals[static_cast<size_t>(inc)];
    const double noise = std::max(i.relNoise(), d.relNoise());
    if (inc != dflt && isNcclOwn(i.cfg)) {  // NCCL's choice in its explicit form: nothing to duel
      debugf("autoccl search: the incumbent %s is NCCL's own configuration: NCCL's choice stays", i.cfg.str().c_str());
      pinNcclOwn(d, noise);
      return;
    }
    if (o.duelSamples > 0 && inc != dflt && !d.dead && !d.samples.empty() && !i.samples.empty()) {
      startDuel(noise);
      return;
    }
    pin(i.cfg, i.samples.empty() ? 0.0 : i.med(), noise);
  }

  // Before a configuration other than NCCL's is pinned, both are measured again, alternately, on
  // fresh samples: the default's tuning samples are the task's first ones, taken while the job may
  // still be settling (ranks out of step at the start of a phase, a warm-up burst), and a default
  // measured 3x slow then lost to a configuration that is slower in steady state (nccl-tests on
  // 4 x H200, one process per GPU: all_reduce 4 MiB pinned tree/ll128/22, 0.945x plain).
  void startDuel(double noise) {
    const Config dc = evals[static_cast<size_t>(dflt)].cfg, ic = evals[static_cast<size_t>(inc)].cfg;
    pending.clear();
    queue.clear();
    Eval a, b;
    a.cfg = dc;
    b.cfg = ic;
    a.want = b.want = o.duelSamples;
    evals.push_back(a);
    duelDefault = static_cast<int>(evals.size()) - 1;
    evals.push_back(b);
    duelInc = static_cast<int>(evals.size()) - 1;
    duelNextDefault = true;
    duelWarmups = 2;
    duelNoise = noise;
    duelAhead = false;
    duelBlock = o.duelSamples;
    duelExtensionsTaken = 0;
    mode = Mode::kDuel;
  }

  // A side is ready with its block's samples arrived, even while samples asked ahead are in flight.
  void thinkDuel() {
    auto ready = [&](const Eval& e) { return e.finished() || e.n() >= std::min(duelBlock, e.want); };
    if (ready(evals[static_cast<size_t>(duelDefault)]) && ready(evals[static_cast<size_t>(duelInc)])) endDuel();
  }
  // The relative margin by which the tuned side's duel median must be lower than NCCL's: duelZ standard
  // errors of the difference of two medians (floor minMargin). The noise is the largest of the two sides'
  // and of the tuned configuration's tuning samples: a MAD of five samples alone is often far below the
  // true noise (seed 195: a 1.2 % lower median won against a 1.5 % margin). Not the tuning samples of NCCL's
  // choice: they may span the settling start the duel exists for.
  double duelMargin(const std::vector<double>& nccl, const std::vector<double>& tuned) const {
    if (nccl.empty() || tuned.empty()) return o.minMargin;
    const double tuning = evals[static_cast<size_t>(inc)].relNoise();
    const double rn = std::max({relNoiseOf(nccl), relNoiseOf(tuned), tuning});
    const double se =
        1.2533 * rn * std::sqrt(1.0 / static_cast<double>(nccl.size()) + 1.0 / static_cast<double>(tuned.size()));
    return std::max(o.minMargin, o.duelZ * se);
  }
  // Samples a side (up to duelSamples) a second block can add within maxTuningCalls, its samples back by then
  // at the lag they arrive with now; samples asked ahead (duelAhead) cost no further calls.
  int extensionThatFits(const Eval& d, const Eval& i) const {
    const uint64_t lag = anyDelivered && planned > maxDelivered + 1 ? planned - maxDelivered - 1 : 0;
    if (tuningCallsThisRound + lag >= o.maxTuningCalls) return 0;
    const uint64_t turnCalls = static_cast<uint64_t>(std::max(o.duelRun, 1));
    const uint64_t room = (o.maxTuningCalls - tuningCallsThisRound - lag) / turnCalls;
    auto toPlan = [&](const Eval& e, int target) { return std::max(0, target - e.n() - e.inflight); };
    for (int extra = o.duelSamples; extra >= 1; --extra) {
      const int target = duelBlock + extra;
      if (static_cast<uint64_t>(toPlan(d, target) + toPlan(i, target)) <= room) return extra;
    }
    return 0;
  }
  // Decides with the fresh samples there are (all of them, or what arrived when the budget ran out).
  void endDuel() {
    Eval& d = evals[static_cast<size_t>(duelDefault)];
    Eval& i = evals[static_cast<size_t>(duelInc)];
    const Eval& tuned = evals[static_cast<size_t>(inc)];
    if (d.samples.empty() || i.samples.empty()) {  // nothing to compare (graph capture...): what tuning found
      if (isNcclOwn(tuned.cfg)) pinNcclOwn(d, duelNoise);
      else pin(tuned.cfg, tuned.med(), duelNoise);
      return;
    }
    st.defaultMedian = d.measured();
    // NCCL's choice stays unless the tuned configuration is faster on the fresh samples too, and on
    // their second measure where there is one: in one process launching several GPUs the stream period
    // also carries the profiler's host cost, which grows with the channel count (a 64-channel default
    // read 120 us per call for a 27 us broadcast), while the kernel window misses what a kernel holds
    // outside its channels (tree/LL128: 31 us windows, 54 us per call); a winner on both is safe.
    // Low medians: the budget can end the duel with two samples a side, one of them slow (a period spanning
    // a host pause: 1011 us for a 232 us all_gather, 2 x H200); of an odd count, the median.
    // Beyond the noise: duelZ standard errors of the difference of the medians (seed 303 of the emulator's
    // 3 %-noise scenario pinned tree/ll, 1.9 % slower than NCCL's ring/ll in the model, on duel medians
    // 33.54 vs 33.54 us).
    const bool altToo = !i.alt.empty() && !d.alt.empty();
    // The second measure only confirms the direction: its noise is not the tuning samples' (a margin there
    // would be unmeasured on the GPUs, where one process's windows and periods differ by the host's cost).
    const double keep = 1.0 - duelMargin(d.samples, i.samples);
    const bool altAgrees = !altToo || lowMedian(i.alt) < lowMedian(d.alt);
    bool incWins = lowMedian(i.samples) < lowMedian(d.samples) * keep && altAgrees;
    auto report = [&](const char* outcome) {  // why this decision: its evidence
      if (!o.debug) return;  // its medians are not computed for nothing
      debugf("autoccl search: duel at call %llu (budget used %llu): default n=%d low median=%.2f, %s n=%d low "
             "median=%.2f, margin %.2f %%, second measure %s: %s",
             static_cast<unsigned long long>(planned), static_cast<unsigned long long>(tuningCallsThisRound), d.n(),
             lowMedian(d.samples), i.cfg.str().c_str(), i.n(), lowMedian(i.samples), 100.0 * (1.0 - keep),
             altToo ? (altAgrees ? "agrees" : "disagrees") : "none", outcome);
    };
    // Lower, but within the margin: one more block of up to duelSamples a side (at most duelExtensions times),
    // as many as the budget still has room for (at least two), decided on all of them. A gain of 4-5 % under
    // 3 % noise is inside the margin of five samples a side about one time in five; where a sample is a turn of
    // three calls, a whole second block (30 calls) rarely fits after the first (emulated 4 x H200: all_gather
    // 256 MiB, 2.9 % lower against a 3.35 % margin at 123 of 144 calls; NCCL's choice, 3.9 % slower in the
    // model, stayed).
    if (!incWins && altAgrees && duelExtensionsTaken < o.duelExtensions &&
        lowMedian(i.samples) < lowMedian(d.samples) && d.n() >= duelBlock && i.n() >= duelBlock) {
      const int extra = extensionThatFits(d, i);
      if (extra >= 2) {
        duelExtensionsTaken++;
        st.duelExtensions++;
        duelBlock += extra;
        d.want = i.want = duelBlock;
        report(duelExtensionsTaken == 1 ? "a second block" : "another block");
        return;
      }
    }
    // Out of budget with samples still in flight, a median of one or two samples does not survive an
    // outlier (a slow call on NCCL's side): the tuned configuration must also have the lower minimum.
    if (d.n() < o.duelSamples || i.n() < o.duelSamples)
      incWins = incWins && *std::min_element(i.samples.begin(), i.samples.end()) <
                               *std::min_element(d.samples.begin(), d.samples.end());
    if (incWins && isNcclOwn(i.cfg)) {  // NCCL's configuration became known during the duel
      report("NCCL's choice stays (the tuned configuration is NCCL's own)");
      pinNcclOwn(d, std::max(duelNoise, std::max(d.relNoise(), i.relNoise())));
      return;
    }
    const Eval& w = incWins ? i : d;
    report(incWins ? "the tuned configuration is pinned" : "NCCL's choice stays");
    pin(w.cfg, w.med(), std::max(duelNoise, std::max(d.relNoise(), i.relNoise())));
  }
  // Pins NCCL's choice (`d`, an eval of it) where the incumbent is NCCL's own configuration (isNcclOwn).
  void pinNcclOwn(const Eval& d, double noise) {
    st.ncclOwnIncumbent = true;
    inc = dflt;
    pin(d.cfg, d.samples.empty() ? 0.0 : d.med(), noise);
  }

  // ---- the search proper ------------------------------------------------------------------
  void thinkVerify() {
    Eval& d = evals[static_cast<size_t>(dflt)];
    Eval& h = evals[static_cast<size_t>(hintEval)];
    if (!d.finished() || !h.finished()) return;
    if (isNcclOwn(h.cfg)) {  // an older table's entry naming NCCL's own configuration
      st.defaultMedian = d.measured();
      pinNcclOwn(d, std::max(d.relNoise(), h.relNoise()));
      return;
    }
    if (d.dead && h.dead) {  // unmeasurable (e.g. graph capture): trust the table
      pin(h.cfg, 0, 0);
      return;
    }
    st.defaultMedian = d.measured();
    st.noise = d.relNoise();
    if (beats(d, h, o.z)) {  // the table is wrong here now: search again, starting near it
      Hint nh{h.cfg, 0, 0.5};
      hints.push_back(nh);
      for (Hint& x : hints)
        if (x.distance == 0) x.distance = 0.5;
      st.retunes++;
      begin(true);
      return;
    }
    const Eval& w = (h.med() <= d.med()) ? h : d;
    pin(w.cfg, w.med(), std::max(d.relNoise(), h.relNoise()));
  }

  // After the probes: subspaces hopelessly behind (probeKeep) are dropped. After each of the first
  // halvingRounds descent iterations: successive halving keeps the better half (by current best).
  void prune(bool halve) {
    double best = evals[static_cast<size_t>(dflt)].med();
    std::vector<Sub*> order;
    for (Sub& s : subs) {
      if (s.state == SubState::kDropped) continue;
      best = std::min(best, evals[static_cast<size_t>(s.xEval)].med());
      order.push_back(&s);
    }
    std::stable_sort(order.begin(), order.end(), [&](Sub* a, Sub* b) {
      return evals[static_cast<size_t>(a->xEval)].med() < evals[static_cast<size_t>(b->xEval)].med();
    });
    size_t keep = order.size();
    if (halve) keep = std::max<size_t>(1, (order.size() + 1) / 2);
    if (!halve && keepOverride > 0) keep = static_cast<size_t>(keepOverride);
    if (halve && barrier >= o.halvingRounds) keep = std::min(keep, static_cast<size_t>(o.keepSubspaces));
    size_t kept = 0;
    for (Sub* s : order) {
      double m = evals[static_cast<size_t>(s->xEval)].med();
      if (kept < keep && std::isfinite(m) && m <= best * (1.0 + o.probeKeep)) {
        if (s->state == SubState::kProbe) s->state = SubState::kDescend;
        kept++;
      } else {
        s->state = SubState::kDropped;
      }
    }
    pruned = true;
  }
  int barrier = 1;

  int maxCk(int pair) const { return pair < 0 ? 0 : sp.maxChunkHalvings[pair % kNumProtos]; }
  int nDims(const Sub& s) const { return maxCk(s.pair) > 0 ? 2 : 1; }

  // move along dim by delta (log2 units); returns false if it leaves the range or cannot move
  bool moved(const Sub& s, int dim, double delta, int& ch, int& ck) const {
    ch = s.ch;
    ck = s.ck;
    int sign = delta > 0 ? 1 : -1;
    if (dim == 0) {
      int n = static_cast<int>(std::lround(s.ch * std::exp2(delta)));
      if (n == s.ch) n = s.ch + sign;
      n = std::clamp(n, 1, pairMax[s.pair]);
      if (n == s.ch) return false;
      ch = n;
    } else {
      int d = static_cast<int>(std::lround(delta));
      if (d == 0) d = sign;
      int n = std::clamp(s.ck + d, 0, maxCk(s.pair));
      if (n == s.ck) return false;
      ck = n;
    }
    return true;
  }
  bool isUnit(const Sub& s, int ch, int ck) const { return std::abs(ch - s.ch) + std::abs(ck - s.ck) == 1; }

  // Channels first, then the chunk once: revisiting the channels after each chunk move cost the demo's
  // tasks up to ~20 more calls (converged at call 154 against the bound of 150), while NCCL's chunk
  // matters only where a step's data exceeds it, nearly independently of the channel count near its best.
  void nextDim(Sub& s) {
    s.lastDir[s.dim] = 0;
    s.step[s.dim] = o.initStep;
    if (s.dim + 1 >= nDims(s)) {
      s.state = SubState::kDone;
      return;
    }
    s.dim++;
  }

  // one step of sub s, if its pending evaluations are finished
  void stepSub(Sub& s, double globalBest) {
    Eval& x = evals[static_cast<size_t>(s.xEval)];
    if (!x.finished()) return;
    for (auto& nb : s.nbrs)
      if (!evals[static_cast<size_t>(nb.second)].finished()) return;
    if (x.dead) {
      s.state = SubState::kDropped;
      return;
    }
    if (!s.nbrs.empty()) {
      // pick the best neighbour
      auto bestIt = std::min_element(s.nbrs.begin(), s.nbrs.end(), [&](auto& a, auto& b) {
        return evals[static_cast<size_t>(a.second)].med() < evals[static_cast<size_t>(b.second)].med();
      });
      Eval& nb = evals[static_cast<size_t>(bestIt->second)];
      double gain = 1.0 - nb.med() / x.med();
      // ambiguous and not yet well sampled: sample both more before moving
      double margin = std::max(o.minMargin, 1.0 * std::hypot(relSE(nb), relSE(x)));
      if (gain >= o.worthwhile && gain < 2 * margin && (nb.n() < o.samplesMax || x.n() < o.samplesMax)) {
        int w = std::min(o.samplesMax, std::max(nb.n(), x.n()) + 2);
        request(bestIt->second, w);
        request(s.xEval, w);
        return;
      }
      if (beats(nb, x, 1.0)) {
        auto [p, ch, ck] = bestIt->first;
        (void)p;
        int dir = (ch - s.ch) + (ck - s.ck) > 0 ? 1 : -1;
        s.ch = ch;
        s.ck = ck;
        s.xEval = bestIt->second;
        s.lastDir[s.dim] = dir;
        s.step[s.dim] *= std::min(2.0, 1.0 + gain / o.stepGainRef);  // learning rate = relative gain
        s.steps++;
      } else if (s.unitTried || s.step[s.dim] / 2 < o.minStep) {
        nextDim(s);  // this dimension stopped improving
      } else {
        s.lastDir[s.dim] = 0;
        s.step[s.dim] /= 2;  // reset: smaller steps in both directions
      }
      s.nbrs.clear();
      s.iter++;
      // A revived subspace came back within reviveWithin: a tighter probeKeep does not drop it again.
      const double keep = s.revived ? std::max(o.probeKeep, o.reviveWithin) : o.probeKeep;
      if (s.state == SubState::kDescend && evals[static_cast<size_t>(s.xEval)].med() > globalBest * (1.0 + keep)) {
        s.state = SubState::kDropped;
        return;
      }
    }
    if (s.state != SubState::kDescend || s.iter >= barrier) return;
    // propose neighbours in the current dimension
    for (int guard = 0; guard < 4 && s.nbrs.empty() && s.state == SubState::kDescend; ++guard) {
      std::vector<int> dirs;
      if (s.lastDir[s.dim] != 0) dirs.push_back(s.lastDir[s.dim]);
      else dirs = {1, -1};
      bool allUnit = true;
      for (int d : dirs) {
        int ch, ck;
        if (!moved(s, s.dim, d * s.step[s.dim], ch, ck)) continue;
        allUnit = allUnit && isUnit(s, ch, ck);
        PointKey pk{s.pair, ch, ck};
        int id = eval(pk);
        s.nbrs.push_back({pk, id});
      }
      s.unitTried = allUnit && s.lastDir[s.dim] == 0;
      if (s.nbrs.empty()) {
        if (s.lastDir[s.dim] != 0) {
          s.lastDir[s.dim] = 0;  // hit the range bound while continuing: try both sides
          s.step[s.dim] /= 2;
        } else {
          nextDim(s);
        }
      }
    }
    for (auto& nb : s.nbrs) requestStep(nb.second, trails(s));
  }
  // Whether a subspace's current point is behind the best point measured by more than Options::stepFirstBehind.
  bool trails(const Sub& s) const {
    double best = HUGE_VAL;
    for (const Eval& e : evals) best = std::min(best, e.med());
    const Eval& x = evals[static_cast<size_t>(s.xEval)];
    return std::isfinite(best) && !x.samples.empty() && x.med() > best * (1.0 + o.stepFirstBehind);
  }
  // A descent step's point (asked for by a step, or speculated ahead of one): a fresh point of a trailing subspace
  // gets its first calls (Options::stepFirst), the rest of its block once judged (judgeShort); with stepFirst on,
  // one already planned short, or left at its first calls, is not asked for more here (with it off, a probe left
  // at its one call that a step comes back to gets its block, as before). Returns the calls wanted.
  int requestStep(int id, bool trailing) {
    Eval& e = evals[static_cast<size_t>(id)];
    if ((e.shortProbe || e.leftShort) && stepBlock() < o.samplesFirst) return e.want;
    const bool fresh = !e.dead && e.want == 0 && e.samples.empty() && e.inflight == 0;
    if (fresh && trailing && stepBlock() < o.samplesFirst) {
      request(id, stepBlock());
      e.shortProbe = true;
    } else {
      request(id, o.samplesFirst);
    }
    return e.want;
  }

  // A not yet measured point that an alive subspace will probably ask for next: in its current
  // dimension the continuation (2 steps on) and the half steps, then the other dimension.
  // `room`: the regret budget left for calls in flight (regretRoomCalls); a point whose pair's measured point costs
  // more per call is not guessed. `dryRun`: whether there is a point to guess, none created (0 or -1).
  int speculate(bool* trailing, double room, bool dryRun = false) {
    // Only around a point already measured, and not hopelessly behind (what prune's probeKeep would drop): over
    // sockets on one H200 all_reduce 256 MiB's in-place loop ran ring/LL at 6 channels (3.7x NCCL's time),
    // speculated in the blind loop before its probe at 2 channels had returned; the old rule (any probe) also
    // spent 9 calls there after the probe was known to be 3.7x behind.
    double best = evals[static_cast<size_t>(dflt)].med();
    for (const Eval& e : evals) best = std::min(best, e.med());
    std::vector<Sub*> order;
    for (Sub& s : subs) {
      if (s.state != SubState::kDescend && s.state != SubState::kProbe) continue;
      const Eval& x = evals[static_cast<size_t>(s.xEval)];
      if (x.samples.empty() || x.leftShort || (std::isfinite(best) && x.med() > best * (1.0 + std::max(o.probeKeep, 1.0))))
        continue;
      if (std::isfinite(room) && callRegretEstimate(s.xEval) > room) continue;
      order.push_back(&s);
    }
    std::stable_sort(order.begin(), order.end(), [&](Sub* a, Sub* b) {
      return evals[static_cast<size_t>(a->xEval)].med() < evals[static_cast<size_t>(b->xEval)].med();
    });
    for (Sub* sp0 : order) {
      const Sub& s = *sp0;
      std::vector<std::pair<int, double>> moves;  // (dim, delta)
      double st0 = s.step[s.dim];
      int ld = s.lastDir[s.dim];
      if (ld != 0) moves.push_back({s.dim, ld * 2 * st0});
      moves.push_back({s.dim, st0});
      moves.push_back({s.dim, -st0});
      if (st0 / 2 >= o.minStep) {
        moves.push_back({s.dim, st0 / 2});
        moves.push_back({s.dim, -st0 / 2});
      }
      for (auto [dim, delta] : moves) {
        int ch, ck;
        if (!moved(s, dim, delta, ch, ck)) continue;
        PointKey key = normalize(s.pair, ch, ck);
        if (evalAt.count(key)) continue;
        if (dryRun) return 0;
        *trailing = trails(s);
        return eval({s.pair, ch, ck});
      }
    }
    return -1;
  }

  void thinkTuning() {
    Eval& d = evals[static_cast<size_t>(dflt)];
    if (d.dead) {  // NCCL's default can't be measured (graph capture...): nothing can beat it
      finishTuning();
      return;
    }
    // Too short to repay exploring: NCCL's choice for good, with no more timed calls.
    // By the shorter of its two measures: a host-bound call's stream period is the launch rate (two GPUs
    // launched from one thread, timed: 42-57 us per call for 2-8 MiB on 2 x H100), its kernel window the
    // GPU's own time.
    const double dShort = d.alt.empty() ? d.med() : std::min(d.med(), median(d.alt));
    if (o.minTaskMicros > 0 && d.n() >= std::min(3, std::max(o.baselineSamples, 1)) && dShort < o.minTaskMicros) {
      st.defaultMedian = st.bestMedian = d.measured();
      st.noise = d.relNoise();
      st.smallTask = true;
      if (o.debug)
        debugf("autoccl search: small task at call %llu: NCCL's median %.2f (%d samples), second measure %.2f (%zu)",
               static_cast<unsigned long long>(planned), d.med(), d.n(), d.alt.empty() ? 0.0 : median(d.alt),
               d.alt.size());
      pending.clear();
      queue.clear();
      toFinal(Config());
      return;
    }
    // Beyond what it has earned so far but within the whole allowance, the search waits (planOne) instead of
    // ending.
    const bool taskOver = o.regretBudget > 0 && !regretAllowed(d.med()) && earnedShortfall() <= 0;
    reportRegret();
    const bool jobOver = o.jobRegret && !o.jobRegret->allows();
    if (d.n() > 0 && (taskOver || jobOver)) {
      st.jobRegretStop = !taskOver;
      stopForRegret();
      return;
    }
    if (!pruned) {
      // a probe planned shorter than its block (Options::probeFirst) whose samples are within abandonAbove of the
      // incumbent gets the rest of it
      for (Sub& s : subs)
        if (s.state == SubState::kProbe) judgeShort(s.xEval);
      bool all = d.finished();
      for (Sub& s : subs) all = all && evals[static_cast<size_t>(s.xEval)].finished();
      if (!all) return;
      prune(false);
    }
    // incumbent: replaced only by a candidate that beats it by more than the noise
    for (size_t i = 0; i < evals.size(); ++i) {
      const Eval& e = evals[i];
      if (static_cast<int>(i) == inc || e.dead || e.n() < o.minSamplesIncumbent) continue;
      if (beats(e, evals[static_cast<size_t>(inc)], o.z)) inc = static_cast<int>(i);
    }
    // a descent step's point planned shorter than its block (Options::stepFirst) gets the rest of it, or not
    for (Sub& s : subs)
      if (s.state == SubState::kDescend)
        for (auto& nb : s.nbrs) judgeShort(nb.second);
    // the most promising candidate that is not yet the incumbent gets more samples
    int bestId = -1;
    for (size_t i = 0; i < evals.size(); ++i)
      if (!evals[i].dead && !evals[i].samples.empty() && (bestId < 0 || evals[i].med() < evals[static_cast<size_t>(bestId)].med()))
        bestId = static_cast<int>(i);
    if (bestId >= 0 && bestId != inc) {
      Eval& b = evals[static_cast<size_t>(bestId)];
      if (b.finished() && b.n() < o.samplesMax && b.med() < evals[static_cast<size_t>(inc)].med() * (1.0 - o.minMargin))
        request(bestId, std::min(o.samplesMax, std::max(o.minSamplesIncumbent, b.n() + 2)), true);
    }
    double globalBest = HUGE_VAL;
    for (Sub& s : subs)
      if (s.state == SubState::kDescend || s.state == SubState::kDone)
        globalBest = std::min(globalBest, evals[static_cast<size_t>(s.xEval)].med());
    globalBest = std::min(globalBest, d.med());
    for (Sub& s : subs)
      if (s.state == SubState::kDescend) stepSub(s, globalBest);
    if (barrier <= o.halvingRounds) {  // all alive subspaces finished this iteration: halve
      bool all = true;
      for (Sub& s : subs) all = all && (s.state != SubState::kDescend || (s.iter >= barrier && s.nbrs.empty()));
      if (all) {
        prune(true);
        barrier = barrier + 1 > o.halvingRounds ? std::numeric_limits<int>::max() : barrier + 1;
        for (Sub& s : subs)
          if (s.state == SubState::kDescend) stepSub(s, globalBest);
      }
    }
    bool busy = !queue.empty();
    for (Sub& s : subs) busy = busy || s.state == SubState::kDescend;
    for (const Eval& e : evals) busy = busy || !e.finished();
    if (!busy && reviveDropped(globalBest)) {
      for (Sub& s : subs)
        if (s.state == SubState::kDescend) stepSub(s, globalBest);
      return;
    }
    if (!busy) finishTuning();
  }

  // Calls of the budget kept for the duel: the duel's calls come out of the same budget (a block a side in
  // turns of duelRun calls, and its warm-up calls).
  uint64_t duelReserve() const {
    const uint64_t turnCalls = static_cast<uint64_t>(std::max(o.duelRun, 1));
    return o.duelSamples > 0 ? 2 * static_cast<uint64_t>(o.duelSamples) * turnCalls + 6 : 0;
  }

  // The descent is over with budget left: the subspace the halving (or a probeKeep below reviveWithin) dropped
  // with the best median, if within Options::reviveWithin of the best so far, is descended too. The halving
  // ranks subspaces on a few samples of one point each, within the noise of each other: in the demo's 256 MiB tasks, ring/simple at 24
  // channels lost to ring/LL128 by 4 % on 3 samples, LL128's chunk gained nothing, and tuning ended at call
  // 46 of 144 with NCCL's choice, while ring/simple with a quarter chunk was 5 % faster than it (emulator).
  // One at a time: the next only when this one's descent is over.
  bool reviveDropped(double globalBest) {
    if (keepOverride > 0) return false;  // a warm start trusts its neighbours to narrow the search
    Sub* pick = nullptr;
    for (Sub& s : subs) {
      if (s.state != SubState::kDropped || s.revived || !s.nbrs.empty()) continue;
      const Eval& x = evals[static_cast<size_t>(s.xEval)];
      if (x.dead || x.n() == 0 || !(x.med() <= globalBest * (1.0 + o.reviveWithin))) continue;
      if (!pick || x.med() < evals[static_cast<size_t>(pick->xEval)].med()) pick = &s;
    }
    if (!pick) return false;
    // room for about two iterations of its descent in each of its dimensions, and the duel after it
    const uint64_t room = 2 * 2 * static_cast<uint64_t>(o.samplesFirst) * static_cast<uint64_t>(nDims(*pick));
    if (tuningCallsThisRound + duelReserve() + room >= o.maxTuningCalls) return false;
    pick->revived = true;
    pick->state = SubState::kDescend;
    return true;
  }

  void thinkPinned() {
    if (checkEval < 0) return;
    Eval& c = evals[static_cast<size_t>(checkEval)];
    if (!c.finished()) return;
    if (!c.samples.empty() && !refSteady) {
      // The first check sets the reference: times taken while tuning (other configurations interleaved,
      // a warm-up burst of back-to-back launches) need not match the job's steady state, and comparing
      // with them re-tuned tasks that had not moved (nccl-tests on 4 x H200).
      pinnedRef = c.med();
      refSteady = true;
      driftCount = 0;
    } else if (!c.samples.empty() && pinnedRef > 0) {
      double ratio = c.med() / pinnedRef;
      double thr = std::max(o.driftThreshold, 3.0 * pinnedNoise);
      if (std::fabs(ratio - 1.0) > thr) driftCount++;
      else driftCount = 0;
    } else if (!c.samples.empty() && pinnedRef <= 0) {
      pinnedRef = c.med();  // first measurement of a config pinned unmeasured
    }
    checkEval = -1;
    if (driftCount >= o.driftConfirm) {
      st.retunes++;
      driftRetune = true;
      hints.clear();
      hints.push_back(Hint{pinnedCfg, pinnedRef, 0.5});
      st.convergedAt = kForever;
      begin(true);
      return;
    }
    if (driftCount == 0) interval = std::min(interval * 2, o.recheckMax);
    else interval = std::max<uint64_t>(o.recheckFirst / 4, 1);
    nextCheckAt = checkEnd + interval;
    nextCheckMs = checkTimeAfterNow();
  }

  void think() {
    for (int guard = 0; guard < 8; ++guard) {
      Mode before = mode;
      size_t q = queue.size();
      if (mode == Mode::kVerify) thinkVerify();
      else if (mode == Mode::kTuning) thinkTuning();
      else if (mode == Mode::kDuel) thinkDuel();
      else if (mode == Mode::kPinned) thinkPinned();
      if (mode == before && queue.size() == q) break;
    }
  }

  // Gives up the planned samples that can no longer be expected (see Options::lostAfter).
  // `ref`: the oldest call the plan must cover now.
  void expireLost(uint64_t ref) {
    const uint64_t now = o.clockMs ? o.clockMs() : 0;
    while (!pending.empty()) {
      const uint64_t k = pending.begin()->first;
      const PendingCall pc = pending.begin()->second;
      const uint64_t behind = ref > k ? ref - k : 0;
      bool overtaken = anyDelivered && maxDelivered >= k + o.reorderSlack;
      bool stale = behind > o.lostAfter && (!o.clockMs || now - pc.plannedMs >= o.lostAfterMs);
      if (!overtaken && !stale && behind <= o.lostAfterHard) break;  // the oldest is still expected
      pending.erase(pending.begin());
      giveUp(k, pc);
    }
  }
  // Call k ran untimed (the caller knows): its sample is lost now, not after the rules above.
  void unmeasured(uint64_t k) {
    auto it = pending.find(k);
    if (it == pending.end()) return;
    const PendingCall pc = it->second;
    pending.erase(it);
    giveUp(k, pc);
  }
  void giveUp(uint64_t k, const PendingCall& pc) {
    st.lostSamples++;
    if (pc.filler) return;
    givenUp[k] = pc.id;  // a late sample still counts
    if (givenUp.size() > 4096) givenUp.erase(givenUp.begin());
    Eval& e = evals[static_cast<size_t>(pc.id)];
    e.inflight--;
    e.lostThisRound = true;
    if (e.inflight == 0) roundOver(e);
  }
  void roundOver(Eval& e) {
    if (e.lostThisRound) {
      e.lostThisRound = false;
      if (e.samples.empty()) e.lostRounds++;
      const int id = static_cast<int>(&e - evals.data());
      if (e.n() < e.want) {
        // A drift check is not repeated, and a candidate lost this often is not asked again: it counts
        // with what arrived; one with no samples at all is abandoned (a check without any: no comparison).
        if ((mode == Mode::kPinned && id == checkEval) || e.lostRounds >= o.maxLostRounds) {
          if (e.samples.empty()) e.dead = true;
          else e.want = e.n();
        } else {
          // A one-call probe (Options::probeFirst) that brought back nothing is asked again as its whole block:
          // another lost call (a period spanning a host pause) would leave the pair unjudged one more round.
          if (e.shortProbe && e.samples.empty()) {
            e.want = std::max(e.want, o.samplesFirst);
            e.shortProbe = false;
          }
          queue.push_back(id);
        }
      }
    }
  }

  void add(const Segment& s, bool wait = false) {
    segs.push_back(s);
    planned = s.end;
    if (!wait && s.phase == Phase::kTuning) waitRun = 0;
    if (s.phase == Phase::kTuning) {
      st.tuningCalls += s.end - s.begin;
      tuningCallsThisRound += s.end - s.begin;
    }
  }
  // The call after the newest whose sample arrived (the round's first call before any): how far the plan runs ahead
  // of its evidence.
  uint64_t afterNewestSample() const { return anyDelivered ? maxDelivered + 1 : tuningStart; }
  // A waiting call (nothing to explore until samples arrive). While the samples are far behind (a
  // burst of host run-ahead) such calls do not use up the exploration budget, up to maxWaitCalls per
  // round; when they are close behind, waiting is part of the search's cost like any other call, unless
  // `free` (a wait that Options::maxUnprovenCalls imposes: free within the same maxWaitCalls) or planned only
  // because a question looked ahead (Options::lookAheadWaitsFree).
  // Of a look-ahead's waits, a run of them (between two calls that explore) is freed up to the question's lead: the
  // look-ahead makes each wait for samples that many calls longer; the rest of the run is the search's own wait,
  // which it has without looking ahead too (asking 16 ahead in the emulator's job: 52 such waits of 167).
  void addWaiting(const Segment& s, bool free = false) {
    const uint64_t newest = afterNewestSample();
    const bool farBehind = s.begin > newest && s.begin - newest > o.freeWaitLag;
    const uint64_t n = s.end - s.begin;
    uint64_t freed = farBehind || free ? n : 0;
    if (!freed && o.lookAheadWaitsFree && questionAhead > waitRun && s.begin > plainAsked &&
        s.begin - plainAsked > o.lead)
      freed = std::min(n, questionAhead - waitRun);
    add(s, true);
    waitRun += n;
    st.waitCalls += n;
    if (freed == 0) return;
    waitCallsThisRound += freed;
    if (waitCallsThisRound <= o.maxWaitCalls) {
      tuningCallsThisRound -= std::min(tuningCallsThisRound, freed);
      st.freeWaitCalls += freed;
      if (!farBehind && !free) st.aheadWaitCalls += freed;
    }
  }

  // A candidate other than NCCL's choice and the incumbent with no sample yet: what one of its calls costs is unknown.
  bool isUnproven(int id) const {
    const Eval& e = evals[static_cast<size_t>(id)];
    return id != dflt && id != inc && !e.dead && e.samples.empty();
  }
  // How many more calls of unproven candidates may be planned now (Options::maxUnprovenCalls; large when off, or
  // while the plan is within unprovenLag calls of the newest sample).
  int unprovenRoom() const {
    if (o.maxUnprovenCalls <= 0) return std::numeric_limits<int>::max();
    if (planned <= afterNewestSample() + o.unprovenLag) return std::numeric_limits<int>::max();
    int inFlight = 0;
    for (size_t i = 0; i < evals.size(); ++i)
      if (isUnproven(static_cast<int>(i))) inFlight += evals[i].inflight;
    return o.maxUnprovenCalls - inFlight;
  }
  // n calls of the incumbent while the regret budget is short (Options::regretEarn) or spoken for by calls in
  // flight (Options::inflightRegret): untimed and outside the exploring calls, as a pinned segment is (its samples
  // would change nothing the budget waits for, and the engine lets timing go). Bounded: the budget grows on
  // every call of the round, and the whole allowance is at most 16 calls' regret away.
  void waitForBudget(uint64_t n = 1) {
    Segment w{planned, planned + n, evals[static_cast<size_t>(inc)].cfg, Phase::kPinned};
    w.cfg.measure = false;
    st.regretWaits += n;
    add(w);
  }
  // A candidate the budget cannot cover (Options::inflightRegret): wait while the budget can still move (samples in
  // flight, or an allowance still being earned); otherwise the budget is spent for this round, as a regret stop.
  void budgetHeld() {
    bool inFlight = false;
    for (const Eval& e : evals) inFlight = inFlight || e.inflight > 0;
    if (inFlight || regretBudgetCalls() < regretBudgetCalls(true)) {
      waitForBudget();
      return;
    }
    stopForRegret();
    planOne();
  }
  // The round's regret budget is spent: what is still in flight or queued is not waited for (NCCL's choice keeps
  // what it asked for), and tuning ends with what there is.
  void stopForRegret() {
    st.regretStop = true;
    const Eval& d = evals[static_cast<size_t>(dflt)];
    for (Eval& e : evals)
      if (&e != &d && !e.finished()) e.want = e.n() + e.inflight;
    queue.clear();
    finishTuning();
  }
  // One call of the incumbent, timed, while unproven candidates wait for room (Options::maxUnprovenCalls). Free
  // against maxTuningCalls up to maxWaitCalls a round, as a wait far behind the samples is: it explores nothing,
  // and the cap keeps a search whose samples come late from tuning without end.
  void waitForEvidence() {
    schedule(inc, 1, Phase::kTuning, true, true);
    st.unprovenWaits++;
  }

  void schedule(int id, uint64_t n, Phase ph, bool filler = false, bool freeWait = false) {
    Eval& e = evals[static_cast<size_t>(id)];
    Segment s{planned, planned + n, e.cfg, ph};
    s.cfg.measure = true;
    const uint64_t now = o.clockMs ? o.clockMs() : 0;
    for (uint64_t k = s.begin; k < s.end; ++k) pending[k] = PendingCall{id, filler, now};
    if (filler) {
      addWaiting(s, freeWait);
      return;
    }
    e.inflight += static_cast<int>(n);
    add(s);
  }

  // One turn of alternate(): duelRun calls of one configuration, the sample at position (duelRun - 1) / 2,
  // the others untimed. With 3, the sample follows its own configuration and is followed by it: what a
  // call leaves to the next one (tree/simple all_reduce 16 MiB on 2 x H200: one rank idle 25 us after each
  // kernel, outside its window; the call after it starts late) lands on its own side, and its period ends
  // at its own configuration's launch.
  void scheduleTurn(int id) {
    const int runs = std::max(o.duelRun, 1);
    const int at = (runs - 1) / 2;
    for (int r = 0; r < runs; ++r) {
      if (r == at) {
        schedule(id, 1, Phase::kTuning);
        continue;
      }
      Segment t{planned, planned + 1, evals[static_cast<size_t>(id)].cfg, Phase::kTuning};
      t.cfg.measure = false;
      add(t);
    }
  }

  // Two evals measured one turn at a time, alternately (`a` first when *aNext), each up to its want.
  // -1: both only wait for samples in flight.
  int alternate(int a, int b, bool* aNext) {
    auto need = [&](int id) {
      const Eval& e = evals[static_cast<size_t>(id)];
      return e.dead ? 0 : e.want - e.n() - e.inflight;
    };
    int id = -1;
    if (*aNext && need(a) > 0) id = a;
    else if (need(b) > 0) id = b;
    else if (need(a) > 0) id = a;
    *aNext = !*aNext;
    return id;
  }

  void planOne() {
    switch (mode) {
      case Mode::kFinal: {
        add(Segment{planned, kForever, pinnedCfg, Phase::kFinal});
        return;
      }
      case Mode::kPinned: {
        if (checkEval >= 0) {  // check still running: stay pinned (untimed) until it reports
          add(Segment{planned, pinnedEnd(planned + std::max<uint64_t>(interval / 4, 1)), pinnedCfg, Phase::kPinned});
          return;
        }
        // The interval runs from the end of the last check, not from when its samples arrived: a
        // waiting segment above must not be followed by another check at once (checks every ~70
        // calls kept GPU timing on in nccl-tests' timed passes).
        if (planned < nextCheckAt) {
          add(Segment{planned, pinnedEnd(nextCheckAt), pinnedCfg, Phase::kPinned});
          return;
        }
        if (nextCheckMs > 0 && o.clockMs() < nextCheckMs) {  // enough calls, not enough time yet
          // Each end of a waiting segment is a plan lookup on every rank (over TCP for a communicator
          // spread over processes), so the waits double: a check lands at most about twice as many
          // calls late as its time needed, after log2 boundaries instead of one every interval/4 calls
          // (one process per GPU, 2 x H200: a pinned task waited in 64-call segments through every
          // nccl-tests pass).
          const uint64_t len = timeWaitLen > 0 ? timeWaitLen : std::max<uint64_t>(interval / 4, 1);
          timeWaitLen = std::min(len * 2, std::max(o.recheckMax, len));
          add(Segment{planned, pinnedEnd(planned + len), pinnedCfg, Phase::kPinned});
          return;
        }
        timeWaitLen = 0;
        Eval c;
        c.cfg = pinnedCfg;
        c.want = o.checkSamples;
        evals.push_back(c);
        checkEval = static_cast<int>(evals.size()) - 1;
        schedule(checkEval, static_cast<uint64_t>(o.checkSamples), Phase::kCheck);
        checkEnd = planned;
        return;
      }
      case Mode::kVerify: {
        // NCCL's default first, then alternate with the table's config
        const int id = alternate(dflt, hintEval, &verifyNextDefault);
        if (id < 0) {  // waiting for the samples: run the table's config meanwhile (it starts tuned)
          Segment s{planned, planned + std::max<uint64_t>(o.verifyWait, 1), evals[static_cast<size_t>(hintEval)].cfg,
                    Phase::kTuning};
          s.cfg.measure = false;
          addWaiting(s);
          return;
        }
        scheduleTurn(id);
        return;
      }
      case Mode::kDuel: {
        if (tuningCallsThisRound >= o.maxTuningCalls) {
          // Budget spent: what arrived decides. A side with no sample yet but some in flight (the host
          // runs ahead of the GPU) is waited for, on NCCL's choice (timed): deciding without it pins what
          // the tuning samples say, the samples the duel exists to check (one process for 4 x H200:
          // reduce_scatter 16 MiB pinned ring/simple/22, 5 % slower than NCCL's choice in the duel's own
          // samples). The lost-sample rules bound the wait.
          // A side with one sample waits for a second while that is only lagging (no sample of a call 8 or more
          // later has arrived; one task's kernels run in stream order): a lone sample can be an outlier (a
          // period across a host pause, 2 x H200), and of two the low median is robust.
          // So does a side of a second block (duelExtend) short of its samples, planned inside the budget.
          auto waiting = [&](int id) {
            const Eval& e = evals[static_cast<size_t>(id)];
            if (e.inflight == 0) return false;
            if (e.samples.empty()) return true;
            if (e.n() >= 2 && !(duelExtended() && e.n() < duelBlock)) return false;
            for (const auto& [k, pc] : pending)
              if (pc.id == id && !pc.filler && (!anyDelivered || k + 8 > maxDelivered)) return true;
            return false;
          };
          if (waiting(duelDefault) || waiting(duelInc)) {
            schedule(duelDefault, 1, Phase::kTuning, true);
            return;
          }
          endDuel();
          planOne();
          return;
        }
        if (duelWarmups > 0) {
          // One untimed call of each side first: the first call of a configuration after a while
          // without it can be several times slow (one process per GPU, 4 x H200: NCCL's choice at
          // 662 us for 55 us after 40 calls of others) and must not be a duel sample.
          Segment w{planned, planned + 1, evals[static_cast<size_t>(duelWarmups == 2 ? duelDefault : duelInc)].cfg,
                    Phase::kTuning};
          w.cfg.measure = false;
          --duelWarmups;
          add(w);
          return;
        }
        int id = alternate(duelDefault, duelInc, &duelNextDefault);
        if (id < 0 && o.duelExtensions > 0 && !duelAhead && !duelExtended()) {
          // The block's samples are in flight (the host runs ahead of the GPU): the calls until they arrive
          // take the second block's turns, so a decision within the margin finds part of its second block
          // measured or on its way instead of starting it at the end of the budget. Unused if the first
          // block decides.
          duelAhead = true;
          evals[static_cast<size_t>(duelDefault)].want += o.duelSamples;
          evals[static_cast<size_t>(duelInc)].want += o.duelSamples;
          id = alternate(duelDefault, duelInc, &duelNextDefault);
        }
        if (id < 0) {  // waiting for the samples: the tuned config meanwhile, timed (a later sample
          schedule(duelInc, 1, Phase::kTuning, true);  // arriving gives up one that never comes)
          return;
        }
        scheduleTurn(id);
        return;
      }
      case Mode::kTuning: {
        const uint64_t reserve = duelReserve();
        if (tuningCallsThisRound + reserve >= o.maxTuningCalls) {
          // Not before NCCL's choice has a sample while some are still in flight (a burst of host
          // run-ahead spent the budget blind): waiting runs NCCL's choice, which costs nothing against it.
          const Eval& d = evals[static_cast<size_t>(dflt)];
          if (!d.dead && d.samples.empty() && d.inflight > 0) {
            schedule(dflt, 1, Phase::kTuning, true);
            return;
          }
          finishTuning();
          planOne();
          return;
        }
        if (const double shortCalls = earnedShortfall(); shortCalls > 0) {
          // Earning the allowance back: the incumbent, untimed, for as many calls as the budget still needs (at
          // most 32 a segment: a sample in flight may lower the regret meanwhile).
          const auto n = static_cast<uint64_t>(std::min(32.0, std::ceil(shortCalls / o.regretEarn)));
          waitForBudget(std::max<uint64_t>(n, 1));
          return;
        }
        const int room = unprovenRoom();
        bool heldBack = false;  // an unproven candidate is waiting for room (Options::maxUnprovenCalls)
        bool heldByBudget = false;  // ... or a candidate for the regret budget (Options::inflightRegret)
        for (auto it = queue.begin(); it != queue.end();) {
          const int id = *it;
          Eval& e = evals[static_cast<size_t>(id)];
          int need = e.want - e.n() - e.inflight;
          if (e.dead || need <= 0) {
            it = queue.erase(it);
            continue;
          }
          if (isUnproven(id)) {
            if (room <= 0) {  // its turn comes when a sample of those in flight is back; a proven one may go
              heldBack = true;
              ++it;
              continue;
            }
            need = std::min(need, room);
          }
          const int afford = regretRoomFor(id);
          if (afford <= 0) {  // the budget is spoken for by the calls in flight: their samples decide
            heldByBudget = true;
            ++it;
            continue;
          }
          need = std::min(need, afford);
          queue.erase(it);
          schedule(id, static_cast<uint64_t>(need), Phase::kTuning);
          if (e.n() + e.inflight < e.want) queue.push_front(id);  // the rest of its block, within the room
          return;
        }
        if (heldBack) {
          waitForEvidence();
          return;
        }
        if (heldByBudget) {
          budgetHeld();
          return;
        }
        // nothing can be decided until samples arrive (host run-ahead): measure a point the descent
        // is likely to need next, else run the incumbent meanwhile
        bool trailing = false;
        // a guess the budget can't cover while samples are in flight waits for them
        const double specRoom = regretRoomCalls();
        const int spec = o.speculate && room > 0 ? speculate(&trailing, specRoom) : -1;
        const bool specHeld = o.speculate && room > 0 && spec < 0 && std::isfinite(specRoom) &&
                              speculate(&trailing, std::numeric_limits<double>::infinity(), true) >= 0;
        if (spec >= 0) {
          const int want = requestStep(spec, trailing);
          const int afford = std::max(1, regretRoomFor(spec));
          if (!queue.empty() && queue.back() == spec) queue.pop_back();
          schedule(spec, static_cast<uint64_t>(std::max(1, std::min({want, room, afford}))), Phase::kTuning);
          if (evals[static_cast<size_t>(spec)].inflight < want) queue.push_front(spec);
          return;
        }
        if (o.speculate && room <= 0) {  // speculation held back by a bound
          waitForEvidence();
          return;
        }
        if (specHeld) {
          budgetHeld();
          return;
        }
        schedule(inc, 1, Phase::kTuning, true);
        return;
      }
    }
  }

  void extend(uint64_t upTo) {
    expireLost(upTo > o.lead ? upTo - o.lead : 0);
    while (planned < upTo) {
      think();
      planOne();
    }
    reportRegret();
  }
  // The job's ledger learns this task's regret and its calls so far at NCCL's median (once that is measured): the
  // calls asked (a pinned task's plan runs far ahead of them), or the exploring calls planned where more (the calls
  // its own budget counts), so that the job's budget grows as the job runs and is never below the task's own.
  void reportRegret() {
    if (ledgerSlot < 0 || dflt < 0) return;
    const Eval& d = evals[static_cast<size_t>(dflt)];
    if (d.samples.empty()) return;
    const double calls = static_cast<double>(std::max(callsSeen, st.tuningCalls));
    o.jobRegret->report(ledgerSlot, st.regretMicros, calls, d.measured());
  }

  const Segment& find(uint64_t k) const {
    static const Segment before{0, 0, Config(), Phase::kFinal};
    auto it = std::upper_bound(segs.begin(), segs.end(), k, [](uint64_t v, const Segment& s) { return v < s.end; });
    if (it == segs.end() || !it->contains(k)) return before;  // k < firstCall: not ours
    return *it;
  }

  // ---- learned channel ceiling (per pair) -------------------------------------------------
  // A call of `pair` asked for `asked` channels and ran on `ran`. Fewer by one or two is how the data
  // divides over the channels (2 x H200, all_gather 4 MiB in one process: 23 asked ran 22, 17 ran 16, 64
  // ran 64), not a ceiling; nor is any count below one the pair has already run on.
  void channelsRan(int pair, int asked, int ran) {
    if (pair < 0 || pair >= kNumAlgos * kNumProtos || ran < 1) return;
    ranOn[{pair, asked}] = ran;
    const int before = pairRan[pair];
    pairRan[pair] = std::max(pairRan[pair], ran);
    if (ran + kCapShortfall <= asked && ran >= before) limitChannels(pair, ran);
  }
  void limitChannels(int pair, int c) {
    if (pair < 0 || pair >= kNumAlgos * kNumProtos || c < 1 || c >= pairMax[pair]) return;
    pairMax[pair] = c;
    pairCeil[pair] = std::min(pairCeil[pair], c);
    if (pair == defaultPair && sp.ncclChannels > c) sp.ncclChannels = 0;
    std::vector<std::pair<PointKey, int>> above;
    for (const auto& [key, id] : evalAt)
      if (std::get<0>(key) == pair && std::get<1>(key) > c) above.emplace_back(key, id);
    std::map<int, int> alias;  // merged eval -> the eval that now stands for its point
    for (const auto& [key, id] : above) {
      evalAt.erase(key);
      PointKey nk = normalize(pair, c, std::get<2>(key));
      auto it = evalAt.find(nk);
      if (it == evalAt.end()) {  // first of its kind: re-key it (its samples were taken at `c`)
        evalAt.emplace(nk, id);
        Eval& e = evals[static_cast<size_t>(id)];
        bool m = e.cfg.measure;
        e.cfg = configOf(nk);
        e.cfg.measure = m;
      } else {
        mergeEval(id, it->second);
        alias[id] = it->second;
      }
    }
    auto fix = [&](int& id) {
      auto a = alias.find(id);
      if (a != alias.end()) id = a->second;
    };
    fix(inc);
    fix(hintEval);
    for (Sub& s : subs) {
      fix(s.xEval);
      if (s.pair == pair) s.ch = std::min(s.ch, c);
      for (auto& nb : s.nbrs) {
        fix(nb.second);
        if (std::get<0>(nb.first) == pair) std::get<1>(nb.first) = std::min(std::get<1>(nb.first), c);
      }
    }
    for (auto& kv : pending) fix(kv.second.id);
    for (auto& kv : givenUp) fix(kv.second);
    for (int& q : queue) fix(q);
    auto clampCfg = [&](Config& cfg) {
      if (!cfg.isDefault() && cfg.algo * kNumProtos + cfg.proto == pair && cfg.channels > c) cfg.channels = c;
    };
    clampCfg(pinnedCfg);
    if (checkEval >= 0) clampCfg(evals[static_cast<size_t>(checkEval)].cfg);
    think();
  }
  // `from` measured the same point as `to`: its samples and outstanding calls move to `to`.
  void mergeEval(int from, int to) {
    Eval& f = evals[static_cast<size_t>(from)];
    Eval& t = evals[static_cast<size_t>(to)];
    t.samples.insert(t.samples.end(), f.samples.begin(), f.samples.end());
    t.inflight += f.inflight;
    t.want = std::max(t.want, f.want);
    if (!t.samples.empty() || t.inflight > 0) t.dead = false;
    Config cfg = t.cfg;
    f = Eval();
    f.cfg = cfg;
    f.dead = true;  // no longer referenced by anything
    if (st.candidates > 0) st.candidates--;
  }

  void sample(uint64_t k, double us, double alt) {
    const bool valid = std::isfinite(us) && us > 0;
    if (valid && k < planned && (!anyDelivered || k > maxDelivered)) {
      anyDelivered = true;
      maxDelivered = k;
    }
    auto it = pending.find(k);
    if (it == pending.end()) {
      lateSample(k, us, alt, valid);
      if (valid) expireLost(0);  // calls overtaken by this one are lost
      return;
    }
    const int id = it->second.id;
    const bool filler = it->second.filler;
    const bool prior = it->second.prior;
    Eval& e = evals[static_cast<size_t>(id)];
    pending.erase(it);
    if (!filler) e.inflight--;
    if (valid) {
      record(e, us, alt);
      if (prior) st.priorSamples++;
    } else if (!filler) {
      e.lostThisRound = true;
    }
    if (!filler && e.inflight == 0) roundOver(e);
    expireLost(0);
    think();
  }
  // A sample of a call given up as lost: still a valid measurement of its configuration.
  void lateSample(uint64_t k, double us, double alt, bool valid) {
    auto g = givenUp.find(k);
    if (g == givenUp.end()) return;
    Eval& e = evals[static_cast<size_t>(g->second)];
    givenUp.erase(g);
    if (!valid || e.dead) return;
    record(e, us, alt);
    st.lateSamples++;
    think();
  }
  // One GPU time of e's configuration, as the objective values it.
  void record(Eval& e, double us, double alt) {
    int effCh = e.cfg.isDefault() ? sp.ncclChannels : e.cfg.channels;
    if (effCh <= 0) effCh = sp.ncclChannels > 0 ? sp.ncclChannels : sp.maxChannels;
    const double v = o.objective(e.cfg, effCh, us);
    if (mode == Mode::kTuning && dflt >= 0 && &e != &evals[static_cast<size_t>(dflt)]) {
      const Eval& d = evals[static_cast<size_t>(dflt)];
      if (!d.samples.empty()) {
        st.regretMicros += v - d.measured();  // finite where med() ranks a dead default last
        reportRegret();
        // One far slower sample is enough: the candidate gets no more (its pending calls still run).
        const double ref = abandonRef().med();
        if (o.abandonAbove > 0 && e.samples.empty() && v > ref * (1.0 + o.abandonAbove)) {
          e.want = 1;
          if (e.shortProbe) e.leftShort = true;
          e.shortProbe = false;
          st.abandoned++;
        }
      }
    }
    e.samples.push_back(v);
    if (std::isfinite(alt) && alt > 0) e.alt.push_back(o.objective(e.cfg, effCh, alt));
    st.samples++;
  }
  bool chargeWait(double us) {
    if (!(us > 0) || mode != Mode::kTuning || dflt < 0 || evals[static_cast<size_t>(dflt)].samples.empty()) return false;
    st.regretMicros += us;
    st.waitRegretMicros += us;
    reportRegret();
    return true;
  }
  // The task's regret budget now, in calls at NCCL's median (Options::regretBudget, regretAllowance, regretEarn).
  // The allowance is earned on every call of the round, waits included (a paused search earns it back).
  double regretBudgetCalls(bool whole = false) const {
    const double calls = static_cast<double>(tuningCallsThisRound);
    const double roundCalls = static_cast<double>(planned - tuningStart);
    // A re-tune's round starts with the regret of the rounds before (Stats::regretMicros adds up): earning from 0
    // again would pause it for hundreds of calls, so only the first round earns.
    const bool earning = o.regretEarn > 0 && !whole && st.retunes == 0;
    const double allowance = earning ? std::min(o.regretAllowance, o.regretEarn * roundCalls) : o.regretAllowance;
    return o.regretBudget * calls + allowance;
  }
  // Whether exploration may go on under Options::regretBudget, NCCL's median being `dmed`.
  bool regretAllowed(double dmed) const { return st.regretMicros <= regretBudgetCalls() * dmed; }
  // How far (in calls at NCCL's median) the regret is beyond what the search has earned while still within the
  // whole allowance (Options::regretEarn): the calls it waits to earn. 0 when not earning, before NCCL's choice has
  // a sample, within the budget, or beyond the whole allowance (a regret stop, not a wait).
  double earnedShortfall() const {
    if (o.regretEarn <= 0 || o.regretBudget <= 0 || dflt < 0) return 0;
    const Eval& d = evals[static_cast<size_t>(dflt)];
    if (d.n() == 0 || !(d.med() > 0)) return 0;
    const double used = st.regretMicros / d.med();
    if (used > regretBudgetCalls(true)) return 0;
    return std::max(0.0, used - regretBudgetCalls());
  }
  // What one more call of eval `id` is expected to cost beyond NCCL's choice, in its medians
  // (Options::inflightRegret): its own median's excess; with no sample, an earlier job's record of its pair, else
  // the larger of inflightRegret and NCCL's model's excess. NCCL's choice itself costs nothing.
  double callRegretEstimate(int id) const {
    if (id == dflt) return 0;
    const Eval& e = evals[static_cast<size_t>(id)];
    const Eval& d = evals[static_cast<size_t>(dflt)];
    if (!e.samples.empty() && !d.samples.empty()) return std::max(0.0, e.med() / d.med() - 1.0);
    if (e.cfg.isDefault()) return o.inflightRegret;
    // an earlier job's record of the pair (its best point) before NCCL's model
    const float rec = sp.measuredRatio[e.cfg.algo][e.cfg.proto];
    if (rec > 0) return std::max(0.0, static_cast<double>(rec) - 1.0);
    double est = o.inflightRegret;
    const float dc = defaultPair >= 0 ? sp.cost[defaultPair / kNumProtos][defaultPair % kNumProtos] : -1;
    const float c = sp.cost[e.cfg.algo][e.cfg.proto];
    if (dc > 0 && c > 0) est = std::max(est, static_cast<double>(c / dc) - 1.0);
    return est;
  }
  // How many calls of eval `id` may be planned before the samples in flight return (Options::inflightRegret):
  // the budget less the regret measured and the estimate of the calls in flight. Unbounded when off.
  int regretRoomFor(int id) const {
    if (id == dflt) return std::numeric_limits<int>::max();
    const double est = callRegretEstimate(id), room = regretRoomCalls();
    if (est <= 0 || !std::isfinite(room)) return std::numeric_limits<int>::max();
    return room < est ? 0 : static_cast<int>(std::min(room / est, 1e6));
  }
  // The budget less the regret measured and the estimate of the calls in flight, in calls at NCCL's median.
  double regretRoomCalls() const {
    if (o.inflightRegret <= 0 || o.regretBudget <= 0) return std::numeric_limits<double>::infinity();
    const Eval& d = evals[static_cast<size_t>(dflt)];
    double used = d.samples.empty() ? 0.0 : st.regretMicros / d.med();
    for (size_t i = 0; i < evals.size(); ++i)
      if (evals[i].inflight > 0) used += evals[i].inflight * callRegretEstimate(static_cast<int>(i));
    return regretBudgetCalls() - used;
  }
};

TaskSearch::TaskSearch(const Space& space, Options opt, std::vector<Hint> hints)
    : impl_(std::make_unique<Impl>(space, std::move(opt), std::move(hints))) {}
TaskSearch::~TaskSearch() {
  if (impl_->ledgerSlot >= 0) impl_->o.jobRegret->leave(impl_->ledgerSlot);
}

Segment TaskSearch::segmentFor(uint64_t k, uint64_t ahead) {
  std::lock_guard<std::mutex> lk(mu_);
  if (k != kForever) impl_->plainAsked = std::max(impl_->plainAsked, k - std::min(k, ahead));
  impl_->questionAhead = k != kForever ? ahead : 0;  // what this question's extension plans is its lead's
  if (k != kForever && k + 1 > impl_->callsSeen) {
    impl_->callsSeen = k + 1;
    impl_->reportRegret();
  }
  if (k >= impl_->planned || impl_->planned - k < impl_->o.lead) {
    uint64_t want = k + impl_->o.lead;
    if (want < k) want = kForever;
    if (impl_->planned < want && impl_->mode != Impl::Mode::kFinal) impl_->extend(want);
    else if (impl_->planned <= k) impl_->extend(k + 1);
  }
  impl_->questionAhead = 0;
  return impl_->find(k);
}

std::vector<Segment> TaskSearch::extendTo(uint64_t upTo) {
  std::lock_guard<std::mutex> lk(mu_);
  impl_->plainAsked = std::max(impl_->plainAsked, upTo);  // publishing ahead is no question that looked ahead
  size_t n0 = impl_->segs.size();
  if (impl_->planned < upTo) impl_->extend(upTo);
  return std::vector<Segment>(impl_->segs.begin() + static_cast<std::ptrdiff_t>(n0), impl_->segs.end());
}

std::vector<Segment> TaskSearch::plan() const {
  std::lock_guard<std::mutex> lk(mu_);
  return impl_->segs;
}
std::vector<Segment> TaskSearch::planAfter(uint64_t k) const {
  std::lock_guard<std::mutex> lk(mu_);
  return segmentsAfter(impl_->segs, k);
}
uint64_t TaskSearch::plannedUpTo() const {
  std::lock_guard<std::mutex> lk(mu_);
  return impl_->planned;
}
void TaskSearch::addSample(uint64_t k, double gpuMicros, double altMicros) {
  std::lock_guard<std::mutex> lk(mu_);
  impl_->sample(k, gpuMicros, altMicros);
}
void TaskSearch::unmeasured(uint64_t k) {
  std::lock_guard<std::mutex> lk(mu_);
  impl_->unmeasured(k);
}
bool TaskSearch::chargeWait(double micros) {
  std::lock_guard<std::mutex> lk(mu_);
  return impl_->chargeWait(micros);
}
void TaskSearch::ncclChoice(int algo, int proto, int channels) {
  std::lock_guard<std::mutex> lk(mu_);
  if (algo < 0 || proto < 0 || channels <= 0) return;
  impl_->ncclAlgo = algo;
  impl_->ncclProto = proto;
  impl_->ncclChannels = channels;
}
bool TaskSearch::isNcclOwn(const Config& c) const {
  std::lock_guard<std::mutex> lk(mu_);
  return impl_->isNcclOwn(c);
}
void TaskSearch::channelsRan(int algo, int proto, int requested, int used) {
  if (used < 1 || requested < 1 || algo < 0 || algo >= kNumAlgos || proto < 0 || proto >= kNumProtos) return;
  std::lock_guard<std::mutex> lk(mu_);
  impl_->channelsRan(algo * kNumProtos + proto, requested, used);
}
bool TaskSearch::provisional(Config* cfg, double* micros, double* defaultMicros) const {
  std::lock_guard<std::mutex> lk(mu_);
  const Impl& m = *impl_;
  if (m.mode != Impl::Mode::kTuning && m.mode != Impl::Mode::kDuel) return false;
  if (m.inc < 0 || m.dflt < 0 || m.inc == m.dflt) return false;
  const auto& i = m.evals[static_cast<size_t>(m.inc)];
  const auto& d = m.evals[static_cast<size_t>(m.dflt)];
  if (i.n() < m.o.minSamplesIncumbent || d.samples.empty() || !m.beats(i, d, m.o.z)) return false;
  *cfg = i.cfg;
  cfg->measure = false;
  *micros = i.med();
  *defaultMicros = d.med();
  return true;
}
bool TaskSearch::ncclStanding(NcclStanding* out) const {
  std::lock_guard<std::mutex> lk(mu_);
  const Impl& m = *impl_;
  if (m.dflt < 0 || m.evals[static_cast<size_t>(m.dflt)].samples.empty()) return false;
  const auto& d = m.evals[static_cast<size_t>(m.dflt)];
  *out = NcclStanding();
  out->ncclUs = median(d.samples);
  out->ncclSamples = static_cast<uint64_t>(d.n());
  for (size_t i = 0; i < m.evals.size(); ++i) {
    if (static_cast<int>(i) == m.dflt) continue;
    out->otherSamples += static_cast<uint64_t>(m.evals[i].n());
    out->otherAhead = out->otherAhead || m.beats(m.evals[i], d, m.o.z);
  }
  return true;
}
std::vector<TaskSearch::PairMeasure> TaskSearch::measuredPairs() const {
  std::lock_guard<std::mutex> lk(mu_);
  return impl_->measuredPairs();
}
void TaskSearch::unprofiled() {
  std::lock_guard<std::mutex> lk(mu_);
  if (impl_->mode != Impl::Mode::kFinal) impl_->toFinal(Config());
}
bool TaskSearch::retuneWithin(int maxChannels, const Config* warm, Standing* before) {
  std::lock_guard<std::mutex> lk(mu_);
  return impl_->retuneWithin(maxChannels, warm, before);
}
bool TaskSearch::converged() const {
  std::lock_guard<std::mutex> lk(mu_);
  return impl_->mode == Impl::Mode::kPinned || impl_->mode == Impl::Mode::kFinal;
}
Config TaskSearch::best() const {
  std::lock_guard<std::mutex> lk(mu_);
  return impl_->best();
}
Stats TaskSearch::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return impl_->st;
}

std::vector<Hint> hintsFor(const std::vector<TableEntry>& table, int coll, uint64_t bytes, int pipe) {
  const TableEntry* lo = nullptr;
  const TableEntry* hi = nullptr;
  for (const TableEntry& e : table) {
    if (e.coll != coll || e.pipe != pipe || e.bytes == 0) continue;
    if (e.bytes == bytes) return {Hint{e.cfg, e.micros, 0.0}};
    if (e.bytes < bytes && (!lo || e.bytes > lo->bytes)) lo = &e;
    if (e.bytes > bytes && (!hi || e.bytes < hi->bytes)) hi = &e;
  }
  std::vector<Hint> out;
  auto dist = [&](const TableEntry* e) {
    return std::fabs(std::log2(static_cast<double>(bytes)) - std::log2(static_cast<double>(e->bytes)));
  };
  for (const TableEntry* e : {lo, hi})
    if (e && dist(e) <= 3.0) out.push_back(Hint{e->cfg, e->micros, dist(e)});  // within 8x in size
  std::sort(out.begin(), out.end(), [](const Hint& a, const Hint& b) { return a.distance < b.distance; });
  return out;
}

}  // namespace autoccl::search
