#include "engine/table.h"

#include <sys/stat.h>
#include <unistd.h>

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

bool getInt(const std::map<std::string, std::string>& m, const char* k, uint64_t* v, bool required) {
  auto it = m.find(k);
  if (it == m.end()) return !required;
  return parseUint(it->second, v);
}

bool getDouble(const std::map<std::string, std::string>& m, const char* k, double* v) {
  auto it = m.find(k);
  if (it == m.end()) return true;
  const char* b = it->second.c_str();
  char* e = nullptr;
  errno = 0;
  double d = std::strtod(b, &e);
  if (e == b || *e || errno || !std::isfinite(d) || d < 0) return false;
  *v = d;
  return true;
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

void Table::upsert(const TableEntry& e) {
  for (TableEntry& x : entries) {
    if (x.key == e.key) {
      x = e;
      return;
    }
  }
  entries.push_back(e);
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
      if (l != "# autoccl table v1") return fail("not an 'autoccl table v1' file");
      header = true;
      continue;
    }
    if (l.empty() || l[0] == '#') continue;
    size_t sp = l.find(' ');
    std::string_view kind = l.substr(0, sp);
    std::string_view rest = sp == std::string_view::npos ? std::string_view() : trim(l.substr(sp + 1));
    if (kind == "fingerprint") {
      if (rest.size() != 16 || rest.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
        return fail("fingerprint must be 16 lower-case hex digits");
      }
      fileId = std::string(rest);
    } else if (kind == "meta") {
      std::map<std::string, std::string> m;
      std::string err;
      if (!splitPairs(rest, &m, &err)) return fail(err);
      uint64_t gpus = 0, nccl = 0, ranks = 0, nodes = 0, nvl = 0;
      if (!m.count("gpu") || !getInt(m, "gpus", &gpus, true) || !getInt(m, "nccl", &nccl, true) ||
          !getInt(m, "ranks", &ranks, true) || !getInt(m, "nodes", &nodes, true) ||
          !getInt(m, "nvl_domains", &nvl, true) || gpus > 1u << 20 || nccl > 1u << 30 || ranks > 1u << 30 ||
          nodes > 1u << 30 || nvl > 1u << 30) {
        return fail("meta needs gpu, gpus, nccl, ranks, nodes, nvl_domains");
      }
      t.fp.gpu = m["gpu"];
      t.fp.gpus = static_cast<int>(gpus);
      t.fp.nccl = static_cast<int>(nccl);
      t.fp.ranks = static_cast<int>(ranks);
      t.fp.nodes = static_cast<int>(nodes);
      t.fp.nvlDomains = static_cast<int>(nvl);
      t.created = m.count("created") ? m["created"] : "";
      haveMeta = true;
    } else if (kind == "task") {
      std::map<std::string, std::string> m;
      std::string err;
      if (!splitPairs(rest, &m, &err)) return fail(err);
      TableEntry e;
      e.key.coll = parseColl(m["coll"]);
      e.config.algo = parseAlgo(m["algo"]);
      e.config.proto = parseProto(m["proto"]);
      if (e.key.coll < 0 || e.config.algo < 0 || e.config.proto < 0) return fail("task needs coll, algo, proto");
      uint64_t bytes = 0, pipe = 1, channels = 0, chunk = 0, halvings = 0, samples = 0;
      if (!getInt(m, "bytes", &bytes, true) || bytes == 0) return fail("task needs bytes > 0");
      if (!getInt(m, "pipe", &pipe, false) || pipe > 1u << 20) return fail("bad pipe");
      if (!getInt(m, "channels", &channels, false) || channels > static_cast<uint64_t>(kMaxChannelsHard)) {
        return fail("channels must be in [0, 64]");
      }
      if (!getInt(m, "chunk", &chunk, false) || (chunk && (chunk < kMinChunk || chunk > kMaxChunk))) {
        return fail("chunk must be 0 or in [4K, 16M]");
      }
      // halvings of NCCL's chunk size (written by the online search; absent = 0)
      if (!getInt(m, "chunk_halvings", &halvings, false) || halvings > static_cast<uint64_t>(kMaxChunkHalvings)) {
        return fail("chunk_halvings must be in [0, " + std::to_string(kMaxChunkHalvings) + "]");
      }
      if (chunk && halvings) return fail("chunk and chunk_halvings are exclusive");
      if (!getInt(m, "samples", &samples, false)) return fail("bad samples");
      if (!getDouble(m, "time_us", &e.timeUs) || !getDouble(m, "nccl_us", &e.ncclUs)) return fail("bad time");
      e.key.bytes = bytes;
      e.key.pipe = static_cast<int>(pipe);
      e.config.channels = static_cast<int>(channels);
      e.config.chunk = chunk;
      e.config.chunkHalvings = static_cast<int>(halvings);
      e.samples = samples;
      t.upsert(e);
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
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = "cannot open " + path;
    return LoadStatus::Missing;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (64u << 20)) {
    *why = "file larger than 64 MiB";
    return LoadStatus::Corrupt;
  }
  return parseTable(ss.str(), expectId, table, why);
}

std::string formatTable(const Table& t) {
  std::string out = "# autoccl table v1\nfingerprint " + t.fp.id() + "\nmeta " + t.fp.canonical() +
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

bool saveTable(const std::string& path, const Table& table, std::string* why) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && !mkdirs(path.substr(0, slash))) {
    *why = "cannot create directory for " + path + ": " + std::strerror(errno);
    return false;
  }
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
