// autoccl-emu: plays NCCL's side of the tuner and profiler plugin interfaces against a real plugin
// library (dlopen), for N ranks x M communicators, on a simulated GPU whose kernel times come from a
// calibrated performance model. Writes one ground-truth JSONL record per collective and rank.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../nccl/abi/profiler_v5.h"
#include "../nccl/abi/profiler_v6.h"
#include "../nccl/abi/profiler_v7.h"
#include "../nccl/abi/tuner_v5.h"
#include "../nccl/abi/tuner_v6.h"
#include "nccl_model.h"
#include "perf_model.h"
#include "fake_cuda.h"
#include "scenario.h"

namespace emu {
namespace {

// Events are built as v7 descriptors. A v7 profiler gets them as they are; a v5 or v6 one gets a v6-sized copy
// (its members sit at the same offsets), as an NCCL of that version would hand it.
using EventDescr = ncclabi::EventDescrV7;
using EventStateArgs = ncclabi::EventStateArgsV7;

// ---------------------------------------------------------------- logging (NCCL's logger callback)
std::atomic<int> gWarnCount{0};
std::atomic<int> gInfoCount{0};
bool gVerbose = false;
std::mutex gErrMutex;

void emuLogger(ncclabi::LogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt ? fmt : "(null)", ap);
  va_end(ap);
  if (level == ncclabi::kLogWarn) {
    gWarnCount.fetch_add(1);
    std::lock_guard<std::mutex> lk(gErrMutex);
    std::fprintf(stderr, "autoccl-emu: NCCL WARN %s\n", buf);
  } else if (level == ncclabi::kLogInfo || level == ncclabi::kLogVersion || level == ncclabi::kLogTrace) {
    gInfoCount.fetch_add(1);
    if (gVerbose) {
      std::lock_guard<std::mutex> lk(gErrMutex);
      std::fprintf(stderr, "autoccl-emu: NCCL INFO [%lu %s:%d] %s\n", flags, file ? file : "?", line, buf);
    }
  } else if (level == ncclabi::kLogAbort) {
    std::lock_guard<std::mutex> lk(gErrMutex);
    std::fprintf(stderr, "autoccl-emu: NCCL ABORT %s\n", buf);
  }
}

void emuError(const std::string& msg) {
  std::lock_guard<std::mutex> lk(gErrMutex);
  std::fprintf(stderr, "autoccl-emu: %s\n", msg.c_str());
}

// ---------------------------------------------------------------- plugin loading
struct Plugin {
  void* handle = nullptr;
  const ncclabi::TunerV6* tuner6 = nullptr;
  const ncclabi::TunerV5* tuner5 = nullptr;
  // The profiler's table read as v6 (a v5 or v7 table has the same layout; only startEvent's descriptor differs).
  const ncclabi::ProfilerV6* profiler = nullptr;
  const ncclabi::ProfilerV7* profiler7 = nullptr;  // the same table, when it is v7
  int tunerVersion = 0, profilerVersion = 0;
  std::string tunerName, profilerName;

  ncclabi::Result startEvent(void* ctx, void** eHandle, EventDescr* d) const {
    if (profiler7) return profiler7->startEvent(ctx, eHandle, d);
    // A v6-sized descriptor at the start of a buffer whose rest is a pattern: a reader that goes past the v6
    // descriptor (a v7 member) reads nonzero garbage in every build, not only under a sanitizer.
    alignas(EventDescr) unsigned char buf[sizeof(EventDescr)];
    std::memset(buf, 0xA5, sizeof buf);
    std::memcpy(buf, d, sizeof(ncclabi::EventDescrV6));
    return profiler->startEvent(ctx, eHandle, reinterpret_cast<ncclabi::EventDescrV6*>(buf));
  }

  bool hasTuner() const { return tunerVersion != 0; }
  ncclabi::TunerInitV6Fn tInit() const { return tuner6 ? tuner6->init : tuner5->init; }
  ncclabi::TunerGetCollInfoFn tGetCollInfo() const { return tuner6 ? tuner6->getCollInfo : tuner5->getCollInfo; }
  ncclabi::TunerFinalizeFn tFinalize() const { return tuner6 ? tuner6->finalize : tuner5->finalize; }
  ncclabi::TunerGetChunkSizeFn tGetChunkSize() const { return tuner6 ? tuner6->getChunkSize : nullptr; }
};

// NCCL dlopens the tuner and the profiler separately; the same path yields the same instance.
bool loadPlugin(const std::string& path, int tunerWant, int profilerWant, bool noTuner, bool noProfiler,
                Plugin* p) {
  p->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!p->handle) {
    emuError(std::string("could not load plugin: ") + dlerror() + " (NCCL would run without a tuner)");
    return false;
  }
  if (!noTuner) {
    if (tunerWant == 0 || tunerWant == 6) {
      p->tuner6 = static_cast<const ncclabi::TunerV6*>(dlsym(p->handle, "ncclTunerPlugin_v6"));
      if (p->tuner6) p->tunerVersion = 6;
    }
    if (!p->tuner6 && (tunerWant == 0 || tunerWant == 5)) {
      p->tuner5 = static_cast<const ncclabi::TunerV5*>(dlsym(p->handle, "ncclTunerPlugin_v5"));
      if (p->tuner5) p->tunerVersion = 5;
    }
    if (p->tunerVersion) {
      const char* n = p->tuner6 ? p->tuner6->name : p->tuner5->name;
      p->tunerName = n ? n : "";
      if (!p->tInit() || !p->tGetCollInfo() || !p->tFinalize()) {
        emuError("tuner struct has NULL functions; ignoring the tuner");
        p->tuner6 = nullptr;
        p->tuner5 = nullptr;
        p->tunerVersion = 0;
      }
    }
  }
  if (!noProfiler) {
    if (profilerWant == 0 || profilerWant == 7) {
      p->profiler7 = static_cast<const ncclabi::ProfilerV7*>(dlsym(p->handle, "ncclProfiler_v7"));
      if (p->profiler7) {
        p->profiler = reinterpret_cast<const ncclabi::ProfilerV6*>(p->profiler7);
        p->profilerVersion = 7;
      }
    }
    if (!p->profiler && (profilerWant == 0 || profilerWant == 6)) {
      p->profiler = static_cast<const ncclabi::ProfilerV6*>(dlsym(p->handle, "ncclProfiler_v6"));
      if (p->profiler) p->profilerVersion = 6;
    }
    if (!p->profiler && (profilerWant == 0 || profilerWant == 5)) {
      p->profiler = static_cast<const ncclabi::ProfilerV6*>(dlsym(p->handle, "ncclProfiler_v5"));
      if (p->profiler) p->profilerVersion = 5;
    }
    if (p->profiler) p->profilerName = p->profiler->name ? p->profiler->name : "";
  }
  return true;
}

// ---------------------------------------------------------------- process-wide state
uint64_t steadyNs() {  // CLOCK_MONOTONIC on Linux: one clock for every process of the host
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
int gActivationMask = 0;  // NCCL's process-global profiler activation mask
constexpr uint64_t kCollEnableMask = ncclabi::kEvColl | ncclabi::kEvProxyOp | ncclabi::kEvProxyStep |
                                     ncclabi::kEvKernelCh | ncclabi::kEvNetPlugin;

struct Options {
  std::string scenarioPath, pluginPath, modelPath, truthPath;
  std::string leadFile;  // Scenario::lead across the emulator processes of one run (one file for all of them)
  std::vector<int> ranks;
  int tunerWant = 0, profilerWant = 0;
  bool noPlugin = false, noTuner = false, noProfiler = false;
  bool computeSpans = false;  // a "compute" record per group's computation (a GPU timeline beside the calls)
};

struct Config {
  int algo = -1, proto = -1, maxChannels = 0, chunk = 0;
  bool operator==(const Config& o) const {
    return algo == o.algo && proto == o.proto && maxChannels == o.maxChannels && chunk == o.chunk;
  }
};

// Cross-rank check inside one process: ranks of one comm must apply the same config for the same batch.
struct DivergenceBoard {
  std::mutex mu;
  std::map<std::tuple<int, int, int, int>, std::pair<int, Config>> seen;  // (comm, instance, rep, batch)
  std::atomic<int> count{0};
  void check(int comm, int inst, int rep, int batch, int rank, const Config& c, const std::string& commName) {
    std::lock_guard<std::mutex> lk(mu);
    auto key = std::make_tuple(comm, inst, rep, batch);
    auto it = seen.find(key);
    if (it == seen.end()) {
      seen[key] = {rank, c};
      return;
    }
    if (!(it->second.second == c)) {
      count.fetch_add(1);
      const Config& o = it->second.second;
      char buf[512];
      std::snprintf(buf, sizeof(buf),
                    "DIVERGENCE comm=%s group=%d batch=%d: rank %d applied %s/%s/%d/chunk=%d, rank %d applied "
                    "%s/%s/%d/chunk=%d (real NCCL would hang or corrupt data)",
                    commName.c_str(), inst, batch, it->second.first, algoName(o.algo), protoName(o.proto),
                    o.maxChannels, o.chunk, rank, algoName(c.algo), protoName(c.proto), c.maxChannels, c.chunk);
      emuError(buf);
    }
  }
};

// ---------------------------------------------------------------- kernel-event delivery ("proxy thread")
struct ChannelEvent {
  void* profCtx = nullptr;
  void* parent = nullptr;
  uint8_t channelId = 0;
  uint64_t start = 0, stop = 0;
  void* handle = nullptr;
  bool started = false, done = false;
  size_t unit = 0;
};

class Proxy {
 public:
  Proxy(const Plugin* plugin, int runahead, int reorder, uint64_t seed, int delayUs = 0)
      : plugin_(plugin), runahead_(runahead), reorder_(reorder), delayUs_(delayUs), rng_(mix64(seed)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Proxy() { finish(); }

  // Host side: enqueue one collective's channel events; blocks while the host is too far ahead.
  void push(std::vector<ChannelEvent> evs) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return pendingUnits_ < static_cast<size_t>(runahead_ + reorder_ + 1); });
    size_t unit = nextUnit_++;
    unitLeft_[unit] = evs.size() * 2;
    for (ChannelEvent& e : evs) {
      e.unit = unit;
      items_.push_back(e);
    }
    pendingUnits_++;
    unitOrder_.push_back(unit);
    cv_.notify_all();
  }
  void flush() {
    std::unique_lock<std::mutex> lk(mu_);
    flushing_ = true;
    cv_.notify_all();
    cv_.wait(lk, [this] { return items_.empty(); });
    flushing_ = false;
  }
  void finish() {
    if (!thread_.joinable()) return;
    flush();
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  uint64_t delivered() const { return delivered_; }

 private:
  const Plugin* plugin_;
  int runahead_, reorder_;
  int delayUs_;  // slow delivery (a busy proxy thread / late CUDA callbacks)
  uint64_t rng_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChannelEvent> items_;
  std::deque<size_t> unitOrder_;
  std::map<size_t, size_t> unitLeft_;
  size_t pendingUnits_ = 0, nextUnit_ = 0;
  bool flushing_ = false, stop_ = false;
  uint64_t delivered_ = 0;
  std::thread thread_;

  // Units (collectives) whose events may go out: all but the newest `runahead` unless flushing.
  size_t eligibleUnitLimit() const {
    if (flushing_) return static_cast<size_t>(-1);
    if (unitOrder_.size() <= static_cast<size_t>(runahead_)) return 0;
    return unitOrder_[unitOrder_.size() - static_cast<size_t>(runahead_) - 1] + 1;  // unit ids < limit
  }
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      std::vector<size_t> candidates;
      cv_.wait(lk, [&] {
        if (stop_) return true;
        candidates.clear();
        size_t limit = eligibleUnitLimit();
        for (size_t i = 0; i < items_.size() && candidates.size() < static_cast<size_t>(reorder_); ++i) {
          const ChannelEvent& e = items_[i];
          if (e.unit >= limit) break;
          candidates.push_back(i);
        }
        return !candidates.empty();
      });
      if (stop_ && candidates.empty()) return;
      rng_ = mix64(rng_);
      size_t pick = candidates[rng_ % candidates.size()];
      ChannelEvent& e = items_[pick];
      bool isStart = !e.started;
      // Deliver outside the lock: the plugin may take its own locks.
      ChannelEvent copy = e;
      if (isStart) e.started = true;
      lk.unlock();
      if (delayUs_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(delayUs_));
      if (isStart) {
        EventDescr d;
        std::memset(&d, 0, sizeof(d));
        d.type = ncclabi::kEvKernelCh;
        d.parentObj = copy.parent;
        d.kernelCh.channelId = copy.channelId;
        d.kernelCh.pTimer = copy.start;
        void* h = nullptr;
        plugin_->startEvent(copy.profCtx, &h, &d);
        copy.handle = h;
      } else if (copy.handle) {
        EventStateArgs a;
        std::memset(&a, 0, sizeof(a));
        if (plugin_->profilerVersion >= 7 &&
            (__atomic_load_n(&gActivationMask, __ATOMIC_RELAXED) & static_cast<int>(ncclabi::kEvKernelPhase))) {
          // v7: the channel's work as one kernel phase, a child of its KernelCh event
          EventDescr d;
          std::memset(&d, 0, sizeof(d));
          d.type = ncclabi::kEvKernelPhase;
          d.parentObj = copy.handle;
          d.kernelPhase.channelId = copy.channelId;
          d.kernelPhase.phaseId = 1;
          d.kernelPhase.phaseName = "compute";
          d.kernelPhase.pTimer = copy.start;
          void* ph = nullptr;
          plugin_->startEvent(copy.profCtx, &ph, &d);
          if (ph) {
            a.kernelCh.pTimer = copy.stop;
            const auto phaseStop = static_cast<ncclabi::ProfileState>(ncclabi::kStateKernelPhaseStop);
            plugin_->profiler->recordEventState(ph, phaseStop, &a);
            plugin_->profiler->stopEvent(ph);
          }
        }
        a.kernelCh.pTimer = copy.stop;
        plugin_->profiler->recordEventState(copy.handle, ncclabi::kStateKernelChStop, &a);
        plugin_->profiler->stopEvent(copy.handle);
      }
      lk.lock();
      delivered_++;
      // Items are stable in the deque except for erasure, which only this thread does.
      ChannelEvent& again = items_[pick];
      const size_t unit = again.unit;
      unitLeft_[unit]--;
      if (isStart) {
        again.handle = copy.handle;
      } else {
        items_.erase(items_.begin() + static_cast<long>(pick));
      }
      // A unit is complete when all its events (2 per channel) went out.
      while (!unitOrder_.empty() && unitLeft_[unitOrder_.front()] == 0) {
        unitLeft_.erase(unitOrder_.front());
        unitOrder_.pop_front();
        pendingUnits_--;
      }
      cv_.notify_all();
    }
  }
};

// ---------------------------------------------------------------- per rank simulation
struct CommState {
  int index = 0;
  const CommSpec* spec = nullptr;
  int commRank = 0;
  CommModel model;
  void* tunerCtx = nullptr;
  void* profCtx = nullptr;
  bool tunerOk = false, profOk = false;
  ncclabi::TunerConstantsV6 constants{};
  uint64_t seq[kFuncs] = {};
  std::map<std::tuple<int, size_t, int>, int> callIndex;  // (func, nBytes, pipe) -> next call index
  // (func, nBytes, pipe) -> the configuration its previous kernel ran (algo, proto, channels, chunk):
  // Scenario::switchFactor
  std::map<std::tuple<int, size_t, int>, std::tuple<int, int, int, long long>> lastConfig;
  std::map<int, std::vector<std::string>> captured;       // group -> truth templates of the capture
  std::map<int, std::vector<std::pair<uint64_t, double>>> capturedDur;
  // GPU clock of this communicator's stream: NCCL serializes a communicator's kernels on one stream;
  // different communicators' streams are not modelled as sharing the GPU.
  uint64_t gpuNs = 0;
  uint64_t baseNs = 0;  // gpuNs at creation: the rank's clock (its computation's) is gpuNs - baseNs
  emu::FakeStream* stream = nullptr;  // --launch-clock: the stream CUDA events are recorded on
};

// Scenario::lead across processes: the positions each rank has started, per communicator, in a file that
// every emulator process of one run maps (one process per rank plays a job launched with torchrun: its
// hosts are bounded against each other by the collectives and the per-step synchronization, not by a
// shared thread). Layout: int64 started[comms][world], then int64 pid[world] (0: that rank's process has not
// registered yet). Values only grow; plain atomic loads and stores suffice.
class CrossLead {
 public:
  ~CrossLead() {
    if (base_) ::munmap(base_, bytes_);
  }
  bool open(const std::string& path, int comms, int world, std::string* err) {
    comms_ = comms;
    world_ = world;
    bytes_ = sizeof(int64_t) * static_cast<size_t>((comms + 1) * world);
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0) return fail(err, "cannot open " + path + ": " + std::strerror(errno));
    struct stat st {};
    // every process sizes the file the same; growing a shorter one only ever adds zeros
    if (::fstat(fd, &st) != 0 || (static_cast<size_t>(st.st_size) < bytes_ &&
                                  ::ftruncate(fd, static_cast<off_t>(bytes_)) != 0)) {
      ::close(fd);
      return fail(err, "cannot size " + path + ": " + std::strerror(errno));
    }
    void* m = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) return fail(err, "cannot map " + path + ": " + std::strerror(errno));
    base_ = static_cast<int64_t*>(m);
    return true;
  }
  void registerRank(int grank) {
    __atomic_store_n(&base_[pidSlot(grank)], static_cast<int64_t>(::getpid()), __ATOMIC_RELEASE);
  }
  void setStarted(int comm, int grank, long v) {
    __atomic_store_n(&base_[comm * world_ + grank], static_cast<int64_t>(v), __ATOMIC_RELEASE);
  }
  // What rank `grank` (of another process) has started of `comm`.
  long started(int comm, int grank) const {
    return static_cast<long>(__atomic_load_n(&base_[comm * world_ + grank], __ATOMIC_ACQUIRE));
  }
  // The process of `grank` registered and has died since (kill -9: it never said it was done).
  bool gone(int grank) const {
    int64_t pid = __atomic_load_n(&base_[pidSlot(grank)], __ATOMIC_ACQUIRE);
    return pid > 0 && !alive(static_cast<pid_t>(pid));
  }

 private:
  int64_t* base_ = nullptr;
  size_t bytes_ = 0;
  int comms_ = 0, world_ = 0;
  size_t pidSlot(int grank) const { return static_cast<size_t>(comms_ * world_ + grank); }
  static bool fail(std::string* err, std::string msg) {
    *err = std::move(msg);
    return false;
  }
  // A killed process stays a zombie until its parent reaps it: that is gone too.
  static bool alive(pid_t pid) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
    std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    // no procfs, or reaped between the two looks: ask kill() again
    if (!std::getline(st, line)) return !(::kill(pid, 0) != 0 && errno == ESRCH);
    size_t close = line.rfind(')');
    return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
  }
};

struct Shared {
  const Scenario* sc = nullptr;
  const Options* opt = nullptr;
  const Plugin* plugin = nullptr;
  const PerfModel* model = nullptr;
  int algoEnable[kFuncs * kAlgos];
  int protoEnable[kFuncs * kProtos];
  int minCtas = 0, maxCtas = 0;
  DivergenceBoard board;
  std::atomic<int> violations{0};
  std::atomic<int> errors{0};
  std::atomic<long> calls{0};
  std::mutex truthMu;
  std::vector<std::string> truth;
  // Scenario::initBarrier: rank threads that have created their communicators (or failed to)
  std::mutex initMu;
  std::condition_variable initCv;
  size_t initDone = 0;
  // Scenario::lead: program positions of each communicator started by each rank thread of this process
  // (kDone once the rank has finished or failed), keyed (comm index, global rank)
  static constexpr long kDone = std::numeric_limits<long>::max();
  std::mutex leadMu;
  std::condition_variable leadCv;
  std::map<std::pair<int, int>, long> started;
  std::map<int, std::pair<int, int>> leadWaiting;  // global rank -> (comm, position) it waits to start
  int leadLive = 0;       // rank threads of this process not finished
  bool leadOff = false;   // the orders deadlocked under the bound: every rank runs unbounded from then on
  CrossLead* cross = nullptr;  // Options::leadFile mapped: ranks of other processes (nullptr: not bounded)
  // order in which this process's hosts started their groups (after any lead wait): "host_seq" of a record
  std::atomic<uint64_t> hostSeq{0};
};

void violation(Shared& sh, const std::string& msg) {
  sh.violations.fetch_add(1);
  emuError("VIOLATION " + msg);
}

struct Task {
  int op = 0;  // index of the call within its group
  CallSpec call;
};

class RankRunner {
 public:
  RankRunner(Shared& sh, int grank) : sh_(sh), grank_(grank) {}

  void run() {
    const Scenario& sc = *sh_.sc;
    const HostSpec* host = sc.host(grank_);
    hiddenPct_ = host ? static_cast<uint64_t>(host->hiddenPct) : 100;
    if (sh_.plugin->profilerVersion)
      proxy_ = std::make_unique<Proxy>(sh_.plugin, sc.runahead, sc.reorder, sc.seed * 31 + static_cast<uint64_t>(grank_),
                                       host ? host->proxyDelayUs : 0);
    // Communicator creation, in scenario order: profiler init, then tuner init, same thread, same hash.
    for (size_t c = 0; c < sc.comms.size(); ++c) {
      const CommSpec& spec = sc.comms[c];
      auto it = std::find(spec.ranks.begin(), spec.ranks.end(), grank_);
      if (it == spec.ranks.end()) continue;
      auto cs = std::make_unique<CommState>();
      cs->index = static_cast<int>(c);
      cs->spec = &spec;
      cs->commRank = static_cast<int>(it - spec.ranks.begin());
      // GPUs' clocks are not synchronized: offset per rank (and per stream)
      cs->gpuNs = 1700000000000000000ULL + static_cast<uint64_t>(grank_) * 7777777ULL + c * 1000003ULL;
      cs->baseNs = cs->gpuNs;
      if (emu::fakeCudaEnabled()) {
        emu::fakeSetCurrentCtx(deviceToken());  // NCCL initializes CUDA on the rank's device before the plugins
        cs->stream = emu::fakeStreamNew(deviceToken());
      }
      if (!initComm(*cs)) {
        initArrived();
        leaveLead();
        return;
      }
      comms_[static_cast<int>(c)] = std::move(cs);
    }
    initArrived();
    uint64_t jrng = mix64(sc.seed ^ (0x4057ULL + static_cast<uint64_t>(grank_)));
    int played = 0;
    for (auto& [comm, inst] : sc.rankSchedule(grank_)) {
      if (failed_) break;
      if (host && host->killAfter >= 0 && played >= host->killAfter) killSelf();
      if (host && (host->delayUs > 0 || host->jitterUs > 0)) {
        jrng = mix64(jrng);
        uint64_t us = static_cast<uint64_t>(host->delayUs) +
                      (host->jitterUs > 0 ? jrng % static_cast<uint64_t>(host->jitterUs) : 0);
        std::this_thread::sleep_for(std::chrono::microseconds(us));
      }
      if (sc.lead > 0) {
        awaitLead(comm, inst);
      } else {
        curHostNs_ = steadyNs();
        curHostSeq_ = sh_.hostSeq.fetch_add(1);
      }
      playGroup(*comms_[comm], sc.programs[static_cast<size_t>(comm)][static_cast<size_t>(inst)]);
      ++played;
    }
    leaveLead();
    if (proxy_) proxy_->finish();
    for (auto& [idx, cs] : comms_) {
      if (cs->tunerOk) sh_.plugin->tFinalize()(cs->tunerCtx);
      if (cs->profOk) sh_.plugin->profiler->finalize(cs->profCtx);
    }
    std::lock_guard<std::mutex> lk(sh_.truthMu);
    for (std::string& s : lines_) sh_.truth.push_back(std::move(s));
  }

 private:
  Shared& sh_;
  int grank_;
  uint64_t hiddenPct_ = 100;  // HostSpec::hiddenPct
  bool failed_ = false;
  bool leftLead_ = false;     // leaveLead() ran
  uint64_t curHostSeq_ = 0;  // Shared::hostSeq of the group being played
  uint64_t curHostNs_ = 0;   // when the host started that group (CLOCK_MONOTONIC: comparable across processes)
  uint64_t pluginNs_ = 0;    // host time the group spent inside the plugin on this thread (tuner and profiler calls)
  double computeNs_ = 0;     // where the rank's compute stream has got to, on the rank's clock (GroupSpec::computeUs)

  // Runs one call into the plugin on the rank's thread, adding its wall time to pluginNs_.
  template <class F>
  void inPlugin(F f) {
    const uint64_t t0 = steadyNs();
    f();
    pluginNs_ += steadyNs() - t0;
  }
  std::unique_ptr<Proxy> proxy_;
  std::map<int, std::unique_ptr<CommState>> comms_;
  std::vector<std::string> lines_;

  // The rank's device as a CUDA context handle (--launch-clock): one per rank.
  void* deviceToken() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x10000 + grank_)); }

  // A rank's process dies mid-run (kill -9): no finalize, no truth, no summary from this process.
  void killSelf() {
    emuError("rank " + std::to_string(grank_) + ": killing this process (scenario host kill_after)");
    std::fflush(stdout);
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }

  // Scenario::lead: start position `pos` of communicator `comm` only once every rank of it played by this
  // process has started position pos - lead. Orders that deadlock under the bound (a rank playing one
  // communicator's whole program first) end the bound with a clear error as soon as every live rank thread
  // waits on another (or after 20 s, when a thread is blocked elsewhere, e.g. on a decision), and run on
  // unbounded.
  void awaitLead(int comm, int pos) {
    const Scenario& sc = *sh_.sc;
    std::unique_lock<std::mutex> lk(sh_.leadMu);
    if (!sh_.leadOff && leadBehind(grank_, comm, pos) >= 0) {
      sh_.leadWaiting[grank_] = {comm, pos};
      checkLeadDeadlock();
      // Other processes cannot notify: look again every 200 us while the rank waited for is theirs. The 20 s
      // count only time this thread was awake to look (each gap between looks counts 50 ms at most): on a
      // loaded machine a stall of the whole host is not a rank that never moves.
      using Clock = std::chrono::steady_clock;
      constexpr auto kLeadWaitMax = std::chrono::seconds(20);
      constexpr auto kLookGapMax = std::chrono::milliseconds(50);
      const auto slice = sh_.cross ? std::chrono::microseconds(200) : std::chrono::microseconds(kLookGapMax);
      Clock::duration waited{};
      auto looked = Clock::now();
      int behind = -1;
      while (!sh_.leadOff && (behind = leadBehind(grank_, comm, pos)) >= 0 && waited < kLeadWaitMax) {
        sh_.leadCv.wait_for(lk, slice);
        const auto now = Clock::now();
        waited += std::min<Clock::duration>(now - looked, kLookGapMax);
        looked = now;
      }
      if (!sh_.leadOff && behind >= 0) {
        sh_.leadOff = true;
        sh_.errors.fetch_add(1);
        emuError("lead " + std::to_string(sc.lead) + ": rank " + std::to_string(grank_) + " waited 20 s at position " +
                 std::to_string(pos) + " of comm " + sc.comms[static_cast<size_t>(comm)].name + " for rank " +
                 std::to_string(behind) + "; running unbounded");
        sh_.leadCv.notify_all();
      }
      sh_.leadWaiting.erase(grank_);
    }
    // the start time before publishing: whoever sees the new position started later (host_ns of records)
    curHostNs_ = steadyNs();
    sh_.started[{comm, grank_}] = static_cast<long>(pos) + 1;
    if (sh_.cross) sh_.cross->setStarted(comm, grank_, static_cast<long>(pos) + 1);
    curHostSeq_ = sh_.hostSeq.fetch_add(1);
    sh_.leadCv.notify_all();
  }
  void leaveLead() {  // finished or failed: nobody waits for this rank any more
    const Scenario& sc = *sh_.sc;
    std::lock_guard<std::mutex> lk(sh_.leadMu);
    if (leftLead_) return;
    leftLead_ = true;
    for (size_t c = 0; c < sc.comms.size(); ++c) {
      sh_.started[{static_cast<int>(c), grank_}] = Shared::kDone;
      if (sh_.cross) sh_.cross->setStarted(static_cast<int>(c), grank_, Shared::kDone);
    }
    sh_.leadLive--;
    checkLeadDeadlock();
    sh_.leadCv.notify_all();
  }
  // The rank of `comm` that `grank` must wait for before starting `pos` (played by this process, or by
  // another one with Options::leadFile); -1: none.
  int leadBehind(int grank, int comm, int pos) const {
    const Scenario& sc = *sh_.sc;
    for (int r : sc.comms[static_cast<size_t>(comm)].ranks) {
      if (r == grank) continue;
      long at = 0;
      if (isLocal(r)) {
        auto it = sh_.started.find({comm, r});
        at = it == sh_.started.end() ? 0 : it->second;
      } else if (sh_.cross) {
        at = sh_.cross->started(comm, r);
      } else {
        continue;
      }
      // not yet started pos - lead (a dead process is looked up only then: it costs a /proc read)
      if (at <= static_cast<long>(pos) - sc.lead && (isLocal(r) || !sh_.cross->gone(r))) return r;
    }
    return -1;
  }
  bool isLocal(int r) const { return std::find(sh_.opt->ranks.begin(), sh_.opt->ranks.end(), r) != sh_.opt->ranks.end(); }
  // Under leadMu: every live rank thread waits, and none of them may go on -> nobody ever will.
  void checkLeadDeadlock() {
    if (sh_.leadOff || sh_.leadWaiting.empty() || static_cast<int>(sh_.leadWaiting.size()) < sh_.leadLive) return;
    std::string who;
    for (const auto& [r, at] : sh_.leadWaiting) {
      int b = leadBehind(r, at.first, at.second);
      if (b < 0) return;            // woken, not yet out of its wait
      if (!isLocal(b)) return;      // another process may still move (its own threads decide; 20 s at most)
      who += " rank " + std::to_string(r) + " at position " + std::to_string(at.second) + " of comm " +
             sh_.sc->comms[static_cast<size_t>(at.first)].name + " waits for rank " + std::to_string(b) + ";";
    }
    sh_.leadOff = true;
    sh_.errors.fetch_add(1);
    emuError("lead " + std::to_string(sh_.sc->lead) + ": the scenario's orders deadlock under this bound:" + who +
             " running unbounded");
    sh_.leadCv.notify_all();
  }

  // With Scenario::initBarrier, wait for every rank thread of this process to reach this point.
  void initArrived() {
    std::unique_lock<std::mutex> lk(sh_.initMu);
    ++sh_.initDone;
    sh_.initCv.notify_all();
    if (sh_.sc->initBarrier) sh_.initCv.wait(lk, [&] { return sh_.initDone >= sh_.opt->ranks.size(); });
  }

  bool initComm(CommState& cs) {
    const Plugin& pl = *sh_.plugin;
    const int nRanks = static_cast<int>(cs.spec->ranks.size());
    cs.model.nRanks = nRanks;
    cs.model.nNodes = cs.spec->nNodes;
    int ch = cs.spec->channels;
    if (sh_.minCtas > 0) ch = std::max(ch, std::min(sh_.minCtas, kMaxChannels));
    if (sh_.maxCtas > 0) ch = std::min(ch, sh_.maxCtas);
    cs.model.nChannels = std::max(1, std::min(ch, kMaxChannels));
    defaultTunerConstants(&cs.constants);
    if (pl.profiler) {
      std::string name = cs.spec->name;
      int r = pl.profiler->init(&cs.profCtx, cs.spec->hash, &gActivationMask, name.c_str(), cs.spec->nNodes, nRanks,
                                cs.commRank, emuLogger);
      cs.profOk = r == ncclabi::kSuccess;  // a failing profiler init only disables profiling for this comm
      if (!cs.profOk) cs.profCtx = nullptr;
    }
    if (pl.hasTuner()) {
      ncclabi::NvlDomainInfoV6 nvl{cs.spec->nNodes, nRanks / cs.spec->nNodes, nRanks / cs.spec->nNodes};
      int r = pl.tInit()(&cs.tunerCtx, cs.spec->hash, static_cast<size_t>(nRanks),
                         static_cast<size_t>(cs.spec->nNodes), emuLogger, &nvl, &cs.constants);
      if (r != ncclabi::kSuccess) {
        sh_.errors.fetch_add(1);
        emuError("tuner init failed for comm " + cs.spec->name + " rank " + std::to_string(cs.commRank) +
                 ": NCCL fails communicator creation");
        failed_ = true;
        return false;
      }
      cs.tunerOk = true;
    }
    cs.model.tune(cs.constants, sh_.algoEnable, sh_.protoEnable);
    return true;
  }

  struct Batch {
    int func;
    std::vector<Task> tasks;
    size_t bytes = 0;
  };

  static std::string hex(uint64_t v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
    return b;
  }

  void playGroup(CommState& cs, const Scenario::Instance& inst) {
    const Scenario& sc = *sh_.sc;
    const GroupSpec& g = sc.groups[static_cast<size_t>(inst.group)];
    const double load = g.load >= 0 ? g.load : sc.load;
    if (inst.replay) {
      replay(cs, inst, load);
      return;
    }
    const bool capture = g.graph != 0;
    const Plugin& pl = *sh_.plugin;
    pluginNs_ = 0;
    const int mask = __atomic_load_n(&gActivationMask, __ATOMIC_RELAXED);  // re-read at every group
    const bool prof = cs.profOk;
    void* groupApi = nullptr;
    if (prof && (mask & ncclabi::kEvGroupApi)) {
      EventDescr d;
      std::memset(&d, 0, sizeof(d));
      d.type = ncclabi::kEvGroupApi;
      d.rank = cs.commRank;
      d.groupApi.graphCaptured = capture ? 1 : 0;
      d.groupApi.groupDepth = 1;
      inPlugin([&] { pl.startEvent(cs.profCtx, &groupApi, &d); });
    }
    std::vector<void*> collApi(g.calls.size(), nullptr);
    if (prof && (mask & ncclabi::kEvCollApi)) {
      for (size_t i = 0; i < g.calls.size(); ++i) {
        EventDescr d;
        std::memset(&d, 0, sizeof(d));
        d.type = ncclabi::kEvCollApi;
        d.parentObj = groupApi;
        d.rank = cs.commRank;
        d.collApi.func = ncclFuncString(g.calls[i].func);
        d.collApi.count = g.calls[i].bytes / static_cast<size_t>(g.elemSize);
        d.collApi.datatype = g.dtype.c_str();
        d.collApi.graphCaptured = capture;
        inPlugin([&] { pl.startEvent(cs.profCtx, &collApi[i], &d); });
        if (collApi[i]) inPlugin([&] { pl.profiler->stopEvent(collApi[i]); });
      }
    }
    // Aggregation: tasks sorted by size descending, binned per function in order of first appearance,
    // each bin walked ascending; consecutive tasks within 4x of the bin's first are merged.
    std::vector<Task> tasks;
    for (size_t i = 0; i < g.calls.size(); ++i) tasks.push_back({static_cast<int>(i), g.calls[i]});
    std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.call.bytes > b.call.bytes; });
    std::vector<int> binOrder;
    std::map<int, std::vector<Task>> bins;
    for (const Task& t : tasks) {
      if (!bins.count(t.call.func)) binOrder.push_back(t.call.func);
      bins[t.call.func].push_back(t);
    }
    std::vector<Batch> batches;
    for (int f : binOrder) {
      std::vector<Task>& v = bins[f];
      std::reverse(v.begin(), v.end());  // ascending
      size_t i = 0;
      while (i < v.size()) {
        Batch b;
        b.func = f;
        size_t first = v[i].call.bytes;
        b.tasks.push_back(v[i]);
        b.bytes = first;
        ++i;
        while (i < v.size() && v[i].call.bytes < 4 * first) {
          b.tasks.push_back(v[i]);
          b.bytes += v[i].call.bytes;
          ++i;
        }
        batches.push_back(b);
      }
    }
    const int numPipeOps = (static_cast<int>(g.calls.size()) + cs.model.nChannels - 1) / cs.model.nChannels;
    std::vector<void*> collHandles;
    struct Planned {
      Config applied, def;
      int usedChannels = 1;
      int tunerChannels = 0;
      int callIdx = 0;
      int chunkCalls = 0;
      uint64_t start = 0, stop = 0;
      double mean = 0;
      std::vector<std::pair<Task, uint64_t>> seqs;
      std::vector<void*> handles;  // the Coll events' (their KernelCh events' parent, stopped or not)
      bool stopped = false;        // the Coll events stopped inside their Group
      uint64_t kernel = UINT64_MAX;  // --launch-clock: the kernel's index on the stream
    };
    std::vector<Planned> plans;
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      Batch& b = batches[bi];
      Planned pl_;
      if (!decide(cs, b.func, b.bytes, numPipeOps, &pl_.applied, &pl_.def, &pl_.tunerChannels, &pl_.usedChannels)) {
        failed_ = true;
        return;
      }
      auto key = std::make_tuple(b.func, b.bytes, numPipeOps);
      pl_.callIdx = cs.callIndex[key]++;
      plans.push_back(pl_);
    }
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      Planned& p = plans[bi];
      if (!decideChunk(cs, batches[bi].func, batches[bi].bytes, &p.applied, &p.def, &p.chunkCalls)) {
        failed_ = true;
        return;
      }
      sh_.board.check(cs.index, inst.commIndex, inst.rep, static_cast<int>(bi), cs.commRank, p.applied, cs.spec->name);
    }
    // Profiler events of each batch, a kernel plan, as NCCL 2.28-2.32 emits them on the launching thread: with
    // the KernelLaunch bit (the plugin's launch clock, --launch-clock) KernelLaunch start (with the stream), the
    // launch, KernelLaunch stop; then, where the mask has Group or an event a Group holds (NCCL's
    // ncclProfilerStartGroupEvent), Group start, the plan's Coll events (parentGroup: the Group handle), their
    // stops ("enqueued"), Group stop.
    const bool launchEvents = prof && cs.stream && (mask & ncclabi::kEvKernelLaunch);
    const bool groupEvents =
        prof && (mask & (ncclabi::kEvGroup | ncclabi::kEvColl | ncclabi::kEvP2p | ncclabi::kEvProxyOp |
                         ncclabi::kEvProxyStep | ncclabi::kEvKernelCh | ncclabi::kEvNetPlugin));
    if (cs.stream) {
      emu::fakeSetCurrentCtx(deviceToken());
      emu::fakeStreamCapturing(cs.stream, capture);
    }
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      Planned& p = plans[bi];
      void* group = nullptr;
      if (launchEvents) {
        p.kernel = emu::fakeStreamBeginLaunch(cs.stream);
        EventDescr d;
        std::memset(&d, 0, sizeof(d));
        d.type = ncclabi::kEvKernelLaunch;
        d.parentObj = groupApi;
        d.rank = cs.commRank;
        d.kernelLaunch.stream = cs.stream;
        void* launch = nullptr;
        inPlugin([&] { pl.startEvent(cs.profCtx, &launch, &d); });
        emu::fakeStreamLaunched(cs.stream);
        if (launch) inPlugin([&] { pl.profiler->stopEvent(launch); });
      }
      if (groupEvents) {
        EventDescr gd;
        std::memset(&gd, 0, sizeof(gd));
        gd.type = ncclabi::kEvGroup;
        gd.rank = cs.commRank;
        inPlugin([&] { pl.startEvent(cs.profCtx, &group, &gd); });
      }
      for (const Task& t : batches[bi].tasks) {
        void* h = nullptr;
        if (prof && (mask & kCollEnableMask)) {
          EventDescr d;
          std::memset(&d, 0, sizeof(d));
          d.type = ncclabi::kEvColl;
          d.parentObj = collApi[static_cast<size_t>(t.op)];
          d.rank = cs.commRank;
          d.coll.seqNumber = cs.seq[t.call.func];
          d.coll.func = ncclFuncString(t.call.func);
          d.coll.sendBuff = reinterpret_cast<const void*>(static_cast<uintptr_t>(0x10000 + t.op * 0x1000));
          d.coll.recvBuff = reinterpret_cast<void*>(static_cast<uintptr_t>(0x20000 + t.op * 0x1000));
          size_t elems = t.call.bytes / static_cast<size_t>(g.elemSize);
          if (t.call.func == ncclabi::kAllGather || t.call.func == ncclabi::kReduceScatter)
            elems /= static_cast<size_t>(cs.model.nRanks);
          d.coll.count = elems;
          d.coll.root = 0;
          d.coll.datatype = g.dtype.c_str();
          d.coll.nChannels = static_cast<uint8_t>(taskChannels(p.usedChannels, t.call));
          d.coll.nWarps = static_cast<uint8_t>(warps(p.applied.algo, p.applied.proto));
          d.coll.algo = ncclAlgoString(p.applied.algo);
          d.coll.proto = ncclProtoString(p.applied.proto);
          d.coll.parentGroup = group;
          d.coll.kernelVariant = "emu";  // v7 (a v5/v6 profiler gets a copy without it)
          inPlugin([&] { sh_.plugin->startEvent(cs.profCtx, &h, &d); });
        }
        p.handles.push_back(h);
        p.seqs.emplace_back(t, cs.seq[t.call.func]);
        bool inc = !capture || (prof && (groupApi || collApi[static_cast<size_t>(t.op)]) && (mask & ncclabi::kEvKernelCh));
        if (inc) cs.seq[t.call.func]++;
      }
      if (groupEvents) {
        for (void* h : p.handles)
          if (h) inPlugin([&] { sh_.plugin->profiler->stopEvent(h); });
        p.stopped = true;  // the loop below skips them
        if (group) inPlugin([&] { pl.profiler->stopEvent(group); });
      }
    }
    for (Planned& p : plans)
      for (void* h : p.handles)
        if (h && !p.stopped) inPlugin([&] { sh_.plugin->profiler->stopEvent(h); });
    if (groupApi) inPlugin([&] { sh_.plugin->profiler->stopEvent(groupApi); });
    // The rank's computation beside this group (GroupSpec::computeUs), drawn alike on every rank. The
    // group's kernels wait for their input: the computation enqueued before them.
    const uint64_t inputReady = cs.baseNs + static_cast<uint64_t>(computeNs_);
    const bool overlap = g.computeUs > 0 && g.wait != GroupSpec::kWaitSelf;
    emu::ComputeRun compute;
    if (g.hasCompute()) {
      const uint64_t ckey = mix64(sc.seed ^ mix64(cs.spec->hash ^ mix64(0xc0317eULL ^ (static_cast<uint64_t>(inst.commIndex) << 20) ^
                                                                        (static_cast<uint64_t>(inst.rep) << 8))));
      compute.leftNs = g.computeUs * 1000.0 * (sc.noise ? sh_.model->noiseFactor(ckey) : 1.0);
      compute.atNs = computeNs_;
      if (g.wait == GroupSpec::kWaitPrev) compute.atNs = std::max(compute.atNs, static_cast<double>(cs.gpuNs - cs.baseNs));
    }
    const double computeStartNs = compute.atNs;
    // The GPU: batches run back to back; kernel-channel events go to the proxy thread.
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      Planned& p = plans[bi];
      const Batch& b = batches[bi];
      p.mean = sh_.model->meanUs(b.func, cs.model.nRanks, b.bytes, p.applied.algo, p.applied.proto, p.usedChannels,
                                 static_cast<size_t>(p.applied.chunk), load);
      uint64_t key = mix64(sc.seed ^ mix64(cs.spec->hash ^ mix64((static_cast<uint64_t>(inst.commIndex) << 20) ^
                                                                  (static_cast<uint64_t>(inst.rep) << 8) ^ bi)));
      const double noise = sc.noise ? sh_.model->noiseFactor(key) : 1.0;
      // With computation the load slows the kernel only while the two overlap (ComputeRun); without, the
      // whole kernel (the calibrated model of `autoccl bench coll --load`).
      const double alone = overlap ? sh_.model->meanUs(b.func, cs.model.nRanks, b.bytes, p.applied.algo, p.applied.proto,
                                                       p.usedChannels, static_cast<size_t>(p.applied.chunk), 0.0)
                                   : p.mean;
      // Scenario::switchFactor: the first kernel after its task's configuration changed runs longer.
      double switchSlow = 1;
      if (!capture) {
        const auto ran = std::make_tuple(p.applied.algo, p.applied.proto, p.usedChannels,
                                         static_cast<long long>(p.applied.chunk));
        auto [last, first] = cs.lastConfig.try_emplace(std::make_tuple(b.func, b.bytes, numPipeOps), ran);
        if (!first && last->second != ran) switchSlow = sc.switchFactor;
        last->second = ran;
      }
      uint64_t dur = std::max<uint64_t>(1000, static_cast<uint64_t>(alone * noise * switchSlow * 1000.0));
      // hidden: time the stream is held around the kernel that its channel timestamps do not cover
      const uint64_t streamReached = std::max(cs.gpuNs, inputReady);  // a CUDA event recorded before the launch
      p.start = streamReached + sc.gapNs + sc.hiddenNs(p.applied.algo, p.applied.proto) * hiddenPct_ / 100;
      const uint64_t wait = arrivalWaitNs(cs, key);
      if (overlap) {
        const double rankStart = static_cast<double>(p.start + wait - cs.baseNs);
        const double end = compute.kernel(rankStart, static_cast<double>(dur), p.mean / alone,
                                          sh_.model->gemmSlowdown(p.usedChannels, p.applied.proto, load));
        p.stop = cs.baseNs + std::max(static_cast<uint64_t>(end), p.start + wait + 1000 - cs.baseNs);
      } else {
        p.stop = p.start + wait + dur;
      }
      cs.gpuNs = p.stop;
      if (p.kernel != UINT64_MAX) emu::fakeStreamResolve(cs.stream, p.kernel, streamReached, p.stop);
      if (capture) {
        cs.capturedDur[inst.group].emplace_back(key, p.mean);
      } else if (prof && proxy_ && (mask & ncclabi::kEvKernelCh)) {
        std::vector<ChannelEvent> evs;
        uint64_t jit = mix64(key ^ 0xabcdef);
        for (size_t ti = 0; ti < b.tasks.size(); ++ti) {
          int nch = taskChannels(p.usedChannels, b.tasks[ti].call);
          for (int c = 0; c < nch; ++c) {
            ChannelEvent e;
            e.profCtx = cs.profCtx;
            e.parent = p.handles[ti];
            e.channelId = static_cast<uint8_t>(c % kMaxChannels);
            jit = mix64(jit);
            uint64_t j1 = (c == 0) ? 0 : jit % std::max<uint64_t>(1, std::min<uint64_t>(400, dur / 8));
            uint64_t j2 = (c == nch - 1) ? 0 : (jit >> 32) % std::max<uint64_t>(1, std::min<uint64_t>(400, dur / 8));
            e.start = p.start + j1;
            e.stop = p.stop - j2;
            evs.push_back(e);
          }
        }
        proxy_->push(std::move(evs));
      }
      sh_.calls.fetch_add(static_cast<long>(b.tasks.size()));
      for (size_t ti = 0; ti < b.tasks.size(); ++ti) {
        const Task& t = b.tasks[ti];
        std::string rec = record(cs, inst, g, static_cast<int>(bi), b, p.applied, p.def, p.usedChannels, p.tunerChannels,
                                 p.callIdx, numPipeOps, t, p.seqs[ti].second, capture ? 1 : 0, p.start, p.stop, p.mean,
                                 load);
        lines_.push_back(rec);
      }
    }
    if (g.hasCompute()) {
      if (g.wait == GroupSpec::kWaitSelf) compute.atNs = std::max(compute.atNs, static_cast<double>(cs.gpuNs - cs.baseNs));
      // Its span: from its start after its waits (computeStartNs, taken before the kernels above moved
      // compute.atNs; with wait=self only now) to its end. The fluid never pauses: a kernel only slows it.
      const double startNs = g.wait == GroupSpec::kWaitSelf ? compute.atNs : computeStartNs;
      computeNs_ = std::max(computeNs_, compute.end());
      if (sh_.opt->computeSpans && compute.end() > startNs) {
        // on the communicator's stream clock, as the calls' start_ns/stop_ns (truncated, as inputReady is)
        char buf[256];
        std::snprintf(buf, sizeof(buf),
                      "{\"ev\":\"compute\",\"comm\":\"%s\",\"rank\":%d,\"grank\":%d,\"group\":%d,\"rep\":%d,"
                      "\"start_ns\":%llu,\"end_ns\":%llu}",
                      cs.spec->name.c_str(), cs.commRank, grank_, inst.commIndex, inst.rep,
                      static_cast<unsigned long long>(cs.baseNs + static_cast<uint64_t>(startNs)),
                      static_cast<unsigned long long>(cs.baseNs + static_cast<uint64_t>(compute.end())));
        lines_.push_back(buf);
      }
    }
    if (g.stepEnd) {
      char buf[256];
      std::snprintf(buf, sizeof(buf),
                    "{\"ev\":\"step\",\"comm\":\"%s\",\"rank\":%d,\"grank\":%d,\"group\":%d,\"rep\":%d,"
                    "\"end_ns\":%llu,\"compute_ns\":%llu}",
                    cs.spec->name.c_str(), cs.commRank, grank_, inst.commIndex, inst.rep,
                    static_cast<unsigned long long>(cs.gpuNs - cs.baseNs), static_cast<unsigned long long>(computeNs_));
      lines_.push_back(buf);
    }
  }

  void replay(CommState& cs, const Scenario::Instance& inst, double load) {
    // A CUDA graph replay: no tuner call, no profiler event; the GPU time still passes.
    const Scenario& sc = *sh_.sc;
    auto it = cs.capturedDur.find(inst.group);
    if (it == cs.capturedDur.end()) return;
    size_t bi = 0;
    for (auto& [key, mean] : it->second) {
      uint64_t k2 = mix64(key ^ (static_cast<uint64_t>(inst.rep + 1) << 40));
      double us = mean * (sc.noise ? sh_.model->noiseFactor(k2) : 1.0);
      uint64_t dur = std::max<uint64_t>(1000, static_cast<uint64_t>(us * 1000.0));
      // like a launched kernel, a replayed one waits for its input (the computation enqueued before it)
      uint64_t start = std::max(cs.gpuNs, cs.baseNs + static_cast<uint64_t>(computeNs_)) + sc.gapNs;
      cs.gpuNs = start + dur;
      char buf[256];
      std::snprintf(buf, sizeof(buf),
                    "{\"ev\":\"replay\",\"comm\":\"%s\",\"rank\":%d,\"grank\":%d,\"group\":%d,\"rep\":%d,\"batch\":%zu,"
                    "\"dur_ns\":%llu,\"load\":%.3f}",
                    cs.spec->name.c_str(), cs.commRank, grank_, inst.commIndex, inst.rep, bi,
                    static_cast<unsigned long long>(dur), load);
      lines_.push_back(buf);
      ++bi;
    }
  }

  // Scenario::skewNs: how long this rank's kernel waits for the communicator's last rank to arrive. Every
  // rank's arrival is drawn from the batch's key, so all ranks (and processes) agree on who is last.
  uint64_t arrivalWaitNs(const CommState& cs, uint64_t key) const {
    const uint64_t skew = sh_.sc->skewNs;
    if (skew == 0) return 0;
    auto arrival = [&](size_t r) { return mix64(key ^ mix64(0x5eed0000ULL + r)) % skew; };
    uint64_t last = 0;
    for (size_t r = 0; r < cs.spec->ranks.size(); ++r) last = std::max(last, arrival(r));
    return last - arrival(static_cast<size_t>(cs.commRank));
  }

  static int warps(int algo, int proto) {
    int nt = proto == kLL128 ? 640 : 512;
    if (proto == kSimple && algo == kRing) nt += 32;
    if (algo == kTree) nt = 640;
    return nt / 32;
  }
  static int taskChannels(int maxCh, const CallSpec& c) {
    // Channels a task spreads over: NCCL gives each channel at least 32 KiB of traffic.
    size_t traffic = c.func == ncclabi::kAllReduce ? 2 * c.bytes : c.bytes;
    size_t want = (traffic + (32u << 10) - 1) / (32u << 10);
    return static_cast<int>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(maxCh), want)));
  }

  // getAlgoInfo + channel cap, exactly the inputs and rules NCCL applies (the chunk: decideChunk).
  bool decide(CommState& cs, int func, size_t nBytes, int numPipeOps, Config* applied, Config* def, int* tunerCh,
              int* used) {
    float table[kAlgos][kProtos];
    cs.model.costTable(func, nBytes, numPipeOps, table);
    float orig[kAlgos][kProtos];
    std::memcpy(orig, table, sizeof(table));
    // What NCCL alone would do.
    if (!pickAlgoProto(orig, &def->algo, &def->proto)) {
      sh_.errors.fetch_add(1);
      emuError(std::string("no algorithm/protocol available for ") + ncclFuncString(func) + " (NCCL_ALGO/NCCL_PROTO)");
      return false;
    }
    def->maxChannels = std::min(cs.model.defaultChannels(def->algo, def->proto, nBytes), cs.model.nChannels);
    def->chunk = 0;
    int nChannels = 0;
    if (cs.tunerOk) {
      int r = 0;
      inPlugin([&] {
        r = sh_.plugin->tGetCollInfo()(cs.tunerCtx, static_cast<ncclabi::Func>(func), nBytes, numPipeOps,
                                       reinterpret_cast<float**>(table), kAlgos, kProtos, 0, &nChannels);
      });
      if (r != ncclabi::kSuccess) {
        sh_.errors.fetch_add(1);
        emuError("getCollInfo returned " + std::to_string(r) + ": NCCL fails the collective");
        return false;
      }
    }
    *tunerCh = nChannels;
    if (!pickAlgoProto(table, &applied->algo, &applied->proto)) {
      sh_.errors.fetch_add(1);
      emuError(std::string("no algorithm/protocol left after the tuner for ") + ncclFuncString(func));
      return false;
    }
    if (orig[applied->algo][applied->proto] < 0) {
      violation(sh_, std::string("tuner made NCCL choose an unsupported pair ") + algoName(applied->algo) + "/" +
                         protoName(applied->proto) + " for " + collName(func));
    }
    int nMax = cs.model.defaultChannels(applied->algo, applied->proto, nBytes);
    if (nChannels < 0 || nChannels > 255) {
      violation(sh_, "tuner set nChannels=" + std::to_string(nChannels));
    } else if (nChannels > 0) {
      nMax = nChannels;
    }
    applied->maxChannels = std::min(nMax, cs.model.nChannels);
    // The kernel runs on the channels the batch spreads over, not on the ceiling asked for: a request above
    // that spread buys nothing (and the profiler reports the spread, so timing it at the ceiling would
    // credit a tuner with a speed-up it cannot see or reproduce).
    *used = taskChannels(applied->maxChannels, CallSpec{func, nBytes});
    return true;
  }

  // Chunk per channel partition (lo / hi / mid) of the batch, as NCCL >= 2.30.3 asks tuner v6: while it
  // schedules the group's tasks onto channels, after it has asked getCollInfo for every batch of the group
  // (enqueue.cc: ncclPrepareTasks, then scheduleCollTasksToPlan), so a tuner cannot tell which batch asks.
  bool decideChunk(CommState& cs, int func, size_t nBytes, Config* applied, Config* def, int* chunkCalls) {
    size_t bufMax = 0;
    const int ch = std::max(1, taskChannels(applied->maxChannels, CallSpec{func, nBytes}));
    const size_t part = std::max<size_t>(1, nBytes / static_cast<size_t>(ch));
    const int nParts = ch >= 3 ? 3 : ch;
    size_t defChunk = cs.model.defaultChunk(func, def->algo, def->proto, part, &bufMax);
    def->chunk = static_cast<int>(defChunk / CommModel::grainSize(def->proto) * CommModel::grainSize(def->proto));
    size_t chunk0 = 0;
    *chunkCalls = 0;
    for (int i = 0; i < nParts; ++i) {
      size_t bm = 0;
      size_t c = cs.model.defaultChunk(func, applied->algo, applied->proto, part, &bm);
      auto fn = sh_.plugin->tGetChunkSize();
      if (cs.tunerOk && fn) {
        size_t t = c;
        int r = 0;
        inPlugin([&] { r = fn(cs.tunerCtx, static_cast<ncclabi::Func>(func), part, applied->algo, applied->proto, 1, &t); });
        (*chunkCalls)++;
        if (r != ncclabi::kSuccess) {
          sh_.errors.fetch_add(1);
          emuError("getChunkSize returned " + std::to_string(r) + ": NCCL fails the collective");
          return false;
        }
        c = std::min(t, bm);
      }
      c = c / CommModel::grainSize(applied->proto) * CommModel::grainSize(applied->proto);
      if (c == 0) violation(sh_, "chunk size below the protocol grain");
      if (i == 0) chunk0 = c;
    }
    applied->chunk = static_cast<int>(chunk0);
    return true;
  }

  std::string record(const CommState& cs, const Scenario::Instance& inst, const GroupSpec& g, int batch, const Batch& b,
                     const Config& a, const Config& d, int used, int tunerCh, int callIdx, int pipe, const Task& t,
                     uint64_t seq, int graph, uint64_t start, uint64_t stop, double mean, double load) {
    (void)g;
    std::ostringstream o;
    o << "{\"ev\":\"call\",\"comm\":\"" << cs.spec->name << "\",\"hash\":\"" << hex(cs.spec->hash)
      << "\",\"rank\":" << cs.commRank << ",\"grank\":" << grank_ << ",\"nranks\":" << cs.model.nRanks
      << ",\"group\":" << inst.commIndex << ",\"rep\":" << inst.rep << ",\"op\":" << t.op << ",\"batch\":" << batch
      << ",\"batch_size\":" << b.tasks.size() << ",\"seq\":" << seq << ",\"coll\":\"" << collName(t.call.func)
      << "\",\"bytes\":" << t.call.bytes << ",\"task_bytes\":" << b.bytes << ",\"pipe\":" << pipe
      << ",\"call\":" << callIdx << ",\"algo\":\"" << algoName(a.algo) << "\",\"proto\":\"" << protoName(a.proto)
      << "\",\"channels\":" << a.maxChannels << ",\"used_channels\":" << taskChannels(used, t.call)
      << ",\"chunk\":" << a.chunk << ",\"tuner_channels\":" << tunerCh << ",\"def_algo\":\"" << algoName(d.algo)
      << "\",\"def_proto\":\"" << protoName(d.proto) << "\",\"def_channels\":" << d.maxChannels
      << ",\"def_chunk\":" << d.chunk << ",\"comm_channels\":" << cs.model.nChannels << ",\"graph\":" << graph
      << ",\"start_ns\":" << start << ",\"stop_ns\":" << stop << ",\"dur_ns\":" << (stop - start)
      << ",\"model_us\":" << mean << ",\"load\":" << load << ",\"host_seq\":" << curHostSeq_ << ",\"host_ns\":" << curHostNs_
      << ",\"plugin_ns\":" << pluginNs_
      << ",\"gemm_slow\":" << sh_.model->gemmSlowdown(used, a.proto, load) << "}";
    return o.str();
  }
};

// ---------------------------------------------------------------- main
void usage(FILE* to = stderr) {
  std::fprintf(to,
               "usage: autoccl-emu --scenario FILE --ranks R[,R..] [--plugin LIB | --no-plugin] [--model JSON]\n"
               "                   [--truth OUT.jsonl] [--tuner-version auto|5|6] [--profiler-version auto|5|6|7]\n"
               "                   [--no-tuner] [--no-profiler] [--launch-clock [--kernel-lag-us US]] [--lead-file PATH]\n"
               "                   [--compute-spans] [--verbose]\n"
               "       --compute-spans: a {\"ev\":\"compute\"} truth record per group's computation span\n"
               "       --lead-file: the scenario's lead also bounds ranks played by the other processes given\n"
               "                    the same PATH (one process per rank)\n"
               "       autoccl-emu --eval [--model JSON]   (stdin: coll nranks bytes algo proto channels chunk load)\n");
}

// One output line per input line (callers pair them up): a line that is not a valid query prints nan, says why
// on stderr, and makes the exit status 2.
int evalMode(const PerfModel& m) {
  std::string line;
  int bad = 0;
  for (long lineNo = 1; std::getline(std::cin, line); ++lineNo) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream in(line);
    std::string coll, algo, proto, extra;
    long long nranks = 0, bytes = 0, ch = 0, chunk = 0;
    double load = 0;
    const bool read = static_cast<bool>(in >> coll >> nranks >> bytes >> algo >> proto >> ch >> chunk >> load);
    const int f = parseColl(coll), a = parseAlgo(algo), p = parseProto(proto);
    std::string why;
    if (!read || (in >> extra)) why = "expected 'coll nranks bytes algo proto channels chunk load'";
    else if (f < 0) why = "unknown collective '" + coll + "'";
    else if (a < 0) why = "unknown algorithm '" + algo + "'";
    else if (p < 0) why = "unknown protocol '" + proto + "'";
    else if (nranks < 1 || nranks > 1000000) why = "nranks must be in [1, 1000000]";
    else if (bytes < 0) why = "bytes must be >= 0";
    else if (ch < 1 || ch > 64) why = "channels must be in [1, 64]";
    else if (chunk < 0) why = "chunk must be >= 0";
    else if (!(load >= 0 && load <= 1)) why = "load must be in [0, 1]";
    if (!why.empty()) {
      std::printf("nan\n");
      emuError("--eval line " + std::to_string(lineNo) + ": " + why);
      ++bad;
      continue;
    }
    std::printf("%.6f\n", m.meanUs(f, static_cast<int>(nranks), static_cast<size_t>(bytes), a, p, static_cast<int>(ch),
                                   static_cast<size_t>(chunk), load));
  }
  return bad ? 2 : 0;
}

// "--ranks 0,2,3": distinct ranks, each a non-negative integer.
bool parseRanks(const std::string& text, std::vector<int>* ranks) {
  std::istringstream in(text);
  std::string tok;
  while (std::getline(in, tok, ',')) {
    char* end = nullptr;
    const long r = std::strtol(tok.c_str(), &end, 10);
    if (tok.empty() || *end != '\0' || r < 0 || r > 1000000) {
      emuError("--ranks takes distinct ranks in [0, 1000000] separated by commas, not '" + text + "'");
      return false;
    }
    if (std::find(ranks->begin(), ranks->end(), static_cast<int>(r)) != ranks->end()) {
      emuError("--ranks names rank " + std::to_string(r) + " twice");
      return false;
    }
    ranks->push_back(static_cast<int>(r));
  }
  if (ranks->empty()) emuError("--ranks names no rank");
  return !ranks->empty();
}

int envInt(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x <= 0 || x > 100000) return 0;
  return static_cast<int>(x);
}

int mainImpl(int argc, char** argv) {
  Options opt;
  bool eval = false;
  std::set<std::string> given;  // options that take a value: a second one would silently replace the first
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    static const std::set<std::string> kValued = {"--scenario", "--plugin",        "--model",
                                                  "--truth",    "--lead-file",     "--ranks",
                                                  "--tuner-version", "--profiler-version", "--kernel-lag-us"};
    if (kValued.count(a) && !given.insert(a).second) {
      emuError(a + " given twice");
      return 2;
    }
    // Each refusal names the option and what it takes: a bare usage text left the user to guess
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        emuError(a + " needs a value");
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    auto version = [&](const std::string& v, int newest) {
      if (v == "auto") return 0;
      for (int k = 5; k <= newest; ++k)
        if (v == std::to_string(k)) return k;
      std::string list = "auto";
      for (int k = 5; k <= newest; ++k) list += "|" + std::to_string(k);
      emuError(a + " takes " + list + ", not '" + v + "'");
      std::exit(2);
    };
    if (a == "--scenario") opt.scenarioPath = next();
    else if (a == "--plugin") opt.pluginPath = next();
    else if (a == "--model") opt.modelPath = next();
    else if (a == "--truth") opt.truthPath = next();
    else if (a == "--lead-file") opt.leadFile = next();
    else if (a == "--ranks") {
      if (!parseRanks(next(), &opt.ranks)) return 2;
    } else if (a == "--tuner-version") opt.tunerWant = version(next(), 6);
    else if (a == "--profiler-version") opt.profilerWant = version(next(), 7);
    else if (a == "--no-plugin") opt.noPlugin = true;
    else if (a == "--no-tuner") opt.noTuner = true;
    else if (a == "--no-profiler") opt.noProfiler = true;
    else if (a == "--compute-spans") opt.computeSpans = true;
    else if (a == "--launch-clock") emu::fakeCudaEnable();
    else if (a == "--kernel-lag-us") {
      const std::string v = next();
      char* end = nullptr;
      const unsigned long long us = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || us > 60000000ULL) {
        emuError("--kernel-lag-us takes microseconds in [0, 60000000], not '" + v + "'");
        return 2;
      }
      emu::fakeSetKernelLag(us);
    }
    else if (a == "--verbose") gVerbose = true;
    else if (a == "--eval") eval = true;
    else if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else {
      emuError("unknown option '" + a + "'");
      usage();
      return 2;
    }
  }
  if (opt.noPlugin && !opt.pluginPath.empty()) {
    emuError("--plugin and --no-plugin exclude each other");
    return 2;
  }
  PerfModel model = PerfModel::builtin();
  if (!opt.modelPath.empty()) {
    std::string err;
    if (!model.loadFile(opt.modelPath, &err)) {
      emuError(err);
      return 2;
    }
  }
  if (eval) return evalMode(model);
  if (opt.scenarioPath.empty() || opt.ranks.empty()) {
    emuError(opt.scenarioPath.empty() ? "--scenario FILE is required" : "--ranks is required");
    usage();
    return 2;
  }
  std::ifstream in(opt.scenarioPath);
  if (!in) {
    emuError("cannot read scenario " + opt.scenarioPath);
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  Scenario sc;
  std::string err;
  if (!sc.parse(ss.str(), &err)) {
    emuError(err);
    return 2;
  }
  if (sc.noiseSigma > 0) model.sigma = sc.noiseSigma;
  for (int r : opt.ranks) {
    bool member = false;
    for (const CommSpec& c : sc.comms) member |= std::find(c.ranks.begin(), c.ranks.end(), r) != c.ranks.end();
    if (!member) {
      emuError("rank " + std::to_string(r) + " is in no comm of the scenario");
      return 2;
    }
  }
  // Opened before the run: a path the truth cannot take was found only once the whole run had been played
  std::ofstream truthOut;
  if (!opt.truthPath.empty()) {
    errno = 0;
    truthOut.open(opt.truthPath);
    if (!truthOut) {
      const std::string why = errno ? std::string(" (") + std::strerror(errno) + ")" : std::string();
      emuError("--truth takes a file this process can create or overwrite, not '" + opt.truthPath + "'" + why);
      return 2;
    }
  }
  Shared sh;
  sh.sc = &sc;
  sh.opt = &opt;
  sh.leadLive = static_cast<int>(opt.ranks.size());
  CrossLead cross;
  if (!opt.leadFile.empty() && sc.lead > 0) {
    int world = 0;
    for (const CommSpec& c : sc.comms)
      for (int r : c.ranks) world = std::max(world, r + 1);
    if (!cross.open(opt.leadFile, static_cast<int>(sc.comms.size()), world, &err)) {
      emuError("--lead-file: " + err);
      return 2;
    }
    for (int r : opt.ranks) cross.registerRank(r);
    sh.cross = &cross;
  }
  sh.model = &model;
  for (int& v : sh.algoEnable) v = 1;
  for (int f = 0; f < kFuncs; ++f)
    for (int p = 0; p < kProtos; ++p) sh.protoEnable[f * kProtos + p] = p == kLL128 ? 2 : 1;
  if (const char* s = std::getenv("NCCL_PROTO")) {
    if (!parseEnableList(s, nullptr, kProtos, sh.protoEnable, &err)) {
      emuError("NCCL WARN " + err + " (NCCL fails communicator creation)");
      return 2;
    }
  }
  if (const char* s = std::getenv("NCCL_ALGO")) {
    if (!parseEnableList(s, nullptr, kAlgos, sh.algoEnable, &err)) {
      emuError("NCCL WARN " + err + " (NCCL fails communicator creation)");
      return 2;
    }
  }
  sh.minCtas = envInt("NCCL_MIN_CTAS") ? envInt("NCCL_MIN_CTAS") : envInt("NCCL_MIN_NCHANNELS");
  sh.maxCtas = envInt("NCCL_MAX_CTAS") ? envInt("NCCL_MAX_CTAS") : envInt("NCCL_MAX_NCHANNELS");
  Plugin plugin;
  if (!opt.noPlugin && !opt.pluginPath.empty())
    loadPlugin(opt.pluginPath, opt.tunerWant, opt.profilerWant, opt.noTuner, opt.noProfiler, &plugin);
  sh.plugin = &plugin;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r : opt.ranks) threads.emplace_back([&sh, r] { RankRunner(sh, r).run(); });
  for (std::thread& t : threads) t.join();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (truthOut.is_open()) {
    for (const std::string& s : sh.truth) truthOut << s << '\n';
    truthOut.flush();
    if (!truthOut) {
      emuError("cannot write " + opt.truthPath);
      return 2;
    }
  }
  std::printf(
      "{\"ev\":\"summary\",\"pid\":%d,\"ranks\":%zu,\"calls\":%ld,\"tuner\":%d,\"profiler\":%d,\"tuner_name\":\"%s\","
      "\"profiler_name\":\"%s\",\"warns\":%d,\"divergences\":%d,\"violations\":%d,\"errors\":%d,\"wall_s\":%.3f,"
      "\"model\":\"%s\"}\n",
      static_cast<int>(getpid()), opt.ranks.size(), sh.calls.load(), plugin.tunerVersion, plugin.profilerVersion,
      plugin.tunerName.c_str(), plugin.profilerName.c_str(), gWarnCount.load(), sh.board.count.load(),
      sh.violations.load(), sh.errors.load(), wall, model.source.c_str());
  std::fflush(stdout);
  if (sh.errors.load()) return 1;
  if (sh.board.count.load() || sh.violations.load()) return 3;
  return 0;
}

}  // namespace
}  // namespace emu

// Plugins may look NCCL's version up in the process (dlsym(RTLD_DEFAULT, "ncclGetVersion")), as they would
// inside a program linked with libnccl. AUTOCCL_EMU_NCCL_VERSION overrides the emulated 2.28.9.
extern "C" __attribute__((visibility("default"))) int ncclGetVersion(int* version) {
  const char* v = std::getenv("AUTOCCL_EMU_NCCL_VERSION");
  *version = v && *v ? std::atoi(v) : 22809;
  return 0;
}

int main(int argc, char** argv) {
  // A malformed override is an error, not NCCL version 0 (atoi) in the plugin's hands.
  if (const char* v = std::getenv("AUTOCCL_EMU_NCCL_VERSION"); v && *v) {
    const std::string s = v;
    if (s.size() < 4 || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) {
      std::fprintf(stderr, "autoccl-emu: AUTOCCL_EMU_NCCL_VERSION='%s' must be NCCL's version code, e.g. 22809 for 2.28.9\n",
                   v);
      return 2;
    }
  }
  return emu::mainImpl(argc, argv);
}
