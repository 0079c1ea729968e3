// The profiler plugin interface v7 (ncclProfiler_v7; NCCL 2.31 and later): v6 with a per-call user tag on the
// API, Coll, P2p and copy-engine events, the Coll's kernel variant, and kernel-phase sub-events. Our declarations;
// the layout follows NCCL's plugin/profiler/profiler_v7.h, checked by scripts/check_nccl_abi.sh.
// v7 only appends members to the ends of v6's event structs, so every member of a v6 descriptor sits at the same
// offset in a v7 one (asserted below): a v7 descriptor can be read as a v6 (or v5) one, and a v6 descriptor copied
// into a zeroed v7 one is a v7 descriptor of an untagged call.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "profiler_v6.h"

namespace ncclabi {

constexpr uint64_t kEvKernelPhase = uint64_t{1} << 15;  // ncclProfileKernelPhase (v7)
constexpr int kStateKernelPhaseStop = 31;               // ncclProfilerKernelPhaseStop (v7)

struct EventDescrV7 {  // ncclProfilerEventDescr_v7_t
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct { bool graphCaptured; int groupDepth; } groupApi;
    struct { const char* func; size_t count; const char* datatype; int root; void* stream; bool graphCaptured;
             uint64_t userTag; } collApi;
    struct { const char* func; size_t count; const char* datatype; void* stream; bool graphCaptured;
             uint64_t userTag; } p2pApi;
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
      const char* kernelVariant;
      bool isSymColl;
      uint64_t userTag;
    } coll;
    struct { const char* func; void* buff; const char* datatype; size_t count; int peer; uint8_t nChannels;
             void* parentGroup; uint64_t userTag; } p2p;
    struct { pid_t pid; uint8_t channelId; int peer; int nSteps; int chunkSize; int isSend; } proxyOp;
    struct { int step; } proxyStep;
    struct { uint8_t channelId; uint64_t pTimer; } kernelCh;
    struct { int64_t id; void* data; } netPlugin;
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      const char* syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void* stream;
      uint64_t userTag;
    } ceColl;
    struct { bool isComplete; int nRanks; } ceCollSync;
    struct { int numOps; size_t totalBytes; bool useIntraSync; } ceCollBatch;
    struct { uint8_t channelId; uint8_t phaseId; const char* phaseName; uint64_t pTimer; } kernelPhase;
  };
};

// ncclProfilerEventStateArgs_v7_t: v5's union (a kernel phase's stop uses its kernelCh member).
using EventStateArgsV7 = EventStateArgsV5;
using ProfilerStartEventV7Fn = Result (*)(void* ctx, void** eHandle, EventDescrV7* descr);
using ProfilerRecordStateV7Fn = Result (*)(void* eHandle, ProfileState state, EventStateArgsV7* args);

struct ProfilerV7 {  // ncclProfiler_v7_t
  const char* name;
  ProfilerInitFn init;
  ProfilerStartEventV7Fn startEvent;
  ProfilerStopEventFn stopEvent;
  ProfilerRecordStateV7Fn recordEventState;
  ProfilerFinalizeFn finalize;
};

static_assert(offsetof(EventDescrV7, coll.userTag) == 24 + 104, "ncclProfilerEventDescr_v7_t.coll.userTag");
static_assert(sizeof(EventDescrV7) == 24 + 112, "ncclProfilerEventDescr_v7_t");
static_assert(sizeof(ProfilerV7) == sizeof(ProfilerV6), "ncclProfiler_v7_t: v6's table with v7 arguments");

// Every member of a v6 descriptor where v7 has it.
#define SAME_OFFSET_IN_V6_AND_V7(m) static_assert(offsetof(EventDescrV6, m) == offsetof(EventDescrV7, m), "v6/v7: " #m)
SAME_OFFSET_IN_V6_AND_V7(type);
SAME_OFFSET_IN_V6_AND_V7(parentObj);
SAME_OFFSET_IN_V6_AND_V7(rank);
SAME_OFFSET_IN_V6_AND_V7(groupApi.groupDepth);
SAME_OFFSET_IN_V6_AND_V7(collApi.graphCaptured);
SAME_OFFSET_IN_V6_AND_V7(p2pApi.graphCaptured);
SAME_OFFSET_IN_V6_AND_V7(kernelLaunch.stream);
SAME_OFFSET_IN_V6_AND_V7(coll.seqNumber);
SAME_OFFSET_IN_V6_AND_V7(coll.func);
SAME_OFFSET_IN_V6_AND_V7(coll.count);
SAME_OFFSET_IN_V6_AND_V7(coll.datatype);
SAME_OFFSET_IN_V6_AND_V7(coll.nChannels);
SAME_OFFSET_IN_V6_AND_V7(coll.algo);
SAME_OFFSET_IN_V6_AND_V7(coll.proto);
SAME_OFFSET_IN_V6_AND_V7(coll.parentGroup);
SAME_OFFSET_IN_V6_AND_V7(p2p.parentGroup);
SAME_OFFSET_IN_V6_AND_V7(proxyOp.isSend);
SAME_OFFSET_IN_V6_AND_V7(proxyStep.step);
SAME_OFFSET_IN_V6_AND_V7(kernelCh.pTimer);
SAME_OFFSET_IN_V6_AND_V7(netPlugin.data);
SAME_OFFSET_IN_V6_AND_V7(ceColl.stream);
SAME_OFFSET_IN_V6_AND_V7(ceCollSync.nRanks);
SAME_OFFSET_IN_V6_AND_V7(ceCollBatch.useIntraSync);
#undef SAME_OFFSET_IN_V6_AND_V7
static_assert(sizeof(EventDescrV6) < sizeof(EventDescrV7), "a v7 descriptor holds a v6 one");

}  // namespace ncclabi
