// The profiler plugin's entries (ncclProfiler_v5, _v6, _v7): NCCL's events handed to the engine's
// Context (which calls belong to which task) and to the timing method, the launch clock (CUDA events around
// each kernel launch, launch_clock.h) or the kernel clock (the channels' GPU timestamps).
#include <cstring>
#include <memory>
#include <mutex>

#include "nccl/abi/profiler_v5.h"
#include "nccl/abi/profiler_v6.h"
#include "nccl/abi/profiler_v7.h"
#include "nccl/launch_clock.h"
#include "nccl/plugin.h"
#include "nccl/profiler_chain.h"

namespace autoccl::shim {
namespace {

using engine::Context;
using engine::LogLevel;
using engine::Mode;
using engine::TimingMatcher;

// What the profiler asks NCCL for while something is timed. Launch clock: the kernel launches (to record
// CUDA events around them) and the Coll events that name the calls; NCCL adds no proxy work for these.
// Kernel clock: Coll events and their channels' kernel timestamps.
constexpr int kLaunchTimingMask = ncclabi::kEvColl | ncclabi::kEvKernelLaunch;
constexpr int kKernelTimingMask = ncclabi::kEvColl | ncclabi::kEvKernelCh;

struct ProfilerCtx {
  std::shared_ptr<Context> ctx;  // null: no events wanted
  LaunchClock* clock = nullptr;  // null: KernelCh timing
  // The launch begun on this (comm, rank) whose plan's Group event has not come yet (enqueue thread).
  std::mutex openMu;
  LaunchClock::Launch* open = nullptr;
};

// NCCL's datatype string (ncclDatatypeToString, as the Coll event gives it) as bytes per element. Int8, Uint8, the
// fp8 types and NCCL's "Unknown" are one byte; all-gather and broadcast counts come as bytes.
int elementBytes(const char* datatype) {
  if (!datatype) return 1;
  if (!std::strcmp(datatype, "ncclFloat16") || !std::strcmp(datatype, "ncclBfloat16")) return 2;
  if (!std::strcmp(datatype, "ncclInt32") || !std::strcmp(datatype, "ncclUint32") ||
      !std::strcmp(datatype, "ncclFloat32"))
    return 4;
  if (!std::strcmp(datatype, "ncclInt64") || !std::strcmp(datatype, "ncclUint64") ||
      !std::strcmp(datatype, "ncclFloat64"))
    return 8;
  return 1;
}

// The process's timing method, settled once: the launch clock unless the settings ask for kernel
// timestamps or CUDA's driver cannot be reached.
LaunchClock* launchClock(const engine::LogFn& log) {
  static LaunchClock* clock = [&] {
    if (runtime().settings().clock != engine::Settings::Clock::Launch) return static_cast<LaunchClock*>(nullptr);
    LaunchClock* c = LaunchClock::instance();
    if (!c && log) log(LogLevel::Info, "autoccl: CUDA driver API not found; timing calls by kernel timestamps (KernelCh)");
    return c;
  }();
  return clock;
}

ncclabi::Result init(void** context, uint64_t commId, int* eActivationMask, const char* /*commName*/, int nNodes,
                     int nRanks, int rank, ncclabi::Logger logger) {
  if (!context) return ncclabi::kSuccess;
  *context = nullptr;
  try {
    engine::LogFn log = makeLog(logger);
    engine::Runtime& rt = runtime();
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
    leaveForTuner(commId, ctx);
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

// v5, v6 and v7 descriptors hold every member read here at the same offsets (nccl/abi/profiler_v6.h, _v7.h).
template <class Descr>
ncclabi::Result startEvent(void* context, void** eHandle, Descr* descr) {
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
        // NCCL's names ("AllReduce", "RING", "SIMPLE") in the engine's numbers, its datatype as a size
        const int coll = descr->coll.func ? engine::parseColl(descr->coll.func) : -1;
        *eHandle = p->ctx->collStart(coll, descr->coll.seqNumber, descr->coll.count, elementBytes(descr->coll.datatype),
                                     descr->coll.nChannels, descr->coll.algo ? engine::parseAlgo(descr->coll.algo) : -1,
                                     descr->coll.proto ? engine::parseProto(descr->coll.proto) : -1, reporting);
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

ncclabi::Result stopEvent(void* eHandle) {
  if (LaunchClock::Launch* l = LaunchClock::fromGroupHandle(eHandle)) {
    LaunchClock::instance()->seal(l);
  } else if (LaunchClock::Launch* k = LaunchClock::fromLaunchHandle(eHandle)) {
    LaunchClock::instance()->end(k);
  } else {
    TimingMatcher::eventStop(eHandle);
  }
  return ncclabi::kSuccess;
}

ncclabi::Result recordEventState(void* eHandle, ncclabi::ProfileState state, ncclabi::EventStateArgsV5* args) {
  if (state == ncclabi::kStateKernelChStop && args) TimingMatcher::kernelChStop(eHandle, args->kernelCh.pTimer);
  return ncclabi::kSuccess;
}

ncclabi::Result finalize(void* context) {
  auto* p = static_cast<ProfilerCtx*>(context);
  if (!p) return ncclabi::kSuccess;
  try {
    if (p->clock) sealOpen(p);
    LaunchClock::settleIfUsed(p->ctx.get());
    if (p->ctx) p->ctx->finalizeProfiler();
  } catch (...) {
  }
  delete p;
  return ncclabi::kSuccess;
}

// The event bits the profiler of `context` takes now (NCCL's mask is process-wide: every context gets the
// events while any needs them), and those it may ever take. For profiler chaining. With KernelLaunch in the
// mask NCCL also emits each plan's Group event (the launch clock's link to the plan's Coll events).
uint64_t mayWant(void* context) {
  auto* p = static_cast<ProfilerCtx*>(context);
  if (!p || !p->ctx) return 0;
  return p->clock ? kLaunchTimingMask | ncclabi::kEvGroup : kKernelTimingMask;
}
uint64_t wants(void* context) { return runtime().mask().on() ? mayWant(context) : 0; }

// NCCL's entries: ours alone, or ours and a chained profiler's (AUTOCCL_PROFILER_CHAIN, settled at the first init).
ncclabi::Result entryInit(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                          int nRanks, int rank, ncclabi::Logger logger) {
  static const chain::Own own{init,     startEvent<ncclabi::EventDescrV7>, stopEvent, recordEventState, finalize,
                              wants,    mayWant};
  bool chained = false;
  try {
    chained = chain::setUp(runtime().settings().profilerChain.c_str(), own, logger);
  } catch (...) {
  }
  if (chained) return chain::init(context, commId, eActivationMask, commName, nNodes, nRanks, rank, logger);
  return init(context, commId, eActivationMask, commName, nNodes, nRanks, rank, logger);
}
template <class Descr>
ncclabi::Result entryStartEvent(void* context, void** eHandle, Descr* descr) {
  if (chain::active()) return chain::startEvent(context, eHandle, descr, sizeof(Descr));
  return startEvent(context, eHandle, descr);
}
ncclabi::Result entryStopEvent(void* eHandle) {
  return chain::active() ? chain::stopEvent(eHandle) : stopEvent(eHandle);
}
ncclabi::Result entryRecordEventState(void* eHandle, ncclabi::ProfileState state, ncclabi::EventStateArgsV5* args) {
  return chain::active() ? chain::recordEventState(eHandle, state, args) : recordEventState(eHandle, state, args);
}
ncclabi::Result entryFinalize(void* context) { return chain::active() ? chain::finalize(context) : finalize(context); }

}  // namespace
}  // namespace autoccl::shim

extern "C" {
__attribute__((visibility("default"))) ncclabi::ProfilerV5 ncclProfiler_v5 = {
    autoccl::shim::kPluginName, autoccl::shim::entryInit, autoccl::shim::entryStartEvent<ncclabi::EventDescrV5>,
    autoccl::shim::entryStopEvent, autoccl::shim::entryRecordEventState, autoccl::shim::entryFinalize};
__attribute__((visibility("default"))) ncclabi::ProfilerV6 ncclProfiler_v6 = {
    autoccl::shim::kPluginName, autoccl::shim::entryInit, autoccl::shim::entryStartEvent<ncclabi::EventDescrV6>,
    autoccl::shim::entryStopEvent, autoccl::shim::entryRecordEventState, autoccl::shim::entryFinalize};
__attribute__((visibility("default"))) ncclabi::ProfilerV7 ncclProfiler_v7 = {
    autoccl::shim::kPluginName, autoccl::shim::entryInit, autoccl::shim::entryStartEvent<ncclabi::EventDescrV7>,
    autoccl::shim::entryStopEvent, autoccl::shim::entryRecordEventState, autoccl::shim::entryFinalize};
}
