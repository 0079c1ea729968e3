// Mode `online`: the search (autoccl_search) behind the agreement layer (autoccl_coord).
//
// One authority per communicator: the context of its rank 0 (rank from the profiler pairing) owns a
// SearchDecider (search_decider.h) and feeds it the GPU times of its own kernels. Every rank, the authority
// included, applies only what the board holds for (task, call index), so ranks cannot diverge.
//
// Board choice (process-wide, `Coordination`), deterministic from the environment:
//  * TCP when a coordinator address is configured (AUTOCCL_COORD_ADDR=host:port) or derivable
//    (coord::coordinatorFromEnv: torchrun's MASTER_ADDR and MASTER_PORT + 17, the first host of a
//    Slurm step, the address `autoccl run` gave the job); token AUTOCCL_COORD_TOKEN or derived from the
//    launcher's job identity. A communicator on several nodes is not tuned without a coordinator every
//    host derives alike (none, or autoccl run's loopback one: multiNodeProblem). The first
//    context of this process that is rank 0 of a communicator tries to bind the address; binding is
//    atomic, so exactly one process per job serves, every other process (and the server's own
//    process) connects as a client, retrying until the lookup deadline.
//  * In-process board otherwise (nccl-tests -g N, single-process multi-GPU). A communicator is
//    tuned there only when all its ranks attach in this process (waited for, bounded, at its first
//    decision); otherwise every rank applies NCCL's default for it (identical on all ranks).
//  * Per communicator: one whose ranks are all in this process uses the in-process board even when
//    TCP is configured (`autoccl run` always configures it), so that it is scored by its slowest
//    rank and its decisions never cross a socket. Settled at each rank's first decision from the
//    process's one remembered verdict (Coordination::allLocal), so all its ranks agree.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "autoccl/coord/coord.h"
#include "engine/search_decider.h"
#include "engine/policy.h"
#include "engine/settings.h"
#include "engine/timing.h"

namespace autoccl::engine {

// One call of one task: what the merges below collect the ranks' times under.
struct CallKey {
  TaskKey task;
  uint64_t call = 0;
  bool operator==(const CallKey& o) const { return task == o.task && call == o.call; }
};
struct CallKeyHash {
  size_t operator()(const CallKey& k) const {
    return TaskKeyHash()(k.task) ^ static_cast<size_t>(k.call * 0x9E3779B97F4A7C15ull);
  }
};

// Every rank of a communicator in this process (nccl-tests -g N, single-process multi-GPU): one host
// thread launches the GPUs one after another, so one rank's kernel time is not the collective's (on
// 4 x H200 a 1 MiB reduce took 3.8 us on rank 0 and 30 us on rank 3 in the same call, and scoring
// rank 0's alone picked configurations that lengthened the collective). The authority scores call k by
// the longest kernel among the ranks, known once each rank's time for k has arrived; its second measure
// (Measurement::altUs, the window beside the stream period) is rank 0's own (RankMerge::add says why).
// Calls some rank never timed (the mask switched between ranks' launches) are dropped after kMaxPending
// newer calls.
class RankMerge {
 public:
  using Sink = std::function<void(const TaskKey&, const Measurement&)>;
  using UntimedSink = std::function<void(const TaskKey&, uint64_t call)>;
  static constexpr size_t kMaxPending = 4096;
  explicit RankMerge(int nRanks) : nRanks_(nRanks) {}
  // The authority's handler of merged measurements (nullptr: none; samples are then dropped). It is
  // called under this object's lock, so it is never running once setSink(nullptr) has returned.
  void setSink(Sink sink, UntimedSink untimed = nullptr);
  // Rank `rank`'s GPU time of call m.callIndex of `task`. A duplicate from one rank is ignored.
  void add(const TaskKey& task, int rank, const Measurement& m);
  // Rank `rank` ran call `call` of `task` untimed: that call can never be merged. Its waiting times are
  // dropped and the untimed sink is told at once (the search would otherwise wait for it).
  void untimed(const TaskKey& task, int rank, uint64_t call);
  uint64_t merged() const;   // calls delivered to the sink
  uint64_t dropped() const;  // calls evicted incomplete

 private:
  using Key = CallKey;
  using KeyHash = CallKeyHash;
  struct Pending {
    uint64_t ranks = 0;  // bit r: rank r's time is in
    int count = 0;
    bool haveAuthority = false;
    Measurement m;       // rank 0's report (metadata) with the longest GPU time so far
  };
  mutable std::mutex mu_;
  int nRanks_;
  Sink sink_;
  UntimedSink untimedSink_;
  std::unordered_map<Key, Pending, KeyHash> pending_;
  std::deque<Key> order_;  // arrival order of pending_ keys (may hold keys already merged)
  uint64_t merged_ = 0, dropped_ = 0;
};

// A communicator whose ranks are in several processes (TCP board, AUTOCCL_XPROC_SCORE=shortest): the
// authority scores call k by the shortest kernel window among the first kReportRanks ranks. A rank's
// window runs from its own arrival to the collective's end, so an early rank's includes its wait for the
// others and only the last to arrive measures the collective alone. Inside training that wait dominates:
// rank 0's window of a 25 MB all_gather (FSDP2, 2 x H200) had a median of 1.2-1.5 ms against a 60 us
// transfer, and the search compared waits (benchmarks/results/h200x2/fsdp2-training).
// The other ranks' windows come over the board (Board::report -> Decider::observe). A call is delivered
// once every reporting rank has answered; one still missing a report kWaitMs after the authority's own
// time is given up as untimed (scored by fewer ranks it could carry the wait of the rank that was lost:
// in an emulator run with 2 ms rank skew and 5 % of frames dropped, such calls made 1 run in 3 pin a
// configuration 4 % off the best). A rank silent for kSilentMs is not waited for until it reports again.
// Only scores change; decisions are still the authority's alone.
class ArrivalMerge {
 public:
  using Sink = std::function<void(const TaskKey&, const Measurement&)>;
  using UntimedSink = std::function<void(const TaskKey&, uint64_t call)>;
  static constexpr int kReportRanks = 16;  // ranks 0..15 report: bounds the authority's inbound traffic
  static constexpr uint64_t kWaitMs = 50;
  static constexpr uint64_t kOrphanMs = 1000;
  static constexpr uint64_t kSilentMs = 2000;
  static constexpr double kAsymmetry = 0.7;  // see deliverLocked
  static constexpr size_t kMaxPending = 4096;
  using Clock = std::function<uint64_t()>;  // milliseconds, monotonic (tests pass their own)
  ArrivalMerge(int nRanks, Clock clock);
  // The authority's handlers of scored calls and of calls given up (nullptr: none). Called under this
  // object's lock, so never running once setSink(nullptr) has returned.
  void setSink(Sink sink, UntimedSink untimed = nullptr);
  // The authority's own timed call (gpuUs: its window).
  void own(const TaskKey& task, const Measurement& m);
  // The authority's call ran untimed: nothing to score it by (its metadata is missing; the caller gives
  // the sample up itself).
  void ownUntimed(const TaskKey& task, uint64_t call);
  // Rank `rank`'s window of call `call` (us < 0: it ran untimed there). Duplicates are ignored.
  void other(const TaskKey& task, int rank, uint64_t call, double us);
  // Delivers calls whose wait is over (also done by own() and other()).
  void flush();
  int reporters() const { return reporters_; }

 private:
  using Key = CallKey;
  using KeyHash = CallKeyHash;
  struct Pending {
    uint64_t ranks = 0;  // bit r: rank r answered
    bool haveOwn = false;
    uint64_t ownAtMs = 0;
    uint64_t firstAtMs = 0;
    double shortestOther = -1;  // shortest window reported by another rank (-1: none)
    uint32_t reports = 0;       // other ranks' windows received
    Measurement m;
  };
  bool completeLocked(const Pending& p, uint64_t now) const;
  void deliverLocked(const Key& key, Pending& p);
  void flushLocked();
  std::mutex mu_;
  int reporters_;
  Clock clock_;
  uint64_t startMs_;
  uint64_t heardMs_[kReportRanks] = {};  // last report per rank (0: none yet)
  Sink sink_;
  UntimedSink untimedSink_;
  std::unordered_map<Key, Pending, KeyHash> pending_;
  std::list<Key> order_;  // first-seen order of pending_ keys (may hold keys already delivered)
  uint64_t lastScanMs_ = ~0ULL;
};

class Coordination {
 public:
  // `agreed`: this process's AgreedSettings, sent to the TCP coordinator, which refuses a process whose
  // digest differs from the communicator's (its lookups then fail instead of diverging).
  // `lookupMs`: a rank's deadline for a decision (AUTOCCL_COORD_TIMEOUT_MS); `lingerMs`: how long the serving
  // process keeps serving at exit (AUTOCCL_COORD_LINGER_MS). Both from Settings.
  explicit Coordination(AgreedSettings agreed = {}, int lookupMs = 30000, int lingerMs = 5000);
  ~Coordination();
  Coordination(const Coordination&) = delete;
  Coordination& operator=(const Coordination&) = delete;

  // The process's board (created on first use). nullptr with *err when online mode cannot run
  // (malformed address, missing token). `authority`: the caller is rank 0 of a communicator and
  // may host the TCP server.
  std::shared_ptr<coord::Board> board(bool authority, const LogFn& log, std::string* err);
  bool tcp() const { return tcp_; }
  // Why a communicator on nNodes > 1 nodes cannot be tuned here ("" when it can): no coordinator, or one
  // that serves a single host (autoccl run's loopback address).
  std::string multiNodeProblem(int nNodes);
  std::chrono::milliseconds lookupDeadline() const { return std::chrono::milliseconds(lookupMs_); }

  // The process's in-process board (the same as board() without TCP; its own one with TCP).
  std::shared_ptr<coord::Board> localBoard();
  // Announces a rank of this process to the TCP coordinator (ATTACH; no-op on the in-process board), so
  // that the process serving it keeps serving at exit until every rank of the communicator has connected at
  // least once, even one whose process starts after the server's process has finished its own work.
  void announceRank(uint64_t comm, int rank, int nRanks, const LogFn& log);
  // A rank announced here is done (its communicator finalized): the TCP coordinator is told (DETACH).
  void retireRank(uint64_t comm, int rank);
  // Ranks of a communicator attached in this process (every online context registers its rank).
  void addLocalRank(uint64_t comm, int rank);
  int localRanks(uint64_t comm);
  // True when all nRanks ranks of `comm` are attached here (waits at most `wait`). The one verdict
  // per communicator for this process: the first caller's answer is remembered and every rank (the
  // authority's gate and the followers alike) gets it, so a timeout on one rank cannot leave the
  // authority tuning while that rank applies NCCL's default.
  bool allLocal(uint64_t comm, int nRanks, std::chrono::milliseconds wait);

  // At exit: every process tells the TCP coordinator its ranks are done (DETACH). The process hosting the
  // server then keeps serving while other clients are connected, announced ranks have not attached yet, or
  // attached ones have not said they are done (bounded by AUTOCCL_COORD_LINGER_MS, default 5000), so that
  // late ranks, and ranks whose connection dropped, get their decisions.
  void lingerAtExit();

  // In-process board: the one RankMerge of `comm` in this process (created on first use).
  std::shared_ptr<RankMerge> rankMerge(uint64_t comm, int nRanks);

 private:
  std::mutex mu_;
  bool configured_ = false;
  bool tcp_ = false;
  bool singleHost_ = false;
  std::string source_;  // where the coordinator address came from (messages)
  std::string error_;
  coord::TcpOptions opt_;
  AgreedSettings agreed_;
  int lookupMs_ = 30000;
  int lingerMs_ = 5000;
  std::shared_ptr<coord::Board> board_;
  std::shared_ptr<coord::Board> localBoard_;  // with TCP: for communicators entirely in this process
  std::unique_ptr<coord::TcpServer> server_;
  bool triedServer_ = false;
  std::map<std::pair<uint64_t, int>, int> announced_;  // (comm, rank) -> nRanks, this process's (announceRank)
  LogFn log_;  // the first logger a context passed (lingerAtExit reports through it)

  std::mutex regMu_;
  std::condition_variable regCv_;
  std::map<uint64_t, std::set<int>> local_;
  std::map<uint64_t, bool> allLocal_;  // remembered verdicts
  std::map<uint64_t, std::shared_ptr<RankMerge>> merges_;  // guarded by regMu_
};

// Creates the online source for one (communicator, rank) context (rank >= 0). nullptr + *error when
// it cannot run (then the context behaves as no tuner).
std::unique_ptr<DecisionSource> makeOnlineSource(const PolicyEnv& env, std::string* error);

// Options of the online search used by the engine (tests reuse them).
search::Options onlineSearchOptions();

}  // namespace autoccl::engine
