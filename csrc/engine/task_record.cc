#include "engine/task_record.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "engine/trace.h"

namespace autoccl::engine {

namespace {

std::string lookupFields(const TaskLookups& l) {
  char head[256];
  std::snprintf(head, sizeof head,
                ",\"board\":\"%s\",\"lookups\":%" PRIu64 ",\"lookups_asked\":%" PRIu64
                ",\"lookup_us\":%.1f,\"lookup_max_us\":%.1f",
                l.board, l.lookups, l.asked, 1e-3 * static_cast<double>(l.waitNs), 1e-3 * static_cast<double>(l.waitMaxNs));
  std::string out = head;
  if (l.askAheadMax > 0) out += ",\"ask_ahead_max\":" + std::to_string(l.askAheadMax);
  return out;
}

std::string slowFields(const TaskLookups& l) {
  std::vector<std::pair<uint64_t, uint64_t>> v = l.slow;
  std::sort(v.begin(), v.end());
  std::string out = ",\"slow_lookups\":[";  // [call, us]
  for (size_t i = 0; i < v.size(); ++i) {
    char e[64];
    std::snprintf(e, sizeof e, "%s[%" PRIu64 ",%.1f]", i ? "," : "", v[i].first, 1e-3 * static_cast<double>(v[i].second));
    out += e;
  }
  return out + "]";
}

// What the search got from the GPU: samples used, given up as lost, arrived after being given up, and why it
// stopped where it did.
std::string searchFields(const TaskSearchRecord& r) {
  const search::Stats& st = r.stats;
  char buf[1024];  // at most ~800 bytes with every field at its widest
  std::snprintf(buf, sizeof buf,
                ",\"search_samples\":%" PRIu64 ",\"search_lost\":%" PRIu64 ",\"search_late\":%" PRIu64
                ",\"search_prior_samples\":%" PRIu64 ",\"search_wait_calls\":%" PRIu64 ",\"search_free_wait_calls\":%" PRIu64 ",\"search_ahead_wait_calls\":%" PRIu64
                ",\"search_duel_extensions\":%" PRIu64 ",\"rank_scored\":%" PRIu64 ",\"shorter_elsewhere\":%" PRIu64
                ",\"regret_us\":%s,\"wait_regret_us\":%s,\"small_task\":%s,\"small_by_model\":%s,\"model_us\":%s,\"table_default\":%s"
                ",\"regret_stop\":%s,\"job_regret_stop\":%s,\"abandoned\":%" PRIu64 ",\"skipped_behind\":%" PRIu64
                ",\"recorded_starts\":%" PRIu64 ",\"regret_allowance\":%s,\"nccl_own_incumbent\":%s"
                ",\"regret_waits\":%" PRIu64 ",\"search_cap_retunes\":%" PRIu64 ",\"search_channel_cap\":%d",
                st.samples, st.lostSamples, st.lateSamples, st.priorSamples, st.waitCalls, st.freeWaitCalls, st.aheadWaitCalls,
                st.duelExtensions, r.rankScored, r.shorterElsewhere, jsonNumber(st.regretMicros, 1).c_str(),
                jsonNumber(st.waitRegretMicros, 1).c_str(), st.smallTask ? "true" : "false",
                st.smallByModel ? "true" : "false", jsonNumber(st.modelDefault, 2).c_str(), st.tableDefault ? "true" : "false",
                st.regretStop ? "true" : "false", st.jobRegretStop ? "true" : "false", st.abandoned,
                st.skippedBehind, st.recordedStarts, jsonNumber(st.regretAllowance, 0).c_str(),
                st.ncclOwnIncumbent ? "true" : "false", st.regretWaits, st.capRetunes, st.channelCap);
  return buf;
}

std::string outcomeFields(const TaskSearchRecord& r) {
  const search::Stats& st = r.stats;
  const bool both = std::isfinite(st.bestMedian) && std::isfinite(st.defaultMedian);
  const double gain = both && st.bestMedian > 0 && st.defaultMedian > 0 ? st.defaultMedian / st.bestMedian - 1.0 : 0.0;
  char converged[32] = "null";
  if (st.convergedAt != search::kForever) std::snprintf(converged, sizeof converged, "%" PRIu64, st.convergedAt);
  char head[128];
  std::snprintf(head, sizeof head, ",\"gain\":%.4f,\"converged_at\":%s,\"search_from\":%" PRIu64, gain, converged,
                r.searchFrom);
  return head + (",\"default_us\":" + jsonNumber(st.defaultMedian, 3)) + ",\"best_us\":" + jsonNumber(st.bestMedian, 3);
}

}  // namespace

std::string taskRecordFields(const TaskLookups* lookups, const TaskSearchRecord* search) {
  std::string out = lookups ? lookupFields(*lookups) : std::string();
  if (search) out += searchFields(*search);
  if (lookups) out += slowFields(*lookups);
  out += search ? outcomeFields(*search) : std::string(",\"gain\":null,\"converged_at\":null");
  return out;
}

}  // namespace autoccl::engine
