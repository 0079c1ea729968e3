// The step guard: the job's iteration found from a communicator's call sequence alone, and a check, on the
// iteration time, that the tuned plan is faster than NCCL's own choices. NCCL-free.
//
// Why: the per-task search compares a collective's own time (its kernel window, or its stream period), which
// can favour a configuration that makes the step slower (more channels slow an overlapped computation; a kernel
// that holds the stream outside its window). What the user pays is the step.
//
// IterationDetector (every rank): the sequence of task ids of one communicator is the same on every rank, so
// the smallest period of its recent calls (three equal blocks in a row), and with it where each iteration starts
// and its index, is the same on every rank without a message. A call that breaks the period ends the iteration
// structure until a new one has repeated; iteration indices keep counting across such breaks. StepIterations keeps
// the detector's iterations at the job's step (not at pieces of it) and numbers them for the guard.
//
// GuardPlan (the communicator's authority): an append-only plan over iteration indices, served to every rank
// through the board like a task's plan: "tuned" (the tasks' own decisions) until armed (every task of the
// iteration has converged), then a round of blocks of iterations alternating the tuned plan and NCCL's own
// choices for every task (T N N T, twice), their iteration times the samples (the slowest clock rank's), then the
// verdict: the tuned plan stays only if its median iteration time is lower than NCCL's by more than the noise,
// else NCCL's choices for every task. Rounds repeat at a growing interval, so a new phase of the job or a slower
// link is noticed.
//
// Arms (AUTOCCL_STEP_ARMS, opt-in): further configurations of the whole job compared in the same round, each
// the tuned plan with some calls capped at a channel count (the calls the iteration hides behind its computation
// take fewer SMs from it): every call of the iteration except its last (`hidden=`), or the positions the exposure
// estimate calls hidden (`estimated=`: engine/exposure.h, on the authority's windows; the positions ride in the
// arm's segment to every rank); an arm may also raise the calls it leaves exposed to a channel floor (`+E`: the
// resource-sharing study's policy gives the exposed call as many as there are). The round's blocks cycle through
// every arm (T N X1 .. Xk, then the same backwards, twice); an arm is kept only if its median beats NCCL's by the
// same margin as the tuned plan must, and the fastest such arm wins. Without arms the round is T N N T, twice.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autoccl/common/config.h"
#include "autoccl/search/search.h"
#include "engine/common.h"

namespace autoccl::engine {

class IterationDetector {
 public:
  explicit IterationDetector(uint32_t maxPeriod = 2048);
  // The communicator's next call, as the id of its task (ids in first-seen order, the same on every rank).
  // True when this call starts an iteration; iteration() is then that iteration's index.
  bool push(uint32_t taskId);
  // The same, naming the task: ids are given in first-seen order, so they are the same on every rank.
  bool push(const TaskKey& task) {
    auto [it, added] = ids_.emplace(task, static_cast<uint32_t>(ids_.size()));
    if (added) keys_.push_back(task);
    return push(it->second);
  }
  bool stable() const { return period_ > 0; }
  // The tasks called in the latest full iteration, each once, in first-seen order (empty while no structure
  // stands). Only tasks pushed by key (push(const TaskKey&)) are named. O(period).
  std::vector<TaskKey> tasksInLatestIteration() const;
  // How many calls of the latest full iteration were of `task` (0 while no structure stands, or for a task
  // not in it). O(period): for occasional use.
  uint32_t callsPerIteration(const TaskKey& task) const;
  // Where `task`'s calls sit in the iteration (position() of each), over the latest full iteration's worth of
  // calls, ascending; empty as for callsPerIteration. O(period).
  std::vector<uint32_t> positionsOf(const TaskKey& task) const;
  // True when the call just pushed ends an iteration (the next call would start one).
  bool endsIteration() const { return period_ > 0 && (n_ - phase_) % period_ == 0; }
  uint32_t period() const { return period_; }
  uint64_t iteration() const { return iteration_; }
  // The call just pushed: its position in its iteration (0 starts one); meaningful while stable().
  uint32_t position() const { return period_ > 0 ? static_cast<uint32_t>((n_ - 1 - phase_) % period_) : 0; }
  // Calls pushed so far.
  uint64_t calls() const { return n_; }
  // Which structure stands: a serial number, new each time a structure is found after a break (meaningful while
  // stable()), and the position of the first call of its first repeated block (it has held since then).
  uint64_t structure() const { return structure_; }
  uint64_t structureFrom() const { return structureFrom_; }

 private:
  uint64_t hashOf(uint64_t from, uint64_t to) const;  // hash of the calls at positions [from, to]
  bool sameBlocks(uint64_t a, uint64_t b, uint32_t len) const;
  uint32_t maxPeriod_;
  size_t ring_;                              // history kept (three periods of the longest)
  std::vector<uint32_t> hist_;               // task id by position % ring_
  std::vector<uint64_t> prefix_;             // polynomial hash of positions [0, p] by p % ring_
  std::vector<uint64_t> pow_;                // base^k, k <= maxPeriod
  // per task id: its recent positions (a deque: the oldest leave from the front at every call, and a vector's
  // erase moved up to maxPeriod positions each time, the most of a converged call's cost under the guard)
  std::vector<std::deque<uint64_t>> seen_;
  uint64_t n_ = 0;                           // calls pushed
  uint32_t period_ = 0;                      // 0: no iteration structure now
  uint64_t phase_ = 0;                       // positions == phase_ (mod period_) start iterations
  uint64_t iteration_ = 0;
  bool anyIteration_ = false;
  uint64_t structure_ = 0;
  uint64_t structureFrom_ = 0;
  std::unordered_map<TaskKey, uint32_t, TaskKeyHash> ids_;  // push(const TaskKey&)
  std::vector<TaskKey> keys_;                                // by id: the key pushed as it
};

// The guard's iterations: the detector's iterations at the job's step. Why: after a call that breaks the step's
// structure, the detector finds runs of calls inside the step (FSDP's runs of one task, its pairs) before the step
// repeats again; a round timing those pieces of a step ends with too few samples (NCCL's choices until the next
// round) or with samples of another length. So pieces count for nothing: the calls between the break and the
// step's return run what the guard runs outside its rounds (GuardPlan::fallbackNcclOf), and the step's iterations
// keep their own numbering. An iteration whose end was lost to a break has no time: the index after a break skips
// one, so the clock (the start of i + 1 minus the start of i) never spans the break.
//   Which structure is the step: the first one found; then a longer one once it has held over kLongerHeld of its
// blocks (three blocks of "the step and an extra call" come by chance where extra calls are frequent); a shorter
// one once it has held over more calls than the longest step taken so far and its own period. A run of period p
// over L + p calls of a sequence of period L makes the whole sequence p-periodic, so such a run is no piece of any
// step of up to L calls: after a shorter phase (an evaluation loop) the training step's pieces are not taken
// either. The step shrinks for good where tasks settle (their calls no longer reach the detector) or the job
// changes phase. All of it follows the call sequence alone, so it is the same on every rank.
class StepIterations {
 public:
  // At an iteration start of `d` (its push returned true): true when this starts a step; index() is then its
  // index.
  bool onStart(const IterationDetector& d);
  uint64_t index() const { return index_; }
  // The latest start skipped an index: iterations index() - 2 and index() - 1 will never have a time.
  bool skipped() const { return skipped_; }
  // The step's length in calls (0: none seen yet).
  uint32_t calls() const { return calls_; }
  // Whether the detector's structure now is the step's (its calls are the step's, not pieces of one).
  bool atStep(const IterationDetector& d) const {
    return d.stable() && d.period() == calls_ && d.structure() == structure_;
  }

 private:
  uint32_t calls_ = 0;
  uint32_t longest_ = 0;  // the longest step taken so far
  uint64_t structure_ = 0;
  uint64_t index_ = 0;
  bool any_ = false;
  bool skipped_ = false;
};

// How the step changed, for the guard (GuardPlan::iterationChanged): the step's tasks, each with its calls per step,
// at the last change. A step of fewer of the same calls (every task left called as often as before, every task
// gone settled: its calls no longer reach the detector) is the same step on the GPU; anything else is another
// step (a new phase, a chance structure), whatever its length.
enum class StepChange { kSame, kFewerOfTheSame, kOther };
class StepTasks {
 public:
  // At a step's start (`s` took it from `d`): after a break or a change of length (and at the first step), the
  // step `d` stands at now against the one remembered, which it replaces; else kSame. `settled`: whether a task's
  // calls are settled for good.
  StepChange atStart(const StepIterations& s, const IterationDetector& d,
                     const std::function<bool(const TaskKey&)>& settled);

 private:
  std::vector<std::pair<TaskKey, uint32_t>> tasks_;  // the step's tasks and their calls per step
};

struct GuardOptions {
  uint32_t blockIters = 3;       // iterations per block; a block's first is not a sample (the switch settles)
  uint32_t pairs = 2;            // T N N T, this many times
  double minMargin = 0.01;       // the tuned plan must be this much faster at least ...
  double z = 2.0;                // ... and by z standard errors of the two medians
  uint64_t idleWindow = 16;      // iterations planned at a time while not armed
  uint64_t recheckFirst = 256;   // iterations from a verdict to the next round; doubles up to recheckMax
  uint64_t recheckMax = 16384;
  uint64_t giveUpAfter = 64;     // a round's missing samples are lost once 4 x this many iterations are planned past it
  uint32_t minSamples = 3;       // a side needs this many samples, else NCCL's choices (no evidence for the plan)
  // A tuned median below NCCL's by more than the tuned plan's kernel savings in an iteration (setPlanGain)
  // plus the margin the round needs is the step's noise, not the plan: NCCL's choices (or the fastest channel-cap
  // arm that beat NCCL, whose gain is the computation's). On 2 x H200, 350m FSDP2 and DDP saved 0.2-0.4 % of the
  // step in kernel time while the step moved +-15 % within a launch; a verdict for the tuned plan there was
  // chance. Off: false.
  bool explainedGain = true;
  // Extra arms (AUTOCCL_STEP_ARMS=hidden=...): per entry, the tuned plan with every call of the iteration but
  // its last so limited (at most its channels, on its protocol). Empty: the tuned plan and NCCL's choices alone.
  std::vector<ArmLimit> hiddenArms;
  // Estimated arms (AUTOCCL_STEP_ARMS=estimated=...): per entry, the tuned plan with the positions the exposure
  // estimate calls hidden (setEstimatedHidden, read at each round's start) so limited.
  std::vector<ArmLimit> estimatedArms;
  // The job's regret budget (AUTOCCL_JOB_REGRET_PCT, shared with the searches of the process): each verdict
  // charges its round's regret to it (Verdict::regretUs: time over NCCL's choices, as the searches' regret is),
  // so a guard that keeps timing a plan slower than NCCL's leaves the searches less to explore with; a round
  // that confirms a faster plan charges nothing. It adds regret only, no calls to the budget's base: the
  // iterations it judged are the tasks' calls, already counted there. Null: the regret is only recorded.
  std::shared_ptr<search::RegretLedger> jobRegret;
};

// What a guard segment tells every rank to run for an iteration.
struct GuardArm {
  bool nccl = false;  // NCCL's own choice for every task
  int hiddenCap = 0;  // > 0: the tuned plan, the limited calls at most this many channels
  // With a limit, the calls limited: bit p, position p of the detector's iteration (p < 64); 0, every call of
  // the iteration but its last.
  uint64_t positions = 0;
  bool estimated = false;  // positions from the exposure estimate (0 while it calls no position hidden)
  // >= 0: the limited calls run this protocol (NCCL's id) on the plan's algorithm (ring where the plan leaves the
  // pair to NCCL), without the plan's chunk setting (a chunk searched for another protocol); -1: the plan's.
  int proto = -1;
  // > 0: the calls the arm leaves exposed run at least this many channels: the step's last call, or, for an
  // estimated arm, every position the estimate does not call hidden (exposed or unknown). kMaxChannelsHard (`max`):
  // as many as the communicator has (the context clamps to AUTOCCL_MAX_CHANNELS, NCCL to the communicator's
  // count), also where the plan leaves the count to NCCL; a numeric floor leaves NCCL's own count alone (it is
  // not known alike on every rank, and the floor could lower it).
  int exposedFloor = 0;
  // Whether the arm changes any call: the tuned plan with a channel cap, a protocol or a floor (not NCCL's
  // choices).
  bool limits() const { return !nccl && (hiddenCap > 0 || proto >= 0 || exposedFloor > 0); }
  ArmLimit armLimit() const { return ArmLimit{hiddenCap, proto, exposedFloor}; }
  // The arm raises the exposed calls and limits nothing else (`hidden=+E`).
  bool raisesOnly() const { return !nccl && exposedFloor > 0 && hiddenCap <= 0 && proto < 0; }
  // Limits a call's configuration (the plan's decision) as the arm says; whether it changed it. At most hiddenCap
  // channels (a count left to NCCL gets the cap); with a protocol, the plan's algorithm on it, or ring where the
  // plan leaves the pair to NCCL or its algorithm has Simple alone (NVLS, CollNet, PAT: a pair NCCL refuses would
  // drop the cap with it and put NCCL's choice in the plan's place), without the plan's chunk setting (one
  // searched for another protocol). NCCL keeps its pair where the plan does and the arm names no protocol.
  bool applyTo(Config* c) const;
  // Whether this arm caps the call at `position` of its iteration (`last`: the iteration's last call).
  bool caps(uint32_t position, bool last) const {
    if (nccl || (hiddenCap <= 0 && proto < 0)) return false;
    if (positions == 0) return !estimated && !last;
    return position < 64 && ((positions >> position) & 1u) != 0;
  }
  // Whether this arm raises the call at `position` to its floor: the iteration's last call, or an estimated
  // arm's positions it does not cap (none while the estimate calls no position hidden: the arm sits out then).
  bool raises(uint32_t position, bool last) const {
    if (nccl || exposedFloor <= 0 || caps(position, last)) return false;
    return estimated ? positions != 0 : last;
  }
  // Raises a call's channels to the floor (raises()): where the plan sets fewer, or leaves the count to NCCL and
  // the floor is `max`. Whether it changed the call. The pair and chunk stay the plan's.
  bool raiseTo(Config* c) const;
};

// NCCL's own choice for a task, as the authority saw a call of it run on NCCL's default (algo/proto < 0: none seen;
// channels 0: not known, e.g. only grouped launches seen).
struct NcclChoice {
  int algo = -1, proto = -1, channels = 0;
  bool known() const { return algo >= 0 && proto >= 0; }
};

// Whether a call an arm limited (`limited`, GuardArm::applyTo of `plan`) runs what the plan's decision runs: the
// parts either leaves to NCCL (its pair, its channel count) read as NCCL's own choice. A protocol arm on a call
// NCCL runs on ring/Simple anyway, or a cap of 2 on a call NCCL runs on 2 channels, changes no call (two hosts of
// one H100: `hidden=simple` counted every call as changed while NCCL's own choice was ring/Simple everywhere).
// Without NCCL's choice known, only identical settings run alike. For counting on the authority alone: the
// configuration every rank applies stays applyTo's, which needs no rank's measurements.
bool runsAlike(const Config& plan, const Config& limited, const NcclChoice& nccl);

class GuardPlan {
 public:
  // What a guard segment says (Segment::cfg): the tuned plan (NCCL-default config: a communicator's
  // followers that ask before the authority has planned get it, as for any task), or NCCL's own choice for
  // every task.
  static search::Config ncclMark();
  static bool isNccl(const search::Config& c);
  // A limiting arm's segment config (pairs no search plans for the guard's key: algorithm 0 for the plan's
  // protocol, 1 + P for protocol P; protocol 0 for every call but the last, 1 for the positions in `chunk`; the
  // cap as channels' low byte, the exposed calls' floor as their second byte), and what a config says.
  static search::Config armMark(const GuardArm& a);
  static GuardArm armOf(const search::Config& c);
  // What every segment also says: what runs outside the step's structure (after a break, until the step is
  // back): NCCL's choices where the last verdict put them back, else the tuned plan.
  static bool fallbackNcclOf(const search::Config& c);

  explicit GuardPlan(GuardOptions o = GuardOptions());
  ~GuardPlan();
  GuardPlan(const GuardPlan&) = delete;
  GuardPlan& operator=(const GuardPlan&) = delete;
  // The verdicts' regret so far (microseconds): what the job's budget was charged.
  double regretUs() const;
  // Segments covering iteration i (and what is planned beyond `covered`), for the board's decider.
  std::vector<search::Segment> decide(uint64_t i, uint64_t covered);
  // Every task of the iteration has converged: the next round may start. `iterationCalls`: the iteration's length
  // in calls (0: not known; iterationChanged never disarms then).
  void arm(uint32_t iterationCalls = 0);
  // The step's length in calls now (StepIterations: a new step, never a piece of one) and how it changed. Where
  // it is another step (a change of length, or `change` kOther; kSame: not known), the plan disarms: a round
  // under way is void (its samples timed another step) and the next waits for arm() on the new step. Not where
  // the step is fewer of the same calls (tasks that settled no longer reach the detector, the GPU runs the same
  // step): the armed length follows it. Returns the length the plan was armed on when it disarmed, else 0.
  uint32_t iterationChanged(uint32_t iterationCalls, StepChange change = StepChange::kSame);
  // Rounds voided by iterationChanged.
  uint32_t voidedRounds() const;
  // The tuned plan's kernel time saved per iteration against NCCL's choices (microseconds, summed over the
  // iteration's calls), as the tasks' searches measured it; negative: unknown (no explained-gain check). `period`:
  // the iteration's length in calls now (what the verdicts record).
  void setPlanGain(double micros, uint32_t period = 0);
  // The positions of the iteration the exposure estimate calls hidden now (bit p: position p; 0: none known).
  // Read at a round's start by the estimated arms: they take these; the arm that won the last verdict keeps its
  // own beside them; with none named every arm keeps its own. The first positions after a verdict bring the next
  // round forward (the arms sat out every round before).
  void setEstimatedHidden(uint64_t positions);
  // The detector's iteration is another structure (after a break it may start at another call): the estimated
  // arms' positions name other calls now. They are forgotten (an arm without positions, running since it won,
  // runs the tuned plan) until the estimate of the new structure names some.
  void forgetEstimatedPositions();
  // The ranks whose iteration times make a sample: ranks 0 (the authority) to n - 1 (at most kMaxClockRanks). An
  // iteration's time is the longest among them; the round waits for every one of them until its give-up bound, and
  // then takes the longest of those that came. 1 (the default): the authority's alone.
  static constexpr int kMaxClockRanks = 64;
  void setClockRanks(int n);
  // Iteration i took `micros` on rank `rank`'s stream (the start of i to the start of i + 1). A duplicate from one
  // rank is ignored.
  void sample(uint64_t i, double micros, int rank = 0);
  // A call of a round's block that limiting arm `arm` limits (GuardArm::caps), and whether it ran otherwise than
  // the tuned plan: the arm changed its configuration and NCCL accepts the pair. The authority's calls alone (the
  // cost table is the same on every rank). Counted per arm until the next round starts (ArmResult::inert).
  // `raised`: a call the arm leaves exposed and raises to its floor (GuardArm::raises), not one it caps.
  void noteLimitedCall(const GuardArm& arm, bool changed, bool raised = false);
  // Iterations [from, to) will never have a time (a break ended the step's structure): a round stops waiting for
  // them, instead of waiting out its give-up bound (hundreds of iterations on the plan it ran before). Iteration
  // `to`, the first after the break, is no sample either unless it runs what the calls of the break ran (the
  // fallback): its block's switch settles in it.
  void lost(uint64_t from, uint64_t to);

  struct ArmResult {
    GuardArm arm;
    double medianUs = 0;  // 0: fewer than minSamples samples
    uint32_t samples = 0;
    double margin = 0;    // the share it had to beat NCCL's median by (extra arms and the tuned plan)
    // A limiting arm's calls in the round's blocks (noteLimitedCall): those it limits, and those that ran otherwise
    // than the tuned plan. Inert: it limited calls and changed none (each already within its limit, or asking for
    // a pair NCCL refuses, which runs NCCL's choice): it ran the tuned plan or NCCL's choices, not itself, and is
    // not judged (on two hosts of one H100, `hidden=2/ll128` was refused on every call: no LL128 over sockets).
    uint64_t limitedCalls = 0, changedCalls = 0;
    bool inert = false;
    // Of the changed calls, those the arm capped (not raised). An arm with a floor whose caps changed no call ran
    // as an arm that only raises (`hidden=64+max` on a communicator of 32 channels): judged as one
    // (GuardArm::raisesOnly, the tuned plan's bound on an unexplained gain).
    uint64_t capChangedCalls = 0;
    bool raisedOnly = false;
  };
  // One iteration time a round compared: the iteration, the arm its block ran, its time (the longest of the ranks'
  // that came), the authority's own (0: none came) and how many ranks' times came.
  struct Sample {
    uint64_t iteration = 0;
    GuardArm arm;
    double micros = 0;
    double ownMicros = 0;
    uint32_t ranks = 0;
  };
  struct Verdict {
    uint64_t at = 0;  // first iteration it applies to
    uint64_t roundBegin = 0;  // the round's first iteration
    bool tuned = true;  // the winner is the tuned plan or an arm on top of it (not NCCL's choices)
    double tunedUs = 0, ncclUs = 0;
    uint32_t tunedSamples = 0, ncclSamples = 0;
    GuardArm winner;               // what runs from `at` on
    std::vector<ArmResult> arms;   // with extra arms only: every arm's result, the tuned plan and NCCL's first
    double margin = 0;             // the share the tuned plan had to beat NCCL's median by (0: no median)
    double planGainUs = -1;        // the tuned plan's kernel savings per iteration when judged (-1: unknown)
    bool unexplained = false;      // the tuned median won, but by more than its kernel savings can explain
    uint32_t period = 0;           // the iteration's length in calls when judged (0: not known)
    uint32_t voidedBefore = 0;     // rounds voided since the previous verdict (the step changed)
    std::vector<Sample> samples;   // what the round measured, by iteration (the trace's `guard` record)
    // What the round cost against running the winner throughout (microseconds): every iteration of a block of a
    // losing arm, its settling one too, at that arm's median minus the winner's. 0 where the winner has no median
    // (too few samples), and nothing for an arm without one.
    double costUs = 0;
    // The same against NCCL's choices (what the job's budget is charged, GuardOptions::jobRegret): the iterations
    // of every arm slower than NCCL's median, at its median minus NCCL's; 0 where NCCL's has no median.
    double regretUs = 0;
  };
  std::vector<Verdict> verdicts() const;
  size_t verdictCount() const;
  Verdict verdict(size_t i) const;  // i < verdictCount()
  bool armed() const;
  // What every iteration not planned yet runs when the authority leaves: the last verdict, for good.
  search::Segment finalSegment() const;

 private:
  void planOneLocked();
  void verdictLocked();
  size_t fallbackArmLocked() const;  // the arm run outside the step's structure (tuned, or NCCL's choices)
  size_t fallbackArmAtLocked(uint64_t i) const;  // the same, as planned for iteration i
  search::Config markLocked(size_t arm) const;   // a segment's config: the arm's mark and the fallback
  void planRoundBlocksLocked();
  bool enoughSamplesLocked() const;  // minSamples on the tuned plan and on NCCL's choices
  static constexpr uint32_t kMaxExtensions = 3;  // rounds extended for samples lost to breaks, at most
  static constexpr int kFallbackNccl = 1;  // Segment::cfg.chunkHalvings: the fallback is NCCL's choices
  void addLocked(uint64_t len, size_t arm, bool measure, search::Phase phase);

  mutable std::mutex mu_;
  GuardOptions o_;
  std::vector<search::Segment> segs_;
  uint64_t planned_ = 0;
  bool armed_ = false;
  uint32_t armedCalls_ = 0;                  // the iteration's length in calls when armed
  uint32_t voided_ = 0;
  uint32_t voidedAtVerdict_ = 0;             // voided_ at the latest verdict
  bool inRound_ = false;
  uint32_t lostInRound_ = 0;                 // samples of the round (or of its latest extension) lost to breaks
  uint32_t extensions_ = 0;
  uint32_t changesSinceVerdict_ = 0;         // disarming changes of step since the last verdict
  static constexpr size_t kTunedArm = 0, kNcclArm = 1;  // arms_'s first two; the extra arms follow
  std::vector<GuardArm> arms_;
  std::vector<uint64_t> limited_, changed_;  // per arm: noteLimitedCall's counts since the round started
  std::vector<uint64_t> capChanged_;         // ... of the changed, those capped (not raised)
  size_t now_ = kTunedArm;                   // the last verdict's arm (what is planned outside rounds)
  uint64_t roundEnd_ = 0;                    // first iteration after the round's blocks
  std::map<uint64_t, size_t> wanted_;        // sample iteration -> the arm its block ran
  std::map<uint64_t, double> times_;         // sample iteration -> its time (the longest of the ranks' so far)
  std::map<uint64_t, double> own_;           // sample iteration -> the authority's time
  std::map<uint64_t, uint64_t> ranksIn_;     // sample iteration -> bit r: rank r's time came
  int clockRanks_ = 1;
  uint64_t heardInRound_ = 0;                // bit r: rank r sent a time in the round under way
  uint64_t silent_ = 0;                      // bit r: rank r sent none in its last round: not waited for
  uint64_t clockMaskLocked() const {         // bit r for every clock rank r
    return clockRanks_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << clockRanks_) - 1;
  }
  bool completeLocked(uint64_t i) const;     // every clock rank's time of iteration i came (silent ones aside)
  uint64_t interval_ = 0;
  uint64_t nextRound_ = 0;                   // iteration before which no new round starts
  uint64_t waitLen_ = 1;
  std::vector<Verdict> verdicts_;
  double planGainUs_ = -1;
  uint32_t period_ = 0;
  uint64_t estimatedHidden_ = 0;
  double regretUs_ = 0;   // the verdicts' regret so far
  int ledgerSlot_ = -1;   // o_.jobRegret's slot
};

// One INFO line of a verdict: the communicator, its iteration's length, both arms' medians and what runs from
// then on (with AUTOCCL_STEP_ARMS every arm's median, samples and margin).
std::string describeVerdict(const GuardPlan::Verdict& v, uint64_t comm);

// The trace's `guard` record of a verdict (JSON, one line): the same numbers and every sample of its round, each
// with the first call of its iteration where `firstCall` knows it (the call places the iteration in the job:
// a once-per-step task's call index is the step).
std::string traceVerdict(const GuardPlan::Verdict& v, const std::string& commHex, int rank,
                         const std::function<bool(uint64_t iteration, CallKey* first)>& firstCall);

// A clock rank's iteration times, from its own stream (the authority's go to its GuardPlan, the other clock ranks'
// to the authority through the board): the first call of each guard-timed iteration is marked, its measurement
// brings its start, and iteration i's time is the start of i + 1 minus the start of i. Also, on the authority, the
// calls the guard ran otherwise than their plan says (NCCL's choice, a channel cap), whose times are not their
// task's samples. Its own mutex: marks come from the calling thread, starts from the measurement thread.
class GuardClock {
 public:
  // Call `k` of `task` is the first of guard-timed iteration `iteration`.
  void markBoundary(const TaskKey& task, uint64_t k, uint64_t iteration);
  // The first call of guard-timed iteration `iteration`, while it is among the last kFirstCallsKept marked.
  bool firstCall(uint64_t iteration, CallKey* out) const;
  // The GPU start of call `k` of `task`: the iterations it completes, with their times in microseconds (none
  // for a call that was not marked).
  std::vector<std::pair<uint64_t, double>> start(const TaskKey& task, uint64_t k, uint64_t startNs);
  void markOverridden(const TaskKey& task, uint64_t k);
  // Whether call `k` of `task` was overridden (and forget it).
  bool takeOverridden(const TaskKey& task, uint64_t k);

 private:
  static constexpr size_t kStartsKept = 64, kMaxBoundaries = 4096, kMaxOverridden = 65536, kFirstCallsKept = 4096;
  mutable std::mutex mu_;
  std::unordered_map<CallKey, uint64_t, CallKeyHash> boundary_;  // marked first calls -> iteration
  std::map<uint64_t, uint64_t> startNs_;                         // iteration -> its first call's start
  std::unordered_set<CallKey, CallKeyHash> overridden_;
  std::map<uint64_t, CallKey> firstCalls_;  // iteration -> its first call (the trace's guard samples)
};

}  // namespace autoccl::engine
