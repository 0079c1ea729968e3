// The online source's fields of the trace's `task` record (appended to the Context's own fields): how this rank
// looked its segments up, and what the task's search got from the GPU and decided. The trace report
// (python/autoccl/bench/trace_report.py) and `bench nccl-tests`' tasks.md read them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autoccl/search/search.h"

namespace autoccl::engine {

// This rank's segment lookups of the task and the time spent in them (waiting for the authority).
struct TaskLookups {
  const char* board = "";  // where the communicator decides (placeName)
  uint64_t lookups = 0, waitNs = 0, waitMaxNs = 0;
  uint64_t asked = 0;  // of the lookups, those the board did not hold: they waited for the authority
  uint64_t askAheadMax = 0;  // AUTOCCL_ASK_AHEAD=auto: the furthest it asked ahead, in calls (0: not printed)
  std::vector<std::pair<uint64_t, uint64_t>> slow;  // (call, ns) of the slowest lookups
};

// What the authority's search of the task did (absent on the other ranks).
struct TaskSearchRecord {
  search::Stats stats;
  uint64_t rankScored = 0;        // calls scored with other ranks' reports (ArrivalMerge)
  uint64_t shorterElsewhere = 0;  // of those, calls where another rank's window was shorter than the authority's
  uint64_t searchFrom = 0;        // the task's first call the search planned (before it: NCCL's default)
};

// `lookups` null: the source has not seen the task. `search` null: no search (not the authority).
std::string taskRecordFields(const TaskLookups* lookups, const TaskSearchRecord* search);

}  // namespace autoccl::engine
