// What every NCCL plugin interface version shares: the result codes, the logger, the collective ids and
// the profiler's event bits and states. Written for this project: the names are ours; the numeric values and
// the memory layout follow NCCL's headers (nccl.h, nccl_common.h, plugin/nccl_profiler.h of NCCL 2.28 - 2.30),
// which scripts/check_nccl_abi.sh compiles against these declarations.
// Used by the shim (csrc/nccl) and the emulator (csrc/emu) alone: the engine never sees NCCL's types.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ncclabi {

// ncclResult_t, an int-sized enum: 0 success, 1 unhandled CUDA error, 2 system, 3 internal, 4 invalid argument,
// 5 invalid usage, 6 remote error, 7 in progress.
using Result = int;
constexpr Result kSuccess = 0;
constexpr Result kInternalError = 3;
constexpr Result kInvalidArgument = 4;

// ncclDebugLogLevel and the ncclDebugLogSubSys bits the plugin logs under.
enum LogLevel : int { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogAbort = 4, kLogTrace = 5 };
constexpr unsigned long kLogSubsysInit = 0x1;
constexpr unsigned long kLogSubsysColl = 0x2;
constexpr unsigned long kLogSubsysTuning = 0x40;
constexpr unsigned long kLogSubsysEnv = 0x80;
// ncclDebugLogger_t
using Logger = void (*)(LogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...);

// ncclFunc_t: the collectives a tuner is asked about are the first kNumCollFuncs.
enum Func : int {
  kBroadcast = 0, kReduce = 1, kAllGather = 2, kReduceScatter = 3, kAllReduce = 4, kSendRecv = 5, kSend = 6, kRecv = 7
};
constexpr int kNumCollFuncs = 5;       // NCCL_NUM_FUNCTIONS
constexpr int kNumAlgorithms = 7;      // NCCL_NUM_ALGORITHMS: Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT
constexpr int kNumProtocols = 3;       // NCCL_NUM_PROTOCOLS: LL, LL128, Simple
constexpr float kCostIgnore = -1.0f;   // NCCL_ALGO_PROTO_IGNORE: a cost-table entry NCCL marks unsupported

// The profiler's event type bits (eActivationMask and a descriptor's type).
enum ProfileEvent : uint64_t {
  kEvGroup = 1u << 0, kEvColl = 1u << 1, kEvP2p = 1u << 2, kEvProxyOp = 1u << 3, kEvProxyStep = 1u << 4,
  kEvProxyCtrl = 1u << 5, kEvKernelCh = 1u << 6, kEvNetPlugin = 1u << 7, kEvGroupApi = 1u << 8,
  kEvCollApi = 1u << 9, kEvP2pApi = 1u << 10, kEvKernelLaunch = 1u << 11,
  kEvCeColl = 1u << 12, kEvCeSync = 1u << 13, kEvCeBatch = 1u << 14,  // profiler v6
};
// ncclProfilerEventState_t (one enum for every profiler version), the states the plugin reads.
enum ProfileState : int { kStateKernelChStop = 22 };

}  // namespace ncclabi
