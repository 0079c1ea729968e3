// The online source's fields of the trace's task record (engine/task_record.h): their order and format, which
// the trace report and tasks.md read.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "engine/task_record.h"

namespace {

using autoccl::engine::TaskLookups;
using autoccl::engine::TaskSearchRecord;
using autoccl::engine::taskRecordFields;

TEST(engine, task_record_unknown_task) {
  EXPECT_EQ(taskRecordFields(nullptr, nullptr), ",\"gain\":null,\"converged_at\":null");
}

TEST(engine, task_record_follower) {
  TaskLookups l;
  l.board = "tcp";
  l.lookups = 7;
  l.asked = 2;
  l.waitNs = 1500;
  l.waitMaxNs = 1000;
  l.slow = {{30, 250000}, {12, 400000}};  // listed by call
  EXPECT_EQ(taskRecordFields(&l, nullptr),
            ",\"board\":\"tcp\",\"lookups\":7,\"lookups_asked\":2,\"lookup_us\":1.5,\"lookup_max_us\":1.0"
            ",\"slow_lookups\":[[12,400.0],[30,250.0]],\"gain\":null,\"converged_at\":null");
  l.askAheadMax = 6;  // AUTOCCL_ASK_AHEAD=auto asked ahead
  EXPECT_NE(taskRecordFields(&l, nullptr).find(",\"lookup_max_us\":1.0,\"ask_ahead_max\":6,"), std::string::npos);
}

TEST(engine, task_record_authority) {
  TaskLookups l;
  l.board = "local";
  TaskSearchRecord r;
  r.stats.samples = 40;
  r.stats.defaultMedian = 110.0;
  r.stats.bestMedian = 100.0;
  r.stats.smallTask = true;
  r.stats.convergedAt = 22;
  r.rankScored = 3;
  r.searchFrom = 1;
  const std::string f = taskRecordFields(&l, &r);
  EXPECT_EQ(f.rfind(",\"board\":\"local\",\"lookups\":0,", 0), 0u) << f;
  const size_t search = f.find(",\"search_samples\":40,");
  const size_t slow = f.find(",\"slow_lookups\":[]");
  const size_t gain = f.find(",\"gain\":0.1000,\"converged_at\":22,\"search_from\":1,\"default_us\":110.000,"
                             "\"best_us\":100.000");
  ASSERT_NE(search, std::string::npos) << f;
  ASSERT_NE(slow, std::string::npos) << f;
  ASSERT_NE(gain, std::string::npos) << f;
  EXPECT_LT(search, slow);
  EXPECT_LT(slow, gain);
  EXPECT_NE(f.find(",\"rank_scored\":3,\"shorter_elsewhere\":0,"), std::string::npos) << f;
  EXPECT_NE(f.find(",\"small_task\":true,\"small_by_model\":false,"), std::string::npos) << f;
  EXPECT_NE(f.find(",\"regret_stop\":false,\"job_regret_stop\":false,"), std::string::npos) << f;
  r.stats.regretStop = r.stats.jobRegretStop = true;  // ended by the job's budget
  EXPECT_NE(taskRecordFields(&l, &r).find(",\"regret_stop\":true,\"job_regret_stop\":true,"), std::string::npos);
  r.stats.convergedAt = autoccl::search::kForever;  // not converged: null
  EXPECT_NE(taskRecordFields(&l, &r).find(",\"converged_at\":null,\"search_from\":1,"), std::string::npos);
}

// A search whose NCCL's choice was ranked unmeasurable and then sampled wrote "gain":-nan,"default_us":inf: the
// line was no JSON (the emulator's TCP test caught one in a full run). Every number is finite or null.
TEST(engine, task_record_non_finite_numbers_are_null) {
  TaskSearchRecord r;
  r.stats.defaultMedian = HUGE_VAL;
  r.stats.bestMedian = HUGE_VAL;
  r.stats.regretMicros = -HUGE_VAL;
  r.stats.modelDefault = std::nan("");
  const std::string f = taskRecordFields(nullptr, &r);
  EXPECT_EQ(f.find("inf"), std::string::npos) << f;
  EXPECT_EQ(f.find("nan"), std::string::npos) << f;
  EXPECT_NE(f.find(",\"gain\":0.0000,"), std::string::npos) << f;
  EXPECT_NE(f.find(",\"default_us\":null,\"best_us\":null"), std::string::npos) << f;
  EXPECT_NE(f.find(",\"regret_us\":null,"), std::string::npos) << f;
  EXPECT_NE(f.find(",\"model_us\":null,"), std::string::npos) << f;
  r.stats.defaultMedian = 110.0;  // one side measured: no gain claimed
  EXPECT_NE(taskRecordFields(nullptr, &r).find(",\"gain\":0.0000,"), std::string::npos);
}

}  // namespace
