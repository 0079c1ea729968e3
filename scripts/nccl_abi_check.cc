// Compiled by scripts/check_nccl_abi.sh against an NCCL source checkout: every size, offset, value and
// signature that csrc/nccl/abi declares must be what NCCL's own plugin headers define. Nothing to run: it
// compiles or it names what differs. Not part of the build.
#include <sys/types.h>

#include <cstddef>
#include <type_traits>

// In the order NCCL's own sources include them: the plugin headers rely on what comes before.
#include "nccl.h"
#include "nccl_common.h"
#include "plugin/nccl_tuner.h"
#include "plugin/nccl_profiler.h"

#include "nccl/abi/profiler_v5.h"
#include "nccl/abi/tuner_v5.h"
#if __has_include("plugin/tuner/tuner_v6.h")
#define HAVE_TUNER_V6 1
#include "nccl/abi/tuner_v6.h"
#endif
#if __has_include("plugin/profiler/profiler_v6.h")
#define HAVE_PROFILER_V6 1
#include "nccl/abi/profiler_v6.h"
#endif
#if __has_include("plugin/profiler/profiler_v7.h")
#define HAVE_PROFILER_V7 1
#include "nccl/abi/profiler_v7.h"
#endif

namespace check {

// Two types pass a value the same way: both pointers (a pointee's layout is checked on its own), or both
// integers or enums of one size, or both floating point of one size.
template <class A, class B>
constexpr bool sameArg() {
  if constexpr (std::is_void_v<A> || std::is_void_v<B>) return std::is_void_v<A> && std::is_void_v<B>;
  else if constexpr (std::is_pointer_v<A> || std::is_pointer_v<B>) return std::is_pointer_v<A> && std::is_pointer_v<B>;
  else if constexpr (std::is_floating_point_v<A> || std::is_floating_point_v<B>)
    return std::is_floating_point_v<A> && std::is_floating_point_v<B> && sizeof(A) == sizeof(B);
  else
    return (std::is_integral_v<A> || std::is_enum_v<A>) && (std::is_integral_v<B> || std::is_enum_v<B>) &&
           sizeof(A) == sizeof(B);
}
template <class A, class B>
struct SameSignature : std::false_type {};
template <class RA, class... A, class RB, class... B>
struct SameSignature<RA (*)(A...), RB (*)(B...)> {
  static constexpr bool value = [] {
    if constexpr (sizeof...(A) != sizeof...(B)) return false;
    else return sameArg<RA, RB>() && (sameArg<A, B>() && ...);
  }();
};
template <class RA, class... A, class RB, class... B>
struct SameSignature<RA (*)(A..., ...), RB (*)(B..., ...)> : SameSignature<RA (*)(A...), RB (*)(B...)> {};

}  // namespace check

#define MEMBER(ours, theirs, m)                                                                          \
  static_assert(offsetof(ours, m) == offsetof(theirs, m), #theirs "." #m ": offset");                   \
  static_assert(sizeof(ours::m) == sizeof(theirs::m), #theirs "." #m ": size")
#define SIZE(ours, theirs) static_assert(sizeof(ours) == sizeof(theirs), #theirs ": size")
#define SIGNATURE(ours, theirs, m) \
  static_assert(check::SameSignature<decltype(ours::m), decltype(theirs::m)>::value, #theirs "." #m ": signature")
#define VALUE(ours, theirs) static_assert(static_cast<long long>(ours) == static_cast<long long>(theirs), #theirs)

// Values.
VALUE(ncclabi::kSuccess, ncclSuccess);
VALUE(ncclabi::kInternalError, ncclInternalError);
VALUE(ncclabi::kInvalidArgument, ncclInvalidArgument);
static_assert(sizeof(ncclabi::Result) == sizeof(ncclResult_t), "ncclResult_t: size");
VALUE(ncclabi::kLogNone, NCCL_LOG_NONE);
VALUE(ncclabi::kLogVersion, NCCL_LOG_VERSION);
VALUE(ncclabi::kLogWarn, NCCL_LOG_WARN);
VALUE(ncclabi::kLogInfo, NCCL_LOG_INFO);
VALUE(ncclabi::kLogAbort, NCCL_LOG_ABORT);
VALUE(ncclabi::kLogTrace, NCCL_LOG_TRACE);
VALUE(ncclabi::kLogSubsysInit, NCCL_INIT);
VALUE(ncclabi::kLogSubsysColl, NCCL_COLL);
VALUE(ncclabi::kLogSubsysTuning, NCCL_TUNING);
VALUE(ncclabi::kLogSubsysEnv, NCCL_ENV);
static_assert(check::SameSignature<ncclabi::Logger, ncclDebugLogger_t>::value, "ncclDebugLogger_t: signature");
VALUE(ncclabi::kBroadcast, ncclFuncBroadcast);
VALUE(ncclabi::kReduce, ncclFuncReduce);
VALUE(ncclabi::kAllGather, ncclFuncAllGather);
VALUE(ncclabi::kReduceScatter, ncclFuncReduceScatter);
VALUE(ncclabi::kAllReduce, ncclFuncAllReduce);
VALUE(ncclabi::kSendRecv, ncclFuncSendRecv);
VALUE(ncclabi::kSend, ncclFuncSend);
VALUE(ncclabi::kRecv, ncclFuncRecv);
VALUE(ncclabi::kNumCollFuncs, NCCL_NUM_FUNCTIONS);
VALUE(ncclabi::kNumAlgorithms, NCCL_NUM_ALGORITHMS_V5);
VALUE(ncclabi::kNumProtocols, NCCL_NUM_PROTOCOLS_V5);
static_assert(ncclabi::kCostIgnore == static_cast<float>(NCCL_ALGO_PROTO_IGNORE), "NCCL_ALGO_PROTO_IGNORE");
VALUE(ncclabi::kNumHwLinks, NCCL_NUM_HW_LINKS_V5);
VALUE(ncclabi::kNumCompCaps, NCCL_NUM_COMPCAPS_V5);
VALUE(ncclabi::kNumTuningScales, NCCL_NUM_TUNING_SCALES_V5);
VALUE(ncclabi::kEvGroup, ncclProfileGroup);
VALUE(ncclabi::kEvColl, ncclProfileColl);
VALUE(ncclabi::kEvP2p, ncclProfileP2p);
VALUE(ncclabi::kEvProxyOp, ncclProfileProxyOp);
VALUE(ncclabi::kEvProxyStep, ncclProfileProxyStep);
VALUE(ncclabi::kEvProxyCtrl, ncclProfileProxyCtrl);
VALUE(ncclabi::kEvKernelCh, ncclProfileKernelCh);
VALUE(ncclabi::kEvNetPlugin, ncclProfileNetPlugin);
VALUE(ncclabi::kEvGroupApi, ncclProfileGroupApi);
VALUE(ncclabi::kEvCollApi, ncclProfileCollApi);
VALUE(ncclabi::kEvP2pApi, ncclProfileP2pApi);
VALUE(ncclabi::kEvKernelLaunch, ncclProfileKernelLaunch);
VALUE(ncclabi::kStateKernelChStop, ncclProfilerKernelChStop);

// Tuner v5.
SIZE(ncclabi::NvlDomainInfoV5, ncclNvlDomainInfo_v5_t);
MEMBER(ncclabi::NvlDomainInfoV5, ncclNvlDomainInfo_v5_t, nNvlDomains);
MEMBER(ncclabi::NvlDomainInfoV5, ncclNvlDomainInfo_v5_t, minRanksPerNvlDomain);
MEMBER(ncclabi::NvlDomainInfoV5, ncclNvlDomainInfo_v5_t, maxRanksPerNvlDomain);
SIZE(ncclabi::TunerConstantsV5, ncclTunerConstants_v5_t);
MEMBER(ncclabi::TunerConstantsV5, ncclTunerConstants_v5_t, baseLatencies);
MEMBER(ncclabi::TunerConstantsV5, ncclTunerConstants_v5_t, hwLatencies);
MEMBER(ncclabi::TunerConstantsV5, ncclTunerConstants_v5_t, llMaxBws);
MEMBER(ncclabi::TunerConstantsV5, ncclTunerConstants_v5_t, perChMaxRingLL128Bws);
MEMBER(ncclabi::TunerConstantsV5, ncclTunerConstants_v5_t, perChMaxTreeLL128Bws);
MEMBER(ncclabi::TunerConstantsV5, ncclTunerConstants_v5_t, perChMaxTreeBws);
MEMBER(ncclabi::TunerConstantsV5, ncclTunerConstants_v5_t, perChMaxNVLSTreeBws);
SIZE(ncclabi::TunerV5, ncclTuner_v5_t);
MEMBER(ncclabi::TunerV5, ncclTuner_v5_t, name);
MEMBER(ncclabi::TunerV5, ncclTuner_v5_t, init);
MEMBER(ncclabi::TunerV5, ncclTuner_v5_t, getCollInfo);
MEMBER(ncclabi::TunerV5, ncclTuner_v5_t, finalize);
SIGNATURE(ncclabi::TunerV5, ncclTuner_v5_t, init);
SIGNATURE(ncclabi::TunerV5, ncclTuner_v5_t, getCollInfo);
SIGNATURE(ncclabi::TunerV5, ncclTuner_v5_t, finalize);

#ifdef HAVE_TUNER_V6
SIZE(ncclabi::TunerV6, ncclTuner_v6_t);
SIZE(ncclabi::TunerConstantsV6, ncclTunerConstants_v6_t);
SIZE(ncclabi::NvlDomainInfoV6, ncclNvlDomainInfo_v6_t);
MEMBER(ncclabi::TunerV6, ncclTuner_v6_t, name);
MEMBER(ncclabi::TunerV6, ncclTuner_v6_t, init);
MEMBER(ncclabi::TunerV6, ncclTuner_v6_t, getCollInfo);
MEMBER(ncclabi::TunerV6, ncclTuner_v6_t, finalize);
MEMBER(ncclabi::TunerV6, ncclTuner_v6_t, getChunkSize);
SIGNATURE(ncclabi::TunerV6, ncclTuner_v6_t, init);
SIGNATURE(ncclabi::TunerV6, ncclTuner_v6_t, getCollInfo);
SIGNATURE(ncclabi::TunerV6, ncclTuner_v6_t, finalize);
SIGNATURE(ncclabi::TunerV6, ncclTuner_v6_t, getChunkSize);
#endif

// Profiler descriptors: every member of every union member.
#define DESCR(ours, theirs)                                                                                     \
  SIZE(ours, theirs);                                                                                           \
  MEMBER(ours, theirs, type);                                                                                   \
  MEMBER(ours, theirs, parentObj);                                                                              \
  MEMBER(ours, theirs, rank);                                                                                   \
  MEMBER(ours, theirs, groupApi.graphCaptured);                                                                 \
  MEMBER(ours, theirs, groupApi.groupDepth);                                                                    \
  MEMBER(ours, theirs, collApi.func);                                                                           \
  MEMBER(ours, theirs, collApi.count);                                                                          \
  MEMBER(ours, theirs, collApi.datatype);                                                                       \
  MEMBER(ours, theirs, collApi.root);                                                                           \
  MEMBER(ours, theirs, collApi.stream);                                                                         \
  MEMBER(ours, theirs, collApi.graphCaptured);                                                                  \
  MEMBER(ours, theirs, p2pApi.func);                                                                            \
  MEMBER(ours, theirs, p2pApi.count);                                                                           \
  MEMBER(ours, theirs, p2pApi.datatype);                                                                        \
  MEMBER(ours, theirs, p2pApi.stream);                                                                          \
  MEMBER(ours, theirs, p2pApi.graphCaptured);                                                                   \
  MEMBER(ours, theirs, kernelLaunch.stream);                                                                    \
  MEMBER(ours, theirs, coll.seqNumber);                                                                         \
  MEMBER(ours, theirs, coll.func);                                                                              \
  MEMBER(ours, theirs, coll.sendBuff);                                                                          \
  MEMBER(ours, theirs, coll.recvBuff);                                                                          \
  MEMBER(ours, theirs, coll.count);                                                                             \
  MEMBER(ours, theirs, coll.root);                                                                              \
  MEMBER(ours, theirs, coll.datatype);                                                                          \
  MEMBER(ours, theirs, coll.nChannels);                                                                         \
  MEMBER(ours, theirs, coll.nWarps);                                                                            \
  MEMBER(ours, theirs, coll.algo);                                                                              \
  MEMBER(ours, theirs, coll.proto);                                                                             \
  MEMBER(ours, theirs, coll.parentGroup);                                                                       \
  MEMBER(ours, theirs, p2p.func);                                                                               \
  MEMBER(ours, theirs, p2p.buff);                                                                               \
  MEMBER(ours, theirs, p2p.datatype);                                                                           \
  MEMBER(ours, theirs, p2p.count);                                                                              \
  MEMBER(ours, theirs, p2p.peer);                                                                               \
  MEMBER(ours, theirs, p2p.nChannels);                                                                          \
  MEMBER(ours, theirs, p2p.parentGroup);                                                                        \
  MEMBER(ours, theirs, proxyOp.pid);                                                                            \
  MEMBER(ours, theirs, proxyOp.channelId);                                                                      \
  MEMBER(ours, theirs, proxyOp.peer);                                                                           \
  MEMBER(ours, theirs, proxyOp.nSteps);                                                                         \
  MEMBER(ours, theirs, proxyOp.chunkSize);                                                                      \
  MEMBER(ours, theirs, proxyOp.isSend);                                                                         \
  MEMBER(ours, theirs, proxyStep.step);                                                                         \
  MEMBER(ours, theirs, kernelCh.channelId);                                                                     \
  MEMBER(ours, theirs, kernelCh.pTimer);                                                                        \
  MEMBER(ours, theirs, netPlugin.id);                                                                           \
  MEMBER(ours, theirs, netPlugin.data)
#define PROFILER(ours, theirs)                  \
  SIZE(ours, theirs);                           \
  MEMBER(ours, theirs, name);                   \
  MEMBER(ours, theirs, init);                   \
  MEMBER(ours, theirs, startEvent);             \
  MEMBER(ours, theirs, stopEvent);              \
  MEMBER(ours, theirs, recordEventState);       \
  MEMBER(ours, theirs, finalize);               \
  SIGNATURE(ours, theirs, init);                \
  SIGNATURE(ours, theirs, startEvent);          \
  SIGNATURE(ours, theirs, stopEvent);           \
  SIGNATURE(ours, theirs, recordEventState);    \
  SIGNATURE(ours, theirs, finalize)

// Profiler v5.
DESCR(ncclabi::EventDescrV5, ncclProfilerEventDescr_v5_t);
SIZE(ncclabi::EventStateArgsV5, ncclProfilerEventStateArgs_v5_t);
MEMBER(ncclabi::EventStateArgsV5, ncclProfilerEventStateArgs_v5_t, proxyStep.transSize);
MEMBER(ncclabi::EventStateArgsV5, ncclProfilerEventStateArgs_v5_t, proxyCtrl.appendedProxyOps);
MEMBER(ncclabi::EventStateArgsV5, ncclProfilerEventStateArgs_v5_t, netPlugin.data);
MEMBER(ncclabi::EventStateArgsV5, ncclProfilerEventStateArgs_v5_t, kernelCh.pTimer);
PROFILER(ncclabi::ProfilerV5, ncclProfiler_v5_t);

#ifdef HAVE_PROFILER_V6
VALUE(ncclabi::kEvCeColl, ncclProfileCeColl);
VALUE(ncclabi::kEvCeSync, ncclProfileCeSync);
VALUE(ncclabi::kEvCeBatch, ncclProfileCeBatch);
DESCR(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.seqNumber);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.func);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.sendBuff);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.recvBuff);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.count);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.root);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.datatype);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.syncStrategy);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.intraBatchSync);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.batchSize);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.numBatches);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.ceSeqNum);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceColl.stream);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceCollSync.isComplete);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceCollSync.nRanks);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceCollBatch.numOps);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceCollBatch.totalBytes);
MEMBER(ncclabi::EventDescrV6, ncclProfilerEventDescr_v6_t, ceCollBatch.useIntraSync);
SIZE(ncclabi::EventStateArgsV6, ncclProfilerEventStateArgs_v6_t);
PROFILER(ncclabi::ProfilerV6, ncclProfiler_v6_t);
#endif

#ifdef HAVE_PROFILER_V7
VALUE(ncclabi::kEvKernelPhase, ncclProfileKernelPhase);
VALUE(ncclabi::kStateKernelPhaseStop, ncclProfilerKernelPhaseStop);
DESCR(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, collApi.userTag);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, p2pApi.userTag);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, coll.kernelVariant);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, coll.isSymColl);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, coll.userTag);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, p2p.userTag);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, ceColl.stream);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, ceColl.userTag);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, ceCollSync.nRanks);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, ceCollBatch.useIntraSync);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, kernelPhase.channelId);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, kernelPhase.phaseId);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, kernelPhase.phaseName);
MEMBER(ncclabi::EventDescrV7, ncclProfilerEventDescr_v7_t, kernelPhase.pTimer);
SIZE(ncclabi::EventStateArgsV7, ncclProfilerEventStateArgs_v7_t);
MEMBER(ncclabi::EventStateArgsV7, ncclProfilerEventStateArgs_v7_t, kernelCh.pTimer);
PROFILER(ncclabi::ProfilerV7, ncclProfiler_v7_t);
#endif

int main() { return 0; }
