#include "dlrm/example_batch.h"

#include <cmath>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <vector>

#include "recemb/error.h"

namespace recemb::dlrm {
namespace {

TEST(DenseValueTest, IsLog1pOfTheClampedCount) {
  const std::vector<int64_t> counts = {-2,
                                       -1,
                                       0,
                                       1,
                                       2,
                                       7,
                                       1000,
                                       123456789,
                                       std::numeric_limits<int64_t>::max(),
                                       std::numeric_limits<int64_t>::min()};
  for (const int64_t x : counts) {
    // Reference in long double: log(1 + x) of the clamped count.
    const long double clamped = x < 0 ? 0.0L : static_cast<long double>(x);
    const auto expected = static_cast<double>(std::log(1.0L + clamped));
    EXPECT_NEAR(dense_value(x), expected, 1e-6 * std::max(1.0, expected)) << "x = " << x;
  }
  EXPECT_EQ(dense_value(-1), 0.0f);
  EXPECT_EQ(dense_value(0), 0.0f);
}

// The small counts come from a table (example_batch.cc): bitwise the value computed in double and
// rounded to float, on both sides of the table's end, so files and synthetic data give the same
// features as before it.
TEST(DenseValueTest, SmallCountsAreBitwiseTheRoundedDoubleLog1p) {
  for (int64_t x = 0; x < 10'000; ++x) {
    ASSERT_EQ(dense_value(x), static_cast<float>(std::log1p(static_cast<double>(x)))) << x;
  }
}

// Fills a batch the way a source does (stride = capacity while filling) and checks the final
// layout against the values written, for full and short batches.
TEST(ExampleBatchTest, FinishMovesToFeatureMajorLayoutOfTheFinalSize) {
  const uint64_t seed = 17;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int64_t> id(0, 1'000'000);
  std::uniform_real_distribution<float> value(0.0f, 10.0f);
  ExampleBatch batch;
  for (const auto& [capacity, size] : std::vector<std::pair<int64_t, int64_t>>{
           {8, 8}, {8, 3}, {1, 1}, {5, 0}, {64, 63}, {64, 1}}) {
    SCOPED_TRACE(::testing::Message() << "capacity " << capacity << " size " << size);
    begin_batch(batch, capacity);
    ASSERT_EQ(batch.categorical.size(), static_cast<size_t>(capacity * kNumCategoricalFeatures));
    // expected[f][i]: what example i wrote for feature f.
    std::vector<std::vector<int64_t>> expected(kNumCategoricalFeatures);
    std::vector<float> labels, dense;
    for (int64_t i = 0; i < size; ++i) {
      batch.labels[static_cast<size_t>(i)] = static_cast<float>(i % 2);
      labels.push_back(static_cast<float>(i % 2));
      for (int j = 0; j < kNumDenseFeatures; ++j) {
        const float v = value(random);
        batch.dense[static_cast<size_t>(i * kNumDenseFeatures + j)] = v;
        dense.push_back(v);
      }
      for (int f = 0; f < kNumCategoricalFeatures; ++f) {
        const int64_t v = id(random);
        batch.categorical[static_cast<size_t>(f * capacity + i)] = v;
        expected[static_cast<size_t>(f)].push_back(v);
      }
    }
    finish_batch(batch, capacity, size);
    EXPECT_EQ(batch.size, size);
    EXPECT_EQ(batch.labels, labels);
    EXPECT_EQ(batch.dense, dense);
    ASSERT_EQ(batch.categorical.size(), static_cast<size_t>(size * kNumCategoricalFeatures));
    for (int f = 0; f < kNumCategoricalFeatures; ++f) {
      EXPECT_THAT(batch.categorical_ids(f), ::testing::ElementsAreArray(expected[f]))
          << "feature " << f;
    }
  }
}

TEST(ExampleBatchTest, ReuseAllocatesNothingOnceGrown) {
  ExampleBatch batch;
  begin_batch(batch, 100);
  finish_batch(batch, 100, 100);
  const float* labels = batch.labels.data();
  const float* dense = batch.dense.data();
  const int64_t* categorical = batch.categorical.data();
  for (const int64_t capacity : {100, 50, 100, 7}) {
    begin_batch(batch, capacity);
    finish_batch(batch, capacity, capacity / 2);
    EXPECT_EQ(batch.labels.data(), labels);
    EXPECT_EQ(batch.dense.data(), dense);
    EXPECT_EQ(batch.categorical.data(), categorical);
  }
}

TEST(ExampleBatchTest, BeginRejectsANonPositiveCapacityAndLeavesTheBatch) {
  ExampleBatch batch;
  begin_batch(batch, 3);
  finish_batch(batch, 3, 2);
  for (const int64_t capacity : {0, -5}) {
    try {
      begin_batch(batch, capacity);
      FAIL() << "no exception for capacity " << capacity;
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(),
                  ::testing::HasSubstr("max_examples is " + std::to_string(capacity)));
    }
    EXPECT_EQ(batch.size, 2);
    EXPECT_EQ(batch.labels.size(), 2u);
    EXPECT_EQ(batch.categorical.size(), 2u * kNumCategoricalFeatures);
  }
}

}  // namespace
}  // namespace recemb::dlrm
