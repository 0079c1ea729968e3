// The exposure estimator (engine/exposure.h): slopes of the iteration time on each position's window, lockstep
// groups, and no verdict without evidence.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/common.h"
#include "engine/exposure.h"
#include "engine/exposure_recorder.h"

namespace {

using autoccl::engine::ExposureEstimator;
using Verdict = autoccl::engine::ExposureEstimator::Verdict;
using autoccl::engine::ExposureRecorder;
using autoccl::engine::TaskKey;
const TaskKey kTaskA{0, 1 << 20, 1}, kTaskB{2, 4 << 20, 1};  // the recorder tests' two tasks

// Iterations of 4 calls: the first three hidden (the iteration does not wait for them), the last exposed. Each
// window varies on its own (a trial, noise) by `spread`; the iteration has noise `noiseUs`.
void feed(ExposureEstimator& e, int n, double spread, double noiseUs, bool lockstep, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  for (int i = 0; i < n; ++i) {
    std::vector<double> d(4), s(4);
    const double shared = 500 + spread * g(rng);
    for (int p = 0; p < 3; ++p) d[static_cast<size_t>(p)] = lockstep ? shared : 500 + spread * g(rng);
    d[3] = 200 + spread * g(rng);
    for (int p = 0; p < 4; ++p) s[static_cast<size_t>(p)] = 1000.0 * p;
    const double t = 5000 + d[3] + noiseUs * g(rng);
    e.add(t, s, d);
  }
}

TEST(engine, exposure_slopes) {
  ExposureEstimator e;
  feed(e, 60, 40, 5, false, 1);
  auto r = e.estimate();
  ASSERT_EQ(r.positions.size(), 4u);
  EXPECT_EQ(r.samples, 60u);
  for (int p = 0; p < 3; ++p) {
    const auto& q = r.positions[static_cast<size_t>(p)];
    EXPECT_TRUE(q.solved);
    EXPECT_NEAR(q.slope, 0.0, 0.1) << p;
    EXPECT_EQ(q.verdict, Verdict::kHidden) << p;
  }
  EXPECT_NEAR(r.positions[3].slope, 1.0, 0.1);
  EXPECT_LT(r.positions[3].se, 0.1);
  EXPECT_EQ(r.positions[3].verdict, Verdict::kExposed);
  // tail: the share of the iteration after the call's end (the last call ends at 3000 + 200 of ~5200 us)
  EXPECT_NEAR(r.positions[3].tail, 2000.0 / 5200.0, 0.02);
}

TEST(engine, exposure_needs_evidence) {
  ExposureEstimator e;
  feed(e, 6, 40, 5, false, 2);  // 4 unknowns, 6 samples: too few
  for (const auto& q : e.estimate().positions) {
    EXPECT_FALSE(q.solved);
    EXPECT_EQ(q.verdict, Verdict::kUnknown);
  }
  ExposureEstimator noisy;
  feed(noisy, 60, 2, 200, false, 3);  // windows barely move, the iteration is noisy: no verdict
  for (const auto& q : noisy.estimate().positions) EXPECT_EQ(q.verdict, Verdict::kUnknown) << q.slope << " " << q.se;
  ExposureEstimator flat;
  feed(flat, 60, 0, 5, false, 4);  // nothing moved: no slope
  for (const auto& q : flat.estimate().positions) EXPECT_FALSE(q.solved);
}

// Samples that repeat a few patterns of windows (iterations that ran the same configurations) count once each:
// 40 samples of as many patterns as unknowns fit any iteration time exactly, so they give no slope; with 4
// patterns more than that the slopes are the step's.
TEST(engine, exposure_counts_patterns_not_repeats) {
  auto feedPatterns = [](ExposureEstimator& e, int patterns, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> g(0.0, 1.0);
    std::vector<std::vector<double>> windows;
    for (int k = 0; k < patterns; ++k) {
      std::vector<double> d(4);
      for (int p = 0; p < 3; ++p) d[static_cast<size_t>(p)] = 500 + 40 * g(rng);
      d[3] = 200 + 40 * g(rng);
      windows.push_back(d);
    }
    const std::vector<double> s = {0, 1000, 2000, 3000};
    for (int i = 0; i < 40; ++i) {
      const std::vector<double>& d = windows[static_cast<size_t>(i % patterns)];
      // the exposed call's window, and a little off linear (a host late by up to 3 us): what an exact fit absorbs
      e.add(5000 + d[3] + 3.0 * std::fabs(g(rng)), s, d);
    }
  };
  ExposureEstimator few;
  feedPatterns(few, 5, 11);  // 4 windows and the intercept: exactly determined
  const ExposureEstimator::Result r = few.estimate();
  EXPECT_EQ(r.samples, size_t(40));
  EXPECT_EQ(r.patterns, size_t(5));
  for (const auto& q : r.positions) {
    EXPECT_FALSE(q.solved) << q.slope;
    EXPECT_EQ(q.verdict, Verdict::kUnknown);
  }
  ExposureEstimator enough;
  feedPatterns(enough, 9, 12);
  const ExposureEstimator::Result t = enough.estimate();
  EXPECT_EQ(t.patterns, size_t(9));
  for (size_t p = 0; p < 4; ++p) {
    ASSERT_TRUE(t.positions[p].solved);
    EXPECT_NEAR(t.positions[p].slope, p == 3 ? 1.0 : 0.0, 0.1) << p;
    EXPECT_EQ(t.positions[p].verdict, p == 3 ? Verdict::kExposed : Verdict::kHidden) << p;
  }
}

TEST(engine, exposure_lockstep_groups) {
  ExposureEstimator e;
  feed(e, 60, 40, 5, true, 5);  // the three hidden calls always alike: one group, sum ~0, all hidden
  auto r = e.estimate();
  EXPECT_EQ(r.positions[0].alias, -1);
  EXPECT_EQ(r.positions[1].alias, 0);
  EXPECT_EQ(r.positions[2].alias, 0);
  for (int p = 0; p < 3; ++p) EXPECT_EQ(r.positions[static_cast<size_t>(p)].verdict, Verdict::kHidden) << p;
  EXPECT_EQ(r.positions[3].verdict, Verdict::kExposed);

  // Two calls in lockstep, one of them exposed: the group's slope is ~1 and neither gets a verdict.
  ExposureEstimator g;
  std::mt19937 rng(6);
  std::normal_distribution<double> n01(0.0, 1.0);
  for (int i = 0; i < 60; ++i) {
    const double a = 300 + 30 * n01(rng), b = 300 + 30 * n01(rng);
    g.add(4000 + a + 2 * n01(rng), {0, 1000, 2000}, {a, a, b});
  }
  auto q = g.estimate();
  EXPECT_NEAR(q.positions[0].slope, 1.0, 0.1);
  EXPECT_EQ(q.positions[1].alias, 0);
  EXPECT_EQ(q.positions[0].verdict, Verdict::kUnknown);
  EXPECT_EQ(q.positions[1].verdict, Verdict::kUnknown);
  EXPECT_EQ(q.positions[2].verdict, Verdict::kHidden);
}

// Exact iterations (no noise) where a few samples credit the exposed call's window to a hidden one (a window
// matched to the wrong call of the same task): least squares on all of them calls the exposed call hidden; the
// samples the others contradict are left out and the verdicts hold.
TEST(engine, exposure_leaves_out_contradicted_samples) {
  auto feedSwapped = [](ExposureEstimator& e) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> u(-40.0, 40.0);
    for (int i = 0; i < 40; ++i) {
      std::vector<double> d = {500 + u(rng), 500 + u(rng), 500 + u(rng), 200 + u(rng)};
      const double t = 5000 + d[3];
      if (i % 13 == 5) std::swap(d[0], d[3]);  // three of 40: position 0 got position 3's window and back
      e.add(t, {0, 1000, 2000, 3000}, d);
    }
  };
  ExposureEstimator::Result all, trimmed;
  {
    autoccl::engine::ExposureOptions o;
    o.maxOutlierShare = 0;  // every sample in the regression
    ExposureEstimator e(o);
    feedSwapped(e);
    all = e.estimate();
  }
  {
    ExposureEstimator e;
    feedSwapped(e);
    trimmed = e.estimate();
  }
  EXPECT_EQ(all.outliers, 0u);
  EXPECT_GT(all.residualUs, 1.0);
  EXPECT_NE(all.positions[3].verdict, Verdict::kExposed) << all.positions[3].slope << " " << all.positions[3].se;
  EXPECT_EQ(trimmed.outliers, 3u);
  EXPECT_LT(trimmed.residualUs, 1e-6);
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(trimmed.positions[static_cast<size_t>(p)].verdict, Verdict::kHidden) << p;
    EXPECT_NEAR(trimmed.positions[static_cast<size_t>(p)].slope, 0.0, 1e-6) << p;
  }
  EXPECT_EQ(trimmed.positions[3].verdict, Verdict::kExposed);
  EXPECT_NEAR(trimmed.positions[3].slope, 1.0, 1e-6);

  // Gaussian noise alone leaves nothing out (none in 300 seeds of this feed).
  ExposureEstimator noisy;
  feed(noisy, 200, 40, 5, false, 12);
  EXPECT_EQ(noisy.estimate().outliers, 0u);
}

TEST(engine, exposure_period_change_resets) {
  ExposureEstimator e;
  feed(e, 30, 40, 5, false, 7);
  EXPECT_EQ(e.samples(), 30u);
  e.add(1000, {0, 10}, {5, 6});
  EXPECT_EQ(e.period(), 2u);
  EXPECT_EQ(e.samples(), 1u);
  e.add(-1, {0, 10}, {5, 6});  // not a time: ignored
  EXPECT_EQ(e.samples(), 1u);
}

// FSDP-like: two tasks of 8 calls each, every call of a task run at the task's configuration of the iteration
// (a search's trial moves all 8 windows together), the first task's calls exposed, the second's hidden, and an
// iteration noisier than any one window. One slope a position cannot tell the 8 calls of a task apart (they
// move almost together): unknown. One slope a task can: the first task's mean exposure 1, the second's 0.
TEST(engine, exposure_by_task_where_positions_are_unknown) {
  const double configUs[3] = {500, 550, 620};  // a call's window at each of the task's configurations
  for (uint32_t seed = 1; seed <= 40; ++seed) {  // every seed: the verdicts are not one draw's luck
    ExposureEstimator e;
    std::mt19937 rng(seed);
    std::normal_distribution<double> g(0.0, 1.0);
    std::uniform_int_distribution<int> trial(0, 2);
    for (int i = 0; i < 70; ++i) {
      std::vector<double> d(16), s(16);
      const int ca = trial(rng), cb = trial(rng);
      double exposed = 0;
      for (size_t p = 0; p < 16; ++p) {
        d[p] = (p < 8 ? configUs[ca] : configUs[cb]) + 4.0 * g(rng);
        s[p] = 1000.0 * static_cast<double>(p);
        if (p < 8) exposed += d[p];
      }
      e.add(20000 + exposed + 300.0 * g(rng), s, d);
    }
    const ExposureEstimator::Result byPos = e.estimate();
    size_t unknown = 0;
    for (const auto& q : byPos.positions) unknown += q.verdict == Verdict::kUnknown;
    EXPECT_GE(unknown, 12u) << "seed " << seed << ": the positions should be too collinear for verdicts";
    std::vector<uint32_t> groupOf(16);
    for (size_t p = 0; p < 16; ++p) groupOf[p] = p < 8 ? 0 : 1;
    const ExposureEstimator::Result byTask = e.estimateGroups(groupOf);
    ASSERT_EQ(byTask.positions.size(), 2u);
    EXPECT_EQ(byTask.samples, 70u);
    // the summed window's standard error is about 300 / (sd of the sum ~ 8 x 50) / sqrt(70) ~ 0.09
    EXPECT_NEAR(byTask.positions[0].slope, 1.0, 0.35) << "seed " << seed;
    EXPECT_LT(byTask.positions[0].se, 0.15) << "seed " << seed;
    EXPECT_EQ(byTask.positions[0].verdict, Verdict::kExposed) << "seed " << seed;
    EXPECT_NEAR(byTask.positions[1].slope, 0.0, 0.35) << "seed " << seed;
    EXPECT_EQ(byTask.positions[1].verdict, Verdict::kHidden) << "seed " << seed;
    EXPECT_NEAR(byTask.positions[0].meanUs, 8 * 557.0, 8 * 60.0);  // the task's summed window
    if (seed == 1) {  // a grouping that does not cover the positions gives nothing
      EXPECT_TRUE(e.estimateGroups({0, 1}).positions.empty());
      std::vector<uint32_t> gap(16, 0);
      gap[15] = 2;  // group 1 has no position
      EXPECT_TRUE(e.estimateGroups(gap).positions.empty());
    }
  }
}

// A window that carries more than the call's own time: the call's window grows with a computation slowed
// beside it (contention), so the iteration moves by twice its window's change. Its slope, ~2, is no exposure:
// the fit says so (outOfBounds), and the recorder gives no verdict at all, though every standard error is
// small.
TEST(engine, exposure_slope_out_of_bounds_gives_no_verdict) {
  ExposureEstimator e;
  std::mt19937 rng(3);
  std::normal_distribution<double> g(0.0, 1.0);
  for (int i = 0; i < 60; ++i) {
    std::vector<double> d = {500 + 40 * g(rng), 200 + 40 * g(rng)}, s = {0, 1000};
    e.add(5000 + 2.0 * d[0] + d[1] + 5 * g(rng), s, d);
  }
  const ExposureEstimator::Result r = e.estimate();
  EXPECT_TRUE(r.outOfBounds);
  EXPECT_NEAR(r.positions[0].slope, 2.0, 0.1);
  EXPECT_LT(r.positions[0].se, 0.1);
  EXPECT_TRUE(e.estimateGroups({0, 1}).outOfBounds);
  // within the bound (the same windows, the hidden one's change not in the iteration): verdicts
  ExposureEstimator ok;
  std::mt19937 rng2(3);
  for (int i = 0; i < 60; ++i) {
    std::vector<double> d = {500 + 40 * g(rng2), 200 + 40 * g(rng2)}, s = {0, 1000};
    ok.add(5000 + d[1] + 5 * g(rng2), s, d);
  }
  const ExposureEstimator::Result r2 = ok.estimate();
  EXPECT_FALSE(r2.outOfBounds);
  EXPECT_EQ(r2.positions[0].verdict, Verdict::kHidden);
  EXPECT_EQ(r2.positions[1].verdict, Verdict::kExposed);
}

TEST(engine, exposure_recorder_gives_no_verdict_out_of_bounds) {
  for (const double factor : {2.0, 1.0}) {  // the first call's window counted twice in the iteration, or once
    ExposureRecorder r;
    std::mt19937 rng(5);
    std::normal_distribution<double> g(0.0, 1.0);
    uint64_t ns = 1000000;
    for (uint64_t it = 0; it < 61; ++it) {
      const double da = 500 + 40 * g(rng), db = 200 + 40 * g(rng);
      r.place(kTaskA, it, it, 0, 2, 1);
      r.place(kTaskB, it, it, 1, 2, 1);
      r.time(kTaskA, it, ns, da);
      r.time(kTaskB, it, ns + 1000000, db);
      ns += static_cast<uint64_t>((5000 + factor * da + db + 5 * g(rng)) * 1000.0);
    }
    const std::string rec = r.traceRecord("c0", 0);
    if (factor == 2.0) {
      EXPECT_NE(rec.find("\"out_of_bounds\":true"), std::string::npos) << rec;
      EXPECT_EQ(rec.find("\"verdict\":\"exposed\""), std::string::npos) << rec;
      EXPECT_EQ(rec.find("\"verdict\":\"hidden\""), std::string::npos) << rec;
    } else {
      EXPECT_NE(rec.find("\"out_of_bounds\":false"), std::string::npos) << rec;
      EXPECT_NE(rec.find("\"verdict\":\"exposed\""), std::string::npos) << rec;
    }
  }
}

// Two calls of one task whose windows move almost together, hidden both: the fit by position can split their
// slope of 0 into +x and -x (the noiseless emulator gave +0.76 and -0.50). The -x is out of bounds, so the +x
// is no exposure either: the fit by position gives neither call a verdict (without the rule the +0.6 below was
// called exposed, the -0.6 hidden), and the task's slope (~0, in bounds) calls both hidden. The other task's
// call keeps its own verdict.
TEST(engine, exposure_recorder_voids_a_split_position_fit) {
  ExposureRecorder r;
  r.trackHidden();
  std::mt19937 rng(7);
  std::normal_distribution<double> g(0.0, 1.0);
  uint64_t ns = 1000000;
  for (uint64_t it = 0; it < 61; ++it) {
    const double shared = 500 + 40 * g(rng);
    const double d0 = shared + 10 * g(rng), d1 = shared + 10 * g(rng), d2 = 200 + 40 * g(rng);
    r.place(kTaskA, 2 * it, it, 0, 3, 1);
    r.place(kTaskA, 2 * it + 1, it, 1, 3, 1);
    r.place(kTaskB, it, it, 2, 3, 1);
    r.time(kTaskA, 2 * it, ns, d0);
    r.time(kTaskA, 2 * it + 1, ns + 1000000, d1);
    r.time(kTaskB, it, ns + 2000000, d2);
    ns += static_cast<uint64_t>((5000 + d2 + 0.6 * (d0 - d1) + 1 * g(rng)) * 1000.0);
  }
  r.waitForRefits();
  const std::string rec = r.traceRecord("c0", 0);
  EXPECT_NE(rec.find("\"out_of_bounds\":false"), std::string::npos) << rec;  // the task's fit: in bounds
  const size_t tasks = rec.find("\"tasks\":[");
  ASSERT_NE(tasks, std::string::npos) << rec;
  std::vector<std::string> byPosition, byTask;  // the verdicts in the record's order
  for (size_t at = rec.find("\"verdict\":\""); at != std::string::npos; at = rec.find("\"verdict\":\"", at + 1)) {
    const size_t from = at + 11;
    (at < tasks ? byPosition : byTask).push_back(rec.substr(from, rec.find('"', from) - from));
  }
  EXPECT_EQ(byPosition, (std::vector<std::string>{"unknown", "unknown", "exposed"})) << rec;
  EXPECT_EQ(byTask, (std::vector<std::string>{"hidden", "exposed"})) << rec;
  EXPECT_EQ(r.hiddenPositions(1, 3), 0b011u) << rec;  // both of the task's calls, by the task's verdict
}

// The recorder: an iteration is a sample once every position is timed and the next iteration has started; calls
// never placed, and placed calls without a time, add nothing.
TEST(engine, exposure_recorder_completes_iterations) {
  ExposureRecorder r;
  const TaskKey &a = kTaskA, &b = kTaskB;
  uint64_t k = 0, ns = 1000000;
  EXPECT_EQ(r.traceRecord("c0", 0), "");
  for (uint64_t it = 0; it < 3; ++it) {  // iterations of two calls: a then b
    r.place(a, k, it, 0, 2, 1);
    r.place(b, k, it, 1, 2, 1);
    r.time(a, k, ns, 10.0);
    if (it == 0) {
      EXPECT_EQ(r.samples(), 0u);
    }
    r.time(b, k, ns + 20000, 30.0);
    ++k;
    ns += 100000;
  }
  EXPECT_EQ(r.samples(), 2u);  // iterations 0 and 1: each followed by the next one's start
  r.time(a, 99, ns, 10.0);     // never placed
  r.place(a, 100, 3, 0, 2, 1);
  r.time(a, 100, 0, 10.0);     // no start: not a time
  r.place(b, 100, 3, 5, 2, 1);  // a position beyond the period
  r.time(b, 100, ns, 10.0);
  EXPECT_EQ(r.samples(), 2u);
  const std::string rec = r.traceRecord("c0", 0);
  EXPECT_NE(rec.find("\"ev\":\"exposure\""), std::string::npos) << rec;
  EXPECT_NE(rec.find("\"period\":2,\"samples\":2"), std::string::npos) << rec;
  EXPECT_NE(rec.find("\"iter_us\":100.0"), std::string::npos) << rec;
  EXPECT_NE(rec.find("\"bytes\":4194304"), std::string::npos) << rec;
  // one entry a task, with the positions it holds
  EXPECT_NE(rec.find("\"tasks\":[{\"coll\":\"" + std::string(autoccl::engine::collName(a.coll)) +
                     "\",\"bytes\":1048576,\"pipe\":1,\"calls\":1,"),
            std::string::npos)
      << rec;
  EXPECT_NE(rec.find("\"positions\":[1]}]}"), std::string::npos) << rec;
  EXPECT_NE(rec.find("\"out_of_bounds\":false"), std::string::npos) << rec;
}

// Windows timed for the estimate alone (AUTOCCL_EXPOSURE_EVERY, Measurement::reportOnly) make samples like
// the searches' windows, and the record counts them (`timed_for_it`), usable or not; the others are not counted.
TEST(engine, exposure_recorder_counts_windows_timed_for_it) {
  ExposureRecorder r;
  const TaskKey &a = kTaskA, &b = kTaskB;
  uint64_t ns = 1000000;
  for (uint64_t it = 0; it < 3; ++it, ns += 100000) {
    r.place(a, it, it, 0, 2, 1);  // the search's sample
    r.place(b, it, it, 1, 2, 1);
    r.time(a, it, ns, 10.0);
    r.time(b, it, ns + 20000, 30.0, /*reportOnly=*/true);
  }
  EXPECT_EQ(r.samples(), 2u);
  r.place(b, 3, 3, 1, 2, 1);
  r.time(b, 3, 0, 30.0, true);  // no start: no sample, still a window timed for it
  r.time(a, 99, ns, 10.0);      // never placed
  EXPECT_EQ(r.samples(), 2u);
  const std::string rec = r.traceRecord("c0", 0);
  EXPECT_NE(rec.find("\"timed_for_it\":4"), std::string::npos) << rec;
}

// After a break the detector finds the same period starting at another call (a new structure): position 0 is
// then another call. The iteration before the break is not timed against the first one after it, and the
// estimate starts again with the new structure's samples.
TEST(engine, exposure_recorder_new_structure_starts_again) {
  ExposureRecorder r;
  const TaskKey &a = kTaskA, &b = kTaskB;
  uint64_t k = 0, ns = 1000000;
  // structure 1: a at position 0, b at 1; iterations 0-3
  for (uint64_t it = 0; it < 4; ++it, ++k, ns += 100000) {
    r.place(a, k, it, 0, 2, 1);
    r.place(b, k, it, 1, 2, 1);
    r.time(a, k, ns, 10.0);
    r.time(b, k, ns + 20000, 30.0);
  }
  EXPECT_EQ(r.samples(), 3u);
  // structure 2 (after a pause of 5 ms): b at position 0, a at 1; iterations numbered on
  ns += 5000000;
  for (uint64_t it = 4; it < 7; ++it, ++k, ns += 100000) {
    r.place(b, k, it, 0, 2, 2);
    r.place(a, k, it, 1, 2, 2);
    r.time(b, k, ns, 30.0);
    r.time(a, k, ns + 30000, 10.0);
    if (it == 4) {
      EXPECT_EQ(r.samples(), 3u);  // iteration 3 is not timed by the start of 4: another structure
    }
  }
  EXPECT_EQ(r.samples(), 2u);  // iterations 4 and 5 only
  const std::string rec = r.traceRecord("c0", 0);
  EXPECT_NE(rec.find("\"iter_us\":100.0"), std::string::npos) << rec;
  const std::string first = "\"pos\":0,\"coll\":\"" + std::string(autoccl::engine::collName(b.coll)) + "\"";
  EXPECT_NE(rec.find(first), std::string::npos) << rec;
}

// The positions the estimate calls hidden, for the step guard's estimated arms: iterations of four calls, the
// first and third hidden under computation, the second and the last waited for. Only a tracking recorder refits,
// every kRefitEvery samples; the iteration's last position is never named, and another structure or period
// gets none.
void feedHiddenPattern(ExposureRecorder& r, int iterations, double lastSlope) {
  const TaskKey c{1, 8 << 20, 1}, d{3, 2 << 20, 1};
  const TaskKey taskAt[4] = {kTaskA, kTaskB, c, d};
  std::mt19937 rng(11);
  std::normal_distribution<double> g(0.0, 1.0);
  uint64_t ns = 1000000;
  for (int it = 0; it < iterations; ++it) {
    const auto i = static_cast<uint64_t>(it);
    double w[4];
    for (int p = 0; p < 4; ++p) w[p] = 300 + 60 * g(rng);
    for (uint32_t p = 0; p < 4; ++p) r.place(taskAt[p], i, i, p, 4, 7);
    for (uint32_t p = 0; p < 4; ++p) r.time(taskAt[p], i, ns + 1000000ull * p, w[p]);
    ns += static_cast<uint64_t>((6000 + w[1] + lastSlope * w[3] + 3 * g(rng)) * 1000.0);
  }
}

TEST(engine, exposure_recorder_hidden_positions) {
  {
    ExposureRecorder r;
    r.trackHidden();
    feedHiddenPattern(r, 61, 1.0);
    r.waitForRefits();
    EXPECT_EQ(r.hiddenPositions(7, 4), 0b0101u) << r.traceRecord("c0", 0);
    EXPECT_EQ(r.hiddenPositions(8, 4), 0u);  // another structure
    EXPECT_EQ(r.hiddenPositions(7, 5), 0u);  // another period
  }
  {  // the last call hidden too: still never named (the iteration ends with it)
    ExposureRecorder r;
    r.trackHidden();
    feedHiddenPattern(r, 61, 0.0);
    r.waitForRefits();
    EXPECT_EQ(r.hiddenPositions(7, 4), 0b0101u) << r.traceRecord("c0", 0);
  }
  {  // not tracking: no refit, nothing named
    ExposureRecorder r;
    feedHiddenPattern(r, 61, 1.0);
    r.waitForRefits();
    EXPECT_EQ(r.hiddenPositions(7, 4), 0u);
    EXPECT_GT(r.samples(), 50u);
  }
  {  // too few samples for a verdict: nothing named
    ExposureRecorder r;
    r.trackHidden();
    feedHiddenPattern(r, 9, 1.0);
    r.waitForRefits();
    EXPECT_EQ(r.hiddenPositions(7, 4), 0u);
  }
}

}  // namespace
