#include "engine/stats.h"

#include <algorithm>
#include <cmath>

namespace autoccl::engine {

double medianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t n = v.size();
  size_t mid = n / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double hi = v[mid];
  if (n % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2;
}

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
  s.median = medianOf(ring_);
  std::vector<double> dev;
  dev.reserve(ring_.size());
  for (double x : ring_) dev.push_back(std::fabs(x - s.median));
  s.mad = medianOf(std::move(dev));
  s.noise = s.median > 0 ? 1.4826 * s.mad / s.median : 0;
  auto mm = std::minmax_element(ring_.begin(), ring_.end());
  s.min = *mm.first;
  s.max = *mm.second;
  return s;
}

}  // namespace autoccl::engine
