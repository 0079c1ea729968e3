// Engine-wide vocabulary: names of collectives, algorithms and protocols, cost tables, logging, parsers;
// the configuration and task key shared with the search and the coordinator come from csrc/common.
// NCCL-free by design: the numeric ids mirror NCCL's so the shim converts by cast, but nothing here
// includes or names an NCCL type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "autoccl/common/config.h"

namespace autoccl::engine {

using autoccl::kMaxChunkHalvings;
using autoccl::kNumAlgos;
using autoccl::kNumColls;
using autoccl::kNumProtos;
constexpr int kMaxChannelsHard = 64;  // NCCL's MAXCHANNELS: nothing above this is ever set
constexpr int kTreeAlgo = 0, kRingAlgo = 1;  // NCCL's tree and ring (ring: every collective has it, on every protocol)
constexpr int kSimpleProto = 2;              // NCCL_PROTO_SIMPLE
constexpr uint64_t kMinChunk = 4096;           // bounds for a chunk size we hand to NCCL (v6)
constexpr uint64_t kMaxChunk = 16ull << 20;

// Lower-case names used in settings, tables and traces ("allreduce", "ring", "simple").
const char* collName(int coll);
const char* algoName(int algo);
const char* protoName(int proto);
// Parsers accept our lower-case names case-insensitively, and NCCL's profiler spellings
// ("AllReduce", "RING", "NVLS_TREE", "COLLNET_DIRECT", "SIMPLE"). Return -1 when unknown.
int parseColl(std::string_view s);
int parseAlgo(std::string_view s);
int parseProto(std::string_view s);

// What the tuner sets for one call, and a task (collective, nBytes, numPipeOps) inside one
// (communicator, rank) context: see autoccl/common/config.h.
using autoccl::Config;
using autoccl::TaskKey;
using autoccl::TaskKeyHash;

// One call of one task (the merges collect the ranks' times under it; the exposure and step-guard clocks place
// calls by it).
struct CallKey {
  TaskKey task;
  uint64_t call = 0;
  bool operator==(const CallKey& o) const { return task == o.task && call == o.call; }
};
struct CallKeyHash {
  size_t operator()(const CallKey& k) const {
    return TaskKeyHash()(k.task) ^ static_cast<size_t>(k.call * 0x9E3779B97F4A7C15ull);
  }
};

// What one step arm (AUTOCCL_STEP_ARMS entry `C`, `P` or `C/P`, each optionally `+E`, or `+E` alone) does to the
// calls it limits: at most `channels` channels (0: the plan's count) and protocol `proto` (NCCL's id, 0 LL,
// 1 LL128, 2 Simple; -1: the plan's); and to the calls it leaves exposed (the step's last; an estimated arm's
// positions not called hidden) at least `exposed` channels (0: the plan's count; kMaxChannelsHard, written `max`:
// as many as the communicator has).
struct ArmLimit {
  int channels = 0;
  int proto = -1;
  int exposed = 0;
  bool operator==(const ArmLimit& o) const {
    return channels == o.channels && proto == o.proto && exposed == o.exposed;
  }
  bool operator!=(const ArmLimit& o) const { return !(*this == o); }
};
// "8", "simple", "2/ll128": as AUTOCCL_STEP_ARMS writes it.
std::string armLimitText(const ArmLimit& a);

// Where a call's configuration came from (the trace's "source").
enum class Source : uint8_t { Nccl, Observe, Fixed, Table, Online, Manual };
const char* sourceName(Source s);

// NCCL's cost table as the engine sees it: numAlgo x numProto floats, row-major; < 0 = unsupported.
struct CostTable {
  float* data = nullptr;
  int numAlgo = 0;
  int numProto = 0;
  float get(int a, int p) const { return data[a * numProto + p]; }
  bool supported(int a, int p) const {
    return data && a >= 0 && p >= 0 && a < numAlgo && p < numProto && get(a, p) >= 0.0f;
  }
  // The pair NCCL runs where the tuner leaves the table as NCCL filled it: the cheapest supported entry, the first
  // in NCCL's order on a tie (its topoGetAlgoInfo scan). False for an empty table.
  bool ncclPick(int* algo, int* proto) const {
    bool any = false;
    float best = 0;
    for (int a = 0; data && a < numAlgo; ++a)
      for (int p = 0; p < numProto; ++p)
        if (get(a, p) >= 0.0f && (!any || get(a, p) < best)) {
          any = true;
          best = get(a, p);
          *algo = a;
          *proto = p;
        }
    return any;
  }
};

// Logging goes through a callback injected by the shim (NCCL's logger); the engine never prints.
// Summary: an INFO line that NCCL_DEBUG=INFO shows without NCCL_DEBUG_SUBSYS naming the tuner (a pinned task).
enum class LogLevel { Warn, Info, Summary };
using LogFn = std::function<void(LogLevel, const std::string&)>;

// FNV-1a 64 (fingerprint ids).
uint64_t fnv1a64(std::string_view s);
std::string hex16(uint64_t v);

// Parse a size with optional binary unit suffix K/M/G (case-insensitive). False on junk/overflow.
bool parseSize(std::string_view s, uint64_t* out);
// Parse a non-negative decimal integer (no sign, no suffix). False on junk/overflow.
bool parseUint(std::string_view s, uint64_t* out);

std::string_view trim(std::string_view s);

}  // namespace autoccl::engine
