// Metrics against their definitions: ROC AUC against brute-force counting of all
// (positive, negative) pairs with ties at half credit, log loss against the direct clamped formula,
// streaming accumulation against one-shot results, undefined cases and validation.
#include "train/report/metrics.h"

#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "recemb/error.h"

namespace recemb::train {
namespace {

double brute_force_auc(const std::vector<float>& probabilities, const std::vector<float>& labels) {
  double credit = 0.0;
  double pairs = 0.0;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 1.0f) continue;
    for (size_t j = 0; j < labels.size(); ++j) {
      if (labels[j] != 0.0f) continue;
      pairs += 1.0;
      if (probabilities[i] > probabilities[j]) credit += 1.0;
      if (probabilities[i] == probabilities[j]) credit += 0.5;
    }
  }
  return credit / pairs;
}

double direct_log_loss(const std::vector<float>& probabilities, const std::vector<float>& labels) {
  double sum = 0.0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double p = std::min(std::max(static_cast<double>(probabilities[i]), 1e-7), 1.0 - 1e-7);
    sum += -(labels[i] * std::log(p) + (1.0 - labels[i]) * std::log(1.0 - p));
  }
  return sum / static_cast<double>(labels.size());
}

// Probabilities on a grid of `levels` values in [0, 1] (so that ties are frequent when levels is
// small), labels 1 with a probability that grows with the score (an informative model).
void random_examples(std::mt19937_64& random, size_t n, int levels,
                     std::vector<float>& probabilities, std::vector<float>& labels) {
  std::uniform_int_distribution<int> level(0, levels);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  probabilities.clear();
  labels.clear();
  for (size_t i = 0; i < n; ++i) {
    const float p = static_cast<float>(level(random)) / static_cast<float>(levels);
    probabilities.push_back(p);
    labels.push_back(unit(random) < 0.2f + 0.6f * p ? 1.0f : 0.0f);
  }
}

TEST(RocAucTest, MatchesBruteForcePairCountingWithTies) {
  const uint64_t seed = 71;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  std::vector<float> probabilities;
  std::vector<float> labels;
  for (const int levels : {1, 2, 5, 40, 1 << 20}) {
    for (const size_t n : {2, 3, 17, 500}) {
      random_examples(random, n, levels, probabilities, labels);
      labels[0] = 0.0f;  // both classes present
      labels[1] = 1.0f;
      EXPECT_NEAR(roc_auc(probabilities, labels), brute_force_auc(probabilities, labels), 1e-12)
          << "levels " << levels << ", n " << n;
    }
  }
}

TEST(RocAucTest, KnownValues) {
  EXPECT_EQ(roc_auc({{0.1f, 0.4f, 0.35f, 0.8f}}, {{0, 0, 1, 1}}), 0.75);
  EXPECT_EQ(roc_auc({{0.1f, 0.2f, 0.3f}}, {{0, 1, 1}}), 1.0);
  EXPECT_EQ(roc_auc({{0.3f, 0.2f, 0.1f}}, {{0, 1, 1}}), 0.0);
  EXPECT_EQ(roc_auc({{0.5f, 0.5f, 0.5f, 0.5f}}, {{0, 1, 0, 1}}), 0.5);
}

TEST(RocAucTest, UndefinedWithoutBothClasses) {
  EXPECT_TRUE(std::isnan(roc_auc({{0.2f, 0.7f}}, {{1, 1}})));
  EXPECT_TRUE(std::isnan(roc_auc({{0.2f, 0.7f}}, {{0, 0}})));
  EXPECT_TRUE(std::isnan(roc_auc({}, {})));
}

TEST(LogLossTest, MatchesDirectFormulaWithClamping) {
  std::mt19937_64 random(72);
  std::vector<float> probabilities;
  std::vector<float> labels;
  random_examples(random, 300, 1 << 20, probabilities, labels);
  // Confident predictions at and beyond the clamp, right and wrong.
  probabilities[0] = 0.0f;
  labels[0] = 1.0f;
  probabilities[1] = 1.0f;
  labels[1] = 0.0f;
  probabilities[2] = 1.0f;
  labels[2] = 1.0f;
  probabilities[3] = 1e-9f;
  labels[3] = 0.0f;
  const double loss = log_loss(probabilities, labels);
  EXPECT_NEAR(loss, direct_log_loss(probabilities, labels), 1e-12);
  EXPECT_TRUE(std::isfinite(loss));
  // A single confident wrong prediction costs -log(1e-7).
  EXPECT_NEAR(log_loss({{0.0f}}, {{1.0f}}), -std::log(1e-7), 1e-9);
  EXPECT_NEAR(log_loss({{0.25f}}, {{0.0f}}), -std::log(0.75), 1e-12);
  EXPECT_TRUE(std::isnan(log_loss({}, {})));
}

TEST(BinaryMetricsTest, StreamingEqualsOneShot) {
  std::mt19937_64 random(73);
  std::vector<float> probabilities;
  std::vector<float> labels;
  random_examples(random, 1000, 30, probabilities, labels);
  BinaryMetrics metrics;
  int64_t positives = 0;
  for (size_t first = 0; first < labels.size();) {
    const size_t count = std::min<size_t>(1 + first % 97, labels.size() - first);
    metrics.add(std::span(probabilities).subspan(first, count),
                std::span(labels).subspan(first, count));
    first += count;
  }
  for (const float label : labels) positives += label == 1.0f ? 1 : 0;
  EXPECT_EQ(metrics.num_examples(), 1000);
  EXPECT_EQ(metrics.num_positives(), positives);
  EXPECT_EQ(metrics.roc_auc(), roc_auc(probabilities, labels));
  EXPECT_NEAR(metrics.log_loss(), log_loss(probabilities, labels), 1e-12);
  EXPECT_NEAR(metrics.roc_auc(), brute_force_auc(probabilities, labels), 1e-12);

  metrics.clear();
  EXPECT_EQ(metrics.num_examples(), 0);
  EXPECT_EQ(metrics.num_positives(), 0);
  EXPECT_TRUE(std::isnan(metrics.log_loss()));
  EXPECT_TRUE(std::isnan(metrics.roc_auc()));
}

TEST(MetricsErrorTest, InvalidInputsThrowNamingIndexAndValue) {
  const auto expect_error = [](const std::vector<float>& probabilities,
                               const std::vector<float>& labels, const std::string& fragment) {
    for (int which = 0; which < 2; ++which) {
      try {
        if (which == 0) {
          log_loss(probabilities, labels);
        } else {
          roc_auc(probabilities, labels);
        }
        ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
      } catch (const InvalidArgument& error) {
        EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
      }
    }
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_error({0.5f, 0.5f}, {1.0f}, "2 probabilities but 1 labels");
  expect_error({0.5f, 0.5f}, {1.0f, 0.5f}, "labels[1] = 0.5 is not 0 or 1");
  expect_error({0.5f, 0.5f}, {1.0f, 1e-9f}, "labels[1] = 1e-09 is not 0 or 1");
  expect_error({0.5f, 1.5f}, {1.0f, 0.0f}, "probabilities[1] = 1.5 is not in [0, 1]");
  expect_error({-0.25f, 0.5f}, {1.0f, 0.0f}, "probabilities[0] = -0.25");
  expect_error({nan, 0.5f}, {1.0f, 0.0f}, "probabilities[0] = nan");
}

TEST(MetricsErrorTest, AddAddsNothingOnError) {
  BinaryMetrics metrics;
  metrics.add({{0.2f, 0.9f}}, {{0.0f, 1.0f}});
  EXPECT_THROW(metrics.add({{0.3f, 0.7f, 2.0f}}, {{1.0f, 0.0f, 1.0f}}), InvalidArgument);
  EXPECT_EQ(metrics.num_examples(), 2);
  EXPECT_EQ(metrics.num_positives(), 1);
  EXPECT_EQ(metrics.roc_auc(), 1.0);
  EXPECT_NEAR(metrics.log_loss(), -(std::log(0.8) + std::log(0.9)) / 2.0, 1e-7);
}

}  // namespace
}  // namespace recemb::train
