// Loads the built libautoccl-nccl.so the way NCCL does (dlopen + dlsym of the versioned structs) and
// drives init / getCollInfo / profiler events / finalize with hand-made arguments.
// Usage: autoccl_nccl_dlopen_test [--gtest_filter=dlopen.<case>] [<path-to-libautoccl-nccl.so>]. Each case
// runs in its own process (ctest runs them so) because the library reads its settings once per process.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/tests/scratch.h"
#include "nccl/abi/profiler_v5.h"
#include "nccl/abi/profiler_v6.h"
#include "nccl/abi/profiler_v7.h"
#include "nccl/abi/tuner_v5.h"
#include "nccl/abi/tuner_v6.h"

namespace {

std::string gLib;
void* gHandle = nullptr;
ncclabi::TunerV5* gT5 = nullptr;
ncclabi::TunerV6* gT6 = nullptr;
ncclabi::ProfilerV5* gP5 = nullptr;
ncclabi::ProfilerV6* gP6 = nullptr;
ncclabi::ProfilerV7* gP7 = nullptr;

std::mutex gLogMu;
std::vector<std::string> gWarn, gInfo;

void logger(ncclabi::LogLevel level, unsigned long flags, const char*, int, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(gLogMu);
  if (level == ncclabi::kLogWarn) {
    gWarn.push_back(buf);
    EXPECT_TRUE((flags & ncclabi::kLogSubsysTuning) != 0);
  } else {
    gInfo.push_back(buf);
  }
}

void load() {
  gHandle = dlopen(gLib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!gHandle) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    std::exit(2);
  }
  gT5 = static_cast<ncclabi::TunerV5*>(dlsym(gHandle, "ncclTunerPlugin_v5"));
  gT6 = static_cast<ncclabi::TunerV6*>(dlsym(gHandle, "ncclTunerPlugin_v6"));
  gP5 = static_cast<ncclabi::ProfilerV5*>(dlsym(gHandle, "ncclProfiler_v5"));
  gP6 = static_cast<ncclabi::ProfilerV6*>(dlsym(gHandle, "ncclProfiler_v6"));
  gP7 = static_cast<ncclabi::ProfilerV7*>(dlsym(gHandle, "ncclProfiler_v7"));
  if (!gT5 || !gT6 || !gP5 || !gP6 || !gP7) {
    std::fprintf(stderr, "missing plugin symbols\n");
    std::exit(2);
  }
}

std::string tempDir() { return autoccl::test::scratchDir("autoccl-dlopen-test"); }

constexpr int kRing = 1, kTree = 0, kLL128 = 1, kSimple = 2;

struct Costs {
  float t[ncclabi::kNumAlgorithms][ncclabi::kNumProtocols];
  Costs() {
    for (int a = 0; a < ncclabi::kNumAlgorithms; ++a)
      for (int p = 0; p < ncclabi::kNumProtocols; ++p) t[a][p] = 5.0f + static_cast<float>(a * 3 + p);
  }
  float** arg() { return reinterpret_cast<float**>(t); }  // exactly how NCCL passes it
  bool same(const Costs& o) const {
    for (int a = 0; a < ncclabi::kNumAlgorithms; ++a)
      for (int p = 0; p < ncclabi::kNumProtocols; ++p)
        if (t[a][p] != o.t[a][p]) return false;
    return true;
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string traceFile(const std::string& prefix) {
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  return prefix + "." + host + "." + std::to_string(getpid()) + ".jsonl";
}

// ------------------------------------------------------------------ cases
TEST(dlopen, symbols) {
  load();
  EXPECT_EQ(std::string(gT5->name), std::string("autoccl"));
  EXPECT_EQ(std::string(gP5->name), std::string("autoccl"));
  EXPECT_EQ(std::string(gP7->name), std::string("autoccl"));
  EXPECT_TRUE(gP7->init == gP5->init && gP7->stopEvent == gP5->stopEvent && gP7->finalize == gP5->finalize);
  EXPECT_TRUE(gT6->getChunkSize != nullptr);
  // v5 and v6 share getCollInfo; their inits differ (v6 tells the engine that NCCL asks getChunkSize)
  EXPECT_TRUE(gT5->init != gT6->init && gT5->getCollInfo == gT6->getCollInfo);
  // Nothing but the plugin structs is exported.
  EXPECT_TRUE(dlsym(gHandle, "_ZN7autoccl6engine9parseCollESt17basic_string_viewIcSt11char_traitsIcEE") == nullptr);
  std::string cmd = "nm -D --defined-only " + gLib + " | awk '{print $3}' | grep -v -E '^(ncclTunerPlugin_v5|"
                    "ncclTunerPlugin_v6|ncclProfiler_v5|ncclProfiler_v6|ncclProfiler_v7)$' | grep -v -E '^_(init|fini|edata|end|_bss_start)' "
                    "| grep -v -E '^(__bss_start|_edata|_end|_init|_fini)$' | head -5";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[512];
    std::string extra;
    while (fgets(line, sizeof line, p)) extra += line;
    pclose(p);
    EXPECT_TRUE(extra.empty()) << "unexpected exports: " << extra;
  }
}

TEST(dlopen, fixed) {
  std::string dir = tempDir();
  setenv("AUTOCCL_MODE", "fixed", 1);
  setenv("AUTOCCL_FIXED", "allreduce@1M-64M:ring/ll128/16/chunk=256K;*:tree/simple", 1);
  setenv("AUTOCCL_TRACE", (dir + "/trace").c_str(), 1);
  setenv("AUTOCCL_CACHE_DIR", dir.c_str(), 1);
  load();
  int mask = 0;
  void* pctx = nullptr;
  void* tctx = nullptr;
  const uint64_t comm = 0xfeedULL;
  EXPECT_EQ(gP5->init(&pctx, comm, &mask, "c", 1, 2, 1, logger), 0);
  ncclabi::NvlDomainInfoV5 nvl{1, 2, 2};
  ncclabi::TunerConstantsV5 consts{};
  EXPECT_EQ(gT6->init(&tctx, comm, 2, 1, logger, &nvl, &consts), 0);
  EXPECT_TRUE(tctx != nullptr);

  Costs c;
  int nCh = 0;
  EXPECT_EQ(gT6->getCollInfo(tctx, ncclabi::kAllReduce, 4u << 20, 1, c.arg(), 7, 3, 0, &nCh), 0);
  EXPECT_TRUE(c.t[kRing][kLL128] == 0.0f);
  EXPECT_EQ(nCh, 16);
  size_t chunk = 12345;
  EXPECT_EQ(gT6->getChunkSize(tctx, ncclabi::kAllReduce, 1u << 20, kRing, kLL128, 1, &chunk), 0);
  EXPECT_EQ(chunk, size_t(256) << 10);
  chunk = 12345;
  gT6->getChunkSize(tctx, ncclabi::kAllReduce, 1u << 20, kTree, kSimple, 1, &chunk);
  EXPECT_EQ(chunk, size_t(12345));  // other pair: NCCL's chunk stands

  // A pair NCCL marks -1 is never chosen: table and channels untouched.
  Costs u;
  u.t[kTree][kSimple] = -1.0f;
  Costs before = u;
  nCh = 0;
  gT6->getCollInfo(tctx, ncclabi::kAllGather, 1u << 20, 1, u.arg(), 7, 3, 0, &nCh);
  EXPECT_TRUE(u.same(before));
  EXPECT_EQ(nCh, 0);
  // Outside the allreduce range: the '*' rule, channels untouched.
  Costs w;
  nCh = 0;
  gT6->getCollInfo(tctx, ncclabi::kAllReduce, 128u << 20, 1, w.arg(), 7, 3, 0, &nCh);
  EXPECT_TRUE(w.t[kTree][kSimple] == 0.0f);
  EXPECT_EQ(nCh, 0);
  // Send/recv and unknown functions are ignored.
  Costs s;
  Costs sb = s;
  gT6->getCollInfo(tctx, ncclabi::kSendRecv, 100, 1, s.arg(), 7, 3, 0, &nCh);
  EXPECT_TRUE(s.same(sb));

  EXPECT_EQ(gT6->finalize(tctx), 0);
  EXPECT_EQ(gP5->finalize(pctx), 0);
  EXPECT_TRUE(gWarn.empty());
  std::string trace = slurp(traceFile(dir + "/trace"));
  EXPECT_TRUE(trace.find("\"ev\":\"call\",\"comm\":\"000000000000feed\",\"rank\":1,\"coll\":\"allreduce\",\"bytes\":4194304,"
                   "\"pipe\":1,\"call\":0,\"algo\":\"ring\",\"proto\":\"ll128\",\"channels\":16,\"chunk\":262144,"
                   "\"chunk_halvings\":0,\"source\":\"fixed\",\"timing\":1}") != std::string::npos);  // fixed mode times 16 calls
  EXPECT_TRUE(trace.find("\"coll\":\"allgather\",\"bytes\":1048576,\"pipe\":1,\"call\":0,\"algo\":null,\"proto\":null,"
                   "\"channels\":0,\"chunk\":0,\"chunk_halvings\":0,\"source\":\"nccl\",\"timing\":1,\"refused\":true}") !=
        std::string::npos);
  EXPECT_TRUE(trace.find("\"ev\":\"task\"") != std::string::npos);
  bool loggedMode = false;
  for (const std::string& m : gInfo) loggedMode |= m.find("mode fixed") != std::string::npos;
  EXPECT_TRUE(loggedMode);
}

TEST(dlopen, bad_env) {
  setenv("AUTOCCL_MODE", "fixed", 1);
  setenv("AUTOCCL_FIXED", "allreduce:ring/bogus", 1);
  load();
  for (int comm = 0; comm < 3; ++comm) {
    int mask = 12345;
    void* pctx = nullptr;
    void* tctx = nullptr;
    EXPECT_EQ(gP5->init(&pctx, 77 + static_cast<uint64_t>(comm), &mask, "c", 1, 2, 0, logger), 0);
    EXPECT_EQ(mask, 0);
    EXPECT_EQ(gT5->init(&tctx, 77 + static_cast<uint64_t>(comm), 2, 1, logger, nullptr, nullptr), 0);
    Costs c;
    Costs before = c;
    int nCh = 0;
    EXPECT_EQ(gT5->getCollInfo(tctx, ncclabi::kAllReduce, 1u << 20, 1, c.arg(), 7, 3, 0, &nCh), 0);
    EXPECT_TRUE(c.same(before));
    EXPECT_EQ(nCh, 0);
    void* h = reinterpret_cast<void*>(0x1);
    ncclabi::EventDescrV5 d{};
    d.type = ncclabi::kEvColl;
    d.coll.func = "AllReduce";
    EXPECT_EQ(gP5->startEvent(pctx, &h, &d), 0);
    EXPECT_TRUE(h == nullptr);
    EXPECT_EQ(gT5->finalize(tctx), 0);
    EXPECT_EQ(gP5->finalize(pctx), 0);
  }
  EXPECT_EQ(gWarn.size(), size_t(1));  // exactly one WARN per process
  if (!gWarn.empty()) { EXPECT_TRUE(gWarn[0].find("AUTOCCL_FIXED") != std::string::npos); }
}

TEST(dlopen, off) {
  setenv("AUTOCCL_MODE", "off", 1);
  load();
  int mask = 7;
  void* pctx = nullptr;
  void* tctx = nullptr;
  gP5->init(&pctx, 5, &mask, "c", 1, 2, 0, logger);
  EXPECT_EQ(mask, 0);
  gT5->init(&tctx, 5, 2, 1, logger, nullptr, nullptr);
  Costs c;
  Costs before = c;
  int nCh = 0;
  gT5->getCollInfo(tctx, ncclabi::kAllReduce, 1u << 20, 1, c.arg(), 7, 3, 0, &nCh);
  EXPECT_TRUE(c.same(before));
  EXPECT_EQ(nCh, 0);
  gT5->finalize(tctx);
  gP5->finalize(pctx);
  EXPECT_TRUE(gWarn.empty());
}

// NCCL opens the library once as tuner and once as profiler and closes both handles when its last communicator is
// destroyed (2.28 and later). The library's threads (here the trace writer) outlive that: the library must stay
// mapped. The communicator is set up on a thread that then exits, as NCCL's non-blocking init does.
TEST(dlopen, stays_loaded_when_nccl_closes_it) {
  std::string dir = tempDir();
  setenv("AUTOCCL_MODE", "observe", 1);
  setenv("AUTOCCL_TRACE", (dir + "/t").c_str(), 1);
  setenv("AUTOCCL_CACHE_DIR", dir.c_str(), 1);
  void* tunerLib = dlopen(gLib.c_str(), RTLD_NOW | RTLD_LOCAL);
  void* profilerLib = dlopen(gLib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_TRUE(tunerLib && profilerLib);
  auto* t5 = static_cast<ncclabi::TunerV5*>(dlsym(tunerLib, "ncclTunerPlugin_v5"));
  auto* p5 = static_cast<ncclabi::ProfilerV5*>(dlsym(profilerLib, "ncclProfiler_v5"));
  ASSERT_TRUE(t5 && p5);
  std::thread([&] {
    int mask = 0;
    void* pctx = nullptr;
    void* tctx = nullptr;
    p5->init(&pctx, 0x77, &mask, "c", 1, 2, 0, logger);
    t5->init(&tctx, 0x77, 2, 1, logger, nullptr, nullptr);
    t5->finalize(tctx);
    p5->finalize(pctx);
  }).join();
  EXPECT_EQ(dlclose(tunerLib), 0);
  EXPECT_EQ(dlclose(profilerLib), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the trace writer wakes every 50 ms
  void* still = dlopen(gLib.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  EXPECT_TRUE(still != nullptr) << "the library was unmapped while its threads run";
  if (still) dlclose(still);
}

// Observe mode through one profiler interface version: Coll + KernelCh events of three calls of one task become
// timings in the trace and a table; through v7, tagged calls stay one task and kernel phases get no handle.
template <class Descr, class Profiler>
void observeThrough(Profiler** table) {  // the table load() finds
  std::string dir = tempDir();
  setenv("AUTOCCL_MODE", "observe", 1);
  setenv("AUTOCCL_TRACE", (dir + "/t").c_str(), 1);
  setenv("AUTOCCL_CACHE_DIR", dir.c_str(), 1);
  setenv("AUTOCCL_HW", "Test GPUx2", 1);
  load();
  Profiler* prof = *table;
  int mask = 0;
  void* pctx = nullptr;
  void* tctx = nullptr;
  prof->init(&pctx, 0x42, &mask, "c", 1, 2, 0, logger);
  gT5->init(&tctx, 0x42, 2, 1, logger, nullptr, nullptr);
  EXPECT_EQ(mask, 0);  // nothing to time before a task's first call (its first AUTOCCL_MEASURE_CALLS are)
  for (uint64_t k = 0; k < 3; ++k) {
    Costs c;
    Costs before = c;
    int nCh = 0;
    gT5->getCollInfo(tctx, ncclabi::kAllGather, 2u << 20, 1, c.arg(), 7, 3, 0, &nCh);
    // No CUDA driver in this process: the kernel clock (Coll + KernelCh events).
    EXPECT_EQ(mask, int(ncclabi::kEvColl | ncclabi::kEvKernelCh));
    EXPECT_TRUE(c.same(before));
    Descr d{};
    d.type = ncclabi::kEvColl;
    d.rank = 0;
    d.coll.seqNumber = k;
    d.coll.func = "AllGather";
    d.coll.count = 1u << 20;  // per-rank bytes (NCCL converts AllGather to int8)
    d.coll.datatype = "ncclInt8";
    d.coll.nChannels = 2;
    d.coll.algo = "RING";
    d.coll.proto = "SIMPLE";
    if constexpr (sizeof(Descr) == sizeof(ncclabi::EventDescrV7)) {
      d.coll.kernelVariant = "default";
      d.coll.userTag = 1000 + k;  // a tagged call: the same task
    }
    void* coll = nullptr;
    prof->startEvent(pctx, &coll, &d);
    EXPECT_TRUE(coll != nullptr);
    prof->stopEvent(coll);
    for (int ch = 0; ch < 2; ++ch) {
      Descr kd{};
      kd.type = ncclabi::kEvKernelCh;
      kd.parentObj = coll;
      kd.kernelCh.channelId = static_cast<uint8_t>(ch);
      kd.kernelCh.pTimer = 1000000 + static_cast<uint64_t>(ch) * 10;
      void* kh = nullptr;
      prof->startEvent(pctx, &kh, &kd);
      EXPECT_TRUE(kh != nullptr);
      ncclabi::EventStateArgsV5 a{};
      a.kernelCh.pTimer = 1000000 + 20000 * (k + 1);
      prof->recordEventState(kh, ncclabi::kStateKernelChStop, &a);
      prof->stopEvent(kh);
    }
    if constexpr (sizeof(Descr) == sizeof(ncclabi::EventDescrV7)) {  // v7's kernel phases are not ours
      Descr pd{};
      pd.type = ncclabi::kEvKernelPhase;
      pd.parentObj = coll;
      void* ph = reinterpret_cast<void*>(0x8);
      prof->startEvent(pctx, &ph, &pd);
      EXPECT_TRUE(ph == nullptr);
    }
    // Other event types get no handle.
    Descr gd{};
    gd.type = ncclabi::kEvGroup;
    void* gh = reinterpret_cast<void*>(0x8);
    prof->startEvent(pctx, &gh, &gd);
    EXPECT_TRUE(gh == nullptr);
  }
  gT5->finalize(tctx);
  prof->finalize(pctx);
  EXPECT_EQ(mask, 0);
  std::string trace = slurp(traceFile(dir + "/t"));
  EXPECT_TRUE(trace.find("\"ev\":\"time\",\"comm\":\"0000000000000042\",\"rank\":0,\"coll\":\"allgather\",\"bytes\":2097152,"
                   "\"pipe\":1,\"call\":1,\"gpu_us\":40.000,\"nccl_algo\":\"RING\",\"nccl_proto\":\"SIMPLE\","
                   "\"nccl_channels\":2,\"colls\":1,\"kch\":2,\"start_spread_us\":0.010,\"stale_ch\":0,\"t0_ns\":1000000,\"period_us\":0.000,\"pause_us\":0.000}") != std::string::npos);
  EXPECT_TRUE(trace.find("\"median_us\":40.000") != std::string::npos);
  std::string tables = dir + "/tables";
  std::string ls;
  if (FILE* p = popen(("cat " + tables + "/*.table").c_str(), "r")) {
    char line[512];
    while (fgets(line, sizeof line, p)) ls += line;
    pclose(p);
  }
  EXPECT_TRUE(ls.find("task coll=allgather bytes=2097152 pipe=1 algo=ring proto=simple") != std::string::npos);
  EXPECT_TRUE(gWarn.empty());
}

TEST(dlopen, observe) { observeThrough<ncclabi::EventDescrV5>(&gP5); }
TEST(dlopen, observe_v7) { observeThrough<ncclabi::EventDescrV7>(&gP7); }

// No profiler: the tuner still applies fixed rules and says why there is no timing.
TEST(dlopen, no_profiler) {
  setenv("AUTOCCL_MODE", "fixed", 1);
  setenv("AUTOCCL_FIXED", "*:ring/simple/8", 1);
  load();
  void* tctx = nullptr;
  gT5->init(&tctx, 9, 4, 1, logger, nullptr, nullptr);
  Costs c;
  int nCh = 0;
  gT5->getCollInfo(tctx, ncclabi::kReduceScatter, 1u << 20, 1, c.arg(), 7, 3, 0, &nCh);
  EXPECT_TRUE(c.t[kRing][kSimple] == 0.0f);
  EXPECT_EQ(nCh, 8);
  gT5->finalize(tctx);
  bool said = false;
  for (const std::string& m : gInfo) said |= m.find("profiler not loaded") != std::string::npos;
  EXPECT_TRUE(said);
}

// AUTOCCL_NCCL_CHANNELS reaches NCCL for calls left to it whether or not a decision source exists (here
// mode online without the profiler: no source, "behaving as no tuner"), so every rank caps alike; with
// invalid settings or mode off the plugin touches nothing.
TEST(dlopen, nccl_channels) {
  setenv("AUTOCCL_MODE", "online", 1);
  setenv("AUTOCCL_NCCL_CHANNELS", "24", 1);
  load();
  void* tctx = nullptr;
  EXPECT_EQ(gT5->init(&tctx, 11, 4, 1, logger, nullptr, nullptr), 0);
  Costs c;
  Costs before = c;
  int nCh = 0;
  EXPECT_EQ(gT5->getCollInfo(tctx, ncclabi::kAllReduce, 1u << 20, 1, c.arg(), 7, 3, 0, &nCh), 0);
  EXPECT_TRUE(c.same(before));
  EXPECT_EQ(nCh, 24);
  gT5->finalize(tctx);
  bool gaveUp = false;
  for (const std::string& m : gWarn) gaveUp |= m.find("behaving as no tuner") != std::string::npos;
  EXPECT_TRUE(gaveUp);
}

// nccl-tests -g 4: four ranks of one communicator initialised on four threads, then concurrent calls
// and events; every rank gets its own context with the right rank.
TEST(dlopen, threads) {
  std::string dir = tempDir();
  setenv("AUTOCCL_MODE", "fixed", 1);
  setenv("AUTOCCL_FIXED", "allreduce:ring/simple/4", 1);
  setenv("AUTOCCL_TRACE", (dir + "/tt").c_str(), 1);
  load();
  int mask = 0;
  const uint64_t comm = 0xc0ffeeULL;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      void* pctx = nullptr;
      void* tctx = nullptr;
      gP5->init(&pctx, comm, &mask, "c", 1, 4, rank, logger);
      gT5->init(&tctx, comm, 4, 1, logger, nullptr, nullptr);
      for (uint64_t k = 0; k < 200; ++k) {
        Costs c;
        int nCh = 0;
        gT5->getCollInfo(tctx, ncclabi::kAllReduce, 4096, 1, c.arg(), 7, 3, 0, &nCh);
        if (c.t[kRing][kSimple] != 0.0f || nCh != 4) ++bad;
        ncclabi::EventDescrV5 d{};
        d.type = ncclabi::kEvColl;
        d.coll.seqNumber = k;
        d.coll.func = "AllReduce";
        d.coll.count = 1024;
        d.coll.datatype = "ncclFloat32";
        d.coll.nChannels = 1;
        d.coll.algo = "RING";
        d.coll.proto = "SIMPLE";
        void* coll = nullptr;
        gP5->startEvent(pctx, &coll, &d);
        ncclabi::EventDescrV5 kd{};
        kd.type = ncclabi::kEvKernelCh;
        kd.parentObj = coll;
        kd.kernelCh.pTimer = 100;
        void* kh = nullptr;
        // The proxy thread delivers channel events: another thread than the enqueuing one.
        std::thread proxy([&] {
          gP5->startEvent(pctx, &kh, &kd);
          ncclabi::EventStateArgsV5 a{};
          a.kernelCh.pTimer = 1100;
          gP5->recordEventState(kh, ncclabi::kStateKernelChStop, &a);
          gP5->stopEvent(kh);
        });
        gP5->stopEvent(coll);
        proxy.join();
      }
      gT5->finalize(tctx);
      gP5->finalize(pctx);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  std::string trace = slurp(traceFile(dir + "/tt"));
  for (int rank = 0; rank < 4; ++rank) {
    std::string needle = "\"ev\":\"time\",\"comm\":\"0000000000c0ffee\",\"rank\":" + std::to_string(rank) +
                         ",\"coll\":\"allreduce\",\"bytes\":4096,\"pipe\":1,\"call\":15,";
    EXPECT_TRUE(trace.find(needle) != std::string::npos);
  }
  EXPECT_TRUE(gWarn.empty());
}

// A collective the plugin must fail (mode online, a follower whose coordinator is unreachable) fails with
// NCCL's error code, and the reason reaches stderr once per communicator: NCCL prints its logger's warnings
// only with NCCL_DEBUG set and reports "internal error" otherwise.
TEST(dlopen, failure_on_stderr) {
  setenv("AUTOCCL_MODE", "online", 1);
  setenv("AUTOCCL_COORD_ADDR", "127.0.0.1:9", 1);  // discard port: nothing listens
  setenv("AUTOCCL_COORD_TOKEN", "t0ken", 1);
  setenv("AUTOCCL_COORD_TIMEOUT_MS", "300", 1);
  load();
  std::fflush(stderr);
  char path[] = "/tmp/autoccl-stderr-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_TRUE(fd >= 0);
  if (fd < 0) return;
  int saved = dup(2);
  dup2(fd, 2);
  int mask = 0;
  void* pctx = nullptr;
  void* tctx = nullptr;
  gP5->init(&pctx, 0x51, &mask, "c", 1, 2, 1, logger);  // rank 1 of 2: a follower, never the server
  gT5->init(&tctx, 0x51, 2, 1, logger, nullptr, nullptr);
  int rc[2];
  for (int& r : rc) {
    Costs c;
    int nCh = 0;
    r = gT5->getCollInfo(tctx, ncclabi::kAllReduce, 1u << 20, 1, c.arg(), 7, 3, 0, &nCh);
  }
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  gT5->finalize(tctx);
  gP5->finalize(pctx);
  std::string err;
  char buf[4096];
  ssize_t n;
  lseek(fd, 0, SEEK_SET);
  while ((n = read(fd, buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(n));
  close(fd);
  unlink(path);
  EXPECT_TRUE(rc[0] != 0 && rc[1] != 0);
  size_t at = err.find("autoccl: allreduce bytes=1048576 call 0: the ranks can no longer agree");
  EXPECT_TRUE(at != std::string::npos);
  EXPECT_TRUE(err.find("cannot connect to the coordinator at 127.0.0.1:9") != std::string::npos);
  EXPECT_TRUE(err.find("autoccl: allreduce", at + 1) == std::string::npos);  // once
  for (const char* v : {"AUTOCCL_COORD_ADDR", "AUTOCCL_COORD_TOKEN", "AUTOCCL_COORD_TIMEOUT_MS"}) unsetenv(v);
}

}  // namespace

// The plugin is the one built beside this test unless a path is given after GoogleTest's own flags.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  gLib = argc > 1 ? argv[1] : PLUGIN_UNDER_TEST;
  for (const char* v : {"AUTOCCL_MODE", "AUTOCCL_FIXED", "AUTOCCL_TABLE", "AUTOCCL_TRACE", "AUTOCCL_HW",
                        "AUTOCCL_MAX_CHANNELS", "AUTOCCL_MEASURE_CALLS", "AUTOCCL_CACHE_DIR"}) {
    unsetenv(v);
  }
  return RUN_ALL_TESTS();
}
