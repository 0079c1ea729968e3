// Feeds the exposure estimator (engine/exposure.h) from the calls of a communicator's detected iteration: the
// enqueue thread places each timed call (iteration, position), the measurement thread brings its window and
// start, and every complete iteration (each position timed, and the next iteration's start) is one sample.
// Iterations count only within one structure of the detector (a serial, new after every break): after a break
// the same period may start at another call, and position p is then another call; the iteration before a
// break has no next start of its own. A new structure starts the estimate again.
// A report only: nothing in the tuning reads it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/common.h"
#include "engine/exposure.h"

namespace autoccl::engine {

class ExposureRecorder {
 public:
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

 private:
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
  static constexpr size_t kMaxPlaced = 65536;  // calls whose times never came are dropped past this
  static constexpr size_t kIterationsKept = 8;

  // Its own mutex: the calling thread places each timed call without waiting for the measurement thread.
  mutable std::mutex mu_;
  std::unordered_map<CallKey, CallPos, CallKeyHash> placed_;
  std::map<uint64_t, IterTimes> iterations_;
  ExposureEstimator estimator_;
  std::vector<TaskKey> tasks_;  // the estimator's positions' tasks
  uint64_t structure_ = 0;      // the structure of the estimator's samples
  uint64_t timedForIt_ = 0;     // windows timed for the estimate alone (AUTOCCL_EXPOSURE_EVERY)
};

}  // namespace autoccl::engine
