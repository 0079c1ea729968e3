// Congestion-aware replay of a schedule on a topology.
//
// Transfers are taken in schedule order (start time for timed schedules, step for untimed ones; the
// original index breaks ties). A transfer holds every link of its route for its whole duration
// (alpha = sum of latencies, beta = chunk bytes / min bandwidth); a link carries one transfer at a time,
// in schedule order. A transfer of chunk c from rank r starts once every earlier-ordered transfer of c
// into r has ended (data dependency) and all its links are free.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "autoccl/synth/synth.h"

namespace autoccl::synth {

SimResult simulate(const Topology& topo, const Schedule& s) {
  if (!topo.finalized()) throw Error("topology not finalized");
  if (topo.num_npus() != s.nranks)
    throw Error("schedule has " + std::to_string(s.nranks) + " ranks, topology has " +
                std::to_string(topo.num_npus()) + " NPUs");
  const size_t T = s.transfers.size();
  const bool timed = s.timed();
  std::vector<size_t> order(T);
  std::iota(order.begin(), order.end(), 0);
  std::vector<long long> key(T);
  for (size_t i = 0; i < T; ++i)
    key[i] = timed ? std::llround(s.transfers[i].start * 1e6) : static_cast<long long>(s.transfers[i].step);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });

  const size_t C = static_cast<size_t>(s.nchunks);
  const size_t cells = static_cast<size_t>(s.nranks) * C;
  if (cells > 200'000'000) throw Error("schedule too large to simulate (nranks*nchunks > 2e8)");
  std::vector<double> ready(cells, 0.0);
  std::vector<double> link_free(static_cast<size_t>(topo.num_links()), 0.0);
  SimResult res;
  res.link_busy_us.assign(static_cast<size_t>(topo.num_links()), 0.0);
  res.timed = s;
  std::map<std::pair<int, int>, int> route_cache;
  auto route_of = [&](const Transfer& t) -> const std::vector<int>& {
    if (t.route >= 0) {
      if (static_cast<size_t>(t.route) >= s.routes.size()) throw Error("transfer route index out of range");
      return s.routes[static_cast<size_t>(t.route)];
    }
    auto it = route_cache.find({t.src, t.dst});
    if (it == route_cache.end()) {
      res.timed.routes.push_back(topo.route(t.src, t.dst));
      it = route_cache.emplace(std::make_pair(t.src, t.dst), static_cast<int>(res.timed.routes.size() - 1)).first;
    }
    return res.timed.routes[static_cast<size_t>(it->second)];
  };
  // Routes cache added to res.timed.routes; route indices of untimed transfers are rewritten.
  std::vector<std::pair<size_t, double>> pending;  // (cell, end) applied at the end of a key group
  size_t g = 0;
  double finish = 0;
  while (g < T) {
    size_t h = g;
    while (h < T && key[order[h]] == key[order[g]]) ++h;
    pending.clear();
    for (size_t k = g; k < h; ++k) {
      const size_t i = order[k];
      const Transfer& t = s.transfers[i];
      if (t.chunk < 0 || static_cast<size_t>(t.chunk) >= C || t.src < 0 || t.src >= s.nranks || t.dst < 0 ||
          t.dst >= s.nranks)
        throw Error("transfer " + std::to_string(i) + ": chunk or rank out of range");
      const auto& route = route_of(t);
      double lat = 0, bw = 1e300;
      double start = ready[static_cast<size_t>(t.src) * C + static_cast<size_t>(t.chunk)];
      for (int l : route) {
        const auto& L = topo.link(l);
        lat += L.latency_us;
        bw = std::min(bw, L.bandwidth_gbps);
        start = std::max(start, link_free[static_cast<size_t>(l)]);
      }
      const double dur = lat + s.chunk_bytes / (bw * 1e3);
      const double end = start + dur;
      for (int l : route) {
        link_free[static_cast<size_t>(l)] = end;
        res.link_busy_us[static_cast<size_t>(l)] += dur;
      }
      auto& out = res.timed.transfers[i];
      out.start = start;
      out.end = end;
      if (out.route < 0) out.route = route_cache.at({t.src, t.dst});
      pending.push_back({static_cast<size_t>(t.dst) * C + static_cast<size_t>(t.chunk), end});
      finish = std::max(finish, end);
    }
    for (const auto& [cell, end] : pending) ready[cell] = std::max(ready[cell], end);
    g = h;
  }
  // The replay applies reductions in the order they arrive in it.
  assign_reduction_order(res.timed);
  res.time_us = finish;
  res.timed.time_us = finish;
  res.algbw_gbps = finish > 0 ? s.bytes / (finish * 1e3) : 0;
  res.link_util.resize(res.link_busy_us.size());
  for (size_t l = 0; l < res.link_busy_us.size(); ++l)
    res.link_util[l] = finish > 0 ? res.link_busy_us[l] / finish : 0;
  return res;
}

}  // namespace autoccl::synth
