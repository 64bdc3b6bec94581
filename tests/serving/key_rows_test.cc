// The serving index of a dynamic table (src/serving/key_rows.cc) against a std::map of the same
// keys, on random and adversarial keys, present and absent.
#include "serving/key_rows.h"

#include <algorithm>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb::internal {
namespace {

using test::error_of;
using ::testing::HasSubstr;

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Checks every probe of `index` (built from sorted `keys`) against a map, one by one and batched
// (in place and into another array).
void expect_rows(const KeyRows& index, const std::vector<int64_t>& keys,
                 const std::vector<int64_t>& probes) {
  std::map<int64_t, int64_t> reference;
  for (size_t i = 0; i < keys.size(); ++i) reference[keys[i]] = static_cast<int64_t>(i);
  std::vector<int64_t> expected;
  for (const int64_t key : probes) {
    const auto found = reference.find(key);
    expected.push_back(found == reference.end() ? static_cast<int64_t>(keys.size())
                                                : found->second);
  }
  std::vector<int64_t> single;
  for (const int64_t key : probes) single.push_back(index.find(key));
  EXPECT_EQ(single, expected);
  std::vector<int64_t> batched(probes.size(), -7);
  index.find(probes, batched.data());
  EXPECT_EQ(batched, expected);
  std::vector<int64_t> in_place = probes;
  index.find(in_place, in_place.data());
  EXPECT_EQ(in_place, expected);
}

std::vector<int64_t> sorted_unique(std::vector<int64_t> keys) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

TEST(KeyRowsTest, RandomKeysPresentAndAbsentMatchAMap) {
  std::mt19937_64 random(21);
  for (const int n : {1, 2, 4, 5, 6, 37, 1000, 100000}) {
    std::vector<int64_t> drawn(static_cast<size_t>(n));
    for (int64_t& key : drawn) key = static_cast<int64_t>(random());
    const std::vector<int64_t> keys = sorted_unique(drawn);
    const KeyRows index(keys);
    EXPECT_EQ(index.size(), static_cast<int64_t>(keys.size()));
    EXPECT_EQ(index.absent_row(), index.size());
    // Every key, as many absent ones, and the extremes.
    std::vector<int64_t> probes = keys;
    for (int i = 0; i < n; ++i) probes.push_back(static_cast<int64_t>(random()));
    probes.insert(probes.end(), {0, -1, kMin, kMax});
    std::shuffle(probes.begin(), probes.end(), random);
    expect_rows(index, keys, probes);
    // At most 80% full: 16 bytes a key (and at least one bucket).
    EXPECT_LE(index.memory_bytes(), std::max<int64_t>(64, 16 * index.size() + 64));
  }
}

TEST(KeyRowsTest, AdversarialKeysSequentialExtremesAndCrowdedBuckets) {
  // Sequential runs, negatives, the int64 extremes: every one a key, their neighbours absent.
  std::vector<int64_t> keys;
  for (int64_t k = -500; k < 500; ++k) keys.push_back(k * 2);
  keys.insert(keys.end(), {kMin, kMin + 1, kMax - 1, kMax});
  keys = sorted_unique(keys);
  const KeyRows index(keys);
  std::vector<int64_t> probes;
  for (int64_t k = -1001; k < 1001; ++k) probes.push_back(k);
  probes.insert(probes.end(), {kMin, kMin + 1, kMin + 2, kMax, kMax - 1, kMax - 2});
  expect_rows(index, keys, probes);

  // A handful of keys in one bucket (5 keys: one bucket, and more keys than a bucket's entries
  // among few buckets), so that keys pass full buckets and searches wrap around the table.
  for (const int n : {3, 4, 5, 9, 12, 13}) {
    std::vector<int64_t> few;
    for (int i = 0; i < n; ++i) few.push_back(int64_t{i} * 1'000'003 - 7);
    const KeyRows crowded(few);
    std::vector<int64_t> all = few;
    for (int i = 0; i < 200; ++i) all.push_back(i - 100);
    expect_rows(crowded, few, all);
  }
}

TEST(KeyRowsTest, NoKeysMapsEverythingToTheZeroRow) {
  const KeyRows index(std::vector<int64_t>{});
  EXPECT_EQ(index.size(), 0);
  expect_rows(index, {}, {0, 1, kMin, kMax});
}

TEST(KeyRowsTest, KeysOutOfOrderOrRepeatedAreRejected) {
  EXPECT_THAT(error_of<InvalidArgument>([] {
                KeyRows(std::vector<int64_t>{1, 3, 2});
              }),
              HasSubstr("keys[2] = 2 is not greater than keys[1] = 3"));
  EXPECT_THAT(error_of<InvalidArgument>([] {
                KeyRows(std::vector<int64_t>{-4, -4});
              }),
              HasSubstr("keys[1] = -4 is not greater than keys[0] = -4"));
}

}  // namespace
}  // namespace recemb::internal
