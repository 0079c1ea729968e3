// Tuning tables ("autoccl table v1", docs/architecture.md): load, lookup, atomic save.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/common.h"
#include "engine/fingerprint.h"

namespace autoccl::engine {

struct TableEntry {
  TaskKey key;
  Config config;        // algo/proto always set in a valid entry
  double timeUs = 0;    // median GPU time of `config`
  double ncclUs = 0;    // median GPU time of NCCL's own choice (0 = unknown)
  uint64_t samples = 0;
};

// A (algorithm, protocol) pair the online search measured for a task: the best median of its points
// against NCCL's choice's, both from the same job. A later online start does not probe a pair measured far
// behind (Settings::skipBehind); table mode reads none.
// A record of fewer samples than this does not leave its pair out: an outlier (a stall, a concurrent job) can make a
// pair within the threshold look twice as slow, and a pair left out is never measured again.
constexpr uint64_t kPairRecordMinSamples = 2;
struct PairRecord {
  TaskKey key;
  int algo = -1, proto = -1;
  double timeUs = 0;  // best median over the pair's measured points
  double ncclUs = 0;  // median of NCCL's own choice in the same job
  uint64_t samples = 0;
  int channels = 0;  // the channel count of the best point (0: not known): where the next search first probes it
  double ratio() const { return ncclUs > 0 ? timeUs / ncclUs : 0; }
};

struct Table {
  Fingerprint fp;
  std::string created;  // ISO-8601 UTC; not part of the fingerprint id
  std::vector<TableEntry> entries;
  std::vector<PairRecord> pairs;

  // Lookup for a task (documented policy):
  //  1. exact (coll, bytes, pipe);
  //  2. same (coll, bytes), nearest pipe;
  //  3. same coll, bytes in the same power-of-two bucket [2^k, 2^(k+1)), nearest size (then pipe).
  // Otherwise nullptr (NCCL decides). Never reaches into another bucket: the best configuration
  // changes with size, and a bucket is the widest span we trust to share one.
  const TableEntry* lookup(int coll, uint64_t bytes, int pipe) const;
  // Insert or replace the entry with the same key; one with a time the schema refuses (not finite, above its
  // maximum) is dropped.
  void upsert(const TableEntry& e);
  // Insert or replace the record of the same (key, algo, proto): a pair a later job did not measure keeps
  // what an earlier one measured. A record thinner than kPairRecordMinSamples (a probe abandoned after its first
  // call) adds its samples to the earlier record instead, keeping the less-behind ratio of the two: two jobs'
  // single far-behind probes leave the pair out, one outlier still does not. Dropped as upsert() drops, and
  // without NCCL's time.
  void upsertPair(const PairRecord& rec);
};

enum class LoadStatus { Ok, Missing, Corrupt, Foreign };
// expectId: the fingerprint id this file must carry (empty: any). *why explains Corrupt/Foreign.
LoadStatus loadTable(const std::string& path, const std::string& expectId, Table* table, std::string* why);
// Parses table text (used by loadTable; exposed for tests).
LoadStatus parseTable(const std::string& text, const std::string& expectId, Table* table, std::string* why);
std::string formatTable(const Table& table);
// Writes to a temporary file beside `path` and renames it over `path`; creates missing directories.
bool saveTable(const std::string& path, const Table& table, std::string* why);
// Creates the directories above `path` that are missing (false with *why when one cannot be made).
bool ensureParentDir(const std::string& path, std::string* why);

std::string cacheTablePath(const std::string& cacheDir, const std::string& fingerprintId);
std::string utcNow();  // "2026-11-21T19:00:00Z"

}  // namespace autoccl::engine
