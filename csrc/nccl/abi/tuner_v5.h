// The tuner plugin interface v5 (ncclTunerPlugin_v5; NCCL 2.28.3 and later). Our declarations; the layout
// follows NCCL's plugin/tuner/tuner_v5.h, checked against it by scripts/check_nccl_abi.sh.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common.h"

namespace ncclabi {

struct NvlDomainInfoV5 {  // ncclNvlDomainInfo_v5_t
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
};

// ncclTunerConstants_v5_t: NCCL's model constants, editable by the tuner at init (autoccl leaves them).
constexpr int kNumHwLinks = 3;
constexpr int kNumCompCaps = 4;
constexpr int kNumTuningScales = 3;
struct TunerConstantsV5 {
  double baseLatencies[kNumAlgorithms][kNumProtocols];
  double hwLatencies[kNumHwLinks][kNumAlgorithms][kNumProtocols];
  double llMaxBws[kNumCompCaps][kNumTuningScales];
  double perChMaxRingLL128Bws[kNumCompCaps][kNumTuningScales];
  double perChMaxTreeLL128Bws[kNumCompCaps][kNumTuningScales];
  double perChMaxTreeBws[kNumCompCaps][kNumTuningScales];
  double perChMaxNVLSTreeBws[kNumCompCaps][kNumTuningScales];
};

using TunerInitV5Fn = Result (*)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, Logger log,
                                 NvlDomainInfoV5* nvl, TunerConstantsV5* constants);
// NCCL passes its float[numAlgo][numProto] cost table cast to float**.
using TunerGetCollInfoFn = Result (*)(void* ctx, Func coll, size_t nBytes, int numPipeOps, float** collCostTable,
                                      int numAlgo, int numProto, int regBuff, int* nChannels);
using TunerFinalizeFn = Result (*)(void* ctx);

struct TunerV5 {  // ncclTuner_v5_t
  const char* name;
  TunerInitV5Fn init;
  TunerGetCollInfoFn getCollInfo;
  TunerFinalizeFn finalize;
};

// The layout NCCL's header defines (LP64: x86-64, aarch64).
static_assert(sizeof(NvlDomainInfoV5) == 12, "ncclNvlDomainInfo_v5_t");
static_assert(sizeof(TunerConstantsV5) == 144 * sizeof(double), "ncclTunerConstants_v5_t");
static_assert(offsetof(TunerConstantsV5, hwLatencies) == 21 * sizeof(double), "ncclTunerConstants_v5_t.hwLatencies");
static_assert(offsetof(TunerConstantsV5, llMaxBws) == 84 * sizeof(double), "ncclTunerConstants_v5_t.llMaxBws");
static_assert(offsetof(TunerConstantsV5, perChMaxNVLSTreeBws) == 132 * sizeof(double),
              "ncclTunerConstants_v5_t.perChMaxNVLSTreeBws");
static_assert(sizeof(TunerV5) == 4 * sizeof(void*), "ncclTuner_v5_t");
static_assert(offsetof(TunerV5, init) == 1 * sizeof(void*), "ncclTuner_v5_t.init");
static_assert(offsetof(TunerV5, getCollInfo) == 2 * sizeof(void*), "ncclTuner_v5_t.getCollInfo");
static_assert(offsetof(TunerV5, finalize) == 3 * sizeof(void*), "ncclTuner_v5_t.finalize");
static_assert(offsetof(NvlDomainInfoV5, nNvlDomains) == 0, "ncclNvlDomainInfo_v5_t.nNvlDomains");

}  // namespace ncclabi
