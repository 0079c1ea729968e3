#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <set>
#include <cstdio>
#include <sstream>

#include "autoccl/synth/synth.h"

namespace autoccl::synth {

const char* to_string(NodeKind k) {
  switch (k) {
    case NodeKind::Npu: return "npu";
    case NodeKind::Switch: return "switch";
    case NodeKind::Nic: return "nic";
  }
  return "?";
}

NodeKind node_kind_from_string(const std::string& s) {
  if (s == "npu" || s == "gpu") return NodeKind::Npu;
  if (s == "switch") return NodeKind::Switch;
  if (s == "nic") return NodeKind::Nic;
  throw Error("unknown node kind '" + s + "' (expected npu, switch or nic)");
}

int Topology::add_node(const std::string& nm, NodeKind kind) {
  if (finalized_) throw Error("topology is finalized");
  if (nm.empty()) throw Error("node with an empty name");
  if (by_name_.count(nm)) throw Error("duplicate node '" + nm + "'");
  const int id = num_nodes();
  nodes_.push_back(Node{nm, kind});
  by_name_[nm] = id;
  return id;
}

int Topology::node_id(const std::string& nm) const {
  auto it = by_name_.find(nm);
  return it == by_name_.end() ? -1 : it->second;
}

int Topology::add_link(const std::string& src, const std::string& dst, double latency_us,
                       double bandwidth_gbps) {
  const int s = node_id(src), d = node_id(dst);
  if (s < 0) throw Error("link " + src + " -> " + dst + ": unknown node '" + src + "'");
  if (d < 0) throw Error("link " + src + " -> " + dst + ": unknown node '" + dst + "'");
  return add_link(s, d, latency_us, bandwidth_gbps);
}

int Topology::add_link(int src, int dst, double latency_us, double bandwidth_gbps) {
  if (finalized_) throw Error("topology is finalized");
  if (src < 0 || src >= num_nodes() || dst < 0 || dst >= num_nodes())
    throw Error("link between unknown node ids " + std::to_string(src) + " -> " + std::to_string(dst));
  const std::string what = "link " + nodes_[static_cast<size_t>(src)].name + " -> " +
                           nodes_[static_cast<size_t>(dst)].name;
  if (src == dst) throw Error(what + ": self loop");
  if (!(bandwidth_gbps > 0) || !std::isfinite(bandwidth_gbps))
    throw Error(what + ": bandwidth must be positive and finite, got " + std::to_string(bandwidth_gbps));
  if (!(latency_us >= 0) || !std::isfinite(latency_us))
    throw Error(what + ": latency must be >= 0 and finite, got " + std::to_string(latency_us));
  if (!link_set_.insert({src, dst}).second)
    throw Error(what + ": duplicate link (aggregate parallel links into one bandwidth)");
  links_.push_back(Link{src, dst, latency_us, bandwidth_gbps});
  return num_links() - 1;
}

void Topology::fail_node(const std::string& nm) {
  if (node_id(nm) < 0) throw Error("failed node '" + nm + "': unknown node");
  failed_nodes_.push_back(nm);
}

void Topology::fail_link(const std::string& src, const std::string& dst) {
  if (node_id(src) < 0) throw Error("failed link " + src + " -> " + dst + ": unknown node '" + src + "'");
  if (node_id(dst) < 0) throw Error("failed link " + src + " -> " + dst + ": unknown node '" + dst + "'");
  failed_links_.emplace_back(src, dst);
}

void Topology::finalize() {
  if (finalized_) return;
  // Apply failures: rebuild nodes and links without the failed ones.
  if (!failed_nodes_.empty() || !failed_links_.empty()) {
    std::set<int> dead_nodes;
    for (const auto& n : failed_nodes_) dead_nodes.insert(node_id(n));
    std::set<std::pair<int, int>> dead_links;
    for (const auto& [a, b] : failed_links_) {
      const int s = node_id(a), d = node_id(b);
      bool found = false;
      for (const auto& l : links_) found = found || (l.src == s && l.dst == d);
      if (!found) throw Error("failed link " + a + " -> " + b + ": no such link");
      dead_links.insert({s, d});
    }
    std::vector<int> remap(nodes_.size(), -1);
    std::vector<Node> nn;
    std::vector<std::pair<double, double>> nl;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (dead_nodes.count(static_cast<int>(i))) continue;
      remap[i] = static_cast<int>(nn.size());
      nn.push_back(nodes_[i]);
      if (layout.size() == nodes_.size()) nl.push_back(layout[i]);
    }
    std::vector<Link> ll;
    for (const auto& l : links_) {
      if (remap[static_cast<size_t>(l.src)] < 0 || remap[static_cast<size_t>(l.dst)] < 0) continue;
      if (dead_links.count({l.src, l.dst})) continue;
      ll.push_back(Link{remap[static_cast<size_t>(l.src)], remap[static_cast<size_t>(l.dst)], l.latency_us,
                        l.bandwidth_gbps});
    }
    nodes_ = std::move(nn);
    links_ = std::move(ll);
    layout = std::move(nl);
    by_name_.clear();
    for (size_t i = 0; i < nodes_.size(); ++i) by_name_[nodes_[i].name] = static_cast<int>(i);
    link_set_.clear();
    for (const auto& l : links_) link_set_.insert({l.src, l.dst});
    dims.clear();  // mixed-radix structure no longer holds
    failed_nodes_.clear();
    failed_links_.clear();
  }
  npus_.clear();
  rank_of_.assign(nodes_.size(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].kind == NodeKind::Npu) {
      rank_of_[i] = static_cast<int>(npus_.size());
      npus_.push_back(static_cast<int>(i));
    }
  if (npus_.empty()) throw Error("topology has no NPUs");
  if (!dims.empty()) {
    long long p = 1;
    for (int d : dims) p *= d;
    if (p != num_npus()) dims.clear();
  }
  out_links_.assign(nodes_.size(), {});
  in_links_.assign(nodes_.size(), {});
  auto& in_links = in_links_;
  for (size_t i = 0; i < links_.size(); ++i) {
    out_links_[static_cast<size_t>(links_[i].src)].push_back(static_cast<int>(i));
    in_links[static_cast<size_t>(links_[i].dst)].push_back(static_cast<int>(i));
  }
  // Connectivity: every NPU must reach every other NPU and be reached (strong connectivity over NPUs).
  auto reach = [&](bool forward) {
    std::vector<char> seen(nodes_.size(), 0);
    std::vector<int> stack{npus_[0]};
    seen[static_cast<size_t>(npus_[0])] = 1;
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      for (int li : forward ? out_links_[static_cast<size_t>(u)] : in_links[static_cast<size_t>(u)]) {
        const auto& l = links_[static_cast<size_t>(li)];
        const int v = forward ? l.dst : l.src;
        if (!seen[static_cast<size_t>(v)]) {
          seen[static_cast<size_t>(v)] = 1;
          stack.push_back(v);
        }
      }
    }
    return seen;
  };
  for (int pass = 0; pass < 2; ++pass) {
    const auto seen = reach(pass == 0);
    std::vector<std::string> bad;
    for (int n : npus_)
      if (!seen[static_cast<size_t>(n)]) bad.push_back(nodes_[static_cast<size_t>(n)].name);
    if (!bad.empty()) {
      std::ostringstream os;
      os << "disconnected NPUs: " << bad.size() << " NPU(s) "
         << (pass == 0 ? "cannot be reached from " : "cannot reach ") << nodes_[static_cast<size_t>(npus_[0])].name
         << " (e.g. ";
      for (size_t i = 0; i < std::min<size_t>(bad.size(), 5); ++i) os << (i ? ", " : "") << bad[i];
      os << ")";
      throw Error(os.str());
    }
  }
  build_channels_();
  finalized_ = true;
}

// Channels: for each NPU, Dijkstra through non-NPU nodes; each NPU reached gives one channel.
void Topology::build_channels_() {
  channels_.clear();
  ch_index_.clear();
  const size_t n = npus_.size();
  in_ch_.assign(n, {});
  out_ch_.assign(n, {});
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> dist(nodes_.size(), inf);
  std::vector<int> via(nodes_.size(), -1);
  std::vector<int> touched;
  for (size_t r = 0; r < n; ++r) {
    const int s = npus_[r];
    using QE = std::pair<double, int>;
    std::priority_queue<QE, std::vector<QE>, std::greater<QE>> pq;
    for (int t : touched) {
      dist[static_cast<size_t>(t)] = inf;
      via[static_cast<size_t>(t)] = -1;
    }
    touched.clear();
    dist[static_cast<size_t>(s)] = 0;
    touched.push_back(s);
    pq.push({0.0, s});
    std::vector<int> reached;
    while (!pq.empty()) {
      auto [du, u] = pq.top();
      pq.pop();
      if (du > dist[static_cast<size_t>(u)]) continue;
      if (u != s && nodes_[static_cast<size_t>(u)].kind == NodeKind::Npu) {
        reached.push_back(u);
        continue;  // do not route through other NPUs
      }
      for (int li : out_links_[static_cast<size_t>(u)]) {
        const auto& l = links_[static_cast<size_t>(li)];
        // cost: latency plus a small term favouring high bandwidth and few hops
        const double w = l.latency_us + 1e-3 / l.bandwidth_gbps + 1e-9;
        const double nd = du + w;
        if (nd < dist[static_cast<size_t>(l.dst)]) {
          if (dist[static_cast<size_t>(l.dst)] == inf) touched.push_back(l.dst);
          dist[static_cast<size_t>(l.dst)] = nd;
          via[static_cast<size_t>(l.dst)] = li;
          pq.push({nd, l.dst});
        }
      }
    }
    std::sort(reached.begin(), reached.end());
    for (int d : reached) {
      Channel ch;
      ch.src = static_cast<int>(r);
      ch.dst = rank_of_[static_cast<size_t>(d)];
      for (int v = d; v != s;) {
        const int li = via[static_cast<size_t>(v)];
        ch.route.push_back(li);
        v = links_[static_cast<size_t>(li)].src;
      }
      std::reverse(ch.route.begin(), ch.route.end());
      ch.bandwidth_gbps = inf;
      for (int li : ch.route) {
        ch.latency_us += links_[static_cast<size_t>(li)].latency_us;
        ch.bandwidth_gbps = std::min(ch.bandwidth_gbps, links_[static_cast<size_t>(li)].bandwidth_gbps);
      }
      const int id = static_cast<int>(channels_.size());
      ch_index_[{ch.src, ch.dst}] = id;
      out_ch_[static_cast<size_t>(ch.src)].push_back(id);
      in_ch_[static_cast<size_t>(ch.dst)].push_back(id);
      channels_.push_back(std::move(ch));
    }
  }
  uniform_ = true;
  for (const auto& c : channels_)
    uniform_ = uniform_ && c.route.size() == 1 && c.latency_us == channels_[0].latency_us &&
               c.bandwidth_gbps == channels_[0].bandwidth_gbps;
}

int Topology::channel_id(int s, int d) const {
  auto it = ch_index_.find({s, d});
  return it == ch_index_.end() ? -1 : it->second;
}

std::vector<int> Topology::route(int src_rank, int dst_rank) const {
  const int c = channel_id(src_rank, dst_rank);
  if (c >= 0) return channels_[static_cast<size_t>(c)].route;
  const int s = npus_.at(static_cast<size_t>(src_rank)), d = npus_.at(static_cast<size_t>(dst_rank));
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> dist(nodes_.size(), inf);
  std::vector<int> via(nodes_.size(), -1);
  using QE = std::pair<double, int>;
  std::priority_queue<QE, std::vector<QE>, std::greater<QE>> pq;
  dist[static_cast<size_t>(s)] = 0;
  pq.push({0.0, s});
  while (!pq.empty()) {
    auto [du, u] = pq.top();
    pq.pop();
    if (du > dist[static_cast<size_t>(u)]) continue;
    if (u == d) break;
    for (int li : out_links_[static_cast<size_t>(u)]) {
      const auto& l = links_[static_cast<size_t>(li)];
      const double nd = du + l.latency_us + 1e-3 / l.bandwidth_gbps + 1e-9;
      if (nd < dist[static_cast<size_t>(l.dst)]) {
        dist[static_cast<size_t>(l.dst)] = nd;
        via[static_cast<size_t>(l.dst)] = li;
        pq.push({nd, l.dst});
      }
    }
  }
  std::vector<int> r;
  if (via[static_cast<size_t>(d)] < 0) throw Error("no route between NPU ranks");
  for (int v = d; v != s;) {
    const int li = via[static_cast<size_t>(v)];
    r.push_back(li);
    v = links_[static_cast<size_t>(li)].src;
  }
  std::reverse(r.begin(), r.end());
  return r;
}

Topology Topology::transposed() const {
  Topology t;
  t.nodes_ = nodes_;
  t.by_name_ = by_name_;
  t.links_ = links_;
  for (auto& l : t.links_) {
    std::swap(l.src, l.dst);
    t.link_set_.insert({l.src, l.dst});
  }
  t.dims = dims;
  t.name = name + "^T";
  t.layout = layout;
  t.finalize();
  return t;
}

double Topology::in_bandwidth(int rank) const {
  double s = 0;
  for (int li : in_links_.at(static_cast<size_t>(npus_.at(static_cast<size_t>(rank)))))
    s += links_[static_cast<size_t>(li)].bandwidth_gbps;
  return s;
}

double Topology::out_bandwidth(int rank) const {
  double s = 0;
  for (int li : out_links_.at(static_cast<size_t>(npus_.at(static_cast<size_t>(rank)))))
    s += links_[static_cast<size_t>(li)].bandwidth_gbps;
  return s;
}

// ------------------------------------------------------------------ generators
namespace {

std::string npu_name(int i) { return "npu" + std::to_string(i); }

// Generator limits, checked before anything is allocated (a link costs a few hundred bytes with its channel).
constexpr double kMaxNpus = 4'000'000;
constexpr double kMaxLinks = 20'000'000;

void add_npus(Topology& t, int n) {
  for (int i = 0; i < n; ++i) t.add_node(npu_name(i), NodeKind::Npu);
}

double dim_bw(const GenParams& p, size_t d) {
  return d < p.dim_bandwidth.size() && p.dim_bandwidth[d] > 0 ? p.dim_bandwidth[d] : p.bandwidth_gbps;
}
double dim_lat(const GenParams& p, size_t d) {
  return d < p.dim_latency.size() && p.dim_latency[d] >= 0 ? p.dim_latency[d] : p.latency_us;
}

int product(const std::vector<int>& dims) {
  double p = 1;
  for (int d : dims) {
    if (d < 1) throw Error("generator dimensions must be >= 1");
    p *= d;
  }
  if (p > kMaxNpus)
    throw Error(std::to_string(static_cast<long long>(p)) + " NPUs, more than the limit of " +
                std::to_string(static_cast<long long>(kMaxNpus)));
  return static_cast<int>(p);
}

// Links a generator will make (counted before anything is allocated).
double count_links(const std::string& kind, const std::vector<int>& dims, const GenParams& p) {
  double n = 1;
  for (int d : dims) n *= d;
  auto along = [&](std::size_t d, const std::string& type) -> double {
    const double len = dims[d];
    if (len < 2) return 0;
    const double lines = n / len;
    if (type == "ring") return lines * (len == 2 ? 2 : 2 * len);
    if (type == "line" || type == "mesh") return lines * 2 * (len - 1);
    if (type == "fc" || type == "fully_connected") return lines * len * (len - 1);
    if (type == "switch") return lines * 2 * len;
    return 0;
  };
  if (kind == "ring") return 2 * n;
  if (kind == "uni_ring") return n;
  if (kind == "fully_connected" || kind == "fc") return n * (n - 1);
  if (kind == "mesh" || kind == "torus") {
    double l = 0;
    for (std::size_t d = 0; d < dims.size(); ++d) l += along(d, kind == "mesh" || dims[d] <= 2 ? "line" : "ring");
    return l;
  }
  if (kind == "hypercube") return dims.empty() ? 0 : dims[0] * std::pow(2.0, dims[0]);
  if (kind == "dragonfly" && dims.size() == 2) return n * (dims[1] - 1) + 2 * n;
  if (kind == "switch") return 2 * n;
  if (kind == "switch_unwound") return n * std::max(1, p.degree.value_or(1));
  if (kind == "multidim") {
    double l = 0;
    for (std::size_t d = 0; d < dims.size() && d < p.dim_types.size(); ++d) l += along(d, p.dim_types[d]);
    return l;
  }
  if (kind == "cluster") return 6 * n;
  return 0;
}

// Mixed-radix rank helpers (dims[0] fastest).
std::vector<int> strides(const std::vector<int>& dims) {
  std::vector<int> s(dims.size(), 1);
  for (size_t i = 1; i < dims.size(); ++i) s[i] = s[i - 1] * dims[i - 1];
  return s;
}

// Connect the NPUs of every line along dimension d with the given pattern.
void connect_dim(Topology& t, const std::vector<int>& dims, size_t d, const std::string& type, double bw,
                 double lat, int& switch_counter) {
  const int n = product(dims);
  const auto st = strides(dims);
  const int len = dims[d];
  if (len == 1) return;
  for (int base = 0; base < n; ++base) {
    if ((base / st[d]) % len != 0) continue;  // first element of a line
    std::vector<int> line;
    for (int k = 0; k < len; ++k) line.push_back(base + k * st[d]);
    if (type == "ring") {
      if (len == 2) {
        t.add_bidir(line[0], line[1], lat, bw);
      } else {
        for (int k = 0; k < len; ++k) t.add_bidir(line[static_cast<size_t>(k)], line[static_cast<size_t>((k + 1) % len)], lat, bw);
      }
    } else if (type == "line" || type == "mesh") {
      for (int k = 0; k + 1 < len; ++k) t.add_bidir(line[static_cast<size_t>(k)], line[static_cast<size_t>(k + 1)], lat, bw);
    } else if (type == "fc" || type == "fully_connected") {
      for (int a = 0; a < len; ++a)
        for (int b = 0; b < len; ++b)
          if (a != b) t.add_link(line[static_cast<size_t>(a)], line[static_cast<size_t>(b)], lat, bw);
    } else if (type == "switch") {
      const int sw = t.add_node("switch" + std::to_string(switch_counter++), NodeKind::Switch);
      for (int k = 0; k < len; ++k) t.add_bidir(line[static_cast<size_t>(k)], sw, lat / 2, bw);
    } else {
      throw Error("unknown dimension type '" + type + "' (expected ring, line, fc or switch)");
    }
  }
}

void grid_layout(Topology& t, const std::vector<int>& dims) {
  const int n = product(dims);
  t.layout.assign(static_cast<size_t>(t.num_nodes()), {0.0, 0.0});
  for (int i = 0; i < n; ++i) {
    const double x = i % dims[0];
    double y = dims.size() > 1 ? (i / dims[0]) % dims[1] : 0;
    double off = 0;
    if (dims.size() > 2) off = (i / (dims[0] * dims[1])) * (dims[0] + 1.0);
    t.layout[static_cast<size_t>(i)] = {x + off, y};
  }
}

}  // namespace

Topology generate(const std::string& kind, const std::vector<int>& dims, const GenParams& p) {
  Topology t;
  if (dims.empty()) throw Error("generator '" + kind + "' needs dimensions");
  // The one-dimensional kinds: more dimensions were multiplied into one count (ring:4x4 a ring of 16 NPUs named
  // ring_4x4), which reads as a 4 x 4 arrangement that was never built.
  if ((kind == "ring" || kind == "uni_ring" || kind == "fully_connected" || kind == "fc" || kind == "switch" ||
       kind == "switch_unwound") &&
      dims.size() != 1)
    throw Error(kind + " takes one dimension, [n], not " + std::to_string(dims.size()) +
                " (several: torus, mesh or multidim)");
  // Per-dimension bandwidths and latencies: one value per dimension (per bit of a hypercube), and only for the
  // generators that have dimensions of links.
  const bool per_dim = kind == "mesh" || kind == "torus" || kind == "multidim" || kind == "hypercube";
  for (const auto& [what, values] : {std::pair<const char*, const std::vector<double>*>{"dim_bandwidth_gbps", &p.dim_bandwidth},
                                     {"dim_latency_us", &p.dim_latency}}) {
    if (values->empty()) continue;
    if (!per_dim)
      throw Error(std::string(what) + " applies to mesh, torus, hypercube and multidim, not to '" + kind + "'");
    if (kind == "hypercube" && dims.size() != 1) continue;  // the hypercube's own error below
    const std::size_t want = kind == "hypercube" ? static_cast<std::size_t>(std::max(0, dims[0])) : dims.size();
    if (values->size() != want)
      throw Error(std::string(what) + " has " + std::to_string(values->size()) + " value(s); '" + kind + "' with " +
                  std::to_string(want) + " dimension(s) needs " + std::to_string(want) + " (one per dimension)");
  }
  const int n = product(dims);
  const double links = count_links(kind, dims, p);
  if (links > kMaxLinks) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", links);
    throw Error("generator '" + kind + "' would make " + buf + " links for " + std::to_string(n) +
                " NPUs, more than the limit of " + std::to_string(static_cast<long long>(kMaxLinks)));
  }
  const double bw = p.bandwidth_gbps, lat = p.latency_us;
  int sw_counter = 0;
  std::ostringstream nm;
  nm << kind;
  for (size_t i = 0; i < dims.size(); ++i) nm << (i ? "x" : "_") << dims[i];
  t.name = nm.str();
  if (kind == "ring" || kind == "uni_ring") {
    add_npus(t, n);
    if (n < 2) throw Error("ring needs at least 2 NPUs");
    // A ring of 2 is one link each way: i -> i + 1 already gives both, and its reverse would repeat them.
    for (int i = 0; i < n; ++i) {
      t.add_link(i, (i + 1) % n, lat, bw);
      if (kind == "ring" && n > 2) t.add_link((i + 1) % n, i, lat, bw);
    }
    t.dims = {n};
  } else if (kind == "fully_connected" || kind == "fc") {
    add_npus(t, n);
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        if (a != b) t.add_link(a, b, lat, bw);
    t.dims = {n};
  } else if (kind == "mesh" || kind == "torus") {
    if (dims.size() < 1 || dims.size() > 3) throw Error(kind + " needs 1 to 3 dimensions");
    add_npus(t, n);
    for (size_t d = 0; d < dims.size(); ++d)
      connect_dim(t, dims, d, kind == "mesh" || dims[d] <= 2 ? "line" : "ring", dim_bw(p, d), dim_lat(p, d),
                  sw_counter);
    t.dims = dims;
    grid_layout(t, dims);
  } else if (kind == "hypercube") {
    if (dims.size() != 1 || dims[0] < 1 || dims[0] > 20) throw Error("hypercube needs dims=[d], 1 <= d <= 20");
    const int m = 1 << dims[0];
    add_npus(t, m);
    for (int i = 0; i < m; ++i)
      for (int b = 0; b < dims[0]; ++b) t.add_link(i, i ^ (1 << b), dim_lat(p, static_cast<size_t>(b)), dim_bw(p, static_cast<size_t>(b)));
    t.dims = std::vector<int>(static_cast<size_t>(dims[0]), 2);
  } else if (kind == "dragonfly") {
    // dims = [groups, routers per group]; one NPU per router; routers of a group fully connected;
    // router r of group g has a global link to group (g + r + 1) mod G (one per router, both ways).
    if (dims.size() != 2) throw Error("dragonfly needs dims=[groups, routers_per_group]");
    const int g = dims[0], a = dims[1];
    add_npus(t, n);
    const double gbw = p.global_bandwidth_gbps > 0 ? p.global_bandwidth_gbps : bw;
    const double glat = p.global_latency_us > 0 ? p.global_latency_us : lat;
    for (int gi = 0; gi < g; ++gi)
      for (int x = 0; x < a; ++x)
        for (int y = 0; y < a; ++y)
          if (x != y) t.add_link(gi * a + x, gi * a + y, lat, bw);
    std::set<std::pair<int, int>> done;
    for (int gi = 0; gi < g; ++gi)
      for (int r = 0; r < a; ++r) {
        const int gj = (gi + r + 1) % g;
        if (gj == gi) continue;
        const int rj = ((gi - gj - 1) % g + g) % g;  // router in gj whose target is gi
        if (rj >= a) continue;
        const int u = gi * a + r, v = gj * a + rj;
        if (done.count({std::min(u, v), std::max(u, v)})) continue;
        done.insert({std::min(u, v), std::max(u, v)});
        t.add_bidir(u, v, glat, gbw);
      }
    t.dims = {a, g};
  } else if (kind == "switch") {
    add_npus(t, n);
    const int sw = t.add_node("switch0", NodeKind::Switch);
    for (int i = 0; i < n; ++i) t.add_bidir(i, sw, lat / 2, bw);
    t.dims = {n};
  } else if (kind == "switch_unwound") {
    // The paper's unwinding: each NPU gets d point-to-point links (to i+1..i+d/2 and i-1..i-d/2,
    // or i+1..i+d for odd d) sharing the port bandwidth: bw/d each.
    // Refused, not corrected: a degree <= 0 became 1 and one above n - 1 became n - 1
    if (p.degree && (*p.degree < 1 || *p.degree > n - 1))
      throw Error("switch_unwound: degree must be between 1 and n - 1 (" + std::to_string(n - 1) + "), got " +
                  std::to_string(*p.degree));
    add_npus(t, n);
    const int d = p.degree.value_or(1);
    for (int i = 0; i < n; ++i)
      for (int k = 1; k <= d; ++k) {
        int j;
        if (d % 2 == 0) j = k <= d / 2 ? (i + k) % n : ((i - (k - d / 2)) % n + n) % n;
        else j = (i + k) % n;
        if (j != i) t.add_link(i, j, lat, bw / d);
      }
    t.dims = {n};
  } else if (kind == "multidim") {
    if (p.dim_types.size() != dims.size()) throw Error("multidim needs one dim type per dimension");
    add_npus(t, n);
    for (size_t d = 0; d < dims.size(); ++d) connect_dim(t, dims, d, p.dim_types[d], dim_bw(p, d), dim_lat(p, d), sw_counter);
    t.dims = dims;
  } else if (kind == "cluster") {
    // dims = [gpus_per_host, hosts]: each host has an NVSwitch (bandwidth/latency) joining its GPUs,
    // GPU g uses NIC g % rails; NIC k of every host joins rail switch k (nic_bandwidth/nic_latency).
    if (dims.size() != 2) throw Error("cluster needs dims=[gpus_per_host, hosts]");
    const int gph = dims[0], hosts = dims[1];
    // Refused, not corrected: rails <= 0 became one per GPU, more than the GPUs made NICs no GPU uses.
    if (p.rails && (*p.rails < 1 || *p.rails > gph))
      throw Error("cluster: rails must be between 1 and gpus_per_host (" + std::to_string(gph) + "), got " +
                  std::to_string(*p.rails));
    const int rails = p.rails.value_or(gph);
    add_npus(t, n);
    std::vector<int> rail_sw;
    for (int k = 0; k < rails && hosts > 1; ++k) rail_sw.push_back(t.add_node("rail" + std::to_string(k), NodeKind::Switch));
    for (int h = 0; h < hosts; ++h) {
      const int nvs = t.add_node("nvswitch" + std::to_string(h), NodeKind::Switch);
      for (int g = 0; g < gph; ++g) t.add_bidir(h * gph + g, nvs, lat / 2, bw);
      if (hosts > 1) {
        for (int k = 0; k < rails; ++k) {
          const int nic = t.add_node("nic" + std::to_string(h) + "_" + std::to_string(k), NodeKind::Nic);
          t.add_bidir(nic, rail_sw[static_cast<size_t>(k)], p.nic_latency_us / 2, p.nic_bandwidth_gbps);
          for (int g = k; g < gph; g += rails) t.add_bidir(h * gph + g, nic, 0.0, bw);
        }
      }
    }
    t.dims = {gph, hosts};
  } else {
    throw Error("unknown generator '" + kind +
                "' (ring, uni_ring, fully_connected, mesh, torus, hypercube, dragonfly, switch, "
                "switch_unwound, multidim, cluster)");
  }
  try {
    t.finalize();
  } catch (const Error& e) {
    if (kind != "dragonfly") throw;
    throw Error(std::string(e.what()) + "; with one global link per router, " + std::to_string(dims[0]) +
                " groups need at least " + std::to_string(dims[0] - 1) +
                " routers per group for a link between every pair of groups");
  }
  return t;
}

}  // namespace autoccl::synth
