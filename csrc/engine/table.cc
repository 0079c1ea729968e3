#include "engine/table.h"

#include "engine/table_schema.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

namespace autoccl::engine {

namespace {
int bucketOf(uint64_t bytes) { return bytes ? 63 - __builtin_clzll(bytes) : -1; }

// key=value pairs separated by blanks; values may be double-quoted with \" and \\ escapes.
bool splitPairs(std::string_view s, std::map<std::string, std::string>* out, std::string* why) {
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    if (i >= s.size()) break;
    size_t eq = s.find('=', i);
    if (eq == std::string_view::npos) { *why = "expected key=value"; return false; }
    std::string key(s.substr(i, eq - i));
    if (key.empty() || key.find(' ') != std::string::npos) { *why = "bad key"; return false; }
    i = eq + 1;
    std::string value;
    if (i < s.size() && s[i] == '"') {
      ++i;
      bool closed = false;
      while (i < s.size()) {
        char c = s[i++];
        if (c == '\\' && i < s.size()) { value.push_back(s[i++]); continue; }
        if (c == '"') { closed = true; break; }
        value.push_back(c);
      }
      if (!closed) { *why = "unterminated quote"; return false; }
    } else {
      while (i < s.size() && s[i] != ' ' && s[i] != '\t') value.push_back(s[i++]);
    }
    (*out)[key] = value;
  }
  return true;
}

using Fields = std::map<std::string, std::string>;
namespace ts = table_schema;

// Every key of a line must be one the schema names: a misspelt field is an error, not a default.
bool knownKeys(const Fields& m, const std::vector<std::string>& keys, const char* kind, std::string* why) {
  for (const auto& [k, v] : m) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      *why = std::string(kind) + " has an unknown field '" + k + "'";
      return false;
    }
  }
  return true;
}

bool readInt(const Fields& m, const ts::IntField& f, uint64_t* v, std::string* why) {
  auto it = m.find(f.key);
  if (it == m.end()) {
    if (f.required) *why = std::string("needs ") + f.key + "=";
    *v = f.def;
    return !f.required;
  }
  if (!parseUint(it->second, v) || *v < f.min || *v > f.max || (*v && *v < f.nonzeroMin)) {
    *why = std::string(f.key) + "='" + it->second + "' must be an integer in [" + std::to_string(f.min) + ", " +
           std::to_string(f.max) + "]";
    if (f.nonzeroMin) *why += " and 0 or at least " + std::to_string(f.nonzeroMin);
    return false;
  }
  return true;
}

// A plain decimal number, as Python's tables.py accepts too: digits[.digits][e[+-]digits] (no sign, no
// blanks, no hexadecimal, no inf/nan), so that both validators read the same values.
bool isDecimal(const std::string& t) {
  size_t i = 0, n = t.size(), digits = 0;
  while (i < n && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++digits;
  if (i < n && t[i] == '.') {
    ++i;
    while (i < n && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++digits;
  }
  if (!digits) return false;
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < n && (t[i] == '+' || t[i] == '-')) ++i;
    size_t exp = 0;
    while (i < n && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++exp;
    if (!exp) return false;
  }
  return i == n;
}

bool readFloat(const Fields& m, const ts::FloatField& f, double* v, std::string* why) {
  auto it = m.find(f.key);
  if (it == m.end()) {
    if (f.required) *why = std::string("needs ") + f.key + "=";
    *v = f.def;
    return !f.required;
  }
  const char* b = it->second.c_str();
  char* e = nullptr;
  errno = 0;
  double d = std::strtod(b, &e);
  if (!isDecimal(it->second) || e == b || *e || errno || !std::isfinite(d) || d < f.min || d > f.max) {
    *why = std::string(f.key) + "='" + it->second + "' must be a finite number in [0, 1e12]";
    return false;
  }
  *v = d;
  return true;
}

template <typename F, size_t N>
const F& field(const F (&fields)[N], const char* key) {
  for (const F& f : fields)
    if (std::strcmp(f.key, key) == 0) return f;
  std::abort();  // a key the schema lost: the code and python/autoccl/data/table_schema.json disagree
}

std::vector<std::string> taskKeys() {
  std::vector<std::string> keys(std::begin(ts::kTaskNameKeys), std::end(ts::kTaskNameKeys));
  for (const auto& f : ts::kTaskInts) keys.emplace_back(f.key);
  for (const auto& f : ts::kTaskFloats) keys.emplace_back(f.key);
  return keys;
}

// The collective, algorithm and protocol of a task or pair line, by the schema's names.
bool readNames(Fields& m, const char* kind, int* coll, int* algo, int* proto, std::string* why) {
  *coll = parseColl(m["coll"]);
  *algo = parseAlgo(m["algo"]);
  *proto = parseProto(m["proto"]);
  const std::string k(kind);
  if (*coll < 0) *why = k + " coll='" + m["coll"] + "' is not a collective";
  else if (*algo < 0) *why = k + " algo='" + m["algo"] + "' is not an algorithm";
  else if (*proto < 0) *why = k + " proto='" + m["proto"] + "' is not a protocol";
  else return true;
  return false;
}

std::vector<std::string> pairKeys() {
  std::vector<std::string> keys(std::begin(ts::kPairNameKeys), std::end(ts::kPairNameKeys));
  for (const auto& f : ts::kPairInts) keys.emplace_back(f.key);
  for (const auto& f : ts::kPairFloats) keys.emplace_back(f.key);
  return keys;
}

std::vector<std::string> metaKeys() {
  std::vector<std::string> keys;
  for (const auto& f : ts::kMetaStrings) keys.emplace_back(f.key);
  for (const auto& f : ts::kMetaInts) keys.emplace_back(f.key);
  return keys;
}
}  // namespace

const TableEntry* Table::lookup(int coll, uint64_t bytes, int pipe) const {
  const TableEntry* best = nullptr;
  int bestRank = 4;
  double bestDist = 0;
  for (const TableEntry& e : entries) {
    if (e.key.coll != coll) continue;
    int rank;
    double dist;
    if (e.key.bytes == bytes && e.key.pipe == pipe) {
      return &e;
    } else if (e.key.bytes == bytes) {
      rank = 2;
      dist = std::abs(e.key.pipe - pipe);
    } else if (bucketOf(e.key.bytes) == bucketOf(bytes)) {
      rank = 3;
      // size distance dominates, pipe distance breaks ties
      double sd = std::fabs(std::log2(static_cast<double>(e.key.bytes)) - std::log2(static_cast<double>(bytes)));
      dist = sd * 1e6 + std::abs(e.key.pipe - pipe);
    } else {
      continue;
    }
    if (rank < bestRank || (rank == bestRank && dist < bestDist) ||
        (rank == bestRank && dist == bestDist && best && e.key.bytes < best->key.bytes)) {
      best = &e;
      bestRank = rank;
      bestDist = dist;
    }
  }
  return best;
}

namespace {
// A time the schema would refuse on reading (non-finite, above its maximum) never enters a table: one such line
// makes the whole file unreadable, and the next write moves it aside with every entry.
bool storable(double us, const ts::FloatField& f) { return std::isfinite(us) && us >= f.min && us <= f.max; }
}  // namespace

void Table::upsert(const TableEntry& e) {
  if (!storable(e.timeUs, field(ts::kTaskFloats, "time_us")) || !storable(e.ncclUs, field(ts::kTaskFloats, "nccl_us")))
    return;
  for (TableEntry& x : entries) {
    if (x.key == e.key) {
      x = e;
      return;
    }
  }
  entries.push_back(e);
}

void Table::upsertPair(const PairRecord& rec) {
  if (!storable(rec.timeUs, field(ts::kPairFloats, "time_us")) ||
      !storable(rec.ncclUs, field(ts::kPairFloats, "nccl_us")) || rec.ncclUs <= 0)
    return;
  PairRecord p = rec;
  // A channel count the schema would refuse is kept as unknown: the record's times still hold.
  const ts::IntField& ch = field(ts::kPairInts, "channels");
  if (p.channels < 0 || static_cast<uint64_t>(p.channels) > ch.max) p.channels = 0;
  for (PairRecord& x : pairs) {
    if (x.key == p.key && x.algo == p.algo && x.proto == p.proto) {
      if (p.samples < kPairRecordMinSamples && x.samples > 0) {
        const uint64_t samples = x.samples + p.samples;
        const int channels = x.channels;
        if (p.ratio() < x.ratio()) x = p;  // the pair's better evidence: where it ran closest to NCCL's choice
        if (x.channels == 0) x.channels = channels;
        x.samples = samples;
        return;
      }
      x = p;
      return;
    }
  }
  pairs.push_back(p);
}

LoadStatus parseTable(const std::string& text, const std::string& expectId, Table* table, std::string* why) {
  Table t;
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  bool header = false, haveMeta = false;
  std::string fileId;
  auto fail = [&](const std::string& msg) {
    *why = "line " + std::to_string(lineNo) + ": " + msg;
    return LoadStatus::Corrupt;
  };
  while (std::getline(in, line)) {
    ++lineNo;
    std::string_view l = trim(line);
    if (!header) {
      if (l.empty()) continue;
      if (l != ts::kHeader) return fail(std::string("not an autoccl table (the first line must be '") + ts::kHeader + "')");
      header = true;
      continue;
    }
    if (l.empty() || l[0] == '#') continue;
    size_t sp = l.find(' ');
    std::string_view kind = l.substr(0, sp);
    std::string_view rest = sp == std::string_view::npos ? std::string_view() : trim(l.substr(sp + 1));
    if (kind == "fingerprint") {
      if (rest.size() != static_cast<size_t>(ts::kFingerprintHexDigits) ||
          rest.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
        return fail("fingerprint must be 16 lower-case hex digits");
      }
      fileId = std::string(rest);
    } else if (kind == "meta") {
      Fields m;
      std::string err;
      if (!splitPairs(rest, &m, &err) || !knownKeys(m, metaKeys(), "meta", &err)) return fail(err);
      for (const auto& f : ts::kMetaStrings) {
        auto it = m.find(f.key);
        if (f.required && it == m.end()) return fail(std::string("meta needs ") + f.key + "=");
        if (it != m.end() && it->second.size() > f.maxLength)
          return fail(std::string("meta ") + f.key + " is longer than " + std::to_string(f.maxLength) + " characters");
      }
      uint64_t v[5] = {};
      const char* ints[5] = {"gpus", "nccl", "ranks", "nodes", "nvl_domains"};
      for (int i = 0; i < 5; ++i)
        if (!readInt(m, field(ts::kMetaInts, ints[i]), &v[i], &err)) return fail("meta " + err);
      t.fp.gpu = m["gpu"];
      t.fp.gpus = static_cast<int>(v[0]);
      t.fp.nccl = static_cast<int>(v[1]);
      t.fp.ranks = static_cast<int>(v[2]);
      t.fp.nodes = static_cast<int>(v[3]);
      t.fp.nvlDomains = static_cast<int>(v[4]);
      t.created = m.count("created") ? m["created"] : "";
      haveMeta = true;
    } else if (kind == "task") {
      Fields m;
      std::string err;
      if (!splitPairs(rest, &m, &err) || !knownKeys(m, taskKeys(), "task", &err)) return fail(err);
      TableEntry e;
      if (!readNames(m, "task", &e.key.coll, &e.config.algo, &e.config.proto, &err)) return fail(err);
      uint64_t bytes = 0, pipe = 1, channels = 0, chunk = 0, halvings = 0, samples = 0;
      if (!readInt(m, field(ts::kTaskInts, "bytes"), &bytes, &err) ||
          !readInt(m, field(ts::kTaskInts, "pipe"), &pipe, &err) ||
          !readInt(m, field(ts::kTaskInts, "channels"), &channels, &err) ||
          !readInt(m, field(ts::kTaskInts, "chunk"), &chunk, &err) ||
          !readInt(m, field(ts::kTaskInts, "chunk_halvings"), &halvings, &err) ||
          !readInt(m, field(ts::kTaskInts, "samples"), &samples, &err) ||
          !readFloat(m, field(ts::kTaskFloats, "time_us"), &e.timeUs, &err) ||
          !readFloat(m, field(ts::kTaskFloats, "nccl_us"), &e.ncclUs, &err))
        return fail("task " + err);
      for (const auto& pair : ts::kTaskExclusive) {
        auto a = m.find(pair[0]), b = m.find(pair[1]);
        uint64_t va = 0, vb = 0;  // both parsed above
        if (a != m.end() && b != m.end() && parseUint(a->second, &va) && parseUint(b->second, &vb) && va && vb)
          return fail(std::string("task ") + pair[0] + " and " + pair[1] + " are exclusive");
      }
      e.key.bytes = bytes;
      e.key.pipe = static_cast<int>(pipe);
      e.config.channels = static_cast<int>(channels);
      e.config.chunk = chunk;
      e.config.chunkHalvings = static_cast<int>(halvings);
      e.samples = samples;
      t.upsert(e);
    } else if (kind == "pair") {
      Fields m;
      std::string err;
      if (!splitPairs(rest, &m, &err) || !knownKeys(m, pairKeys(), "pair", &err)) return fail(err);
      PairRecord p;
      if (!readNames(m, "pair", &p.key.coll, &p.algo, &p.proto, &err)) return fail(err);
      uint64_t bytes = 0, pipe = 1, channels = 0;
      if (!readInt(m, field(ts::kPairInts, "bytes"), &bytes, &err) ||
          !readInt(m, field(ts::kPairInts, "pipe"), &pipe, &err) ||
          !readInt(m, field(ts::kPairInts, "channels"), &channels, &err) ||
          !readInt(m, field(ts::kPairInts, "samples"), &p.samples, &err) ||
          !readFloat(m, field(ts::kPairFloats, "time_us"), &p.timeUs, &err) ||
          !readFloat(m, field(ts::kPairFloats, "nccl_us"), &p.ncclUs, &err))
        return fail("pair " + err);
      p.key.bytes = bytes;
      p.key.pipe = static_cast<int>(pipe);
      p.channels = static_cast<int>(channels);
      t.upsertPair(p);
    } else {
      return fail("unknown line kind '" + std::string(kind) + "'");
    }
  }
  if (!header) { *why = "empty file"; return LoadStatus::Corrupt; }
  if (fileId.empty() || !haveMeta) { *why = "missing fingerprint or meta line"; return LoadStatus::Corrupt; }
  if (fileId != t.fp.id()) {
    *why = "fingerprint " + fileId + " does not match its meta line (" + t.fp.id() + ")";
    return LoadStatus::Corrupt;
  }
  if (!expectId.empty() && fileId != expectId) {
    *why = "table is for fingerprint " + fileId + " (" + t.fp.canonical() + "), this run is " + expectId;
    return LoadStatus::Foreign;
  }
  *table = std::move(t);
  return LoadStatus::Ok;
}

LoadStatus loadTable(const std::string& path, const std::string& expectId, Table* table, std::string* why) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    *why = path + " is not a regular file";
    return LoadStatus::Corrupt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = "cannot open " + path;
    return LoadStatus::Missing;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > ts::kMaxFileBytes) {
    *why = "file larger than " + std::to_string(ts::kMaxFileBytes >> 20) + " MiB";
    return LoadStatus::Corrupt;
  }
  return parseTable(ss.str(), expectId, table, why);
}

std::string formatTable(const Table& t) {
  std::string out = std::string(ts::kHeader) + "\nfingerprint " + t.fp.id() + "\nmeta " + t.fp.canonical() +
                    " created=" + (t.created.empty() ? utcNow() : t.created) + "\n";
  char buf[512];
  for (const TableEntry& e : t.entries) {
    char halvings[32] = "";
    if (e.config.chunkHalvings) std::snprintf(halvings, sizeof halvings, " chunk_halvings=%d", e.config.chunkHalvings);
    std::snprintf(buf, sizeof buf,
                  "task coll=%s bytes=%" PRIu64 " pipe=%d algo=%s proto=%s channels=%d chunk=%" PRIu64
                  "%s time_us=%.1f nccl_us=%.1f samples=%" PRIu64 "\n",
                  collName(e.key.coll), e.key.bytes, e.key.pipe, algoName(e.config.algo), protoName(e.config.proto),
                  e.config.channels, e.config.chunk, halvings, e.timeUs, e.ncclUs, e.samples);
    out += buf;
  }
  for (const PairRecord& p : t.pairs) {
    char channels[24] = "";  // absent = 0 (not known)
    if (p.channels) std::snprintf(channels, sizeof channels, " channels=%d", p.channels);
    std::snprintf(buf, sizeof buf,
                  "pair coll=%s bytes=%" PRIu64 " pipe=%d algo=%s proto=%s%s time_us=%.1f nccl_us=%.1f samples=%" PRIu64
                  "\n",
                  collName(p.key.coll), p.key.bytes, p.key.pipe, algoName(p.algo), protoName(p.proto), channels,
                  p.timeUs, p.ncclUs, p.samples);
    out += buf;
  }
  return out;
}

namespace {
bool mkdirs(const std::string& dir) {
  if (dir.empty()) return true;
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    cur = dir.substr(0, pos);
    if (cur.empty()) continue;
    if (mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST) return false;
  }
  return true;
}
}  // namespace

bool ensureParentDir(const std::string& path, std::string* why) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0 && !mkdirs(path.substr(0, slash))) {
    *why = "cannot create directory for " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool saveTable(const std::string& path, const Table& table, std::string* why) {
  if (!ensureParentDir(path, why)) return false;
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%d.%lx", static_cast<int>(getpid()),
                static_cast<unsigned long>(std::clock()) ^ static_cast<unsigned long>(std::time(nullptr)));
  std::string tmp = path + suffix;
  std::string text = formatTable(table);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    *why = "cannot write " + tmp + ": " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = "cannot write " + path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

std::string cacheTablePath(const std::string& cacheDir, const std::string& id) {
  return cacheDir + "/tables/" + id + ".table";
}

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace autoccl::engine
