#include "nccl/launch_clock.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>

#include "engine/context.h"
#include "engine/timing.h"

namespace autoccl::shim {

namespace {
constexpr uint32_t kLaunchMagic = 0x41434C4B;  // "ACLK"
constexpr int kCudaSuccess = 0;
constexpr int kCudaNotReady = 600;     // CUDA_ERROR_NOT_READY
constexpr unsigned kEventDefault = 0;  // CU_EVENT_DEFAULT: timing on, spin on synchronize (never used)
constexpr uintptr_t kGroupTag = 2;     // bit 0 is the timing matcher's channel-handle tag
// The chain's origin (ns): far from 0 so that the engine's arithmetic on start times never meets 0.
constexpr double kChainOriginNs = 1e15;
// The poller's sleep while the oldest launch is still running: short at first (a collective of tens of
// microseconds), growing to this while nothing completes.
constexpr auto kMinSleep = std::chrono::microseconds(20);
constexpr auto kMaxSleep = std::chrono::microseconds(1000);
}  // namespace

// CUDA driver entry points (CUresult is an int; handles are pointers).
struct LaunchClock::Driver {
  int (*eventCreate)(void** ev, unsigned flags) = nullptr;
  int (*eventRecord)(void* ev, void* stream) = nullptr;
  int (*eventQuery)(void* ev) = nullptr;
  int (*eventElapsed)(float* ms, void* start, void* stop) = nullptr;
  int (*streamIsCapturing)(void* stream, int* status) = nullptr;
  int (*streamGetCtx)(void* stream, void** ctx) = nullptr;
  int (*ctxGetCurrent)(void** ctx) = nullptr;
  int (*ctxSetCurrent)(void* ctx) = nullptr;

  static const Driver* resolve() {
    // One source for every entry point: the process's global symbols when they have the driver's
    // (libcuda loaded globally, or the emulator's simulated clock), else libcuda.so.1 itself.
    void* lib = RTLD_DEFAULT;
    if (!dlsym(lib, "cuEventRecord")) {
      lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
      if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!lib) return nullptr;
    }
    auto* d = new Driver();
    auto get = [lib](const char* a, const char* b = nullptr) {
      void* p = dlsym(lib, a);
      return p || !b ? p : dlsym(lib, b);
    };
    d->eventCreate = reinterpret_cast<decltype(d->eventCreate)>(get("cuEventCreate"));
    d->eventRecord = reinterpret_cast<decltype(d->eventRecord)>(get("cuEventRecord"));
    d->eventQuery = reinterpret_cast<decltype(d->eventQuery)>(get("cuEventQuery"));
    d->eventElapsed = reinterpret_cast<decltype(d->eventElapsed)>(get("cuEventElapsedTime_v2", "cuEventElapsedTime"));
    d->streamIsCapturing = reinterpret_cast<decltype(d->streamIsCapturing)>(get("cuStreamIsCapturing"));
    d->streamGetCtx = reinterpret_cast<decltype(d->streamGetCtx)>(get("cuStreamGetCtx"));
    d->ctxGetCurrent = reinterpret_cast<decltype(d->ctxGetCurrent)>(get("cuCtxGetCurrent"));
    d->ctxSetCurrent = reinterpret_cast<decltype(d->ctxSetCurrent)>(get("cuCtxSetCurrent"));
    void* current = nullptr;
    // A driver that is not initialized in this process (the emulator without --launch-clock answers so) is no
    // clock: NCCL has initialized CUDA before it creates a communicator, so a real process always passes.
    if (!d->eventCreate || !d->eventRecord || !d->eventQuery || !d->eventElapsed || !d->streamIsCapturing ||
        !d->streamGetCtx || !d->ctxGetCurrent || !d->ctxSetCurrent || d->ctxGetCurrent(&current) != kCudaSuccess) {
      delete d;
      return nullptr;
    }
    return d;
  }
};

// One CUDA context (device): its spare events and the chain that turns event pairs into times on one
// axis (each delivered launch's stop event is the next one's reference, so elapsed times stay short
// and keep the float's precision).
struct LaunchClock::Device {
  void* cuCtx = nullptr;
  std::vector<void*> spare;
  void* base = nullptr;
  double baseNs = 0;
};

struct alignas(16) LaunchClock::Launch {
  uint32_t magic = 0;
  std::shared_ptr<engine::Context> ctx;
  Device* dev = nullptr;
  void* stream = nullptr;
  void* start = nullptr;
  void* stop = nullptr;
  bool failed = false;
  std::vector<void*> colls;
};

LaunchClock* LaunchClock::instance() {
  static LaunchClock* clock = [] () -> LaunchClock* {
    const Driver* drv = Driver::resolve();
    if (!drv) return nullptr;
    auto* c = new LaunchClock(drv);  // never destroyed: NCCL threads may call in during exit
    std::atexit([] { instance()->stopThread(); });
    return c;
  }();
  return clock;
}

LaunchClock::LaunchClock(const Driver* drv) : drv_(drv) {}

void LaunchClock::stopThread() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

void* LaunchClock::launchHandle(Launch* l) { return l; }
void* LaunchClock::groupHandle(Launch* l) { return l ? reinterpret_cast<char*>(l) + kGroupTag : nullptr; }

LaunchClock::Launch* LaunchClock::fromLaunchHandle(void* handle) {
  auto bits = reinterpret_cast<uintptr_t>(handle);
  if (!handle || (bits & 15u) != 0) return nullptr;
  auto* l = static_cast<Launch*>(handle);
  return l->magic == kLaunchMagic ? l : nullptr;
}

LaunchClock::Launch* LaunchClock::fromGroupHandle(void* handle) {
  auto bits = reinterpret_cast<uintptr_t>(handle);
  if (!handle || (bits & 15u) != kGroupTag) return nullptr;
  auto* l = reinterpret_cast<Launch*>(bits - kGroupTag);
  return l->magic == kLaunchMagic ? l : nullptr;
}

LaunchClock::Device* LaunchClock::deviceOf(void* stream) {
  void* cuCtx = nullptr;
  if (drv_->streamGetCtx(stream, &cuCtx) != kCudaSuccess || !cuCtx) return nullptr;
  std::lock_guard<std::mutex> lk(mu_);
  auto& d = devices_[cuCtx];
  if (!d) {
    d = std::make_unique<Device>();
    d->cuCtx = cuCtx;
  }
  return d.get();
}

// An event of the device; created on the launching thread, where NCCL has made the device's context
// current (nullptr when another context is current: the clock never switches the caller's context).
void* LaunchClock::takeEvent(Device& d) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!d.spare.empty()) {
      void* ev = d.spare.back();
      d.spare.pop_back();
      return ev;
    }
  }
  void* current = nullptr;
  if (drv_->ctxGetCurrent(&current) != kCudaSuccess || current != d.cuCtx) return nullptr;
  void* ev = nullptr;
  if (drv_->eventCreate(&ev, kEventDefault) != kCudaSuccess) return nullptr;
  return ev;
}

LaunchClock::Launch* LaunchClock::begin(std::shared_ptr<engine::Context> ctx, void* stream) {
  if (!stream || !ctx) return nullptr;
  int capturing = 0;
  // A captured launch runs later as part of a graph: events recorded now would time nothing.
  if (drv_->streamIsCapturing(stream, &capturing) != kCudaSuccess || capturing != 0) return nullptr;
  Device* dev = deviceOf(stream);
  if (!dev) return nullptr;
  void* start = takeEvent(*dev);
  void* stop = start ? takeEvent(*dev) : nullptr;
  if (!stop || drv_->eventRecord(start, stream) != kCudaSuccess) {
    std::lock_guard<std::mutex> lk(mu_);
    if (start) dev->spare.push_back(start);
    if (stop) dev->spare.push_back(stop);
    return nullptr;
  }
  Launch* l = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!freeLaunches_.empty()) {
      l = freeLaunches_.back();
      freeLaunches_.pop_back();
    }
  }
  if (!l) l = new Launch();
  l->magic = kLaunchMagic;
  l->ctx = std::move(ctx);
  l->dev = dev;
  l->stream = stream;
  l->start = start;
  l->stop = stop;
  l->failed = false;
  l->colls.clear();
  return l;
}

void LaunchClock::end(Launch* l) {
  if (l && drv_->eventRecord(l->stop, l->stream) != kCudaSuccess) l->failed = true;
}

void LaunchClock::attach(Launch* l, void* collHandle) {
  if (l && collHandle) l->colls.push_back(collHandle);
}

std::atomic<LaunchClock*> LaunchClock::used_{nullptr};

void LaunchClock::seal(Launch* l) {
  if (!l) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(l);
    if (!poller_.joinable() && !stop_) {
      poller_ = std::thread([this] { pollLoop(); });
      used_.store(this, std::memory_order_release);
    }
  }
  cv_.notify_one();
}

void LaunchClock::settleIfUsed(const engine::Context* ctx, std::chrono::milliseconds bound) {
  LaunchClock* c = used_.load(std::memory_order_acquire);
  if (!c || !ctx) return;
  const auto until = std::chrono::steady_clock::now() + bound;
  std::unique_lock<std::mutex> lk(c->mu_);
  auto queued = [&] {
    for (const Launch* l : c->queue_)
      if (l->ctx.get() == ctx) return true;
    return false;
  };
  // The reader pops a launch only after delivering it: none of ctx's left in the queue means all delivered.
  while (!c->stop_ && queued() && std::chrono::steady_clock::now() < until) {
    lk.unlock();
    c->cv_.notify_one();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    lk.lock();
  }
}

size_t LaunchClock::pending() {
  std::lock_guard<std::mutex> lk(mu_);
  return queue_.size();
}

void LaunchClock::pollLoop() {
  auto sleep = kMinSleep;
  void* current = nullptr;
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      continue;
    }
    Launch* l = queue_.front();
    lk.unlock();
    if (current != l->dev->cuCtx && drv_->ctxSetCurrent(l->dev->cuCtx) == kCudaSuccess) current = l->dev->cuCtx;
    const int state = l->failed ? kCudaSuccess : drv_->eventQuery(l->stop);
    if (state == kCudaNotReady) {
      std::this_thread::sleep_for(sleep);
      sleep = std::min<std::chrono::microseconds>(sleep * 2, kMaxSleep);
      lk.lock();
      continue;
    }
    sleep = kMinSleep;
    if (state != kCudaSuccess) l->failed = true;
    deliver(l);
    lk.lock();
    queue_.pop_front();
    l->ctx.reset();
    freeLaunches_.push_back(l);
  }
}

// The launch's events have completed (or failed): place them on the device's chain and hand the times
// to every Coll of the plan (one "channel" each). A failed launch reports zeros, which the matcher
// takes as an untimed call and releases.
void LaunchClock::deliver(Launch* l) {
  Device& d = *l->dev;
  uint64_t startNs = 0, stopNs = 0;
  if (!l->failed) {
    float toStart = 0, toStop = 0;
    const bool first = d.base == nullptr;
    const bool ok = first ? drv_->eventElapsed(&toStop, l->start, l->stop) == kCudaSuccess
                          : drv_->eventElapsed(&toStart, d.base, l->start) == kCudaSuccess &&
                                drv_->eventElapsed(&toStop, d.base, l->stop) == kCudaSuccess;
    const double origin = first ? kChainOriginNs : d.baseNs;
    if (ok && toStop > toStart) {
      startNs = static_cast<uint64_t>(origin + 1e6 * static_cast<double>(toStart));
      stopNs = static_cast<uint64_t>(origin + 1e6 * static_cast<double>(toStop));
      // The stop event becomes the chain's reference; the old reference and the start go back.
      std::lock_guard<std::mutex> lk(mu_);
      if (d.base) d.spare.push_back(d.base);
      d.base = l->stop;
      d.baseNs = origin + 1e6 * static_cast<double>(toStop);
      l->stop = nullptr;
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (l->start) d.spare.push_back(l->start);
    if (l->stop) d.spare.push_back(l->stop);
    l->start = l->stop = nullptr;
  }
  for (void* h : l->colls) {
    void* ch = l->ctx->kernelChStart(h, startNs);
    engine::TimingMatcher::kernelChStop(ch, stopNs);
  }
}

}  // namespace autoccl::shim
