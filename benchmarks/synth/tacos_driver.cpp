// Runs public TACOS (astra-sim/tacos v1.3.0, built by tacos_compare.py from a checkout outside this
// repository) on a topology given as an edge list and prints, as one JSON object, its All-Gather time and
// synthesis time for each run, and the transfers of the best run.
//
// The transfers come from two hooks tacos_compare.py inserts into a copy of TACOS's synthesizer: one where a
// chunk arrives (with the link's start and end time), one in its chunk replacement. In the "public" build the
// replacement hook always answers yes, so TACOS runs unchanged; in the "causal" build a replacement chunk must
// have been at the link's source when the link's transfer started (public TACOS only asks that it be there
// when the transfer ends, which makes schedules where a chunk is forwarded before it arrived).
//
// usage: tacos_driver EDGES CHUNKS_PER_NPU CHUNK_BYTES RUNS
//   EDGES: "npus N" then one "src dst bandwidth_GiB_per_s latency_us" line per directed link.
#include <tacos/collective/all_gather.h>
#include <tacos/synthesizer/synthesizer.h>
#include <tacos/topology/topology.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace {

struct Delivery {
  int chunk, src, dst;
  double start, end;
};

int g_npus = 0;
std::vector<Delivery> g_deliveries;
std::vector<double> g_arrival;  // [chunk * npus + npu]: when the chunk arrived there (inf: not yet)

class EdgeListTopology final : public tacos::Topology {
 public:
  explicit EdgeListTopology(const char* path) {
    std::ifstream in(path);
    std::string word;
    int n = 0;
    if (!(in >> word >> n) || word != "npus" || n < 2) {
      std::fprintf(stderr, "%s: expected 'npus N' (N >= 2) first\n", path);
      std::exit(2);
    }
    setNpusCount_(n);
    int src = 0, dst = 0;
    double bw = 0, lat = 0;
    while (in >> src >> dst >> bw >> lat) {
      if (src < 0 || src >= n || dst < 0 || dst >= n || src == dst || !(bw > 0) || !(lat >= 0)) {
        std::fprintf(stderr, "%s: bad link %d %d %g %g\n", path, src, dst, bw, lat);
        std::exit(2);
      }
      connect_(src, dst, bw, lat, false);
    }
  }
};

}  // namespace

// Hooks called from the copy of TACOS's synthesizer.
void tacos_hook_arrival(int src, int dst, int chunk, double start, double end) {
  g_deliveries.push_back({chunk, src, dst, start, end});
  double& a = g_arrival[static_cast<std::size_t>(chunk) * static_cast<std::size_t>(g_npus) + static_cast<std::size_t>(dst)];
  if (end < a) a = end;
}

bool tacos_hook_held_at(int npu, int chunk, double t) {
  return g_arrival[static_cast<std::size_t>(chunk) * static_cast<std::size_t>(g_npus) + static_cast<std::size_t>(npu)] <=
         t + 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s EDGES CHUNKS_PER_NPU CHUNK_BYTES RUNS\n", argv[0]);
    return 2;
  }
  const EdgeListTopology topology(argv[1]);
  const int chunks_per_npu = std::atoi(argv[2]);
  const long long chunk_bytes = std::atoll(argv[3]);
  const int runs = std::atoi(argv[4]);
  if (chunks_per_npu < 1 || chunk_bytes < 1 || runs < 1) {
    std::fprintf(stderr, "chunks per NPU, chunk bytes and runs must be positive\n");
    return 2;
  }
  g_npus = topology.npusCount();
  const tacos::AllGather collective(g_npus, chunks_per_npu);
  const std::size_t chunks = static_cast<std::size_t>(collective.chunksCount());
  std::vector<std::pair<double, double>> results;
  std::vector<Delivery> best;
  double best_time = std::numeric_limits<double>::infinity();
  for (int r = 0; r < runs; ++r) {
    g_deliveries.clear();
    g_arrival.assign(chunks * static_cast<std::size_t>(g_npus), std::numeric_limits<double>::infinity());
    for (std::size_t c = 0; c < chunks; ++c)
      g_arrival[c * static_cast<std::size_t>(g_npus) + static_cast<std::size_t>(collective.precondition(static_cast<int>(c)))] = 0;
    tacos::Synthesizer synthesizer;  // seeded from std::random_device, as TACOS does
    const auto t0 = std::chrono::steady_clock::now();
    const double time_us = synthesizer.solve(topology, collective, chunk_bytes);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    results.emplace_back(time_us, secs);
    if (time_us < best_time) {
      best_time = time_us;
      best = g_deliveries;
    }
  }
  std::printf("{\"npus\": %d, \"chunks_per_npu\": %d, \"chunk_bytes\": %lld, \"runs\": [", g_npus, chunks_per_npu,
              chunk_bytes);
  for (std::size_t i = 0; i < results.size(); ++i)
    std::printf("%s{\"time_us\": %.17g, \"synth_s\": %.6g}", i ? ", " : "", results[i].first, results[i].second);
  std::printf("],\n\"best_transfers\": [");
  for (std::size_t i = 0; i < best.size(); ++i)
    std::printf("%s[%d,%d,%d,%.17g,%.17g]", i ? ",\n" : "\n", best[i].chunk, best[i].src, best[i].dst, best[i].start,
                best[i].end);
  std::printf("]}\n");
  return 0;
}
