// TCP board: a relay server holding the Store, and clients (one per process) holding replicas.
// Mutual HMAC-SHA256 challenge-response on connect; length-prefixed frames (wire.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <list>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "autoccl/coord/coord.h"
#include "sha256.h"
#include "wire.h"

namespace autoccl::coord {

std::vector<Segment> sealSegments(const Store& st, const TaskKey& t);  // coord.cpp

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

void randomBytes(uint8_t* p, size_t n) {
  std::ifstream f("/dev/urandom", std::ios::binary);
  if (f.read(reinterpret_cast<char*>(p), static_cast<std::streamsize>(n))) return;
  std::random_device rd;  // fallback
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rd());
}

std::array<uint8_t, 32> authMac(const std::string& token, char who, const uint8_t* a, const uint8_t* b) {
  uint8_t msg[33];
  msg[0] = static_cast<uint8_t>(who);
  std::memcpy(msg + 1, a, 16);
  std::memcpy(msg + 17, b, 16);
  return hmacSha256(token.data(), token.size(), msg, sizeof msg);
}

// One connection: a sender thread with an outbox (for injected delay/reordering) and a framed reader.
class Conn {
 public:
  Conn(int fd, Faults f) : fd_(fd), faults_(f), rng_(f.seed) {
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sender_ = std::thread([this] { sendLoop(); });
  }
  ~Conn() { close(); }
  void close() {
    {
      std::lock_guard<std::mutex> lk(qmu_);
      if (stop_) return;
      stop_ = true;
      qcv_.notify_all();
    }
    ::shutdown(fd_, SHUT_RDWR);
    if (sender_.joinable()) sender_.join();
    ::close(fd_);
  }
  void shutdownOnly() { ::shutdown(fd_, SHUT_RDWR); }
  // No more frames from this end (the peer reads what was written, then end of stream); reading goes on.
  void shutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  // Waits until every frame queued so far has been written to the socket (at most `within`): the last
  // frames of a process that is leaving, which its exit would otherwise drop from the queue.
  bool flush(milliseconds within) {
    std::unique_lock<std::mutex> lk(qmu_);
    return qcv_.wait_for(lk, within, [&] { return stop_ || (q_.empty() && !writing_); }) && !stop_;
  }
  // inject: apply fault injection (only for frames after authentication)
  void send(const wire::Msg& m, bool inject) {
    std::vector<uint8_t> b = wire::encode(m);
    std::lock_guard<std::mutex> lk(qmu_);
    if (stop_) return;
    int copies = 1;
    Clock::time_point due = Clock::now();
    if (inject) {
      std::uniform_real_distribution<double> u(0, 1);
      if (u(rng_) < faults_.drop) return;
      if (u(rng_) < faults_.dup) copies = 2;
      if (faults_.maxDelayMs > 0) due += milliseconds(static_cast<int>(rng_() % static_cast<uint64_t>(faults_.maxDelayMs + 1)));
    }
    for (int i = 0; i < copies; ++i) q_.emplace(due, b);
    qcv_.notify_all();
  }
  // Reads one frame; false on EOF/error/malformed or when `timeoutMs` passes without a full frame
  // (then *timedOut is set).
  bool read(wire::Msg* m, int timeoutMs, bool* timedOut) {
    *timedOut = false;
    auto until = Clock::now() + milliseconds(timeoutMs);
    for (;;) {
      long used = wire::decode(buf_.data(), buf_.size(), m);
      if (used < 0) return false;
      if (used > 0) {
        buf_.erase(buf_.begin(), buf_.begin() + used);
        return true;
      }
      auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now()).count();
      if (left <= 0) {
        *timedOut = true;
        return false;
      }
      pollfd p{fd_, POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
      if (r < 0 && errno != EINTR) return false;
      if (r <= 0) continue;
      uint8_t tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return false;
      buf_.insert(buf_.end(), tmp, tmp + n);
      if (buf_.size() > wire::kHeader + wire::kMaxPayload + sizeof tmp) return false;
    }
  }

 private:
  void sendLoop() {
    std::unique_lock<std::mutex> lk(qmu_);
    for (;;) {
      if (stop_) return;
      if (q_.empty()) {
        qcv_.wait(lk);
        continue;
      }
      auto due = q_.begin()->first;
      if (Clock::now() < due) {
        qcv_.wait_until(lk, due);
        continue;
      }
      std::vector<uint8_t> b = std::move(q_.begin()->second);
      q_.erase(q_.begin());
      writing_ = true;
      lk.unlock();
      size_t off = 0;
      while (off < b.size()) {
        ssize_t n = ::send(fd_, b.data() + off, b.size() - off, MSG_NOSIGNAL);
        if (n <= 0) {
          if (n < 0 && errno == EINTR) continue;
          break;
        }
        off += static_cast<size_t>(n);
      }
      lk.lock();
      writing_ = false;
      qcv_.notify_all();  // flush() waits for an empty queue
    }
  }
  int fd_;
  Faults faults_;
  std::mt19937_64 rng_;
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::multimap<Clock::time_point, std::vector<uint8_t>> q_;
  bool stop_ = false;
  bool writing_ = false;  // sendLoop holds a frame taken off q_ that is not written yet
  std::thread sender_;
  std::vector<uint8_t> buf_;
};

// "ip:port" of a socket address (numeric; "" when it cannot be written).
std::string addrText(const sockaddr* sa, socklen_t len) {
  sockaddr_in v4{};
  if (sa->sa_family == AF_INET6) {  // an IPv4 client accepted on an IPv6 socket: written as the client sees itself
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      v4.sin_family = AF_INET;
      v4.sin_port = v6->sin6_port;
      std::memcpy(&v4.sin_addr, v6->sin6_addr.s6_addr + 12, 4);
      sa = reinterpret_cast<const sockaddr*>(&v4);
      len = sizeof v4;
    }
  }
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) return "";
  return std::string(host) + ":" + serv;
}

int connectTo(const std::string& host, int port, int timeoutMs) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string ps = std::to_string(port);
  if (getaddrinfo(host.c_str(), ps.c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, timeoutMs) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        r = err == 0 ? 0 : -1;
      } else {
        r = -1;
      }
    }
    if (r == 0) {
      int fl = fcntl(fd, F_GETFL, 0);
      fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
      break;
    }
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

// The Plan message carrying segs[i, i + kMaxSegs): one place that keeps plans within the wire limit,
// for the server's pushes and the authority's answers alike.
wire::Msg planChunk(const TaskKey& t, const std::vector<Segment>& segs, size_t i) {
  wire::Msg m;
  m.type = wire::kPlan;
  m.task = t;
  m.segs.assign(segs.begin() + static_cast<std::ptrdiff_t>(i),
                segs.begin() + static_cast<std::ptrdiff_t>(std::min(segs.size(), i + wire::kMaxSegs)));
  return m;
}

}  // namespace

int reconnectDelayMs(int failures, int retryMs) {
  const int64_t doubled = int64_t{1} << std::clamp(failures - 1, 0, 30);
  return static_cast<int>(std::min<int64_t>(doubled, std::max(retryMs, 1000)));
}

// =============================================================================================
// Server
struct TcpServer::Impl {
  TcpOptions o;
  int lfd = -1;
  int boundPort = 0;
  std::atomic<bool> stopping{false};
  std::thread acceptor, sealer;

  struct Peer {
    uint64_t id;
    std::string addr;  // the client's address as accepted ("ip:port")
    std::shared_ptr<Conn> conn;
    std::thread reader;
    std::atomic<bool> done{false};
  };
  std::mutex mu;  // guards everything below
  std::condition_variable cv;
  std::list<std::shared_ptr<Peer>> peers;
  uint64_t nextId = 1;
  Store store;
  std::map<uint64_t, std::shared_ptr<Conn>> authority;          // comm -> conn
  std::map<uint64_t, std::set<std::shared_ptr<Conn>>> subs;     // comm -> conns
  // A task's unanswered questions: the first call asked, when the first came, and the furthest call a plain question
  // (its call less its lead, wire::Msg::ahead) named: a question asked again carries the lead it had.
  struct Waiting {
    uint64_t k = 0;
    Clock::time_point first;
    uint64_t plain = 0;
    uint64_t ahead() const { return k > plain ? k - plain : 0; }
  };
  std::map<TaskKey, Waiting> waiting;
  // Plans stored while their communicator was incomplete (complete(): not every rank attached): pushed to its
  // subscribers the moment its last rank attaches. Left to the askers' resends, a lookup that asked a moment before
  // the last ATTACH waited the client's backoff (retryMs, 50 ms). comm -> task -> first call asked or published.
  std::map<uint64_t, std::map<TaskKey, uint64_t>> deferred;
  struct Members {
    uint32_t nRanks = 0;
    std::set<uint32_t> attached;  // ever attached (a rank that finished and left stays counted)
    std::set<uint32_t> detached;  // said it is done (DETACH): the server need not keep serving it
  };
  std::map<uint64_t, Members> members;  // comm -> ranks announced by ATTACH
  // Settings digests (TcpOptions::settingsDigest). A communicator's reference is its authority's (SERVE);
  // processes that asked before it served are checked when it does. Without an authority the seal needs
  // every asker to agree (else all of them are refused: `split`). A refused process is sent REFUSE and
  // taken off the communicator's subscribers, so no decision ever reaches it.
  std::map<uint64_t, uint64_t> digests;                                    // comm -> reference
  std::map<uint64_t, std::map<std::shared_ptr<Conn>, uint64_t>> unchecked;  // comm -> askers before it
  std::set<uint64_t> split;  // sealed without an authority while the askers disagreed: refuse everyone
  BoardStats st;

  void refuse(const std::shared_ptr<Conn>& c, uint64_t comm, uint64_t reference) {
    st.refused++;
    subs[comm].erase(c);
    wire::Msg r;
    r.type = wire::kRefuse;
    r.comm = comm;
    r.digest = reference;
    c->send(r, true);
  }
  // Caller holds mu. False (and REFUSE sent) when `digest` is not the communicator's.
  bool agrees(const std::shared_ptr<Conn>& c, uint64_t comm, uint64_t digest, bool serves) {
    if (split.count(comm)) {
      refuse(c, comm, 0);
      return false;
    }
    auto it = digests.find(comm);
    if (it == digests.end()) {
      if (!serves) {
        unchecked[comm][c] = digest;
        return true;
      }
      digests[comm] = digest;
      for (auto& [asker, d] : unchecked[comm])
        if (d != digest) refuse(asker, comm, digest);
      unchecked.erase(comm);
      return true;
    }
    if (it->second == digest) return true;
    refuse(c, comm, it->second);
    return false;
  }
  // Caller holds mu. Every rank of `comm` that any ATTACH announced has attached to this server (true
  // when none did: a client that never attaches, as in the library's tests). Until then no decision of
  // the communicator leaves the server, neither the authority's nor a seal: ranks that meet at another
  // coordinator (a host that derived another address) or at none (another token, no plugin) would apply
  // other decisions, so the ranks here wait and their lookups fail at their deadline, loudly, instead.
  bool complete(uint64_t comm) const {
    auto it = members.find(comm);
    return it == members.end() || it->second.attached.size() >= it->second.nRanks;
  }
  // Caller holds mu. May the board seal `comm` (its authority silent)? Only if everyone who asked agrees.
  bool sealable(uint64_t comm) {
    if (split.count(comm)) return false;
    if (digests.count(comm)) return true;
    auto u = unchecked.find(comm);
    if (u == unchecked.end() || u->second.empty()) return true;
    uint64_t first = u->second.begin()->second;
    bool same = true;
    for (auto& [asker, d] : u->second) same = same && d == first;
    if (same) {
      digests[comm] = first;
    } else {
      split.insert(comm);
      for (auto& [asker, d] : u->second) refuse(asker, comm, 0);
    }
    unchecked.erase(comm);
    return same;
  }

  void pushPlan(const TaskKey& t, uint64_t from, const std::set<std::shared_ptr<Conn>>& to) {
    std::vector<Segment> segs = store.from(t, from);
    for (size_t i = 0; i < segs.size(); i += wire::kMaxSegs) {
      wire::Msg m = planChunk(t, segs, i);
      // a contiguous run only (the wire format requires it)
      size_t n = 1;
      while (n < m.segs.size() && m.segs[n].begin == m.segs[n - 1].end) ++n;
      m.segs.resize(n);
      for (auto& c : to) c->send(m, true);
      if (n < wire::kMaxSegs) break;
    }
  }

  // Caller holds mu. The NEEDs of `t` that wait here (Waiting), to the communicator's authority.
  void forwardNeed(const std::shared_ptr<Conn>& to, const TaskKey& t, const Waiting& w) {
    wire::Msg f;
    f.type = wire::kNeed;
    f.task = t;
    f.k = w.k;
    f.ahead = w.ahead();
    f.covered = store.coveredUpTo(t);
    to->send(f, true);
  }
  // Caller holds mu.
  void defer(const TaskKey& t, uint64_t from) {
    auto [it, added] = deferred[t.comm].emplace(t, from);
    if (!added) it->second = std::min(it->second, from);
  }
  void pushDeferred(uint64_t comm) {
    auto d = deferred.find(comm);
    if (d == deferred.end()) return;
    for (const auto& [task, from] : d->second) pushPlan(task, from, subs[comm]);
    deferred.erase(d);
  }

  void handle(const std::shared_ptr<Conn>& c, const wire::Msg& m) {
    std::lock_guard<std::mutex> lk(mu);
    switch (m.type) {
      case wire::kServe: {
        if (!agrees(c, m.comm, m.digest, true)) break;
        std::shared_ptr<Conn>& a = authority[m.comm];
        const bool newAuthority = a != c;  // not a repeat SERVE (every 500 ms)
        a = c;
        subs[m.comm].insert(c);
        // NEEDs that arrived before their authority served: to it now, not at sealLoop's re-forward after retryMs.
        if (newAuthority)
          for (const auto& [task, w] : waiting)
            if (task.comm == m.comm) forwardNeed(c, task, w);
        break;
      }
      case wire::kAttach: {
        const bool wasComplete = complete(m.comm);
        Members& g = members[m.comm];
        g.nRanks = std::max(g.nRanks, m.nRanks);
        g.attached.insert(m.rank);
        if (!wasComplete && complete(m.comm)) pushDeferred(m.comm);
        break;
      }
      case wire::kDetach: {  // a rank that is done was there, whether or not its ATTACH arrived
        const bool wasComplete = complete(m.comm);
        Members& g = members[m.comm];
        g.attached.insert(m.rank);
        g.detached.insert(m.rank);
        if (!wasComplete && complete(m.comm)) pushDeferred(m.comm);
        break;
      }
      case wire::kNeed: {
        if (!agrees(c, m.task.comm, m.digest, false)) break;
        subs[m.task.comm].insert(c);
        Segment s;
        if (store.find(m.task, m.k, &s)) {
          if (complete(m.task.comm)) pushPlan(m.task, m.k, {c});
          else defer(m.task, m.k);
          break;
        }
        auto w = waiting.find(m.task);
        const uint64_t plain = m.k - std::min(m.k, m.ahead);
        if (w == waiting.end()) {
          waiting[m.task] = Waiting{m.k, Clock::now(), plain};
        } else {
          w->second.k = std::min(w->second.k, m.k);
          w->second.plain = std::min(std::max(w->second.plain, plain), w->second.k);
        }
        auto a = authority.find(m.task.comm);
        if (a != authority.end()) {
          wire::Msg f = m;
          f.covered = store.coveredUpTo(m.task);
          a->second->send(f, true);
        }
        break;
      }
      case wire::kReport:
      case wire::kWait: {
        // Only from a process the communicator serves (it asked, and its settings agree): a refused
        // process's timings would be of configurations it never ran. Not stored: passed on or dropped.
        auto sb = subs.find(m.task.comm);
        auto a = authority.find(m.task.comm);
        if (sb == subs.end() || !sb->second.count(c)) {
          st.reportsDropped++;
        } else if (a != authority.end() && a->second != c) {
          a->second->send(m, true);
          st.reportsRelayed++;
        }
        break;
      }
      case wire::kPlan: {
        auto a = authority.find(m.task.comm);
        if (a == authority.end() || a->second != c) {  // only the authority publishes
          st.conflicts++;
          break;
        }
        if (!store.insert(m.task, m.segs)) st.conflicts++;
        if (!m.segs.empty()) {
          if (complete(m.task.comm)) pushPlan(m.task, m.segs.front().begin, subs[m.task.comm]);
          else defer(m.task, m.segs.front().begin);
        }
        break;
      }
      default: break;
    }
  }

  void serveConn(std::shared_ptr<Peer> p) {
    auto c = p->conn;
    // handshake: challenge, response, proof
    wire::Msg hs;
    hs.type = wire::kHelloS;
    randomBytes(hs.nonce, 16);
    c->send(hs, false);
    wire::Msg r;
    bool to = false;
    bool ok = c->read(&r, o.connectTimeoutMs, &to) && r.type == wire::kHelloC;
    if (ok) {
      auto mac = authMac(o.token, 'C', hs.nonce, r.nonce);
      ok = equalConstTime(mac.data(), r.mac, 32);
    }
    if (!ok) {
      std::lock_guard<std::mutex> lk(mu);
      st.rejectedPeers++;
    } else {
      wire::Msg okm;
      okm.type = wire::kHelloOk;
      auto mac = authMac(o.token, 'S', r.nonce, hs.nonce);
      std::memcpy(okm.mac, mac.data(), 32);
      c->send(okm, false);
      while (!stopping) {
        wire::Msg m;
        if (!c->read(&m, 200, &to)) {
          if (to) continue;
          break;
        }
        if (m.type == wire::kHelloS || m.type == wire::kHelloC || m.type == wire::kHelloOk) break;
        handle(c, m);
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      for (auto it = authority.begin(); it != authority.end();)
        it = it->second == c ? authority.erase(it) : std::next(it);
      for (auto& [comm, set] : subs) set.erase(c);
      for (auto& [comm, askers] : unchecked) askers.erase(c);
    }
    c->shutdownOnly();
    p->done = true;
  }

  void sealLoop() {
    while (!stopping) {
      std::this_thread::sleep_for(milliseconds(10));
      std::lock_guard<std::mutex> lk(mu);
      auto now = Clock::now();
      for (auto it = waiting.begin(); it != waiting.end();) {
        Segment s;
        if (store.find(it->first, it->second.k, &s)) {
          it = waiting.erase(it);
          continue;
        }
        if (now - it->second.first > milliseconds(o.sealMs) && complete(it->first.comm)) {
          if (!sealable(it->first.comm)) {  // the askers' settings differ: all of them were refused
            it = waiting.erase(it);
            continue;
          }
          // the authority did not answer in time: final decision, identical for everyone
          store.insert(it->first, sealSegments(store, it->first));
          st.sealed++;
          pushPlan(it->first, 0, subs[it->first.comm]);
          it = waiting.erase(it);
          continue;
        }
        // ask again (a NEED or PLAN may have been lost)
        auto a = authority.find(it->first.comm);
        if (a != authority.end() && (now - it->second.first) > milliseconds(o.retryMs))
          forwardNeed(a->second, it->first, it->second);
        ++it;
      }
      // reap finished peers
      for (auto it = peers.begin(); it != peers.end();) {
        if ((*it)->done) {
          (*it)->reader.join();
          (*it)->conn->close();
          it = peers.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  void acceptLoop() {
    while (!stopping) {
      pollfd p{lfd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      sockaddr_storage from{};
      socklen_t fromLen = sizeof from;
      int fd = ::accept4(lfd, reinterpret_cast<sockaddr*>(&from), &fromLen, SOCK_CLOEXEC);
      if (fd < 0) continue;
      auto peer = std::make_shared<Peer>();
      peer->addr = addrText(reinterpret_cast<sockaddr*>(&from), fromLen);
      Faults f = o.faults;  // tests inject faults (AUTOCCL_COORD_FAULTS, read by the engine)
      std::lock_guard<std::mutex> lk(mu);
      peer->id = nextId++;
      f.seed = f.seed * 1000003 + peer->id;
      peer->conn = std::make_shared<Conn>(fd, f);
      peer->reader = std::thread([this, peer] { serveConn(peer); });
      peers.push_back(peer);
    }
  }
};

TcpServer::TcpServer(TcpOptions opt) : impl_(std::make_unique<Impl>()) { impl_->o = std::move(opt); }
TcpServer::~TcpServer() { stop(); }

bool TcpServer::start(std::string* err) {
  Impl& s = *impl_;
  if (s.o.token.empty()) {
    *err = "AUTOCCL_COORD_TOKEN is empty: refusing to run an unauthenticated coordinator";
    return false;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string ps = std::to_string(s.o.port);
  if (getaddrinfo(s.o.host.c_str(), ps.c_str(), &hints, &res) != 0 || !res) {
    *err = "cannot resolve " + s.o.host;
    return false;
  }
  s.lfd = ::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
  int one = 1;
  if (s.lfd >= 0) setsockopt(s.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (s.lfd < 0 || ::bind(s.lfd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(s.lfd, 128) != 0) {
    *err = std::string("cannot listen on ") + s.o.host + ":" + ps + ": " + std::strerror(errno);
    if (s.lfd >= 0) ::close(s.lfd);
    s.lfd = -1;
    freeaddrinfo(res);
    return false;
  }
  freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(s.lfd, reinterpret_cast<sockaddr*>(&ss), &len);
  s.boundPort = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  s.acceptor = std::thread([this] { impl_->acceptLoop(); });
  s.sealer = std::thread([this] { impl_->sealLoop(); });
  return true;
}

void TcpServer::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  if (s.acceptor.joinable()) s.acceptor.join();
  if (s.sealer.joinable()) s.sealer.join();
  std::list<std::shared_ptr<Impl::Peer>> ps;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    ps.swap(s.peers);
  }
  for (auto& p : ps) p->conn->shutdownOnly();
  for (auto& p : ps) {
    if (p->reader.joinable()) p->reader.join();
    p->conn->close();
  }
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.authority.clear();
    s.subs.clear();
  }
  if (s.lfd >= 0) ::close(s.lfd);
  s.lfd = -1;
}

int TcpServer::port() const { return impl_->boundPort; }
BoardStats TcpServer::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->st;
}

size_t TcpServer::connectedPeers(const std::string& except) const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  size_t n = 0;
  for (const auto& p : impl_->peers) n += p->done || (!except.empty() && p->addr == except) ? 0 : 1;
  return n;
}

size_t TcpServer::missingRanks() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  size_t n = 0;
  for (const auto& [comm, g] : impl_->members)
    if (g.attached.size() < g.nRanks) n += g.nRanks - g.attached.size();
  return n;
}

void TcpServer::attachLocal(uint64_t comm, uint32_t rank, uint32_t nRanks) {
  if (nRanks == 0 || rank >= nRanks) return;
  std::lock_guard<std::mutex> lk(impl_->mu);
  const bool wasComplete = impl_->complete(comm);
  auto& g = impl_->members[comm];
  g.nRanks = std::max(g.nRanks, nRanks);
  g.attached.insert(rank);
  if (!wasComplete && impl_->complete(comm)) impl_->pushDeferred(comm);
}

void TcpServer::detachLocal(uint64_t comm, uint32_t rank) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  const bool wasComplete = impl_->complete(comm);
  auto& g = impl_->members[comm];
  g.attached.insert(rank);
  g.detached.insert(rank);
  if (!wasComplete && impl_->complete(comm)) impl_->pushDeferred(comm);
}

size_t TcpServer::runningRanks() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  size_t n = 0;
  for (const auto& [comm, g] : impl_->members)
    for (uint32_t r : g.attached) n += g.detached.count(r) ? 0 : 1;
  return n;
}

std::vector<TcpServer::Members> TcpServer::members() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  std::vector<Members> out;
  for (const auto& [comm, g] : impl_->members) {
    Members m;
    m.comm = comm;
    m.nRanks = g.nRanks;
    m.attached.assign(g.attached.begin(), g.attached.end());
    m.detached.assign(g.detached.begin(), g.detached.end());
    out.push_back(std::move(m));
  }
  return out;
}

// =============================================================================================
// Client board
namespace {

class TcpBoard : public Board {
 public:
  // ATTACH re-sent with the first SERVE repeats of a connection (every 500 ms): the server hands out no
  // decision of a communicator until all its ranks attached, so one must arrive even when frames are
  // lost (tests drop up to 10 % of them).
  static constexpr int kAttachRepeats = 16;

  explicit TcpBoard(TcpOptions o) : o_(std::move(o)), created_(Clock::now()) {
    io_ = std::thread([this] { ioLoop(); });
  }
  ~TcpBoard() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
      if (conn_) conn_->shutdownOnly();
    }
    cv_.notify_all();
    if (io_.joinable()) io_.join();
  }

  void serve(uint64_t comm, Decider* d) override {
    std::shared_ptr<Conn> c;
    {
      std::lock_guard<std::mutex> lk(mu_);
      deciders_[comm] = d;
      c = authed_ ? conn_ : nullptr;
    }
    if (c) sendServe(c, comm);
  }
  void unserve(uint64_t comm) override {
    std::unique_lock<std::mutex> lk(mu_);
    deciders_.erase(comm);
    // The IO thread calls a decider outside mu_: wait until it is out of this one, which the caller
    // may destroy as soon as we return.
    cv_.wait(lk, [&] { return !(deciding_ && decidingComm_ == comm); });
  }
  void attach(uint64_t comm, int rank, int nRanks) override {
    if (rank < 0 || nRanks <= 0 || rank >= nRanks) return;
    std::shared_ptr<Conn> c;
    {
      std::lock_guard<std::mutex> lk(mu_);
      attached_[{comm, static_cast<uint32_t>(rank)}] = static_cast<uint32_t>(nRanks);
      detached_.erase({comm, static_cast<uint32_t>(rank)});  // the same rank back (a communicator made again)
      c = authed_ ? conn_ : nullptr;
    }
    if (c) sendAttach(c, comm, static_cast<uint32_t>(rank), static_cast<uint32_t>(nRanks));
  }
  void detach(uint64_t comm, int rank) override {
    if (rank < 0) return;
    std::shared_ptr<Conn> c;
    {
      std::lock_guard<std::mutex> lk(mu_);
      attached_.erase({comm, static_cast<uint32_t>(rank)});
      detached_.insert({comm, static_cast<uint32_t>(rank)});
      c = authed_ ? conn_ : nullptr;
    }
    if (c) sendDetach(c, comm, static_cast<uint32_t>(rank));
  }
  bool detachAll(milliseconds flushWithin) override {
    std::vector<std::pair<uint64_t, uint32_t>> done;
    std::shared_ptr<Conn> c;
    {
      std::lock_guard<std::mutex> lk(mu_);
      done = retireAttachedLocked();
      c = authed_ ? conn_ : nullptr;
    }
    if (!c) return false;
    for (const auto& [comm, rank] : done) sendDetach(c, comm, rank);
    return c->flush(flushWithin);
  }
  bool leave(milliseconds within) override {
    const auto until = Clock::now() + within;
    std::shared_ptr<Conn> c;
    {
      std::unique_lock<std::mutex> lk(mu_);
      retireAttachedLocked();
      // A DETACH queued on a connection that then dropped was lost with it: wait for the reconnect (a process
      // that never connected has no server to wait for).
      if (st_.firstAuthMs >= 0) cv_.wait_until(lk, until, [&] { return authed_ || stopping_; });
      if (!authed_ || stopping_) return false;
      c = conn_;
      leaving_ = c;
      // Every rank this process is done with, again: one said on an earlier connection may not have arrived
      // (the server takes a repeat as it takes the first).
      for (const auto& [comm, rank] : detached_) sendDetach(c, comm, rank);
    }
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
    if (!c->flush(std::max(left, milliseconds(0)))) return false;
    // End of stream after the frames: the server handles every frame before it, then closes its end, which
    // the IO thread reads as the answer. Until then this process's socket stays open and read, so that no
    // unread data turns its close into a reset racing the frames.
    c->shutdownWrite();
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_until(lk, until, [&] { return goodbyeAnswered_ || stopping_; }) && goodbyeAnswered_;
  }
  void publish(const TaskKey& t, const std::vector<Segment>& segs) override {
    // An empty segment (begin >= end: e.g. "from call kForever on") covers nothing, and the server takes a
    // PLAN holding one for a malformed frame and closes the connection: it is not sent.
    std::vector<Segment> some;
    for (const Segment& s : segs)
      if (s.begin < s.end) some.push_back(s);
    if (some.empty()) return;
    std::shared_ptr<Conn> c;
    {
      std::lock_guard<std::mutex> lk(mu_);
      c = authed_ ? conn_ : nullptr;
    }
    if (!c) return;  // NEEDs will fetch it
    sendPlan(c, t, some);
  }

  Outcome lookup(const TaskKey& t, uint64_t k, milliseconds deadline) override {
    Outcome o;
    auto until = Clock::now() + deadline;
    std::unique_lock<std::mutex> lk(mu_);
    Clock::time_point nextSend{};
    for (bool first = true;; first = false) {
      auto ref = refused_.find(t.comm);
      if (ref != refused_.end()) {
        o.error = refusal(t.comm, ref->second);
        return o;
      }
      if (replica_.find(t, k, &o.seg)) {
        o.status = Status::kOk;
        return o;
      }
      if (first) st_.lookupsWaited++;
      o.asked = true;
      auto now = Clock::now();
      if (now >= until || stopping_) {
        o.error = std::string("autoccl coord: no decision for ") + t.str() + " call " + std::to_string(k) + ": " +
                  why(deadline);
        return o;
      }
      if (authed_ && now >= nextSend) {
        sendNeed(t, k);
        nextSend = now + milliseconds(o_.retryMs);
      }
      cv_.wait_until(lk, std::min(until, now + milliseconds(o_.retryMs)));
    }
  }
  bool peek(const TaskKey& t, uint64_t k, Segment* out) override {
    std::lock_guard<std::mutex> lk(mu_);
    return replica_.find(t, k, out);
  }
  void report(const TaskKey& t, int rank, uint64_t k, double micros) override {
    sendToAuthority(wire::kReport, t, rank, k, micros);
  }
  void reportWait(const TaskKey& t, int rank, uint64_t k, double micros) override {
    if (micros < 0) return;
    sendToAuthority(wire::kWait, t, rank, k, micros);
  }
  void prefetch(const TaskKey& t, uint64_t k, uint64_t upTo, uint64_t beyondDefault) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!authed_ || refused_.count(t.comm)) return;
    const uint64_t end = replica_.coveredFrom(t, k, upTo);  // walks no further than upTo: once per new segment
    if (end == k || end > upTo) return;  // k not held (its lookup asks), or held past upTo
    // NEED of call upTo: the authority plans through it (and Options::lead further), and the server sends
    // every segment it has from there on as it arrives, so one question covers the calls up to upTo. Where
    // the replica holds segments after a hole at `end` (a PLAN frame lost), the NEED is of `end`: a server
    // that holds upTo answers from upTo on, which would leave the hole.
    const uint64_t ask = replica_.heldAfter(t, end) ? end : upTo;
    const auto now = Clock::now();
    auto a = asked_.find(t);
    if (a != asked_.end() && a->second.call >= end && now - a->second.at < milliseconds(o_.retryMs))
      return;  // asked for beyond what is held: the answer is on its way
    asked_[t] = Asked{ask, now};
    sendNeed(t, ask, wire::questionLead(ask, upTo, beyondDefault));
    st_.prefetches++;
  }
  double roundTripMicros() const override { return roundTripUs_.load(std::memory_order_relaxed); }
  BoardStats stats() const override {
    std::lock_guard<std::mutex> lk(mu_);
    BoardStats s = st_;
    s.connected = authed_;
    return s;
  }
  std::string localAddress() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return localAddr_;
  }

 private:
  // A REPORT or WAIT frame (micros < 0: untimed) to the communicator's authority, or straight to it where this
  // process holds it (no round trip through the server).
  void sendToAuthority(uint16_t type, const TaskKey& t, int rank, uint64_t k, double micros) {
    if (rank < 0) return;
    wire::Msg m;
    m.type = type;
    m.task = t;
    m.rank = static_cast<uint32_t>(rank);
    m.k = k;
    m.ns = micros < 0 ? wire::kUntimedNs : static_cast<uint64_t>(micros * 1000.0 + 0.5);
    std::lock_guard<std::mutex> lk(mu_);
    auto d = deciders_.find(t.comm);
    if (d != deciders_.end()) {
      if (type == wire::kWait) d->second->observeWait(t, rank, k, micros);
      else d->second->observe(t, rank, k, micros);
      return;
    }
    if (!authed_ || refused_.count(t.comm)) return;
    conn_->send(m, true);
    if (type == wire::kWait) st_.waitsSent++;
    else st_.reportsSent++;
  }
  // NEED for call k of t, saying what this replica already covers. Caller holds mu_ and is authed_.
  void sendNeed(const TaskKey& t, uint64_t k, uint64_t ahead = 0) {
    wire::Msg m;
    m.type = wire::kNeed;
    m.task = t;
    m.k = k;
    m.ahead = ahead;
    m.covered = replica_.coveredUpTo(t);
    m.digest = o_.settingsDigest;
    conn_->send(m, true);
    st_.needsSent++;
    // The task's open question is timed; one asked again before its answer (a resend, or another call) is not: its
    // answer cannot be told from the earlier question's (Karn's rule), and a resend's wait would count a lost frame.
    auto [q, fresh] = questions_.try_emplace(t, Question{k, Clock::now(), false});
    if (!fresh) q->second.askedAgain = true;
  }
  // A PLAN for t arrived (caller holds mu_): if it answers t's open question, that question's round trip.
  void timeAnswerLocked(const TaskKey& t) {
    auto q = questions_.find(t);
    Segment covering;
    if (q == questions_.end() || !replica_.find(t, q->second.call, &covering)) return;
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - q->second.at).count();
    const bool askedAgain = q->second.askedAgain;
    questions_.erase(q);
    if (askedAgain) return;
    // A running mean and mean deviation that follow the link, as TCP's retransmission timer keeps them (RFC 6298:
    // weights 1/8 and 1/4), the first answer setting both; what most answers come within is the mean plus twice the
    // deviation.
    if (st_.roundTrips++ == 0) {
      st_.roundTripUs = us;
      st_.roundTripDevUs = us / 2;
    } else {
      st_.roundTripDevUs += (std::abs(us - st_.roundTripUs) - st_.roundTripDevUs) / 4;
      st_.roundTripUs += (us - st_.roundTripUs) / 8;
    }
    st_.roundTripMaxUs = std::max(st_.roundTripMaxUs, us);
    roundTripUs_.store(st_.roundTripUs + 2 * st_.roundTripDevUs, std::memory_order_relaxed);
  }
  void sendServe(const std::shared_ptr<Conn>& c, uint64_t comm) {
    wire::Msg m;
    m.type = wire::kServe;
    m.comm = comm;
    m.digest = o_.settingsDigest;
    c->send(m, true);
  }
  void sendAttach(const std::shared_ptr<Conn>& c, uint64_t comm, uint32_t rank, uint32_t nRanks) {
    wire::Msg m;
    m.type = wire::kAttach;
    m.comm = comm;
    m.rank = rank;
    m.nRanks = nRanks;
    c->send(m, true);
  }
  // DETACH is never dropped by the fault injection: a leaving process sends it once (real TCP loses no frame;
  // a lost one would hold the serving process at exit 2 s longer, as a killed process does).
  void sendDetach(const std::shared_ptr<Conn>& c, uint64_t comm, uint32_t rank) {
    wire::Msg m;
    m.type = wire::kDetach;
    m.comm = comm;
    m.rank = rank;
    c->send(m, false);
  }
  // Every rank still attached becomes one this process is done with (detached_, said again on a reconnect); the
  // ranks so moved are returned. mu_ held.
  std::vector<std::pair<uint64_t, uint32_t>> retireAttachedLocked() {
    std::vector<std::pair<uint64_t, uint32_t>> retired;
    for (const auto& [cr, n] : attached_) {
      retired.push_back(cr);
      detached_.insert(cr);
    }
    attached_.clear();
    return retired;
  }
  // SERVE (and with `ranks`, ATTACH and DETACH) of everything this process holds: on (re)connect (announceLocked),
  // then again every 500 ms since a frame may have been lost (both are idempotent at the server). ATTACH only a
  // few times per connection: every process sends one per (communicator, rank) it holds, which adds up
  // on a large job, while the server needs it only once.
  void announce(const std::shared_ptr<Conn>& c, bool ranks) {
    std::lock_guard<std::mutex> lk(mu_);
    announceLocked(c, ranks);
  }
  // The same with mu_ held (frames are only queued; mu_ before a connection's queue lock, as in sendNeed): on a new
  // connection, before a waiting lookup may send its NEED.
  void announceLocked(const std::shared_ptr<Conn>& c, bool ranks) {
    if (ranks) {
      for (const auto& [cr, n] : attached_) sendAttach(c, cr.first, cr.second, n);
      for (const auto& [comm, rank] : detached_) sendDetach(c, comm, rank);
    }
    for (const auto& [comm, d] : deciders_) sendServe(c, comm);
  }
  void sendPlan(const std::shared_ptr<Conn>& c, const TaskKey& t, const std::vector<Segment>& segs) {
    for (size_t i = 0; i < segs.size(); i += wire::kMaxSegs) c->send(planChunk(t, segs, i), true);
  }
  // Why a lookup got nothing by its deadline (caller holds mu_): never connected, turned away at the
  // handshake, or connected without an answer.
  std::string why(milliseconds deadline) const {
    const std::string at = "the coordinator at " + o_.host + ":" + std::to_string(o_.port);
    const std::string in = " within " + std::to_string(deadline.count()) + " ms (AUTOCCL_COORD_TIMEOUT_MS)";
    switch (authed_ ? Link::kAuthed : link_) {
      case Link::kNever:
        return "cannot connect to " + at + in + " (no process of the job serves it: is this the address every "
               "host derives?)";
      case Link::kRejected:
        return at + " rejected this process's token" + in + " (it is another job's coordinator, or hosts derive "
               "different tokens: every process needs the same AUTOCCL_COORD_TOKEN, or the same launcher "
               "variables and AUTOCCL_COORD_SECRET)";
      case Link::kAuthed: break;
    }
    return at + " gave no decision" + in + ": the communicator's authority (its rank 0) did not answer, or some "
           "of its ranks never connected to this coordinator (hosts that derive another address or token, or "
           "run without the plugin)";
  }
  std::string refusal(uint64_t comm, uint64_t theirs) const {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "autoccl coord: communicator %016llx refused this process: its settings (digest %016llx) differ "
                  "from those of the communicator's other ranks (%016llx)",
                  static_cast<unsigned long long>(comm), static_cast<unsigned long long>(o_.settingsDigest),
                  static_cast<unsigned long long>(theirs));
    std::string s = buf;
    if (!o_.settingsWhat.empty()) s += "; every rank must be given the same " + o_.settingsWhat;
    return s;
  }

  bool handshake(const std::shared_ptr<Conn>& c) {
    wire::Msg hs, r;
    bool to = false;
    if (!c->read(&hs, o_.connectTimeoutMs, &to) || hs.type != wire::kHelloS) return false;
    r.type = wire::kHelloC;
    randomBytes(r.nonce, 16);
    auto mac = authMac(o_.token, 'C', hs.nonce, r.nonce);
    std::memcpy(r.mac, mac.data(), 32);
    c->send(r, false);
    wire::Msg okm;
    if (!c->read(&okm, o_.connectTimeoutMs, &to) || okm.type != wire::kHelloOk) return false;
    auto expect = authMac(o_.token, 'S', r.nonce, hs.nonce);
    return equalConstTime(expect.data(), okm.mac, 32);  // the server knows the token too
  }

  void ioLoop() {
    int attempt = 0;   // connections tried (seeds the test faults)
    int failures = 0;  // attempts in a row that did not authenticate (the backoff)
    while (true) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) return;
      }
      int fd = connectTo(o_.host, o_.port, o_.connectTimeoutMs);
      std::shared_ptr<Conn> c;
      if (fd < 0) {
        std::lock_guard<std::mutex> lk(mu_);
        link_ = Link::kNever;
        st_.connectFailures++;
      }
      if (fd >= 0) {
        Faults f = o_.faults;  // tests inject faults (AUTOCCL_COORD_FAULTS, read by the engine)
        f.seed = f.seed * 7919 + static_cast<uint64_t>(attempt);
        sockaddr_storage self{};
        socklen_t selfLen = sizeof self;
        std::string local;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &selfLen) == 0)
          local = addrText(reinterpret_cast<sockaddr*>(&self), selfLen);
        c = std::make_shared<Conn>(fd, f);
        {
          std::lock_guard<std::mutex> lk(mu_);
          conn_ = c;
          localAddr_ = local;
          if (stopping_) c->shutdownOnly();
        }
        if (handshake(c)) {
          {
            std::lock_guard<std::mutex> lk(mu_);
            // What this process holds is queued before authed_ lets a waiting lookup send its NEED: on the one
            // connection the server reads ATTACH and SERVE first, and does not hold the NEED for them.
            announceLocked(c, true);
            authed_ = true;
            link_ = Link::kAuthed;
            if (st_.firstAuthMs < 0)
              st_.firstAuthMs = std::chrono::duration<double, std::milli>(Clock::now() - created_).count();
            else
              st_.reconnects++;
          }
          cv_.notify_all();
          const auto authedAt = Clock::now();
          readLoop(c);
          // A connection that lasted restarts the doubling; one dropped at once keeps it going (reconnectDelayMs)
          if (Clock::now() - authedAt >= milliseconds(std::max(o_.retryMs, 1000))) failures = 0;
        } else {
          std::lock_guard<std::mutex> lk(mu_);
          st_.rejectedPeers++;
          st_.connectFailures++;
          link_ = Link::kRejected;
        }
        bool answered = false;
        {
          std::lock_guard<std::mutex> lk(mu_);
          authed_ = false;
          conn_.reset();
          questions_.clear();  // their answers come, if at all, after a reconnect: not a round trip
          answered = leaving_ == c;  // the server closed after our goodbye (leave): nothing is left to say
          goodbyeAnswered_ = goodbyeAnswered_ || answered;
        }
        c->close();
        {
          // Cleared only once the socket is closed: until then the server may still count this connection.
          std::lock_guard<std::mutex> lk(mu_);
          localAddr_.clear();
        }
        cv_.notify_all();
        if (answered) {
          // Nothing is left to say, so no reconnect. The thread waits for the board's end rather than ending
          // here: the board of a process that is exiting is never destroyed, and a thread that ended without
          // being joined is a leak to the thread sanitizer.
          std::unique_lock<std::mutex> lk(mu_);
          cv_.wait(lk, [&] { return stopping_; });
          return;
        }
      }
      attempt++;
      failures++;
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, milliseconds(reconnectDelayMs(failures, o_.retryMs)), [&] { return stopping_; });
    }
  }

  void readLoop(const std::shared_ptr<Conn>& c) {
    auto lastServe = Clock::now();
    int rounds = 0;
    for (;;) {
      wire::Msg m;
      bool to = false;
      bool ok = c->read(&m, 100, &to);
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) return;
      }
      if (Clock::now() - lastServe > milliseconds(500)) {  // SERVE/ATTACH may have been lost: repeat
        lastServe = Clock::now();
        announce(c, ++rounds <= kAttachRepeats);
      }
      if (!ok) {
        if (to) continue;
        return;
      }
      if (m.type == wire::kPlan) {
        std::lock_guard<std::mutex> lk(mu_);
        st_.plansReceived++;
        if (!replica_.insert(m.task, m.segs)) st_.conflicts++;
        timeAnswerLocked(m.task);
        cv_.notify_all();
      } else if (m.type == wire::kReport || m.type == wire::kWait) {
        std::unique_lock<std::mutex> lk(mu_);
        auto it = deciders_.find(m.task.comm);
        if (it != deciders_.end()) {  // under mu_: unserve() waits for it
          const double us = m.ns == wire::kUntimedNs ? -1.0 : 1e-3 * static_cast<double>(m.ns);
          if (m.type == wire::kWait) {
            it->second->observeWait(m.task, static_cast<int>(m.rank), m.k, us);
            st_.waitsReceived++;
          } else {
            it->second->observe(m.task, static_cast<int>(m.rank), m.k, us);
          }
        }
      } else if (m.type == wire::kRefuse) {
        std::lock_guard<std::mutex> lk(mu_);
        refused_[m.comm] = m.digest;
        cv_.notify_all();
      } else if (m.type == wire::kNeed) {
        Decider* d = nullptr;
        {
          std::lock_guard<std::mutex> lk(mu_);
          auto it = deciders_.find(m.task.comm);
          if (it != deciders_.end()) {
            d = it->second;
            deciding_ = true;  // unserve(comm) waits for this call to return
            decidingComm_ = m.task.comm;
          }
        }
        if (d) {
          std::vector<Segment> segs = d->decideAhead(m.task, m.k, m.covered, m.ahead);
          {
            std::lock_guard<std::mutex> lk(mu_);
            deciding_ = false;
          }
          cv_.notify_all();
          sendPlan(c, m.task, segs);
        }
      } else {
        return;  // protocol violation
      }
    }
  }

  TcpOptions o_;
  Clock::time_point created_;  // BoardStats::firstAuthMs counts from here
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Conn> conn_;
  std::string localAddr_;  // "ip:port" of conn_'s socket (Board::localAddress)
  bool authed_ = false;
  enum class Link { kNever, kRejected, kAuthed } link_ = Link::kNever;  // the latest connection attempt's outcome
  bool stopping_ = false;
  std::shared_ptr<Conn> leaving_;  // the connection leave() said goodbye on
  bool goodbyeAnswered_ = false;   // the server closed that connection: it read the goodbye
  Store replica_;
  std::map<uint64_t, Decider*> deciders_;
  bool deciding_ = false;  // the IO thread is inside deciders_[decidingComm_]->decide()
  uint64_t decidingComm_ = 0;
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> attached_;  // (comm, rank) -> nRanks
  std::set<std::pair<uint64_t, uint32_t>> detached_;            // (comm, rank) this process is done with
  std::map<uint64_t, uint64_t> refused_;  // comm -> its digest (REFUSE: this process's settings differ)
  // The latest prefetch NEED per task: the call it asked for, and when (asked again after retryMs).
  struct Asked {
    uint64_t call;
    Clock::time_point at;
  };
  std::map<TaskKey, Asked> asked_;
  // Per task, the oldest question (NEED) not answered yet: the call it named, when, and whether the task asked again
  // before the answer (Board::roundTripMicros). One estimate for the process: every communicator's questions, those
  // of a communicator whose authority this process holds too (answered through the server like the others).
  struct Question {
    uint64_t call;
    Clock::time_point at;
    bool askedAgain;
  };
  std::map<TaskKey, Question> questions_;
  std::atomic<double> roundTripUs_{0.0};
  BoardStats st_;
  std::thread io_;
};

}  // namespace

std::shared_ptr<Board> makeTcpBoard(TcpOptions opt) { return std::make_shared<TcpBoard>(std::move(opt)); }

}  // namespace autoccl::coord
