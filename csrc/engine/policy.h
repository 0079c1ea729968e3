// Decision sources: where a call's configuration comes from. The shim never decides; the Context
// asks its DecisionSource. This header is the interface alone; the sources are built by
// makeDecisionSource() (engine/sources.h), and nothing in csrc/nccl has to change for a new one.
#pragma once

#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "engine/common.h"
#include "engine/settings.h"
#include "engine/table.h"
#include "engine/timing.h"

namespace autoccl::search {
class RegretLedger;  // autoccl/search/search.h
}  // namespace autoccl::search

namespace autoccl::engine {

struct Decision {
  Config config;                // what to apply (empty = leave NCCL's choice)
  Source source = Source::Nccl;
  // The same decision holds for every later call of this task: the Context caches it and stops
  // asking (the steady-state hot path is then one hash lookup).
  bool stable = false;
  std::string why;              // short note for the per-task INFO line (rule text, table match)
  // The ranks can no longer agree on this call (online mode, coordinator unreachable): the Context
  // fails the call (NCCL fails the collective) with `why` logged once. Never set for our own problems.
  bool fail = false;
  // The call is a sample the policy waits for. With the launch clock only such calls (and the launch after
  // each, for its stream period) are timed; the kernel clock times every call while the mask is on.
  bool timed = false;
  // A report (the exposure estimate) wants the call's window if nothing else times it: then it is timed for
  // the report alone and its window reaches the policy marked Measurement::reportOnly (to the samples, the call
  // stays untimed, as without the report). The kernel clock times every call while the mask is on: a policy
  // asks this there only where the mask is on for the report alone.
  bool report = false;
};

class Coordination;  // engine/online.h

// Everything a policy may know about its (communicator, rank) context. Identical on every rank
// except `rank` (which a policy must not use for decisions).
struct PolicyEnv {
  uint64_t commHash = 0;
  int rank = -1;                // -1 when the profiler is not loaded
  int nRanks = 0;
  int nNodes = 0;
  const Settings* settings = nullptr;
  // NCCL asks the tuner for chunk sizes (tuner v6). The same on every rank: NCCL refuses ranks of
  // different versions in one communicator, and the version decides which tuner interface it loads.
  bool chunkCallback = false;
  std::shared_ptr<const Table> table;  // table mode: the loaded table; online: the warm-start table
  LogFn log;
  // Online mode: the process-wide coordination (board, TCP server), the Context's "timing need
  // changed" callback (re-evaluates needsTiming()), and the writer of converged entries (finalize).
  Coordination* coordination = nullptr;
  // Online mode with a job budget (AUTOCCL_JOB_REGRET_PCT > 0): the process's one ledger, which the searches of
  // every communicator whose authority is in this process share (null: none).
  std::shared_ptr<search::RegretLedger> jobRegret;
  std::function<void()> needChanged;
  std::function<void(const std::vector<TableEntry>&, const std::vector<PairRecord>&)> saveTuned;
};

class DecisionSource {
 public:
  virtual ~DecisionSource() = default;
  // Configuration for the callIndex-th call (0-based) of `task` on this context. Must be a function
  // of (task, callIndex) and of data identical on every rank (invariant 1), never of local timings.
  // `costs` is NCCL's cost table for this call, read-only (-1 = unsupported); the Context applies the
  // result and refuses pairs NCCL marked unsupported.
  virtual Decision decide(const TaskKey& task, uint64_t callIndex, const CostTable& costs) = 0;
  // A call of a task whose decision was stable (the Context applied its cached decision and did not ask),
  // reported only while needsTiming() is true: a policy that holds timing for tasks not called lately counts
  // these calls too, or it never lets go while only settled tasks run (enqueue thread, like decide).
  virtual void onSettledCall() {}
  // A matched GPU timing of one call of `task`. Called from NCCL's proxy thread (or a CUDA callback
  // thread) under this context's timing lock: keep it short, never block.
  virtual void onMeasurement(const TaskKey& task, const Measurement& m) { (void)task; (void)m; }
  // Call `callIndex` of `task` ran untimed (the profiler skipped it: the mask was off when NCCL read it),
  // known when a later call's events arrive. Same thread and lock rules as onMeasurement.
  virtual void onUntimed(const TaskKey& task, uint64_t callIndex) { (void)task; (void)callIndex; }
  // NCCL emitted no profiler event for any call of `coll` on this context while timing was on (enqueue
  // thread, once per collective): its calls cannot be measured.
  virtual void onUnprofiled(int coll) { (void)coll; }
  // True while the policy wants kernel timing events (drives the process-wide activation mask).
  // Must be cheap and thread-safe (read from any thread).
  virtual bool needsTiming() const { return false; }
  // True when this policy scores calls by their stream period (Measurement::periodUs): the context then
  // holds each measurement until the next one arrives. Cheap and thread-safe.
  virtual bool wantsPeriod() const { return false; }
  // True when the ranks agree through the process's Coordination (the online source; table mode under the step
  // guard): the Context announces and retires its rank there.
  virtual bool agreesThroughCoordination() const { return false; }
  // Tuner finalize of this context (the profiler may still deliver late events afterwards).
  virtual void onFinalize() {}
  // What the metrics files show of a task beyond the Context's own measurements (online: the search's view).
  struct TaskView {
    bool known = false;
    double ncclUs = 0, appliedUs = 0;  // medians of NCCL's choice and of the pinned configuration (0: unknown)
    uint64_t exploringCalls = 0;
    double regretUs = 0;
    bool converged = false;
  };
  virtual TaskView view(const TaskKey& task) const { (void)task; return TaskView(); }
  // The step guard's verdicts on this communicator so far (authority, online): false when there is no guard here.
  struct GuardView {
    uint64_t verdicts = 0, keptTuned = 0, restoredNccl = 0;
    double lastTunedUs = 0, lastNcclUs = 0;
  };
  virtual bool guardView(GuardView* out) const { (void)out; return false; }
  // Trace records of the policy's own (JSON objects, no newline), written at the tuner's finalize.
  virtual std::vector<std::string> traceRecords() const { return {}; }
  // Extra fields for the per-task trace record (",\"gain\":..." form, or empty).
  virtual std::string traceExtra(const TaskKey& task) const { (void)task; return std::string(); }
};

}  // namespace autoccl::engine
