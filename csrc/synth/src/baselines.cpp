// Baseline algorithms as untimed schedules (ordered by step); simulate() gives their time on a topology.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>

#include "autoccl/synth/synth.h"
#include "memory_text.h"

namespace autoccl::synth {

namespace {

struct Builder {
  Schedule s;
  void add(int chunk, int src, int dst, long long step, Op op) {
    if (src == dst) return;
    Transfer t;
    t.chunk = chunk;
    t.src = src;
    t.dst = dst;
    t.step = static_cast<std::int32_t>(step);
    t.op = op;
    s.transfers.push_back(t);
  }
};

// A ring order that follows links where it can: from rank 0, go to the lowest unvisited neighbour,
// else to the nearest unvisited rank (BFS over channels).
std::vector<int> ring_order(const Topology& t) {
  const int n = t.num_npus();
  std::vector<char> seen(static_cast<size_t>(n), 0);
  std::vector<int> order{0};
  seen[0] = 1;
  while (static_cast<int>(order.size()) < n) {
    const int u = order.back();
    int best = -1;
    for (int ch : t.out_channels(u)) {
      const int v = t.channels()[static_cast<size_t>(ch)].dst;
      if (!seen[static_cast<size_t>(v)] && (best < 0 || v < best)) best = v;
    }
    if (best < 0) {
      std::vector<char> vis(static_cast<size_t>(n), 0);
      std::queue<int> q;
      q.push(u);
      vis[static_cast<size_t>(u)] = 1;
      while (!q.empty() && best < 0) {
        const int x = q.front();
        q.pop();
        std::vector<int> nb;
        for (int ch : t.out_channels(x)) nb.push_back(t.channels()[static_cast<size_t>(ch)].dst);
        std::sort(nb.begin(), nb.end());
        for (int v : nb) {
          if (vis[static_cast<size_t>(v)]) continue;
          vis[static_cast<size_t>(v)] = 1;
          if (!seen[static_cast<size_t>(v)]) {
            best = v;
            break;
          }
          q.push(v);
        }
      }
    }
    seen[static_cast<size_t>(best)] = 1;
    order.push_back(best);
  }
  return order;
}

int log2_exact(int n) {
  int l = 0;
  while ((1 << l) < n) ++l;
  return (1 << l) == n ? l : -1;
}

}  // namespace

double baseline_transfers(int nranks, Collective coll, int chunks_per_rank) {
  const double n = nranks, k = chunks_per_rank;
  if (coll == Collective::Broadcast || coll == Collective::Reduce) return (n - 1) * k;
  return n * (n - 1) * k * (coll == Collective::AllReduce ? 2 : 1);
}

Schedule baseline(const Topology& topo, const std::string& algo, Collective coll, double bytes, int k, int root,
                  double max_memory_bytes) {
  if (!topo.finalized()) throw Error("topology not finalized");
  if (k < 1) throw Error("chunks per rank must be >= 1");
  check_collective_size(bytes);
  const int n = topo.num_npus();
  if (n < 2)
    throw Error("a collective needs at least 2 NPUs; topology '" + topo.name + "' has " + std::to_string(n));
  check_root(root, n);
  const bool rooted = coll == Collective::Broadcast || coll == Collective::Reduce;
  const double nchunks = rooted ? k : static_cast<double>(n) * k;
  if (nchunks > static_cast<double>(kMaxChunks))
    throw Error("too many chunks: " + std::to_string(static_cast<long long>(nchunks)) + ", at most " +
                std::to_string(kMaxChunks));
  const double count = baseline_transfers(n, coll, k);
  // the list, the simulator's timed copy of it, and the checker's state (about one more)
  const double need = count * static_cast<double>(sizeof(Transfer)) * 3;
  if (count > static_cast<double>(kMaxChunks) || (max_memory_bytes > 0 && need > max_memory_bytes)) {
    char buf[320];
    if (count > static_cast<double>(kMaxChunks))
      std::snprintf(buf, sizeof buf, "%.3g transfers, more than the %lld a schedule can hold", count, kMaxChunks);
    else
      std::snprintf(buf, sizeof buf, "about %s to build, simulate and check, more than the %s allowed",
                    memory_text(need).c_str(), memory_text(max_memory_bytes).c_str());
    throw Error("baseline '" + algo + "' " + to_string(coll) + " on " + std::to_string(n) + " NPUs with " +
                std::to_string(k) + " chunk(s) per NPU would need " + buf + "; give fewer chunks");
  }
  Builder b;
  Schedule& s = b.s;
  s.collective = coll;
  s.algorithm = algo;
  s.nranks = n;
  s.chunks_per_rank = k;
  s.root = root;
  s.bytes = bytes;
  s.nchunks = static_cast<int>(nchunks);
  s.chunk_bytes = bytes / s.nchunks;
  s.owner.resize(static_cast<size_t>(s.nchunks));
  for (int c = 0; c < s.nchunks; ++c) s.owner[static_cast<size_t>(c)] = rooted ? root : c % n;
  const auto chunk = [&](int owner, int j) { return j * n + owner; };
  const std::string unsupported = "baseline '" + algo + "' does not support " + to_string(coll);
  b.s.transfers.reserve(static_cast<std::size_t>(count));

  if (algo == "ring") {
    auto ring = ring_order(topo);
    if (rooted) std::rotate(ring.begin(), std::find(ring.begin(), ring.end(), root), ring.end());
    const auto at = [&](long long p) { return ring[static_cast<size_t>(((p % n) + n) % n)]; };
    long long base = 0;
    if (coll == Collective::ReduceScatter || coll == Collective::AllReduce) {
      for (int st = 0; st + 1 < n; ++st)
        for (int p = 0; p < n; ++p)
          for (int j = 0; j < k; ++j) b.add(chunk(at(p - st - 1), j), at(p), at(p + 1), base + st * k + j, Op::Reduce);
      base += static_cast<long long>(n) * k;
    }
    if (coll == Collective::AllGather || coll == Collective::AllReduce) {
      for (int st = 0; st + 1 < n; ++st)
        for (int p = 0; p < n; ++p)
          for (int j = 0; j < k; ++j) b.add(chunk(at(p - st), j), at(p), at(p + 1), base + st * k + j, Op::Copy);
    }
    if (coll == Collective::Broadcast)
      for (int p = 0; p + 1 < n; ++p)
        for (int j = 0; j < k; ++j) b.add(j, ring[static_cast<size_t>(p)], ring[static_cast<size_t>(p + 1)], p + j, Op::Copy);
    if (coll == Collective::Reduce)
      for (int p = n - 1; p >= 1; --p)
        for (int j = 0; j < k; ++j) b.add(j, ring[static_cast<size_t>(p)], ring[static_cast<size_t>(p - 1)], (n - 1 - p) + j, Op::Reduce);
  } else if (algo == "direct") {
    long long base = 0;
    if (coll == Collective::ReduceScatter || coll == Collective::AllReduce) {
      for (int st = 1; st < n; ++st)
        for (int r = 0; r < n; ++r)
          for (int j = 0; j < k; ++j) b.add(chunk((r + st) % n, j), r, (r + st) % n, base + st * k + j, Op::Reduce);
      base += static_cast<long long>(n + 1) * k;
    }
    if (coll == Collective::AllGather || coll == Collective::AllReduce)
      for (int st = 1; st < n; ++st)
        for (int r = 0; r < n; ++r)
          for (int j = 0; j < k; ++j) b.add(chunk(r, j), r, (r + st) % n, base + st * k + j, Op::Copy);
    if (coll == Collective::Broadcast)
      for (int st = 1; st < n; ++st)
        for (int j = 0; j < k; ++j) b.add(j, root, (root + st) % n, st * k + j, Op::Copy);
    if (coll == Collective::Reduce)
      for (int st = 1; st < n; ++st)
        for (int j = 0; j < k; ++j) b.add(j, (root + st) % n, root, j, Op::Reduce);
  } else if (algo == "rhd") {
    const int L = log2_exact(n);
    if (rooted) {
      // binomial tree on ranks relative to the root
      int levels = 0;
      while ((1 << levels) < n) ++levels;
      if (coll == Collective::Broadcast) {
        for (int i = 0; i < levels; ++i)
          for (int v = 0; v < (1 << i) && v + (1 << i) < n; ++v)
            for (int j = 0; j < k; ++j) b.add(j, (v + root) % n, (v + (1 << i) + root) % n, static_cast<long long>(i) * k + j, Op::Copy);
      } else {
        for (int i = 0; i < levels; ++i)
          for (int v = 0; v < n; ++v)
            if ((v & ((2 << i) - 1)) == (1 << i))
              for (int j = 0; j < k; ++j) b.add(j, (v + root) % n, (v - (1 << i) + root) % n, static_cast<long long>(i) * k + j, Op::Reduce);
      }
    } else {
      if (L < 0) throw Error("baseline 'rhd' needs a power-of-two number of NPUs for " + std::string(to_string(coll)));
      const long long M = static_cast<long long>(n) * k;
      long long base = 0;
      if (coll == Collective::ReduceScatter || coll == Collective::AllReduce) {
        for (int i = 0; i < L; ++i) {
          const int sh = L - 1 - i;
          for (int r = 0; r < n; ++r) {
            const int partner = r ^ (1 << sh);
            long long idx = 0;
            for (int o = 0; o < n; ++o)
              if ((o >> sh) == (partner >> sh))
                for (int j = 0; j < k; ++j) b.add(chunk(o, j), r, partner, base + i * M + idx++, Op::Reduce);
          }
        }
        base += L * M;
      }
      if (coll == Collective::AllGather || coll == Collective::AllReduce)
        for (int i = 0; i < L; ++i)
          for (int r = 0; r < n; ++r) {
            const int partner = r ^ (1 << i);
            long long idx = 0;
            for (int o = 0; o < n; ++o)
              if ((o >> i) == (r >> i))
                for (int j = 0; j < k; ++j) b.add(chunk(o, j), r, partner, base + i * M + idx++, Op::Copy);
          }
    }
  } else if (algo == "dbtree") {
    if (coll != Collective::AllReduce && !rooted) throw Error(unsupported + " (allreduce, broadcast, reduce)");
    // Two binary trees (heap layout over two orders); chunk c goes on tree c % 2.
    std::vector<int> o1 = ring_order(topo);
    if (rooted) std::rotate(o1.begin(), std::find(o1.begin(), o1.end(), root), o1.end());
    std::vector<int> o2(o1.rbegin(), o1.rend());
    if (rooted) std::rotate(o2.begin(), std::find(o2.begin(), o2.end(), root), o2.end());
    const std::vector<int>* orders[2] = {&o1, &o2};
    auto height = [&](int pos) {
      int h = 0;
      for (int c = 2 * pos + 1; c < n; c = 2 * c + 1) ++h;
      return h;
    };
    auto depth = [&](int pos) {
      int d = 0;
      for (int p = pos; p > 0; p = (p - 1) / 2) ++d;
      return d;
    };
    int H = height(0);
    const int C = s.nchunks;
    long long base = 0;
    if (coll == Collective::AllReduce || coll == Collective::Reduce) {
      for (int c = 0; c < C; ++c) {
        const auto& ord = *orders[c % 2];
        for (int pos = 1; pos < n; ++pos)
          b.add(c, ord[static_cast<size_t>(pos)], ord[static_cast<size_t>((pos - 1) / 2)], c / 2 + height(pos), Op::Reduce);
      }
      base = C / 2 + H + 2;
    }
    if (coll == Collective::AllReduce || coll == Collective::Broadcast) {
      for (int c = 0; c < C; ++c) {
        const auto& ord = *orders[c % 2];
        for (int pos = 1; pos < n; ++pos)
          b.add(c, ord[static_cast<size_t>((pos - 1) / 2)], ord[static_cast<size_t>(pos)], base + c / 2 + depth(pos), Op::Copy);
      }
    }
  } else if (algo == "hierarchical") {
    if (topo.dims.size() < 2) throw Error("baseline 'hierarchical' needs a multi-dimensional topology (dims)");
    if (rooted) throw Error(unsupported + " (allgather, reducescatter, allreduce)");
    const auto& dims = topo.dims;
    const size_t D = dims.size();
    std::vector<int> st(D, 1);
    for (size_t i = 1; i < D; ++i) st[i] = st[i - 1] * dims[i - 1];
    auto coord = [&](int r, size_t d) { return (r / st[d]) % dims[d]; };
    auto with = [&](int r, size_t d, int v) { return r + (v - coord(r, d)) * st[d]; };
    long long base = 0;
    const long long M = static_cast<long long>(n) * k;
    // chunks (owner o) that rank r forwards in phase d for group q: coord(o,d)==q, coords > d equal r's
    auto group = [&](int r, size_t d, int q, bool upper_only) {
      std::vector<int> owners;
      for (int o = 0; o < n; ++o) {
        if (coord(o, d) != q) continue;
        bool ok = true;
        for (size_t e = upper_only ? d + 1 : 0; e < D && ok; ++e)
          if (e != d && (upper_only || e > d)) ok = coord(o, e) == coord(r, e);
        if (ok) owners.push_back(o);
      }
      return owners;
    };
    if (coll == Collective::ReduceScatter || coll == Collective::AllReduce) {
      for (size_t dd = D; dd-- > 0;) {
        const int len = dims[dd];
        for (int stp = 0; stp + 1 < len; ++stp) {
          for (int r = 0; r < n; ++r) {
            const int p = coord(r, dd);
            const int q = ((p - stp - 1) % len + len) % len;
            long long idx = 0;
            for (int o : group(r, dd, q, true))
              for (int j = 0; j < k; ++j) b.add(chunk(o, j), r, with(r, dd, (p + 1) % len), base + stp * M + idx++, Op::Reduce);
          }
        }
        base += static_cast<long long>(len) * M;
      }
    }
    if (coll == Collective::AllGather || coll == Collective::AllReduce) {
      for (size_t dd = 0; dd < D; ++dd) {
        const int len = dims[dd];
        for (int stp = 0; stp + 1 < len; ++stp) {
          for (int r = 0; r < n; ++r) {
            const int p = coord(r, dd);
            const int q = ((p - stp) % len + len) % len;
            long long idx = 0;
            for (int o : group(r, dd, q, true))
              for (int j = 0; j < k; ++j) b.add(chunk(o, j), r, with(r, dd, (p + 1) % len), base + stp * M + idx++, Op::Copy);
          }
        }
        base += static_cast<long long>(len) * M;
      }
    }
  } else {
    throw Error("unknown baseline '" + algo + "' (ring, direct, rhd, dbtree, hierarchical)");
  }
  if (s.transfers.size() > static_cast<size_t>(kMaxChunks)) throw Error("baseline too large");
  return s;
}

}  // namespace autoccl::synth
