#include "scenario.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "nccl_model.h"
#include "perf_model.h"

namespace emu {

namespace {
// base 0: C literals (hashes are written in hex)
bool parseU64(const std::string& s, uint64_t* out, int base = 0) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, base);
  if (errno != 0 || *end != '\0' || s[0] == '-') return false;
  *out = v;
  return true;
}
// A seed is a plain decimal integer: strtoull's base 0 read "010" as 8 and "0x10" as 16.
bool parseDecimalU64(const std::string& s, uint64_t* out) {
  return s.find_first_not_of("0123456789") == std::string::npos && parseU64(s, out, 10);
}
bool parseInt(const std::string& s, int lo, int hi, int* out) {
  uint64_t v = 0;
  bool neg = !s.empty() && s[0] == '-';
  if (!parseU64(neg ? s.substr(1) : s, &v) || v > 1000000000ULL) return false;
  long long x = neg ? -static_cast<long long>(v) : static_cast<long long>(v);
  if (x < lo || x > hi) return false;
  *out = static_cast<int>(x);
  return true;
}
bool parseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  // finite only: an infinite load made every time infinite, and "inf" in the truth is no JSON a reader takes
  if (*end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}
std::vector<std::string> splitOn(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}
}  // namespace

bool Scenario::parse(const std::string& text, std::string* error) {
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  bool header = false;
  std::map<std::string, int> commIndex;
  // (line, keyword, rank) of the order and host lines, checked against the comms once all are read
  std::vector<std::tuple<int, std::string, int>> rankLines;
  auto fail = [&](const std::string& msg) {
    *error = "scenario line " + std::to_string(lineNo) + ": " + msg;
    return false;
  };
  while (std::getline(in, line)) {
    ++lineNo;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    std::istringstream ls(line);
    std::string kw;
    if (!(ls >> kw)) continue;
    std::vector<std::string> args;
    std::string a;
    while (ls >> a) args.push_back(a);
    if (!header) {
      if (kw != "autoccl-emu-scenario" || args.size() != 1 || args[0] != "1")
        return fail("expected header 'autoccl-emu-scenario 1'");
      header = true;
      continue;
    }
    std::map<std::string, std::string> kv;
    std::string stray;  // the first argument that is no key=value, or a key given twice
    for (const std::string& arg : args) {
      size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0) {
        if (stray.empty()) stray = "'" + arg + "' is no key=value";
      } else if (!kv.emplace(arg.substr(0, eq), arg.substr(eq + 1)).second && stray.empty()) {
        stray = "key '" + arg.substr(0, eq) + "' given twice";
      }
    }
    // A key= line takes only its own keys: a misspelt one (repat=20) would otherwise be dropped silently
    auto badKeys = [&](std::initializer_list<const char*> known) -> std::string {
      if (!stray.empty()) return kw + ": " + stray;
      std::set<std::string> ok(known.begin(), known.end());
      for (const auto& [k, v] : kv) {
        if (ok.count(k)) continue;
        std::string list;
        for (const char* n : known) list += std::string(list.empty() ? "" : ", ") + n;
        return kw + ": unknown key '" + k + "' (known: " + list + ")";
      }
      return std::string();
    };
    auto scalar = [&]() -> std::string { return args.size() == 1 ? args[0] : std::string(); };
    if (kw == "seed") {
      if (!parseDecimalU64(scalar(), &seed)) {
        std::string given;
        for (const std::string& arg : args) given += (given.empty() ? "" : " ") + arg;
        return fail("bad seed '" + given + "': one decimal integer in [0, 18446744073709551615]");
      }
    } else if (kw == "runahead") {
      if (!parseInt(scalar(), 0, 100000, &runahead)) return fail("bad runahead");
    } else if (kw == "reorder") {
      if (!parseInt(scalar(), 1, 100000, &reorder)) return fail("bad reorder");
    } else if (kw == "noise") {
      if (!parseInt(scalar(), 0, 1, &noise)) return fail("bad noise");
    } else if (kw == "load") {
      if (!parseDouble(scalar(), &load) || load < 0) return fail("bad load (a finite number >= 0)");
    } else if (kw == "init_barrier") {
      if (!parseInt(scalar(), 0, 1, &initBarrier)) return fail("bad init_barrier");
    } else if (kw == "lead") {
      if (!parseInt(scalar(), 0, 1000000, &lead)) return fail("bad lead");
    } else if (kw == "gap_ns") {
      if (!parseU64(scalar(), &gapNs)) return fail("bad gap_ns");
    } else if (kw == "skew_ns") {
      if (!parseU64(scalar(), &skewNs) || skewNs > 1000000000ULL) return fail("bad skew_ns (0..1e9)");
    } else if (kw == "noise_sigma") {
      if (!parseDouble(scalar(), &noiseSigma) || noiseSigma <= 0 || noiseSigma > 1)
        return fail("bad noise_sigma (0 < s <= 1)");
    } else if (kw == "switch_factor") {
      if (!parseDouble(scalar(), &switchFactor) || switchFactor < 1 || switchFactor > 1000)
        return fail("bad switch_factor (1..1000)");
    } else if (kw == "hidden") {  // hidden algo=tree [proto=ll128] ns=30000 (no proto: every protocol)
      if (std::string bad = badKeys({"algo", "proto", "ns"}); !bad.empty()) return fail(bad);
      int hAlgo = parseAlgo(kv["algo"]);
      int hProto = kv.count("proto") ? parseProto(kv["proto"]) : -1;
      uint64_t ns = 0;
      if (hAlgo < 0 || hAlgo >= kHiddenAlgos) return fail("hidden needs algo=<ring|tree|...>");
      if (kv.count("proto") && (hProto < 0 || hProto >= kHiddenProtos)) return fail("bad hidden proto=");
      if (!parseU64(kv["ns"], &ns) || ns > 1000000000ULL) return fail("hidden needs ns=<0..1e9>");
      for (int p = 0; p < kHiddenProtos; ++p)
        if (hProto < 0 || p == hProto) hiddenPairNs[hAlgo][p] = ns;
    } else if (kw == "comm") {
      if (std::string bad = badKeys({"name", "hash", "ranks", "nnodes", "channels"}); !bad.empty()) return fail(bad);
      CommSpec c;
      c.name = kv["name"];
      if (c.name.empty() || commIndex.count(c.name)) return fail("comm needs a unique name=");
      if (!parseU64(kv["hash"], &c.hash)) return fail("comm needs hash=<int>");
      for (const std::string& r : splitOn(kv["ranks"], ',')) {
        int g = 0;
        if (!parseInt(r, 0, 4095, &g)) return fail("bad ranks=");
        if (std::find(c.ranks.begin(), c.ranks.end(), g) != c.ranks.end()) return fail("duplicate rank");
        c.ranks.push_back(g);
      }
      if (c.ranks.empty()) return fail("comm needs ranks=");
      // NCCL gives every communicator its own hash; plugins keep their state per hash
      for (const CommSpec& o : comms)
        if (o.hash == c.hash) {
          char hex[32];
          std::snprintf(hex, sizeof hex, "%#llx", static_cast<unsigned long long>(c.hash));
          return fail("comm " + c.name + ": hash=" + hex + " is already comm " + o.name + "'s (one hash per comm)");
        }
      if (kv.count("nnodes") && !parseInt(kv["nnodes"], 1, 4096, &c.nNodes)) return fail("bad nnodes");
      if (kv.count("channels") && !parseInt(kv["channels"], 1, kMaxChannels, &c.channels)) return fail("bad channels");
      commIndex[c.name] = static_cast<int>(comms.size());
      comms.push_back(c);
    } else if (kw == "group") {
      if (std::string bad = badKeys({"comm", "colls", "repeat", "graph", "load", "compute", "wait", "step", "dtype"});
          !bad.empty())
        return fail(bad);
      GroupSpec g;
      auto it = commIndex.find(kv["comm"]);
      if (it == commIndex.end()) return fail("group names an unknown comm");
      g.comm = it->second;
      for (const std::string& c : splitOn(kv["colls"], ',')) {
        size_t colon = c.find(':');
        if (colon == std::string::npos) return fail("call must be coll:bytes");
        CallSpec cs;
        cs.func = parseColl(c.substr(0, colon));
        uint64_t b = 0;
        if (cs.func < 0)
          return fail("bad call " + c + ": unknown collective (allreduce, allgather, reducescatter, broadcast, reduce)");
        if (!parseU64(c.substr(colon + 1), &b) || b == 0 || b > (1ULL << 40))
          return fail("bad call " + c + ": bytes must be an integer in [1, 2^40]");
        cs.bytes = static_cast<size_t>(b);
        g.calls.push_back(cs);
      }
      if (g.calls.empty() || g.calls.size() > 4096) return fail("group needs 1..4096 colls=");
      if (kv.count("repeat") && !parseInt(kv["repeat"], 1, 10000000, &g.repeat)) return fail("bad repeat");
      if (kv.count("graph") && !parseInt(kv["graph"], 0, 1, &g.graph)) return fail("bad graph");
      if (kv.count("load") && (!parseDouble(kv["load"], &g.load) || g.load < 0))
        return fail("bad load (a finite number >= 0)");
      if (kv.count("compute") && (!parseDouble(kv["compute"], &g.computeUs) || g.computeUs < 0 || g.computeUs > 1e9))
        return fail("bad compute (microseconds, >= 0)");
      if (kv.count("wait")) {
        const std::string& w = kv["wait"];
        if (w == "none") g.wait = GroupSpec::kWaitNone;
        else if (w == "prev") g.wait = GroupSpec::kWaitPrev;
        else if (w == "self") g.wait = GroupSpec::kWaitSelf;
        else return fail("wait must be none|prev|self");
      }
      if (kv.count("step") && !parseInt(kv["step"], 0, 1, &g.stepEnd)) return fail("bad step (0 or 1)");
      if (g.graph && g.hasCompute()) return fail("a graph group cannot carry compute=, wait= or step=");
      if (kv.count("dtype")) {
        const std::string& d = kv["dtype"];
        if (d == "f32") { g.elemSize = 4; g.dtype = "ncclFloat32"; }
        else if (d == "bf16") { g.elemSize = 2; g.dtype = "ncclBfloat16"; }
        else if (d == "f16") { g.elemSize = 2; g.dtype = "ncclFloat16"; }
        else if (d == "i8") { g.elemSize = 1; g.dtype = "ncclInt8"; }
        else return fail("bad dtype");
      }
      // NCCL counts elements (per rank for all-gather / reduce-scatter): a byte count that is not a whole number
      // of them is no call an application can make, and the profiler's count would not match the tuner's bytes
      const size_t nRanks = comms[static_cast<size_t>(g.comm)].ranks.size();
      for (const CallSpec& cs : g.calls) {
        const bool perRank = cs.func == ncclabi::kAllGather || cs.func == ncclabi::kReduceScatter;
        const size_t unit = static_cast<size_t>(g.elemSize) * (perRank ? nRanks : 1);
        if (cs.bytes % unit != 0)
          return fail(std::string(collName(cs.func)) + " of " + std::to_string(cs.bytes) + " bytes: not a multiple of " +
                      (perRank ? std::to_string(nRanks) + " ranks x " : std::string()) + std::to_string(g.elemSize) +
                      "-byte elements");
      }
      groups.push_back(g);
    } else if (kw == "order") {
      if (std::string bad = badKeys({"rank", "policy"}); !bad.empty()) return fail(bad);
      OrderSpec o;
      if (!parseInt(kv["rank"], 0, 4095, &o.rank)) return fail("bad order rank=");
      o.policy = kv["policy"];
      if (o.policy != "roundrobin" && o.policy != "reverse" && o.policy != "random" && o.policy != "sequential")
        return fail("policy must be roundrobin|reverse|random|sequential");
      orders.push_back(o);
      rankLines.emplace_back(lineNo, kw, o.rank);
    } else if (kw == "host") {
      if (std::string bad = badKeys({"rank", "delay_us", "jitter_us", "proxy_delay_us", "kill_after", "hidden_pct"}); !bad.empty())
        return fail(bad);
      HostSpec h;
      if (!parseInt(kv["rank"], 0, 4095, &h.rank)) return fail("bad host rank=");
      for (const auto& [k, v] : kv) {
        if (k == "rank") continue;
        int* dst = k == "delay_us" ? &h.delayUs
                   : k == "jitter_us" ? &h.jitterUs
                   : k == "proxy_delay_us" ? &h.proxyDelayUs
                   : k == "kill_after" ? &h.killAfter
                   : k == "hidden_pct" ? &h.hiddenPct
                                       : nullptr;
        if (!dst) return fail("host: unknown key '" + k + "'");
        if (!parseInt(v, 0, 10000000, dst)) return fail("host: bad " + k);
      }
      for (const HostSpec& o : hosts)
        if (o.rank == h.rank) return fail("duplicate host rank=");
      hosts.push_back(h);
      rankLines.emplace_back(lineNo, kw, h.rank);
    } else {
      return fail("unknown keyword '" + kw + "'");
    }
  }
  if (!header) {
    *error = "empty scenario";
    return false;
  }
  if (comms.empty()) {
    *error = "scenario has no comm";
    return false;
  }
  // A rank of no comm plays nothing: its order or host line was ignored silently
  std::set<int> world;
  for (const CommSpec& c : comms) world.insert(c.ranks.begin(), c.ranks.end());
  for (const auto& [at, what, rank] : rankLines) {
    if (world.count(rank)) continue;
    std::string list;
    for (int r : world) list += (list.empty() ? "" : ",") + std::to_string(r);
    lineNo = at;
    return fail(what + " rank=" + std::to_string(rank) + " is in no comm (the comms' ranks: " + list + ")");
  }
  programs.assign(comms.size(), {});
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const GroupSpec& g = groups[gi];
    std::vector<Instance>& prog = programs[static_cast<size_t>(g.comm)];
    if (g.graph) {
      prog.push_back({static_cast<int>(gi), static_cast<int>(prog.size()), 0, false});
      for (int r = 0; r < g.repeat; ++r) prog.push_back({static_cast<int>(gi), static_cast<int>(prog.size()), r, true});
    } else {
      for (int r = 0; r < g.repeat; ++r) prog.push_back({static_cast<int>(gi), static_cast<int>(prog.size()), r, false});
    }
  }
  return true;
}

const HostSpec* Scenario::host(int grank) const {
  for (const HostSpec& h : hosts)
    if (h.rank == grank) return &h;
  return nullptr;
}

std::vector<std::pair<int, int>> Scenario::rankSchedule(int grank) const {
  std::string policy = "roundrobin";
  for (const OrderSpec& o : orders)
    if (o.rank == grank) policy = o.policy;
  std::vector<int> mine;
  for (size_t c = 0; c < comms.size(); ++c)
    if (std::find(comms[c].ranks.begin(), comms[c].ranks.end(), grank) != comms[c].ranks.end())
      mine.push_back(static_cast<int>(c));
  if (policy == "reverse") std::reverse(mine.begin(), mine.end());
  std::vector<std::pair<int, int>> out;
  std::vector<size_t> next(comms.size(), 0);
  auto remaining = [&](int c) { return next[static_cast<size_t>(c)] < programs[static_cast<size_t>(c)].size(); };
  if (policy == "sequential") {
    for (int c : mine)
      for (size_t i = 0; i < programs[static_cast<size_t>(c)].size(); ++i) out.emplace_back(c, static_cast<int>(i));
    return out;
  }
  uint64_t rng = mix64(seed ^ (0x5151ULL + static_cast<uint64_t>(grank)));
  for (;;) {
    std::vector<int> live;
    for (int c : mine)
      if (remaining(c)) live.push_back(c);
    if (live.empty()) break;
    if (policy == "random") {
      rng = mix64(rng);
      int c = live[rng % live.size()];
      out.emplace_back(c, static_cast<int>(next[static_cast<size_t>(c)]++));
    } else {
      for (int c : live) out.emplace_back(c, static_cast<int>(next[static_cast<size_t>(c)]++));
    }
  }
  return out;
}

}  // namespace emu
