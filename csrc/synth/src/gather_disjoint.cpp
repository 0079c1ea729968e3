// The disjoint matching engine (TACOS, event driven, threaded): channels that share no link (meshes, tori,
// hypercubes, ...) and very large heterogeneous topologies. What it does: the comment at the top of synthesizer.cpp.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <queue>
#include <string>
#include <thread>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "gather.h"

namespace autoccl::synth::engines {

namespace {

inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The claim bits of n destinations x m chunks, zeroed. Stored in 512-bit tiles (one cache line each) of 16
// consecutive destinations x 32 consecutive chunks: destinations next to each other in rank order test the
// same chunks at about the same time (a chunk spreads to a rank's neighbours one step later), so a tile
// fetched for one destination is often still cached for the next ones. On a 40,000-NPU mesh this cuts the
// misses of these tests about 2.7x against one row per destination (simulated 1-4 MiB caches). Large
// allocations ask for transparent huge pages (fewer TLB misses on the random accesses).
class ClaimBits {
 public:
  // The bits of one destination: word(c) holds chunk c's bit at position shift | (c & 31).
  struct Row {
    std::uint64_t* base;
    unsigned shift;
    std::size_t word(std::uint32_t c) const { return static_cast<std::size_t>(c >> 5) << 3; }
    bool test(std::uint32_t c) const { return (base[word(c)] >> (shift | (c & 31))) & 1ULL; }
    void set(std::uint32_t c) const { base[word(c)] |= 1ULL << (shift | (c & 31)); }
  };
  ClaimBits(std::size_t n, std::size_t m) : tiles_per_group_((m + 31) / 32) {
    const std::size_t huge = std::size_t{2} << 20;
    std::size_t bytes = (n + 15) / 16 * tiles_per_group_ * 64;
    const std::size_t align = bytes >= 2 * huge ? huge : 64;
    bytes = std::max<std::size_t>((bytes + align - 1) / align * align, align);
    data_ = static_cast<std::uint64_t*>(std::aligned_alloc(align, bytes));
    if (!data_) throw Error("out of memory for the claim bits (" + std::to_string(bytes >> 20) + " MiB)");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == huge) madvise(data_, bytes, MADV_HUGEPAGE);  // a hint; ignored where unsupported
#endif
    std::memset(data_, 0, bytes);
  }
  ClaimBits(const ClaimBits&) = delete;
  ClaimBits& operator=(const ClaimBits&) = delete;
  ~ClaimBits() { std::free(data_); }
  Row row(std::size_t d) const {
    return {data_ + (d >> 4) * tiles_per_group_ * 8 + ((d & 15) >> 1), static_cast<unsigned>((d & 1) << 5)};
  }

 private:
  std::size_t tiles_per_group_;
  std::uint64_t* data_ = nullptr;
};

// Sense-reversing barrier: spins briefly, then yields (the machine may be shared).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    const unsigned g = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    for (int spins = 0; gen_.load(std::memory_order_acquire) == g; ++spins)
      if (spins > 2000) std::this_thread::yield();
  }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<unsigned> gen_{0};
};

// Blocks of 2^k 32-bit entries for the arrival lists, carved from slabs that ask for transparent huge pages:
// the lists are read at scattered places, and on 4 KiB pages nearly every such read would miss the TLB.
// Freed blocks are kept per size for reuse. One arena per thread (no locking).
class Arena {
 public:
  std::uint32_t* get(unsigned k) {
    auto& f = free_[k];
    if (!f.empty()) {
      std::uint32_t* b = f.back();
      f.pop_back();
      return b;
    }
    const std::size_t bytes = std::size_t{4} << k;
    if (bytes > left_) {
      const std::size_t huge = std::size_t{2} << 20;
      const std::size_t size = std::max<std::size_t>(16 * huge, (bytes + huge - 1) / huge * huge);
      void* slab = std::aligned_alloc(huge, size);
      if (!slab) throw Error("out of memory for the arrival lists");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      madvise(slab, size, MADV_HUGEPAGE);
#endif
      slabs_.emplace_back(static_cast<char*>(slab));
      cur_ = static_cast<char*>(slab);
      left_ = size;
    }
    auto* b = reinterpret_cast<std::uint32_t*>(cur_);
    cur_ += bytes;
    left_ -= bytes;
    return b;
  }
  void put(std::uint32_t* b, unsigned k) { free_[k].push_back(b); }

 private:
  struct Free {
    void operator()(char* q) const { std::free(q); }
  };
  std::vector<std::unique_ptr<char, Free>> slabs_;
  char* cur_ = nullptr;
  std::size_t left_ = 0;
  std::vector<std::uint32_t*> free_[32];
};

// Pending completions of one thread: a FIFO per cost class (transfers start at non-decreasing times, so the
// completions of one cost come in order), or one heap when there are more than 16 distinct costs.
class Completions {
 public:
  explicit Completions(std::size_t nclasses = 0) : fifo_(nclasses), head_(nclasses, 0) {}
  void push(double t, std::int32_t ch, std::uint32_t cls) {
    if (fifo_.empty()) {
      heap_.push_back({t, ch});
      std::push_heap(heap_.begin(), heap_.end(), std::greater<Ev>());
    } else {
      fifo_[cls].push_back({t, ch});
    }
  }
  double next() const {
    double t = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < fifo_.size(); ++i)
      if (head_[i] < fifo_[i].size()) t = std::min(t, fifo_[i][head_[i]].first);
    if (!heap_.empty()) t = std::min(t, heap_.front().first);
    return t;
  }
  // Move every completion at or before `limit` to `out`: class by class, each in completion order.
  void take(double limit, std::vector<std::int32_t>& out) {
    for (std::size_t i = 0; i < fifo_.size(); ++i) {
      auto& f = fifo_[i];
      std::size_t h = head_[i];
      while (h < f.size() && f[h].first <= limit) out.push_back(f[h++].second);
      if (h == f.size()) {
        f.clear();
        h = 0;
      } else if (h > 4096 && h * 2 > f.size()) {
        f.erase(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(h));
        h = 0;
      }
      head_[i] = h;
    }
    while (!heap_.empty() && heap_.front().first <= limit) {
      out.push_back(heap_.front().second);
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<Ev>());
      heap_.pop_back();
    }
  }

 private:
  using Ev = std::pair<double, std::int32_t>;
  std::vector<std::vector<Ev>> fifo_;
  std::vector<std::size_t> head_;
  std::vector<Ev> heap_;
};

// Spread chunks (chunk c starts at src[c]) to every NPU, on a topology whose channels share no link.
class Gather {
 public:
  Gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed, bool record,
         int threads, const Sink* sink, Progress progress);
  GatherResult run();

 private:
  struct Chan {                // hot state of one channel (16 bytes)
    std::uint32_t cursor = 0;  // next entry of the source's arrival list to read
    std::int32_t cur = -1;     // chunk in flight, -1: idle
    std::int32_t src = 0;
    std::uint32_t back = 0;  // tag of the entries the source received over the reverse channel (dst->src)
  };
  // A rank's arrival list: entries base, base+1, ... (the prefix every reader passed is dropped). An entry is
  // chunk | tag << shift_, tag = 1 + the index of the channel that delivered it among the rank's in-channels
  // (0: the rank's own chunk). A channel s->d skips the entries s received from d without reading d's claims.
  struct Arrivals {
    std::uint32_t* v = nullptr;  // 2^k entries (an Arena block) or none
    std::uint32_t size = 0, base = 0;
    std::uint32_t cap = 0;
    std::uint8_t k = 0;
  };
  struct Part {  // one thread's destinations [lo, hi) and everything only it writes
    int lo = 0, hi = 0;
    Completions events;
    std::vector<std::int32_t> batch, dlist;
    std::vector<std::uint32_t> perm;
    struct Warm {
      const std::uint32_t* v;
      std::uint32_t n, d;
    };
    std::vector<Warm> warm;
    std::uint32_t sink = 0;
    Arena arena;                                    // arrival lists of its ranks
    std::vector<std::vector<std::int32_t>> outbox;  // ranks of other threads to mark, per thread
    std::vector<Transfer> transfers;
    std::uint64_t count = 0;
    double time = 0;
    std::int64_t entries = 0;  // candidate entries held: arrival lists of its ranks + pools of its channels
    // published before the barrier that ends an event, read by every thread after it
    double head = 0;
    std::int64_t entries_pub = 0;
    bool failed = false;
    bool interrupted = false;  // failed because progress_.stop was set
    std::uint64_t reported = 0;  // of count, added to progress_.deliveries
    std::string error;
  };

  int n_;
  std::size_t C_, nch_;
  std::uint64_t seed_;
  bool record_;
  const Sink* sink_;
  Progress progress_;
  bool random_;
  unsigned shift_ = 31;       // entry = chunk | tag << shift_ (without tags, 31: no channel's back tag matches)
  std::uint32_t cmask_ = ~0U;  // chunk bits of an entry
  std::uint32_t claimed_bit_;  // a bit set in every claim row (entries d sent to s test it)
  // channels renumbered by destination: the channels into d are [in_off_[d], in_off_[d+1])
  std::vector<Chan> ch_;
  std::vector<std::int32_t> ch_dst_, orig_, in_off_, out_off_, out_ch_, out_rank_;  // out_*: by out_off_
  std::vector<std::uint32_t> ch_cls_;          // index into costs_
  std::vector<std::uint8_t> owner_, out_own_;  // thread of a rank / of out_rank_[k]
  std::vector<std::uint8_t> mixed_;            // ranks whose in-channels differ in cost
  std::vector<double> costs_;                  // distinct channel costs, ascending
  ClaimBits claimed_;                          // row d: chunks d holds or has been promised
  std::vector<Arrivals> arr_;
  std::vector<std::uint64_t> dirty_;  // ranks to match at the next event (bitmap)
  std::vector<std::uint64_t> rng_;    // even seeds: per-channel random stream and candidate pool
  std::vector<std::vector<std::int32_t>> pool_;
  std::vector<Part> parts_;
  std::unique_ptr<Barrier> barrier_;
  std::size_t max_entries_ = 0;

  void append(Part& p, std::size_t r, std::uint32_t entry) {
    Arrivals& a = arr_[r];
    if (a.size == a.cap) grow(p, r);
    a.v[a.size++] = entry;
    ++p.entries;
  }
  void grow(Part& p, std::size_t r);
  void warm(Part& p, std::size_t j0, std::size_t j1);
  void complete(Part& p, int t, double now);
  void match(Part& p, int t, std::uint64_t event, double now);
  void start(Part& p, std::size_t ch, double now);
  void worker(int t);
};

Gather::Gather(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed, bool record,
               int threads, const Sink* sink, Progress progress)
    : n_(t.num_npus()),
      C_(src.size()),
      nch_(t.channels().size()),
      seed_(mix64(seed + 0x632BE59BD9B4E019ULL)),
      record_(record || sink),
      sink_(sink),
      progress_(progress),
      random_((seed & 1ULL) == 0),
      claimed_bit_(static_cast<std::uint32_t>(src.size())),
      claimed_(static_cast<std::size_t>(t.num_npus()), src.size() + 1) {
  const auto n = static_cast<std::size_t>(n_);
  if (C_ >= (std::size_t{1} << 31)) throw Error("too many chunks");
  const auto& chans = t.channels();
  std::vector<std::int32_t> newid(nch_);
  in_off_.assign(n + 1, 0);
  std::size_t max_in = 1;
  for (int d = 0; d < n_; ++d) {
    for (int och : t.in_channels(d)) {
      newid[static_cast<std::size_t>(och)] = static_cast<std::int32_t>(orig_.size());
      orig_.push_back(och);
    }
    in_off_[static_cast<std::size_t>(d) + 1] = static_cast<std::int32_t>(orig_.size());
    max_in = std::max(max_in, t.in_channels(d).size());
  }
  // Entry tags take values 0 .. max_in, plus one no entry carries (channels without a reverse channel).
  unsigned cbits = 1, tbits = 1;
  while ((std::size_t{1} << cbits) < C_ + 1) ++cbits;
  while ((std::size_t{1} << tbits) < max_in + 2) ++tbits;
  const bool tags = cbits + tbits <= 32;
  const std::uint32_t no_tag = tags ? (1U << tbits) - 1 : ~0U;
  if (tags) {
    shift_ = cbits;
    cmask_ = (1U << cbits) - 1;
  }
  std::vector<double> cost(nch_);
  for (std::size_t i = 0; i < nch_; ++i) cost[i] = chans[static_cast<std::size_t>(orig_[i])].time_us(chunk_bytes);
  costs_ = cost;
  std::sort(costs_.begin(), costs_.end());
  costs_.erase(std::unique(costs_.begin(), costs_.end()), costs_.end());
  ch_.resize(nch_);
  ch_dst_.resize(nch_);
  ch_cls_.resize(nch_);
  for (std::size_t i = 0; i < nch_; ++i) {
    const auto& c = chans[static_cast<std::size_t>(orig_[i])];
    ch_[i].src = c.src;
    ch_dst_[i] = c.dst;
    ch_cls_[i] = static_cast<std::uint32_t>(std::lower_bound(costs_.begin(), costs_.end(), cost[i]) - costs_.begin());
    const int rev = t.channel_id(c.dst, c.src);
    ch_[i].back = tags && rev >= 0 ? static_cast<std::uint32_t>(newid[static_cast<std::size_t>(rev)] -
                                                                 in_off_[static_cast<std::size_t>(c.src)] + 1)
                                   : no_tag;
  }
  mixed_.assign(n, 0);
  for (std::size_t d = 0; d < n; ++d)
    for (auto i = static_cast<std::size_t>(in_off_[d]); i < static_cast<std::size_t>(in_off_[d + 1]); ++i)
      mixed_[d] = mixed_[d] || ch_cls_[i] != ch_cls_[static_cast<std::size_t>(in_off_[d])];
  out_off_.assign(n + 1, 0);
  for (int r = 0; r < n_; ++r) {
    for (int och : t.out_channels(r)) {
      out_ch_.push_back(newid[static_cast<std::size_t>(och)]);
      out_rank_.push_back(chans[static_cast<std::size_t>(och)].dst);
    }
    out_off_[static_cast<std::size_t>(r) + 1] = static_cast<std::int32_t>(out_ch_.size());
  }
  const std::size_t nclasses = costs_.size() <= 16 ? costs_.size() : 0;

  // Threads: contiguous rank ranges of whole 64-rank words (the dirty bitmap), balanced by the number of
  // channels into them; topologies under 1024 NPUs run on one thread.
  int T = std::max(1, std::min(threads, 64));
  if (n_ < 1024) T = 1;
  T = std::min(T, std::max(1, n_ / 256));
  parts_.resize(static_cast<std::size_t>(T));
  owner_.assign(n, 0);
  for (int i = 0, r = 0; i < T; ++i) {
    Part& p = parts_[static_cast<std::size_t>(i)];
    p.lo = r;
    const double want = static_cast<double>(nch_) * (i + 1) / T;
    while (r < n_ && (i == T - 1 || in_off_[static_cast<std::size_t>(r)] < want || r % 64 != 0)) ++r;
    p.hi = r;
    for (int x = p.lo; x < p.hi; ++x) owner_[static_cast<std::size_t>(x)] = static_cast<std::uint8_t>(i);
    p.events = Completions(nclasses);
    p.outbox.resize(static_cast<std::size_t>(T));
    p.perm.resize(max_in);
  }
  out_own_.resize(out_rank_.size());
  for (std::size_t k = 0; k < out_rank_.size(); ++k) out_own_[k] = owner_[static_cast<std::size_t>(out_rank_[k])];
  if (T > 1) barrier_ = std::make_unique<Barrier>(T);

  arr_.resize(n);
  dirty_.assign((n + 63) / 64, 0);
  if (random_) {
    pool_.resize(nch_);
    rng_.resize(nch_);
    for (std::size_t i = 0; i < nch_; ++i)
      rng_[i] = mix64(seed_ + 0x9E3779B97F4A7C15ULL * (static_cast<std::uint64_t>(orig_[i]) + 1));
  }
  // Every chunk starts at its source: claimed there, in its arrival list; its out-neighbours have work.
  for (std::size_t r = 0; r < n; ++r) claimed_.row(r).set(claimed_bit_);
  for (std::size_t c = 0; c < C_; ++c) {
    const auto r = static_cast<std::size_t>(src[c]);
    const auto cu = static_cast<std::uint32_t>(c);
    claimed_.row(r).set(cu);
    append(parts_[owner_[r]], r, cu);
  }
  for (std::size_t r = 0; r < n; ++r)
    if (arr_[r].size)
      for (std::int32_t k = out_off_[r]; k < out_off_[r + 1]; ++k) {
        const auto d = static_cast<std::size_t>(out_rank_[static_cast<std::size_t>(k)]);
        dirty_[d >> 6] |= 1ULL << (d & 63);
      }
  for (const auto& p : parts_) max_entries_ += static_cast<std::size_t>(p.entries);
}

// Rank r's arrival list is full: drop the prefix every out-channel has read, and move to a block twice as
// large if that frees less than half.
void Gather::grow(Part& p, std::size_t r) {
  Arrivals& a = arr_[r];
  if (a.size >= 32) {
    std::uint32_t m = a.base + a.size;
    for (std::int32_t k = out_off_[r]; k < out_off_[r + 1]; ++k)
      m = std::min(m, ch_[static_cast<std::size_t>(out_ch_[static_cast<std::size_t>(k)])].cursor);
    const std::uint32_t drop = m - a.base;
    if (drop * 2 >= a.size) {
      std::memmove(a.v, a.v + drop, static_cast<std::size_t>(a.size - drop) * 4);
      a.size -= drop;
      a.base = m;
      p.entries -= static_cast<std::int64_t>(drop);
      return;
    }
  }
  const unsigned k = a.v ? a.k + 1U : 4U;
  if (k >= 32) throw Error("arrival list too long");
  std::uint32_t* b = p.arena.get(k);
  if (a.v) {
    std::memcpy(b, a.v, static_cast<std::size_t>(a.size) * 4);
    p.arena.put(a.v, a.k);
  }
  a.v = b;
  a.k = static_cast<std::uint8_t>(k);
  a.cap = 1U << k;
}

// Thread t's completions at `now`: the channel is free again and its chunk joins the destination's arrival
// list (completions at one destination in the order Completions::take gives); the destination and its
// out-neighbours have work at this event.
void Gather::complete(Part& p, int t, double now) {
  for (auto& ob : p.outbox) ob.clear();
  p.batch.clear();
  p.events.take(now + 1e-9 * std::max(1.0, now), p.batch);
  const std::size_t nb = p.batch.size();
  const std::int32_t* batch = p.batch.data();
  for (std::size_t i = 0; i < nb; ++i) {
    if (i + 8 < nb) {  // the arrival-list tail a later completion writes
      const Arrivals& a = arr_[static_cast<std::size_t>(ch_dst_[static_cast<std::size_t>(batch[i + 8])])];
      __builtin_prefetch(a.v + a.size, 1);
    }
    const auto ch = static_cast<std::size_t>(batch[i]);
    Chan& c = ch_[ch];
    const auto chunk = static_cast<std::uint32_t>(c.cur);
    c.cur = -1;
    const auto d = static_cast<std::size_t>(ch_dst_[ch]);
    const auto tag = static_cast<std::uint32_t>(ch) - static_cast<std::uint32_t>(in_off_[d]) + 1;
    append(p, d, shift_ < 31 ? chunk | tag << shift_ : chunk);
    dirty_[d >> 6] |= 1ULL << (d & 63);
    const auto k1 = static_cast<std::size_t>(out_off_[d + 1]);
    for (auto k = static_cast<std::size_t>(out_off_[d]); k < k1; ++k) {
      const auto r = static_cast<std::size_t>(out_rank_[k]);
      if (out_own_[k] == t)
        dirty_[r >> 6] |= 1ULL << (r & 63);
      else
        p.outbox[out_own_[k]].push_back(out_rank_[k]);
    }
  }
  p.count += nb;
}

// Load what matching destinations dlist[j0, j1) will read first, in two tight loops whose cache misses overlap
// (the matching itself does too much work between its misses for the CPU to overlap them): the entries at
// the free channels' cursors, then the claim words of up to 4 of those entries per channel.
void Gather::warm(Part& p, std::size_t j0, std::size_t j1) {
  std::uint32_t acc = 0;
  p.warm.clear();
  for (std::size_t j = j0; j < j1; ++j) {
    const auto d = static_cast<std::uint32_t>(p.dlist[j]);
    for (auto ch = static_cast<std::size_t>(in_off_[d]); ch < static_cast<std::size_t>(in_off_[d + 1]); ++ch) {
      const Chan& c = ch_[ch];
      if (c.cur >= 0) continue;
      const Arrivals& a = arr_[static_cast<std::size_t>(c.src)];
      const std::uint32_t i = c.cursor - a.base;
      if (i >= a.size) continue;
      acc += a.v[i];
      p.warm.push_back({a.v + i, std::min(a.size - i, 4U), d});
    }
  }
  for (const auto& w : p.warm) {
    const ClaimBits::Row row = claimed_.row(w.d);
    for (std::uint32_t x = 0; x < w.n; ++x) acc += static_cast<std::uint32_t>(row.base[row.word(w.v[x] & cmask_)]);
  }
  p.sink += acc;  // keeps the loads
}

// Give free channel ch its next candidate, if any, and start the transfer.
void Gather::start(Part& p, std::size_t ch, double now) {
  Chan& c = ch_[ch];
  const Arrivals& a = arr_[static_cast<std::size_t>(c.src)];
  std::uint32_t i = c.cursor - a.base;
  const std::uint32_t end = a.size;
  if (i >= end && !random_) return;
  const auto d = static_cast<std::size_t>(ch_dst_[ch]);
  const ClaimBits::Row row = claimed_.row(d);
  const std::uint32_t* v = a.v;
  std::int64_t pick = -1;
  if (!random_) {  // the oldest candidate
    // Blocks of up to 4 entries without a branch per entry: whether an entry is free is a coin flip, so
    // per-entry branches would mispredict; here the claim words of a block also load in parallel. An entry
    // that came from d tests claimed_bit_ instead of its chunk.
    const std::uint32_t back = c.back, sh = shift_, cm = cmask_, cb = claimed_bit_;
    while (i < end) {
      const std::uint32_t m = std::min(end - i, 4U);
      unsigned ok = 0;
      for (std::uint32_t k = 0; k < m; ++k) {
        const std::uint32_t e = v[i + k];
        const std::uint32_t sel = 0U - static_cast<std::uint32_t>((e >> sh) == back);
        const std::uint32_t x = ((e & cm) & ~sel) | (cb & sel);
        ok |= static_cast<unsigned>(row.test(x) ^ 1U) << k;
      }
      if (ok) {
        const auto k = static_cast<std::uint32_t>(__builtin_ctz(ok));
        pick = v[i + k] & cm;
        i += k + 1;
        break;
      }
      i += m;
    }
    c.cursor = a.base + i;
  } else {  // a random candidate: new entries join the channel's pool first
    auto& pool = pool_[ch];
    auto free_at = [row](std::uint32_t x) { return !row.test(x); };
    p.entries -= static_cast<std::int64_t>(pool.size());
    for (; i < end; ++i)
      if (free_at(v[i] & cmask_)) pool.push_back(static_cast<std::int32_t>(v[i] & cmask_));
    c.cursor = a.base + end;
    std::uint64_t& z = rng_[ch];
    while (!pool.empty()) {
      z += 0x9E3779B97F4A7C15ULL;
      const std::size_t j = static_cast<std::size_t>(((mix64(z) >> 32) * pool.size()) >> 32);
      const std::int32_t x = pool[j];
      pool[j] = pool.back();
      pool.pop_back();
      if (free_at(static_cast<std::uint32_t>(x))) {
        pick = x;
        break;
      }
    }
    p.entries += static_cast<std::int64_t>(pool.size());
  }
  if (pick < 0) return;
  const auto u = static_cast<std::uint32_t>(pick);
  row.set(u);
  c.cur = static_cast<std::int32_t>(pick);
  const std::uint32_t cls = ch_cls_[ch];
  const double end_t = now + costs_[cls];
  p.time = std::max(p.time, end_t);
  if (record_) {
    Transfer tr;
    tr.chunk = c.cur;
    tr.src = c.src;
    tr.dst = static_cast<std::int32_t>(d);
    tr.start = now;
    tr.end = end_t;
    tr.route = orig_[ch];
    p.transfers.push_back(tr);
  }
  p.events.push(end_t, static_cast<std::int32_t>(ch), cls);
}

// Match thread t's dirty destinations in rank order. At one destination its free channels take their
// candidates in a random order drawn from (seed, event, destination), lowest cost first.
void Gather::match(Part& p, int t, std::uint64_t event, double now) {
  for (auto& q : parts_)
    for (std::int32_t r : q.outbox[static_cast<std::size_t>(t)]) {
      const auto ru = static_cast<std::size_t>(r);
      dirty_[ru >> 6] |= 1ULL << (ru & 63);
    }
  p.dlist.clear();
  const auto w1 = (static_cast<std::size_t>(p.hi) + 63) / 64;
  for (std::size_t w = static_cast<std::size_t>(p.lo) / 64; w < w1; ++w) {
    for (std::uint64_t bits = dirty_[w]; bits; bits &= bits - 1)
      p.dlist.push_back(static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))));
    dirty_[w] = 0;
  }
  const std::size_t nd = p.dlist.size();
  const std::uint64_t ekey = mix64(seed_ ^ (event * 0x9E3779B97F4A7C15ULL));
  constexpr std::size_t kGroup = 32;
  for (std::size_t j = 0; j < nd; ++j) {
    if (j % kGroup == 0) warm(p, j, std::min(nd, j + kGroup));
    const auto d = static_cast<std::size_t>(p.dlist[j]);
    const auto lo = static_cast<std::size_t>(in_off_[d]);
    const std::size_t k = static_cast<std::size_t>(in_off_[d + 1]) - lo;
    if (k == 1) {
      if (ch_[lo].cur < 0) start(p, lo, now);
      continue;
    }
    // Fisher-Yates with draws from a 64-bit LCG seeded by (seed, event, d)
    std::uint32_t* ord = p.perm.data();
    for (std::size_t i = 0; i < k; ++i) ord[i] = static_cast<std::uint32_t>(i);
    std::uint64_t z = mix64(ekey + d);
    for (std::size_t i = k - 1; i > 0; --i) {
      std::swap(ord[i], ord[((z >> 32) * (i + 1)) >> 32]);
      z = z * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    if (mixed_[d])
      std::stable_sort(ord, ord + k, [&](std::uint32_t x, std::uint32_t y) { return ch_cls_[lo + x] < ch_cls_[lo + y]; });
    for (std::size_t i = 0; i < k; ++i)
      if (ch_[lo + ord[i]].cur < 0) start(p, lo + ord[i], now);
  }
}

// One thread's event loop. All threads see the same event times: the next one is the earliest head over all
// threads' queues, published before the barrier that ends each event.
void Gather::worker(int t) {
  Part& p = parts_[static_cast<std::size_t>(t)];
  const double inf = std::numeric_limits<double>::infinity();
  const bool many = parts_.size() > 1;
  auto guarded = [&p](auto&& f) {
    if (p.failed) return;
    try {
      f();
    } catch (const std::exception& e) {
      p.failed = true;
      p.error = e.what();
    }
  };
  auto publish = [&]() {
    // A stop is a failure every thread sees after the barrier below, so all leave the loop at one event.
    if (progress_.stop && !p.failed && progress_.stop->load(std::memory_order_relaxed)) p.failed = p.interrupted = true;
    if (progress_.deliveries && p.count - p.reported >= Progress::kDeliveriesStep) {
      progress_.deliveries->fetch_add(p.count - p.reported, std::memory_order_relaxed);
      p.reported = p.count;
    }
    p.head = p.events.next();
    p.entries_pub = p.entries;
    if (many) barrier_->wait();
  };
  std::uint64_t event = 0;
  guarded([&] { match(p, t, event, 0.0); });
  publish();
  for (;;) {
    // Every thread has matched the last event (the barrier in publish), and none adds transfers before the
    // next barrier: thread 0 hands them to the sink, in rank order of their destinations.
    if (t == 0 && sink_)
      for (auto& q : parts_)
        if (!q.transfers.empty()) guarded([&] { (*sink_)(q.transfers); });
    double now = inf;
    bool failed = false;
    std::int64_t entries = 0;
    for (const auto& q : parts_) {
      now = std::min(now, q.head);
      failed = failed || q.failed;
      entries += q.entries_pub;
    }
    if (failed || now == inf) break;
    if (t == 0) max_entries_ = std::max(max_entries_, static_cast<std::size_t>(std::max<std::int64_t>(entries, 0)));
    ++event;
    guarded([&] { complete(p, t, now); });
    if (many) barrier_->wait();
    guarded([&] { match(p, t, event, now); });
    publish();
  }
}

GatherResult Gather::run() {
  const int T = static_cast<int>(parts_.size());
  if (T == 1) {
    worker(0);
  } else {
    std::vector<std::thread> pool;
    for (int i = 1; i < T; ++i) pool.emplace_back([this, i] { worker(i); });
    worker(0);
    for (auto& th : pool) th.join();
  }
  GatherResult res;
  for (auto& p : parts_)
    if (p.interrupted) throw Interrupted();
  for (auto& p : parts_) {
    if (p.failed) throw Error(p.error);
    if (progress_.deliveries) progress_.deliveries->fetch_add(p.count - p.reported, std::memory_order_relaxed);
    res.count += p.count;
    res.time = std::max(res.time, p.time);
    if (record_) res.transfers.insert(res.transfers.end(), p.transfers.begin(), p.transfers.end());
  }
  res.max_queue = max_entries_;
  return res;
}

}  // namespace

GatherResult gather_disjoint(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed,
                             bool record, int threads, const Sink* sink, Progress progress) {
  return Gather(t, src, chunk_bytes, seed, record, threads, sink, progress).run();
}

}  // namespace autoccl::synth::engines
