// ChangeLog (embedding/change_log.h): off until started; then the rows marked and the keys removed,
// compared with a set of rows and a list of keys kept beside it on random marks; untracked writes
// kept until the next start.
#include "embedding/change_log.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <vector>

namespace recemb::internal {
namespace {

std::vector<int64_t> rows_marked(const ChangeLog& log) {
  std::vector<int64_t> rows;
  for (size_t r = 0; r < log.changed_rows().size(); ++r) {
    if (log.changed_rows()[r] == 1) rows.push_back(static_cast<int64_t>(r));
  }
  return rows;
}

TEST(ChangeLogTest, OffUntilStarted) {
  ChangeLog log;
  log.mark(3);
  log.removed(7);
  EXPECT_FALSE(log.tracking());
  EXPECT_TRUE(log.changed_rows().empty());  // nothing allocated
  EXPECT_TRUE(log.removed_keys().empty());
  log.mark_untracked();  // kept: a base must follow whatever tracking starts later
  EXPECT_TRUE(log.untracked());
  log.start(5);
  EXPECT_TRUE(log.tracking());
  EXPECT_FALSE(log.untracked());
  EXPECT_EQ(log.changed_rows().size(), 5u);
}

TEST(ChangeLogTest, RecordsWhatWasMarkedUntilCleared) {
  std::mt19937_64 rng(19);
  ChangeLog log;
  log.start(100);
  std::set<int64_t> rows;
  std::vector<int64_t> keys;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 30; ++i) {
      const auto row = static_cast<int64_t>(rng() % 100);
      log.mark(row);
      rows.insert(row);
      const auto key = static_cast<int64_t>(rng() >> 1) - (int64_t{1} << 40);
      if (rng() % 3 == 0) {
        log.removed(key);
        keys.push_back(key);
      }
    }
    ASSERT_EQ(rows_marked(log), std::vector<int64_t>(rows.begin(), rows.end()));
    ASSERT_EQ(std::vector<int64_t>(log.removed_keys().begin(), log.removed_keys().end()), keys);
    if (round % 5 == 4) {
      log.clear();
      rows.clear();
      keys.clear();
      ASSERT_TRUE(log.tracking());
      ASSERT_TRUE(rows_marked(log).empty());
    }
  }
  log.mark_all();
  EXPECT_EQ(rows_marked(log).size(), 100u);
  log.mark_untracked();
  log.clear();  // a delta does not end an untracked write: only a new base (start) does
  EXPECT_TRUE(log.untracked());
}

}  // namespace
}  // namespace recemb::internal
