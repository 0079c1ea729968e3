// libautoccl-nccl.so: the NCCL-facing shim. Exports tuner v5/v6 and profiler v5/v6 from one library
// so that both plugin types share one process state. It converts NCCL's arguments for the engine,
// pairs the profiler and tuner contexts of one (communicator, rank), and never decides anything.
//
// Rules at this boundary: never throw across the C ABI, never return an error to NCCL for our own
// problems (an error fails the collective or the communicator), leave NCCL's inputs untouched
// whenever we cannot do better.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/context.h"
#include "nccl/abi/nccl_plugin_abi.h"
#include "nccl/launch_clock.h"

#ifndef AUTOCCL_VERSION
#define AUTOCCL_VERSION "0.1.0"
#endif

namespace {

using autoccl::engine::Context;
using autoccl::engine::CostTable;
using autoccl::engine::LogFn;
using autoccl::engine::LogLevel;
using autoccl::engine::Mode;
using autoccl::engine::Runtime;
using autoccl::engine::TimingMatcher;
using autoccl::shim::LaunchClock;

constexpr int kMinNcclVersion = 22803;  // first release with tuner v5 / profiler v5
// What the profiler asks NCCL for while something is timed. Launch clock: the kernel launches (to record
// CUDA events around them) and the Coll events that name the calls; NCCL adds no proxy work for these.
// Kernel clock: Coll events and their channels' kernel timestamps.
constexpr int kLaunchTimingMask = ncclabi::kEvColl | ncclabi::kEvKernelLaunch;
constexpr int kKernelTimingMask = ncclabi::kEvColl | ncclabi::kEvKernelCh;
const char* const kBanner = "autoccl " AUTOCCL_VERSION " (tuner v5/v6, profiler v5/v6)";

LogFn makeLog(ncclabi::Logger logger) {
  return [logger](LogLevel level, const std::string& msg) {
    if (!logger) {
      // No NCCL logger (a test harness): warnings still reach a human.
      if (level == LogLevel::Warn) std::fprintf(stderr, "autoccl WARN %s\n", msg.c_str());
      return;
    }
    if (level == LogLevel::Warn) {
      logger(ncclabi::kLogWarn, ncclabi::kLogSubsysTuning | ncclabi::kLogSubsysEnv, __FILE__, __LINE__, "%s",
             msg.c_str());
    } else {
      logger(ncclabi::kLogInfo, ncclabi::kLogSubsysTuning, __FILE__, __LINE__, "%s", msg.c_str());
    }
  };
}

void flushTraceAtExit();

// One per process, never destroyed: NCCL threads may still call in while static destructors run.
Runtime& runtime() {
  static Runtime* rt = [] {
    int version = 0;
    using GetVersionFn = int (*)(int*);
    if (auto fn = reinterpret_cast<GetVersionFn>(dlsym(RTLD_DEFAULT, "ncclGetVersion"))) {
      int v = 0;
      if (fn(&v) == 0) version = v;
    }
    auto* r = new Runtime(autoccl::engine::loadSettings([](const char* n) { return std::getenv(n); }), version,
                          kMinNcclVersion);
    std::atexit(flushTraceAtExit);
    return r;
  }();
  return *rt;
}

void flushTraceAtExit() {
  // The process serving the online coordinator keeps it up while other processes still use it.
  if (auto* c = runtime().coordination()) c->lingerAtExit();
  runtime().trace().flush();
}

// Profiler init runs just before tuner init of the same communicator, on the same thread, with the
// same comm hash (NCCL init.cc): the profiler leaves its context here for the tuner to pick up.
// A small list, not one slot: nothing forbids another communicator's profiler init in between.
struct PendingPair {
  uint64_t commId;
  std::shared_ptr<Context> ctx;
};
thread_local std::vector<PendingPair> tlsPending;

struct TunerCtx {
  std::shared_ptr<Context> ctx;  // null: behave as no tuner
  // AUTOCCL_NCCL_CHANNELS with valid settings, applied even where no decision source could be built:
  // a rank whose tuner gave up must cap NCCL's choice exactly like the ranks whose tuner left it to NCCL.
  int ncclChannels = 0;
  bool failureShown = false;  // a failed collective's reason went to stderr (enqueue thread only)
};
struct ProfilerCtx {
  std::shared_ptr<Context> ctx;  // null: no events wanted
  LaunchClock* clock = nullptr;  // null: KernelCh timing
  // The launch begun on this (comm, rank) whose plan's Group event has not come yet (enqueue thread).
  std::mutex openMu;
  LaunchClock::Launch* open = nullptr;
};

// The process's timing method, settled once: the launch clock unless the settings ask for kernel
// timestamps or CUDA's driver cannot be reached.
LaunchClock* launchClock(const LogFn& log) {
  static LaunchClock* clock = [&] {
    if (runtime().settings().clock != autoccl::engine::Settings::Clock::Launch) return static_cast<LaunchClock*>(nullptr);
    LaunchClock* c = LaunchClock::instance();
    if (!c && log) log(LogLevel::Info, "autoccl: CUDA driver API not found; timing calls by kernel timestamps (KernelCh)");
    return c;
  }();
  return clock;
}

// ------------------------------------------------------------------------------------------ tuner

ncclabi::Result tunerInit(bool chunkCallback, void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                          ncclabi::Logger logger, ncclabi::NvlDomainInfo* nvl) {
  if (!context) return ncclabi::kSuccess;
  *context = nullptr;
  try {
    LogFn log = makeLog(logger);
    Runtime& rt = runtime();
    rt.announce(log, kBanner);
    auto* t = new TunerCtx();
    *context = t;
    std::shared_ptr<Context> ctx;
    for (size_t i = 0; i < tlsPending.size(); ++i) {
      if (tlsPending[i].commId == commId) {
        ctx = std::move(tlsPending[i].ctx);
        tlsPending.erase(tlsPending.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    if (rt.disabled() || rt.settings().mode == Mode::Off) return ncclabi::kSuccess;
    t->ncclChannels = rt.settings().ncclChannels;
    if (!ctx) ctx = std::make_shared<Context>(rt, commId);
    if (ctx->attachTuner(static_cast<int>(nRanks), static_cast<int>(nNodes), nvl ? nvl->nNvlDomains : 0, log,
                         chunkCallback)) {
      t->ctx = std::move(ctx);
    }
  } catch (...) {
    // Out of memory or worse: NCCL continues without our tuning.
  }
  return ncclabi::kSuccess;
}

// NCCL loads the newest interface it knows: v6 (2.30.3+) calls getChunkSize, v5 does not.
ncclabi::Result tunerInitV5(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclabi::Logger logger,
                            ncclabi::NvlDomainInfo* nvl, ncclabi::TunerConstants* /*constants*/) {
  return tunerInit(false, context, commId, nRanks, nNodes, logger, nvl);
}
ncclabi::Result tunerInitV6(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclabi::Logger logger,
                            ncclabi::NvlDomainInfo* nvl, ncclabi::TunerConstants* /*constants*/) {
  return tunerInit(true, context, commId, nRanks, nNodes, logger, nvl);
}

ncclabi::Result tunerGetCollInfo(void* context, ncclabi::Func coll, size_t nBytes, int numPipeOps,
                                 float** collCostTable, int numAlgo, int numProto, int /*regBuff*/, int* nChannels) {
  auto* t = static_cast<TunerCtx*>(context);
  if (!t) return ncclabi::kSuccess;
  if (!t->ctx) {
    if (nChannels && t->ncclChannels > 0) *nChannels = t->ncclChannels;
    return ncclabi::kSuccess;
  }
  if (!collCostTable || coll < 0 || coll >= ncclabi::kNumCollFuncs) return ncclabi::kSuccess;
  try {
    // NCCL passes its float[numAlgo][numProto] array cast to float**: the data is contiguous.
    CostTable costs{reinterpret_cast<float*>(collCostTable), numAlgo, numProto};
    // false only in online mode when the ranks can no longer agree on this call (coordinator lost, this
    // process's settings refused): failing the collective is the only outcome that cannot corrupt data.
    // The engine logs why through NCCL, which prints nothing without NCCL_DEBUG and then reports its own
    // "internal error": say it on stderr too, once per communicator.
    if (!t->ctx->getCollInfo(static_cast<int>(coll), nBytes, numPipeOps, costs, nChannels)) {
      if (!t->failureShown && !t->ctx->failure().empty()) {
        t->failureShown = true;
        std::fprintf(stderr, "autoccl: %s\n", t->ctx->failure().c_str());
      }
      return ncclabi::kInternalError;
    }
  } catch (...) {
  }
  return ncclabi::kSuccess;
}

ncclabi::Result tunerGetChunkSize(void* context, ncclabi::Func coll, size_t /*nBytes*/, int algo, int proto,
                                  int /*nChannels*/, size_t* chunkSize) {
  auto* t = static_cast<TunerCtx*>(context);
  if (!t || !t->ctx || !chunkSize) return ncclabi::kSuccess;
  try {
    uint64_t chunk = *chunkSize;  // NCCL's, for this channel partition
    if (t->ctx->chunkSize(static_cast<int>(coll), algo, proto, &chunk)) *chunkSize = static_cast<size_t>(chunk);
  } catch (...) {
  }
  return ncclabi::kSuccess;
}

ncclabi::Result tunerFinalize(void* context) {
  auto* t = static_cast<TunerCtx*>(context);
  if (!t) return ncclabi::kSuccess;
  try {
    if (t->ctx) t->ctx->finalizeTuner();
  } catch (...) {
  }
  delete t;
  return ncclabi::kSuccess;
}

// --------------------------------------------------------------------------------------- profiler

ncclabi::Result profilerInit(void** context, uint64_t commId, int* eActivationMask, const char* /*commName*/,
                             int nNodes, int nRanks, int rank, ncclabi::Logger logger) {
  if (!context) return ncclabi::kSuccess;
  *context = nullptr;
  try {
    LogFn log = makeLog(logger);
    Runtime& rt = runtime();
    rt.announce(log, kBanner);
    auto* p = new ProfilerCtx();
    *context = p;
    if (rt.disabled() || rt.settings().mode == Mode::Off) {
      if (eActivationMask) __atomic_store_n(eActivationMask, 0, __ATOMIC_RELAXED);
      return ncclabi::kSuccess;
    }
    p->clock = launchClock(log);
    if (eActivationMask) rt.mask().attach(eActivationMask, p->clock ? kLaunchTimingMask : kKernelTimingMask);
    auto ctx = std::make_shared<Context>(rt, commId);
    ctx->attachProfiler(rank, nRanks, nNodes, log);
    if (tlsPending.size() >= 16) tlsPending.erase(tlsPending.begin());  // a tuner that never came
    tlsPending.push_back(PendingPair{commId, ctx});
    p->ctx = std::move(ctx);
  } catch (...) {
  }
  return ncclabi::kSuccess;
}

// Hands the open launch of `p` to the clock (its Coll events, if any, have been attached).
void sealOpen(ProfilerCtx* p) {
  LaunchClock::Launch* l = nullptr;
  {
    std::lock_guard<std::mutex> lock(p->openMu);
    std::swap(l, p->open);
  }
  if (l) p->clock->seal(l);
}

ncclabi::Result profilerStartEvent(void* context, void** eHandle, ncclabi::EventDescr* descr) {
  if (!eHandle) return ncclabi::kSuccess;
  *eHandle = nullptr;
  auto* p = static_cast<ProfilerCtx*>(context);
  if (!p || !p->ctx || !descr) return ncclabi::kSuccess;
  try {
    switch (descr->type) {
      case ncclabi::kEvKernelLaunch:
        if (p->clock) {
          sealOpen(p);  // a plan without a Group event after it (no Coll in it)
          LaunchClock::Launch* l =
              p->ctx->takeLaunchTiming() ? p->clock->begin(p->ctx, descr->kernelLaunch.stream) : nullptr;
          std::lock_guard<std::mutex> lock(p->openMu);
          p->open = l;
          *eHandle = LaunchClock::launchHandle(l);
        }
        break;
      case ncclabi::kEvGroup:
        if (p->clock) {  // the plan just launched: its Coll events name this handle as their parentGroup
          std::lock_guard<std::mutex> lock(p->openMu);
          *eHandle = LaunchClock::groupHandle(p->open);
          p->open = nullptr;
        }
        break;
      case ncclabi::kEvColl: {
        LaunchClock::Launch* l = p->clock ? LaunchClock::fromGroupHandle(descr->coll.parentGroup) : nullptr;
        const int reporting = p->clock ? (l ? 1 : 0) : -1;
        *eHandle = p->ctx->collStart(descr->coll.func, descr->coll.seqNumber, descr->coll.count, descr->coll.datatype,
                                     descr->coll.nChannels, descr->coll.algo, descr->coll.proto, reporting);
        if (l && *eHandle) p->clock->attach(l, *eHandle);
        break;
      }
      case ncclabi::kEvKernelCh:
        *eHandle = p->ctx->kernelChStart(descr->parentObj, descr->kernelCh.pTimer);
        break;
      default:
        break;
    }
  } catch (...) {
    *eHandle = nullptr;
  }
  return ncclabi::kSuccess;
}

ncclabi::Result profilerStopEvent(void* eHandle) {
  if (LaunchClock::Launch* l = LaunchClock::fromGroupHandle(eHandle)) {
    LaunchClock::instance()->seal(l);
  } else if (LaunchClock::Launch* k = LaunchClock::fromLaunchHandle(eHandle)) {
    LaunchClock::instance()->end(k);
  } else {
    TimingMatcher::eventStop(eHandle);
  }
  return ncclabi::kSuccess;
}

ncclabi::Result profilerRecordEventState(void* eHandle, int state, ncclabi::EventStateArgs* args) {
  if (state == ncclabi::kStateKernelChStop && args) TimingMatcher::kernelChStop(eHandle, args->kernelCh.pTimer);
  return ncclabi::kSuccess;
}

ncclabi::Result profilerFinalize(void* context) {
  auto* p = static_cast<ProfilerCtx*>(context);
  if (!p) return ncclabi::kSuccess;
  try {
    if (p->clock) sealOpen(p);
    if (p->ctx) p->ctx->finalizeProfiler();
  } catch (...) {
  }
  delete p;
  return ncclabi::kSuccess;
}

}  // namespace

extern "C" {
__attribute__((visibility("default"))) ncclabi::TunerV5 ncclTunerPlugin_v5 = {
    "autoccl", tunerInitV5, tunerGetCollInfo, tunerFinalize};
__attribute__((visibility("default"))) ncclabi::TunerV6 ncclTunerPlugin_v6 = {
    "autoccl", tunerInitV6, tunerGetCollInfo, tunerFinalize, tunerGetChunkSize};
__attribute__((visibility("default"))) ncclabi::ProfilerV5 ncclProfiler_v5 = {
    "autoccl", profilerInit, profilerStartEvent, profilerStopEvent, profilerRecordEventState, profilerFinalize};
__attribute__((visibility("default"))) ncclabi::ProfilerV6 ncclProfiler_v6 = {
    "autoccl", profilerInit, profilerStartEvent, profilerStopEvent, profilerRecordEventState, profilerFinalize};
}
