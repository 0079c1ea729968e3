// The decision sources' factory: one source per (communicator, rank) context, by mode. Observe, fixed, table
// and manual are built in engine/sources.cc, online in engine/online.cc (makeOnlineSource).
#pragma once

#include <memory>
#include <string>

#include "engine/policy.h"

namespace autoccl::engine {

// Creates the source for settings.mode (never for Off). Returns nullptr with *error set when the mode cannot
// run here (online without the profiler or without a usable coordinator).
std::unique_ptr<DecisionSource> makeDecisionSource(const PolicyEnv& env, std::string* error);

}  // namespace autoccl::engine
