#include "dlrm/criteo_profile.h"

#include <algorithm>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <numeric>
#include <random>
#include <vector>

#include "recemb/error.h"

namespace recemb::dlrm {
namespace {

using ::testing::HasSubstr;

int64_t total(std::span<const int64_t> sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
}

TEST(CriteoProfileTest, PublishedProfiles) {
  // Totals as published with the lists (DLRM / torchrec / MLPerf).
  EXPECT_EQ(total(kCriteoKaggleCardinalities), 33'762'577);
  EXPECT_EQ(total(kCriteoTerabyteCardinalities), 204'184'588);
  EXPECT_EQ(kCriteoKaggleCardinalities[2], 10'131'227);  // C3, the largest Kaggle feature
  EXPECT_EQ(kCriteoKaggleCardinalities[8], 3);           // C9
  EXPECT_EQ(
      *std::max_element(kCriteoTerabyteCardinalities.begin(), kCriteoTerabyteCardinalities.end()),
      40'000'000);
  EXPECT_EQ(std::count(kCriteoTerabyteCardinalities.begin(), kCriteoTerabyteCardinalities.end(),
                       40'000'000),
            5);  // C1, C10, C20, C21, C22
}

TEST(CriteoProfileTest, FeatureNames) {
  EXPECT_EQ(categorical_feature_name(0), "C1");
  EXPECT_EQ(categorical_feature_name(25), "C26");
  EXPECT_EQ(dense_feature_name(0), "I1");
  EXPECT_EQ(dense_feature_name(12), "I13");
}

// Reference: the largest cap found by trying every cap from the largest cardinality down.
int64_t reference_cap(const std::vector<int64_t>& cardinalities, int64_t max_rows) {
  for (int64_t cap = *std::max_element(cardinalities.begin(), cardinalities.end()); cap >= 1;
       --cap) {
    int64_t rows = 0;
    for (const int64_t c : cardinalities) rows += std::min(c, cap);
    if (rows <= max_rows) return cap;
  }
  return 0;
}

TEST(CriteoProfileTest, FitToBudgetMatchesExhaustiveSearch) {
  const uint64_t seed = 2024;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int64_t> log_size(0, 14);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> cardinalities(kNumCategoricalFeatures);
    for (int64_t& c : cardinalities) {
      c = std::uniform_int_distribution<int64_t>(1, int64_t{1} << log_size(random))(random);
    }
    const int64_t dim = std::uniform_int_distribution<int64_t>(1, 64)(random);
    const int64_t max_rows = std::uniform_int_distribution<int64_t>(
        kNumCategoricalFeatures, total(cardinalities) + 10)(random);
    // A budget between max_rows and max_rows + 1 rows: the remainder must be ignored.
    const int64_t max_bytes =
        max_rows * dim * 4 + std::uniform_int_distribution<int64_t>(0, dim * 4 - 1)(random);
    const std::vector<int64_t> sizes =
        fit_to_budget(cardinalities, TableBudget{.dim = dim, .max_bytes = max_bytes});
    const int64_t cap = reference_cap(cardinalities, max_rows);
    ASSERT_EQ(sizes.size(), cardinalities.size());
    for (size_t f = 0; f < sizes.size(); ++f) {
      ASSERT_EQ(sizes[f], std::min(cardinalities[f], cap))
          << "trial " << trial << " feature " << f << " max_rows " << max_rows;
    }
    EXPECT_LE(total(sizes) * dim * 4, max_bytes);
  }
}

TEST(CriteoProfileTest, FitToBudgetKeepsAProfileThatFits) {
  const std::vector<int64_t> sizes = fit_to_budget(
      kCriteoKaggleCardinalities, TableBudget{.dim = 16, .max_bytes = int64_t{4} << 30});
  EXPECT_THAT(sizes, ::testing::ElementsAreArray(kCriteoKaggleCardinalities));
}

TEST(CriteoProfileTest, FitToBudgetTerabyteAtScale) {
  // 1 GiB at dim 128: the budget in rows is 2^21; no overflow with 40M-row features.
  const std::vector<int64_t> sizes = fit_to_budget(
      kCriteoTerabyteCardinalities, TableBudget{.dim = 128, .max_bytes = int64_t{1} << 30});
  EXPECT_LE(total(sizes), int64_t{1} << 21);
  EXPECT_EQ(sizes[5], 3);  // C6 keeps its size
  const int64_t cap = *std::max_element(sizes.begin(), sizes.end());
  std::vector<int64_t> larger(sizes);
  for (size_t f = 0; f < larger.size(); ++f) {
    larger[f] = std::min(kCriteoTerabyteCardinalities[f], cap + 1);
  }
  EXPECT_GT(total(larger), int64_t{1} << 21);  // cap is the largest that fits
}

TEST(CriteoProfileTest, Presets) {
  const std::vector<int64_t> small = preset_vocabulary_sizes("small");
  EXPECT_EQ(total(small), 1 << 20);  // exactly 64 MiB at dim 16
  for (size_t f = 0; f < small.size(); ++f) {
    EXPECT_EQ(small[f], std::min<int64_t>(kCriteoKaggleCardinalities[f], 129'719)) << f;
  }
  EXPECT_THAT(preset_vocabulary_sizes("criteo-kaggle"),
              ::testing::ElementsAreArray(kCriteoKaggleCardinalities));
  EXPECT_THAT(preset_vocabulary_sizes("criteo-1tb"),
              ::testing::ElementsAreArray(kCriteoTerabyteCardinalities));
}

TEST(CriteoProfileTest, UnknownPresetListsTheValidOnes) {
  try {
    preset_vocabulary_sizes("criteo-2tb");
    FAIL() << "no exception";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("'criteo-2tb'"));
    EXPECT_THAT(error.what(), HasSubstr("small, criteo-kaggle, criteo-1tb"));
  }
}

TEST(CriteoProfileTest, InvalidInputs) {
  std::vector<int64_t> profile(kCriteoKaggleCardinalities.begin(),
                               kCriteoKaggleCardinalities.end());
  const auto expect_error = [](auto call, const std::string& message) {
    try {
      call();
      FAIL() << "no exception, expected: " << message;
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr(message));
    }
  };
  expect_error([&] { fit_to_budget(profile, {.dim = 0}); }, "dim is 0");
  expect_error([&] { fit_to_budget(profile, {.dim = 16, .max_bytes = 26 * 64 - 1}); },
               "holds 25 rows of dim 16, fewer than one per feature (26)");
  expect_error([&] { fit_to_budget(profile, {.dim = 16, .max_bytes = -1}); }, "holds 0 rows");
  EXPECT_EQ(total(fit_to_budget(profile, {.dim = 16, .max_bytes = 26 * 64})), 26);
  expect_error([&] { fit_to_budget(std::span(profile).first(25), {}); },
               "cardinalities: vocabulary_sizes has 25 sizes, expected 26");
  profile[6] = 0;
  expect_error([&] { fit_to_budget(profile, {}); }, "vocabulary size of C7 is 0, must be >= 1");
  expect_error([&] { validate_vocabulary_sizes(profile, "Owner"); },
               "Owner: vocabulary size of C7 is 0");
}

}  // namespace
}  // namespace recemb::dlrm
