// Robust per-task statistics of GPU times: a bounded window of recent samples, summarised by
// median and MAD (a single outlier on a shared GPU must not move the answer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace autoccl::engine {

struct StatsSummary {
  uint64_t count = 0;     // samples ever added
  size_t window = 0;      // samples the summary is computed from
  double median = 0;      // µs
  double mad = 0;         // median absolute deviation, µs
  double noise = 0;       // relative noise: 1.4826 * MAD / median (robust coefficient of variation)
  double min = 0;
  double max = 0;
};

class RobustStats {
 public:
  explicit RobustStats(size_t capacity = 256) : cap_(capacity ? capacity : 1) {}
  void add(double us);
  // Room for `n` samples now, so that adds and assignFrom up to n allocate nothing.
  void reserve(size_t n) { ring_.reserve(n); }
  // A copy of `o` into this window's storage (no allocation when reserve covered o's window).
  void assignFrom(const RobustStats& o) {
    cap_ = o.cap_;
    ring_.assign(o.ring_.begin(), o.ring_.end());
    next_ = o.next_;
    count_ = o.count_;
  }
  // Empty again, keeping the window's storage (no allocation on the next adds up to the capacity).
  void clear() {
    ring_.clear();
    next_ = 0;
    count_ = 0;
  }
  StatsSummary summary() const;
  uint64_t count() const { return count_; }

 private:
  size_t cap_;
  std::vector<double> ring_;  // grows to cap_, then overwritten oldest-first
  size_t next_ = 0;
  uint64_t count_ = 0;
};

}  // namespace autoccl::engine
