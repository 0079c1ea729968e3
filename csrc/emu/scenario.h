// Scenario files of the emulator: a flat, line-based format (see docs/emulator.md), written by the
// Python driver (autoccl.emu.scenario) and parsed here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace emu {

struct CallSpec {
  int func = 4;        // ncclFunc id
  size_t bytes = 0;    // nBytes as NCCL hands it to the tuner (AllGather/ReduceScatter: the full buffer)
};

struct GroupSpec {
  int comm = 0;                 // index into Scenario::comms
  std::vector<CallSpec> calls;  // one ncclGroupStart/End with these collectives
  int repeat = 1;
  int graph = 0;                // 1: captured once (tuner + Coll events, no kernel events), replayed repeat times
  double load = -1;             // compute-load factor; < 0: the scenario default
  int elemSize = 4;
  std::string dtype = "ncclFloat32";
  // Computation the rank enqueues on its compute stream right after this group: computeUs of work at full
  // speed. It overlaps the group's collectives unless `wait` says it needs them; while both run they slow
  // each other (`load` is then the computation's intensity; PerfModel::gemmSlowdown and meanUs). The
  // group's collectives need the computation enqueued before them (their input).
  double computeUs = 0;
  enum Wait { kWaitNone = 0, kWaitPrev = 1, kWaitSelf = 2 };
  int wait = kWaitNone;  // prev: the computation needs the collectives before this group; self: this group's
  int stepEnd = 0;       // 1: a training step ends when this group's collectives end (a "step" record)
  bool hasCompute() const { return computeUs > 0 || wait != kWaitNone || stepEnd != 0; }
};

struct CommSpec {
  std::string name;
  uint64_t hash = 0;
  std::vector<int> ranks;  // global ranks, in comm-rank order
  int nNodes = 1;
  int channels = 24;       // NCCL's channel count for this comm before NCCL_MIN/MAX_CTAS
};

struct OrderSpec {
  int rank = 0;
  std::string policy = "roundrobin";  // roundrobin | reverse | random | sequential
};

// Per-rank host behaviour (tests of rank skew, slow authority, a rank's process dying).
struct HostSpec {
  int rank = 0;
  int delayUs = 0;         // host sleeps this long before each group (rank skew)
  int jitterUs = 0;        // plus uniform [0, jitterUs) (seeded per rank)
  int proxyDelayUs = 0;    // the proxy thread sleeps this long before delivering each kernel event
  int killAfter = -1;      // >= 0: the process playing this rank SIGKILLs itself after that many groups
  int hiddenPct = 100;     // this rank's kernels hold their stream this share of the scenario's `hidden` time
};

struct Scenario {
  uint64_t seed = 1;
  int runahead = 2;      // timing of call k is delivered only after the host enqueued k+runahead
  int reorder = 1;       // events are picked at random among the first `reorder` deliverable ones
  int noise = 1;         // 0: noiseless model
  double load = 0.0;
  uint64_t gapNs = 2000;  // idle GPU time between consecutive kernels of a communicator's stream
  // > 0: the ranks of a communicator reach each kernel at different times, uniform in [0, skewNs) per rank
  // and kernel (hashed, so every process draws the same); a rank's channels start on arrival and end with
  // the latest arriver's (a collective cannot finish before everyone is in), so its window includes the
  // wait for the last rank. Training steps look like this: rank 0's window of a 25 MB all_gather was
  // 1.2-1.5 ms at the median against a 60 us transfer (FSDP2 on 2 x H200).
  uint64_t skewNs = 0;
  // > 0: the log-normal sigma of the per-kernel (and per-computation) noise, in place of the model's (3 %):
  // 0.15 moves a call by about +-30 % at two sigmas (+35 % / -26 %), the launch-to-launch spread of plain NCCL on
  // 2 x H100. Without noise (`noise 0`) it has no effect.
  double noiseSigma = 0;
  // > 1: a kernel whose configuration (algorithm, protocol, channels, chunk) differs from its task's previous
  // call's on that rank runs this many times as long, inside its channel window (the kernel clock sees it):
  // a configuration whose first call after a switch is slow (cold buffers, connections set up on first use).
  double switchFactor = 1;
  // Per (algorithm, protocol): extra time a kernel holds its stream outside its channels' timestamps (on
  // 4 x H200, tree/LL128 all_reduce 4 MiB: 23-43 us channel windows, 54 us between kernel starts).
  static constexpr int kHiddenAlgos = 8, kHiddenProtos = 3;  // >= NCCL's algorithm / protocol counts
  uint64_t hiddenPairNs[kHiddenAlgos][kHiddenProtos] = {};
  uint64_t hiddenNs(int algo, int proto) const {
    return algo >= 0 && algo < kHiddenAlgos && proto >= 0 && proto < kHiddenProtos ? hiddenPairNs[algo][proto] : 0;
  }
  // 1: the rank threads of this process start their calls only once all of them have created their
  // communicators (ncclCommInitAll / a grouped init); 0: each starts as soon as its own are created.
  int initBarrier = 0;
  // > 0: a rank's host starts the group at position p of a communicator's program only once every rank of
  // that communicator played by this process has started position p - lead (CUDA launch queues are finite
  // and jobs synchronize their hosts every step: no rank runs arbitrarily far ahead). 0: unbounded.
  int lead = 0;
  std::vector<CommSpec> comms;
  std::vector<GroupSpec> groups;
  std::vector<OrderSpec> orders;
  std::vector<HostSpec> hosts;
  const HostSpec* host(int grank) const;  // nullptr: no special behaviour

  // One group instance of a comm's program (repeat expanded).
  struct Instance {
    int group;        // index into groups
    int commIndex;    // position in the comm's program (identical on every rank)
    int rep;
    bool replay;      // graph replay (no tuner call)
  };
  std::vector<std::vector<Instance>> programs;  // per comm

  bool parse(const std::string& text, std::string* error);
  // The interleaving of the comm programs that global rank `grank` executes.
  std::vector<std::pair<int, int>> rankSchedule(int grank) const;  // (comm, instance index)
};

}  // namespace emu
