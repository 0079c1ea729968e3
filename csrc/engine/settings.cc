#include "engine/settings.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include "autoccl/coord/coord.h"
#include "autoccl/coord/launcher.h"
#include "engine/common.h"

namespace autoccl::engine {

const char* modeName(Mode m) {
  switch (m) {
    case Mode::Off: return "off";
    case Mode::Observe: return "observe";
    case Mode::Fixed: return "fixed";
    case Mode::Table: return "table";
    case Mode::Online: return "online";
    case Mode::Manual: return "manual";
  }
  return "off";
}

namespace {
// Unset and empty are the same: "use the default".
std::string get(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v ? std::string(trim(v)) : std::string();
}

Settings invalid(Settings s, std::string why) {
  s.valid = false;
  s.error = std::move(why);
  return s;
}

// An integer variable in [lo, hi]: false with *err when set to anything else; *out untouched when unset.
bool readBounded(const EnvLookup& env, const char* name, uint64_t lo, uint64_t hi, uint64_t* out, std::string* err) {
  std::string text = get(env, name);
  if (text.empty()) return true;
  uint64_t v = 0;
  if (!parseUint(text, &v) || v < lo || v > hi) {
    *err = std::string(name) + "='" + text + "' must be an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]";
    return false;
  }
  *out = v;
  return true;
}

std::string dirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool isDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Free text of ours (tokens, names): at most `max` characters, none of them a control character.
bool readText(const EnvLookup& env, const char* name, size_t max, std::string* err) {
  std::string text = get(env, name);
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      *err = std::string(name) + " contains a control character";
      return false;
    }
  }
  if (text.size() > max) {
    *err = std::string(name) + " is longer than " + std::to_string(max) + " characters";
    return false;
  }
  return true;
}

// The variables of the coordinator and the paths the library writes: a malformed value is refused like
// any other setting (one WARN, no tuner), never replaced by a default or half-used later.
bool checkCoordinatorAndPaths(const EnvLookup& env, Settings* s, std::string* err) {
  uint64_t timeoutMs = static_cast<uint64_t>(s->coordTimeoutMs), lingerMs = static_cast<uint64_t>(s->coordLingerMs);
  if (!readBounded(env, "AUTOCCL_COORD_TIMEOUT_MS", 100, 3600000, &timeoutMs, err) ||
      !readBounded(env, "AUTOCCL_COORD_LINGER_MS", 0, 600000, &lingerMs, err))
    return false;
  s->coordTimeoutMs = static_cast<int>(timeoutMs);
  s->coordLingerMs = static_cast<int>(lingerMs);
  for (const char* addr : {"AUTOCCL_COORD_ADDR", "AUTOCCL_RUN_ADDR"}) {
    std::string text = get(env, addr), host;
    int port = 0;
    if (!text.empty() && !coord::parseHostPort(text, addr, &host, &port, err)) return false;
  }
  for (const char* secret : {"AUTOCCL_COORD_TOKEN", "AUTOCCL_COORD_SECRET", "AUTOCCL_RUN_TOKEN"})
    if (!readText(env, secret, 4096, err)) return false;
  if (!readText(env, "AUTOCCL_HW", 200, err)) return false;
  std::string faults = get(env, "AUTOCCL_COORD_FAULTS");
  if (!faults.empty() && !coord::parseFaults(faults, coord::Faults{}, &s->coordFaults, err)) return false;
  // Paths: the library creates no directory the user named (only the cache's own tables/ folder).
  std::string table = get(env, "AUTOCCL_TABLE");
  if (!table.empty()) {
    if (isDir(table)) {
      *err = "AUTOCCL_TABLE='" + table + "' is a directory, not a table file";
      return false;
    }
    if (!isDir(dirOf(table))) {
      *err = "AUTOCCL_TABLE='" + table + "': directory " + dirOf(table) + " does not exist";
      return false;
    }
  }
  std::string trace = get(env, "AUTOCCL_TRACE");
  if (!trace.empty() && (trace.back() == '/' || !isDir(dirOf(trace)))) {
    *err = "AUTOCCL_TRACE='" + trace + "' must be a file prefix in an existing directory (" + dirOf(trace) +
           (trace.back() == '/' ? " ends with '/'" : " does not exist") + ")";
    return false;
  }
  std::string metrics = get(env, "AUTOCCL_METRICS_DIR");
  if (!metrics.empty() && !isDir(metrics)) {
    *err = "AUTOCCL_METRICS_DIR='" + metrics + "' is not an existing directory";
    return false;
  }
  std::string cache = get(env, "AUTOCCL_CACHE_DIR");
  if (!cache.empty()) {
    while (cache.size() > 1 && cache.back() == '/') cache.pop_back();
    struct stat st {};
    if (::stat(cache.c_str(), &st) == 0 ? !S_ISDIR(st.st_mode) : !isDir(dirOf(cache))) {
      *err = "AUTOCCL_CACHE_DIR='" + cache + "' must be a directory or a new one in an existing directory";
      return false;
    }
  }
  return true;
}
}  // namespace

AgreedSettings agreedSettings(const Settings& s, const EnvLookup& env) {
  static const char* const kNccl[] = {"NCCL_ALGO",     "NCCL_PROTO",         "NCCL_MIN_CTAS",
                                      "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"};
  // AUTOCCL_STEP_ARMS too: with arms every rank keeps asking for settled tasks' calls (so that a cap reaches
  // them); a rank caching them would skip the caps the others apply.
  std::string arms;
  for (const ArmLimit& a : s.stepArmsHidden) arms += (arms.empty() ? "" : ",") + armLimitText(a);
  if (!s.stepArmsEstimated.empty()) arms += ";estimated=";
  for (size_t i = 0; i < s.stepArmsEstimated.size(); ++i) arms += (i ? "," : "") + armLimitText(s.stepArmsEstimated[i]);
  // AUTOCCL_MODE and AUTOCCL_GUARD too: online and guarded table mode both decide through the coordinator, and a
  // rank of one must not take the other's plans (a table rank's segments are pins, an online one's a search's).
  std::string text = "AUTOCCL_MODE=" + std::string(modeName(s.mode)) + "\nAUTOCCL_GUARD=" + (s.guard ? "on" : "off") +
                     "\nAUTOCCL_MAX_CHANNELS=" + std::to_string(s.maxChannels) +
                     "\nAUTOCCL_NCCL_CHANNELS=" + std::to_string(s.ncclChannels) + "\nAUTOCCL_STEP_ARMS=" + arms;
  AgreedSettings out;
  out.names = "AUTOCCL_MODE, AUTOCCL_GUARD, AUTOCCL_MAX_CHANNELS, AUTOCCL_NCCL_CHANNELS, AUTOCCL_STEP_ARMS";
  for (const char* name : kNccl) {
    const char* v = env(name);
    text += std::string("\n") + name + "=" + (v ? v : "");
    out.names += std::string(", ") + name;
  }
  const uint64_t h = fnv1a64(text);  // stable across builds and hosts
  out.digest = h ? h : 1;
  return out;
}

// A channel count written as 1-2 digits, in [1, kMaxChannelsHard] (AUTOCCL_MANUAL_CHANNELS, AUTOCCL_STEP_ARMS).
static bool parseChannelCount(const std::string& t, int* out) {
  if (t.empty() || t.size() > 2 || t.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoi(t);
  return *out >= 1 && *out <= kMaxChannelsHard;
}

// AUTOCCL_MANUAL_CHANNELS=HIDDEN,EXPOSED: two counts in [1, 64], the second may be `max`. Empty: the defaults.
static bool parseManualChannels(const std::string& text, Settings* s, std::string* err) {
  if (text.empty()) return true;
  const size_t comma = text.find(',');
  const std::string hidden = text.substr(0, comma), exposed = comma == std::string::npos ? "" : text.substr(comma + 1);
  int h = 0, e = 0;
  if (comma == std::string::npos || !parseChannelCount(hidden, &h) ||
      (exposed != "max" && !parseChannelCount(exposed, &e))) {
    *err = "AUTOCCL_MANUAL_CHANNELS='" + text + "' is not HIDDEN,EXPOSED (channel counts in [1, " +
           std::to_string(kMaxChannelsHard) + "], EXPOSED may be max)";
    return false;
  }
  s->manualHidden = h;
  s->manualExposed = e;
  return true;
}

// One entry of AUTOCCL_STEP_ARMS: a channel count C, a protocol P (ll, ll128, simple) or both as C/P, for the
// calls the arm limits, then optionally +E (a channel count or max) for the calls it leaves exposed; or +E alone.
static bool parseArmLimit(const std::string& entry, ArmLimit* out) {
  const size_t plus = entry.find('+');
  ArmLimit a;
  if (plus != std::string::npos) {
    const std::string e = entry.substr(plus + 1);
    if (e == "max") {
      a.exposed = kMaxChannelsHard;
    } else if (!parseChannelCount(e, &a.exposed)) {
      return false;
    }
    if (plus == 0) {  // the exposed calls' channels alone
      *out = a;
      return true;
    }
  }
  const std::string t = entry.substr(0, plus);
  const size_t slash = t.find('/');
  const std::string count = t.substr(0, slash), proto = slash == std::string::npos ? "" : t.substr(slash + 1);
  if (slash == std::string::npos && !t.empty() && t.find_first_not_of("0123456789") != std::string::npos) {
    a.proto = parseProto(t);  // a protocol alone
    if (a.proto < 0 || t != protoName(a.proto)) return false;
    *out = a;
    return true;
  }
  if (!parseChannelCount(count, &a.channels)) return false;
  if (slash != std::string::npos) {
    a.proto = parseProto(proto);
    if (a.proto < 0 || proto != protoName(a.proto)) return false;
  }
  *out = a;
  return true;
}

// AUTOCCL_STEP_ARMS: `off`, or one or both of `hidden=A1[,A2...]` and `estimated=A1[,A2...]` separated by `;`,
// each 1-4 distinct arms separated by commas: a channel count in [1, 64], a protocol or both, each optionally with
// the exposed calls' channels +E, or +E alone in hidden= (parseArmLimit).
static bool parseStepArms(const std::string& text, Settings* s, std::string* err) {
  if (text.empty() || text == "off") return true;
  const std::string bad = "AUTOCCL_STEP_ARMS='" + text +
                          "' is not off or hidden=A1[,A2...], estimated=A1[,A2...] or both joined by ';' (1 to 4 "
                          "distinct arms each, an arm a channel count C in [1, " + std::to_string(kMaxChannelsHard) +
                          "], a protocol P of ll, ll128, simple, or C/P, each optionally followed by +E, or +E "
                          "alone in hidden=: at least E channels, a count or max, for the calls left exposed)";
  std::vector<ArmLimit> hidden, estimated;
  bool seenHidden = false, seenEstimated = false;
  size_t part = 0;
  while (part <= text.size()) {
    const size_t semi = text.find(';', part);
    const std::string item = text.substr(part, semi == std::string::npos ? std::string::npos : semi - part);
    const size_t eq = item.find('=');
    const std::string kind = item.substr(0, eq);
    bool* seen = kind == "hidden" ? &seenHidden : kind == "estimated" ? &seenEstimated : nullptr;
    if (eq == std::string::npos || !seen || *seen) {
      *err = bad;
      return false;
    }
    *seen = true;
    std::vector<ArmLimit>& arms = kind == "hidden" ? hidden : estimated;
    size_t from = eq + 1;
    while (true) {
      const size_t comma = item.find(',', from);
      const std::string t = item.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
      ArmLimit a;
      // An estimated arm limits the calls the estimate calls hidden: it needs a cap or a protocol for them.
      if (!parseArmLimit(t, &a) || (kind == "estimated" && a.channels == 0 && a.proto < 0) || arms.size() >= 4 ||
          std::find(arms.begin(), arms.end(), a) != arms.end()) {
        *err = bad;
        return false;
      }
      arms.push_back(a);
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
    if (semi == std::string::npos) break;
    part = semi + 1;
  }
  s->stepArmsHidden = hidden;
  s->stepArmsEstimated = estimated;
  return true;
}

Settings loadSettings(const EnvLookup& env) {
  Settings s;
  // Read first: a chained profiler runs whatever the other settings say (even when they disable autoccl).
  s.profilerChain = get(env, "AUTOCCL_PROFILER_CHAIN");
  std::string mode = get(env, "AUTOCCL_MODE");
  if (mode.empty() || mode == "table") s.mode = Mode::Table;
  else if (mode == "off") s.mode = Mode::Off;
  else if (mode == "observe") s.mode = Mode::Observe;
  else if (mode == "fixed") s.mode = Mode::Fixed;
  else if (mode == "online") s.mode = Mode::Online;
  else if (mode == "manual") s.mode = Mode::Manual;
  else return invalid(s, "AUTOCCL_MODE='" + mode + "' is not one of off, observe, fixed, table, online, manual");

  std::string err;
  uint64_t maxCh = static_cast<uint64_t>(s.maxChannels);
  uint64_t ncclCh = 0;
  if (!readBounded(env, "AUTOCCL_MAX_CHANNELS", 1, static_cast<uint64_t>(kMaxChannelsHard), &maxCh, &err) ||
      !readBounded(env, "AUTOCCL_NCCL_CHANNELS", 1, static_cast<uint64_t>(kMaxChannelsHard), &ncclCh, &err) ||
      !readBounded(env, "AUTOCCL_MEASURE_CALLS", 0, 1000000, &s.measureCalls, &err) ||
      !readBounded(env, "AUTOCCL_RECHECK_MS", 0, 3600000, &s.recheckMs, &err))
    return invalid(s, err);
  s.maxChannels = static_cast<int>(maxCh);
  s.ncclChannels = static_cast<int>(ncclCh);
  if (!parseManualChannels(get(env, "AUTOCCL_MANUAL_CHANNELS"), &s, &err)) return invalid(s, err);

  std::string score = get(env, "AUTOCCL_INPROC_SCORE");
  if (score == "own") s.inprocSlowest = false;
  else if (!score.empty() && score != "slowest")
    return invalid(s, "AUTOCCL_INPROC_SCORE='" + score + "' is not one of slowest, own");

  std::string xscore = get(env, "AUTOCCL_XPROC_SCORE");
  if (xscore == "own") s.xprocShortest = false;
  else if (!xscore.empty() && xscore != "shortest")
    return invalid(s, "AUTOCCL_XPROC_SCORE='" + xscore + "' is not one of shortest, own");

  std::string cost = get(env, "AUTOCCL_SCORE");
  if (cost == "window") s.score = Settings::Score::Window;
  else if (cost == "period") s.score = Settings::Score::Period;
  else if (!cost.empty() && cost != "auto")
    return invalid(s, "AUTOCCL_SCORE='" + cost + "' is not one of auto, window, period");

  std::string chunk = get(env, "AUTOCCL_CHUNK");
  if (chunk == "off") s.tuneChunk = false;
  else if (!chunk.empty() && chunk != "auto")
    return invalid(s, "AUTOCCL_CHUNK='" + chunk + "' is not one of auto, off");

  uint64_t minTask = static_cast<uint64_t>(s.minTaskUs);
  if (!readBounded(env, "AUTOCCL_MIN_TASK_US", 0, 1000000, &minTask, &err)) return invalid(s, err);
  s.minTaskUs = static_cast<double>(minTask);
  uint64_t minTaskTcp = static_cast<uint64_t>(s.minTaskUsTcp);
  if (!readBounded(env, "AUTOCCL_MIN_TASK_US_TCP", 0, 1000000, &minTaskTcp, &err)) return invalid(s, err);
  s.minTaskUsTcp = static_cast<double>(minTaskTcp);
  uint64_t modelSmallPct = static_cast<uint64_t>(s.modelSmallShare * 100.0 + 0.5);
  if (!readBounded(env, "AUTOCCL_MODEL_SMALL_PCT", 0, 100, &modelSmallPct, &err)) return invalid(s, err);
  s.modelSmallShare = static_cast<double>(modelSmallPct) / 100.0;
  uint64_t regretPct = static_cast<uint64_t>(s.regretBudget * 100.0 + 0.5);
  if (!readBounded(env, "AUTOCCL_REGRET_PCT", 0, 100, &regretPct, &err)) return invalid(s, err);
  s.regretBudget = static_cast<double>(regretPct) / 100.0;
  uint64_t earnPct = static_cast<uint64_t>(s.regretEarn * 100.0 + 0.5);
  if (!readBounded(env, "AUTOCCL_REGRET_EARN_PCT", 0, 100, &earnPct, &err)) return invalid(s, err);
  s.regretEarn = static_cast<double>(earnPct) / 100.0;
  uint64_t jobRegretPct = static_cast<uint64_t>(s.jobRegretBudget * 100.0 + 0.5);
  if (!readBounded(env, "AUTOCCL_JOB_REGRET_PCT", 0, 100, &jobRegretPct, &err)) return invalid(s, err);
  s.jobRegretBudget = static_cast<double>(jobRegretPct) / 100.0;
  uint64_t probeKeepPct = static_cast<uint64_t>(s.probeKeep * 100.0 + 0.5);
  if (!readBounded(env, "AUTOCCL_PROBE_KEEP_PCT", 0, 1000, &probeKeepPct, &err)) return invalid(s, err);
  s.probeKeep = static_cast<double>(probeKeepPct) / 100.0;
  uint64_t skipBehindPct = static_cast<uint64_t>(s.skipBehind * 100.0 + 0.5);
  if (!readBounded(env, "AUTOCCL_SKIP_BEHIND_PCT", 0, 10000, &skipBehindPct, &err)) return invalid(s, err);
  s.skipBehind = static_cast<double>(skipBehindPct) / 100.0;
  if (!readBounded(env, "AUTOCCL_VERIFY_WAIT", 1, 1024, &s.verifyWait, &err)) return invalid(s, err);
  if (get(env, "AUTOCCL_ASK_AHEAD") == "auto") {
    s.askAheadAuto = true;
  } else if (!readBounded(env, "AUTOCCL_ASK_AHEAD", 0, 1024, &s.askAhead, &err)) {
    return invalid(s, err + " or auto");
  }
  if (!readBounded(env, "AUTOCCL_EXPOSURE_EVERY", 0, 1000000, &s.exposureEvery, &err)) return invalid(s, err);
  if (s.exposureEvery > 0 && s.exposureEvery < 4)
    return invalid(s, "AUTOCCL_EXPOSURE_EVERY=" + std::to_string(s.exposureEvery) +
                          " is below 4, the block of iterations it times (0 turns it off)");
  if (!readBounded(env, "AUTOCCL_PROBE_CALLS", 1, 3, &s.probeCalls, &err)) return invalid(s, err);
  if (!readBounded(env, "AUTOCCL_STEP_CALLS", 1, 3, &s.stepCalls, &err)) return invalid(s, err);
  uint64_t unproven = static_cast<uint64_t>(s.unprovenCalls);
  if (!readBounded(env, "AUTOCCL_UNPROVEN_CALLS", 0, 64, &unproven, &err)) return invalid(s, err);
  s.unprovenCalls = static_cast<int>(unproven);

  const std::string speculate = get(env, "AUTOCCL_SPECULATE");
  if (speculate == "off") s.speculate = false;
  else if (!speculate.empty() && speculate != "on")
    return invalid(s, "AUTOCCL_SPECULATE='" + speculate + "' is not one of on, off");

  const std::string recorded = get(env, "AUTOCCL_RECORDED_START");
  if (recorded == "off") s.recordedStart = false;
  else if (!recorded.empty() && recorded != "on")
    return invalid(s, "AUTOCCL_RECORDED_START='" + recorded + "' is not one of on, off");

  const std::string once = get(env, "AUTOCCL_ALLOWANCE_ONCE");
  if (once == "off") s.allowanceOnce = false;
  else if (!once.empty() && once != "on")
    return invalid(s, "AUTOCCL_ALLOWANCE_ONCE='" + once + "' is not one of on, off");

  const std::string armSearch = get(env, "AUTOCCL_ARM_SEARCH");
  if (armSearch == "off") s.armSearch = false;
  else if (!armSearch.empty() && armSearch != "on")
    return invalid(s, "AUTOCCL_ARM_SEARCH='" + armSearch + "' is not one of on, off");

  const std::string waits = get(env, "AUTOCCL_WAIT_REGRET");
  if (waits == "on") s.waitRegret = true;
  else if (!waits.empty() && waits != "off")
    return invalid(s, "AUTOCCL_WAIT_REGRET='" + waits + "' is not one of on, off");

  std::string guard = get(env, "AUTOCCL_GUARD");
  if (guard == "off") s.guard = false;
  else if (!guard.empty() && guard != "on") return invalid(s, "AUTOCCL_GUARD='" + guard + "' is not one of on, off");
  if (!parseStepArms(get(env, "AUTOCCL_STEP_ARMS"), &s, &err)) return invalid(s, err);
  // The estimated arms cap what the exposure estimate calls hidden: without its timed blocks it has one or two
  // samples a job (never a verdict), so they turn it on unless it is set; set to 0, they could never run.
  if (!s.stepArmsEstimated.empty()) {
    if (get(env, "AUTOCCL_EXPOSURE_EVERY").empty()) s.exposureEvery = Settings::kExposureEveryForArms;
    else if (s.exposureEvery == 0)
      return invalid(s, "AUTOCCL_STEP_ARMS=estimated=... needs the exposure estimate's samples: AUTOCCL_EXPOSURE_EVERY "
                        "unset (then " + std::to_string(Settings::kExposureEveryForArms) + ") or at least 4, not 0");
  }

  std::string clock = get(env, "AUTOCCL_CLOCK");
  if (clock == "kernel") s.clock = Settings::Clock::Kernel;
  else if (!clock.empty() && clock != "launch")
    return invalid(s, "AUTOCCL_CLOCK='" + clock + "' is not one of launch, kernel");

  s.fixedText = get(env, "AUTOCCL_FIXED");
  if (s.mode == Mode::Fixed && s.fixedText.empty()) return invalid(s, "AUTOCCL_MODE=fixed needs AUTOCCL_FIXED (rules)");
  if (!s.fixedText.empty() && !parseFixedRules(s.fixedText, s.maxChannels, &s.fixed, &err)) return invalid(s, err);
  if (!checkCoordinatorAndPaths(env, &s, &err)) return invalid(s, err);
  s.searchDebug = !get(env, "AUTOCCL_SEARCH_DEBUG").empty();  // blank is unset, as for every variable

  s.tablePath = get(env, "AUTOCCL_TABLE");
  s.metricsDir = get(env, "AUTOCCL_METRICS_DIR");
  const std::string interval = get(env, "AUTOCCL_METRICS_INTERVAL_S");
  if (!interval.empty()) {
    // Plain decimal only ("2", "0.5"), as the CLI checks it.
    const size_t dot = interval.find('.');
    const bool plain = interval.find_first_not_of("0123456789.") == std::string::npos && interval[0] != '.' &&
                       interval.back() != '.' && (dot == std::string::npos || interval.find('.', dot + 1) == std::string::npos) &&
                       interval.size() <= 20;
    char* end = nullptr;
    const double v = plain ? std::strtod(interval.c_str(), &end) : 0.0;
    if (!plain || !(v >= 0.1 && v <= 86400))
      return invalid(s, "AUTOCCL_METRICS_INTERVAL_S='" + interval + "' is not a number of seconds in [0.1, 86400]");
    s.metricsIntervalS = v;
  }
  s.tracePrefix = get(env, "AUTOCCL_TRACE");
  s.hw = get(env, "AUTOCCL_HW");
  s.cacheDir = get(env, "AUTOCCL_CACHE_DIR");
  if (s.cacheDir.empty()) {
    std::string xdg = get(env, "XDG_CACHE_HOME");
    std::string home = get(env, "HOME");
    if (!xdg.empty()) s.cacheDir = xdg + "/autoccl";
    else if (!home.empty()) s.cacheDir = home + "/.cache/autoccl";
  }
  return s;
}

}  // namespace autoccl::engine
