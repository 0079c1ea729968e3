// Lower bounds on a collective's time from bandwidth alone (valid for any schedule and any chunking in the
// alpha-beta model, with no reduction inside the network).
//
// For a group U of NPUs, cap_in(U) is the largest rate at which data can enter U's NPUs from the other NPUs (a
// max-flow through switches and NICs, link capacities = bandwidths) and cap_out(U) the rate leaving it. With
// S the collective's buffer (bytes) and n NPUs:
//   All-Gather      every chunk from outside U must enter U once:       T >= (n - |U|)/n S / cap_in(U)
//   Reduce-Scatter  every contribution of U to outside chunks leaves:   T >= (n - |U|)/n S / cap_out(U)
//   All-Reduce      every element of the result enters U, and U's contribution to it leaves U:
//                                                                       T >= S / cap_in(U), S / cap_out(U)
//   Broadcast/Reduce  groups without the root:                          T >= S / cap_in(U) (cap_out for Reduce)
// A partition of the NPUs into G groups adds: All-Gather (Reduce-Scatter) must move sum_U (n - |U|)/n S across
// the groups' ingress (egress); an All-Reduce needs at least 2 (G - 1) transmissions of every element between
// groups (G - 1 to join the contributions into a first complete sum, then one into each other group), so
// T >= 2 (G - 1) S / sum_U cap_in(U), and the same with cap_out.
// Groups: single NPUs (the per-NPU bound) and the topology's natural groups: the NPUs around each switch (a
// host's NVSwitch, a switch domain), blocks of consecutive ranks along its dimensions (hosts of a cluster,
// groups of a dragonfly, rows and planes of a torus) and halves along each dimension (bisections).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <set>
#include <sstream>

#include "autoccl/synth/synth.h"

namespace autoccl::synth {

namespace {

// Dinic's max-flow on a small graph with real capacities.
class MaxFlow {
 public:
  explicit MaxFlow(int n) : head_(static_cast<std::size_t>(n), -1), level_(static_cast<std::size_t>(n)), it_(level_.size()) {}
  void add(int u, int v, double cap) {
    edges_.push_back({v, head_[static_cast<std::size_t>(u)], cap});
    head_[static_cast<std::size_t>(u)] = static_cast<int>(edges_.size()) - 1;
    edges_.push_back({u, head_[static_cast<std::size_t>(v)], 0});
    head_[static_cast<std::size_t>(v)] = static_cast<int>(edges_.size()) - 1;
  }
  double run(int s, int t) {
    double flow = 0;
    while (bfs(s, t)) {
      it_ = head_;
      for (double f; (f = dfs(s, t, kInf)) > kEps;) flow += f;
    }
    return flow;
  }

 private:
  struct E {
    int to, next;
    double cap;
  };
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  static constexpr double kEps = 1e-12;
  std::vector<E> edges_;
  std::vector<int> head_, level_, it_;
  bool bfs(int s, int t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::queue<int> q;
    level_[static_cast<std::size_t>(s)] = 0;
    q.push(s);
    while (!q.empty()) {
      const int u = q.front();
      q.pop();
      for (int e = head_[static_cast<std::size_t>(u)]; e >= 0; e = edges_[static_cast<std::size_t>(e)].next) {
        const E& x = edges_[static_cast<std::size_t>(e)];
        if (x.cap > kEps && level_[static_cast<std::size_t>(x.to)] < 0) {
          level_[static_cast<std::size_t>(x.to)] = level_[static_cast<std::size_t>(u)] + 1;
          q.push(x.to);
        }
      }
    }
    return level_[static_cast<std::size_t>(t)] >= 0;
  }
  double dfs(int u, int t, double f) {
    if (u == t) return f;
    for (int& e = it_[static_cast<std::size_t>(u)]; e >= 0; e = edges_[static_cast<std::size_t>(e)].next) {
      E& x = edges_[static_cast<std::size_t>(e)];
      if (x.cap > kEps && level_[static_cast<std::size_t>(x.to)] == level_[static_cast<std::size_t>(u)] + 1) {
        const double d = dfs(x.to, t, std::min(f, x.cap));
        if (d > kEps) {
          x.cap -= d;
          edges_[static_cast<std::size_t>(e ^ 1)].cap += d;
          return d;
        }
      }
    }
    return 0;
  }
};

struct Group {
  std::vector<int> ranks;  // sorted
  std::string name;
};

struct Family {  // groups that partition the NPUs (or not)
  std::string name;
  std::vector<Group> groups;
  bool partition = false;
};

std::string range_name(const std::vector<int>& r) {
  std::ostringstream o;
  bool consecutive = true;
  for (std::size_t i = 1; i < r.size(); ++i) consecutive = consecutive && r[i] == r[i - 1] + 1;
  if (consecutive && r.size() > 1)
    o << "ranks " << r.front() << ".." << r.back();
  else if (r.size() == 1)
    o << "rank " << r.front();
  else
    o << r.size() << " ranks from " << r.front();
  return o.str();
}

std::vector<Family> natural_families(const Topology& t) {
  const int n = t.num_npus();
  std::vector<Family> fam;
  // NPUs next to each switch or NIC.
  {
    Family f{"switch domains", {}, false};
    std::set<std::vector<int>> seen;
    std::vector<std::vector<int>> near(static_cast<std::size_t>(t.num_nodes()));
    for (const Link& l : t.links()) {
      if (t.node(l.src).kind == NodeKind::Npu && t.node(l.dst).kind != NodeKind::Npu)
        near[static_cast<std::size_t>(l.dst)].push_back(t.rank_of_node(l.src));
      if (t.node(l.dst).kind == NodeKind::Npu && t.node(l.src).kind != NodeKind::Npu)
        near[static_cast<std::size_t>(l.src)].push_back(t.rank_of_node(l.dst));
    }
    std::vector<int> covered(static_cast<std::size_t>(n), 0);
    for (int x = 0; x < t.num_nodes(); ++x) {
      auto& r = near[static_cast<std::size_t>(x)];
      std::sort(r.begin(), r.end());
      r.erase(std::unique(r.begin(), r.end()), r.end());
      if (r.size() < 2 || static_cast<int>(r.size()) >= n || !seen.insert(r).second) continue;
      for (int k : r) ++covered[static_cast<std::size_t>(k)];
      f.groups.push_back({r, "NPUs at " + t.node(x).name + " (" + range_name(r) + ")"});
    }
    f.partition = !f.groups.empty() && std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; });
    if (!f.groups.empty()) fam.push_back(std::move(f));
  }
  const auto& dims = t.dims;
  if (dims.size() >= 2) {
    long long block = 1;
    for (std::size_t j = 0; j + 1 < dims.size(); ++j) {
      block *= dims[j];
      if (block < 2 || block >= n) continue;
      Family f{"blocks of " + std::to_string(block) + " ranks", {}, true};
      for (int b = 0; b < n; b += static_cast<int>(block)) {
        Group g;
        for (int r = b; r < b + block; ++r) g.ranks.push_back(r);
        g.name = range_name(g.ranks);
        f.groups.push_back(std::move(g));
      }
      fam.push_back(std::move(f));
    }
  }
  if (!dims.empty()) {
    long long stride = 1;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const int len = dims[d];
      if (len >= 2) {
        Family f{"halves along dimension " + std::to_string(d), {}, true};
        Group lo, hi;
        for (int r = 0; r < n; ++r) ((r / stride) % len < len / 2 ? lo : hi).ranks.push_back(r);
        lo.name = "lower half of dimension " + std::to_string(d);
        hi.name = "upper half of dimension " + std::to_string(d);
        f.groups.push_back(std::move(lo));
        f.groups.push_back(std::move(hi));
        fam.push_back(std::move(f));
      }
      stride *= len;
    }
  }
  return fam;
}

// In the alpha-beta model of the synthesizer (and of TACOS) a transfer carries one chunk of at most S/n bytes
// (at least one chunk per NPU) and holds every link of its route for alpha + bytes/beta of the route, so in time
// T a link l carries at most T / (alpha_l + c/beta_l) chunks, c = S/n (smaller chunks only lengthen it). A
// group must receive (All-Gather: n - |U| chunks; All-Reduce: n) and send (Reduce-Scatter: n - |U|;
// All-Reduce: n) chunk transfers over the links that enter or leave its NPUs; a partition into G groups sees
// 2 (G - 1) n transfers between groups in an All-Reduce. These bounds hold for schedules of this model only.
void model_bounds(const Topology& t, Collective coll, double bytes, const std::vector<Family>& fams,
                  LowerBound& lb) {
  if (coll == Collective::Broadcast || coll == Collective::Reduce) return;
  const int n = t.num_npus();
  const double c = bytes / n;
  auto rate = [&](const Link& l) { return 1.0 / (l.latency_us + c / (l.bandwidth_gbps * 1e3)); };
  auto consider = [&](double v, const std::string& what) {
    if (v > lb.model_us * (1 + 1e-12)) {
      lb.model_us = v;
      lb.model_what = what;
    }
  };
  const bool need_in = coll != Collective::ReduceScatter, need_out = coll != Collective::AllGather;
  // Rates into and out of a set of NPUs (links between the set's NPUs and any other node).
  std::vector<char> in_set(static_cast<std::size_t>(n), 0);
  auto rates = [&](const std::vector<int>& ranks) {
    for (int r : ranks) in_set[static_cast<std::size_t>(r)] = 1;
    double in = 0, out = 0;
    for (const Link& l : t.links()) {
      const int a = t.rank_of_node(l.src), b = t.rank_of_node(l.dst);
      const bool ia = a >= 0 && in_set[static_cast<std::size_t>(a)], ib = b >= 0 && in_set[static_cast<std::size_t>(b)];
      if (ib && !ia) in += rate(l);
      if (ia && !ib) out += rate(l);
    }
    for (int r : ranks) in_set[static_cast<std::size_t>(r)] = 0;
    return std::make_pair(in, out);
  };
  std::vector<double> rin(static_cast<std::size_t>(n), 0), rout(static_cast<std::size_t>(n), 0);
  for (const Link& l : t.links()) {
    const int a = t.rank_of_node(l.src), b = t.rank_of_node(l.dst);
    if (b >= 0) rin[static_cast<std::size_t>(b)] += rate(l);
    if (a >= 0) rout[static_cast<std::size_t>(a)] += rate(l);
  }
  double sum_in = 0, sum_out = 0;
  for (int r = 0; r < n; ++r) {
    sum_in += rin[static_cast<std::size_t>(r)];
    sum_out += rout[static_cast<std::size_t>(r)];
    const std::string who = t.node(t.npu_node(r)).name;
    const double chunks = coll == Collective::AllReduce ? n : n - 1;
    if (need_in) consider(chunks / rin[static_cast<std::size_t>(r)], "chunks into " + who);
    if (need_out) consider(chunks / rout[static_cast<std::size_t>(r)], "chunks out of " + who);
  }
  if (coll == Collective::AllReduce) {
    consider(2.0 * (n - 1) * n / sum_in, "2(n-1) transfers of every chunk into NPUs");
    consider(2.0 * (n - 1) * n / sum_out, "2(n-1) transfers of every chunk out of NPUs");
  }
  if (static_cast<double>(t.num_links()) * static_cast<double>(fams.size()) > 5e7) return;
  for (const auto& f : fams) {
    double fin = 0, fout = 0, fneed = 0;
    for (const auto& g : f.groups) {
      const auto [in, out] = rates(g.ranks);
      fin += in;
      fout += out;
      const double k = static_cast<double>(g.ranks.size());
      const double chunks = coll == Collective::AllReduce ? n : n - k;
      fneed += n - k;
      const std::string what = f.name + ": " + g.name;
      if (need_in && in > 0) consider(chunks / in, "chunks into " + what);
      if (need_out && out > 0) consider(chunks / out, "chunks out of " + what);
    }
    if (!f.partition || f.groups.size() < 2) continue;
    const double G = static_cast<double>(f.groups.size());
    if (coll == Collective::AllReduce) {
      if (fin > 0) consider(2 * (G - 1) * n / fin, f.name + ": 2(G-1) transfers of every chunk into groups");
      if (fout > 0) consider(2 * (G - 1) * n / fout, f.name + ": 2(G-1) transfers of every chunk out of groups");
    } else if (coll == Collective::AllGather && fin > 0) {
      consider(fneed / fin, f.name + ": chunks entering the groups");
    } else if (coll == Collective::ReduceScatter && fout > 0) {
      consider(fneed / fout, f.name + ": chunks leaving the groups");
    }
  }
}

}  // namespace

LowerBound lower_bound(const Topology& t, Collective coll, double bytes, int root) {
  LowerBound lb;
  const int n = t.num_npus();
  if (n < 2 || !(bytes > 0)) return lb;
  if (root < 0 || root >= n) throw Error("root rank out of range");
  const double S = bytes;
  auto consider = [&](double v, const std::string& kind, const std::string& what) {
    if (v > lb.time_us * (1 + 1e-12)) {
      lb.time_us = v;
      lb.kind = kind;
      lb.what = what;
    }
  };
  // Single NPUs: their own links are the cut.
  double sum_in = 0, sum_out = 0;
  for (int r = 0; r < n; ++r) {
    const double in = t.in_bandwidth(r) * 1e3, out = t.out_bandwidth(r) * 1e3;  // bytes/us
    sum_in += in;
    sum_out += out;
    const std::string who = t.node(t.npu_node(r)).name;
    const double frac = static_cast<double>(n - 1) / n * S;
    switch (coll) {
      case Collective::AllGather: consider(frac / in, "per-NPU", "ingress of " + who); break;
      case Collective::ReduceScatter: consider(frac / out, "per-NPU", "egress of " + who); break;
      case Collective::AllReduce:
        consider(S / in, "per-NPU", "ingress of " + who);
        consider(S / out, "per-NPU", "egress of " + who);
        break;
      case Collective::Broadcast:
        if (r != root) consider(S / in, "per-NPU", "ingress of " + who);
        break;
      case Collective::Reduce:
        if (r != root) consider(S / out, "per-NPU", "egress of " + who);
        break;
    }
  }
  if (coll == Collective::AllReduce) {
    const double all = 2.0 * (n - 1) * S;
    consider(all / sum_in, "per-NPU", "2(n-1) transmissions of every element over all NPUs' ingress");
    consider(all / sum_out, "per-NPU", "2(n-1) transmissions of every element over all NPUs' egress");
  }
  lb.per_npu_us = lb.time_us;

  // Natural groups, with max-flow capacities where switches or NICs sit between NPUs.
  const auto fams = natural_families(t);
  bool npu_only = true;
  for (const auto& nd : t.nodes()) npu_only = npu_only && nd.kind == NodeKind::Npu;
  std::size_t groups = 0;
  for (const auto& f : fams) groups += f.groups.size();
  const bool use_flow = !npu_only && static_cast<double>(groups) * t.num_links() <= 5e7;
  std::vector<char> in_group(static_cast<std::size_t>(n), 0);
  auto capacity = [&](const Group& g, bool ingress) -> double {
    for (int r : g.ranks) in_group[static_cast<std::size_t>(r)] = 1;
    double cap = 0;
    if (use_flow) {
      const int V = t.num_nodes();
      MaxFlow mf(V + 2);
      for (const Link& l : t.links()) {
        if (ingress)
          mf.add(l.src, l.dst, l.bandwidth_gbps * 1e3);
        else
          mf.add(l.dst, l.src, l.bandwidth_gbps * 1e3);  // egress = ingress on the reversed graph
      }
      const double inf = std::numeric_limits<double>::infinity();
      for (int r = 0; r < n; ++r) {
        if (in_group[static_cast<std::size_t>(r)])
          mf.add(t.npu_node(r), V + 1, inf);
        else
          mf.add(V, t.npu_node(r), inf);
      }
      cap = mf.run(V, V + 1);
    } else {
      // The links between the group's NPUs and the others (no other nodes exist, or too many groups to flow).
      for (const Link& l : t.links()) {
        const int a = t.rank_of_node(l.src), b = t.rank_of_node(l.dst);
        const bool ia = a >= 0 && in_group[static_cast<std::size_t>(a)], ib = b >= 0 && in_group[static_cast<std::size_t>(b)];
        if (ingress ? (!ia && ib) : (ia && !ib)) cap += l.bandwidth_gbps * 1e3;
      }
    }
    for (int r : g.ranks) in_group[static_cast<std::size_t>(r)] = 0;
    return cap;
  };
  for (const auto& f : fams) {
    double fam_in = 0, fam_out = 0, fam_need = 0;
    const auto G = static_cast<double>(f.groups.size());
    for (const auto& g : f.groups) {
      const double k = static_cast<double>(g.ranks.size());
      const bool need_in = coll != Collective::ReduceScatter && coll != Collective::Reduce;
      const bool need_out = coll != Collective::AllGather && coll != Collective::Broadcast;
      const double cin = need_in ? capacity(g, true) : 0, cout = need_out ? capacity(g, false) : 0;
      fam_in += cin;
      fam_out += cout;
      const double frac = (n - k) / n * S;
      fam_need += frac;
      const bool has_root = std::binary_search(g.ranks.begin(), g.ranks.end(), root);
      const std::string what = f.name + ": " + g.name;
      if (need_in && !(cin > 0)) continue;
      if (need_out && !(cout > 0)) continue;
      switch (coll) {
        case Collective::AllGather: consider(frac / cin, "cut", "ingress of " + what); break;
        case Collective::ReduceScatter: consider(frac / cout, "cut", "egress of " + what); break;
        case Collective::AllReduce:
          consider(S / cin, "cut", "ingress of " + what);
          consider(S / cout, "cut", "egress of " + what);
          break;
        case Collective::Broadcast:
          if (!has_root) consider(S / cin, "cut", "ingress of " + what);
          break;
        case Collective::Reduce:
          if (!has_root) consider(S / cout, "cut", "egress of " + what);
          break;
      }
    }
    if (!f.partition || G < 2) continue;
    switch (coll) {
      case Collective::AllGather:
        if (fam_in > 0) consider(fam_need / fam_in, "partition", f.name + ": data entering the groups");
        break;
      case Collective::ReduceScatter:
        if (fam_out > 0) consider(fam_need / fam_out, "partition", f.name + ": data leaving the groups");
        break;
      case Collective::AllReduce:
        if (fam_in > 0) consider(2 * (G - 1) * S / fam_in, "partition", f.name + ": 2(G-1) transmissions into groups");
        if (fam_out > 0)
          consider(2 * (G - 1) * S / fam_out, "partition", f.name + ": 2(G-1) transmissions out of groups");
        break;
      default: break;
    }
  }
  model_bounds(t, coll, bytes, fams, lb);
  return lb;
}

double bandwidth_lower_bound(const Topology& t, Collective coll, double bytes, int root) {
  return lower_bound(t, coll, bytes, root).time_us;
}

}  // namespace autoccl::synth
