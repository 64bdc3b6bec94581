#include "storage/pending_counts.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "testing/key_pool.h"

namespace recemb::internal {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(PendingCountsTest, ExactCountsMatchTheReference) {
  std::mt19937_64 random(8);
  const test::KeyPool pool(9, 300);
  PendingCounts counts(10000);
  std::map<int64_t, int64_t> pending;
  for (int i = 0; i < 20000; ++i) {
    const int64_t key = pool.pick(random);
    if (random() % 4 == 0) {
      counts.forget(key);
      pending.erase(key);
    } else {
      const auto occurrences = static_cast<int64_t>(random() % 3);
      counts.add(key, occurrences);
      if (occurrences > 0) pending[key] += occurrences;
    }
    ASSERT_EQ(counts.count(key), pending.contains(key) ? pending[key] : 0) << key;
  }
  EXPECT_FALSE(counts.sketch_in_use());
  EXPECT_EQ(counts.exact_size(), static_cast<int64_t>(pending.size()));
  const std::vector<std::pair<int64_t, int64_t>> expected(pending.begin(), pending.end());
  EXPECT_EQ(counts.exact_entries(), expected);
  for (const int64_t key : pool.keys()) {
    EXPECT_EQ(counts.count(key), pending.contains(key) ? pending[key] : 0);
  }

  // add puts a checkpoint's pairs back.
  PendingCounts restored(10000);
  for (const auto& [key, count] : counts.exact_entries()) restored.add(key, count);
  EXPECT_EQ(restored.exact_entries(), expected);
}

TEST(PendingCountsTest, ExactCountsSaturate) {
  PendingCounts counts(4);
  counts.add(kMax, kMax - 1);
  counts.add(kMax, 1);
  EXPECT_EQ(counts.count(kMax), kMax);
  counts.add(kMax, 5);
  EXPECT_EQ(counts.count(kMax), kMax);
  counts.add(kMax, 0);
  EXPECT_EQ(counts.count(kMax), kMax);
  EXPECT_EQ(counts.exact_size(), 1);
}

// Beyond exact_limit keys the sketch takes over: counts may be too high, never too low, and the
// exact entries stay within the limit.
TEST(PendingCountsTest, CountsBeyondTheLimitNeverUnderCount) {
  std::mt19937_64 random(10);
  const int64_t limit = 100;
  PendingCounts counts(limit);
  std::map<int64_t, int64_t> pending;
  int64_t over_counted = 0;
  for (int i = 0; i < 200000; ++i) {
    // Mostly a few hundred thousand distinct keys, some of them often.
    const int64_t key = random() % 2 == 0 ? static_cast<int64_t>(random() % 300000) - 150000
                                          : static_cast<int64_t>(random() % 50);
    if (random() % 50 == 0) {
      counts.forget(key);
      pending.erase(key);
      continue;
    }
    const auto occurrences = static_cast<int64_t>(1 + random() % 3);
    counts.add(key, occurrences);
    pending[key] += occurrences;
    ASSERT_LE(counts.exact_size(), limit);
  }
  EXPECT_TRUE(counts.sketch_in_use());
  EXPECT_EQ(counts.exact_size(), limit);
  for (const auto& [key, count] : pending) {
    const int64_t estimate = counts.count(key);
    ASSERT_GE(estimate, count) << "key " << key;
    over_counted += estimate > count;
  }
  // The sketch is not useless: most keys are counted exactly despite 1.5e5 keys in 2^16 columns.
  EXPECT_LT(over_counted, static_cast<int64_t>(pending.size()) / 2);
  // A key the sketch counted that later gets an exact entry keeps its count.
  for (const auto& [key, count] : counts.exact_entries()) {
    EXPECT_GE(count, pending.contains(key) ? pending[key] : 0);
  }
}

TEST(PendingCountsTest, ZeroLimitUsesOnlyTheSketch) {
  PendingCounts counts(0);
  counts.add(kMin, 2);
  counts.add(kMin, 3);
  EXPECT_TRUE(counts.sketch_in_use());
  EXPECT_EQ(counts.exact_size(), 0);
  EXPECT_GE(counts.count(kMin), 5);
  EXPECT_TRUE(counts.exact_entries().empty());
}

// clear() leaves counts that behave as new ones: no exact entry, no sketch, and the same counts
// for the same adds.
TEST(PendingCountsTest, ClearedCountsBehaveAsNewOnes) {
  std::mt19937_64 random(12);
  PendingCounts used(20);
  std::vector<int64_t> added;
  for (int i = 0; i < 400; ++i) {
    const auto key = static_cast<int64_t>(random() % 1000) + 5000;
    used.add(key, 2);  // beyond 20 keys: the sketch
    added.push_back(key);
  }
  ASSERT_TRUE(used.sketch_in_use());
  ASSERT_EQ(used.exact_size(), 20);
  const int64_t grown_bytes = used.memory_bytes();
  used.clear();
  EXPECT_FALSE(used.sketch_in_use());
  EXPECT_EQ(used.exact_size(), 0);
  EXPECT_TRUE(used.exact_entries().empty());
  EXPECT_EQ(used.memory_bytes(), grown_bytes);  // kept, not freed
  for (const int64_t key : added) EXPECT_EQ(used.count(key), 0);
  PendingCounts fresh(20);
  for (int i = 0; i < 300; ++i) {
    const auto key = static_cast<int64_t>(random() % 1000);
    if (i % 7 == 0) {
      fresh.forget(key);
      used.forget(key);
    } else {
      fresh.add(key, 1 + i % 3);
      used.add(key, 1 + i % 3);
    }
    ASSERT_EQ(used.count(key), fresh.count(key));
  }
  EXPECT_TRUE(fresh.sketch_in_use());
  EXPECT_EQ(used.sketch_in_use(), fresh.sketch_in_use());
  EXPECT_EQ(used.exact_entries(), fresh.exact_entries());
}

// Nothing before the first add; then the exact table within its bound (max(16, 2.5 * limit)
// entries of 16 bytes), and the 1 MiB sketch only once a key does not fit.
TEST(PendingCountsTest, MemoryIsBoundedByTheLimit) {
  const int64_t limit = 1000;
  PendingCounts counts(limit);
  EXPECT_EQ(counts.memory_bytes(), 0);
  for (int64_t key = 0; key < limit; ++key) counts.add(key * 7919, 1);
  EXPECT_FALSE(counts.sketch_in_use());
  EXPECT_GE(counts.memory_bytes(), limit * 5 / 4 * 16);
  EXPECT_LE(counts.memory_bytes(), limit * 5 / 2 * 16);
  const int64_t exact_bytes = counts.memory_bytes();
  counts.add(-1, 1);
  EXPECT_TRUE(counts.sketch_in_use());
  EXPECT_EQ(counts.memory_bytes(), exact_bytes + (int64_t{1} << 20));
  for (int64_t key = 0; key < 10 * limit; ++key) counts.add(-key, 1);
  EXPECT_EQ(counts.memory_bytes(), exact_bytes + (int64_t{1} << 20));
}

}  // namespace
}  // namespace recemb::internal
