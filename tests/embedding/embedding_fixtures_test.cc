// recemb::Embedding against TensorFlow's golden fixtures: the shared fixture of TF's
// tensorflow/python/tpu/tests/tpu_embedding_base_test.py (tables "video" and "user", features
// "watched", "favorited" and "friends") and the one-step checks of its
// tpu_embedding_v2_correctness_*_test.py, as sparse and as ragged input.
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

using reference::ReferenceEmbedding;
using test::apply_both;
using test::Bag;
using test::BatchPair;
using test::expect_floats_eq;
using test::expect_matches_reference;
using test::IdWidth;
using test::look_up;
using test::lookup_both;
using test::near_reference;
using test::OwnedInput;
using test::read;
using test::train;

// TF's "range(32) reshaped" constant initializer: value i of the row-major table is i.
InitializerCallback range_initializer() {
  return [](int64_t first_row, int64_t num_rows, int64_t dim, std::span<float> values) {
    for (int64_t i = 0; i < num_rows * dim; ++i) {
      values[static_cast<size_t>(i)] = static_cast<float>(first_row * dim + i);
    }
  };
}

const std::vector<std::vector<int64_t>> kWatched = {{0}, {0, 1}, {0, 1}, {1}};
const std::vector<std::vector<int64_t>> kFavorited = {{0, 1}, {1}, {0}, {0, 1}};
const std::vector<std::vector<int64_t>> kFriends = {{3}, {0, 1, 2}, {3}, {0, 1, 2}};

Embedding tf_fixture(std::optional<Optimizer> optimizer, std::vector<int64_t> lengths = {0, 0, 0}) {
  return Embedding({{.name = "video",
                     .vocabulary_size = 8,
                     .dim = 4,
                     .initializer = range_initializer(),
                     .combiner = Combiner::kSum},
                    {.name = "user",
                     .vocabulary_size = 16,
                     .dim = 2,
                     .initializer = range_initializer(),
                     .combiner = Combiner::kMean}},
                   {{.name = "watched", .table = "video", .max_sequence_length = lengths[0]},
                    {.name = "favorited", .table = "video", .max_sequence_length = lengths[1]},
                    {.name = "friends", .table = "user", .max_sequence_length = lengths[2]}},
                   {.optimizer = optimizer, .num_threads = 2});
}

// The first `batch` rows of a fixture feature as sparse (positions 0..n-1) or ragged ids.
OwnedInput fixture_input(const std::vector<std::vector<int64_t>>& rows, size_t batch, bool sparse,
                         float weight = 1.0f) {
  std::vector<Bag> bags;
  std::vector<std::vector<int64_t>> positions;
  int64_t longest = 0;
  for (size_t b = 0; b < batch; ++b) {
    bags.push_back({rows[b], std::vector<float>(rows[b].size(), weight)});
    positions.emplace_back();
    for (size_t j = 0; j < rows[b].size(); ++j) positions.back().push_back(static_cast<int64_t>(j));
    longest = std::max(longest, static_cast<int64_t>(rows[b].size()));
  }
  const bool weighted = weight != 1.0f;
  if (sparse) {
    return OwnedInput::sparse_from_bags(bags, {static_cast<int64_t>(batch)}, positions, longest,
                                        weighted, IdWidth::kInt32);
  }
  return OwnedInput::ragged(bags, weighted, IdWidth::kInt32, IdWidth::kInt32);
}

std::vector<OwnedInput> fixture_inputs(size_t batch, bool sparse, float weight = 1.0f) {
  std::vector<OwnedInput> inputs;
  inputs.push_back(fixture_input(kWatched, batch, sparse, weight));
  inputs.push_back(fixture_input(kFavorited, batch, sparse, weight));
  inputs.push_back(fixture_input(kFriends, batch, sparse, weight));
  return inputs;
}

class EmbeddingTfFixtureTest : public ::testing::TestWithParam<bool> {
};  // param: sparse (else ragged)

TEST_P(EmbeddingTfFixtureTest, ForwardMatchesTfGoldens) {
  Embedding layer = tf_fixture(Sgd{.learning_rate = 0.1f});
  const auto activations = look_up(layer, fixture_inputs(4, GetParam()));
  // TF's correctness tests: replica 0 = examples 0-1, replica 1 = examples 2-3 (watched/favorited
  // swapped).
  expect_floats_eq(activations[0], {0, 1, 2, 3, 4, 6, 8, 10, 4, 6, 8, 10, 4, 5, 6, 7}, "watched");
  expect_floats_eq(activations[1], {4, 6, 8, 10, 4, 5, 6, 7, 0, 1, 2, 3, 4, 6, 8, 10}, "favorited");
  expect_floats_eq(activations[2], {6, 7, 2, 3, 6, 7, 2, 3}, "friends");
}

TEST_P(EmbeddingTfFixtureTest, WeightsHalveSumAndLeaveMeanUnchanged) {
  // TF test_enqueue_with_weights: weights 0.5 halve the sum table and leave the mean table alone.
  Embedding layer = tf_fixture(Sgd{});
  const auto activations = look_up(layer, fixture_inputs(4, GetParam(), 0.5f));
  expect_floats_eq(activations[0], {0, 0.5f, 1, 1.5f, 2, 3, 4, 5, 2, 3, 4, 5, 2, 2.5f, 3, 3.5f},
                   "watched");
  expect_floats_eq(activations[2], {6, 7, 2, 3, 6, 7, 2, 3}, "friends");
}

TEST(EmbeddingTfFixture, DenseLookupIsAGather) {
  Embedding layer = tf_fixture(Sgd{});
  std::vector<OwnedInput> inputs;
  inputs.push_back(OwnedInput::dense({0, 0, 1, 0}, {4}, {}, IdWidth::kInt32));
  inputs.push_back(OwnedInput::dense({0, 1, 1, 0}, {4, 1}, {}, IdWidth::kInt64));
  inputs.push_back(OwnedInput::dense({3, 0, 1, 2}, {4}, {}, IdWidth::kInt64));
  const auto activations = look_up(layer, inputs);
  expect_floats_eq(activations[0], {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3}, "watched");
  expect_floats_eq(activations[1], {0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7, 0, 1, 2, 3}, "favorited");
  expect_floats_eq(activations[2], {6, 7, 0, 1, 2, 3, 4, 5}, "friends");
}

// One training step of TF's correctness test: loss = sum_f mean_b |act_b|^2 over the batch of 4,
// so d(loss)/d(act) = 2 * act / 4. The expected tables use the test's numpy formulas.
struct FixtureGradients {
  std::vector<std::vector<float>> per_feature;
  std::vector<double> video;  // [8 * 4] summed gradient per row
  std::vector<double> user;   // [16 * 2]
};

FixtureGradients fixture_gradients(const std::vector<std::vector<float>>& activations) {
  FixtureGradients result;
  for (const auto& activation : activations) {
    std::vector<float> gradient;
    for (float value : activation) gradient.push_back(2.0f * value / 4.0f);
    result.per_feature.push_back(gradient);
  }
  result.video.assign(32, 0.0);
  result.user.assign(32, 0.0);
  const std::vector<std::vector<int64_t>>* video_features[] = {&kWatched, &kFavorited};
  for (int f = 0; f < 2; ++f) {
    for (size_t b = 0; b < 4; ++b) {
      for (int64_t id : (*video_features[f])[b]) {  // sum combiner: gain 1 per occurrence
        for (size_t d = 0; d < 4; ++d) {
          result.video[static_cast<size_t>(id) * 4 + d] += result.per_feature[f][b * 4 + d];
        }
      }
    }
  }
  for (size_t b = 0; b < 4; ++b) {
    for (int64_t id : kFriends[b]) {  // mean combiner: divided by the bag size
      for (size_t d = 0; d < 2; ++d) {
        result.user[static_cast<size_t>(id) * 2 + d] +=
            result.per_feature[2][b * 2 + d] / static_cast<double>(kFriends[b].size());
      }
    }
  }
  return result;
}

// Expected variables after one step from the range initialization, for rows with g != 0; rows
// with g == 0 (never looked up) keep their initial values and slots.
using OneStepFormula = std::function<std::map<std::string, double>(double w, double g)>;

void check_one_step(const Optimizer& optimizer, const OneStepFormula& formula,
                    const std::map<std::string, double>& untouched_slots, bool sparse) {
  Embedding layer = tf_fixture(optimizer);
  LookupBatch batch;
  const auto activations = look_up(layer, fixture_inputs(4, sparse), batch);
  const FixtureGradients gradients = fixture_gradients(activations);
  train(layer, batch, gradients.per_feature);
  for (const auto& [table, g] :
       {std::pair<std::string, std::vector<double>>{"video", gradients.video},
        std::pair<std::string, std::vector<double>>{"user", gradients.user}}) {
    for (const std::string& name : layer.variable_names(table)) {
      std::vector<double> expected;
      for (size_t i = 0; i < 32; ++i) {
        const auto w = static_cast<double>(i);
        expected.push_back(g[i] == 0.0 ? (name == "parameters" ? w : untouched_slots.at(name))
                                       : formula(w, g[i]).at(name));
      }
      EXPECT_TRUE(near_reference(read(layer, table, name), expected, 1e-6)) << table << "/" << name;
    }
  }
  // The reference model reproduces the same goldens.
  Embedding twin = tf_fixture(optimizer);
  ReferenceEmbedding reference = ReferenceEmbedding::like(twin);
  ReferenceEmbedding::Batch reference_batch;
  const auto reference_activations =
      reference.lookup(test::views_of(fixture_inputs(4, sparse)), reference_batch);
  const std::vector<std::span<const float>> spans(gradients.per_feature.begin(),
                                                  gradients.per_feature.end());
  reference.apply_gradients(reference_batch, spans);
  for (const std::string& name : reference.variable_names("video")) {
    EXPECT_TRUE(near_reference(read(layer, "video", name), reference.variable("video", name), 1e-6))
        << "reference video/" << name;
  }
}

TEST_P(EmbeddingTfFixtureTest, SgdOneStep) {
  check_one_step(
      Sgd{.learning_rate = 0.1f},
      [](double w, double g) {
        return std::map<std::string, double>{{"parameters", w - 0.1 * g}};
      },
      {}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, AdagradOneStep) {
  check_one_step(
      Adagrad{.learning_rate = 0.1f},
      [](double w, double g) {
        const double a = 0.1 + g * g;
        return std::map<std::string, double>{{"parameters", w - 0.1 * g / std::sqrt(a)},
                                             {"accumulators", a}};
      },
      {{"accumulators", 0.1}}, GetParam());
}

// Adam's defaults as the float32 values the library receives (1 - 0.999f differs from 0.001 by
// 1.3e-5 relative, more than the tolerance).
constexpr double kBeta1 = static_cast<double>(0.9f);
constexpr double kBeta2 = static_cast<double>(0.999f);
constexpr double kEpsilon = static_cast<double>(1e-7f);

TEST_P(EmbeddingTfFixtureTest, AdamOneStep) {
  check_one_step(
      Adam{.learning_rate = 0.1f},
      [](double w, double g) {
        const double m = (1.0 - kBeta1) * g;
        const double v = (1.0 - kBeta2) * g * g;
        return std::map<std::string, double>{
            {"parameters", w - 0.1 * m / std::sqrt(v + kEpsilon * kEpsilon)},
            {"momenta", m},
            {"velocities", v}};
      },
      {{"momenta", 0.0}, {"velocities", 0.0}}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, AdamWithoutSumInsideSqrtOneStep) {
  check_one_step(
      Adam{.learning_rate = 0.1f, .sum_inside_sqrt = false},
      [](double w, double g) {
        const double m = (1.0 - kBeta1) * g;
        const double v = (1.0 - kBeta2) * g * g;
        return std::map<std::string, double>{
            {"parameters", w - 0.1 * m / (std::sqrt(v) + kEpsilon)},
            {"momenta", m},
            {"velocities", v}};
      },
      {{"momenta", 0.0}, {"velocities", 0.0}}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, AdagradMomentumOneStep) {
  check_one_step(
      AdagradMomentum{.learning_rate = 0.1f,
                      .momentum = 0.9f,
                      .use_nesterov = true,
                      .exponent = 3.0f,
                      .beta2 = 0.9f,
                      .epsilon = 0.1f},
      [](double w, double g) {
        const double a = 0.1 * g * g;
        const double s = std::pow(a + 0.1, -1.0 / 3.0) * g;
        const double m = s;
        return std::map<std::string, double>{
            {"parameters", w - 0.1 * (0.9 * m + s)}, {"accumulators", a}, {"momenta", m}};
      },
      {{"accumulators", 0.0}, {"momenta", 0.0}}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, FtrlOneStep) {
  check_one_step(
      Ftrl{.learning_rate = 0.1f},
      [](double w, double g) {
        const double n = 0.1 + g * g;
        const double z = g - (std::sqrt(n) - std::sqrt(0.1)) / 0.1 * w;
        return std::map<std::string, double>{
            {"parameters", -z / (std::sqrt(n) / 0.1)}, {"accumulators", n}, {"linears", z}};
      },
      {{"accumulators", 0.1}, {"linears", 0.0}}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, SequenceFeatureTrainsOnlyRealPositions) {
  // TF test_sequence_embeddings: max_sequence_length 2, 2, 3; SGD 0.1; batch 2; ones gradient.
  Embedding layer = tf_fixture(Sgd{.learning_rate = 0.1f}, {2, 2, 3});
  const std::vector<OwnedInput> inputs = fixture_inputs(2, GetParam());
  LookupBatch batch;
  const auto before = look_up(layer, inputs, batch);
  const std::vector<float> row0 = {0, 1, 2, 3}, row1 = {4, 5, 6, 7}, zero4(4, 0.0f);
  auto concat = [](std::initializer_list<std::vector<float>> parts) {
    std::vector<float> all;
    for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
    return all;
  };
  EXPECT_EQ(layer.activation_shape(0, inputs[0].view()), (std::vector<int64_t>{2, 2, 4}));
  EXPECT_EQ(layer.activation_shape(2, inputs[2].view()), (std::vector<int64_t>{2, 3, 2}));
  expect_floats_eq(before[0], concat({row0, zero4, row0, row1}), "watched");
  expect_floats_eq(before[1], concat({row0, row1, row1, zero4}), "favorited");
  expect_floats_eq(before[2], {6, 7, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5}, "friends");

  std::vector<std::vector<float>> ones;
  for (const auto& activation : before) ones.emplace_back(activation.size(), 1.0f);
  train(layer, batch, ones);
  const auto after = look_up(layer, inputs);
  // Video rows 0 and 1 occur 3 times each (sum of watched and favorited): -0.3; user rows once.
  const std::vector<std::vector<float>> masks = {{1, 0, 1, 1}, {1, 1, 1, 0}, {1, 0, 0, 1, 1, 1}};
  const float deltas[] = {-0.3f, -0.3f, -0.1f};
  for (size_t f = 0; f < 3; ++f) {
    const size_t dim = f < 2 ? 4 : 2;
    for (size_t i = 0; i < after[f].size(); ++i) {
      EXPECT_NEAR(after[f][i] - before[f][i], masks[f][i / dim] * deltas[f], 1e-5)
          << "feature " << f << " [" << i << "]";
    }
  }
}

TEST_P(EmbeddingTfFixtureTest, EmptyGradientSpanIsZeroGradient) {
  // TF test_pass_none_to_apply_gradients: None (here: empty) for watched and favorited.
  Embedding layer = tf_fixture(Sgd{.learning_rate = 0.1f});
  const std::vector<OwnedInput> inputs = fixture_inputs(2, GetParam());
  LookupBatch batch;
  const auto before = look_up(layer, inputs, batch);
  train(layer, batch, {{}, {}, std::vector<float>(4, 1.0f)});
  EXPECT_EQ(layer.step(), 1);
  const auto after = look_up(layer, inputs);
  expect_floats_eq(after[0], before[0], "watched");
  expect_floats_eq(after[1], before[1], "favorited");
  const float third = 0.1f / 3.0f;
  expect_floats_eq(after[2], {6 - 0.1f, 7 - 0.1f, 2 - third, 3 - third}, "friends");
}

TEST(EmbeddingTfFixture, EmptyGradientSpanStillTouchesRowsForAdam) {
  // docs/semantics.md §4: a None gradient sends zeros, which does update Adam's state of the
  // looked-up rows (m, v decay; with zero state nothing moves, so seed the slots first).
  Embedding layer = tf_fixture(Adam{.learning_rate = 0.1f});
  std::vector<float> momenta(32, 0.5f);
  layer.write_variable("video", "momenta", momenta);
  layer.write_variable("video", "velocities", momenta);
  ReferenceEmbedding reference = ReferenceEmbedding::like(layer);
  reference.set_variable("video", "momenta", momenta);
  reference.set_variable("video", "velocities", momenta);
  BatchPair batch;
  lookup_both(layer, reference, fixture_inputs(4, true), batch);
  apply_both(layer, reference, batch, {{}, {}, {}});
  expect_matches_reference(layer, reference);
  // Row 0 was touched (momenta decayed), row 5 was not.
  const std::vector<float> after = read(layer, "video", "momenta");
  EXPECT_FLOAT_EQ(after[0], 0.45f);
  EXPECT_EQ(after[5 * 4], 0.5f);
}

INSTANTIATE_TEST_SUITE_P(SparseAndRagged, EmbeddingTfFixtureTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param_info) {
                           return param_info.param ? std::string("sparse") : std::string("ragged");
                         });

}  // namespace
}  // namespace recemb
