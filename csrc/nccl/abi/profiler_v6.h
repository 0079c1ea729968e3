// The profiler plugin interface v6 (ncclProfiler_v6; NCCL 2.29 and later): v5 with copy-engine events. Our
// declarations; the layout follows NCCL's plugin/profiler/profiler_v6.h, checked by scripts/check_nccl_abi.sh.
// Every member of the v5 descriptor sits at the same offset in v6's (asserted below): the plugin reads both
// alike, and the emulator drives a v5 profiler with v6 descriptors.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "profiler_v5.h"

namespace ncclabi {

struct EventDescrV6 {  // ncclProfilerEventDescr_v6_t
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct { bool graphCaptured; int groupDepth; } groupApi;
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
    } ceColl;
    struct { bool isComplete; int nRanks; } ceCollSync;
    struct { int numOps; size_t totalBytes; bool useIntraSync; } ceCollBatch;
  };
};

using EventStateArgsV6 = EventStateArgsV5;  // ncclProfilerEventStateArgs_v6_t is v5's
using ProfilerStartEventV6Fn = Result (*)(void* ctx, void** eHandle, EventDescrV6* descr);
using ProfilerRecordStateV6Fn = Result (*)(void* eHandle, ProfileState state, EventStateArgsV6* args);

struct ProfilerV6 {  // ncclProfiler_v6_t
  const char* name;
  ProfilerInitFn init;
  ProfilerStartEventV6Fn startEvent;
  ProfilerStopEventFn stopEvent;
  ProfilerRecordStateV6Fn recordEventState;
  ProfilerFinalizeFn finalize;
};

static_assert(offsetof(EventDescrV6, ceColl.stream) == 24 + 80, "ncclProfilerEventDescr_v6_t.ceColl.stream");
static_assert(sizeof(EventDescrV6) == 24 + 88, "ncclProfilerEventDescr_v6_t");
static_assert(sizeof(ProfilerV6) == 6 * sizeof(void*), "ncclProfiler_v6_t");
static_assert(offsetof(ProfilerV6, startEvent) == offsetof(ProfilerV5, startEvent) &&
                  offsetof(ProfilerV6, recordEventState) == offsetof(ProfilerV5, recordEventState) &&
                  offsetof(ProfilerV6, finalize) == offsetof(ProfilerV5, finalize),
              "ncclProfiler_v6_t: v5's table");

// v5's members where v6 has them.
#define SAME_OFFSET_IN_V5_AND_V6(m) static_assert(offsetof(EventDescrV5, m) == offsetof(EventDescrV6, m), "v5/v6: " #m)
SAME_OFFSET_IN_V5_AND_V6(type);
SAME_OFFSET_IN_V5_AND_V6(parentObj);
SAME_OFFSET_IN_V5_AND_V6(rank);
SAME_OFFSET_IN_V5_AND_V6(kernelLaunch.stream);
SAME_OFFSET_IN_V5_AND_V6(coll.seqNumber);
SAME_OFFSET_IN_V5_AND_V6(coll.func);
SAME_OFFSET_IN_V5_AND_V6(coll.count);
SAME_OFFSET_IN_V5_AND_V6(coll.datatype);
SAME_OFFSET_IN_V5_AND_V6(coll.nChannels);
SAME_OFFSET_IN_V5_AND_V6(coll.algo);
SAME_OFFSET_IN_V5_AND_V6(coll.proto);
SAME_OFFSET_IN_V5_AND_V6(coll.parentGroup);
SAME_OFFSET_IN_V5_AND_V6(p2p.parentGroup);
SAME_OFFSET_IN_V5_AND_V6(kernelCh.pTimer);
#undef SAME_OFFSET_IN_V5_AND_V6
static_assert(sizeof(EventDescrV5) <= sizeof(EventDescrV6), "a v6 descriptor holds a v5 one");

}  // namespace ncclabi
