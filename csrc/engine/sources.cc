// The decision sources of modes observe, fixed and table (one decision per task, for good), manual (by
// the call's place in the iteration), and the factory that builds the source for a mode; mode online's is
// engine/online.h's.
#include "engine/policy.h"
#include "engine/sources.h"

#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "engine/fixed_rules.h"
#include "engine/online.h"
#include "engine/step_guard.h"

namespace autoccl::engine {

namespace {
class ObservePolicy final : public DecisionSource {
 public:
  Decision decide(const TaskKey&, uint64_t, const CostTable&) override {
    Decision d;
    d.source = Source::Observe;
    d.stable = true;
    return d;
  }
  // Timed like fixed and table: the first AUTOCCL_MEASURE_CALLS calls of each task (Context's budget).
};

class FixedPolicy final : public DecisionSource {
 public:
  explicit FixedPolicy(const Settings& s) : settings_(s) {}
  Decision decide(const TaskKey& task, uint64_t, const CostTable&) override {
    Decision d;
    d.stable = true;
    if (const FixedRule* r = matchFixedRule(settings_.fixed, task.coll, task.bytes)) {
      d.config = r->config;
      d.source = Source::Fixed;
      d.why = "rule '" + r->text + "'";
    } else {
      d.why = "no rule matches";
    }
    return d;
  }

 private:
  const Settings& settings_;
};

// The resource-sharing study's manual policy, a baseline for tuning against the step: a call the iteration
// hides behind its computation gets few channels (it takes fewer SMs from the computation it overlaps),
// the iteration's last call, which nothing overlaps, gets many. NCCL keeps its algorithm and protocol.
// "Last call" is the communicator's: its calls in first-seen task ids feed the step guard's
// IterationDetector, which finds the same iterations on every rank (the same call sequence); until it has
// seen three equal iterations every call keeps NCCL's choice. The study's exposed call is the last
// collective of the whole iteration; on a job with several communicators this takes each one's last. The
// call sequence alone cannot tell where an iteration starts, only its period: the detector starts them
// where three equal blocks first end. A first iteration that differs only in its leading calls (X B C, then
// A B C A B C ...) shifts the cut (B C A): the "last" call is then A. Every rank cuts alike.
class ManualPolicy final : public DecisionSource {
 public:
  explicit ManualPolicy(const Settings& s)
      : hidden_(s.manualHidden), exposed_(s.manualExposed > 0 ? s.manualExposed : s.maxChannels) {}
  Decision decide(const TaskKey& task, uint64_t, const CostTable&) override {
    Decision d;
    std::lock_guard<std::mutex> lk(mu_);
    iter_.push(task);
    if (!iter_.stable()) {
      d.why = "no iteration found yet";
      return d;
    }
    const bool last = iter_.endsIteration();
    d.source = Source::Manual;
    d.config.channels = last ? exposed_ : hidden_;
    d.why = last ? "the iteration's last call" : "hidden in the iteration";
    return d;
  }

 private:
  const int hidden_, exposed_;
  std::mutex mu_;  // one communicator's calls come from one thread; the lock costs nothing then
  IterationDetector iter_;
};

class TablePolicy final : public DecisionSource {
 public:
  explicit TablePolicy(std::shared_ptr<const Table> t) : table_(std::move(t)) {}
  Decision decide(const TaskKey& task, uint64_t, const CostTable&) override {
    Decision d;
    d.stable = true;
    const TableEntry* e = table_ ? table_->lookup(task.coll, task.bytes, task.pipe) : nullptr;
    if (!e) {
      d.why = table_ ? "no table entry" : "no table";
      return d;
    }
    d.config = e->config;
    d.source = Source::Table;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s entry bytes=%" PRIu64 " pipe=%d",
                  e->key.bytes == task.bytes && e->key.pipe == task.pipe ? "exact" : "nearest", e->key.bytes,
                  e->key.pipe);
    d.why = buf;
    return d;
  }

 private:
  std::shared_ptr<const Table> table_;
};
}  // namespace

std::unique_ptr<DecisionSource> makeDecisionSource(const PolicyEnv& env, std::string* error) {
  switch (env.settings->mode) {
    case Mode::Observe: return std::make_unique<ObservePolicy>();
    case Mode::Fixed: return std::make_unique<FixedPolicy>(*env.settings);
    case Mode::Table: {
      // Under the step guard, through the online source: the table pinned, the guard's rounds judging it on the
      // step, every rank switching at the same iteration. Where that source cannot run here (no profiler, a
      // communicator across nodes without a coordinator every host derives alike, a malformed address), the
      // table alone, unchecked, as with AUTOCCL_GUARD=off: every rank of the communicator reaches the same
      // conclusion from the same settings and node count.
      if (env.coordination) {
        std::string why;
        if (auto guarded = makeOnlineSource(env, &why)) return guarded;
        if (env.log && env.rank <= 0)
          env.log(LogLevel::Info, "autoccl: table mode without the step guard (its entries applied unchecked): " + why);
      }
      return std::make_unique<TablePolicy>(env.table);
    }
    case Mode::Online: return makeOnlineSource(env, error);
    case Mode::Manual: return std::make_unique<ManualPolicy>(*env.settings);
    case Mode::Off: break;
  }
  *error = "no decision source for mode off";
  return nullptr;
}

}  // namespace autoccl::engine
