// Robust statistics of GPU times (median, median absolute deviation): a single outlier on a shared GPU
// must not move the answer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace autoccl {

// Median (the mean of the two middle values for an even count); 0 for no values.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end());
  double hi = v[m];
  if (v.size() % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m));
  return 0.5 * (lo + hi);
}

// The lower of the two middle values for an even count (of two samples the smaller): robust to one slow
// outlier among two samples, where the mean of the middle two is the outlier's.
inline double lowMedian(std::vector<double> v) {
  if (v.empty()) return 0.0;
  size_t m = (v.size() - 1) / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end());
  return v[m];
}

// Median absolute deviation (unscaled; multiply by 1.4826 for a normal sigma).
inline double mad(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double m = median(v);
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = std::fabs(v[i] - m);
  return median(std::move(d));
}

}  // namespace autoccl
