// GPU time of NCCL's kernel launches from CUDA events that the shim records around each launch (the
// profiler's KernelLaunch events carry the launch stream), in place of the per-channel kernel timestamps
// of KernelCh events.
//
// Why: with KernelCh in the activation mask NCCL adds a profiler proxy operation per channel to every
// collective, even over NVLink where no proxy is otherwise involved, and posts them to its proxy thread
// (NCCL 2.28 ncclProfilerNeedsProxy). On 2 x H100 that made each timed call 12-19 us longer in nccl-tests'
// loop, more than a 1 MiB all_gather's kernel. A CUDA event costs the launching thread one driver call and
// the stream one timestamp write; the clock reads the events on its own thread.
//
// What a launch measures: `start` is when the stream reached the launch (the previous work on it done),
// `stop` when the kernel finished. Consecutive launches of one communicator give the stream period the
// caller experiences (start to the next start), which is what Context scores by period.
//
// Order NCCL keeps per kernel plan, on the launching thread (enqueue.cc, 2.28-2.32): KernelLaunch start,
// cuLaunchKernelEx, KernelLaunch stop, then (hostStreamPlanTask) Group start, the plan's Coll events
// (parentGroup = our Group handle), Group stop. The shim ties the plan's Coll events to the launch
// through the Group handle and hands the launch over at Group stop.
//
// The plugin links no CUDA library: the driver's entry points are looked up at run time (the process's
// global symbols first, which is how the emulator supplies a simulated clock, then libcuda.so.1). Where
// they are missing the clock is unavailable and the shim falls back to KernelCh timing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <thread>
#include <vector>

namespace autoccl::engine {
class Context;
}

namespace autoccl::shim {

class LaunchClock {
 public:
  struct Launch;

  // The process's clock, or nullptr where CUDA's driver API cannot be reached. Thread-safe.
  static LaunchClock* instance();

  // KernelLaunch start: records the start event on `stream`. nullptr (no timing) while the stream is
  // being captured into a CUDA graph, or when an event cannot be had. The launch stays open until seal().
  Launch* begin(std::shared_ptr<engine::Context> ctx, void* stream);
  // KernelLaunch stop: records the stop event.
  void end(Launch* l);
  // A Coll event of the launch's plan (a handle from Context::collStart, given one channel).
  void attach(Launch* l, void* collHandle);
  // No more Coll events will come for the launch: queued for reading once its events complete.
  void seal(Launch* l);

  // Launches sealed but not yet delivered (tests, diagnostics).
  size_t pending();

  // Before a communicator's context is finalized: waits, at most `bound`, until no sealed launch of `ctx` is
  // left to read, so that the times of calls that completed reach it. A short job once ended before the
  // reading thread first ran (CI under load) and its observe-mode table had no times. A launch whose kernel
  // never completes (a hung, aborted communicator), of any communicator since launches are read in order,
  // makes it wait the whole bound. No-op in a process where no launch was ever sealed.
  static void settleIfUsed(const engine::Context* ctx, std::chrono::milliseconds bound = std::chrono::seconds(1));

  // Handles the shim gives NCCL for a launch (KernelLaunch) and for the Group event that follows it.
  static void* launchHandle(Launch* l);
  static void* groupHandle(Launch* l);
  // The launch behind a handle, or nullptr when the handle is not one of ours of that kind.
  static Launch* fromLaunchHandle(void* handle);
  static Launch* fromGroupHandle(void* handle);

  LaunchClock(const LaunchClock&) = delete;
  LaunchClock& operator=(const LaunchClock&) = delete;

 private:
  struct Driver;
  struct Device;
  explicit LaunchClock(const Driver* drv);  // never destroyed (see instance())
  void pollLoop();
  void deliver(Launch* l);
  void stopThread();
  void* takeEvent(Device& d);
  Device* deviceOf(void* stream);

  const Driver* drv_;
  std::mutex mu_;                    // devices_, queue_, free lists
  std::condition_variable cv_;
  std::map<void*, std::unique_ptr<Device>> devices_;  // CUDA context -> its events and time chain
  std::deque<Launch*> queue_;       // sealed launches, in seal order
  std::vector<Launch*> freeLaunches_;
  std::thread poller_;
  bool stop_ = false;
  static std::atomic<LaunchClock*> used_;  // set at the first seal
};

}  // namespace autoccl::shim
