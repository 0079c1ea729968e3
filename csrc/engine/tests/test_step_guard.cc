// The step guard's parts: iteration detection from a call sequence (DDP-, FSDP- and nccl-tests-like
// sequences, irregular ones, a phase change) and the guard's plan over iterations (verdicts on the iteration
// times, the burden of proof on the tuned plan, rounds repeating).
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/step_guard.h"

namespace {

using autoccl::engine::GuardOptions;
using autoccl::engine::GuardPlan;
using autoccl::engine::IterationDetector;

// Pushes `seq` and returns the call positions that started an iteration, with their indices.
std::vector<std::pair<size_t, uint64_t>> starts(IterationDetector& d, const std::vector<uint32_t>& seq) {
  std::vector<std::pair<size_t, uint64_t>> out;
  for (size_t i = 0; i < seq.size(); ++i)
    if (d.push(seq[i])) out.emplace_back(i, d.iteration());
  return out;
}

std::vector<uint32_t> repeat(const std::vector<uint32_t>& body, int times, std::vector<uint32_t> prefix = {}) {
  for (int t = 0; t < times; ++t) prefix.insert(prefix.end(), body.begin(), body.end());
  return prefix;
}

// Iterations start every `period` calls from some point on, numbered 0, 1, 2, ... without gaps.
void checkRegular(const std::vector<std::pair<size_t, uint64_t>>& s, size_t period, size_t firstBefore) {
  EXPECT_TRUE(!s.empty());
  if (s.empty()) return;
  EXPECT_TRUE(s.front().first <= firstBefore);
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].second, uint64_t(i));
    if (i) { EXPECT_EQ(s[i].first - s[i - 1].first, period); }
  }
}

TEST(engine, iterations_ddp) {
  // Two broadcasts at the start, then one step: 4 bucket all_reduces of different sizes.
  IterationDetector d;
  auto s = starts(d, repeat({2, 3, 4, 5}, 50, {0, 1}));
  EXPECT_EQ(d.period(), 4u);
  checkRegular(s, 4, 2 + 3 * 4 + 4);  // found after three periods
}

TEST(engine, iterations_fsdp) {
  // One step: 24 all_gathers of one size (one task), 24 reduce_scatters of one size, an all_reduce. Runs of one
  // task look periodic at first; the step's own period holds from three steps on.
  std::vector<uint32_t> step;
  for (int i = 0; i < 24; ++i) step.push_back(0);
  for (int i = 0; i < 24; ++i) step.push_back(1);
  step.push_back(2);
  IterationDetector d;
  auto s = starts(d, repeat(step, 20));
  EXPECT_EQ(d.period(), 49u);
  // From the fourth step on, iterations are whole steps.
  std::vector<std::pair<size_t, uint64_t>> late;
  for (auto& x : s)
    if (x.first >= 3 * 49) late.push_back(x);
  EXPECT_TRUE(late.size() >= 16);
  for (size_t i = 1; i < late.size(); ++i) {
    EXPECT_EQ(late[i].first - late[i - 1].first, size_t(49));
    EXPECT_EQ(late[i].second, late[i - 1].second + 1);
  }
}

TEST(engine, iterations_nccl_tests) {
  // One size after another, each called 42 times: every call is an iteration of its size.
  std::vector<uint32_t> seq;
  for (uint32_t size = 0; size < 4; ++size)
    for (int k = 0; k < 42; ++k) seq.push_back(size);
  IterationDetector d;
  auto s = starts(d, seq);
  EXPECT_EQ(d.period(), 1u);
  EXPECT_TRUE(s.size() >= 4 * (42 - 4));
  for (size_t i = 1; i < s.size(); ++i) EXPECT_EQ(s[i].second, s[i - 1].second + 1);  // indices run on
}

TEST(engine, iterations_irregular) {
  // Random task ids from 50: no three equal blocks in a row, hardly ever an iteration.
  std::mt19937 rng(7);
  std::vector<uint32_t> seq(5000);
  for (auto& x : seq) x = static_cast<uint32_t>(rng() % 50);
  IterationDetector d;
  auto s = starts(d, seq);
  std::fprintf(stderr, "  random sequence: %zu iteration starts in 5000 calls\n", s.size());
  EXPECT_TRUE(s.size() < 5);
}

TEST(engine, iterations_phase_change) {
  // Training steps of 5 calls, then an evaluation loop of 3 calls per step, then training again: each phase's
  // structure is found after three of its steps; indices never repeat.
  IterationDetector d;
  auto s = starts(d, repeat({10, 11, 12, 13, 14}, 30));
  const size_t trainStarts = s.size();
  auto e = starts(d, repeat({20, 21, 22}, 30));
  EXPECT_EQ(d.period(), 3u);
  EXPECT_TRUE(e.size() >= 25);
  auto t = starts(d, repeat({10, 11, 12, 13, 14}, 30));
  EXPECT_EQ(d.period(), 5u);
  EXPECT_TRUE(trainStarts >= 25 && t.size() >= 25);
  EXPECT_TRUE(e.front().second == s.back().second + 1 && t.front().second == e.back().second + 1);
}

// Drives a plan as the engine would: asks each iteration's segment, times the iterations the plan measures
// (the tuned plan takes `tunedUs`, NCCL's choices `ncclUs`, each with relative noise), returns the verdicts.
std::vector<GuardPlan::Verdict> drive(GuardPlan& g, double tunedUs, double ncclUs, double noise, uint64_t iters,
                                      uint64_t armAt, double loseShare = 0.0) {
  std::mt19937 rng(11);
  std::normal_distribution<double> z(0.0, noise);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<bool> measured(iters + 2, false);
  for (uint64_t i = 0; i < iters; ++i) {
    if (i == armAt) g.arm();
    std::vector<autoccl::search::Segment> segs = g.decide(i, 0);
    for (const auto& sg : segs) {
      if (!sg.contains(i)) continue;
      measured[i] = sg.cfg.measure;
      const bool nccl = GuardPlan::isNccl(sg.cfg);
      if (i > 0 && measured[i - 1] && measured[i] && u(rng) >= loseShare) {
        // iteration i - 1 ran what its own segment said: look it up again
        bool prevNccl = false;
        for (const auto& p : segs)
          if (p.contains(i - 1)) prevNccl = GuardPlan::isNccl(p.cfg);
        g.sample(i - 1, (prevNccl ? ncclUs : tunedUs) * (1.0 + z(rng)));
      }
      (void)nccl;
    }
  }
  return g.verdicts();
}

TEST(engine, guard_not_armed) {
  GuardPlan g;
  for (uint64_t i = 0; i < 300; ++i)
    for (const auto& sg : g.decide(i, 0))
      if (sg.contains(i)) {
        EXPECT_TRUE(!GuardPlan::isNccl(sg.cfg));  // the tuned plan, untimed, while not armed
        EXPECT_TRUE(!sg.cfg.measure);
      }
  EXPECT_TRUE(g.verdicts().empty());
}

TEST(engine, guard_verdicts) {
  {  // the tuned plan 10 % faster at 1 % noise: it stays
    GuardPlan g;
    auto v = drive(g, 90.0, 100.0, 0.01, 200, 20);
    EXPECT_TRUE(!v.empty() && v.front().tuned);
  }
  {  // the tuned plan 10 % slower: NCCL's choices
    GuardPlan g;
    auto v = drive(g, 110.0, 100.0, 0.01, 200, 20);
    EXPECT_TRUE(!v.empty() && !v.front().tuned);
  }
  {  // equal within the noise: the tuned plan has not shown a gain, NCCL's choices
    GuardPlan g;
    auto v = drive(g, 100.0, 100.0, 0.03, 200, 20);
    EXPECT_TRUE(!v.empty() && !v.front().tuned);
  }
  {  // every sample lost: no evidence, NCCL's choices (and the verdict still comes)
    GuardPlan g;
    auto v = drive(g, 90.0, 100.0, 0.01, 600, 20, 1.0);
    EXPECT_TRUE(!v.empty() && !v.front().tuned);
  }
}

TEST(engine, guard_rechecks) {
  // Rounds repeat at a growing interval; after a NCCL verdict the plan between rounds is NCCL's choices.
  GuardOptions o;
  o.recheckFirst = 50;
  GuardPlan g(o);
  auto v = drive(g, 110.0, 100.0, 0.01, 400, 10);
  EXPECT_TRUE(v.size() >= 3);
  for (size_t i = 1; i < v.size(); ++i) EXPECT_TRUE(v[i].at - v[i - 1].at >= 50);
  bool ncclBetween = false;
  for (const auto& sg : g.decide(v.front().at, 0))
    if (sg.contains(v.front().at)) ncclBetween = GuardPlan::isNccl(sg.cfg);
  EXPECT_TRUE(ncclBetween);
}

}  // namespace

