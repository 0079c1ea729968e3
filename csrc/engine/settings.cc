#include "engine/settings.h"

#include "engine/common.h"

namespace autoccl::engine {

const char* modeName(Mode m) {
  switch (m) {
    case Mode::Off: return "off";
    case Mode::Observe: return "observe";
    case Mode::Fixed: return "fixed";
    case Mode::Table: return "table";
    case Mode::Online: return "online";
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
}  // namespace

Settings loadSettings(const EnvLookup& env) {
  Settings s;
  std::string mode = get(env, "AUTOCCL_MODE");
  if (mode.empty() || mode == "table") s.mode = Mode::Table;
  else if (mode == "off") s.mode = Mode::Off;
  else if (mode == "observe") s.mode = Mode::Observe;
  else if (mode == "fixed") s.mode = Mode::Fixed;
  else if (mode == "online") s.mode = Mode::Online;
  else return invalid(s, "AUTOCCL_MODE='" + mode + "' is not one of off, observe, fixed, table, online");

  std::string maxCh = get(env, "AUTOCCL_MAX_CHANNELS");
  if (!maxCh.empty()) {
    uint64_t v = 0;
    if (!parseUint(maxCh, &v) || v < 1 || v > static_cast<uint64_t>(kMaxChannelsHard)) {
      return invalid(s, "AUTOCCL_MAX_CHANNELS='" + maxCh + "' must be an integer in [1, 64]");
    }
    s.maxChannels = static_cast<int>(v);
  }

  std::string measure = get(env, "AUTOCCL_MEASURE_CALLS");
  if (!measure.empty()) {
    uint64_t v = 0;
    if (!parseUint(measure, &v) || v > 1000000) {
      return invalid(s, "AUTOCCL_MEASURE_CALLS='" + measure + "' must be an integer in [0, 1000000]");
    }
    s.measureCalls = v;
  }

  std::string recheck = get(env, "AUTOCCL_RECHECK_MS");
  if (!recheck.empty()) {
    uint64_t v = 0;
    if (!parseUint(recheck, &v) || v > 3600000) {
      return invalid(s, "AUTOCCL_RECHECK_MS='" + recheck + "' must be an integer in [0, 3600000]");
    }
    s.recheckMs = v;
  }

  std::string score = get(env, "AUTOCCL_INPROC_SCORE");
  if (score == "own") s.inprocSlowest = false;
  else if (!score.empty() && score != "slowest")
    return invalid(s, "AUTOCCL_INPROC_SCORE='" + score + "' is not one of slowest, own");

  std::string cost = get(env, "AUTOCCL_SCORE");
  if (cost == "window") s.score = Settings::Score::Window;
  else if (cost == "period") s.score = Settings::Score::Period;
  else if (!cost.empty() && cost != "auto")
    return invalid(s, "AUTOCCL_SCORE='" + cost + "' is not one of auto, window, period");

  s.fixedText = get(env, "AUTOCCL_FIXED");
  if (s.mode == Mode::Fixed) {
    if (s.fixedText.empty()) return invalid(s, "AUTOCCL_MODE=fixed needs AUTOCCL_FIXED (rules)");
    std::string err;
    if (!parseFixedRules(s.fixedText, s.maxChannels, &s.fixed, &err)) return invalid(s, err);
  }

  s.tablePath = get(env, "AUTOCCL_TABLE");
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
