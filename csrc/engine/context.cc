#include "engine/context.h"
#include "engine/sources.h"

#include <algorithm>
#include <functional>
#include <cinttypes>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace autoccl::engine {

namespace {
// Stream idle after a call for longer than this is a host pause (Measurement::hostPauseUs). A host-bound
// call idles its stream for the host's launch cost: 20-70 us per call for one process launching 4 GPUs
// with the profiler on (4 x H200).
constexpr double kHostPauseUs = 500.0;
// Calls of a collective decided while timing was on, none of them reported by the profiler: NCCL does not
// profile that collective here. Coll events are emitted on the host when NCCL launches the call, a few calls
// after its getCollInfo at most.
constexpr uint64_t kUnprofiledCalls = 128;

// An advisory lock on a file beside a table (serialises read-merge-write across processes).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) error_ = errno;
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      error_ = errno;
      ::close(fd_);
      fd_ = -1;
    }
  }
  bool held() const { return fd_ >= 0; }
  int error() const { return error_; }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
  int error_ = 0;
};

// NCCL's own spellings, as the profiler reports them (trace "nccl_algo"/"nccl_proto").
const char* ncclAlgoSpelling(int a) {
  static const char* const n[kNumAlgos] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
  return a >= 0 && a < kNumAlgos ? n[a] : "unknown";
}
const char* ncclProtoSpelling(int p) {
  static const char* const n[kNumProtos] = {"LL", "LL128", "SIMPLE"};
  return p >= 0 && p < kNumProtos ? n[p] : "unknown";
}

std::string configText(const Config& c) {
  if (c.empty()) return "NCCL's choice";
  std::string s = c.forcesPair() ? std::string(algoName(c.algo)) + "/" + protoName(c.proto) : "nccl-pair";
  if (c.channels) s += "/" + std::to_string(c.channels);
  if (c.chunk) s += "/chunk=" + std::to_string(c.chunk);
  if (c.chunkHalvings) s += "/chunk=nccl/" + std::to_string(1 << c.chunkHalvings);
  return s;
}
}  // namespace

// ---------------------------------------------------------------- MaskControl

void MaskControl::attach(int* mask, int onValue) {
  std::lock_guard<std::mutex> lock(mu_);
  mask_ = mask;
  onValue_ = onValue;
  writeLocked();
}

void MaskControl::addBits(int* mask, int bits) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!mask_) mask_ = mask;
  extraBits_ |= bits;
  writeLocked();
}

void MaskControl::writeLocked() {
  bool on = needers_ > 0 && mask_ && onValue_;
  on_.store(on, std::memory_order_relaxed);
  // NCCL reads the mask with atomic loads at the start of each group.
  if (mask_) __atomic_store_n(mask_, (on ? onValue_ : 0) | extraBits_, __ATOMIC_RELAXED);
}

// ---------------------------------------------------------------- Runtime

Runtime::Runtime(Settings settings, int ncclVersion, int minNcclVersion, std::string procGpuDir)
    : settings_(std::move(settings)), ncclVersion_(ncclVersion) {
  if (!settings_.valid) {
    disabledWhy_ = settings_.error;
  } else if (minNcclVersion > 0 && ncclVersion > 0 && ncclVersion < minNcclVersion) {
    disabledWhy_ = "NCCL version " + std::to_string(ncclVersion) + " is older than the oldest supported (" +
                   std::to_string(minNcclVersion) + ")";
  }
  if (disabledWhy_.empty() && settings_.coordinated())
    coord_ = std::make_unique<Coordination>(agreedSettings(settings_, [](const char* k) { return std::getenv(k); }),
                                            settings_.coordTimeoutMs, settings_.coordLingerMs, settings_.coordFaults);
  if (coord_ && settings_.jobRegretBudget > 0)
    jobRegret_ = std::make_shared<search::RegretLedger>(settings_.jobRegretBudget, onlineSearchOptions().regretAllowance);
  detectHardware(settings_.hw, procGpuDir, &hw_);
  hw_.nccl = ncclVersion;
}

void Runtime::disable(const std::string& why) {
  if (disabledWhy_.empty()) disabledWhy_ = why;
}

void Runtime::announce(const LogFn& log, const std::string& banner) {
  std::call_once(announced_, [&] {
    if (!log) return;
    if (disabled()) {
      log(LogLevel::Warn, "autoccl: " + disabledWhy_ + "; behaving as no tuner");
      return;
    }
    std::string msg = "autoccl: " + banner + ", mode " + modeName(settings_.mode);
    if (settings_.mode == Mode::Fixed) msg += " (AUTOCCL_FIXED='" + settings_.fixedText + "')";
    msg += ", max channels " + std::to_string(settings_.maxChannels) + ", NCCL " + std::to_string(ncclVersion_);
    log(LogLevel::Info, msg);
    if (!settings_.tracePrefix.empty()) {
      std::string why;
      if (trace_.open(settings_.tracePrefix, &why)) log(LogLevel::Info, "autoccl: trace " + trace_.path());
      else log(LogLevel::Warn, "autoccl: " + why + "; tracing off");
    }
    if (!settings_.metricsDir.empty()) {
      std::string why;
      if (metrics_.start(settings_.metricsDir, settings_.metricsIntervalS, &why,
                         [log](const std::string& warning) { log(LogLevel::Warn, warning); }))
        log(LogLevel::Info, "autoccl: metrics to " + settings_.metricsDir + " every " +
                                std::to_string(settings_.metricsIntervalS) + " s");
      else
        log(LogLevel::Warn, "autoccl: " + why + "; metrics off");
    }
  });
}

Fingerprint Runtime::fingerprint(int nRanks, int nNodes, int nvlDomains) const {
  Fingerprint fp = hw_;
  fp.ranks = nRanks;
  fp.nodes = nNodes;
  fp.nvlDomains = nvlDomains;
  return fp;
}

std::string Runtime::tablePathFor(const Fingerprint& fp) const {
  if (!settings_.tablePath.empty()) return settings_.tablePath;
  if (settings_.cacheDir.empty()) return "";
  return cacheTablePath(settings_.cacheDir, fp.id());
}

std::shared_ptr<const Table> Runtime::tableFor(const Fingerprint& fp, const LogFn& log) {
  std::string path = tablePathFor(fp);
  if (path.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(tablesMu_);
  std::string key = path + "|" + fp.id();
  auto it = tables_.find(key);
  if (it != tables_.end()) return it->second;
  auto table = std::make_shared<Table>();
  std::string why;
  LoadStatus st = loadTable(path, fp.id(), table.get(), &why);
  std::shared_ptr<const Table> result;
  if (st == LoadStatus::Ok) {
    result = table;
    if (log) log(LogLevel::Info, "autoccl: table " + path + " loaded (" + std::to_string(table->entries.size()) +
                                     " tasks, fingerprint " + fp.id() + ")");
  } else if (st == LoadStatus::Missing && settings_.tablePath.empty()) {
    if (log) log(LogLevel::Info, "autoccl: no cached table for fingerprint " + fp.id() + " (" + path + "); NCCL decides");
  } else if (log) {
    log(LogLevel::Warn, "autoccl: ignoring table " + path + ": " + why);
  }
  tables_[key] = result;
  return result;
}

// Read-modify-write of this fingerprint's cache table, shared by observe and online: under the file
// lock `<table>.lock` (several processes' authorities may finish at once; the CLI's `cache import` takes
// the same lock), what is on disk now is merged with this process's entries and written atomically
// (temporary file + rename). The lock is taken only once its directory exists: without it two first
// writers of a fresh cache both read nothing and the second rename dropped the first one's tasks. An
// unusable table is moved aside (`<table>.corrupt-<time>-<pid>`), never overwritten.
void Runtime::updateTable(const Fingerprint& fp, size_t records, const LogFn& log,
                          const std::function<void(Table&)>& merge, const std::string& what) {
  std::string path = tablePathFor(fp);
  if (path.empty() || records == 0) return;
  std::lock_guard<std::mutex> lock(tablesMu_);
  std::string why;
  auto warn = [&](const std::string& msg) {
    if (log) log(LogLevel::Warn, "autoccl: " + msg + "; " + what + " not written");
  };
  if (!ensureParentDir(path, &why)) return warn(why);
  FileLock flock(path + ".lock");
  if (!flock.held()) return warn("cannot lock " + path + ".lock: " + std::strerror(flock.error()));
  Table table;
  LoadStatus st = loadTable(path, fp.id(), &table, &why);
  if (st == LoadStatus::Corrupt || st == LoadStatus::Foreign) {
    const std::string aside = path + ".corrupt-" + utcNow() + "-" + std::to_string(::getpid());
    if (std::rename(path.c_str(), aside.c_str()) != 0)
      return warn("cannot move the unusable table " + path + " aside (" + why + "): " + std::strerror(errno));
    if (log) log(LogLevel::Warn, "autoccl: moved the unusable table " + path + " aside to " + aside + " (" + why + ")");
  }
  if (st != LoadStatus::Ok) table = Table();
  table.fp = fp;
  table.created = utcNow();
  merge(table);
  if (saveTable(path, table, &why)) {
    if (log) log(LogLevel::Info, "autoccl: " + what + " written to " + path);
  } else {
    warn(why);
  }
}

void Runtime::saveObserved(const Fingerprint& fp, const std::vector<TableEntry>& entries, const LogFn& log) {
  // Observe never replaces a stored configuration: new tasks are added, known ones get NCCL's time.
  updateTable(fp, entries.size(), log, [&](Table& table) {
    for (const TableEntry& e : entries) {
      bool known = false;
      for (TableEntry& x : table.entries) {
        if (x.key == e.key) {
          x.ncclUs = e.ncclUs;
          known = true;
        }
      }
      if (!known) table.entries.push_back(e);
    }
  }, std::to_string(entries.size()) + " observed tasks");
}

void Runtime::saveTuned(const Fingerprint& fp, const std::vector<TableEntry>& entries,
                        const std::vector<PairRecord>& pairs, const LogFn& log) {
  updateTable(fp, entries.size() + pairs.size(), log, [&](Table& table) {
    for (const TableEntry& e : entries) table.upsert(e);
    for (const PairRecord& p : pairs) table.upsertPair(p);
  }, std::to_string(entries.size()) + " tuned tasks and " + std::to_string(pairs.size()) + " measured pairs");
}

bool Runtime::firstTime(const std::string& key) {
  std::lock_guard<std::mutex> lock(onceMu_);
  if (std::find(once_.begin(), once_.end(), key) != once_.end()) return false;
  once_.push_back(key);
  return true;
}

// ---------------------------------------------------------------- Context

Context::Context(Runtime& rt, uint64_t commHash)
    : rt_(rt), commHash_(commHash), commHex_(commHex(commHash)),
      matcher_([this](const Measurement& m) { onMeasurement(m); }, 1024, 8192,
               [this](void* cookie, uint64_t k) {
                 if (policy_) policy_->onUntimed(static_cast<Task*>(cookie)->key, k);
               }) {}

Context::~Context() {
  rt_.mask().refresh(&needFlag_, [] { return false; });
}

std::string Context::who() const { return "comm " + commHex_ + " rank " + std::to_string(rank_); }

void Context::log(LogLevel level, const std::string& msg) const {
  if (log_) log_(level, "autoccl: " + who() + ": " + msg);
}

void Context::attachProfiler(int rank, int nRanks, int nNodes, const LogFn& logger) {
  rank_ = rank;
  nRanks_ = nRanks;
  nNodes_ = nNodes;
  if (!log_) log_ = logger;
  profilerAttached_.store(true);
  updateNeed();
}

bool Context::attachTuner(int nRanks, int nNodes, int nvlDomains, const LogFn& logger, bool chunkCallback) {
  if (logger) log_ = logger;
  nRanks_ = nRanks;
  nNodes_ = nNodes;
  nvlDomains_ = nvlDomains;
  if (rt_.disabled() || rt_.settings().mode == Mode::Off) return false;
  PolicyEnv env;
  env.commHash = commHash_;
  env.rank = rank_;
  env.nRanks = nRanks;
  env.nNodes = nNodes;
  env.settings = &rt_.settings();
  env.chunkCallback = chunkCallback;
  chunkCallback_ = chunkCallback;
  env.log = log_;
  const Mode mode = rt_.settings().mode;
  if (mode == Mode::Table || mode == Mode::Online) env.table = rt_.tableFor(rt_.fingerprint(nRanks, nNodes, nvlDomains), log_);
  if (rt_.settings().coordinated()) {  // online mode, and table mode under the step guard
    env.coordination = rt_.coordination();
    env.jobRegret = rt_.jobRegret();  // the guard's rounds charge the process's one ledger
    env.needChanged = [this] { updateNeed(); };
  }
  if (mode == Mode::Online) {
    Fingerprint fp = rt_.fingerprint(nRanks, nNodes, nvlDomains);
    env.saveTuned = [this, fp](const std::vector<TableEntry>& entries, const std::vector<PairRecord>& pairs) {
      rt_.saveTuned(fp, entries, pairs, log_);
    };
  }
  std::string err;
  policy_ = makeDecisionSource(env, &err);
  if (!policy_) {
    // One WARN per process and reason (every rank reaches the same conclusion from the same settings).
    log(rt_.firstTime(err) ? LogLevel::Warn : LogLevel::Info, err + "; behaving as no tuner");
    if (rt_.trace().enabled()) {  // NCCL prints no WARN unless NCCL_DEBUG asks: a traced job says why here too
      const std::string rec = "{\"ev\":\"no_tuner\",\"comm\":\"" + commHex_ +
                              "\",\"rank\":" + std::to_string(rank_) + ",\"why\":" + jsonString(err) + "}";
      rt_.trace().writeLine(rec.data(), rec.size());
    }
    return false;
  }
  if (policy_->agreesThroughCoordination() && rank_ >= 0)
    rt_.coordination()->announceRank(commHash_, rank_, nRanks, log_);
  // A source that agrees through the coordinator (online, guarded table) times what it needs itself: a timed call
  // costs the caller 20-45 % at 1-4 MiB (h100x2/plugin-overhead), and guarded table mode needs none per task.
  measureBudget_ = policy_->agreesThroughCoordination() ? 0 : rt_.settings().measureCalls;
  launchClock_ = rt_.settings().clock == Settings::Clock::Launch;
  if (!profilerAttached_.load()) {
    log(LogLevel::Info, "profiler not loaded (rank unknown, no GPU timing); decisions still apply. "
                              "Point NCCL_PROFILER_PLUGIN at this library for timing.");
  } else {
    log(LogLevel::Info, std::string("tuner ready, mode ") + modeName(rt_.settings().mode) + ", " +
                                  std::to_string(nRanks) + " ranks, " + std::to_string(nNodes) + " nodes");
  }
  updateNeed();
  if (rt_.metrics().enabled()) {
    metricsOn_.store(true);
    std::weak_ptr<Context> self = weak_from_this();
    if (!self.expired()) rt_.metrics().add(std::move(self), [this] { return metricsSnapshot(); });
  }
  return true;
}

void Context::updateNeed() {
  rt_.mask().refresh(&needFlag_, [this] {
    return profilerAttached_.load() && policy_ && !tunerFinalized_.load() &&
           (policy_->needsTiming() || tasksWanting_.load() > 0);
  });
}

Context::Task* Context::taskFor(const TaskKey& key) {
  Task*& last = lastTask_[key.coll];
  if (last && last->key == key) return last;
  auto it = tasks_.find(key);
  if (it != tasks_.end()) return last = it->second.get();
  auto t = std::make_unique<Task>();
  t->key = key;
  Task* raw = t.get();
  {
    std::lock_guard<std::mutex> lock(statsMu_);  // the metrics thread reads tasks_
    tasks_.emplace(key, std::move(t));
  }
  last = raw;
  if (measureBudget_ > 0 && profilerAttached_.load()) {
    raw->wanting.store(true);
    if (tasksWanting_.fetch_add(1) == 0) updateNeed();
  }
  return raw;
}

void Context::stopWanting(Task* t) {
  if (t->wanting.exchange(false) && tasksWanting_.fetch_sub(1) == 1) updateNeed();
}

// getCollInfo's steps, inlined into it: the call path pays no call for them (engine.online_hot_path).
// The policy's decision for call k: the task's cached one once the policy said it is stable.
[[gnu::always_inline]] inline const Decision& Context::decisionFor(Task* t, uint64_t k, const CostTable& costs, Decision* fresh) {
  if (!t->haveCached) {
    *fresh = policy_->decide(t->key, k, costs);
    if (!fresh->stable) return *fresh;
    t->cached = *fresh;
    t->haveCached = true;
  } else if (rt_.mask().on() && policy_->needsTiming()) {
    policy_->onSettledCall();
  }
  return t->cached;
}

// The ranks can no longer agree: NCCL fails the collective (the call is not counted), with one WARN.
bool Context::failCall(Task* t, uint64_t k, const Decision& d) {
  --t->calls;
  if (!failLogged_) {
    failLogged_ = true;
    failWhy_ = std::string(collName(t->key.coll)) + " bytes=" + std::to_string(t->key.bytes) + " call " +
               std::to_string(k) + ": the ranks can no longer agree on a configuration (" + d.why +
               "); failing the collective rather than risking divergent configurations";
    log(LogLevel::Warn, failWhy_);
  }
  return false;
}

// The decision written into NCCL's cost table and *nChannels; returns what was applied. A pair NCCL marked
// unsupported (-1) is refused: NCCL's choice stands (*source Nccl, *refused).
[[gnu::always_inline]] inline Config Context::apply(Task* t, const Decision& d, const CostTable& costs, int* nChannels, Source* source,
                      bool* refused) {
  Config applied;
  const int maxCh = rt_.settings().maxChannels;
  // Channels left to NCCL: capped at AUTOCCL_NCCL_CHANNELS when set (NCCL's own choice as on a plain
  // communicator); an explicit count below overrides it.
  if (nChannels && rt_.settings().ncclChannels > 0) *nChannels = rt_.settings().ncclChannels;
  if (d.config.forcesPair() && !costs.supported(d.config.algo, d.config.proto)) {
    *refused = true;
    *source = Source::Nccl;
    if (!t->unsupportedLogged) {
      t->unsupportedLogged = true;
      log(LogLevel::Info, std::string(collName(t->key.coll)) + " " + std::to_string(t->key.bytes) + " B: " +
                              configText(d.config) + " is unsupported here (-1), leaving NCCL's choice");
    }
    return applied;
  }
  if (d.config.forcesPair()) {
    costs.data[d.config.algo * costs.numProto + d.config.proto] = 0.0f;  // NCCL takes the smallest >= 0
    applied.algo = d.config.algo;
    applied.proto = d.config.proto;
  }
  if (d.config.channels > 0 && nChannels) {
    applied.channels = std::clamp(d.config.channels, 1, maxCh);
    *nChannels = applied.channels;
  }
  if (d.config.chunk) applied.chunk = std::clamp<uint64_t>(d.config.chunk, kMinChunk, kMaxChunk);
  else applied.chunkHalvings = std::clamp(d.config.chunkHalvings, 0, kMaxChunkHalvings);
  return applied;
}

// What was applied, for getChunkSize (the group's decisions), the metrics files, and the task's first call's
// INFO line.
[[gnu::always_inline]] inline void Context::noteApplied(Task* t, uint64_t k, const Decision& d, const Config& applied, Source source) {
  if (chunkCallback_) {  // without it (tuner v5, NCCL < 2.30.3) nothing reads them: no work on this path
    if (groupChunks_.size() >= kMaxGroupChunks) groupChunks_.erase(groupChunks_.begin());  // a huge group
    groupChunks_.push_back(GroupChunk{t->key.coll, applied.algo, applied.proto, applied.chunk, applied.chunkHalvings});
  }
  if (metricsOn_.load(std::memory_order_relaxed)) {
    if (!applied.sameSetting(t->lastApplied) || source != t->lastSource || k == 0) {  // not the measure flag
      std::lock_guard<std::mutex> lock(statsMu_);  // the metrics thread copies these in O(1) per task
      t->shownApplied = applied;
      t->shownSource = source;
      t->appliedStats.clear();  // keeps its storage: no allocation on the call path
    }
    t->callsSeen.store(t->calls, std::memory_order_relaxed);
  }
  t->lastApplied = applied;
  t->lastSource = source;
  if (k == 0) {
    log(LogLevel::Info, std::string(collName(t->key.coll)) + " bytes=" + std::to_string(t->key.bytes) + " pipe=" +
                            std::to_string(t->key.pipe) + ": " + sourceName(source) + " " + configText(applied) +
                            (d.why.empty() ? "" : " (" + d.why + ")"));
  }
}

// The call's place in the profiler's matching queue, and whether the launch clock times it.
[[gnu::always_inline]] inline void Context::queueForTiming(Task* t, uint64_t k, const Decision& d, const Config& applied) {
  const int coll = t->key.coll;
  ++ordinal_;
  // The launch clock times a task's first AUTOCCL_MEASURE_CALLS calls by count (its samples arrive later than the
  // host decides the next calls: counting deliveries timed every call of a short run) and what the policy asks.
  bool reportOnly = false;
  if (d.timed || (measureBudget_ > 0 && k < measureBudget_)) {
    launchWant_.store(2, std::memory_order_relaxed);
  } else if (d.report) {
    // Timed for the report alone unless the launch clock times it anyway (the launch after a timed one).
    if (!launchClock_) {
      reportOnly = true;
    } else if (launchWant_.load(std::memory_order_relaxed) <= 0) {
      launchWant_.store(1, std::memory_order_relaxed);
      reportOnly = true;
    }
  }
  if (profilerAttached_.load(std::memory_order_relaxed))
    matcher_.pushDecision(coll, t->key.bytes, applied, t, k, ordinal_, reportOnly);
  if (profilerAttached_.load(std::memory_order_relaxed) && !unprofiled_[coll] && rt_.mask().on() &&
      ++callsWhileTiming_[coll] >= kUnprofiledCalls && collEvents_[coll].load(std::memory_order_relaxed) == 0) {
    unprofiled_[coll] = true;
    log(LogLevel::Info, std::string("NCCL reported no profiler event for ") + std::to_string(kUnprofiledCalls) +
                            " " + collName(coll) + " calls made while timing was on (NCCL >= 2.30 runs a lone "
                            "broadcast as a converted task without events): they keep NCCL's choice");
    policy_->onUnprofiled(coll);
  }
  if (t->wanting.load(std::memory_order_relaxed) && t->calls > 4 * measureBudget_ + 16) stopWanting(t);
}

bool Context::getCollInfo(int coll, uint64_t bytes, int pipe, const CostTable& costs, int* nChannels) {
  if (chunkAsked_) {  // NCCL has scheduled the previous group: this call starts the next one
    groupChunks_.clear();
    chunkAsked_ = false;
  }
  if (!policy_ || coll < 0 || coll >= kNumColls) return true;
  Task* t = taskFor(TaskKey{coll, bytes, pipe});
  const uint64_t k = t->calls++;
  Decision fresh;
  const Decision& d = decisionFor(t, k, costs, &fresh);
  if (d.fail) return failCall(t, k, d);
  Source source = d.source;
  bool refused = false;
  const Config applied = apply(t, d, costs, nChannels, &source, &refused);
  noteApplied(t, k, d, applied, source);
  queueForTiming(t, k, d, applied);
  if (rt_.trace().enabled()) traceCall(t, k, applied, source, refused);
  return true;
}

// The trace's `call` record.
void Context::traceCall(const Task* t, uint64_t k, const Config& applied, Source source, bool refused) {
  char buf[512];
  char algo[32] = "null", proto[32] = "null";
  if (applied.forcesPair()) {
    std::snprintf(algo, sizeof algo, "\"%s\"", algoName(applied.algo));
    std::snprintf(proto, sizeof proto, "\"%s\"", protoName(applied.proto));
  }
  int n = std::snprintf(buf, sizeof buf,
                        "{\"ev\":\"call\",\"comm\":\"%s\",\"rank\":%d,\"coll\":\"%s\",\"bytes\":%" PRIu64
                        ",\"pipe\":%d,\"call\":%" PRIu64 ",\"algo\":%s,\"proto\":%s,\"channels\":%d,\"chunk\":%" PRIu64
                        ",\"chunk_halvings\":%d,\"source\":\"%s\",\"timing\":%d%s}",
                        commHex_.c_str(), rank_, collName(t->key.coll), t->key.bytes, t->key.pipe, k, algo, proto,
                        applied.channels, applied.chunk, applied.chunkHalvings, sourceName(source),
                        rt_.mask().on() ? 1 : 0, refused ? ",\"refused\":true" : "");
  if (n > 0) rt_.trace().writeLine(buf, std::min(static_cast<size_t>(n), sizeof buf - 1));
}

bool Context::chunkSize(int coll, int algo, int proto, uint64_t* chunk) {
  chunkAsked_ = true;
  if (coll < 0 || coll >= kNumColls || !chunk) return false;
  // The group's latest decision of coll on this pair; else its latest that left the pair to NCCL. Every
  // rank makes the same decisions in the same groups, so every rank finds the same one.
  const GroupChunk* found = nullptr;
  const GroupChunk* unforced = nullptr;
  for (auto it = groupChunks_.rbegin(); it != groupChunks_.rend() && !found; ++it) {
    if (it->coll != coll) continue;
    if (it->algo == algo && it->proto == proto) found = &*it;
    else if (it->algo < 0 && !unforced) unforced = &*it;
  }
  if (!found) found = unforced;
  if (!found) return false;
  const GroupChunk& c = *found;
  if (!c.chunk && !c.halvings) return false;
  if (c.chunk) {
    *chunk = c.chunk;
    return true;
  }
  // NCCL's chunk for this partition, halved; never below kMinChunk unless NCCL's already is (NCCL aligns
  // the answer down to the protocol's grain, at most 1920 B, so it cannot reach 0). The same function of
  // NCCL's value (identical on every rank: it depends on the communicator and the task) on every rank.
  const uint64_t ncclChunk = *chunk;
  *chunk = std::max(ncclChunk >> c.halvings, std::min(ncclChunk, kMinChunk));
  return true;
}

void* Context::collStart(int coll, uint64_t seq, uint64_t count, int elemBytes, int nChannels, int algo, int proto,
                         int reporting) {
  if (coll < 0 || coll >= kNumColls) return nullptr;
  collEvents_[coll].fetch_add(1, std::memory_order_relaxed);
  return matcher_.collStart(coll, seq, TimingMatcher::collBytes(coll, count, elemBytes, nRanks_), nChannels, algo,
                           proto, reporting);
}

void* Context::kernelChStart(void* parent, uint64_t startNs) { return matcher_.kernelChStart(parent, startNs); }

void Context::onMeasurement(const Measurement& in) {
  if (!policy_ || !policy_->wantsPeriod()) {
    flushHeld();  // one held from before the policy settled on window scoring
    deliver(in);
    return;
  }
  Measurement out;
  bool haveOut = false;
  {
    std::lock_guard<std::mutex> lk(heldMu_);
    if (haveHeld_) {
      out = held_;
      haveOut = true;
      // The communicator's kernels run in call order on one stream: when the next call is the very next
      // one decided, its start bounds this call's hold on the stream.
      if (in.ordinal != 0 && in.ordinal == out.ordinal + 1 && in.startNs > out.startNs) {
        const double period = static_cast<double>(in.startNs - out.startNs) / 1000.0;
        // Idle for longer, the stream waited for the host to come back (periods spanning the end of a
        // nccl-tests pass read 21.7 ms for an 805 us all_gather and 1011 us for a 224 us one, and lost the
        // duel for configurations 20 % faster, 2 x H200): such a period says nothing of the call.
        const double idle = period - out.gpuUs;
        if (idle > kHostPauseUs) out.hostPauseUs = idle;
        else out.periodUs = period;
      }
    }
    held_ = in;
    haveHeld_ = true;
  }
  if (haveOut) deliver(out);
}

void Context::flushHeld() {
  Measurement out;
  {
    std::lock_guard<std::mutex> lk(heldMu_);
    if (!haveHeld_) return;
    out = held_;
    haveHeld_ = false;
  }
  deliver(out);
}

void Context::deliver(const Measurement& m) {
  std::lock_guard<std::mutex> serial(deliverMu_);
  auto* t = static_cast<Task*>(m.cookie);
  bool budgetDone = false;
  if (m.reportOnly) {  // no sample of the task: its statistics stay as if the call had run untimed
    if (policy_) policy_->onMeasurement(t->key, m);
    traceTime(t, m);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    t->stats.add(m.gpuUs);
    ++t->measured;
    t->ranAlgo = m.ncclAlgo;
    t->ranProto = m.ncclProto;
    t->ranChannels = m.ncclChannels;
    if (m.applied.empty()) {
      t->defAlgo = m.ncclAlgo;
      t->defProto = m.ncclProto;
      t->defChannels = m.ncclChannels;
    }
    budgetDone = measureBudget_ > 0 && t->measured >= measureBudget_;
    if (metricsOn_.load(std::memory_order_relaxed)) {
      if (m.applied.empty()) t->ncclStats.add(m.gpuUs);
      if (m.applied.sameSetting(t->shownApplied)) t->appliedStats.add(m.gpuUs);
    }
  }
  if (policy_) policy_->onMeasurement(t->key, m);
  traceTime(t, m);
  if (budgetDone) stopWanting(t);
}

// The trace's `time` record (`report`: timed for a report alone, Measurement::reportOnly).
void Context::traceTime(const Task* t, const Measurement& m) {
  if (rt_.trace().enabled()) {
    char buf[512];
    int n = std::snprintf(buf, sizeof buf,
                          "{\"ev\":\"time\",\"comm\":\"%s\",\"rank\":%d,\"coll\":\"%s\",\"bytes\":%" PRIu64
                          ",\"pipe\":%d,\"call\":%" PRIu64 ",\"gpu_us\":%.3f,\"nccl_algo\":\"%s\",\"nccl_proto\":\"%s\","
                          "\"nccl_channels\":%d,\"colls\":%u,\"kch\":%u,\"start_spread_us\":%.3f,\"stale_ch\":%u,"
                          "\"t0_ns\":%" PRIu64 ",\"period_us\":%.3f,\"pause_us\":%.3f%s}",
                          commHex_.c_str(), rank_, collName(t->key.coll), t->key.bytes, t->key.pipe, m.callIndex,
                          m.gpuUs, ncclAlgoSpelling(m.ncclAlgo), ncclProtoSpelling(m.ncclProto), m.ncclChannels,
                          m.colls, m.channels, m.startSpreadUs, m.staleChannels, m.startNs, m.periodUs, m.hostPauseUs,
                          m.reportOnly ? ",\"report\":true" : "");
    if (n > 0) rt_.trace().writeLine(buf, std::min(static_cast<size_t>(n), sizeof buf - 1));
  }
}

std::vector<Context::TaskReport> Context::report() const {
  std::vector<TaskReport> out;
  std::lock_guard<std::mutex> lock(statsMu_);
  for (const auto& [key, t] : tasks_) {
    TaskReport r;
    r.key = key;
    r.calls = t->calls;
    r.applied = t->lastApplied;
    r.source = t->lastSource;
    r.stats = t->stats.summary();
    r.ncclAlgo = t->defAlgo;
    r.ncclProto = t->defProto;
    r.ncclChannels = t->defChannels;
    r.ranAlgo = t->ranAlgo;
    r.ranProto = t->ranProto;
    r.ranChannels = t->ranChannels;
    out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const TaskReport& a, const TaskReport& b) {
    return a.key.coll != b.key.coll ? a.key.coll < b.key.coll
           : a.key.bytes != b.key.bytes ? a.key.bytes < b.key.bytes : a.key.pipe < b.key.pipe;
  });
  return out;
}

ContextMetrics Context::metricsSnapshot() const {
  ContextMetrics out;
  out.commHash = commHash_;
  out.rank = rank_;
  out.nRanks = nRanks_;
  out.nNodes = nNodes_;
  // Under statsMu_ (which the measurement thread and a call changing its configuration take): plain copies
  // only, into storage allocated before the lock. Summaries, names and sorting come after it.
  struct Raw {
    TaskKey key;
    uint64_t calls = 0;
    Config shown;
    Source source = Source::Nccl;
    int defAlgo = -1, defProto = -1, defChannels = 0;
    RobustStats nccl{64}, applied{64};
  };
  std::vector<Raw> raw;
  size_t n = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::lock_guard<std::mutex> lock(statsMu_);
      n = tasks_.size();
    }
    raw.resize(n + 4);  // tasks added meanwhile: a few, else the next collection shows them
    for (Raw& r : raw) {
      r.nccl.reserve(64);
      r.applied.reserve(64);
    }
    std::lock_guard<std::mutex> lock(statsMu_);
    if (tasks_.size() > raw.size() && attempt == 0) continue;
    n = 0;
    for (const auto& [key, t] : tasks_) {
      if (n == raw.size()) break;
      Raw& r = raw[n++];
      r.key = key;
      r.calls = t->callsSeen.load(std::memory_order_relaxed);
      r.shown = t->shownApplied;
      r.source = t->shownSource;
      r.defAlgo = t->defAlgo;
      r.defProto = t->defProto;
      r.defChannels = t->defChannels;
      r.nccl.assignFrom(t->ncclStats);
      r.applied.assignFrom(t->appliedStats);
    }
    break;
  }
  raw.resize(n);
  std::vector<TaskKey> keys;
  for (const Raw& x : raw) {
    TaskMetricsRow r;
    r.coll = collName(x.key.coll);
    r.bytes = x.key.bytes;
    r.pipe = x.key.pipe;
    r.calls = x.calls;
    r.source = sourceName(x.source);
    if (x.shown.forcesPair()) {
      r.algo = algoName(x.shown.algo);
      r.proto = protoName(x.shown.proto);
    }
    r.channels = x.shown.channels;
    if (x.defAlgo >= 0) r.ncclAlgo = algoName(x.defAlgo);
    if (x.defProto >= 0) r.ncclProto = protoName(x.defProto);
    r.ncclChannels = x.defChannels;
    const StatsSummary nccl = x.nccl.summary(), applied = x.applied.summary();
    r.ncclUs = nccl.median;
    r.ncclSamples = nccl.count;
    r.appliedUs = applied.median;
    r.appliedSamples = applied.count;
    out.tasks.push_back(std::move(r));
    keys.push_back(x.key);
  }
  // The policy's own view (online: the search's medians, which score the same calls by its objective).
  for (size_t i = 0; i < keys.size(); ++i) {
    const DecisionSource::TaskView v = policy_->view(keys[i]);
    if (!v.known) continue;
    TaskMetricsRow& r = out.tasks[i];
    if (v.ncclUs > 0) r.ncclUs = v.ncclUs;
    if (v.appliedUs > 0) r.appliedUs = v.appliedUs;
    r.exploringCalls = v.exploringCalls;
    r.regretUs = v.regretUs;
    r.converged = v.converged;
  }
  std::sort(out.tasks.begin(), out.tasks.end(), [](const TaskMetricsRow& a, const TaskMetricsRow& b) {
    return a.coll != b.coll ? a.coll < b.coll : a.bytes != b.bytes ? a.bytes < b.bytes : a.pipe < b.pipe;
  });
  DecisionSource::GuardView g;
  if (policy_->guardView(&g)) {
    out.haveGuard = true;
    out.guard = GuardMetricsRow{g.verdicts, g.keptTuned, g.restoredNccl, g.lastTunedUs, g.lastNcclUs};
  }
  return out;
}

void Context::finalizeTuner() {
  if (tunerFinalized_.exchange(true)) return;
  flushHeld();
  updateNeed();
  if (!policy_) return;
  policy_->onFinalize();
  if (policy_->agreesThroughCoordination() && rank_ >= 0) rt_.coordination()->retireRank(commHash_, rank_);
  if (metricsOn_.load()) rt_.metrics().collectNow(this);
  std::vector<TaskReport> tasks = report();
  if (rt_.trace().enabled()) {
    for (const std::string& rec : policy_->traceRecords()) rt_.trace().writeLine(rec.data(), rec.size());
    // The process's regret ledger (AUTOCCL_JOB_REGRET_PCT) as this communicator leaves: the searches' and the step
    // guards' regret of every communicator this process is the authority of, and whether it is still in budget.
    if (const std::shared_ptr<search::RegretLedger> job = rt_.jobRegret()) {
      char rec[256];
      const int n = std::snprintf(rec, sizeof rec,
                                  "{\"ev\":\"job_regret\",\"comm\":\"%s\",\"rank\":%d,\"regret_us\":%.1f,"
                                  "\"within_budget\":%s}",
                                  commHex_.c_str(), rank_, job->regretMicros(), job->allows() ? "true" : "false");
      if (n > 0) rt_.trace().writeLine(rec, std::min(static_cast<size_t>(n), sizeof rec - 1));
    }
  }
  std::vector<TableEntry> observed;
  for (const TaskReport& r : tasks) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s bytes=%" PRIu64 " pipe=%d: %" PRIu64 " calls, %s %s; measured %" PRIu64
                  " samples, median %.1f us, MAD %.1f us, noise %.1f%%, NCCL's choice %s/%s/%d, last call ran %s/%s/%d",
                  collName(r.key.coll), r.key.bytes, r.key.pipe, r.calls, sourceName(r.source),
                  configText(r.applied).c_str(), r.stats.count, r.stats.median, r.stats.mad, 100.0 * r.stats.noise,
                  ncclAlgoSpelling(r.ncclAlgo), ncclProtoSpelling(r.ncclProto), r.ncclChannels,
                  ncclAlgoSpelling(r.ranAlgo), ncclProtoSpelling(r.ranProto), r.ranChannels);
    log(LogLevel::Info, line);
    if (rt_.trace().enabled()) {
      char buf[1024];
      int n = std::snprintf(
          buf, sizeof buf,
          "{\"ev\":\"task\",\"comm\":\"%s\",\"rank\":%d,\"coll\":\"%s\",\"bytes\":%" PRIu64 ",\"pipe\":%d,\"calls\":%" PRIu64
          ",\"samples\":%" PRIu64 ",\"median_us\":%.3f,\"mad_us\":%.3f,\"noise\":%.4f,\"min_us\":%.3f,\"max_us\":%.3f,"
          "\"source\":\"%s\",\"algo\":%s%s%s,\"proto\":%s%s%s,\"channels\":%d,\"chunk\":%" PRIu64
          ",\"chunk_halvings\":%d,\"nccl_algo\":\"%s\",\"nccl_proto\":\"%s\",\"nccl_channels\":%d,"
          "\"ran_algo\":\"%s\",\"ran_proto\":\"%s\",\"ran_channels\":%d",
          commHex_.c_str(), rank_, collName(r.key.coll), r.key.bytes, r.key.pipe, r.calls, r.stats.count,
          r.stats.median, r.stats.mad, r.stats.noise, r.stats.min, r.stats.max, sourceName(r.source),
          r.applied.forcesPair() ? "\"" : "", r.applied.forcesPair() ? algoName(r.applied.algo) : "null",
          r.applied.forcesPair() ? "\"" : "", r.applied.forcesPair() ? "\"" : "",
          r.applied.forcesPair() ? protoName(r.applied.proto) : "null", r.applied.forcesPair() ? "\"" : "",
          r.applied.channels, r.applied.chunk, r.applied.chunkHalvings, ncclAlgoSpelling(r.ncclAlgo), ncclProtoSpelling(r.ncclProto),
          r.ncclChannels, ncclAlgoSpelling(r.ranAlgo), ncclProtoSpelling(r.ranProto), r.ranChannels);
      // The policy's fields (a search's record, its slow lookups: of any length) go after the bounded head; a
      // fixed buffer cut the line, and the trace's readers skip a line that is not JSON.
      if (n > 0 && static_cast<size_t>(n) < sizeof buf) {
        std::string rec(buf, static_cast<size_t>(n));
        rec += policy_->traceExtra(r.key);
        rec += '}';
        rt_.trace().writeLine(rec.data(), rec.size());
      }
    }
    if (r.stats.count > 0 && r.ncclAlgo >= 0 && r.ncclProto >= 0) {
      TableEntry e;
      e.key = r.key;
      e.config.algo = r.ncclAlgo;
      e.config.proto = r.ncclProto;
      e.timeUs = e.ncclUs = r.stats.median;
      e.samples = r.stats.count;
      observed.push_back(e);
    }
  }
  MatcherCounters c = matcher_.counters();
  if (rt_.trace().enabled()) {
    char buf[512];
    int n = std::snprintf(buf, sizeof buf,
                          "{\"ev\":\"matcher\",\"comm\":\"%s\",\"rank\":%d,\"decisions\":%" PRIu64 ",\"measurements\":%" PRIu64
                          ",\"matched_colls\":%" PRIu64 ",\"unmatched_colls\":%" PRIu64 ",\"dropped_gap\":%" PRIu64
                          ",\"dropped_skip\":%" PRIu64 ",\"dropped_overflow\":%" PRIu64 ",\"dropped_mismatch\":%" PRIu64
                          ",\"stale_starts\":%" PRIu64 "}",
                          commHex_.c_str(), rank_, c.decisions, c.measurements, c.matchedColls, c.unmatchedColls,
                          c.droppedGap, c.droppedSkip, c.droppedOverflow, c.droppedMismatch, c.staleStarts);
    if (n > 0) rt_.trace().writeLine(buf, std::min(static_cast<size_t>(n), sizeof buf - 1));
    rt_.trace().flush();
  }
  // Observe mode records NCCL's choice per task; one writer per communicator (rank 0).
  if (rt_.settings().mode == Mode::Observe && rank_ == 0) {
    rt_.saveObserved(rt_.fingerprint(nRanks_, nNodes_, nvlDomains_), observed, log_);
  }
}

void Context::finalizeProfiler() {
  flushHeld();
  profilerAttached_.store(false);
  updateNeed();
  if (rt_.trace().enabled()) rt_.trace().flush();
}

}  // namespace autoccl::engine
