// Profiler chaining (AUTOCCL_PROFILER_CHAIN=<another profiler plugin .so>): NCCL loads one profiler plugin per
// process, so autoccl's profiler loads the other one (NCCL Inspector, a site's own) and forwards every event
// to it. Both run side by side:
//  * Contexts and event handles are pairs (ours, theirs). NCCL holds the pair's handle; parent handles in a
//    descriptor (parentObj, coll/p2p.parentGroup) are translated to each side's own before it sees them.
//  * The activation mask NCCL reads is ours OR-ed with the bits the chained plugin asked for at its init.
//    Our own profiler sees only the events it asked for: a top-level event while our bits want it, a child
//    event (KernelCh, ProxyOp...) when we took its parent. NCCL reads the mask once per group: a Coll of a
//    group read before our bits turned on can reach us without the KernelCh events they ask for (the chained
//    plugin asked for Coll alone); that call's sample is then lost, which the engine tolerates.
//  * Versions: NCCL may drive us through v5, v6 or v7 and the chained plugin may export any of them. Each version
//    only appends members to the previous one's event structs (nccl/abi/profiler_v7.h), so NCCL's descriptor is
//    copied into a zeroed v7 one (a v6 NCCL's calls then read as untagged) and handed to either side as it is.
//    A plugin is never given an event type newer than its version (v6's copy-engine events, v7's kernel phases).
// Pair handles live in a fixed table, reused in allocation order once stopped (NCCL hands out a parent's
// handle after the parent stopped: a Coll's KernelCh events come from the proxy thread later). A handle
// carries its slot's generation: one whose slot was reused since is dropped, never misdelivered.
#pragma once

#include <cstdint>
#include <string>

#include "nccl/abi/profiler_v7.h"

namespace autoccl::shim::chain {

// Our own profiler's entries (profiler.cc), as the chain drives them (v7 descriptors).
struct Own {
  ncclabi::ProfilerInitFn init;
  ncclabi::ProfilerStartEventV7Fn startEvent;
  ncclabi::ProfilerStopEventFn stopEvent;
  ncclabi::ProfilerRecordStateV7Fn recordEventState;
  ncclabi::ProfilerFinalizeFn finalize;
  // The event bits our profiler of `context` takes now (0: none), and the bits it may ever take.
  uint64_t (*wants)(void* context);
  uint64_t (*mayWant)(void* context);
};

// Loads the plugin at `path` once per process (the first profiler init) and returns whether chaining is on.
// A path that cannot be loaded or exports no supported profiler: one WARN through `logger`, chaining off.
bool setUp(const char* path, const Own& own, ncclabi::Logger logger);
bool active();

// The entries NCCL calls while chaining is on (every interface version: descriptors read as v7).
ncclabi::Result init(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                     int nRanks, int rank, ncclabi::Logger logger);
// `descr`: NCCL's v5, v6 or v7 descriptor, `descrSize` bytes (the size of the version NCCL called through).
ncclabi::Result startEvent(void* context, void** eHandle, const void* descr, size_t descrSize);
ncclabi::Result stopEvent(void* eHandle);
ncclabi::Result recordEventState(void* eHandle, ncclabi::ProfileState state, ncclabi::EventStateArgsV7* args);
ncclabi::Result finalize(void* context);

}  // namespace autoccl::shim::chain
