// Unit tests for autoccl_synth.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autoccl/synth/synth.h"

using namespace autoccl::synth;

namespace {

template <class F>
bool throws_with(F f, const std::string& needle) {
  try {
    f();
  } catch (const Error& e) {
    if (std::string(e.what()).find(needle) != std::string::npos) return true;
    ADD_FAILURE() << "wrong error: " << e.what() << " (wanted '" << needle << "')";
    return false;
  }
  return false;
}

void check_ok(const Schedule& s, const Topology& t, const char* what) {
  const auto r = check(s, &t);
  EXPECT_TRUE(r.ok) << what << ": checker failed: " << (r.errors.empty() ? "?" : r.errors[0]);
}

GenParams params() {
  GenParams p;
  p.bandwidth_gbps = 50;
  p.latency_us = 0.5;
  return p;
}
const Collective colls[] = {Collective::AllGather, Collective::ReduceScatter, Collective::AllReduce,
                            Collective::Broadcast, Collective::Reduce};

// Every collective on a few topologies: the checker proves the synthesized schedule, the simulator
// reproduces the synthesizer's estimate.
TEST(synth, every_collective_checked_and_simulated) {
  const GenParams p = params();
  std::vector<Topology> topos;
  topos.push_back(generate("mesh", {3, 3}, p));
  topos.push_back(generate("uni_ring", {5}, p));  // asymmetric links
  topos.push_back(generate("switch", {4}, p));
  GenParams pc = p;
  pc.nic_bandwidth_gbps = 25;
  topos.push_back(generate("cluster", {2, 2}, pc));
  for (const auto& t : topos)
    for (auto c : colls) {
      SynthOptions o;
      o.collective = c;
      o.bytes = 1 << 20;
      o.chunks_per_rank = 2;
      o.seeds = 3;
      o.threads = 2;
      const Schedule s = synthesize(t, o);
      const std::string what = t.name + "/" + to_string(c);
      check_ok(s, t, what.c_str());
      const auto sim = simulate(t, s);
      EXPECT_NEAR(sim.time_us, s.time_us, 1e-6 * s.time_us) << what;
      EXPECT_TRUE(check(s, &t).redundant == 0);
    }
}

// Determinism: same seed, same schedule.
TEST(synth, deterministic) {
  const GenParams p = params();
  const auto t = generate("mesh", {4, 4}, p);
  SynthOptions o;
  o.seeds = 4;
  const auto a = synthesize(t, o), b = synthesize(t, o);
  EXPECT_TRUE(a.transfers.size() == b.transfers.size());
  bool same = a.time_us == b.time_us;
  for (size_t i = 0; same && i < a.transfers.size(); ++i)
    same = a.transfers[i].chunk == b.transfers[i].chunk && a.transfers[i].src == b.transfers[i].src &&
           a.transfers[i].start == b.transfers[i].start;
  EXPECT_TRUE(same);
}

// The same schedule on 1, 2 and 3 threads: a 1,024-NPU mesh is split among threads within one seed
// (FIFO seed 1, random seed 2; two link speeds, so costs differ at a destination).
TEST(synth, threads_agree) {
  const GenParams p = params();
  GenParams ph = p;
  ph.dim_bandwidth = {50, 75};
  const auto t = generate("mesh", {32, 32}, ph);
  for (std::uint64_t seed : {1, 2}) {
    SynthOptions o;
    o.collective = Collective::AllGather;
    o.bytes = 1 << 24;
    o.base_seed = seed;
    o.threads = 1;
    const auto a = synthesize(t, o);
    for (int th = 2; th <= (seed == 1 ? 3 : 2); ++th) {
      o.threads = th;
      const auto b = synthesize(t, o);
      bool same = a.time_us == b.time_us && a.transfers.size() == b.transfers.size();
      for (size_t i = 0; same && i < a.transfers.size(); ++i)
        same = a.transfers[i].chunk == b.transfers[i].chunk && a.transfers[i].src == b.transfers[i].src &&
               a.transfers[i].dst == b.transfers[i].dst && a.transfers[i].start == b.transfers[i].start &&
               a.transfers[i].route == b.transfers[i].route;
      EXPECT_TRUE(same) << "seed " << seed << ": " << th << " threads differ from 1";
    }
  }
}

// Closed form: ring All-Gather on a homogeneous bidirectional... unidirectional ring:
// (n-1) steps of (alpha + chunk/B).
TEST(synth, ring_closed_form) {
  const GenParams p = params();
  const auto t = generate("uni_ring", {8}, p);
  const double bytes = 8e6;
  const auto s = baseline(t, "ring", Collective::AllGather, bytes);
  const auto r = simulate(t, s);
  const double want = 7 * (0.5 + (bytes / 8) / (50 * 1e3));
  EXPECT_TRUE(std::fabs(r.time_us - want) < 1e-6 * want);
  const auto ar = simulate(t, baseline(t, "ring", Collective::AllReduce, bytes));
  EXPECT_TRUE(std::fabs(ar.time_us - 2 * want) < 1e-6 * want);
  check_ok(r.timed, t, "ring ag");
}

// Baselines pass the checker.
TEST(synth, baselines_checked) {
  const GenParams p = params();
  const auto t = generate("torus", {4, 2}, p);
  const char* algos[] = {"ring", "direct", "rhd", "dbtree", "hierarchical"};
  for (const char* a : algos)
    for (auto c : colls) {
      Schedule s;
      try {
        s = baseline(t, a, c, 1 << 20, 2, 1);
      } catch (const Error&) {
        continue;  // unsupported combination
      }
      const auto r = simulate(t, s);
      check_ok(r.timed, t, (std::string(a) + "/" + to_string(c)).c_str());
    }
}

// Failures: a failed NPU and a failed link.
TEST(synth, failed_npu_and_link) {
  const GenParams p = params();
  Topology t;
  for (int i = 0; i < 4; ++i) t.add_node("n" + std::to_string(i), NodeKind::Npu);
  for (int i = 0; i < 4; ++i) {
    t.add_bidir(i, (i + 1) % 4, 1, 10);
  }
  t.add_bidir(0, 2, 1, 20);
  t.fail_node("n3");
  t.fail_link("n0", "n2");
  t.finalize();
  EXPECT_TRUE(t.num_npus() == 3);
  SynthOptions o;
  o.collective = Collective::AllReduce;
  const auto s = synthesize(t, o);
  check_ok(s, t, "failures");
}

// Validation errors.
TEST(synth, validation_errors) {
  const GenParams p = params();
  Topology t;
  t.add_node("a", NodeKind::Npu);
  EXPECT_TRUE(throws_with([&] { t.add_link("a", "zz", 1, 1); }, "unknown node 'zz'"));
  t.add_node("b", NodeKind::Npu);
  EXPECT_TRUE(throws_with([&] { t.add_link("a", "b", 1, -3); }, "bandwidth must be positive"));
  EXPECT_TRUE(throws_with([&] { t.add_link("a", "b", -1, 3); }, "latency"));
  t.add_link("a", "b", 1, 1);
  EXPECT_TRUE(throws_with([&] { t.finalize(); }, "disconnected NPUs"));
}

// Checker catches a wrong schedule: drop a transfer.
TEST(synth, checker_catches_wrong_schedule) {
  const GenParams p = params();
  const auto t = generate("mesh", {2, 2}, p);
  SynthOptions o;
  o.collective = Collective::AllReduce;
  auto s = synthesize(t, o);
  s.transfers.pop_back();
  EXPECT_TRUE(!check(s, &t).ok);
  auto s2 = synthesize(t, o);
  s2.transfers.push_back(s2.transfers.front());  // reduce a contribution twice
  EXPECT_TRUE(!check(s2, &t).ok);
}

// Exporters produce something for a small schedule.
TEST(synth, exporters) {
  const GenParams p = params();
  const auto t = generate("fully_connected", {4}, p);
  SynthOptions o;
  o.collective = Collective::AllReduce;
  const auto s = synthesize(t, o);
  EXPECT_TRUE(to_msccl_xml(s, "x").find("<algo") == 0);
  EXPECT_TRUE(to_mscclpp_json(s, t, "x").find("\"gpus\"") != std::string::npos);
}

}  // namespace
