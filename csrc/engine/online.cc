#include "engine/online.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "engine/call_pace.h"
#include "engine/exposure_recorder.h"
#include "engine/search_decider.h"
#include "engine/settings.h"
#include "engine/step_guard.h"
#include "engine/task_record.h"
#include "engine/timing.h"
#include "engine/timing_holds.h"
#include "engine/trace.h"

namespace autoccl::engine {

// The search plans chunk halvings up to its bound; tables, the Context and the coordinator's wire check the
// engine's (the search library stays free of engine types, so the two are declared apart).
static_assert(kMaxChunkHalvings == search::kMaxChunkHalvings, "one bound for chunk halvings");

namespace {

// AUTOCCL_REGRET_EARN_PCT as the search takes it: the allowance earned at `earn` of the task's calls, and then the
// calls planned ahead of their samples charged at 30 % of NCCL's time (or a record, or their measured excess).
void setEarnedAllowance(search::Options& o, double earn) {
  o.regretEarn = earn;
  o.inflightRegret = earn > 0 ? 0.3 : 0;
}

// Timing on this many calls before a segment ends (a check block may follow): NCCL reads the mask when
// a group starts, so the call before the check must switch it on. More costs time where the host is the
// bottleneck: with one process for 2 GPUs, 8 timed calls before each check doubled a 4 MiB all_gather's
// out-of-place time in nccl-tests' last pass (49 us vs 23 us in-place).
constexpr uint64_t kNeedLookahead = 2;
// ... and for this many calls after the last timed one: a call scored by its period ends at the next
// call's kernel start, which NCCL profiles only if the mask was on when that call's group started. Not
// until the timed calls' events arrive: NCCL caches the mask per operation at launch, so their events come
// anyway, and holding the mask meanwhile timed every call of the process for tens of calls after each
// drift check (one process per GPU, 4 x H200, reduce_scatter 4 MiB: 39 calls of nccl-tests' last pass
// timed, 61.7 us per call against 30.6 in the pass before).
constexpr uint64_t kNeedAfter = 1;
constexpr int kLocalWaitMs = 2000;       // in-process board: wait for all ranks of a comm to attach

std::string cfgText(const search::Config& c) {
  if (c.isDefault()) return "NCCL's choice";
  std::string s = std::string(algoName(c.algo)) + "/" + protoName(c.proto);
  if (c.channels) s += "/" + std::to_string(c.channels);
  if (c.chunk) s += "/chunk=" + std::to_string(c.chunk);
  if (c.chunkHalvings) s += "/chunk=nccl/" + std::to_string(1 << c.chunkHalvings);
  return s;
}

coord::Segment finalDefault(uint64_t from) {
  coord::Segment s;
  s.begin = from;
  s.end = search::kForever;
  s.phase = search::Phase::kFinal;
  return s;
}

// The step guard's plan travels on the board as a task of its own: this collective id, keyed by iteration.
constexpr uint32_t kGuardColl = 0x100;

// The authority's Decider on the in-process board: the search, gated on "all ranks are here"; the guard key
// from the step guard's plan.
class GatedDecider final : public coord::Decider {
 public:
  GatedDecider(Coordination* co, int nRanks, GuardOptions guardOptions, bool chargeWaits)
      : inner(SearchDecider::kDefaultWindow, chargeWaits), guard(std::make_shared<GuardPlan>(std::move(guardOptions))), co_(co), nRanks_(nRanks) {}
  std::vector<coord::Segment> decide(const coord::TaskKey& t, uint64_t k, uint64_t covered) override {
    if (!co_->allLocal(t.comm, nRanks_, std::chrono::milliseconds(kLocalWaitMs))) return {finalDefault(covered)};
    if (t.coll == kGuardColl) return guard->decide(k, covered);
    return inner.decide(t, k, covered);
  }
  // Another rank's time of guard iteration k (the ranks of this process report through the in-process board).
  void observe(const coord::TaskKey& t, int rank, uint64_t k, double us) override {
    if (t.coll == kGuardColl) guard->sample(k, us, rank);
  }
  void observeWait(const coord::TaskKey& t, int rank, uint64_t k, double us) override {
    (void)rank;
    inner.chargeWait(t, k, us);
  }
  SearchDecider inner;
  std::shared_ptr<GuardPlan> guard;

 private:
  Coordination* co_;
  int nRanks_;
};

// The same search served to other processes over TCP (no gate: the ranks asking are elsewhere). Other
// ranks' reported windows go to `observer` (the authority's ArrivalMerge; empty: ignored).
class ForwardDecider final : public coord::Decider {
 public:
  using Observer = std::function<void(const coord::TaskKey&, int rank, uint64_t k, double us)>;
  ForwardDecider(SearchDecider* inner, std::shared_ptr<GuardPlan> guard, Observer observer)
      : inner_(inner), guard_(std::move(guard)), observer_(std::move(observer)) {}
  std::vector<coord::Segment> decide(const coord::TaskKey& t, uint64_t k, uint64_t covered) override {
    return decideAhead(t, k, covered, 0);
  }
  std::vector<coord::Segment> decideAhead(const coord::TaskKey& t, uint64_t k, uint64_t covered, uint64_t ahead) override {
    if (t.coll == kGuardColl) return guard_->decide(k, covered);
    return inner_->decideAhead(t, k, covered, ahead);
  }
  void observe(const coord::TaskKey& t, int rank, uint64_t k, double us) override {
    if (t.coll == kGuardColl) {
      guard_->sample(k, us, rank);  // another rank's time of guard iteration k
      return;
    }
    if (observer_) observer_(t, rank, k, us);
  }
  void observeWait(const coord::TaskKey& t, int rank, uint64_t k, double us) override {
    (void)rank;
    inner_->chargeWait(t, k, us);
  }

 private:
  SearchDecider* inner_;
  std::shared_ptr<GuardPlan> guard_;
  Observer observer_;
};

// Where a communicator's decisions come from, settled at each rank's first decision (the same answer
// on every rank: one remembered verdict per communicator and process, see Coordination::allLocal).
enum class Place : int { kUnknown = 0, kLocal = 1, kTcp = 2, kBypass = 3 };

const char* placeName(Place p) {
  switch (p) {
    case Place::kLocal: return "local";
    case Place::kTcp: return "tcp";
    case Place::kBypass: return "none";
    default: return "unknown";
  }
}

class OnlineSource final : public DecisionSource {
  struct TaskState;  // a task's state (below)

 public:
  // `board`: the process's board (TCP when a coordinator address is configured, else in-process).
  // A communicator whose ranks are all in this process uses the in-process board even with TCP
  // configured: one host thread launching every GPU then scores by the slowest rank (RankMerge) and
  // no decision crosses a socket (nccl-tests -g 4 under `autoccl run`, which always sets an address).
  OnlineSource(const PolicyEnv& env, std::shared_ptr<coord::Board> board)
      : env_(env), tcpBoard_(env.coordination->tcp() ? std::move(board) : nullptr),
        localBoard_(env.coordination->localBoard()), authority_(env.rank == 0), holds_(env.needChanged) {
    opts_ = onlineSearchOptions();
    if (env.settings && env.settings->searchDebug && env.log) {
      LogFn log = env.log;
      opts_.debug = [log](const std::string& line) { log(LogLevel::Info, line); };
    }
    guardKey_.comm = env.commHash;
    guardKey_.coll = kGuardColl;
    guardKey_.pipe = 0;
    guardKey_.bytes = 0;
    guardOn_ = env.settings == nullptr || env.settings->guard;
    pinTable_ = env.settings && env.settings->mode == Mode::Table;
    // Step arms: every rank (the setting is agreed, AgreedSettings) keeps asking for settled tasks' calls, so
    // that a hidden-cap arm reaches them and the iteration detector sees every call.
    askAlways_ = guardOn_ && env.settings &&
                 (!env.settings->stepArmsHidden.empty() || !env.settings->stepArmsEstimated.empty());
    armSearch_ = askAlways_ && !pinTable_ && env.settings->armSearch;  // table mode searches nothing
    // A search within a winning cap starts where the task's served segment ends: pins in pieces of kPinnedPiece
    // calls, or a quarter of the pin's age (search::Options::pinnedSegmentMax), so that it starts soon after the
    // verdict, not at the pin's next check (up to 16,384 calls later). With arms every rank asks for every call
    // anyway; a piece's end is one more plan lookup.
    if (armSearch_) opts_.pinnedSegmentMax = kPinnedPiece;
    askAhead_ = env.settings ? env.settings->askAhead : 0;
    askAheadAuto_ = env.settings && env.settings->askAheadAuto;
    // A question asked ahead makes the search plan before the samples in between are back: its waits beyond the
    // asker's plain question are the question's lead, not the search's (Options::lookAheadWaitsFree; the question
    // carries its lead, Board::prefetch's beyondDefault).
    opts_.lookAheadWaitsFree = askAhead_ > 0 || askAheadAuto_;
    exposureEvery_ = env.settings ? env.settings->exposureEvery : 0;
    launchClock_ = env.settings == nullptr || env.settings->clock == Settings::Clock::Launch;
    if (env.settings) {
      opts_.recheckMinMs = env.settings->recheckMs;
      opts_.minTaskMicros = env.settings->minTaskUs;
      // A task NCCL's model puts below a quarter of the minimum (default) is small from its first call: no
      // lookup waits on the samples that would prove it (over TCP a round trip each). A quarter: the model
      // would have to be 4x optimistic for a task worth searching to be left out.
      opts_.modelSmallShare = env.settings->modelSmallShare;
      opts_.regretBudget = env.settings->regretBudget;
      // The tasks share one budget too: of every communicator this process is the authority of (the Runtime's
      // ledger), or of this communicator alone where a PolicyEnv comes without a Runtime (tests).
      if (authority_ && env.settings->jobRegretBudget > 0)
        opts_.jobRegret = env.jobRegret ? env.jobRegret
                                        : std::make_shared<search::RegretLedger>(env.settings->jobRegretBudget,
                                                                                 opts_.regretAllowance);
      opts_.probeKeep = env.settings->probeKeep;
      opts_.skipBehind = env.settings->skipBehind > 0 ? 1.0 + env.settings->skipBehind : 0.0;  // percent slower -> ratio
      opts_.verifyWait = env.settings->verifyWait;
      opts_.probeFirst = static_cast<int>(env.settings->probeCalls);  // at most the whole block (probeBlock)
      opts_.stepFirst = static_cast<int>(env.settings->stepCalls);    // ... (stepBlock)
      opts_.maxUnprovenCalls = env.settings->unprovenCalls;
      opts_.speculate = env.settings->speculate;
      opts_.recordedStart = env.settings->recordedStart;
      setEarnedAllowance(opts_, env.settings->regretEarn);
    }
    if (env.table) {
      for (const TableEntry& e : env.table->entries) {
        search::TableEntry h;
        h.coll = e.key.coll;
        h.bytes = e.key.bytes;
        h.pipe = e.key.pipe;
        h.cfg.algo = e.config.algo;
        h.cfg.proto = e.config.proto;
        h.cfg.channels = e.config.channels;
        h.cfg.chunk = 0;  // the search sets chunks relative to NCCL's only
        h.cfg.chunkHalvings = e.config.chunkHalvings;
        h.micros = e.timeUs;
        hints_.push_back(h);
      }
      tablePairs_ = env.table->pairs;
    }
    if (env.settings && env.settings->inprocSlowest && env.nRanks > 1 && env.nRanks <= 64)
      merge_ = env.coordination->rankMerge(env.commHash, env.nRanks);
    // Ranks in other processes score by the shortest window among the reporting ranks (ArrivalMerge):
    // the authority merges, the first kReportRanks - 1 other ranks time their tuning calls and report.
    const bool xproc = tcpBoard_ && env.settings && env.settings->xprocShortest && env.nRanks > 1;
    if (xproc && authority_) arrival_ = std::make_unique<ArrivalMerge>(env.nRanks, opts_.clockMs);
    reporting_ = xproc && !authority_ && env.rank < ArrivalMerge::kReportRanks;
    if (reporting_) {
      // Timing on from the start, as on the authority (the first tuning calls are reported too); released
      // like the authority's once none of this rank's tasks is in a timed segment, or at once when the
      // communicator turns out to be entirely in this process (settlePlace).
      holds_.holdFromStart();
    }
    if (authority_) {
      // Timing on from the start: NCCL reads the mask at the start of a group, so the first call of
      // a task could not be timed if we switched it on only when that call is decided (a planned
      // sample lost costs the search `lostAfter` calls). Released once every task seen is pinned, which
      // can be at the first call (a task NCCL's model puts below the minimum): a task first seen later
      // may then lose its first sample (the search asks for it again, TaskSearch::unmeasured).
      holds_.holdFromStart();
      // Served on both boards from the start (remote ranks may ask before this rank's first call);
      // only the board of the communicator's place is ever asked.
      // The step guard's arms (AUTOCCL_STEP_ARMS): planned here alone; the other ranks apply what its plan says.
      GuardOptions guardOptions;
      if (env.settings) {
        guardOptions.hiddenArms = env.settings->stepArmsHidden;
        guardOptions.estimatedArms = env.settings->stepArmsEstimated;
        if (guardOn_ && !guardOptions.estimatedArms.empty()) exposure_.trackHidden();
      }
      guardOptions.jobRegret = opts_.jobRegret;  // the guard's rounds cost the job's budget too
      decider_ = std::make_unique<GatedDecider>(env.coordination, env.nRanks, std::move(guardOptions),
                                                env.settings && env.settings->waitRegret);
      if (pinTable_) decider_->inner.setPreConfig([this](const coord::TaskKey& t) { return tableConfig(t); });
      localBoard_->serve(env.commHash, decider_.get());
      if (tcpBoard_) {
        ForwardDecider::Observer observer;
        if (arrival_) {
          ArrivalMerge* am = arrival_.get();
          observer = [am](const coord::TaskKey& t, int rank, uint64_t k, double us) {
            am->other(TaskKey{static_cast<int>(t.coll), t.bytes, static_cast<int>(t.pipe)}, rank, k, us);
          };
          arrival_->setSink([this](const TaskKey& t, const Measurement& m) { absorb(t, m); },
                            [this](const TaskKey& t, uint64_t k) { giveUpSample(t, k); });
        }
        remote_ = std::make_unique<ForwardDecider>(&decider_->inner, decider_->guard, std::move(observer));
        tcpBoard_->serve(env.commHash, remote_.get());
      }
      if (merge_)
        merge_->setSink([this](const TaskKey& t, const Measurement& m) { absorb(t, m); },
                        [this](const TaskKey& t, uint64_t k) { giveUpSample(t, k); });
    }
  }

  ~OnlineSource() override {
    if (!authority_) return;
    if (merge_) merge_->setSink(nullptr);  // no merged sample reaches this object from now on
    if (arrival_) arrival_->setSink(nullptr);
    // Leave every task covered forever (its pinned configuration, or NCCL's default) so that ranks
    // still running after this context is gone never wait on a decision.
    std::vector<std::pair<coord::TaskKey, std::shared_ptr<search::TaskSearch>>> ts;
    {
      std::lock_guard<std::mutex> lk(mapMu_);
      for (auto& [k, s] : tasks_)
        if (s->search) ts.emplace_back(s->key, s->search);
    }
    for (auto& [key, srch] : ts) {
      coord::Segment f = finalDefault(srch->plannedUpTo());
      if (srch->converged()) {
        f.cfg = srch->best();
        f.cfg.measure = false;
      }
      // A task already covered forever has nothing left to cover (the segment would be empty).
      if (agree_ && f.begin < f.end) usedBoard_->publish(key, {f});
    }
    if (agree_ && decider_) {
      coord::Segment g = decider_->guard->finalSegment();
      if (g.begin < g.end) usedBoard_->publish(guardKey_, {g});
    }
    localBoard_->unserve(env_.commHash);
    if (tcpBoard_) tcpBoard_->unserve(env_.commHash);
  }

  // One call: its place in the iteration (the step guard), its task's segment (from the search, through the
  // board), then the decision that segment and the guard's iteration make.
  Decision decide(const TaskKey& task, uint64_t k, const CostTable& costs) override {
    TaskState* s = state(task);
    if (!agree_ && !bypass_) settlePlace();
    bool boundary = false;
    Decision failed;
    if (!placeInIteration(task, k, &boundary, &failed)) return failed;
    if (pacesCalls_) s->pace.note(std::chrono::steady_clock::now());
    if (!(s->haveSeg && s->seg.contains(k)) && !newSegment(s, k, costs, &failed)) return failed;
    if (countsCalls()) {
      holds_.countCall(s);
      updateNeed(s, k);
      if (holds_.hasHolders()) releaseIdleHolders(s);
    }
    bool limited = false, changed = false, raised = false;
    Config planned;
    Decision d = fromSegment(s, task, k, boundary, &limited, &changed, &planned, &raised);
    // A round's call an arm limits: whether it runs otherwise than the tuned plan, so that an arm that changed
    // nothing is not judged as itself (GuardPlan::noteLimitedCall). Not where NCCL refuses the pair (it runs its
    // own choice instead), nor where the call runs what the plan runs once NCCL's own choice is read in
    // (runsAlike: a cap or a protocol NCCL's choice keeps already).
    if (limited && authority_ && guardTimedNow_)
      decider_->guard->noteLimitedCall(
          guardCapNow_, changed && (!d.config.forcesPair() || costs.supported(d.config.algo, d.config.proto)) &&
                            !runsAlike(withinCeiling(planned), withinCeiling(d.config), ncclChoice(*s, costs)),
          raised);
    noteForExposure(task, k, &d);
    return d;
  }

 private:
  static Decision failure(std::string why) {
    Decision d;
    d.fail = true;
    d.source = Source::Online;
    d.why = std::move(why);
    return d;
  }

  // The step guard: this call's place in the communicator's iterations (the same on every rank); at an
  // iteration's first call (*boundary), the guard's plan for the iteration (from the authority, like a task's).
  // False, with *failed, when the ranks can no longer agree on that plan.
  bool placeInIteration(const TaskKey& task, uint64_t k, bool* boundary, Decision* failed) {
    if (!guardOn_ || bypass_ || !agree_) return true;
    // A guard iteration is a step: the detector's iterations at pieces of a step (after a break) are not.
    *boundary = iter_.push(task) && steps_.onStart(iter_);
    if (*boundary && !guardStep(task, k)) {
      *failed = failure(guardWhy_);
      return false;
    }
    return true;
  }

  // Exposure (report only): the call's place in its iteration, kept while this source has timing on (a timed
  // call's window then comes to onMeasurement; untimed, nothing is kept per call). With AUTOCCL_EXPOSURE_EVERY
  // the call is asked for as the report's (Decision::report) if the search and the guard leave it untimed:
  // its window then reaches the estimate alone, and the search sees the call untimed, as without the setting.
  // Not a stable decision (the Context would keep asking for it for good). The kernel clock times every call
  // while the mask is on: there only calls the mask is on for the report alone (a block after the searches).
  void noteForExposure(const TaskKey& task, uint64_t k, Decision* d) {
    if (!authority_ || !guardOn_ || bypass_ || !agree_ || iter_.period() < 2 || !needsTiming()) return;
    const bool othersTime = !launchClock_ && (holds_.needed() || guardNeed_.load(std::memory_order_relaxed));
    const bool report = exposureEvery_ > 0 && !d->timed && !othersTime;
    if (report && d->stable) return;
    d->report = report;
    exposure_.place(task, k, iter_.iteration(), iter_.position(), iter_.period(), iter_.structure());
  }

  // AUTOCCL_EXPOSURE_EVERY on the authority: whether step `it` is in a block the estimate times whole.
  void setExposureBlock(bool on) {
    if (on == exposureNeed_.load(std::memory_order_relaxed)) return;
    exposureNeed_.store(on, std::memory_order_relaxed);
    if (env_.needChanged) env_.needChanged();
  }

  // Call k is past the task's segment: the next one, from the board (the authority registers the task's search
  // at its first call). False, with *failed, when the ranks can no longer agree on it.
  bool newSegment(TaskState* s, uint64_t k, const CostTable& costs, Decision* failed) {
    if (bypass_) {
      s->seg = finalDefault(0);
      if (pinTable_) s->seg.cfg = tableConfig(s->key);  // as table mode without the guard: each rank's own table
    } else {
      if (authority_ && !s->search) registerTask(s, costs);
      // Only here (a new segment) can a rank wait for the authority: time it, for the trace.
      auto t0 = std::chrono::steady_clock::now();
      coord::Outcome o = agree_->decide(s->key, k);
      uint64_t waitedNs = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
      if (!o.ok()) {
        *failed = failure(o.error);
        return false;
      }
      s->seg = o.seg;
      noteLookup(s, k, waitedNs, o.asked);
      if (pacesCalls_ && o.asked) s->pace.leaveOut(std::chrono::nanoseconds(waitedNs));
      if (o.asked && s->seg.phase == search::Phase::kTuning) chargeWait(s, k, waitedNs);
      // Ask for the segment after this one at once (the board asks only when it does not hold it: this is
      // the last segment of the plan here), so that the lookup at this segment's end finds it at hand
      // instead of waiting a round trip to the authority in the middle of the job's calls (over TCP
      // ~0.1 ms, 0.3-0.6 ms between two hosts of one GPU, up to 1.7 ms; one such wait in a 40-call
      // nccl-tests loop of 24 us calls made it 1.6x slower, 2 x H200). A tuning segment's successor is
      // then planned a segment earlier, with the samples that arrived by then: in the emulator's
      // four-process job the ranks waited 3-4x less (41-52 ms -> 12-18 ms over the job), every task
      // ended where it did (noise off), and the search's regret grew by 1 %.
      // With AUTOCCL_ASK_AHEAD, also when what it holds ends within that many calls of this one.
      if (s->seg.end != search::kForever) {
        const uint64_t upTo = std::max(s->seg.end, k + askAheadFor(s));
        agree_->prefetch(s->key, k, upTo, upTo - s->seg.end);  // without looking ahead: seg.end
      }
    }
    s->haveSeg = true;
    if (authority_) onNewSegment(s);
    return true;
  }

  // How far ahead of its call a rank asks for its plan (Board::prefetch). AUTOCCL_ASK_AHEAD=auto: as many of the
  // task's calls as go by in one of the authority's answer times, both measured as the job runs. In a loop the
  // GPU paces, that is how many calls a question must lead by to be answered in time; where the host runs ahead
  // of the GPU (an nccl-tests loop enqueued at once), the pace is the loop's mean, gaps included: a wait in the
  // middle of such a burst is hidden behind the calls queued before it, and a question asked further ahead
  // makes the authority plan before the samples it waits for are back (searches end later, AUTOCCL_ASK_AHEAD=16
  // on one H200). Unmeasured (no answer timed yet, or a task's first calls): 0, the default's asking.
  uint64_t askAheadFor(TaskState* s) {
    if (!askAheadAuto_) return askAhead_;
    const uint64_t ahead = callsWithin(agree_->roundTripMicros(), s->pace.meanNs(), kAutoAskAheadMax);
    if (ahead > s->askAheadMax.load(std::memory_order_relaxed)) s->askAheadMax.store(ahead, std::memory_order_relaxed);
    return ahead;
  }

  // NCCL's own choice for a call: its pair from the call's cost table (what NCCL picks where the tuner leaves it),
  // its channel count from the authority's measurements of the task's NCCL-default calls (0: none of that pair
  // seen; a task pinned from its first call is never timed).
  static NcclChoice ncclChoice(const TaskState& s, const CostTable& costs) {
    NcclChoice n;
    if (!costs.ncclPick(&n.algo, &n.proto)) return NcclChoice();
    if (s.ncclAlgo.load(std::memory_order_relaxed) == n.algo && s.ncclProto.load(std::memory_order_relaxed) == n.proto)
      n.channels = s.ncclChannels.load(std::memory_order_relaxed);
    return n;
  }

  // The decision for call k from the task's segment, as the guard's iteration may change it.
  // *limited: the guard's arm limits this call; *changed: ... and its configuration is not the plan's;
  // *planned: the plan's decision for the call, before an arm limits it.
  Decision fromSegment(TaskState* s, const TaskKey& task, uint64_t k, bool boundary, bool* limited, bool* changed,
                       Config* planned, bool* raised) {
    Decision d;
    d.source = pinTable_ ? Source::Table : Source::Online;
    const search::Config& c = s->seg.cfg;
    if (!c.isDefault()) {
      d.config.algo = c.algo;
      d.config.proto = c.proto;
      d.config.channels = c.channels;
      d.config.chunk = c.chunk;
      d.config.chunkHalvings = c.chunkHalvings;
    }
    d.stable = s->seg.phase == search::Phase::kFinal && s->seg.end == search::kForever;
    // Between a break of the step's structure and its return, what the guard runs outside its rounds (not the
    // block of a round under way, which could hold NCCL's choices for dozens of steps where breaks are frequent).
    const bool guardNccl = steps_.atStep(iter_) ? guardNcclNow_ : guardFallbackNccl_;
    // The authority: this call runs otherwise than its plan, its time is not the task's sample; with `giveUp`, a
    // measured call is given up at once (TaskSearch::unmeasured) rather than after the lost-sample rules.
    const auto notItsSample = [&](bool giveUp) {
      guardClock_.markOverridden(task, k);
      if (giveUp && c.measure && s->search) s->search->unmeasured(k);
    };
    if (guardNccl) {  // the guard's iteration runs NCCL's own choice for every task
      // an iteration's first call is timed for the guard: not a sample of a search within a cap
      if (authority_ && (!c.isDefault() || s->searchCap > 0)) notItsSample(s->searchCap > 0);
      d.config = Config();
      d.stable = false;
      d.timed = false;
    }
    // A limiting arm of the guard (AUTOCCL_STEP_ARMS): every call of the iteration but its last, or the
    // positions the authority's exposure estimate calls hidden, runs the plan's decision as the arm limits it
    // (GuardArm::applyTo), and the calls it leaves exposed, where the arm has a floor, at least the floor's
    // channels (GuardArm::raises, raiseTo); the detector places the call alike on every rank (at the step's
    // structure only: a piece's last call is not the step's). Such a call is not the plan's config: its time is
    // not fed to its task's search.
    bool capped = false;
    *planned = d.config;
    const bool atStep = guardCapNow_.limits() && steps_.atStep(iter_);
    const bool caps = atStep && guardCapNow_.caps(iter_.position(), iter_.endsIteration());
    const bool raises = atStep && guardCapNow_.raises(iter_.position(), iter_.endsIteration());
    *limited = caps || raises;
    *raised = raises;  // GuardArm::raises excludes the positions it caps
    // NCCL's choice capped by a channel-only arm is the baseline of a task searched within that cap
    // (retuneUnderArm): timed on every rank where the plan measures it (which tasks are so searched, the authority
    // alone knows), and fed to the search on the authority. NCCL's choice run any other way is not that baseline:
    // given up at once (TaskSearch::unmeasured) rather than after the lost-sample rules.
    const bool capsDefault = caps && c.isDefault() && guardCapNow_.hiddenCap > 0 && guardCapNow_.proto < 0;
    const bool capsItsBaseline = capsDefault && s->searchCap == guardCapNow_.hiddenCap;
    if ((caps && guardCapNow_.applyTo(&d.config)) || (raises && guardCapNow_.raiseTo(&d.config))) {
      if (authority_ && !capsItsBaseline) notItsSample(capsDefault);
      d.stable = false;
      capped = true;
    } else if (authority_ && !guardNccl && c.isDefault() && s->searchCap > 0) {
      notItsSample(true);
    }
    *changed = capped;
    // The Context caches a stable decision and asks no more: this task's need for timing ends here (a
    // search that ended early, e.g. a task below Options::minTaskMicros, kept timing on for good otherwise).
    // A task stable from its first call (NCCL's model or the table says NCCL's choice) never needed timing:
    // let the start's timing go here once nothing else holds it, or every call of the process stays timed
    // (a lone 1 MiB all_reduce decided by the model at its first call: 15-20 us of plugin time per call
    // on the reporting rank in the emulator, against 4 once released).
    // A table's entry pinned on trust (kPinned to the end, never timed) is settled too, though not stable (the
    // guard still reaches its calls): without this the start's hold never went and every call ran timed.
    const bool settled =
        d.stable || (pinTable_ && s->seg.end == search::kForever && s->seg.phase == search::Phase::kPinned);
    if (settled && !s->settledNoted) {
      s->settledNoted = true;  // asked again for every call (step arms, a trusted pin): let timing go once
      holds_.settled(s);
    }
    // Samples the search planned, and the coordinator's NCCL-default calls of a task the authority had not
    // seen yet (kTuning segments without measure; the search takes them as its baseline).
    d.timed = !guardNccl && (!capped || (capsDefault && c.measure)) &&
              (c.measure || (s->seg.phase == search::Phase::kTuning && c.isDefault()));
    if (boundary && guardTimedNow_ && (authority_ || guardReports_)) d.timed = true;  // a guard sample's start
    if (k == 0) {
      d.why = bypass_ ? (pinTable_ ? "communicator not entirely in this process and no coordinator address: this "
                                     "rank's table, unchecked"
                                   : "communicator not entirely in this process and no coordinator address: NCCL decides")
                      : std::string(authority_ ? "authority" : "follower") + " (" +
                            placeName(place_.load(std::memory_order_relaxed)) + " board), " +
                            search::phaseName(s->seg.phase);
    }
    if (askAlways_ && agree_ && !bypass_) d.stable = false;  // the next call comes here too (step arms)
    return d;
  }

 public:
  // Settled tasks' calls pass here only while timing is on: they are the calls a holder waits out (nccl-tests'
  // 1-8 MiB loops ran timed from end to end on 2 x H100 while the larger sizes' warm-up samples held timing,
  // because only calls that reached decide() counted).
  void onSettledCall() override {
    if (!countsCalls()) return;
    holds_.countOther();
    if (holds_.hasHolders()) releaseIdleHolders(nullptr);
  }

  // The ranks whose timing holds end by counting calls (releaseIdleHolders): the authority, and over TCP
  // the reporting ranks, which time calls for the authority's windows.
  bool countsCalls() const {
    return authority_ || (reporting_ && place_.load(std::memory_order_relaxed) == Place::kTcp);
  }

  void onMeasurement(const TaskKey& task, const Measurement& timed) override {
    if (authority_) exposure_.time(task, timed.callIndex, timed.startNs, timed.gpuUs, timed.reportOnly);
    if (timed.reportOnly) {  // timed for the estimate alone: to the guard and the search, untimed as it was
      onUntimed(task, timed.callIndex);
      return;
    }
    // The guard iterations this call's start completes: the authority's times to its plan, another clock rank's
    // to the authority (the step is the slowest rank's).
    if (authority_ || (place_.load(std::memory_order_acquire) != Place::kUnknown && guardReports_)) {
      for (const auto& [it, us] : guardClock_.start(task, timed.callIndex, timed.startNs)) {
        if (authority_)
          decider_->guard->sample(it, us);
        else
          usedBoard_->report(guardKey_, env_.rank, it, us);
      }
    }
    const Place place = place_.load(std::memory_order_acquire);
    Measurement m = timed;
    if (m.hostPauseUs > 0 && scoring(place) == Scoring::kPeriodCheckedByWindow) {
      onUntimed(task, m.callIndex);  // its period measured the host's pause; the window is another measure
      return;
    }
    if (m.periodUs > 0) {  // the second measure is the duel's second opinion (search::TaskSearch::addSample)
      switch (scoring(place)) {
        case Scoring::kPeriodCheckedByWindow:
          m.altUs = m.gpuUs;
          m.gpuUs = m.periodUs;
          break;
        case Scoring::kWindowCheckedByPeriod: m.altUs = m.periodUs; break;
        case Scoring::kWindow: break;
      }
    }
    if (merge_ && place == Place::kLocal) {
      merge_->add(task, env_.rank, m);  // all ranks here: the authority scores each call by its slowest rank
      return;
    }
    if (!authority_) {  // a rank never derives decisions from its own measurements; it may report them
      if (reporting_ && place == Place::kTcp) {
        // Only while this rank's tasks hold timing: a call timed for the guard's clock alone is no task's
        // sample, and reporting each one sent a frame per call of every guard round.
        if (holds_.needed()) usedBoard_->report(coordKey(task), env_.rank, m.callIndex, m.gpuUs);
        noteDelivered(task, m.callIndex);  // its timing hold ends like the authority's (releaseIdleHolders)
      }
      return;
    }
    if (arrival_ && place == Place::kTcp && scoring(place) != Scoring::kPeriodCheckedByWindow) {
      arrival_->own(task, m);  // scored by the shortest window among the reporting ranks
      return;
    }
    absorb(task, m);
  }

  // A planned sample whose call ran untimed never comes: the search asks again now rather than after its
  // lost-sample rules (reorderSlack calls: the emulator's warm start took 56-76 calls instead of 36 for a
  // task whose first call ran before any task asked for timing).
  void onUntimed(const TaskKey& task, uint64_t k) override {
    const Place place = place_.load(std::memory_order_acquire);
    if (merge_ && place == Place::kLocal) {
      merge_->untimed(task, env_.rank, k);  // scored by the slowest rank: any rank's untimed call counts
      return;
    }
    if (!authority_) {
      if (reporting_ && place == Place::kTcp && holds_.needed()) usedBoard_->report(coordKey(task), env_.rank, k, -1.0);
      return;
    }
    if (arrival_) arrival_->ownUntimed(task, k);
    giveUpSample(task, k);
  }
  coord::TaskKey coordKey(const TaskKey& task) const {
    coord::TaskKey key;
    key.comm = env_.commHash;
    key.coll = static_cast<uint32_t>(task.coll);
    key.pipe = static_cast<uint32_t>(task.pipe);
    key.bytes = task.bytes;
    return key;
  }
  // NCCL profiles no call of `coll` here: the authority's searches of it end in NCCL's choice, and so do those
  // registered later (registerTask). Followers only apply the authority's plan.
  void onUnprofiled(int coll) override {
    if (coll < 0 || coll >= kNumColls) return;
    unprofiled_[coll].store(true, std::memory_order_release);
    if (!authority_) return;
    std::vector<std::shared_ptr<search::TaskSearch>> searches;
    {
      std::lock_guard<std::mutex> lk(mapMu_);
      for (auto& [key, s] : tasks_)
        if (key.coll == coll && s->search) searches.push_back(s->search);
    }
    for (auto& srch : searches) srch->unprofiled();
  }
  void giveUpSample(const TaskKey& task, uint64_t k) {
    std::shared_ptr<search::TaskSearch> srch;
    {
      std::lock_guard<std::mutex> lk(mapMu_);
      auto it = tasks_.find(task);
      if (it == tasks_.end()) return;
      srch = it->second->search;
    }
    if (srch) srch->unmeasured(k);
  }

  // What a timed call costs (Settings::score), and what checks it in the duel (the second measure). One
  // process launching several GPUs is host-bound at small sizes: on 4 x H200 a config whose kernels were
  // 31 us ran at 54 us per call while NCCL's 24-channel choice ran at 42 (all_reduce 4 MiB, nccl-tests
  // -g 4); the stream period sees that, the window does not. One process per GPU scores by the window
  // (the period also carries the profiler's host cost there: 1.075x against 1.107x on 4 x H200) but lets
  // the period check the duel: tree/simple/61 all_reduce 16 MiB on 2 x H200 had 63-65 us windows against
  // NCCL's 68-70 and held the stream 90 us per call (NCCL's choice: 73).
  enum class Scoring { kWindow, kWindowCheckedByPeriod, kPeriodCheckedByWindow };
  Scoring scoring(Place place) const {
    if (!env_.settings) return Scoring::kWindow;
    switch (env_.settings->score) {
      case Settings::Score::Period: return Scoring::kPeriodCheckedByWindow;
      case Settings::Score::Window: return Scoring::kWindow;
      default:
        return place == Place::kLocal && env_.nRanks >= 2 ? Scoring::kPeriodCheckedByWindow
                                                          : Scoring::kWindowCheckedByPeriod;
    }
  }

  bool needsTiming() const override {
    return holds_.needed() || guardNeed_.load(std::memory_order_relaxed) ||
           exposureNeed_.load(std::memory_order_relaxed);
  }
  // Periods where a search uses them: every rank in one process (RankMerge), else the authority only.
  bool agreesThroughCoordination() const override { return true; }
  bool wantsPeriod() const override {
    const Place p = place_.load(std::memory_order_acquire);
    if (p == Place::kUnknown || p == Place::kBypass || (p != Place::kLocal && !authority_)) return false;
    return scoring(p) != Scoring::kWindow;
  }

  // The authority: one call's GPU time (its own, or the slowest rank's) into the task's search.
  void absorb(const TaskKey& task, const Measurement& m) {
    if (guardClock_.takeOverridden(task, m.callIndex)) return;  // the guard ran it otherwise than planned
    TaskState* s = nullptr;
    std::shared_ptr<search::TaskSearch> srch;
    {
      std::lock_guard<std::mutex> lk(mapMu_);
      auto it = tasks_.find(task);
      if (it == tasks_.end()) return;
      s = it->second.get();
      srch = s->search;
    }
    if (!srch) return;
    if (!m.applied.forcesPair() && m.applied.channels == 0 && m.ncclAlgo >= 0) {
      const int wasAlgo = s->ncclAlgo.exchange(m.ncclAlgo, std::memory_order_relaxed);
      const int wasProto = s->ncclProto.exchange(m.ncclProto, std::memory_order_relaxed);
      // A count seen on another pair is not this pair's (ncclChoice reads the three together).
      if (m.colls != 1 && (wasAlgo != m.ncclAlgo || wasProto != m.ncclProto))
        s->ncclChannels.store(0, std::memory_order_relaxed);
      // the channels of a lone collective's kernel (a grouped launch reports its first collective's)
      if (m.colls == 1) {
        s->ncclChannels.store(m.ncclChannels, std::memory_order_relaxed);
        srch->ncclChoice(m.ncclAlgo, m.ncclProto, m.ncclChannels);  // its explicit form is no candidate of its own
      }
    }
    // NCCL caps a channel request at the communicator's channel count (and spreads small tasks over
    // fewer): the channels it reports for a lone collective are the ones the requested config ran on.
    int ran = maxRun_.load(std::memory_order_relaxed);
    while (m.ncclChannels > ran && !maxRun_.compare_exchange_weak(ran, m.ncclChannels)) {
    }
    if (m.colls == 1 && m.applied.channels > 0 && m.ncclChannels > 0) {
      srch->channelsRan(m.ncclAlgo, m.ncclProto, m.applied.channels, m.ncclChannels);
      if (m.ncclChannels + search::kCapShortfall <= m.applied.channels) {
        // the communicator's ceiling only where no call ran wider (else a pair's minimum traffic per channel)
        int c = commCap_.load(std::memory_order_relaxed);
        while (m.ncclChannels >= maxRun_.load(std::memory_order_relaxed) && m.ncclChannels > c &&
               !commCap_.compare_exchange_weak(c, m.ncclChannels)) {
        }
      }
    }
    if (m.rankReports > 0) s->rankScored.fetch_add(1, std::memory_order_relaxed);
    if (m.shorterElsewhere) s->shorterElsewhere.fetch_add(1, std::memory_order_relaxed);
    srch->addSample(m.callIndex, m.gpuUs, m.altUs > 0 ? m.altUs : -1.0);
    markDelivered(s->delivered, m.callIndex);
  }

  // A configuration's channel count as NCCL grants it: at most AUTOCCL_MAX_CHANNELS (the context's clamp) and the
  // communicator's count where a capped request showed it (commCap_, the authority's). A raise to `max`, or a cap
  // above the communicator's count, then runs what the plan runs (GuardPlan::noteLimitedCall: not changed).
  Config withinCeiling(Config c) const {
    const int cap = commCap_.load(std::memory_order_relaxed);
    if (c.channels > env_.settings->maxChannels) c.channels = env_.settings->maxChannels;
    if (cap > 0 && c.channels > cap) c.channels = cap;
    return c;
  }

  static void markDelivered(std::atomic<uint64_t>& delivered, uint64_t k) {
    uint64_t d = delivered.load(std::memory_order_relaxed);
    while (d < k + 1 && !delivered.compare_exchange_weak(d, k + 1)) {
    }
  }
  void noteDelivered(const TaskKey& task, uint64_t k) {
    std::lock_guard<std::mutex> lk(mapMu_);
    auto it = tasks_.find(task);
    if (it != tasks_.end()) markDelivered(it->second->delivered, k);
  }

  void onFinalize() override {
    if (!authority_ || !env_.saveTuned) return;
    // The step guard's last verdict put every task back on NCCL's choice: the tuned plan did not make the step
    // faster. The table says so, or the next start would run that plan again, with no guard in table mode
    // (2 x H100, 350m FSDP2 and DDP: the guard restored NCCL's choices over 64-channel pins).
    bool guardRestoredNccl = false;
    if (decider_) {
      const std::vector<GuardPlan::Verdict> v = decider_->guard->verdicts();
      guardRestoredNccl = !v.empty() && !v.back().tuned;
    }
    std::vector<TableEntry> out;
    std::vector<PairRecord> pairs;
    std::lock_guard<std::mutex> lk(mapMu_);
    for (auto& [key, s] : tasks_) {
      if (!s->search) continue;
      const search::TaskSearch::Standing* uncapped = s->uncapped.get();  // before a cap (retuneUnderArm)
      search::Stats st = uncapped ? uncapped->stats : s->search->stats();
      // NCCL's model decides such a task again at the next start; an entry would hold no measurement (and
      // was written only when its first call happened to be timed, so the table varied from run to run).
      if (st.smallByModel) continue;
      // What each measured pair cost, whether or not the search ended: a job that ends mid-search (nccl-tests
      // gives a size about a hundred calls) leaves the next one the pairs not worth probing again.
      for (const search::TaskSearch::PairMeasure& m : uncapped ? uncapped->pairs : s->search->measuredPairs()) {
        PairRecord p;
        p.key = key;
        p.algo = m.algo;
        p.proto = m.proto;
        p.timeUs = m.micros;
        p.ncclUs = m.defaultMicros;
        p.samples = m.samples;
        p.channels = m.channels;
        pairs.push_back(p);
      }
      search::Config b = uncapped ? uncapped->best : s->search->best();
      if (!uncapped && !s->search->converged()) {  // a lead the next job verifies first (TaskSearch::provisional)
        if (!s->search->provisional(&b, &st.bestMedian, &st.defaultMedian)) {
          // No lead in a job after one that searched it either, and no point it timed ahead of NCCL's median by a
          // duel's margin (a lead on fewer samples than provisional() asks is one): NCCL's choice, which the next
          // start runs untimed. Left open, a task that no job settles is searched again at every start (over
          // sockets on one H200, all_gather 1 MiB: 104 timed calls a launch, ~90 coordinator lookups of ~80 us
          // against calls of ~300 us, cells 0.77-0.87x).
          search::TaskSearch::NcclStanding ns;
          if (!s->secondChance || st.samples < kSecondChanceMinSamples || !s->search->ncclStanding(&ns) ||
              ns.ncclSamples < kSecondChanceMinSide || ns.otherSamples < kSecondChanceMinSide || ns.otherAhead)
            continue;
          b = search::Config();
          st.bestMedian = st.defaultMedian = ns.ncclUs;
        }
      }
      TableEntry e;
      e.key = key;
      // A winner that is NCCL's own configuration (its pair, at the channel count NCCL runs it on, NCCL's chunk)
      // won a duel of two identical configurations by noise: over sockets on one H200 such an entry was verified
      // against itself at every start (won by 4 % one job, lost the next). The table says NCCL's choice, which
      // the next start runs untimed. The search's rule (TaskSearch::isNcclOwn), which compares the channels a
      // request ran on: a lead of 24 channels that NCCL ran on its own 23 is NCCL's choice too.
      const bool ncclOwn = uncapped ? uncapped->ncclOwn : s->search->isNcclOwn(b);
      if (b.isDefault() || guardRestoredNccl || ncclOwn) {  // NCCL's own choice: its pair, channels 0 (its count)
        e.config.algo = s->ncclAlgo.load();
        e.config.proto = s->ncclProto.load();
        if (e.config.algo < 0 || e.config.proto < 0) continue;
        if ((guardRestoredNccl || ncclOwn) && st.defaultMedian > 0) st.bestMedian = st.defaultMedian;
      } else {
        e.config.algo = b.algo;
        e.config.proto = b.proto;
        e.config.channels = b.channels;
        e.config.chunk = b.chunk;
        e.config.chunkHalvings = b.chunkHalvings;
      }
      e.timeUs = st.bestMedian;
      e.ncclUs = st.defaultMedian;
      e.samples = st.samples;
      out.push_back(e);
    }
    if (!out.empty() || !pairs.empty()) env_.saveTuned(out, pairs);
  }

  // Read-only views for the metrics files (engine/metrics.h); the search's own statistics.
  TaskView view(const TaskKey& task) const override {
    std::shared_ptr<search::TaskSearch> srch;
    {
      std::lock_guard<std::mutex> lk(mapMu_);
      auto it = tasks_.find(task);
      if (it != tasks_.end()) srch = it->second->search;
    }
    TaskView v;
    if (!srch) return v;
    const search::Stats st = srch->stats();
    v.known = true;
    v.ncclUs = st.defaultMedian;
    v.appliedUs = st.bestMedian;
    v.exploringCalls = st.tuningCalls;
    v.regretUs = st.regretMicros;
    v.converged = st.convergedAt != search::kForever;
    return v;
  }
  bool guardView(GuardView* out) const override {
    if (!authority_ || !decider_) return false;
    const std::vector<GuardPlan::Verdict> verdicts = decider_->guard->verdicts();
    *out = GuardView();
    out->verdicts = verdicts.size();
    for (const GuardPlan::Verdict& x : verdicts) ++(x.tuned ? out->keptTuned : out->restoredNccl);
    if (!verdicts.empty()) {
      out->lastTunedUs = verdicts.back().tunedUs;
      out->lastNcclUs = verdicts.back().ncclUs;
    }
    return true;
  }

  // The task record's fields (engine/task_record.h).
  std::string traceExtra(const TaskKey& task) const override {
    std::shared_ptr<search::TaskSearch> srch;
    TaskLookups l;
    TaskSearchRecord r;
    bool known = false;
    {
      std::lock_guard<std::mutex> lk(mapMu_);
      auto it = tasks_.find(task);
      if (it != tasks_.end()) {
        known = true;
        TaskState& ts = *it->second;  // its slowMu is not const
        srch = ts.search;
        l.board = placeName(place_.load(std::memory_order_relaxed));
        l.lookups = ts.lookups.load(std::memory_order_relaxed);
        l.asked = ts.lookupsAsked.load(std::memory_order_relaxed);
        l.waitNs = ts.waitNs.load(std::memory_order_relaxed);
        l.waitMaxNs = ts.waitMaxNs.load(std::memory_order_relaxed);
        l.askAheadMax = ts.askAheadMax.load(std::memory_order_relaxed);
        r.rankScored = ts.rankScored.load(std::memory_order_relaxed);
        r.shorterElsewhere = ts.shorterElsewhere.load(std::memory_order_relaxed);
        std::lock_guard<std::mutex> sl(ts.slowMu);
        l.slow = ts.slow;
      }
    }
    if (srch) {
      r.stats = srch->stats();
      const std::vector<search::Segment> plan = srch->plan();
      r.searchFrom = plan.empty() ? 0 : plan.front().begin;
    }
    return taskRecordFields(known ? &l : nullptr, srch ? &r : nullptr);
  }

 private:
  // Every rank at its first decision: all ranks of the communicator in this process -> in-process
  // board (and slowest-rank scoring); else the TCP board, or without one NCCL's default throughout.
  // Waiting for the other ranks to attach is bounded and done only where it can pay off: without TCP
  // (no other way to tune), or when this process already holds two or more of the ranks.
  // ---- the step guard (engine/step_guard.h) -------------------------------------------------------------

  // How the step changed since the last change of step (StepTasks): fewer of the same calls (tasks settled: the
  // GPU runs the same step), or another step.
  StepChange stepChange() {
    return stepTasks_.atStart(steps_, iter_, [this](const TaskKey& t) {
      std::lock_guard<std::mutex> lk(mapMu_);
      auto f = tasks_.find(t);
      if (f == tasks_.end()) return false;
      return f->second->settledForGood();
    });
  }

  // The first call of step `steps_.index()`: the guard's plan for it. False (with guardWhy_) when the ranks can
  // no longer agree on it (the same failure as a task's lookup).
  bool guardStep(const TaskKey& task, uint64_t k) {
    const uint64_t it = steps_.index();
    const StepChange change = authority_ ? stepChange() : StepChange::kSame;
    if (steps_.calls() < 2) {  // one call per iteration: the task's own duel on its stream period is this check
      guardNcclNow_ = guardFallbackNccl_ = false;
      guardCapNow_ = GuardArm{};
      guardTimedNow_ = false;
      if (guardNeed_.load(std::memory_order_relaxed)) {  // a round the step left mid-way: its timing goes too
        guardNeed_.store(false, std::memory_order_relaxed);
        if (env_.needChanged) env_.needChanged();
      }
      if (authority_ && exposureEvery_ > 0) setExposureBlock(false);
      return true;
    }
    if (authority_ && exposureEvery_ > 0) setExposureBlock(it % exposureEvery_ < kExposureBlock);
    // A new structure of the detector (after a break the iteration may start at another call): an estimated arm's
    // positions, numbered in the old one, name other calls. Every rank notes the step it began at (the same on
    // every rank) and caps nothing for an estimated segment planned before it; the authority forgets the
    // positions, so that what it plans from here on names none until the new structure's estimate does.
    if (iter_.structure() != guardStructure_) {
      guardStructure_ = iter_.structure();
      structureFromStep_ = it;
      if (authority_) decider_->guard->forgetEstimatedPositions();
    }
    if (authority_) {
      const uint32_t was = decider_->guard->iterationChanged(steps_.calls(), change);
      if (was && env_.log)
        env_.log(LogLevel::Info, "autoccl: comm " + commHex(env_.commHash) + " step guard: iterations of " +
                 std::to_string(steps_.calls()) + " calls now (armed on " + std::to_string(was) +
                 "): a round under way is void; the next starts once every task of the new iteration has converged "
                 "and one of them runs a configuration of its own");
      if (steps_.skipped()) decider_->guard->lost(it - 2, it);
      bool arming = false;
      if (!decider_->guard->armed()) {
        const std::vector<TaskKey> recent = iter_.tasksInLatestIteration();
        arming = allRecentConverged(recent) && (askAlways_ || anyOwnConfiguration(recent));
      }
      // What the tuned plan saves an iteration, for the verdict's check that a faster step can be the plan's:
      // when the round can start, and every kPlanGainEvery iterations after (a task's re-tune changes it).
      if (arming || (decider_->guard->armed() && it % kPlanGainEvery == 0)) {
        decider_->guard->setPlanGain(planGainUs(), steps_.calls());
        // What the estimated arms cap at the next round (AUTOCCL_STEP_ARMS=estimated=...): refitted on the
        // recorder's own thread, read here
        decider_->guard->setEstimatedHidden(exposure_.hiddenPositions(iter_.structure(), iter_.period()));
      }
      if (arming) decider_->guard->arm(steps_.calls());
    }
    coord::Outcome o = agree_->decide(guardKey_, it);
    if (!o.ok()) {
      guardWhy_ = o.error;
      return false;
    }
    const GuardArm arm = GuardPlan::armOf(o.seg.cfg);
    guardNcclNow_ = arm.nccl;
    guardFallbackNccl_ = GuardPlan::fallbackNcclOf(o.seg.cfg);
    guardCapNow_ = arm.estimated && o.seg.begin < structureFromStep_ ? GuardArm{} : arm;
    guardTimedNow_ = o.seg.cfg.measure;
    if (authority_ || guardReports_) {  // the clock ranks time the round's iterations
      if (guardTimedNow_) guardClock_.markBoundary(task, k, it);
      if (guardTimedNow_ != guardNeed_.load(std::memory_order_relaxed)) {
        guardNeed_.store(guardTimedNow_, std::memory_order_relaxed);
        if (env_.needChanged) env_.needChanged();
      }
    }
    if (authority_) {
      const size_t before = loggedVerdicts_;
      logVerdicts();
      if (loggedVerdicts_ > before) {
        lastWinner_ = decider_->guard->verdict(loggedVerdicts_ - 1).winner;
        retuneUnderArm(lastWinner_);
      } else if (capPending_ && !guardTimedNow_ && it % kPlanGainEvery == 0) {  // not inside a round
        retuneUnderArm(lastWinner_);
      }
    }
    return true;
  }

  // The per-task search inside the step's resource policy: where the verdict's winner caps channels (a `hidden=`
  // or `estimated=` arm, with no protocol of its own), every task of the step whose calls it all caps searches
  // again within that cap (TaskSearch::retuneWithin). The arm decided how many SMs a hidden call may take, on the
  // step; the task's own search then finds the best configuration inside that budget (a pair or chunk that is
  // faster at few channels than NCCL's). Its baseline is NCCL's choice as the arm caps it (fromSegment). A task
  // searched within a cap that a winning arm no longer caps so searches again: within the winner's cap where it
  // caps every call of the task, else the whole space, both from the pin it had before any cap. Not at a verdict
  // for the tuned plan (the round timed it with the pins within the cap: they stay), nor for NCCL's choices (no
  // task's plan runs then): the next verdict for an arm decides. A task whose search has not converged yet is
  // taken up again every kPlanGainEvery steps (capPending_). The authority's searches only: every rank runs the
  // plan they publish.
  void retuneUnderArm(const GuardArm& winner) {
    capPending_ = false;
    if (!armSearch_ || !winner.limits()) return;
    if (!steps_.atStep(iter_)) {
      capPending_ = true;
      return;
    }
    const bool capOnly = winner.hiddenCap > 0 && winner.proto < 0;
    const uint32_t last = iter_.period() - 1;
    for (const TaskKey& key : iter_.tasksInLatestIteration()) {
      const std::vector<uint32_t> at = iter_.positionsOf(key);
      const bool whole = capOnly && !at.empty() &&
                         std::all_of(at.begin(), at.end(), [&](uint32_t p) { return winner.caps(p, p == last); });
      const int want = whole ? winner.hiddenCap : 0;
      std::lock_guard<std::mutex> lk(mapMu_);
      auto it = tasks_.find(key);
      if (it == tasks_.end() || !it->second->search || it->second->searchCap == want) continue;
      TaskState* st = it->second.get();
      search::TaskSearch& srch = *st->search;
      if (!st->uncapped) {  // a first cap: from a pin, whose standing the table keeps
        auto before = std::make_unique<search::TaskSearch::Standing>();
        if (!srch.retuneWithin(want, nullptr, before.get())) {
          if (!srch.converged()) capPending_ = true;
          continue;
        }
        st->uncapped = std::move(before);
      } else {
        if (!srch.retuneWithin(want, &st->uncapped->best)) continue;
        if (want == 0) st->uncapped.reset();  // its search is the task's own again
      }
      st->searchCap = want;
      char line[256];
      if (want > 0)
        std::snprintf(line, sizeof line,
                      "autoccl: comm %016" PRIx64 " %s bytes=%" PRIu64 " pipe=%u: searching again within %d channels, "
                      "the cap the step guard's arm keeps on every call of it",
                      env_.commHash, collName(static_cast<int>(key.coll)), key.bytes, key.pipe, want);
      else
        std::snprintf(line, sizeof line,
                      "autoccl: comm %016" PRIx64 " %s bytes=%" PRIu64 " pipe=%u: searching again without a channel "
                      "cap, the step guard's verdict no longer caps every call of it",
                      env_.commHash, collName(static_cast<int>(key.coll)), key.bytes, key.pipe);
      if (env_.log) env_.log(LogLevel::Info, line);
    }
  }

 public:
  // Every rank decided over TCP: its coordinator client's record (boardRecord). The authority's own records: the
  // exposure estimate (engine/exposure_recorder.h) and one per step guard verdict, with the iteration times its
  // round compared (what the INFO line says, and its samples).
  std::vector<std::string> traceRecords() const override {
    std::vector<std::string> out;
    if (tcpBoard_ && place_.load(std::memory_order_relaxed) == Place::kTcp) out.push_back(boardRecord());
    if (!authority_) return out;
    std::string r = exposure_.traceRecord(commHex(env_.commHash), env_.rank);
    if (!r.empty()) out.push_back(std::move(r));
    const auto firstCall = [this](uint64_t it, CallKey* first) { return guardClock_.firstCall(it, first); };
    for (const GuardPlan::Verdict& v : decider_->guard->verdicts())
      out.push_back(traceVerdict(v, commHex(env_.commHash), env_.rank, firstCall));
    return out;
  }

 private:
  // This process's coordinator client as this rank leaves: how long it took to connect (a first lookup waits for
  // it and for the other ranks' ATTACH), and how often lookups had to ask. Its counts are the process's, over all
  // its communicators and the step guard's lookups; a task's own are in its record (`lookups_asked`).
  std::string boardRecord() const {
    const coord::BoardStats b = tcpBoard_->stats();
    char buf[512];
    const int n = std::snprintf(
        buf, sizeof buf,
        "{\"ev\":\"board\",\"comm\":\"%s\",\"rank\":%d,\"first_auth_ms\":%.3f,\"connect_failures\":%" PRIu64
        ",\"reconnects\":%" PRIu64 ",\"lookups_waited\":%" PRIu64 ",\"needs_sent\":%" PRIu64
        ",\"plans_received\":%" PRIu64 ",\"prefetches\":%" PRIu64 ",\"round_trips\":%" PRIu64
        ",\"round_trip_us\":%.1f,\"round_trip_max_us\":%.1f}",
        commHex(env_.commHash).c_str(), env_.rank, b.firstAuthMs, b.connectFailures, b.reconnects, b.lookupsWaited,
        b.needsSent, b.plansReceived, b.prefetches, b.roundTrips, b.roundTripUs, b.roundTripMaxUs);
    return std::string(buf, static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof buf) - 1)));
  }

  // The kernel time the tuned plan saves in one iteration against NCCL's choices: per task of the latest
  // iteration, its search's NCCL median less its pinned median (what the search measured), times its calls in
  // the iteration. -1 (unknown: no explained-gain check) while a task of the iteration is still searching, or
  // runs a configuration of its own without both medians (a table entry trusted unmeasured, a pin with no
  // samples): its saving could be anything.
  static constexpr uint64_t kPlanGainEvery = 16;
  double planGainUs() {
    double us = 0;
    std::lock_guard<std::mutex> lk(mapMu_);
    for (auto& [key, st] : tasks_) {
      if (!st->search) continue;
      const uint32_t calls = iter_.callsPerIteration(key);
      if (calls == 0) continue;
      if (!st->search->converged()) return -1;
      const search::Stats x = st->search->stats();
      // Searched within a cap: NCCL's choice the round compares with is the uncapped one
      const double ncclUs = st->uncapped ? st->uncapped->stats.defaultMedian : x.defaultMedian;
      if (ncclUs > 0 && x.bestMedian > 0) {
        if (x.bestMedian < ncclUs) us += calls * (ncclUs - x.bestMedian);
      } else if (!st->search->best().isDefault()) {
        return -1;
      }
    }
    return us;
  }

  // Some task of the step runs a configuration of its own. Where none does, the tuned plan is NCCL's choice for
  // every task and a round would time two identical plans: its verdict is the step's noise (FSDP2 over sockets on
  // one H200: "NCCL's choice" twice, "tuned" 207.8 ms against 208.8), and its timed iterations cost for nothing.
  // The tasks of the step: those of the detector's latest iteration, and those settled for good (their calls no
  // longer reach the detector). Not a task left mid-search (a warm-up's, an evaluation's): its exploring segment
  // stays its latest. A configuration the search knows as NCCL's own in its explicit form is NCCL's choice.
  bool anyOwnConfiguration(const std::vector<TaskKey>& recent) {
    std::lock_guard<std::mutex> lk(mapMu_);
    const auto own = [](const TaskState& ts) {
      if (!ts.haveSeg || ts.seg.cfg.isDefault()) return false;
      return !(ts.search && ts.search->isNcclOwn(ts.seg.cfg));
    };
    for (const TaskKey& key : recent) {
      auto it = tasks_.find(key);
      if (it != tasks_.end() && own(*it->second)) return true;
    }
    for (const auto& [key, st] : tasks_)
      if (st->settledForGood() && own(*st))
        return true;
    return false;
  }

  // Every task called in the latest iteration has ended its search (pinned, or NCCL's choice for good). The
  // iteration is the detector's: the calls that reach decide(). A settled task's calls no longer do, though they
  // still count in the timing holds: "called within the last `period` calls" on those counts found no task at an
  // FSDP step's boundary (2 x H200, 350m: 72 settled calls between the two large ones), and the guard armed in
  // the first steps, while the two large tasks were still searching.
  // `recent`: the tasks of the detector's latest iteration (IterationDetector::tasksInLatestIteration).
  bool allRecentConverged(const std::vector<TaskKey>& recent) {
    if (recent.empty()) return false;
    std::lock_guard<std::mutex> lk(mapMu_);
    for (const TaskKey& key : recent) {
      auto it = tasks_.find(key);
      if (it == tasks_.end() || !it->second->search || !it->second->search->converged()) return false;
      // Converged is decided ahead of the calls: the tuning segments planned before the pin still run. The round
      // times the plan itself, so it waits for the pin's first call.
      const TaskState& ts = *it->second;
      if (!ts.haveSeg || ts.seg.begin < ts.search->stats().convergedAt) return false;
    }
    return true;
  }

  // One INFO line per verdict of the guard (authority).
  void logVerdicts() {
    for (const size_t n = decider_->guard->verdictCount(); loggedVerdicts_ < n; ++loggedVerdicts_)
      if (env_.log)
        env_.log(LogLevel::Info, describeVerdict(decider_->guard->verdict(loggedVerdicts_), env_.commHash));
  }

  void settlePlace() {
    Coordination* co = env_.coordination;
    int waitMs = kLocalWaitMs;
    if (tcpBoard_ && (env_.nNodes > 1 || co->localRanks(env_.commHash) < 2)) waitMs = 0;
    const bool local = env_.nRanks <= 1 || co->allLocal(env_.commHash, env_.nRanks, std::chrono::milliseconds(waitMs));
    Place p = local ? Place::kLocal : tcpBoard_ ? Place::kTcp : Place::kBypass;
    if (reporting_ && p != Place::kTcp) holds_.releaseStart();  // nothing to report to: the start's timing goes
    if (p == Place::kBypass) {
      bypass_ = true;
      if (env_.log && env_.rank == 0)
        env_.log(pinTable_ ? LogLevel::Info : LogLevel::Warn, "autoccl: communicator " + commHex(env_.commHash) + " has ranks in other processes "
                 "and no coordinator is configured or derivable (torchrun, srun, `autoccl run`, or AUTOCCL_COORD_ADDR "
                 "and AUTOCCL_COORD_TOKEN): " + std::string(pinTable_ ? "each rank's table, unchecked by the step guard"
                                                                 : "NCCL's choice on every rank"));
    } else {
      usedBoard_ = p == Place::kLocal ? localBoard_ : tcpBoard_;
      pacesCalls_ = askAheadAuto_ && p == Place::kTcp && !authority_;  // only a rank that asks over TCP
      agree_ = std::make_unique<coord::CommAgreement>(usedBoard_, env_.commHash, env_.rank, co->lookupDeadline());
      // The step guard's iteration time is the longest among the clock ranks': every rank of a communicator in
      // this process, the first kReportRanks over TCP (bounds the authority's inbound traffic, as ArrivalMerge).
      const int clockRanks = p == Place::kLocal ? std::min(env_.nRanks, GuardPlan::kMaxClockRanks)
                                                : std::min(env_.nRanks, ArrivalMerge::kReportRanks);
      if (authority_) decider_->guard->setClockRanks(clockRanks);
      guardReports_ = !authority_ && env_.rank < clockRanks;
    }
    place_.store(p, std::memory_order_release);
  }

  // A task's state. Its timing hold (TimingHolds::Task) is kept by the ranks that count calls (countsCalls).
  struct TaskState : TimingHolds::Task {
    coord::TaskKey key;
    coord::Segment seg;
    bool haveSeg = false;
    // Its latest segment is NCCL's choice or a pin for good: its calls no longer reach the engine.
    bool settledForGood() const {
      return haveSeg && seg.phase == search::Phase::kFinal && seg.end == search::kForever;
    }
    std::shared_ptr<search::TaskSearch> search;  // authority only (guarded by mapMu_ when written)
    // authority, enqueue thread:
    bool anyMeasured = false;
    // An earlier job searched it and left no entry (pair records only): no allowance in this job (the allowance
    // once), and ending it with no lead leaves NCCL's choice in the table.
    bool secondChance = false;
    std::atomic<uint64_t> lastMeasured{0};
    bool pinnedLogged = false;
    bool settledNoted = false;          // enqueue thread: its settling let timing go
    // authority, enqueue thread: the channel cap its search runs within (retuneUnderArm), 0: none. NCCL's choice,
    // its baseline, is then NCCL's pair at that cap: only calls the winning arm capped so are its samples.
    int searchCap = 0;
    // What its search had found without a cap, taken as it began searching within one: what the table keeps
    // (the next start has no cap until its guard finds one again; an entry measured within the cap would be
    // verified against NCCL's uncapped choice, and pair records within it would start the next search at the
    // cap's channels), and the guard's explained-gain check reads (planGainUs). Written under mapMu_.
    std::unique_ptr<search::TaskSearch::Standing> uncapped;
    // authority, measurement thread:
    std::atomic<uint64_t> delivered{0};  // 1 + highest call index whose time arrived
    std::atomic<int> ncclAlgo{-1}, ncclProto{-1}, ncclChannels{0};
    std::atomic<uint64_t> rankScored{0}, shorterElsewhere{0};  // ArrivalMerge (trace)
    // enqueue thread writes, the trace reads at finalize:
    std::atomic<uint64_t> lookups{0}, lookupsAsked{0}, waitNs{0}, waitMaxNs{0};
    std::atomic<uint64_t> askAheadMax{0};  // enqueue thread writes (askAheadFor), the trace reads
    CallPace pace;                         // enqueue thread (AUTOCCL_ASK_AHEAD=auto)
    std::mutex slowMu;
    std::vector<std::pair<uint64_t, uint64_t>> slow;  // (call, ns) of the slowest lookups >= kSlowLookupNs
  };
  // A job after one that searched the task, ending its search with no lead, writes NCCL's choice only with this many
  // of its samples accepted, and kSecondChanceMinSide of NCCL's choice and of other points: a short job (a smoke
  // test) leaves it open for a longer one.
  static constexpr uint64_t kSecondChanceMinSamples = 16;
  static constexpr uint64_t kSecondChanceMinSide = 4;
  static constexpr uint64_t kSlowLookupNs = 200000;
  // AUTOCCL_ASK_AHEAD=auto asks at most this many calls ahead (AUTOCCL_ASK_AHEAD=16 already made searches end
  // later in nccl-tests' loops; a longer lead than this only plans further from the samples).
  static constexpr uint64_t kAutoAskAheadMax = 16;
  static constexpr size_t kSlowLookupsKept = 8;
  static constexpr uint64_t kPinnedPiece = 64;  // pinned pieces with AUTOCCL_ARM_SEARCH (opts_.pinnedSegmentMax)

  TaskState* state(const TaskKey& task) {
    TaskState*& last = last_[task.coll];
    if (last && last->key.bytes == task.bytes && static_cast<int>(last->key.pipe) == task.pipe) return last;
    auto it = tasks_.find(task);  // only this thread inserts: reading without the lock is safe
    if (it != tasks_.end()) return last = it->second.get();
    auto s = std::make_unique<TaskState>();
    s->key = coordKey(task);
    TaskState* raw = s.get();
    std::lock_guard<std::mutex> lk(mapMu_);
    tasks_.emplace(task, std::move(s));
    return last = raw;
  }

  void registerTask(TaskState* s, const CostTable& costs) {
    search::Space sp;
    for (int a = 0; a < search::kNumAlgos; ++a)
      for (int p = 0; p < search::kNumProtos; ++p)
        sp.cost[a][p] = (a < costs.numAlgo && p < costs.numProto && costs.data) ? costs.get(a, p) : -1.0f;
    sp.ncclChannels = 0;
    sp.maxChannels = env_.settings->maxChannels;
    // Start the probes at the largest channel count NCCL has granted on this communicator so far
    // (a cap seen on another task); the range above stays open until this task is capped itself.
    sp.startChannels = commCap_.load(std::memory_order_relaxed);
    if (env_.chunkCallback && env_.settings->tuneChunk) {
      // Halvings of NCCL's chunk (the only direction NCCL >= 2.30 lets a tuner go for these pairs). 2 x H200,
      // ring on 64 channels, fixed chunks (h200x2/nccl-2.30-chunk-size/probe): Simple 2 MiB -> 1 MiB
      // +3-9 % at 256 MiB, 2 MiB -> 256 KiB +4-8 % at 64 MiB, 128 KiB 3-8 % worse at 1 GiB; LL128 576000 ->
      // 144000 B +6-11 % at 64 MiB; at 4-16 MiB no chunk changed anything: a chunk matters only where it
      // splits a step's data (per rank and channel). So a protocol's chunk is searched only where its
      // smallest chunk would split a step at the widest channel count (NCCL's default chunks: Simple
      // 2 MiB, LL128 576000 B); LL's 32 KiB chunk is left alone (LL only wins small tasks).
      const double perStep = static_cast<double>(s->key.bytes) / (std::max(1, env_.nRanks) * std::max(1, sp.maxChannels));
      const double ncclChunk[search::kNumProtos] = {0, 576000, 2 << 20};
      const int most[search::kNumProtos] = {0, 3, 4};
      for (int p = 0; p < search::kNumProtos; ++p)
        if (most[p] > 0 && ncclChunk[p] / (1 << most[p]) < perStep) sp.maxChunkHalvings[p] = most[p];
    }
    // A record thinner than kPairRecordMinSamples does not leave a pair out (Table::upsertPair adds single probes
    // of later jobs to it). Where a pair's best point was is kept from one sample on: it only moves the first probe
    // (Options::recordedStart).
    bool searchedBefore = false;
    for (const PairRecord& p : tablePairs_) {
      if (!(p.key == s->key) || p.algo < 0 || p.algo >= search::kNumAlgos || p.proto < 0 || p.proto >= search::kNumProtos)
        continue;
      searchedBefore = true;
      if (p.samples >= kPairRecordMinSamples) sp.measuredRatio[p.algo][p.proto] = static_cast<float>(p.ratio());
      sp.measuredChannels[p.algo][p.proto] = p.channels;
    }
    std::vector<search::Hint> hints =
        search::hintsFor(hints_, static_cast<int>(s->key.coll), s->key.bytes, static_cast<int>(s->key.pipe));
    search::Options o = opts_;
    if (pinTable_) {  // table mode: the table's answer, trusted (the guard judges it on the step), no search
      hints = {search::Hint{tableConfig(s->key), 0, 0}};
      o.pinExactHint = true;
      auto srch = decider_->inner.registerTask(s->key, sp, o, hints);
      std::lock_guard<std::mutex> lk(mapMu_);
      s->search = std::move(srch);
      return;
    }
    // An earlier job searched this task and ended mid-search with no lead (pair records, no entry of its own): it had
    // its allowance there. Granted at every start, a size a job gives few calls explores afresh each time (over
    // sockets on one H200, 54 calls a size: 1-7 tasks of each warm pass still searching, the first size at
    // 0.70-0.90x plain); now only the share of its calls, which a candidate faster than NCCL's choice pays into.
    const bool exactEntry = std::any_of(hints.begin(), hints.end(), [](const search::Hint& h) { return h.distance == 0; });
    if (env_.settings->allowanceOnce && searchedBefore && !exactEntry) {
      o.regretAllowance = 0;
      s->secondChance = true;
    }
    // A period (the sample to the next call) measures the turn's own configuration only when the next call
    // runs it too, and a sample is its configuration's own only when the call before ran it too
    // (Options::duelRun).
    if (scoring(place_.load(std::memory_order_acquire)) != Scoring::kWindow) o.duelRun = 3;
    // Over TCP a search's segment boundaries wait for the authority through the server: 1-4 ms of the
    // ranks' time per task in nccl-tests on 2 x H100 (lookups of 0.2-2.5 ms), which a short task's gain
    // cannot repay within a run of a hundred calls (all_reduce 4-8 MiB pinned 64 channels, 7-10 % faster
    // kernels, and ran 0.74-0.77x plain NCCL). Such a task keeps NCCL's choice below a higher minimum.
    if (place_.load(std::memory_order_acquire) == Place::kTcp)
      o.minTaskMicros = std::max(o.minTaskMicros, env_.settings->minTaskUsTcp);
    auto srch = decider_->inner.registerTask(s->key, sp, o, hints);
    if (unprofiled_[s->key.coll].load(std::memory_order_acquire)) srch->unprofiled();
    std::lock_guard<std::mutex> lk(mapMu_);
    s->search = std::move(srch);
  }

  // What table mode applies to a task: the table's entry for it (Table::lookup: exact, else the nearest pipe, else
  // the nearest size in its power-of-two bucket) with its own chunk, else NCCL's choice.
  search::Config tableConfig(const coord::TaskKey& key) const {
    search::Config c;
    const TableEntry* e =
        env_.table ? env_.table->lookup(static_cast<int>(key.coll), key.bytes, static_cast<int>(key.pipe)) : nullptr;
    if (e) {
      c = e->config;
      c.measure = false;
    }
    return c;
  }

  // Lookup statistics for the trace, and the slowest lookups with their call index (to place a stall
  // in a benchmark's passes).
  void noteLookup(TaskState* s, uint64_t k, uint64_t waitedNs, bool asked) {
    s->lookups.fetch_add(1, std::memory_order_relaxed);
    if (asked) s->lookupsAsked.fetch_add(1, std::memory_order_relaxed);
    s->waitNs.fetch_add(waitedNs, std::memory_order_relaxed);
    if (waitedNs > s->waitMaxNs.load(std::memory_order_relaxed)) s->waitMaxNs.store(waitedNs, std::memory_order_relaxed);
    if (waitedNs < kSlowLookupNs) return;
    std::lock_guard<std::mutex> lk(s->slowMu);
    if (s->slow.size() < kSlowLookupsKept) {
      s->slow.emplace_back(k, waitedNs);
      return;
    }
    auto least = std::min_element(s->slow.begin(), s->slow.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
    if (least->second < waitedNs) *least = {k, waitedNs};
  }

  // A lookup that asked the authority for an exploring segment (over TCP a round trip; in this process its
  // planning) held the caller that long, a cost NCCL's choice alone does not have: charged to the task's regret at
  // the authority (SearchDecider::chargeWait, AUTOCCL_WAIT_REGRET). The other ranks send theirs with the setting on,
  // the first ArrivalMerge::kReportRanks of them (the longest wait counts: it bounds the authority's traffic).
  void chargeWait(TaskState* s, uint64_t k, uint64_t waitedNs) {
    const double us = 1e-3 * static_cast<double>(waitedNs);
    if (authority_) decider_->inner.chargeWait(s->key, k, us);
    else if (env_.settings->waitRegret && env_.rank < ArrivalMerge::kReportRanks) usedBoard_->reportWait(s->key, env_.rank, k, us);
  }

  void onNewSegment(TaskState* s) {
    if (!s->search) return;
    if (s->seg.phase == search::Phase::kTuning) {
      s->pinnedLogged = false;
      return;
    }
    if (s->pinnedLogged || !s->search->converged()) return;
    s->pinnedLogged = true;
    search::Stats st = s->search->stats();
    search::Config b = s->search->best();
    // A median of 0 was never measured (pinned from the table, or NCCL's choice kept untimed): said so, with
    // no gain, rather than "0.0 us vs NCCL's choice 0.0 us, gain +0.0%".
    char times[128] = "not timed";
    if (st.bestMedian > 0 && st.defaultMedian > 0)
      std::snprintf(times, sizeof times, "%.1f us vs NCCL's choice %.1f us, gain %+.1f%%", st.bestMedian,
                    st.defaultMedian, 100.0 * (st.defaultMedian / st.bestMedian - 1.0));
    else if (st.bestMedian > 0)
      std::snprintf(times, sizeof times, "%.1f us, NCCL's choice not timed", st.bestMedian);
    else if (st.defaultMedian > 0)
      std::snprintf(times, sizeof times, "not timed, NCCL's choice %.1f us", st.defaultMedian);
    char line[512];
    std::snprintf(line, sizeof line,
                  "autoccl: comm %016" PRIx64 " %s bytes=%" PRIu64 " pipe=%u: pinned %s after %" PRIu64
                  " calls (%" PRIu64 " candidates, %" PRIu64 " samples): %s",
                  env_.commHash, collName(static_cast<int>(s->key.coll)), s->key.bytes, s->key.pipe,
                  cfgText(b).c_str(), st.convergedAt == search::kForever ? s->seg.begin : st.convergedAt,
                  st.candidates, st.samples, times);
    if (env_.log) env_.log(LogLevel::Summary, line);
  }

  void updateNeed(TaskState* s, uint64_t k) {
    bool want;
    const coord::Segment& g = s->seg;
    if (g.cfg.measure) {
      want = true;
      s->anyMeasured = true;
      s->lastMeasured.store(k, std::memory_order_relaxed);
    } else if (g.phase == search::Phase::kTuning) {
      want = true;
    } else if (g.end != search::kForever && g.end - k <= kNeedLookahead) {
      want = nextTimed(s, g.end);  // a check block (or a re-tune) right after this segment
    } else {
      want = s->anyMeasured && k <= s->lastMeasured.load(std::memory_order_relaxed) + kNeedAfter;
    }
    holds_.want(s, want);
  }

  // Whether the segment starting at call `at` is timed. Asked kNeedLookahead calls ahead, where the plan
  // already covers it (Options::lead); the search only ever extends its plan, and every planned segment
  // is published as usual. Not assumed: a pinned task whose drift check waits for time (recheckMinMs) ends
  // a segment every interval/4 calls with no check after it, and timing the 2 calls before each of those
  // cost one process per GPU on 2 x H200 10-15 us per call at reduce_scatter 4 MiB (NCCL's choice pinned,
  // 35-40 us per call against plain NCCL's 25.5).
  bool nextTimed(TaskState* s, uint64_t at) {
    if (!authority_) {  // a reporting rank: timed if the segment is already here (prefetched), else not
      coord::Segment n;
      return usedBoard_ && usedBoard_->peek(s->key, at, &n) && (n.cfg.measure || n.phase == search::Phase::kTuning);
    }
    if (!s->search) return true;
    const search::Segment n = s->search->segmentFor(at);
    return n.cfg.measure || n.phase == search::Phase::kTuning;
  }

  // Idle holders let go (TimingHolds::keeps): what each is doing, from its search's segment and samples.
  void releaseIdleHolders(TaskState* current) {
    holds_.releaseIdle(current, [](const TimingHolds::Task& t) {
      const auto& h = static_cast<const TaskState&>(t);
      if (!h.haveSeg || h.seg.phase != search::Phase::kTuning) return TimingHolds::Activity::kSettled;
      return h.delivered.load(std::memory_order_relaxed) <= h.lastMeasured.load(std::memory_order_relaxed)
                 ? TimingHolds::Activity::kSampling
                 : TimingHolds::Activity::kSearching;
    });
  }

  PolicyEnv env_;
  std::shared_ptr<coord::Board> tcpBoard_;    // null without a coordinator address
  std::shared_ptr<coord::Board> localBoard_;  // the process's in-process board
  std::shared_ptr<coord::Board> usedBoard_;   // the one of this communicator's place (settlePlace)
  bool authority_;
  TimingHolds holds_;  // which calls run timed: the tasks' holds and the start's
  bool bypass_ = false;
  // Table mode under the step guard (AUTOCCL_MODE=table, AUTOCCL_GUARD on): every task pinned on the table's
  // answer from its first call, untimed, never searched; the guard's rounds judge the table on the step.
  bool pinTable_ = false;
  std::atomic<Place> place_{Place::kUnknown};  // written once by the enqueue thread, read by others
  search::Options opts_;
  std::vector<search::TableEntry> hints_;
  std::vector<PairRecord> tablePairs_;  // the warm-start table's pair records (Space::measuredRatio)
  std::unique_ptr<coord::CommAgreement> agree_;
  std::unique_ptr<GatedDecider> decider_;
  std::unique_ptr<ForwardDecider> remote_;  // decider_'s search, served over TCP
  std::shared_ptr<RankMerge> merge_;  // AUTOCCL_INPROC_SCORE=slowest; fed only when the place is local
  std::unique_ptr<ArrivalMerge> arrival_;  // authority, AUTOCCL_XPROC_SCORE=shortest; fed when the place is tcp
  bool reporting_ = false;  // a rank < kReportRanks that sends its windows to the authority (place tcp)
  mutable std::mutex mapMu_;  // tasks_ inserts (enqueue thread) vs lookups from other threads
  std::atomic<bool> unprofiled_[kNumColls] = {};  // onUnprofiled
  std::unordered_map<TaskKey, std::unique_ptr<TaskState>, TaskKeyHash> tasks_;
  TaskState* last_[kNumColls] = {};
  std::atomic<int> commCap_{0};  // largest channel count NCCL ran a capped request on, none wider (0: none seen)
  std::atomic<int> maxRun_{0};   // largest channel count NCCL ran any call of this communicator on
  // step guard: enqueue thread (every rank) ...
  bool guardOn_ = true;
  uint64_t askAhead_ = 0;  // AUTOCCL_ASK_AHEAD (Board::prefetch)
  bool askAheadAuto_ = false;  // AUTOCCL_ASK_AHEAD=auto (askAheadFor)
  bool pacesCalls_ = false;    // ... on a rank that asks over TCP: its tasks' calls are paced (settlePlace)
  bool askAlways_ = false;  // AUTOCCL_STEP_ARMS set: no decision is stable for the Context (it caches none)
  coord::TaskKey guardKey_;
  IterationDetector iter_;
  StepIterations steps_;         // the guard's iterations: the detector's at the job's step
  StepTasks stepTasks_;          // authority: the step's tasks at the last change of step
  bool armSearch_ = false;       // AUTOCCL_ARM_SEARCH with arms: retuneUnderArm
  bool capPending_ = false;      // authority: a task retuneUnderArm could not take up yet
  GuardArm lastWinner_;          // authority: the latest verdict's winner
  bool guardNcclNow_ = false;    // the current iteration runs NCCL's choice for every task
  bool guardFallbackNccl_ = false;  // outside the step's structure (after a break) NCCL's choice for every task
  GuardArm guardCapNow_;         // the current iteration's arm (the calls it limits: hiddenCap, proto, exposedFloor)
  uint64_t guardStructure_ = 0;  // the detector's structure at the last guard step ...
  uint64_t structureFromStep_ = 0;  // ... and the step it began at (estimated segments planned before it cap nothing)
  bool guardTimedNow_ = false;   // the current iteration's start is a guard sample
  // A follower among the guard's clock ranks: it times the round's iterations and reports them. Set by settlePlace
  // before place_'s release; the measurement thread reads it after place_'s acquire.
  bool guardReports_ = false;
  std::string guardWhy_;
  size_t loggedVerdicts_ = 0;
  std::atomic<bool> guardNeed_{false};
  uint64_t exposureEvery_ = 0;                // AUTOCCL_EXPOSURE_EVERY (0: off)
  static constexpr uint64_t kExposureBlock = 4;  // iterations timed whole in every exposureEvery_: 3 samples
  std::atomic<bool> exposureNeed_{false};     // authority: the step is in such a block
  bool launchClock_ = true;                   // AUTOCCL_CLOCK: only calls marked timed get a window
  // ... and the authority's measurement side: iteration times, the calls the guard ran otherwise than planned
  GuardClock guardClock_;
  ExposureRecorder exposure_;  // authority: which calls of the iteration are exposed (trace, estimated arms)
};

}  // namespace

search::Options onlineSearchOptions() {
  search::Options o;
  o.drift = true;
  // What exploring may cost the job (docs/online-search.md, "Bounded exploration"): pairs NCCL's model puts
  // more than twice its choice are not probed (a probe of LL at 1 GiB is several times slower
  // than the call it replaces); a candidate whose first sample is 30 % behind the incumbent gets no more; a
  // task's trials may cost it 10 % of its calls' time plus sixteen of its calls.
  o.maxCostRatio = 2.0;
  o.abandonAbove = 0.3;
  o.maxUnprovenCalls = Settings{}.unprovenCalls;
  o.regretBudget = 0.10;
  o.regretAllowance = 16;
  // With AUTOCCL_REGRET_EARN_PCT (opt-in) the allowance is earned on the task's calls, the search waiting while it
  // earns, and the calls planned ahead of their samples are charged at 30 % of NCCL's time (or a record, or their
  // measured excess): nccl-tests launches each loop before any of its samples returns, and a size it gives a few
  // dozen calls can't repay a whole allowance spent at once (search test earnedAllowance).
  setEarnedAllowance(o, Settings{}.regretEarn);
  // A table's entry is verified against NCCL's choice on 3 samples a side at each start: a job may give a
  // task only about a hundred calls (nccl-tests: 40 timed calls per size and placement). A search that has
  // not ended when the job does leaves its lead for the next job (TaskSearch::provisional).
  o.verifySamples = 3;
  // A planned sample is given up by elapsed time (and by later samples overtaking it), not by the
  // number of later calls alone: a burst of host run-ahead (hundreds of calls launched before the GPU
  // reports the first) would otherwise lose every sample of the burst (nccl-tests' warm-up).
  o.clockMs = [] {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  };
  return o;
}

// ------------------------------------------------------------------------------ factory

std::unique_ptr<DecisionSource> makeOnlineSource(const PolicyEnv& env, std::string* error) {
  if (env.rank < 0) {
    *error = std::string(env.settings && env.settings->mode == Mode::Table ? "the step guard" : "AUTOCCL_MODE=online") +
             " needs the profiler (point NCCL_PROFILER_PLUGIN at this library too): without "
             "it the rank and GPU times are unknown";
    return nullptr;
  }
  if (!env.coordination) {
    *error = "online mode: no coordination";
    return nullptr;
  }
  auto board = env.coordination->board(env.rank == 0, env.log, error);
  if (!board) return nullptr;
  // Ranks on several nodes meet only at a coordinator every host derives alike: without one (or with
  // `autoccl run`'s loopback address, a coordinator per host) this communicator is not tuned on any of
  // its ranks, all of which see the same node count.
  if (env.nNodes > 1 && (*error = env.coordination->multiNodeProblem(env.nNodes)).size()) return nullptr;
  env.coordination->addLocalRank(env.commHash, env.rank);
  return std::make_unique<OnlineSource>(env, std::move(board));
}

}  // namespace autoccl::engine
