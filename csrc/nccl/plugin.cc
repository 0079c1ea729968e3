// The shim's shared state: see plugin.h. The tuner's entries are in tuner.cc, the profiler's in profiler.cc.
#include "nccl/plugin.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "autoccl/common/config.h"

namespace autoccl::shim {

// The engine's ids are NCCL's: the shim converts by cast.
static_assert(ncclabi::kNumCollFuncs == autoccl::kNumColls, "collectives");
static_assert(ncclabi::kNumAlgorithms == autoccl::kNumAlgos, "algorithms");
static_assert(ncclabi::kNumProtocols == autoccl::kNumProtos, "protocols");

namespace {
constexpr int kMinNcclVersion = 22803;  // first release with tuner v5 / profiler v5

void flushTraceAtExit() {
  // The process serving the online coordinator keeps it up while other processes still use it.
  if (auto* c = runtime().coordination()) c->lingerAtExit();
  runtime().trace().flush();
  runtime().metrics().flush();
}

struct PendingPair {
  uint64_t commId;
  std::shared_ptr<engine::Context> ctx;
};
// A small list, not one slot: nothing forbids another communicator's profiler init in between.
thread_local std::vector<PendingPair> tlsPending;
}  // namespace

engine::LogFn makeLog(ncclabi::Logger logger) {
  return [logger](engine::LogLevel level, const std::string& msg) {
    if (!logger) {
      if (level == engine::LogLevel::Warn) std::fprintf(stderr, "autoccl WARN %s\n", msg.c_str());
      return;
    }
    if (level == engine::LogLevel::Warn) {
      logger(ncclabi::kLogWarn, ncclabi::kLogSubsysTuning | ncclabi::kLogSubsysEnv, __FILE__, __LINE__, "%s",
             msg.c_str());
    } else if (level == engine::LogLevel::Summary) {  // INIT is in NCCL's default NCCL_DEBUG_SUBSYS
      logger(ncclabi::kLogInfo, ncclabi::kLogSubsysInit | ncclabi::kLogSubsysTuning, __FILE__, __LINE__, "%s",
             msg.c_str());
    } else {
      logger(ncclabi::kLogInfo, ncclabi::kLogSubsysTuning, __FILE__, __LINE__, "%s", msg.c_str());
    }
  };
}

engine::Runtime& runtime() {
  static engine::Runtime* rt = [] {
    int version = 0;
    using GetVersionFn = int (*)(int*);
    if (auto fn = reinterpret_cast<GetVersionFn>(dlsym(RTLD_DEFAULT, "ncclGetVersion"))) {
      int v = 0;
      if (fn(&v) == 0) version = v;
    }
    auto* r = new engine::Runtime(engine::loadSettings([](const char* n) { return std::getenv(n); }), version,
                                  kMinNcclVersion);
    std::atexit(flushTraceAtExit);
    return r;
  }();
  return *rt;
}

void leaveForTuner(uint64_t commId, std::shared_ptr<engine::Context> ctx) {
  if (tlsPending.size() >= 16) tlsPending.erase(tlsPending.begin());  // a tuner that never came
  tlsPending.push_back(PendingPair{commId, std::move(ctx)});
}

std::shared_ptr<engine::Context> takeFromProfiler(uint64_t commId) {
  for (size_t i = 0; i < tlsPending.size(); ++i) {
    if (tlsPending[i].commId == commId) {
      std::shared_ptr<engine::Context> ctx = std::move(tlsPending[i].ctx);
      tlsPending.erase(tlsPending.begin() + static_cast<std::ptrdiff_t>(i));
      return ctx;
    }
  }
  return nullptr;
}

}  // namespace autoccl::shim
