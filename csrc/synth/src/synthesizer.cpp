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
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <queue>
#include <thread>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "autoccl/synth/synth.h"

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

// Min-queue of (time, channel): FIFOs per cost class (nclasses > 0) or a binary heap (nclasses == 0).
class EventQueue {
 public:
  explicit EventQueue(std::size_t nclasses) : fifo_(nclasses), head_(nclasses, 0) {}
  void push(double t, int ch, int cls) {
    if (fifo_.empty()) {
      heap_.push({t, ch});
      return;
    }
    fifo_[static_cast<std::size_t>(cls)].push_back({t, ch});
    ++size_;
  }
  bool empty() const { return fifo_.empty() ? heap_.empty() : size_ == 0; }
  double top_time() { return fifo_.empty() ? heap_.top().first : fifo_[best()][head_[best_]].first; }
  int pop() {
    if (fifo_.empty()) {
      const int ch = heap_.top().second;
      heap_.pop();
      return ch;
    }
    const std::size_t b = best();
    const int ch = fifo_[b][head_[b]++].second;
    --size_;
    if (head_[b] == fifo_[b].size()) {
      fifo_[b].clear();
      head_[b] = 0;
    } else if (head_[b] > 4096 && head_[b] * 2 > fifo_[b].size()) {
      fifo_[b].erase(fifo_[b].begin(), fifo_[b].begin() + static_cast<std::ptrdiff_t>(head_[b]));
      head_[b] = 0;
    }
    return ch;
  }

 private:
  using Ev = std::pair<double, int>;
  std::vector<std::vector<Ev>> fifo_;
  std::vector<std::size_t> head_;
  std::size_t size_ = 0, best_ = 0;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> heap_;
  std::size_t best() {
    double bt = 0;
    bool any = false;
    for (std::size_t i = 0; i < fifo_.size(); ++i) {
      if (head_[i] == fifo_[i].size()) continue;
      const double ti = fifo_[i][head_[i]].first;
      if (!any || ti < bt) {
        bt = ti;
        best_ = i;
        any = true;
      }
    }
    return best_;
  }
};

struct GatherResult {
  double time = 0;
  std::vector<Transfer> transfers;  // route = channel id
  std::uint64_t count = 0;
  std::size_t max_queue = 0;
  std::uint64_t resent = 0, replaced = 0, cancelled = 0;  // general engine: copies sent again faster, and what
                                                          // became of the slower ones
};

// Takes transfers as they are made (route = channel id) and empties the vector; the engines then keep none.
using Sink = std::function<void(std::vector<Transfer>&)>;

inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The claim bits of n destinations x m chunks, zeroed. Stored in 512-bit tiles (one cache line each) of 16
// consecutive destinations x 32 consecutive chunks: destinations next to each other in rank order test the
// same chunks at about the same time (a chunk spreads to a rank's neighbours one step later), so a tile
// fetched for one destination is often still cached for the next ones. On a 40,000-NPU mesh this cuts the
// misses of these tests about 2.7x against one row per destination (simulated 1-4 MiB caches). Large
// allocations ask for transparent huge pages (fewer TLB misses on the random accesses).
class ClaimBits {
 public:
  // The bits of one destination: word(c) holds chunk c's bit at position shift | (c & 31).
  struct Row {
    std::uint64_t* base;
    unsigned shift;
    std::size_t word(std::uint32_t c) const { return static_cast<std::size_t>(c >> 5) << 3; }
    bool test(std::uint32_t c) const { return (base[word(c)] >> (shift | (c & 31))) & 1ULL; }
    void set(std::uint32_t c) const { base[word(c)] |= 1ULL << (shift | (c & 31)); }
  };
  ClaimBits(std::size_t n, std::size_t m) : tiles_per_group_((m + 31) / 32) {
    const std::size_t huge = std::size_t{2} << 20;
    std::size_t bytes = (n + 15) / 16 * tiles_per_group_ * 64;
    const std::size_t align = bytes >= 2 * huge ? huge : 64;
    bytes = std::max<std::size_t>((bytes + align - 1) / align * align, align);
    data_ = static_cast<std::uint64_t*>(std::aligned_alloc(align, bytes));
    if (!data_) throw Error("out of memory for the claim bits (" + std::to_string(bytes >> 20) + " MiB)");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == huge) madvise(data_, bytes, MADV_HUGEPAGE);  // a hint; ignored where unsupported
#endif
    std::memset(data_, 0, bytes);
  }
  ClaimBits(const ClaimBits&) = delete;
  ClaimBits& operator=(const ClaimBits&) = delete;
  ~ClaimBits() { std::free(data_); }
  Row row(std::size_t d) const {
    return {data_ + (d >> 4) * tiles_per_group_ * 8 + ((d & 15) >> 1), static_cast<unsigned>((d & 1) << 5)};
  }

 private:
  std::size_t tiles_per_group_;
  std::uint64_t* data_ = nullptr;
};

// Sense-reversing barrier: spins briefly, then yields (the machine may be shared).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    const unsigned g = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    for (int spins = 0; gen_.load(std::memory_order_acquire) == g; ++spins)
      if (spins > 2000) std::this_thread::yield();
  }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<unsigned> gen_{0};
};

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
                            std::uint64_t seed, bool record, const Sink* sink) {
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
  while (!events.empty()) {
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
  res.max_queue = max_q;
  return res;
}

// Blocks of 2^k 32-bit entries for the arrival lists, carved from slabs that ask for transparent huge pages:
// the lists are read at scattered places, and on 4 KiB pages nearly every such read would miss the TLB.
// Freed blocks are kept per size for reuse. One arena per thread (no locking).
class Arena {
 public:
  std::uint32_t* get(unsigned k) {
    auto& f = free_[k];
    if (!f.empty()) {
      std::uint32_t* b = f.back();
      f.pop_back();
      return b;
    }
    const std::size_t bytes = std::size_t{4} << k;
    if (bytes > left_) {
      const std::size_t huge = std::size_t{2} << 20;
      const std::size_t size = std::max<std::size_t>(16 * huge, (bytes + huge - 1) / huge * huge);
      void* slab = std::aligned_alloc(huge, size);
      if (!slab) throw Error("out of memory for the arrival lists");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      madvise(slab, size, MADV_HUGEPAGE);
#endif
      slabs_.emplace_back(static_cast<char*>(slab));
      cur_ = static_cast<char*>(slab);
      left_ = size;
    }
    auto* b = reinterpret_cast<std::uint32_t*>(cur_);
    cur_ += bytes;
    left_ -= bytes;
    return b;
  }
  void put(std::uint32_t* b, unsigned k) { free_[k].push_back(b); }

 private:
  struct Free {
    void operator()(char* q) const { std::free(q); }
  };
  std::vector<std::unique_ptr<char, Free>> slabs_;
  char* cur_ = nullptr;
  std::size_t left_ = 0;
  std::vector<std::uint32_t*> free_[32];
};

// Pending completions of one thread: a FIFO per cost class (transfers start at non-decreasing times, so the
// completions of one cost come in order), or one heap when there are more than 16 distinct costs.
class Completions {
 public:
  explicit Completions(std::size_t nclasses = 0) : fifo_(nclasses), head_(nclasses, 0) {}
  void push(double t, std::int32_t ch, std::uint32_t cls) {
    if (fifo_.empty()) {
      heap_.push_back({t, ch});
      std::push_heap(heap_.begin(), heap_.end(), std::greater<Ev>());
    } else {
      fifo_[cls].push_back({t, ch});
    }
  }
  double next() const {
    double t = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < fifo_.size(); ++i)
      if (head_[i] < fifo_[i].size()) t = std::min(t, fifo_[i][head_[i]].first);
    if (!heap_.empty()) t = std::min(t, heap_.front().first);
    return t;
  }
  // Move every completion at or before `limit` to `out`: class by class, each in completion order.
  void take(double limit, std::vector<std::int32_t>& out) {
    for (std::size_t i = 0; i < fifo_.size(); ++i) {
      auto& f = fifo_[i];
      std::size_t h = head_[i];
      while (h < f.size() && f[h].first <= limit) out.push_back(f[h++].second);
      if (h == f.size()) {
        f.clear();
        h = 0;
      } else if (h > 4096 && h * 2 > f.size()) {
        f.erase(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(h));
        h = 0;
      }
      head_[i] = h;
    }
    while (!heap_.empty() && heap_.front().first <= limit) {
      out.push_back(heap_.front().second);
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<Ev>());
      heap_.pop_back();
    }
  }

 private:
  using Ev = std::pair<double, std::int32_t>;
  std::vector<std::vector<Ev>> fifo_;
  std::vector<std::size_t> head_;
  std::vector<Ev> heap_;
};

// Spread chunks (chunk c starts at src[c]) to every NPU, on a topology whose channels share no link.
class Gather {
 public:
  Gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed, bool record,
         int threads, const Sink* sink);
  GatherResult run();

 private:
  struct Chan {                // hot state of one channel (16 bytes)
    std::uint32_t cursor = 0;  // next entry of the source's arrival list to read
    std::int32_t cur = -1;     // chunk in flight, -1: idle
    std::int32_t src = 0;
    std::uint32_t back = 0;  // tag of the entries the source received over the reverse channel (dst->src)
  };
  // A rank's arrival list: entries base, base+1, ... (the prefix every reader passed is dropped). An entry is
  // chunk | tag << shift_, tag = 1 + the index of the channel that delivered it among the rank's in-channels
  // (0: the rank's own chunk). A channel s->d skips the entries s received from d without reading d's claims.
  struct Arrivals {
    std::uint32_t* v = nullptr;  // 2^k entries (an Arena block) or none
    std::uint32_t size = 0, base = 0;
    std::uint32_t cap = 0;
    std::uint8_t k = 0;
  };
  struct Part {  // one thread's destinations [lo, hi) and everything only it writes
    int lo = 0, hi = 0;
    Completions events;
    std::vector<std::int32_t> batch, dlist;
    std::vector<std::uint32_t> perm;
    struct Warm {
      const std::uint32_t* v;
      std::uint32_t n, d;
    };
    std::vector<Warm> warm;
    std::uint32_t sink = 0;
    Arena arena;                                    // arrival lists of its ranks
    std::vector<std::vector<std::int32_t>> outbox;  // ranks of other threads to mark, per thread
    std::vector<Transfer> transfers;
    std::uint64_t count = 0;
    double time = 0;
    std::int64_t entries = 0;  // candidate entries held: arrival lists of its ranks + pools of its channels
    // published before the barrier that ends an event, read by every thread after it
    double head = 0;
    std::int64_t entries_pub = 0;
    bool failed = false;
    std::string error;
  };

  int n_;
  std::size_t C_, nch_;
  std::uint64_t seed_;
  bool record_;
  const Sink* sink_;
  bool random_;
  unsigned shift_ = 31;       // entry = chunk | tag << shift_ (without tags, 31: no channel's back tag matches)
  std::uint32_t cmask_ = ~0U;  // chunk bits of an entry
  std::uint32_t claimed_bit_;  // a bit set in every claim row (entries d sent to s test it)
  // channels renumbered by destination: the channels into d are [in_off_[d], in_off_[d+1])
  std::vector<Chan> ch_;
  std::vector<std::int32_t> ch_dst_, orig_, in_off_, out_off_, out_ch_, out_rank_;  // out_*: by out_off_
  std::vector<std::uint32_t> ch_cls_;          // index into costs_
  std::vector<std::uint8_t> owner_, out_own_;  // thread of a rank / of out_rank_[k]
  std::vector<std::uint8_t> mixed_;            // ranks whose in-channels differ in cost
  std::vector<double> costs_;                  // distinct channel costs, ascending
  ClaimBits claimed_;                          // row d: chunks d holds or has been promised
  std::vector<Arrivals> arr_;
  std::vector<std::uint64_t> dirty_;  // ranks to match at the next event (bitmap)
  std::vector<std::uint64_t> rng_;    // even seeds: per-channel random stream and candidate pool
  std::vector<std::vector<std::int32_t>> pool_;
  std::vector<Part> parts_;
  std::unique_ptr<Barrier> barrier_;
  std::size_t max_entries_ = 0;

  void append(Part& p, std::size_t r, std::uint32_t entry) {
    Arrivals& a = arr_[r];
    if (a.size == a.cap) grow(p, r);
    a.v[a.size++] = entry;
    ++p.entries;
  }
  void grow(Part& p, std::size_t r);
  void warm(Part& p, std::size_t j0, std::size_t j1);
  void complete(Part& p, int t, double now);
  void match(Part& p, int t, std::uint64_t event, double now);
  void start(Part& p, std::size_t ch, double now);
  void worker(int t);
};

Gather::Gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed, bool record,
               int threads, const Sink* sink)
    : n_(t.num_npus()),
      C_(src.size()),
      nch_(t.channels().size()),
      seed_(mix64(seed + 0x632BE59BD9B4E019ULL)),
      record_(record || sink),
      sink_(sink),
      random_((seed & 1ULL) == 0),
      claimed_bit_(static_cast<std::uint32_t>(src.size())),
      claimed_(static_cast<std::size_t>(t.num_npus()), src.size() + 1) {
  const auto n = static_cast<std::size_t>(n_);
  if (C_ >= (std::size_t{1} << 31)) throw Error("too many chunks");
  const auto& chans = t.channels();
  std::vector<std::int32_t> newid(nch_);
  in_off_.assign(n + 1, 0);
  std::size_t max_in = 1;
  for (int d = 0; d < n_; ++d) {
    for (int och : t.in_channels(d)) {
      newid[static_cast<std::size_t>(och)] = static_cast<std::int32_t>(orig_.size());
      orig_.push_back(och);
    }
    in_off_[static_cast<std::size_t>(d) + 1] = static_cast<std::int32_t>(orig_.size());
    max_in = std::max(max_in, t.in_channels(d).size());
  }
  // Entry tags take values 0 .. max_in, plus one no entry carries (channels without a reverse channel).
  unsigned cbits = 1, tbits = 1;
  while ((std::size_t{1} << cbits) < C_ + 1) ++cbits;
  while ((std::size_t{1} << tbits) < max_in + 2) ++tbits;
  const bool tags = cbits + tbits <= 32;
  const std::uint32_t no_tag = tags ? (1U << tbits) - 1 : ~0U;
  if (tags) {
    shift_ = cbits;
    cmask_ = (1U << cbits) - 1;
  }
  std::vector<double> cost(nch_);
  for (std::size_t i = 0; i < nch_; ++i) cost[i] = chans[static_cast<std::size_t>(orig_[i])].time_us(chunk_bytes);
  costs_ = cost;
  std::sort(costs_.begin(), costs_.end());
  costs_.erase(std::unique(costs_.begin(), costs_.end()), costs_.end());
  ch_.resize(nch_);
  ch_dst_.resize(nch_);
  ch_cls_.resize(nch_);
  for (std::size_t i = 0; i < nch_; ++i) {
    const auto& c = chans[static_cast<std::size_t>(orig_[i])];
    ch_[i].src = c.src;
    ch_dst_[i] = c.dst;
    ch_cls_[i] = static_cast<std::uint32_t>(std::lower_bound(costs_.begin(), costs_.end(), cost[i]) - costs_.begin());
    const int rev = t.channel_id(c.dst, c.src);
    ch_[i].back = tags && rev >= 0 ? static_cast<std::uint32_t>(newid[static_cast<std::size_t>(rev)] -
                                                                 in_off_[static_cast<std::size_t>(c.src)] + 1)
                                   : no_tag;
  }
  mixed_.assign(n, 0);
  for (std::size_t d = 0; d < n; ++d)
    for (auto i = static_cast<std::size_t>(in_off_[d]); i < static_cast<std::size_t>(in_off_[d + 1]); ++i)
      mixed_[d] = mixed_[d] || ch_cls_[i] != ch_cls_[static_cast<std::size_t>(in_off_[d])];
  out_off_.assign(n + 1, 0);
  for (int r = 0; r < n_; ++r) {
    for (int och : t.out_channels(r)) {
      out_ch_.push_back(newid[static_cast<std::size_t>(och)]);
      out_rank_.push_back(chans[static_cast<std::size_t>(och)].dst);
    }
    out_off_[static_cast<std::size_t>(r) + 1] = static_cast<std::int32_t>(out_ch_.size());
  }
  const std::size_t nclasses = costs_.size() <= 16 ? costs_.size() : 0;

  // Threads: contiguous rank ranges of whole 64-rank words (the dirty bitmap), balanced by the number of
  // channels into them; topologies under 1024 NPUs run on one thread.
  int T = std::max(1, std::min(threads, 64));
  if (n_ < 1024) T = 1;
  T = std::min(T, std::max(1, n_ / 256));
  parts_.resize(static_cast<std::size_t>(T));
  owner_.assign(n, 0);
  for (int i = 0, r = 0; i < T; ++i) {
    Part& p = parts_[static_cast<std::size_t>(i)];
    p.lo = r;
    const double want = static_cast<double>(nch_) * (i + 1) / T;
    while (r < n_ && (i == T - 1 || in_off_[static_cast<std::size_t>(r)] < want || r % 64 != 0)) ++r;
    p.hi = r;
    for (int x = p.lo; x < p.hi; ++x) owner_[static_cast<std::size_t>(x)] = static_cast<std::uint8_t>(i);
    p.events = Completions(nclasses);
    p.outbox.resize(static_cast<std::size_t>(T));
    p.perm.resize(max_in);
  }
  out_own_.resize(out_rank_.size());
  for (std::size_t k = 0; k < out_rank_.size(); ++k) out_own_[k] = owner_[static_cast<std::size_t>(out_rank_[k])];
  if (T > 1) barrier_ = std::make_unique<Barrier>(T);

  arr_.resize(n);
  dirty_.assign((n + 63) / 64, 0);
  if (random_) {
    pool_.resize(nch_);
    rng_.resize(nch_);
    for (std::size_t i = 0; i < nch_; ++i)
      rng_[i] = mix64(seed_ + 0x9E3779B97F4A7C15ULL * (static_cast<std::uint64_t>(orig_[i]) + 1));
  }
  // Every chunk starts at its source: claimed there, in its arrival list; its out-neighbours have work.
  for (std::size_t r = 0; r < n; ++r) claimed_.row(r).set(claimed_bit_);
  for (std::size_t c = 0; c < C_; ++c) {
    const auto r = static_cast<std::size_t>(src[c]);
    const auto cu = static_cast<std::uint32_t>(c);
    claimed_.row(r).set(cu);
    append(parts_[owner_[r]], r, cu);
  }
  for (std::size_t r = 0; r < n; ++r)
    if (arr_[r].size)
      for (std::int32_t k = out_off_[r]; k < out_off_[r + 1]; ++k) {
        const auto d = static_cast<std::size_t>(out_rank_[static_cast<std::size_t>(k)]);
        dirty_[d >> 6] |= 1ULL << (d & 63);
      }
  for (const auto& p : parts_) max_entries_ += static_cast<std::size_t>(p.entries);
}

// Rank r's arrival list is full: drop the prefix every out-channel has read, and move to a block twice as
// large if that frees less than half.
void Gather::grow(Part& p, std::size_t r) {
  Arrivals& a = arr_[r];
  if (a.size >= 32) {
    std::uint32_t m = a.base + a.size;
    for (std::int32_t k = out_off_[r]; k < out_off_[r + 1]; ++k)
      m = std::min(m, ch_[static_cast<std::size_t>(out_ch_[static_cast<std::size_t>(k)])].cursor);
    const std::uint32_t drop = m - a.base;
    if (drop * 2 >= a.size) {
      std::memmove(a.v, a.v + drop, static_cast<std::size_t>(a.size - drop) * 4);
      a.size -= drop;
      a.base = m;
      p.entries -= static_cast<std::int64_t>(drop);
      return;
    }
  }
  const unsigned k = a.v ? a.k + 1U : 4U;
  if (k >= 32) throw Error("arrival list too long");
  std::uint32_t* b = p.arena.get(k);
  if (a.v) {
    std::memcpy(b, a.v, static_cast<std::size_t>(a.size) * 4);
    p.arena.put(a.v, a.k);
  }
  a.v = b;
  a.k = static_cast<std::uint8_t>(k);
  a.cap = 1U << k;
}

// Thread t's completions at `now`: the channel is free again and its chunk joins the destination's arrival
// list (completions at one destination in the order Completions::take gives); the destination and its
// out-neighbours have work at this event.
void Gather::complete(Part& p, int t, double now) {
  for (auto& ob : p.outbox) ob.clear();
  p.batch.clear();
  p.events.take(now + 1e-9 * std::max(1.0, now), p.batch);
  const std::size_t nb = p.batch.size();
  const std::int32_t* batch = p.batch.data();
  for (std::size_t i = 0; i < nb; ++i) {
    if (i + 8 < nb) {  // the arrival-list tail a later completion writes
      const Arrivals& a = arr_[static_cast<std::size_t>(ch_dst_[static_cast<std::size_t>(batch[i + 8])])];
      __builtin_prefetch(a.v + a.size, 1);
    }
    const auto ch = static_cast<std::size_t>(batch[i]);
    Chan& c = ch_[ch];
    const auto chunk = static_cast<std::uint32_t>(c.cur);
    c.cur = -1;
    const auto d = static_cast<std::size_t>(ch_dst_[ch]);
    const auto tag = static_cast<std::uint32_t>(ch) - static_cast<std::uint32_t>(in_off_[d]) + 1;
    append(p, d, shift_ < 31 ? chunk | tag << shift_ : chunk);
    dirty_[d >> 6] |= 1ULL << (d & 63);
    const auto k1 = static_cast<std::size_t>(out_off_[d + 1]);
    for (auto k = static_cast<std::size_t>(out_off_[d]); k < k1; ++k) {
      const auto r = static_cast<std::size_t>(out_rank_[k]);
      if (out_own_[k] == t)
        dirty_[r >> 6] |= 1ULL << (r & 63);
      else
        p.outbox[out_own_[k]].push_back(out_rank_[k]);
    }
  }
  p.count += nb;
}

// Load what matching destinations dlist[j0, j1) will read first, in two tight loops whose cache misses overlap
// (the matching itself does too much work between its misses for the CPU to overlap them): the entries at
// the free channels' cursors, then the claim words of up to 4 of those entries per channel.
void Gather::warm(Part& p, std::size_t j0, std::size_t j1) {
  std::uint32_t acc = 0;
  p.warm.clear();
  for (std::size_t j = j0; j < j1; ++j) {
    const auto d = static_cast<std::uint32_t>(p.dlist[j]);
    for (auto ch = static_cast<std::size_t>(in_off_[d]); ch < static_cast<std::size_t>(in_off_[d + 1]); ++ch) {
      const Chan& c = ch_[ch];
      if (c.cur >= 0) continue;
      const Arrivals& a = arr_[static_cast<std::size_t>(c.src)];
      const std::uint32_t i = c.cursor - a.base;
      if (i >= a.size) continue;
      acc += a.v[i];
      p.warm.push_back({a.v + i, std::min(a.size - i, 4U), d});
    }
  }
  for (const auto& w : p.warm) {
    const ClaimBits::Row row = claimed_.row(w.d);
    for (std::uint32_t x = 0; x < w.n; ++x) acc += static_cast<std::uint32_t>(row.base[row.word(w.v[x] & cmask_)]);
  }
  p.sink += acc;  // keeps the loads
}

// Give free channel ch its next candidate, if any, and start the transfer.
void Gather::start(Part& p, std::size_t ch, double now) {
  Chan& c = ch_[ch];
  const Arrivals& a = arr_[static_cast<std::size_t>(c.src)];
  std::uint32_t i = c.cursor - a.base;
  const std::uint32_t end = a.size;
  if (i >= end && !random_) return;
  const auto d = static_cast<std::size_t>(ch_dst_[ch]);
  const ClaimBits::Row row = claimed_.row(d);
  const std::uint32_t* v = a.v;
  std::int64_t pick = -1;
  if (!random_) {  // the oldest candidate
    // Blocks of up to 4 entries without a branch per entry: whether an entry is free is a coin flip, so
    // per-entry branches would mispredict; here the claim words of a block also load in parallel. An entry
    // that came from d tests claimed_bit_ instead of its chunk.
    const std::uint32_t back = c.back, sh = shift_, cm = cmask_, cb = claimed_bit_;
    while (i < end) {
      const std::uint32_t m = std::min(end - i, 4U);
      unsigned ok = 0;
      for (std::uint32_t k = 0; k < m; ++k) {
        const std::uint32_t e = v[i + k];
        const std::uint32_t sel = 0U - static_cast<std::uint32_t>((e >> sh) == back);
        const std::uint32_t x = ((e & cm) & ~sel) | (cb & sel);
        ok |= static_cast<unsigned>(row.test(x) ^ 1U) << k;
      }
      if (ok) {
        const auto k = static_cast<std::uint32_t>(__builtin_ctz(ok));
        pick = v[i + k] & cm;
        i += k + 1;
        break;
      }
      i += m;
    }
    c.cursor = a.base + i;
  } else {  // a random candidate: new entries join the channel's pool first
    auto& pool = pool_[ch];
    auto free_at = [row](std::uint32_t x) { return !row.test(x); };
    p.entries -= static_cast<std::int64_t>(pool.size());
    for (; i < end; ++i)
      if (free_at(v[i] & cmask_)) pool.push_back(static_cast<std::int32_t>(v[i] & cmask_));
    c.cursor = a.base + end;
    std::uint64_t& z = rng_[ch];
    while (!pool.empty()) {
      z += 0x9E3779B97F4A7C15ULL;
      const std::size_t j = static_cast<std::size_t>(((mix64(z) >> 32) * pool.size()) >> 32);
      const std::int32_t x = pool[j];
      pool[j] = pool.back();
      pool.pop_back();
      if (free_at(static_cast<std::uint32_t>(x))) {
        pick = x;
        break;
      }
    }
    p.entries += static_cast<std::int64_t>(pool.size());
  }
  if (pick < 0) return;
  const auto u = static_cast<std::uint32_t>(pick);
  row.set(u);
  c.cur = static_cast<std::int32_t>(pick);
  const std::uint32_t cls = ch_cls_[ch];
  const double end_t = now + costs_[cls];
  p.time = std::max(p.time, end_t);
  if (record_) {
    Transfer tr;
    tr.chunk = c.cur;
    tr.src = c.src;
    tr.dst = static_cast<std::int32_t>(d);
    tr.start = now;
    tr.end = end_t;
    tr.route = orig_[ch];
    p.transfers.push_back(tr);
  }
  p.events.push(end_t, static_cast<std::int32_t>(ch), cls);
}

// Match thread t's dirty destinations in rank order. At one destination its free channels take their
// candidates in a random order drawn from (seed, event, destination), lowest cost first.
void Gather::match(Part& p, int t, std::uint64_t event, double now) {
  for (auto& q : parts_)
    for (std::int32_t r : q.outbox[static_cast<std::size_t>(t)]) {
      const auto ru = static_cast<std::size_t>(r);
      dirty_[ru >> 6] |= 1ULL << (ru & 63);
    }
  p.dlist.clear();
  const auto w1 = (static_cast<std::size_t>(p.hi) + 63) / 64;
  for (std::size_t w = static_cast<std::size_t>(p.lo) / 64; w < w1; ++w) {
    for (std::uint64_t bits = dirty_[w]; bits; bits &= bits - 1)
      p.dlist.push_back(static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))));
    dirty_[w] = 0;
  }
  const std::size_t nd = p.dlist.size();
  const std::uint64_t ekey = mix64(seed_ ^ (event * 0x9E3779B97F4A7C15ULL));
  constexpr std::size_t kGroup = 32;
  for (std::size_t j = 0; j < nd; ++j) {
    if (j % kGroup == 0) warm(p, j, std::min(nd, j + kGroup));
    const auto d = static_cast<std::size_t>(p.dlist[j]);
    const auto lo = static_cast<std::size_t>(in_off_[d]);
    const std::size_t k = static_cast<std::size_t>(in_off_[d + 1]) - lo;
    if (k == 1) {
      if (ch_[lo].cur < 0) start(p, lo, now);
      continue;
    }
    // Fisher-Yates with draws from a 64-bit LCG seeded by (seed, event, d)
    std::uint32_t* ord = p.perm.data();
    for (std::size_t i = 0; i < k; ++i) ord[i] = static_cast<std::uint32_t>(i);
    std::uint64_t z = mix64(ekey + d);
    for (std::size_t i = k - 1; i > 0; --i) {
      std::swap(ord[i], ord[((z >> 32) * (i + 1)) >> 32]);
      z = z * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    if (mixed_[d])
      std::stable_sort(ord, ord + k, [&](std::uint32_t x, std::uint32_t y) { return ch_cls_[lo + x] < ch_cls_[lo + y]; });
    for (std::size_t i = 0; i < k; ++i)
      if (ch_[lo + ord[i]].cur < 0) start(p, lo + ord[i], now);
  }
}

// One thread's event loop. All threads see the same event times: the next one is the earliest head over all
// threads' queues, published before the barrier that ends each event.
void Gather::worker(int t) {
  Part& p = parts_[static_cast<std::size_t>(t)];
  const double inf = std::numeric_limits<double>::infinity();
  const bool many = parts_.size() > 1;
  auto guarded = [&p](auto&& f) {
    if (p.failed) return;
    try {
      f();
    } catch (const std::exception& e) {
      p.failed = true;
      p.error = e.what();
    }
  };
  auto publish = [&]() {
    p.head = p.events.next();
    p.entries_pub = p.entries;
    if (many) barrier_->wait();
  };
  std::uint64_t event = 0;
  guarded([&] { match(p, t, event, 0.0); });
  publish();
  for (;;) {
    // Every thread has matched the last event (the barrier in publish), and none adds transfers before the
    // next barrier: thread 0 hands them to the sink, in rank order of their destinations.
    if (t == 0 && sink_)
      for (auto& q : parts_)
        if (!q.transfers.empty()) guarded([&] { (*sink_)(q.transfers); });
    double now = inf;
    bool failed = false;
    std::int64_t entries = 0;
    for (const auto& q : parts_) {
      now = std::min(now, q.head);
      failed = failed || q.failed;
      entries += q.entries_pub;
    }
    if (failed || now == inf) break;
    if (t == 0) max_entries_ = std::max(max_entries_, static_cast<std::size_t>(std::max<std::int64_t>(entries, 0)));
    ++event;
    guarded([&] { complete(p, t, now); });
    if (many) barrier_->wait();
    guarded([&] { match(p, t, event, now); });
    publish();
  }
}

GatherResult Gather::run() {
  const int T = static_cast<int>(parts_.size());
  if (T == 1) {
    worker(0);
  } else {
    std::vector<std::thread> pool;
    for (int i = 1; i < T; ++i) pool.emplace_back([this, i] { worker(i); });
    worker(0);
    for (auto& th : pool) th.join();
  }
  GatherResult res;
  for (auto& p : parts_) {
    if (p.failed) throw Error(p.error);
    res.count += p.count;
    res.time = std::max(res.time, p.time);
    if (record_) res.transfers.insert(res.transfers.end(), p.transfers.begin(), p.transfers.end());
  }
  res.max_queue = max_entries_;
  return res;
}

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

GatherResult gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed,
                    bool record, int threads, SynthOptions::Engine engine, const Sink* sink = nullptr) {
  using E = SynthOptions::Engine;
  if (engine == E::PointToPoint && shares_links(t))
    throw Error("the point-to-point engine needs channels that share no link (this topology has switch ports)");
  const bool general = engine == E::General || (engine == E::Auto && use_general_engine(t, src.size()));
  GatherResult res = general
                         ? gather_general(t, src, chunk_bytes, seed, record, sink)
                         : Gather(t, src, chunk_bytes, seed, record, threads, sink).run();
  const std::uint64_t expect = static_cast<std::uint64_t>(src.size()) * static_cast<std::uint64_t>(t.num_npus() - 1);
  if (res.count != expect)
    throw Error("synthesis did not complete: " + std::to_string(res.count) + " of " + std::to_string(expect) +
                " deliveries (is every NPU reachable?)");
  if (record)
    std::sort(res.transfers.begin(), res.transfers.end(), [](const Transfer& a, const Transfer& b) {
      return a.start != b.start ? a.start < b.start : a.end != b.end ? a.end < b.end : a.route < b.route;
    });
  return res;
}

// The threads a synthesis runs on: o.threads, or every hardware thread where it is 0.
int all_threads(const SynthOptions& o) {
  return o.threads > 0 ? o.threads : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

// Best of `seeds` seeds (base_seed, base_seed + 1, ...; or the seeds of `seed_list`), run on up to `threads`
// threads. Deterministic: ties go to the lowest seed.
GatherResult best_gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, const SynthOptions& o,
                         std::vector<double>* seed_times, std::uint64_t* best_seed,
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
  std::string err;
  auto worker = [&]() {
    for (;;) {
      const int i = next.fetch_add(1);
      if (i >= k) return;
      try {
        GatherResult r = gather(t, src, chunk_bytes, seed_of(i), o.record, inner, o.engine);
        std::lock_guard<std::mutex> g(mu);
        times[static_cast<std::size_t>(i)] = r.time;
        if (best_i < 0 || r.time < best.time || (r.time == best.time && i < best_i)) {
          best = std::move(r);
          best_i = i;
        }
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
  if (!err.empty()) throw Error(err);
  if (seed_times) *seed_times = times;
  if (best_seed) *best_seed = seed_of(best_i);
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

// What the chunk trials leave for the synthesis at the count kept, where they ran every seed of it (the
// point-to-point engine): the spreading run of that count over those seeds (best seed's result, no transfer
// list), on the spreading topology or its transpose (Reduce-Scatter, Reduce).
struct ChunkTrial {
  bool valid = false;
  bool transposed = false;
  GatherResult best;
  std::vector<double> seed_times;
  std::uint64_t best_seed = 0;
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
// 2 rounds where 1.5 would do: 1.333x the bound; 2 chunks per NPU: 1.000x). The general engine tries two seeds
// of different look-ahead per candidate; the point-to-point engine, whose runs are cheap, every seed of the
// synthesis, so the count kept is the one whose best seed is fastest. Where the point-to-point trials at 1 and 2
// chunks alone would pass the budget (about 1,100 NPUs at 8 seeds) there is no trial: 1 chunk.
//
// Shortcuts on the point-to-point engine (o.trial_shortcuts), which leave the count kept as it is: a candidate
// whose SpreadBound is not below the fastest trial so far would be a candidate without gain, so it counts as
// one (and its work against the budget) without being run; and the trial of the count kept is handed to the
// synthesis (*keep), which then has nothing to run again but its best seed, for the transfer list.
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
  std::vector<std::uint64_t> seeds{o.base_seed};
  if (general) {
    // Two seeds of different look-ahead (import once, none: see gather_general) unless fewer were asked for.
    if (o.seeds > 1) seeds.push_back(o.base_seed + (o.seeds > 3 ? 3 : 1));
  } else {
    for (int i = 1; i < o.seeds; ++i) seeds.push_back(o.base_seed + static_cast<std::uint64_t>(i));
  }
  trial.seeds = static_cast<int>(seeds.size());
  constexpr double kBudget = 3e7;  // chunk deliveries over all trials (a few seconds)
  auto work_of = [&](int k) { return (rooted ? k : static_cast<double>(n) * k) * (n - 1) * trial.seeds; };
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
  // The point-to-point engine: the trials run every seed of the synthesis, and each transfer takes its channel's
  // time for one chunk, so the shortcuts apply.
  const bool shortcuts = !general && o.trial_shortcuts;
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
    GatherResult r = best_gather(t, src, chunk_bytes, trial, &times, &best_seed, &seeds);
    if (trials) trials->emplace_back(k, r.time);
    if (r.time < best * (1 - 1e-4)) {
      best = r.time;
      best_k = k;
      misses = 0;
      if (shortcuts && keep) {
        keep->valid = true;
        keep->transposed = reverse_only;
        keep->best = std::move(r);
        keep->seed_times = std::move(times);
        keep->best_seed = best_seed;
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
                "%s on %d NPUs with %.0f chunks would need about %.1f GiB (%.1f GiB of synthesis state%s), more "
                "than the %.1f GiB allowed%s",
                to_string(o.collective), topo.num_npus(), chunks, need / (1 << 30), state / (1 << 30),
                o.record ? ", the rest for the transfer list" : "", o.max_memory_bytes / (1 << 30),
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
                    const ChunkTrial& kept, std::vector<double>* seed_times, std::uint64_t* best_seed) {
  if (!kept.valid || kept.transposed != transposed)
    return best_gather(t, s.owner, s.chunk_bytes, o, seed_times, best_seed);
  if (seed_times) *seed_times = kept.seed_times;
  if (best_seed) *best_seed = kept.best_seed;
  if (!o.record) return kept.best;
  return gather(t, s.owner, s.chunk_bytes, kept.best_seed, true, all_threads(o), o.engine);
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
  std::vector<std::vector<int>> rev_routes;
  if (need_forward) {
    fwd = spread(topo, false, s, o, kept, &st.seed_times, &st.best_seed);
    st.ag_time_us = fwd.time;
    st.max_queue_entries = fwd.max_queue;
  }
  if (need_reverse) {
    const auto partner = symmetric_partner(topo);
    if (!partner.empty() && need_forward) {
      rev = &fwd;  // transpose == topology: the same spreading schedule, reversed, is the reduction
    } else if (!partner.empty()) {
      rev_own = spread(topo, false, s, o, kept, &st.seed_times, &st.best_seed);
      st.max_queue_entries = rev_own.max_queue;
    } else {
      const Topology tt = topo.transposed();
      std::vector<double> times;
      rev_own = spread(tt, true, s, o, kept, need_forward ? &times : &st.seed_times,
                       need_forward ? nullptr : &st.best_seed);
      st.max_queue_entries = std::max(st.max_queue_entries, rev_own.max_queue);
      rev_routes = reduction_routes(tt, {});
    }
    if (!partner.empty()) rev_routes = reduction_routes(topo, partner);
    st.rs_time_us = rev->time;
  }
  s.seed = st.best_seed;
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
  // The best seed of each spreading run, found without writing (one seed: nothing to search; the chunk trial
  // of the count chosen: already found).
  auto best_seed = [&](const Topology& t, bool transposed, std::vector<double>* times) {
    if (o.seeds <= 1) return o.base_seed;
    std::uint64_t b = o.base_seed;
    spread(t, transposed, s, o, kept, times, &b);
    return b;
  };
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
    rev_seed = best_seed(rev_topo, tt != nullptr, &st.seed_times);
  }
  if (need_forward) {
    StreamSection sec;
    for (const auto& ch : topo.channels()) sec.routes.push_back(ch.route);
    sec.route_us = costs(topo);
    if (shared_run) sec.blocks_of = 0;
    sections.push_back(std::move(sec));
    fwd_seed = shared_run ? rev_seed : best_seed(topo, false, &st.seed_times);
  }
  s.seed = need_forward ? fwd_seed : rev_seed;
  st.best_seed = s.seed;
  StreamWriter w(path, stream_header_json(s, topo, sections));
  const Sink sink = [&w](std::vector<Transfer>& ts) { w.write(ts); };
  const int threads = all_threads(o);
  double t_rev = 0, t_fwd = 0;
  if (need_reverse) {
    const GatherResult r = gather(rev_topo, s.owner, s.chunk_bytes, rev_seed, false, threads, o.engine, &sink);
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
      const GatherResult r = gather(topo, s.owner, s.chunk_bytes, fwd_seed, false, threads, o.engine, &sink);
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
