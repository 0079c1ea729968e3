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
#include "json_text.h"

namespace autoccl::synth {

using json::num;

std::string schedule_to_json(const Schedule& s, const Topology* topo) {
  std::ostringstream o;
  o << "{\n\"format\": \"autoccl-schedule\",\n\"version\": 2,\n\"collective\": \"" << to_string(s.collective)
    << "\",\n\"algorithm\": " << json::str(s.algorithm) << ",\n\"nranks\": " << s.nranks << ",\n\"nchunks\": " << s.nchunks
    << ",\n\"chunks_per_rank\": " << s.chunks_per_rank << ",\n\"root\": " << s.root
    << ",\n\"chunk_bytes\": " << num(s.chunk_bytes) << ",\n\"bytes\": " << num(s.bytes)
    << ",\n\"time_us\": " << num(s.time_us) << ",\n\"seed\": " << s.seed << ",\n\"owner\": [";
  for (size_t i = 0; i < s.owner.size(); ++i) o << (i ? "," : "") << s.owner[i];
  o << "],\n";
  if (topo) {
    o << "\"topology\": " << json::str(topo->name) << ",\n\"ranks\": [";
    for (int r = 0; r < topo->num_npus(); ++r) o << (r ? "," : "") << json::str(topo->node(topo->npu_node(r)).name);
    o << "],\n\"links\": [";
    for (int l = 0; l < topo->num_links(); ++l)
      o << (l ? "," : "") << "[" << json::str(topo->node(topo->link(l).src).name) << ","
        << json::str(topo->node(topo->link(l).dst).name) << "]";
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
