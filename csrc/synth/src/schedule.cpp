// Schedule JSON writer, bandwidth lower bound and the symbolic checker.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>
#include <unordered_map>

#include "autoccl/synth/synth.h"

namespace autoccl::synth {

namespace {

// The shortest text that reads back as the same double (times must survive a round trip exactly).
std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
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

}  // namespace

std::string schedule_to_json(const Schedule& s, const Topology* topo) {
  std::ostringstream o;
  o << "{\n\"format\": \"autoccl-schedule\",\n\"version\": 2,\n\"collective\": \"" << to_string(s.collective)
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
  o << "],\n\"transfer_fields\": [\"chunk\",\"src\",\"dst\",\"start_us\",\"end_us\",\"op\",\"route\",\"step\",\"order\"],\n"
    << "\"transfers\": [";
  for (size_t i = 0; i < s.transfers.size(); ++i) {
    const auto& t = s.transfers[i];
    o << (i ? ",\n" : "\n") << "[" << t.chunk << "," << t.src << "," << t.dst << "," << num(t.start) << ","
      << num(t.end) << "," << static_cast<int>(t.op) << "," << t.route << "," << t.step << "," << t.order << "]";
  }
  o << "\n]\n}\n";
  return o.str();
}


}  // namespace autoccl::synth
