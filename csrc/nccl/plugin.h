// What the shim's tuner (tuner.cc) and profiler (profiler.cc) share: the process's Runtime, NCCL's logger
// as the engine's, and the hand-over of one (communicator, rank) context from the profiler to the tuner.
// libautoccl-nccl.so exports both plugin types from one library so that they share this process state.
//
// Rules at this boundary: never throw across the C ABI, never return an error to NCCL for our own
// problems (an error fails the collective or the communicator), leave NCCL's inputs untouched
// whenever we cannot do better.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/context.h"
#include "nccl/abi/common.h"

namespace autoccl::shim {

#ifndef AUTOCCL_VERSION
#define AUTOCCL_VERSION "0.1.0"
#endif
// The name both plugin tables carry, and the banner the Runtime logs once.
inline constexpr const char* kPluginName = "autoccl";
inline constexpr const char* kBanner = "autoccl " AUTOCCL_VERSION " (tuner v5/v6, profiler v5/v6/v7)";

// The engine's log callback on NCCL's logger (INFO/WARN under NCCL_DEBUG_SUBSYS=TUNING). Without a logger
// (a test harness), warnings go to stderr.
engine::LogFn makeLog(ncclabi::Logger logger);

// One per process, never destroyed: NCCL threads may still call in while static destructors run.
engine::Runtime& runtime();

// Profiler init runs just before tuner init of the same communicator, on the same thread, with the same
// comm hash (NCCL init.cc): the profiler leaves its context for the tuner to take.
void leaveForTuner(uint64_t commId, std::shared_ptr<engine::Context> ctx);
std::shared_ptr<engine::Context> takeFromProfiler(uint64_t commId);

}  // namespace autoccl::shim
