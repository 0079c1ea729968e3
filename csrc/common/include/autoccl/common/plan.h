// A task's plan, shared by the search that makes it and the coordinator that agrees on it: immutable
// segments [begin, end) of call indices, each with the configuration every rank applies.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "autoccl/common/config.h"

namespace autoccl {

constexpr uint64_t kForever = std::numeric_limits<uint64_t>::max();

enum class Phase : uint8_t {
  kTuning = 0,   // exploring candidates
  kPinned = 1,   // converged; config fixed, timing off
  kCheck = 2,    // converged; a short drift re-check (timing on)
  kFinal = 3,    // end of the plan: this config forever (end == kForever)
};
const char* phaseName(Phase p);

struct Segment {
  uint64_t begin = 0;
  uint64_t end = 0;  // exclusive; kForever for a final segment
  Config cfg;
  Phase phase = Phase::kTuning;
  bool contains(uint64_t k) const { return k >= begin && k < end; }
  bool operator==(const Segment& o) const {
    return begin == o.begin && end == o.end && cfg == o.cfg && phase == o.phase;
  }
};

// The segments of a plan (contiguous, in call order: their ends increase) that end after call k, found by binary
// search: what a lookup past coverage k is answered with, without walking a plan that grows with the job.
inline std::vector<Segment> segmentsAfter(const std::vector<Segment>& plan, uint64_t k) {
  auto first = std::partition_point(plan.begin(), plan.end(), [k](const Segment& g) { return g.end <= k; });
  return std::vector<Segment>(first, plan.end());
}

}  // namespace autoccl
