// All settings come from environment variables, read once per process and validated.
// An invalid setting makes the whole library behave as "no tuner" (Settings::valid == false).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autoccl/coord/coord.h"
#include "engine/common.h"
#include "engine/fixed_rules.h"

namespace autoccl::engine {

enum class Mode { Off, Observe, Fixed, Table, Online, Manual };
const char* modeName(Mode m);

struct Settings {
  Mode mode = Mode::Table;
  std::vector<FixedRule> fixed;  // AUTOCCL_FIXED (fixed mode)
  std::string fixedText;
  std::string tablePath;    // AUTOCCL_TABLE
  std::string cacheDir;     // AUTOCCL_CACHE_DIR, else $XDG_CACHE_HOME/autoccl, else ~/.cache/autoccl
  std::string tracePrefix;  // AUTOCCL_TRACE
  // AUTOCCL_PROFILER_CHAIN: another NCCL profiler plugin (.so) that the shim loads and forwards every profiler
  // event to (nccl/profiler_chain.h). One that cannot be loaded is a WARN, not an invalid setting.
  std::string profilerChain;
  // AUTOCCL_METRICS_DIR: where the metrics files go (engine/metrics.h); empty: none. AUTOCCL_METRICS_INTERVAL_S:
  // seconds between writes, in [0.1, 86400].
  std::string metricsDir;
  double metricsIntervalS = 10;
  std::string hw;           // AUTOCCL_HW
  int maxChannels = 64;     // AUTOCCL_MAX_CHANNELS, in [1, 64]
  // AUTOCCL_MANUAL_CHANNELS=HIDDEN,EXPOSED (manual mode): channels for the calls an iteration hides behind its
  // computation (every call but its last) and for its last call (`max`: AUTOCCL_MAX_CHANNELS).
  int manualHidden = 2;
  int manualExposed = 0;    // 0: maxChannels
  // AUTOCCL_NCCL_CHANNELS, in [1, 64], 0 = unset: at most this many channels for every call whose channel
  // count the plugin leaves to NCCL. With communicators raised by NCCL_MIN_CTAS (`autoccl run
  // --channel-ceiling`) NCCL's own choice uses all of them (64 where a plain communicator has 24, slower at
  // 1-2 MiB); set to the plain count, those calls run as on a plain communicator. Read by every rank from
  // the job's environment, like AUTOCCL_MAX_CHANNELS: ranks given different values would disagree.
  int ncclChannels = 0;
  uint64_t measureCalls = 16;  // AUTOCCL_MEASURE_CALLS: calls timed per task in fixed/table mode
  // AUTOCCL_RECHECK_MS (online mode): a pinned task's first drift check waits at least this long after
  // the pin (doubling after each quiet check, like the call interval); 0: spaced by calls only.
  uint64_t recheckMs = 10000;
  // AUTOCCL_INPROC_SCORE (online mode, every rank of a communicator in this process): `slowest`
  // (default) scores a call by the longest kernel among the ranks, `own` by the authority's kernel.
  bool inprocSlowest = true;
  // AUTOCCL_XPROC_SCORE (online mode, a communicator whose ranks are in several processes): `shortest`
  // (default) scores a call by the shortest kernel window among the ranks that report it (the first
  // kReportRanks ranks send theirs to the authority): the last rank to arrive waits for nobody, so its
  // window is the collective's own time, while an early rank's includes its wait for the others (rank 0's
  // window of a 25 MB all_gather inside FSDP2 training: 1.2-1.5 ms at the median against a 60 us
  // transfer, 2 x H200). `own`: the authority's window alone (no reports are sent).
  bool xprocShortest = true;
  // AUTOCCL_SCORE (online mode): what a timed call costs. `window`: its kernel's channel timestamps
  // (first start to last stop). `period`: from its kernel's start to the start of the communicator's next
  // kernel, when that is the very next call (the stream time it held, launch and host waits included).
  // `auto` (default): period where every rank of the communicator is in this process (one host thread
  // launching several GPUs is host-bound at small sizes, which the window does not see), else window.
  enum class Score { Auto, Window, Period } score = Score::Auto;
  // AUTOCCL_CHUNK (online mode): `auto` (default) also searches the chunk size, as halvings of NCCL's,
  // where NCCL asks the tuner for it (tuner v6, NCCL >= 2.30.3); `off`: NCCL's chunk. Read by the
  // authority's search alone (every rank applies the chunk the authority's plan names).
  bool tuneChunk = true;
  // AUTOCCL_CLOCK: how calls are timed. `launch` (default): CUDA events the shim records around NCCL's
  // kernel launches (profiler KernelLaunch events); `kernel`: NCCL's per-channel kernel timestamps (KernelCh
  // events), for which NCCL adds proxy operations to every timed call (12-19 us a call on 2 x H100 in
  // nccl-tests' loop). Where CUDA's driver API cannot be reached the shim uses `kernel` (one INFO line).
  enum class Clock { Launch, Kernel } clock = Clock::Launch;
  // AUTOCCL_MIN_TASK_US (online mode): a task whose NCCL choice takes less than this many microseconds
  // keeps NCCL's choice, untimed, after its baseline samples (search::Options::minTaskMicros). 0: all tasks
  // of a communicator decided in this process.
  double minTaskUs = 55;
  // AUTOCCL_MIN_TASK_US_TCP (online mode): for a communicator whose ranks are in several processes (decided
  // through the TCP coordinator, where each step of a search can wait for a round trip) the minimum is the
  // larger of this and AUTOCCL_MIN_TASK_US.
  double minTaskUsTcp = 200;
  // AUTOCCL_MODEL_SMALL_PCT (online mode, percent): a task NCCL's own cost model puts below this share of the
  // minimum task keeps NCCL's choice from its first call, before any sample (search::Options::modelSmallShare).
  // 0: the samples decide alone.
  double modelSmallShare = 0.25;
  // AUTOCCL_REGRET_PCT (online mode, percent): the fraction of a task's time that exploring it may cost against NCCL's
  // choice, beyond an allowance of sixteen of its calls (search::Options::regretBudget). 0: unbounded.
  double regretBudget = 0.10;
  // AUTOCCL_JOB_REGRET_PCT (online mode, percent): the same bound for the tasks together of every communicator this
  // process is the authority of (one search::RegretLedger per process, Runtime::jobRegret), with one allowance of
  // the slowest task's calls instead of one per task. 0 (default): no job
  // bound. Opt-in: where a few tasks have a gain behind a descent, the others' exploration spends the budget
  // first (search test jobRegretMixed), and it is not measured on a GPU.
  double jobRegretBudget = 0;
  // AUTOCCL_PROBE_KEEP_PCT (online mode, percent): after each (algorithm, protocol) pair's first probe, the pairs
  // more than this much slower than the best probe are explored no further (search::Options::probeKeep). 100
  // drops only pairs twice as slow; lower prunes sooner (benchmarks/results/cpu/search-probe-keep).
  double probeKeep = 1.00;
  // AUTOCCL_SKIP_BEHIND_PCT (online mode, percent, in [0, 10000]): a pair an earlier job measured more than this
  // much slower than NCCL's choice for the same task (the table's pair records) is not probed at the task's first
  // search (search::Options::skipBehind). 0: every pair is probed.
  double skipBehind = 1.00;
  // AUTOCCL_VERIFY_WAIT (online mode, calls): at a start from a table, once the verification's turns are planned and
  // their samples are in flight, the table's config runs this many calls (untimed) before the verdict is planned
  // (search::Options::verifyWait). 1 plans it call by call, a plan lookup per call (over TCP a round trip to the
  // authority); more, fewer lookups and a verdict that many calls later.
  uint64_t verifyWait = 1;
  // AUTOCCL_ASK_AHEAD (online mode, calls, in [0, 1024]): a rank whose plan comes over TCP, starting a segment at
  // call k, asks the authority for call k + this when the plan it holds ends at or before it (Board::prefetch). 0:
  // only when the segment it starts is the last it holds. Decides nothing: the authority plans the same segments,
  // with the samples it has when the question arrives. "auto" (askAheadAuto): as many calls ahead as the task's
  // calls complete in one of the authority's answer times, both measured as the job runs (16 at most).
  uint64_t askAhead = 0;
  bool askAheadAuto = false;
  // AUTOCCL_PROBE_CALLS (online mode, calls, in [1, 3]): calls of a pair's first probe planned before its first
  // samples decide the rest of its 3-call block (search::Options::probeFirst). 1 (default): one call, the rest only
  // if it is within 30 % of the incumbent; 3: the whole block at once. A block is planned before its first sample
  // returns, and over sockets on one H200 a far-behind pair's block was most of a cold loop's cost: with 1 the cold
  // pass at 128-512 MiB ran 1.05x NCCL's kernel time instead of 1.56x (h200x1/probe-first-hosts). On the search
  // test's H200-like models one call first costs nccl-tests' first size 1.15x NCCL's time against 1.12x, and
  // hostile models settle later (docs/roadmap.md); not measured on NVLink.
  uint64_t probeCalls = 1;
  // AUTOCCL_STEP_CALLS (online mode, calls, in [1, 3]): the same for the descent's points of a pair that trails the
  // best by more than 10 % (search::Options::stepFirst, stepFirstBehind: the points a step asks for and those
  // speculated while samples are in flight). 3 (default): the whole block at once; 1 (opt-in until measured on a
  // GPU): one call, the rest only within 30 % of the incumbent. Over sockets on one H200 the cold pass's loops spent
  // +3.3 to +9.3 % of NCCL's kernel time on such blocks (h200x1/default-engine-hosts); on the search test's models
  // (stepFirstModels) 1 makes nccl-tests' first size cost 1.017x NCCL's time instead of 1.071x (random), 1.078x
  // instead of 1.201x (H200-like), and 92 random searches of 150 end within 3 % of the best instead of 107.
  uint64_t stepCalls = 3;
  // AUTOCCL_UNPROVEN_CALLS (online mode, calls, in [0, 64]): while the plan runs more than 8 calls ahead of the
  // newest sample (a burst the host launches ahead of the GPU), no call of a configuration not yet measured is
  // planned while this many are in flight (search::Options::maxUnprovenCalls); the incumbent runs meanwhile.
  // 0 (default): no bound. Opt-in: it bounds what a burst explores blind but moves exploration out of bursts nobody
  // times (nccl-tests' warm-up) into later ones; the search test unprovenBursts measures both sides, and it is not
  // measured on NVLink (docs/online-search.md, "Bounded exploration").
  int unprovenCalls = 0;
  // AUTOCCL_SPECULATE (online mode): `on` (default) measures, while the samples are in flight, a point the descent
  // will probably ask for next (search::Options::speculate); `off` runs the incumbent meanwhile. In nccl-tests'
  // loops the speculated points are planned blind (search test unprovenBursts).
  bool speculate = true;
  // AUTOCCL_RECORDED_START (online mode): `on` (default) first probes a pair the table records for the task (its
  // `pair` lines) at the channel count of its best point in that job, not at the widest
  // (search::Options::recordedStart); `off` probes every pair at the widest, as a cold start.
  bool recordedStart = true;
  // AUTOCCL_ALLOWANCE_ONCE (online mode): `on` (default) grants a task the regret allowance (16 of its calls) in
  // one job only: a task the table records pairs for but no entry (an earlier job searched it and ended mid-search
  // with no lead) may explore only the share of its calls (AUTOCCL_REGRET_PCT), so a size a job gives few calls
  // is not explored afresh at every start; `off` grants it at every start. Over sockets on one H200 the third
  // warm pass left 0 of 8 tasks searching against 1 with `off` (h200x1/default-engine-hosts). With it, such a job
  // that ends the search with no lead either (16 samples or more, and no point ahead of NCCL's median by a duel's
  // margin) writes NCCL's choice for it: the next start runs it untimed (engine tests online_second_chance_*).
  bool allowanceOnce = true;
  // AUTOCCL_REGRET_EARN_PCT (online mode, opt-in): a task earns its regret allowance at this percent of each of its
  // calls (up to the 16 calls), its search waiting on its incumbent, untimed, while it earns instead of ending, and
  // the calls in flight are charged at an estimate (30 % of NCCL's time, an earlier job's record, or a measured
  // excess) before their samples return: a job that gives a task a few dozen calls, launched blind in loops, loses
  // about AUTOCCL_REGRET_PCT plus this percent of them at most to exploration. 5 cut short nccl-tests loops' losses
  // on one H100 over sockets (0.995x plain against 0.895x at -w 1 -n 20) and cost -w 20 -n 40 loops, whose searches
  // it lengthens into the next launch (0.968x against 0.996x); 0 (default): the whole allowance from the first
  // call, only samples counted (search test earnedAllowance; benchmarks/results/h100x1/earned-allowance-hosts).
  double regretEarn = 0;
  // AUTOCCL_WAIT_REGRET (online mode): `on` counts the time a rank waited for an exploring task's plan (a lookup
  // that had to ask the authority: over TCP a round trip) into the task's regret, as the longest wait of any rank at
  // that call, at most 5 ms a call (search::TaskSearch::chargeWait); `off` (default until a GPU run says which is
  // faster) counts only the samples, as if the waits were free. The authority's setting decides what is counted; a
  // rank sends its waits only with it on. A host that runs ahead of its GPU hides a wait: counted whole, it is an
  // upper bound of what the caller lost.
  bool waitRegret = false;
  // AUTOCCL_ARM_SEARCH (online mode, with AUTOCCL_STEP_ARMS): `on` (default) searches a task again within the channel
  // cap of the step guard's winning arm where the arm caps every call of the task (search::TaskSearch::retuneWithin:
  // the per-task search inside the step's resource policy); `off` keeps the task's pin, which the arm caps. The
  // authority's setting decides.
  bool armSearch = true;
  // AUTOCCL_EXPOSURE_EVERY (online mode): 0 (default) leaves the exposure estimate (engine/exposure.h) the windows
  // the search and the guard time anyway; N >= 4 times every call of the detected iteration on the authority for it:
  // the iterations timed for the search or a guard round whole, and after them a block of 4 iterations in every N.
  // Under the launch clock (the default on GPUs) only the searches' samples are timed, so without it a real job
  // gave the estimate 1-4 whole iterations (two hosts on one H200, DDP and FSDP2): no verdict. The extra windows
  // go to the estimate only; the searches see those calls as untimed, as without the setting. The kernel clock
  // times every call while timing is on: there only the blocks after the searches add windows.
  uint64_t exposureEvery = 0;
  static constexpr uint64_t kExposureEveryForArms = 8;
  // AUTOCCL_GUARD (online and table modes): `on` (default) checks the tuned plan against NCCL's own choices on the
  // iteration time of a communicator whose calls repeat in iterations of two or more calls (engine/step_guard.h);
  // `off`: the tasks' own searches alone (online), the table's entries applied unchecked (table). Table mode
  // under the guard decides through the coordinator as online mode does (the authority's table, every task pinned
  // on its entry untimed, no search), so that every rank switches at the same iteration.
  bool guard = true;
  // The ranks agree through a coordinator: online mode, and table mode under the step guard.
  bool coordinated() const { return mode == Mode::Online || (mode == Mode::Table && guard); }
  // AUTOCCL_STEP_ARMS (online mode, with the guard): `off` (default) or `hidden=A1[,A2...]` (1-4 distinct arms,
  // each a channel count C in [1, 64], a protocol P (ll, ll128, simple) or both as C/P, each optionally followed
  // by +E, or +E alone, E a channel count or max): the guard's round also compares, per arm, the tuned plan with
  // every call of the iteration but its last at most C channels and on protocol P, and the last call at least E
  // channels (the resource-sharing study's policy: few SMs while hidden, many where nothing overlaps), and keeps
  // the fastest arm that beats NCCL's choices on the iteration time (engine/step_guard.h).
  // The authority plans the arms, every rank applies its plan; every rank also keeps asking for settled tasks'
  // calls under it (so it is an agreed setting, AgreedSettings).
  std::vector<ArmLimit> stepArmsHidden;
  // `estimated=A1[,A2...]` (alone or after `hidden=...;`): per arm, the tuned plan with the calls the exposure
  // estimate calls hidden so limited, and with +E the others raised (the authority's estimate at each round; left
  // out of a round while it calls none hidden). Turns AUTOCCL_EXPOSURE_EVERY on (kExposureEveryForArms) unless it is set.
  std::vector<ArmLimit> stepArmsEstimated;
  // AUTOCCL_COORD_TIMEOUT_MS, in [100, 3600000]: how long a rank waits for a decision of the coordinator
  // before its call fails. AUTOCCL_COORD_LINGER_MS, in [0, 600000]: how long the process serving the TCP
  // coordinator keeps serving at exit for ranks still running (engine::Coordination::lingerAtExit).
  int coordTimeoutMs = 30000;
  int coordLingerMs = 5000;
  // AUTOCCL_COORD_FAULTS=drop=P,dup=P,delay_ms=N,seed=S (tests): faults every TCP connection of the coordinator
  // injects into its frames after the handshake (coord::Faults).
  coord::Faults coordFaults;
  // AUTOCCL_SEARCH_DEBUG (any value): the online search's diagnostics in NCCL's log (INFO, subsystem TUNING):
  // every candidate's evidence when a task pins, each duel. Decisions unchanged.
  bool searchDebug = false;
  bool valid = true;
  std::string error;        // why !valid (one line, for the single WARN)
};

// getenv-like lookup (injectable for tests); returns nullptr when unset.
using EnvLookup = std::function<const char*(const char*)>;
Settings loadSettings(const EnvLookup& env);

// The settings every rank of a communicator must share because each rank applies them itself to the
// authority's decisions (the engine's channel clamps) or because NCCL does (the algorithms, protocols and
// channel counts a communicator allows): a digest of their values (never 0), and their names for the
// error a rank with other values gets from the coordinator (mode online over TCP).
struct AgreedSettings {
  uint64_t digest = 0;
  std::string names;
};
AgreedSettings agreedSettings(const Settings& s, const EnvLookup& env);

}  // namespace autoccl::engine
