// autoccl's own declarations of the NCCL tuner (v5, v6) and profiler (v5, v6) plugin interfaces.
// Layout-compatible with NCCL 2.28.3 .. 2.32.x as documented in shared/reference/nccl-plugin-abi.md.
// Written for this project: names are ours, only the memory layout and the numeric ids follow NCCL.
// Used by the shim (csrc/nccl) and by the emulator (csrc/emu), nowhere else: the engine never sees these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

namespace ncclabi {

// ncclResult_t is an int-sized enum; 0 = success, 1 = unhandled cuda, 2 = system, 3 = internal,
// 4 = invalid argument, 5 = invalid usage, 6 = remote error, 7 = in progress.
using Result = int;
constexpr Result kSuccess = 0;
constexpr Result kInternalError = 3;
constexpr Result kInvalidArgument = 4;

// Logger levels and subsystems (ncclDebugLogLevel / ncclDebugLogSubSys).
enum LogLevel : int { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogAbort = 4, kLogTrace = 5 };
constexpr unsigned long kLogSubsysInit = 1;
constexpr unsigned long kLogSubsysColl = 2;
constexpr unsigned long kLogSubsysTuning = 64;
constexpr unsigned long kLogSubsysEnv = 128;
using Logger = void (*)(LogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...);

// ncclFunc_t
enum Func : int { kBroadcast = 0, kReduce = 1, kAllGather = 2, kReduceScatter = 3, kAllReduce = 4,
                  kSendRecv = 5, kSend = 6, kRecv = 7 };
constexpr int kNumCollFuncs = 5;
constexpr int kNumAlgorithms = 7;  // Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT
constexpr int kNumProtocols = 3;   // LL, LL128, Simple
constexpr float kCostIgnore = -1.0f;  // cost-table entry NCCL marks unsupported/disabled

// Tuner constants: editable once at init (v5 == v6).
constexpr int kNumHwLinks = 3;
constexpr int kNumCompCaps = 4;
constexpr int kNumTuningScales = 3;
struct NvlDomainInfo {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
};
struct TunerConstants {
  double baseLatencies[kNumAlgorithms][kNumProtocols];
  double hwLatencies[kNumHwLinks][kNumAlgorithms][kNumProtocols];
  double llMaxBws[kNumCompCaps][kNumTuningScales];
  double perChMaxRingLL128Bws[kNumCompCaps][kNumTuningScales];
  double perChMaxTreeLL128Bws[kNumCompCaps][kNumTuningScales];
  double perChMaxTreeBws[kNumCompCaps][kNumTuningScales];
};

using TunerInitFn = Result (*)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, Logger log,
                               NvlDomainInfo* nvl, TunerConstants* constants);
using TunerGetCollInfoFn = Result (*)(void* ctx, Func coll, size_t nBytes, int numPipeOps, float** collCostTable,
                                      int numAlgo, int numProto, int regBuff, int* nChannels);
using TunerFinalizeFn = Result (*)(void* ctx);
using TunerGetChunkSizeFn = Result (*)(void* ctx, Func coll, size_t nBytes, int algo, int proto, int nChannels,
                                       size_t* chunkSize);

struct TunerV5 {  // exported as ncclTunerPlugin_v5
  const char* name;
  TunerInitFn init;
  TunerGetCollInfoFn getCollInfo;
  TunerFinalizeFn finalize;
};
struct TunerV6 {  // exported as ncclTunerPlugin_v6 (NCCL 2.30.3+)
  const char* name;
  TunerInitFn init;
  TunerGetCollInfoFn getCollInfo;
  TunerFinalizeFn finalize;
  TunerGetChunkSizeFn getChunkSize;  // may be NULL
};

// Profiler event type bits (eActivationMask and descriptor .type).
enum ProfileEvent : uint64_t {
  kEvGroup = 1u << 0, kEvColl = 1u << 1, kEvP2p = 1u << 2, kEvProxyOp = 1u << 3, kEvProxyStep = 1u << 4,
  kEvProxyCtrl = 1u << 5, kEvKernelCh = 1u << 6, kEvNetPlugin = 1u << 7, kEvGroupApi = 1u << 8,
  kEvCollApi = 1u << 9, kEvP2pApi = 1u << 10, kEvKernelLaunch = 1u << 11,
  kEvCeColl = 1u << 12, kEvCeSync = 1u << 13, kEvCeBatch = 1u << 14,  // v6
};
// Profiler event states (ncclProfilerEventState_t), only the ones we use.
enum ProfileState : int { kStateKernelChStop = 22 };

// The event descriptor. v5 and v6 share the layout of every member we read (type, parentObj, rank,
// coll, kernelCh); v6 only appends union members (CE events) and turns groupApi.graphCaptured into bool.
struct EventDescr {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct { int graphCaptured; int groupDepth; } groupApi;  // v6: bool graphCaptured (same offset)
    struct { const char* func; size_t count; const char* datatype; int root; void* stream; bool graphCaptured; } collApi;
    struct { const char* func; size_t count; const char* datatype; void* stream; bool graphCaptured; } p2pApi;
    struct { void* stream; } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
    } coll;
    struct { const char* func; void* buff; const char* datatype; size_t count; int peer; uint8_t nChannels;
             void* parentGroup; } p2p;
    struct { pid_t pid; uint8_t channelId; int peer; int nSteps; int chunkSize; int isSend; } proxyOp;
    struct { int step; } proxyStep;
    struct { uint8_t channelId; uint64_t pTimer; } kernelCh;
    struct { int64_t id; void* data; } netPlugin;
    // v6 CE events: large enough placeholder so sizeof matches the v6 descriptor.
    struct { uint64_t seqNumber; const char* func; const void* sendBuff; void* recvBuff; size_t count; int root;
             const char* datatype; const char* syncStrategy; bool intraBatchSync; uint32_t batchSize;
             uint32_t numBatches; uint32_t ceSeqNum; void* stream; } ceColl;
  };
};

union EventStateArgs {
  struct { size_t transSize; } proxyStep;
  struct { int appendedProxyOps; } proxyCtrl;
  struct { void* data; } netPlugin;
  struct { uint64_t pTimer; } kernelCh;
};

using ProfilerInitFn = Result (*)(void** ctx, uint64_t commId, int* eActivationMask, const char* commName,
                                  int nNodes, int nRanks, int rank, Logger log);
using ProfilerStartEventFn = Result (*)(void* ctx, void** eHandle, EventDescr* descr);
using ProfilerStopEventFn = Result (*)(void* eHandle);
using ProfilerRecordStateFn = Result (*)(void* eHandle, int state, EventStateArgs* args);
using ProfilerFinalizeFn = Result (*)(void* ctx);

struct ProfilerV5 {  // exported as ncclProfiler_v5 and (same layout) ncclProfiler_v6
  const char* name;
  ProfilerInitFn init;
  ProfilerStartEventFn startEvent;
  ProfilerStopEventFn stopEvent;
  ProfilerRecordStateFn recordEventState;
  ProfilerFinalizeFn finalize;
};
using ProfilerV6 = ProfilerV5;

// Layout checks against the offsets of NCCL's own structures (x86-64 / aarch64 LP64).
static_assert(sizeof(TunerConstants) == (21 + 63 + 48) * sizeof(double), "tuner constants layout");
static_assert(offsetof(EventDescr, coll) == 24, "descriptor union offset");
static_assert(offsetof(EventDescr, coll.nChannels) == 24 + 56, "coll.nChannels offset");
static_assert(offsetof(EventDescr, kernelCh.pTimer) == 24 + 8, "kernelCh.pTimer offset");

}  // namespace ncclabi
