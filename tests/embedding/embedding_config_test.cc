// recemb::Embedding's construction: config errors (InvalidArgument naming the item and the field)
// and the table initializers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/recemb.h"

#include "reference/reference_embedding.h"
#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/random_batches.h"
#include "testing/reference_steps.h"

namespace recemb {
namespace {

using test::bitwise_equal;
using test::error_of;
using test::read;
using ::testing::HasSubstr;

// Config errors at construction: InvalidArgument naming the item and the field.

struct ConfigCase {
  std::string name;
  std::function<void(std::vector<TableConfig>&, std::vector<FeatureConfig>&, EmbeddingOptions&)>
      mutate;
  std::vector<std::string> fragments;
};

TEST(EmbeddingConfig, InvalidConfigsNameTheItemAndField) {
  const std::vector<ConfigCase> cases = {
      {"dim 0", [](auto& t, auto&, auto&) { t[1].dim = 0; }, {"audio", "dim"}},
      {"vocabulary 0",
       [](auto& t, auto&, auto&) { t[0].vocabulary_size = 0; },
       {"video", "vocabulary_size"}},
      {"negative vocabulary",
       [](auto& t, auto&, auto&) { t[0].vocabulary_size = -5; },
       {"video", "vocabulary_size"}},
      {"duplicate table", [](auto& t, auto&, auto&) { t[1].name = "video"; }, {"video"}},
      {"empty table name", [](auto& t, auto&, auto&) { t[1].name = ""; }, {"name"}},
      {"duplicate feature", [](auto&, auto& f, auto&) { f[1].name = "watched"; }, {"watched"}},
      {"empty feature name", [](auto&, auto& f, auto&) { f[0].name = ""; }, {"name"}},
      {"unknown table", [](auto&, auto& f, auto&) { f[1].table = "music"; }, {"liked", "music"}},
      {"negative sequence length",
       [](auto&, auto& f, auto&) { f[0].max_sequence_length = -1; },
       {"watched", "max_sequence_length"}},
      {"quantization buckets",
       [](auto& t, auto&, auto&) {
         t[0].quantization_config = QuantizationConfig{1, 0.0f, 1.0f};
       },
       {"video", "num_buckets"}},
      {"adagrad accumulator",
       [](auto& t, auto&, auto&) { t[1].optimizer = Adagrad{.initial_accumulator_value = 0.0f}; },
       {"audio", "initial_accumulator_value"}},
      {"adam beta_1",
       [](auto& t, auto&, auto&) { t[0].optimizer = Adam{.beta_1 = 1.0f}; },
       {"video", "beta_1"}},
      {"adam beta_2",
       [](auto& t, auto&, auto&) { t[0].optimizer = Adam{.beta_2 = -0.1f}; },
       {"video", "beta_2"}},
      {"adam epsilon",
       [](auto& t, auto&, auto&) { t[0].optimizer = Adam{.epsilon = 0.0f}; },
       {"video", "epsilon"}},
      {"non-lazy adam without accumulation",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Adam{.lazy_adam = false, .common = {.use_gradient_accumulation = false}};
       },
       {"video", "lazy_adam"}},
      {"momentum epsilon",
       [](auto& t, auto&, auto&) { t[1].optimizer = AdagradMomentum{.epsilon = 0.0f}; },
       {"audio", "epsilon"}},
      {"momentum exponent",
       [](auto& t, auto&, auto&) { t[1].optimizer = AdagradMomentum{.exponent = 0.0f}; },
       {"audio", "exponent"}},
      {"ftrl accumulator",
       [](auto& t, auto&, auto&) { t[0].optimizer = Ftrl{.initial_accumulator_value = 0.0f}; },
       {"video", "initial_accumulator_value"}},
      {"ftrl power",
       [](auto& t, auto&, auto&) { t[0].optimizer = Ftrl{.learning_rate_power = 0.5f}; },
       {"video", "learning_rate_power"}},
      {"ftrl l1",
       [](auto& t, auto&, auto&) { t[0].optimizer = Ftrl{.l1_regularization_strength = -1.0f}; },
       {"video", "l1_regularization_strength"}},
      {"rowwise epsilon",
       [](auto& t, auto&, auto&) { t[0].optimizer = RowwiseAdagrad{.epsilon = 0.0f}; },
       {"video", "epsilon"}},
      {"negative learning rate",
       [](auto& t, auto&, auto&) { t[0].optimizer = Sgd{.learning_rate = -0.1f}; },
       {"video", "learning_rate"}},
      {"empty callback",
       [](auto& t, auto&, auto&) { t[0].optimizer = Sgd{.learning_rate = LearningRateCallback()}; },
       {"video", "learning_rate"}},
      {"decay steps",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Sgd{.learning_rate = ExponentialDecay{.decay_steps = 0}};
       },
       {"video", "decay_steps"}},
      {"piecewise sizes",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Sgd{.learning_rate = PiecewiseConstant{{1, 2}, {0.1f, 0.2f}}};
       },
       {"video"}},
      {"weight clip order",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Sgd{.common = {.clip_weight_min = 1.0f, .clip_weight_max = -1.0f}};
       },
       {"video", "clip_weight"}},
      {"gradient clip without accumulation",
       [](auto& t, auto&, auto&) {
         t[0].optimizer =
             Adagrad{.common = {.use_gradient_accumulation = false, .clip_gradient_max = 1.0f}};
       },
       {"video", "clip"}},
      {"negative weight decay",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Sgd{.common = {.weight_decay_factor = -1.0f}};
       },
       {"video", "weight_decay_factor"}},
      {"bad global optimizer",
       [](auto&, auto&, auto& o) { o.optimizer = Adagrad{.initial_accumulator_value = -1.0f}; },
       {"initial_accumulator_value"}},
  };
  for (const ConfigCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<TableConfig> tables = {{.name = "video", .vocabulary_size = 8, .dim = 4},
                                       {.name = "audio", .vocabulary_size = 5, .dim = 2}};
    std::vector<FeatureConfig> features = {{.name = "watched", .table = "video"},
                                           {.name = "liked", .table = "audio"}};
    EmbeddingOptions options{.optimizer = Sgd{}};
    c.mutate(tables, features, options);
    const std::string message =
        error_of<InvalidArgument>([&] { Embedding layer(tables, features, options); });
    for (const std::string& fragment : c.fragments) EXPECT_THAT(message, HasSubstr(fragment));
  }
}

TEST(EmbeddingConfig, InitializerCallbackErrorPropagates) {
  EXPECT_THROW(Embedding({{.name = "t",
                           .vocabulary_size = 4,
                           .dim = 2,
                           .initializer =
                               InitializerCallback([](int64_t, int64_t, int64_t, std::span<float>) {
                                 throw std::runtime_error("disk on fire");
                               })}},
                         {{.name = "f", .table = "t"}}),
               std::runtime_error);
}

// ------------------------------------------------------------------------------------------------
// Initializers.

TEST(EmbeddingInitializers, ConstantRowIdCallbackAndTruncatedNormal) {
  std::vector<std::pair<int64_t, int64_t>> blocks;
  auto make = [&](uint64_t seed, int threads) {
    return Embedding(
        {{.name = "constant", .vocabulary_size = 5, .dim = 3, .initializer = Constant{0.75f}},
         {.name = "row_id", .vocabulary_size = 300, .dim = 2, .initializer = RowId{2.5f}},
         {.name = "callback",
          .vocabulary_size = 1000,
          .dim = 3,
          .initializer = InitializerCallback(
              [&blocks](int64_t first_row, int64_t num_rows, int64_t dim, std::span<float> values) {
                blocks.emplace_back(first_row, num_rows);
                EXPECT_EQ(values.size(), static_cast<size_t>(num_rows * dim));
                for (size_t i = 0; i < values.size(); ++i) {
                  values[i] = static_cast<float>(first_row * dim + static_cast<int64_t>(i));
                }
              })},
         {.name = "normal", .vocabulary_size = 500, .dim = 16},
         {.name = "shifted",
          .vocabulary_size = 200,
          .dim = 4,
          .initializer = TruncatedNormal{.mean = 1.0f, .stddev = 0.5f}}},
        {{.name = "f", .table = "constant"}}, {.num_threads = threads, .seed = seed});
  };
  const Embedding layer = make(11, 3);
  for (float value : read(layer, "constant", "parameters")) EXPECT_EQ(value, 0.75f);
  const std::vector<float> row_id = read(layer, "row_id", "parameters");
  for (size_t i = 0; i < row_id.size(); ++i) EXPECT_EQ(row_id[i], 2.5f + static_cast<float>(i / 2));
  // The callback's blocks cover every row exactly once.
  std::sort(blocks.begin(), blocks.end());
  int64_t next_row = 0;
  for (const auto& [first_row, num_rows] : blocks) {
    EXPECT_EQ(first_row, next_row);
    next_row = first_row + num_rows;
  }
  EXPECT_EQ(next_row, 1000);
  const std::vector<float> callback = read(layer, "callback", "parameters");
  for (size_t i = 0; i < callback.size(); ++i) {
    ASSERT_EQ(callback[i], static_cast<float>(i)) << "each block lands at its first_row";
  }
  // Truncated normal: within 2 stddev (default 1/sqrt(dim) = 0.25), mean near 0, not constant.
  const std::vector<float> normal = read(layer, "normal", "parameters");
  double sum = 0.0;
  for (float value : normal) {
    EXPECT_LE(std::abs(value), 0.5f + 1e-6f);
    sum += value;
  }
  EXPECT_NEAR(sum / static_cast<double>(normal.size()), 0.0, 0.02);
  EXPECT_NE(normal[0], normal[1]);
  for (float value : read(layer, "shifted", "parameters")) {
    EXPECT_GE(value, 0.0f - 1e-6f);
    EXPECT_LE(value, 2.0f + 1e-6f);
  }
  // Same seed: same values for any thread count; another seed: other values.
  blocks.clear();
  EXPECT_TRUE(bitwise_equal(read(make(11, 1), "normal", "parameters"), normal));
  EXPECT_FALSE(bitwise_equal(read(make(12, 3), "normal", "parameters"), normal));
}

}  // namespace
}  // namespace recemb
