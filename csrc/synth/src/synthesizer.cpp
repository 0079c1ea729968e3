// Time-expanded greedy link-chunk matching (TACOS), event driven.
//
// State per destination: a bitset of chunks it holds or has been promised ("claimed"). A chunk is claimed
// for a destination when a transfer to it is matched, so a chunk is never sent to one destination twice
// (TACOS v1.3.0 can send it over two links at once and discards one on arrival).
// State per channel (NPU-to-NPU link or switch path): a FIFO of candidate chunks, pushed when the
// channel's source receives a chunk its destination has not claimed; stale entries are skipped when the
// channel picks its next chunk (that is where "chunk replacement" happens: a channel whose candidate was
// delivered elsewhere takes the next one instead of idling).
// A channel takes its oldest candidate (odd seeds) or a random one (even seeds).
// Time advances from one transfer completion to the next (no fixed time step). At each event time, the
// channels that became free are matched lowest cost first (ties broken by the seed).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <queue>
#include <thread>

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
};

// Spread chunks (chunk c starts at src[c]) to every NPU.
GatherResult gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed,
                    bool record) {
  const int n = t.num_npus();
  const std::size_t C = src.size();
  // Chunk-major bitset: the bits of one chunk for neighbouring ranks share cache lines, which is what a
  // chunk's arrival touches (its source's out-neighbours).
  const std::size_t W = (static_cast<std::size_t>(n) + 63) / 64;
  const auto& chans = t.channels();
  const std::size_t nch = chans.size();
  std::vector<std::uint64_t> claimed(C * W, 0);
  auto is_claimed = [&](int r, std::size_t c) {
    const auto ru = static_cast<std::size_t>(r);
    return (claimed[c * W + (ru >> 6)] >> (ru & 63)) & 1ULL;
  };
  auto claim = [&](int r, std::size_t c) {
    const auto ru = static_cast<std::size_t>(r);
    claimed[c * W + (ru >> 6)] |= 1ULL << (ru & 63);
  };

  std::vector<double> cost(nch);
  for (std::size_t i = 0; i < nch; ++i) cost[i] = chans[i].time_us(chunk_bytes);
  std::vector<std::vector<std::int32_t>> q(nch);
  std::vector<std::size_t> qhead(nch, 0);
  std::vector<char> busy(nch, 0), dirty_flag(nch, 0);
  std::vector<std::int32_t> cur(nch, -1);
  std::vector<double> cur_start(nch, 0);
  std::vector<char> link_busy(static_cast<std::size_t>(t.num_links()), 0);
  // Links used by more than one channel (switch ports): who to wake when they free up.
  std::vector<std::vector<int>> link_users(static_cast<std::size_t>(t.num_links()));
  for (std::size_t i = 0; i < nch; ++i)
    for (int l : chans[i].route) link_users[static_cast<std::size_t>(l)].push_back(static_cast<int>(i));
  // A channel whose links no other channel uses needs no link bookkeeping (the common direct-link case).
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
  // Flat adjacency (cache friendly): out_off[r]..out_off[r+1] index out_ch/out_dst.
  std::vector<std::int32_t> out_off(static_cast<std::size_t>(n) + 1, 0), out_ch, out_dst, ch_dst(nch);
  for (int r = 0; r < n; ++r) {
    for (int och : t.out_channels(r)) {
      out_ch.push_back(och);
      out_dst.push_back(chans[static_cast<std::size_t>(och)].dst);
    }
    out_off[static_cast<std::size_t>(r) + 1] = static_cast<std::int32_t>(out_ch.size());
  }
  for (std::size_t i = 0; i < nch; ++i) ch_dst[i] = chans[i].dst;
  auto push_candidates = [&](int r, std::int32_t c) {
    for (std::int32_t k = out_off[static_cast<std::size_t>(r)]; k < out_off[static_cast<std::size_t>(r) + 1]; ++k) {
      const int och = out_ch[static_cast<std::size_t>(k)];
      const auto oc = static_cast<std::size_t>(och);
      if (is_claimed(out_dst[static_cast<std::size_t>(k)], static_cast<std::size_t>(c))) continue;
      q[oc].push_back(c);
      ++qentries;
      if (!busy[oc]) mark(och);
    }
  };
  for (std::size_t c = 0; c < C; ++c) claim(src[c], c);
  for (std::size_t c = 0; c < C; ++c) push_candidates(src[c], static_cast<std::int32_t>(c));
  max_q = qentries;

  // Event queue. Transfers start at non-decreasing times, so the completions of all transfers of one
  // cost form a FIFO; with few distinct costs, the next event is the earliest FIFO head.
  std::vector<double> costs_sorted(cost.begin(), cost.end());
  std::sort(costs_sorted.begin(), costs_sorted.end());
  costs_sorted.erase(std::unique(costs_sorted.begin(), costs_sorted.end()), costs_sorted.end());
  std::vector<int> cost_class(nch, 0);
  const bool fifo = costs_sorted.size() <= 16;
  for (std::size_t i = 0; i < nch; ++i)
    cost_class[i] = fifo ? static_cast<int>(std::lower_bound(costs_sorted.begin(), costs_sorted.end(), cost[i]) -
                                            costs_sorted.begin())
                         : 0;
  EventQueue events(fifo ? costs_sorted.size() : 0);
  GatherResult res;
  Rng rng(seed);
  // Odd seeds forward each channel's candidates oldest first (FIFO); even seeds pick a random candidate
  // (TACOS-like). Neither wins everywhere, so best-of-k seeds explores both.
  const bool random_pick = (seed & 1ULL) == 0;
  const bool uniform = t.uniform_channels();
  std::vector<std::pair<std::pair<double, std::uint64_t>, int>> order;

  auto match = [&](double now) {
    if (uniform) {
      for (std::size_t i = dirty.size(); i > 1; --i) std::swap(dirty[i - 1], dirty[rng.below(i)]);
    } else {
      order.clear();
      for (int ch : dirty) order.push_back({{cost[static_cast<std::size_t>(ch)], rng.next()}, ch});
      std::sort(order.begin(), order.end());
      for (std::size_t i = 0; i < order.size(); ++i) dirty[i] = order[i].second;
    }
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
      const int d = ch_dst[cu];
      std::int32_t pick = -1;
      while (qhead[cu] < qq.size()) {
        if (random_pick) {  // TACOS-like: a random candidate instead of the oldest
          const std::size_t j = qhead[cu] + rng.below(qq.size() - qhead[cu]);
          std::swap(qq[j], qq[qhead[cu]]);
        }
        const std::int32_t c = qq[qhead[cu]++];
        --qentries;
        if (!is_claimed(d, static_cast<std::size_t>(c))) {
          pick = c;
          break;
        }
      }
      if (qhead[cu] == qq.size()) {
        qq.clear();
        qhead[cu] = 0;
      } else if (qhead[cu] > 1024 && qhead[cu] * 2 > qq.size()) {
        qq.erase(qq.begin(), qq.begin() + static_cast<std::ptrdiff_t>(qhead[cu]));
        qhead[cu] = 0;
      }
      if (pick < 0) continue;
      claim(d, static_cast<std::size_t>(pick));
      busy[cu] = 1;
      cur[cu] = pick;
      cur_start[cu] = now;
      if (!exclusive[cu])
        for (int l : chans[cu].route) link_busy[static_cast<std::size_t>(l)] = 1;
      events.push(now + cost[cu], ch, cost_class[cu]);
    }
    dirty.clear();
  };

  match(0.0);
  std::vector<int> batch;
  while (!events.empty()) {
    const double now = events.top_time();
    const double eps = 1e-9 * std::max(1.0, now);
    batch.clear();
    while (!events.empty() && events.top_time() <= now + eps) batch.push_back(events.pop());
    for (std::size_t i = batch.size(); i > 1; --i) std::swap(batch[i - 1], batch[rng.below(i)]);
    for (int ch : batch) {
      const auto cu = static_cast<std::size_t>(ch);
      const std::int32_t c = cur[cu];
      busy[cu] = 0;
      cur[cu] = -1;
      ++res.count;
      if (record) {
        Transfer tr;
        tr.chunk = c;
        tr.src = chans[cu].src;
        tr.dst = chans[cu].dst;
        tr.start = cur_start[cu];
        tr.end = cur_start[cu] + cost[cu];
        tr.route = ch;
        res.transfers.push_back(tr);
      }
      res.time = std::max(res.time, cur_start[cu] + cost[cu]);
      if (exclusive[cu]) {
        if (qhead[cu] < q[cu].size()) mark(ch);
      } else {
        for (int l : chans[cu].route) {
          link_busy[static_cast<std::size_t>(l)] = 0;
          for (int u : link_users[static_cast<std::size_t>(l)])
            if (!busy[static_cast<std::size_t>(u)] &&
                qhead[static_cast<std::size_t>(u)] < q[static_cast<std::size_t>(u)].size())
              mark(u);
        }
      }
      push_candidates(ch_dst[cu], c);
    }
    max_q = std::max(max_q, qentries);
    match(now);
  }
  const std::uint64_t expect = static_cast<std::uint64_t>(C) * static_cast<std::uint64_t>(n - 1);
  if (res.count != expect)
    throw Error("synthesis did not complete: " + std::to_string(res.count) + " of " + std::to_string(expect) +
                " deliveries (is every NPU reachable?)");
  res.max_queue = max_q;
  if (record)
    std::sort(res.transfers.begin(), res.transfers.end(), [](const Transfer& a, const Transfer& b) {
      return a.start != b.start ? a.start < b.start : a.end != b.end ? a.end < b.end : a.route < b.route;
    });
  return res;
}

// Best of `seeds` seeds, run on up to `threads` threads. Deterministic: ties go to the lowest seed.
GatherResult best_gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, const SynthOptions& o,
                         std::vector<double>* seed_times, std::uint64_t* best_seed) {
  const int k = std::max(1, o.seeds);
  unsigned hw = std::thread::hardware_concurrency();
  int threads = o.threads > 0 ? o.threads : static_cast<int>(hw ? hw : 1);
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
        GatherResult r = gather(t, src, chunk_bytes, o.base_seed + static_cast<std::uint64_t>(i), o.record);
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
  if (best_seed) *best_seed = o.base_seed + static_cast<std::uint64_t>(best_i);
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

Schedule synthesize(const Topology& topo, const SynthOptions& o, SynthStats* stats) {
  if (!topo.finalized()) throw Error("topology not finalized");
  if (o.chunks_per_rank < 1) throw Error("chunks per rank must be >= 1");
  if (!(o.bytes > 0)) throw Error("collective size must be positive");
  const int n = topo.num_npus();
  if (o.root < 0 || o.root >= n) throw Error("root rank out of range");
  Schedule s;
  s.collective = o.collective;
  s.algorithm = "tacos";
  s.nranks = n;
  s.chunks_per_rank = o.chunks_per_rank;
  s.root = o.root;
  s.bytes = o.bytes;
  const bool rooted = o.collective == Collective::Broadcast || o.collective == Collective::Reduce;
  const long long C = rooted ? o.chunks_per_rank : static_cast<long long>(n) * o.chunks_per_rank;
  if (C > 2'000'000'000LL) throw Error("too many chunks");
  s.nchunks = static_cast<int>(C);
  s.chunk_bytes = o.bytes / static_cast<double>(C);
  s.owner.resize(static_cast<std::size_t>(C));
  for (long long c = 0; c < C; ++c) s.owner[static_cast<std::size_t>(c)] = rooted ? o.root : static_cast<int>(c % n);

  SynthStats st;
  const bool need_reverse = o.collective == Collective::ReduceScatter || o.collective == Collective::AllReduce ||
                            o.collective == Collective::Reduce;
  const bool need_forward = o.collective == Collective::AllGather || o.collective == Collective::AllReduce ||
                            o.collective == Collective::Broadcast;
  GatherResult fwd, rev;
  std::vector<std::vector<int>> rev_routes;
  if (need_forward) {
    fwd = best_gather(topo, s.owner, s.chunk_bytes, o, &st.seed_times, &st.best_seed);
    st.ag_time_us = fwd.time;
    st.max_queue_entries = fwd.max_queue;
  }
  if (need_reverse) {
    const auto partner = symmetric_partner(topo);
    if (!partner.empty() && need_forward) {
      rev = fwd;  // transpose == topology: the same spreading schedule, reversed, is the reduction
    } else if (!partner.empty()) {
      rev = best_gather(topo, s.owner, s.chunk_bytes, o, &st.seed_times, &st.best_seed);
      st.max_queue_entries = rev.max_queue;
    } else {
      const Topology tt = topo.transposed();
      std::vector<double> times;
      rev = best_gather(tt, s.owner, s.chunk_bytes, o, need_forward ? &times : &st.seed_times,
                        need_forward ? nullptr : &st.best_seed);
      st.max_queue_entries = std::max(st.max_queue_entries, rev.max_queue);
      for (const auto& ch : tt.channels()) rev_routes.emplace_back(ch.route.rbegin(), ch.route.rend());
    }
    if (!partner.empty()) {
      for (const auto& ch : topo.channels()) {
        std::vector<int> r;
        for (auto it = ch.route.rbegin(); it != ch.route.rend(); ++it) r.push_back(partner[static_cast<std::size_t>(*it)]);
        rev_routes.push_back(std::move(r));
      }
    }
    st.rs_time_us = rev.time;
  }
  s.seed = st.best_seed;
  if (need_reverse) append_reversed(rev, rev_routes, rev.time, s, 0.0);
  if (need_forward) append_forward(fwd, topo, s, need_reverse ? rev.time : 0.0);
  s.time_us = (need_reverse ? rev.time : 0.0) + (need_forward ? fwd.time : 0.0);
  st.time_us = s.time_us;
  st.transfers = (need_reverse ? rev.count : 0) + (need_forward ? fwd.count : 0);
  if (!o.record) s.routes.clear();
  if (stats) *stats = st;
  return s;
}

}  // namespace autoccl::synth
