// Tests of the backward step (src/embedding/apply_stage.h): the gradients' validation, the
// finiteness check split over the pool, and learning-rate schedules and callbacks evaluated once
// per step. The optimizers' numerics against the float64 reference are in embedding_test.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "recemb/recemb.h"

#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/random_batches.h"

namespace recemb {
namespace {

using test::error_of;
using test::IdWidth;
using test::look_up;
using test::OwnedInput;
using test::read;
using test::Snapshot;
using test::snapshot_of;
using test::train;
using test::unchanged;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ------------------------------------------------------------------------------------------------
// The finiteness check: three features of one table (zeros, SGD at 0.5, sum), one id per example.
// With 4096 examples of dim 32 the gradients hold 3 x 131072 values, split into tasks of 65536 on
// the pool; with 16 examples the check runs on the calling thread. A rejected step names the first
// non-finite value in feature order, changes nothing and keeps the batch applicable; the finite
// step after it moves row r by -0.5 x (the number of ids r in the batch).

constexpr int64_t kVocabulary = 1000;
constexpr int64_t kDim = 32;
constexpr float kLearningRate = 0.5f;

Embedding three_features(int num_threads) {
  return Embedding(
      {{.name = "t",
        .vocabulary_size = kVocabulary,
        .dim = kDim,
        .initializer = Constant{0.0f},
        .combiner = Combiner::kSum}},
      {{.name = "f0", .table = "t"}, {.name = "f1", .table = "t"}, {.name = "f2", .table = "t"}},
      {.optimizer = Sgd{.learning_rate = kLearningRate}, .num_threads = num_threads});
}

struct PlantedValue {
  size_t feature;
  int64_t index;  // into the feature's [batch, dim] gradient
  float value;
};

struct NonFiniteCase {
  std::string name;
  int64_t batch;
  std::vector<PlantedValue> planted;
  std::string expected;  // the start of the error message
};

std::ostream& operator<<(std::ostream& os, const NonFiniteCase& c) { return os << c.name; }

class GradientFinitenessTest
    : public ::testing::TestWithParam<std::tuple<NonFiniteCase, int /*num_threads*/>> {};

TEST_P(GradientFinitenessTest, FirstNonFiniteValueIsNamedAndNothingChanges) {
  const auto& [c, num_threads] = GetParam();
  Embedding layer = three_features(num_threads);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> id(0, kVocabulary - 1);
  std::vector<OwnedInput> inputs;
  std::vector<double> expected_row_steps(kVocabulary, 0.0);  // sum of -lr per occurrence
  for (int f = 0; f < 3; ++f) {
    std::vector<int64_t> ids(static_cast<size_t>(c.batch));
    for (int64_t& i : ids) {
      i = id(rng);
      expected_row_steps[static_cast<size_t>(i)] -= kLearningRate;
    }
    inputs.push_back(
        OwnedInput::dense(ids, {c.batch}, {}, f == 1 ? IdWidth::kInt32 : IdWidth::kInt64));
  }
  LookupBatch batch;
  look_up(layer, inputs, batch);
  const Snapshot before = snapshot_of(layer);
  std::vector<std::vector<float>> gradients(
      3, std::vector<float>(static_cast<size_t>(c.batch * kDim), 1.0f));
  for (const PlantedValue& p : c.planted) {
    gradients[p.feature][static_cast<size_t>(p.index)] = p.value;
  }

  const std::string message = error_of<InvalidArgument>([&] { train(layer, batch, gradients); });
  EXPECT_THAT(message, HasSubstr(c.expected));
  EXPECT_THAT(message, HasSubstr("is not finite"));
  EXPECT_TRUE(unchanged(before, layer));
  ASSERT_TRUE(batch.applicable());

  for (const PlantedValue& p : c.planted) gradients[p.feature][static_cast<size_t>(p.index)] = 1.0f;
  train(layer, batch, gradients);
  EXPECT_EQ(layer.step(), 1);
  const std::vector<float> rows = read(layer, "t", "parameters");
  for (int64_t r = 0; r < kVocabulary; ++r) {
    for (int64_t j = 0; j < kDim; ++j) {
      ASSERT_NEAR(rows[static_cast<size_t>(r * kDim + j)],
                  expected_row_steps[static_cast<size_t>(r)], 1e-4)
          << "row " << r << " [" << j << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    PlantedValues, GradientFinitenessTest,
    ::testing::Combine(::testing::Values(
                           // Feature 1's third task (values 131072.. are feature 2) comes before
                           // feature 2's first.
                           NonFiniteCase{"LaterTaskOfAnEarlierFeature",
                                         4096,
                                         {{1, 100000, kNaN}, {2, 5, kInf}},
                                         "feature 'f1': example 3125: gradient value nan"},
                           NonFiniteCase{"LastValueOfTheFirstFeature",
                                         4096,
                                         {{0, 4096 * kDim - 1, -kInf}, {1, 0, kNaN}},
                                         "feature 'f0': example 4095: gradient value -inf"},
                           NonFiniteCase{"FirstOfTwoInOneTask",
                                         4096,
                                         {{2, 65536 + 33, kInf}, {2, 65536 + 40000, kNaN}},
                                         "feature 'f2': example 2049: gradient value inf"},
                           NonFiniteCase{"SmallStepOnTheCallingThread",
                                         16,
                                         {{2, 3 * kDim + 7, kNaN}, {1, 15 * kDim, kNaN}},
                                         "feature 'f1': example 15: gradient value nan"}),
                       ::testing::Values(1, 2)),
    [](const auto& param_info) {
      return std::get<0>(param_info.param).name + "_threads" +
             std::to_string(std::get<1>(param_info.param));
    });

// ------------------------------------------------------------------------------------------------
// Learning-rate schedules and callbacks: tables of zeros, SGD, gradient 1 on row 1 of two tables
// sharing the global optimizer, so after k steps row 1 = -sum_{j<k} lr(j) (TF optimizer_test).

Embedding zero_tables(const LearningRate& learning_rate) {
  return Embedding({{.name = "a", .vocabulary_size = 4, .dim = 3, .initializer = Constant{0.0f}},
                    {.name = "b", .vocabulary_size = 5, .dim = 2, .initializer = Constant{0.0f}}},
                   {{.name = "fa", .table = "a"}, {.name = "fb", .table = "b"}},
                   {.optimizer = Sgd{.learning_rate = learning_rate}, .num_threads = 2});
}

std::vector<OwnedInput> row_one_inputs() {
  std::vector<OwnedInput> inputs;
  inputs.push_back(OwnedInput::dense({1}, {1}));
  inputs.push_back(OwnedInput::dense({1}, {1}, {}, IdWidth::kInt32));
  return inputs;
}

void step_with_ones(Embedding& layer) {
  LookupBatch batch;
  look_up(layer, row_one_inputs(), batch);
  train(layer, batch, {std::vector<float>(3, 1.0f), std::vector<float>(2, 1.0f)});
}

struct ScheduleCase {
  std::string name;
  LearningRate learning_rate;
  std::function<double(int64_t)> expected;
};

class EmbeddingLearningRateScheduleTest : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(EmbeddingLearningRateScheduleTest, RowIsMinusTheSumOfLearningRates) {
  Embedding layer = zero_tables(GetParam().learning_rate);
  double sum = 0.0;
  for (int64_t k = 0; k < 12; ++k) {
    step_with_ones(layer);
    sum += GetParam().expected(k);
    for (const char* table : {"a", "b"}) {
      const std::vector<float> values = read(layer, table, "parameters");
      const int64_t dim = table[0] == 'a' ? 3 : 2;
      for (size_t i = 0; i < values.size(); ++i) {
        const double expected = i / static_cast<size_t>(dim) == 1 ? -sum : 0.0;
        EXPECT_NEAR(values[i], expected, 1e-5) << table << " after step " << k << " [" << i << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, EmbeddingLearningRateScheduleTest,
    ::testing::Values(
        ScheduleCase{"constant", 0.25f, [](int64_t) { return 0.25; }},
        ScheduleCase{"exponential", ExponentialDecay{0.5f, 4, 0.5f, false},
                     [](int64_t j) { return 0.5 * std::pow(0.5, static_cast<double>(j) / 4.0); }},
        ScheduleCase{"exponential_staircase", ExponentialDecay{0.5f, 4, 0.5f, true},
                     [](int64_t j) { return 0.5 * std::pow(0.5, static_cast<double>(j / 4)); }},
        ScheduleCase{"piecewise", PiecewiseConstant{{3, 7}, {0.3f, 0.2f, 0.1f}},
                     [](int64_t j) { return j <= 3   ? 0.3
                                            : j <= 7 ? 0.2
                                                     : 0.1; }},
        ScheduleCase{
            "warmup", LinearWarmup{0.4f, 5, 0.1f},
            [](int64_t j) { return j >= 5 ? 0.4 : 0.1 + 0.3 * static_cast<double>(j) / 5.0; }},
        ScheduleCase{"tf_callback", LearningRateCallback([](int64_t step) {
                       return std::max(0.5f, 1.0f - 0.05f * static_cast<float>(step));
                     }),
                     [](int64_t j) { return std::max(0.5, 1.0 - 0.05 * static_cast<double>(j)); }}),
    [](const ::testing::TestParamInfo<ScheduleCase>& param_info) { return param_info.param.name; });

TEST(EmbeddingLearningRateCallback, CalledExactlyOncePerStepWithTheStep) {
  std::vector<int64_t> calls;
  Embedding layer = zero_tables(LearningRateCallback([&calls](int64_t step) {
    calls.push_back(step);
    return std::max(0.5f, 1.0f - 0.05f * static_cast<float>(step));
  }));
  for (int64_t k = 0; k < 15; ++k) {
    step_with_ones(layer);
    std::vector<int64_t> expected(static_cast<size_t>(k + 1));
    for (int64_t j = 0; j <= k; ++j) expected[static_cast<size_t>(j)] = j;
    ASSERT_EQ(calls, expected) << "after step " << k << " (two tables share the optimizer)";
  }
}

TEST(EmbeddingLearningRateCallback, SetStepMovesTheScheduleAndRejectsNegativeSteps) {
  std::vector<int64_t> calls;
  Embedding layer = zero_tables(LearningRateCallback([&calls](int64_t step) {
    calls.push_back(step);
    return 0.5f;
  }));
  EXPECT_THROW(layer.set_step(-1), InvalidArgument);
  EXPECT_EQ(layer.step(), 0);
  layer.set_step(40);
  step_with_ones(layer);
  EXPECT_EQ(layer.step(), 41);
  EXPECT_EQ(calls, (std::vector<int64_t>{40}));
}

TEST(EmbeddingLearningRateCallback, InvalidValueRejectsTheStepAndKeepsTheLookup) {
  std::vector<float> returns = {-1.0f, kNaN, kInf, 0.5f};
  size_t call = 0;
  Embedding layer = zero_tables(
      LearningRateCallback([&](int64_t) { return returns[std::min(call++, returns.size() - 1)]; }));
  LookupBatch batch;
  look_up(layer, row_one_inputs(), batch);
  const Snapshot before = snapshot_of(layer);
  const std::vector<std::vector<float>> ones = {std::vector<float>(3, 1.0f),
                                                std::vector<float>(2, 1.0f)};
  for (int attempt = 0; attempt < 3; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    error_of<InvalidArgument>([&] { train(layer, batch, ones); });
    EXPECT_TRUE(unchanged(before, layer));
    EXPECT_TRUE(batch.applicable());
  }
  train(layer, batch, ones);  // the batch is still applicable; lr 0.5
  EXPECT_FALSE(batch.applicable());
  EXPECT_EQ(layer.step(), 1);
  EXPECT_FLOAT_EQ(read(layer, "a", "parameters")[3], -0.5f);
}

}  // namespace
}  // namespace recemb
