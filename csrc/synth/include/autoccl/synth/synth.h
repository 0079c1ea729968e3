// autoccl synth: topology-aware collective synthesis (TACOS, done completely).
//
// Self-contained library (no dependency on the rest of autoccl):
//   Topology    NPUs, switches, NICs; directed alpha-beta links; validation; generators.
//   synthesize  time-expanded greedy link-chunk matching (All-Gather, Reduce-Scatter, All-Reduce,
//               Broadcast, Reduce), best of k seeds in parallel.
//   Schedule    every transfer (chunk, src, dst, start, end, op, route); JSON writer.
//   check       symbolic replay proving a schedule correct.
//   simulate    congestion-aware replay of any schedule on a topology.
//   baseline    Ring, Direct, Recursive Halving-Doubling, Double Binary Tree, Hierarchical.
//   exporters   MSCCL XML and MSCCL++ execution-plan JSON.
// Units: time in microseconds, bandwidth in GB/s (1e9 bytes/s), sizes in bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace autoccl::synth {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A synthesis ended because its SynthOptions::stop was set (the user pressed Ctrl-C).
class Interrupted : public Error {
 public:
  Interrupted() : Error("synthesis interrupted") {}
};

enum class NodeKind : std::uint8_t { Npu, Switch, Nic };
const char* to_string(NodeKind k);
NodeKind node_kind_from_string(const std::string& s);

struct Node {
  std::string name;
  NodeKind kind = NodeKind::Npu;
};

struct Link {
  int src = -1;  // node index
  int dst = -1;
  double latency_us = 0;
  double bandwidth_gbps = 0;
};

// An NPU-to-NPU path that crosses no other NPU (a direct link, or a path through switches/NICs).
// The synthesizer moves chunks over channels; a channel is busy while any of its links is.
struct Channel {
  int src = -1;  // NPU rank
  int dst = -1;
  std::vector<int> route;  // physical link ids, in order
  double latency_us = 0;   // sum of link latencies
  double bandwidth_gbps = 0;  // min link bandwidth
  double time_us(double bytes) const { return latency_us + bytes / (bandwidth_gbps * 1e3); }
};

class Topology {
 public:
  // ---- construction ----
  int add_node(const std::string& node_name, NodeKind kind);
  int add_link(const std::string& src, const std::string& dst, double latency_us, double bandwidth_gbps);
  int add_link(int src, int dst, double latency_us, double bandwidth_gbps);
  void add_bidir(int a, int b, double latency_us, double bandwidth_gbps) {
    add_link(a, b, latency_us, bandwidth_gbps);
    add_link(b, a, latency_us, bandwidth_gbps);
  }
  // Failures are applied by finalize(): a failed node disappears with all its links.
  void fail_node(const std::string& node_name);
  void fail_link(const std::string& src, const std::string& dst);
  // Validate and build the NPU ranks and channels. Throws Error with a clear message.
  void finalize();

  // ---- queries (after finalize) ----
  bool finalized() const { return finalized_; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  int num_links() const { return static_cast<int>(links_.size()); }
  int num_npus() const { return static_cast<int>(npus_.size()); }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Link>& links() const { return links_; }
  const Node& node(int i) const { return nodes_.at(static_cast<size_t>(i)); }
  const Link& link(int i) const { return links_.at(static_cast<size_t>(i)); }
  int node_id(const std::string& node_name) const;  // -1 if unknown
  int npu_node(int rank) const { return npus_.at(static_cast<size_t>(rank)); }
  int rank_of_node(int node) const { return rank_of_.at(static_cast<size_t>(node)); }
  const std::vector<Channel>& channels() const { return channels_; }
  const std::vector<int>& in_channels(int rank) const { return in_ch_.at(static_cast<size_t>(rank)); }
  const std::vector<int>& out_channels(int rank) const { return out_ch_.at(static_cast<size_t>(rank)); }
  // Channel id of src->dst, or -1.
  int channel_id(int src_rank, int dst_rank) const;
  // Cheapest route (by latency + 1 byte-per-GB/s tiebreak) between two NPUs through any nodes.
  std::vector<int> route(int src_rank, int dst_rank) const;
  // Same topology with every link reversed (same node and link ids).
  Topology transposed() const;
  // Sum of the bandwidths of the links entering / leaving an NPU's node (GB/s).
  double in_bandwidth(int rank) const;
  double out_bandwidth(int rank) const;
  bool uniform_channels() const { return uniform_; }

  // Optional structure metadata used by hierarchical baselines and plots.
  std::vector<int> dims;    // NPU rank = mixed radix over dims (dims[0] fastest), product == num_npus
  std::string name = "topology";
  std::vector<std::pair<double, double>> layout;  // optional per-node (x, y) for plots

 private:
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::map<std::string, int> by_name_;
  std::vector<std::string> failed_nodes_;
  std::vector<std::pair<std::string, std::string>> failed_links_;
  bool finalized_ = false;
  bool uniform_ = false;
  std::vector<int> npus_;
  std::vector<int> rank_of_;
  std::vector<Channel> channels_;
  std::vector<std::vector<int>> in_ch_, out_ch_;
  std::map<std::pair<int, int>, int> ch_index_;
  std::vector<std::vector<int>> out_links_, in_links_;  // per node
  std::set<std::pair<int, int>> link_set_;
  void build_channels_();
};

// Generators. Parameters: bandwidth (GB/s) and latency (us) for every link unless stated.
// kind: ring, bidir_ring, fully_connected, mesh (dims 2 or 3), torus (dims 2 or 3), hypercube (dims = [d]),
//       dragonfly (dims = [groups, routers_per_group]; params global_bandwidth, global_latency),
//       switch (dims = [n]; shared-port switch node), switch_unwound (dims=[n]; params degree),
//       multidim (dims = sizes, params "types" via dim_types), cluster (dims = [hosts, gpus_per_host];
//       params nic_bandwidth, nic_latency, nvlink bandwidth/latency).
struct GenParams {
  double bandwidth_gbps = 50;
  double latency_us = 0.5;
  std::vector<double> dim_bandwidth;  // per-dimension overrides (mesh/torus/multidim)
  std::vector<double> dim_latency;
  std::vector<std::string> dim_types;  // multidim: "ring", "fc", "switch" per dimension
  std::optional<int> degree;           // switch_unwound: links per NPU, 1..n-1; unset: 1
  double global_bandwidth_gbps = 0;    // dragonfly
  double global_latency_us = 0;
  double nic_bandwidth_gbps = 50;      // cluster
  double nic_latency_us = 2;
  std::optional<int> rails;            // cluster: NICs (rails) per host, 1..gpus_per_host; unset: gpus_per_host
};
Topology generate(const std::string& kind, const std::vector<int>& dims, const GenParams& p);

enum class Collective : std::uint8_t { AllGather, ReduceScatter, AllReduce, Broadcast, Reduce };
const char* to_string(Collective c);
Collective collective_from_string(const std::string& s);

enum class Op : std::uint8_t { Copy = 0, Reduce = 1 };

struct Transfer {
  std::int32_t chunk = 0;
  std::int32_t src = 0;  // rank
  std::int32_t dst = 0;
  double start = -1;   // us; < 0 for untimed (baseline) schedules
  double end = -1;
  std::int32_t route = -1;  // index into Schedule::routes, -1: topology.route(src, dst)
  std::int32_t step = 0;    // ordering key for untimed schedules
  Op op = Op::Copy;
  // Reductions: the position of this reduction among those into (dst, chunk), 0 first; an executor applies
  // them in this order. -1 for copies (and for reductions of untimed schedules until simulated).
  std::int32_t order = -1;
};

// A collective over nranks NPUs with nchunks chunks of chunk_bytes each.
//  AllGather:     chunk c starts at owner[c], every rank ends holding it.
//  ReduceScatter: every rank contributes to every chunk; owner[c] ends with the full reduction.
//  AllReduce:     every rank contributes to every chunk; every rank ends with the full reduction.
//  Broadcast:     every chunk starts at root; every rank ends holding it.
//  Reduce:        every rank contributes to every chunk; root ends with the full reduction.
struct Schedule {
  Collective collective = Collective::AllGather;
  std::string algorithm = "tacos";
  int nranks = 0;
  int nchunks = 0;
  int chunks_per_rank = 1;
  int root = 0;
  double chunk_bytes = 0;
  double bytes = 0;  // collective size (see docs/synth.md)
  std::vector<int> owner;  // per chunk
  std::vector<std::vector<int>> routes;
  std::vector<Transfer> transfers;
  double time_us = 0;  // estimated (synthesized) or simulated completion time
  std::uint64_t seed = 0;
  bool timed() const { return !transfers.empty() && transfers.front().start >= 0; }
};

// The largest collective size (bytes) synthesis and the baselines accept: 2^50 (1 PiB). Times are microseconds in
// double precision; far beyond this size a collective lasts so long that its times can no longer resolve link
// latencies (at 2^60 bytes on a 50 GB/s ring, 5.5e14 us with a resolution of 0.06 us) and the schedule breaks.
constexpr double kMaxCollectiveBytes = 1125899906842624.0;
// The most chunks a schedule holds (NPUs x chunks per NPU for synthesis, a baseline's chunks or transfers): chunk
// and transfer ids are 32-bit.
constexpr long long kMaxChunks = 2'000'000'000LL;
// Checks shared by synthesis and the baselines; each throws Error with a sentence naming the value and its limit.
void check_collective_size(double bytes);  // positive, finite, at most kMaxCollectiveBytes
void check_root(int root, int nranks);     // 0 <= root < nranks

struct SynthOptions {
  Collective collective = Collective::AllGather;
  double bytes = 1e9;
  int chunks_per_rank = 0;  // 0: chosen by trial (see choose_chunks); Broadcast/Reduce: chunks of the root's buffer
  int seeds = 1;
  int threads = 0;  // 0: hardware concurrency
  std::uint64_t base_seed = 1;
  int root = 0;
  bool record = true;  // false: compute the time only (no transfer list kept)
  // Refuse (Error, before any work) a synthesis estimated to need more memory than this; 0: no limit.
  double max_memory_bytes = 0;
  // Engine: Auto picks the general engine for shared or differently priced channels (see synthesizer.cpp);
  // PointToPoint forces the point-to-point engine (refused where channels share links); General forces it.
  enum class Engine : std::uint8_t { Auto, General, PointToPoint } engine = Engine::Auto;
  // Chunk trials (chunks_per_rank 0): on the point-to-point engine skip a candidate whose lower bound cannot
  // beat the fastest so far; where the trials ran every seed, take the synthesis at the count kept from its
  // trial (its best seed, or the direct pattern, run again for the transfer list). false: every candidate run
  // and the synthesis run afresh, the same schedule (tests).
  bool trial_shortcuts = true;
  // On the general engine, where every NPU pair has a channel and each NPU owns as many chunks, the direct
  // pattern (round r: every NPU sends its chunks to NPU + r) is a candidate spreading schedule beside the seeds,
  // kept where it is faster (SynthStats::direct_pattern), in memory and streamed. false: the seeds alone.
  bool direct_candidate = true;
  // Read now and then while synthesizing (each event of the engines): once true, the synthesis throws
  // Interrupted, a stream written so far is removed. nullptr: never stopped.
  const std::atomic<bool>* stop = nullptr;
  // Progress, for a caller that shows it: the engines add the chunk deliveries they make (every seed, chunk
  // trial and phase, so more than the schedule's transfers) at each event. nullptr: not counted.
  std::atomic<std::uint64_t>* deliveries = nullptr;
};

struct SynthStats {
  double time_us = 0;
  std::vector<double> seed_times;  // per seed, in seed order (All-Gather part for RS/AR)
  std::uint64_t best_seed = 0;
  std::uint64_t transfers = 0;
  double ag_time_us = 0, rs_time_us = 0;
  std::size_t max_queue_entries = 0;
  int chunks_per_rank = 0;                          // the chunks used
  std::vector<std::pair<int, double>> chunk_trials;  // (chunks per rank, spreading time) tried when chosen
                                                     // (not those a bound ruled out: see trial_shortcuts)
  // Best seed, general engine: chunks sent again over a faster path while a copy was in flight, and the
  // slower copies that then carried another chunk (replaced) or were dropped from the schedule (cancelled).
  std::uint64_t resent = 0, replaced = 0, cancelled = 0;
  // > 0: the schedule's time before it was replayed as early as possible (only with cancelled copies, when
  // that is sooner); time_us is the replay's.
  double uncompacted_time_us = 0;
  // A spreading phase is the direct pattern (SynthOptions::direct_candidate), faster than every seed; seed_times
  // and best_seed are still the seeds'.
  bool direct_pattern = false;
};

Schedule synthesize(const Topology& topo, const SynthOptions& opt, SynthStats* stats = nullptr);

// Schedules streamed to disk (format autoccl-schedule-stream v1, stream.cpp and docs/synth.md).
struct StreamSection {
  bool mirror = false;  // reductions: the time reversal of the records' spreading phase
  int blocks_of = -1;   // >= 0: no records of its own, those of that (earlier) section
  std::vector<std::vector<int>> routes;  // link ids, in the direction of the section's transfers
  std::vector<double> route_us;          // duration of a transfer over each route
};
class StreamWriter {
 public:
  StreamWriter(const std::string& path, const std::string& header_json);
  ~StreamWriter();
  void write(std::vector<Transfer>& transfers);  // route = route index of the section; empties the vector
  void end_section(double time_us);
  std::uint64_t finish();  // bytes written
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
std::string stream_header_json(const Schedule& s, const Topology& topo, const std::vector<StreamSection>& sections);
// Synthesize as synthesize() does, writing the transfers to `path` as they are made instead of keeping them:
// memory stays that of the synthesis state. With several seeds (or the direct pattern to weigh), the best is
// found first without writing, then run again. The schedule returned has no transfers. *bytes: the file's size.
Schedule synthesize_to_stream(const Topology& topo, const SynthOptions& opt, const std::string& path,
                              SynthStats* stats = nullptr, std::uint64_t* bytes = nullptr);
// Read a stream's records into s (whose header fields the caller set from the stream's JSON header), with
// route_src/route_dst the ranks at the ends of every section's routes, concatenated in section order.
void read_schedule_stream(const std::string& path, const std::vector<StreamSection>& sections, Schedule& s,
                          const std::vector<int>& route_src, const std::vector<int>& route_dst);

// Checker: symbolic replay. Throws nothing; returns ok + errors.
struct CheckOptions {
  // Durations must equal the model's alpha + bytes/beta of their route (not just be at least that long).
  bool exact_durations = false;
  // Called now and then with (work done, total work); may throw to abort.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
};
struct CheckResult {
  bool ok = true;
  std::vector<std::string> errors;  // first errors (capped)
  std::uint64_t error_count = 0;   // all errors found (errors holds the first ones)
  std::uint64_t redundant = 0;     // copies delivered to a rank that already held the same data
  std::uint64_t transfers = 0;
  std::uint64_t mistimed = 0;      // transfers whose duration disagrees with the model
  double end_us = 0;               // last transfer end
};
CheckResult check(const Schedule& s, const Topology* topo = nullptr, const CheckOptions& opt = {});

// Give every reduction its order among the reductions into its (dst, chunk): by end time, then start, then
// position in the list. Used for schedules that do not state it (untimed ones, once simulated).
void assign_reduction_order(Schedule& s);

// The schedule's ranks and links named as in a schedule file, mapped onto `topo` by name: ranks to the
// topology's ranks, route link ids to the topology's link ids. Throws Error with a sentence when a name is
// unknown, missing or duplicated, or a route does not lead from its transfer's source to its destination.
Schedule resolve_by_name(const Schedule& s, const std::vector<std::string>& rank_names,
                         const std::vector<std::pair<std::string, std::string>>& link_names, const Topology& topo);

// Congestion-aware simulator.
struct SimResult {
  double time_us = 0;
  double algbw_gbps = 0;
  std::vector<double> link_busy_us;  // per physical link
  std::vector<double> link_util;     // busy / time
  Schedule timed;                    // the schedule with simulated start/end
};
SimResult simulate(const Topology& topo, const Schedule& s);

// Baselines: "ring", "direct", "rhd", "dbtree", "hierarchical". max_memory_bytes > 0: refuse (Error, before any
// work) a baseline whose transfer list, its simulated copy and the checker's would need more.
Schedule baseline(const Topology& topo, const std::string& algo, Collective coll, double bytes,
                  int chunks_per_rank = 1, int root = 0, double max_memory_bytes = 0);
// Transfers a baseline of `chunks_per_rank` makes (every algorithm moves each chunk once over each hop of its
// spreading: n(n-1)k per phase, (n-1)k for Broadcast/Reduce), known before it is built.
double baseline_transfers(int nranks, Collective coll, int chunks_per_rank);

// Lower bounds on the collective time from bandwidth (us), valid for any schedule and chunking: per NPU, and
// cuts and partitions over the topology's natural groups (switch domains, blocks along its dimensions,
// halves); see bounds.cpp. time_us is the largest; kind ("per-NPU", "cut", "partition") and what say which.
struct LowerBound {
  double time_us = 0;
  double per_npu_us = 0;  // the largest per-NPU bound alone
  std::string kind, what;
  // The same counting with each transfer's latency, for schedules that move one chunk of at most bytes/n per
  // transfer (the synthesizer's and TACOS's; All-Gather, Reduce-Scatter, All-Reduce); 0 for the others.
  double model_us = 0;
  std::string model_what;
};
LowerBound lower_bound(const Topology& topo, Collective coll, double bytes, int root = 0);
double bandwidth_lower_bound(const Topology& topo, Collective coll, double bytes, int root = 0);

// Serialization / export.
std::string schedule_to_json(const Schedule& s, const Topology* topo = nullptr);
std::string to_msccl_xml(const Schedule& s, const std::string& name);
std::string to_mscclpp_json(const Schedule& s, const Topology& topo, const std::string& name);

}  // namespace autoccl::synth
