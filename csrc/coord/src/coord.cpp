// Store, in-process board, CommAgreement, environment helpers.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "autoccl/coord/coord.h"
#include "autoccl/coord/launcher.h"

namespace autoccl::coord {

std::string TaskKey::str() const {
  char b[128];
  std::snprintf(b, sizeof b, "comm %016llx coll %d bytes %llu pipe %d", static_cast<unsigned long long>(comm), coll,
                static_cast<unsigned long long>(bytes), pipe);
  return b;
}

// ---- Store -----------------------------------------------------------------------------------
bool Store::insert(const TaskKey& t, const std::vector<Segment>& segs) {
  auto& m = segs_[t];
  bool ok = true;
  for (const Segment& s : segs) {
    if (s.begin >= s.end) {
      ok = false;
      continue;
    }
    // overlapping segments: the one containing s.begin and the ones starting inside [begin, end)
    bool conflict = false, same = false;
    auto it = m.upper_bound(s.begin);
    if (it != m.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > s.begin) {
        if (prev->second == s) same = true;
        else conflict = true;
      }
    }
    if (!same && !conflict && it != m.end() && it->first < s.end) conflict = true;
    if (same) continue;
    if (conflict) {
      ok = false;
      continue;
    }
    m.emplace(s.begin, s);
  }
  uint64_t& c = covered_[t];
  for (auto it = m.find(c); it != m.end(); it = m.find(c)) c = it->second.end;
  return ok;
}

const Segment* Store::containing(const TaskKey& t, uint64_t k) const {
  auto mi = segs_.find(t);
  if (mi == segs_.end()) return nullptr;
  auto it = mi->second.upper_bound(k);
  if (it == mi->second.begin()) return nullptr;
  --it;
  return it->second.contains(k) ? &it->second : nullptr;
}

bool Store::find(const TaskKey& t, uint64_t k, Segment* out) const {
  const Segment* s = containing(t, k);
  if (!s) return false;
  *out = *s;
  return true;
}

uint64_t Store::coveredUpTo(const TaskKey& t) const {
  auto it = covered_.find(t);
  return it == covered_.end() ? 0 : it->second;
}

uint64_t Store::coveredFrom(const TaskKey& t, uint64_t k, uint64_t past) const {
  const Segment* s = containing(t, k);
  if (!s) return k;
  const std::map<uint64_t, Segment>& m = segs_.at(t);
  uint64_t c = s->end;
  for (auto it = m.find(c); c <= past && it != m.end(); it = m.find(c)) c = it->second.end;  // the next begins at c
  return c;
}

bool Store::heldAfter(const TaskKey& t, uint64_t k) const {
  auto mi = segs_.find(t);
  return mi != segs_.end() && mi->second.upper_bound(k) != mi->second.end();
}

std::vector<Segment> Store::from(const TaskKey& t, uint64_t k) const {
  std::vector<Segment> out;
  auto mi = segs_.find(t);
  if (mi == segs_.end()) return out;
  auto it = mi->second.upper_bound(k);
  if (it != mi->second.begin() && std::prev(it)->second.end > k) --it;
  for (; it != mi->second.end(); ++it) out.push_back(it->second);
  return out;
}

// The final decision a board takes when the authority does not answer: NCCL's default in every gap
// and from the end of the last known segment on, forever.
std::vector<Segment> sealSegments(const Store& st, const TaskKey& t) {
  std::vector<Segment> have = st.from(t, 0), out;
  uint64_t c = 0;
  Config dflt;
  for (const Segment& s : have) {
    if (s.begin > c) out.push_back(Segment{c, s.begin, dflt, Phase::kPinned});
    c = std::max(c, s.end);
  }
  if (c != kForever) out.push_back(Segment{c, kForever, dflt, Phase::kFinal});
  return out;
}

// ---- in-process board ------------------------------------------------------------------------
namespace {

class LocalBoard : public Board {
 public:
  void serve(uint64_t comm, Decider* d) override {
    std::lock_guard<std::mutex> lk(mu_);
    deciders_[comm] = d;
    cv_.notify_all();
  }
  void unserve(uint64_t comm) override {
    std::lock_guard<std::mutex> lk(mu_);
    deciders_.erase(comm);
  }
  void publish(const TaskKey& t, const std::vector<Segment>& segs) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!store_.insert(t, segs)) st_.conflicts++;
    cv_.notify_all();
  }
  Outcome lookup(const TaskKey& t, uint64_t k, std::chrono::milliseconds deadline) override {
    Outcome o;
    auto until = std::chrono::steady_clock::now() + deadline;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (store_.find(t, k, &o.seg)) {
        o.status = Status::kOk;
        return o;
      }
      o.asked = true;
      auto it = deciders_.find(t.comm);
      if (it != deciders_.end()) {
        st_.needsSent++;
        st_.lookupsWaited++;
        std::vector<Segment> segs = it->second->decide(t, k, store_.coveredUpTo(t));
        if (!store_.insert(t, segs)) st_.conflicts++;
        if (store_.find(t, k, &o.seg)) {
          o.status = Status::kOk;
          return o;
        }
        seal(t);  // the authority failed to cover k: final default, identical for everyone
        continue;
      }
      if (cv_.wait_until(lk, until) == std::cv_status::timeout) {
        seal(t);  // no authority within the deadline
      }
    }
  }
  bool peek(const TaskKey& t, uint64_t k, Segment* out) override {
    std::lock_guard<std::mutex> lk(mu_);
    return store_.find(t, k, out);
  }
  void report(const TaskKey& t, int rank, uint64_t k, double micros) override {
    std::lock_guard<std::mutex> lk(mu_);  // unserve() takes it too: no observe() after it returned
    auto it = deciders_.find(t.comm);
    if (it != deciders_.end()) it->second->observe(t, rank, k, micros);
  }
  void reportWait(const TaskKey& t, int rank, uint64_t k, double micros) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = deciders_.find(t.comm);
    if (it != deciders_.end()) it->second->observeWait(t, rank, k, micros);
  }
  BoardStats stats() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return st_;
  }

 private:
  void seal(const TaskKey& t) {
    store_.insert(t, sealSegments(store_, t));
    st_.sealed++;
    cv_.notify_all();
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Store store_;
  std::map<uint64_t, Decider*> deciders_;
  BoardStats st_;
};

}  // namespace

std::shared_ptr<Board> makeLocalBoard() { return std::make_shared<LocalBoard>(); }

// ---- CommAgreement ---------------------------------------------------------------------------
CommAgreement::CommAgreement(std::shared_ptr<Board> board, uint64_t comm, int rank, std::chrono::milliseconds deadline)
    : board_(std::move(board)), comm_(comm), rank_(rank), deadline_(deadline) {}
CommAgreement::~CommAgreement() = default;

Outcome CommAgreement::decide(const TaskKey& task, uint64_t k) {
  std::lock_guard<std::mutex> lk(mu_);
  Outcome o;
  if (failed_) {
    o.error = error_;
    return o;
  }
  auto it = cache_.find(task);
  if (it != cache_.end() && it->second.contains(k)) {
    o.status = Status::kOk;
    o.seg = it->second;
    return o;
  }
  o = board_->lookup(task, k, deadline_);
  if (o.ok()) {
    cache_[task] = o.seg;
  } else {
    failed_ = true;
    char b[96];
    std::snprintf(b, sizeof b, " (rank %d, call %llu)", rank_, static_cast<unsigned long long>(k));
    error_ = o.error + b;
    o.error = error_;
  }
  (void)comm_;
  return o;
}

void CommAgreement::prefetch(const TaskKey& task, uint64_t k, uint64_t upTo, uint64_t beyondDefault) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) return;
    auto it = cache_.find(task);
    if (it != cache_.end() && it->second.contains(k) && it->second.contains(upTo)) return;  // held through upTo
  }
  board_->prefetch(task, k, upTo, beyondDefault);
}

// ---- fault injection (tests) ----------------------------------------------------------------
bool parseFaults(const std::string& s, const Faults& base, Faults* out, std::string* err) {
  Faults f = base;
  size_t pos = 0;
  auto bad = [&](const std::string& why) {
    *err = "AUTOCCL_COORD_FAULTS='" + s + "' " + why;
    return false;
  };
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("must be key=value items (drop, dup, delay_ms, seed) separated by commas");
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    char* end = nullptr;
    if (k == "drop" || k == "dup") {
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !(x >= 0 && x <= 1)) return bad("needs " + k + " in [0, 1]");
      (k == "drop" ? f.drop : f.dup) = x;
    } else if (k == "delay_ms") {
      long x = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || x < 0 || x > 60000) return bad("needs delay_ms in [0, 60000]");
      f.maxDelayMs = static_cast<int>(x);
    } else if (k == "seed") {
      unsigned long long x = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end || v[0] == '-') return bad("needs seed a non-negative integer");
      f.seed = x;
    } else {
      return bad("has an unknown key '" + k + "' (drop, dup, delay_ms, seed)");
    }
  }
  *out = f;
  return true;
}

}  // namespace autoccl::coord
