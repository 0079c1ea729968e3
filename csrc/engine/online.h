// Mode `online`: the search (autoccl_search) behind the agreement layer (autoccl_coord).
//
// One authority per communicator: the context of its rank 0 (rank from the profiler pairing) owns a
// SearchDecider (search_decider.h) and feeds it the GPU times of its own kernels. Every rank, the authority
// included, applies only what the board holds for (task, call index), so ranks cannot diverge.
//
// Where decisions are agreed: coordination.h (the board, the TCP coordinator); how ranks' times are merged:
// merge.h.
#pragma once

#include <memory>
#include <string>

#include "engine/coordination.h"
#include "engine/merge.h"
#include "engine/policy.h"
#include "autoccl/search/search.h"

namespace autoccl::engine {

// Creates the online source for one (communicator, rank) context (rank >= 0). nullptr + *error when
// it cannot run (then the context behaves as no tuner).
std::unique_ptr<DecisionSource> makeOnlineSource(const PolicyEnv& env, std::string* error);

// Options of the online search used by the engine (tests reuse them).
search::Options onlineSearchOptions();

}  // namespace autoccl::engine
