#include "fake_cuda.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <memory>
#include <utility>
#include <vector>

namespace emu {

namespace {
constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;     // CUDA_ERROR_INVALID_VALUE
constexpr int kNotInitialized = 3;   // CUDA_ERROR_NOT_INITIALIZED
constexpr int kNotReady = 600;       // CUDA_ERROR_NOT_READY
constexpr size_t kKeptKernels = 1 << 16;  // resolved kernel times a stream keeps (events refer to recent ones)

std::atomic<bool> gEnabled{false};
std::atomic<uint64_t> gLagNs{0};  // fakeSetKernelLag
uint64_t wallNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
std::mutex gMu;  // every stream and event
thread_local void* tCurrent = nullptr;
}  // namespace

struct FakeStream;
struct FakeEvent;
namespace {
// Streams and events live as long as the process (the plugin's clock may query them while the emulator exits);
// the registry keeps them reachable, so a leak checker tells them apart from real leaks. Never destroyed: a
// static destructor would free them under a plugin thread that still reads them.
struct Registry {
  std::vector<std::unique_ptr<FakeStream>> streams;
  std::vector<std::unique_ptr<FakeEvent>> events;
};
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}
}  // namespace

struct FakeStream {
  void* ctx = nullptr;
  bool capturing = false;
  uint64_t next = 0;       // index of the next kernel launched
  uint64_t current = 0;    // kernel being launched
  bool after = false;      // its launch call has returned
  struct Ran {
    uint64_t reached = 0, ended = 0;  // simulated: the stream reached the kernel, the kernel ended
    uint64_t readyWallNs = 0;         // when its events complete (host clock; fakeSetKernelLag)
  };
  std::map<uint64_t, Ran> times;  // kernel -> its times
};

struct FakeEvent {
  FakeStream* stream = nullptr;
  uint64_t kernel = 0;
  bool after = false;
};

void fakeCudaEnable() { gEnabled.store(true); }
void fakeSetKernelLag(uint64_t us) { gLagNs.store(us * 1000); }
bool fakeCudaEnabled() { return gEnabled.load(); }

FakeStream* fakeStreamNew(void* ctx) {
  auto owned = std::make_unique<FakeStream>();
  owned->ctx = ctx;
  std::lock_guard<std::mutex> lk(gMu);
  registry().streams.push_back(std::move(owned));
  return registry().streams.back().get();
}

void fakeStreamCapturing(FakeStream* s, bool capturing) {
  std::lock_guard<std::mutex> lk(gMu);
  s->capturing = capturing;
}

uint64_t fakeStreamBeginLaunch(FakeStream* s) {
  std::lock_guard<std::mutex> lk(gMu);
  s->current = s->next++;
  s->after = false;
  return s->current;
}

void fakeStreamLaunched(FakeStream* s) {
  std::lock_guard<std::mutex> lk(gMu);
  s->after = true;
}

void fakeStreamResolve(FakeStream* s, uint64_t kernel, uint64_t streamStartNs, uint64_t stopNs) {
  std::lock_guard<std::mutex> lk(gMu);
  s->times[kernel] = {streamStartNs, stopNs, wallNs() + gLagNs.load()};
  while (s->times.size() > kKeptKernels) s->times.erase(s->times.begin());
}

void fakeSetCurrentCtx(void* ctx) { tCurrent = ctx; }

namespace {
// An event's time, if its kernel has run.
bool timeOf(const FakeEvent* e, uint64_t* ns) {
  if (!e || !e->stream) return false;
  auto it = e->stream->times.find(e->kernel);
  if (it == e->stream->times.end() || wallNs() < it->second.readyWallNs) return false;
  *ns = e->after ? it->second.ended : it->second.reached;
  return true;
}
int elapsed(float* ms, void* a, void* b) {
  if (!gEnabled.load()) return kNotInitialized;
  if (!ms || !a || !b) return kInvalidValue;
  std::lock_guard<std::mutex> lk(gMu);
  uint64_t ta = 0, tb = 0;
  if (!timeOf(static_cast<FakeEvent*>(a), &ta) || !timeOf(static_cast<FakeEvent*>(b), &tb)) return kNotReady;
  *ms = static_cast<float>((static_cast<double>(tb) - static_cast<double>(ta)) / 1e6);
  return kSuccess;
}
}  // namespace

}  // namespace emu

// The driver's entry points, C linkage, exported by the executable (ENABLE_EXPORTS).
extern "C" {
int cuEventCreate(void** ev, unsigned /*flags*/) {
  if (!emu::gEnabled.load()) return emu::kNotInitialized;
  if (!ev) return emu::kInvalidValue;
  auto owned = std::make_unique<emu::FakeEvent>();
  std::lock_guard<std::mutex> lk(emu::gMu);
  emu::registry().events.push_back(std::move(owned));
  *ev = emu::registry().events.back().get();  // the plugin keeps its events for the life of the process
  return emu::kSuccess;
}
int cuEventRecord(void* ev, void* stream) {
  if (!emu::gEnabled.load()) return emu::kNotInitialized;
  if (!ev || !stream) return emu::kInvalidValue;
  std::lock_guard<std::mutex> lk(emu::gMu);
  auto* e = static_cast<emu::FakeEvent*>(ev);
  auto* s = static_cast<emu::FakeStream*>(stream);
  e->stream = s;
  e->kernel = s->current;
  e->after = s->after;
  return emu::kSuccess;
}
int cuEventQuery(void* ev) {
  if (!emu::gEnabled.load()) return emu::kNotInitialized;
  std::lock_guard<std::mutex> lk(emu::gMu);
  uint64_t t = 0;
  return emu::timeOf(static_cast<emu::FakeEvent*>(ev), &t) ? emu::kSuccess : emu::kNotReady;
}
int cuEventElapsedTime(float* ms, void* a, void* b) { return emu::elapsed(ms, a, b); }
int cuEventElapsedTime_v2(float* ms, void* a, void* b) { return emu::elapsed(ms, a, b); }
int cuStreamIsCapturing(void* stream, int* status) {
  if (!emu::gEnabled.load()) return emu::kNotInitialized;
  if (!stream || !status) return emu::kInvalidValue;
  std::lock_guard<std::mutex> lk(emu::gMu);
  *status = static_cast<emu::FakeStream*>(stream)->capturing ? 1 : 0;
  return emu::kSuccess;
}
int cuStreamGetCtx(void* stream, void** ctx) {
  if (!emu::gEnabled.load()) return emu::kNotInitialized;
  if (!stream || !ctx) return emu::kInvalidValue;
  *ctx = static_cast<emu::FakeStream*>(stream)->ctx;
  return emu::kSuccess;
}
int cuCtxGetCurrent(void** ctx) {
  if (!emu::gEnabled.load()) return emu::kNotInitialized;
  if (!ctx) return emu::kInvalidValue;
  *ctx = emu::tCurrent;
  return emu::kSuccess;
}
int cuCtxSetCurrent(void* ctx) {
  if (!emu::gEnabled.load()) return emu::kNotInitialized;
  emu::tCurrent = ctx;
  return emu::kSuccess;
}
}
