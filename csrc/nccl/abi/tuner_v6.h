// The tuner plugin interface v6 (ncclTunerPlugin_v6; NCCL 2.30.3 and later): v5 and getChunkSize. Our
// declarations; the layout follows NCCL's plugin/tuner/tuner_v6.h, checked by scripts/check_nccl_abi.sh.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tuner_v5.h"

namespace ncclabi {

using NvlDomainInfoV6 = NvlDomainInfoV5;    // ncclNvlDomainInfo_v6_t is v5's
using TunerConstantsV6 = TunerConstantsV5;  // ncclTunerConstants_v6_t is v5's
using TunerInitV6Fn = Result (*)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, Logger log,
                                 NvlDomainInfoV6* nvl, TunerConstantsV6* constants);
// NCCL's chunk for this channel partition in *chunkSize; NCCL clamps a larger answer to the buffer's chunk.
using TunerGetChunkSizeFn = Result (*)(void* ctx, Func coll, size_t nBytes, int algo, int proto, int nChannels,
                                       size_t* chunkSize);

struct TunerV6 {  // ncclTuner_v6_t
  const char* name;
  TunerInitV6Fn init;
  TunerGetCollInfoFn getCollInfo;
  TunerFinalizeFn finalize;
  TunerGetChunkSizeFn getChunkSize;  // may be NULL
};

static_assert(sizeof(TunerV6) == 5 * sizeof(void*), "ncclTuner_v6_t");
static_assert(offsetof(TunerV6, getChunkSize) == 4 * sizeof(void*), "ncclTuner_v6_t.getChunkSize");

}  // namespace ncclabi
