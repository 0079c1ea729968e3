// Metrics files (AUTOCCL_METRICS_DIR, every AUTOCCL_METRICS_INTERVAL_S seconds): per collective task of every
// (communicator, rank) in the process, NCCL's configuration and the applied one, the time and bus bandwidth of
// each, calls spent exploring, regret so far; per communicator, the step guard's verdicts. Two files per
// process, each replaced atomically (written aside, then renamed):
//   <dir>/autoccl.<host>.<pid>.jsonl  one JSON object per task and per communicator (NCCL Inspector's layout:
//                                     header, metadata, then the record), the latest values;
//   <dir>/autoccl.<host>.<pid>.prom   the same in Prometheus' text format (node_exporter's textfile collector).
// A thread of the writer's own collects and writes: nothing here runs on NCCL's call path.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace autoccl::engine {

struct TaskMetricsRow {
  std::string coll;   // "allreduce"
  uint64_t bytes = 0;
  int pipe = 0;
  uint64_t calls = 0;
  std::string source;                         // where the applied configuration came from ("online", "nccl"...)
  std::string ncclAlgo, ncclProto;            // what NCCL used when left to choose (empty: not seen)
  int ncclChannels = 0;
  std::string algo, proto;                    // applied (empty: NCCL's)
  int channels = 0;                           // applied (0: NCCL's)
  double ncclUs = 0, appliedUs = 0;           // median GPU time of each (0: not measured)
  uint64_t ncclSamples = 0, appliedSamples = 0;
  uint64_t exploringCalls = 0;                // online: calls the search spent trying configurations
  double regretUs = 0;                        // online: exploration's net cost against NCCL's median
  bool converged = false;                     // online: the search pinned a configuration
};

struct GuardMetricsRow {
  uint64_t verdicts = 0, keptTuned = 0, restoredNccl = 0;
  double lastTunedUs = 0, lastNcclUs = 0;  // the latest verdict's iteration times
};

// What one (communicator, rank) reports at a collection.
struct ContextMetrics {
  uint64_t commHash = 0;
  int rank = -1, nRanks = 0, nNodes = 0;
  std::vector<TaskMetricsRow> tasks;
  bool haveGuard = false;
  GuardMetricsRow guard;
};

// Bus bandwidth factor of NCCL's performance notes (nccl-tests): all_reduce 2(n-1)/n, all_gather and
// reduce_scatter (n-1)/n, the others 1.
double busBwFactor(const std::string& coll, int nRanks);

class MetricsWriter {
 public:
  using Collect = std::function<ContextMetrics()>;
  using Warn = std::function<void(const std::string&)>;
  // Starts the writer thread (once); false with *why when `dir` is unusable: not a directory, or no file can
  // be created in it. `warn` is told of the first write that fails after that (the directory removed, the
  // file system full), once per process.
  bool start(const std::string& dir, double intervalS, std::string* why, Warn warn = nullptr);
  bool enabled() const { return started_; }
  // A context to collect from while `owner` lives; its last collection is kept after it is gone, for the
  // kKeptGone gone contexts registered last (a job that makes and destroys communicators would otherwise grow
  // the files and the series without end).
  void add(std::weak_ptr<void> owner, Collect collect);
  static constexpr size_t kKeptGone = 64;
  // Collects the source of `owner` now (its finalize) and writes both files.
  void collectNow(const void* owner);
  // Writes both files from what is collected (exit).
  void flush();
  ~MetricsWriter();

  // Tests: called in the write step (files formatted and written), where the writer holds no lock that a
  // context's calls, its registration (add) or another collection takes.
  void setWriteHookForTest(std::function<void()> hook);

  // The file contents for `snapshots` (tests, and the writer).
  static std::string jsonLines(const std::vector<ContextMetrics>& snapshots, const std::string& host, int pid,
                               uint64_t nowUs);
  static std::string prometheus(const std::vector<ContextMetrics>& snapshots, uint64_t writes, int pid);

 private:
  struct Source {
    std::weak_ptr<void> owner;
    const void* key = nullptr;
    Collect collect;
    ContextMetrics last;
    bool have = false;
  };
  void loop();
  void collectAllLocked();
  // What the files show: the snapshots collected, taken under mu_ (a copy; nothing is formatted there),
  // numbered in the order they were taken.
  struct Snapshot {
    uint64_t seq = 0;
    std::vector<ContextMetrics> contexts;
  };
  Snapshot snapshotsLocked();
  // Formats and writes both files; called without mu_ (ioMu_ orders the writers of the files). A snapshot
  // older than the one last written is dropped: two writers may reach ioMu_ in either order, and the files
  // must end with the newest (a finalized context's last numbers).
  void write(const Snapshot& snap);
  std::mutex mu_;    // sources_, stop_: held to register, collect and copy, never while formatting or writing
  std::mutex ioMu_;  // the files and writes_
  std::function<void()> writeHook_;  // tests (under ioMu_)
  Warn warn_;                        // set by start
  bool warnedWrite_ = false;         // under ioMu_
  std::condition_variable cv_;
  std::vector<Source> sources_;
  std::string dir_, host_, jsonPath_, promPath_;
  double intervalS_ = 10;
  bool started_ = false;
  bool stop_ = false;
  uint64_t writes_ = 0;
  uint64_t snapSeq_ = 0;     // under mu_
  uint64_t writtenSeq_ = 0;  // under ioMu_
  std::thread thread_;
};

}  // namespace autoccl::engine
