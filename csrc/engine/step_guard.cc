#include "engine/step_guard.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "autoccl/common/stats.h"

namespace autoccl::engine {

namespace {
constexpr uint64_t kHashBase = 0x9E3779B97F4A7C15ull;  // odd: a bijection on uint64 words
constexpr uint64_t kMaxWait = 16;                     // longest waiting segment of a round (iterations)
// Blocks a structure longer than the step holds before it is the step: three equal blocks of "a step and an extra
// call" come by chance where extra calls are frequent (1 step in 6 at random: in 700 steps a 9-call and a 33-call
// structure of an 8-call step, each voiding the round under way); five come (1/6)^2 as often.
constexpr uint64_t kLongerHeld = 5;
}  // namespace

// ------------------------------------------------------------------------------------ IterationDetector

IterationDetector::IterationDetector(uint32_t maxPeriod)
    : maxPeriod_(std::max<uint32_t>(1, maxPeriod)),
      ring_(3 * static_cast<size_t>(maxPeriod_) + 2),
      hist_(ring_),
      prefix_(ring_),
      pow_(maxPeriod_ + 1) {
  pow_[0] = 1;
  for (size_t k = 1; k < pow_.size(); ++k) pow_[k] = pow_[k - 1] * kHashBase;
}

uint64_t IterationDetector::hashOf(uint64_t from, uint64_t to) const {
  const uint64_t whole = prefix_[to % ring_];
  if (from == 0) return whole;
  return whole - prefix_[(from - 1) % ring_] * pow_[to - from + 1];
}

bool IterationDetector::sameBlocks(uint64_t a, uint64_t b, uint32_t len) const {
  if (hashOf(a, a + len - 1) != hashOf(b, b + len - 1)) return false;
  for (uint32_t j = 0; j < len; ++j)  // a hash match is checked call by call (once per structure found)
    if (hist_[(a + j) % ring_] != hist_[(b + j) % ring_]) return false;
  return true;
}

uint32_t IterationDetector::callsPerIteration(const TaskKey& task) const {
  auto f = ids_.find(task);
  if (period_ == 0 || f == ids_.end() || n_ < period_) return 0;
  uint32_t n = 0;
  for (uint64_t pos = n_ - period_; pos < n_; ++pos) n += hist_[pos % ring_] == f->second;
  return n;
}

std::vector<uint32_t> IterationDetector::positionsOf(const TaskKey& task) const {
  std::vector<uint32_t> out;
  auto f = ids_.find(task);
  if (period_ == 0 || f == ids_.end() || n_ < period_) return out;
  for (uint64_t pos = n_ - period_; pos < n_; ++pos)
    if (hist_[pos % ring_] == f->second) out.push_back(static_cast<uint32_t>((pos + period_ - phase_ % period_) % period_));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<TaskKey> IterationDetector::tasksInLatestIteration() const {
  std::vector<TaskKey> out;
  if (period_ == 0 || n_ < period_) return out;
  std::vector<bool> seen(keys_.size(), false);
  for (uint64_t pos = n_ - period_; pos < n_; ++pos) {
    const uint32_t id = hist_[pos % ring_];
    if (id < keys_.size() && !seen[id]) {
      seen[id] = true;
      out.push_back(keys_[id]);
    }
  }
  return out;
}

bool IterationDetector::push(uint32_t taskId) {
  const uint64_t pos = n_++;
  hist_[pos % ring_] = taskId;
  prefix_[pos % ring_] = (pos ? prefix_[(pos - 1) % ring_] : 0) * kHashBase + taskId + 1;
  if (seen_.size() <= taskId) seen_.resize(static_cast<size_t>(taskId) + 1);
  std::deque<uint64_t>& s = seen_[taskId];
  // Positions further back than the longest period are of no use: keep the list short.
  while (!s.empty() && pos - s.front() > maxPeriod_) s.pop_front();

  bool starts = false;
  if (period_ > 0) {
    if (hist_[(pos - period_) % ring_] != taskId) {
      period_ = 0;  // the structure broke: look for one again (a new one shows once it has repeated)
    } else if ((pos - phase_) % period_ == 0) {
      iteration_ = anyIteration_ ? iteration_ + 1 : 0;
      anyIteration_ = true;
      starts = true;
    }
  }
  if (period_ == 0) {
    // A period p ending here: the last 3p calls are three equal blocks (two could be chance: a task called
    // twice in a row is no iteration). Candidates are the distances to this task's earlier positions, nearest
    // first, so the smallest period is found first.
    for (auto it = s.rbegin(); it != s.rend(); ++it) {
      const uint64_t p = pos - *it;
      if (pos + 1 < 3 * p) break;  // fewer than three periods of history
      const auto len = static_cast<uint32_t>(p);
      if (sameBlocks(pos + 1 - 2 * p, pos + 1 - p, len) && sameBlocks(pos + 1 - 3 * p, pos + 1 - 2 * p, len)) {
        period_ = static_cast<uint32_t>(p);
        phase_ = (pos + 1) % p;  // the next call starts an iteration
        ++structure_;
        structureFrom_ = pos + 1 - 3 * p;
        break;
      }
    }
  }
  s.push_back(pos);
  return starts;
}

// ------------------------------------------------------------------------------------ StepIterations

bool StepIterations::onStart(const IterationDetector& d) {
  const uint32_t p = d.period();
  if (p == 0) return false;
  const uint64_t held = d.calls() - d.structureFrom();
  if (p < calls_ && held < static_cast<uint64_t>(longest_) + p)
    return false;  // a piece of a step, until it has held over more than any step
  if (p > calls_ && calls_ > 0 && held < kLongerHeld * static_cast<uint64_t>(p))
    return false;  // a chance repeat of the step with an extra call, until it has held longer
  // p is the step now: the same step on (index + 1), or again after a break, a longer step, or the step grown
  // shorter for good (index + 2: the iteration before has no end to be timed by).
  const bool same = any_ && p == calls_ && d.structure() == structure_;
  skipped_ = any_ && !same;
  index_ = !any_ ? 0 : index_ + (same ? 1 : 2);
  any_ = true;
  calls_ = p;
  longest_ = std::max(longest_, p);
  structure_ = d.structure();
  return true;
}

// ------------------------------------------------------------------------------------ StepTasks

StepChange StepTasks::atStart(const StepIterations& s, const IterationDetector& d,
                              const std::function<bool(const TaskKey&)>& settled) {
  // The same structure as at the last start (no break, no new length): the same step, nothing to compare.
  if (!s.skipped() && !tasks_.empty()) return StepChange::kSame;
  std::vector<std::pair<TaskKey, uint32_t>> now;
  for (const TaskKey& t : d.tasksInLatestIteration()) now.emplace_back(t, d.callsPerIteration(t));
  StepChange c = now == tasks_ ? StepChange::kSame : StepChange::kOther;
  if (c == StepChange::kOther && !tasks_.empty() && now.size() < tasks_.size()) {
    bool fewer = true;
    for (const auto& [task, calls] : tasks_) {
      auto f = std::find_if(now.begin(), now.end(), [&](const auto& x) { return x.first == task; });
      fewer = fewer && (f == now.end() ? settled(task) : f->second == calls);
    }
    for (const auto& x : now)  // no task new to the step
      fewer = fewer && std::any_of(tasks_.begin(), tasks_.end(), [&](const auto& y) { return y.first == x.first; });
    if (fewer) c = StepChange::kFewerOfTheSame;
  }
  tasks_ = std::move(now);
  return c;
}

// ------------------------------------------------------------------------------------ GuardPlan

search::Config GuardPlan::ncclMark() {
  search::Config c;
  c.algo = 1;  // any forced pair: the guard's segments are read by the engine alone, never by NCCL
  c.proto = 2;
  c.channels = 1;
  return c;
}

bool GuardArm::applyTo(Config* c) const {
  if (!limits()) return false;
  bool changed = false;
  if (hiddenCap > 0 && (c->channels == 0 || c->channels > hiddenCap)) {
    c->channels = hiddenCap;
    changed = true;
  }
  if (proto >= 0 && c->proto != proto) {
    if (c->algo < 0 || (proto != kSimpleProto && c->algo != kTreeAlgo)) c->algo = kRingAlgo;
    c->proto = proto;
    c->chunk = 0;
    c->chunkHalvings = 0;
    changed = true;
  }
  return changed;
}

bool GuardArm::raiseTo(Config* c) const {
  if (exposedFloor <= 0 || (c->channels > 0 && c->channels >= exposedFloor)) return false;
  // NCCL's own count is not known alike on every rank: only `max` can stand for it (it is never below it); a
  // numeric floor could lower it and leaves it to NCCL.
  if (c->channels == 0 && exposedFloor < kMaxChannelsHard) return false;
  c->channels = exposedFloor;
  return true;
}

namespace {
// A configuration as NCCL runs it: the parts it leaves to NCCL filled in from NCCL's own choice. False where they
// cannot be (no choice known, or a half-forced pair that is not NCCL's).
bool asRun(const Config& c, const NcclChoice& n, Config* out) {
  *out = c;
  out->measure = false;
  if (!c.forcesPair()) {
    if (!n.known() || (c.algo >= 0 && c.algo != n.algo) || (c.proto >= 0 && c.proto != n.proto)) return false;
    out->algo = n.algo;
    out->proto = n.proto;
  }
  // Channels 0 on NCCL's pair: NCCL's count. On another pair NCCL computes that pair's count, the same whoever
  // asked: 0 stands for it on both sides.
  if (out->channels == 0 && out->algo == n.algo && out->proto == n.proto) out->channels = n.channels;
  return true;
}
}  // namespace

bool runsAlike(const Config& plan, const Config& limited, const NcclChoice& nccl) {
  Config a, b;
  if (!asRun(plan, nccl, &a) || !asRun(limited, nccl, &b)) {
    a = plan;  // compared as set: every field, a default's channels too (Config::sameSetting ignores them)
    b = limited;
  }
  return a.algo == b.algo && a.proto == b.proto && a.channels == b.channels && a.chunk == b.chunk &&
         a.chunkHalvings == b.chunkHalvings;
}

// A limiting arm: algorithm 0 (the plan's protocol) or 1 + P (protocol P), protocol 0 (every call but the last) or
// 1 (the positions in chunk), the cap as channels' low byte and the exposed calls' floor as their second (no search
// plans the guard's key; NCCL never reads it; the wire carries channels up to 2^16). NCCL's mark is algorithm 1
// with protocol 2, which no arm writes.
search::Config GuardPlan::armMark(const GuardArm& a) {
  if (a.nccl) return ncclMark();
  search::Config c;
  if (!a.limits() || (a.estimated && a.positions == 0)) return c;  // the tuned plan
  c.algo = a.proto < 0 ? 0 : 1 + a.proto;
  c.proto = a.positions == 0 ? 0 : 1;
  c.channels = std::clamp(a.hiddenCap, 0, kMaxChannelsHard) | (std::clamp(a.exposedFloor, 0, kMaxChannelsHard) << 8);
  c.chunk = a.positions;
  return c;
}

GuardArm GuardPlan::armOf(const search::Config& c) {
  GuardArm a;
  if (c.isDefault()) return a;
  if (c.algo >= 0 && c.algo <= kNumProtos && (c.proto == 0 || c.proto == 1) && (c.channels > 0 || c.algo > 0)) {
    a.hiddenCap = c.channels & 0xff;
    a.exposedFloor = (c.channels >> 8) & 0xff;
    a.proto = c.algo - 1;
    if (c.proto == 1) {
      a.positions = c.chunk;
      a.estimated = true;
    }
  } else {
    a.nccl = true;
  }
  return a;
}

bool GuardPlan::isNccl(const search::Config& c) { return armOf(c).nccl; }

// The fallback rides in the mark's chunkHalvings field, which no search plans for the guard's key and NCCL never
// reads (its chunk field holds an estimated arm's positions).
bool GuardPlan::fallbackNcclOf(const search::Config& c) { return c.chunkHalvings == kFallbackNccl; }

GuardPlan::GuardPlan(GuardOptions o) : o_(std::move(o)) {
  o_.blockIters = std::max<uint32_t>(2, o_.blockIters);
  o_.pairs = std::max<uint32_t>(1, o_.pairs);
  o_.idleWindow = std::max<uint64_t>(1, o_.idleWindow);
  arms_.push_back(GuardArm{});                 // kTunedArm
  arms_.push_back(GuardArm{true, 0});          // kNcclArm
  for (const ArmLimit& l : o_.hiddenArms)
    if (l.channels > 0 || l.proto >= 0 || l.exposed > 0)
      arms_.push_back(GuardArm{false, l.channels, 0, false, l.proto, l.exposed});
  for (const ArmLimit& l : o_.estimatedArms)
    if (l.channels > 0 || l.proto >= 0) arms_.push_back(GuardArm{false, l.channels, 0, true, l.proto, l.exposed});
  if (o_.jobRegret) ledgerSlot_ = o_.jobRegret->join();
}

GuardPlan::~GuardPlan() {
  if (o_.jobRegret) o_.jobRegret->leave(ledgerSlot_);  // its regret stays counted
}

double GuardPlan::regretUs() const {
  std::lock_guard<std::mutex> lk(mu_);
  return regretUs_;
}

void GuardPlan::setEstimatedHidden(uint64_t positions) {
  std::lock_guard<std::mutex> lk(mu_);
  // The estimate's first positions: its arms sat out every round so far (a job's first round starts once its
  // tasks converge, before the estimate has its samples), so the next round comes now instead of after the
  // recheck interval (256 iterations and more: a 300-iteration job ends before it).
  bool judged = false;
  for (const GuardArm& a : arms_) judged = judged || (a.estimated && a.positions != 0);
  if (positions != 0 && !judged && !o_.estimatedArms.empty() && !verdicts_.empty() && !inRound_)
    nextRound_ = std::min(nextRound_, planned_);
  estimatedHidden_ = positions;
}

void GuardPlan::forgetEstimatedPositions() {
  std::lock_guard<std::mutex> lk(mu_);
  estimatedHidden_ = 0;
  for (GuardArm& a : arms_)
    if (a.estimated) a.positions = 0;
}

void GuardPlan::arm(uint32_t iterationCalls) {
  std::lock_guard<std::mutex> lk(mu_);
  armed_ = true;
  armedCalls_ = iterationCalls;
}

uint32_t GuardPlan::iterationChanged(uint32_t iterationCalls, StepChange change) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!armed_ || armedCalls_ == 0) return 0;
  if (iterationCalls == armedCalls_ && change != StepChange::kOther) return 0;
  if (change == StepChange::kFewerOfTheSame && iterationCalls < armedCalls_) {
    armedCalls_ = iterationCalls;
    return 0;
  }
  const uint32_t was = armedCalls_;
  armed_ = false;
  armedCalls_ = 0;
  if (inRound_) {  // its samples timed iterations of another length: none is evidence for this one
    inRound_ = false;
    wanted_.clear();
    times_.clear();
    own_.clear();
    ranksIn_.clear();
    ++voided_;
  }
  // A verdict on iterations of another length says nothing of these: a round as soon as the plan is armed again;
  // after changes of step one upon another, later and later (a job whose phase changes every 20 steps voided
  // every round, and their N blocks ran 39 % of its calls).
  interval_ = 0;
  const uint64_t backoff = std::min<uint64_t>(o_.recheckMax, 32ull << std::min(changesSinceVerdict_, 9u));
  nextRound_ = changesSinceVerdict_ == 0 ? 0 : planned_ + backoff;
  ++changesSinceVerdict_;
  return was;
}

uint32_t GuardPlan::voidedRounds() const {
  std::lock_guard<std::mutex> lk(mu_);
  return voided_;
}

void GuardPlan::setPlanGain(double micros, uint32_t period) {
  std::lock_guard<std::mutex> lk(mu_);
  planGainUs_ = std::isfinite(micros) ? micros : -1;
  period_ = period;
}

size_t GuardPlan::verdictCount() const {
  std::lock_guard<std::mutex> lk(mu_);
  return verdicts_.size();
}

GuardPlan::Verdict GuardPlan::verdict(size_t i) const {
  std::lock_guard<std::mutex> lk(mu_);
  return verdicts_.at(i);
}

bool GuardPlan::armed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return armed_;
}

std::vector<GuardPlan::Verdict> GuardPlan::verdicts() const {
  std::lock_guard<std::mutex> lk(mu_);
  return verdicts_;
}

search::Segment GuardPlan::finalSegment() const {
  std::lock_guard<std::mutex> lk(mu_);
  search::Segment g;
  g.begin = planned_;
  g.end = search::kForever;
  g.cfg = markLocked(now_);
  g.phase = search::Phase::kFinal;
  return g;
}

void GuardPlan::setClockRanks(int n) {
  std::lock_guard<std::mutex> lk(mu_);
  clockRanks_ = std::clamp(n, 1, kMaxClockRanks);
}

void GuardPlan::sample(uint64_t i, double micros, int rank) {
  if (!(micros > 0) || !std::isfinite(micros)) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (rank < 0 || rank >= clockRanks_) return;
  const uint64_t bit = uint64_t{1} << rank;
  heardInRound_ |= bit;
  silent_ &= ~bit;  // heard again: waited for again
  if (!wanted_.count(i)) return;
  uint64_t& in = ranksIn_[i];
  if (in & bit) return;
  in |= bit;
  double& t = times_[i];
  t = std::max(t, micros);
  if (rank == 0) own_[i] = micros;
}

bool GuardPlan::completeLocked(uint64_t i) const {
  auto f = ranksIn_.find(i);
  const uint64_t all = clockMaskLocked() & ~silent_;
  return f != ranksIn_.end() && (f->second & all) == all;
}

void GuardPlan::lost(uint64_t from, uint64_t to) {
  std::lock_guard<std::mutex> lk(mu_);
  for (uint64_t i = from; i < to; ++i)
    if (!times_.count(i)) lostInRound_ += static_cast<uint32_t>(wanted_.erase(i));
  auto first = wanted_.find(to);
  if (first != wanted_.end() && !times_.count(to) && first->second != fallbackArmAtLocked(from)) {
    wanted_.erase(first);
    ++lostInRound_;
  }
}

size_t GuardPlan::fallbackArmLocked() const { return arms_[now_].nccl ? kNcclArm : kTunedArm; }

search::Config GuardPlan::markLocked(size_t arm) const {
  search::Config c = armMark(arms_[arm]);
  c.chunkHalvings = arms_[now_].nccl ? kFallbackNccl : 0;  // the fallback: what runs outside the step's structure
  return c;
}

size_t GuardPlan::fallbackArmAtLocked(uint64_t i) const {
  for (auto it = segs_.rbegin(); it != segs_.rend(); ++it)
    if (it->contains(i)) return fallbackNcclOf(it->cfg) ? kNcclArm : kTunedArm;
  return fallbackArmLocked();
}

void GuardPlan::addLocked(uint64_t len, size_t arm, bool measure, search::Phase phase) {
  search::Segment g;
  g.begin = planned_;
  g.end = planned_ + len;
  g.cfg = markLocked(arm);
  g.cfg.measure = measure;
  g.phase = phase;
  segs_.push_back(g);
  planned_ = g.end;
}

std::vector<search::Segment> GuardPlan::decide(uint64_t i, uint64_t covered) {
  std::lock_guard<std::mutex> lk(mu_);
  // Iterations the plan never covered (the detector counted them while an iteration was one call, where the guard
  // plans nothing and every rank runs the tuned plan; or before its first look) are planned as what ran, so that a
  // round starts here and not in the past. Planned from iteration 0 on a first look at iteration 22, a round on
  // 2 x H200 (350m FSDP2) had 2 of its 16 sample iterations ahead, and ended at its give-up bound with too few
  // samples: NCCL's choices.
  if (planned_ < i) addLocked(i - planned_, kTunedArm, false, search::Phase::kPinned);
  while (planned_ <= i) planOneLocked();
  return segmentsAfter(segs_, covered);  // a segment every 16 iterations while the guard rests
}

void GuardPlan::planOneLocked() {
  if (inRound_) {
    size_t have = 0;
    for (const auto& [it, arm] : wanted_) have += completeLocked(it);
    // Samples that never come (no iteration past the round is timed, so nothing newer shows them lost): given up
    // once the plan has run 4 x giveUpAfter iterations past the round's last block. Not sooner: a round armed on
    // pieces of a step (FSDP, after a break) must be voided by the step's return, not judged on the pieces.
    const bool over = have == wanted_.size() || planned_ >= roundEnd_ + 4 * o_.giveUpAfter;
    if (over && lostInRound_ > 0 && extensions_ < kMaxExtensions && !enoughSamplesLocked()) {
      // Breaks of the step's structure took samples: the round goes on with its blocks again (the samples it
      // has stay), instead of a verdict for NCCL's choices for want of evidence. A step that stays unmeasurable
      // gets that verdict after kMaxExtensions more.
      ++extensions_;
      lostInRound_ = 0;
      planRoundBlocksLocked();
      return;
    }
    if (over) {
      verdictLocked();
    } else {  // waiting for the round's samples: the plan so far, in doubling segments (each is a lookup)
      addLocked(waitLen_, now_, false, search::Phase::kPinned);
      waitLen_ = std::min(waitLen_ * 2, kMaxWait);
      return;
    }
  }
  if (armed_ && planned_ >= nextRound_) {
    extensions_ = 0;
    lostInRound_ = 0;
    heardInRound_ = 0;
    limited_.assign(arms_.size(), 0);
    changed_.assign(arms_.size(), 0);
    capChanged_.assign(arms_.size(), 0);
    planRoundBlocksLocked();
    return;
  }
  const uint64_t len = armed_ ? std::min(o_.idleWindow, nextRound_ - planned_) : o_.idleWindow;
  addLocked(std::max<uint64_t>(1, len), now_, false, search::Phase::kPinned);
}

// A round's blocks from planned_ on: per pair every arm forwards then backwards (T N N T without extra arms), each
// block's first iteration settling; the iteration after the last block is timed too (its start ends the last
// sample).
void GuardPlan::noteLimitedCall(const GuardArm& arm, bool changed, bool raised) {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t a = 0; a < arms_.size() && a < limited_.size(); ++a) {
    const GuardArm& x = arms_[a];
    if (x.nccl || x.armLimit() != arm.armLimit() || x.estimated != arm.estimated) continue;
    ++limited_[a];
    if (changed) ++changed_[a];
    if (changed && !raised) ++capChanged_[a];
    return;
  }
}

void GuardPlan::planRoundBlocksLocked() {
  // The estimated arms take the positions the estimate calls hidden now (the round judges them, also where the
  // arm runs since the last verdict), else keep those they had (a refit that names none, e.g. voided by a slope
  // out of bounds, says nothing against them); an arm that never had any sits the round out (it would run the
  // tuned plan).
  // The arm that won the last verdict keeps its positions beside the new ones: the estimate cannot judge a call
  // the arm caps. Its window barely moves, so its own slope turns unknown and its task's verdict speaks for the
  // task's other calls (a hidden bucket of the size of a waited-for one was dropped); calls capped together move
  // together, and their slopes split (one can read exposed). The round, not the estimate, judges whether a kept
  // cap still pays.
  // An extension of a round (samples lost to breaks) keeps the positions its first blocks ran.
  for (size_t i = 0; i < arms_.size(); ++i) {
    GuardArm& a = arms_[i];
    if (!a.estimated || extensions_ != 0) continue;
    a.positions = estimatedHidden_ | (i == now_ || estimatedHidden_ == 0 ? a.positions : 0);
  }
  std::vector<size_t> order;
  for (size_t a = 0; a < arms_.size(); ++a)
    if (!arms_[a].estimated || arms_[a].positions != 0) order.push_back(a);
  for (size_t i = order.size(); i-- > 0;) order.push_back(order[i]);
  for (uint32_t pr = 0; pr < o_.pairs; ++pr) {
    for (size_t arm : order) {
      for (uint64_t j = planned_ + 1; j < planned_ + o_.blockIters; ++j) wanted_[j] = arm;
      addLocked(o_.blockIters, arm, true, search::Phase::kTuning);
    }
  }
  roundEnd_ = planned_;
  addLocked(1, now_, true, search::Phase::kTuning);
  inRound_ = true;
  waitLen_ = 1;
}

bool GuardPlan::enoughSamplesLocked() const {
  std::vector<uint32_t> n(arms_.size(), 0);
  for (const auto& [it, arm] : wanted_) n[arm] += times_.count(it) > 0;
  return n[kTunedArm] >= o_.minSamples && n[kNcclArm] >= o_.minSamples;
}

void GuardPlan::verdictLocked() {
  // A sample some clock rank's time never reached is the longest of the others' (biased towards the faster ranks):
  // an arm with minSamples complete samples is judged on those alone.
  std::vector<uint32_t> complete(arms_.size(), 0);
  for (const auto& [it, arm] : wanted_) complete[arm] += completeLocked(it);
  const auto used = [&](uint64_t it, size_t arm) {
    return times_.count(it) > 0 && (complete[arm] < o_.minSamples || completeLocked(it));
  };
  std::vector<std::vector<double>> x(arms_.size());
  for (const auto& [it, arm] : wanted_)
    if (used(it, arm)) x[arm].push_back(times_.at(it));
  const std::vector<double>& t = x[kTunedArm];
  const std::vector<double>& n = x[kNcclArm];
  Verdict v;
  v.at = planned_;
  v.roundBegin = wanted_.empty() ? planned_ : wanted_.begin()->first - 1;  // a block's first iteration settles
  for (const auto& [it, arm] : wanted_) {
    if (!used(it, arm)) continue;
    auto f = times_.find(it);
    auto own = own_.find(it);
    v.samples.push_back(Sample{it, arms_[arm], f->second, own != own_.end() ? own->second : 0.0,
                               static_cast<uint32_t>(__builtin_popcountll(ranksIn_[it]))});
  }
  v.tunedSamples = static_cast<uint32_t>(t.size());
  v.ncclSamples = static_cast<uint32_t>(n.size());
  // Without evidence for the tuned plan, NCCL's choices: the tuned plan (or an arm on top of it) stays only
  // where it showed in the step, against NCCL's choices; the fastest arm that did wins.
  auto relSE = [](const std::vector<double>& s, double med) {
    return 1.2533 * 1.4826 * autoccl::mad(s) / med / std::sqrt(static_cast<double>(s.size()));
  };
  // Each arm's median once (0: fewer than minSamples samples); NCCL's noise once, for every arm's margin.
  std::vector<double> med(arms_.size(), 0.0);
  for (size_t a = 0; a < arms_.size(); ++a)
    if (x[a].size() >= o_.minSamples) med[a] = autoccl::median(x[a]);
  const double ncclMed = med[kNcclArm];
  const double ncclSE = ncclMed > 0 ? relSE(n, ncclMed) : 0.0;
  // The tuned plan beating NCCL's median by more than its own kernel savings plus the margin: the step's noise
  // (the channel-cap arms' gain is the computation's, not held to it). An arm that only raises exposed calls is
  // the tuned plan with those calls faster: held to the same bound (what the raise saves is not measured, so the
  // bound is the cautious side: a raise that only pays beyond the plan's savings is not kept), and out where the
  // tuned plan's own gain was the step's noise (the arm carries that plan; kTunedArm is judged first).
  v.planGainUs = planGainUs_;
  v.period = period_;
  v.voidedBefore = voided_ - voidedAtVerdict_;
  voidedAtVerdict_ = voided_;
  size_t winner = kNcclArm;
  for (size_t a = 0; a < arms_.size(); ++a) {
    ArmResult r;
    r.arm = arms_[a];
    r.samples = static_cast<uint32_t>(x[a].size());
    r.medianUs = med[a];
    if (a < limited_.size()) {
      r.limitedCalls = limited_[a];
      r.changedCalls = changed_[a];
      r.inert = arms_[a].limits() && r.limitedCalls > 0 && r.changedCalls == 0;
      r.capChangedCalls = capChanged_[a];  // assigned with limited_ at every round's start
    }
    // An arm with a floor whose caps changed nothing (each capped call already within the cap) ran the tuned plan
    // with exposed calls raised: an arm that only raises, judged as one.
    r.raisedOnly = arms_[a].raisesOnly() ||
                   (!arms_[a].nccl && arms_[a].exposedFloor > 0 && r.changedCalls > 0 && r.capChangedCalls == 0);
    if (a != kNcclArm && ncclMed > 0 && r.medianUs > 0 && !r.inert) {
      r.margin = std::max(o_.minMargin, o_.z * std::hypot(relSE(x[a], r.medianUs), ncclSE));
      bool beats = r.medianUs < ncclMed * (1.0 - r.margin);
      if (a == kTunedArm) v.margin = r.margin;
      if ((a == kTunedArm || r.raisedOnly) && beats && o_.explainedGain && planGainUs_ >= 0 &&
          ncclMed - r.medianUs > planGainUs_ + r.margin * ncclMed) {
        if (a == kTunedArm) v.unexplained = true;
        beats = false;
      }
      if (r.raisedOnly && v.unexplained) beats = false;
      if (beats && (winner == kNcclArm || r.medianUs < med[winner])) winner = a;
    }
    if (arms_.size() > 2) v.arms.push_back(r);
  }
  if (med[kTunedArm] > 0 && ncclMed > 0) {
    v.tunedUs = med[kTunedArm];
    v.ncclUs = ncclMed;
  }
  v.tuned = winner != kNcclArm;
  v.winner = arms_[winner];
  // The round's cost and regret: a block is its settling iteration and blockIters - 1 planned samples, all run on
  // its arm, so each arm ran planned * blockIters / (blockIters - 1) iterations.
  std::vector<double> iterations(arms_.size(), 0.0);
  for (const auto& [it, arm] : wanted_) iterations[arm] += 1.0 * o_.blockIters / (o_.blockIters - 1);
  for (size_t a = 0; a < arms_.size(); ++a) {
    if (med[a] <= 0) continue;
    if (med[winner] > 0 && a != winner && med[a] > med[winner]) v.costUs += iterations[a] * (med[a] - med[winner]);
    if (ncclMed > 0 && a != kNcclArm && med[a] > ncclMed) v.regretUs += iterations[a] * (med[a] - ncclMed);
  }
  regretUs_ += v.regretUs;
  if (o_.jobRegret) o_.jobRegret->report(ledgerSlot_, regretUs_, 0.0, 0.0);
  // A clock rank that sent no time in the whole round (an older build, a rank whose profiler is not attached) is
  // not waited for in later rounds until it sends one: each round would otherwise wait out its give-up bound.
  silent_ |= clockMaskLocked() & ~heardInRound_ & ~uint64_t{1};
  now_ = winner;
  verdicts_.push_back(v);
  inRound_ = false;
  wanted_.clear();
  times_.clear();
  own_.clear();
  ranksIn_.clear();
  changesSinceVerdict_ = 0;
  interval_ = interval_ ? std::min(interval_ * 2, o_.recheckMax) : o_.recheckFirst;
  nextRound_ = planned_ + interval_;
}

namespace {
// An arm's name in the log and the trace.
std::string armName(const GuardArm& a) {
  if (a.nccl) return "nccl";
  if (!a.limits()) return "tuned";
  return (a.estimated ? "estimated=" : "hidden=") + armLimitText(a.armLimit());
}

// What a limiting arm does to the calls it limits: "at most 2 channels", "on simple", "at most 2 channels on ll128".
std::string limitWords(const GuardArm& a) {
  std::string out = a.hiddenCap > 0 ? "at most " + std::to_string(a.hiddenCap) + " channels" : "";
  if (a.proto >= 0) out += (out.empty() ? "on " : " on ") + std::string(protoName(a.proto));
  return out;
}

// What an arm with a floor does to the calls it leaves exposed: ", the last call at least 16 channels", ", the
// other positions as many channels as the communicator has" ("" without).
std::string floorWords(const GuardArm& a) {
  if (a.exposedFloor <= 0) return "";
  const std::string which = a.estimated ? ", the other positions " : ", the last call ";
  return which + (a.exposedFloor >= kMaxChannelsHard ? std::string("as many channels as the communicator has")
                                                     : "at least " + std::to_string(a.exposedFloor) + " channels");
}

// The positions an estimated arm caps, "0,2,5" (empty for any other arm).
std::string positionList(const GuardArm& a) {
  std::string out;
  for (uint32_t p = 0; a.estimated && p < 64; ++p)
    if ((a.positions >> p) & 1u) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}
}  // namespace

std::string describeVerdict(const GuardPlan::Verdict& v, uint64_t comm) {
  const std::string what =
      v.winner.estimated && v.winner.limits()
          ? "keeping the tuned plan, the calls the exposure estimate calls hidden (positions " +
                positionList(v.winner) + ") " + limitWords(v.winner) + floorWords(v.winner)
      : v.winner.raisesOnly() ? "keeping the tuned plan" + floorWords(v.winner)
      : v.winner.limits() ? "keeping the tuned plan, hidden calls " + limitWords(v.winner) + floorWords(v.winner)
      : v.tuned ? std::string("keeping the tuned plan")
                : std::string("NCCL's choices for every task");
  char line[640];  // `what` names up to 63 positions
  std::snprintf(line, sizeof line,
                "autoccl: comm %016" PRIx64 " step guard: iterations of %u calls, tuned plan %.1f us (%u samples) "
                "against NCCL's choices %.1f us (%u): %s from iteration %" PRIu64,
                comm, v.period, v.tunedUs, v.tunedSamples, v.ncclUs, v.ncclSamples, what.c_str(), v.at);
  std::string text = line;
  if (v.costUs > 0) {
    char cost[96];
    std::snprintf(cost, sizeof cost, " (the round cost %.1f us against the winner)", v.costUs);
    text += cost;
  }
  if (v.unexplained) {
    char why[192];
    std::snprintf(why, sizeof why, " (the tuned plan saves %.1f us of kernel time an iteration, %.2f %% of it: "
                  "its faster median is the step's noise)", v.planGainUs,
                  v.ncclUs > 0 ? 100.0 * v.planGainUs / v.ncclUs : 0.0);
    text += why;
  }
  if (!v.arms.empty()) {  // every arm's median (us), its samples and the margin it needed
    text += "; arms:";
    for (const GuardPlan::ArmResult& r : v.arms) {
      char e[128];
      std::snprintf(e, sizeof e, " %s %.1f us (%u, margin %.3f%s)", armName(r.arm).c_str(), r.medianUs, r.samples,
                    r.margin, r.inert ? ", changed no call" : "");
      text += e;
    }
  }
  return text;
}

std::string traceVerdict(const GuardPlan::Verdict& v, const std::string& commHex, int rank,
                         const std::function<bool(uint64_t iteration, CallKey* first)>& firstCall) {
  char head[512];
  std::snprintf(head, sizeof head,
                "{\"ev\":\"guard\",\"comm\":\"%s\",\"rank\":%d,\"period\":%u,\"round_begin\":%" PRIu64
                ",\"at\":%" PRIu64 ",\"winner\":\"%s\",\"tuned\":%s,\"tuned_us\":%.1f,\"tuned_samples\":%u,"
                "\"nccl_us\":%.1f,\"nccl_samples\":%u,\"margin\":%.4f,\"plan_gain_us\":%.1f,\"unexplained\":%s,"
                "\"voided_before\":%u,\"cost_us\":%.1f,\"regret_us\":%.1f,\"samples\":[",
                commHex.c_str(), rank, v.period, v.roundBegin, v.at, armName(v.winner).c_str(),
                v.tuned ? "true" : "false", v.tunedUs, v.tunedSamples, v.ncclUs, v.ncclSamples, v.margin,
                v.planGainUs, v.unexplained ? "true" : "false", v.voidedBefore, v.costUs, v.regretUs);
  std::string out = head;
  for (size_t i = 0; i < v.samples.size(); ++i) {
    const GuardPlan::Sample& s = v.samples[i];
    char e[256];
    CallKey first;
    std::snprintf(e, sizeof e, "%s{\"it\":%" PRIu64 ",\"arm\":\"%s\",\"us\":%.1f,\"own_us\":%.1f,\"ranks\":%u",
                  i ? "," : "", s.iteration, armName(s.arm).c_str(), s.micros, s.ownMicros, s.ranks);
    out += e;
    if (firstCall && firstCall(s.iteration, &first)) {
      std::snprintf(e, sizeof e, ",\"coll\":\"%s\",\"bytes\":%" PRIu64 ",\"call\":%" PRIu64,
                    collName(first.task.coll), first.task.bytes, first.call);
      out += e;
    }
    out += "}";
  }
  out += "]";
  if (v.winner.estimated) out += ",\"winner_positions\":[" + positionList(v.winner) + "]";
  if (!v.arms.empty()) {
    out += ",\"arms\":[";
    for (size_t i = 0; i < v.arms.size(); ++i) {
      const GuardPlan::ArmResult& r = v.arms[i];
      char e[160];
      std::snprintf(e, sizeof e, "%s{\"arm\":\"%s\",\"us\":%.1f,\"samples\":%u,\"margin\":%.4f", i ? "," : "",
                    armName(r.arm).c_str(), r.medianUs, r.samples, r.margin);
      out += e;
      if (r.arm.limits())
        out += ",\"limited_calls\":" + std::to_string(r.limitedCalls) + ",\"changed_calls\":" +
               std::to_string(r.changedCalls) + ",\"inert\":" + (r.inert ? "true" : "false");
      if (r.arm.exposedFloor > 0)
        out += ",\"cap_changed_calls\":" + std::to_string(r.capChangedCalls) + ",\"raised_only\":" +
               (r.raisedOnly ? "true" : "false");
      if (r.arm.estimated) out += ",\"positions\":[" + positionList(r.arm) + "]";  // what it capped
      out += "}";
    }
    out += "]";
  }
  out += "}";
  return out;
}

void GuardClock::markBoundary(const TaskKey& task, uint64_t k, uint64_t iteration) {
  std::lock_guard<std::mutex> lk(mu_);
  if (boundary_.size() > kMaxBoundaries) boundary_.clear();  // boundaries whose times never came
  boundary_[CallKey{task, k}] = iteration;
  firstCalls_[iteration] = CallKey{task, k};
  while (firstCalls_.size() > kFirstCallsKept) firstCalls_.erase(firstCalls_.begin());
}

bool GuardClock::firstCall(uint64_t iteration, CallKey* out) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto f = firstCalls_.find(iteration);
  if (f == firstCalls_.end()) return false;
  *out = f->second;
  return true;
}

std::vector<std::pair<uint64_t, double>> GuardClock::start(const TaskKey& task, uint64_t k, uint64_t startNs) {
  std::vector<std::pair<uint64_t, double>> done;
  std::lock_guard<std::mutex> lk(mu_);
  auto f = boundary_.find(CallKey{task, k});
  if (f == boundary_.end()) return done;
  const uint64_t it = f->second;
  boundary_.erase(f);
  if (startNs == 0) return done;
  startNs_[it] = startNs;
  auto prev = startNs_.find(it - 1);
  if (it > 0 && prev != startNs_.end() && startNs > prev->second)
    done.emplace_back(it - 1, static_cast<double>(startNs - prev->second) / 1000.0);
  auto next = startNs_.find(it + 1);
  if (next != startNs_.end() && next->second > startNs)
    done.emplace_back(it, static_cast<double>(next->second - startNs) / 1000.0);
  while (startNs_.size() > kStartsKept) startNs_.erase(startNs_.begin());
  return done;
}

void GuardClock::markOverridden(const TaskKey& task, uint64_t k) {
  std::lock_guard<std::mutex> lk(mu_);
  if (overridden_.size() > kMaxOverridden) overridden_.clear();  // measurements that never came
  overridden_.insert(CallKey{task, k});
}

bool GuardClock::takeOverridden(const TaskKey& task, uint64_t k) {
  std::lock_guard<std::mutex> lk(mu_);
  return overridden_.erase(CallKey{task, k}) > 0;
}

}  // namespace autoccl::engine
