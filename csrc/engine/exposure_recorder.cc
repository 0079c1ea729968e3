#include "engine/exposure_recorder.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "engine/trace.h"

namespace autoccl::engine {

void ExposureRecorder::place(const TaskKey& task, uint64_t k, uint64_t iteration, uint32_t position, uint32_t period,
                             uint64_t structure) {
  std::lock_guard<std::mutex> lk(placeMu_);
  if (placed_.size() > kMaxPlaced) placed_.clear();
  placed_[CallKey{task, k}] = CallPos{iteration, structure, position, period};
}

ExposureRecorder::~ExposureRecorder() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  refitCv_.notify_all();
  if (refitThread_.joinable()) refitThread_.join();
}

void ExposureRecorder::time(const TaskKey& task, uint64_t k, uint64_t startNs, double gpuUs, bool reportOnly) {
  CallPos at;
  bool placed = false;
  {
    std::lock_guard<std::mutex> lk(placeMu_);
    auto f = placed_.find(CallKey{task, k});
    if (f != placed_.end()) {
      at = f->second;
      placed = true;
      placed_.erase(f);
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (reportOnly) ++timedForIt_;
    if (!placed || !addLocked(task, at, startNs, gpuUs)) return;
    refitDue_ = true;
  }
  refitCv_.notify_all();
}

void ExposureRecorder::refitLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    refitCv_.wait(lk, [this] { return refitDue_ || stopping_; });
    if (stopping_) return;
    refitDue_ = false;
    refitting_ = true;
    // a copy: the fits run outside the lock, which the measurement thread takes at every timed call
    const ExposureEstimator estimator = estimator_;
    const std::vector<TaskKey> tasks = tasks_;
    const uint64_t structure = structure_;
    lk.unlock();
    const uint64_t hidden = hiddenOf(fitsOf(estimator, tasks));
    {
      std::lock_guard<std::mutex> h(hiddenMu_);
      hidden_ = hidden;
      hiddenStructure_ = structure;
      hiddenPeriod_ = estimator.period();
    }
    lk.lock();
    refitting_ = false;
    refitCv_.notify_all();
  }
}

void ExposureRecorder::waitForRefits() {
  std::unique_lock<std::mutex> lk(mu_);
  refitCv_.wait(lk, [this] { return !trackHidden_ || stopping_ || (!refitDue_ && !refitting_); });
}

bool ExposureRecorder::addLocked(const TaskKey& task, const CallPos& at, uint64_t startNs, double gpuUs) {
  if (startNs == 0 || !(gpuUs > 0) || at.pos >= at.period) return false;
  IterTimes& it = iterations_[at.iteration];
  if (it.period != at.period || it.structure != at.structure)
    it = IterTimes{at.structure, at.period, std::vector<uint64_t>(at.period, 0), std::vector<double>(at.period, 0.0),
                   std::vector<TaskKey>(at.period), 0};
  if (it.startNs[at.pos] == 0) ++it.filled;
  it.startNs[at.pos] = startNs;
  it.durUs[at.pos] = gpuUs;
  it.task[at.pos] = task;
  for (uint64_t i : {at.iteration - 1, at.iteration}) {  // the pairs this call may complete
    if (at.iteration == 0 && i != at.iteration) continue;
    auto a = iterations_.find(i), b = iterations_.find(i + 1);
    if (a == iterations_.end() || b == iterations_.end() || a->second.filled != a->second.period ||
        a->second.period != b->second.period || a->second.structure != b->second.structure ||
        b->second.startNs[0] <= a->second.startNs[0])
      continue;
    const IterTimes& x = a->second;
    std::vector<double> start(x.period);
    for (uint32_t p = 0; p < x.period; ++p)
      start[p] = static_cast<double>(static_cast<int64_t>(x.startNs[p] - x.startNs[0])) / 1000.0;
    if (x.structure != structure_ || estimator_.period() != x.period) {
      estimator_ = ExposureEstimator();  // other calls at the positions now: start again
      structure_ = x.structure;
      tasks_ = x.task;
    }
    estimator_.add(static_cast<double>(b->second.startNs[0] - x.startNs[0]) / 1000.0, start, x.durUs);
    ++addedSinceFit_;
    iterations_.erase(a);
  }
  while (iterations_.size() > kIterationsKept) iterations_.erase(iterations_.begin());
  if (!trackHidden_ || addedSinceFit_ < kRefitEvery) return false;
  addedSinceFit_ = 0;
  return true;
}

void ExposureRecorder::trackHidden() {
  std::lock_guard<std::mutex> lk(mu_);
  if (trackHidden_) return;
  trackHidden_ = true;
  refitThread_ = std::thread([this] { refitLoop(); });
}

uint64_t ExposureRecorder::hiddenPositions(uint64_t structure, uint32_t period) const {
  std::lock_guard<std::mutex> lk(hiddenMu_);
  return hiddenStructure_ == structure && hiddenPeriod_ == period ? hidden_ : 0;
}

ExposureRecorder::Fits ExposureRecorder::fitsOf(const ExposureEstimator& estimator, const std::vector<TaskKey>& tasks) {
  Fits f;
  f.byPosition = estimator.estimate();
  if (tasks.size() == f.byPosition.positions.size()) {
    for (const TaskKey& t : tasks) {
      const auto at = std::find(f.taskOrder.begin(), f.taskOrder.end(), t);
      f.groupOf.push_back(static_cast<uint32_t>(at - f.taskOrder.begin()));
      if (at == f.taskOrder.end()) f.taskOrder.push_back(t);
    }
    f.byTask = estimator.estimateGroups(f.groupOf);
  }
  // A task's slope out of bounds says the windows carry more than the calls' own time: neither fit's
  // verdicts are given. A position's slope below the bound voids the fit by position's verdicts of its task's
  // calls: nearly collinear calls of one task split a slope of 0 into -x and +x (the noiseless emulator: -0.50
  // and +0.76), and the +x is no exposure either; the task's slope, in bounds, still speaks for them. (One
  // above the bound alone does not: voiding there too left the emulator's step of a hidden and a waited-for
  // bucket of one task, under contention, without its hidden positions; see online-search.md.)
  using V = ExposureEstimator::Verdict;
  std::vector<ExposureEstimator::Position>& positions = f.byPosition.positions;
  if (f.byTask.outOfBounds) {
    for (ExposureEstimator::Result* fit : {&f.byPosition, &f.byTask})
      for (ExposureEstimator::Position& q : fit->positions) q.verdict = V::kUnknown;
  } else if (f.groupOf.size() == positions.size()) {
    std::vector<bool> split(f.taskOrder.size(), false);
    for (size_t p = 0; p < positions.size(); ++p)
      if (positions[p].belowBound) split[f.groupOf[p]] = true;
    for (size_t p = 0; p < positions.size(); ++p)
      if (split[f.groupOf[p]]) positions[p].verdict = V::kUnknown;
  }
  return f;
}

uint64_t ExposureRecorder::hiddenOf(const Fits& f) {
  using V = ExposureEstimator::Verdict;
  const size_t n = f.byPosition.positions.size();
  uint64_t mask = 0;
  for (size_t p = 0; p + 1 < n && p < 64; ++p) {  // never the last call: the iteration ends with it
    const V own = f.byPosition.positions[p].verdict;
    const V task = p < f.groupOf.size() && f.groupOf[p] < f.byTask.positions.size()
                       ? f.byTask.positions[f.groupOf[p]].verdict
                       : V::kUnknown;
    if (own == V::kHidden || (own == V::kUnknown && task == V::kHidden)) mask |= uint64_t{1} << p;
  }
  return mask;
}

size_t ExposureRecorder::samples() const {
  std::lock_guard<std::mutex> lk(mu_);
  return estimator_.samples();
}

std::string ExposureRecorder::traceRecord(const std::string& commHex, int rank) const {
  std::vector<TaskKey> tasks;
  uint64_t timedForIt = 0;
  ExposureEstimator estimator;
  {
    // a copy: the fits run outside the lock, which the measurement thread takes at every timed call
    std::lock_guard<std::mutex> lk(mu_);
    if (estimator_.period() == 0) return {};
    estimator = estimator_;
    tasks = tasks_;
    timedForIt = timedForIt_;
  }
  const Fits fits = fitsOf(estimator, tasks);
  const ExposureEstimator::Result& r = fits.byPosition;
  const ExposureEstimator::Result& byTask = fits.byTask;
  const std::vector<TaskKey>& taskOrder = fits.taskOrder;
  const std::vector<uint32_t>& groupOf = fits.groupOf;
  const bool outOfBounds = byTask.outOfBounds;
  char head[320];
  std::snprintf(head, sizeof head,
                "{\"ev\":\"exposure\",\"comm\":\"%s\",\"rank\":%d,\"period\":%u,\"samples\":%zu,"
                "\"outliers\":%zu,\"patterns\":%zu,\"iter_us\":%.1f,\"residual_us\":%.2f,\"timed_for_it\":%" PRIu64
                ",\"out_of_bounds\":%s,\"positions\":[",
                commHex.c_str(), rank, r.period, r.samples, r.outliers, r.patterns, r.iterUs, r.residualUs, timedForIt,
                outOfBounds ? "true" : "false");
  std::string out = head;
  for (size_t p = 0; p < r.positions.size(); ++p) {
    const ExposureEstimator::Position& q = r.positions[p];
    const TaskKey t = p < tasks.size() ? tasks[p] : TaskKey{};
    char e[320];
    std::snprintf(e, sizeof e,
                  "%s{\"pos\":%zu,\"coll\":\"%s\",\"bytes\":%" PRIu64 ",\"pipe\":%d,\"mean_us\":%.2f,"
                  "\"slope\":%s,\"se\":%s,\"alias\":%d,\"tail\":%.4f,\"verdict\":\"%s\"}",
                  p ? "," : "", p, collName(t.coll), t.bytes, t.pipe, q.meanUs,
                  (q.solved ? jsonNumber(q.slope, 6) : "null").c_str(), (q.solved ? jsonNumber(q.se, 6) : "null").c_str(),
                  q.alias, q.tail, ExposureEstimator::verdictName(q.verdict));
    out += e;
  }
  // Per task: its calls' mean exposure (ExposureEstimator::estimateGroups), the unit a configuration applies to
  out += "],\"tasks\":[";
  for (size_t g = 0; g < byTask.positions.size() && g < taskOrder.size(); ++g) {
    const ExposureEstimator::Position& q = byTask.positions[g];
    const TaskKey& t = taskOrder[g];
    std::vector<size_t> at;
    for (size_t p = 0; p < groupOf.size(); ++p)
      if (groupOf[p] == g) at.push_back(p);
    std::string positions;
    for (size_t p : at) positions += (positions.empty() ? "" : ",") + std::to_string(p);
    char e[320];
    std::snprintf(e, sizeof e,
                  "%s{\"coll\":\"%s\",\"bytes\":%" PRIu64 ",\"pipe\":%d,\"calls\":%zu,\"sum_us\":%.2f,"
                  "\"slope\":%s,\"se\":%s,\"alias\":%d,\"verdict\":\"%s\",\"positions\":[",
                  g ? "," : "", collName(t.coll), t.bytes, t.pipe, at.size(), q.meanUs,
                  (q.solved ? jsonNumber(q.slope, 6) : "null").c_str(), (q.solved ? jsonNumber(q.se, 6) : "null").c_str(),
                  q.alias, ExposureEstimator::verdictName(q.verdict));
    out += e;
    out += positions + "]}";
  }
  out += "]}";
  return out;
}

}  // namespace autoccl::engine
