#include "storage/initializer.h"

#include <cmath>
#include <gtest/gtest.h>
#include <vector>

namespace recemb::internal {
namespace {

std::vector<float> fill(const Initializer& init, uint64_t seed, int64_t first, int64_t rows,
                        int64_t dim) {
  std::vector<float> values(static_cast<size_t>(rows * dim), -7.0f);
  initialize_rows(init, seed, first, rows, dim, values);
  return values;
}

TEST(InitializerTest, TruncatedNormalHasTfDefaultStddevAndBounds) {
  const int64_t dim = 16;
  const std::vector<float> values = fill(TruncatedNormal{}, 42, 0, 4000, dim);
  const double stddev = 1.0 / std::sqrt(double{dim});
  double sum = 0, sum_squares = 0;
  for (const float v : values) {
    EXPECT_LE(std::abs(v), 2 * stddev + 1e-6);
    sum += v;
    sum_squares += double{v} * v;
  }
  const double n = static_cast<double>(values.size());
  const double mean = sum / n;
  // A normal truncated at 2 sigma has variance 0.774 sigma^2.
  const double variance = sum_squares / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(variance / (stddev * stddev), 0.774, 0.02);
}

TEST(InitializerTest, TruncatedNormalMeanAndStddevAreHonoured) {
  const std::vector<float> values =
      fill(TruncatedNormal{.mean = 3.0f, .stddev = 0.5f}, 1, 0, 2000, 8);
  double sum = 0;
  for (const float v : values) {
    EXPECT_GE(v, 3.0f - 1.0f - 1e-6f);
    EXPECT_LE(v, 3.0f + 1.0f + 1e-6f);
    sum += v;
  }
  EXPECT_NEAR(sum / static_cast<double>(values.size()), 3.0, 0.02);
}

TEST(InitializerTest, RandomValuesDoNotDependOnHowRowsAreSplit) {
  const uint64_t seed = table_seed(7, "video");
  const std::vector<float> whole = fill(TruncatedNormal{}, seed, 0, 100, 5);
  const std::vector<float> head = fill(TruncatedNormal{}, seed, 0, 37, 5);
  const std::vector<float> tail = fill(TruncatedNormal{}, seed, 37, 63, 5);
  std::vector<float> joined = head;
  joined.insert(joined.end(), tail.begin(), tail.end());
  EXPECT_EQ(whole, joined);
}

TEST(InitializerTest, SeedAndTableNameChangeTheValues) {
  EXPECT_NE(table_seed(1, "a"), table_seed(2, "a"));
  EXPECT_NE(table_seed(1, "a"), table_seed(1, "b"));
  EXPECT_EQ(table_seed(1, "a"), table_seed(1, "a"));
  EXPECT_NE(fill(TruncatedNormal{}, table_seed(1, "a"), 0, 4, 4),
            fill(TruncatedNormal{}, table_seed(1, "b"), 0, 4, 4));
}

TEST(InitializerTest, ConstantRowIdAndCallback) {
  EXPECT_EQ(fill(Constant{.value = 0.25f}, 0, 5, 2, 3), std::vector<float>(6, 0.25f));
  EXPECT_EQ(fill(RowId{.offset = 1.0f}, 0, 5, 2, 2), (std::vector<float>{6, 6, 7, 7}));
  const InitializerCallback callback = [](int64_t first_row, int64_t num_rows, int64_t dim,
                                          std::span<float> values) {
    for (int64_t r = 0; r < num_rows; ++r) {
      for (int64_t d = 0; d < dim; ++d) {
        values[static_cast<size_t>(r * dim + d)] = static_cast<float>((first_row + r) * 10 + d);
      }
    }
  };
  EXPECT_EQ(fill(callback, 0, 3, 2, 2), (std::vector<float>{30, 31, 40, 41}));
}

}  // namespace
}  // namespace recemb::internal
