// Online search for one collective task: subspaces = supported (algorithm, protocol) pairs,
// coordinate descent over channels (and chunk size on tuner v6) inside each, as a schedule keyed by
// call index. NCCL-free; see docs/online-search.md.
//
// Host run-ahead: NCCL asks for call k long before the GPU time of call k-1 is known. The search is
// therefore a *plan*: a sequence of immutable segments [begin, end) -> Config covering call indices
// from 0 upwards. segmentFor(k) returns the segment containing k, extending the plan (decided with
// whatever samples have arrived so far) when k is not covered yet. A segment, once returned, never
// changes. Samples arrive asynchronously through addSample(k, us) and only influence segments that
// are decided later.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "autoccl/common/config.h"
#include "autoccl/common/plan.h"

namespace autoccl::search {

// The shared vocabulary (csrc/common): a call's configuration, the space's dimensions, the plan's segments.
using autoccl::Config;
using autoccl::kForever;
using autoccl::kMaxChunkHalvings;
using autoccl::kNumAlgos;
using autoccl::kNumProtos;
using autoccl::Phase;
using autoccl::phaseName;
using autoccl::Segment;
// A call that ran at least this many channels below its request was capped (by the communicator's count
// or a minimum of traffic per channel); fewer is how the data divides over the channels.
constexpr int kCapShortfall = 2;
// The task's search space, from the first getCollInfo of the task.
struct Space {
  float cost[kNumAlgos][kNumProtos];  // NCCL's cost table; entries < 0 are unsupported: never chosen
  int ncclChannels = 0;   // channels NCCL uses by default for this task if known (profiler), else 0
  int maxChannels = 32;   // safe upper bound for channels (communicator ceiling, AUTOCCL_MAX_CHANNELS)
  int startChannels = 0;  // channels of the first probe per subspace (0: ncclChannels, else maxChannels)
  // Per protocol, how many halvings of NCCL's chunk size are tried (0: the chunk is not tuned; needs the
  // tuner v6 getChunkSize on every rank).
  int maxChunkHalvings[kNumProtos] = {0, 0, 0};
  // What an earlier job of this task measured (the table's pair records): the pair's best median over NCCL's
  // choice's median, 0 where it measured nothing (the engine passes records of 2 samples or more: one outlier
  // must not rule a pair out for good). Options::skipBehind reads it.
  float measuredRatio[kNumAlgos][kNumProtos] = {};
  // The channel count of that pair's best point in the same record, 0 where none is known: Options::recordedStart.
  int measuredChannels[kNumAlgos][kNumProtos] = {};
  Space();
};

// Objective hook: turns one measured GPU time into the value the search minimises. effChannels is
// the channel count in effect (cfg.channels, or NCCL's default when known). Default: the GPU time.
using Objective = std::function<double(const Config& cfg, int effChannels, double gpuMicros)>;
Objective collectiveTime();
// Collective time plus a penalty per channel (µs per channel): models the slow-down a concurrent
// GEMM suffers from every SM the collective takes (compute-aware objective, shared/data/h200x4).
Objective channelPenalty(double microsPerChannel);

// What the searches of one job explore at together (Options::jobRegret; the engine: one per process, for the
// communicators it is the authority of). Each task's regret (Stats::regretMicros) is summed against a share of the
// time the tasks' calls so far (the calls asked, at least the exploring ones planned) would have taken at NCCL's
// medians, plus one allowance of the slowest task's calls: a job whose tasks all explore at once would otherwise
// get an allowance per task (Options::regretAllowance). The budget grows as the job's calls go on, for tasks that
// start or re-tune later. A task that is gone (its search destroyed, its communicator finalized) leaves its regret,
// calls and NCCL median in the sums, so the budget is the same, and frees its slot. Thread-safe: tasks report from the threads that plan and measure them;
// it never calls back into a search.
class RegretLedger {
 public:
  RegretLedger(double share, double allowanceCalls) : share_(share), allowanceCalls_(allowanceCalls) {}
  int join();  // a new task's slot
  // Task `slot` has explored at a net cost of `regretMicros` over `calls` calls whose NCCL median is `ncclMicros`.
  void report(int slot, double regretMicros, double calls, double ncclMicros);
  void leave(int slot);  // the task is gone: its regret and calls stay counted, its slot is reused
  bool allows() const;  // the tasks' summed regret is within the budget
  double regretMicros() const;  // the summed regret, of the tasks that left too
  size_t slots() const;  // slots held (tests)

 private:
  struct Slot {
    double regret = 0, base = 0, nccl = 0;
    bool used = false;
  };
  // Every slot's and the tasks' that left: regret and base summed, nccl the slowest task's median. mu_ held.
  Slot totalLocked() const;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  std::vector<int> free_;
  double goneRegret_ = 0, goneBase_ = 0, goneSlowest_ = 0;  // of the tasks that left
  double share_, allowanceCalls_;
};

struct Options {
  int baselineSamples = 6;      // samples of NCCL's default before anything can replace it
  // Samples a side when a table's exact entry is verified against NCCL's choice at a start (0: baselineSamples).
  int verifySamples = 0;
  // Once the verification's turns are planned and their samples are still in flight, the table's config runs
  // this many calls (untimed) before the verdict is planned. Each wait is a plan lookup on every rank, over TCP
  // a round trip to the authority: 1 made a lookup per call until the samples came (2 x H200, one process per
  // GPU: in every tuned task of every warm nccl-tests launch, lookups at calls 18-22, the last waiting
  // 0.5-1.1 ms, inside the timed loop).
  uint64_t verifyWait = 1;
  // The exact hint is trusted: pinned untimed from the task's first call, never verified, checked or re-tuned;
  // without a valid exact hint (or with one of NCCL's choice) NCCL's choice for good. No call is ever timed. Table
  // mode under the step guard: the guard's rounds judge the whole table against NCCL's choices on the step.
  bool pinExactHint = false;
  int samplesFirst = 3;         // first block of a candidate
  // Calls of a pair's first probe planned before its first samples decide the rest of its block (0: samplesFirst,
  // all at once). A block is planned before its first sample returns, so a pair far behind costs the whole block:
  // over sockets on one H200 ring/LL's probe ran 3 calls at 3.7x NCCL's time in a 20-call loop
  // (h200x1/speculation-measured-points). 1: one call, the rest only within abandonAbove of the incumbent.
  int probeFirst = 0;
  // The same for the descent's points of a subspace whose current point trails the best measured by more than
  // stepFirstBehind (the neighbours a step asks for, and the points speculated while samples are in flight): calls
  // of each planned before its first samples decide the rest of its block (0: samplesFirst). Over sockets on one
  // H200 such blocks (PAT at 1, 3 and 6 channels, 20-47 % behind ring at 2) cost the cold loops +3.3 to +9.3 % of NCCL's
  // kernel time; the leading subspace keeps its blocks (search test stepFirstModels).
  int stepFirst = 0;
  double stepFirstBehind = 0.10;
  int samplesMax = 10;          // a candidate close to the incumbent is sampled up to this many times
  int minSamplesIncumbent = 5;  // a candidate needs this many samples to become the incumbent
  double minMargin = 0.005;     // relative margin floor for "beats by more than the noise"
  double z = 2.0;               // significance: beat by z standard errors of the medians
  double probeKeep = 1.00;      // subspaces slower than best*(1+probeKeep) are dropped at once
  double maxCostRatio = 4.0;    // pairs NCCL's cost model puts above this x its choice are not probed (0: all)
  // Pairs an earlier job measured slower than this x NCCL's choice (Space::measuredRatio) are not probed
  // at the task's first search, nor after the table's entry lost its verification (a hinted pair always is; a
  // re-tune after drift probes them again). 0: all.
  double skipBehind = 2.0;
  // A pair an earlier job measured (Space::measuredChannels) is first probed at the channel count of its best point
  // there (within the communicator's cap, Space::startChannels), not at the widest: where channels matter (NVLink)
  // the widest point of a pair can be far from its best, and a job that ended mid-search probes it again at every
  // start (search test recordedStartModels: H200-like models' next job 0.993x NCCL's time instead of 1.148x). Only
  // the start moves: the descent keeps its cold step. Not after drift (the machine changed), nor for a pair a hint
  // gives a channel count (the hint's point rules; a neighbour's entry where NCCL's choice won gives none).
  bool recordedStart = true;
  // > 0: a pair probed first at its recorded best point (recordedStart) descends from there with this step (log2
  // channel units) instead of initStep, as from a hint. 0: the cold step. Search test recordedStepModels.
  double recordedStep = 0;
  int halvingRounds = 2;        // successive halving after each of the first descent iterations
  int keepSubspaces = 1;        // at most this many subspaces are descended after the halving
  // A descent over with budget left descends the best subspace the halving dropped, one at a time, where its
  // median is within this of the best so far (a few samples of one point rank subspaces within the noise).
  double reviveWithin = 0.10;
  double initStep = 1.5;        // channel step in log2 units (x2) for a cold start
  double warmStep = 0.5;        // ... for a start from a neighbour's config
  double worthwhile = 0.01;     // a descent move gaining less than this is not worth more samples
  double minStep = 0.2;         // a dimension stops when its step falls below this (log2 units)
  double stepGainRef = 0.10;    // step *= 1 + gain/stepGainRef (capped x2): AutoCCL's learning rate
  uint64_t lead = 4;            // the plan always covers at least [k, k+lead) once k is asked
  // A planned sample is lost (stop waiting for it) when a sample of a call >= k + reorderSlack has
  // arrived (one task's kernels run in stream order), or when lostAfter later calls were planned and,
  // with a clock, lostAfterMs have passed since it was planned (the host may run hundreds of calls
  // ahead of the GPU in a burst without synchronisation: nccl-tests' warm-up), or in any case after
  // lostAfterHard later calls (bounds a search whose samples never come).
  uint64_t lostAfter = 64;
  uint64_t reorderSlack = 32;
  uint64_t lostAfterMs = 3000;
  uint64_t lostAfterHard = 2048;
  std::function<uint64_t()> clockMs;  // empty: the call-count rule alone (deterministic tests)
  // The search's diagnostics, one line a call (why a task pinned what it pinned: every candidate's evidence,
  // each duel): empty, none. The engine routes them to NCCL's log under AUTOCCL_SEARCH_DEBUG.
  std::function<void(const std::string&)> debug;
  int maxLostRounds = 3;        // a candidate losing all its samples this often is abandoned
  uint64_t maxTuningCalls = 144;  // after this many exploring calls the incumbent is pinned
  // Before pinning a configuration other than NCCL's: this many fresh samples of each, alternately;
  // the default stays unless the other's median is lower on them too (0: pin on the tuning samples).
  // Odd, so that the median of each side survives two outliers. Comes out of maxTuningCalls.
  int duelSamples = 5;
  // ... lower by more than duelZ standard errors of the difference of the two sides' medians (their own
  // noise: the tuning samples of NCCL's choice may span a settling start, the duel's are fresh). Without a
  // margin, two configurations within the noise of each other tie and the duel pins either at random.
  double duelZ = 1.0;
  // A duel whose tuned side is lower but within that margin takes up to duelSamples more samples a side, up to
  // this many times, where the exploration budget has room for them, and decides on all of them.
  int duelExtensions = 2;
  // Calls per turn of the duel and of the table verification, all of the turn's configuration; only the
  // one at (duelRun - 1) / 2 is a sample. 3 where a call is scored by its stream period (to the next
  // call's start): taken call by call, a host-bound call's period would measure the launch of the other
  // configuration next, and a call would carry what the other configuration left behind (a kernel that
  // holds one rank after its window delays the next call on every rank).
  int duelRun = 1;
  // Calls spent waiting for samples (the incumbent, timed, while nothing can be decided) more than
  // freeWaitLag calls after the newest delivered sample do not count against maxTuningCalls, up to
  // maxWaitCalls per tuning round (a burst of host run-ahead must not end the search unmeasured).
  uint64_t freeWaitLag = 32;
  uint64_t maxWaitCalls = 256;
  // A rank that asks its authority ahead of its plain question (AUTOCCL_ASK_AHEAD) makes the search plan before the
  // samples of the calls in between can be back: each wait for samples runs that many calls longer. So of a run of
  // waits (between two calls that explore) planned for a question that leads by L calls (segmentFor's `ahead`), and
  // more than `lead` calls beyond the furthest plain question, the first L are free, within the same maxWaitCalls;
  // the rest the search has without looking ahead. Counted, they spent all_reduce 64 MiB's budget in the emulator's
  // four-process job asking 16 ahead (64 waits, NCCL's choice pinned at call 108 with its chunk candidates in
  // flight, against a 4.5 % gain at the default: benchmarks/results/cpu/ask-ahead/budget.md). Freeing every wait
  // beyond the plain question instead freed all of them (166 of 167) and left maxWaitCalls the only bound.
  // false: only freeWaitLag decides.
  bool lookAheadWaitsFree = false;
  uint64_t recheckFirst = 256;  // pinned: first drift check after this many calls
  uint64_t recheckMax = 16384;  // ... interval doubles up to this
  // With a clock: a drift check also waits until this long has passed since the pin or the last check,
  // scaled like the call interval (x2 per quiet check). Checks are for drift over seconds; spaced by
  // calls alone they landed in a benchmark's measured passes, and in one process driving several GPUs
  // a check times every call of the process while it waits for its samples (4 x H200, reduce_scatter
  // 16 MiB: 59.5 us per call in a pass without a check, 91.3 us in one with it). 0: calls only.
  uint64_t recheckMinMs = 0;
  // > 0: a pinned segment covers at most this many calls, or a quarter of the calls since the pin if more (the pin
  // continues in the next one). Segments already served never change, so a re-tune (retuneWithin) starts where the
  // served one ends: without a bound, up to recheckMax calls later; with it, within a quarter of the pin's age.
  // Each end is one more plan lookup on every rank, and one more segment kept: a few dozen a pin over a long job.
  // 0: to the next check.
  uint64_t pinnedSegmentMax = 0;
  int checkSamples = 3;
  double driftThreshold = 0.10;  // relative change of the pinned time that counts as drift
  int driftConfirm = 2;          // consecutive drifting checks before a re-tune
  bool drift = true;             // false: the plan ends in a kFinal segment once converged
  Objective objective;           // empty: collective time
  uint64_t firstCall = 0;        // the plan starts here (calls before it were decided elsewhere)
  // The calls before firstCall ran NCCL's default, timed (the coordinator's default for a task the authority had
  // not seen yet: kTuning segments, which every rank times). Their samples count as NCCL's baseline, the
  // latest 2 x baselineSamples of them, so a search that starts late does not spend its first calls measuring
  // again what already ran, and the calls count against maxTuningCalls (at most a quarter of it): the task is
  // pinned within the budget counted from its first call (process-mode demo: searches starting at call 17
  // pinned at call 155-158).
  bool defaultTimedBefore = false;
  // A task whose NCCL choice costs less than this (µs, median of its baseline samples) keeps NCCL's choice
  // for good, untimed: a few per cent of a short call cannot repay exploring it (each timed call costs the
  // host more than such a gain returns in a short run; on 2 x H100 a timed 1-4 MiB call took 20-45 % longer
  // in nccl-tests' loop). 0: every task is searched.
  double minTaskMicros = 0;
  // A task NCCL's cost model puts below this share of minTaskMicros is small from its first call, with no
  // baseline sample and no further plan step (each step can wait for the authority over TCP). 0: the
  // samples decide alone.
  double modelSmallShare = 0;
  // Exploration may cost the task at most regretBudget x (its tuning calls so far x NCCL's median) plus
  // regretAllowance x NCCL's median, counted as the sum over trial samples of (sample - NCCL's median): a
  // faster trial pays back what a slower one cost. Beyond that, tuning ends with the incumbent (a candidate
  // other than NCCL's choice still has to win the duel). regretBudget 0: no bound.
  double regretBudget = 0;
  double regretAllowance = 4;
  // The allowance is earned: at most regretEarn x the task's tuning calls so far (capped at regretAllowance),
  // so a task that recurs a few times can lose only that share of its time, whatever the job's length.
  // 0: the whole allowance from the first call.
  double regretEarn = 0;
  // Calls planned but not yet measured count against the budget at an estimate of their extra time, as shares
  // of NCCL's median: a measured configuration its median's excess, one with no sample yet the larger of this
  // and NCCL's model's excess. A candidate's calls wait (the incumbent runs meanwhile) while the estimate would
  // overrun the budget: the host launching a loop before any of its samples returns cannot overspend it blind.
  // 0: only samples count.
  double inflightRegret = 0;
  // Shared by the job's tasks: once their summed regret exceeds the job's budget (RegretLedger), every task still
  // exploring ends its tuning as if its own budget were spent. Null: no job bound.
  std::shared_ptr<RegretLedger> jobRegret;
  // A candidate whose first sample is this much slower than the incumbent (relative) gets no further
  // samples: one slow call is already what it costs. 0: off.
  double abandonAbove = 0;
  // While the plan runs more than unprovenLag calls ahead of the newest sample, no call of a candidate with no
  // sample yet is planned while this many such calls are in flight (those planned inside the lag are not held
  // back); the incumbent runs meanwhile, timed, free against maxTuningCalls within maxWaitCalls a round. A host
  // that runs ahead of the GPU plans a whole burst before any sample returns (nccl-tests' timed loop: 40 calls),
  // and neither abandonAbove nor the regret budget can take back a call already planned: one process per host
  // over sockets on one H200, a warm start that searched again ran ring/LL at 3.4-4.8x NCCL's time on 9 of the 40
  // calls of all_gather 16 MiB, three points of one pair planned before the first of them was measured. It also moves exploration out of bursts the user does not time
  // (nccl-tests' warm-up) into later ones: see the search test unprovenBursts. 0: off.
  int maxUnprovenCalls = 0;
  uint64_t unprovenLag = 8;
  // While nothing can be decided until samples arrive, measure a point the descent will probably ask for next
  // (false: the incumbent runs meanwhile). In nccl-tests' loops the speculated points, planned blind, are most of
  // the H200-like models' costliest loops (search test unprovenBursts). Only around a point with a sample that is
  // not more than twice the best (or probeKeep, if wider): a neighbour of a probe still in flight, or of one the
  // probes' pruning will drop, is a blind call with nothing to say it is worth one (noSpeculationAroundLosers).
  bool speculate = true;
};

// A tuned configuration known for another (or the same) size of the task, e.g. from a table.
struct Hint {
  Config cfg;
  double micros = 0;     // its measured time then (informational)
  double distance = 0;   // |log2(bytes/hintBytes)|; 0 = exact: the task starts tuned (verified)
};

struct Stats {
  uint64_t tuningCalls = 0;     // call indices planned in kTuning
  uint64_t waitCalls = 0;       // ... of which waiting for samples (the incumbent as filler)
  uint64_t freeWaitCalls = 0;   // ... of those, not counted against maxTuningCalls (freeWaitLag, maxUnprovenCalls)
  uint64_t aheadWaitCalls = 0;  // ... of the free ones, planned only for a question that looked ahead (lookAheadWaitsFree)
  uint64_t lateSamples = 0;     // samples that arrived after their call had been given up as lost
  uint64_t candidates = 0;      // distinct configurations measured
  uint64_t samples = 0;         // samples accepted
  uint64_t lostSamples = 0;
  uint64_t retunes = 0;
  uint64_t capRetunes = 0;      // ... of which for a channel cap, set, changed or lifted (TaskSearch::retuneWithin)
  int channelCap = 0;           // the channel cap the search runs within (retuneWithin); 0: none
  uint64_t duelExtensions = 0;  // further blocks of samples the duels took (Options::duelExtensions)
  uint64_t priorSamples = 0;    // ... of which of calls before Options::firstCall (defaultTimedBefore)
  uint64_t convergedAt = kForever;  // first call index after the tuning phase
  double defaultMedian = 0;     // objective of NCCL's default (median), 0 if unmeasured
  double modelDefault = -1;     // NCCL's cost model's estimate of its choice (us), -1 if none was given
  double bestMedian = 0;        // objective of the pinned configuration (median)
  double noise = 0;             // relative noise (1.4826 MAD / median) of the default
  double regretMicros = 0;      // exploration's net cost against NCCL's median (Options::regretBudget)
  double waitRegretMicros = 0;  // ... of which the callers' waits for the task's plan (TaskSearch::chargeWait)
  bool smallTask = false;       // kept NCCL's choice below Options::minTaskMicros
  bool smallByModel = false;    // ... judged from NCCL's cost model alone (Options::modelSmallShare)
  bool tableDefault = false;    // kept NCCL's choice from the start: the table's exact entry says it won
  bool regretStop = false;      // tuning ended by the regret budget (the task's or the job's)
  bool jobRegretStop = false;   // ... by the job's (Options::jobRegret) while the task's own had room
  uint64_t abandoned = 0;       // candidates given up after one far slower sample (Options::abandonAbove)
  uint64_t skippedBehind = 0;   // pairs not probed: an earlier job measured them far behind (Options::skipBehind)
  uint64_t recordedStarts = 0;  // pairs whose first probe moved to an earlier job's best point (Options::recordedStart)
  double regretAllowance = 0;   // the allowance this search had (Options::regretAllowance), calls
  uint64_t unprovenWaits = 0;   // calls the incumbent ran while maxUnprovenCalls held candidates back
  uint64_t regretWaits = 0;     // ... while the search earned its allowance (Options::regretEarn)
  // Tuning ended with NCCL's own configuration in its explicit form as the incumbent (TaskSearch::ncclChoice):
  // NCCL's choice was pinned, without a duel of two identical configurations.
  bool ncclOwnIncumbent = false;
};

class TaskSearch {
 public:
  explicit TaskSearch(const Space& space, Options opt = Options(), std::vector<Hint> hints = {});
  ~TaskSearch();
  TaskSearch(const TaskSearch&) = delete;
  TaskSearch& operator=(const TaskSearch&) = delete;

  // The segment containing call k. Extends the plan to cover at least [k, k+lead) if needed.
  // Thread-safe. Segments already returned are never changed. `ahead`: the question for k leads by that many calls
  // the one its rank would ask without looking ahead (AUTOCCL_ASK_AHEAD): calls planned beyond the furthest plain
  // question + lead are the look-ahead's (Options::lookAheadWaitsFree).
  Segment segmentFor(uint64_t k, uint64_t ahead = 0);
  Config configFor(uint64_t k) { return segmentFor(k).cfg; }
  // Publish-ahead: make the plan cover all calls < upTo (if not yet). Returns the segments added.
  std::vector<Segment> extendTo(uint64_t upTo);
  // Every segment planned so far (a copy), in call order.
  std::vector<Segment> plan() const;
  // The segments planned so far that end after call k (a copy): what a lookup past coverage k needs, without
  // copying the whole plan (which grows with the job: a pinned task's checks add segments).
  std::vector<Segment> planAfter(uint64_t k) const;
  uint64_t plannedUpTo() const;  // calls < this are decided

  // GPU time of call k (any thread, any order). Ignored unless call k was planned with measure.
  // altMicros (> 0): a second measure of the same call's cost (the kernel window when the first is the
  // stream period). The duel leaves NCCL's choice only for a configuration faster on both.
  void addSample(uint64_t k, double gpuMicros, double altMicros = -1.0);

  // Call k, planned with measure, ran untimed (its sample will not come): given up at once rather than
  // after the lost-sample rules (Options::reorderSlack, lostAfter). A sample of k arriving anyway counts.
  void unmeasured(uint64_t k);

  // The job's callers waited `micros` on the host for this task's plan (a lookup that had to ask the
  // authority) while it explored. NCCL's choice alone needs no plan, so such a wait is exploration's cost on the
  // caller's clock: it counts into the regret (Options::regretBudget, jobRegret) like a trial's extra time. Not
  // counted outside tuning, nor before NCCL's choice has a sample (the start of coordination is not exploring).
  // The caller charges a call's wait once, as the longest over the ranks (they wait for the same plan at once).
  // False when not counted (outside tuning, or before NCCL's first sample).
  bool chargeWait(double micros);

  // What NCCL runs for this task when left alone, as the engine learns it from the profiler (each lone collective
  // of NCCL's choice: its pair and channel count, NCCL's chunk; the latest wins). A configuration forcing exactly that (same pair, the same channel count,
  // no chunk of its own) is NCCL's choice: where tuning ends with it as the incumbent, or it wins the duel, NCCL's
  // choice is pinned. Else a duel of two identical configurations is decided by noise: FSDP2 over sockets on one
  // H200 pinned ring/simple/2, NCCL's own choice, for all_gather 150 MiB on a "gain" of 15.8 %, and the step
  // guard then compared two identical plans. algo or proto < 0, or channels <= 0: not known. The channel count
  // compared is the one the configuration ran on where channelsRan reported it (NCCL runs a request on fewer
  // channels where the data divides so), else the one it asks for. Tuning ending there pins NCCL's choice in its
  // place (Stats::ncclOwnIncumbent).
  void ncclChoice(int algo, int proto, int channels);
  // `c` is NCCL's own configuration in its explicit form, by the rule above (false while NCCL's is not known).
  // The table writer asks this too, so that an entry and a pin judge alike.
  bool isNcclOwn(const Config& c) const;

  // A call of this task with pair (algo, proto) that asked for `requested` channels ran on `used` (the
  // profiler reports the channels that did work). NCCL caps a request at the communicator's channel count,
  // and spreads a small task over fewer channels by a minimum of traffic per channel that differs between
  // pairs: where `used` is at least 2 below `requested` and the pair never ran on more, every point of the
  // pair above `used` is the point `used`: its range is clamped there and such points are merged (samples
  // kept), so the search does not compare configurations NCCL treats as identical. One or two fewer is how
  // the data divides over the channels, and a count below one the pair has run on is no ceiling; other
  // pairs keep their ranges. Call it for every measured call that forced a channel count.
  void channelsRan(int algo, int proto, int requested, int used);

  // What a converged search stands at (retuneWithin's `before`): its pin, statistics and measured pairs, and
  // whether the pin is NCCL's own configuration in its explicit form.
  struct Standing;
  // Search again, from the next call not yet planned, within `maxChannels` channels (<= 0: the whole space again):
  // the step guard's arm that won caps every call of this task (engine/step_guard.h), so the configuration pinned
  // for NCCL's full count no longer runs as measured. NCCL's choice, the baseline, is then NCCL's pair at the cap
  // (what the arm makes of it: the caller feeds only the calls that ran so); NCCL's own configuration, the channel
  // space (what channelsRan learned kept), the first probes and the warm hint (`warm`, else the current pin) are
  // all taken within the cap, and an earlier job's records are not trusted (measured without it). The medians are
  // the new search's from here on. With `before`, it is refused unless the search is pinned, and *before gets its
  // standing as the re-tune begins (under the same lock). False, and nothing changes, where the plan ends in a
  // final segment, the pin is a table's on trust (Options::pinExactHint), the cap is the one the search runs within,
  // or a first cap is one the pin already runs within (the whole space's best is within it).
  bool retuneWithin(int maxChannels, const Config* warm = nullptr, Standing* before = nullptr);

  // NCCL reports no profiler event for this task's collective (NCCL 2.30 turns a lone broadcast into a task
  // that carries none), so none of its calls can be measured: from the next planned call on, NCCL's choice
  // for good, rather than waiting for samples through the lost-sample rules (seconds of short segments).
  void unprofiled();

  bool converged() const;  // the last planned segment is pinned / check / final
  // Not converged yet, but a candidate other than NCCL's choice leads on at least minSamplesIncumbent samples
  // and beats NCCL's median by more than the noise: its configuration and both medians. What a job that ends
  // mid-search (nccl-tests gives a size about a hundred calls) hands to the next one, which verifies it
  // against NCCL's choice before pinning it (a table entry is a hint, never trusted blindly).
  bool provisional(Config* cfg, double* micros, double* defaultMicros) const;
  // NCCL's choice as this search has timed it so far, against every other point it timed: NCCL's median and
  // samples, the other points' samples, and whether one of them beats NCCL's median by the duel's margin (Options::z;
  // one sample can). False with no sample of NCCL's choice. What a job that ends with no lead may write off.
  struct NcclStanding {
    double ncclUs = 0;
    uint64_t ncclSamples = 0, otherSamples = 0;
    bool otherAhead = false;
  };
  bool ncclStanding(NcclStanding* out) const;
  // Every pair measured in the current round, with the best median of its points and NCCL's choice's median
  // (empty while NCCL's choice has no sample): what a later job's search reads back (Space::measuredRatio).
  struct PairMeasure {
    int algo = -1, proto = -1;
    double micros = 0, defaultMicros = 0;
    uint64_t samples = 0;
    int channels = 0;  // the channel count of the pair's best point
  };
  std::vector<PairMeasure> measuredPairs() const;
  struct Standing {
    Config best;
    Stats stats;
    std::vector<PairMeasure> pairs;
    bool ncclOwn = false;
  };
  Config best() const;     // current incumbent (the pinned config once converged)
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  mutable std::mutex mu_;
};

// Warm start: hints for a task of `bytes` from tuned entries of the same (collective, pipe) at other
// sizes: the exact entry if present (distance 0), else the nearest smaller and larger sizes.
struct TableEntry {
  int coll = 0;
  uint64_t bytes = 0;
  int pipe = 1;
  Config cfg;
  double micros = 0;
};
std::vector<Hint> hintsFor(const std::vector<TableEntry>& table, int coll, uint64_t bytes, int pipe);

}  // namespace autoccl::search
