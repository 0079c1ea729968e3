#include "engine/stats.h"

#include <algorithm>
#include <cmath>

#include "autoccl/common/stats.h"

namespace autoccl::engine {

void RobustStats::add(double us) {
  if (!std::isfinite(us) || us < 0) return;
  ++count_;
  if (ring_.size() < cap_) {
    ring_.push_back(us);
  } else {
    ring_[next_] = us;
    next_ = (next_ + 1) % cap_;
  }
}

StatsSummary RobustStats::summary() const {
  StatsSummary s;
  s.count = count_;
  s.window = ring_.size();
  if (ring_.empty()) return s;
  s.median = autoccl::median(ring_);
  s.mad = autoccl::mad(ring_);
  s.noise = s.median > 0 ? 1.4826 * s.mad / s.median : 0;
  auto mm = std::minmax_element(ring_.begin(), ring_.end());
  s.min = *mm.first;
  s.max = *mm.second;
  return s;
}

}  // namespace autoccl::engine
