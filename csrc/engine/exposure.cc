#include "engine/exposure.h"

#include <algorithm>
#include <cmath>

namespace autoccl::engine {

ExposureEstimator::ExposureEstimator(ExposureOptions o) : o_(o) {
  o_.maxSamples = std::max<size_t>(1, o_.maxSamples);
}

const char* ExposureEstimator::verdictName(Verdict v) {
  switch (v) {
    case Verdict::kHidden: return "hidden";
    case Verdict::kExposed: return "exposed";
    default: return "unknown";
  }
}

void ExposureEstimator::add(double iterUs, const std::vector<double>& startUs, const std::vector<double>& durUs) {
  if (durUs.empty() || startUs.size() != durUs.size() || !(iterUs > 0) || !std::isfinite(iterUs)) return;
  for (size_t p = 0; p < durUs.size(); ++p)
    if (!std::isfinite(durUs[p]) || !std::isfinite(startUs[p]) || durUs[p] < 0) return;
  const auto period = static_cast<uint32_t>(durUs.size());
  if (period != period_) {
    samples_.clear();
    period_ = period;
  }
  if (period_ > o_.maxPositions) return;  // not estimated: keep nothing
  samples_.push_back(Sample{iterUs, startUs, durUs});
  while (samples_.size() > o_.maxSamples) samples_.pop_front();
}

namespace {

// Inverts the symmetric matrix a (k x k, row-major) in place by Gauss-Jordan with partial pivoting. False when a
// pivot falls below `tiny` (the columns are dependent); *bad is then the column that failed.
bool invert(std::vector<double>& a, size_t k, double tiny, size_t* bad) {
  std::vector<double> inv(k * k, 0.0);
  for (size_t i = 0; i < k; ++i) inv[i * k + i] = 1.0;
  std::vector<size_t> col(k);
  for (size_t c = 0; c < k; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::fabs(a[r * k + c]) > std::fabs(a[piv * k + c])) piv = r;
    if (!(std::fabs(a[piv * k + c]) > tiny)) {
      *bad = c;
      return false;
    }
    if (piv != c) {
      for (size_t j = 0; j < k; ++j) {
        std::swap(a[piv * k + j], a[c * k + j]);
        std::swap(inv[piv * k + j], inv[c * k + j]);
      }
    }
    const double d = a[c * k + c];
    for (size_t j = 0; j < k; ++j) {
      a[c * k + j] /= d;
      inv[c * k + j] /= d;
    }
    for (size_t r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = a[r * k + c];
      if (f == 0.0) continue;
      for (size_t j = 0; j < k; ++j) {
        a[r * k + j] -= f * a[c * k + j];
        inv[r * k + j] -= f * inv[c * k + j];
      }
    }
  }
  a.swap(inv);
  return true;
}

}  // namespace

// Samples whose windows differ somewhere among `cols`. A repeat of one pattern (iterations that ran the same
// configurations, exactly alike in the noiseless emulator) adds no equation for the slopes: counted as samples,
// repeats passed designs with no more patterns than unknowns, which any iteration time fits exactly (residual 0,
// standard errors 0); with the time a little off linear (the emulator's host under load) the FSDP-like test's
// hidden positions got slopes of -3.3 to 4.0 (13-14 patterns behind 36 samples, 13 unknowns and the intercept).
size_t ExposureEstimator::distinctRows(const std::vector<size_t>& rows, const std::vector<size_t>& cols) const {
  size_t distinct = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<double>& a = samples_[rows[i]].dur;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j) {
      const std::vector<double>& b = samples_[rows[j]].dur;
      seen = std::all_of(cols.begin(), cols.end(), [&](size_t c) { return a[c] == b[c]; });  // stops at a difference
    }
    if (!seen) ++distinct;
  }
  return distinct;
}

ExposureEstimator::Fit ExposureEstimator::fit(const std::vector<size_t>& rows) const {
  const size_t P = period_, n = rows.size();
  Fit out;
  out.positions.resize(P);
  out.groupSize.assign(P, 1);
  out.residual.assign(n, 0.0);
  if (n == 0) return out;

  // Means and the centred columns.
  std::vector<double> mean(P, 0.0);
  double meanT = 0;
  for (size_t i : rows) {
    meanT += samples_[i].iterUs;
    for (size_t p = 0; p < P; ++p) mean[p] += samples_[i].dur[p];
  }
  meanT /= static_cast<double>(n);
  for (size_t p = 0; p < P; ++p) mean[p] /= static_cast<double>(n);
  std::vector<std::vector<double>> x(P, std::vector<double>(n));
  std::vector<double> y(n), ss(P, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const Sample& s = samples_[rows[i]];
    y[i] = s.iterUs - meanT;
    for (size_t p = 0; p < P; ++p) {
      x[p][i] = s.dur[p] - mean[p];
      ss[p] += x[p][i] * x[p][i];
    }
  }

  // Regressors: positions whose window moved (more than rounding), one per group moving in lockstep.
  std::vector<size_t> keep;
  for (size_t p = 0; p < P; ++p) {
    const double sd = std::sqrt(ss[p] / static_cast<double>(n));
    if (!(sd > 1e-6 * std::max(1.0, mean[p]))) continue;  // never moved: no slope
    for (size_t j : keep) {
      double sxy = 0;
      for (size_t i = 0; i < n; ++i) sxy += x[p][i] * x[j][i];
      if (sxy / std::sqrt(ss[p] * ss[j]) > o_.aliasCorr) {
        out.positions[p].alias = static_cast<int>(j);
        ++out.groupSize[j];
        break;
      }
    }
    if (out.positions[p].alias < 0) keep.push_back(p);
  }

  // Least squares on the centred columns; a column dependent on the others (no pivot) leaves the regression.
  std::vector<double> inv;
  size_t k = 0;
  for (;;) {
    k = keep.size();
    if (k == 0) return out;
    out.patterns = distinctRows(rows, keep);
    if (out.patterns < k + 1 + o_.minDof) return out;
    inv.assign(k * k, 0.0);
    double most = 0;
    for (size_t a = 0; a < k; ++a)
      for (size_t b = 0; b < k; ++b) {
        double s = 0;
        for (size_t i = 0; i < n; ++i) s += x[keep[a]][i] * x[keep[b]][i];
        inv[a * k + b] = s;
        most = std::max(most, s);
      }
    size_t bad = 0;
    if (invert(inv, k, 1e-10 * most, &bad)) break;
    keep.erase(keep.begin() + static_cast<std::ptrdiff_t>(bad));
  }
  std::vector<double> xty(k, 0.0), beta(k, 0.0);
  for (size_t a = 0; a < k; ++a)
    for (size_t i = 0; i < n; ++i) xty[a] += x[keep[a]][i] * y[i];
  for (size_t a = 0; a < k; ++a)
    for (size_t b = 0; b < k; ++b) beta[a] += inv[a * k + b] * xty[b];
  double rss = 0;
  for (size_t i = 0; i < n; ++i) {
    double r = y[i];
    for (size_t a = 0; a < k; ++a) r -= beta[a] * x[keep[a]][i];
    // the residual the sample would have in the regression without it (its leverage h taken out)
    double h = 1.0 / static_cast<double>(n);
    for (size_t a = 0; a < k; ++a)
      for (size_t b = 0; b < k; ++b) h += x[keep[a]][i] * inv[a * k + b] * x[keep[b]][i];
    out.residual[i] = h < 1.0 - 1e-9 ? r / (1.0 - h) : 0.0;
    rss += r * r;
  }
  const double s2 = rss / static_cast<double>(n - k - 1);
  out.residualUs = std::sqrt(s2);
  out.solved = true;
  for (size_t a = 0; a < k; ++a) {
    Position& q = out.positions[keep[a]];
    q.solved = true;
    q.slope = beta[a];
    q.se = std::sqrt(std::max(0.0, s2 * inv[a * k + a]));
  }
  return out;
}

ExposureEstimator::Result ExposureEstimator::estimateGroups(const std::vector<uint32_t>& groupOf) const {
  const size_t P = period_;
  if (P == 0 || groupOf.size() != P) return {};
  const size_t G = *std::max_element(groupOf.begin(), groupOf.end()) + size_t{1};
  if (G > P) return {};  // numbered with gaps: not a grouping of these positions
  ExposureEstimator grouped(o_);
  for (const Sample& s : samples_) {
    std::vector<double> start(G, 0.0), dur(G, 0.0);
    std::vector<bool> seen(G, false);
    for (size_t p = 0; p < P; ++p) {
      const uint32_t g = groupOf[p];
      if (!seen[g]) start[g] = s.start[p];
      seen[g] = true;
      dur[g] += s.dur[p];
    }
    if (std::find(seen.begin(), seen.end(), false) != seen.end()) return {};  // a group with no position
    grouped.add(s.iterUs, start, dur);
  }
  return grouped.estimate();
}

ExposureEstimator::Result ExposureEstimator::estimate() const {
  Result out;
  out.period = period_;
  out.samples = samples_.size();
  const size_t P = period_, n = samples_.size();
  out.positions.resize(P);
  if (n == 0 || P > o_.maxPositions) return out;

  // Means and the tail, over all samples (those the regression leaves out too).
  double meanT = 0;
  for (const Sample& s : samples_) {
    meanT += s.iterUs;
    for (size_t p = 0; p < P; ++p) {
      out.positions[p].meanUs += s.dur[p];
      out.positions[p].tail += (s.iterUs - s.start[p] - s.dur[p]) / s.iterUs;
    }
  }
  out.iterUs = meanT / static_cast<double>(n);
  for (Position& q : out.positions) {
    q.meanUs /= static_cast<double>(n);
    q.tail /= static_cast<double>(n);
  }

  // The regression; then, one at a time, without the sample it explains least (the largest residual it would
  // have without it), up to maxOutlierShare of them. The fit kept is the one that explains the rest best for
  // what it left out: the least (n - m) log s_m^2 + m z^2, s_m the residual's deviation after m left out (at
  // least rounding), z = outlierSigmas. Leaving out the extreme of Gaussian noise gains about its z^2 (< 10 for
  // 256 samples), a sample another call's window was credited to much more; a few such samples mask each other
  // (each one alone hardly lowers s), so the whole sequence is looked at, not only its first step.
  std::vector<size_t> rows(n);
  for (size_t i = 0; i < n; ++i) rows[i] = i;
  const auto maxOut = static_cast<size_t>(o_.maxOutlierShare * static_cast<double>(n));
  Fit f = fit(rows);
  auto score = [&](const Fit& g, size_t m) {
    const double sd = std::max(g.residualUs, o_.outlierFloorUs);
    const double perSample = o_.outlierSigmas * o_.outlierSigmas;
    return static_cast<double>(n - m) * std::log(sd * sd) + static_cast<double>(m) * perSample;
  };
  if (f.solved) {
    double best = score(f, 0);
    std::vector<size_t> cur = rows;
    Fit g = f;
    for (size_t m = 1; m <= maxOut && g.residualUs > o_.outlierFloorUs; ++m) {
      size_t worst = 0;
      for (size_t i = 1; i < g.residual.size(); ++i)
        if (std::fabs(g.residual[i]) > std::fabs(g.residual[worst])) worst = i;
      cur.erase(cur.begin() + static_cast<std::ptrdiff_t>(worst));
      Fit h = fit(cur);
      if (!h.solved) break;  // too few samples left for the unknowns
      g = std::move(h);
      if (const double sc = score(g, m); sc < best) {
        best = sc;
        rows = cur;
        f = g;
      }
    }
  }
  out.outliers = n - rows.size();
  out.residualUs = f.residualUs;
  out.patterns = f.patterns;

  // Slopes; members of a group carry the group's slope; verdicts.
  for (size_t p = 0; p < P; ++p) {
    Position& q = out.positions[p];
    const Position& r = f.positions[p];
    q.alias = r.alias;
    q.solved = r.solved;
    q.slope = r.slope;
    q.se = r.se;
  }
  for (size_t p = 0; p < P; ++p) {
    Position& q = out.positions[p];
    if (q.alias >= 0) {
      const Position& r = out.positions[static_cast<size_t>(q.alias)];
      q.solved = r.solved;
      q.slope = r.slope;
      q.se = r.se;
    }
  }
  // A call's own time moves the iteration by 0 to 1 of it (a lockstep group's sum: 0 to its size). A slope
  // well outside that: Result::outOfBounds (the caller decides what it voids).
  for (size_t p = 0; p < P; ++p) {
    Position& q = out.positions[p];
    if (!q.solved) continue;
    const size_t own = q.alias >= 0 ? static_cast<size_t>(q.alias) : p;  // a group's bound is its sum's
    const double most = static_cast<double>(f.groupSize[own]);
    const double margin = std::max(o_.boundSigmas * q.se, o_.boundFloor);
    q.belowBound = q.slope < -margin;
    out.outOfBounds = out.outOfBounds || q.belowBound || q.slope > most + margin;
  }
  for (size_t p = 0; p < P; ++p) {
    Position& q = out.positions[p];
    if (!q.solved || q.se > o_.maxSe) continue;
    const size_t group = f.groupSize[q.alias >= 0 ? static_cast<size_t>(q.alias) : p];
    if (q.slope <= o_.exposedAbove) q.verdict = Verdict::kHidden;
    else if (group == 1) q.verdict = Verdict::kExposed;  // a group's sum above: which of them is not known
  }
  return out;
}

}  // namespace autoccl::engine
