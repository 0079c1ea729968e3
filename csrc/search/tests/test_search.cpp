// Tests of the online search on synthetic performance models, driven like the engine drives it:
// decisions asked per call index ahead of time, GPU times delivered later (lag), some never.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "autoccl/search/search.h"
#include "autoccl/common/stats.h"
#include "check.h"

using namespace autoccl::search;

namespace {

// A performance model: the true objective of a configuration, and noisy samples of it.
struct Model {
  Space space;
  int defaultPair = -1;    // what NCCL picks (min cost)
  int defaultChannels = 24;  // what NCCL uses when not told (also when ncclChannels is unknown)
  double noise = 0.01;
  double outlierProb = 0.02;
  std::function<double(int pair, int ch, int halvings)> t;  // true time; chunk = NCCL's / 2^halvings

  double trueTime(const Config& c) const {
    if (c.isDefault()) return t(defaultPair, defaultChannels, 0);
    return t(c.algo * kNumProtos + c.proto, c.channels > 0 ? c.channels : defaultChannels, c.chunkHalvings);
  }
  double sample(const Config& c, std::mt19937_64& rng) const {
    std::normal_distribution<double> n(0.0, noise);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    double v = trueTime(c) * std::max(0.5, 1.0 + n(rng));
    if (u(rng) < outlierProb) v *= 1.2 + u(rng);
    return v;
  }
  double bestTime(std::string* where = nullptr) const {
    double best = trueTime(Config());
    for (int a = 0; a < kNumAlgos; ++a)
      for (int p = 0; p < kNumProtos; ++p) {
        if (space.cost[a][p] < 0) continue;
        for (int ch = 1; ch <= space.maxChannels; ++ch)
          for (int h = 0; h <= space.maxChunkHalvings[p]; ++h) {
            double v = t(a * kNumProtos + p, ch, h);
            if (v < best && where)
              *where = "a" + std::to_string(a) + "/p" + std::to_string(p) + "/ch" + std::to_string(ch) + "/h" +
                       std::to_string(h) + " (NCCL's cost " + std::to_string(space.cost[a][p]) + ")";
            best = std::min(best, v);
          }
      }
    return best;
  }
};

void setDefaultFromCost(Model& m) {
  float best = 0;
  for (int a = 0; a < kNumAlgos; ++a)
    for (int p = 0; p < kNumProtos; ++p)
      if (m.space.cost[a][p] >= 0 && (m.defaultPair < 0 || m.space.cost[a][p] < best)) {
        best = m.space.cost[a][p];
        m.defaultPair = a * kNumProtos + p;
      }
}

// Unimodal-ish random model: per pair a base time, a quadratic bowl in log2(channels) and in
// log2(chunk) with random optima and curvatures; NCCL's cost table is a noisy estimate of it. NCCL's
// chunk is 512 KiB; the tunable ones are its halvings (as NCCL >= 2.30 allows a tuner). The chunk's
// optimum lies between NCCL's and 16x smaller, and costs at most ~15 % away from it (2 x H200: smaller
// chunks gained up to 12 %, h200x2/nccl-2.30-chunk-size/probe).
Model randomModel(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Model m;
  m.space.maxChannels = u(rng) < 0.5 ? 32 : 64;
  m.defaultChannels = u(rng) < 0.5 ? 16 : 24;
  m.space.ncclChannels = u(rng) < 0.7 ? m.defaultChannels : 0;
  if (u(rng) < 0.5)
    for (int p = 0; p < kNumProtos; ++p) m.space.maxChunkHalvings[p] = 1 + static_cast<int>(u(rng) * 4);
  struct P {
    double base, copt, a, kopt, b;
  };
  std::vector<P> ps(kNumAlgos * kNumProtos);
  int supported = 0;
  for (int a = 0; a < 2; ++a)
    for (int p = 0; p < kNumProtos; ++p) {
      if (u(rng) < 0.25 && supported > 0) continue;
      int id = a * kNumProtos + p;
      ps[static_cast<size_t>(id)] = P{100.0 * (1.0 + u(rng)), std::exp2(u(rng) * 6.0), 0.01 + 0.04 * u(rng),
                                      std::log2(512.0 * 1024) - u(rng) * 4.0, 0.002 + 0.010 * u(rng)};
      m.space.cost[a][p] = static_cast<float>(ps[static_cast<size_t>(id)].base * (0.8 + 0.45 * u(rng)));
      supported++;
    }
  setDefaultFromCost(m);
  m.noise = 0.003 + 0.017 * u(rng);
  m.t = [ps](int pair, int ch, int halvings) {
    const P& q = ps[static_cast<size_t>(pair)];
    double dc = std::log2(static_cast<double>(ch)) - std::log2(q.copt);
    double dk = std::log2(512.0 * 1024) - halvings - q.kopt;
    return q.base * (1.0 + q.a * dc * dc) * (1.0 + q.b * dk * dk);
  };
  return m;
}

// H200-like single-node AllReduce (4 GPUs, NVSwitch): busbw saturating in channels with congestion
// past a knee, LL good for small, Simple for large; tree weaker in bandwidth. Calibrated loosely on
// shared/data/h200x4 (default 24 channels; 32 channels ~1.2x at 4 MB; LL ~150 GB/s cap).
Model h200Model(std::mt19937_64& rng, double bytes) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Model m;
  m.space.maxChannels = 64;
  m.defaultChannels = 24;
  m.space.ncclChannels = u(rng) < 0.5 ? 24 : 0;
  if (u(rng) < 0.5) {  // what the engine sets with tuner v6
    m.space.maxChunkHalvings[1] = 3;
    m.space.maxChunkHalvings[2] = 4;
  }
  const double lat[3] = {6.0, 9.0, 18.0};       // µs: LL, LL128, Simple
  const double perCh[3] = {6.0, 11.0, 14.0};    // GB/s per channel
  const double cap[3] = {150.0, 330.0, 370.0};  // GB/s
  double jitter = 0.9 + 0.2 * u(rng);
  auto t = [=](int pair, int ch, int halvings) {
    int a = pair / kNumProtos, p = pair % kNumProtos;
    double c = cap[p] * (a == 0 ? 0.7 : 1.0) * jitter;
    double bw = c * (1.0 - std::exp(-ch * perCh[p] / c));
    double knee = 40.0;
    if (ch > knee) bw *= 1.0 - 0.15 * (ch - knee) / 64.0;  // congestion
    double l = lat[p] * (a == 0 ? 0.8 : 1.0) + 0.15 * ch;  // launching more channels costs a little
    double time = l + 1.5 * bytes / (bw * 1e3);             // bytes/(GB/s) -> µs
    if (p == 2) {  // NCCL's ring/Simple chunk is 2 MiB; 1 MiB was best at 256 MiB-1 GiB on 2 x H200
      double dk = 1.0 - halvings;
      time *= 1.0 + 0.02 * dk * dk - 0.02;
    }
    return time;
  };
  for (int a = 0; a < 2; ++a)
    for (int p = 0; p < 3; ++p) m.space.cost[a][p] = static_cast<float>(t(a * 3 + p, 24, 0) * (0.85 + 0.3 * u(rng)));
  setDefaultFromCost(m);
  m.noise = 0.005 + 0.02 * u(rng);
  m.t = t;
  return m;
}

struct RunResult {
  bool converged = false;
  uint64_t convergedAt = kForever;
  Config final;
  std::vector<Config> applied;
};

// Drive a search like the engine: call k asks for its config; its GPU time (if measured and not
// dropped) is delivered `lag` calls later, in random order with others.
// Calls below defaultUntil run NCCL's default, timed (the coordinator's segments before the search was registered).
RunResult drive(TaskSearch& s, const Model& m, std::mt19937_64& rng, uint64_t calls, int maxLag, double drop,
                uint64_t from = 0, const Model* after = nullptr, uint64_t switchAt = kForever, int ceiling = 0,
                uint64_t defaultUntil = 0) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> lagd(0, std::max(0, maxLag));
  std::multimap<uint64_t, std::pair<uint64_t, double>> due;
  RunResult r;
  for (uint64_t k = from; k < from + calls; ++k) {
    const Model& cur = (after && k >= switchAt) ? *after : m;
    Config c;
    if (k < defaultUntil) c.measure = true;
    else c = s.configFor(k);
    r.applied.push_back(c);
    if (c.measure && u(rng) >= drop)
      due.emplace(k + static_cast<uint64_t>(lagd(rng)), std::make_pair(k, cur.sample(c, rng)));
    std::vector<std::pair<uint64_t, double>> now;
    while (!due.empty() && due.begin()->first <= k) {
      now.push_back(due.begin()->second);
      due.erase(due.begin());
    }
    std::shuffle(now.begin(), now.end(), rng);
    for (auto& x : now) {
      // the engine reports the channels NCCL really ran on (capped at the communicator's count)
      const Config& ran = r.applied[static_cast<size_t>(x.first - from)];
      if (ceiling > 0 && ran.channels > 0) s.channelsRan(ran.algo, ran.proto, ran.channels, std::min(ran.channels, ceiling));
      s.addSample(x.first, x.second);
    }
  }
  r.converged = s.converged();
  r.convergedAt = s.stats().convergedAt;
  r.final = s.best();
  return r;
}

Options testOptions(std::mt19937_64& rng) {
  Options o;
  std::uniform_int_distribution<int> lead(1, 6);
  o.lead = static_cast<uint64_t>(lead(rng));
  return o;
}

// The engine's online bounds (onlineSearchOptions): pairs NCCL's model puts beyond 2x its choice not probed, a first
// sample 30 % behind abandoned, a regret budget of 10 % of the task's calls plus 16 calls.
Options withOnlineBounds(Options o) {
  o.maxCostRatio = 2.0;
  o.abandonAbove = 0.3;
  o.regretBudget = 0.10;
  o.regretAllowance = 16;
  return o;
}
// ... and the allowance earned on the task's calls, the calls in flight charged (AUTOCCL_REGRET_EARN_PCT=5, opt-in
// in the engine; the search test earnedAllowance).
Options withEarnedAllowance(Options o) {
  o.regretEarn = 0.05;
  o.inflightRegret = 0.3;
  return o;
}

// The convergence case's models: for seeds 1-300, kind 0 random unimodal-ish, kind 1 H200-like of a size drawn in
// 64 KiB-1 GiB. `rng` is seeded from (seed, kind) and goes on to draw the run's options and sample lag.
Model convergenceModel(int kind, uint64_t seed, std::mt19937_64& rng) {
  rng.seed(seed * 7919 + static_cast<uint64_t>(kind));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  return kind == 0 ? randomModel(rng) : h200Model(rng, std::exp2(16.0 + 14.0 * u(rng)));
}

void convergence() {
  int runs = 0, within3 = 0, worseThanDefault = 0, notConverged = 0;
  int kindRuns[2] = {0, 0}, kindWithin3[2] = {0, 0};
  double worst = 0, sumCalls = 0;
  for (int kind = 0; kind < 2; ++kind)
    for (uint64_t seed = 1; seed <= 300; ++seed) {
      std::mt19937_64 rng;
      Model m = convergenceModel(kind, seed, rng);
      Options o = testOptions(rng);
      int lag = static_cast<int>(rng() % 5);
      TaskSearch s(m.space, o);
      RunResult r = drive(s, m, rng, 150, lag, 0.0);
      runs++;
      if (std::getenv("SEARCH_DEBUG") && std::atoi(std::getenv("SEARCH_DEBUG")) == static_cast<int>(seed)) {
        for (const Segment& sg : s.plan())
          std::printf("[%llu,%llu) %s %s true=%.2f\n", static_cast<unsigned long long>(sg.begin),
                      static_cast<unsigned long long>(sg.end), phaseName(sg.phase), sg.cfg.str().c_str(),
                      m.trueTime(sg.cfg));
        std::string where;
        double bt = m.bestTime(&where);
        std::printf("best %.2f at %s, default %.2f lag %d lead %llu\n", bt, where.c_str(), m.trueTime(Config()),
                    lag, static_cast<unsigned long long>(o.lead));
      }
      if (!r.converged || r.convergedAt > 150) {
        notConverged++;
        std::fprintf(stderr, "kind %d seed %llu: not converged in 150 calls (stats tuning=%llu)\n", kind,
                     static_cast<unsigned long long>(seed), static_cast<unsigned long long>(s.stats().tuningCalls));
        continue;
      }
      sumCalls += static_cast<double>(r.convergedAt);
      double best = m.bestTime(), got = m.trueTime(r.final), dflt = m.trueTime(Config());
      double ratio = got / best;
      worst = std::max(worst, ratio);
      kindRuns[kind]++;
      if (ratio <= 1.03) {
        within3++;
        kindWithin3[kind]++;
      } else
        std::fprintf(stderr, "kind %d seed %llu: final %s %.2f vs best %.2f (x%.3f) default %.2f\n", kind,
                     static_cast<unsigned long long>(seed), r.final.str().c_str(), got, best, ratio, dflt);
      // never worse than NCCL's default beyond noise
      if (got > dflt * (1.0 + std::max(0.01, 2 * m.noise))) {
        worseThanDefault++;
        std::fprintf(stderr, "kind %d seed %llu: final %.2f worse than default %.2f\n", kind,
                     static_cast<unsigned long long>(seed), got, dflt);
      }
    }
  std::printf("runs %d, within 3%% of best: %d, not converged: %d, worse than default: %d, worst x%.3f, "
              "mean calls to converge %.1f\n",
              runs, within3, notConverged, worseThanDefault, worst, sumCalls / std::max(1, runs - notConverged));
  CHECK(notConverged == 0);
  CHECK(worseThanDefault == 0);
  std::printf("H200-like model: %d/%d within 3%%; random unimodal-ish model: %d/%d within 3%%\n", kindWithin3[1],
              kindRuns[1], kindWithin3[0], kindRuns[0]);
  // Measured rates (see docs/online-search.md): H200-like 296/300, random 287/300. The bounds below
  // leave a little room for changes of the random streams, not for a worse search.
  CHECK(kindWithin3[1] >= kindRuns[1] * 98 / 100);
  CHECK(kindWithin3[0] >= kindRuns[0] * 87 / 100);
  CHECK(worst <= 1.35);
}

void immutability() {
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed);
    Model m = seed % 2 ? randomModel(rng) : h200Model(rng, 1 << 24);
    Options o = testOptions(rng);
    o.recheckFirst = 64;
    o.recheckMax = 256;
    TaskSearch s(m.space, o);
    std::map<uint64_t, Config> handed;
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<std::pair<uint64_t, double>> late;
    for (uint64_t k = 0; k < 2000; ++k) {
      // ask out of order too: sometimes far ahead (publish-ahead), sometimes old calls again
      uint64_t q = k;
      double r = u(rng);
      if (r < 0.1) q = k + rng() % 50;
      else if (r < 0.2 && k > 0) q = rng() % k;
      Segment seg = s.segmentFor(q);
      CHECK(seg.contains(q));
      auto it = handed.find(q);
      if (it != handed.end()) CHECK_MSG(it->second == seg.cfg, "call %llu changed", static_cast<unsigned long long>(q));
      handed[q] = seg.cfg;
      Config c = s.configFor(k);
      if (handed.count(k)) CHECK(handed[k] == c);
      handed[k] = c;
      if (c.measure) late.push_back({k, m.sample(c, rng)});
      if (late.size() > 3 || u(rng) < 0.3) {
        std::shuffle(late.begin(), late.end(), rng);
        for (auto& x : late) s.addSample(x.first, x.second);
        late.clear();
      }
    }
    // the plan agrees with everything handed out, is contiguous from 0 and never unsupported
    std::vector<Segment> plan = s.plan();
    REQUIRE(!plan.empty());
    CHECK(plan.front().begin == 0);
    for (size_t i = 1; i < plan.size(); ++i) CHECK(plan[i].begin == plan[i - 1].end);
    for (auto& [k, c] : handed) {
      auto it = std::upper_bound(plan.begin(), plan.end(), k, [](uint64_t v, const Segment& sg) { return v < sg.end; });
      REQUIRE(it != plan.end());
      CHECK(it->cfg == c);
      if (!c.isDefault()) {
        CHECK(m.space.cost[c.algo][c.proto] >= 0);
        CHECK(c.channels >= 1 && c.channels <= m.space.maxChannels);
        CHECK(c.chunk == 0);
        CHECK(c.chunkHalvings >= 0 && c.chunkHalvings <= m.space.maxChunkHalvings[c.proto]);
      }
    }
  }
}

void robustness() {
  // 1. nothing is ever measured (CUDA graph capture): converges to NCCL's default in bounded calls
  {
    std::mt19937_64 rng(5);
    Model m = randomModel(rng);
    Options o;
    TaskSearch s(m.space, o);
    for (uint64_t k = 0; k < 2000; ++k) (void)s.configFor(k);
    CHECK(s.converged());
    CHECK(s.best().isDefault());
    CHECK(s.stats().convergedAt <= 400);
    std::printf("unmeasured: converged at call %llu\n", static_cast<unsigned long long>(s.stats().convergedAt));
  }
  // 2. heavy loss, long lag: still converges (bounded) and never worse than default
  int bad = 0, far = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed + 1000);
    Model m = seed % 2 ? randomModel(rng) : h200Model(rng, 1 << 22);
    Options o = testOptions(rng);
    o.maxTuningCalls = 400;
    TaskSearch s(m.space, o);
    const int lag = 12;
    RunResult r = drive(s, m, rng, 1000, lag, 0.3);
    CHECK(r.converged);
    // out of budget, a duel side with one sample waits for a second still in flight: up to the lag
    CHECK(r.convergedAt <= o.maxTuningCalls + static_cast<uint64_t>(o.samplesMax + lag));
    double got = m.trueTime(r.final), dflt = m.trueTime(Config());
    if (got > dflt * (1.0 + std::max(0.01, 2 * m.noise))) bad++;
    if (got > m.bestTime() * 1.10) {
      far++;
      std::fprintf(stderr, "lossy seed %llu: %.1f vs best %.1f default %.1f\n", static_cast<unsigned long long>(seed), got,
                   m.bestTime(), dflt);
    }
  }
  CHECK(bad == 0);
  std::printf("30%% samples lost, lag up to 12: %d/100 end more than 10%% from the best\n", far);
  CHECK(far <= 12);  // measured: 10
  // 3. junk samples are ignored: unknown call indices, NaN, negative, for unmeasured calls
  {
    std::mt19937_64 rng(9);
    Model m = h200Model(rng, 1 << 20);
    TaskSearch s(m.space, Options());
    for (uint64_t k = 0; k < 300; ++k) {
      Config c = s.configFor(k);
      s.addSample(k + 100000, 1.0);
      s.addSample(k, std::nan(""));
      s.addSample(k, -5);
      if (c.measure) s.addSample(k, m.sample(c, rng));
      s.addSample(k, 0.001);  // a duplicate for the same call: ignored
    }
    CHECK(s.converged());
    CHECK(m.trueTime(s.best()) <= m.trueTime(Config()) * 1.02);
  }
  // 4. no supported pair (everything -1): NCCL's default forever
  {
    Space sp;
    TaskSearch s(sp, Options());
    CHECK(s.configFor(0).isDefault());
    CHECK(s.configFor(1000000).isDefault());
    CHECK(s.converged());
  }
}

void warmstart() {
  // neighbours' tuned configs make the search cheaper on average; an exact entry starts tuned.
  double coldCalls = 0, warmCalls = 0;
  int n = 0, warmBad = 0, exactBad = 0, exactSlow = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed * 31);
    Model lo = h200Model(rng, 1 << 22), mid = lo, hi = lo;
    std::mt19937_64 r2(seed * 31);
    mid = h200Model(r2, 1 << 23);
    std::mt19937_64 r3(seed * 31);
    hi = h200Model(r3, 1 << 24);
    mid.space.ncclChannels = lo.space.ncclChannels = hi.space.ncclChannels = 24;
    std::vector<TableEntry> table;
    for (Model* m : {&lo, &hi}) {
      TaskSearch s(m->space, Options());
      RunResult r = drive(s, *m, rng, 300, 2, 0);
      table.push_back(TableEntry{4, m == &lo ? (1u << 22) : (1u << 24), 1, r.final, 0});
    }
    std::vector<Hint> hints = hintsFor(table, 4, 1 << 23, 1);
    CHECK(hints.size() == 2);
    TaskSearch cold(mid.space, Options());
    RunResult rc = drive(cold, mid, rng, 300, 2, 0);
    TaskSearch warm(mid.space, Options(), hints);
    RunResult rw = drive(warm, mid, rng, 300, 2, 0);
    coldCalls += static_cast<double>(rc.convergedAt);
    warmCalls += static_cast<double>(rw.convergedAt);
    n++;
    if (mid.trueTime(rw.final) > mid.bestTime() * 1.03) warmBad++;
    // exact entry (a saved table): starts tuned, verified against NCCL's default
    table.push_back(TableEntry{4, 1u << 23, 1, rw.final, 0});
    std::vector<Hint> ex = hintsFor(table, 4, 1 << 23, 1);
    REQUIRE(ex.size() == 1 && ex[0].distance == 0);
    TaskSearch again(mid.space, Options(), ex);
    RunResult ra = drive(again, mid, rng, 300, 2, 0);
    if (mid.trueTime(ra.final) > mid.bestTime() * 1.03) exactBad++;
    if (ra.convergedAt > 20) exactSlow++;
    // the tuned config is used from the second call on, except while NCCL's default is measured
    int tunedEarly = 0;
    for (size_t k = 0; k < 12; ++k) tunedEarly += ra.applied[k].sameSetting(rw.final) ? 1 : 0;
    CHECK(ra.applied[0].isDefault() || rw.final.isDefault());
    CHECK(tunedEarly >= 6 || rw.final.isDefault());
  }
  std::printf("mean calls to converge: cold %.1f, warm %.1f\n", coldCalls / n, warmCalls / n);
  CHECK(warmCalls < coldCalls * 0.85);
  CHECK(warmBad <= 1);
  CHECK(exactBad == 0);
  CHECK(exactSlow == 0);
  // a stale exact entry that is now much worse than NCCL's default triggers a re-tune
  {
    std::mt19937_64 rng(77);
    Model m = h200Model(rng, 1 << 28);  // large: LL is terrible here
    Config bad;
    bad.algo = 1;
    bad.proto = 0;
    bad.channels = 2;
    TaskSearch s(m.space, Options(), {Hint{bad, 10, 0}});
    RunResult r = drive(s, m, rng, 400, 2, 0);
    CHECK(r.converged);
    CHECK(s.stats().retunes == 1);
    CHECK(m.trueTime(r.final) <= m.bestTime() * 1.03);
  }
}

void drift() {
  int ok = 0, n = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed * 101);
    Model m = h200Model(rng, 1 << 25);
    m.space.ncclChannels = 24;
    // after the switch, every channel costs 4 µs extra (a concurrent GEMM): the optimum moves down
    Model after = m;
    auto base = m.t;
    after.t = [base](int pair, int ch, int h) { return base(pair, ch, h) * 1.0 + 6.0 * ch; };
    Options o;
    o.recheckFirst = 64;
    o.recheckMax = 512;
    TaskSearch s(m.space, o);
    RunResult r = drive(s, m, rng, 6000, 3, 0, 0, &after, 1500);
    n++;
    CHECK(s.stats().retunes >= 1);
    CHECK(r.converged);
    if (after.trueTime(r.final) <= after.bestTime() * 1.03) ok++;
    else
      std::fprintf(stderr, "drift seed %llu: final %s %.1f best %.1f\n", static_cast<unsigned long long>(seed),
                   r.final.str().c_str(), after.trueTime(r.final), after.bestTime());
    // once converged (first time), timing is off except for short checks
    size_t measured = 0;
    for (size_t k = 200; k < 1500; ++k) measured += r.applied[k].measure ? 1 : 0;
    CHECK(measured < 60);
  }
  CHECK(ok >= n - 1);
  // The times of the tuning phase are not the reference: a task whose calls all run 30% slower once
  // tuning is over (the job's steady state differs from the warm-up burst) is not re-tuned for it,
  // and a later change is still caught.
  {
    int retuned = 0, caught = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      std::mt19937_64 rng(seed * 13);
      Model m = h200Model(rng, 1 << 24);
      TaskSearch s(m.space, Options());
      RunResult first = drive(s, m, rng, 200, 3, 0);
      REQUIRE(first.converged);
      Model steady = m;
      auto base = m.t;
      steady.t = [base](int pair, int ch, int h) { return 1.3 * base(pair, ch, h); };
      drive(s, steady, rng, 3000, 3, 0, 200);
      retuned += s.stats().retunes > 0 ? 1 : 0;
      Model later = steady;
      later.t = [base](int pair, int ch, int h) { return 1.3 * base(pair, ch, h) + 6.0 * ch; };
      drive(s, later, rng, 6000, 3, 0, 3200);
      caught += s.stats().retunes > 0 ? 1 : 0;
    }
    std::printf("steady state 30%% slower than tuning: %d/20 re-tuned; a later change caught in %d/20\n", retuned,
                caught);
    CHECK(retuned == 0);
    CHECK(caught >= 19);
  }
  // stable model: no re-tune over many checks
  std::mt19937_64 rng(3);
  Model m = h200Model(rng, 1 << 24);
  Options o;
  o.recheckFirst = 32;
  TaskSearch s(m.space, o);
  drive(s, m, rng, 20000, 3, 0);
  CHECK(s.stats().retunes == 0);
  // Checks follow the doubling interval even when their samples arrive many calls late: after a check
  // the next one comes `interval` calls after it, not right after the wait for its samples.
  {
    std::mt19937_64 r2(4);
    Model m2 = h200Model(r2, 1 << 24);
    TaskSearch s2(m2.space, Options());
    drive(s2, m2, r2, 20000, 12, 0);
    int checks = 0;
    for (const Segment& g : s2.plan()) checks += g.phase == Phase::kCheck ? 1 : 0;
    std::printf("checks in 20000 calls with samples up to 12 calls late: %d\n", checks);
    CHECK(checks <= 7);  // 256, 512, ... 16384 calls apart (10 when each wait for samples shortened the interval)
    CHECK(s2.stats().retunes == 0);
  }
  // A check that loses samples (the engine let timing go while the task was idle) counts with what
  // arrived; later checks still come (a check short of samples used to wait for them forever).
  {
    std::mt19937_64 r3(6);
    Model m3 = h200Model(r3, 1 << 24);
    Options o3;
    o3.recheckFirst = 64;
    o3.recheckMax = 256;
    TaskSearch s3(m3.space, o3);
    RunResult first = drive(s3, m3, r3, 300, 2, 0);
    REQUIRE(first.converged);
    drive(s3, m3, r3, 6000, 2, 0.4, 300);
    int checks = 0;
    for (const Segment& g : s3.plan()) checks += g.begin >= 300 && g.phase == Phase::kCheck ? 1 : 0;
    std::printf("checks in 6000 calls with 40%% of samples lost: %d\n", checks);
    CHECK(checks >= 15);  // one per ~260 calls
  }
}

// With a clock and Options::recheckMinMs, a drift check needs the time as well as the calls: calls that come
// fast (a benchmark's back-to-back passes) get no check at all until the time has passed; once it has,
// the checks come, and a drift is still caught. Clock: 0.1 ms per call.
void driftSpacedByTime() {
  for (uint64_t minMs : {uint64_t{0}, uint64_t{2000}}) {
    int checksEarly = 0, checksLate = 0, caught = 0, waitsEarly = 0;
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      std::mt19937_64 rng(seed * 17);
      Model m = h200Model(rng, 1 << 24);
      uint64_t tenthsMs = 0;
      Options o;
      o.clockMs = [&tenthsMs] { return tenthsMs / 10; };
      o.recheckMinMs = minMs;
      TaskSearch s(m.space, o);
      Model later = m;
      auto base = m.t;
      later.t = [base](int pair, int ch, int h) { return base(pair, ch, h) + 6.0 * ch; };
      std::deque<std::pair<uint64_t, double>> due;
      uint64_t pinnedAt = kForever;
      for (uint64_t k = 0; k < 100000; ++k, ++tenthsMs) {
        Config c = s.configFor(k);
        if (pinnedAt == kForever && s.converged()) pinnedAt = s.stats().convergedAt;
        if (c.measure) due.emplace_back(k, (k < 60000 ? m : later).sample(c, rng));
        while (!due.empty() && due.front().first + 3 <= k) {
          s.addSample(due.front().first, due.front().second);
          due.pop_front();
        }
      }
      REQUIRE(pinnedAt < 1000);
      for (const Segment& g : s.plan()) {
        if (g.begin < pinnedAt) continue;
        if (g.phase == Phase::kPinned && g.begin < 20000) waitsEarly++;  // each end: a lookup on every rank
        if (g.phase != Phase::kCheck) continue;
        (g.begin < 20000 ? checksEarly : checksLate) += 1;  // 20000 calls = 2 s after the start
      }
      caught += s.stats().retunes > 0 ? 1 : 0;
    }
    std::printf("drift checks %llu ms apart: %d checks in the first 2 s (%d pinned segments), %d later; "
                "drift caught %d/10\n",
                static_cast<unsigned long long>(minMs), checksEarly, waitsEarly, checksLate, caught);
    if (minMs == 0) {
      CHECK(checksEarly >= 30);  // 256, 512, ... calls after the pin: the call rule alone
    } else {
      CHECK(checksEarly == 0);
      CHECK(checksLate >= 20);
      // Waiting for the time in doubling segments: 64, 128, ... calls (about 9 per seed until 20000), not
      // one every 64 calls (about 300 per seed).
      CHECK(waitsEarly <= 10 * 12);
    }
    CHECK(caught >= 9);
  }
}

void objective() {
  // With a per-channel penalty the pinned configuration trades collective time for fewer channels.
  int fewer = 0, n = 0, good = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed * 13);
    Model m = h200Model(rng, 1 << 26);
    m.space.ncclChannels = 24;
    TaskSearch plain(m.space, Options());
    RunResult rp = drive(plain, m, rng, 300, 2, 0);
    Options o;
    const double pen = 3.0;
    o.objective = channelPenalty(pen);
    TaskSearch pensearch(m.space, o);
    Model pm = m;
    auto base = m.t;
    // the model's samples are collective times; the search adds the penalty itself
    RunResult rq = drive(pensearch, pm, rng, 300, 2, 0);
    auto obj = [&](const Config& c) {
      int ch = c.isDefault() ? 24 : c.channels;
      return m.trueTime(c) + pen * ch;
    };
    double bestObj = HUGE_VAL;
    for (int a = 0; a < 2; ++a)
      for (int p = 0; p < 3; ++p)
        for (int ch = 1; ch <= 64; ++ch) {
          Config c;
          c.algo = a;
          c.proto = p;
          c.channels = ch;
          bestObj = std::min(bestObj, obj(c));
        }
    n++;
    int chP = rp.final.isDefault() ? 24 : rp.final.channels;
    int chQ = rq.final.isDefault() ? 24 : rq.final.channels;
    if (chQ < chP) fewer++;
    if (obj(rq.final) <= bestObj * 1.03) good++;
    (void)base;
  }
  std::printf("penalty: fewer channels in %d/%d, within 3%% of best objective in %d/%d\n", fewer, n, good, n);
  CHECK(fewer >= n * 9 / 10);
  CHECK(good >= n - 1);
}

// The communicator has fewer channels than the search's range (NCCL caps requests silently): with the
// capped counts reported, the search stops proposing points above the ceiling at once and converges as
// if it had known the ceiling; without them it burns its budget on duplicates (the old behaviour).
void ceiling() {
  int n = 0, good = 0, goodBlind = 0;
  uint64_t wasted = 0, wastedBlind = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed * 31 + 7);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    Model m = h200Model(rng, std::exp2(20.0 + 10.0 * u(rng)));
    const int cap = seed % 2 ? 24 : 16;
    m.space.maxChannels = 64;
    m.space.ncclChannels = 0;  // unknown, as in the engine
    m.defaultChannels = cap;
    auto base = m.t;
    m.t = [base, cap](int pair, int ch, int h) { return base(pair, std::min(ch, cap), h); };
    auto above = [&](const RunResult& r) {
      uint64_t w = 0;
      for (const Config& c : r.applied) w += (c.measure && c.channels > cap) ? 1 : 0;
      return w;
    };
    std::mt19937_64 rngBlind = rng;
    TaskSearch s(m.space, Options());
    RunResult r = drive(s, m, rng, 150, 3, 0.0, 0, nullptr, kForever, cap);
    TaskSearch blind(m.space, Options());
    RunResult rb = drive(blind, m, rngBlind, 150, 3, 0.0);
    n++;
    double best = m.bestTime();
    CHECK(r.converged && r.convergedAt <= 150);
    if (r.converged && m.trueTime(r.final) <= best * 1.03) good++;
    if (rb.converged && m.trueTime(rb.final) <= best * 1.03) goodBlind++;
    if (!r.final.isDefault()) CHECK(r.final.channels <= cap);
    wasted += above(r);
    wastedBlind += above(rb);
  }
  std::printf("channel ceiling: within 3%% %d/%d (blind %d/%d); measured calls above the ceiling %.1f per task "
              "(blind %.1f)\n",
              good, n, goodBlind, n, static_cast<double>(wasted) / n, static_cast<double>(wastedBlind) / n);
  CHECK(good >= n * 97 / 100);
  CHECK(wasted * 3 < wastedBlind);
}

// Pairs that NCCL's cost model puts far behind its choice are not probed (unless hinted); with the
// filter off they are.
void costFilter() {
  std::mt19937_64 rng(11);
  Model m = h200Model(rng, 1 << 28);
  float minCost = HUGE_VALF;
  for (int a = 0; a < 2; ++a)
    for (int p = 0; p < 3; ++p) minCost = std::min(minCost, m.space.cost[a][p]);
  m.space.cost[0][0] = 10 * minCost;  // tree/LL: far behind
  auto probes = [&](const Options& o, std::vector<Hint> hints) {
    TaskSearch s(m.space, o, std::move(hints));
    RunResult r = drive(s, m, rng, 150, 2, 0.0);
    int n = 0;
    for (const Config& c : r.applied) n += (c.algo == 0 && c.proto == 0) ? 1 : 0;
    return n;
  };
  CHECK(probes(Options(), {}) == 0);
  Options all;
  all.maxCostRatio = 0;
  CHECK(probes(all, {}) > 0);
  Config h;
  h.algo = 0;
  h.proto = 0;
  h.channels = 16;
  CHECK(probes(Options(), {Hint{h, 0, 1.0}}) > 0);
}


// NCCL's Ring/Simple (its choice) against Tree/Simple, channels without effect: ringUs and treeUs.
Model ringVsTree(double ringUs, double treeUs, double outlierProb) {
  Model m;
  m.space.maxChannels = 64;
  m.space.ncclChannels = 24;
  m.space.cost[1][2] = 1.0f;  // ring/simple: NCCL's choice
  m.space.cost[0][2] = 1.2f;  // tree/simple
  m.noise = 0.01;
  m.outlierProb = outlierProb;
  m.t = [ringUs, treeUs](int pair, int, uint64_t) { return pair == 1 * kNumProtos + 2 ? ringUs : treeUs; };
  setDefaultFromCost(m);
  return m;
}

// 400 calls of `s` on `m`, samples 3 calls late; each with the channels it ran on (`ran` of the config asked),
// reported as the engine reports the profiler's count (TaskSearch::channelsRan).
void driveReportingChannels(TaskSearch& s, const Model& m, std::mt19937_64& rng,
                            const std::function<int(const Config&)>& ran) {
  struct Due {
    uint64_t k;
    Config asked;
    int ranChannels;
    double us;
  };
  std::deque<Due> due;
  for (uint64_t k = 0; k < 400; ++k) {
    const Config c = s.configFor(k);
    Config r = c;
    r.channels = ran(c);
    if (c.measure) due.push_back({k, c, r.channels, m.sample(r, rng)});
    for (; !due.empty() && due.front().k + 3 <= k; due.pop_front()) {
      const Due& d = due.front();
      if (d.asked.channels > 0) s.channelsRan(d.asked.algo, d.asked.proto, d.asked.channels, d.ranChannels);
      s.addSample(d.k, d.us);
    }
  }
}

// NCCL caps a small task's channels by a minimum of traffic per channel that differs between (algorithm,
// protocol) pairs. On 2 x H200 all_reduce 4 MiB ran tree/ll128 on 29 of 30 channels asked while ring/ll128
// ran 64, its best point (25 us against NCCL's 31); taken as the task's ceiling, the tree observation
// merged ring/ll128/64 into ring/ll128/29 and NCCL's choice stayed. Model: ring/ll128 best at
// 64 channels, tree/ll128 capped at 29 and probed first; the search must end within 3 % of the best.
void pairCeiling() {
  int good = 0, n = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed * 613);
    Model m;
    m.space.maxChannels = 64;
    m.space.ncclChannels = 24;
    m.noise = 0.01;
    m.outlierProb = 0.0;
    m.space.cost[1][2] = 1.0f;  // ring/simple: NCCL's choice
    m.space.cost[0][1] = 1.1f;  // tree/ll128: probed next
    m.space.cost[1][1] = 1.2f;  // ring/ll128
    setDefaultFromCost(m);
    const int treeLL128 = 0 * kNumProtos + 1, ringLL128 = 1 * kNumProtos + 1;
    m.t = [=](int pair, int ch, uint64_t) {
      if (pair == ringLL128) return 25.0 * (1.0 + 0.25 * std::fabs(std::log2(ch / 64.0)));
      if (pair == treeLL128) return 34.0 * (1.0 + 0.25 * std::fabs(std::log2(std::min(ch, 29) / 29.0)));
      return 31.0 * (1.0 + 0.3 * std::fabs(std::log2(ch / 24.0)));
    };
    TaskSearch s(m.space, Options());
    driveReportingChannels(s, m, rng, [&](const Config& c) {
      return !c.isDefault() && c.algo * kNumProtos + c.proto == treeLL128 ? std::min(c.channels, 29) : c.channels;
    });
    ++n;
    CHECK(s.converged() && s.stats().convergedAt <= 150);
    const Config b = s.best();
    const double t = m.trueTime(b);
    if (t <= 25.0 * 1.03) ++good;
    else std::printf("  seed %llu: pinned %s, %.1f us\n", static_cast<unsigned long long>(seed), b.str().c_str(), t);
  }
  std::printf("one pair capped by NCCL, another best above the cap: within 3%% %d/%d\n", good, n);
  CHECK(good >= n * 95 / 100);
}

// A call runs on the channels the data divides over: on 2 x H200 (all_gather 4 MiB, one process) 23 channels
// asked ran 22 and 17 ran 16, while 64 ran 64. Taken as a ceiling, ring/ll128 was clamped at 22, then at 16,
// below its best point, 64. Model: every pair asked an odd count below 64 runs one fewer;
// ring/ll128 best at 64. The search must end within 3 % of the best.
void channelGranularity() {
  int good = 0, n = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed * 877);
    Model m = ringVsTree(31.0, 40.0, 0.0);
    m.space.cost[1][1] = 1.1f;  // ring/ll128, best at 64 channels
    m.space.cost[1][0] = 1.15f;  // ring/ll
    m.t = [](int pair, int ch, uint64_t) {
      if (pair == 1 * kNumProtos + 1) return 25.0 * (1.0 + 0.25 * std::fabs(std::log2(ch / 64.0)));
      if (pair == 1 * kNumProtos + 0) return 28.0 * (1.0 + 0.25 * std::fabs(std::log2(ch / 24.0)));
      if (pair == 1 * kNumProtos + 2) return 31.0 * (1.0 + 0.3 * std::fabs(std::log2(ch / 24.0)));
      return 40.0;
    };
    TaskSearch s(m.space, Options());
    driveReportingChannels(s, m, rng, [](const Config& c) {
      return c.channels > 0 && c.channels < 64 && c.channels % 2 == 1 ? c.channels - 1 : c.channels;
    });
    ++n;
    CHECK(s.converged() && s.stats().convergedAt <= 150);
    const double t = m.trueTime(s.best());
    if (t <= 25.0 * 1.03) ++good;
    else std::printf("  seed %llu: pinned %s, %.1f us\n", static_cast<unsigned long long>(seed), s.best().str().c_str(), t);
  }
  std::printf("odd channel counts run one fewer: within 3%% %d/%d\n", good, n);
  CHECK(good >= n * 95 / 100);
}

// A task whose first calls are slow for NCCL's default (ranks out of step at the start of a phase:
// one process per GPU on 4 x H200, rank 0's 64-channel kernels measured 160-410 us for a 55 us
// all_gather during its first 60 calls, 20-channel ones much less). The default is measured first,
// so its tuning samples are slow, and a configuration 6 % slower in steady state looks 2.7x faster.
// The duel re-measures both alternately before pinning: the default stays.
void settlingStart() {
  int pinnedWorse = 0, pinnedWorseNoDuel = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const Model steady = ringVsTree(100.0, 106.0, 0.02);
    // while settling, the default's kernels (all channels) wait for peers; a narrower one less so
    const Model settling = ringVsTree(300.0, 110.0, 0.02);
    for (int duel : {5, 0}) {
      std::mt19937_64 rng(seed * 31);
      Options o;
      o.duelSamples = duel;
      TaskSearch s(steady.space, o);
      RunResult r = drive(s, settling, rng, 300, 2, 0.0, 0, &steady, 24);
      CHECK(r.converged && r.convergedAt <= 150);
      const bool worse = steady.trueTime(r.final) > steady.trueTime(Config()) * 1.02;
      (duel ? pinnedWorse : pinnedWorseNoDuel) += worse ? 1 : 0;
    }
  }
  std::printf("settling start: pinned a slower config %d/30 with the duel, %d/30 without\n", pinnedWorse,
              pinnedWorseNoDuel);
  CHECK(pinnedWorse == 0);
  CHECK(pinnedWorseNoDuel >= 25);  // the scenario does mislead a search that pins on tuning samples
}

// How often a search that reaches the duel (NCCL's choice slow while settling, as in settlingStart) pins the
// other configuration, `otherUs` in steady state against NCCL's 100 us, samples with `noise`, over 100 seeds.
// With duelRun > 1 each sample is a turn of that many calls (a call scored by its stream period); maxLag: samples
// arrive up to that many calls late; maxTuningCalls: the budget (0: the default).
// extensions: Options::duelExtensions. extended / extendedAgain: runs whose duel took a second / a third block.
int duelPinsOther(double otherUs, double noise, double duelZ, int extensions = Options().duelExtensions,
                  int duelRun = 1, int maxLag = 2, uint64_t maxTuningCalls = 0, int* extended = nullptr,
                  int* extendedAgain = nullptr) {
  int other = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    Model steady = ringVsTree(100.0, otherUs, 0.0);
    Model settling = ringVsTree(300.0, otherUs, 0.0);
    steady.noise = settling.noise = noise;
    std::mt19937_64 rng(seed * 71);
    Options o;
    o.duelZ = duelZ;
    o.duelExtensions = extensions;
    o.duelRun = duelRun;
    if (maxTuningCalls > 0) o.maxTuningCalls = maxTuningCalls;
    o.minMargin = duelZ > 0 ? o.minMargin : 0.0;
    TaskSearch s(steady.space, o);
    RunResult r = drive(s, settling, rng, 400, maxLag, 0.0, 0, &steady, 24);
    // the second block is planned to be back by the budget's end at the lag seen when it starts
    CHECK(r.converged && r.convergedAt <= o.maxTuningCalls + static_cast<uint64_t>(maxLag) + 2);
    if (extended) *extended += s.stats().duelExtensions > 0 ? 1 : 0;
    if (extendedAgain) *extendedAgain += s.stats().duelExtensions > 1 ? 1 : 0;
    if (std::getenv("AUTOCCL_TEST_VERBOSE"))
      std::fprintf(stderr, "other %.1f noise %.2f run %d budget %llu seed %llu: %s at %llu\n", otherUs, noise, duelRun,
                   static_cast<unsigned long long>(o.maxTuningCalls), static_cast<unsigned long long>(seed),
                   r.final.str().c_str(), static_cast<unsigned long long>(r.convergedAt));
    other += r.final.isDefault() ? 0 : 1;
  }
  return other;
}

// Two configurations within the noise of each other reach the duel: without a margin its medians tie and
// pin either at random (the emulator's 3 %-noise scenario pinned tree/ll, 1.9 % slower than NCCL's ring/ll,
// on duel medians of 33.54 vs 33.54 us); with Options::duelZ NCCL's choice stays. A gain well beyond the
// noise is still confirmed.
void duelTies() {
  const double z = Options().duelZ;
  const int tie = duelPinsOther(101.5, 0.04, z), tieNoMargin = duelPinsOther(101.5, 0.04, 0.0);
  const int gain = duelPinsOther(90.0, 0.04, z), smallGain = duelPinsOther(97.0, 0.01, z);
  const int near = duelPinsOther(95.0, 0.03, z), nearOnce = duelPinsOther(95.0, 0.03, z, 0);
  const int tieOnce = duelPinsOther(101.5, 0.04, z, 0), tieTwoBlocks = duelPinsOther(101.5, 0.04, z, 1);
  // a gain about as large as the noise: one further block is rarely enough
  int thrice = 0;
  const int noisy = duelPinsOther(96.0, 0.04, z, Options().duelExtensions, 1, 2, 0, nullptr, &thrice);
  const int noisyTwoBlocks = duelPinsOther(96.0, 0.04, z, 1);
  std::printf("duel, other config 1.5 %% slower (4 %% noise): pinned %d/100 with the margin (%d with two blocks at "
              "most, %d with one), %d/100 without the margin; 10 %% faster (4 %% noise): %d/100; 3 %% faster (1 %% "
              "noise): %d/100; 5 %% faster (3 %% noise): %d/100 (%d with one block); 4 %% faster (4 %% noise): "
              "%d/100 (%d with two blocks at most; %d took a third)\n",
              tie, tieTwoBlocks, tieOnce, tieNoMargin, gain, smallGain, near, nearOnce, noisy, noisyTwoBlocks, thrice);
  // measured (duelZ 1, duelExtensions 2): 9 (8, 7), 28, 100, 100, 99 (83), 85 (70; 21); duelZ 2 would pin the tie
  // once but lose a quarter of the 10 % gains
  CHECK(tie <= 10);
  CHECK(tieNoMargin >= 20);  // the scenario does reach the duel with a tie
  CHECK(gain >= 95);
  CHECK(smallGain >= 95);
  CHECK(near >= 90 && near > nearOnce);  // further blocks confirm gains near the margin
  CHECK(thrice >= 5 && noisy >= noisyTwoBlocks + 5);  // ... and a third block those within the noise
}

// The duel of duelTies scored in turns of three calls (a call scored by its stream period) with samples up to
// 8 calls late: a whole second block is 30 calls, which often does not fit after the first (emulated 4 x H200,
// all_gather 256 MiB: a 2.9 % lower median against a 3.35 % margin at 123 of 144 calls; NCCL's choice, 3.9 %
// slower in the model, stayed). The calls that wait for the first block's samples take the second block's turns, and the
// second block is as long as the budget allows (at least two samples a side).
void duelLateTurns() {
  const double z = Options().duelZ;
  for (uint64_t budget : {144, 100}) {
    int extended = 0;
    const int near = duelPinsOther(95.0, 0.03, z, Options().duelExtensions, 3, 8, budget, &extended);
    const int once = duelPinsOther(95.0, 0.03, z, 0, 3, 8, budget);
    const int tie = duelPinsOther(101.5, 0.04, z, Options().duelExtensions, 3, 8, budget);
    std::printf("turns of 3 calls, samples up to 8 calls late, budget %llu: 5 %% faster (3 %% noise) pinned %d/100 "
                "(%d without a second block; %d took one), 1.5 %% slower (4 %% noise) pinned %d/100\n",
                static_cast<unsigned long long>(budget), near, once, extended, tie);
    // measured: 144: 91 (81; 8 took one; 90 with one further block at most), tie 4; 100: 78 (73; 4), tie 7.
    // Before the turns taken ahead and the partial block: 89 and 72, and at 100 no duel had room for a second
    // block (72 with and without).
    CHECK(extended >= 2);
    CHECK(near >= once);
    CHECK(tie <= 10);
  }
}

// The settling start of settlingStart with every sample arriving 8, 28 or 60 calls late, `calls` calls of it per
// seed; with coldFactor > 1 the first call of a configuration after 16 calls without it is that many times slow.
// Checks, for every lag: no seed pins a configuration slower than NCCL's choice, none converges late.
void settlingDuelLagged(const char* what, uint64_t calls, double coldFactor) {
  for (uint64_t lag : {8, 28, 60}) {
    int pinnedWorse = 0, late = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      const Model steady = ringVsTree(100.0, 106.0, 0.02);
      const Model settling = ringVsTree(300.0, 110.0, 0.02);
      std::mt19937_64 rng(seed * 53);
      TaskSearch s(steady.space, Options());
      std::deque<std::pair<uint64_t, double>> due;
      std::map<std::string, uint64_t> lastRun;  // configuration -> last call that ran it
      for (uint64_t k = 0; k < calls; ++k) {
        Config c = s.configFor(k);
        bool cold = false;
        if (coldFactor > 1.0) {
          const std::string key = c.isDefault() ? std::string("default") : c.str();
          auto it = lastRun.find(key);
          cold = it != lastRun.end() && k - it->second > 16;
          lastRun[key] = k;
        }
        if (c.measure) due.emplace_back(k, (k < 48 ? settling : steady).sample(c, rng) * (cold ? coldFactor : 1.0));
        while (!due.empty() && due.front().first + lag <= k) {
          s.addSample(due.front().first, due.front().second);
          due.pop_front();
        }
      }
      CHECK(s.converged());
      // waiting calls far behind the newest sample are free (Options::freeWaitLag), up to maxWaitCalls
      const Options d;
      late += s.stats().convergedAt > 150 + lag + (lag > d.freeWaitLag ? d.maxWaitCalls : 0) ? 1 : 0;
      if (std::getenv("AUTOCCL_TEST_VERBOSE"))
        std::fprintf(stderr, "lag %llu seed %llu: pinned %s at %llu, default median %.1f\n",
                     static_cast<unsigned long long>(lag), static_cast<unsigned long long>(seed),
                     s.best().str().c_str(), static_cast<unsigned long long>(s.stats().convergedAt),
                     s.stats().defaultMedian);
      pinnedWorse += steady.trueTime(s.best()) > steady.trueTime(Config()) * 1.02 ? 1 : 0;
    }
    std::printf("%s, samples %llu calls late: pinned a slower config %d/20, converged late: %d/20\n", what,
                static_cast<unsigned long long>(lag), pinnedWorse, late);
    CHECK(pinnedWorse == 0);
    CHECK(late == 0);
  }
}

// The duel's samples are still in flight when the exploration budget runs out: it waits for them rather
// than deciding without them (one process for 4 x H200: reduce_scatter 16 MiB pinned ring/simple/22 with no
// fresh sample of NCCL's choice, whose own samples in the duel were 5 % faster).
void duelWaitsForSamples() { settlingDuelLagged("duel", 600, 1.0); }

// The first call of a configuration after a while without it is slow (one process per GPU on 4 x H200:
// 265-662 us for a 55 us reduce_scatter 16 MiB, each the first of its configuration after other ones).
// In the settling duel NCCL's side drew such a call; with the rest of its samples still in
// flight when the budget ran out, its median over two samples (662, 56) lost to ring/ll/44 (83 us) and
// the slower configuration was pinned. Model: 6.5x slow after 16 calls without it; NCCL's choice is 6 %
// faster in steady state.
void duelSwitchCost() { settlingDuelLagged("slow first call after a switch", 800, 6.5); }

// Calls scored by their stream period while the host is the bottleneck (one process launching several
// GPUs): a call's period ends when the host has launched the next call, so it measures the next call's
// configuration (model: call k's sample is a time of call k+1's configuration). The duel of settlingStart,
// taken call by call, then crosses its two sides and pins the slower configuration; in turns of two calls
// of one configuration (Options::duelRun 2, or 3 with the sample in the middle) each side's sample is
// followed by its own configuration.
void duelRuns() {
  int worse[4] = {0, 0, 0, 0};
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const Model steady = ringVsTree(100.0, 106.0, 0.0);
    const Model settling = ringVsTree(300.0, 110.0, 0.0);  // the first calls: NCCL's default slow (settlingStart)
    for (int run : {1, 2, 3}) {
      std::mt19937_64 rng(seed * 131);
      Options o;
      o.duelRun = run;
      TaskSearch s(steady.space, o);
      Config cur = s.configFor(0);
      for (uint64_t k = 0; k < 400; ++k) {
        Config next = s.configFor(k + 1);
        if (cur.measure) s.addSample(k, (k + 1 < 24 ? settling : steady).sample(next, rng));
        cur = next;
      }
      CHECK(s.converged() && s.stats().convergedAt <= 150);
      worse[run] += steady.trueTime(s.configFor(400)) > steady.trueTime(Config()) * 1.02 ? 1 : 0;
    }
  }
  std::printf(
      "duel under next-call attribution: pinned a slower config %d/20 call by call, %d/20 in turns of 2, %d/20 of 3\n",
      worse[1], worse[2], worse[3]);
  CHECK(worse[2] == 0);
  CHECK(worse[3] == 0);
  CHECK(worse[1] >= 10);  // the attribution does cross a duel taken call by call
}

// A configuration that leaves part of its cost to the next call (2 x H200, all_reduce 16 MiB, one process
// per GPU: after each tree/simple/64 kernel one rank idled 25 us outside its window, so the next call
// started late; nccl-tests ran tree/simple/64 at 89 us per call against 78 for NCCL's ring).
// Its windows are shorter than ring's, its periods (the duel's second measure) are not once the debt is
// counted. Model: windows tree 90, ring 100; periods the window + 6, + 20 after a tree call. Sampled first
// in turns of 2, tree's periods follow a ring call (96) and ring's a tree call (126): tree was pinned. In
// the middle of turns of 3 (the engine's setting where the period checks the duel): 116 against 106.
void duelLeftBehind() {
  int pinnedTree[4] = {0, 0, 0, 0};
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const Model own = ringVsTree(100.0, 90.0, 0.0);
    for (int run : {2, 3}) {
      std::mt19937_64 rng(seed * 389);
      Options o;
      o.duelRun = run;
      TaskSearch s(own.space, o);
      bool prevTree = false;
      for (uint64_t k = 0; k < 400; ++k) {
        const Config c = s.configFor(k);
        const bool tree = c.algo == 0;
        if (c.measure) {
          const double window = own.sample(c, rng);
          s.addSample(k, window, window + 6.0 + (prevTree ? 20.0 : 0.0));
        }
        prevTree = tree;
      }
      CHECK(s.converged() && s.stats().convergedAt <= 150);
      pinnedTree[run] += s.configFor(400).algo == 0 ? 1 : 0;
    }
  }
  std::printf("cost left to the next call: tree pinned %d/20 in turns of 2, %d/20 in turns of 3\n", pinnedTree[2],
              pinnedTree[3]);
  CHECK(pinnedTree[3] == 0);
  CHECK(pinnedTree[2] >= 10);  // the scenario does mislead a duel sampled at the first call of a turn
}

// A duel side's few samples when the budget runs out, one of them measuring a pause (a period spanning
// the end of a nccl-tests pass: 1011 us for a 232 us all_gather 128 MiB, the next call's sample still in
// flight, 2 x H200): the mean of two samples is the outlier's, and NCCL's choice, 18 % slower,
// stayed. The duel compares low medians (of two samples the lower), robust to slow outliers on either
// side. Model: tree 20 % faster; every 29th call's sample 4.4x slow, at each phase in turn; samples 16 or
// 24 calls late. Every run must pin tree.
void duelPausedSample() {
  int runs = 0, keptRing = 0;
  for (uint64_t lag : {16, 24})
    for (uint64_t phase = 0; phase < 29; ++phase) {
      const Model m = ringVsTree(290.0, 232.0, 0.0);
      std::mt19937_64 rng(phase * 7 + lag);
      TaskSearch s(m.space, Options());
      std::deque<std::pair<uint64_t, double>> due;
      for (uint64_t k = 0; k < 600; ++k) {
        const Config c = s.configFor(k);
        if (c.measure) due.emplace_back(k, m.sample(c, rng) * (k % 29 == phase ? 4.4 : 1.0));
        for (; !due.empty() && due.front().first + lag <= k; due.pop_front())
          s.addSample(due.front().first, due.front().second);
      }
      ++runs;
      CHECK(s.converged());
      if (s.configFor(600).algo != 0) {
        ++keptRing;
        std::printf("  samples %llu calls late, slow sample at calls %llu mod 29: pinned %s at %llu\n",
                    static_cast<unsigned long long>(lag), static_cast<unsigned long long>(phase),
                    s.configFor(600).str().c_str(), static_cast<unsigned long long>(s.stats().convergedAt));
      }
    }
  std::printf("a slow sample among a duel side's few: NCCL's choice kept %d/%d\n", keptRing, runs);
  CHECK(keptRing == 0);
}

// Samples with a second measure (addSample's altMicros: the kernel window beside the stream period). Tree
// is 10 % faster than NCCL's Ring by the first; by the second it is slower (the period inflated for
// NCCL's choice by the profiler's host cost) or faster too. The duel leaves NCCL's choice only in the
// second case.
void duelSecondOpinion() {
  for (bool agrees : {false, true}) {
    int pinnedTree = 0;
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      const Model m = ringVsTree(100.0, 90.0, 0.0);
      std::mt19937_64 rng(seed * 977);
      std::normal_distribution<double> n(0.0, 0.01);
      TaskSearch s(m.space, Options());
      for (uint64_t k = 0; k < 400; ++k) {
        Config c = s.configFor(k);
        if (!c.measure) continue;
        const double alt = (c.algo == 0 ? (agrees ? 45.0 : 60.0) : 50.0) * (1.0 + n(rng));
        s.addSample(k, m.sample(c, rng), alt);
      }
      CHECK(s.converged());
      pinnedTree += s.configFor(400).algo == 0 ? 1 : 0;
    }
    std::printf("second measure %s: tree pinned %d/10\n", agrees ? "agrees" : "disagrees", pinnedTree);
    if (agrees) CHECK(pinnedTree >= 9);
    else CHECK(pinnedTree == 0);
  }
}

// Host run-ahead in bursts (nccl-tests: 200 warm-up calls launched back to back, the GPU times of all
// of them known only at the synchronisation after the burst; then timed bursts of 84 calls). With
// the engine's clock a lagging sample is waited for, not given up after lostAfter calls, and the
// calls spent waiting do not end the search unmeasured.
void runAhead() {
  int runs = 0, unmeasured = 0, within5 = 0, worse = 0, notConverged = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed * 104729);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    Model m = h200Model(rng, std::exp2(20.0 + 10.0 * u(rng)));
    uint64_t nowMs = 0;
    Options o;
    o.clockMs = [&nowMs] { return nowMs; };
    TaskSearch s(m.space, o);
    uint64_t k = 0;
    const uint64_t bursts[] = {200, 84, 84, 84, 84, 84, 84, 84};
    for (uint64_t b : bursts) {
      std::vector<std::pair<uint64_t, double>> done;
      for (uint64_t i = 0; i < b; ++i, ++k) {
        Config c = s.configFor(k);
        if (c.measure) done.emplace_back(k, m.sample(c, rng));
        nowMs += 1;  // the whole burst is planned well within lostAfterMs
      }
      for (auto& x : done) s.addSample(x.first, x.second);  // delivered in order at the sync
      nowMs += 50;
    }
    runs++;
    Stats st = s.stats();
    if (!s.converged()) {
      notConverged++;
      continue;
    }
    if (st.defaultMedian <= 0) unmeasured++;
    double got = m.trueTime(s.best()), dflt = m.trueTime(Config());
    if (got <= m.bestTime() * 1.05) within5++;
    if (got > dflt * (1.0 + std::max(0.01, 2 * m.noise))) {
      worse++;
      std::fprintf(stderr, "run-ahead seed %llu: final %.2f worse than default %.2f\n",
                   static_cast<unsigned long long>(seed), got, dflt);
    }
  }
  std::printf("bursts of 200 then 84 calls: %d runs, %d converged unmeasured, %d within 5%% of best, %d not converged\n",
              runs, unmeasured, within5, notConverged);
  CHECK(notConverged == 0);
  CHECK(unmeasured == 0);
  CHECK(worse == 0);
  CHECK(within5 >= runs * 85 / 100);

  // Samples that never come while later ones do (a dropped kernel event) are given up as soon as a
  // later call's sample has arrived, even when no time passes: the search still converges in 150 calls.
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed * 7);
    Model m = h200Model(rng, 1 << 24);
    Options o;
    o.clockMs = [] { return uint64_t{0}; };  // the time rule never fires
    TaskSearch s(m.space, o);
    RunResult r = drive(s, m, rng, 400, 2, 0.2);
    CHECK(r.converged);
    CHECK_MSG(r.convergedAt <= 150, "seed %llu converged at %llu", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(r.convergedAt));
    CHECK(s.stats().lostSamples > 0);
  }

  // A sample arriving after its call was given up still counts for its configuration.
  {
    std::mt19937_64 rng(3);
    Model m = h200Model(rng, 1 << 24);
    Options o;  // no clock: lost after lostAfter later calls
    TaskSearch s(m.space, o);
    std::vector<std::pair<uint64_t, double>> held;
    for (uint64_t k = 0; k < 100; ++k) {
      Config c = s.configFor(k);
      if (c.measure) held.emplace_back(k, m.sample(c, rng));
    }
    CHECK(s.stats().lostSamples > 0);
    for (auto& x : held) s.addSample(x.first, x.second);
    CHECK(s.stats().lateSamples > 0);
    CHECK(s.stats().samples >= s.stats().lateSamples);
  }
}

// A saved table whose entry says NCCL's own choice won, written before NCCL's channel count was known
// (pair, channels 0): a rerun keeps NCCL's choice from its first call, with no timed call (there is nothing to
// verify it against; over TCP each plan step can cost a round trip). It must not read the entry as "that pair
// on the widest channel count" and run it against the default (seen in the emulator: allreduce 256 KiB on
// ring/LL at 64 channels in a rerun that should have started tuned).
void tableDefaultEntry() {
  int probed = 0, slow = 0, notDefault = 0, timed = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed * 71);
    Model m = h200Model(rng, 1 << 18);
    m.space.ncclChannels = seed % 2 ? 0 : m.defaultChannels;
    Config entry;
    entry.algo = m.defaultPair / kNumProtos;
    entry.proto = m.defaultPair % kNumProtos;
    std::vector<TableEntry> table{TableEntry{4, 1u << 18, 1, entry, 0}};
    std::vector<Hint> hints = hintsFor(table, 4, 1u << 18, 1);
    REQUIRE(hints.size() == 1 && hints[0].distance == 0);
    TaskSearch s(m.space, Options(), hints);
    RunResult r = drive(s, m, rng, 200, 2, 0);
    for (const Config& c : r.applied) probed += c.isDefault() ? 0 : 1;
    if (!r.converged || r.convergedAt > 0) slow++;
    if (!r.final.isDefault()) notDefault++;
    for (const Segment& g : s.plan()) timed += g.cfg.measure ? 1 : 0;
  }
  std::printf("table entry of NCCL's pair, channels 0: %d calls off NCCL's choice, %d slow, %d not default, "
              "%d timed segments\n", probed, slow, notDefault, timed);
  CHECK(probed == 0);
  CHECK(timed == 0);
  CHECK(slow == 0);
  CHECK(notDefault == 0);
}

// TaskSearch::planAfter(k) (what a lookup past coverage k is answered with) is the plan's segments that end after
// k, at every k of a search driven through tuning, its pin and drift checks.
void planAfterIsThePlansSuffix() {
  std::mt19937_64 rng(11);
  Model m = h200Model(rng, 1 << 22);
  Options o;
  o.recheckFirst = 64;
  TaskSearch s(m.space, o);
  drive(s, m, rng, 3000, 2, 0);
  const std::vector<Segment> all = s.plan();
  CHECK(all.size() > 10);
  for (uint64_t k : {uint64_t{0}, uint64_t{1}, all[3].begin, all[3].end - 1, all[3].end, all.back().begin,
                     all.back().end - 1, s.plannedUpTo(), s.plannedUpTo() + 100}) {
    std::vector<Segment> want;
    for (const Segment& g : all)
      if (g.end > k) want.push_back(g);
    const std::vector<Segment> got = s.planAfter(k);
    CHECK(got.size() == want.size());
    for (size_t i = 0; i < got.size() && i < want.size(); ++i)
      CHECK(got[i].begin == want[i].begin && got[i].end == want[i].end && got[i].cfg == want[i].cfg);
  }
}

// Table mode under the step guard (Options::pinExactHint): the exact hint runs from the first call, untimed, and
// stays through a slower machine (no check, no re-tune: the guard judges it on the step); a count above the
// pair's range runs at the range's top; a pair NCCL does not support, or no exact hint, is NCCL's choice; a
// neighbour's hint (not exact) is no answer. Never a timed call. Without the option the same entry is verified.
void pinExactHintTrusted() {
  std::mt19937_64 rng(7);
  Model m = h200Model(rng, 1 << 22);
  Model slower = m;
  slower.t = [t = m.t](int pair, int ch, int halvings) { return 3.0 * t(pair, ch, halvings); };
  const int other = m.defaultPair == 1 * kNumProtos + 1 ? 1 * kNumProtos + 2 : 1 * kNumProtos + 1;  // a ring pair
  const auto entry = [&](int pair, int channels) {
    Config c;
    c.algo = pair / kNumProtos;
    c.proto = pair % kNumProtos;
    c.channels = channels;
    return c;
  };
  Options o;
  o.pinExactHint = true;
  const auto run = [&](std::vector<Hint> hints, Options opt, Config* applied, int* timed) {
    TaskSearch s(m.space, opt, std::move(hints));
    RunResult r = drive(s, m, rng, 3000, 2, 0, 0, &slower, 500);
    *timed = 0;
    for (const Segment& g : s.plan()) *timed += g.cfg.measure ? 1 : 0;
    bool same = true;
    for (const Config& c : r.applied) same = same && c.sameSetting(r.applied.front());
    *applied = r.applied.front();
    CHECK(r.converged && r.convergedAt == 0);
    CHECK(s.stats().retunes == 0);
    return same;
  };
  Config got;
  int timed = 0;
  CHECK(run({Hint{entry(other, 8), 0, 0}}, o, &got, &timed));
  CHECK(got.sameSetting(entry(other, 8)) && timed == 0);
  CHECK(run({Hint{entry(other, 200), 0, 0}}, o, &got, &timed));
  CHECK(got.sameSetting(entry(other, m.space.maxChannels)) && timed == 0);
  const float saved = m.space.cost[0][0];
  m.space.cost[0][0] = -1.0f;  // tree/LL unsupported
  CHECK(run({Hint{entry(0, 4), 0, 0}}, o, &got, &timed));
  CHECK(got.isDefault() && timed == 0);
  m.space.cost[0][0] = saved;
  CHECK(run({}, o, &got, &timed));
  CHECK(got.isDefault() && timed == 0);
  CHECK(run({Hint{entry(other, 8), 0, 1.0}}, o, &got, &timed));
  CHECK(got.isDefault() && timed == 0);
  // the control: the same exact entry, not trusted, is verified against NCCL's choice (timed calls)
  TaskSearch verified(m.space, Options(), {Hint{entry(other, 8), 0, 0}});
  drive(verified, m, rng, 200, 2, 0);
  int verifiedTimed = 0;
  for (const Segment& g : verified.plan()) verifiedTimed += g.cfg.measure ? 1 : 0;
  CHECK(verifiedTimed > 0);
}

// NCCL's own configuration in its explicit form (its pair at the channel count it runs, NCCL's chunk) is NCCL's
// choice: measured apart from it, it can come out ahead by noise alone (FSDP2 over sockets on one H200:
// ring/simple/2, NCCL's choice, pinned for all_gather 150 MiB on a 15.8 % "gain", and the step guard then
// compared two identical plans). Model: the default measures 100 us and its explicit form ring/simple/24 85 us
// (two measurements of one configuration that disagree); other channel counts and tree are slower. Without
// TaskSearch::ncclChoice the search pins the explicit form; with it, known from the start, from call 30 or only once
// the duel has begun (samples back at once, the duel's own check), NCCL's choice; also where NCCL runs 23 channels
// and the explicit request of 24 runs on 23 too (the channels it ran on are compared, TaskSearch::channelsRan). A
// real gain of the same pair at other channels (12 channels 20 % faster) is still pinned.
void ncclOwnIncumbent() {
  const int ringSimple = 1 * kNumProtos + 2;
  auto model = [&](bool realGain) {
    Model m = ringVsTree(100.0, 130.0, 0.0);
    // As the engine registers a task: NCCL's count not known yet, the probes starting at the communicator's
    // widest grant so far (Space::startChannels), here NCCL's own 24
    m.space.ncclChannels = 0;
    m.space.startChannels = 24;
    m.defaultChannels = 25;  // the default's own measurements (a phantom count the search never asks for)
    m.t = [=](int pair, int ch, int) {
      if (pair != ringSimple) return 130.0;
      if (realGain) return 80.0 + 20.0 * std::pow(std::log2(ch / 12.0), 2.0);
      if (ch == 25) return 100.0;
      return ch == 24 ? 85.0 : 100.0 + 0.5 * std::abs(ch - 24);
    };
    return m;
  };
  int explicitWithout = 0, defaultFromStart = 0, defaultLate = 0, defaultInDuel = 0, flagged = 0, gainKept = 0;
  int defaultRanFewer = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    for (int arm = 0; arm < 6; ++arm) {
      Model m = model(arm == 3);
      if (arm == 5) m.space.maxChannels = 24;  // no probe above the request NCCL runs on 23
      std::mt19937_64 rng(seed * 97);
      bool tuningEnded = false;  // arm 4: the search's diagnostics say when the duel begins
      Options o;
      if (arm == 4)
        o.debug = [&tuningEnded](const std::string& line) {
          if (line.find("tuning ends") != std::string::npos) tuningEnded = true;
        };
      TaskSearch s(m.space, o);
      if (arm == 1 || arm == 3) s.ncclChoice(1, 2, 24);
      RunResult r;
      if (arm == 4) {
        bool told = false;
        for (uint64_t k = 0; k < 400; ++k) {
          r = drive(s, m, rng, 1, 0, 0.0, k);
          if (tuningEnded && !told) {
            CHECK(!s.converged());  // the duel is under way
            s.ncclChoice(1, 2, 24);
            told = true;
          }
        }
        CHECK(told);
      } else if (arm == 5) {  // NCCL runs 23 channels, and so does the request of 24 (TaskSearch::channelsRan)
        s.ncclChoice(1, 2, 23);
        r = drive(s, m, rng, 400, 2, 0.0, 0, nullptr, kForever, 23);
      } else if (arm == 2) {
        drive(s, m, rng, 30, 2, 0.0);
        s.ncclChoice(1, 2, 24);
        r = drive(s, m, rng, 370, 2, 0.0, 30);
      } else {
        r = drive(s, m, rng, 400, 2, 0.0);
      }
      CHECK(r.converged);
      // The rule as the table writer asks it (TaskSearch::isNcclOwn): the request of 24 is NCCL's own where NCCL's
      // count is 24, or 23 and the request ran on 23; never while NCCL's configuration is unknown.
      Config own24;
      own24.algo = 1;
      own24.proto = 2;
      own24.channels = 24;
      Config own22 = own24;
      own22.channels = 22;
      CHECK_EQ(s.isNcclOwn(own24), arm != 0);
      CHECK(!s.isNcclOwn(own22));
      if (arm == 1) {  // NCCL runs 23 and no request of 24 was reported running on 23: not NCCL's own
        TaskSearch fresh(m.space, o);
        fresh.ncclChoice(1, 2, 23);
        CHECK(!fresh.isNcclOwn(own24));
        fresh.channelsRan(1, 2, 24, 23);
        CHECK(fresh.isNcclOwn(own24));
      }
      const bool ownExplicit = r.final.forcesPair() && r.final.algo == 1 && r.final.proto == 2 && r.final.channels == 24;
      if (arm == 0) explicitWithout += ownExplicit ? 1 : 0;
      if (arm == 1) defaultFromStart += r.final.isDefault() ? 1 : 0;
      if (arm == 2) defaultLate += r.final.isDefault() ? 1 : 0;
      if (arm == 4) defaultInDuel += r.final.isDefault() ? 1 : 0;
      if (arm == 5) defaultRanFewer += r.final.isDefault() ? 1 : 0;
      if (arm == 1 || arm == 2 || arm == 4) flagged += s.stats().ncclOwnIncumbent ? 1 : 0;
      if (arm == 3) gainKept += !r.final.isDefault() && m.trueTime(r.final) <= 85.0 ? 1 : 0;
    }
  }
  std::printf("NCCL's own configuration ahead by measurement: pinned in its explicit form %d/30 without ncclChoice; "
              "NCCL's choice pinned %d/30 (known from the start), %d/30 (from call 30), %d/30 (from the duel), flagged "
              "%d/90; a real gain at 12 channels kept %d/30\n",
              explicitWithout, defaultFromStart, defaultLate, defaultInDuel, flagged, gainKept);
  std::printf("... NCCL on 23 channels, the explicit request of 24 running on 23: NCCL's choice pinned %d/30\n",
              defaultRanFewer);
  CHECK(explicitWithout >= 25);  // the scenario does pin the explicit form without it
  CHECK(defaultFromStart == 30);
  CHECK(defaultLate == 30);
  CHECK(defaultInDuel == 30);
  CHECK(defaultRanFewer == 30);  // 0/30 comparing the channels asked (the explicit form pinned)
  CHECK(flagged == 90);
  CHECK(gainKept >= 27);
}

// A task NCCL's model puts far below the minimum task keeps NCCL's choice from its first call: no timed
// segment and no further plan step (each would be a lookup, over TCP a round trip to the authority). One
// the model puts above the share is still judged by its samples: small (the model was optimistic), or
// searched (it was worth it). A table's exact entry is verified as before.
void smallByModel() {
  int modelSmall = 0, sampled = 0, searched = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed * 131);
    Model m = h200Model(rng, seed % 2 ? 1 << 20 : 1 << 26);  // 1 MiB: ~10 us; 64 MiB: ~300 us
    Options o;
    o.minTaskMicros = 200;
    o.modelSmallShare = 0.25;
    TaskSearch s(m.space, o);
    RunResult r = drive(s, m, rng, 300, 2, 0);
    REQUIRE(r.converged);
    const Stats st = s.stats();
    const bool belowShare = st.modelDefault >= 0 && st.modelDefault < 50;
    int timed = 0;
    for (const Segment& g : s.plan()) timed += g.cfg.measure ? 1 : 0;
    if (belowShare) {
      modelSmall++;
      CHECK(st.smallTask && st.smallByModel);
      CHECK(r.convergedAt == 0);
      CHECK(timed == 0);
      CHECK(s.plan().size() == 1);  // one segment, final: one lookup per rank
      CHECK(r.final.isDefault());
    } else {
      CHECK(!st.smallByModel);
      CHECK(timed > 0);
      (st.smallTask ? sampled : searched)++;
    }
  }
  std::printf("small by NCCL's model: %d of 20 tasks; above the share: %d small by samples, %d searched\n",
              modelSmall, sampled, searched);
  CHECK(modelSmall >= 8);
  CHECK(searched >= 8);

  // The option off (0) or a task above it: the samples decide, as before.
  std::mt19937_64 rng(7);
  Model m = h200Model(rng, 1 << 20);
  Options o;
  o.minTaskMicros = 200;
  TaskSearch s(m.space, o);
  RunResult r = drive(s, m, rng, 300, 2, 0);
  CHECK(s.stats().smallTask && !s.stats().smallByModel);
  CHECK(r.convergedAt >= 3);

  // A table's exact entry for a model-small task is verified against NCCL's choice, not skipped.
  Config entry;
  entry.algo = m.defaultPair / kNumProtos == 0 ? 1 : 0;
  entry.proto = m.defaultPair % kNumProtos;
  entry.channels = 8;
  std::vector<TableEntry> table{TableEntry{4, 1u << 20, 1, entry, 0}};
  o.modelSmallShare = 0.25;
  TaskSearch v(m.space, o, hintsFor(table, 4, 1u << 20, 1));
  int timed = 0;
  for (uint64_t k = 0; k < 4; ++k) timed += v.segmentFor(k).cfg.measure ? 1 : 0;
  CHECK(timed > 0);
  CHECK(!v.stats().smallByModel);
}

// Calls the caller knows ran untimed (TaskSearch::unmeasured: the profiler skipped them) are measured again
// at once. A rerun from a saved table (exact entry) whose first call ran untimed (the task's first call came
// after every other task had let timing go; the emulator's warm start): samples arrive with no lag and no
// clock, so without the report the lost sample holds the verification until reorderSlack later samples
// overtake it, and the rerun takes 36+ calls instead of about 24.
void unmeasuredCalls() {
  int slow[2] = {0, 0};
  double calls[2] = {0, 0};
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed * 911);
    Model m = h200Model(rng, 1 << 22);
    TaskSearch cold(m.space, Options());
    RunResult r = drive(cold, m, rng, 300, 0, 0);
    REQUIRE(r.converged);
    std::vector<TableEntry> table{TableEntry{4, 1u << 22, 1, r.final, 0}};
    for (int report = 0; report < 2; ++report) {
      TaskSearch s(m.space, Options(), hintsFor(table, 4, 1u << 22, 1));
      for (uint64_t k = 0; k < 300; ++k) {
        Config c = s.configFor(k);
        if (!c.measure) continue;
        if (k == 0) {
          if (report) s.unmeasured(k);
          continue;
        }
        s.addSample(k, m.sample(c, rng));
      }
      REQUIRE(s.converged());
      calls[report] += static_cast<double>(s.stats().convergedAt);
      slow[report] += s.stats().convergedAt > 30 ? 1 : 0;
    }
  }
  std::printf("rerun from a table, first call untimed: mean calls to converge %.1f reported, %.1f not; "
              "over 30 calls %d/20 reported, %d/20 not\n", calls[1] / 20, calls[0] / 20, slow[1], slow[0]);
  CHECK(slow[1] == 0);
  CHECK(slow[0] >= 10);  // the case does cost the unreported search
  // Reporting a call that was not planned with measure, or not planned yet, changes nothing.
  std::mt19937_64 rng(5);
  Model m = h200Model(rng, 1 << 22);
  TaskSearch a(m.space, Options()), b(m.space, Options());
  std::mt19937_64 ra(7), rb(7);
  for (uint64_t k = 0; k < 400; ++k) {
    Config ca = a.configFor(k), cb = b.configFor(k);
    CHECK(ca == cb);
    if (!ca.measure) {
      b.unmeasured(k);
      b.unmeasured(k + 100000);
    } else {
      a.addSample(k, m.sample(ca, ra));
      b.addSample(k, m.sample(cb, rb));
    }
  }
}

// NCCL profiles no call of the task's collective (NCCL 2.30's converted broadcast): no sample ever comes.
// Told so, the search ends in NCCL's choice from the next planned call, for good, and leaves the segments
// it handed out alone; not told, it is still tuning 300 calls later (the lost-sample rules wait for time).
void unprofiledTask() {
  std::mt19937_64 rng(3);
  for (int told = 0; told < 2; ++told) {
    Model m = h200Model(rng, 4 << 20);
    Options o;
    o.clockMs = [] { return uint64_t(1000); };  // a fast job: the lost-sample rules' 3 s never pass
    TaskSearch s(m.space, o);
    std::vector<Segment> before;
    for (uint64_t k = 0; k < 40; ++k) s.configFor(k);
    before = s.plan();
    if (told) s.unprofiled();
    for (uint64_t k = 40; k < 340; ++k) s.configFor(k);
    const std::vector<Segment> after = s.plan();
    REQUIRE(after.size() >= before.size());
    for (size_t i = 0; i < before.size(); ++i) CHECK(after[i] == before[i]);
    if (told) {
      CHECK(s.converged());
      CHECK(after.back().phase == Phase::kFinal && after.back().end == kForever);
      CHECK(after.back().cfg.isDefault() && !after.back().cfg.measure);
      CHECK(after.back().begin <= before.back().end);
      CHECK(s.best().isDefault());
    } else {
      CHECK(!s.converged());
    }
  }
}

// Ring/LL128 is NCCL's choice and flat; ring/simple is 4 % slower at NCCL's chunk and 6 % faster at a quarter
// of it (the demo's 256 MiB tasks in the emulator). The halving drops ring/simple after its channel step (the
// chunk is the second dimension), LL128's descent finds nothing, and tuning would end with budget left. Told to
// descend the best dropped subspace with that budget (Options::reviveWithin), the search finds the quarter chunk.
void reviveDropped() {
  int found[2] = {0, 0};
  double calls[2] = {0, 0};
  for (int revive = 0; revive < 2; ++revive)
    for (uint64_t seed = 1; seed <= 30; ++seed) {
      Model m;
      m.space.maxChannels = 32;
      m.space.ncclChannels = 24;
      m.defaultChannels = 24;
      m.space.cost[1][1] = 1.0f;   // ring/LL128: NCCL's choice
      m.space.cost[1][2] = 1.05f;  // ring/simple
      m.space.maxChunkHalvings[1] = 3;
      m.space.maxChunkHalvings[2] = 4;
      m.noise = 0.01;
      m.outlierProb = 0;
      m.t = [](int pair, int, int h) {
        static const double simple[5] = {104, 99, 94, 97, 100};
        return pair == 1 * kNumProtos + 2 ? simple[std::clamp(h, 0, 4)] : 100.0;
      };
      setDefaultFromCost(m);
      std::mt19937_64 rng(seed * 613);
      Options o;
      if (!revive) o.reviveWithin = -1;  // never
      TaskSearch s(m.space, o);
      RunResult r = drive(s, m, rng, 300, 2, 0.0);
      REQUIRE(r.converged);
      CHECK(r.convergedAt <= 150);
      found[revive] += m.trueTime(r.final) <= 94 * 1.03 ? 1 : 0;
      calls[revive] += static_cast<double>(r.convergedAt);
    }
  std::printf("best subspace dropped by the halving: found %d/30 descending it with the budget left (%d/30 "
              "without), stable at call %.1f (%.1f)\n", found[1], found[0], calls[1] / 30, calls[0] / 30);
  CHECK(found[1] >= 27);
  CHECK(found[0] <= 10);  // the scenario does defeat a search that stops at the halving
}

// The coordinator hands a task NCCL's default, timed, until the authority registers it (the demo: 17 calls with
// a fixed window); the search then starts at firstCall. Counting those calls' samples as NCCL's baseline and the
// calls against its budget, the search does not measure the baseline again and is pinned within the budget
// counted from call 0, as close to the best as one that did not count them. Samples of those calls that never
// come are given up and the baseline is measured as usual.
void lateStart() {
  constexpr uint64_t kFirst = 17;
  double calls[2] = {0, 0};
  int within3[2] = {0, 0}, over150[2] = {0, 0}, worse[2] = {0, 0};
  const int runs = 200;
  for (int prior = 0; prior < 2; ++prior)
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(runs); ++seed) {
      std::mt19937_64 rng(seed * 104729);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      Model m = seed % 2 ? randomModel(rng) : h200Model(rng, std::exp2(16.0 + 14.0 * u(rng)));
      Options o = testOptions(rng);
      o.firstCall = kFirst;
      o.defaultTimedBefore = prior == 1;
      const int lag = static_cast<int>(rng() % 5);
      TaskSearch s(m.space, o);
      RunResult r = drive(s, m, rng, 200, lag, 0.0, 0, nullptr, kForever, 0, kFirst);
      REQUIRE(r.converged);
      const Stats st = s.stats();
      CHECK(st.priorSamples == (prior ? 2u * static_cast<uint64_t>(o.baselineSamples) : 0u));
      CHECK(s.plan().front().begin == kFirst);
      calls[prior] += static_cast<double>(r.convergedAt);
      over150[prior] += r.convergedAt > 150 ? 1 : 0;
      const double got = m.trueTime(r.final), dflt = m.trueTime(Config());
      within3[prior] += got <= 1.03 * m.bestTime() ? 1 : 0;
      worse[prior] += got > dflt * (1.0 + std::max(0.01, 2 * m.noise)) ? 1 : 0;
      if (prior) {  // NCCL's default is not planned for measuring before a candidate has been
        const std::vector<Segment> plan = s.plan();
        CHECK(!plan.front().cfg.isDefault() || !plan.front().cfg.measure);
      }
    }
  std::printf("search from call %llu, calls before it counted as NCCL's baseline: mean stable at call %.1f "
              "(not counted: %.1f), after call 150 %d/%d (%d/%d), within 3%% %d/%d (%d/%d), worse than NCCL's "
              "choice %d (%d)\n",
              static_cast<unsigned long long>(kFirst), calls[1] / runs, calls[0] / runs, over150[1], runs, over150[0],
              runs, within3[1], runs, within3[0], runs, worse[1], worse[0]);
  // Measured: stable at call 118.7 against 127.5 on average, after call 150 0 against 45 of 200 (the calls
  // before count against the budget), within 3 % 194 against 192.
  CHECK(calls[1] + 2.0 * runs <= calls[0]);
  CHECK(over150[1] == 0);
  CHECK(within3[1] + runs / 50 >= within3[0]);
  CHECK(worse[1] == 0);
  // The calls before were never timed after all: the baseline is measured by the search itself.
  std::mt19937_64 rng(11);
  Model m = h200Model(rng, 1 << 26);
  Options o;
  o.firstCall = kFirst;
  o.defaultTimedBefore = true;
  TaskSearch s(m.space, o);
  for (uint64_t k = 0; k < kFirst; ++k) s.unmeasured(k);
  RunResult r = drive(s, m, rng, 300, 0, 0.0, kFirst);
  REQUIRE(r.converged);
  CHECK(s.stats().priorSamples == 0);
  CHECK(s.stats().lostSamples >= 2u * static_cast<uint64_t>(o.baselineSamples));
  int defaultMeasured = 0;
  for (const Segment& g : s.plan())
    if (g.cfg.isDefault() && g.cfg.measure && g.phase == Phase::kTuning) defaultMeasured += static_cast<int>(g.end - g.begin);
  CHECK(defaultMeasured >= o.baselineSamples);
}


// Options::verifyWait: at a start from an exact table entry, once the verification's turns are planned and their
// samples lag, the table's config waits in one segment of verifyWait calls instead of one segment per call (each
// segment end is a plan lookup on every rank), and the verdict is the same.
void verifyWait() {
  std::mt19937_64 rng(7);
  Model m = h200Model(rng, 1 << 26);
  m.space.ncclChannels = 24;
  Config tuned;
  tuned.algo = 0;
  tuned.proto = 2;
  tuned.channels = 64;
  std::vector<TableEntry> table{TableEntry{4, 1u << 26, 1, tuned, 0}};
  Config finals[2];
  for (int i = 0; i < 2; ++i) {
    Options o;
    o.verifySamples = 3;
    o.duelRun = 3;
    o.verifyWait = i == 0 ? 1 : 16;
    TaskSearch s(m.space, o, hintsFor(table, 4, 1 << 26, 1));
    std::mt19937_64 r(11);
    RunResult rr = drive(s, m, r, 120, 8, 0.0);  // samples up to 8 calls late: the turns end before they arrive
    CHECK(rr.converged);
    finals[i] = rr.final;
    // the segments after the verification's last turn and before the verdict: 1 call each, or one of 16
    const std::vector<Segment> plan = s.plan();
    size_t waits = 0, longest = 0;
    for (const Segment& g : plan)
      if (g.phase == Phase::kTuning && !g.cfg.measure && g.cfg.sameSetting(tuned) && g.begin >= 18) {
        ++waits;
        longest = std::max<size_t>(longest, static_cast<size_t>(g.end - g.begin));
      }
    std::printf("verifyWait %d: %zu waiting segments after the turns, the longest %zu calls, pinned at call %llu\n",
                i == 0 ? 1 : 16, waits, longest, static_cast<unsigned long long>(s.stats().convergedAt));
    if (i == 0) CHECK(waits >= 2 && longest == 1);
    else CHECK(waits == 1 && longest == 16);
  }
  CHECK(finals[0].sameSetting(finals[1]));
}

// Options::probeKeep with the engine's online bounds (onlineSearchOptions: pairs beyond 2x NCCL's cost model not
// probed, a first sample 30 % behind abandoned, a regret budget of 10 % plus 16 calls, 3 verification samples):
// what the first 104 calls of a task (one nccl-tests size: -w 20, -n 40 out of place and in place) cost against
// NCCL's choice, and how good the final choice is, over the convergence case's 600 models.
struct KeepResult {
  int runs = 0, within3 = 0, worse = 0, notConverged = 0;
  double coldCost = 0;  // mean over models of (mean true time of calls 0-103) / NCCL's time
  double meanCalls = 0;
  double worst = 0;     // the worst final choice's time over the best's
};

KeepResult probeKeepRuns(double keep, int kind, int maxLag) {
  KeepResult k;
  double calls = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng;
    Model m = convergenceModel(kind, seed, rng);
    Options o = withOnlineBounds(testOptions(rng));
    o.verifySamples = 3;
    o.probeKeep = keep;
    const int lag = static_cast<int>(rng() % static_cast<uint64_t>(maxLag + 1));
    TaskSearch s(m.space, o);
    RunResult r = drive(s, m, rng, 150, lag, 0.0);
    k.runs++;
    const double dflt = m.trueTime(Config());
    double first = 0;
    for (size_t c = 0; c < 104; ++c) first += m.trueTime(r.applied[c]);
    k.coldCost += first / (104 * dflt);
    if (!r.converged || r.convergedAt > 150) {
      k.notConverged++;
      continue;
    }
    calls += static_cast<double>(r.convergedAt);
    const double got = m.trueTime(r.final);
    k.worst = std::max(k.worst, got / m.bestTime());
    if (got <= m.bestTime() * 1.03) k.within3++;
    if (got > dflt * (1.0 + std::max(0.01, 2 * m.noise))) k.worse++;
  }
  k.coldCost /= k.runs;
  k.meanCalls = calls / std::max(1, k.runs - k.notConverged);
  return k;
}

void probeKeepColdCost() {
  // (model kind, largest sample lag): H200-like and random models with the convergence case's lag, and
  // H200-like with a host running up to 20 calls ahead of its samples (nccl-tests' loops)
  const int cases[3][2] = {{1, 4}, {0, 4}, {1, 20}};
  for (const auto& c : cases) {
    const KeepResult wide = probeKeepRuns(1.0, c[0], c[1]), narrow = probeKeepRuns(0.3, c[0], c[1]);
    // 3 %: on 2 x H200 the fewer-channel points of pairs more than 3 % behind at their widest probe never won
    // (benchmarks/results/h200x2/probe-keep, cold-pass-cost.md); how it ranks on these models
    const KeepResult tight = probeKeepRuns(0.03, c[0], c[1]);
    for (const auto& [keep, k] : {std::make_pair(1.0, wide), std::make_pair(0.3, narrow), std::make_pair(0.03, tight)})
      std::printf("%s models, lag <= %d, probeKeep %.2f: first 104 calls %.4fx NCCL's time; within 3 %% of the "
                  "best %d/%d (worst x%.3f); not converged by call 150 %d; worse than NCCL's %d; mean calls to "
                  "converge %.1f\n",
                  c[0] ? "H200-like" : "random", c[1], keep, k.coldCost, k.within3, k.runs, k.worst, k.notConverged,
                  k.worse, k.meanCalls);
    CHECK(wide.worse == 0);
    CHECK(narrow.worse == 0);
    CHECK(tight.worse == 0);
    // Where time falls as channels rise (the H200-like models, as on the GPU), 3 % is cheaper again and as good;
    // on the random models (optima at any channel count) it ends further from the best: not a default for all.
    if (c[0] == 1) {
      CHECK(tight.coldCost < narrow.coldCost - 0.03);
      CHECK(tight.within3 >= wide.within3 - 3);
    }
    // pruning pairs far behind after their first probe spends fewer calls on them ...
    CHECK(narrow.coldCost < wide.coldCost - 0.02);
    // ... without ending further from the best
    CHECK(narrow.within3 >= wide.within3 - 3);
  }
}

// A task where NCCL's choice is the best there is and every other pair is 1.2-4.5x slower at its best channel count,
// while NCCL's cost model puts them all within 2x (so maxCostRatio screens none out): what one host per rank over
// sockets showed on one H200 (all_gather 16 MiB: ring/LL 3.4-4.8x the median of NCCL's ring/Simple, PAT 1.1-1.6x).
Model hostileModel(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Model m;
  m.space.maxChannels = 64;
  m.defaultChannels = 2 + static_cast<int>(u(rng) * 3);
  m.space.ncclChannels = u(rng) < 0.5 ? m.defaultChannels : 0;
  std::vector<double> base(kNumAlgos * kNumProtos, 0.0);
  for (int a = 0; a < 2; ++a)
    for (int p = 0; p < kNumProtos; ++p) {
      const int id = a * kNumProtos + p;
      base[static_cast<size_t>(id)] = id == 2 ? 1000.0 : 1000.0 * (1.2 + 3.3 * u(rng));
      m.space.cost[a][p] = static_cast<float>(id == 2 ? 1000.0 : 1000.0 * (1.05 + 0.9 * u(rng)));
    }
  setDefaultFromCost(m);
  m.noise = 0.01 + 0.04 * u(rng);
  const double dc0 = std::log2(static_cast<double>(m.defaultChannels));
  m.t = [base, dc0](int pair, int ch, int) {
    const double dc = std::log2(static_cast<double>(ch)) - dc0;
    return base[static_cast<size_t>(pair)] * (1.0 + 0.02 * dc * dc);
  };
  return m;
}

// The search tests' three kinds of model: 0 random, 1 H200-like (a size from 1 MiB to 1 GiB), 2 hostile.
Model modelOfKind(int kind, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  return kind == 0 ? randomModel(rng) : kind == 1 ? h200Model(rng, std::exp2(20.0 + 10.0 * u(rng))) : hostileModel(rng);
}

struct BurstResult {
  double firstTimed = 0;  // mean true time of the first size's timed calls (20-99) over NCCL's time
  double worstLoop = 0;   // the costliest timed loop of all rounds, mean true time over NCCL's
  uint64_t unprovenWaits = 0;
  int mostUnproven = 0;  // the most calls one timed loop ran of configurations with no sample delivered before it
  bool converged = false;
  bool provisional = false;  // not converged, but a lead the job leaves in the table (TaskSearch::provisional)
  uint64_t convergedAt = kForever;
  Config final;
};

// nccl-tests' loops: per round 20 warm-up calls, then 40 and 40 timed, each launched before any of its samples
// returns (they arrive, in order, at the loop's end: the synchronisation), `rounds` times on one task.
// askAhead: before each call, the plan is asked for the call that many ahead (a rank of another process asking its
// authority ahead, AUTOCCL_ASK_AHEAD), as the engine's decider extends it for such a question.
BurstResult burstRun(const Model& m, Options o, uint64_t seed, int rounds,
                     std::vector<TaskSearch::PairMeasure>* pairs = nullptr, uint64_t askAhead = 0) {
  std::mt19937_64 rng(seed);
  uint64_t nowMs = 0;
  o.clockMs = [&nowMs] { return nowMs; };
  TaskSearch s(m.space, o);
  BurstResult r;
  const double dflt = m.trueTime(Config());
  std::vector<Config> measured;  // configurations with a sample delivered
  auto wasMeasured = [&](const Config& c) {
    return c.isDefault() ||
           std::any_of(measured.begin(), measured.end(), [&](const Config& x) { return x.sameSetting(c); });
  };
  uint64_t k = 0;
  for (int round = 0; round < rounds; ++round)
    for (int loop = 0; loop < 3; ++loop) {
      const uint64_t len = loop == 0 ? 20 : 40;
      std::vector<std::pair<uint64_t, double>> done;
      std::vector<Config> ran;
      double sum = 0;
      int unproven = 0;
      for (uint64_t i = 0; i < len; ++i, ++k) {
        if (askAhead > 0) s.segmentFor(k + askAhead, askAhead);
        const Config c = s.configFor(k);
        sum += m.trueTime(c);
        if (c.measure) {
          done.emplace_back(k, m.sample(c, rng));
          ran.push_back(c);
        }
        if (!wasMeasured(c)) unproven++;
        nowMs += 1;
      }
      if (loop > 0) r.mostUnproven = std::max(r.mostUnproven, unproven);
      for (auto& x : done) s.addSample(x.first, x.second);
      for (const Config& c : ran)
        if (!wasMeasured(c)) measured.push_back(c);
      nowMs += 20;
      if (loop == 0) continue;
      const double cost = sum / (static_cast<double>(len) * dflt);
      r.worstLoop = std::max(r.worstLoop, cost);
      if (round == 0) r.firstTimed += cost / 2;
    }
  r.unprovenWaits = s.stats().unprovenWaits;
  if (pairs) *pairs = s.measuredPairs();
  r.converged = s.converged();
  Config lead;
  double leadUs = 0, ncclUs = 0;
  r.provisional = !r.converged && s.provisional(&lead, &leadUs, &ncclUs);
  r.convergedAt = s.stats().convergedAt;
  r.final = s.best();
  return r;
}

// AUTOCCL_ASK_AHEAD: a rank of another process that asks its authority for the call N ahead makes the search plan
// that far ahead of its samples. In nccl-tests' loops (samples back at each loop's end) the next loop's first N calls
// are then planned before the last loop's samples, every loop: over 150 models of each kind, with the engine's
// online bounds, the searches end as near the best but N calls later per round (random models: 148 calls to
// converge, 170 asking 8 ahead, 205 asking 16 ahead; H200-like 140, 176, 213). That is why the engine asks only
// when a rank starts the last segment it holds (AUTOCCL_ASK_AHEAD=0), whatever it saves in waits for plans
// (over sockets on one H200 the cold pass's lookups 62.8 ms against 167.6 ms with 16, and 12 of 21 cold searches
// ending in their launch against 17: benchmarks/results/h200x1/ask-ahead-hosts). With the lead's share of each run
// of waits free (Options::lookAheadWaitsFree, as the engine runs asking ahead), asking 16 ahead ends within 3 % of
// the best more often on random models (110 against 97 of 150) and later (274 calls against 205; H200-like 142 and
// 142 of 150, 250 against 213 calls).
void askAheadBursts() {
  for (int kind = 0; kind < 3; ++kind) {
    // [3]: 16 ahead, its waits beyond the present call free (Options::lookAheadWaitsFree, the engine's setting
    // wherever it asks ahead)
    const uint64_t aheads[4] = {0, 8, 16, 16};
    int within3[4] = {0, 0, 0, 0}, notConverged[4] = {0, 0, 0, 0};
    double first[4] = {0, 0, 0, 0}, calls[4] = {0, 0, 0, 0};
    const int runs = 150;
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(runs); ++seed) {
      std::mt19937_64 rng(seed * 31 + static_cast<uint64_t>(kind));
      const Model m = modelOfKind(kind, rng);
      for (int a = 0; a < 4; ++a) {
        Options o = withOnlineBounds(Options());
        o.verifySamples = 3;
        o.lookAheadWaitsFree = a == 3;
        const BurstResult b = burstRun(m, o, seed, 6, nullptr, aheads[a]);
        first[a] += b.firstTimed / runs;
        if (!b.converged) {
          notConverged[a]++;
          continue;
        }
        calls[a] += static_cast<double>(b.convergedAt);
        if (m.trueTime(b.final) <= m.bestTime() * 1.03) within3[a]++;
      }
    }
    const char* name = kind == 0 ? "random" : kind == 1 ? "H200-like" : "hostile";
    double mean[4];
    for (int a = 0; a < 4; ++a) {
      mean[a] = calls[a] / std::max(1, runs - notConverged[a]);
      std::printf("%s models in nccl-tests' loops, asking %llu calls ahead%s: mean calls to converge %.1f; within 3 "
                  "%% of the best %d/%d; not converged in 6 rounds %d; first size's timed calls %.4fx NCCL's time\n",
                  name, static_cast<unsigned long long>(aheads[a]), a == 3 ? ", waits ahead free" : "", mean[a],
                  within3[a], runs, notConverged[a], first[a]);
    }
    // as near the best (the samples are the same, only later) ...
    CHECK(within3[2] >= within3[0] - 10);
    CHECK(notConverged[0] == 0 && notConverged[2] == 0);
    // ... but later: each round's first calls are planned before its samples
    CHECK(mean[1] > mean[0] + 4 && mean[2] > mean[1] + 4);
    // the waits ahead free: no further from the best, and later still on random and H200-like models
    CHECK(within3[3] >= within3[2] && notConverged[3] == 0);
  }
}

// Options::lookAheadWaitsFree: a rank that asks for call k + 16 while the job is at call k (AUTOCCL_ASK_AHEAD) makes
// the search plan 16 calls before the samples of the calls in between can be back. Of each run of waits it plans
// there, the question's lead is free against maxTuningCalls, counted apart (Stats::aheadWaitCalls); the rest the
// search has without looking ahead. Samples come back 6 calls late (close behind: no wait is free by freeWaitLag).
// A question that does not say it leads (its `ahead` 0: the engine's plain prefetch of the next segment, a rank that
// is simply further on), or none ahead, changes nothing. Over 100 random models, the searches end within 3 % of the
// best more often with the lead's waits free, and later.
struct AheadRun {
  Stats st;
  bool converged = false;
  double ratio = 0;  // the pinned configuration's true time over the model's best
};
AheadRun lookAheadRun(uint64_t seed, uint64_t ahead, bool waitsFree, bool tellLead) {
  std::mt19937_64 rng(seed * 7919);
  Model m = randomModel(rng);
  Options o = withOnlineBounds(Options());
  o.lookAheadWaitsFree = waitsFree;
  TaskSearch s(m.space, o);
  const uint64_t lag = 6;
  std::deque<std::pair<uint64_t, double>> inFlight;
  for (uint64_t k = 0; k < 600; ++k) {
    if (ahead > 0) s.segmentFor(k + ahead, tellLead ? ahead : 0);
    const Config c = s.configFor(k);
    if (c.measure) inFlight.emplace_back(k, m.sample(c, rng));
    while (!inFlight.empty() && inFlight.front().first + lag <= k) {
      s.addSample(inFlight.front().first, inFlight.front().second);
      inFlight.pop_front();
    }
  }
  AheadRun r;
  r.st = s.stats();
  r.converged = s.converged();
  r.ratio = m.trueTime(s.best()) / m.bestTime();
  return r;
}

void lookAheadWaits() {
  int gainedCounted = 0, gainedFree = 0;
  uint64_t convergedCounted = 0, convergedFree = 0, waitsFree = 0, aheadFree = 0;
  const int runs = 100;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(runs); ++seed) {
    const AheadRun counted = lookAheadRun(seed, 16, false, true);
    const AheadRun free = lookAheadRun(seed, 16, true, true);
    const AheadRun blind = lookAheadRun(seed, 16, true, false);
    const AheadRun near = lookAheadRun(seed, 0, true, true);
    CHECK(counted.converged && free.converged);
    // counted: close-behind waits use the budget, none is free
    CHECK(counted.st.waitCalls > 0 && counted.st.freeWaitCalls == 0 && counted.st.aheadWaitCalls == 0);
    // free: the waits planned beyond the present call (all of them here) are the question's, not the search's
    CHECK_MSG(free.st.aheadWaitCalls > 0 && free.st.freeWaitCalls == free.st.aheadWaitCalls,
              "seed %llu: %llu waits, %llu free, %llu ahead", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(free.st.waitCalls), static_cast<unsigned long long>(free.st.freeWaitCalls),
              static_cast<unsigned long long>(free.st.aheadWaitCalls));
    // questions that do not say they lead (a rank further on), or none ahead: as before
    CHECK(blind.st.aheadWaitCalls == 0 && blind.st.waitCalls == counted.st.waitCalls);
    CHECK(near.st.aheadWaitCalls == 0);
    gainedCounted += counted.ratio <= 1.03;
    gainedFree += free.ratio <= 1.03;
    convergedCounted += counted.st.convergedAt;
    convergedFree += free.st.convergedAt;
    waitsFree += free.st.waitCalls;
    aheadFree += free.st.aheadWaitCalls;
  }
  // only the lead's share: the waits the search would have without looking ahead still count
  CHECK_MSG(aheadFree < waitsFree, "%llu of %llu waits freed", static_cast<unsigned long long>(aheadFree),
            static_cast<unsigned long long>(waitsFree));
  std::printf("asking 16 ahead, samples 6 calls late, %d random models: pinned within 3 %% of the "
              "best in %d with the waits counted, %d with them free; mean call converged %.1f, %.1f\n",
              runs, gainedCounted, gainedFree, static_cast<double>(convergedCounted) / runs,
              static_cast<double>(convergedFree) / runs);
  // the budget the lead's waits no longer take goes to the candidates (deterministic: 66 against 82 of 100 when
  // written), and the searches end later (mean call 150 against 206)
  CHECK(gainedFree >= gainedCounted + 10);
  CHECK(convergedFree > convergedCounted);
}

// Options::maxUnprovenCalls: in nccl-tests' loops the host plans 40 calls before a sample of them returns, so the
// abandon rule and the regret budget, which act on samples, cannot stop what a loop explores. With at most 3
// calls of unmeasured configurations in flight, a loop explores at most 3 calls blind; without speculation, only
// what the search asked for. Over 150 models of each kind, with the engine's online bounds: what the first size's
// timed loops cost, the costliest loop over 6 rounds, and where the search ends.
void unprovenBursts() {
  for (int kind = 0; kind < 3; ++kind) {
    // [0] the engine's default, [1] maxUnprovenCalls 3, [2] no speculation
    int within3[3] = {0, 0, 0}, worse[3] = {0, 0, 0}, notConverged[3] = {0, 0, 0};
    double first[3] = {0, 0, 0}, worstLoop[3] = {0, 0, 0}, meanLoopWorst[3] = {0, 0, 0}, calls[3] = {0, 0, 0};
    uint64_t waits[3] = {0, 0, 0};
    int mostUnproven[3] = {0, 0, 0};
    const int runs = 150;
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(runs); ++seed) {
      std::mt19937_64 rng(seed * 31 + static_cast<uint64_t>(kind));
      const Model m = modelOfKind(kind, rng);
      for (int cap = 0; cap < 3; ++cap) {
        Options o = withOnlineBounds(Options());
        o.verifySamples = 3;
        o.maxUnprovenCalls = cap == 1 ? 3 : 0;
        o.speculate = cap != 2;
        const BurstResult b = burstRun(m, o, seed, 6);
        first[cap] += b.firstTimed / runs;
        worstLoop[cap] = std::max(worstLoop[cap], b.worstLoop);
        meanLoopWorst[cap] += b.worstLoop / runs;
        waits[cap] += b.unprovenWaits;
        mostUnproven[cap] = std::max(mostUnproven[cap], b.mostUnproven);
        if (!b.converged) {
          notConverged[cap]++;
          continue;
        }
        calls[cap] += static_cast<double>(b.convergedAt);
        const double got = m.trueTime(b.final), dflt = m.trueTime(Config());
        if (got <= m.bestTime() * 1.03) within3[cap]++;
        if (got > dflt * (1.0 + std::max(0.01, 2 * m.noise))) worse[cap]++;
      }
    }
    const char* name = kind == 0 ? "random" : kind == 1 ? "H200-like" : "hostile";
    const char* variant[3] = {"the default", "maxUnprovenCalls 3", "no speculation"};
    for (int cap = 0; cap < 3; ++cap)
      std::printf("%s models in nccl-tests' loops, %s: first size's timed calls %.4fx NCCL's time; "
                  "costliest loop %.3fx (mean over models %.4fx); within 3 %% of the best %d/%d; worse than NCCL's %d; "
                  "not converged in 6 rounds %d; mean calls to converge %.1f; waits %.1f a model; at most %d calls "
                  "of unmeasured configurations in a timed loop\n",
                  name, variant[cap], first[cap], worstLoop[cap], meanLoopWorst[cap], within3[cap], runs, worse[cap],
                  notConverged[cap], calls[cap] / std::max(1, runs - notConverged[cap]),
                  static_cast<double>(waits[cap]) / runs, mostUnproven[cap]);
    CHECK(worse[0] == 0 && worse[1] == 0 && worse[2] == 0);
    CHECK(waits[1] > 0 && waits[0] == 0 && waits[2] == 0);
    // the bound's point: no loop as costly as the unbounded search's costliest, and few blind calls in any loop
    // (those planned within unprovenLag of the last sample, and the bound's)
    // (on the hostile models, where every probe but NCCL's choice loses, the default speculates only around points
    // measured and not twice behind: its costliest loop 1.56x, against 2.45x when it speculated around any probe,
    // and the bound's 1.83x)
    if (kind == 2) CHECK(worstLoop[0] < worstLoop[1]);
    else CHECK(worstLoop[1] < worstLoop[0] * 0.85);
    CHECK(mostUnproven[1] <= 3 + 8 && mostUnproven[0] > 3 + 8);
    // ... nor far from the best (the waits are free only within maxWaitCalls, so the search ends as before)
    CHECK(within3[1] >= within3[0] - 15);
    CHECK(notConverged[1] == 0);
    // without speculation the costliest loop is no dearer
    CHECK(worstLoop[2] <= worstLoop[0]);
  }
  // The bound itself, where every call is beyond unprovenLag: a burst planned before any sample returns runs at
  // most maxUnprovenCalls calls of unmeasured configurations, splitting a candidate's first block (3 calls) when
  // fewer fit.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    const Model m = h200Model(rng, 1 << 24);
    Options o;
    o.maxUnprovenCalls = 2;
    o.unprovenLag = 0;
    o.clockMs = [] { return uint64_t{0}; };
    TaskSearch s(m.space, o);
    int blind = 0;
    for (uint64_t k = 0; k < 60; ++k)
      if (!s.configFor(k).isDefault()) blind++;
    CHECK_MSG(blind == 2, "seed %llu: %d calls of unmeasured configurations in a burst, bound 2",
              static_cast<unsigned long long>(seed), blind);
    CHECK(s.stats().unprovenWaits > 0);
  }
  // Where samples come back within a few calls (a training job's tasks, one call an iteration) the bound does not
  // bind: the convergence case's models end as near the best as without it.
  for (int kind = 0; kind < 2; ++kind) {
    int within3[2] = {0, 0};
    for (uint64_t seed = 1; seed <= 150; ++seed)
      for (int cap = 0; cap < 2; ++cap) {
        std::mt19937_64 rng;
        const Model m = convergenceModel(kind, seed, rng);
        Options o = withOnlineBounds(testOptions(rng));
        o.maxUnprovenCalls = cap ? 3 : 0;
        const int lag = static_cast<int>(rng() % 5);
        TaskSearch s(m.space, o);
        const RunResult r = drive(s, m, rng, 150, lag, 0.0);
        if (r.converged && m.trueTime(r.final) <= m.bestTime() * 1.03) within3[cap]++;
      }
    std::printf("%s models, samples <= 4 calls late: within 3 %% of the best %d/150 unbounded, %d/150 with 3\n",
                kind ? "H200-like" : "random", within3[0], within3[1]);
    CHECK(within3[1] >= within3[0] - 2);
  }
}

// Options::jobRegret: the tasks of one job share one regret budget. Eight tasks are called in turn, one call
// each per step, as the tasks of a training step are, with the engine's online bounds. Every configuration other
// than NCCL's choice is 15-60 % slower, so whatever they explore is regret. Each task alone stays within its own
// budget (10 % of its calls plus 16 calls), eight allowances together; with the ledger the job spends one, plus
// what the tasks already had in flight when it was reached (samples arrive after the next calls are planned).
struct JobRun {
  double regret = 0;  // summed over the tasks at the end (us)
  // the largest summed regret over the job's budget at that step, 10 % of every call so far at NCCL's time plus
  // 16 calls of the slowest task (the ledger counts only exploring calls: a stricter budget)
  double peak = 0;
  int jobStops = 0;   // tasks whose tuning the job's budget ended
  int atNccl = 0;     // tasks that kept NCCL's choice
  int found = 0;      // winning tasks that ended more than 5 % faster than NCCL's choice
  double gain = 0;    // their gains (NCCL's time / the final's - 1), summed
  int worse = 0;      // tasks that ended more than 2 % slower than NCCL's choice
};

// `winners` of the eight tasks (the last ones) also have a pair whose time at 40 channels is `best` x NCCL's
// choice, slower than NCCL's at the 24-channel probe where best > 0.83: found only by descending the channels.
JobRun jobRegretRun(uint64_t seed, bool shared, int winners = 0, double best = 1.0, uint64_t calls = 300) {
  constexpr int kTasks = 8;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<Model> models(kTasks);
  std::vector<std::unique_ptr<TaskSearch>> tasks;
  auto ledger = std::make_shared<RegretLedger>(0.10, 16);
  for (int i = 0; i < kTasks; ++i) {
    Model& m = models[static_cast<size_t>(i)];
    m.space.maxChannels = 64;
    m.defaultChannels = 24;
    m.space.ncclChannels = 24;
    for (int a = 0; a < 2; ++a)
      for (int p = 0; p < kNumProtos; ++p) m.space.cost[a][p] = static_cast<float>(100.0 * (1.0 + 0.1 * (a * 3 + p)));
    setDefaultFromCost(m);
    const double base = 50.0 + 400.0 * u(rng);
    const int dflt = m.defaultPair;
    const double pairCost = 0.15 + 0.30 * u(rng);
    const bool wins = i >= kTasks - winners;
    m.noise = 0.01;
    m.t = [base, dflt, pairCost, wins, best](int pair, int ch, int halvings) {
      if (wins && pair == dflt + 1)
        return base * (best + 0.25 * std::fabs(std::log2(static_cast<double>(ch) / 40.0)) + 0.05 * halvings);
      const double off = std::fabs(std::log2(static_cast<double>(ch) / 24.0));
      return base * (1.0 + (pair == dflt ? 0.0 : pairCost) + 0.15 * off + 0.05 * halvings);
    };
    Options o = withOnlineBounds(Options());
    if (shared) o.jobRegret = ledger;
    tasks.push_back(std::make_unique<TaskSearch>(m.space, o));
  }
  std::uniform_int_distribution<int> lagd(0, 4);
  std::vector<std::multimap<uint64_t, std::pair<uint64_t, double>>> due(kTasks);
  JobRun r;
  double ncclSum = 0, ncclMax = 0;
  for (const Model& m : models) {
    ncclSum += m.trueTime(Config());
    ncclMax = std::max(ncclMax, m.trueTime(Config()));
  }
  for (uint64_t k = 0; k < calls; ++k) {
    double regret = 0;
    for (auto& t : tasks) regret += t->stats().regretMicros;
    r.peak = std::max(r.peak, regret / (0.10 * static_cast<double>(k) * ncclSum + 16 * ncclMax));
    for (int i = 0; i < kTasks; ++i) {
      TaskSearch& s = *tasks[static_cast<size_t>(i)];
      const Config c = s.configFor(k);
      if (c.measure)
        due[static_cast<size_t>(i)].emplace(k + static_cast<uint64_t>(lagd(rng)),
                                            std::make_pair(k, models[static_cast<size_t>(i)].sample(c, rng)));
      auto& q = due[static_cast<size_t>(i)];
      while (!q.empty() && q.begin()->first <= k) {
        s.addSample(q.begin()->second.first, q.begin()->second.second);
        q.erase(q.begin());
      }
    }
  }
  for (int i = 0; i < kTasks; ++i) {
    const TaskSearch& t = *tasks[static_cast<size_t>(i)];
    const Stats st = t.stats();
    r.regret += st.regretMicros;
    r.jobStops += st.jobRegretStop ? 1 : 0;
    r.atNccl += t.best().isDefault() ? 1 : 0;
    const Model& m = models[static_cast<size_t>(i)];
    const double g = m.trueTime(Config()) / m.trueTime(t.best()) - 1.0;
    if (i >= kTasks - winners && g > 0.05) {
      r.found++;
      r.gain += g;
    }
    if (g < -0.02) r.worse++;
  }
  return r;
}

void jobRegret() {
  double alone = 0, together = 0, meanPeakAlone = 0, meanPeak = 0, peakTogether = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const JobRun a = jobRegretRun(seed, false), b = jobRegretRun(seed, true);
    std::printf("seed %llu: the tasks' regret %.0f us alone (at most %.2fx the job's budget), %.0f us with the job's "
                "ledger (%.2fx; %d tasks stopped by it); NCCL's choice kept by %d / %d of 8\n",
                static_cast<unsigned long long>(seed), a.regret, a.peak, b.regret, b.peak, b.jobStops, a.atNccl,
                b.atNccl);
    CHECK(a.jobStops == 0);
    CHECK(a.atNccl == 8 && b.atNccl == 8);  // nothing beats NCCL's choice here, with or without the ledger
    CHECK(b.jobStops > 0);
    CHECK(b.peak < a.peak);
    alone += a.regret;
    together += b.regret;
    meanPeakAlone += a.peak / 10;
    meanPeak += b.peak / 10;
    peakTogether = std::max(peakTogether, b.peak);
  }
  std::printf("10 jobs: regret %.0f us alone (its peak over the job's budget %.2fx on average), %.0f us with the "
              "ledger (%.2fx on average, at most %.2fx)\n",
              alone, meanPeakAlone, together, meanPeak, peakTogether);
  CHECK(meanPeakAlone > 2.0);  // without the ledger the job overspends: the test can fail
  // with it, the budget plus what the tasks had in flight when it was reached
  CHECK(meanPeak < 1.2);
  CHECK(peakTogether < 1.5);
  CHECK(together < 0.5 * alone);
}

// What the job's bound costs: two of the eight tasks have a pair that wins only at fewer or more channels than
// its probe, and the other six spend the job's budget on their probes first. Without the bound the descents find
// most of those gains; with it fewer (the reason AUTOCCL_JOB_REGRET_PCT is opt-in). Never slower than NCCL's
// choice either way.
void jobRegretMixed() {
  for (const double best : {0.88, 0.80, 0.70}) {
    int found[2] = {0, 0}, worse[2] = {0, 0};
    double gain[2] = {0, 0};
    for (uint64_t seed = 1; seed <= 20; ++seed)
      for (int shared = 0; shared < 2; ++shared) {
        const JobRun r = jobRegretRun(seed, shared != 0, 2, best, 600);
        found[shared] += r.found;
        gain[shared] += r.gain / 40;
        worse[shared] += r.worse;
      }
    std::printf("a pair at %.2fx NCCL's time on 2 of 8 tasks, 20 jobs: found %d of 40 (mean gain %.1f %%) with the "
                "tasks' own bounds, %d (%.1f %%) with the job's\n",
                best, found[0], 100 * gain[0], found[1], 100 * gain[1]);
    CHECK(worse[0] == 0 && worse[1] == 0);
    CHECK(found[1] <= found[0]);
    if (best <= 0.70) CHECK(found[0] >= 36);  // a clear gain is found without the job's bound
  }
}

// A job of one task never meets the job's bound before the task's own (the same share and allowance): its plan is
// the same with and without the ledger, over the convergence case's models.
void jobRegretOneTask() {
  int differing = 0;
  for (int kind = 0; kind < 2; ++kind)
    for (uint64_t seed = 1; seed <= 100; ++seed) {
      std::vector<Segment> plans[2];
      for (int shared = 0; shared < 2; ++shared) {
        std::mt19937_64 rng;
        Model m = convergenceModel(kind, seed, rng);
        Options o = withOnlineBounds(testOptions(rng));
        if (shared) o.jobRegret = std::make_shared<RegretLedger>(0.10, 16);
        const int lag = static_cast<int>(rng() % 5);
        TaskSearch s(m.space, o);
        drive(s, m, rng, 150, lag, 0.0);
        CHECK(!s.stats().jobRegretStop);
        plans[shared] = s.plan();
      }
      if (plans[0].size() != plans[1].size()) {
        differing++;
        continue;
      }
      for (size_t i = 0; i < plans[0].size(); ++i)
        if (plans[0][i].begin != plans[1][i].begin || plans[0][i].end != plans[1][i].end ||
            plans[0][i].cfg != plans[1][i].cfg) {
          differing++;
          break;
        }
    }
  CHECK(differing == 0);
}


// TaskSearch::chargeWait: the callers' waits for an exploring task's plan count into its regret. A driver like
// drive() whose ranks wait `waitCalls` x NCCL's time at the first call of every tuning segment (a lookup through
// the coordinator: over TCP 0.2-2.5 ms, against calls of tens of microseconds to milliseconds). What the first
// `calls` calls cost the caller beyond NCCL's choice alone, in NCCL's calls.
struct WaitRun {
  double excessCalls = 0;  // (caller's time - calls x NCCL's time) / NCCL's time
  double waitedCalls = 0;  // ... of which waits
  Stats stats;
  Config final;
};
WaitRun driveWithWaits(TaskSearch& s, const Model& m, std::mt19937_64& rng, uint64_t calls, int maxLag,
                       double waitCalls, bool charge) {
  std::uniform_int_distribution<int> lagd(0, std::max(0, maxLag));
  std::multimap<uint64_t, std::pair<uint64_t, double>> due;
  const double nccl = m.trueTime(Config());
  double spent = 0, waited = 0;
  for (uint64_t k = 0; k < calls; ++k) {
    const Segment seg = s.segmentFor(k);
    if (seg.begin == k && seg.phase == Phase::kTuning && k > 0) {
      waited += waitCalls * nccl;
      if (charge) s.chargeWait(waitCalls * nccl);
    }
    spent += m.trueTime(seg.cfg);
    if (seg.cfg.measure) due.emplace(k + static_cast<uint64_t>(lagd(rng)), std::make_pair(k, m.sample(seg.cfg, rng)));
    while (!due.empty() && due.begin()->first <= k) {
      s.addSample(due.begin()->second.first, due.begin()->second.second);
      due.erase(due.begin());
    }
  }
  WaitRun r;
  r.excessCalls = (spent + waited) / nccl - static_cast<double>(calls);
  r.waitedCalls = waited / nccl;
  r.stats = s.stats();
  r.final = s.best();
  return r;
}

void lookupWaits() {
  // 1. Not charged before NCCL's choice has a sample, nor once the task has settled.
  {
    std::mt19937_64 rng;
    Model m = convergenceModel(1, 7, rng);
    TaskSearch s(m.space, withOnlineBounds(testOptions(rng)));
    s.segmentFor(0);
    s.chargeWait(500.0);
    CHECK(s.stats().regretMicros == 0 && s.stats().waitRegretMicros == 0);
    drive(s, m, rng, 400, 2, 0.0);
    REQUIRE(s.converged());
    const Stats before = s.stats();
    s.chargeWait(500.0);
    CHECK(s.stats().regretMicros == before.regretMicros);
    CHECK(s.stats().waitRegretMicros == before.waitRegretMicros);
  }
  // 2. Waits of 2 calls at each tuning segment: counted, exploration ends within the budget on the caller's clock;
  // not counted, the search explores as if they were free. Waits of 0.05 calls (a round trip against a call of
  // milliseconds) leave the plan almost as it was.
  struct Sum {
    double excess = 0, worstExcess = -1e9, waited = 0;
    int regretStops = 0, atNccl = 0, runs = 0;
  };
  auto run = [](double waitCalls, bool charge) {
    Sum sum;
    for (int kind = 0; kind < 2; ++kind)
      for (uint64_t seed = 1; seed <= 100; ++seed) {
        std::mt19937_64 rng;
        Model m = convergenceModel(kind, seed, rng);
        Options o = withOnlineBounds(testOptions(rng));
        const int lag = static_cast<int>(rng() % 5);
        TaskSearch s(m.space, o);
        WaitRun r = driveWithWaits(s, m, rng, 150, lag, waitCalls, charge);
        sum.runs++;
        sum.excess += r.excessCalls;
        sum.worstExcess = std::max(sum.worstExcess, r.excessCalls);
        sum.waited += r.waitedCalls;
        sum.regretStops += r.stats.regretStop ? 1 : 0;
        sum.atNccl += r.final.isDefault() ? 1 : 0;
        const double nccl = m.trueTime(Config());
        if (charge && waitCalls > 0) {
          CHECK(r.stats.waitRegretMicros > 0);
          CHECK(r.stats.waitRegretMicros <= r.waitedCalls * nccl * (1 + 1e-9));
          // The rule: 10 % of the tuning calls plus 16, give or take what one step planned before its verdict
          // (a block of 3 calls and its wait) and the noise of NCCL's median.
          const double bound = (0.10 * static_cast<double>(r.stats.tuningCalls) + 16) * nccl * 1.05 + 3 * (2 + waitCalls) * nccl;
          CHECK_MSG(r.stats.regretMicros <= bound, "kind %d seed %llu: regret %.1f calls over a bound of %.1f", kind,
                    static_cast<unsigned long long>(seed), r.stats.regretMicros / nccl, bound / nccl);
        }
        if (!charge) CHECK(r.stats.waitRegretMicros == 0);
      }
    return sum;
  };
  const Sum heavyFree = run(2.0, false), heavy = run(2.0, true);
  const Sum lightFree = run(0.05, false), light = run(0.05, true);
  std::printf("waits of 2 calls per tuning segment, 150 calls, 200 models: beyond NCCL's time %.1f calls a task "
              "(worst %.1f, waits %.1f) counted, %.1f (worst %.1f, waits %.1f) uncounted; regret stops %d against %d; "
              "at NCCL's choice %d against %d\n",
              heavy.excess / heavy.runs, heavy.worstExcess, heavy.waited / heavy.runs, heavyFree.excess / heavyFree.runs,
              heavyFree.worstExcess, heavyFree.waited / heavyFree.runs, heavy.regretStops, heavyFree.regretStops,
              heavy.atNccl, heavyFree.atNccl);
  std::printf("waits of 0.05 calls: %.2f calls beyond NCCL counted, %.2f uncounted; at NCCL's choice %d against %d\n",
              light.excess / light.runs, lightFree.excess / lightFree.runs, light.atNccl, lightFree.atNccl);
  // After the budget the incumbent's duel against NCCL's choice still runs (and waits): the budget bounds the
  // exploring, the caller's whole excess only falls.
  CHECK(heavy.excess < 0.5 * heavyFree.excess);
  CHECK(heavy.worstExcess < heavyFree.worstExcess);
  CHECK(heavy.waited < heavyFree.waited);
  CHECK(heavy.regretStops > heavyFree.regretStops);
  CHECK(std::abs(light.atNccl - lightFree.atNccl) <= light.runs / 20);
}

// RegretLedger::leave: a task that is gone frees its slot (a process that makes communicators all along does not
// grow the ledger) and the budget stays what it was: its regret, calls and NCCL median still count.
void regretLedgerLeave() {
  RegretLedger l(0.10, 16);
  const int a = l.join(), b = l.join();
  l.report(a, 150.0, 100, 10.0);  // budget 0.1 x 1000 + 16 x 10 = 260
  l.report(b, 100.0, 10, 1.0);
  CHECK(l.allows());
  l.report(b, 120.0, 10, 1.0);  // 270 > 261
  CHECK(!l.allows());
  l.leave(a);
  CHECK(l.slots() == 1);
  CHECK(!l.allows());  // a's regret still counts
  l.report(b, 100.0, 10, 1.0);
  CHECK(l.allows());  // ... and so do its calls and its median: 250 <= 261
  l.report(a, 1e9, 1, 1.0);  // a slot that left is not reported into
  CHECK(l.allows());
  const int c = l.join();
  CHECK(c == a && l.slots() == 2);  // reused
  {
    Options o;
    o.jobRegret = std::make_shared<RegretLedger>(0.10, 16);
    Space sp;
    sp.cost[0][2] = 1.0f;
    { TaskSearch s(sp, o); CHECK(o.jobRegret->slots() == 1); }
    CHECK(o.jobRegret->slots() == 0);  // the search left when destroyed
  }
}

// Speculation around a pair already measured far behind. Two ranks as two hosts over sockets on one H200,
// all_reduce 256 MiB in nccl-tests' cells (-w 10 -n 20 -c 1): ring/LL's probe came back 3.7x NCCL's ring/Simple
// before the in-place loop was planned, and that loop still ran 3 calls of ring/LL at 6 channels, speculated while
// the probe was in flight (h200x1/speculation-measured-points; in an earlier run 9 calls at 1, 3 and 6 channels). The model: ring/Simple best near 3 channels (NCCL asks for 2), tree/Simple a little
// slower, ring/LL 3.7x at every channel count; the cell's loops are planned blind, samples back at each loop's end.
Model socketLargeModel() {
  Model m;
  m.space.maxChannels = 64;
  m.defaultChannels = 2;
  m.space.ncclChannels = 0;   // as the engine starts a task: NCCL's count unknown, probes at the comm's cap
  m.space.startChannels = 2;
  for (int a = 0; a < kNumAlgos; ++a)
    for (int p = 0; p < kNumProtos; ++p) m.space.cost[a][p] = -1;
  m.space.cost[1][2] = 1000;  // ring/Simple: NCCL's choice
  m.space.cost[0][2] = 1100;  // tree/Simple
  m.space.cost[1][0] = 1500;  // ring/LL
  setDefaultFromCost(m);
  m.noise = 0.05;
  m.t = [](int pair, int ch, int) {
    const double l = std::log2(static_cast<double>(ch)) - std::log2(3.0);
    if (pair == 1 * kNumProtos + 2) return 80.0 * (0.88 + 0.05 * l * l);
    if (pair == 0 * kNumProtos + 2) return 80.0 * (1.0 + 0.05 * l * l);
    return 80.0 * 3.7;
  };
  return m;
}

void noSpeculationAroundLosers() {
  const Model m = socketLargeModel();
  const int llPair = 1 * kNumProtos + 0;
  double worst = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Options o = withOnlineBounds(Options());
    o.verifySamples = 3;
    uint64_t nowMs = 0;
    o.clockMs = [&nowMs] { return nowMs; };
    TaskSearch s(m.space, o);
    std::mt19937_64 rng(seed);
    uint64_t k = 0;
    int llCalls = 0;
    double timed = 0;
    for (const int len : {10, 21, 1, 21, 1}) {  // warm-up, timed loop and its check call, twice
      std::vector<std::pair<uint64_t, double>> done;
      for (int i = 0; i < len; ++i, ++k) {
        const Config c = s.configFor(k);
        if (!c.isDefault() && c.algo * kNumProtos + c.proto == llPair) llCalls++;
        if (len == 21 && i < 20) timed += m.trueTime(c);
        if (c.measure) done.emplace_back(k, m.sample(c, rng));
      }
      for (auto& x : done)
        if (x.first != 10) s.addSample(x.first, x.second);  // one sample lost, as on the GPU: the probes stay open
      nowMs += 2000;
    }
    worst = std::max(worst, timed / (40 * m.trueTime(Config())));
    // the probe's block of 3 calls, planned before its first sample returned, and nothing after it
    CHECK_MSG(llCalls <= 3, "seed %llu: %d calls of ring/LL", static_cast<unsigned long long>(seed), llCalls);
  }
  std::printf("ring/LL 3.7x behind after its probe: the costliest cell's timed loops %.3fx NCCL's time\n", worst);
}

// Options::probeFirst = 1 on the same model: each pair's probe is one call until its sample is back, so ring/LL
// (3.7x) costs the cell one call, not a block of 3; the pairs within the abandon threshold get their block, and
// the cell's timed loops cost less on every seed.
void probeFirstCall() {
  const Model m = socketLargeModel();
  double mean[2] = {0, 0};
  int trees[2] = {0, 0};  // seeds where tree/Simple's probe point (1.14x: within the threshold) got its whole block
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    double timedOf[2] = {0, 0};
    for (int first = 0; first < 2; ++first) {
      Options o = withOnlineBounds(Options());
      o.verifySamples = 3;
      o.probeFirst = first ? 1 : 0;
      uint64_t nowMs = 0;
      o.clockMs = [&nowMs] { return nowMs; };
      TaskSearch s(m.space, o);
      std::mt19937_64 rng(seed);
      uint64_t k = 0;
      int ll = 0, treeCalls = 0;
      for (const int len : {10, 21, 1, 21, 1, 10, 21, 1, 21, 1}) {  // two cells: the probes' blocks come back
        std::vector<std::pair<uint64_t, double>> done;
        for (int i = 0; i < len; ++i, ++k) {
          const Config c = s.configFor(k);
          ll += c.forcesPair() && c.algo == 1 && c.proto == 0;
          treeCalls += c.forcesPair() && c.algo == 0 && c.proto == 2 && c.channels == 2;
          if (k < 54 && len == 21 && i < 20) timedOf[first] += m.trueTime(c);
          if (c.measure) done.emplace_back(k, m.sample(c, rng));
        }
        for (auto& x : done)
          if (x.first != 10) s.addSample(x.first, x.second);
        nowMs += 2000;
      }
      if (first) CHECK_MSG(ll == 1, "seed %llu: %d calls of ring/LL", static_cast<unsigned long long>(seed), ll);
      trees[first] += treeCalls >= 3;
      mean[first] += timedOf[first] / (40 * m.trueTime(Config())) / 40;
    }
    CHECK(timedOf[1] < timedOf[0]);
  }
  std::printf("socket model, the first cell's timed loops: %.3fx NCCL's time probing in blocks of 3, %.3fx one call "
              "first; tree/Simple's probe with its whole block in %d and %d of 40 seeds\n", mean[0], mean[1], trees[0], trees[1]);
  CHECK(trees[1] >= 36);  // an outlier first sample (2 % of samples 1.2-2.2x) may abandon it
}


// Space::measuredRatio with Options::skipBehind: a job that ends mid-search (one nccl-tests cell: 10 warm-up calls,
// two timed loops of 20 and their check calls) leaves its pair records; the next job of the task, started from them
// with no table entry (the search ended without a lead), does not probe ring/LL again (3.7x NCCL's time), still
// probes tree/Simple (1.14x), and its timed loops cost less than the same job probing every pair.
void skipMeasuredBehind() {
  const Model m = socketLargeModel();
  const int ll = 1 * kNumProtos + 0, tree = 0 * kNumProtos + 2;
  double mean[2] = {0, 0};
  auto cell = [&](const Space& space, double skipBehind, uint64_t seed, int* llCalls, int* treeCalls,
                  std::vector<TaskSearch::PairMeasure>* pairs) {
    Options o = withOnlineBounds(Options());
    o.verifySamples = 3;
    o.skipBehind = skipBehind;
    uint64_t nowMs = 0;
    o.clockMs = [&nowMs] { return nowMs; };
    TaskSearch s(space, o);
    std::mt19937_64 rng(seed);
    uint64_t k = 0;
    double timed = 0;
    for (const int len : {10, 21, 1, 21, 1}) {
      std::vector<std::pair<uint64_t, double>> done;
      for (int i = 0; i < len; ++i, ++k) {
        const Config c = s.configFor(k);
        const int pair = c.forcesPair() ? c.algo * kNumProtos + c.proto : -1;
        *llCalls += pair == ll;
        *treeCalls += pair == tree;
        if (len == 21 && i < 20) timed += m.trueTime(c);
        if (c.measure) done.emplace_back(k, m.sample(c, rng));
      }
      for (auto& x : done) s.addSample(x.first, x.second);
      nowMs += 2000;
    }
    if (pairs) *pairs = s.measuredPairs();
    CHECK_EQ(s.stats().skippedBehind, uint64_t(skipBehind > 0 && space.measuredRatio[1][0] > 0 ? 1 : 0));
    return timed / (40 * m.trueTime(Config()));
  };
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    int llFirst = 0, treeFirst = 0;
    std::vector<TaskSearch::PairMeasure> pairs;
    cell(m.space, 2.0, seed, &llFirst, &treeFirst, &pairs);
    CHECK(llFirst >= 1);
    Space next = m.space;
    for (const auto& p : pairs) next.measuredRatio[p.algo][p.proto] = static_cast<float>(p.micros / p.defaultMicros);
    CHECK_MSG(next.measuredRatio[1][0] > 3.0f, "seed %llu: ring/LL recorded at %.2fx",
              static_cast<unsigned long long>(seed), static_cast<double>(next.measuredRatio[1][0]));
    double cost[2] = {0, 0};
    for (int skip = 0; skip < 2; ++skip) {
      int llCalls = 0, treeCalls = 0;
      cost[skip] = cell(next, skip ? 2.0 : 0.0, seed + 1000, &llCalls, &treeCalls, nullptr);
      if (skip) CHECK_MSG(llCalls == 0, "seed %llu: %d calls of ring/LL", static_cast<unsigned long long>(seed), llCalls);
      else CHECK(llCalls >= 1);
      CHECK(treeCalls >= 1);  // within the threshold: probed again
      mean[skip] += cost[skip] / 40;
    }
    CHECK(cost[1] < cost[0]);
  }
  std::printf("socket model, the next job's cell: timed loops %.3fx NCCL's time probing every pair, %.3fx skipping "
              "pairs measured more than 2x behind\n", mean[0], mean[1]);
  // A table entry that loses its verification (tree/Simple at 32 channels, 1.76x NCCL's time) searches again: still
  // without ring/LL, which the same table records 3.7x behind.
  int lostVerify = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Space next = m.space;
    next.measuredRatio[1][0] = 3.7f;
    Config entry;
    entry.algo = 0;
    entry.proto = 2;
    entry.channels = 32;
    Options o = withOnlineBounds(Options());
    o.verifySamples = 6;
    TaskSearch s(next, o, {Hint{entry, 80.0, 0}});
    std::mt19937_64 rng(seed);
    int llCalls = 0;
    for (uint64_t k = 0; k < 300; ++k) {
      const Config c = s.configFor(k);
      llCalls += c.forcesPair() && c.algo == 1 && c.proto == 0;
      if (c.measure) s.addSample(k, m.sample(c, rng));
    }
    lostVerify += s.stats().retunes > 0;
    CHECK_MSG(llCalls == 0, "seed %llu: %d calls of ring/LL after the entry's verification",
              static_cast<unsigned long long>(seed), llCalls);
  }
  CHECK_EQ(lostVerify, 20);
}

// The next job of a task on the search test's models in nccl-tests' loops: one job of one size (20 untimed calls,
// 40 and 40 timed) leaves its pair records; `record` puts them into the next job's space (and says whether they can
// matter there), and the next job runs 6 rounds in each of two arms that `arm` sets up (0: without, 1: with).
struct NextJobArms {
  int runs = 100, mattered = 0;
  int within3[2] = {0, 0}, worse[2] = {0, 0};
  double first[2] = {0, 0}, worstLoop[2] = {0, 0}, calls[2] = {0, 0};
  int converged[2] = {0, 0};
};
NextJobArms nextJobOnModels(int kind, const std::function<bool(const std::vector<TaskSearch::PairMeasure>&, Model*)>& record,
                            const std::function<void(int, Options*)>& arm) {
  NextJobArms r;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(r.runs); ++seed) {
    std::mt19937_64 rng(seed * 37 + static_cast<uint64_t>(kind));
    const Model m = modelOfKind(kind, rng);
    Options o = withOnlineBounds(Options());
    o.verifySamples = 3;
    std::vector<TaskSearch::PairMeasure> pairs;
    burstRun(m, o, seed, 1, &pairs);
    Model next = m;
    r.mattered += record(pairs, &next);
    for (int side = 0; side < 2; ++side) {
      Options o2 = o;
      arm(side, &o2);
      const BurstResult b = burstRun(next, o2, seed + 5000, 6);
      r.first[side] += b.firstTimed / r.runs;
      r.worstLoop[side] = std::max(r.worstLoop[side], b.worstLoop);
      if (b.converged) {
        r.converged[side]++;
        r.calls[side] += static_cast<double>(b.convergedAt);
      }
      const double got = m.trueTime(b.final), dflt = m.trueTime(Config());
      if (b.converged && got <= m.bestTime() * 1.03) r.within3[side]++;
      if (got > dflt * (1.0 + std::max(0.01, 2 * m.noise))) r.worse[side]++;
    }
  }
  return r;
}
// Prints both arms, then checks what the second may not cost: the search's quality (where it ends against the
// best), an end worse than NCCL's choice, or dearer first timed calls.
void reportNextJobArms(int kind, const NextJobArms& r, const char* mattered, const char* without, const char* with,
                       bool holdQuality = true) {
  std::printf("%s models, the next job of a task (%d of %d with %s): first size's timed calls %.4fx NCCL's time %s, "
              "%.4fx %s; costliest loop %.3fx / %.3fx; within 3 %% of the best %d / %d; worse than NCCL's %d / %d\n",
              kind == 0 ? "random" : kind == 1 ? "H200-like" : "hostile", r.mattered, r.runs, mattered, r.first[0],
              without, r.first[1], with, r.worstLoop[0], r.worstLoop[1], r.within3[0], r.within3[1], r.worse[0],
              r.worse[1]);
  std::printf("  converged %d / %d, mean call %.1f / %.1f\n", r.converged[0], r.converged[1],
              r.calls[0] / std::max(1, r.converged[0]), r.calls[1] / std::max(1, r.converged[1]));
  CHECK(r.worse[1] == 0);
  if (!holdQuality) return;
  CHECK(r.within3[1] >= r.within3[0] - 3);
  CHECK(r.first[1] <= r.first[0] + 0.005);
}

// Skipping a pair the first job measured more than twice behind NCCL's choice (records of 2 samples or more, as the
// engine reads them).
void skipMeasuredBehindModels() {
  for (int kind = 0; kind < 3; ++kind) {
    const NextJobArms r = nextJobOnModels(
        kind,
        [](const std::vector<TaskSearch::PairMeasure>& pairs, Model* next) {
          bool any = false;
          for (const auto& p : pairs)
            if (p.samples >= 2) {
              next->space.measuredRatio[p.algo][p.proto] = static_cast<float>(p.micros / p.defaultMicros);
              any = any || (p.micros / p.defaultMicros > 2.0 && p.algo * kNumProtos + p.proto != next->defaultPair);
            }
          return any;
        },
        [](int side, Options* o) { o->skipBehind = side ? 2.0 : 0.0; });
    reportNextJobArms(kind, r, "a pair recorded > 2x behind", "probing every pair", "skipping");
  }
}

// Space::measuredChannels with Options::recordedStart: a pair an earlier job measured is first probed at its best
// point there. The socket model on a communicator that grants 64 channels (no cap seen, NCCL's count unknown: the
// probes start at 64, where ring/Simple takes 2x NCCL's time), the records putting ring/Simple's best at 3 channels
// and tree/Simple's at 4: the next job probes them there, a pair hinted with a point at the hint's point (one hinted
// without a channel count, a neighbour where NCCL's choice won, at its record's), and with the option off every pair
// at the widest. On this model the cell costs about the same either way: from 64 both pairs fall
// behind NCCL's choice at their probe and the search ends, from the records both stay in and the descent explores
// around them (1 and 8 channels, 1.09-1.12x); what the records buy shows on the models below.
void recordedStart() {
  Model m = socketLargeModel();
  m.space.startChannels = 0;
  m.space.measuredRatio[1][0] = 3.7f;  // ring/LL: skipped, as the same records say
  m.space.measuredRatio[1][2] = 1.0f;
  m.space.measuredChannels[1][2] = 3;
  m.space.measuredRatio[0][2] = 1.1f;
  m.space.measuredChannels[0][2] = 4;
  const int ring = 1 * kNumProtos + 2, tree = 0 * kNumProtos + 2;
  double mean[2] = {0, 0};
  int cheaper = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    double cost[2] = {0, 0};
    for (int from = 0; from < 2; ++from) {
      Options o = withOnlineBounds(Options());
      o.verifySamples = 3;
      o.recordedStart = from == 1;
      uint64_t nowMs = 0;
      o.clockMs = [&nowMs] { return nowMs; };
      TaskSearch s(m.space, o);
      std::mt19937_64 rng(seed);
      uint64_t k = 0;
      int first[kNumAlgos * kNumProtos] = {};
      for (const int len : {10, 21, 1, 21, 1}) {  // one nccl-tests cell: warm-up, two timed loops and their checks
        std::vector<std::pair<uint64_t, double>> done;
        for (int i = 0; i < len; ++i, ++k) {
          const Config c = s.configFor(k);
          const int pair = c.forcesPair() ? c.algo * kNumProtos + c.proto : -1;
          if (pair >= 0 && first[pair] == 0) first[pair] = c.channels;
          if (len == 21 && i < 20) cost[from] += m.trueTime(c) / (40 * m.trueTime(Config()));
          if (c.measure) done.emplace_back(k, m.sample(c, rng));
        }
        for (auto& x : done) s.addSample(x.first, x.second);
        nowMs += 2000;
      }
      CHECK_EQ(first[ring], from ? 3 : 64);
      CHECK_EQ(first[tree], from ? 4 : 64);
      CHECK_EQ(s.stats().recordedStarts, uint64_t(from ? 2 : 0));
      mean[from] += cost[from] / 40;
    }
    cheaper += cost[1] < cost[0];
  }
  std::printf("socket model on a 64-channel grant, one cell: timed loops %.3fx NCCL's time probing each pair at the "
              "widest, %.3fx at its recorded best point (cheaper on %d of 40 seeds)\n", mean[0], mean[1], cheaper);
  CHECK(mean[1] < mean[0] + 0.02);
  Config hint;
  hint.algo = 1;
  hint.proto = 2;
  hint.channels = 8;
  TaskSearch hinted(m.space, withOnlineBounds(Options()), {Hint{hint, 80.0, 1.0}});
  int firstRing = 0;
  for (uint64_t k = 0; k < 40 && firstRing == 0; ++k) {
    const Config c = hinted.configFor(k);
    if (c.forcesPair() && c.algo == 1 && c.proto == 2) firstRing = c.channels;
  }
  CHECK_EQ(firstRing, 8);
  CHECK_EQ(hinted.stats().recordedStarts, uint64_t(1));  // tree/Simple's, not the hinted ring/Simple's
  // A neighbour's entry where NCCL's choice won (ring/Simple, channels 0) hints the pair with no channel count of
  // its own: the pair's record says where to start (on the GPU such a hint had the pair probed at 64 channels).
  Config ncclWon;
  ncclWon.algo = 1;
  ncclWon.proto = 2;
  ncclWon.channels = 0;
  TaskSearch neighbour(m.space, withOnlineBounds(Options()), {Hint{ncclWon, 80.0, 1.0}});
  firstRing = 0;
  for (uint64_t k = 0; k < 40 && firstRing == 0; ++k) {
    const Config c = neighbour.configFor(k);
    if (c.forcesPair() && c.algo == 1 && c.proto == 2) firstRing = c.channels;
  }
  CHECK_EQ(firstRing, 3);
  CHECK_EQ(neighbour.stats().recordedStarts, uint64_t(2));
}

// Options::regretAllowance 0 for the next job of a task whose first job (one nccl-tests size, 100 calls) ended
// mid-search with no lead, so that it left pair records and no entry: the engine's AUTOCCL_ALLOWANCE_ONCE. The
// records as the engine passes them (ratios of 2 samples or more, each pair's best channel count), one call first
// (the engine's default). What the next job's first size costs, its costliest loop, and where its search ends
// after 6 sizes' worth of calls, against the allowance granted again; over the models where the rule applies.
void allowanceOnceModels() {
  for (int kind = 0; kind < 3; ++kind) {
    const int runs = 150;
    int applies = 0, within3[2] = {0, 0}, worse[2] = {0, 0}, ended[2] = {0, 0};
    double first[2] = {0, 0}, worstLoop[2] = {0, 0};
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(runs); ++seed) {
      std::mt19937_64 rng(seed * 41 + static_cast<uint64_t>(kind));
      const Model m = modelOfKind(kind, rng);
      Options o = withOnlineBounds(Options());
      o.verifySamples = 3;
      o.probeFirst = 1;
      std::vector<TaskSearch::PairMeasure> pairs;
      const BurstResult b1 = burstRun(m, o, seed, 1, &pairs);
      if (b1.converged || b1.provisional) continue;  // an entry: the next job verifies it, with its allowance
      ++applies;
      Model next = m;
      for (const auto& p : pairs) {
        if (p.samples >= 2) next.space.measuredRatio[p.algo][p.proto] = static_cast<float>(p.micros / p.defaultMicros);
        next.space.measuredChannels[p.algo][p.proto] = p.channels;
      }
      for (int side = 0; side < 2; ++side) {
        Options o2 = o;
        if (side) o2.regretAllowance = 0;
        const BurstResult b = burstRun(next, o2, seed + 5000, 6);
        first[side] += b.firstTimed;
        worstLoop[side] = std::max(worstLoop[side], b.worstLoop);
        const double got = m.trueTime(b.final), dflt = m.trueTime(Config());
        if (b.converged) ended[side]++;
        if (b.converged && got <= m.bestTime() * 1.03) within3[side]++;
        if (got > dflt * (1.0 + std::max(0.01, 2 * m.noise))) worse[side]++;
      }
    }
    for (double& f : first) f /= std::max(1, applies);
    std::printf("%s models, the next job of a task whose first job ended with no lead (%d of %d): first size's timed "
                "calls %.4fx NCCL's time with the allowance again, %.4fx without; costliest loop %.3fx / %.3fx; "
                "ended %d / %d; within 3 %% of the best %d / %d; worse than NCCL's %d / %d\n",
                kind == 0 ? "random" : kind == 1 ? "H200-like" : "hostile", applies, runs, first[0], first[1],
                worstLoop[0], worstLoop[1], ended[0], ended[1], within3[0], within3[1], worse[0], worse[1]);
    CHECK(applies > 0);
    CHECK(worse[1] == 0);
    CHECK(first[1] <= first[0] + 0.005);
    CHECK(within3[1] >= within3[0] - 3);  // random models: 23 against 25 of 30 (a gain found later, or not)
  }
}

// The next job's first probes at the records' best points, with and without (pairs > 2x behind skipped in both).
// Options::recordedStep: a pair probed first at its recorded best point descends from there with a warm step (1.0 or
// 0.5, a hint's) instead of the cold 1.5. What the next job of a task costs and where it ends, over 100 models a kind
// (the records of one job of one round, as recordedStartModels). Prints only, beyond never ending worse than NCCL's.
void recordedStepModels() {
  for (const double step : {1.0, 0.5})
    for (int kind = 0; kind < 3; ++kind) {
      const NextJobArms r = nextJobOnModels(
          kind,
          [](const std::vector<TaskSearch::PairMeasure>& pairs, Model* next) {
            for (const auto& p : pairs) {
              if (p.samples >= 2)
                next->space.measuredRatio[p.algo][p.proto] = static_cast<float>(p.micros / p.defaultMicros);
              next->space.measuredChannels[p.algo][p.proto] = p.channels;
            }
            return !pairs.empty();
          },
          [step](int side, Options* o) { o->recordedStep = side == 1 ? step : 0.0; });
      std::printf("recorded step %.1f: ", step);
      reportNextJobArms(kind, r, "records", "cold step", "warm step", false);
    }
}

void recordedStartModels() {
  for (int kind = 0; kind < 3; ++kind) {
    const NextJobArms r = nextJobOnModels(
        kind,
        [](const std::vector<TaskSearch::PairMeasure>& pairs, Model* next) {
          // where a cold start probes (as TaskSearch: the communicator's cap, else NCCL's count, else the widest)
          const Space& sp = next->space;
          const int widest = sp.startChannels > 0 ? std::min(sp.startChannels, sp.maxChannels)
                                                  : sp.ncclChannels > 0 ? sp.ncclChannels : sp.maxChannels;
          bool any = false;
          for (const auto& p : pairs) {
            if (p.samples >= 2)
              next->space.measuredRatio[p.algo][p.proto] = static_cast<float>(p.micros / p.defaultMicros);
            next->space.measuredChannels[p.algo][p.proto] = p.channels;
            any = any || p.channels != widest;
          }
          return any;
        },
        [](int side, Options* o) { o->recordedStart = side == 1; });
    reportNextJobArms(kind, r, "a pair's best away from its first probe", "starting at the widest",
                      "at the recorded best");
  }
}

// Options::stepFirst = 1: the descent's points of a subspace trailing the best by more than stepFirstBehind (asked
// for by a step, or speculated while samples are in flight) are one call each until their samples are back, the rest
// of the block only within abandonAbove of the incumbent. What it does to nccl-tests' loops (burstRun: samples back at each
// loop's end) and to a job whose samples come back a few calls late (drive, lag up to 3), over 150 models a kind and
// a socket-like model where a second pair trails by 26 % at its probe and falls further behind as channels move.
Model trailingPairModel(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Model m = socketLargeModel();
  m.noise = 0.03 + 0.04 * u(rng);
  const double trail = 1.2 + 0.1 * u(rng);
  m.t = [trail](int pair, int ch, int) {
    const double l = std::log2(static_cast<double>(ch)) - 1.0;
    if (pair == 1 * kNumProtos + 2) return 80.0 * (1.0 + 0.04 * l * l);
    if (pair == 0 * kNumProtos + 2) return 80.0 * trail * (1.0 + 0.08 * l * l);
    return 80.0 * 3.7;
  };
  return m;
}

void stepFirstModels() {
  for (int kind = 0; kind < 4; ++kind) {
    const int runs = 150;
    int within3[2][2] = {}, worse[2][2] = {}, ended[2][2] = {};
    double first[2][2] = {}, worstLoop[2] = {0, 0}, calls[2][2] = {};
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(runs); ++seed) {
      std::mt19937_64 rng(seed * 43 + static_cast<uint64_t>(kind));
      const Model m = kind < 3 ? modelOfKind(kind, rng) : trailingPairModel(rng);
      const double dflt = m.trueTime(Config());
      for (int side = 0; side < 2; ++side) {
        Options o = withOnlineBounds(Options());
        o.verifySamples = 3;
        o.probeFirst = 1;
        o.stepFirst = side ? 1 : 0;
        // [0] nccl-tests' loops
        const BurstResult b = burstRun(m, o, seed, 6);
        first[0][side] += b.firstTimed / runs;
        worstLoop[side] = std::max(worstLoop[side], b.worstLoop);
        if (b.converged) {
          ended[0][side]++;
          calls[0][side] += static_cast<double>(b.convergedAt);
          if (m.trueTime(b.final) <= m.bestTime() * 1.03) within3[0][side]++;
        }
        if (m.trueTime(b.final) > dflt * (1.0 + std::max(0.01, 2 * m.noise))) worse[0][side]++;
        // [1] a job's calls, samples back 0-3 calls late: the first 150 calls' cost
        TaskSearch s(m.space, o);
        std::mt19937_64 r2(seed + 9000);
        const RunResult r = drive(s, m, r2, 600, 3, 0.0);
        double cost = 0;
        for (size_t i = 0; i < 150; ++i) cost += m.trueTime(r.applied[i]);
        first[1][side] += cost / (150 * dflt) / runs;
        if (r.converged) {
          ended[1][side]++;
          calls[1][side] += static_cast<double>(r.convergedAt);
          if (m.trueTime(r.final) <= m.bestTime() * 1.03) within3[1][side]++;
        }
        if (m.trueTime(r.final) > dflt * (1.0 + std::max(0.01, 2 * m.noise))) worse[1][side]++;
      }
    }
    const char* name = kind == 0 ? "random" : kind == 1 ? "H200-like" : kind == 2 ? "hostile" : "trailing-pair";
    for (int how = 0; how < 2; ++how) {
      std::printf("%s models, %s, a step's block at once / one call first: %s %.4fx / %.4fx NCCL's time; ended "
                  "%d / %d of %d (mean call %.1f / %.1f); within 3 %% of the best %d / %d; worse than NCCL's %d / %d",
                  name, how == 0 ? "nccl-tests' loops" : "samples 0-3 calls late",
                  how == 0 ? "first size's timed calls" : "first 150 calls", first[how][0], first[how][1], ended[how][0],
                  ended[how][1], runs, calls[how][0] / std::max(1, ended[how][0]),
                  calls[how][1] / std::max(1, ended[how][1]), within3[how][0], within3[how][1], worse[how][0],
                  worse[how][1]);
      if (how == 0) std::printf("; costliest loop %.3fx / %.3fx", worstLoop[0], worstLoop[1]);
      std::printf("\n");
    }
    CHECK(worse[0][1] == 0 && worse[1][1] == 0);
    CHECK(ended[0][1] == runs && ended[1][1] == runs);
    // cheaper on every kind, in nccl-tests' loops and in a job whose samples come back a few calls late
    CHECK(first[0][1] <= first[0][0] + 0.002 && first[1][1] <= first[1][0] + 0.002);
    // as near the best where samples come back within a few calls; in nccl-tests' loops, where each short point
    // waits a loop for its sample, the call budget ends some descents earlier (random models: 92 against 107)
    CHECK(within3[1][1] >= within3[1][0] - 3);
    CHECK(within3[0][1] >= within3[0][0] - 20);
  }
}

// One job of nccl-tests' loops on one task: `loops` calls each, every loop launched before any of its samples
// returns (they arrive at its end). The true time of the loops after the first (the timed ones) over NCCL's.
struct ShortJob {
  double timed = 0;
  Config final;
};
ShortJob shortJobRun(const Model& m, const Options& o0, uint64_t seed, const std::vector<uint64_t>& loops) {
  std::mt19937_64 rng(seed);
  uint64_t nowMs = 0;
  Options o = o0;
  o.clockMs = [&nowMs] { return nowMs; };
  TaskSearch s(m.space, o);
  const double dflt = m.trueTime(Config());
  double timed = 0;
  uint64_t k = 0, timedCalls = 0;
  for (size_t loop = 0; loop < loops.size(); ++loop) {
    std::vector<std::pair<uint64_t, double>> done;
    for (uint64_t i = 0; i < loops[loop]; ++i, ++k) {
      const Config c = s.configFor(k);
      if (loop > 0) {
        timed += m.trueTime(c);
        timedCalls++;
      }
      if (c.measure) done.emplace_back(k, m.sample(c, rng));
      nowMs += 1;
    }
    for (auto& x : done) s.addSample(x.first, x.second);
    nowMs += 20;
  }
  ShortJob r;
  r.timed = timed / (static_cast<double>(timedCalls) * dflt);
  r.final = s.best();
  return r;
}

// The allowance earned on the task's calls (Options::regretEarn, the search waiting while it earns) and the calls in
// flight charged at an estimate (Options::inflightRegret), against the whole allowance from the first call: a job
// of one nccl-tests size, its loops launched blind, for nccl-tests' default loops (-w 1 -n 20), -w 5 -n 10,
// -w 20 -n 40 and -w 200 -n 40; and a job whose samples come back 0-3 calls late (within 3 % of the best after 600
// calls). 100 models of each kind: random, H200-like, hostile, trailing-pair, the socket model.
void earnedAllowance() {
  const std::vector<std::vector<uint64_t>> shapes = {{1, 20, 20}, {5, 10, 10}, {20, 40, 40}, {200, 40, 40}};
  const char* names[] = {"random", "H200-like", "hostile", "trailing-pair", "socket"};
  for (int kind = 0; kind < 5; ++kind) {
    const int runs = 100;
    double timed[4][2] = {}, worst[4][2] = {};
    int within3[2] = {0, 0};
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(runs); ++seed) {
      std::mt19937_64 rng(seed * 47 + static_cast<uint64_t>(kind));
      const Model m = kind < 3 ? modelOfKind(kind, rng) : kind == 3 ? trailingPairModel(rng) : socketLargeModel();
      for (int side = 0; side < 2; ++side) {
        Options o = withOnlineBounds(Options());
        if (side == 1) o = withEarnedAllowance(o);
        o.verifySamples = 3;
        o.probeFirst = 1;
        for (size_t i = 0; i < shapes.size(); ++i) {
          const ShortJob j = shortJobRun(m, o, seed, shapes[i]);
          timed[i][side] += j.timed / runs;
          worst[i][side] = std::max(worst[i][side], j.timed);
        }
        TaskSearch s(m.space, o);
        std::mt19937_64 r2(seed + 9000);
        const RunResult r = drive(s, m, r2, 600, 3, 0.0);
        if (m.trueTime(r.final) <= m.bestTime() * 1.03) within3[side]++;
      }
    }
    std::printf("%s models, timed loops' cost over NCCL's, whole allowance at once / earned:", names[kind]);
    for (size_t i = 0; i < shapes.size(); ++i)
      std::printf(" -w %llu -n %llu %.3fx / %.3fx (worst %.2f / %.2f);", static_cast<unsigned long long>(shapes[i][0]),
                  static_cast<unsigned long long>(shapes[i][1]), timed[i][0], timed[i][1], worst[i][0], worst[i][1]);
    std::printf(" samples 0-3 calls late: within 3 %% of the best %d / %d of %d\n", within3[0], within3[1], runs);
    for (size_t i = 0; i < shapes.size(); ++i) CHECK(timed[i][1] <= timed[i][0] + 0.003);
    // the short loops pay less on every kind of model (the -w 200 loops alike: its warm-up earns the allowance)
    CHECK(timed[0][1] + timed[1][1] + timed[2][1] < timed[0][0] + timed[1][0] + timed[2][0] - 0.02);
    CHECK(within3[1] >= within3[0] - 3);  // a long job ends as near the best: the search waits, it does not end
  }
}

// With the allowance earned, a search ends: a candidate the budget cannot cover with nothing in flight and the
// allowance fully earned ends the round as a regret stop. It once waited on its budget for good (found in review):
// here 115, 138 and 143 of 150 random, H200-like and hostile searches ended with an allowance of 2, 150, 147 and
// 135 with 16. Samples 0-5 calls late, 150 models of each kind, allowances of 2 and 16 calls.
void earnedAllowanceEnds() {
  for (int kind = 0; kind < 3; ++kind)
    for (double allowance : {2.0, 16.0}) {
      int ended = 0;
      uint64_t worstAt = 0;
      for (uint64_t seed = 1; seed <= 150; ++seed) {
        std::mt19937_64 rng(seed * 53 + static_cast<uint64_t>(kind));
        const Model m = modelOfKind(kind, rng);
        Options o = withEarnedAllowance(withOnlineBounds(Options()));
        o.regretAllowance = allowance;
        o.verifySamples = 3;
        o.probeFirst = 1;
        TaskSearch s(m.space, o);
        const RunResult r = drive(s, m, rng, 3000, 5, 0.0);
        if (r.converged) {
          ended++;
          worstAt = std::max(worstAt, r.convergedAt);
        }
      }
      std::printf("%s models, allowance %.0f earned at 5 %%: %d of 150 searches ended, the last at call %llu\n",
                  kind == 0 ? "random" : kind == 1 ? "H200-like" : "hostile", allowance, ended,
                  static_cast<unsigned long long>(worstAt));
      CHECK_EQ(ended, 150);
    }
}

// A search re-tuned within a channel cap (TaskSearch::retuneWithin: the step guard's arm that won caps every call
// of the task). After the cap every call it times runs within the cap, NCCL's choice is its pair at the cap (what
// the arm makes of it), and it ends at the best point within the cap, or NCCL's pair at the cap: never at a point
// above it. The cap lifted, it searches the whole space again from the pin before the cap. H200-like models of
// 1 MiB-1 GiB, caps of 2-16 channels.
void retuneWithinCap() {
  int n = 0, within3 = 0, worseThanCapped = 0, liftedRuns = 0, liftedWithin3 = 0;
  uint64_t explored = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed * 131 + 5);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    Model m = h200Model(rng, std::exp2(20.0 + 10.0 * u(rng)));
    const int caps[4] = {2, 4, 8, 16};
    const int cap = caps[seed % 4];
    TaskSearch s(m.space, Options());
    s.ncclChoice(m.defaultPair / kNumProtos, m.defaultPair % kNumProtos, m.defaultChannels);
    RunResult before = drive(s, m, rng, 600, 3, 0.0);
    CHECK(before.converged);
    // What runs under the cap: every count above it is the cap, NCCL's choice at the cap
    Model capped = m;
    capped.space.maxChannels = cap;
    capped.defaultChannels = std::min(m.defaultChannels, cap);
    auto base = m.t;
    capped.t = [base, cap](int pair, int ch, int h) { return base(pair, std::min(ch, cap), h); };
    TaskSearch::Standing standing;
    const Config pinned = s.best();
    // a cap the pin already runs within finds nothing the search has not: refused
    if (pinned.forcesPair() && pinned.channels > 0) CHECK(!s.retuneWithin(pinned.channels, nullptr, &standing));
    CHECK(s.retuneWithin(cap, nullptr, &standing));
    // the standing is the pin's; the medians from here on are the search's within the cap
    CHECK(standing.best == pinned && standing.stats.convergedAt != kForever && standing.stats.defaultMedian > 0);
    CHECK(s.stats().defaultMedian == 0 && s.stats().bestMedian == 0);
    CHECK(!s.converged());
    CHECK(!s.retuneWithin(cap));                     // the cap it runs within already
    CHECK(!s.retuneWithin(cap + 1, nullptr, &standing));  // a standing is taken from a pin only
    const Stats x = s.stats();
    CHECK(x.capRetunes == 1 && x.channelCap == cap && x.convergedAt == kForever);
    // NCCL's own configuration is its pair at the cap now
    const Config own{m.defaultPair / kNumProtos, m.defaultPair % kNumProtos, cap};
    Config wide = own;
    wide.channels = m.defaultChannels;
    CHECK(s.isNcclOwn(own) && !s.isNcclOwn(wide));
    const uint64_t from = s.plannedUpTo();
    RunResult after = drive(s, capped, rng, 600, 3, 0.0, from);
    for (const Config& c : after.applied)
      if (!c.isDefault()) CHECK(c.channels >= 1 && c.channels <= cap);
    CHECK(after.converged && s.stats().convergedAt < from + 600);
    if (!after.final.isDefault()) CHECK(after.final.channels <= cap);
    n++;
    const double got = capped.trueTime(after.final), best = capped.bestTime();
    if (got <= best * 1.03) within3++;
    if (got > capped.trueTime(Config()) * 1.03) worseThanCapped++;
    for (const Config& c : after.applied) explored += c.measure && !c.isDefault() ? 1 : 0;
    // Lifted (the arm no longer caps the task): the whole space again, warm from the pin before the cap
    if (seed % 3 == 0) {
      const uint64_t at = s.plannedUpTo();
      CHECK(s.retuneWithin(0, &standing.best));
      CHECK(s.stats().channelCap == 0 && s.stats().capRetunes == 2);
      Config owned{m.defaultPair / kNumProtos, m.defaultPair % kNumProtos, m.defaultChannels};
      CHECK(s.isNcclOwn(owned));
      RunResult lifted = drive(s, m, rng, 600, 3, 0.0, at);
      CHECK(lifted.converged);
      ++liftedRuns;
      if (m.trueTime(lifted.final) <= m.bestTime() * 1.03) ++liftedWithin3;
    }
  }
  std::printf("re-tune within a cap: within 3%% of the best within the cap %d/%d, worse than NCCL's pair at the cap "
              "%d, explored calls %.1f per task; the cap lifted: within 3%% of the best %d/%d\n",
              within3, n, worseThanCapped, static_cast<double>(explored) / n, liftedWithin3, liftedRuns);
  CHECK(within3 >= n * 9 / 10);
  CHECK(worseThanCapped == 0);
  CHECK(liftedRuns == 20 && liftedWithin3 >= liftedRuns * 9 / 10);
  // Pins in pieces (Options::pinnedSegmentMax): the search within the cap starts within a piece of the call asked
  {
    std::mt19937_64 prng(11);
    Model pm = h200Model(prng, 1 << 27);
    Options po;
    po.pinnedSegmentMax = 64;
    TaskSearch pieces(pm.space, po), whole(pm.space, Options());
    std::mt19937_64 prng2 = prng;
    drive(pieces, pm, prng, 3000, 3, 0.0);
    drive(whole, pm, prng2, 3000, 3, 0.0);
    CHECK(pieces.converged() && whole.converged());
    // Pieces of 64 calls, then of a quarter of the pin's age: a few dozen segments, not one per 64 calls
    uint64_t longestWhole = 0, piecesPinned = 0;
    for (const Segment& g : pieces.plan())
      if (g.phase == Phase::kPinned) {
        ++piecesPinned;
        CHECK(g.end - g.begin <= std::max<uint64_t>(64, g.begin / 4));
      }
    for (const Segment& g : whole.plan())
      if (g.phase == Phase::kPinned) longestWhole = std::max(longestWhole, g.end - g.begin);
    CHECK(piecesPinned >= 8 && piecesPinned <= 40 && longestWhole > 750);
    CHECK(pieces.retuneWithin(2) && pieces.plannedUpTo() <= 3000 + 750);
  }
  // A plan that ends in a final segment has nothing more to plan
  std::mt19937_64 rng(7);
  Model m = h200Model(rng, 1 << 26);
  Options o;
  o.drift = false;
  TaskSearch fin(m.space, o);
  drive(fin, m, rng, 600, 3, 0.0);
  CHECK(fin.converged() && !fin.retuneWithin(4) && fin.stats().capRetunes == 0);
}

// A sample given up as lost arrives after the task re-tuned (a drift's re-tune, a table entry that lost its
// verification): it belongs to a round whose evaluations are gone and must be dropped, not recorded into the new
// round's (the given-up map kept the old round's indices: a heap use-after-free under ASan). Samples up to 200
// calls late, 30 % lost, over 3000 calls with drift re-tunes.
void lateSampleAfterRetune() {
  int retunes = 0;
  for (uint64_t seed = 80; seed < 90; ++seed) {
    std::mt19937_64 rng(seed * 31);
    const Model m = randomModel(rng);
    Options o = withOnlineBounds(testOptions(rng));
    o.maxUnprovenCalls = 3;
    o.speculate = false;
    TaskSearch s(m.space, o);
    const RunResult r = drive(s, m, rng, 3000, 200, 0.3);
    retunes += static_cast<int>(s.stats().retunes);
    CHECK(r.converged);
  }
  std::printf("late samples across re-tunes: %d re-tunes over 10 runs\n", retunes);
}

}  // namespace

TEST(search, convergence) { convergence(); }
TEST(search, recordedStepModels) { recordedStepModels(); }
TEST(search, lookAheadWaits) { lookAheadWaits(); }
TEST(search, immutability) { immutability(); }
TEST(search, robustness) { robustness(); }
TEST(search, warmstart) { warmstart(); }
TEST(search, drift) { drift(); }
TEST(search, retuneWithinCap) { retuneWithinCap(); }
TEST(search, objective) { objective(); }
TEST(search, ceiling) { ceiling(); }
TEST(search, pairCeiling) { pairCeiling(); }
TEST(search, channelGranularity) { channelGranularity(); }
TEST(search, costFilter) { costFilter(); }
TEST(search, runAhead) { runAhead(); }
TEST(search, settlingStart) { settlingStart(); }
TEST(search, duelTies) { duelTies(); }
TEST(search, duelLateTurns) { duelLateTurns(); }
TEST(search, duelRuns) { duelRuns(); }
TEST(search, duelLeftBehind) { duelLeftBehind(); }
TEST(search, duelSecondOpinion) { duelSecondOpinion(); }
TEST(search, duelPausedSample) { duelPausedSample(); }
TEST(search, duelWaitsForSamples) { duelWaitsForSamples(); }
TEST(search, duelSwitchCost) { duelSwitchCost(); }
TEST(search, driftSpacedByTime) { driftSpacedByTime(); }
TEST(search, unmeasuredCalls) { unmeasuredCalls(); }
TEST(search, tableDefaultEntry) { tableDefaultEntry(); }
TEST(search, pinExactHintTrusted) { pinExactHintTrusted(); }
TEST(search, planAfterIsThePlansSuffix) { planAfterIsThePlansSuffix(); }
TEST(search, ncclOwnIncumbent) { ncclOwnIncumbent(); }
TEST(search, smallByModel) { smallByModel(); }
TEST(search, unprofiledTask) { unprofiledTask(); }
TEST(search, lateStart) { lateStart(); }
TEST(search, reviveDropped) { reviveDropped(); }
TEST(search, probeKeepColdCost) { probeKeepColdCost(); }
TEST(search, unprovenBursts) { unprovenBursts(); }
TEST(search, askAheadBursts) { askAheadBursts(); }
TEST(search, noSpeculationAroundLosers) { noSpeculationAroundLosers(); }
TEST(search, probeFirstCall) { probeFirstCall(); }
TEST(search, skipMeasuredBehind) { skipMeasuredBehind(); }
TEST(search, skipMeasuredBehindModels) { skipMeasuredBehindModels(); }
TEST(search, recordedStart) { recordedStart(); }
TEST(search, recordedStartModels) { recordedStartModels(); }
TEST(search, allowanceOnceModels) { allowanceOnceModels(); }
TEST(search, stepFirstModels) { stepFirstModels(); }
TEST(search, lateSampleAfterRetune) { lateSampleAfterRetune(); }
TEST(search, verifyWait) { verifyWait(); }
TEST(search, jobRegret) { jobRegret(); }
TEST(search, jobRegretMixed) { jobRegretMixed(); }
TEST(search, jobRegretOneTask) { jobRegretOneTask(); }
TEST(search, lookupWaits) { lookupWaits(); }
TEST(search, regretLedgerLeave) { regretLedgerLeave(); }
TEST(search, earnedAllowance) { earnedAllowance(); }
TEST(search, earnedAllowanceEnds) { earnedAllowanceEnds(); }
