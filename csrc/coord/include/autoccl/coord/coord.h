// Agreement on per-call decisions. One authority per communicator (its rank 0) decides;
// every rank applies the decision for (task, call index). NCCL-free; see docs/online-search.md.
//
// The *board* is the single store of decisions. Decisions are immutable plan segments
// ([begin, end) -> Config) per task; the first segment stored for a call wins, forever. Every rank,
// the authority's included, applies only what the board holds, so ranks cannot diverge. A rank
// whose call is not covered asks the board (NEED); the board asks the communicator's authority
// (its Decider). If the authority does not answer within the board's seal deadline, the board
// itself stores a *final* segment "NCCL's default from the first uncovered call on" (identical for
// everyone). A rank that cannot reach the board at all within its own deadline gets an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "autoccl/common/config.h"
#include "autoccl/common/plan.h"

namespace autoccl::coord {

using autoccl::Config;
using autoccl::Phase;
using autoccl::Segment;

// A task of one communicator (the board's key): the engine's task key and the communicator's hash.
struct TaskKey : autoccl::TaskKey {
  uint64_t comm = 0;
  TaskKey() { pipe = 1; }
  TaskKey(uint64_t comm_, int coll_, int pipe_, uint64_t bytes_) : autoccl::TaskKey{coll_, bytes_, pipe_}, comm(comm_) {}
  bool operator<(const TaskKey& o) const {
    if (comm != o.comm) return comm < o.comm;
    if (coll != o.coll) return coll < o.coll;
    if (pipe != o.pipe) return pipe < o.pipe;
    return bytes < o.bytes;
  }
  bool operator==(const TaskKey& o) const { return comm == o.comm && autoccl::TaskKey::operator==(o); }
  std::string str() const;
};

// The authority's decision maker for one communicator. decide() returns segments that cover call k
// and continue the task's plan from `coveredUpTo` (the end of what the board already holds for the
// task; segments must start exactly there and be contiguous). Called from a board thread; must not
// block for long.
class Decider {
 public:
  virtual ~Decider() = default;
  virtual std::vector<Segment> decide(const TaskKey& task, uint64_t k, uint64_t coveredUpTo) = 0;
  // decide() for a question that leads the one its rank would ask without looking ahead by `ahead` calls
  // (Board::prefetch's beyondDefault, AUTOCCL_ASK_AHEAD): the calls planned beyond that rank's plain question are
  // the look-ahead's. Called from a board thread, like decide(). Default: decide().
  virtual std::vector<Segment> decideAhead(const TaskKey& task, uint64_t k, uint64_t coveredUpTo, uint64_t ahead) {
    (void)ahead;
    return decide(task, k, coveredUpTo);
  }
  // Another rank's GPU time of call k of `task` (micros < 0: that call ran untimed there), sent by
  // Board::report. It may change how the authority scores calls, never what a rank applies. Called from
  // a board thread; must not block. Default: ignored.
  virtual void observe(const TaskKey& task, int rank, uint64_t k, double micros) {
    (void)task;
    (void)rank;
    (void)k;
    (void)micros;
  }
  // Another rank waited `micros` on the host for its lookup of call k of `task` (Board::reportWait): exploration's
  // cost on the caller's clock, which the authority may count into the task's regret. Called from a board thread or
  // from the reporting rank's own thread (the in-process board, or a TCP board whose process holds the authority);
  // must not block. Default: ignored.
  virtual void observeWait(const TaskKey& task, int rank, uint64_t k, double micros) {
    (void)task;
    (void)rank;
    (void)k;
    (void)micros;
  }
};

enum class Status : uint8_t { kOk = 0, kError = 1 };
struct Outcome {
  Status status = Status::kError;
  Segment seg;        // valid when kOk: contains the call index asked
  std::string error;  // when kError
  bool asked = false;  // the board did not hold the segment: the caller waited for the authority (or the seal)
  bool ok() const { return status == Status::kOk; }
};

struct BoardStats {
  uint64_t needsSent = 0, plansReceived = 0, sealed = 0, conflicts = 0, rejectedPeers = 0;
  uint64_t reconnects = 0;     // client: authentications after its first (the connection dropped and came back)
  uint64_t lookupsWaited = 0;  // lookups the board could not answer from what it held (asked the authority)
  uint64_t prefetches = 0;     // prefetch() calls that asked the authority (a NEED sent)
  uint64_t roundTrips = 0;     // client: questions whose answer was timed (Board::roundTripMicros)
  double roundTripUs = 0;      // client: their running mean (0: none yet)
  double roundTripDevUs = 0;   // client: their running mean deviation
  double roundTripMaxUs = 0;   // client: the longest
  uint64_t refused = 0;        // server: SERVE/NEED refused for a settings digest other than the communicator's
  uint64_t reportsSent = 0;     // client: Board::report frames sent
  uint64_t waitsSent = 0;       // client: Board::reportWait frames sent
  uint64_t waitsReceived = 0;   // client holding an authority: WAIT frames passed to its Decider::observeWait
  uint64_t reportsRelayed = 0;  // server: REPORT and WAIT frames passed on to the communicator's authority
  uint64_t reportsDropped = 0;  // server: REPORT and WAIT frames from a process not subscribed to the communicator
  bool connected = false;       // client: connected and authenticated now
  uint64_t connectFailures = 0;  // client: connection attempts that did not authenticate (refused, timed out)
  double firstAuthMs = -1;       // client: from the board's creation to its first authentication (-1: none yet)
};

// Transport-independent interface. Thread-safe.
class Board {
 public:
  virtual ~Board() = default;
  // This process holds the authority (rank 0) of `comm`: the board asks `d` for decisions.
  virtual void serve(uint64_t comm, Decider* d) = 0;
  // Once this returns, no call of the decider served for `comm` is running or will start: the caller
  // may destroy it.
  virtual void unserve(uint64_t comm) = 0;
  // This process holds rank `rank` of `comm` (nRanks ranks in all). The TCP board announces it to
  // the server (ATTACH, on connect and a few times after: idempotent) so that the process serving the
  // coordinator waits at exit for ranks that have not connected yet (TcpServer::missingRanks); a
  // no-op on other boards.
  virtual void attach(uint64_t comm, int rank, int nRanks) {
    (void)comm;
    (void)rank;
    (void)nRanks;
  }
  // This process is done with rank `rank` of `comm` (its communicator finalized). The TCP board tells the
  // server (DETACH, also after a reconnect), whose process then no longer keeps serving at exit for that
  // rank; a rank whose connection dropped without it is waited for (it may reconnect). No-op elsewhere.
  virtual void detach(uint64_t comm, int rank) {
    (void)comm;
    (void)rank;
  }
  // The process is leaving: detach every rank still attached, and wait at most `flushWithin` for those frames
  // to be written. True when they were (false: not connected, or not written in time; no-op boards: false).
  virtual bool detachAll(std::chrono::milliseconds flushWithin) {
    (void)flushWithin;
    return false;
  }
  // The process is leaving and will not use this board again: every rank it announced is said done, and the
  // connection is closed after it. A connection that dropped is waited for (the client reconnects within a
  // second). True once the server has closed its end, which it does only after reading every frame before
  // ours: the goodbye was handled, not merely written (false: never connected, no reconnect within `within`,
  // or no close from the server in time; no-op boards: false). The process serving the coordinator calls
  // detachAll instead: its own client stays connected while it lingers.
  virtual bool leave(std::chrono::milliseconds within) {
    (void)within;
    return false;
  }
  // The authority publishes ahead (optional; NEEDs are answered anyway).
  virtual void publish(const TaskKey& task, const std::vector<Segment>& segs) = 0;
  // The segment for call k of `task`, waiting at most `deadline` for it.
  virtual Outcome lookup(const TaskKey& task, uint64_t k, std::chrono::milliseconds deadline) = 0;
  // The segment for call k if this board already holds it (no waiting, nothing asked).
  virtual bool peek(const TaskKey& task, uint64_t k, Segment* out) = 0;
  // The rank is at call k: if the plan this board holds from k ends at or before call `upTo`, asks for what
  // follows without waiting for it, so that a later lookup finds it at hand. A rank's lookup at the end of
  // what it holds otherwise waits a round trip to the authority (over TCP, ~0.1 ms, up to 1.7 ms measured on
  // 2 x H200). Asks once per plan end (again after the retry interval). Optional: a no-op where lookups are
  // local. `beyondDefault`: how many calls upTo lies beyond what the rank would ask without looking ahead
  // (AUTOCCL_ASK_AHEAD); the question carries it to the authority (Decider::decideAhead).
  virtual void prefetch(const TaskKey& task, uint64_t k, uint64_t upTo, uint64_t beyondDefault = 0) {
    (void)task;
    (void)k;
    (void)upTo;
    (void)beyondDefault;
  }
  // How long the authority takes to answer most questions, as this board measured them (a NEED sent to the PLAN
  // that covers the call it named): the running mean plus twice the mean deviation, in microseconds; 0 before the
  // first answer and where lookups are local. Lock-free: read on the calling thread at every new segment
  // (AUTOCCL_ASK_AHEAD=auto).
  virtual double roundTripMicros() const { return 0.0; }
  // This process's rank `rank` of task.comm timed call k (micros < 0: it ran untimed): passed on to the
  // communicator's authority (Decider::observe). Best effort: a lost, late or duplicated report changes
  // only the authority's scores, never what any rank applies. Default: dropped.
  virtual void report(const TaskKey& task, int rank, uint64_t k, double micros) {
    (void)task;
    (void)rank;
    (void)k;
    (void)micros;
  }
  // This process's rank `rank` of task.comm waited `micros` for the lookup of call k: passed on to the
  // communicator's authority (Decider::observeWait). Best effort, like report(). Default: dropped.
  virtual void reportWait(const TaskKey& task, int rank, uint64_t k, double micros) {
    (void)task;
    (void)rank;
    (void)k;
    (void)micros;
  }
  virtual BoardStats stats() const = 0;
  // The TCP board: the local address ("ip:port") of its current connection to the server, "" when it has
  // none. The process serving the coordinator tells its own client apart from other processes' by it
  // (TcpServer::connectedPeers): the client's own view of being connected lags the server's.
  virtual std::string localAddress() const { return ""; }
};

// All ranks of the communicators in one process: a shared store; the Decider is called inline.
std::shared_ptr<Board> makeLocalBoard();

// The store itself (used by the local board and by the TCP server): first writer wins.
class Store {
 public:
  // Inserts segments (must be contiguous with coverage). Returns false on a conflict (an overlapping
  // segment with other content: never stored). Segments entirely covered already are ignored.
  bool insert(const TaskKey& t, const std::vector<Segment>& segs);
  bool find(const TaskKey& t, uint64_t k, Segment* out) const;
  uint64_t coveredUpTo(const TaskKey& t) const;  // calls < this are decided (contiguous from 0)
  // The end of the segments held without a gap from call k (k itself when k is not held), looked for no further
  // than the first such end past call `past` (what a caller asking "held through `past`?" needs).
  uint64_t coveredFrom(const TaskKey& t, uint64_t k, uint64_t past = kForever) const;
  bool heldAfter(const TaskKey& t, uint64_t k) const;  // a segment begins after call k
  std::vector<Segment> from(const TaskKey& t, uint64_t k) const;  // segments containing/after k
 private:
  const Segment* containing(const TaskKey& t, uint64_t k) const;  // null where no segment holds call k
  std::map<TaskKey, std::map<uint64_t, Segment>> segs_;  // by begin
  // coveredUpTo per task, advanced as segments arrive (they are never removed): asked at every plan lookup, a
  // walk from call 0 cost a lookup time linear in the task's segments (the step guard's key gains one every 16
  // iterations: a converged call's 99th percentile was 9.1-10.3 us over 50,000 iterations, cpu/engine-hot-path).
  std::map<TaskKey, uint64_t> covered_;
};

// ---------------------------------------------------------------------------------------------
// TCP transport (processes / hosts).

// Fault injection at the transport (tests): applied to every message frame after authentication.
struct Faults {
  double drop = 0;       // probability a frame is dropped
  double dup = 0;        // probability a frame is sent twice
  int maxDelayMs = 0;    // frames are delayed uniformly in [0, maxDelayMs] (and so reordered)
  uint64_t seed = 1;
};

struct TcpOptions {
  std::string host = "127.0.0.1";
  int port = 0;               // server: 0 = ephemeral (see TcpServer::port())
  std::string token;          // AUTOCCL_COORD_TOKEN: shared secret of the job
  int connectTimeoutMs = 5000;  // client: give up connecting/authenticating after this (per attempt window)
  int retryMs = 50;           // client: NEED resend; above 1000, the reconnect backoff's ceiling (reconnectDelayMs)
  int sealMs = 2000;          // server: an unanswered NEED older than this seals NCCL's default
  Faults faults;
  // Client: digest of the settings that change what a rank applies for a decision (the engine's
  // channel clamps, NCCL's algorithm/protocol/CTA variables), sent with SERVE and NEED. The server takes
  // the authority's digest (SERVE) as the communicator's and refuses every process that sends another,
  // also one that asked before the authority served: its lookups for that communicator end in an error
  // (naming `settingsWhat`) instead of applying decisions that the other ranks would turn into other
  // configurations. Without an authority, the board seals only when every asker sent the same digest.
  uint64_t settingsDigest = 0;
  std::string settingsWhat;
};

// The client's wait before connecting again after `failures` (1, 2, ...) failed attempts in a row: doubling from
// 1 ms up to max(retryMs, 1000 ms). A connection that authenticated and then dropped within that ceiling counts as
// failed too (a server that closes every connection at once is not retried every millisecond); one that lasted
// longer starts the doubling again. A client whose server is not listening yet (the authority's process is still
// starting, a common race at launch) connects within a few ms of it: waiting a whole retryMs there held every rank's
// first lookup that long, since the server pushes no plan before the communicator's last rank has attached.
int reconnectDelayMs(int failures, int retryMs);

// The board server (relay + store). Runs its own threads. One per job (the process that binds the
// coordinator address).
class TcpServer {
 public:
  explicit TcpServer(TcpOptions opt);
  ~TcpServer();
  bool start(std::string* err);  // bind + listen + accept thread
  void stop();
  int port() const;
  BoardStats stats() const;
  // Client connections currently open (the engine lingers on them at exit), leaving out the one whose
  // remote address is `except` (Board::localAddress of the server's own process's client; "": none left out).
  size_t connectedPeers(const std::string& except = "") const;
  // Ranks announced (ATTACH: a communicator's size is known once any of its ranks attached) that no
  // client has attached yet, e.g. a process that has not connected so far. The engine lingers on
  // them at exit as well: the server's process may finish before another process even started.
  size_t missingRanks() const;
  // A rank of this server's own process, as its ATTACH would say: the process may be done before its client
  // has connected at all (then no ATTACH went out, and the server knew of no rank to wait for).
  void attachLocal(uint64_t comm, uint32_t rank, uint32_t nRanks);
  // A rank of this server's own process is done (its process is leaving), as its DETACH would say.
  void detachLocal(uint64_t comm, uint32_t rank);
  // Ranks attached that have not said they are done (DETACH): running, or gone without a word (a process
  // killed, or a connection dropped that may come back). The engine lingers on them at exit.
  size_t runningRanks() const;
  // What ATTACH told the server so far, per communicator (the engine logs it when its process exits).
  struct Members {
    uint64_t comm = 0;
    uint32_t nRanks = 0;
    std::vector<uint32_t> attached;  // ranks that ever attached, ascending
    std::vector<uint32_t> detached;  // ranks that said they are done, ascending
  };
  std::vector<Members> members() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A client board (one per process is enough; tests use one per simulated process).
std::shared_ptr<Board> makeTcpBoard(TcpOptions opt);

// AUTOCCL_COORD_FAULTS's syntax; false with a one-sentence *err naming the problem.
bool parseFaults(const std::string& text, const Faults& base, Faults* out, std::string* err);

// ---------------------------------------------------------------------------------------------
// What one rank of one communicator uses: caches the current segment per task (lookups of a
// pinned task touch no shared lock) and makes errors sticky for the communicator.
class CommAgreement {
 public:
  CommAgreement(std::shared_ptr<Board> board, uint64_t comm, int rank, std::chrono::milliseconds deadline);
  ~CommAgreement();
  // Decision for call k of task (task.comm must be this comm). kError: fail the call, log once.
  Outcome decide(const TaskKey& task, uint64_t k);
  // At call k, asks the board for the plan after what it holds, if that ends at or before upTo
  // (Board::prefetch, beyondDefault included); nothing once failed.
  void prefetch(const TaskKey& task, uint64_t k, uint64_t upTo, uint64_t beyondDefault = 0);
  // Board::roundTripMicros.
  double roundTripMicros() const { return board_->roundTripMicros(); }
  bool failed() const { return failed_; }

 private:
  std::shared_ptr<Board> board_;
  uint64_t comm_;
  int rank_;
  std::chrono::milliseconds deadline_;
  std::mutex mu_;  // per communicator and rank: not shared with other communicators
  std::map<TaskKey, Segment> cache_;
  bool failed_ = false;
  std::string error_;
};

}  // namespace autoccl::coord
