// Schedule JSON writer, bandwidth lower bound and the symbolic checker.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "autoccl/synth/synth.h"

namespace autoccl::synth {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}

std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

long long ps(double us) { return std::llround(us * 1e6); }

}  // namespace

std::string schedule_to_json(const Schedule& s, const Topology* topo) {
  std::ostringstream o;
  o << "{\n\"format\": \"autoccl-schedule\",\n\"version\": 1,\n\"collective\": \"" << to_string(s.collective)
    << "\",\n\"algorithm\": " << jstr(s.algorithm) << ",\n\"nranks\": " << s.nranks << ",\n\"nchunks\": " << s.nchunks
    << ",\n\"chunks_per_rank\": " << s.chunks_per_rank << ",\n\"root\": " << s.root
    << ",\n\"chunk_bytes\": " << num(s.chunk_bytes) << ",\n\"bytes\": " << num(s.bytes)
    << ",\n\"time_us\": " << num(s.time_us) << ",\n\"seed\": " << s.seed << ",\n\"owner\": [";
  for (size_t i = 0; i < s.owner.size(); ++i) o << (i ? "," : "") << s.owner[i];
  o << "],\n";
  if (topo) {
    o << "\"topology\": " << jstr(topo->name) << ",\n\"ranks\": [";
    for (int r = 0; r < topo->num_npus(); ++r) o << (r ? "," : "") << jstr(topo->node(topo->npu_node(r)).name);
    o << "],\n\"links\": [";
    for (int l = 0; l < topo->num_links(); ++l)
      o << (l ? "," : "") << "[" << jstr(topo->node(topo->link(l).src).name) << ","
        << jstr(topo->node(topo->link(l).dst).name) << "]";
    o << "],\n";
  }
  o << "\"routes\": [";
  for (size_t i = 0; i < s.routes.size(); ++i) {
    o << (i ? "," : "") << "[";
    for (size_t j = 0; j < s.routes[i].size(); ++j) o << (j ? "," : "") << s.routes[i][j];
    o << "]";
  }
  o << "],\n\"transfer_fields\": [\"chunk\",\"src\",\"dst\",\"start_us\",\"end_us\",\"op\",\"route\",\"step\"],\n"
    << "\"transfers\": [";
  for (size_t i = 0; i < s.transfers.size(); ++i) {
    const auto& t = s.transfers[i];
    o << (i ? ",\n" : "\n") << "[" << t.chunk << "," << t.src << "," << t.dst << "," << num(t.start) << ","
      << num(t.end) << "," << static_cast<int>(t.op) << "," << t.route << "," << t.step << "]";
  }
  o << "\n]\n}\n";
  return o.str();
}

double bandwidth_lower_bound(const Topology& t, Collective coll, double bytes) {
  const int n = t.num_npus();
  if (n < 2) return 0;
  double in_need = 0, out_need = 0;
  const double frac = static_cast<double>(n - 1) / n * bytes;
  for (int r = 0; r < n; ++r) {
    in_need = std::max(in_need, frac / (t.in_bandwidth(r) * 1e3));
    out_need = std::max(out_need, frac / (t.out_bandwidth(r) * 1e3));
  }
  switch (coll) {
    case Collective::AllGather: return in_need;
    case Collective::ReduceScatter: return out_need;
    case Collective::AllReduce: return in_need + out_need;
    case Collective::Broadcast: {
      double b = 0;
      for (int r = 0; r < n; ++r) b = std::max(b, bytes / (t.in_bandwidth(r) * 1e3));
      return b;
    }
    case Collective::Reduce: {
      double b = 0;
      for (int r = 0; r < n; ++r) b = std::max(b, bytes / (t.out_bandwidth(r) * 1e3));
      return b;
    }
  }
  return 0;
}

CheckResult check(const Schedule& s0, const Topology* topo) {
  CheckResult res;
  auto fail = [&](const std::string& m) {
    res.ok = false;
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
  res.transfers = s.transfers.size();
  if (n < 1 || C < 1 || static_cast<int>(s.owner.size()) != C) {
    fail("bad header: nranks/nchunks/owner inconsistent");
    return res;
  }
  if (topo && topo->num_npus() != n) {
    fail("schedule has " + std::to_string(n) + " ranks, topology has " + std::to_string(topo->num_npus()) + " NPUs");
    return res;
  }
  if (static_cast<double>(n) * C > 6e7) {
    fail("schedule too large for the exact checker (nranks*nchunks > 6e7)");
    return res;
  }
  const auto idx = [&](int r, int c) { return static_cast<size_t>(r) * static_cast<size_t>(C) + static_cast<size_t>(c); };
  std::vector<std::vector<int>> content(static_cast<size_t>(n) * static_cast<size_t>(C));
  const bool reducing = s.collective == Collective::ReduceScatter || s.collective == Collective::AllReduce ||
                        s.collective == Collective::Reduce;
  for (int c = 0; c < C; ++c) {
    if (reducing) {
      for (int r = 0; r < n; ++r) content[idx(r, c)] = {r};
    } else {
      const int o = s.collective == Collective::Broadcast ? s.root : s.owner[static_cast<size_t>(c)];
      if (o < 0 || o >= n) {
        fail("owner of chunk " + std::to_string(c) + " out of range");
        return res;
      }
      content[idx(o, c)] = {o};
    }
  }
  // Validate transfers, and (with a topology) routes, durations and link exclusivity.
  struct Ev {
    long long t;
    int kind;  // 0 end, 1 start
    size_t i;
  };
  std::vector<Ev> evs;
  evs.reserve(s.transfers.size() * 2);
  std::vector<std::vector<std::pair<long long, long long>>> link_use;
  if (topo) link_use.resize(static_cast<size_t>(topo->num_links()));
  for (size_t i = 0; i < s.transfers.size(); ++i) {
    const auto& t = s.transfers[i];
    const std::string who = "transfer " + std::to_string(i) + " (chunk " + std::to_string(t.chunk) + ", " +
                            std::to_string(t.src) + "->" + std::to_string(t.dst) + ")";
    if (t.chunk < 0 || t.chunk >= C || t.src < 0 || t.src >= n || t.dst < 0 || t.dst >= n || t.src == t.dst) {
      fail(who + ": chunk or rank out of range");
      continue;
    }
    if (!(t.end >= t.start) || t.start < 0) {
      fail(who + ": end before start");
      continue;
    }
    if (topo) {
      std::vector<int> route;
      if (t.route >= 0) {
        if (static_cast<size_t>(t.route) >= s.routes.size()) {
          fail(who + ": route index out of range");
          continue;
        }
        route = s.routes[static_cast<size_t>(t.route)];
      } else {
        route = topo->route(t.src, t.dst);
      }
      int at = topo->npu_node(t.src);
      double lat = 0, bw = 1e300;
      bool okr = !route.empty();
      for (int l : route) {
        if (l < 0 || l >= topo->num_links() || topo->link(l).src != at) {
          okr = false;
          break;
        }
        at = topo->link(l).dst;
        lat += topo->link(l).latency_us;
        bw = std::min(bw, topo->link(l).bandwidth_gbps);
      }
      if (!okr || at != topo->npu_node(t.dst)) {
        fail(who + ": route does not lead from its source to its destination");
        continue;
      }
      const double need = lat + s.chunk_bytes / (bw * 1e3);
      if (t.end - t.start < need * (1 - 1e-9) - 1e-6)
        fail(who + ": lasts " + num(t.end - t.start) + " us, the links need " + num(need) + " us");
      for (int l : route) link_use[static_cast<size_t>(l)].push_back({ps(t.start), ps(t.end)});
    }
    evs.push_back({ps(t.start), 1, i});
    evs.push_back({ps(t.end), 0, i});
  }
  if (topo) {
    for (size_t l = 0; l < link_use.size(); ++l) {
      auto& u = link_use[l];
      std::sort(u.begin(), u.end());
      for (size_t k = 1; k < u.size(); ++k)
        if (u[k].first < u[k - 1].second - 1) {
          fail("link " + topo->node(topo->link(static_cast<int>(l)).src).name + "->" +
               topo->node(topo->link(static_cast<int>(l)).dst).name + " carries two transfers at once at t=" +
               num(static_cast<double>(u[k].first) * 1e-6) + " us");
          break;
        }
    }
  }
  std::sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) {
    return a.t != b.t ? a.t < b.t : a.kind != b.kind ? a.kind < b.kind : a.i < b.i;
  });
  std::vector<std::vector<int>> payload(s.transfers.size());
  std::vector<char> valid(s.transfers.size(), 0);
  for (const auto& e : evs) {
    const auto& t = s.transfers[e.i];
    auto& src = content[idx(t.src, t.chunk)];
    auto& dst = content[idx(t.dst, t.chunk)];
    const std::string who = "transfer " + std::to_string(e.i) + " (chunk " + std::to_string(t.chunk) + ", " +
                            std::to_string(t.src) + "->" + std::to_string(t.dst) + ", t=" + num(t.start) + ")";
    if (e.kind == 1) {
      if (src.empty()) {
        fail(who + ": source does not hold the chunk when the transfer starts");
        continue;
      }
      payload[e.i] = src;
      valid[e.i] = 1;
    } else {
      if (!valid[e.i]) continue;
      auto& p = payload[e.i];
      if (t.op == Op::Copy) {
        if (dst == p) ++res.redundant;
        dst = std::move(p);
      } else {
        std::vector<int> merged;
        merged.reserve(dst.size() + p.size());
        std::set_union(dst.begin(), dst.end(), p.begin(), p.end(), std::back_inserter(merged));
        if (merged.size() != dst.size() + p.size()) {
          std::vector<int> both;
          std::set_intersection(dst.begin(), dst.end(), p.begin(), p.end(), std::back_inserter(both));
          fail(who + ": contribution of rank " + std::to_string(both.front()) + " reduced twice at rank " +
               std::to_string(t.dst));
        }
        dst = std::move(merged);
      }
      std::vector<int>().swap(p);
    }
  }
  std::vector<int> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = r;
  auto expect = [&](int r, int c, const std::vector<int>& want, const char* what) {
    if (content[idx(r, c)] != want) {
      const auto& got = content[idx(r, c)];
      fail("rank " + std::to_string(r) + " ends with chunk " + std::to_string(c) + " " +
           (got.empty() ? std::string("missing") : "holding " + std::to_string(got.size()) + " contribution(s)") +
           ", expected " + what);
    }
  };
  for (int c = 0; c < C; ++c) {
    const int o = s.owner[static_cast<size_t>(c)];
    switch (s.collective) {
      case Collective::AllGather:
        for (int r = 0; r < n; ++r) expect(r, c, {o}, "the owner's data");
        break;
      case Collective::Broadcast:
        for (int r = 0; r < n; ++r) expect(r, c, {s.root}, "the root's data");
        break;
      case Collective::AllReduce:
        for (int r = 0; r < n; ++r) expect(r, c, all, "the full reduction");
        break;
      case Collective::ReduceScatter: expect(o, c, all, "the full reduction"); break;
      case Collective::Reduce: expect(s.root, c, all, "the full reduction"); break;
    }
  }
  return res;
}

}  // namespace autoccl::synth
