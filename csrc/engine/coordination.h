// The process-wide coordination of mode online: which board agrees on decisions, the TCP coordinator's
// server and client, the ranks of each communicator in this process.
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

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "autoccl/coord/coord.h"
#include "engine/common.h"
#include "engine/settings.h"

namespace autoccl::engine {

class RankMerge;

class Coordination {
 public:
  // `agreed`: this process's AgreedSettings, sent to the TCP coordinator, which refuses a process whose
  // digest differs from the communicator's (its lookups then fail instead of diverging).
  // `lookupMs`: a rank's deadline for a decision (AUTOCCL_COORD_TIMEOUT_MS); `lingerMs`: how long the serving
  // process keeps serving at exit (AUTOCCL_COORD_LINGER_MS); `faults`: frames the TCP connections drop, repeat
  // or delay (AUTOCCL_COORD_FAULTS, tests). All from Settings.
  explicit Coordination(AgreedSettings agreed = {}, int lookupMs = 30000, int lingerMs = 5000,
                        coord::Faults faults = {});
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
  coord::Faults faults_;
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

}  // namespace autoccl::engine
