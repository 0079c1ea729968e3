// Time-expanded greedy link-chunk matching (TACOS), event driven.
//
// Time advances from one transfer completion to the next (no fixed time step); at each event time the
// channels that became free, or got something new to send, are matched to chunks. Two engines:
// * gather_general (channels that share links — switch ports — or differ in cost, up to kGeneralCells): one
//   global matching order, lowest cost first; per-channel candidate queues; per (NPU, chunk) the arrival or
//   promised arrival time. A destination counts a chunk's first arrival: a copy may be sent again over a
//   faster path while one is in flight, and the slower copy is then replaced by a chunk its source held when
//   it started (causal, unlike TACOS v1.3.0's replacement) or cancelled. A look-ahead keeps slow channels for
//   what no cheaper path brings first. Eight policies by seed (see there).
// * Gather (channels that share no link and cost the same: homogeneous meshes, tori, hypercubes, ...; and very
//   large heterogeneous ones). A chunk is claimed for a destination when matched. Per destination a bitset row
//   of claimed chunks; per NPU its arrival list (chunks in the order it got them); a channel s->d reads s's
//   list through its own cursor and skips what d has claimed. Matching at one destination reads other NPUs'
//   lists and writes only its own row, so destinations are independent within an event: they are matched in
//   rank order (neighbours' data stay close in memory) and, on large topologies, split among threads that meet
//   at two barriers per event. The channels into one destination go lowest cost first, ties in a random order
//   drawn from (seed, event, destination); odd seeds take each channel's oldest candidate, even seeds a random
//   one (a per-channel stream). So the schedule depends on the seed only, not on the number of threads.
//   Cost: about 3 claim-bit tests per transfer, at random places of an NPUs x chunks bitset (200 MB for
//   40,000 NPUs); they are cache misses, so the engine batches them (see warm()).
// The engines are in gather_general.cpp and gather_disjoint.cpp (gather.h); this file picks one, runs the seeds,
// chooses the chunk count and builds each collective's schedule from the spreading phases.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>

#include "gather.h"
#include "memory_text.h"

namespace autoccl::synth {

const char* to_string(Collective c) {
  switch (c) {
    case Collective::AllGather: return "allgather";
    case Collective::ReduceScatter: return "reducescatter";
    case Collective::AllReduce: return "allreduce";
    case Collective::Broadcast: return "broadcast";
    case Collective::Reduce: return "reduce";
  }
  return "?";
}

Collective collective_from_string(const std::string& s) {
  if (s == "allgather" || s == "ag" || s == "all_gather") return Collective::AllGather;
  if (s == "reducescatter" || s == "rs" || s == "reduce_scatter") return Collective::ReduceScatter;
  if (s == "allreduce" || s == "ar" || s == "all_reduce") return Collective::AllReduce;
  if (s == "broadcast" || s == "bcast") return Collective::Broadcast;
  if (s == "reduce") return Collective::Reduce;
  throw Error("unknown collective '" + s + "' (allgather, reducescatter, allreduce, broadcast, reduce)");
}

namespace {

using engines::GatherResult;
using engines::Sink;

// Cells (NPUs x chunks) up to which topologies with shared links or channels of different costs use the
// general engine (first-arrival delivery, look-ahead; 8 bytes of state per cell). Larger ones, and every
// topology whose channels share no link and cost the same (where neither feature can apply), use Gather.
constexpr double kGeneralCells = 1 << 27;

bool use_general_engine(const Topology& t, std::size_t chunks) {
  std::vector<int> users(static_cast<std::size_t>(t.num_links()), 0);
  bool shared = false, mixed = false;
  const auto& chans = t.channels();
  for (const auto& ch : chans) {
    for (int l : ch.route) shared = shared || ++users[static_cast<std::size_t>(l)] > 1;
    mixed = mixed || ch.latency_us != chans[0].latency_us || ch.bandwidth_gbps != chans[0].bandwidth_gbps;
  }
  return shared || (mixed && static_cast<double>(t.num_npus()) * static_cast<double>(chunks) <= kGeneralCells);
}

bool shares_links(const Topology& t) {
  std::vector<int> users(static_cast<std::size_t>(t.num_links()), 0);
  for (const auto& ch : t.channels())
    for (int l : ch.route)
      if (++users[static_cast<std::size_t>(l)] > 1) return true;
  return false;
}

// A spreading run's transfers in time order (ties: end, then channel).
bool starts_first(const Transfer& a, const Transfer& b) {
  return a.start != b.start ? a.start < b.start : a.end != b.end ? a.end < b.end : a.route < b.route;
}

GatherResult gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed,
                    bool record, int threads, const SynthOptions& o, const Sink* sink = nullptr) {
  const SynthOptions::Engine engine = o.engine;
  using E = SynthOptions::Engine;
  if (engine == E::PointToPoint && shares_links(t))
    throw Error("the point-to-point engine needs channels that share no link (this topology has switch ports)");
  const bool general = engine == E::General || (engine == E::Auto && use_general_engine(t, src.size()));
  const engines::Progress progress{o.stop, o.deliveries};
  GatherResult res = general ? engines::gather_general(t, src, chunk_bytes, seed, record, sink, progress)
                             : engines::gather_disjoint(t, src, chunk_bytes, seed, record, threads, sink, progress);
  const std::uint64_t expect = static_cast<std::uint64_t>(src.size()) * static_cast<std::uint64_t>(t.num_npus() - 1);
  if (res.count != expect)
    throw Error("synthesis did not complete: " + std::to_string(res.count) + " of " + std::to_string(expect) +
                " deliveries (is every NPU reachable?)");
  if (record) std::sort(res.transfers.begin(), res.transfers.end(), starts_first);
  return res;
}

// The threads a synthesis runs on: o.threads, or every hardware thread where it is 0.
int all_threads(const SynthOptions& o) {
  return o.threads > 0 ? o.threads : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

constexpr double kDirectPatternMaxTransfers = 4e6;

// Whether the synthesis considers the direct pattern for `chunks` chunks on t (the size and engine conditions).
bool direct_pattern_considered(const Topology& t, std::size_t chunks, const SynthOptions& o) {
  using E = SynthOptions::Engine;
  const bool general = o.engine == E::General || (o.engine == E::Auto && use_general_engine(t, chunks));
  return o.direct_candidate && general &&
         static_cast<double>(chunks) * (t.num_npus() - 1) <= kDirectPatternMaxTransfers;
}

// The direct pattern as a spreading schedule: in round r = 1..n-1 every NPU sends each chunk it owns to NPU
// + r (mod n) over its cheapest channel there, each link carrying one transfer at a time in round order, as the
// simulator replays the `direct` baseline (rounds, then a sender's chunks, then senders; every chunk is at its
// sender from time 0). On a shared-port switch its rounds never collide, while the matching's seeds can: on
// 16-, 24-, 48- and 72-port switches no seed reached it (1.009-1.067x its time). Only where every NPU owns as
// many chunks (not rooted), every ordered pair of NPUs has a channel, and the pattern has at most
// kDirectPatternMaxTransfers; else nothing. Memory: the pairs' channels, a time per link, and the transfers
// when recording.
std::optional<GatherResult> direct_pattern(const Topology& t, const std::vector<int>& src, double chunk_bytes,
                                           bool record) {
  const int n = t.num_npus();
  const std::size_t N = static_cast<std::size_t>(n);
  if (static_cast<double>(src.size()) * (n - 1) > kDirectPatternMaxTransfers || src.size() % N != 0)
    return std::nullopt;
  std::vector<std::vector<int>> owned(N);
  for (std::size_t c = 0; c < src.size(); ++c) owned[static_cast<std::size_t>(src[c])].push_back(static_cast<int>(c));
  const std::size_t k = src.size() / N;
  for (const auto& o : owned)
    if (o.size() != k) return std::nullopt;
  const auto& chans = t.channels();
  std::vector<int> pair_chan(N * N, -1);  // the cheapest channel from i to j
  for (std::size_t i = 0; i < chans.size(); ++i) {
    int& c = pair_chan[static_cast<std::size_t>(chans[i].src) * N + static_cast<std::size_t>(chans[i].dst)];
    if (c < 0 || chans[i].time_us(chunk_bytes) < chans[static_cast<std::size_t>(c)].time_us(chunk_bytes))
      c = static_cast<int>(i);
  }
  for (std::size_t a = 0; a < N; ++a)
    for (std::size_t b = 0; b < N; ++b)
      if (a != b && pair_chan[a * N + b] < 0) return std::nullopt;
  std::vector<double> link_free(static_cast<std::size_t>(t.num_links()), 0.0);
  GatherResult res;
  if (record) res.transfers.reserve(src.size() * (N - 1));
  for (int r = 1; r < n; ++r)
    for (std::size_t j = 0; j < k; ++j)
      for (int i = 0; i < n; ++i) {
        const int d = (i + r) % n;
        const int ch = pair_chan[static_cast<std::size_t>(i) * N + static_cast<std::size_t>(d)];
        const Channel& c = chans[static_cast<std::size_t>(ch)];
        double start = 0;
        for (const int l : c.route) start = std::max(start, link_free[static_cast<std::size_t>(l)]);
        const double end = start + c.time_us(chunk_bytes);
        for (const int l : c.route) link_free[static_cast<std::size_t>(l)] = end;
        res.time = std::max(res.time, end);
        ++res.count;
        if (record) {
          Transfer x;
          x.chunk = owned[static_cast<std::size_t>(i)][j];
          x.src = i;
          x.dst = d;
          x.start = start;
          x.end = end;
          x.route = ch;
          res.transfers.push_back(x);
        }
      }
  if (record) std::sort(res.transfers.begin(), res.transfers.end(), starts_first);
  return res;
}

// The direct pattern run again, recording, where a chunk trial or a weighing of the seeds chose it; its deliveries
// count towards the progress as a seed's run does.
GatherResult direct_pattern_again(const Topology& t, const std::vector<int>& src, double chunk_bytes,
                                  const SynthOptions& o) {
  std::optional<GatherResult> d = direct_pattern(t, src, chunk_bytes, true);
  if (!d) throw Error("internal: the direct pattern chosen does not apply to this run");
  if (o.deliveries) o.deliveries->fetch_add(d->count, std::memory_order_relaxed);
  return std::move(*d);
}

// Best of `seeds` seeds (base_seed, base_seed + 1, ...; or the seeds of `seed_list`), run on up to `threads`
// threads. Deterministic: ties go to the lowest seed.
// With o.direct_candidate, on the general engine, the direct pattern (direct_pattern) is kept where it is
// faster than every seed (*direct; the seed times and best seed stay the seeds').
GatherResult best_gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, const SynthOptions& o,
                         std::vector<double>* seed_times, std::uint64_t* best_seed, bool* direct,
                         const std::vector<std::uint64_t>* seed_list = nullptr) {
  const int k = seed_list ? static_cast<int>(seed_list->size()) : std::max(1, o.seeds);
  auto seed_of = [&](int i) {
    return seed_list ? (*seed_list)[static_cast<std::size_t>(i)] : o.base_seed + static_cast<std::uint64_t>(i);
  };
  int threads = all_threads(o);
  // Seeds run side by side; with fewer seeds than threads, each seed splits its destinations among the rest
  // (large topologies without shared links only; the schedule is the same for any thread count).
  const int inner = std::max(1, threads / k);
  threads = std::max(1, std::min(threads, k));
  std::vector<double> times(static_cast<std::size_t>(k), 0);
  GatherResult best;
  int best_i = -1;
  std::mutex mu;
  std::atomic<int> next{0};
  std::atomic<bool> interrupted{false};
  std::string err;
  auto worker = [&]() {
    for (;;) {
      const int i = next.fetch_add(1);
      if (i >= k) return;
      try {
        GatherResult r = gather(t, src, chunk_bytes, seed_of(i), o.record, inner, o);
        std::lock_guard<std::mutex> g(mu);
        times[static_cast<std::size_t>(i)] = r.time;
        if (best_i < 0 || r.time < best.time || (r.time == best.time && i < best_i)) {
          best = std::move(r);
          best_i = i;
        }
      } catch (const Interrupted&) {
        interrupted = true;
        return;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(mu);
        err = e.what();
        return;
      }
    }
  };
  if (threads == 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
    for (auto& th : pool) th.join();
  }
  if (interrupted) throw Interrupted();
  if (!err.empty()) throw Error(err);
  if (seed_times) *seed_times = times;
  if (best_seed) *best_seed = seed_of(best_i);
  if (direct) *direct = false;
  if (direct_pattern_considered(t, src.size(), o)) {
    std::optional<GatherResult> d = direct_pattern(t, src, chunk_bytes, o.record);
    if (d && o.deliveries) o.deliveries->fetch_add(d->count, std::memory_order_relaxed);
    if (d && d->time < best.time * (1 - 1e-9)) {
      if (direct) *direct = true;
      return std::move(*d);
    }
  }
  return best;
}

// partner[l] = the link going the opposite way with the same cost, if every link has one.
std::vector<int> symmetric_partner(const Topology& t) {
  std::map<std::pair<int, int>, int> idx;
  for (int i = 0; i < t.num_links(); ++i) idx[{t.link(i).src, t.link(i).dst}] = i;
  std::vector<int> p(static_cast<std::size_t>(t.num_links()), -1);
  for (int i = 0; i < t.num_links(); ++i) {
    const auto& l = t.link(i);
    auto it = idx.find({l.dst, l.src});
    if (it == idx.end()) return {};
    const auto& r = t.link(it->second);
    if (r.latency_us != l.latency_us || r.bandwidth_gbps != l.bandwidth_gbps) return {};
    p[static_cast<std::size_t>(i)] = it->second;
  }
  return p;
}

// Reduce-type phase: reverse a spreading schedule in time. `routes` are the spreading channel routes
// expressed in `topo` link ids, already mapped to the reverse direction by the caller.
void append_reversed(const GatherResult& g, const std::vector<std::vector<int>>& rev_routes, double t_end,
                     Schedule& s, double offset) {
  const auto base = static_cast<std::int32_t>(s.routes.size());
  for (const auto& r : rev_routes) s.routes.push_back(r);
  for (auto it = g.transfers.rbegin(); it != g.transfers.rend(); ++it) {
    Transfer tr = *it;
    std::swap(tr.src, tr.dst);
    tr.start = offset + (t_end - it->end);
    tr.end = offset + (t_end - it->start);
    tr.route = base + it->route;
    tr.op = Op::Reduce;
    s.transfers.push_back(tr);
  }
}

void append_forward(const GatherResult& g, const Topology& t, Schedule& s, double offset) {
  const auto base = static_cast<std::int32_t>(s.routes.size());
  for (const auto& ch : t.channels()) s.routes.push_back(ch.route);
  for (const auto& tr0 : g.transfers) {
    Transfer tr = tr0;
    tr.start += offset;
    tr.end += offset;
    tr.route = base + tr0.route;
    s.transfers.push_back(tr);
  }
}

}  // namespace

namespace {

// What the chunk trials leave for the synthesis at the count kept, where they ran every seed of it: the
// spreading run of that count over those seeds, or the direct pattern where it was faster (no transfer list),
// on the spreading topology or its transpose (Reduce-Scatter, Reduce).
struct ChunkTrial {
  bool valid = false;
  bool transposed = false;
  GatherResult best;
  std::vector<double> seed_times;
  std::uint64_t best_seed = 0;
  bool direct = false;  // best is the direct pattern's
};

// A lower bound on the spreading time at k chunks per NPU (per root when rooted) on channels that share no link,
// each transfer taking at least c (the cheapest channel's time for one chunk). All-Gather: NPU v receives (n - 1)k
// chunks, at most one per in-channel per c: ceil((n - 1)k / in-degree) c. Rooted: v's first chunk arrives no
// sooner than dist(root, v) c, then at most in-degree per c: (dist - 1 + ceil(k / in-degree)) c; and the root
// sends each chunk out once at least, out-degree per c, the last of them still ecc(root) - 1 hops from the
// farthest NPU: (ceil(k / out-degree) + ecc - 1) c. A count whose bound is not below the fastest trial so far
// cannot beat it. The point-to-point engine meets the All-Gather bound, or comes within one round of it, at every
// count of 1-64 on the rings, tori, hypercubes, meshes and fully connected graphs of the tests (1 GiB, 50 GB/s),
// so after a good count the larger ones, whose latencies add up, are ruled out without a run.
class SpreadBound {
 public:
  SpreadBound(const Topology& t, bool rooted, int root) : rooted_(rooted), n_(t.num_npus()) {
    const auto n = static_cast<std::size_t>(n_);
    std::vector<int> in(n, 0);
    for (const auto& ch : t.channels()) ++in[static_cast<std::size_t>(ch.dst)];
    if (!rooted) {
      min_in_ = *std::min_element(in.begin(), in.end());
      return;
    }
    std::vector<int> dist(n, -1);
    std::vector<int> q{root};
    dist[static_cast<std::size_t>(root)] = 0;
    for (std::size_t i = 0; i < q.size(); ++i)
      for (int ch : t.out_channels(q[i])) {
        const auto d = static_cast<std::size_t>(t.channels()[static_cast<std::size_t>(ch)].dst);
        if (dist[d] < 0) {
          dist[d] = dist[static_cast<std::size_t>(q[i])] + 1;
          q.push_back(static_cast<int>(d));
        }
      }
    for (std::size_t v = 0; v < n; ++v)
      if (dist[v] > 0 && in[v] > 0) targets_.emplace_back(dist[v], in[v]);
    root_out_ = static_cast<int>(t.out_channels(root).size());
    ecc_ = *std::max_element(dist.begin(), dist.end());
  }
  // Rounds of c at k chunks (0: no bound, e.g. an NPU the root does not reach).
  double rounds(int k) const {
    auto ceil_div = [](double a, double b) { return std::ceil(a / b); };
    if (!rooted_) return min_in_ > 0 ? ceil_div(static_cast<double>(n_ - 1) * k, min_in_) : 0;
    if (root_out_ == 0 || static_cast<int>(targets_.size()) != n_ - 1) return 0;
    double r = ceil_div(k, root_out_) + ecc_ - 1;
    for (const auto& [dist, in] : targets_) r = std::max(r, dist - 1 + ceil_div(k, in));
    return r;
  }

 private:
  bool rooted_;
  int n_, min_in_ = 0, root_out_ = 0, ecc_ = 0;
  std::vector<std::pair<int, int>> targets_;  // (distance from the root, in-degree) of the other NPUs
};

// Chunks per rank by trial: the spreading phase (All-Gather; the root's spreading for Broadcast/Reduce) at a
// few candidate chunk counts, stopping after two candidates without gain, when a chunk's transfer time on the
// fastest channel falls below its latency (alpha dominates: smaller chunks only add latency), or when the
// trials' work (chunk deliveries, over all trial seeds) would pass a budget.
//
// Candidates: 1, 2, 4, ... chunks per NPU (up to 64; 256 per root for Broadcast/Reduce). On the point-to-point
// engine also d, 2d and d / gcd(n - 1, d) (d: the most channels leaving one NPU): with one chunk per NPU an NPU
// receives n - 1 chunks over d links, ceil((n - 1) / d) rounds where (n - 1) / d would do (a 4-NPU ring takes
// 2 rounds where 1.5 would do: 1.333x the bound; 2 chunks per NPU: 1.000x). The trials run every seed of the
// synthesis, so the count kept is the one whose best seed is fastest; on the general engine only on small
// topologies (else two seeds of different look-ahead). Where the point-to-point trials at 1
// and 2 chunks alone would pass the budget (about 1,100 NPUs at 8 seeds) there is no trial: 1 chunk.
//
// Shortcuts (o.trial_shortcuts), which leave the count kept as it is: on the point-to-point engine, a candidate
// whose SpreadBound is not below the fastest trial so far would be a candidate without gain, so it counts as
// one (and its work against the budget) without being run; and where the trials ran every seed, the trial of
// the count kept is handed to the synthesis (*keep), which then has nothing to run again but its best seed,
// for the transfer list.
int choose_chunks(const Topology& topo, const SynthOptions& o, std::vector<std::pair<int, double>>* trials,
                  ChunkTrial* keep) {
  const int n = topo.num_npus();
  const bool rooted = o.collective == Collective::Broadcast || o.collective == Collective::Reduce;
  const bool general = o.engine == SynthOptions::Engine::General ||
                       (o.engine == SynthOptions::Engine::Auto && use_general_engine(topo, static_cast<std::size_t>(n)));
  const bool reverse_only = o.collective == Collective::ReduceScatter || o.collective == Collective::Reduce;
  Topology transposed;
  if (reverse_only) transposed = topo.transposed();
  const Topology& t = reverse_only ? transposed : topo;
  double min_lat = std::numeric_limits<double>::infinity(), max_bw = 0;
  std::vector<int> out_degree(static_cast<std::size_t>(n), 0);
  for (const auto& ch : t.channels()) {
    min_lat = std::min(min_lat, ch.latency_us);
    max_bw = std::max(max_bw, ch.bandwidth_gbps);
    ++out_degree[static_cast<std::size_t>(ch.src)];
  }
  SynthOptions trial = o;
  trial.record = false;
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < std::max(1, o.seeds); ++i) seeds.push_back(o.base_seed + static_cast<std::uint64_t>(i));
  constexpr double kBudget = 3e7;  // chunk deliveries over all trials (a few seconds)
  auto work_of = [&](int k) {
    return (rooted ? k : static_cast<double>(n) * k) * (n - 1) * static_cast<double>(seeds.size());
  };
  if (!general && !rooted && work_of(1) + work_of(2) > kBudget) return 1;
  const int max_k = rooted ? 256 : 64;
  std::vector<int> cand;
  for (int k = 1; k <= max_k; k *= 2) cand.push_back(k);
  if (!general && !rooted) {
    const int d = *std::max_element(out_degree.begin(), out_degree.end());
    for (const int k : {d, 2 * d, d / std::gcd(n - 1, d)})
      if (k > 1 && k <= max_k) cand.push_back(k);
    std::sort(cand.begin(), cand.end());
    cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  }
  if (general && seeds.size() > 2) {
    // The general engine's runs are the costly ones (their cost per delivery grows with the NPUs): every seed
    // of the synthesis only where every candidate's trial with them stays below 2·10^6 deliveries (a 40-port
    // switch at 8 seeds). On a switch the seeds differ most at 1 chunk per NPU (an 8-port switch at 64 MiB:
    // 1,177.9 us for 2 of 8 seeds, 1,346.2 for the rest), and two seeds chose 4 chunks at 1.047x the bound
    // where 1 chunk reaches 1.001x. On a 128-NPU dragonfly or a 64-NPU rail cluster every seed made the
    // synthesis 2.6-3.2x slower for the same count. Past it, two seeds of different look-ahead (import once,
    // none: see gather_general).
    constexpr double kGeneralEverySeed = 2e6;
    double ladder = 0;
    for (const int k : cand) ladder += work_of(k);
    if (ladder > kGeneralEverySeed) seeds = {o.base_seed, o.base_seed + (o.seeds > 3 ? 3 : 1)};
  }
  trial.seeds = static_cast<int>(seeds.size());
  // Where the trials ran every seed of the synthesis the count kept is the one whose best seed is fastest, and
  // the synthesis at it is that trial (*keep). The lower bound's shortcut needs each transfer to take its
  // channel's time for one chunk: the point-to-point engine's.
  const bool every_seed = static_cast<int>(seeds.size()) == std::max(1, o.seeds);
  const bool shortcuts = !general && o.trial_shortcuts;
  const bool hand_over = every_seed && o.trial_shortcuts;
  std::unique_ptr<SpreadBound> bound;
  if (shortcuts) bound = std::make_unique<SpreadBound>(t, rooted, o.root);
  double spent = 0;
  int best_k = 1, misses = 0;
  double best = std::numeric_limits<double>::infinity();
  for (const int k : cand) {
    const double chunks = rooted ? k : static_cast<double>(n) * k;
    const double chunk_bytes = o.bytes / chunks;
    const double work = work_of(k);
    if (k > 1 && (spent + work > kBudget || chunk_bytes < 1 || chunk_bytes / (max_bw * 1e3) < min_lat))
      break;
    spent += work;
    if (bound && best < std::numeric_limits<double>::infinity()) {
      double c = std::numeric_limits<double>::infinity();  // the cheapest channel's time for one chunk
      for (const auto& ch : t.channels()) c = std::min(c, ch.time_us(chunk_bytes));
      // (1 - 1e-9): the engine's times are sums of channel times, the bound a product
      if (bound->rounds(k) * c * (1 - 1e-9) >= best * (1 - 1e-4)) {
        if (++misses == 2) break;
        continue;
      }
    }
    std::vector<int> src(static_cast<std::size_t>(chunks));
    for (std::size_t c = 0; c < src.size(); ++c) src[c] = rooted ? o.root : static_cast<int>(c % static_cast<std::size_t>(n));
    std::vector<double> times;
    std::uint64_t best_seed = 0;
    bool direct = false;
    GatherResult r = best_gather(t, src, chunk_bytes, trial, &times, &best_seed, &direct, &seeds);
    if (trials) trials->emplace_back(k, r.time);
    if (r.time < best * (1 - 1e-4)) {
      best = r.time;
      best_k = k;
      misses = 0;
      if (hand_over && keep) {
        keep->valid = true;
        keep->transposed = reverse_only;
        keep->best = std::move(r);
        keep->seed_times = std::move(times);
        keep->best_seed = best_seed;
        keep->direct = direct;
      }
    } else if (++misses == 2) {
      break;
    }
  }
  return best_k;
}

// Refuse, before any work, a synthesis whose state or transfer list would not fit in o.max_memory_bytes.
void check_memory(const Topology& topo, const SynthOptions& o, double chunks) {
  const double n = topo.num_npus();
  const double cells = n * chunks;
  const bool general = o.engine == SynthOptions::Engine::General ||
                       (o.engine == SynthOptions::Engine::Auto && use_general_engine(topo, static_cast<std::size_t>(chunks)));
  const int threads = all_threads(o);
  const double parallel = std::max(1, std::min(threads, std::max(1, o.seeds)));
  // general engine: eta (8 B) + held bit + candidate queues (~4 B) per cell; Gather: a claim bit per cell
  const double state = parallel * (general ? cells * 12.2 : cells / 8) + 256.0 * static_cast<double>(topo.channels().size());
  const bool both = o.collective == Collective::AllReduce;
  const double deliveries = chunks * (n - 1) * (both ? 2 : 1);
  // the kept transfers of the best seed and of the seeds running, then the schedule's copy
  const double list = o.record ? deliveries * static_cast<double>(sizeof(Transfer)) * (parallel + 2) : 0;
  const double need = state + list;
  if (need <= o.max_memory_bytes) return;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s on %d NPUs with %.0f chunks would need about %s (%s of synthesis state%s), more than the %s "
                "allowed%s",
                to_string(o.collective), topo.num_npus(), chunks, memory_text(need).c_str(),
                memory_text(state).c_str(), o.record ? ", the rest for the transfer list" : "",
                memory_text(o.max_memory_bytes).c_str(),
                o.record ? "; --no-schedule or --stream keep no transfer list in memory" : "");
  throw Error(buf);
}

}  // namespace

void check_collective_size(double bytes) {
  if (!(bytes > 0) || !std::isfinite(bytes)) throw Error("collective size must be positive and finite");
  if (bytes > kMaxCollectiveBytes) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "collective size %.6g bytes is above the largest supported, 2^50 bytes (1 PiB): the times "
                  "(microseconds, double precision) of a collective that large cannot resolve link latencies",
                  bytes);
    throw Error(buf);
  }
}

void check_root(int root, int nranks) {
  if (root < 0 || root >= nranks)
    throw Error("root rank " + std::to_string(root) + " is out of range: the topology has " + std::to_string(nranks) +
                " NPUs (ranks 0.." + std::to_string(nranks - 1) + ")");
}

namespace {

// Validate the options, choose the chunks, and fill the schedule's header (no transfers). *kept: the chunk
// trial of the count chosen, where the synthesis can take it (see choose_chunks).
Schedule prepare(const Topology& topo, const SynthOptions& o0, SynthOptions& o, SynthStats& st, ChunkTrial* kept) {
  if (!topo.finalized()) throw Error("topology not finalized");
  if (o0.chunks_per_rank < 0) throw Error("chunks per rank must be >= 1 (0: choose automatically)");
  if (o0.seeds < 0) throw Error("seeds must be >= 0");
  if (o0.threads < 0) throw Error("threads must be >= 0 (0: all cores)");
  check_collective_size(o0.bytes);
  const int n = topo.num_npus();
  if (n < 2)
    throw Error("a collective needs at least 2 NPUs; topology '" + topo.name + "' has " + std::to_string(n));
  check_root(o0.root, n);
  o = o0;
  if (o.chunks_per_rank == 0) o.chunks_per_rank = choose_chunks(topo, o, &st.chunk_trials, kept);
  Schedule s;
  s.collective = o.collective;
  s.algorithm = "tacos";
  s.nranks = n;
  s.chunks_per_rank = o.chunks_per_rank;
  s.root = o.root;
  s.bytes = o.bytes;
  const bool rooted = o.collective == Collective::Broadcast || o.collective == Collective::Reduce;
  const long long C = rooted ? o.chunks_per_rank : static_cast<long long>(n) * o.chunks_per_rank;
  if (C > kMaxChunks)
    throw Error("too many chunks: " + std::to_string(C) + ", at most " + std::to_string(kMaxChunks) +
                " (NPUs x chunks per NPU)");
  s.nchunks = static_cast<int>(C);
  s.chunk_bytes = o.bytes / static_cast<double>(C);
  s.owner.resize(static_cast<std::size_t>(C));
  for (long long c = 0; c < C; ++c) s.owner[static_cast<std::size_t>(c)] = rooted ? o.root : static_cast<int>(c % n);
  if (o.max_memory_bytes > 0) check_memory(topo, o, static_cast<double>(C));
  st.chunks_per_rank = o.chunks_per_rank;
  return s;
}

bool needs_reverse(Collective c) {
  return c == Collective::ReduceScatter || c == Collective::AllReduce || c == Collective::Reduce;
}
bool needs_forward(Collective c) {
  return c == Collective::AllGather || c == Collective::AllReduce || c == Collective::Broadcast;
}

// Routes of the reductions, in their direction, by channel of the spreading topology (topo's own channels
// reversed link by link where every link has a twin, else the transposed topology's channels reversed).
std::vector<std::vector<int>> reduction_routes(const Topology& spread_topo, const std::vector<int>& partner) {
  std::vector<std::vector<int>> rev_routes;
  for (const auto& ch : spread_topo.channels()) {
    std::vector<int> r;
    for (auto it = ch.route.rbegin(); it != ch.route.rend(); ++it)
      r.push_back(partner.empty() ? *it : partner[static_cast<std::size_t>(*it)]);
    rev_routes.push_back(std::move(r));
  }
  return rev_routes;
}

// The spreading run of the synthesis on t (`transposed`: the spreading topology's transpose): the chunk trial
// of the count chosen where it ran on the same topology, else the best of the synthesis's seeds. The trial
// kept no transfer list: with o.record its best seed runs again, recording (the same run: a seed's schedule
// does not depend on the threads or on recording).
GatherResult spread(const Topology& t, bool transposed, const Schedule& s, const SynthOptions& o,
                    const ChunkTrial& kept, std::vector<double>* seed_times, std::uint64_t* best_seed,
                    bool* direct) {
  if (!kept.valid || kept.transposed != transposed)
    return best_gather(t, s.owner, s.chunk_bytes, o, seed_times, best_seed, direct);
  if (seed_times) *seed_times = kept.seed_times;
  if (best_seed) *best_seed = kept.best_seed;
  if (direct) *direct = kept.direct;
  if (!o.record) return kept.best;
  if (kept.direct) return direct_pattern_again(t, s.owner, s.chunk_bytes, o);
  return gather(t, s.owner, s.chunk_bytes, kept.best_seed, true, all_threads(o), o);
}

}  // namespace

Schedule synthesize(const Topology& topo, const SynthOptions& o0, SynthStats* stats) {
  SynthStats st;
  SynthOptions o;
  ChunkTrial kept;
  Schedule s = prepare(topo, o0, o, st, &kept);
  const bool need_reverse = needs_reverse(o.collective), need_forward = needs_forward(o.collective);
  GatherResult fwd, rev_own;
  const GatherResult* rev = &rev_own;
  bool direct_fwd = false, direct_rev = false;
  std::vector<std::vector<int>> rev_routes;
  if (need_forward) {
    fwd = spread(topo, false, s, o, kept, &st.seed_times, &st.best_seed, &direct_fwd);
    st.ag_time_us = fwd.time;
    st.max_queue_entries = fwd.max_queue;
  }
  if (need_reverse) {
    const auto partner = symmetric_partner(topo);
    if (!partner.empty() && need_forward) {
      rev = &fwd;  // transpose == topology: the same spreading schedule, reversed, is the reduction
    } else if (!partner.empty()) {
      rev_own = spread(topo, false, s, o, kept, &st.seed_times, &st.best_seed, &direct_rev);
      st.max_queue_entries = rev_own.max_queue;
    } else {
      const Topology tt = topo.transposed();
      std::vector<double> times;
      rev_own = spread(tt, true, s, o, kept, need_forward ? &times : &st.seed_times,
                       need_forward ? nullptr : &st.best_seed, &direct_rev);
      st.max_queue_entries = std::max(st.max_queue_entries, rev_own.max_queue);
      rev_routes = reduction_routes(tt, {});
    }
    if (!partner.empty()) rev_routes = reduction_routes(topo, partner);
    st.rs_time_us = rev->time;
  }
  s.seed = st.best_seed;
  st.direct_pattern = direct_fwd || (need_reverse && (rev == &fwd ? direct_fwd : direct_rev));
  for (const GatherResult* g : std::initializer_list<const GatherResult*>{need_forward ? &fwd : nullptr, need_reverse && rev != &fwd ? rev : nullptr})
    if (g) {
      st.resent += g->resent;
      st.replaced += g->replaced;
      st.cancelled += g->cancelled;
    }
  if (o.record) s.transfers.reserve((need_reverse ? rev->transfers.size() : 0) + (need_forward ? fwd.transfers.size() : 0));
  if (need_reverse) append_reversed(*rev, rev_routes, rev->time, s, 0.0);
  if (need_forward) append_forward(fwd, topo, s, need_reverse ? rev->time : 0.0);
  s.time_us = (need_reverse ? rev->time : 0.0) + (need_forward ? fwd.time : 0.0);
  st.time_us = s.time_us;
  st.transfers = (need_reverse ? rev->count : 0) + (need_forward ? fwd.count : 0);
  if (!o.record) s.routes.clear();
  if (need_reverse && o.record) assign_reduction_order(s);
  // Cancelled copies leave their links idle for a while: replayed as early as data and links allow (the same
  // transfers, links and orders), the schedule may finish sooner.
  if (o.record && st.cancelled > 0) {
    SimResult r = simulate(topo, s);
    if (r.time_us < s.time_us * (1 - 1e-12)) {
      st.uncompacted_time_us = s.time_us;
      r.timed.seed = s.seed;
      s = std::move(r.timed);
      st.time_us = s.time_us;
    }
  }
  if (stats) *stats = st;
  return s;
}

Schedule synthesize_to_stream(const Topology& topo, const SynthOptions& o0, const std::string& path, SynthStats* stats,
                              std::uint64_t* bytes) {
  SynthStats st;
  SynthOptions o;
  SynthOptions o_nr = o0;
  o_nr.record = false;
  ChunkTrial kept;
  Schedule s = prepare(topo, o_nr, o, st, &kept);
  const bool need_reverse = needs_reverse(o.collective), need_forward = needs_forward(o.collective);
  const auto partner = symmetric_partner(topo);
  const bool shared_run = need_reverse && need_forward && !partner.empty();
  std::unique_ptr<Topology> tt;
  if (need_reverse && partner.empty()) tt = std::make_unique<Topology>(topo.transposed());
  const Topology& rev_topo = tt ? *tt : topo;
  // The best seed of each spreading run, and whether the direct pattern beats it, found without writing (one
  // seed and no pattern to weigh: nothing to search; the chunk trial of the count chosen: already found).
  auto best_seed = [&](const Topology& t, bool transposed, std::vector<double>* times, bool* direct) {
    *direct = false;
    if (o.seeds <= 1 && !direct_pattern_considered(t, s.owner.size(), o)) return o.base_seed;
    std::uint64_t b = o.base_seed;
    spread(t, transposed, s, o, kept, times, &b, direct);
    return b;
  };
  // A spreading run written to the stream: the seed's, or the direct pattern's.
  const int threads = all_threads(o);
  auto write_run = [&](const Topology& t, std::uint64_t seed, bool direct, const Sink& sink) {
    if (!direct) return gather(t, s.owner, s.chunk_bytes, seed, false, threads, o, &sink);
    GatherResult d = direct_pattern_again(t, s.owner, s.chunk_bytes, o);
    sink(d.transfers);
    return d;
  };
  bool rev_direct = false, fwd_direct = false;
  std::vector<StreamSection> sections;
  auto costs = [&](const Topology& t) {
    std::vector<double> c;
    for (const auto& ch : t.channels()) c.push_back(ch.time_us(s.chunk_bytes));
    return c;
  };
  std::uint64_t rev_seed = 0, fwd_seed = 0;
  if (need_reverse) {
    StreamSection sec;
    sec.mirror = true;
    sec.routes = reduction_routes(rev_topo, partner);
    sec.route_us = costs(rev_topo);
    sections.push_back(std::move(sec));
    rev_seed = best_seed(rev_topo, tt != nullptr, &st.seed_times, &rev_direct);
  }
  if (need_forward) {
    StreamSection sec;
    for (const auto& ch : topo.channels()) sec.routes.push_back(ch.route);
    sec.route_us = costs(topo);
    if (shared_run) sec.blocks_of = 0;
    sections.push_back(std::move(sec));
    if (shared_run) {
      fwd_seed = rev_seed;
      fwd_direct = rev_direct;
    } else {
      fwd_seed = best_seed(topo, false, &st.seed_times, &fwd_direct);
    }
  }
  st.direct_pattern = rev_direct || fwd_direct;
  s.seed = need_forward ? fwd_seed : rev_seed;
  st.best_seed = s.seed;
  StreamWriter w(path, stream_header_json(s, topo, sections));
  const Sink sink = [&w](std::vector<Transfer>& ts) { w.write(ts); };
  double t_rev = 0, t_fwd = 0;
  if (need_reverse) {
    const GatherResult r = write_run(rev_topo, rev_seed, rev_direct, sink);
    w.end_section(r.time);
    t_rev = r.time;
    st.rs_time_us = r.time;
    st.transfers += r.count;
    st.max_queue_entries = r.max_queue;
  }
  if (need_forward) {
    if (shared_run) {
      t_fwd = t_rev;
      st.transfers *= 2;
    } else {
      const GatherResult r = write_run(topo, fwd_seed, fwd_direct, sink);
      w.end_section(r.time);
      t_fwd = r.time;
      st.transfers += r.count;
      st.max_queue_entries = std::max(st.max_queue_entries, r.max_queue);
    }
    st.ag_time_us = t_fwd;
  }
  const std::uint64_t written = w.finish();
  if (bytes) *bytes = written;
  s.time_us = t_rev + t_fwd;
  st.time_us = s.time_us;
  if (stats) *stats = st;
  return s;
}

}  // namespace autoccl::synth
