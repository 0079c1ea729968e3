// The tuning-table cache: one schema with the Python CLI, writers that never lose each other's tasks,
// unusable tables moved aside instead of overwritten.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/context.h"
#include "engine/table.h"
#include "engine/table_schema.h"
#include "engine/tests/test_env.h"

using namespace autoccl::engine;
using autoccl::engine::testenv::envOf;

namespace {

std::string tempDir() { return testenv::tempDir("autoccl-cache-test"); }

std::vector<std::string> listDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.' || std::string(e->d_name).size() > 2) names.emplace_back(e->d_name);
    closedir(d);
  }
  return names;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The schema's names are the engine's names, in the engine's order (the ids the tables store).
TEST(cache, schema_names) {
  namespace ts = table_schema;
  EXPECT_EQ(sizeof(ts::kCollNames) / sizeof(ts::kCollNames[0]), size_t(kNumColls));
  EXPECT_EQ(sizeof(ts::kAlgoNames) / sizeof(ts::kAlgoNames[0]), size_t(kNumAlgos));
  EXPECT_EQ(sizeof(ts::kProtoNames) / sizeof(ts::kProtoNames[0]), size_t(kNumProtos));
  for (int i = 0; i < kNumColls; ++i) EXPECT_EQ(std::string(std::string(ts::kCollNames[i])), std::string(std::string(collName(i))));
  for (int i = 0; i < kNumAlgos; ++i) EXPECT_EQ(std::string(std::string(ts::kAlgoNames[i])), std::string(std::string(algoName(i))));
  for (int i = 0; i < kNumProtos; ++i) EXPECT_EQ(std::string(std::string(ts::kProtoNames[i])), std::string(std::string(protoName(i))));
  EXPECT_EQ(ts::kVersion, 1);
}

// tests/data/tables: good-*.table load, bad-*.table are refused (tests/cli/test_tables.py checks the
// Python validator on the same files: one verdict).
TEST(cache, corpus) {
  const std::string dir = std::string(AUTOCCL_SOURCE_DIR) + "/tests/data/tables";
  int good = 0, bad = 0;
  for (const std::string& name : listDir(dir)) {
    if (name.size() < 6 || name.substr(name.size() - 6) != ".table") continue;
    Table t;
    std::string why;
    LoadStatus st = loadTable(dir + "/" + name, "", &t, &why);
    if (name.rfind("good-", 0) == 0) {
      ++good;
      EXPECT_EQ(st, LoadStatus::Ok) << name << " refused: " << why;
    } else if (name.rfind("bad-", 0) == 0) {
      ++bad;
      EXPECT_EQ(st, LoadStatus::Corrupt) << name << " accepted";
    }
  }
  EXPECT_TRUE(good >= 5);
  EXPECT_TRUE(bad >= 25);
}

TableEntry entry(uint64_t bytes, int channels) {
  TableEntry e;
  e.key.coll = 4;
  e.key.bytes = bytes;
  e.key.pipe = 1;
  e.config.algo = 1;
  e.config.proto = 2;
  e.config.channels = channels;
  e.timeUs = 10.0 + static_cast<double>(channels);
  e.ncclUs = 12.0;
  e.samples = 5;
  return e;
}

// Writers in separate processes, each adding its own tasks round after round (and all updating one
// shared task): every task any of them wrote is in the table at the end. Before the lock was taken
// only once the directory existed, two first writers of a fresh cache raced and lost entries.
TEST(cache, concurrent_writers) {
  const int kJobs = 8, kRounds = 20;
  int runs = 100;
  if (const char* r = std::getenv("AUTOCCL_CACHE_STRESS_RUNS")) runs = std::atoi(r);
  int lost = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int run = 0; run < runs; ++run) {
    // On a RAM file system where there is one: the case checks the locking, and fsync on a disk made a
    // run of 160 writes take ~1 s (100 runs in CI under two sanitizers).
    std::string dir = "/dev/shm/autoccl-cache-test-XXXXXX";
    if (!::mkdtemp(dir.data())) dir = tempDir();
    struct RemoveAtEnd {
      std::string d;
      ~RemoveAtEnd() {
        std::error_code ec;
        if (d.rfind("/dev/shm/", 0) == 0 && !::testing::UnitTest::GetInstance()->Failed()) std::filesystem::remove_all(d, ec);
      }
    } cleanup{dir};
    Settings s = loadSettings(envOf({{"AUTOCCL_MODE", "online"}, {"AUTOCCL_CACHE_DIR", dir + "/cache"},
                                     {"AUTOCCL_HW", "GPU Xx8"}}));
    EXPECT_TRUE(s.valid);
    std::vector<pid_t> kids;
    int gate[2];  // the jobs start writing together: their first writes meet on a cache with no folder yet
    EXPECT_TRUE(::pipe(gate) == 0);
    for (int job = 0; job < kJobs; ++job) {
      pid_t pid = fork();
      if (pid == 0) {
        ::close(gate[1]);
        char c;
        while (::read(gate[0], &c, 1) > 0) {
        }
        Runtime rt(s, 22809, 0, "/nonexistent");
        Fingerprint fp = rt.fingerprint(8, 1, 1);
        for (int round = 0; round < kRounds; ++round) {
          std::vector<TableEntry> mine = {entry(static_cast<uint64_t>(job * 1000 + round + 1) * 4096, job + 1),
                                          entry(1u << 30, round + 1)};
          rt.saveTuned(fp, mine, {}, nullptr);
        }
        _exit(0);
      }
      kids.push_back(pid);
    }
    ::close(gate[0]);
    ::close(gate[1]);  // EOF: every job starts
    for (pid_t pid : kids) {
      int status = 0;
      waitpid(pid, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    Runtime rt(s, 22809, 0, "/nonexistent");
    Fingerprint fp = rt.fingerprint(8, 1, 1);
    Table t;
    std::string why;
    EXPECT_TRUE(loadTable(rt.tablePathFor(fp), fp.id(), &t, &why) == LoadStatus::Ok);
    for (int job = 0; job < kJobs; ++job)
      for (int round = 0; round < kRounds; ++round)
        if (!t.lookup(4, static_cast<uint64_t>(job * 1000 + round + 1) * 4096, 1) ||
            t.lookup(4, static_cast<uint64_t>(job * 1000 + round + 1) * 4096, 1)->key.bytes !=
                static_cast<uint64_t>(job * 1000 + round + 1) * 4096)
          ++lost;
    EXPECT_EQ(t.entries.size(), size_t(kJobs * kRounds + 1));
    // no temporary file left behind
    for (const std::string& name : listDir(dir + "/cache/tables"))
      EXPECT_TRUE(name.find(".tmp") == std::string::npos);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "concurrent_writers: %d runs of %d jobs x %d rounds, %d entries lost, %.1f s\n", runs, kJobs,
               kRounds, lost, secs);
  EXPECT_EQ(lost, 0);
}

struct Logs {
  std::vector<std::string> warn, info;
  LogFn fn() {
    return [this](LogLevel l, const std::string& m) { (l == LogLevel::Warn ? warn : info).push_back(m); };
  }
};

// A corrupt table (or a directory where the table should be) is moved aside with a warning and a new
// table written; nothing of the old one is destroyed.
TEST(cache, corrupt_moved_aside) {
  for (bool asDirectory : {false, true}) {
    const std::string dir = tempDir();
    Settings s = loadSettings(envOf({{"AUTOCCL_MODE", "online"}, {"AUTOCCL_CACHE_DIR", dir}, {"AUTOCCL_HW", "GPU Xx2"}}));
    Runtime rt(s, 22809, 0, "/nonexistent");
    Fingerprint fp = rt.fingerprint(2, 1, 1);
    const std::string path = rt.tablePathFor(fp);
    std::string made;
    EXPECT_TRUE(ensureParentDir(path, &made));
    const std::string garbage = "# autoccl table v1\nfingerprint " + fp.id() + "\nthis line is corrupt\n";
    if (asDirectory) {
      EXPECT_TRUE(::mkdir(path.c_str(), 0755) == 0);
    } else {
      std::ofstream(path) << garbage;
    }
    Logs logs;
    rt.saveTuned(fp, {entry(1 << 20, 8)}, {}, logs.fn());
    Table t;
    std::string why;
    EXPECT_TRUE(loadTable(path, fp.id(), &t, &why) == LoadStatus::Ok);
    EXPECT_EQ(t.entries.size(), size_t(1));
    EXPECT_EQ(logs.warn.size(), size_t(1));
    EXPECT_TRUE(!logs.warn.empty() && logs.warn[0].find("moved the unusable table") != std::string::npos);
    int aside = 0;
    for (const std::string& name : listDir(dir + "/tables")) {
      if (name.find(".corrupt-") == std::string::npos) continue;
      ++aside;
      if (!asDirectory) { EXPECT_EQ(std::string(readFile(dir + "/tables/" + name)), std::string(garbage)); }
    }
    EXPECT_EQ(aside, 1);
  }
}

// An explicit AUTOCCL_TABLE in a directory that does not exist is refused at load (no directory is
// created for it); the cache's own tables/ folder is created.
TEST(cache, no_directory_created) {
  const std::string dir = tempDir();
  Settings s = loadSettings(envOf({{"AUTOCCL_MODE", "observe"}, {"AUTOCCL_TABLE", dir + "/missing/t.table"}}));
  EXPECT_TRUE(!s.valid);
  EXPECT_TRUE(s.error.find("does not exist") != std::string::npos);
  struct stat st {};
  EXPECT_TRUE(::stat((dir + "/missing").c_str(), &st) != 0);
  s = loadSettings(envOf({{"AUTOCCL_MODE", "observe"}, {"AUTOCCL_CACHE_DIR", dir + "/cache"}, {"AUTOCCL_HW", "G x1"}}));
  EXPECT_TRUE(s.valid);
  Runtime rt(s, 22809, 0, "/nonexistent");
  rt.saveObserved(rt.fingerprint(1, 1, 1), {entry(4096, 0)}, nullptr);
  EXPECT_TRUE(::stat((dir + "/cache/tables").c_str(), &st) == 0 && S_ISDIR(st.st_mode));
}

}  // namespace


PairRecord pairRecord(int proto, double timeUs) {
  PairRecord p;
  p.key = entry(1 << 20, 8).key;
  p.algo = 1;
  p.proto = proto;
  p.timeUs = timeUs;
  p.ncclUs = 12.0;
  p.samples = 3;
  p.channels = proto == 0 ? 16 : 4;
  return p;
}

// A job's pair records read back as written, and a later job replaces only the records of the pairs it measured
// itself: a job that skipped a pair measured far behind keeps the earlier record, so the next one skips it too.
TEST(cache, pair_records_round_trip_and_merge) {
  const std::string dir = tempDir();
  Settings s = loadSettings(envOf({{"AUTOCCL_MODE", "online"}, {"AUTOCCL_CACHE_DIR", dir}, {"AUTOCCL_HW", "GPU Xx2"}}));
  Runtime rt(s, 22809, 0, "/nonexistent");
  Fingerprint fp = rt.fingerprint(2, 1, 1);
  rt.saveTuned(fp, {}, {pairRecord(0, 45.0), pairRecord(1, 14.0)}, nullptr);
  rt.saveTuned(fp, {entry(1 << 20, 8)}, {pairRecord(1, 13.0)}, nullptr);
  // a time the schema refuses never reaches the file (it would make the whole table unreadable)
  PairRecord glitch = pairRecord(0, HUGE_VAL);
  PairRecord noNccl = pairRecord(0, 20.0);
  noNccl.ncclUs = 0;
  PairRecord wide = pairRecord(2, 30.0);  // a channel count the schema refuses is stored as unknown
  wide.channels = 65;
  TableEntry huge = entry(2 << 20, 8);
  huge.timeUs = 2e12;
  rt.saveTuned(fp, {huge}, {glitch, noNccl, wide}, nullptr);
  Table t;
  std::string why;
  ASSERT_EQ(loadTable(rt.tablePathFor(fp), fp.id(), &t, &why), LoadStatus::Ok) << why;
  EXPECT_EQ(t.entries.size(), size_t(1));
  ASSERT_EQ(t.pairs.size(), size_t(3));
  for (const PairRecord& p : t.pairs) {
    EXPECT_TRUE(p.key == entry(1 << 20, 8).key);
    EXPECT_EQ(p.algo, 1);
    EXPECT_DOUBLE_EQ(p.timeUs, p.proto == 0 ? 45.0 : p.proto == 1 ? 13.0 : 30.0);
    EXPECT_DOUBLE_EQ(p.ncclUs, 12.0);
    EXPECT_EQ(p.samples, uint64_t(3));
    EXPECT_EQ(p.channels, p.proto == 0 ? 16 : p.proto == 1 ? 4 : 0);
  }
  Table again;
  ASSERT_EQ(parseTable(formatTable(t), fp.id(), &again, &why), LoadStatus::Ok) << why;
  EXPECT_EQ(formatTable(again), formatTable(t));
  EXPECT_NEAR(t.pairs[0].ratio(), 45.0 / 12.0, 1e-9);
}

// A pair abandoned after its first call in each of two jobs: the second job's single probe adds to the first's
// record (two samples: enough to leave the pair out at the next start) and the less-behind of the two is kept, so
// one outlier cannot make a close pair look far behind; a record of full samples replaces it again.
TEST(cache, single_probe_records_add_up) {
  const std::string dir = tempDir();
  Settings s = loadSettings(envOf({{"AUTOCCL_MODE", "online"}, {"AUTOCCL_CACHE_DIR", dir}, {"AUTOCCL_HW", "GPU Xx2"}}));
  Runtime rt(s, 22809, 0, "/nonexistent");
  Fingerprint fp = rt.fingerprint(2, 1, 1);
  auto probe = [](double timeUs, int channels) {
    PairRecord p = pairRecord(0, timeUs);
    p.samples = 1;
    p.channels = channels;
    return p;
  };
  auto stored = [&]() {
    Table t;
    std::string why;
    EXPECT_EQ(loadTable(rt.tablePathFor(fp), fp.id(), &t, &why), LoadStatus::Ok) << why;
    EXPECT_EQ(t.pairs.size(), size_t(1));
    return t.pairs.empty() ? PairRecord() : t.pairs[0];
  };
  rt.saveTuned(fp, {}, {probe(45.0, 2)}, nullptr);
  EXPECT_EQ(stored().samples, uint64_t(1));
  rt.saveTuned(fp, {}, {probe(40.0, 8)}, nullptr);  // closer to NCCL's choice: its time and channels
  PairRecord p = stored();
  EXPECT_EQ(p.samples, uint64_t(2));
  EXPECT_GE(p.samples, kPairRecordMinSamples);
  EXPECT_DOUBLE_EQ(p.timeUs, 40.0);
  EXPECT_EQ(p.channels, 8);
  rt.saveTuned(fp, {}, {probe(50.0, 0)}, nullptr);  // further behind, channel count unknown: counted, nothing else
  p = stored();
  EXPECT_EQ(p.samples, uint64_t(3));
  EXPECT_DOUBLE_EQ(p.timeUs, 40.0);
  EXPECT_EQ(p.channels, 8);
  rt.saveTuned(fp, {}, {pairRecord(0, 20.0)}, nullptr);  // a full record: the newest job's measurement
  p = stored();
  EXPECT_EQ(p.samples, uint64_t(3));
  EXPECT_DOUBLE_EQ(p.timeUs, 20.0);
  EXPECT_EQ(p.channels, 16);
  rt.saveTuned(fp, {}, {probe(200.0, 2)}, nullptr);  // one outlier after it does not make the pair look far behind
  p = stored();
  EXPECT_EQ(p.samples, uint64_t(4));
  EXPECT_DOUBLE_EQ(p.timeUs, 20.0);
}
