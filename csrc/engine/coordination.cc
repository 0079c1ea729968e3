// The process-wide coordination of mode online: see coordination.h.
#include "engine/coordination.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "autoccl/coord/launcher.h"
#include "engine/merge.h"

namespace autoccl::engine {

namespace {
constexpr int kSealMs = 5000;  // TCP server: unanswered NEED -> final NCCL default
}  // namespace

// ------------------------------------------------------------------------------ Coordination

Coordination::Coordination(AgreedSettings agreed, int lookupMs, int lingerMs, coord::Faults faults)
    : agreed_(std::move(agreed)), lookupMs_(lookupMs), lingerMs_(lingerMs), faults_(faults) {}

Coordination::~Coordination() {
  board_.reset();
  localBoard_.reset();
  if (server_) server_->stop();
}

std::shared_ptr<coord::Board> Coordination::board(bool authority, const LogFn& log, std::string* err) {
  std::lock_guard<std::mutex> lk(mu_);
  if (log && !log_) log_ = log;
  if (!configured_) {
    configured_ = true;
    // The endpoint every process of the job derives alike (coord/launcher.h): the user's, the launcher's
    // (torchrun, srun), or the one `autoccl run` gave; none: the in-process board.
    coord::Endpoint ep;
    switch (coord::coordinatorFromEnv([](const char* k) { return std::getenv(k); }, &ep, &error_)) {
      case coord::EndpointStatus::kError: break;
      case coord::EndpointStatus::kNone: board_ = coord::makeLocalBoard(); break;
      case coord::EndpointStatus::kOk:
        tcp_ = true;
        singleHost_ = ep.singleHost;
        source_ = ep.source;
        opt_.host = ep.host;
        opt_.port = ep.port;
        opt_.token = ep.token;
        opt_.sealMs = kSealMs;
        opt_.faults = faults_;
        opt_.settingsDigest = agreed_.digest;
        opt_.settingsWhat = agreed_.names;
        break;
    }
  }
  if (!error_.empty()) {
    *err = error_;
    return nullptr;
  }
  if (tcp_) {
    if (authority && !triedServer_) {
      triedServer_ = true;
      auto srv = std::make_unique<coord::TcpServer>(opt_);
      std::string serr;
      std::string where = opt_.host + ":" + std::to_string(opt_.port);
      if (srv->start(&serr)) {
        server_ = std::move(srv);
        if (log) log(LogLevel::Info, "autoccl: serving the online coordinator at " + where);
      } else if (log) {
        log(LogLevel::Info, "autoccl: online coordinator " + where + " is served by another process (" + serr + ")");
      }
    }
    if (!board_) board_ = coord::makeTcpBoard(opt_);
  }
  return board_;
}

std::string Coordination::multiNodeProblem(int nNodes) {
  std::lock_guard<std::mutex> lk(mu_);
  const std::string head = "a communicator on " + std::to_string(nNodes) + " nodes ";
  if (!tcp_)
    return head + "needs a coordinator every host derives alike, and none is configured or derivable (run it "
                  "under torchrun or srun, start it with `autoccl run -- mpirun ...`, or set AUTOCCL_COORD_ADDR and "
                  "AUTOCCL_COORD_TOKEN on every host)";
  if (singleHost_)
    return head + "cannot use " + source_ + " " + opt_.host + ":" + std::to_string(opt_.port) +
           ": each host would meet at its own coordinator (no launcher variables were found: run it under "
           "torchrun or srun, or set AUTOCCL_COORD_ADDR and AUTOCCL_COORD_TOKEN on every host)";
  return "";
}

std::shared_ptr<coord::Board> Coordination::localBoard() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!tcp_ && board_) return board_;  // without TCP the process's board is the in-process one
  if (!localBoard_) localBoard_ = coord::makeLocalBoard();
  return localBoard_;
}

int Coordination::localRanks(uint64_t comm) {
  std::lock_guard<std::mutex> lk(regMu_);
  auto it = local_.find(comm);
  return it == local_.end() ? 0 : static_cast<int>(it->second.size());
}

void Coordination::addLocalRank(uint64_t comm, int rank) {
  std::lock_guard<std::mutex> lk(regMu_);
  local_[comm].insert(rank);
  regCv_.notify_all();
}

bool Coordination::allLocal(uint64_t comm, int nRanks, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lk(regMu_);
  auto all = [&] { return static_cast<int>(local_[comm].size()) >= nRanks; };
  // Wake when everyone is here or when another rank has already settled the verdict; the first verdict
  // recorded under the lock wins (two ranks waiting at once must not each record their own).
  regCv_.wait_for(lk, wait, [&] { return allLocal_.count(comm) > 0 || all(); });
  auto it = allLocal_.find(comm);
  if (it != allLocal_.end()) return it->second;
  bool ok = all();
  allLocal_.emplace(comm, ok);
  regCv_.notify_all();
  return ok;
}

std::shared_ptr<RankMerge> Coordination::rankMerge(uint64_t comm, int nRanks) {
  std::lock_guard<std::mutex> lk(regMu_);
  std::shared_ptr<RankMerge>& m = merges_[comm];
  if (!m) m = std::make_shared<RankMerge>(nRanks);
  return m;
}

void Coordination::announceRank(uint64_t comm, int rank, int nRanks, const LogFn& log) {
  if (rank < 0 || nRanks <= 0 || rank >= nRanks) return;
  std::string err;
  auto b = board(false, log, &err);
  if (!b) return;
  b->attach(comm, rank, nRanks);
  std::lock_guard<std::mutex> lk(mu_);
  announced_[{comm, rank}] = nRanks;
}

void Coordination::retireRank(uint64_t comm, int rank) {
  std::shared_ptr<coord::Board> b;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!tcp_ || !announced_.count({comm, rank})) return;
    b = board_;
  }
  if (b) b->detach(comm, rank);
}

void Coordination::lingerAtExit() {
  coord::TcpServer* srv = nullptr;
  std::shared_ptr<coord::Board> board;
  std::map<std::pair<uint64_t, int>, int> announced;
  LogFn log;
  bool tcp = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    srv = server_.get();
    board = board_;
    announced = announced_;
    log = log_;
    tcp = tcp_;
  }
  // Every process says its ranks are done before it leaves (communicators never finalized included, e.g. a
  // job that never destroys its process group): the serving process then need not wait for them, and one
  // whose connection merely dropped is still waited for. A process that does not serve leaves its connection
  // for good, and knows the server read the goodbye when the server closes its end (1 s at most, a
  // reconnect included: a goodbye only written to the socket was lost once in CI, and the serving
  // process then waited 2 s and warned of ranks gone without a word). The serving process's own client stays
  // connected while it lingers (its ranks may still answer other ranks' NEEDs): its frames are only flushed.
  if (tcp && board && !announced.empty()) {
    if (srv) {
      if (!board->detachAll(std::chrono::milliseconds(500)) && log)
        log(LogLevel::Info, "autoccl: leaving without telling the coordinator this process's ranks are done "
                            "(not connected, or the frames not written within 500 ms)");
    } else if (!board->leave(std::chrono::milliseconds(1000)) && log) {
      log(LogLevel::Info, "autoccl: leaving without the coordinator confirming this process's ranks are done "
                          "(not connected, or no reconnect or no close from the server within 1000 ms)");
    }
  }
  if (!srv) return;
  // This process's own ranks, told to its server directly: a process done before its client connected never
  // sent their ATTACH, and the server then knew of no other rank to wait for (a rank 0 whose tasks NCCL's
  // model decides at once left before rank 1's process had connected, on a loaded machine). They are done.
  for (const auto& [cr, n] : announced) {
    srv->attachLocal(cr.first, static_cast<uint32_t>(cr.second), static_cast<uint32_t>(n));
    srv->detachLocal(cr.first, static_cast<uint32_t>(cr.second));
  }
  const int ms = lingerMs_;
  const auto t0 = std::chrono::steady_clock::now();
  auto until = t0 + std::chrono::milliseconds(ms);
  // Ranks announced but never attached are waited for too: another process may not have connected yet
  // when this one is done. The other processes' connections are told apart from our own client's by its
  // address, as the server accepted it: subtracting one peer whenever our client believed itself connected
  // let this process leave under a rank still running whenever the server had already dropped our client's
  // connection and the client had not noticed yet (the late-rank tests' "cannot connect" failures under load).
  std::string ownAddr;
  size_t peers = 0;
  auto others = [&] {
    ownAddr = board ? board->localAddress() : "";
    return peers = srv->connectedPeers(ownAddr);
  };
  // The exit decision, said in the log: what the server knows of every communicator, this process's ranks,
  // and why it leaves (a rank that later finds no coordinator is explained by this line).
  auto describe = [&](const std::string& when, LogLevel level) {
    if (!log) return;
    std::string s = std::string("autoccl: coordinator exit (") + when + "): " + std::to_string(peers) +
                    " other process(es) connected, own client " + (ownAddr.empty() ? "not connected" : ownAddr) + ";";
    for (const coord::TcpServer::Members& m : srv->members()) {
      char head[64];
      std::snprintf(head, sizeof head, " comm %016llx", static_cast<unsigned long long>(m.comm));
      s += head;
      s += " of " + std::to_string(m.nRanks) + " ranks: attached [";
      for (size_t i = 0; i < m.attached.size(); ++i) s += (i ? "," : "") + std::to_string(m.attached[i]);
      s += "], done [";
      for (size_t i = 0; i < m.detached.size(); ++i) s += (i ? "," : "") + std::to_string(m.detached[i]);
      s += "], own [";
      bool first = true;
      for (const auto& [cr, n] : announced)
        if (cr.first == m.comm) {
          s += (first ? "" : ",") + std::to_string(cr.second);
          first = false;
        }
      s += "], missing [";
      first = true;
      for (uint32_t r = 0, j = 0; r < m.nRanks; ++r) {
        while (j < m.attached.size() && m.attached[j] < r) ++j;
        if (j < m.attached.size() && m.attached[j] == r) continue;
        s += (first ? "" : ",") + std::to_string(r);
        first = false;
      }
      s += "];";
    }
    log(level, s);
  };
  // A rank attached and not done (no DETACH) is waited for with no connection open too, for as long as a
  // dropped connection takes to come back (the client retries within 1 s): a process killed without a word
  // holds this one that long, not until the deadline.
  constexpr auto kReconnectGrace = std::chrono::milliseconds(2000);
  size_t waitOthers = others();
  size_t missing = srv->missingRanks();
  size_t running = srv->runningRanks();
  auto lastConnected = t0;
  auto holds = [&] {
    const auto now = std::chrono::steady_clock::now();
    if (waitOthers > 0) lastConnected = now;
    return waitOthers > 0 || missing > 0 || (running > 0 && now - lastConnected < kReconnectGrace);
  };
  describe("start", LogLevel::Info);
  while (holds() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    waitOthers = others();
    missing = srv->missingRanks();
    running = srv->runningRanks();
  }
  const long long waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  // Leaving at the deadline under processes or ranks that may still need the coordinator is worth a warning.
  const bool early = holds();
  const bool silent = !early && running > 0;  // attached ranks gone without saying they are done
  describe((early    ? "leaving at the linger deadline (AUTOCCL_COORD_LINGER_MS) after "
            : silent ? "leaving: ranks gone without saying they are done (killed?), not back within 2 s, after "
                     : "leaving: no other process connected, no rank missing or still running, after ") +
               std::to_string(waited) + " ms",
           early || silent ? LogLevel::Warn : LogLevel::Info);
}

}  // namespace autoccl::engine
