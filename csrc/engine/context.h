// The engine's per-process Runtime and per-(communicator, rank) Context. The shim converts NCCL's
// arguments and calls these; everything that decides, measures, logs or persists lives here.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/common.h"
#include "engine/fingerprint.h"
#include "engine/metrics.h"
#include "engine/online.h"
#include "engine/policy.h"
#include "engine/settings.h"
#include "engine/stats.h"
#include "engine/table.h"
#include "engine/timing.h"
#include "engine/trace.h"

namespace autoccl::engine {

// The process-global activation mask (one int shared by every communicator): on while any context
// needs timing. Transitions are rare and serialised by one mutex that no hot path takes.
class MaskControl {
 public:
  void attach(int* mask, int onValue);
  // Bits kept on whatever our own need (a chained profiler's, AUTOCCL_PROFILER_CHAIN); attaches `mask` if
  // nothing is attached yet.
  void addBits(int* mask, int bits);
  // `flag` is the caller's own "I need timing" state, guarded by this object's mutex; `need` is
  // evaluated under that mutex so that concurrent updates cannot leave a stale answer behind.
  template <class F>
  void refresh(bool* flag, F need) {
    std::lock_guard<std::mutex> lock(mu_);
    bool n = need();
    if (n == *flag) return;
    *flag = n;
    needers_ += n ? 1 : -1;
    writeLocked();
  }
  bool on() const { return on_.load(std::memory_order_relaxed); }

 private:
  void writeLocked();
  std::mutex mu_;
  int* mask_ = nullptr;
  int onValue_ = 0;
  int extraBits_ = 0;
  int needers_ = 0;
  std::atomic<bool> on_{false};
};

class Runtime {
 public:
  // ncclVersion: NCCL_VERSION_CODE (0 = unknown); minNcclVersion: oldest supported (0 = any).
  Runtime(Settings settings, int ncclVersion, int minNcclVersion, std::string procGpuDir = "/proc/driver/nvidia/gpus");

  const Settings& settings() const { return settings_; }
  // True when the library must behave as no tuner (bad settings, unsupported NCCL, unusable mode).
  bool disabled() const { return !disabledWhy_.empty(); }
  const std::string& disabledWhy() const { return disabledWhy_; }
  void disable(const std::string& why);
  int ncclVersion() const { return ncclVersion_; }

  // Once per process, through the first logger we are given: the WARN for a bad setting, or the
  // "loaded" INFO line. `banner` is the shim's plugin description.
  void announce(const LogFn& log, const std::string& banner);

  Fingerprint fingerprint(int nRanks, int nNodes, int nvlDomains) const;
  // Table for `fp` in table mode (AUTOCCL_TABLE, else the cache entry). Loaded once per path;
  // corrupt/foreign: one WARN per path, then ignored (nullptr).
  std::shared_ptr<const Table> tableFor(const Fingerprint& fp, const LogFn& log);
  // Observe mode: merge measured entries into the table file for `fp` (adds unknown tasks, updates
  // nccl_us of known ones, never replaces a stored configuration). Same locking as saveTuned.
  void saveObserved(const Fingerprint& fp, const std::vector<TableEntry>& entries, const LogFn& log);
  // Online mode: merge converged entries into the table file for `fp` (replacing the configuration
  // of known tasks), and the pairs measured (replacing the record of the same task and pair). Serialised
  // across processes by an flock on `<table>.lock`; written atomically.
  void saveTuned(const Fingerprint& fp, const std::vector<TableEntry>& entries, const std::vector<PairRecord>& pairs,
                 const LogFn& log);
  // Online mode, and table mode under the step guard: the process-wide board / coordinator (null in other modes).
  Coordination* coordination() { return coord_.get(); }
  // Online mode with AUTOCCL_JOB_REGRET_PCT > 0: the regret ledger of every communicator this process is the
  // authority of (search::Options::jobRegret), so that a job of several communicators (data- and tensor-parallel
  // groups, a pipeline's stages) explores within one budget, not one per communicator. Null otherwise.
  std::shared_ptr<search::RegretLedger> jobRegret() const { return jobRegret_; }
  // True the first time `key` is asked in this process (one WARN per process for per-context issues).
  bool firstTime(const std::string& key);
  std::string tablePathFor(const Fingerprint& fp) const;

  TraceWriter& trace() { return trace_; }
  MetricsWriter& metrics() { return metrics_; }
  MaskControl& mask() { return mask_; }

 private:
  void updateTable(const Fingerprint& fp, size_t records, const LogFn& log,
                   const std::function<void(Table&)>& merge, const std::string& what);
  Settings settings_;
  int ncclVersion_;
  std::string disabledWhy_;
  Fingerprint hw_;
  std::once_flag announced_;
  std::mutex tablesMu_;
  std::map<std::string, std::shared_ptr<const Table>> tables_;  // path -> table (null: unusable)
  TraceWriter trace_;
  MetricsWriter metrics_;
  MaskControl mask_;
  std::unique_ptr<Coordination> coord_;
  std::shared_ptr<search::RegretLedger> jobRegret_;
  std::mutex onceMu_;
  std::vector<std::string> once_;
};

class Context : public std::enable_shared_from_this<Context> {
 public:
  Context(Runtime& rt, uint64_t commHash);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Profiler init of this (comm, rank): the rank and the event stream become available.
  void attachProfiler(int rank, int nRanks, int nNodes, const LogFn& logger);
  // Tuner init. Returns false when this context must behave as no tuner (reason logged). chunkCallback:
  // NCCL asks getChunkSize (tuner v6, NCCL >= 2.30.3), so a decision's chunk size takes effect.
  bool attachTuner(int nRanks, int nNodes, int nvlDomains, const LogFn& logger, bool chunkCallback = false);

  // getCollInfo: decide, apply to NCCL's cost table / *nChannels, queue for timing, trace.
  // Returns false only when the call must fail (online: the ranks can no longer agree; logged).
  bool getCollInfo(int coll, uint64_t bytes, int pipe, const CostTable& costs, int* nChannels);
  // Why the first call that getCollInfo failed had to fail (empty until one did). Enqueue thread only.
  const std::string& failure() const { return failWhy_; }
  // getChunkSize (tuner v6): *chunk holds NCCL's chunk for (algo, proto); replaced by the chunk (bytes, or
  // halvings of NCCL's) of the group's latest decision of `coll` that forced this pair (else of its latest
  // that forced no pair). NCCL asks it for every task of a group after it has asked getCollInfo for all of
  // them, and names no task: two batches of one collective on one pair share the latest's chunk. Returns
  // whether it changed anything.
  bool chunkSize(int coll, int algo, int proto, uint64_t* chunk);
  void finalizeTuner();
  void finalizeProfiler();

  // Profiler events (any thread). coll/algo/proto: the engine's numbers (NCCL's enums; -1: unknown), count
  // and elemBytes as NCCL's Coll event gives them (elements per rank for all-gather / reduce-scatter).
  // reporting: channel stops that will come for this Coll (-1: nChannels, KernelCh; 1: the launch clock;
  // 0: none, the call is untimed).
  void* collStart(int coll, uint64_t seq, uint64_t count, int elemBytes, int nChannels, int algo, int proto,
                  int reporting = -1);
  void* kernelChStart(void* parent, uint64_t startNs);
  // The launch clock asks at each kernel launch of this (comm, rank) whether to time it: yes for the launch
  // of a call the policy wants timed (Decision::timed, or a task inside its measurement budget) and for the
  // launch after it (whose start ends the call's stream period). Enqueue thread.
  bool takeLaunchTiming() {
    const int w = launchWant_.load(std::memory_order_relaxed);
    if (w <= 0) return false;
    launchWant_.store(w - 1, std::memory_order_relaxed);
    return true;
  }

  uint64_t commHash() const { return commHash_; }
  int rank() const { return rank_; }
  bool tunerActive() const { return policy_ != nullptr; }
  MatcherCounters matcherCounters() const { return matcher_.counters(); }

  // Snapshot of one task (tests, reports).
  struct TaskReport {
    TaskKey key;
    uint64_t calls = 0;
    Config applied;
    Source source = Source::Nccl;
    StatsSummary stats;
    // NCCL's own choice: what its last measured call left to NCCL ran (-1 / 0: no such call was measured).
    int ncclAlgo = -1, ncclProto = -1, ncclChannels = 0;
    // What the last measured call ran, whoever chose it.
    int ranAlgo = -1, ranProto = -1, ranChannels = 0;
  };
  std::vector<TaskReport> report() const;
  // What the metrics files show of this context (the metrics thread, and finalize).
  ContextMetrics metricsSnapshot() const;

 private:
  struct Task {
    TaskKey key;
    uint64_t calls = 0;             // enqueue thread only
    Decision cached;
    bool haveCached = false;
    bool unsupportedLogged = false;
    Config lastApplied;             // enqueue thread only
    Source lastSource = Source::Nccl;
    std::atomic<bool> wanting{false};  // still inside its measurement budget
    // statsMu_:
    RobustStats stats;
    uint64_t measured = 0;
    int ranAlgo = -1, ranProto = -1, ranChannels = 0;  // the last measured call's kernel
    int defAlgo = -1, defProto = -1, defChannels = 0;  // the last measured call left to NCCL: its own choice
    // For the metrics files (only while they are written). callsSeen: `calls` for other threads. Under
    // statsMu_: the applied configuration, the samples of calls left to NCCL and of calls under that
    // configuration.
    std::atomic<uint64_t> callsSeen{0};
    Config shownApplied;
    Source shownSource = Source::Nccl;
    RobustStats ncclStats{64}, appliedStats{64};
  };
  // A decision of the current group, for getChunkSize.
  struct GroupChunk {
    int coll = -1;
    int algo = -1, proto = -1;  // -1: NCCL's pair
    uint64_t chunk = 0;
    int halvings = 0;
  };

  Task* taskFor(const TaskKey& key);
  // getCollInfo's steps, in order (enqueue thread).
  const Decision& decisionFor(Task* t, uint64_t k, const CostTable& costs, Decision* fresh);
  bool failCall(Task* t, uint64_t k, const Decision& d);
  Config apply(Task* t, const Decision& d, const CostTable& costs, int* nChannels, Source* source, bool* refused);
  void noteApplied(Task* t, uint64_t k, const Decision& d, const Config& applied, Source source);
  void queueForTiming(Task* t, uint64_t k, const Decision& d, const Config& applied);
  void traceCall(const Task* t, uint64_t k, const Config& applied, Source source, bool refused);
  void onMeasurement(const Measurement& m);
  void deliver(const Measurement& m);
  void traceTime(const Task* t, const Measurement& m);
  void flushHeld();
  void stopWanting(Task* t);
  void updateNeed();
  void log(LogLevel level, const std::string& msg) const;
  std::string who() const;

  Runtime& rt_;
  uint64_t commHash_;
  std::string commHex_;
  int rank_ = -1;
  int nRanks_ = 0, nNodes_ = 0, nvlDomains_ = 0;
  std::atomic<bool> profilerAttached_{false};
  std::atomic<bool> tunerFinalized_{false};
  LogFn log_;
  std::unique_ptr<DecisionSource> policy_;
  std::unordered_map<TaskKey, std::unique_ptr<Task>, TaskKeyHash> tasks_;
  // The group's decisions since NCCL last asked getChunkSize: the first getCollInfo after a getChunkSize
  // starts the next group (NCCL asks every algorithm of a group before any chunk). Enqueue thread only.
  static constexpr size_t kMaxGroupChunks = 256;
  std::atomic<bool> metricsOn_{false};  // set at tuner init, before the metrics thread learns of this context
  bool chunkCallback_ = false;  // NCCL asks getChunkSize (tuner v6): only then are decisions kept for it
  std::vector<GroupChunk> groupChunks_;
  bool chunkAsked_ = false;
  // Profiler events per collective (any thread) against this context's calls decided while timing was on
  // (enqueue thread): NCCL 2.30 emits none for a lone broadcast (it converts the task and leaves the copy's
  // event mask unset), and a search waiting for those samples kept its task on short plan segments.
  std::atomic<uint64_t> collEvents_[kNumColls] = {};
  uint64_t callsWhileTiming_[kNumColls] = {};
  bool unprofiled_[kNumColls] = {};
  Task* lastTask_[kNumColls] = {};   // enqueue thread only: skips the hash lookup for repeats
  uint64_t measureBudget_ = 0;       // timed calls per task outside online mode
  bool launchClock_ = true;          // AUTOCCL_CLOCK=launch: only launches asked for are timed
  std::atomic<int> launchWant_{0};   // launches still to time (takeLaunchTiming)
  std::atomic<int> tasksWanting_{0};
  bool needFlag_ = false;            // guarded by rt_.mask()
  bool failLogged_ = false;          // enqueue thread only
  std::string failWhy_;              // the message logged then (enqueue thread only)
  mutable std::mutex statsMu_;
  uint64_t ordinal_ = 0;             // enqueue thread only: calls decided on this communicator
  // Where the policy scores by stream period, each measurement is held until the next one arrives: a
  // call's period (start to the next call's start) needs the next call's start.
  std::mutex heldMu_;
  Measurement held_;
  bool haveHeld_ = false;            // guarded by heldMu_
  std::mutex deliverMu_;             // the proxy thread and a finalize's flush both deliver
  TimingMatcher matcher_;
};

}  // namespace autoccl::engine
