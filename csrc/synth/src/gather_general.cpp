// The general matching engine (TACOS, event driven): channels that share links (switch ports) or differ in cost.
// What it does and how it compares with the disjoint engine: the comment at the top of synthesizer.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>
#include <vector>

#include "gather.h"

namespace autoccl::synth::engines {

namespace {

struct Rng {  // splitmix64: small, fast, deterministic across platforms
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // uniform in [0, n) for n < 2^32 (multiply-shift, no division)
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(((next() >> 32) * n) >> 32); }
};

}  // namespace

// Spread chunks (chunk c starts at src[c]) to every NPU on any topology: channels may share links (switch
// ports) and differ in cost. Every free channel is matched in one global order per event, lowest cost first.
//
// A destination counts the first arrival of a chunk. A chunk already promised to d (in flight) may be sent to d
// again over a channel that delivers it strictly earlier; when the first copy arrives, the slower transfers of
// that chunk into d still in flight are cancelled: they never appear in the schedule, and their channels are
// free from that instant (so the schedule stays causal: nothing is sent before its data is there). A channel
// s->d also never takes a chunk that d will get strictly earlier over a cheaper channel p->d from an NPU p
// that holds it or has it in flight (the look-ahead), so slow links carry only what no fast path brings first.
// Policies by seed, for diversity (best of k keeps the best), seed % 8: which candidate a channel takes
// (the oldest; a random one; the one the fewest NPUs hold among its 16 oldest) and which look-ahead it applies:
//   import once  skip a chunk that an NPU with a cheaper channel into d has, or will have, no later than it
//                would land at d (a slow cut carries each chunk into a group once);
//   earliest     skip it only if that cheaper path delivers it strictly earlier;
//   always       no look-ahead, and send a chunk again even if a copy is in flight (as TACOS does): the later
//                copy is replaced or cancelled when the first arrives;
//   none         a chunk is claimed for d when matched, never sent twice.
// Seeds 1..4 (the default) are oldest/import once, oldest/always, rarest/import once, oldest/none: import once
// wins on hierarchies (hosts behind slow rails, dragonfly groups), always and none on tori and meshes whose
// slow links are part of every NPU's own bandwidth.
GatherResult gather_general(const Topology& t, const std::vector<int>& src, double chunk_bytes,
                            std::uint64_t seed, bool record, const Sink* sink, Progress progress) {
  record = record || sink;
  const int n = t.num_npus();
  const std::size_t C = src.size();
  const auto& chans = t.channels();
  const std::size_t nch = chans.size();
  enum class Pick { Oldest, Random, Rarest };
  enum class Ahead { ImportOnce, Earliest, None, Always };
  static constexpr Pick kPick[8] = {Pick::Oldest, Pick::Oldest, Pick::Oldest, Pick::Rarest,
                                    Pick::Oldest, Pick::Random, Pick::Random, Pick::Rarest};
  static constexpr Ahead kAhead[8] = {Ahead::Earliest, Ahead::ImportOnce, Ahead::Always,   Ahead::ImportOnce,
                                      Ahead::None,     Ahead::ImportOnce, Ahead::Always,   Ahead::Always};
  const Pick pick_policy = kPick[seed % 8];
  const Ahead ahead = kAhead[seed % 8];
  const bool random_pick = pick_policy == Pick::Random, rarest = pick_policy == Pick::Rarest;
  const bool speculate = ahead != Ahead::None;
  constexpr std::size_t kRarestWindow = 16;
  const double inf = std::numeric_limits<double>::infinity();
  // Per (rank, chunk), chunk-major (a chunk's arrival touches its neighbours' cells, close in rank order):
  // eta = when the chunk arrives there (held: its arrival; promised: the earliest in-flight arrival; inf:
  // neither); held = it has arrived.
  const auto N = static_cast<std::size_t>(n);
  const auto cell = [N](int r, std::size_t c) { return c * N + static_cast<std::size_t>(r); };
  std::vector<double> eta(static_cast<std::size_t>(n) * C, inf);
  std::vector<std::uint64_t> held((static_cast<std::size_t>(n) * C + 63) / 64, 0);
  auto is_held = [&](int r, std::size_t c) {
    const std::size_t i = cell(r, c);
    return (held[i >> 6] >> (i & 63)) & 1ULL;
  };
  auto set_held = [&](int r, std::size_t c) {
    const std::size_t i = cell(r, c);
    held[i >> 6] |= 1ULL << (i & 63);
  };
  std::vector<std::uint32_t> holders(C, 1);

  std::vector<double> cost(nch);
  for (std::size_t i = 0; i < nch; ++i) cost[i] = chans[i].time_us(chunk_bytes);
  std::vector<std::vector<std::int32_t>> q(nch);
  std::vector<std::size_t> qhead(nch, 0);
  std::vector<char> busy(nch, 0), dirty_flag(nch, 0);
  std::vector<std::int32_t> cur(nch, -1);
  std::vector<double> cur_start(nch, 0);
  std::vector<std::uint32_t> gen(nch, 0);
  std::vector<char> link_busy(static_cast<std::size_t>(t.num_links()), 0);
  std::vector<std::vector<int>> link_users(static_cast<std::size_t>(t.num_links()));
  for (std::size_t i = 0; i < nch; ++i)
    for (int l : chans[i].route) link_users[static_cast<std::size_t>(l)].push_back(static_cast<int>(i));
  std::vector<char> exclusive(nch, 1);
  for (std::size_t i = 0; i < nch; ++i)
    for (int l : chans[i].route) exclusive[i] = exclusive[i] && link_users[static_cast<std::size_t>(l)].size() == 1;
  std::vector<int> dirty;
  auto mark = [&](int ch) {
    if (!dirty_flag[static_cast<std::size_t>(ch)]) {
      dirty_flag[static_cast<std::size_t>(ch)] = 1;
      dirty.push_back(ch);
    }
  };
  std::size_t qentries = 0, max_q = 0;
  std::vector<std::int32_t> ch_src(nch), ch_dst(nch);
  for (std::size_t i = 0; i < nch; ++i) {
    ch_src[i] = chans[i].src;
    ch_dst[i] = chans[i].dst;
  }
  // In-channels of each rank cheaper than the cheapest... all of them, sorted by cost (the look-ahead's scan).
  std::vector<std::vector<int>> in_sorted(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    in_sorted[static_cast<std::size_t>(r)] = t.in_channels(r);
    std::sort(in_sorted[static_cast<std::size_t>(r)].begin(), in_sorted[static_cast<std::size_t>(r)].end(),
              [&](int a, int b) { return cost[static_cast<std::size_t>(a)] < cost[static_cast<std::size_t>(b)]; });
  }
  auto push_candidates = [&](int r, std::int32_t c, double now) {
    for (int och : t.out_channels(r)) {
      const auto oc = static_cast<std::size_t>(och);
      const int d = ch_dst[oc];
      if (is_held(d, static_cast<std::size_t>(c))) continue;
      const double e = eta[cell(d, static_cast<std::size_t>(c))];
      if (ahead == Ahead::Always ? false : speculate ? e <= now + cost[oc] : e < inf) continue;
      q[oc].push_back(c);
      ++qentries;
      if (!busy[oc]) mark(och);
    }
  };
  for (std::size_t c = 0; c < C; ++c) {
    set_held(src[c], c);
    eta[cell(src[c], c)] = 0;
  }
  for (std::size_t c = 0; c < C; ++c) push_candidates(src[c], static_cast<std::int32_t>(c), 0.0);
  max_q = qentries;

  // Is chunk c worth sending over channel ch now? (Not held by d; no copy promised to d that arrives as early;
  // no cheaper channel into d brings it strictly earlier from an NPU that holds it or has it in flight.)
  auto useful = [&](std::size_t ch, std::int32_t c, double now) {
    const int d = ch_dst[ch];
    const auto cu = static_cast<std::size_t>(c);
    if (is_held(d, cu)) return false;
    const double e = eta[cell(d, cu)];
    if (!speculate) return e == inf;
    const double arrive = now + cost[ch];
    const double eps = 1e-9 * std::max(1.0, arrive);
    if (ahead == Ahead::Always) return true;
    if (e <= arrive + eps) return false;
    for (int qc : in_sorted[static_cast<std::size_t>(d)]) {
      const auto qu = static_cast<std::size_t>(qc);
      if (cost[qu] >= cost[ch] - eps) break;
      const double ep = eta[cell(ch_src[qu], cu)];
      if (ep == inf) continue;
      const double at = std::max(now, ep);
      if (ahead == Ahead::ImportOnce) {
        // p has the chunk no later than it would land at d over ch: p->d brings it at most cost(p->d) after
        // that, without spending the dearer channel.
        if (at <= arrive + eps) return false;
      } else {
        const double from = busy[qu] ? std::max(at, cur_start[qu] + cost[qu]) : at;
        if (from + cost[qu] + eps < arrive) return false;
      }
    }
    return true;
  };

  struct Ev {
    double t;
    std::int32_t ch;
    std::uint32_t gen;
    bool operator>(const Ev& o) const { return t > o.t; }
  };
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> events;
  GatherResult res;
  Rng rng(seed);
  std::vector<std::pair<std::pair<double, std::uint64_t>, int>> order;

  auto match = [&](double now) {
    order.clear();
    for (int ch : dirty) order.push_back({{cost[static_cast<std::size_t>(ch)], rng.next()}, ch});
    std::sort(order.begin(), order.end());
    for (std::size_t i = 0; i < order.size(); ++i) dirty[i] = order[i].second;
    for (int ch : dirty) {
      const auto cu = static_cast<std::size_t>(ch);
      dirty_flag[cu] = 0;
      if (busy[cu]) continue;
      if (!exclusive[cu]) {
        bool free = true;
        for (int l : chans[cu].route) free = free && !link_busy[static_cast<std::size_t>(l)];
        if (!free) continue;
      }
      auto& qq = q[cu];
      std::size_t& h = qhead[cu];
      std::int32_t pick = -1;
      if (rarest) {
        std::size_t best = 0;
        std::uint32_t best_holders = 0;
        for (std::size_t j = h; j < qq.size() && j < h + kRarestWindow;) {
          if (!useful(cu, qq[j], now)) {  // drop it: swap in the head's entry
            std::swap(qq[j], qq[h]);
            ++h;
            --qentries;
            if (best == h - 1 && pick >= 0) best = j;
            ++j;
            continue;
          }
          const std::uint32_t hc = holders[static_cast<std::size_t>(qq[j])];
          if (pick < 0 || hc < best_holders) {
            pick = qq[j];
            best = j;
            best_holders = hc;
          }
          ++j;
        }
        if (pick >= 0) {
          std::swap(qq[best], qq[h]);
          ++h;
          --qentries;
        }
      } else {
        while (h < qq.size()) {
          if (random_pick) std::swap(qq[h + rng.below(qq.size() - h)], qq[h]);
          const std::int32_t c = qq[h++];
          --qentries;
          if (useful(cu, c, now)) {
            pick = c;
            break;
          }
        }
      }
      if (h == qq.size()) {
        qq.clear();
        h = 0;
      } else if (h > 1024 && h * 2 > qq.size()) {
        qq.erase(qq.begin(), qq.begin() + static_cast<std::ptrdiff_t>(h));
        h = 0;
      }
      if (pick < 0) continue;
      const int d = ch_dst[cu];
      if (eta[cell(d, static_cast<std::size_t>(pick))] < inf) ++res.resent;
      eta[cell(d, static_cast<std::size_t>(pick))] = now + cost[cu];
      busy[cu] = 1;
      cur[cu] = pick;
      cur_start[cu] = now;
      ++gen[cu];
      if (!exclusive[cu])
        for (int l : chans[cu].route) link_busy[static_cast<std::size_t>(l)] = 1;
      events.push({now + cost[cu], ch, gen[cu]});
    }
    dirty.clear();
  };

  // Free channel ch (its transfer ended or was cancelled) and wake the channels that share its links.
  auto release = [&](std::size_t cu) {
    busy[cu] = 0;
    cur[cu] = -1;
    if (exclusive[cu]) {
      if (qhead[cu] < q[cu].size()) mark(static_cast<int>(cu));
      return;
    }
    for (int l : chans[cu].route) {
      link_busy[static_cast<std::size_t>(l)] = 0;
      for (int u : link_users[static_cast<std::size_t>(l)])
        if (!busy[static_cast<std::size_t>(u)] && qhead[static_cast<std::size_t>(u)] < q[static_cast<std::size_t>(u)].size())
          mark(u);
    }
  };

  // A replacement for the chunk in flight on channel ch: the oldest candidate of its queue that its source
  // held when the transfer started and that reaches d first this way.
  auto replace = [&](std::size_t ch) {
    const int d = ch_dst[ch], sr = ch_src[ch];
    const double start = cur_start[ch], end = start + cost[ch];
    const double eps = 1e-9 * std::max(1.0, end);
    auto& qq = q[ch];
    for (std::size_t j = qhead[ch]; j < qq.size() && j < qhead[ch] + kRarestWindow; ++j) {
      const auto y = static_cast<std::size_t>(qq[j]);
      if (!is_held(sr, y) || eta[cell(sr, y)] > start + eps) continue;
      if (is_held(d, y) || eta[cell(d, y)] <= end + eps) continue;
      cur[ch] = qq[j];
      eta[cell(d, y)] = end;
      std::swap(qq[j], qq[qhead[ch]]);
      ++qhead[ch];
      --qentries;
      return true;
    }
    return false;
  };

  match(0.0);
  std::vector<int> batch;
  std::uint64_t reported = 0;
  while (!events.empty()) {
    if (progress.stop && progress.stop->load(std::memory_order_relaxed)) throw Interrupted();
    if (progress.deliveries && res.count - reported >= Progress::kDeliveriesStep) {
      progress.deliveries->fetch_add(res.count - reported, std::memory_order_relaxed);
      reported = res.count;
    }
    const double now = events.top().t;
    const double eps = 1e-9 * std::max(1.0, now);
    batch.clear();
    while (!events.empty() && events.top().t <= now + eps) {
      const Ev e = events.top();
      events.pop();
      if (busy[static_cast<std::size_t>(e.ch)] && gen[static_cast<std::size_t>(e.ch)] == e.gen) batch.push_back(e.ch);
    }
    for (std::size_t i = batch.size(); i > 1; --i) std::swap(batch[i - 1], batch[rng.below(i)]);
    for (int ch : batch) {
      const auto cu = static_cast<std::size_t>(ch);
      if (!busy[cu]) continue;  // cancelled by an arrival earlier in this batch
      const std::int32_t c = cur[cu];
      const auto cc = static_cast<std::size_t>(c);
      const int d = ch_dst[cu];
      const double start = cur_start[cu];
      release(cu);
      if (is_held(d, cc)) continue;  // a copy arrived at the same instant: this one is dropped too
      set_held(d, cc);
      eta[cell(d, cc)] = start + cost[cu];
      ++holders[cc];
      ++res.count;
      if (record) {
        Transfer tr;
        tr.chunk = c;
        tr.src = ch_src[cu];
        tr.dst = d;
        tr.start = start;
        tr.end = start + cost[cu];
        tr.route = ch;
        res.transfers.push_back(tr);
        if (sink && res.transfers.size() >= 65536) (*sink)(res.transfers);
      }
      res.time = std::max(res.time, start + cost[cu]);
      // First arrival: each slower copy of c still in flight into d carries instead a chunk its source
      // already held when it started and d has not got by its end (the transfer is the same link at the same
      // times, so the schedule stays causal); failing that it is cancelled.
      if (speculate)
        for (int other : t.in_channels(d)) {
          const auto ou = static_cast<std::size_t>(other);
          if (!busy[ou] || cur[ou] != c) continue;
          if (replace(ou)) {
            ++res.replaced;
          } else {
            ++res.cancelled;
            ++gen[ou];
            release(ou);
          }
        }
      push_candidates(d, c, now);
    }
    max_q = std::max(max_q, qentries);
    match(now);
  }
  if (sink && !res.transfers.empty()) (*sink)(res.transfers);
  // the rest below a step: a run of fewer deliveries than a step (a 64-port switch's 4,032) showed none
  if (progress.deliveries) progress.deliveries->fetch_add(res.count - reported, std::memory_order_relaxed);
  res.max_queue = max_q;
  return res;
}

}  // namespace autoccl::synth::engines
