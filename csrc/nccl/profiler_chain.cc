// Profiler chaining: see profiler_chain.h.
#include "nccl/profiler_chain.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "nccl/plugin.h"

namespace autoccl::shim::chain {
namespace {

constexpr int kTypeBits = 16;  // ProfileEvent bits 0..15 (v7)

// The event types a plugin of `version` knows (v5: bits 0..11, v6: ..14 with copy-engine events, v7: ..15 with
// kernel phases): a chained plugin never asks for, nor is given, any other.
uint64_t knownEvents(int version) { return (uint64_t{1} << (version >= 7 ? 16 : version == 6 ? 15 : 12)) - 1; }
// The mask a chained plugin of `version` gets: what it asked for of the types it knows, and KernelCh where it asks
// for kernel phases, their parents (what NCCL adds itself for a plugin it loads).
int chainedMask(int asked, int version) {
  int mask = asked & static_cast<int>(knownEvents(version));
  if (mask & static_cast<int>(ncclabi::kEvKernelPhase)) mask |= static_cast<int>(ncclabi::kEvKernelCh);
  return mask;
}

struct Chained {
  void* handle = nullptr;
  ncclabi::ProfilerV7 table{};  // a v5 or v6 table copied as v7: the same layout, each reads its own prefix
  int version = 0;
  std::string name;
};
static_assert(sizeof(ncclabi::ProfilerV5) == sizeof(ncclabi::ProfilerV7), "profiler tables of one layout");
static_assert(sizeof(ncclabi::ProfilerV6) == sizeof(ncclabi::ProfilerV7), "profiler tables of one layout");

Own gOwn{};
Chained gChained;
std::atomic<bool> gActive{false};
std::once_flag gSetUpOnce;
// The mask the chained plugin writes at its init (NCCL's is one process-global int too).
int gTheirMask = 0;

// Per event type: starts NCCL gave us, starts forwarded to the chained plugin, and the same for stops and
// state records (process totals, written to the trace at each finalize).
struct Counts {
  std::array<std::atomic<uint64_t>, kTypeBits> starts{}, forwardedStarts{}, stops{}, forwardedStops{}, states{},
      forwardedStates{};
  std::atomic<uint64_t> stale{0}, tableFull{0};
};
Counts gCounts;

int typeIndex(uint64_t type) {
  for (int i = 0; i < kTypeBits; ++i)
    if (type == (uint64_t{1} << i)) return i;
  return -1;
}
void bump(std::array<std::atomic<uint64_t>, kTypeBits>& a, int i) {
  if (i >= 0) a[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------- pair handles
struct Slot {
  void* ours = nullptr;
  void* theirs = nullptr;
  uint32_t gen = 0;
  int type = -1;          // typeIndex of the event
  bool live = false;      // started, not yet stopped
  bool oursTook = false;  // our profiler was given the event
};
struct Pair {
  void* ours = nullptr;
  void* theirs = nullptr;
  int type = -1;
  bool oursTook = false;
};

constexpr uint32_t kSlotBits = 16;
constexpr size_t kSlots = size_t{1} << kSlotBits;
constexpr size_t kStripes = 64;

class HandleTable {
 public:
  // A fresh handle for (ours, theirs); nullptr when every slot is live (counted).
  void* make(const Pair& p) {
    for (int tries = 0; tries < 256; ++tries) {
      const size_t i = cursor_.fetch_add(1, std::memory_order_relaxed) & (kSlots - 1);
      std::lock_guard<std::mutex> lock(stripes_[i % kStripes]);
      Slot& s = slots_[i];
      if (s.live) continue;
      s.gen = (s.gen + 1) & 0x7fffffffu;
      s.ours = p.ours;
      s.theirs = p.theirs;
      s.type = p.type;
      s.oursTook = p.oursTook;
      s.live = true;
      return encode(i, s.gen);
    }
    gCounts.tableFull.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  // The pair behind `h`; false when `h` is none of ours or its slot was reused since (counted as stale).
  bool find(void* h, Pair* out, bool stop) {
    size_t i = 0;
    uint32_t gen = 0;
    if (!decode(h, &i, &gen)) return false;
    std::lock_guard<std::mutex> lock(stripes_[i % kStripes]);
    Slot& s = slots_[i];
    if (s.gen != gen) {
      gCounts.stale.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    *out = Pair{s.ours, s.theirs, s.type, s.oursTook};
    if (stop) s.live = false;
    return true;
  }

 private:
  // Not a pointer: bit 0 set (no object is at an odd address), slot index above it, generation above that.
  static void* encode(size_t i, uint32_t gen) {
    return reinterpret_cast<void*>((static_cast<uintptr_t>(gen) << (kSlotBits + 1)) | (i << 1) | 1u);
  }
  static bool decode(void* h, size_t* i, uint32_t* gen) {
    const auto v = reinterpret_cast<uintptr_t>(h);
    if (!(v & 1u)) return false;
    *i = (v >> 1) & (kSlots - 1);
    *gen = static_cast<uint32_t>(v >> (kSlotBits + 1));
    return true;
  }
  std::atomic<size_t> cursor_{0};
  std::array<std::mutex, kStripes> stripes_;
  std::unique_ptr<Slot[]> slots_{new Slot[kSlots]};
};

HandleTable& handles() {
  static HandleTable* t = new HandleTable();  // never destroyed: NCCL threads may call in during exit
  return *t;
}

struct ChainCtx {
  void* ours = nullptr;
  void* theirs = nullptr;
  bool theirsOk = false;
  uint64_t commId = 0;
  int rank = -1;
};

void warn(ncclabi::Logger logger, const std::string& msg) {
  if (logger)
    logger(ncclabi::kLogWarn, ncclabi::kLogSubsysInit | ncclabi::kLogSubsysEnv, __FILE__, __LINE__, "%s", msg.c_str());
  else
    std::fprintf(stderr, "autoccl WARN %s\n", msg.c_str());
}

bool load(const char* path, ncclabi::Logger logger) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    warn(logger, std::string("autoccl: AUTOCCL_PROFILER_CHAIN=") + path + " cannot be loaded (" + (e ? e : "?") +
                     "); running without the chained profiler");
    return false;
  }
  const void* sym = nullptr;
  int version = 0;
  for (int v : {7, 6, 5}) {  // the newest it exports, as NCCL picks
    sym = dlsym(h, ("ncclProfiler_v" + std::to_string(v)).c_str());
    if (sym) {
      version = v;
      break;
    }
  }
  if (!sym) {
    dlclose(h);
    warn(logger, std::string("autoccl: AUTOCCL_PROFILER_CHAIN=") + path +
                     " exports no profiler interface autoccl supports (ncclProfiler_v7, v6 or v5); running "
                     "without the chained profiler");
    return false;
  }
  // autoccl itself (this library, which dlopen hands back, or another copy of it): its init would chain to
  // itself again, each event forwarded to itself without end.
  Dl_info self{}, found{};
  const bool sameObject = dladdr(reinterpret_cast<const void*>(&gOwn), &self) != 0 && dladdr(sym, &found) != 0 &&
                          self.dli_fbase == found.dli_fbase;
  const char* foundName = static_cast<const ncclabi::ProfilerV5*>(sym)->name;
  if (sameObject || (foundName && std::strcmp(foundName, kPluginName) == 0)) {
    dlclose(h);
    warn(logger, std::string("autoccl: AUTOCCL_PROFILER_CHAIN=") + path +
                     " is autoccl's own library, not another profiler; running without a chained profiler");
    return false;
  }
  std::memcpy(&gChained.table, sym, sizeof(gChained.table));
  if (!gChained.table.init || !gChained.table.startEvent || !gChained.table.stopEvent ||
      !gChained.table.recordEventState || !gChained.table.finalize) {
    dlclose(h);
    warn(logger, std::string("autoccl: AUTOCCL_PROFILER_CHAIN=") + path +
                     " has an incomplete profiler table; running without the chained profiler");
    return false;
  }
  gChained.handle = h;  // kept loaded for the process's life
  gChained.version = version;
  gChained.name = gChained.table.name ? gChained.table.name : "";
  if (logger)
    logger(ncclabi::kLogInfo, ncclabi::kLogSubsysInit, __FILE__, __LINE__,
           "autoccl: chaining profiler '%s' (ncclProfiler_v%d) from %s", gChained.name.c_str(), version, path);
  return true;
}

// Each side's own handle for a parent handle NCCL gives back (null stays null; a stale one becomes null).
void translate(void* h, void** ours, void** theirs, bool* oursTook) {
  Pair p;
  if (h && handles().find(h, &p, false)) {
    *ours = p.ours;
    *theirs = p.theirs;
    *oursTook = p.oursTook;
  } else {
    *ours = nullptr;
    *theirs = nullptr;
    *oursTook = false;
  }
}

void appendCounts(std::string* out, const char* key, const std::array<std::atomic<uint64_t>, kTypeBits>& a) {
  *out += ",\"";
  *out += key;
  *out += "\":[";
  for (int i = 0; i < kTypeBits; ++i) {
    if (i) *out += ',';
    *out += std::to_string(a[static_cast<size_t>(i)].load(std::memory_order_relaxed));
  }
  *out += ']';
}

void traceCounts(const ChainCtx& c) {
  engine::TraceWriter& tw = runtime().trace();
  if (!tw.enabled()) return;
  std::string line = "{\"ev\":\"profiler_chain\",\"comm\":\"" + engine::commHex(c.commId) +
                     "\",\"rank\":" + std::to_string(c.rank) + ",\"chained\":\"" + gChained.name +
                     "\",\"chained_version\":" + std::to_string(gChained.version);
  appendCounts(&line, "starts", gCounts.starts);
  appendCounts(&line, "forwarded_starts", gCounts.forwardedStarts);
  appendCounts(&line, "stops", gCounts.stops);
  appendCounts(&line, "forwarded_stops", gCounts.forwardedStops);
  appendCounts(&line, "states", gCounts.states);
  appendCounts(&line, "forwarded_states", gCounts.forwardedStates);
  line += ",\"stale\":" + std::to_string(gCounts.stale.load()) +
          ",\"table_full\":" + std::to_string(gCounts.tableFull.load()) + "}";
  tw.writeLine(line.data(), line.size());
}

}  // namespace

bool setUp(const char* path, const Own& own, ncclabi::Logger logger) {
  std::call_once(gSetUpOnce, [&] {
    if (!path || !*path) return;
    gOwn = own;
    if (load(path, logger)) gActive.store(true, std::memory_order_release);
  });
  return gActive.load(std::memory_order_acquire);
}

bool active() { return gActive.load(std::memory_order_acquire); }

ncclabi::Result init(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                     int nRanks, int rank, ncclabi::Logger logger) {
  if (!context) return ncclabi::kSuccess;
  *context = nullptr;
  auto* c = new ChainCtx();
  c->commId = commId;
  c->rank = rank;
  gOwn.init(&c->ours, commId, eActivationMask, commName, nNodes, nRanks, rank, logger);
  // The chained plugin's failure stays its own: NCCL would only disable profiling for the communicator.
  int theirs = 0;
  const ncclabi::Result r =
      gChained.table.init(&c->theirs, commId, &theirs, commName, nNodes, nRanks, rank, logger);
  c->theirsOk = r == ncclabi::kSuccess;
  if (c->theirsOk) {
    theirs = chainedMask(theirs, gChained.version);
    __atomic_fetch_or(&gTheirMask, theirs, __ATOMIC_RELAXED);
  } else {
    c->theirs = nullptr;
    warn(logger, "autoccl: the chained profiler '" + gChained.name + "' failed its init (error " + std::to_string(r) +
                     "); it gets no events of this communicator");
  }
  // After ours: our init may have written the mask without the chained plugin's bits.
  if (eActivationMask) runtime().mask().addBits(eActivationMask, c->theirsOk ? theirs : 0);
  *context = c;
  return ncclabi::kSuccess;
}

ncclabi::Result startEvent(void* context, void** eHandle, const void* ncclDescr, size_t descrSize) {
  if (!eHandle) return ncclabi::kSuccess;
  *eHandle = nullptr;
  auto* c = static_cast<ChainCtx*>(context);
  if (!c || !ncclDescr) return ncclabi::kSuccess;
  // An older NCCL's descriptor is a prefix of a v7 one (same offsets): the rest stays zero (an untagged call).
  ncclabi::EventDescrV7 in{};
  std::memcpy(&in, ncclDescr, std::min(descrSize, sizeof in));
  const ncclabi::EventDescrV7* descr = &in;
  const int ti = typeIndex(descr->type);
  bump(gCounts.starts, ti);

  void* parentOurs = nullptr;
  void* parentTheirs = nullptr;
  bool parentOursTook = false;
  translate(descr->parentObj, &parentOurs, &parentTheirs, &parentOursTook);
  // Our own: a top-level event while our bits want it; a child (it has a parent) when we took the parent.
  const bool child = descr->parentObj != nullptr &&
                     (descr->type & (ncclabi::kEvKernelCh | ncclabi::kEvProxyOp | ncclabi::kEvProxyStep |
                                     ncclabi::kEvNetPlugin | ncclabi::kEvProxyCtrl)) != 0;
  const bool toOurs = c->ours && (child ? parentOursTook && (gOwn.mayWant(c->ours) & descr->type)
                                        : (gOwn.wants(c->ours) & descr->type) != 0);
  const int theirMask = __atomic_load_n(&gTheirMask, __ATOMIC_RELAXED);
  const bool toTheirs = c->theirsOk && (static_cast<uint64_t>(theirMask) & descr->type) != 0 &&
                        (descr->type & ~knownEvents(gChained.version)) == 0;

  Pair p;
  p.type = ti;
  ncclabi::EventDescrV7 d;
  const bool isColl = descr->type == ncclabi::kEvColl;
  const bool isP2p = descr->type == ncclabi::kEvP2p;
  void* groupOurs = nullptr;
  void* groupTheirs = nullptr;
  if (isColl || isP2p) {
    bool took = false;
    translate(isColl ? descr->coll.parentGroup : descr->p2p.parentGroup, &groupOurs, &groupTheirs, &took);
  }
  if (toOurs) {
    std::memcpy(&d, descr, sizeof d);
    d.parentObj = parentOurs;
    if (isColl) d.coll.parentGroup = groupOurs;
    if (isP2p) d.p2p.parentGroup = groupOurs;
    gOwn.startEvent(c->ours, &p.ours, &d);
    p.oursTook = true;
  }
  if (toTheirs) {
    std::memcpy(&d, descr, sizeof d);
    d.parentObj = parentTheirs;
    if (isColl) d.coll.parentGroup = groupTheirs;
    if (isP2p) d.p2p.parentGroup = groupTheirs;
    gChained.table.startEvent(c->theirs, &p.theirs, &d);
    bump(gCounts.forwardedStarts, ti);
  }
  if (p.ours || p.theirs || p.oursTook) *eHandle = handles().make(p);
  return ncclabi::kSuccess;
}

ncclabi::Result stopEvent(void* eHandle) {
  Pair p;
  if (!handles().find(eHandle, &p, true)) return ncclabi::kSuccess;
  bump(gCounts.stops, p.type);
  if (p.ours) gOwn.stopEvent(p.ours);
  if (p.theirs) {
    gChained.table.stopEvent(p.theirs);
    bump(gCounts.forwardedStops, p.type);
  }
  return ncclabi::kSuccess;
}

ncclabi::Result recordEventState(void* eHandle, ncclabi::ProfileState state, ncclabi::EventStateArgsV7* args) {
  Pair p;
  if (!handles().find(eHandle, &p, false)) return ncclabi::kSuccess;
  bump(gCounts.states, p.type);
  if (p.ours) gOwn.recordEventState(p.ours, state, args);
  if (p.theirs) {
    ncclabi::EventStateArgsV7 copy{};  // each side may keep its own reading of the arguments
    if (args) copy = *args;
    gChained.table.recordEventState(p.theirs, state, args ? &copy : nullptr);
    bump(gCounts.forwardedStates, p.type);
  }
  return ncclabi::kSuccess;
}

ncclabi::Result finalize(void* context) {
  auto* c = static_cast<ChainCtx*>(context);
  if (!c) return ncclabi::kSuccess;
  if (c->ours) gOwn.finalize(c->ours);
  if (c->theirsOk) gChained.table.finalize(c->theirs);
  traceCounts(*c);
  delete c;
  return ncclabi::kSuccess;
}

}  // namespace autoccl::shim::chain
