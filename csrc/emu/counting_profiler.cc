// A profiler plugin for the tests of profiler chaining (AUTOCCL_PROFILER_CHAIN): it counts every event it is
// given by type (starts, stops, state records) and checks that the parents it is handed are its own handles.
// Not the product. Built three times: libautoccl-emu-countingprofiler.so exports ncclProfiler_v6 alone,
// libautoccl-emu-countingprofiler-v5.so ncclProfiler_v5 alone (COUNTING_PROFILER_V5), -v7.so ncclProfiler_v7
// alone (COUNTING_PROFILER_V7; it also counts Coll events that arrive tagged or with a kernel variant: an
// older NCCL's untagged calls must arrive with those members zero, read from memory that is the descriptor's).
//   EMU_COUNTING_PROFILER_OUT=<dir>   at each finalize, the process's counts to <dir>/counts.<pid>.json
//   EMU_COUNTING_PROFILER_MASK=<int>  the activation mask it asks for (default: every event type it knows)
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_set>

#include "../nccl/abi/profiler_v5.h"
#include "../nccl/abi/profiler_v6.h"
#include "../nccl/abi/profiler_v7.h"

namespace {
using namespace ncclabi;

#if defined(COUNTING_PROFILER_V5)
constexpr int kVersion = 5;
constexpr int kTypes = 12;  // v5 knows event bits 0..11
using Descr = EventDescrV5;
#elif defined(COUNTING_PROFILER_V7)
constexpr int kVersion = 7;
constexpr int kTypes = 16;
using Descr = EventDescrV7;
#else
constexpr int kVersion = 6;
constexpr int kTypes = 15;
using Descr = EventDescrV6;
#endif

struct Event {
  uint64_t type;
};

std::mutex gMu;
std::deque<Event> gEvents;                  // handles stay valid for the process's life (a test's run)
std::unordered_set<const void*> gColls, gGroups;
std::array<uint64_t, kTypes> gStarts{}, gStops{}, gStates{};
uint64_t gInits = 0, gFinalizes = 0, gUnknown = 0;
uint64_t gKernelChParentOk = 0, gKernelChParentBad = 0, gKernelChParentNull = 0, gCollGroupOk = 0, gCollGroupBad = 0;
uint64_t gCollTagged = 0, gCollVariant = 0;  // v7 members of Coll events: nonzero tag, a kernel variant
uint64_t gPhaseParentOk = 0;                 // v7 kernel phases whose parent is one of its KernelCh handles
std::unordered_set<const void*> gKernelChs;

int indexOf(uint64_t type) {
  for (int i = 0; i < kTypes; ++i)
    if (type == (uint64_t{1} << i)) return i;
  return -1;
}

std::string list(const std::array<uint64_t, kTypes>& a) {
  std::string s = "[";
  for (int i = 0; i < kTypes; ++i) s += (i ? "," : "") + std::to_string(a[static_cast<size_t>(i)]);
  return s + "]";
}

void writeCountsLocked() {
  const char* dir = std::getenv("EMU_COUNTING_PROFILER_OUT");
  if (!dir || !*dir) return;
  const std::string path = std::string(dir) + "/counts." + std::to_string(getpid()) + ".json";
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return;
  std::fprintf(f,
               "{\"version\":%d,\"inits\":%llu,\"finalizes\":%llu,\"unknown\":%llu,\"starts\":%s,\"stops\":%s,"
               "\"states\":%s,\"kernelch_parent_ok\":%llu,\"kernelch_parent_bad\":%llu,\"kernelch_parent_null\":%llu,"
               "\"coll_group_ok\":%llu,"
               "\"coll_group_bad\":%llu,\"coll_tagged\":%llu,\"coll_variant\":%llu,\"phase_parent_ok\":%llu}\n",
               kVersion, static_cast<unsigned long long>(gInits), static_cast<unsigned long long>(gFinalizes),
               static_cast<unsigned long long>(gUnknown), list(gStarts).c_str(), list(gStops).c_str(),
               list(gStates).c_str(), static_cast<unsigned long long>(gKernelChParentOk),
               static_cast<unsigned long long>(gKernelChParentBad), static_cast<unsigned long long>(gKernelChParentNull),
               static_cast<unsigned long long>(gCollGroupOk),
               static_cast<unsigned long long>(gCollGroupBad), static_cast<unsigned long long>(gCollTagged),
               static_cast<unsigned long long>(gCollVariant), static_cast<unsigned long long>(gPhaseParentOk));
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

Result init(void** ctx, uint64_t, int* mask, const char*, int, int, int, Logger) {
  std::lock_guard<std::mutex> lock(gMu);
  ++gInits;
  *ctx = &gEvents;
  int m = (1 << kTypes) - 1;
  if (const char* v = std::getenv("EMU_COUNTING_PROFILER_MASK")) m = std::atoi(v);
  if (mask) *mask = m;
  return kSuccess;
}

Result startEvent(void*, void** handle, Descr* d) {
  std::lock_guard<std::mutex> lock(gMu);
  const int i = indexOf(d->type);
  if (i < 0) {
    ++gUnknown;
    *handle = nullptr;
    return kSuccess;
  }
  ++gStarts[static_cast<size_t>(i)];
  gEvents.push_back(Event{d->type});
  void* h = &gEvents.back();
  if (d->type == kEvColl) {
    gColls.insert(h);
#ifdef COUNTING_PROFILER_V7
    if (d->coll.userTag) ++gCollTagged;
    if (d->coll.kernelVariant) ++gCollVariant;
#endif
    if (d->coll.parentGroup) ++(gGroups.count(d->coll.parentGroup) ? gCollGroupOk : gCollGroupBad);
  } else if (d->type == kEvGroup || d->type == kEvGroupApi) {  // a Coll's parentGroup: either, by NCCL version
    gGroups.insert(h);
  } else if (d->type == kEvKernelCh) {
    gKernelChs.insert(h);
    if (!d->parentObj) ++gKernelChParentNull;
    else ++(gColls.count(d->parentObj) ? gKernelChParentOk : gKernelChParentBad);
  } else if (d->type == (uint64_t{1} << 15) && gKernelChs.count(d->parentObj)) {  // a v7 kernel phase
    ++gPhaseParentOk;
  }
  *handle = h;
  return kSuccess;
}

Result stopEvent(void* handle) {
  std::lock_guard<std::mutex> lock(gMu);
  const int i = indexOf(static_cast<Event*>(handle)->type);
  if (i >= 0) ++gStops[static_cast<size_t>(i)];
  return kSuccess;
}

Result recordEventState(void* handle, ProfileState, EventStateArgsV5*) {
  std::lock_guard<std::mutex> lock(gMu);
  const int i = indexOf(static_cast<Event*>(handle)->type);
  if (i >= 0) ++gStates[static_cast<size_t>(i)];
  return kSuccess;
}

Result finalize(void*) {
  std::lock_guard<std::mutex> lock(gMu);
  ++gFinalizes;
  writeCountsLocked();
  return kSuccess;
}

}  // namespace

extern "C" {
#if defined(COUNTING_PROFILER_V5)
__attribute__((visibility("default"))) ProfilerV5 ncclProfiler_v5 = {"counting", init, startEvent, stopEvent,
                                                                     recordEventState, finalize};
#elif defined(COUNTING_PROFILER_V7)
__attribute__((visibility("default"))) ProfilerV7 ncclProfiler_v7 = {"counting", init, startEvent, stopEvent,
                                                                     recordEventState, finalize};
#else
__attribute__((visibility("default"))) ProfilerV6 ncclProfiler_v6 = {"counting", init, startEvent, stopEvent,
                                                                     recordEventState, finalize};
#endif
}
