// Feeds the exposure estimator (engine/exposure.h) from the calls of a communicator's detected iteration: the
// enqueue thread places each timed call (iteration, position), the measurement thread brings its window and
// start, and every complete iteration (each position timed, and the next iteration's start) is one sample.
// Iterations count only within one structure of the detector (a serial, new after every break): after a break
// the same period may start at another call, and position p is then another call; the iteration before a
// break has no next start of its own. A new structure starts the estimate again.
// The trace reports it; the step guard's estimated arms (AUTOCCL_STEP_ARMS=estimated=...) read the positions it
// calls hidden (trackHidden, hiddenPositions).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/common.h"
#include "engine/exposure.h"

namespace autoccl::engine {

class ExposureRecorder {
 public:
  ExposureRecorder() = default;
  ~ExposureRecorder();  // stops the refit thread, if trackHidden started one
  ExposureRecorder(const ExposureRecorder&) = delete;
  ExposureRecorder& operator=(const ExposureRecorder&) = delete;
  // Call `k` of `task` sits at `position` of iteration `iteration`, whose calls number `period`, of the
  // detector's structure `structure`.
  void place(const TaskKey& task, uint64_t k, uint64_t iteration, uint32_t position, uint32_t period,
             uint64_t structure);
  // The window (µs) and GPU start (ns) of a call placed before; the time of a call never placed is ignored.
  // `reportOnly`: timed for this estimate alone (Measurement::reportOnly), counted in the record.
  void time(const TaskKey& task, uint64_t k, uint64_t startNs, double gpuUs, bool reportOnly = false);
  // The trace's `exposure` record (empty before the first complete iteration).
  std::string traceRecord(const std::string& commHex, int rank) const;
  size_t samples() const;
  // Keep the positions the estimate calls hidden up to date: every kRefitEvery new samples, a thread of the
  // recorder's own refits on a copy (tens of milliseconds at 40-64 positions of noisy samples: not on the
  // measurement thread, whose callers hold the timing matcher's lock that every call of the job takes).
  void trackHidden();
  // Until the refits asked for so far are done (tests).
  void waitForRefits();
  // The positions of the iteration the latest refit calls hidden (bit p: position p < 64), where it was of
  // `structure` and `period` calls: a position hidden by its own slope, or of unknown slope in a task hidden as
  // a whole; never the iteration's last. 0: none, another structure, or the windows move with the iteration for
  // other reasons (a task's slope out of bounds voids every verdict).
  uint64_t hiddenPositions(uint64_t structure, uint32_t period) const;
  static constexpr size_t kRefitEvery = 8;

 private:
  // Both fits of the estimator's samples: by position, and by task (one regressor a task, its positions
  // summed), the verdicts voided where a task's slope is out of bounds, and the fit by position's of a task
  // one of whose positions' slopes lies below the bound.
  struct Fits {
    ExposureEstimator::Result byPosition, byTask;
    std::vector<TaskKey> taskOrder;  // the tasks, numbered in the order of their first position
    std::vector<uint32_t> groupOf;   // position -> its task's number
  };
  static Fits fitsOf(const ExposureEstimator& estimator, const std::vector<TaskKey>& tasks);
  static uint64_t hiddenOf(const Fits& f);
  struct CallPos {
    uint64_t iteration = 0, structure = 0;
    uint32_t pos = 0, period = 0;
  };
  struct IterTimes {
    uint64_t structure = 0;
    uint32_t period = 0;
    std::vector<uint64_t> startNs;
    std::vector<double> durUs;
    std::vector<TaskKey> task;
    uint32_t filled = 0;
  };
  // time()'s work under mu_ for a call placed at `at`; true when a refit of the hidden positions is due.
  bool addLocked(const TaskKey& task, const CallPos& at, uint64_t startNs, double gpuUs);
  void refitLoop();
  static constexpr size_t kMaxPlaced = 65536;  // calls whose times never came are dropped past this
  static constexpr size_t kIterationsKept = 8;

  // The calling thread's side, under a mutex of its own: placing a call never waits for the measurement
  // thread's bookkeeping or for the refit thread's copy of the samples (mu_).
  std::mutex placeMu_;
  std::unordered_map<CallKey, CallPos, CallKeyHash> placed_;
  mutable std::mutex mu_;
  std::map<uint64_t, IterTimes> iterations_;
  ExposureEstimator estimator_;
  std::vector<TaskKey> tasks_;  // the estimator's positions' tasks
  uint64_t structure_ = 0;      // the structure of the estimator's samples
  uint64_t timedForIt_ = 0;     // windows timed for the estimate alone (AUTOCCL_EXPOSURE_EVERY)
  bool trackHidden_ = false;
  size_t addedSinceFit_ = 0;
  // The refit thread: woken when a refit is due, stopped by the destructor
  std::condition_variable refitCv_;
  bool refitDue_ = false, refitting_ = false, stopping_ = false;
  std::thread refitThread_;
  // The latest refit's hidden positions, and of which structure, under a mutex of their own: the calling thread
  // reads them without waiting for the refit thread's copy of the samples (mu_).
  mutable std::mutex hiddenMu_;
  uint64_t hidden_ = 0, hiddenStructure_ = 0;
  uint32_t hiddenPeriod_ = 0;
};

}  // namespace autoccl::engine
