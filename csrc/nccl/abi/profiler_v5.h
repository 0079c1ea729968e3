// The profiler plugin interface v5 (ncclProfiler_v5; NCCL 2.28.3 and later). Our declarations; the layout
// follows NCCL's plugin/profiler/profiler_v5.h, checked against it by scripts/check_nccl_abi.sh.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "common.h"

namespace ncclabi {

// ncclProfilerEventDescr_v5_t: what an event is. The plugin reads type, parentObj, coll, kernelCh and
// kernelLaunch; the other members are declared for the layout.
struct EventDescrV5 {
  uint64_t type;     // one ProfileEvent bit
  void* parentObj;   // the parent event's handle (a Coll's Group, a KernelCh's Coll)
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
  };
};

union EventStateArgsV5 {  // ncclProfilerEventStateArgs_v5_t
  struct { size_t transSize; } proxyStep;
  struct { int appendedProxyOps; } proxyCtrl;
  struct { void* data; } netPlugin;
  struct { uint64_t pTimer; } kernelCh;
};

using ProfilerInitFn = Result (*)(void** ctx, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                                  int nRanks, int rank, Logger log);
using ProfilerStartEventV5Fn = Result (*)(void* ctx, void** eHandle, EventDescrV5* descr);
using ProfilerStopEventFn = Result (*)(void* eHandle);
using ProfilerRecordStateV5Fn = Result (*)(void* eHandle, ProfileState state, EventStateArgsV5* args);
using ProfilerFinalizeFn = Result (*)(void* ctx);

struct ProfilerV5 {  // ncclProfiler_v5_t
  const char* name;
  ProfilerInitFn init;
  ProfilerStartEventV5Fn startEvent;
  ProfilerStopEventFn stopEvent;
  ProfilerRecordStateV5Fn recordEventState;
  ProfilerFinalizeFn finalize;
};

// The layout NCCL's header defines (LP64: x86-64, aarch64).
static_assert(offsetof(EventDescrV5, type) == 0, "ncclProfilerEventDescr_v5_t.type");
static_assert(offsetof(EventDescrV5, parentObj) == 8, "ncclProfilerEventDescr_v5_t.parentObj");
static_assert(offsetof(EventDescrV5, rank) == 16, "ncclProfilerEventDescr_v5_t.rank");
static_assert(offsetof(EventDescrV5, coll) == 24, "ncclProfilerEventDescr_v5_t union");
static_assert(offsetof(EventDescrV5, coll.seqNumber) == 24, "ncclProfilerEventDescr_v5_t.coll.seqNumber");
static_assert(offsetof(EventDescrV5, coll.func) == 24 + 8, "ncclProfilerEventDescr_v5_t.coll.func");
static_assert(offsetof(EventDescrV5, coll.count) == 24 + 32, "ncclProfilerEventDescr_v5_t.coll.count");
static_assert(offsetof(EventDescrV5, coll.datatype) == 24 + 48, "ncclProfilerEventDescr_v5_t.coll.datatype");
static_assert(offsetof(EventDescrV5, coll.nChannels) == 24 + 56, "ncclProfilerEventDescr_v5_t.coll.nChannels");
static_assert(offsetof(EventDescrV5, coll.algo) == 24 + 64, "ncclProfilerEventDescr_v5_t.coll.algo");
static_assert(offsetof(EventDescrV5, coll.proto) == 24 + 72, "ncclProfilerEventDescr_v5_t.coll.proto");
static_assert(offsetof(EventDescrV5, coll.parentGroup) == 24 + 80, "ncclProfilerEventDescr_v5_t.coll.parentGroup");
// Written by profiler chaining (the chained plugin's own parent handle): a P2p's parentGroup.
static_assert(offsetof(EventDescrV5, p2p.parentGroup) == 24 + 40, "ncclProfilerEventDescr_v5_t.p2p.parentGroup");
static_assert(offsetof(EventDescrV5, kernelCh.pTimer) == 24 + 8, "ncclProfilerEventDescr_v5_t.kernelCh.pTimer");
static_assert(offsetof(EventDescrV5, kernelLaunch.stream) == 24, "ncclProfilerEventDescr_v5_t.kernelLaunch.stream");
static_assert(sizeof(EventDescrV5) == 24 + 88, "ncclProfilerEventDescr_v5_t");
static_assert(sizeof(EventStateArgsV5) == 8, "ncclProfilerEventStateArgs_v5_t");
static_assert(offsetof(EventStateArgsV5, kernelCh.pTimer) == 0, "ncclProfilerEventStateArgs_v5_t.kernelCh.pTimer");
static_assert(sizeof(ProfilerV5) == 6 * sizeof(void*), "ncclProfiler_v5_t");
static_assert(offsetof(ProfilerV5, init) == 1 * sizeof(void*) && offsetof(ProfilerV5, startEvent) == 2 * sizeof(void*) &&
                  offsetof(ProfilerV5, stopEvent) == 3 * sizeof(void*) &&
                  offsetof(ProfilerV5, recordEventState) == 4 * sizeof(void*) &&
                  offsetof(ProfilerV5, finalize) == 5 * sizeof(void*),
              "ncclProfiler_v5_t: name, init, startEvent, stopEvent, recordEventState, finalize");

}  // namespace ncclabi
