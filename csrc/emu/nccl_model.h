// What NCCL itself decides, rebuilt from NCCL's documented behaviour (2.28.x/2.30.x): the
// per-communicator cost model (bandwidths/latencies from the tuner constants), the cost table handed
// to the tuner, NCCL's (algorithm, protocol) rule, its channel and chunk defaults, and the
// NCCL_ALGO / NCCL_PROTO enable lists. Our own code; see docs/emulator.md for what is simplified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "../nccl/abi/tuner_v6.h"

namespace emu {

constexpr int kFuncs = ncclabi::kNumCollFuncs;
constexpr int kAlgos = ncclabi::kNumAlgorithms;
constexpr int kProtos = ncclabi::kNumProtocols;
enum Algo : int { kTree = 0, kRing = 1, kCollNetDirect = 2, kCollNetChain = 3, kNvls = 4, kNvlsTree = 5, kPat = 6 };
enum Proto : int { kLL = 0, kLL128 = 1, kSimple = 2 };
constexpr int kMaxChannels = 64;  // NCCL's MAXCHANNELS

// Strings exactly as NCCL's ncclFuncToString / ncclAlgoToString / ncclProtoToString produce them.
const char* ncclFuncString(int func);
const char* ncclAlgoString(int algo);
const char* ncclProtoString(int proto);
// Our lower-case names (scenario, ground truth, AUTOCCL_FIXED grammar).
const char* collName(int func);
const char* algoName(int algo);
const char* protoName(int proto);
int parseColl(const std::string& s);   // -1 if unknown
int parseAlgo(const std::string& s);   // -1 if unknown
int parseProto(const std::string& s);  // -1 if unknown

// NCCL_ALGO / NCCL_PROTO semantics ("ring;allreduce:tree", "^LL128", case-insensitive). Returns false
// (and an error text) on a value NCCL rejects; NCCL would then fail communicator creation.
bool parseEnableList(const char* str, const char* const* elems, int nelems, int* list /*[kFuncs*nelems]*/,
                     std::string* error);

void defaultTunerConstants(ncclabi::TunerConstantsV6* c);

struct CommModel {
  int nRanks = 4;
  int nNodes = 1;
  int nChannels = 24;       // the communicator's channel count (ceiling of every per-call choice)
  int graphChannels = 12;   // channels of the ring/tree search graph (NCCL doubles them into comm channels)
  double graphBwIntra = 30.0;  // GB/s per graph channel, NVLink (H200 x4: NV18)
  double graphBwInter = 25.0;  // GB/s per channel across nodes (used only with nNodes > 1)
  bool ll128Enabled = true;    // Hopper, all NVLink: NCCL enables LL128 by default
  float bandwidths[kFuncs][kAlgos][kProtos] = {};
  float latencies[kFuncs][kAlgos][kProtos] = {};
  int maxThreads[kAlgos][kProtos] = {};
  long threadThresholds[kAlgos][kProtos] = {};

  // ncclTopoTuneModel analogue. algoEnable/protoEnable: [kFuncs*kAlgos] / [kFuncs*kProtos], 1 = allowed
  // (already merged with NCCL_ALGO / NCCL_PROTO).
  void tune(const ncclabi::TunerConstantsV6& c, const int* algoEnable, const int* protoEnable);
  // updateCollCostTable analogue: -1 for unsupported or disabled pairs, else NCCL's estimate in us.
  void costTable(int func, size_t nBytes, int numPipeOps, float table[kAlgos][kProtos]) const;
  // topoGetAlgoInfo's channel count for the chosen pair (before the tuner's override).
  int defaultChannels(int algo, int proto, size_t nBytes) const;
  // calcCollChunking's chunk size for one channel partition of partBytes; bufferMax gets the clamp.
  size_t defaultChunk(int func, int algo, int proto, size_t partBytes, size_t* bufferMax) const;
  static size_t grainSize(int proto);
};

// NCCL's rule: the smallest entry >= 0. Returns false if every entry is negative.
bool pickAlgoProto(const float table[kAlgos][kProtos], int* algo, int* proto);

}  // namespace emu
