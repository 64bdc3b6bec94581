#include "train/data/synthetic_criteo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "recemb/error.h"

#include "dlrm/criteo_profile.h"

namespace recemb::train {
namespace {

using ::testing::HasSubstr;

SyntheticOptions small_options(uint64_t seed) {
  return {.seed = seed, .vocabulary_sizes = dlrm::preset_vocabulary_sizes("small")};
}

// All examples of `source` from its position, `batch_size` at a time, up to `limit`.
struct Examples {
  std::vector<float> labels, dense;
  std::vector<std::vector<int64_t>> ids =
      std::vector<std::vector<int64_t>>(dlrm::kNumCategoricalFeatures);
  bool operator==(const Examples&) const = default;
};

Examples read(dlrm::ExampleSource& source, int64_t batch_size, int64_t limit) {
  Examples examples;
  dlrm::ExampleBatch batch;
  for (int64_t read = 0; read < limit;) {
    const int64_t count = source.next(batch, std::min(batch_size, limit - read));
    if (count == 0) break;
    read += count;
    examples.labels.insert(examples.labels.end(), batch.labels.begin(), batch.labels.end());
    examples.dense.insert(examples.dense.end(), batch.dense.begin(), batch.dense.end());
    for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
      const auto ids = batch.categorical_ids(f);
      examples.ids[static_cast<size_t>(f)].insert(examples.ids[static_cast<size_t>(f)].end(),
                                                  ids.begin(), ids.end());
    }
  }
  return examples;
}

TEST(SyntheticCriteoTest, DeterministicAndIndependentOfBatching) {
  SyntheticCriteo a(small_options(1)), b(small_options(1)), c(small_options(2));
  const Examples in_one = read(a, 1000, 1000);
  const Examples in_many = read(b, 37, 1000);
  EXPECT_TRUE(in_one == in_many);
  EXPECT_EQ(a.position(), "synthetic:1000");
  EXPECT_FALSE(read(c, 1000, 1000) == in_one);  // another seed, other data
}

TEST(SyntheticCriteoTest, SeekGivesTheSameContinuation) {
  SyntheticCriteo source(small_options(3));
  read(source, 100, 250);
  const std::string position = source.position();
  EXPECT_EQ(position, "synthetic:250");
  const Examples rest = read(source, 64, 500);

  SyntheticCriteo resumed(small_options(3));
  resumed.seek(position);
  EXPECT_TRUE(read(resumed, 100, 500) == rest);
  resumed.seek("synthetic:0");
  SyntheticCriteo fresh(small_options(3));
  EXPECT_TRUE(read(resumed, 10, 30) == read(fresh, 30, 30));
}

TEST(SyntheticCriteoTest, EvalSplitHoldsOtherExamplesOfTheSameModel) {
  SyntheticOptions eval_options = small_options(4);
  eval_options.split = SyntheticSplit::kEval;
  SyntheticCriteo train(small_options(4)), eval(eval_options);
  dlrm::ExampleBatch train_batch, eval_batch;
  train.next(train_batch, 500);
  eval.next(eval_batch, 500);
  EXPECT_NE(train_batch.dense, eval_batch.dense);
  // Same model: an example copied from one split into a batch of the other has the same logit
  // under both generators.
  for (int64_t i = 0; i < 500; i += 50) {
    EXPECT_EQ(train.logit(eval_batch, i), eval.logit(eval_batch, i));
  }
}

TEST(SyntheticCriteoTest, NumExamplesEndsTheData) {
  SyntheticOptions options = small_options(5);
  options.num_examples = 25;
  SyntheticCriteo source(options);
  dlrm::ExampleBatch batch;
  EXPECT_EQ(source.next(batch, 10), 10);
  EXPECT_EQ(source.next(batch, 10), 10);
  EXPECT_EQ(source.next(batch, 10), 5);
  EXPECT_EQ(batch.size, 5);
  EXPECT_EQ(batch.categorical.size(), 5u * dlrm::kNumCategoricalFeatures);
  EXPECT_EQ(source.next(batch, 10), 0);
  EXPECT_EQ(batch.size, 0);
  EXPECT_EQ(source.position(), "synthetic:25");
  source.seek("synthetic:24");
  EXPECT_EQ(source.next(batch, 10), 1);
}

TEST(SyntheticCriteoTest, IdsInRangeForEveryTableSize) {
  SyntheticOptions options{.seed = 6, .vocabulary_sizes = {1, 2, 3, 4, 5, 7, 10, 16, 100, 1000}};
  options.vocabulary_sizes.resize(dlrm::kNumCategoricalFeatures, 40'000'000);
  options.vocabulary_sizes[20] = int64_t{1} << 40;  // ids beyond 32 bits
  SyntheticCriteo source(options);
  dlrm::ExampleBatch batch;
  std::vector<int64_t> largest(dlrm::kNumCategoricalFeatures, 0);
  for (int round = 0; round < 10; ++round) {
    source.next(batch, 2000);
    for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
      for (const int64_t id : batch.categorical_ids(f)) {
        ASSERT_GE(id, 0) << "feature " << f;
        ASSERT_LT(id, options.vocabulary_sizes[static_cast<size_t>(f)]) << "feature " << f;
        largest[static_cast<size_t>(f)] = std::max(largest[static_cast<size_t>(f)], id);
      }
    }
  }
  // Small tables are covered entirely; the hot ids of a huge one are spread, not at the start.
  for (int f = 0; f < 9; ++f) {
    EXPECT_EQ(largest[static_cast<size_t>(f)], options.vocabulary_sizes[static_cast<size_t>(f)] - 1)
        << "feature " << f;
  }
  EXPECT_GT(largest[20], int64_t{1} << 39);
  for (const float label : batch.labels) ASSERT_TRUE(label == 0.0f || label == 1.0f);
}

// Id frequencies of a 40-id table against the Zipf pmf: the rank -> id map is a permutation, so
// the sorted counts follow the pmf (sorting neighbours of near-equal probability only makes the
// statistic smaller).
TEST(SyntheticCriteoTest, IdFrequenciesFollowZipf) {
  const int64_t n = 40;
  SyntheticOptions options{.seed = 7, .vocabulary_sizes = std::vector<int64_t>(26, n)};
  SyntheticCriteo source(options);
  dlrm::ExampleBatch batch;
  std::vector<int64_t> counts(static_cast<size_t>(n));
  int64_t draws = 0;
  for (int round = 0; round < 20; ++round) {
    source.next(batch, 10'000);
    for (const int64_t id : batch.categorical_ids(3)) ++counts[static_cast<size_t>(id)];
    draws += batch.size;
  }
  std::sort(counts.begin(), counts.end(), std::greater<>());
  double normalizer = 0.0;
  for (int64_t k = 1; k <= n; ++k) normalizer += std::pow(static_cast<double>(k), -1.05);
  double chi_square = 0.0;
  for (int64_t k = 1; k <= n; ++k) {
    const double expected =
        static_cast<double>(draws) * std::pow(static_cast<double>(k), -1.05) / normalizer;
    const double difference = static_cast<double>(counts[static_cast<size_t>(k - 1)]) - expected;
    chi_square += difference * difference / expected;
  }
  EXPECT_LT(chi_square, 72.0);  // chi-square, 39 degrees of freedom, upper 0.1%
  EXPECT_GT(counts[n - 1], 0);  // the map reaches every id
}

TEST(SyntheticCriteoTest, DenseFeaturesAreLogTransformedGeometricCounts) {
  SyntheticCriteo source(small_options(8));
  dlrm::ExampleBatch batch;
  source.next(batch, 100'000);
  for (int j = 0; j < dlrm::kNumDenseFeatures; ++j) {
    double sum = 0.0;
    for (int64_t i = 0; i < batch.size; ++i) {
      const float value = batch.dense[static_cast<size_t>(i * dlrm::kNumDenseFeatures + j)];
      const double count = std::round(std::expm1(static_cast<double>(value)));
      ASSERT_GE(count, 0.0);
      // value = float(log1p(count)) for a whole count
      ASSERT_EQ(value, static_cast<float>(std::log1p(count))) << "I" << j + 1;
      sum += count;
    }
    const double mean = SyntheticCriteo::kDenseMeans[static_cast<size_t>(j)];
    // Geometric: standard deviation sqrt(mean (1 + mean)); 5 standard errors.
    const double tolerance = 5.0 * std::sqrt(mean * (1.0 + mean) / static_cast<double>(batch.size));
    EXPECT_NEAR(sum / static_cast<double>(batch.size), mean, tolerance) << "I" << j + 1;
  }
}

TEST(SyntheticCriteoTest, LogitUsesOnlyTheSignalFeatures) {
  SyntheticCriteo source(small_options(9));
  dlrm::ExampleBatch batch;
  source.next(batch, 200);
  const std::vector<int64_t>& sizes = source.options().vocabulary_sizes;
  for (int64_t i = 0; i < 200; i += 20) {
    const double before = source.logit(batch, i);
    for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
      int64_t& id = batch.categorical[static_cast<size_t>(f * batch.size + i)];
      const int64_t saved = id;
      id = (id + 1) % sizes[static_cast<size_t>(f)];
      const double after = source.logit(batch, i);
      if (SyntheticCriteo::carries_signal(f)) {
        EXPECT_LE(std::abs(after - before), 2.0 * SyntheticCriteo::kCategoricalWeight);
      } else {
        EXPECT_EQ(after, before) << "feature " << f;
      }
      id = saved;
    }
  }
}

// An open vocabulary (kRawKeys): the same examples as the hashed ids' (labels, dense features,
// the planted logit of each), carried by keys that stand for (slot, generation): a key always
// stands for one slot of its feature, and a slot's key changes every item_lifetime examples, at a
// moment of its own, never to come back.
SyntheticOptions open_options(dlrm::CategoricalIds ids) {
  SyntheticOptions options{
      .seed = 11,
      .vocabulary_sizes = std::vector<int64_t>(dlrm::kNumCategoricalFeatures, 40),
      .ids = ids,
      .item_lifetime = 1000};
  options.vocabulary_sizes[3] = 1;       // one slot
  options.vocabulary_sizes[7] = 100000;  // mostly slots seen once
  return options;
}

TEST(SyntheticCriteoTest, RawKeysCarryTheHashedExamplesAndDrift) {
  SyntheticCriteo hashed(open_options(dlrm::CategoricalIds::kHashedRows));
  SyntheticCriteo raw(open_options(dlrm::CategoricalIds::kRawKeys));
  const int64_t n = 10'000, lifetime = 1000;
  dlrm::ExampleBatch hashed_batch, raw_batch;
  ASSERT_EQ(hashed.next(hashed_batch, n), n);
  ASSERT_EQ(raw.next(raw_batch, n), n);
  EXPECT_EQ(raw_batch.labels, hashed_batch.labels);
  EXPECT_EQ(raw_batch.dense, hashed_batch.dense);
  for (int64_t i = 0; i < n; i += 7) {
    ASSERT_EQ(raw.logit(raw_batch, i), hashed.logit(hashed_batch, i)) << i;
  }
  std::map<int64_t, std::pair<int, int64_t>> slot_of_key;  // key -> (feature, slot), all features
  for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
    const auto slots = hashed_batch.categorical_ids(f);
    const auto keys = raw_batch.categorical_ids(f);
    std::map<int64_t, std::pair<int64_t, int64_t>> seen;  // key -> first and last example
    std::map<int64_t, std::set<int64_t>> keys_of_slot;
    for (int64_t i = 0; i < n; ++i) {
      const auto [it, inserted] = slot_of_key.emplace(keys[static_cast<size_t>(i)],
                                                      std::pair(f, slots[static_cast<size_t>(i)]));
      ASSERT_EQ(it->second, std::pair(f, slots[static_cast<size_t>(i)])) << "feature " << f;
      auto [span, first] = seen.emplace(keys[static_cast<size_t>(i)], std::pair(i, i));
      span->second.second = i;
      keys_of_slot[slots[static_cast<size_t>(i)]].insert(keys[static_cast<size_t>(i)]);
    }
    // A key lives at most item_lifetime examples.
    for (const auto& [key, span] : seen) ASSERT_LT(span.second - span.first, lifetime);
    // Over 10 lifetimes a slot seen all along has 10 or 11 keys (its first and last partial).
    for (const auto& [slot, slot_keys] : keys_of_slot) ASSERT_LE(slot_keys.size(), 11u);
    if (f == 3) {
      EXPECT_GE(keys_of_slot.at(0).size(), 10u);  // the one slot: seen in every example
    }
  }
  // At a fixed moment, no drift: one key per slot.
  SyntheticCriteo still(open_options(dlrm::CategoricalIds::kRawKeys));
  still.set_vocabulary_time(5 * lifetime);
  ASSERT_EQ(still.next(raw_batch, n), n);
  EXPECT_EQ(raw_batch.labels, hashed_batch.labels);
  std::set<int64_t> keys(raw_batch.categorical_ids(3).begin(), raw_batch.categorical_ids(3).end());
  EXPECT_EQ(keys.size(), 1u);
  EXPECT_THROW(still.set_vocabulary_time(-1), InvalidArgument);
}

// Rank-sum (Mann-Whitney) AUC of scores against 0/1 labels, ties counted half.
double auc(const std::vector<double>& scores, const std::vector<float>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0.0, positives = 0.0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] == 1.0f) {
        positive_rank_sum += rank;
        positives += 1.0;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  return (positive_rank_sum - positives * (positives + 1.0) / 2.0) / (positives * negatives);
}

// The planted signal: on 200k examples, the click rate and the AUC of the true logits (the
// Bayes-optimal AUC) lie in the ranges docs/training.md ("Training data") states, for every preset
// and seed; and the labels are calibrated: the click rate of each logit decile matches its mean
// probability.
struct SignalCase {
  const char* preset;
  uint64_t seed;
};

class SyntheticSignalTest : public ::testing::TestWithParam<SignalCase> {};

TEST_P(SyntheticSignalTest, ClickRateBayesAucAndCalibration) {
  const auto [preset, seed] = GetParam();
  SCOPED_TRACE(::testing::Message() << "preset " << preset << " seed " << seed);
  const auto start = std::chrono::steady_clock::now();
  SyntheticCriteo source({.seed = seed, .vocabulary_sizes = dlrm::preset_vocabulary_sizes(preset)});
  const int64_t n = 200'000;
  std::vector<double> logits;
  std::vector<float> labels;
  dlrm::ExampleBatch batch;
  while (static_cast<int64_t>(labels.size()) < n) {
    source.next(batch, 4096);
    for (int64_t i = 0; i < batch.size && static_cast<int64_t>(labels.size()) < n; ++i) {
      logits.push_back(source.logit(batch, i));
      labels.push_back(batch.labels[static_cast<size_t>(i)]);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double click_rate =
      std::accumulate(labels.begin(), labels.end(), 0.0) / static_cast<double>(n);
  const double bayes_auc = auc(logits, labels);
  double log_loss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double z = logits[static_cast<size_t>(i)];
    // -log sigmoid(z) for a click, -log(1 - sigmoid(z)) otherwise
    log_loss +=
        labels[static_cast<size_t>(i)] == 1.0f ? std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
  }
  log_loss /= static_cast<double>(n);
  std::printf(
      "synthetic %s, seed %llu, %lld examples: click rate %.4f, Bayes AUC %.4f, "
      "Bayes log loss %.4f; %.0f examples/s (construction and logits included)\n",
      preset, static_cast<unsigned long long>(seed), static_cast<long long>(n), click_rate,
      bayes_auc, log_loss, static_cast<double>(n) / seconds);
  EXPECT_GT(click_rate, 0.22);
  EXPECT_LT(click_rate, 0.28);
  EXPECT_GT(bayes_auc, 0.75);
  EXPECT_LT(bayes_auc, 0.81);

  std::vector<size_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] < logits[b]; });
  for (int64_t decile = 0; decile < 10; ++decile) {
    double clicks = 0.0, expected = 0.0;
    const auto begin = static_cast<size_t>(n * decile / 10);
    const auto end = static_cast<size_t>(n * (decile + 1) / 10);
    for (size_t k = begin; k < end; ++k) {
      clicks += labels[order[k]];
      expected += 1.0 / (1.0 + std::exp(-logits[order[k]]));
    }
    const double count = static_cast<double>(end - begin);
    const double p = expected / count;
    EXPECT_NEAR(clicks / count, p, 5.0 * std::sqrt(p * (1.0 - p) / count)) << "decile " << decile;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, SyntheticSignalTest,
                         ::testing::Values(SignalCase{"small", 0}, SignalCase{"small", 3},
                                           SignalCase{"criteo-kaggle", 1},
                                           SignalCase{"criteo-1tb", 2}));

TEST(SyntheticCriteoTest, InvalidOptions) {
  const auto expect_error = [](SyntheticOptions options, const std::string& message) {
    try {
      SyntheticCriteo source(std::move(options));
      FAIL() << "no exception, expected: " << message;
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr(message));
    }
  };
  SyntheticOptions options = small_options(0);
  options.vocabulary_sizes.pop_back();
  expect_error(options, "SyntheticCriteo: vocabulary_sizes has 25 sizes, expected 26");
  options = small_options(0);
  options.vocabulary_sizes[4] = -1;
  expect_error(options, "SyntheticCriteo: vocabulary size of C5 is -1");
  for (const double alpha : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN()}) {
    options = small_options(0);
    options.zipf_alpha = alpha;
    expect_error(options, "zipf_alpha is");
  }
  options = small_options(0);
  options.num_examples = -1;
  expect_error(options, "num_examples is -1, must be >= 0");
  options = small_options(0);
  options.item_lifetime = 0;
  expect_error(options, "item_lifetime is 0, must be >= 1");
}

TEST(SyntheticCriteoTest, InvalidPositionsChangeNothing) {
  SyntheticOptions options = small_options(10);
  options.num_examples = 100;
  SyntheticCriteo source(options);
  dlrm::ExampleBatch batch;
  source.next(batch, 30);
  for (const std::string position :
       {"", "synthetic:", "synthetic:-1", "synthetic:+1", "synthetic:1x", "synthetic: 1",
        "criteo:0:0:0", "synthetic:99999999999999999999", "synthetic:101"}) {
    try {
      source.seek(position);
      FAIL() << "no exception for '" << position << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr("'" + position + "'"));
    }
    EXPECT_EQ(source.position(), "synthetic:30");
  }
  EXPECT_THROW(source.next(batch, 0), InvalidArgument);
  EXPECT_EQ(source.position(), "synthetic:30");
  source.seek("synthetic:100");
  EXPECT_EQ(source.next(batch, 5), 0);
}

}  // namespace
}  // namespace recemb::train
