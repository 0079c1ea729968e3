// Engine-wide vocabulary: collectives, algorithms, protocols, configurations, task keys, logging.
// NCCL-free by design: the numeric ids mirror NCCL's so the shim converts by cast, but nothing here
// includes or names an NCCL type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace autoccl::engine {

constexpr int kNumColls = 5;   // Broadcast 0, Reduce 1, AllGather 2, ReduceScatter 3, AllReduce 4
constexpr int kNumAlgos = 7;   // Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT
constexpr int kNumProtos = 3;  // LL, LL128, Simple
constexpr int kMaxChannelsHard = 64;  // NCCL's MAXCHANNELS: nothing above this is ever set
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

constexpr int kMaxChunkHalvings = 8;  // most halvings of NCCL's chunk size a configuration asks for

// What the tuner sets for one call. algo/proto = -1: leave NCCL's pair; channels = 0: leave NCCL's
// count (otherwise a per-call maximum); chunk = 0 and chunkHalvings = 0: leave NCCL's chunk size.
// chunk (bytes, fixed rules) replaces NCCL's chunk; chunkHalvings h (the online search) divides it by 2^h,
// applied to the chunk NCCL computes for each channel partition (tuner v6 getChunkSize).
struct Config {
  int algo = -1;
  int proto = -1;
  int channels = 0;
  uint64_t chunk = 0;
  int chunkHalvings = 0;
  bool forcesPair() const { return algo >= 0 && proto >= 0; }
  bool setsChunk() const { return chunk != 0 || chunkHalvings != 0; }
  bool empty() const { return !forcesPair() && channels == 0 && !setsChunk(); }
  bool operator==(const Config& o) const {
    return algo == o.algo && proto == o.proto && channels == o.channels && chunk == o.chunk &&
           chunkHalvings == o.chunkHalvings;
  }
};

// Where a call's configuration came from (the trace's "source").
enum class Source : uint8_t { Nccl, Observe, Fixed, Table, Online };
const char* sourceName(Source s);

// A task: (collective, nBytes, numPipeOps) inside one (communicator, rank) context.
struct TaskKey {
  int coll = 0;
  uint64_t bytes = 0;
  int pipe = 0;
  bool operator==(const TaskKey& o) const { return coll == o.coll && bytes == o.bytes && pipe == o.pipe; }
};
struct TaskKeyHash {
  size_t operator()(const TaskKey& k) const {
    uint64_t h = k.bytes * 0x9E3779B97F4A7C15ull;
    h ^= (static_cast<uint64_t>(static_cast<uint32_t>(k.pipe)) << 8) ^ static_cast<uint64_t>(k.coll);
    h ^= h >> 29;
    return static_cast<size_t>(h * 0xBF58476D1CE4E5B9ull);
  }
};

// NCCL's cost table as the engine sees it: numAlgo x numProto floats, row-major; < 0 = unsupported.
struct CostTable {
  float* data = nullptr;
  int numAlgo = 0;
  int numProto = 0;
  float get(int a, int p) const { return data[a * numProto + p]; }
  bool supported(int a, int p) const {
    return data && a >= 0 && p >= 0 && a < numAlgo && p < numProto && get(a, p) >= 0.0f;
  }
};

// Logging goes through a callback injected by the shim (NCCL's logger); the engine never prints.
enum class LogLevel { Warn, Info };
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
