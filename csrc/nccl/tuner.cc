// The tuner plugin's entries (ncclTunerPlugin_v5, ncclTunerPlugin_v6): NCCL's arguments converted for the
// engine's Context, which decides; nothing is decided here.
#include <cstdio>
#include <memory>

#include "nccl/abi/tuner_v5.h"
#include "nccl/abi/tuner_v6.h"
#include "nccl/launch_clock.h"
#include "nccl/plugin.h"

namespace autoccl::shim {
namespace {

using engine::Context;
using engine::CostTable;
using engine::Mode;

struct TunerCtx {
  std::shared_ptr<Context> ctx;  // null: behave as no tuner
  // AUTOCCL_NCCL_CHANNELS with valid settings, applied even where no decision source could be built:
  // a rank whose tuner gave up must cap NCCL's choice exactly like the ranks whose tuner left it to NCCL.
  int ncclChannels = 0;
  bool failureShown = false;  // a failed collective's reason went to stderr (enqueue thread only)
};

ncclabi::Result init(bool chunkCallback, void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                     ncclabi::Logger logger, ncclabi::NvlDomainInfoV5* nvl) {
  if (!context) return ncclabi::kSuccess;
  *context = nullptr;
  try {
    engine::LogFn log = makeLog(logger);
    engine::Runtime& rt = runtime();
    rt.announce(log, kBanner);
    auto* t = new TunerCtx();
    *context = t;
    std::shared_ptr<Context> ctx = takeFromProfiler(commId);
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
ncclabi::Result initV5(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclabi::Logger logger,
                       ncclabi::NvlDomainInfoV5* nvl, ncclabi::TunerConstantsV5* /*constants*/) {
  return init(false, context, commId, nRanks, nNodes, logger, nvl);
}
ncclabi::Result initV6(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclabi::Logger logger,
                       ncclabi::NvlDomainInfoV6* nvl, ncclabi::TunerConstantsV6* /*constants*/) {
  return init(true, context, commId, nRanks, nNodes, logger, nvl);
}

ncclabi::Result getCollInfo(void* context, ncclabi::Func coll, size_t nBytes, int numPipeOps, float** collCostTable,
                            int numAlgo, int numProto, int /*regBuff*/, int* nChannels) {
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
    // The engine logged why as a WARN through NCCL's logger, which prints nothing without NCCL_DEBUG, and
    // NCCL then reports only its own "internal error": the reason goes to stderr too, once per communicator.
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

ncclabi::Result getChunkSize(void* context, ncclabi::Func coll, size_t /*nBytes*/, int algo, int proto,
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

ncclabi::Result finalize(void* context) {
  auto* t = static_cast<TunerCtx*>(context);
  if (!t) return ncclabi::kSuccess;
  try {
    LaunchClock::settleIfUsed(t->ctx.get());  // the times of completed calls, before the table is written
    if (t->ctx) t->ctx->finalizeTuner();
  } catch (...) {
  }
  delete t;
  return ncclabi::kSuccess;
}

}  // namespace
}  // namespace autoccl::shim

extern "C" {
__attribute__((visibility("default"))) ncclabi::TunerV5 ncclTunerPlugin_v5 = {
    autoccl::shim::kPluginName, autoccl::shim::initV5, autoccl::shim::getCollInfo, autoccl::shim::finalize};
__attribute__((visibility("default"))) ncclabi::TunerV6 ncclTunerPlugin_v6 = {
    autoccl::shim::kPluginName, autoccl::shim::initV6, autoccl::shim::getCollInfo, autoccl::shim::finalize,
    autoccl::shim::getChunkSize};
}
