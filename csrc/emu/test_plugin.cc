// A deliberately simple tuner+profiler plugin used only by the emulator's own tests
// (libautoccl-emu-testplugin.so). It is NOT the product: it lets the tests prove that the emulator detects
// divergence and unsupported pairs, follows the v5/v6 symbol paths, and delivers kernel events correctly.
// Behaviour from EMU_TEST_PLUGIN:
//   fixed:<algo>/<proto>/<channels>/<chunk>  force a pair (0 in the cost table), channels, chunk (v6)
//   diverge                                  odd ranks pick another protocol than even ranks
//   unsupported                              write 0 into a -1 entry (CollNetDirect/Simple)
//   initfail                                 tuner init returns an error
// EMU_TEST_PLUGIN_TRACE=<path>: one JSONL line per Coll with the kernel time seen by the profiler.
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../nccl/abi/profiler_v5.h"
#include "../nccl/abi/profiler_v6.h"
#include "../nccl/abi/tuner_v5.h"
#include "../nccl/abi/tuner_v6.h"

namespace {
using namespace ncclabi;

thread_local int tlsLastRank = -1;
thread_local uint64_t tlsLastComm = 0;

struct Ctx {
  uint64_t comm = 0;
  int rank = -1;
};
struct ProfCtx {
  uint64_t comm = 0;
  int rank = 0;
};
struct CollEv {
  ProfCtx* ctx;
  uint64_t seq;
  std::string func;
  int nChannels;
  int seen = 0;
  uint64_t minStart = UINT64_MAX, maxStop = 0;
  std::string algo, proto;
  size_t count;
};
struct ChEv {
  CollEv* coll;
  uint64_t start;
};

std::mutex gMu;
FILE* gTrace = nullptr;

std::string mode() {
  const char* m = std::getenv("EMU_TEST_PLUGIN");
  return m ? m : "";
}

int algoId(const std::string& s) {
  const char* n[] = {"tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"};
  for (int i = 0; i < 7; ++i)
    if (s == n[i]) return i;
  return -1;
}
int protoId(const std::string& s) {
  const char* n[] = {"ll", "ll128", "simple"};
  for (int i = 0; i < 3; ++i)
    if (s == n[i]) return i;
  return -1;
}
struct Fixed {
  int algo = -1, proto = -1, channels = 0;
  size_t chunk = 0;
};
Fixed parseFixed() {
  Fixed f;
  std::string m = mode();
  if (m.rfind("fixed:", 0) != 0) return f;
  char a[32] = {0}, p[32] = {0};
  int ch = 0;
  unsigned long chunk = 0;
  if (std::sscanf(m.c_str() + 6, "%31[a-z0-9]/%31[a-z0-9]/%d/%lu", a, p, &ch, &chunk) >= 2) {
    f.algo = algoId(a);
    f.proto = protoId(p);
    f.channels = ch;
    f.chunk = chunk;
  }
  return f;
}

Result tInit(void** ctx, uint64_t commId, size_t, size_t, Logger log, NvlDomainInfoV5*, TunerConstantsV5*) {
  if (mode() == "initfail") {
    log(kLogWarn, 0, __FILE__, __LINE__, "testplugin: init fails on purpose");
    return kInternalError;
  }
  Ctx* c = new Ctx;
  c->comm = commId;
  c->rank = tlsLastComm == commId ? tlsLastRank : -1;
  *ctx = c;
  return kSuccess;
}
Result tGetCollInfo(void* ctx, Func, size_t, int, float** table, int numAlgo, int numProto, int, int* nChannels) {
  Ctx* c = static_cast<Ctx*>(ctx);
  float(*t)[3] = reinterpret_cast<float(*)[3]>(table);
  (void)numAlgo;
  (void)numProto;
  std::string m = mode();
  if (m == "diverge") {
    int p = (c->rank % 2 == 0) ? 2 : 1;
    if (t[1][p] >= 0) t[1][p] = 0;
  } else if (m == "unsupported") {
    t[2][2] = 0;
  } else {
    Fixed f = parseFixed();
    if (f.algo >= 0 && f.proto >= 0 && t[f.algo][f.proto] >= 0) t[f.algo][f.proto] = 0;
    if (f.channels > 0) *nChannels = f.channels;
  }
  return kSuccess;
}
Result tGetChunkSize(void*, Func, size_t, int, int, int, size_t* chunk) {
  Fixed f = parseFixed();
  if (f.chunk > 0) *chunk = f.chunk;
  return kSuccess;
}
Result tFinalize(void* ctx) {
  delete static_cast<Ctx*>(ctx);
  return kSuccess;
}

Result pInit(void** ctx, uint64_t commId, int* mask, const char*, int, int, int rank, Logger) {
  ProfCtx* c = new ProfCtx{commId, rank};
  *ctx = c;
  tlsLastRank = rank;
  tlsLastComm = commId;
  __atomic_store_n(mask, static_cast<int>(kEvColl | kEvKernelCh), __ATOMIC_RELAXED);
  std::lock_guard<std::mutex> lk(gMu);
  const char* path = std::getenv("EMU_TEST_PLUGIN_TRACE");
  if (path && !gTrace) gTrace = std::fopen(path, "w");
  return kSuccess;
}
template <class EventDescr>
Result pStart(void* ctx, void** handle, EventDescr* d) {
  *handle = nullptr;
  if (d->type == kEvColl) {
    CollEv* e = new CollEv{static_cast<ProfCtx*>(ctx), d->coll.seqNumber, d->coll.func, d->coll.nChannels, 0,
                           UINT64_MAX, 0, d->coll.algo, d->coll.proto, d->coll.count};
    *handle = e;
  } else if (d->type == kEvKernelCh && d->parentObj) {
    *handle = new ChEv{static_cast<CollEv*>(d->parentObj), d->kernelCh.pTimer};
  }
  return kSuccess;
}
Result pStop(void* handle) {
  (void)handle;  // Coll stop = enqueued; kernel-channel objects are freed in recordEventState
  return kSuccess;
}
Result pRecord(void* handle, ProfileState state, EventStateArgsV5* args) {
  if (state != kStateKernelChStop || !handle) return kSuccess;
  ChEv* ch = static_cast<ChEv*>(handle);
  CollEv* c = ch->coll;
  std::lock_guard<std::mutex> lk(gMu);
  if (ch->start < c->minStart) c->minStart = ch->start;
  if (args->kernelCh.pTimer > c->maxStop) c->maxStop = args->kernelCh.pTimer;
  if (++c->seen == c->nChannels) {
    if (gTrace) {
      std::fprintf(gTrace,
                   "{\"comm\":\"%016llx\",\"rank\":%d,\"seq\":%llu,\"func\":\"%s\",\"algo\":\"%s\",\"proto\":\"%s\","
                   "\"channels\":%d,\"count\":%zu,\"dur_ns\":%llu}\n",
                   static_cast<unsigned long long>(c->ctx->comm), c->ctx->rank, static_cast<unsigned long long>(c->seq),
                   c->func.c_str(), c->algo.c_str(), c->proto.c_str(), c->nChannels, c->count,
                   static_cast<unsigned long long>(c->maxStop - c->minStart));
      std::fflush(gTrace);
    }
    delete c;
  }
  delete ch;
  return kSuccess;
}
Result pFinalize(void* ctx) {
  delete static_cast<ProfCtx*>(ctx);
  return kSuccess;
}
}  // namespace

extern "C" {
__attribute__((visibility("default"))) TunerV6 ncclTunerPlugin_v6 = {"emu-testplugin", tInit, tGetCollInfo, tFinalize,
                                                                      tGetChunkSize};
__attribute__((visibility("default"))) TunerV5 ncclTunerPlugin_v5 = {"emu-testplugin", tInit, tGetCollInfo, tFinalize};
__attribute__((visibility("default"))) ProfilerV6 ncclProfiler_v6 = {"emu-testplugin", pInit, pStart<EventDescrV6>, pStop, pRecord,
                                                                     pFinalize};
__attribute__((visibility("default"))) ProfilerV5 ncclProfiler_v5 = {"emu-testplugin", pInit, pStart<EventDescrV5>, pStop, pRecord,
                                                                     pFinalize};
}
