// The checker: a symbolic replay proving a schedule correct, in memory proportional to the schedule.
//
// Each (rank, chunk) cell holds a node id: kEmpty (nothing), a leaf r < nranks (rank r's own data of that chunk)
// or a union node (the reduction of two earlier nodes). A copy snapshots its source cell when it starts and
// replaces the destination cell when it ends; a reduction makes a union node of the destination cell and the
// payload. Union nodes are never expanded during the replay: at the end, every cell that must hold a full
// reduction is walked once per distinct node (memoized), stopping at the first contribution seen twice, so
// the walk costs O(nranks) per distinct final node and no cell ever holds a set.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "autoccl/synth/synth.h"

namespace autoccl::synth {

namespace {

constexpr std::uint32_t kEmpty = std::numeric_limits<std::uint32_t>::max();

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

long long ps(double us) { return std::llround(us * 1e6); }

// Where a route leads and what it costs.
struct RouteInfo {
  bool ok = false;
  int src_node = -1, dst_node = -1;
  double latency_us = 0, bandwidth_gbps = 0;
};

RouteInfo route_info(const Topology& t, const std::vector<int>& route) {
  RouteInfo r;
  if (route.empty()) return r;
  double bw = std::numeric_limits<double>::infinity();
  int at = -1;
  for (int l : route) {
    if (l < 0 || l >= t.num_links()) return r;
    const Link& L = t.link(l);
    if (at >= 0 && L.src != at) return r;
    if (at < 0) r.src_node = L.src;
    at = L.dst;
    r.latency_us += L.latency_us;
    bw = std::min(bw, L.bandwidth_gbps);
  }
  r.dst_node = at;
  r.bandwidth_gbps = bw;
  r.ok = true;
  return r;
}

}  // namespace

void assign_reduction_order(Schedule& s) {
  std::vector<std::uint32_t> red;
  for (std::size_t i = 0; i < s.transfers.size(); ++i)
    if (s.transfers[i].op == Op::Reduce) red.push_back(static_cast<std::uint32_t>(i));
  std::sort(red.begin(), red.end(), [&](std::uint32_t a, std::uint32_t b) {
    const Transfer& x = s.transfers[a];
    const Transfer& y = s.transfers[b];
    if (x.dst != y.dst) return x.dst < y.dst;
    if (x.chunk != y.chunk) return x.chunk < y.chunk;
    if (x.end != y.end) return x.end < y.end;
    if (x.start != y.start) return x.start < y.start;
    return a < b;
  });
  for (std::size_t k = 0; k < red.size();) {
    std::size_t j = k;
    const Transfer& first = s.transfers[red[k]];
    for (std::int32_t pos = 0; j < red.size() && s.transfers[red[j]].dst == first.dst &&
                               s.transfers[red[j]].chunk == first.chunk;
         ++j, ++pos)
      s.transfers[red[j]].order = pos;
    k = j;
  }
}

CheckResult check(const Schedule& s0, const Topology* topo, const CheckOptions& opt) {
  CheckResult res;
  auto fail = [&](const std::string& m) {
    res.ok = false;
    ++res.error_count;
    if (res.errors.size() < 20) res.errors.push_back(m);
  };
  const Schedule* sp = &s0;
  Schedule timed;
  if (!s0.transfers.empty() && !s0.timed()) {
    if (!topo) {
      fail("schedule has no times: pass a topology so it can be simulated first");
      return res;
    }
    timed = simulate(*topo, s0).timed;
    sp = &timed;
  }
  const Schedule& s = *sp;
  const int n = s.nranks;
  const int C = s.nchunks;
  const std::size_t T = s.transfers.size();
  res.transfers = T;
  if (n < 1 || C < 1 || static_cast<int>(s.owner.size()) != C) {
    fail("bad header: nranks/nchunks/owner inconsistent");
    return res;
  }
  if (!(s.chunk_bytes > 0) || !std::isfinite(s.chunk_bytes)) {
    fail("bad header: chunk_bytes must be positive and finite");
    return res;
  }
  if (topo && topo->num_npus() != n) {
    fail("schedule has " + std::to_string(n) + " ranks, topology has " + std::to_string(topo->num_npus()) + " NPUs");
    return res;
  }
  const bool rooted = s.collective == Collective::Broadcast || s.collective == Collective::Reduce;
  if (rooted && (s.root < 0 || s.root >= n)) {
    fail("root rank " + std::to_string(s.root) + " out of range");
    return res;
  }
  for (int c = 0; c < C; ++c) {
    const int o = s.owner[static_cast<std::size_t>(c)];
    if (o < 0 || o >= n) {
      fail("owner of chunk " + std::to_string(c) + " out of range");
      return res;
    }
  }
  const std::size_t cells = static_cast<std::size_t>(n) * static_cast<std::size_t>(C);
  if (cells >= kEmpty || T >= kEmpty) {
    fail("schedule too large for the checker (more than 2^32 - 1 rank-chunk pairs or transfers)");
    return res;
  }
  const auto cell_of = [C](int r, int c) {
    return static_cast<std::size_t>(r) * static_cast<std::size_t>(C) + static_cast<std::size_t>(c);
  };
  // Steps 1 and 2 (links, with a topology) walk the transfers once each, step 3 twice (starts and ends),
  // step 4 the cells.
  const std::uint64_t total_work = (topo ? 4 : 3) * static_cast<std::uint64_t>(T) + cells;
  std::uint64_t work = 0;
  auto tick = [&](std::uint64_t k) {
    work += k;
    if (opt.progress) opt.progress(work, total_work);
  };

  // 1. Each transfer alone: ranges, times, and with a topology its route and duration.
  std::vector<char> bad(T, 0);
  std::vector<const std::vector<int>*> route_of(topo ? T : 0, nullptr);
  std::vector<RouteInfo> rinfo(topo ? s.routes.size() : 0);
  std::vector<char> rdone(rinfo.size(), 0);
  std::unordered_map<std::uint64_t, std::pair<std::vector<int>, RouteInfo>> default_routes;
  for (std::size_t i = 0; i < T; ++i) {
    if ((i & 0xFFFFF) == 0xFFFFF) tick(0x100000);
    const Transfer& t = s.transfers[i];
    auto who = [&]() {
      return "transfer " + std::to_string(i) + " (chunk " + std::to_string(t.chunk) + ", " + std::to_string(t.src) +
             "->" + std::to_string(t.dst) + ")";
    };
    if (t.chunk < 0 || t.chunk >= C || t.src < 0 || t.src >= n || t.dst < 0 || t.dst >= n || t.src == t.dst) {
      fail(who() + ": chunk or rank out of range");
      bad[i] = 1;
      continue;
    }
    if (!std::isfinite(t.start) || !std::isfinite(t.end) || t.start < 0 || !(t.end >= t.start)) {
      fail(who() + ": times must be finite with 0 <= start <= end");
      bad[i] = 1;
      continue;
    }
    if (t.op == Op::Reduce && t.order < 0) {
      fail(who() + ": a reduction that states no order among the reductions into its (rank, chunk)");
      bad[i] = 1;
      continue;
    }
    res.end_us = std::max(res.end_us, t.end);
    if (!topo) continue;
    const RouteInfo* ri = nullptr;
    if (t.route >= 0) {
      if (static_cast<std::size_t>(t.route) >= s.routes.size()) {
        fail(who() + ": route index " + std::to_string(t.route) + " out of range");
        bad[i] = 1;
        continue;
      }
      const auto r = static_cast<std::size_t>(t.route);
      if (!rdone[r]) {
        rinfo[r] = route_info(*topo, s.routes[r]);
        rdone[r] = 1;
      }
      ri = &rinfo[r];
      route_of[i] = &s.routes[r];
    } else {
      const std::uint64_t key = static_cast<std::uint64_t>(t.src) << 32 | static_cast<std::uint32_t>(t.dst);
      auto it = default_routes.find(key);
      if (it == default_routes.end()) {
        auto route = topo->route(t.src, t.dst);
        RouteInfo info = route_info(*topo, route);
        it = default_routes.emplace(key, std::make_pair(std::move(route), info)).first;
      }
      ri = &it->second.second;
      route_of[i] = &it->second.first;
    }
    if (!ri->ok || ri->src_node != topo->npu_node(t.src) || ri->dst_node != topo->npu_node(t.dst)) {
      fail(who() + ": its route does not lead from its source to its destination");
      bad[i] = 1;
      continue;
    }
    const double need = ri->latency_us + s.chunk_bytes / (ri->bandwidth_gbps * 1e3);
    const double dur = t.end - t.start;
    const double tol = 1e-9 * std::max(need, t.end) + 1e-6;
    if (dur < need - tol) {
      ++res.mistimed;
      fail(who() + ": lasts " + num(dur) + " us, its links need " + num(need) + " us");
    } else if (opt.exact_durations && dur > need + tol) {
      ++res.mistimed;
      fail(who() + ": lasts " + num(dur) + " us, the model gives " + num(need) + " us");
    }
  }
  tick(T & 0xFFFFF);

  // Transfers in start order (ties: list order) and in end order (ties: reduction order, then list order).
  std::vector<long long> st(T), en(T);
  for (std::size_t i = 0; i < T; ++i) {
    st[i] = ps(s.transfers[i].start);
    en[i] = ps(s.transfers[i].end);
  }
  std::vector<std::uint32_t> by_start(T), by_end(T);
  std::iota(by_start.begin(), by_start.end(), 0U);
  std::iota(by_end.begin(), by_end.end(), 0U);
  auto start_less = [&](std::uint32_t a, std::uint32_t b) { return st[a] != st[b] ? st[a] < st[b] : a < b; };
  auto end_less = [&](std::uint32_t a, std::uint32_t b) {
    if (en[a] != en[b]) return en[a] < en[b];
    const std::int32_t oa = s.transfers[a].order, ob = s.transfers[b].order;
    return oa != ob ? oa < ob : a < b;
  };
  if (!std::is_sorted(by_start.begin(), by_start.end(), start_less))
    std::sort(by_start.begin(), by_start.end(), start_less);
  std::sort(by_end.begin(), by_end.end(), end_less);

  // 2. No link carries two transfers at once (in start order, each link remembers when it frees up).
  if (topo) {
    std::vector<long long> link_free(static_cast<std::size_t>(topo->num_links()), -1);
    std::vector<char> reported(link_free.size(), 0);
    for (std::size_t k = 0; k < T; ++k) {
      if ((k & 0xFFFFF) == 0xFFFFF) tick(0x100000);
      const std::uint32_t i = by_start[k];
      if (bad[i]) continue;
      const long long tol = 2 + (std::llabs(st[i]) >> 28);
      for (int l : *route_of[i]) {
        auto& f = link_free[static_cast<std::size_t>(l)];
        if (st[i] < f - tol && !reported[static_cast<std::size_t>(l)]) {
          reported[static_cast<std::size_t>(l)] = 1;
          fail("link " + topo->node(topo->link(l).src).name + "->" + topo->node(topo->link(l).dst).name +
               " carries two transfers at once at t=" + num(s.transfers[i].start) + " us (transfer " +
               std::to_string(i) + ")");
        }
        f = std::max(f, en[i]);
      }
    }
    tick(T & 0xFFFFF);
  }

  // 3. Symbolic replay: ends before starts at the same instant.
  const bool reducing = s.collective == Collective::ReduceScatter || s.collective == Collective::AllReduce ||
                        s.collective == Collective::Reduce;
  std::vector<std::uint32_t> cell(cells, kEmpty);
  if (reducing) {
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < C; ++c) cell[cell_of(r, c)] = static_cast<std::uint32_t>(r);
  } else {
    for (int c = 0; c < C; ++c) {
      const int o = s.collective == Collective::Broadcast ? s.root : s.owner[static_cast<std::size_t>(c)];
      cell[cell_of(o, c)] = static_cast<std::uint32_t>(o);
    }
  }
  bool any_reduce = false;
  for (const auto& t : s.transfers) any_reduce = any_reduce || t.op == Op::Reduce;
  std::vector<std::uint32_t> next_order(any_reduce ? cells : 0, 0);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> nodes;  // union node n + k = (nodes[k].first, .second)
  std::vector<std::uint32_t> payload(T, kEmpty);
  const auto who_at = [&](std::size_t i) {
    const Transfer& t = s.transfers[i];
    return "transfer " + std::to_string(i) + " (chunk " + std::to_string(t.chunk) + ", " + std::to_string(t.src) +
           "->" + std::to_string(t.dst) + ", t=" + num(t.start) + ")";
  };
  for (std::size_t a = 0, b = 0, k = 0; a < T || b < T; ++k) {
    if ((k & 0xFFFFF) == 0xFFFFF) tick(0x100000);
    const bool end_next = b < T && (a >= T || en[by_end[b]] <= st[by_start[a]]);
    if (!end_next) {
      const std::uint32_t i = by_start[a++];
      if (bad[i]) continue;
      const Transfer& t = s.transfers[i];
      const std::uint32_t p = cell[cell_of(t.src, t.chunk)];
      if (p == kEmpty) fail(who_at(i) + ": its source does not hold the chunk when the transfer starts");
      payload[i] = p;
      continue;
    }
    const std::uint32_t i = by_end[b++];
    if (bad[i]) continue;
    const Transfer& t = s.transfers[i];
    const std::size_t dc = cell_of(t.dst, t.chunk);
    if (t.op == Op::Reduce) {
      const auto want = next_order[dc];
      if (static_cast<std::uint32_t>(t.order) != want)
        fail(who_at(i) + ": reduction of order " + std::to_string(t.order) + " into rank " + std::to_string(t.dst) +
             " arrives when order " + std::to_string(want) + " is due (orders must follow arrival, from 0)");
      next_order[dc] = std::max(want, static_cast<std::uint32_t>(t.order) + 1);
    }
    const std::uint32_t p = payload[i];
    if (p == kEmpty) continue;
    std::uint32_t& d = cell[dc];
    if (t.op == Op::Copy) {
      if (d == p) ++res.redundant;
      d = p;
    } else if (d == kEmpty) {
      d = p;
    } else {
      if (static_cast<std::size_t>(n) + nodes.size() >= kEmpty) {
        fail("schedule too large for the checker (more than 2^32 reductions)");
        return res;
      }
      nodes.emplace_back(d, p);
      d = static_cast<std::uint32_t>(static_cast<std::size_t>(n) + nodes.size() - 1);
    }
  }
  tick((2 * static_cast<std::uint64_t>(T)) & 0xFFFFF);

  // 4. Final state. A node must be rank `want`'s data (want >= 0) or the full reduction (want < 0).
  std::vector<std::uint8_t> full(nodes.size() + static_cast<std::size_t>(n), 0);  // 0 unknown, 1 full, 2 not
  std::vector<std::uint32_t> stamp(static_cast<std::size_t>(n), 0);
  std::uint32_t cur_stamp = 0;
  std::vector<std::uint32_t> stack;
  std::string why;
  auto is_full = [&](std::uint32_t node) -> bool {
    if (full[node]) return full[node] == 1;
    ++cur_stamp;
    stack.assign(1, node);
    std::size_t count = 0;
    long dup = -1;
    while (!stack.empty() && dup < 0) {
      const std::uint32_t x = stack.back();
      stack.pop_back();
      if (x < static_cast<std::uint32_t>(n)) {
        if (stamp[x] == cur_stamp) dup = x;
        stamp[x] = cur_stamp;
        ++count;
      } else {
        const auto& ch = nodes[x - static_cast<std::uint32_t>(n)];
        stack.push_back(ch.second);
        stack.push_back(ch.first);
      }
    }
    if (dup >= 0) {
      why = "holding the contribution of rank " + std::to_string(dup) + " twice";
    } else if (count != static_cast<std::size_t>(n)) {
      int missing = 0;
      while (stamp[static_cast<std::size_t>(missing)] == cur_stamp) ++missing;
      why = "without the contribution of rank " + std::to_string(missing) + " (" + std::to_string(count) + " of " +
            std::to_string(n) + ")";
    }
    full[node] = dup < 0 && count == static_cast<std::size_t>(n) ? 1 : 2;
    return full[node] == 1;
  };
  auto describe = [&](std::uint32_t node) -> std::string {
    if (node == kEmpty) return "missing";
    if (node < static_cast<std::uint32_t>(n)) return "holding rank " + std::to_string(node) + "'s data";
    return "holding a reduction";
  };
  auto expect_data = [&](int r, int c, int want) {
    const std::uint32_t node = cell[cell_of(r, c)];
    if (node != static_cast<std::uint32_t>(want))
      fail("rank " + std::to_string(r) + " ends with chunk " + std::to_string(c) + " " + describe(node) +
           ", expected rank " + std::to_string(want) + "'s data");
  };
  auto expect_full = [&](int r, int c) {
    const std::uint32_t node = cell[cell_of(r, c)];
    if (node == kEmpty) {
      fail("rank " + std::to_string(r) + " ends with chunk " + std::to_string(c) + " missing, expected the full reduction");
      return;
    }
    const bool known = full[node] != 0;
    if (!is_full(node)) {
      if (!known || res.errors.size() < 20)
        fail("rank " + std::to_string(r) + " ends with chunk " + std::to_string(c) + " " +
             (node < static_cast<std::uint32_t>(n) ? "holding only rank " + std::to_string(node) + "'s contribution"
                                                   : why) +
             ", expected the full reduction");
    }
  };
  for (int c = 0; c < C; ++c) {
    if ((c & 1023) == 1023) tick(1024ULL * static_cast<std::uint64_t>(n));
    const int o = s.owner[static_cast<std::size_t>(c)];
    switch (s.collective) {
      case Collective::AllGather:
        for (int r = 0; r < n; ++r) expect_data(r, c, o);
        break;
      case Collective::Broadcast:
        for (int r = 0; r < n; ++r) expect_data(r, c, s.root);
        break;
      case Collective::AllReduce:
        for (int r = 0; r < n; ++r) expect_full(r, c);
        break;
      case Collective::ReduceScatter: expect_full(o, c); break;
      case Collective::Reduce: expect_full(s.root, c); break;
    }
  }
  work = total_work;
  if (opt.progress) opt.progress(work, total_work);
  return res;
}

Schedule resolve_by_name(const Schedule& s, const std::vector<std::string>& rank_names,
                         const std::vector<std::pair<std::string, std::string>>& link_names, const Topology& topo) {
  if (!topo.finalized()) throw Error("topology not finalized");
  const std::string tname = "topology '" + topo.name + "'";
  if (static_cast<int>(rank_names.size()) != s.nranks)
    throw Error("the schedule names " + std::to_string(rank_names.size()) + " ranks but has nranks = " +
                std::to_string(s.nranks));
  if (s.nranks != topo.num_npus())
    throw Error("the schedule has " + std::to_string(s.nranks) + " ranks, " + tname + " has " +
                std::to_string(topo.num_npus()) + " NPUs");
  std::vector<int> rank_map(rank_names.size(), -1);
  std::vector<char> used(static_cast<std::size_t>(topo.num_npus()), 0);
  for (std::size_t i = 0; i < rank_names.size(); ++i) {
    const int node = topo.node_id(rank_names[i]);
    if (node < 0) throw Error("schedule rank '" + rank_names[i] + "' is not a node of " + tname);
    if (topo.node(node).kind != NodeKind::Npu)
      throw Error("schedule rank '" + rank_names[i] + "' is a " + to_string(topo.node(node).kind) + " in " + tname +
                  ", not an NPU");
    const int r = topo.rank_of_node(node);
    if (used[static_cast<std::size_t>(r)]) throw Error("the schedule names NPU '" + rank_names[i] + "' twice");
    used[static_cast<std::size_t>(r)] = 1;
    rank_map[i] = r;
  }
  std::map<std::pair<int, int>, int> link_id;
  for (int l = 0; l < topo.num_links(); ++l) link_id[{topo.link(l).src, topo.link(l).dst}] = l;
  std::vector<int> link_map(link_names.size(), -1);
  std::map<std::pair<int, int>, std::size_t> seen;
  for (std::size_t j = 0; j < link_names.size(); ++j) {
    const auto& [a, b] = link_names[j];
    const std::string what = "schedule link " + a + " -> " + b;
    const int na = topo.node_id(a), nb = topo.node_id(b);
    if (na < 0) throw Error(what + ": '" + a + "' is not a node of " + tname);
    if (nb < 0) throw Error(what + ": '" + b + "' is not a node of " + tname);
    auto it = link_id.find({na, nb});
    if (it == link_id.end()) throw Error(what + " is not a link of " + tname);
    if (!seen.emplace(std::make_pair(na, nb), j).second) throw Error("the schedule lists link " + a + " -> " + b + " twice");
    link_map[j] = it->second;
  }
  Schedule out = s;
  for (std::size_t k = 0; k < out.routes.size(); ++k)
    for (int& l : out.routes[k]) {
      if (l < 0 || static_cast<std::size_t>(l) >= link_map.size())
        throw Error("schedule route " + std::to_string(k) + " uses link " + std::to_string(l) + ", the schedule lists " +
                    std::to_string(link_map.size()) + " links");
      l = link_map[static_cast<std::size_t>(l)];
    }
  const auto map_rank = [&](int r, const std::string& what) {
    if (r < 0 || r >= s.nranks) throw Error(what + ": rank " + std::to_string(r) + " out of range");
    return rank_map[static_cast<std::size_t>(r)];
  };
  for (std::size_t i = 0; i < out.transfers.size(); ++i) {
    Transfer& t = out.transfers[i];
    t.src = map_rank(t.src, "transfer " + std::to_string(i));
    t.dst = map_rank(t.dst, "transfer " + std::to_string(i));
  }
  for (std::size_t c = 0; c < out.owner.size(); ++c) out.owner[c] = map_rank(out.owner[c], "owner of chunk " + std::to_string(c));
  out.root = map_rank(out.root, "root");
  return out;
}

}  // namespace autoccl::synth
