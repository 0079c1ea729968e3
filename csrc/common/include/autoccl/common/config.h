// The vocabulary of every layer: what the tuner sets for one call (Config) and which task a call belongs
// to (TaskKey). NCCL-free: the numeric ids mirror NCCL's so the shim converts by cast (csrc/nccl checks
// that they agree), but nothing here names an NCCL type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace autoccl {

constexpr int kNumColls = 5;   // Broadcast 0, Reduce 1, AllGather 2, ReduceScatter 3, AllReduce 4
constexpr int kNumAlgos = 7;   // Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT
constexpr int kNumProtos = 3;  // LL, LL128, Simple
constexpr int kMaxChunkHalvings = 8;  // most halvings of NCCL's chunk size a configuration asks for (tuner v6)

// What the tuner sets for one call.
// - algo/proto < 0: NCCL's pair. A configuration of the online search with algo < 0 is "NCCL's default"
//   (isDefault): it sets nothing else either. Fixed rules may cap channels without forcing a pair.
// - channels 0: NCCL's count (otherwise a per-call maximum).
// - chunk (bytes, fixed rules and tables written by hand) replaces NCCL's chunk; chunkHalvings h (the online
//   search) divides it by 2^h, applied to the chunk NCCL computes for each channel partition (tuner v6
//   getChunkSize, which clamps a larger answer to the buffer's chunk: only a smaller chunk changes anything).
// - measure: the engine must time this call (kernel timing events on); part of a search's plan, not a setting.
struct Config {
  int algo = -1;
  int proto = -1;
  int channels = 0;
  uint64_t chunk = 0;
  int chunkHalvings = 0;
  bool measure = false;

  bool isDefault() const { return algo < 0; }
  bool forcesPair() const { return algo >= 0 && proto >= 0; }
  bool setsChunk() const { return chunk != 0 || chunkHalvings != 0; }
  bool empty() const { return !forcesPair() && channels == 0 && !setsChunk(); }
  // Equal as far as NCCL is concerned (ignores measure); two defaults are equal whatever else they hold.
  bool sameSetting(const Config& o) const {
    if (isDefault() || o.isDefault()) return isDefault() == o.isDefault();
    return algo == o.algo && proto == o.proto && channels == o.channels && chunk == o.chunk &&
           chunkHalvings == o.chunkHalvings;
  }
  bool operator==(const Config& o) const { return sameSetting(o) && measure == o.measure; }
  bool operator!=(const Config& o) const { return !(*this == o); }
  // Compact form for logs: "nccl-default", "a1/p2/ch16/chunk0", "a1/p2/ch16/chunk/4" (4 = 2^halvings), "(m)": measured.
  std::string str() const;
};

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

}  // namespace autoccl
