// Exporters: MSCCL XML and MSCCL++ execution-plan JSON.
#include <algorithm>
#include <map>
#include <tuple>
#include <numeric>
#include <sstream>

#include "autoccl/synth/synth.h"

namespace autoccl::synth {

namespace {

// Buffer index of chunk c (chunk c = j * n + owner): owner-major, NCCL's layout.
int buf_index(const Schedule& s, int c) {
  return (c % s.nranks) * s.chunks_per_rank + c / s.nranks;
}

void require_exportable(const Schedule& s) {
  if (s.collective == Collective::Broadcast || s.collective == Collective::Reduce)
    throw Error("export supports allgather, reducescatter and allreduce schedules");
  if (!s.timed()) throw Error("export needs a timed schedule (synthesize, or simulate a baseline first)");
}

std::vector<size_t> time_order(const Schedule& s) {
  std::vector<size_t> o(s.transfers.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](size_t a, size_t b) {
    return s.transfers[a].start != s.transfers[b].start ? s.transfers[a].start < s.transfers[b].start
                                                        : s.transfers[a].end < s.transfers[b].end;
  });
  return o;
}

}  // namespace

// MSCCL XML. Per GPU: one receive threadblock and one send threadblock per peer connection and channel.
// The i-th transfer of connection (a -> b) goes on channel i / per_chan, identically on both sides, so
// that no threadblock exceeds 64 steps. Each step has at most one cross-threadblock dependency:
//  * a send of chunk c from g depends on the last receive of c into g before it;
//  * a reducing receive of c into g depends on the reducing receive of c into g before it in the schedule's
//    stated reduction order (serializes the read-modify-write of one chunk), so the chain covers all
//    contributions in the order the schedule states.
std::string to_msccl_xml(const Schedule& s, const std::string& name) {
  require_exportable(s);
  constexpr int kMaxSteps = 64;
  const int n = s.nranks;
  const auto order = time_order(s);
  // per connection: ordered transfer indices
  std::map<std::pair<int, int>, std::vector<size_t>> conn;
  for (size_t i : order) conn[{s.transfers[i].src, s.transfers[i].dst}].push_back(i);
  std::vector<int> chan_of(s.transfers.size(), 0);
  int nchannels = 1;
  for (auto& [k, v] : conn)
    for (size_t j = 0; j < v.size(); ++j) {
      chan_of[v[j]] = static_cast<int>(j / kMaxSteps);
      nchannels = std::max(nchannels, chan_of[v[j]] + 1);
    }
  if (nchannels > 32) throw Error("MSCCL export: a connection needs more than 32 channels of 64 steps");
  struct Tb {
    int send = -1, recv = -1, chan = 0;
    std::vector<std::string> steps;
    std::vector<size_t> tr;  // transfer index per step
  };
  std::vector<std::vector<Tb>> tbs(static_cast<size_t>(n));
  std::vector<std::map<std::tuple<int, int, int>, int>> tb_index(static_cast<size_t>(n));  // (send, recv, chan)
  auto tb_for = [&](int g, int send, int recv, int chan) -> int {
    auto& m = tb_index[static_cast<size_t>(g)];
    auto key = std::make_tuple(send, recv, chan);
    auto it = m.find(key);
    if (it != m.end()) return it->second;
    const int id = static_cast<int>(tbs[static_cast<size_t>(g)].size());
    tbs[static_cast<size_t>(g)].push_back(Tb{send, recv, chan, {}, {}});
    m[key] = id;
    return id;
  };
  // step location of each transfer on the receiving and the sending GPU
  std::vector<std::pair<int, int>> recv_loc(s.transfers.size()), send_loc(s.transfers.size());
  for (size_t i : order) {
    const auto& t = s.transfers[i];
    const int rt = tb_for(t.dst, -1, t.src, chan_of[i]);
    recv_loc[i] = {rt, static_cast<int>(tbs[static_cast<size_t>(t.dst)][static_cast<size_t>(rt)].tr.size())};
    tbs[static_cast<size_t>(t.dst)][static_cast<size_t>(rt)].tr.push_back(i);
    const int st = tb_for(t.src, t.dst, -1, chan_of[i]);
    send_loc[i] = {st, static_cast<int>(tbs[static_cast<size_t>(t.src)][static_cast<size_t>(st)].tr.size())};
    tbs[static_cast<size_t>(t.src)][static_cast<size_t>(st)].tr.push_back(i);
  }
  // dependencies
  std::vector<std::pair<int, int>> dep_send(s.transfers.size(), {-1, -1}), dep_recv(s.transfers.size(), {-1, -1});
  std::map<std::pair<int, int>, size_t> last_in;  // (rank, chunk) -> last receive so far (time order)
  std::vector<std::vector<char>> hasdep(static_cast<size_t>(n));
  // reductions into (rank, chunk) by their stated order
  std::map<std::tuple<int, int, int>, size_t> by_order;
  for (size_t i = 0; i < s.transfers.size(); ++i)
    if (s.transfers[i].op == Op::Reduce && s.transfers[i].order >= 0)
      by_order[{s.transfers[i].dst, s.transfers[i].chunk, s.transfers[i].order}] = i;
  for (size_t i : order) {
    const auto& t = s.transfers[i];
    auto it = last_in.find({t.src, t.chunk});
    if (it != last_in.end()) dep_send[i] = recv_loc[it->second];
    if (t.op == Op::Reduce && t.order > 0) {
      auto pt = by_order.find({t.dst, t.chunk, t.order - 1});
      if (pt != by_order.end()) dep_recv[i] = recv_loc[pt->second];
    } else if (t.op == Op::Reduce && t.order < 0) {
      auto jt = last_in.find({t.dst, t.chunk});
      if (jt != last_in.end() && s.transfers[jt->second].op == Op::Reduce) dep_recv[i] = recv_loc[jt->second];
    }
    last_in[{t.dst, t.chunk}] = i;
  }
  std::vector<std::set<std::pair<int, int>>> depended(static_cast<size_t>(n));
  for (size_t i = 0; i < s.transfers.size(); ++i) {
    if (dep_send[i].first >= 0) depended[static_cast<size_t>(s.transfers[i].src)].insert(dep_send[i]);
    if (dep_recv[i].first >= 0) depended[static_cast<size_t>(s.transfers[i].dst)].insert(dep_recv[i]);
  }
  const char* buf = s.collective == Collective::AllGather ? "o" : "i";
  const int total = s.nchunks;
  std::ostringstream o;
  o << "<algo name=\"" << name << "\" proto=\"Simple\" nchannels=\"" << nchannels << "\" nchunksperloop=\"" << total
    << "\" ngpus=\"" << n << "\" coll=\"" << to_string(s.collective) << "\" inplace=\"1\" outofplace=\"0\""
    << " minBytes=\"0\" maxBytes=\"0\">\n";
  for (int g = 0; g < n; ++g) {
    const bool ag = s.collective == Collective::AllGather;
    o << "  <gpu id=\"" << g << "\" i_chunks=\"" << (ag ? 0 : total) << "\" o_chunks=\"" << (ag ? total : 0)
      << "\" s_chunks=\"0\">\n";
    const auto& mine = tbs[static_cast<size_t>(g)];
    for (size_t b = 0; b < mine.size(); ++b) {
      const auto& tb = mine[b];
      if (tb.tr.size() > static_cast<size_t>(kMaxSteps)) throw Error("MSCCL export: threadblock over 64 steps");
      o << "    <tb id=\"" << b << "\" send=\"" << tb.send << "\" recv=\"" << tb.recv << "\" chan=\"" << tb.chan << "\">\n";
      for (size_t k = 0; k < tb.tr.size(); ++k) {
        const size_t i = tb.tr[k];
        const auto& t = s.transfers[i];
        const bool is_send = tb.send >= 0;
        const auto dep = is_send ? dep_send[i] : dep_recv[i];
        const char* type = is_send ? "s" : (t.op == Op::Reduce ? "rrc" : "r");
        const int off = buf_index(s, t.chunk);
        const bool hd = depended[static_cast<size_t>(g)].count({static_cast<int>(b), static_cast<int>(k)}) > 0;
        o << "      <step s=\"" << k << "\" type=\"" << type << "\" srcbuf=\"" << buf << "\" srcoff=\"" << off
          << "\" dstbuf=\"" << buf << "\" dstoff=\"" << off << "\" cnt=\"1\" depid=\"" << dep.first << "\" deps=\""
          << dep.second << "\" hasdep=\"" << (hd ? 1 : 0) << "\"/>\n";
      }
      o << "    </tb>\n";
    }
    o << "  </gpu>\n";
  }
  o << "</algo>\n";
  return o.str();
}

// MSCCL++ execution plan (single host). One threadblock per GPU runs that GPU's part of the schedule in
// time order (program order carries every dependency): a send is `put` into the peer's buffer followed
// by `signal`; a receive is `wait` (and, for a reduction, `reduce` of the scratch slot into the buffer).
// Reductions land in a scratch buffer of nchunks slots. MSCCL++ allows at most 64 ops per threadblock,
// so larger schedules are refused.
std::string to_mscclpp_json(const Schedule& s, const Topology& topo, const std::string& name) {
  require_exportable(s);
  for (const auto& nd : topo.nodes())
    if (nd.kind == NodeKind::Nic) throw Error("MSCCL++ export is for single-host topologies (found a NIC)");
  const int n = s.nranks;
  const auto order = time_order(s);
  std::vector<std::vector<std::string>> ops(static_cast<size_t>(n));
  std::vector<std::set<int>> peers(static_cast<size_t>(n));
  for (size_t i : order) {
    const auto& t = s.transfers[i];
    peers[static_cast<size_t>(t.src)].insert(t.dst);
    peers[static_cast<size_t>(t.dst)].insert(t.src);
  }
  auto ch_of = [&](int g, int peer) {
    const auto& p = peers[static_cast<size_t>(g)];
    return static_cast<int>(std::distance(p.begin(), p.find(peer)));
  };
  const char* buf = s.collective == Collective::AllGather ? "o" : "i";
  const bool reducing = s.collective != Collective::AllGather;
  // remote buffer ids: all-gather: peer k -> k (its data buffer); otherwise 2k scratch, 2k+1 data buffer
  auto rbuf = [&](int k, bool to_scratch) { return reducing ? 2 * k + (to_scratch ? 0 : 1) : k; };
  for (size_t i : order) {
    const auto& t = s.transfers[i];
    const int off = buf_index(s, t.chunk);
    const bool red = t.op == Op::Reduce;
    std::ostringstream put;
    put << "{\"name\": \"put\", \"src_buff\": [{\"type\": \"" << buf << "\", \"index\": " << off
        << ", \"size\": 1}], \"dst_buff\": [{\"buffer_id\": " << rbuf(ch_of(t.src, t.dst), red) << ", \"index\": "
        << (red ? t.chunk : off) << ", \"size\": 1}], \"channel_ids\": [" << ch_of(t.src, t.dst)
        << "], \"channel_type\": \"memory\"}";
    ops[static_cast<size_t>(t.src)].push_back(put.str());
    ops[static_cast<size_t>(t.src)].push_back("{\"name\": \"signal\", \"channel_ids\": [" +
                                              std::to_string(ch_of(t.src, t.dst)) + "], \"channel_type\": \"memory\"}");
    ops[static_cast<size_t>(t.dst)].push_back("{\"name\": \"wait\", \"channel_ids\": [" +
                                              std::to_string(ch_of(t.dst, t.src)) + "], \"channel_type\": \"memory\"}");
    if (red) {
      std::ostringstream r;
      r << "{\"name\": \"reduce\", \"src_buff\": [{\"type\": \"" << buf << "\", \"index\": " << off
        << ", \"size\": 1}, {\"type\": \"s\", \"index\": " << t.chunk << ", \"size\": 1}], \"dst_buff\": [{\"type\": \""
        << buf << "\", \"index\": " << off << ", \"size\": 1}], \"reduce_op\": \"sum\"}";
      ops[static_cast<size_t>(t.dst)].push_back(r.str());
    }
  }
  for (int g = 0; g < n; ++g)
    if (ops[static_cast<size_t>(g)].size() > 64)
      throw Error("MSCCL++ export: GPU " + std::to_string(g) + " needs " +
                  std::to_string(ops[static_cast<size_t>(g)].size()) + " ops in one threadblock (limit 64)");
  const bool ag = s.collective == Collective::AllGather;
  const bool red = reducing;
  std::ostringstream o;
  o << "{\n\"name\": \"" << name << "\",\n\"collective\": \"" << to_string(s.collective)
    << "\",\n\"protocol\": \"Simple\",\n\"inplace\": true,\n\"reuse_resources\": false,\n\"gpus\": [";
  for (int g = 0; g < n; ++g) {
    const auto& p = peers[static_cast<size_t>(g)];
    o << (g ? "," : "") << "\n{\"id\": " << g << ", \"input_chunks\": " << (ag ? s.chunks_per_rank : s.nchunks)
      << ", \"output_chunks\": " << (ag ? s.nchunks : (s.collective == Collective::AllReduce ? s.nchunks : s.chunks_per_rank))
      << ", \"scratch_chunks\": " << (red ? s.nchunks : 0) << ",\n \"threadblocks\": [{\"id\": 0, \"ops\": [";
    const auto& v = ops[static_cast<size_t>(g)];
    for (size_t k = 0; k < v.size(); ++k) o << (k ? ", " : "") << "\n   " << v[k];
    o << "],\n  \"channels\": [{\"channel_type\": \"memory\", \"channel_ids\": [";
    for (size_t k = 0; k < p.size(); ++k) o << (k ? ", " : "") << k;
    o << "]}], \"remote_buffer_refs\": [{\"access_channel_type\": \"memory\", \"remote_buffer_ids\": [";
    for (size_t k = 0; k < (reducing ? 2 : 1) * p.size(); ++k) o << (k ? ", " : "") << k;
    o << "]}]}],\n \"channels\": [{\"channel_type\": \"memory\", \"connected_to\": [";
    size_t k = 0;
    for (int q : p) o << (k++ ? ", " : "") << q;
    o << "]}],\n \"remote_buffers\": [";
    k = 0;
    for (int q : p) {
      if (reducing)
        o << (k++ ? ", " : "") << "{\"rank\": " << q << ", \"type\": \"s\", \"access_channel_types\": [\"memory\"]}";
      o << (k++ ? ", " : "") << "{\"rank\": " << q << ", \"type\": \"" << buf
        << "\", \"access_channel_types\": [\"memory\"]}";
    }
    o << "],\n \"semaphores\": []}";
  }
  o << "\n],\n\"num_threads_per_block\": 1024,\n\"use_double_scratch_buffer\": false,\n\"min_message_size\": 0,\n"
    << "\"max_message_size\": 18446744073709551615\n}\n";
  return o.str();
}

}  // namespace autoccl::synth
